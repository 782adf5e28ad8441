//! `[search]` settings.

use std::fmt;

use serde::Deserialize;

fn default_backend() -> String {
    "none".to_owned()
}

fn default_results() -> usize {
    5
}

fn default_timeout() -> u64 {
    10
}

/// `[search]` settings (deserialized by the caller's config): which backend, and its options.
#[derive(Clone, Deserialize)]
pub struct SearchSettings {
    /// "none" (default), "searxng" or "brave".
    #[serde(default = "default_backend")]
    pub backend: String,
    /// SearXNG: base URL of the instance (e.g. http://127.0.0.1:8888); Brave: optional override of https://api.search.brave.com.
    #[serde(default)]
    pub url: Option<String>,
    /// Brave: the subscription token (header X-Subscription-Token). Never logged or Debug-printed.
    #[serde(default)]
    pub api_key: Option<String>,
    /// At most this many results per search (default 5).
    #[serde(default = "default_results")]
    pub max_results: usize,
    /// Timeout of one search request, in seconds (default 10).
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
}

impl Default for SearchSettings {
    fn default() -> Self {
        Self {
            backend: default_backend(),
            url: None,
            api_key: None,
            max_results: default_results(),
            timeout_seconds: default_timeout(),
        }
    }
}

impl fmt::Debug for SearchSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SearchSettings")
            .field("backend", &self.backend)
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("max_results", &self.max_results)
            .field("timeout_seconds", &self.timeout_seconds)
            .finish()
    }
}
