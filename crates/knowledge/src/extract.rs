//! Text out of an upload's bytes, per format, normalised the same way for all.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use unigen_core::domain::MAX_KNOWLEDGE_FILE_BYTES as MAX_FILE_BYTES;

use crate::docx;

mod pdf;
use crate::format::{ExtractError, KnowledgeFormat, MAX_TEXT_BYTES, brief};

const MALFORMED_PDF: &str = "its structure is malformed or uses features that are not supported";

/// The text of a knowledge file, normalised: line endings unified, control
/// characters dropped, trailing spaces and runs of blank lines removed.
///
/// Blocking and CPU-bound (PDFs especially): async callers use
/// [`extract_text_async`]. Never panics: pdf-extract's panics on malformed
/// PDFs are caught and reported as [`ExtractError::Corrupt`].
pub fn extract_text(format: KnowledgeFormat, bytes: &[u8]) -> Result<String, ExtractError> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(ExtractError::TooLarge {
            what: "the file",
            limit_bytes: MAX_FILE_BYTES,
        });
    }
    if bytes.is_empty() {
        return Err(ExtractError::Empty(format));
    }
    let raw = match format {
        KnowledgeFormat::Pdf => extract_pdf(bytes)?,
        // Markdown stays as written: headings and list markers carry meaning.
        KnowledgeFormat::Markdown | KnowledgeFormat::Text => decode_text(format, bytes)?,
        KnowledgeFormat::Csv => render_csv(&decode_text(format, bytes)?)?,
        KnowledgeFormat::Docx => docx::extract_docx(bytes, MAX_TEXT_BYTES)?,
    };
    let text = normalize_extracted(&raw);
    if text.is_empty() {
        return Err(ExtractError::Empty(format));
    }
    // A PDF's compressed streams can expand far beyond the upload; the cost of
    // chunking and embedding follows the text, not the file.
    if text.len() > MAX_TEXT_BYTES {
        return Err(ExtractError::TooLarge {
            what: "the extracted text",
            limit_bytes: MAX_TEXT_BYTES,
        });
    }
    Ok(text)
}

/// [`extract_text`] on the blocking pool, with a time limit.
///
/// On timeout the caller gets [`ExtractError::TimedOut`] at once, but the
/// blocking thread cannot be interrupted: it finishes (and its result is
/// dropped) in the background, so callers should bound how many extractions
/// run at the same time.
pub async fn extract_text_async(
    format: KnowledgeFormat,
    bytes: Vec<u8>,
    limit: Duration,
) -> Result<String, ExtractError> {
    run_limited(format, limit, move || extract_text(format, &bytes)).await
}

/// [`extract_text_async`] that keeps `slot` (e.g. a semaphore permit) until
/// the blocking extraction really ends: after a timeout the thread runs on,
/// and a caller bounding concurrent extractions must keep counting it.
pub async fn extract_text_async_holding<S: Send + 'static>(
    format: KnowledgeFormat,
    bytes: Vec<u8>,
    limit: Duration,
    slot: S,
) -> Result<String, ExtractError> {
    run_limited(format, limit, move || {
        let _slot = slot;
        extract_text(format, &bytes)
    })
    .await
}

async fn run_limited<F>(
    format: KnowledgeFormat,
    limit: Duration,
    job: F,
) -> Result<String, ExtractError>
where
    F: FnOnce() -> Result<String, ExtractError> + Send + 'static,
{
    // A second net under extract_text's own: a panic in any parser becomes an error.
    let task = tokio::task::spawn_blocking(move || catch_unwind(AssertUnwindSafe(job)));
    match tokio::time::timeout(limit, task).await {
        Err(_elapsed) => Err(ExtractError::TimedOut { limit }),
        Ok(Ok(Ok(result))) => result,
        Ok(Ok(Err(payload))) => Err(panicked(format, payload.as_ref())),
        Ok(Err(join_error)) if join_error.is_panic() => Err(ExtractError::Corrupt {
            format,
            reason: "it could not be processed".to_owned(),
        }),
        // The runtime is shutting down.
        Ok(Err(_cancelled)) => Err(ExtractError::Interrupted),
    }
}

fn panicked(format: KnowledgeFormat, payload: &(dyn Any + Send)) -> ExtractError {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-string panic payload");
    tracing::warn!(format = %format, panic = message, "text extraction panicked");
    let reason = match format {
        KnowledgeFormat::Pdf => MALFORMED_PDF,
        KnowledgeFormat::Markdown
        | KnowledgeFormat::Text
        | KnowledgeFormat::Csv
        | KnowledgeFormat::Docx => "it could not be processed",
    };
    ExtractError::Corrupt {
        format,
        reason: reason.to_owned(),
    }
}

/// Every stream is decompressed through a bounded reader
/// ([`MAX_PDF_DECODED_BYTES`](crate::format::MAX_PDF_DECODED_BYTES)): see `pdf`.
fn extract_pdf(bytes: &[u8]) -> Result<String, ExtractError> {
    // pdf-extract panics (asserts, unwraps, index errors) on some malformed PDFs.
    match catch_unwind(|| pdf::extract(bytes)) {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(err @ (ExtractError::TooLarge { .. } | ExtractError::Encrypted(_)))) => Err(err),
        Ok(Err(_)) | Err(_) if is_encrypted_pdf(bytes) => {
            Err(ExtractError::Encrypted(KnowledgeFormat::Pdf))
        }
        Ok(Err(err)) => Err(err),
        Err(payload) => Err(panicked(KnowledgeFormat::Pdf, payload.as_ref())),
    }
}

/// An encrypted PDF names its security handler in the trailer, which is never
/// compressed, so the key shows in the raw bytes. Only consulted once
/// extraction has failed (an empty user password decrypts transparently).
fn is_encrypted_pdf(bytes: &[u8]) -> bool {
    bytes.windows(8).any(|w| w == b"/Encrypt")
}

/// UTF-8 (a byte order mark is dropped), or UTF-16 when a byte order mark
/// says so (Windows editors save "Unicode" text that way).
fn decode_text(format: KnowledgeFormat, bytes: &[u8]) -> Result<String, ExtractError> {
    if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
        return decode_utf8(format, rest, 3);
    }
    if let Some(rest) = bytes.strip_prefix(b"\xFF\xFE") {
        return decode_utf16(format, rest, u16::from_le_bytes);
    }
    if let Some(rest) = bytes.strip_prefix(b"\xFE\xFF") {
        return decode_utf16(format, rest, u16::from_be_bytes);
    }
    decode_utf8(format, bytes, 0)
}

fn decode_utf8(
    format: KnowledgeFormat,
    bytes: &[u8],
    offset: usize,
) -> Result<String, ExtractError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.to_owned()),
        Err(err) => Err(ExtractError::InvalidEncoding {
            format,
            position: offset + err.valid_up_to(),
        }),
    }
}

fn decode_utf16(
    format: KnowledgeFormat,
    bytes: &[u8],
    unit: fn([u8; 2]) -> u16,
) -> Result<String, ExtractError> {
    const BOM_LEN: usize = 2;
    let pairs = bytes.chunks_exact(2);
    if !pairs.remainder().is_empty() {
        return Err(ExtractError::InvalidEncoding {
            format,
            position: BOM_LEN + bytes.len() - 1,
        });
    }
    let mut text = String::with_capacity(bytes.len() / 2);
    let units = pairs.map(|pair| unit([pair[0], pair[1]]));
    let mut position = BOM_LEN;
    for decoded in char::decode_utf16(units) {
        match decoded {
            Ok(c) => {
                position += 2 * c.len_utf16();
                text.push(c);
            }
            Err(_) => return Err(ExtractError::InvalidEncoding { format, position }),
        }
    }
    Ok(text)
}

/// Each data row as one line of `header: value` pairs (empty cells left
/// out), rows separated by blank lines so chunks keep rows whole and every
/// chunk names the columns it holds. The first row is the header.
fn render_csv(text: &str) -> Result<String, ExtractError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(guess_delimiter(text))
        .from_reader(text.as_bytes());
    let mut records = reader.records();
    let headers: Vec<String> = match records.next() {
        None => return Err(ExtractError::Empty(KnowledgeFormat::Csv)),
        Some(header) => header.map_err(csv_error)?.iter().map(clean_cell).collect(),
    };
    let mut out = String::new();
    for record in records {
        let record = record.map_err(csv_error)?;
        let mut line = String::new();
        for (column, value) in record.iter().enumerate() {
            let value = clean_cell(value);
            if value.is_empty() {
                continue;
            }
            if !line.is_empty() {
                line.push_str("; ");
            }
            match headers.get(column).filter(|name| !name.is_empty()) {
                Some(name) => line.push_str(name),
                None => line.push_str(&format!("column {}", column + 1)),
            }
            line.push_str(": ");
            line.push_str(&value);
        }
        if line.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&line);
        // Headers repeat on every row, so the text can outgrow the file.
        if out.len() > MAX_TEXT_BYTES {
            return Err(ExtractError::TooLarge {
                what: "the CSV's text",
                limit_bytes: MAX_TEXT_BYTES,
            });
        }
    }
    if out.is_empty() {
        return Err(ExtractError::Empty(KnowledgeFormat::Csv));
    }
    Ok(out)
}

/// Spreadsheets in many locales export `;`-separated "CSV"; tabs and pipes
/// occur too. The separator used most in the header line (outside quotes) wins,
/// the comma on a tie.
fn guess_delimiter(text: &str) -> u8 {
    let header = text.lines().next().unwrap_or("");
    let mut counts = [(b',', 0usize), (b';', 0), (b'\t', 0), (b'|', 0)];
    let mut quoted = false;
    for byte in header.bytes() {
        if byte == b'"' {
            quoted = !quoted;
        } else if !quoted && let Some(entry) = counts.iter_mut().find(|(d, _)| *d == byte) {
            entry.1 += 1;
        }
    }
    let mut best = counts[0];
    for candidate in &counts[1..] {
        if candidate.1 > best.1 {
            best = *candidate;
        }
    }
    best.0
}

fn clean_cell(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn csv_error(err: csv::Error) -> ExtractError {
    let reason = match err.position() {
        Some(position) => format!("line {}: {}", position.line(), brief(&err)),
        None => brief(&err),
    };
    ExtractError::Corrupt {
        format: KnowledgeFormat::Csv,
        reason,
    }
}

/// Unified line endings (page breaks become paragraph breaks), control
/// characters other than tab dropped, trailing whitespace cut, runs of blank
/// lines collapsed to one, the whole trimmed.
pub fn normalize_extracted(raw: &str) -> String {
    let mut cleaned = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                chars.next_if_eq(&'\n');
                cleaned.push('\n');
            }
            '\n' | '\u{b}' | '\u{85}' | '\u{2028}' => cleaned.push('\n'),
            '\u{c}' | '\u{2029}' => cleaned.push_str("\n\n"),
            '\t' => cleaned.push('\t'),
            // A byte order mark inside the text is invisible noise.
            '\u{feff}' => {}
            c if c.is_control() => {}
            c => cleaned.push(c),
        }
    }
    let mut out = String::with_capacity(cleaned.len());
    let mut blank_before = false;
    for line in cleaned.split('\n') {
        let line = line.trim_end();
        if line.is_empty() {
            blank_before = !out.is_empty();
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank_before { "\n\n" } else { "\n" });
        }
        blank_before = false;
        out.push_str(if out.is_empty() {
            line.trim_start()
        } else {
            line
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::io::{Cursor, Write};

    use super::*;

    /// A one-page PDF whose page content is `content`, with a Helvetica
    /// font as /F1 and a cross-reference table at the right offsets.
    fn minimal_pdf(content: &str) -> Vec<u8> {
        pdf_with_trailer(content, None, "")
    }

    /// `extra_object` becomes object 6; `trailer_extra` goes into the trailer.
    fn pdf_with_trailer(content: &str, extra_object: Option<&str>, trailer_extra: &str) -> Vec<u8> {
        let mut objects = vec![
            "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
            "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
             /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>"
                .to_owned(),
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_owned(),
            format!(
                "<< /Length {} >>\nstream\n{content}\nendstream",
                content.len()
            ),
        ];
        objects.extend(extra_object.map(str::to_owned));
        let mut pdf = b"%PDF-1.4\n".to_vec();
        let mut offsets = Vec::new();
        for (number, body) in objects.iter().enumerate() {
            offsets.push(pdf.len());
            pdf.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", number + 1).as_bytes());
        }
        let xref_at = pdf.len();
        let mut xref = format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1);
        for offset in offsets {
            // Each entry is exactly 20 bytes, end of line included.
            xref.push_str(&format!("{offset:010} 00000 n \n"));
        }
        xref.push_str(&format!(
            "trailer\n<< /Size {} /Root 1 0 R {trailer_extra} >>\nstartxref\n{xref_at}\n%%EOF\n",
            objects.len() + 1
        ));
        pdf.extend_from_slice(xref.as_bytes());
        pdf
    }

    fn docx(document_xml: &str) -> Vec<u8> {
        let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        writer
            .start_file("[Content_Types].xml", options)
            .expect("starts entry");
        writer
            .write_all(br#"<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>"#)
            .expect("writes entry");
        writer
            .start_file("word/document.xml", options)
            .expect("starts entry");
        writer
            .write_all(document_xml.as_bytes())
            .expect("writes entry");
        writer.finish().expect("finishes zip").into_inner()
    }

    const W_NS: &str = "http://schemas.openxmlformats.org/wordprocessingml/2006/main";

    #[test]
    fn knowledge_pdf_text_is_extracted() {
        let pdf = minimal_pdf("BT /F1 12 Tf 72 720 Td (Hello knowledge) Tj ET");
        assert_eq!(
            KnowledgeFormat::detect("hello.pdf", &pdf).expect("detected"),
            KnowledgeFormat::Pdf
        );
        let text = extract_text(KnowledgeFormat::Pdf, &pdf).expect("extracts");
        assert_eq!(text, "Hello knowledge");
    }

    #[test]
    fn knowledge_pdf_without_text_is_empty_and_says_why() {
        let pdf = minimal_pdf("0 0 m 100 100 l S");
        let err = extract_text(KnowledgeFormat::Pdf, &pdf).unwrap_err();
        assert!(
            matches!(err, ExtractError::Empty(KnowledgeFormat::Pdf)),
            "{err:?}"
        );
        assert!(err.to_string().contains("scanned images"), "{err}");
    }

    #[test]
    fn knowledge_corrupt_pdf_is_an_error_not_a_panic() {
        let mut garbage = b"%PDF-1.4\n".to_vec();
        garbage.extend((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
        let err = extract_text(KnowledgeFormat::Pdf, &garbage).unwrap_err();
        assert!(
            matches!(
                err,
                ExtractError::Corrupt {
                    format: KnowledgeFormat::Pdf,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().starts_with("the PDF could not be read: "),
            "{err}"
        );

        let pdf = minimal_pdf("BT /F1 12 Tf 72 720 Td (Hello knowledge) Tj ET");
        let truncated = &pdf[..pdf.len() / 2];
        // lopdf may recover a truncated file or refuse it; either way no panic.
        let _ = extract_text(KnowledgeFormat::Pdf, truncated);
    }

    #[test]
    fn knowledge_password_protected_pdf_says_so() {
        // A standard security handler whose user password is not empty.
        let hash = format!("<{}>", "ab".repeat(32));
        let pdf = pdf_with_trailer(
            "BT /F1 12 Tf 72 720 Td (Secret) Tj ET",
            Some(&format!(
                "<< /Filter /Standard /V 1 /R 2 /O {hash} /U {hash} /P -4 >>"
            )),
            "/Encrypt 6 0 R /ID [<0123456789abcdef0123456789abcdef> <0123456789abcdef0123456789abcdef>]",
        );
        let err = extract_text(KnowledgeFormat::Pdf, &pdf).unwrap_err();
        assert!(
            matches!(err, ExtractError::Encrypted(KnowledgeFormat::Pdf)),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "the PDF is password-protected: remove the password and upload it again"
        );
    }

    #[test]
    fn knowledge_pdf_that_makes_pdf_extract_panic_is_corrupt() {
        // `Tj` with a number operand hits a `panic!` inside pdf-extract.
        let pdf = minimal_pdf("BT /F1 12 Tf 72 720 Td 42 Tj ET");
        let err = extract_text(KnowledgeFormat::Pdf, &pdf).unwrap_err();
        assert!(
            matches!(
                err,
                ExtractError::Corrupt {
                    format: KnowledgeFormat::Pdf,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn knowledge_docx_paragraphs_tabs_and_breaks_are_extracted() {
        let xml = format!(
            r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document xmlns:w="{W_NS}">
  <w:body>
    <w:p><w:pPr><w:tabs><w:tab w:val="left" w:pos="720"/></w:tabs></w:pPr>
      <w:r><w:t>First paragraph</w:t></w:r><w:r><w:t xml:space="preserve"> &amp; more</w:t></w:r></w:p>
    <w:p><w:r><w:t>Second</w:t><w:tab/><w:t>tabbed</w:t><w:br/><w:t>next line &#8364;</w:t></w:r>
      <w:r><w:delText>deleted</w:delText><w:instrText>PAGE</w:instrText></w:r></w:p>
  </w:body>
</w:document>"#
        );
        let bytes = docx(&xml);
        assert_eq!(
            KnowledgeFormat::detect("letter.docx", &bytes).expect("detected"),
            KnowledgeFormat::Docx
        );
        let text = extract_text(KnowledgeFormat::Docx, &bytes).expect("extracts");
        assert_eq!(
            text,
            "First paragraph & more\n\nSecond\ttabbed\nnext line €"
        );
    }

    #[test]
    fn knowledge_docx_that_is_not_a_word_document_is_corrupt() {
        let err = extract_text(KnowledgeFormat::Docx, b"PK\x03\x04 not really a zip").unwrap_err();
        assert!(
            err.to_string().starts_with("the DOCX could not be read: "),
            "{err}"
        );

        let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
        writer
            .start_file("xl/workbook.xml", zip::write::SimpleFileOptions::default())
            .expect("starts entry");
        writer.write_all(b"<workbook/>").expect("writes entry");
        let xlsx = writer.finish().expect("finishes").into_inner();
        let err = extract_text(KnowledgeFormat::Docx, &xlsx).unwrap_err();
        assert!(
            matches!(
                err,
                ExtractError::Corrupt {
                    format: KnowledgeFormat::Docx,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("word/document.xml"), "{err}");
    }

    #[test]
    fn knowledge_txt_keeps_text_and_strips_the_bom() {
        let bytes = b"\xEF\xBB\xBFline one  \r\nline two\r\n\r\n\r\n\r\n  indented\n\n";
        let text = extract_text(KnowledgeFormat::Text, bytes).expect("extracts");
        assert_eq!(text, "line one\nline two\n\n  indented");

        let utf16: Vec<u8> = b"\xFF\xFE"
            .iter()
            .copied()
            .chain("héllo".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        assert_eq!(
            extract_text(KnowledgeFormat::Text, &utf16).expect("extracts"),
            "héllo"
        );
    }

    #[test]
    fn knowledge_markdown_is_kept_as_written() {
        let md = "# Title\n\n- item *one*\n- item two\n\n```rust\n    let x = 1;\n```\n";
        let text = extract_text(KnowledgeFormat::Markdown, md.as_bytes()).expect("extracts");
        assert_eq!(text, md.trim_end());
    }

    #[test]
    fn knowledge_invalid_utf8_text_is_refused_with_its_position() {
        let err = extract_text(KnowledgeFormat::Text, b"caf\xE9 au lait").unwrap_err();
        assert!(
            matches!(
                err,
                ExtractError::InvalidEncoding {
                    format: KnowledgeFormat::Text,
                    position: 3
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("save it as UTF-8"), "{err}");
        let err = extract_text(KnowledgeFormat::Csv, b"a,b\n\xFF,1").unwrap_err();
        assert!(
            matches!(err, ExtractError::InvalidEncoding { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn knowledge_whitespace_only_text_is_empty() {
        let err = extract_text(KnowledgeFormat::Text, b" \r\n\t\n ").unwrap_err();
        assert!(matches!(err, ExtractError::Empty(KnowledgeFormat::Text)));
        assert_eq!(err.to_string(), "the file contains no text");
    }

    #[test]
    fn knowledge_csv_rows_render_as_header_value_pairs() {
        let csv = "name,city,\"notes\"\nAda,London,\"first\nprogrammer\"\n,,\nBob,,x,extra\n";
        let text = extract_text(KnowledgeFormat::Csv, csv.as_bytes()).expect("extracts");
        assert_eq!(
            text,
            "name: Ada; city: London; notes: first programmer\n\nname: Bob; notes: x; column 4: extra"
        );

        let semicolons = "name;price\nTea;1,50\n";
        let text = extract_text(KnowledgeFormat::Csv, semicolons.as_bytes()).expect("extracts");
        assert_eq!(text, "name: Tea; price: 1,50");

        let err = extract_text(KnowledgeFormat::Csv, b"only,a,header\n").unwrap_err();
        assert!(
            matches!(err, ExtractError::Empty(KnowledgeFormat::Csv)),
            "{err:?}"
        );
    }

    #[test]
    fn knowledge_oversized_upload_is_too_large() {
        let bytes = vec![b'a'; MAX_FILE_BYTES + 1];
        let err = extract_text(KnowledgeFormat::Text, &bytes).unwrap_err();
        assert!(matches!(err, ExtractError::TooLarge { .. }), "{err:?}");
        assert_eq!(err.to_string(), "the file is too large: the limit is 50 MB");
    }

    #[test]
    fn knowledge_normalisation_unifies_breaks_and_drops_controls() {
        let raw = "\n  a\u{0}b\r\rc\u{c}d\u{feff}\t \n\n\n\ne";
        assert_eq!(normalize_extracted(raw), "ab\n\nc\n\nd\n\ne");
    }

    #[tokio::test]
    async fn knowledge_async_extraction_returns_the_text() {
        let bytes = docx(&format!(
            r#"<w:document xmlns:w="{W_NS}"><w:body><w:p><w:r><w:t>One</w:t></w:r></w:p><w:p><w:r><w:t>Two</w:t></w:r></w:p></w:body></w:document>"#
        ));
        let text = extract_text_async(KnowledgeFormat::Docx, bytes, Duration::from_secs(30))
            .await
            .expect("extracts");
        assert_eq!(text, "One\n\nTwo");
    }

    #[tokio::test]
    async fn knowledge_async_extraction_times_out() {
        let err = run_limited(KnowledgeFormat::Pdf, Duration::from_millis(20), || {
            std::thread::sleep(Duration::from_millis(500));
            Ok(String::new())
        })
        .await
        .unwrap_err();
        assert!(matches!(err, ExtractError::TimedOut { .. }), "{err:?}");
        assert!(err.to_string().contains("took longer than 0.02 s"), "{err}");
    }

    #[tokio::test]
    async fn knowledge_async_extraction_turns_a_panic_into_an_error() {
        let err = run_limited(KnowledgeFormat::Docx, Duration::from_secs(5), || {
            panic!("parser bug")
        })
        .await
        .unwrap_err();
        assert!(
            matches!(
                err,
                ExtractError::Corrupt {
                    format: KnowledgeFormat::Docx,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(!err.is_retryable());
    }
}
