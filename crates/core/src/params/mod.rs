//! Per-tool request parameters: each tool's request body, validated into the
//! `*Params` stored as the job's `inputParams`, so every interface that
//! submits the tool shares the rules.

pub mod edit;
pub mod image;
pub mod legacy;
pub mod music;
pub mod speech;
pub mod transcription;
pub mod video;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fetch::MediaKind;
use crate::validate;
pub use crate::validate::ValidationError;

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
