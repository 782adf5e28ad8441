//! Processing one knowledge file: its bytes -> text -> chunks -> embeddings.
//! What the knowledge worker runs between claiming a file and writing its
//! chunks; no database or queue here.

use std::time::Duration;

use super::retrieve::Embedder;
use super::{ExtractError, KnowledgeFormat, chunk_text, extract_text_async_holding};
use unigen_core::ProviderError;
use unigen_core::config::KnowledgeSettings;

/// How files are cut and embedded (from `[knowledge]`).
#[derive(Debug, Clone)]
pub struct ProcessOptions {
    pub chunk_tokens: u32,
    pub overlap_tokens: u32,
    pub extract_timeout: Duration,
    pub max_chunks: usize,
    /// Texts per embedding call.
    pub embed_batch: usize,
}

impl ProcessOptions {
    pub fn from_settings(settings: &KnowledgeSettings) -> Self {
        Self {
            chunk_tokens: settings.chunk_tokens,
            overlap_tokens: settings.chunk_overlap_tokens,
            extract_timeout: Duration::from_secs(settings.extract_timeout_seconds),
            max_chunks: settings.max_chunks_per_file,
            embed_batch: settings.embed_batch.max(1),
        }
    }
}

/// A chunk of the file's text with its embedding (unit length).
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddedChunk {
    /// Position in the file, from 0.
    pub index: i32,
    pub content: String,
    pub token_count: i32,
    pub embedding: Vec<f32>,
}

/// Why a file could not be processed. `Display` is the message shown to the
/// user as the file's `error_message`.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error(transparent)]
    Extract(#[from] ExtractError),
    #[error(
        "the file's text is too long: it makes more than {max} parts of {chunk_tokens} tokens; \
         split it into smaller files"
    )]
    TooManyChunks { max: usize, chunk_tokens: u32 },
    #[error("embedding the text failed: {0}")]
    Embed(#[from] ProviderError),
}

impl ProcessError {
    /// Whether processing the same file again may succeed (then it is
    /// retried, up to `jobs.max_attempts` claims).
    pub fn is_retryable(&self) -> bool {
        match self {
            ProcessError::Extract(err) => err.is_retryable(),
            ProcessError::TooManyChunks { .. } => false,
            ProcessError::Embed(ProviderError::Transient(_)) => true,
            ProcessError::Embed(ProviderError::Permanent(_)) => false,
        }
    }
}

/// Extracts the text of `bytes` (on the blocking pool, within the time
/// limit, holding `extraction_slot` until the parser really returns), cuts
/// it into chunks and embeds them in batches.
pub async fn process_file<S: Send + 'static>(
    format: KnowledgeFormat,
    bytes: Vec<u8>,
    options: &ProcessOptions,
    embedder: &Embedder,
    extraction_slot: S,
) -> Result<Vec<EmbeddedChunk>, ProcessError> {
    let text =
        extract_text_async_holding(format, bytes, options.extract_timeout, extraction_slot).await?;
    let (max_tokens, overlap) = (options.chunk_tokens, options.overlap_tokens);
    // Tokenising megabytes of text is CPU work too.
    let chunks = tokio::task::spawn_blocking(move || chunk_text(&text, max_tokens, overlap))
        .await
        .map_err(|err| {
            if err.is_panic() {
                ExtractError::Corrupt {
                    format,
                    reason: "its text could not be cut into parts".into(),
                }
            } else {
                ExtractError::Interrupted
            }
        })?;
    if chunks.is_empty() {
        return Err(ExtractError::Empty(format).into());
    }
    if chunks.len() > options.max_chunks {
        return Err(ProcessError::TooManyChunks {
            max: options.max_chunks,
            chunk_tokens: options.chunk_tokens,
        });
    }
    let mut embedded = Vec::with_capacity(chunks.len());
    for batch in chunks.chunks(options.embed_batch.max(1)) {
        let texts: Vec<String> = batch.iter().map(|chunk| chunk.text.clone()).collect();
        let vectors = embedder.embed(&texts).await?;
        if vectors.len() != batch.len() {
            return Err(ProviderError::Permanent(
                "the embedding model answered the wrong number of vectors".into(),
            )
            .into());
        }
        for (chunk, embedding) in batch.iter().zip(vectors) {
            embedded.push(EmbeddedChunk {
                index: chunk.index as i32,
                content: chunk.text.clone(),
                token_count: chunk.token_count as i32,
                embedding,
            });
        }
    }
    Ok(embedded)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::Semaphore;

    use super::*;
    use unigen_core::config::Settings;
    use unigen_providers::local::chat::DEFAULT_EMBEDDING_DIMENSIONS;
    use unigen_providers::local::chat::embed;

    fn setup() -> (ProcessOptions, Embedder) {
        let settings = Settings::load_with(None, &[]).unwrap();
        let mut options = ProcessOptions::from_settings(&settings.knowledge);
        options.chunk_tokens = 32;
        options.overlap_tokens = 4;
        options.embed_batch = 3;
        (options, Embedder::new(&settings))
    }

    fn paragraphs(n: usize) -> String {
        (0..n)
            .map(|i| format!("Paragraph {i} talks about topic number {i} in a few plain words."))
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    #[tokio::test]
    async fn a_text_file_becomes_ordered_chunks_with_their_embeddings() {
        let (options, embedder) = setup();
        let slots = Arc::new(Semaphore::new(1));
        let slot = slots.clone().acquire_owned().await.unwrap();
        let text = paragraphs(12);
        let chunks = process_file(
            KnowledgeFormat::Text,
            text.clone().into_bytes(),
            &options,
            &embedder,
            slot,
        )
        .await
        .unwrap();
        assert!(chunks.len() > 3, "several batches: {}", chunks.len());
        assert_eq!(slots.available_permits(), 1, "the slot is given back");
        for (i, chunk) in chunks.iter().enumerate() {
            assert_eq!(chunk.index, i as i32);
            assert!(chunk.token_count > 0 && chunk.token_count <= 32);
            assert_eq!(
                chunk.embedding,
                embed(&chunk.content, DEFAULT_EMBEDDING_DIMENSIONS)
            );
        }
        assert!(chunks[0].content.starts_with("Paragraph 0"));
        assert!(chunks.last().unwrap().content.contains("Paragraph 11"));
    }

    #[tokio::test]
    async fn unreadable_and_oversized_files_fail_for_good_with_a_user_message() {
        let (mut options, embedder) = setup();
        let err = process_file(
            KnowledgeFormat::Pdf,
            b"%PDF-1.7\nthis is no PDF body at all".to_vec(),
            &options,
            &embedder,
            (),
        )
        .await
        .unwrap_err();
        assert!(!err.is_retryable());
        assert!(
            err.to_string().starts_with("the PDF could not be read"),
            "{err}"
        );

        options.max_chunks = 2;
        let err = process_file(
            KnowledgeFormat::Markdown,
            paragraphs(12).into_bytes(),
            &options,
            &embedder,
            (),
        )
        .await
        .unwrap_err();
        assert!(!err.is_retryable());
        assert_eq!(
            err.to_string(),
            "the file's text is too long: it makes more than 2 parts of 32 tokens; \
             split it into smaller files"
        );
    }

    #[tokio::test]
    async fn embedding_failures_are_retryable_only_when_transient() {
        assert!(ProcessError::Embed(ProviderError::Transient("down".into())).is_retryable());
        assert!(!ProcessError::Embed(ProviderError::Permanent("no".into())).is_retryable());
        let mut settings = Settings::load_with(None, &[]).unwrap();
        settings
            .models
            .retain(|m| m.category != unigen_core::domain::ModelCategory::Embedding);
        let (options, _) = setup();
        let err = process_file(
            KnowledgeFormat::Text,
            b"some words".to_vec(),
            &options,
            &Embedder::new(&settings),
            (),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("embedding the text failed: no embedding model"),
            "{err}"
        );
    }
}
