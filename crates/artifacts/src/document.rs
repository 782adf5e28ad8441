//! `create_document`: PDF, Markdown or CSV files.
//!
//! `content` is Markdown-ish text (paragraphs, `#` headings, `-` bullets,
//! numbered items, code fences, `|` tables); `columns` + `rows` are a table,
//! the whole document for CSV and appended after the content otherwise.

use std::borrow::Cow;

use crate::common::{ArtifactError, Rendered, guard, single_line};
use crate::pdf;
pub use crate::spec::{DocumentFormat, DocumentSpec, parse_document_spec};

/// Writes the document. Blocking CPU work: call it from `spawn_blocking`.
pub fn render_document(spec: &DocumentSpec) -> Result<Rendered, ArtifactError> {
    spec.validate()?;
    let bytes = match spec.format {
        DocumentFormat::Pdf => guard("pdf", || pdf::render(spec))?,
        DocumentFormat::Markdown => render_markdown(spec).into_bytes(),
        DocumentFormat::Csv => render_csv(spec)?,
    };
    Ok(Rendered {
        bytes,
        extension: spec.format.extension(),
        mime: spec.format.mime(),
        width: 0,
        height: 0,
    })
}

fn render_markdown(spec: &DocumentSpec) -> String {
    let mut out = format!("# {}\n", single_line(&spec.title));
    let content = spec
        .content
        .as_deref()
        .unwrap_or_default()
        .replace("\r\n", "\n");
    let content = content.trim();
    if !content.is_empty() {
        out.push('\n');
        out.push_str(content);
        out.push('\n');
    }
    if let Some((columns, rows)) = spec.table() {
        let line = |cells: Vec<String>| format!("| {} |\n", cells.join(" | "));
        out.push('\n');
        out.push_str(&line(columns.iter().map(|c| markdown_cell(c)).collect()));
        out.push_str(&line(vec!["---".to_string(); columns.len()]));
        for row in rows {
            out.push_str(&line(row.iter().map(|c| markdown_cell(&c.text)).collect()));
        }
    }
    out
}

/// A table cell that cannot break the table: pipes and backslashes escaped,
/// line breaks as `<br>` (GitHub-flavoured tables are single-line).
fn markdown_cell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.trim().chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '|' => out.push_str("\\|"),
            '\n' => out.push_str("<br>"),
            '\r' => {}
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// RFC 4180: CRLF line ends, fields quoted only when needed. Text cells
/// that a spreadsheet would run as a formula are neutralised.
fn render_csv(spec: &DocumentSpec) -> Result<Vec<u8>, ArtifactError> {
    let csv_error = |e: csv::Error| ArtifactError::Render(format!("csv: {e}"));
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .from_writer(Vec::new());
    if let Some((columns, rows)) = spec.table() {
        let header = columns.iter().map(|c| inert_csv_text(c));
        write_csv_record(&mut writer, header).map_err(csv_error)?;
        for row in rows {
            let cells = row.iter().map(|c| {
                if c.numeric {
                    Cow::Borrowed(c.text.as_str())
                } else {
                    inert_csv_text(&c.text)
                }
            });
            write_csv_record(&mut writer, cells).map_err(csv_error)?;
        }
    }
    writer
        .into_inner()
        .map_err(|e| ArtifactError::Render(format!("csv: {}", e.error())))
}

fn write_csv_record<'a>(
    writer: &mut csv::Writer<Vec<u8>>,
    cells: impl Iterator<Item = Cow<'a, str>>,
) -> Result<(), csv::Error> {
    for cell in cells {
        writer.write_field(cell.as_bytes())?;
    }
    // Ends the record the fields above started.
    writer.write_record(None::<&[u8]>)
}

/// A text cell that spreadsheets will not evaluate (CSV formula injection):
/// one starting with `=`, `+`, `-`, `@`, a tab or a carriage return gets a
/// leading `'`, which Excel, LibreOffice and Google Sheets show as text.
/// A plain number such as `-12.5` is left alone: it is no formula.
fn inert_csv_text(text: &str) -> Cow<'_, str> {
    let risky = text.starts_with(['=', '+', '-', '@', '\t', '\r']);
    if risky && !text.parse::<f64>().is_ok_and(f64::is_finite) {
        Cow::Owned(format!("'{text}"))
    } else {
        Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use serde_json::json;

    fn invalid(args: Value) -> String {
        match parse_document_spec(&args) {
            Err(ArtifactError::Invalid(message)) => message,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    fn render(args: Value) -> Rendered {
        render_document(&parse_document_spec(&args).unwrap()).unwrap()
    }

    const INTRO: &str = "The quarterly review covers revenue, costs and hiring.";

    fn report(format: &str, paragraphs: usize) -> Value {
        let mut content =
            format!("{INTRO}\n\n## Highlights\n\n- Revenue grew by 12%\n- Two new offices\n\n");
        for i in 0..paragraphs {
            content.push_str(&format!(
                "Paragraph {i} explains the numbers in more detail, with enough words to wrap \
                 across several lines of an A4 page so that page breaks are exercised.\n\n"
            ));
        }
        json!({
            "format": format,
            "title": "Quarterly Review 2025",
            "content": content,
            "columns": ["Region", "Revenue", "Note"],
            "rows": [["North", 120.5, "best | ever"], ["South", 80, null]]
        })
    }

    /// krilla compresses its object streams, so pages are counted by the
    /// text extractor rather than by searching for `/Type /Page`.
    fn page_count(pdf: &[u8]) -> usize {
        pdf_extract::extract_text_from_mem_by_pages(pdf)
            .unwrap()
            .len()
    }

    #[test]
    fn artifacts_pdf_is_a_real_pdf_with_extractable_text() {
        let rendered = render(report("pdf", 1));
        assert_eq!(
            (rendered.extension, rendered.mime),
            ("pdf", "application/pdf")
        );
        assert_eq!((rendered.width, rendered.height), (0, 0));
        let pdf = &rendered.bytes;
        assert!(pdf.starts_with(b"%PDF-"));
        assert!(pdf.trim_ascii_end().ends_with(b"%%EOF"));
        let text = pdf_extract::extract_text_from_mem(pdf).unwrap();
        let words = single_line(&text);
        assert!(words.contains("Quarterly Review 2025"), "{words}");
        assert!(words.contains(INTRO), "{words}");
        assert!(words.contains("Revenue grew by 12%"), "{words}");
        assert!(words.contains("best | ever"), "{words}");
        assert_eq!(page_count(pdf), 1);
    }

    #[test]
    fn artifacts_long_pdf_content_breaks_onto_several_pages() {
        let rendered = render(report("pdf", 60));
        let pages = page_count(&rendered.bytes);
        assert!(pages > 2, "{pages} pages");
        let by_page = pdf_extract::extract_text_from_mem_by_pages(&rendered.bytes).unwrap();
        assert_eq!(by_page.len(), pages);
        let last = single_line(by_page.last().unwrap());
        assert!(last.contains("best | ever"), "{last}");
        assert!(last.contains(&format!("{pages} / {pages}")), "{last}");
    }

    #[test]
    fn artifacts_pdf_handles_every_block_kind_and_a_large_table() {
        let content = "# Heading one\n### Heading three\n1. first\n2) second\n  - nested\n\
                       continued lazily\n> a quote\n---\n```\nfn main() {}\n```\n\
                       | a | b |\n|---|---|\n| 1 | 2 |\n\
                       **bold** and `code` and [a link](https://example.com) \u{7}\t end\n\n\
                       averyveryverylongwordwithoutanyspaces"
            .to_string()
            + &"x".repeat(500);
        let rows: Vec<Value> = (0..400)
            .map(|i| {
                json!([
                    i,
                    format!("row {i} {}", "long text ".repeat(i % 50)),
                    i % 2 == 0,
                    null
                ])
            })
            .collect();
        let rendered = render(json!({
            "format": "pdf", "title": "Everything ✓ Ελληνικά Кириллица 日本",
            "content": content, "columns": ["n", "text", "even", "empty"], "rows": rows
        }));
        let text = single_line(&pdf_extract::extract_text_from_mem(&rendered.bytes).unwrap());
        assert!(text.contains("Heading one"), "{text}");
        assert!(
            text.contains("bold and code and a link (https://example.com)"),
            "{text}"
        );
        assert!(text.contains("row 399"), "{text}");
        assert!(page_count(&rendered.bytes) > 5);
    }

    #[test]
    fn artifacts_markdown_has_title_content_and_an_escaped_table() {
        let rendered = render(report("markdown", 0));
        assert_eq!(
            (rendered.extension, rendered.mime),
            ("md", "text/markdown; charset=utf-8")
        );
        let md = String::from_utf8(rendered.bytes).unwrap();
        assert!(
            md.starts_with("# Quarterly Review 2025\n\nThe quarterly review"),
            "{md}"
        );
        assert!(md.contains("- Revenue grew by 12%"), "{md}");
        assert!(
            md.ends_with(
                "\n| Region | Revenue | Note |\n| --- | --- | --- |\n\
             | North | 120.5 | best \\| ever |\n| South | 80 |  |\n"
            ),
            "{md}"
        );
        assert_eq!(markdown_cell("a\\|b\r\nc"), "a\\\\\\|b<br>c");
    }

    #[test]
    fn artifacts_csv_round_trips_quotes_commas_and_newlines() {
        let rendered = render(json!({
            "format": "csv", "title": "People",
            "columns": ["name", "quote, with comma", "n"],
            "rows": [
                ["Ann \"The Hammer\"", "hello, world", 1.5],
                {"name": "Bob", "n": 2, "quote, with comma": "line one\nline two"},
                [null, true, -3]
            ]
        }));
        assert_eq!(
            (rendered.extension, rendered.mime),
            ("csv", "text/csv; charset=utf-8")
        );
        let text = String::from_utf8(rendered.bytes.clone()).unwrap();
        assert!(
            text.starts_with("name,\"quote, with comma\",n\r\n"),
            "{text}"
        );
        let mut reader = csv::Reader::from_reader(rendered.bytes.as_slice());
        assert_eq!(
            reader.headers().unwrap(),
            vec!["name", "quote, with comma", "n"]
        );
        let records: Vec<Vec<String>> = reader
            .records()
            .map(|r| r.unwrap().iter().map(str::to_string).collect())
            .collect();
        assert_eq!(
            records,
            vec![
                vec!["Ann \"The Hammer\"", "hello, world", "1.5"],
                vec!["Bob", "line one\nline two", "2"],
                vec!["", "true", "-3"],
            ]
        );
    }

    #[test]
    fn artifacts_csv_cells_that_would_run_as_formulas_are_neutralised() {
        let rendered = render(json!({
            "format": "csv", "title": "Injected",
            "columns": ["=HEADER()", "plain"],
            "rows": [
                ["=HYPERLINK(\"http://evil.example\",\"x\")", "+1+2"],
                ["-2+3", "@SUM(A1:A2)"],
                ["\tcmd", "\r=1"],
                ["-12.5", -7],
                ["a=b", "email@example.com"]
            ]
        }));
        let mut reader = csv::Reader::from_reader(rendered.bytes.as_slice());
        assert_eq!(reader.headers().unwrap(), vec!["'=HEADER()", "plain"]);
        let records: Vec<Vec<String>> = reader
            .records()
            .map(|r| r.unwrap().iter().map(str::to_string).collect())
            .collect();
        assert_eq!(
            records,
            vec![
                vec!["'=HYPERLINK(\"http://evil.example\",\"x\")", "'+1+2"],
                vec!["'-2+3", "'@SUM(A1:A2)"],
                vec!["'\tcmd", "'\r=1"],
                vec!["-12.5", "-7"],
                vec!["a=b", "email@example.com"],
            ]
        );
    }

    #[test]
    fn artifacts_bad_document_arguments_name_the_field() {
        let cases = [
            (json!({"title": "t", "content": "c"}), "format is required"),
            (
                json!({"format": "docx", "title": "t", "content": "c"}),
                "format: unknown variant `docx`",
            ),
            (
                json!({"format": "pdf", "content": "c"}),
                "title is required",
            ),
            (
                json!({"format": "pdf", "title": " \n", "content": "c"}),
                "title must not be empty",
            ),
            (
                json!({"format": "pdf", "title": "t".repeat(201), "content": "c"}),
                "title is 201 characters long",
            ),
            (
                json!({"format": "pdf", "title": "t", "content": "c".repeat(100_001)}),
                "content is 100001 characters long",
            ),
            (
                json!({"format": "pdf", "title": "t"}),
                "content is required",
            ),
            (
                json!({"format": "csv", "title": "t", "rows": [[1]]}),
                "rows needs columns",
            ),
            (
                json!({"format": "csv", "title": "t"}),
                "columns is required for a csv",
            ),
            (
                json!({"format": "csv", "title": "t", "columns": ["a"], "content": "x"}),
                "content: a csv document",
            ),
            (
                json!({"format": "csv", "title": "t", "columns": ["a", "b"], "rows": [[1, 2], [3]]}),
                "rows[1] has 1 cells for 2 columns",
            ),
            (
                json!({"format": "csv", "title": "t", "columns": ["a"], "rows": [[[1]]]}),
                "rows[0][0] must be a string, number, boolean or null, got an array",
            ),
            (
                json!({"format": "csv", "title": "t", "columns": ["a"], "rows": [{"b": 1}]}),
                "rows[0] has the key \"b\", which is not one of columns",
            ),
            (
                json!({"format": "csv", "title": "t", "columns": ["a"], "rows": [7]}),
                "rows[0] must be an array of cells",
            ),
            (
                json!({"format": "csv", "title": "t", "columns": [], "rows": []}),
                "columns must name at least one column",
            ),
            (
                json!({"format": "csv", "title": "t", "columns": vec!["a"; 51]}),
                "at most 50",
            ),
            (
                json!({"format": "csv", "title": "t", "columns": ["a"], "rows": vec![[1]; 10_001]}),
                "at most 10000",
            ),
            (
                json!({"format": "csv", "title": "t", "columns": ["a"], "rows": [["x".repeat(5001)]]}),
                "rows[0][0] is 5001",
            ),
            (
                json!({"format": "csv", "title": "t", "columns": [{}]}),
                "columns[0] must be a string",
            ),
            (
                json!([1]),
                "document arguments must be an object, got an array",
            ),
        ];
        for (args, expected) in cases {
            let message = invalid(args);
            assert!(message.contains(expected), "{message:?} lacks {expected:?}");
        }
    }

    #[test]
    fn artifacts_document_parse_matches_the_serde_derive() {
        let args = json!({"format": "md", "title": "T", "content": "Hello", "columns": ["a"], "rows": [[1]]});
        let parsed = parse_document_spec(&args).unwrap();
        let derived: DocumentSpec = serde_json::from_value(args).unwrap();
        assert_eq!(parsed, derived);
        assert_eq!(parsed.format, DocumentFormat::Markdown);
    }
}
