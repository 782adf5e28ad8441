//! DOCX: a ZIP package whose `word/document.xml` holds the body as
//! WordprocessingML. Text lives in `w:t` runs; `w:p` ends a paragraph,
//! `w:tab` and `w:br` are a tab and a line break; tables become one line
//! per row with cells separated by ` | `.

use std::io::{Cursor, Read};

use quick_xml::NsReader;
use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::Event;
use quick_xml::name::{Namespace, ResolveResult};
use zip::result::ZipError;

use crate::format::{ExtractError, KnowledgeFormat, brief};

const DOCUMENT_PART: &str = "word/document.xml";
/// Transitional (what Word writes) and Strict OOXML.
const WORDPROCESSING_NAMESPACES: &[&str] = &[
    "http://schemas.openxmlformats.org/wordprocessingml/2006/main",
    "http://purl.oclc.org/ooxml/wordprocessingml/main",
];
const MARKUP_COMPATIBILITY_NAMESPACE: &str =
    "http://schemas.openxmlformats.org/markup-compatibility/2006";

/// The body text of a DOCX; `limit` caps the bytes `document.xml` may
/// decompress to (a small upload can hide a huge part).
pub(super) fn extract_docx(bytes: &[u8], limit: usize) -> Result<String, ExtractError> {
    let xml = read_document_part(bytes, limit)?;
    document_text(&xml)
}

fn corrupt(reason: impl Into<String>) -> ExtractError {
    ExtractError::Corrupt {
        format: KnowledgeFormat::Docx,
        reason: reason.into(),
    }
}

fn too_large(limit: usize) -> ExtractError {
    ExtractError::TooLarge {
        what: "the DOCX's text (uncompressed)",
        limit_bytes: limit,
    }
}

fn read_document_part(bytes: &[u8], limit: usize) -> Result<Vec<u8>, ExtractError> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|err| corrupt(format!("it is not a valid ZIP package ({})", brief(&err))))?;
    let mut entry = match archive.by_name(DOCUMENT_PART) {
        Ok(entry) => entry,
        Err(ZipError::FileNotFound) => {
            return Err(corrupt(format!(
                "it has no {DOCUMENT_PART}, so it is not a Word document"
            )));
        }
        Err(ZipError::UnsupportedArchive(ZipError::PASSWORD_REQUIRED)) => {
            return Err(ExtractError::Encrypted(KnowledgeFormat::Docx));
        }
        Err(err) => return Err(corrupt(format!("{DOCUMENT_PART}: {}", brief(&err)))),
    };
    // The declared size is checked first, the bytes actually inflated after:
    // the header can lie.
    let declared = usize::try_from(entry.size()).unwrap_or(usize::MAX);
    if declared > limit {
        return Err(too_large(limit));
    }
    let mut xml = Vec::with_capacity(declared);
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    entry
        .by_ref()
        .take(cap)
        .read_to_end(&mut xml)
        .map_err(|err| corrupt(format!("{DOCUMENT_PART} is damaged ({})", brief(&err))))?;
    if xml.len() > limit {
        return Err(too_large(limit));
    }
    Ok(xml)
}

fn document_text(xml: &[u8]) -> Result<String, ExtractError> {
    let xml =
        std::str::from_utf8(xml).map_err(|_| corrupt(format!("{DOCUMENT_PART} is not UTF-8")))?;
    let xml = xml.strip_prefix('\u{feff}').unwrap_or(xml);
    let malformed = |err: &dyn std::fmt::Display| {
        corrupt(format!("{DOCUMENT_PART} is malformed ({})", brief(err)))
    };

    let mut reader = NsReader::from_str(xml);
    let mut text = BodyText::default();
    let mut in_text = false;
    let mut run_depth = 0usize;
    // Depth inside `mc:Fallback`: it repeats the `mc:Choice` content
    // (text boxes, shapes) for older readers.
    let mut fallback_depth = 0usize;
    loop {
        let (namespace, event) = reader.read_resolved_event().map_err(|e| malformed(&e))?;
        let word = matches!(namespace, ResolveResult::Bound(Namespace(ns)) if WORDPROCESSING_NAMESPACES.contains(&ns));
        let compat = matches!(namespace, ResolveResult::Bound(Namespace(ns)) if ns == MARKUP_COMPATIBILITY_NAMESPACE);
        match event {
            Event::Start(element) => {
                let name = element.local_name();
                if fallback_depth > 0 || (compat && name.as_ref() == "Fallback") {
                    fallback_depth += 1;
                } else if word {
                    match name.as_ref() {
                        "t" => in_text = true,
                        "r" => run_depth += 1,
                        "tbl" => text.start_table(),
                        _ => {}
                    }
                }
            }
            Event::Empty(element) if fallback_depth == 0 && word => {
                match element.local_name().as_ref() {
                    // `w:tab` also defines tab stops in paragraph properties.
                    "tab" if run_depth > 0 => text.push("\t"),
                    "br" | "cr" => text.push("\n"),
                    "noBreakHyphen" => text.push("-"),
                    "p" => text.end_paragraph(),
                    _ => {}
                }
            }
            Event::End(element) => {
                if fallback_depth > 0 {
                    fallback_depth -= 1;
                } else if word {
                    match element.local_name().as_ref() {
                        "t" => in_text = false,
                        "r" => run_depth = run_depth.saturating_sub(1),
                        "p" => text.end_paragraph(),
                        "tc" => text.end_cell(),
                        "tr" => text.end_row(),
                        "tbl" => text.end_table(),
                        _ => {}
                    }
                }
            }
            Event::Text(content) if in_text && fallback_depth == 0 => {
                text.push(&content.xml10_content());
            }
            Event::CData(content) if in_text && fallback_depth == 0 => {
                text.push(&content.into_inner());
            }
            Event::GeneralRef(reference) if in_text && fallback_depth == 0 => {
                match reference.resolve_char_ref().map_err(|e| malformed(&e))? {
                    Some(c) => text.push(c.encode_utf8(&mut [0; 4])),
                    None => match resolve_predefined_entity(&reference) {
                        Some(resolved) => text.push(resolved),
                        None => {
                            return Err(malformed(&format!("unknown entity &{};", &*reference)));
                        }
                    },
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(text.finish())
}

/// The body's text, with tables collected cell by cell until their row ends.
#[derive(Default)]
struct BodyText {
    body: String,
    /// Open tables, innermost last (a cell can hold a table).
    tables: Vec<Table>,
}

#[derive(Default)]
struct Table {
    rows: String,
    cells: Vec<String>,
    cell: String,
}

impl BodyText {
    fn target(&mut self) -> &mut String {
        match self.tables.last_mut() {
            Some(table) => &mut table.cell,
            None => &mut self.body,
        }
    }

    fn push(&mut self, text: &str) {
        self.target().push_str(text);
    }

    fn end_paragraph(&mut self) {
        match self.tables.last_mut() {
            // Paragraphs inside a cell are joined when the cell ends.
            Some(table) => table.cell.push('\n'),
            None => self.body.push_str("\n\n"),
        }
    }

    fn start_table(&mut self) {
        self.tables.push(Table::default());
    }

    fn end_cell(&mut self) {
        if let Some(table) = self.tables.last_mut() {
            let cell = std::mem::take(&mut table.cell);
            table
                .cells
                .push(cell.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }

    fn end_row(&mut self) {
        if let Some(table) = self.tables.last_mut() {
            if table.cells.iter().any(|cell| !cell.is_empty()) {
                table.rows.push_str(&table.cells.join(" | "));
                table.rows.push('\n');
            }
            table.cells.clear();
        }
    }

    fn end_table(&mut self) {
        if let Some(table) = self.tables.pop() {
            let target = self.target();
            target.push_str("\n\n");
            target.push_str(&table.rows);
            target.push_str("\n\n");
        }
    }

    fn finish(mut self) -> String {
        // A truncated document may leave tables open; keep what they hold.
        while !self.tables.is_empty() {
            self.end_row();
            self.end_table();
        }
        self.body
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn package(document_xml: &str) -> Vec<u8> {
        let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        writer
            .start_file(DOCUMENT_PART, options)
            .expect("starts entry");
        writer
            .write_all(document_xml.as_bytes())
            .expect("writes entry");
        writer.finish().expect("finishes zip").into_inner()
    }

    fn body(inner: &str) -> String {
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{}" xmlns:mc="{MARKUP_COMPATIBILITY_NAMESPACE}"><w:body>{inner}</w:body></w:document>"#,
            WORDPROCESSING_NAMESPACES[0]
        )
    }

    #[test]
    fn knowledge_docx_tables_render_one_row_per_line() {
        let xml = body(
            "<w:p><w:r><w:t>Before</w:t></w:r></w:p>\
             <w:tbl>\
               <w:tr><w:tc><w:p><w:r><w:t>Name</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>Age</w:t></w:r></w:p></w:tc></w:tr>\
               <w:tr><w:tc><w:p><w:r><w:t>Ada</w:t></w:r></w:p><w:p><w:r><w:t>Lovelace</w:t></w:r></w:p></w:tc><w:tc><w:p/></w:tc></w:tr>\
             </w:tbl>\
             <w:p><w:r><w:t>After</w:t></w:r></w:p>",
        );
        let text = extract_docx(&package(&xml), 1 << 20).expect("extracts");
        assert_eq!(
            crate::extract::normalize_extracted(&text),
            "Before\n\nName | Age\nAda Lovelace |\n\nAfter"
        );
    }

    #[test]
    fn knowledge_docx_alternate_content_fallback_is_not_repeated() {
        let xml = body(
            "<w:p><w:r><mc:AlternateContent>\
               <mc:Choice Requires=\"wps\"><w:t>Boxed</w:t></mc:Choice>\
               <mc:Fallback><w:pict><w:t>Boxed</w:t></w:pict></mc:Fallback>\
             </mc:AlternateContent></w:r></w:p>",
        );
        let text = extract_docx(&package(&xml), 1 << 20).expect("extracts");
        assert_eq!(text.trim(), "Boxed");
    }

    #[test]
    fn knowledge_docx_bomb_is_too_large() {
        let paragraph = "<w:p><w:r><w:t>aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa</w:t></w:r></w:p>";
        let xml = body(&paragraph.repeat(200));
        let bytes = package(&xml);
        assert!(bytes.len() < xml.len() / 10, "the package compresses well");
        let err = extract_docx(&bytes, 4096).unwrap_err();
        assert!(matches!(err, ExtractError::TooLarge { .. }), "{err:?}");
        assert_eq!(
            extract_docx(&bytes, xml.len()).map(|t| !t.is_empty()).ok(),
            Some(true)
        );
    }

    #[test]
    fn knowledge_docx_malformed_xml_is_corrupt() {
        let err =
            extract_docx(&package(&body("<w:p><w:r><w:t>x</w:r></w:p>")), 1 << 20).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the DOCX could not be read: word/document.xml is malformed"),
            "{err}"
        );
    }
}
