//! Domain vocabulary: tools, statuses, scopes, tiers and API key material.

mod api_key;
mod enums;
pub mod key_rules;
mod plan_limits;

pub use api_key::{ApiKeyMaterial, KeyFormatError, hash_key, looks_like_key};
pub use enums::{Bucket, JobStatus, ModelCategory, ModelTier, ParseEnumError, Scope, Tool};
pub use plan_limits::{
    AgentLimits, MAX_KNOWLEDGE_FILE_BYTES, PlanRefusal, UploadRefusal, admit_count, admit_plan,
    admit_size, max_file_bytes,
};
