//! Job submission and per-tool request parameters.
//!
//! Handlers parse a request into a tool's `*Params` (validated here, so every
//! interface that submits the tool shares the rules), then call
//! [`JobSubmitter::submit`].

pub mod image;
mod submit;

pub use submit::{JobSubmitter, NewJobRequest, SubmitError};

/// A request field that failed validation: the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValidationError {
    pub field: &'static str,
    pub message: String,
}

impl ValidationError {
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}
