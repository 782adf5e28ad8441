//! Knowledge files: recognising an upload's format, extracting its text and
//! cutting the text into token-bounded chunks for embedding.
//!
//! Extraction and chunking are pure: no database, queue or network. The API
//! calls [`KnowledgeFormat::detect`] and [`upload`]'s plan checks at upload
//! time; the knowledge worker runs [`process::process_file`] (extract, chunk,
//! embed); agent runs call [`retrieve::relevant_excerpts`]. Error messages
//! are written for the user: they become the file's `error_message`.

mod chunk;
mod docx;
mod extract;
mod format;
pub mod process;
pub mod retrieve;
pub mod upload;

use std::time::Duration;

pub use chunk::{Chunk, chunk_text};
pub use extract::{extract_text, extract_text_async, extract_text_async_holding};
pub use format::KnowledgeFormat;

/// Largest upload accepted for extraction: the largest plan's file size limit.
pub use unigen_core::domain::MAX_KNOWLEDGE_FILE_BYTES as MAX_FILE_BYTES;
/// Cap on the text a file may expand to (a DOCX's `document.xml` after
/// decompression, a CSV rendered row by row, any format's extracted text):
/// guards against zip bombs and bounds what chunking and embedding cost.
pub const MAX_TEXT_BYTES: usize = 50 * 1024 * 1024;

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
fn brief(err: &dyn std::fmt::Display) -> String {
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
