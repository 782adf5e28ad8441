//! Errors every layer shares.

/// How a provider call failed: transient failures may be retried, permanent
/// ones fail the job with the provider's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("provider temporarily unavailable: {0}")]
    Transient(String),
    #[error("{0}")]
    Permanent(String),
}
