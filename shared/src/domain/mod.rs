//! Domain vocabulary: tools, statuses, scopes, tiers and API key material.

mod api_key;
mod enums;

pub use api_key::{ApiKeyMaterial, KeyFormatError, hash_key, looks_like_key};
pub use enums::{Bucket, JobStatus, ModelCategory, ModelTier, ParseEnumError, Scope, Tool};
