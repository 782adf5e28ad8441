//! Job submission and per-tool request parameters.
//!
//! Handlers parse a request into a tool's `*Params` (validated here, so every
//! interface that submits the tool shares the rules), then call
//! [`JobSubmitter::submit`].

pub mod edit;
pub mod image;
pub mod legacy;
pub mod music;
pub mod speech;
mod submit;
pub mod transcription;
pub mod validate;
pub mod video;

pub use submit::{JobSubmitter, NewJobRequest, SubmitError, cancel};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fetch::MediaKind;

/// A media field of a request still to be loaded (URL or base64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaRef {
    pub field: &'static str,
    pub source: String,
    pub kind: MediaKind,
}

/// A loaded input, stored before the job is created so the worker never
/// fetches client URLs and the job can be re-run: `{"file": "<key>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredInput {
    pub file: String,
}

/// Inputs of a job by request field name (`image`, `mask`, `source_audio`...).
pub type StoredInputs = BTreeMap<String, StoredInput>;

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
