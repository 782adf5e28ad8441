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

pub use chunk::{Chunk, chunk_text};
pub use extract::{extract_text, extract_text_async, extract_text_async_holding};
pub use format::{ExtractError, KnowledgeFormat, MAX_TEXT_BYTES};

/// Largest upload accepted for extraction: the largest plan's file size limit.
pub use unigen_core::domain::MAX_KNOWLEDGE_FILE_BYTES as MAX_FILE_BYTES;
