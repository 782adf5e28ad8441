//! Which of the accepted formats an upload is: the file name's extension
//! says what the user meant, the leading bytes confirm it.

use std::time::Duration;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use unigen_core::domain::ParseEnumError;

/// A knowledge file format the service accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KnowledgeFormat {
    Pdf,
    Markdown,
    Text,
    Csv,
    Docx,
}

/// How much of a text file is looked at for binary content when detecting.
const SNIFF_BYTES: usize = 8 * 1024;
/// PDF readers accept the header anywhere in the first kilobyte.
const PDF_HEADER_WINDOW: usize = 1024;

impl KnowledgeFormat {
    pub const ALL: &'static [KnowledgeFormat] = &[
        KnowledgeFormat::Pdf,
        KnowledgeFormat::Markdown,
        KnowledgeFormat::Text,
        KnowledgeFormat::Csv,
        KnowledgeFormat::Docx,
    ];

    /// The format of an upload, from its file name's extension, confirmed by
    /// the content: a file whose bytes contradict the extension (a `.pdf`
    /// that is not a PDF, a `.txt` that is binary) is refused, and so is an
    /// empty file.
    pub fn detect(file_name: &str, bytes: &[u8]) -> Result<Self, ExtractError> {
        let Some(extension) = extension_of(file_name) else {
            return Err(ExtractError::Unsupported { extension: None });
        };
        let Some(format) = Self::from_extension(&extension) else {
            return Err(ExtractError::Unsupported {
                extension: Some(extension),
            });
        };
        if bytes.is_empty() {
            return Err(ExtractError::Empty(format));
        }
        let sniffed = Sniffed::of(bytes);
        let matches = match format {
            KnowledgeFormat::Pdf => sniffed == Some(Sniffed::Pdf),
            KnowledgeFormat::Docx => sniffed == Some(Sniffed::Zip),
            KnowledgeFormat::Markdown | KnowledgeFormat::Text | KnowledgeFormat::Csv => {
                sniffed.is_none()
            }
        };
        if matches {
            Ok(format)
        } else {
            Err(ExtractError::ContentMismatch {
                extension,
                found: sniffed.map(Sniffed::description),
            })
        }
    }

    /// The spelling stored and sent on the wire.
    pub fn as_str(&self) -> &'static str {
        match self {
            KnowledgeFormat::Pdf => "pdf",
            KnowledgeFormat::Markdown => "markdown",
            KnowledgeFormat::Text => "text",
            KnowledgeFormat::Csv => "csv",
            KnowledgeFormat::Docx => "docx",
        }
    }

    pub fn mime(&self) -> &'static str {
        match self {
            KnowledgeFormat::Pdf => "application/pdf",
            KnowledgeFormat::Markdown => "text/markdown",
            KnowledgeFormat::Text => "text/plain",
            KnowledgeFormat::Csv => "text/csv",
            KnowledgeFormat::Docx => {
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
            }
        }
    }

    /// How messages to users name a file of this format ("the PDF could not be read").
    pub fn label(&self) -> &'static str {
        match self {
            KnowledgeFormat::Pdf => "PDF",
            KnowledgeFormat::Markdown => "Markdown file",
            KnowledgeFormat::Text => "text file",
            KnowledgeFormat::Csv => "CSV file",
            KnowledgeFormat::Docx => "DOCX",
        }
    }

    fn from_extension(extension: &str) -> Option<Self> {
        match extension {
            "pdf" => Some(KnowledgeFormat::Pdf),
            "md" | "markdown" => Some(KnowledgeFormat::Markdown),
            "txt" | "text" => Some(KnowledgeFormat::Text),
            "csv" => Some(KnowledgeFormat::Csv),
            "docx" => Some(KnowledgeFormat::Docx),
            _ => None,
        }
    }
}

impl fmt::Display for KnowledgeFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KnowledgeFormat {
    type Err = ParseEnumError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|format| format.as_str() == s)
            .ok_or_else(|| ParseEnumError {
                value: s.to_owned(),
                expected: Self::ALL
                    .iter()
                    .map(|format| format.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

/// The lower-cased extension of the last path segment, if it has one that
/// can be shown back to the user (short, ASCII alphanumeric).
fn extension_of(file_name: &str) -> Option<String> {
    let base = file_name.rsplit(['/', '\\']).next().unwrap_or(file_name);
    let (_, extension) = base.rsplit_once('.')?;
    let printable = !extension.is_empty()
        && extension.len() <= 16
        && extension.chars().all(|c| c.is_ascii_alphanumeric());
    printable.then(|| extension.to_ascii_lowercase())
}

/// A kind of binary content recognised by its leading bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sniffed {
    Pdf,
    Zip,
    /// OLE compound file: legacy `.doc`/`.xls`, or a password-protected OOXML file.
    Ole,
    Png,
    Jpeg,
    Gif,
    Gzip,
    /// NUL bytes without a UTF-16 byte order mark: not text.
    Binary,
}

impl Sniffed {
    fn of(bytes: &[u8]) -> Option<Self> {
        let head = &bytes[..bytes.len().min(SNIFF_BYTES)];
        let pdf_window = &head[..head.len().min(PDF_HEADER_WINDOW)];
        if pdf_window.windows(5).any(|w| w == b"%PDF-") {
            return Some(Sniffed::Pdf);
        }
        const MAGICS: &[(&[u8], Sniffed)] = &[
            (b"PK\x03\x04", Sniffed::Zip),
            (b"PK\x05\x06", Sniffed::Zip),
            (b"\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1", Sniffed::Ole),
            (b"\x89PNG\r\n\x1A\n", Sniffed::Png),
            (b"\xFF\xD8\xFF", Sniffed::Jpeg),
            (b"GIF8", Sniffed::Gif),
            (b"\x1F\x8B", Sniffed::Gzip),
        ];
        if let Some((_, sniffed)) = MAGICS.iter().find(|(magic, _)| head.starts_with(magic)) {
            return Some(*sniffed);
        }
        // UTF-16 text is full of NUL bytes; its byte order mark vouches for it.
        let utf16 = head.starts_with(b"\xFF\xFE") || head.starts_with(b"\xFE\xFF");
        (!utf16 && head.contains(&0)).then_some(Sniffed::Binary)
    }

    fn description(self) -> &'static str {
        match self {
            Sniffed::Pdf => "a PDF document",
            Sniffed::Zip => "a ZIP archive",
            Sniffed::Ole => "a password-protected Office file or a legacy .doc/.xls file",
            Sniffed::Png => "a PNG image",
            Sniffed::Jpeg => "a JPEG image",
            Sniffed::Gif => "a GIF image",
            Sniffed::Gzip => "a gzip archive",
            Sniffed::Binary => "binary data",
        }
    }
}

/// Cap on the text a file may expand to (a DOCX's `document.xml` after
/// decompression, a CSV rendered row by row, any format's extracted text):
/// guards against zip bombs and bounds what chunking and embedding cost.
pub const MAX_TEXT_BYTES: usize = 50 * 1024 * 1024;

/// Cap on what a PDF's streams may decompress to, all kept streams together
/// (page contents, fonts, forms; images are dropped unread). A few kilobytes
/// of FlateDecode can expand to gigabytes, so streams are inflated through a
/// bounded reader and a file over the cap fails with
/// [`ExtractError::TooLarge`] instead of exhausting the worker's memory. One
/// extraction's peak memory stays within about three times this cap plus
/// twice the file.
pub const MAX_PDF_DECODED_BYTES: usize = 128 * 1024 * 1024;

/// Why a knowledge file yields no text. `Display` is the message shown to the user.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error("{}", unsupported_message(.extension.as_deref()))]
    Unsupported {
        /// Lower-cased, without the dot; `None` when the name has none.
        extension: Option<String>,
    },
    #[error("{}", mismatch_message(.extension, *.found))]
    ContentMismatch {
        extension: String,
        /// What the bytes look like instead, when recognised.
        found: Option<&'static str>,
    },
    #[error(
        "the {} is not valid UTF-8 text (invalid byte at position {position}): save it as UTF-8 and upload it again",
        .format.label()
    )]
    InvalidEncoding {
        format: KnowledgeFormat,
        /// Byte offset of the first invalid sequence.
        position: usize,
    },
    #[error("the {} could not be read: {reason}", .format.label())]
    Corrupt {
        format: KnowledgeFormat,
        reason: String,
    },
    #[error(
        "the {} is password-protected: remove the password and upload it again",
        .0.label()
    )]
    Encrypted(KnowledgeFormat),
    #[error("{}", empty_message(*.0))]
    Empty(KnowledgeFormat),
    #[error("{what} is too large: the limit is {} MB", .limit_bytes / (1024 * 1024))]
    TooLarge {
        /// What exceeded the limit, e.g. "the file".
        what: &'static str,
        limit_bytes: usize,
    },
    #[error(
        "processing the file took longer than {} s: upload a smaller or simpler file",
        .limit.as_secs_f64()
    )]
    TimedOut { limit: Duration },
    #[error("text extraction was interrupted before it finished")]
    Interrupted,
}

impl ExtractError {
    /// Whether processing the same bytes again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ExtractError::Interrupted => true,
            ExtractError::Unsupported { .. }
            | ExtractError::ContentMismatch { .. }
            | ExtractError::InvalidEncoding { .. }
            | ExtractError::Corrupt { .. }
            | ExtractError::Encrypted(_)
            | ExtractError::Empty(_)
            | ExtractError::TooLarge { .. }
            // The same file on the same machine takes as long the next time.
            | ExtractError::TimedOut { .. } => false,
        }
    }
}

/// Library error texts are kept short in user-facing messages.
const MAX_REASON_CHARS: usize = 200;

/// A library's error text, cut to a length fit for a user message.
pub(crate) fn brief(err: &dyn std::fmt::Display) -> String {
    let text = err.to_string();
    match text.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

const ACCEPTED: &str = "upload PDF, Markdown, TXT, CSV or DOCX";

fn unsupported_message(extension: Option<&str>) -> String {
    match extension {
        Some(extension) => format!("unsupported file type .{extension}: {ACCEPTED}"),
        None => format!("unsupported file type (the file name has no extension): {ACCEPTED}"),
    }
}

fn mismatch_message(extension: &str, found: Option<&str>) -> String {
    match found {
        Some(found) => {
            format!(
                "the file's content does not match its .{extension} extension: it looks like {found}"
            )
        }
        None => format!("the file's content does not match its .{extension} extension"),
    }
}

fn empty_message(format: KnowledgeFormat) -> &'static str {
    match format {
        KnowledgeFormat::Pdf => {
            "the PDF contains no extractable text: it may consist of scanned images, \
             and text recognition (OCR) is not supported"
        }
        KnowledgeFormat::Csv => "the CSV file contains no data rows",
        KnowledgeFormat::Markdown | KnowledgeFormat::Text | KnowledgeFormat::Docx => {
            "the file contains no text"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knowledge_format_is_detected_from_extension_and_content() {
        let cases: &[(&str, &[u8], KnowledgeFormat)] = &[
            ("report.pdf", b"%PDF-1.7\n...", KnowledgeFormat::Pdf),
            ("REPORT.PDF", b"%PDF-1.4\n...", KnowledgeFormat::Pdf),
            ("notes.md", b"# Title\n", KnowledgeFormat::Markdown),
            ("notes.markdown", b"text", KnowledgeFormat::Markdown),
            ("dir/notes.txt", b"plain", KnowledgeFormat::Text),
            ("C:\\x\\data.csv", b"a,b\n1,2", KnowledgeFormat::Csv),
            ("letter.docx", b"PK\x03\x04rest", KnowledgeFormat::Docx),
            ("utf16.txt", b"\xFF\xFEh\0i\0", KnowledgeFormat::Text),
        ];
        for (name, bytes, expected) in cases {
            let detected =
                KnowledgeFormat::detect(name, bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(detected, *expected, "{name}");
        }
    }

    #[test]
    fn knowledge_content_contradicting_the_extension_is_refused() {
        let err = KnowledgeFormat::detect("x.pdf", b"hello, not a pdf").unwrap_err();
        assert!(
            matches!(err, ExtractError::ContentMismatch { .. }),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "the file's content does not match its .pdf extension"
        );

        let err = KnowledgeFormat::detect("x.txt", b"%PDF-1.4\nstuff").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the file's content does not match its .txt extension: it looks like a PDF document"
        );
        let err = KnowledgeFormat::detect("x.docx", b"plain words").unwrap_err();
        assert!(
            matches!(err, ExtractError::ContentMismatch { .. }),
            "{err:?}"
        );
        let err = KnowledgeFormat::detect("x.csv", b"a,b\0c").unwrap_err();
        assert!(err.to_string().contains("binary data"), "{err}");
        let err = KnowledgeFormat::detect("x.md", b"\x89PNG\r\n\x1A\n....").unwrap_err();
        assert!(err.to_string().contains("PNG image"), "{err}");
    }

    #[test]
    fn knowledge_unsupported_extensions_name_the_accepted_ones() {
        let err = KnowledgeFormat::detect("sheet.xlsx", b"PK\x03\x04").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported file type .xlsx: upload PDF, Markdown, TXT, CSV or DOCX"
        );
        let err = KnowledgeFormat::detect("README", b"text").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported file type (the file name has no extension): upload PDF, Markdown, TXT, CSV or DOCX"
        );
        let err = KnowledgeFormat::detect("x.p<df>", b"text").unwrap_err();
        assert!(matches!(err, ExtractError::Unsupported { extension: None }));
    }

    #[test]
    fn knowledge_empty_upload_is_refused_at_detection() {
        let err = KnowledgeFormat::detect("empty.txt", b"").unwrap_err();
        assert!(matches!(err, ExtractError::Empty(KnowledgeFormat::Text)));
    }

    #[test]
    fn knowledge_format_names_round_trip() {
        for format in KnowledgeFormat::ALL {
            assert_eq!(
                format.as_str().parse::<KnowledgeFormat>().ok(),
                Some(*format)
            );
            let json = serde_json::to_string(format).expect("serialises");
            assert_eq!(json, format!("\"{}\"", format.as_str()));
            assert!(!format.mime().is_empty());
        }
        assert!("xlsx".parse::<KnowledgeFormat>().is_err());
    }
}
