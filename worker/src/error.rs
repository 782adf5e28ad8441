//! How a job execution can fail; decides retry vs. final.

use unigen_core::ProviderError;

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The provider refused or failed for good: the job fails with the reason.
    #[error("{0}")]
    Provider(#[from] ProviderError),
    /// The stored input does not parse: a bug or a tampered row; final.
    #[error("invalid job parameters: {0}")]
    InvalidParams(String),
    /// Storing outputs failed.
    #[error("storing the output failed: {0}")]
    Storage(String),
}

impl ToolError {
    /// The message a client sees in `errorMessage`.
    pub fn client_message(&self) -> String {
        match self {
            ToolError::Provider(
                ProviderError::Transient(reason) | ProviderError::Permanent(reason),
            ) => reason.clone(),
            ToolError::InvalidParams(_) => "the job's parameters are invalid".into(),
            ToolError::Storage(_) => "storing the output failed".into(),
        }
    }

    /// The `reason` label of `unigen_job_failures_total`: a fixed, small set.
    /// A transient provider error only gets here once its retries ran out.
    pub fn reason(&self) -> &'static str {
        match self {
            ToolError::Provider(ProviderError::Transient(_)) => "provider_transient",
            ToolError::Provider(ProviderError::Permanent(_)) => "provider_permanent",
            ToolError::InvalidParams(_) => "invalid_params",
            ToolError::Storage(_) => "storage",
        }
    }
}
