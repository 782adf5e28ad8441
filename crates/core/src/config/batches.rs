//! `[batches]` settings: OpenAI's Files and Batches APIs (uploads, and the
//! lines of batches run by the workers).

use serde::Deserialize;

fn default_max_file_bytes() -> u64 {
    200 * 1024 * 1024
}

fn default_poll_ms() -> u64 {
    200
}

fn default_line_attempts() -> u32 {
    5
}

fn default_retry_base_ms() -> u64 {
    2_000
}

/// `[batches]`: keys `max_file_bytes`, `poll_ms`, `line_attempts`,
/// `retry_base_ms`.
#[derive(Debug, Clone, Deserialize)]
pub struct BatchSettings {
    /// The largest file `POST /files` accepts (413 past it).
    #[serde(default = "default_max_file_bytes")]
    pub max_file_bytes: u64,
    /// How often an idle worker looks for batch lines to run.
    #[serde(default = "default_poll_ms")]
    pub poll_ms: u64,
    /// Attempts of a line whose upstream was busy or unavailable (429,
    /// 5xx after the provider's own retries) before it fails.
    #[serde(default = "default_line_attempts")]
    pub line_attempts: u32,
    /// The first delay before such a line runs again; doubled per attempt.
    #[serde(default = "default_retry_base_ms")]
    pub retry_base_ms: u64,
}

impl Default for BatchSettings {
    fn default() -> Self {
        Self {
            max_file_bytes: default_max_file_bytes(),
            poll_ms: default_poll_ms(),
            line_attempts: default_line_attempts(),
            retry_base_ms: default_retry_base_ms(),
        }
    }
}
