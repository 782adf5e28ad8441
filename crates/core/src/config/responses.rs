//! `[responses]` settings: the Responses API's stored responses.

use serde::Deserialize;

fn default_retention_seconds() -> u64 {
    30 * 24 * 3600
}

/// `[responses]`: `retention_seconds`, how long a stored response (`store`,
/// the default) is kept: past it, it is a 404 and the scheduler deletes it.
/// 30 days by default, as OpenAI keeps them.
#[derive(Debug, Clone, Deserialize)]
pub struct ResponsesSettings {
    #[serde(default = "default_retention_seconds")]
    pub retention_seconds: u64,
}

impl Default for ResponsesSettings {
    fn default() -> Self {
        Self {
            retention_seconds: default_retention_seconds(),
        }
    }
}
