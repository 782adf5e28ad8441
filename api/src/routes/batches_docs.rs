//! OpenAPI schemas of the Files and Batches routes (documentation only:
//! the handlers write JSON through `unigen_jobs::batches`).

#![allow(dead_code)]

use std::collections::HashMap;

use utoipa::ToSchema;

/// A file (OpenAI's `file` object).
#[derive(ToSchema)]
pub struct FileObject {
    /// `file-...`
    pub id: String,
    /// `file`
    pub object: String,
    pub bytes: i64,
    /// Unix seconds.
    pub created_at: i64,
    pub filename: String,
    /// `batch`, `user_data`, or `batch_output` (a batch's output and error files).
    pub purpose: String,
    /// Always `processed` (OpenAI's deprecated field).
    pub status: String,
    pub status_details: Option<String>,
    pub expires_at: Option<i64>,
}

/// A page of files, newest first.
#[derive(ToSchema)]
pub struct FileList {
    /// `list`
    pub object: String,
    pub data: Vec<FileObject>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}

/// `DELETE /files/{id}`'s answer.
#[derive(ToSchema)]
pub struct FileDeleted {
    pub id: String,
    /// `file`
    pub object: String,
    pub deleted: bool,
}

/// The upload form (`multipart/form-data`).
#[derive(ToSchema)]
pub struct FileUploadForm {
    /// The file's bytes (with a file name); at most `batches.max_file_bytes` (200 MB by default).
    #[schema(value_type = String, format = Binary)]
    pub file: Vec<u8>,
    /// `batch` (a batch's JSONL input) or `user_data`.
    pub purpose: String,
}

/// Body of `POST /batches`.
#[derive(ToSchema)]
pub struct BatchCreateRequest {
    /// A file of the organization with purpose `batch`: JSONL, one request a
    /// line (`custom_id` unique, `method` `POST`, `url` equal to `endpoint`,
    /// `body` an object), at most 50,000 lines.
    pub input_file_id: String,
    /// `/v1/chat/completions`, `/v1/embeddings` or `/v1/responses`.
    pub endpoint: String,
    /// `24h`
    pub completion_window: String,
    /// At most 16 pairs; keys up to 64 characters, values strings up to 512.
    pub metadata: Option<HashMap<String, String>>,
}

/// A batch's request counts.
#[derive(ToSchema)]
pub struct BatchRequestCounts {
    pub total: i64,
    /// Answered with a 2xx status (in the output file).
    pub completed: i64,
    /// Answered with an error (in the error file).
    pub failed: i64,
}

/// A batch (OpenAI's `batch` object). Timestamps are Unix seconds.
#[derive(ToSchema)]
pub struct BatchObject {
    /// `batch_...`
    pub id: String,
    /// `batch`
    pub object: String,
    pub endpoint: String,
    #[schema(value_type = Option<Object>)]
    pub errors: Option<serde_json::Value>,
    pub input_file_id: String,
    pub completion_window: String,
    /// `validating`, `in_progress`, `finalizing`, `completed`, `failed`, `expired`, `cancelling`, `cancelled`.
    pub status: String,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub created_at: i64,
    pub in_progress_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub finalizing_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub failed_at: Option<i64>,
    pub expired_at: Option<i64>,
    pub cancelling_at: Option<i64>,
    pub cancelled_at: Option<i64>,
    pub request_counts: BatchRequestCounts,
    pub metadata: Option<HashMap<String, String>>,
}

/// A page of batches, newest first.
#[derive(ToSchema)]
pub struct BatchList {
    /// `list`
    pub object: String,
    pub data: Vec<BatchObject>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}
