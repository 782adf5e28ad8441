//! Knowledge files of an agent (scope `agents`): upload (multipart field
//! `file`), list, read, delete. Files are processed asynchronously by the
//! knowledge workers: `pending` -> `processing` -> `completed` | `failed`.

use actix_multipart::Multipart;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, delete, get, post, web};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use serde::Serialize;
use unigen_agents::AgentLimits;
use unigen_core::ValidationError;
use unigen_core::domain::Scope;
use unigen_db::models::KnowledgeFile;
use unigen_db::{DbError, queries};
use unigen_knowledge::upload::{
    AcceptError, AcceptOutcome, Upload, UploadRefusal, display_name, max_file_bytes, storage_prefix,
};
use unigen_knowledge::{KnowledgeFormat, MAX_FILE_BYTES, upload};
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::{not_found, path_id};
use crate::state::AppState;

const AGENT: &str = "agent";
const FILE: &str = "knowledge file";
const FIELD: &str = "file";
/// Room for the multipart framing and small extra fields around the file.
const MULTIPART_OVERHEAD: usize = 1024 * 1024;
/// The upload's route, as the OpenAPI document names it.
pub const KNOWLEDGE_UPLOAD_TEMPLATE: &str = "/api/v1/agents/{id}/knowledge";
/// The most an upload's body may be under any plan.
pub const KNOWLEDGE_BODY_CEILING: usize = MAX_FILE_BYTES + MULTIPART_OVERHEAD;

/// A knowledge file and its processing state.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KnowledgeFileView {
    pub id: Uuid,
    pub agent_id: Uuid,
    /// The uploaded file's name (without any path).
    pub filename: String,
    /// `pdf`, `markdown`, `text`, `csv` or `docx`.
    pub format: String,
    pub size_bytes: i64,
    /// `pending` (uploaded, waiting), `processing` (text extraction and
    /// embedding), `completed` (ready for the agent), `failed`.
    pub status: String,
    /// Why processing failed (only when `failed`).
    pub error_message: Option<String>,
    /// Text chunks the agent can retrieve (when `completed`).
    pub chunk_count: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When it was completed or failed.
    pub processed_at: Option<DateTime<Utc>>,
}

impl From<KnowledgeFile> for KnowledgeFileView {
    fn from(file: KnowledgeFile) -> Self {
        // A transient failure being retried is not shown: the file is still on its way.
        let error_message = (file.status == "failed")
            .then_some(file.error_message)
            .flatten();
        Self {
            id: file.id,
            agent_id: file.agent_id,
            filename: file.filename,
            format: file.format,
            size_bytes: file.size_bytes,
            status: file.status,
            error_message,
            chunk_count: file.chunk_count,
            created_at: file.created_at,
            updated_at: file.updated_at,
            processed_at: file.processed_at,
        }
    }
}

/// `{file: {...}}`, as the spec wraps a knowledge file.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KnowledgeFileEnvelope {
    pub file: KnowledgeFileView,
}

/// The agent's knowledge files, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KnowledgeFileList {
    pub files: Vec<KnowledgeFileView>,
}

/// The upload form.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct KnowledgeUploadForm {
    /// PDF, Markdown, TXT, CSV or DOCX, at most the plan's maximum file size.
    #[schema(value_type = String, format = Binary)]
    file: Vec<u8>,
}

/// The organization's own agent; a template takes no files (403), anything
/// else is 404.
async fn own_agent(state: &AppState, caller: &Caller, raw_id: &str) -> Result<Uuid, ApiError> {
    let id = path_id(AGENT, raw_id)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    match queries::agents::find_visible(&mut conn, caller.org_id, id).await? {
        Some(agent) if agent.is_template => Err(ApiError::TemplateReadOnly(
            "templates have no knowledge files: duplicate the template and upload to the copy"
                .into(),
        )),
        Some(agent) => Ok(agent.id),
        None => Err(not_found(AGENT, raw_id)),
    }
}

/// Upload a knowledge file to the organization's agent.
#[utoipa::path(
    tag = "agents",
    params(("id" = String, Path, description = "Agent id")),
    request_body(content = KnowledgeUploadForm, content_type = "multipart/form-data"),
    responses(
        (status = 201, description = "Stored and queued for processing (`status: pending`)", body = KnowledgeFileEnvelope),
        (status = 400, description = "`file` missing, of an unsupported type, not matching its extension, empty, or larger than the plan's maximum file size (a body too large is this 400, not a 413)", body = ErrorBody),
        (status = 402, description = "`limit_reached`: the agent has the plan's maximum number of knowledge files", body = ErrorBody),
        (status = 403, description = "`template_read_only`: a template agent takes no files, duplicate it; `not_available_on_plan`: agents or knowledge files not on the plan; or scope `agents` missing", body = ErrorBody),
        (status = 404, description = "Agent not found", body = ErrorBody),
    ),
    security(("bearer" = ["agents"]))
)]
#[post("/agents/{id}/knowledge")]
pub async fn upload_knowledge_file(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    request: HttpRequest,
    multipart: Multipart,
) -> Result<HttpResponse, ApiError> {
    let admitted = async {
        caller.require(Scope::Agents)?;
        let limits = {
            let mut conn = state.pool.get().await.map_err(DbError::from)?;
            queries::agents::limits(&mut conn, caller.org_id).await?
        };
        upload::admit_plan(&limits)?;
        let agent_id = own_agent(&state, &caller, &path).await?;
        // Refused before the file is read; the insert counts again under a lock.
        let existing = {
            let mut conn = state.pool.get().await.map_err(DbError::from)?;
            queries::knowledge::count_for_agent(&mut conn, agent_id).await?
        };
        upload::admit_count(&limits, existing)?;
        Ok::<_, ApiError>((limits, agent_id))
    }
    .await;
    let (limits, agent_id) = match admitted {
        Ok(admitted) => admitted,
        Err(err) => {
            drain(multipart).await;
            return Err(err);
        }
    };
    let (filename, bytes) = read_file_field(&request, multipart, &limits).await?;
    let format = KnowledgeFormat::detect(&filename, &bytes)
        .map_err(|err| ValidationError::new(FIELD, err.to_string()))?;
    let upload = Upload {
        org_id: caller.org_id,
        agent_id,
        filename: &filename,
        format,
        bytes,
    };
    match upload::accept(&state.pool, state.store.as_ref(), &state.publisher, upload).await {
        Ok(AcceptOutcome::Accepted(file)) => {
            Ok(HttpResponse::Created().json(KnowledgeFileEnvelope {
                file: (*file).into(),
            }))
        }
        Ok(AcceptOutcome::AgentNotFound) => Err(not_found(AGENT, &path)),
        Ok(AcceptOutcome::Refused(refusal)) => Err(refusal.into()),
        Err(AcceptError::Db(err)) => Err(err.into()),
        Err(AcceptError::Storage(err)) => Err(ApiError::internal(err)),
    }
}

/// The `file` field's name and bytes, at most the plan's file size; other
/// fields are skipped. The route's body limit is the plan's file size (not
/// `http.max_body_bytes`), so CLI Team's 50 MB files fit.
async fn read_file_field(
    request: &HttpRequest,
    mut multipart: Multipart,
    limits: &AgentLimits,
) -> Result<(String, Vec<u8>), ApiError> {
    let max_file = max_file_bytes(limits);
    let max_body = max_file + MULTIPART_OVERHEAD;
    let too_large = || {
        ApiError::from(UploadRefusal::TooLarge {
            plan: limits.plan.clone(),
            max_mb: limits.max_file_size_mb,
        })
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|length| length > max_body) {
        return Err(too_large());
    }
    let mut read = 0usize;
    let mut found: Option<(String, Vec<u8>)> = None;
    let mut oversized = false;
    while let Some(field) = multipart.next().await {
        let mut field = field.map_err(malformed)?;
        let is_file = found.is_none() && field.name() == Some(FIELD);
        let name = field
            .content_disposition()
            .and_then(|d| d.get_filename())
            .map(display_name)
            .unwrap_or_default();
        let mut bytes = Vec::new();
        while let Some(chunk) = field.next().await {
            let chunk = chunk.map_err(malformed)?;
            read += chunk.len();
            if read > max_body {
                // Past any plan's limit: stop reading (the connection closes).
                return Err(too_large());
            }
            if is_file && !oversized {
                if bytes.len() + chunk.len() > max_file {
                    // Keep draining, so the client reads this answer.
                    oversized = true;
                    bytes = Vec::new();
                } else {
                    bytes.extend_from_slice(&chunk);
                }
            }
        }
        if is_file {
            found = Some((name, bytes));
        }
    }
    if oversized {
        return Err(too_large());
    }
    found.ok_or_else(|| ValidationError::new(FIELD, "file is required").into())
}

/// Reads and drops what the client sends (at most any plan's file size), so
/// a refused upload gets its answer instead of a connection reset.
async fn drain(mut multipart: Multipart) {
    let mut read = 0usize;
    while let Some(Ok(mut field)) = multipart.next().await {
        while let Some(Ok(chunk)) = field.next().await {
            read += chunk.len();
            if read > MAX_FILE_BYTES + MULTIPART_OVERHEAD {
                return;
            }
        }
    }
}

fn malformed(err: actix_multipart::MultipartError) -> ApiError {
    use actix_multipart::MultipartError as E;
    match err {
        E::ContentTypeMissing
        | E::ContentTypeParse
        | E::ContentTypeIncompatible
        | E::BoundaryMissing => ValidationError::new(
            FIELD,
            "the body must be multipart/form-data with the file in the field `file`",
        )
        .into(),
        other => ApiError::BadRequest(format!("the multipart body could not be read: {other}")),
    }
}

/// List the agent's knowledge files, newest first.
#[utoipa::path(
    tag = "agents",
    params(("id" = String, Path, description = "Agent id")),
    responses(
        (status = 200, body = KnowledgeFileList),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = ["agents"]))
)]
#[get("/agents/{id}/knowledge")]
pub async fn list_knowledge_files(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Agents)?;
    let id = path_id(AGENT, &path)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    // A template is visible and has no files of this organization: an empty list.
    if queries::agents::find_visible(&mut conn, caller.org_id, id)
        .await?
        .is_none()
    {
        return Err(not_found(AGENT, &path));
    }
    let files = queries::knowledge::list_for_agent(&mut conn, caller.org_id, id).await?;
    Ok(HttpResponse::Ok().json(KnowledgeFileList {
        files: files.into_iter().map(KnowledgeFileView::from).collect(),
    }))
}

/// Read one knowledge file: its status, and `error_message` when it failed.
#[utoipa::path(
    tag = "agents",
    params(
        ("id" = String, Path, description = "Agent id"),
        ("file_id" = String, Path, description = "Knowledge file id"),
    ),
    responses(
        (status = 200, body = KnowledgeFileEnvelope),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, description = "Agent or file not found (another organization's included)", body = ErrorBody),
    ),
    security(("bearer" = ["agents"]))
)]
#[get("/agents/{id}/knowledge/{file_id}")]
pub async fn get_knowledge_file(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Agents)?;
    let (agent_raw, file_raw) = path.into_inner();
    let agent_id = path_id(AGENT, &agent_raw)?;
    let file_id = path_id(FILE, &file_raw)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let file = queries::knowledge::find_for_org(&mut conn, caller.org_id, agent_id, file_id)
        .await?
        .ok_or_else(|| not_found(FILE, &file_raw))?;
    Ok(HttpResponse::Ok().json(KnowledgeFileEnvelope { file: file.into() }))
}

/// Delete a knowledge file, its chunks and its stored bytes.
#[utoipa::path(
    tag = "agents",
    params(
        ("id" = String, Path, description = "Agent id"),
        ("file_id" = String, Path, description = "Knowledge file id"),
    ),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = ["agents"]))
)]
#[delete("/agents/{id}/knowledge/{file_id}")]
pub async fn delete_knowledge_file(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Agents)?;
    let (agent_raw, file_raw) = path.into_inner();
    let agent_id = path_id(AGENT, &agent_raw)?;
    let file_id = path_id(FILE, &file_raw)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let file = queries::knowledge::delete(&mut conn, caller.org_id, agent_id, file_id)
        .await?
        .ok_or_else(|| not_found(FILE, &file_raw))?;
    drop(conn);
    // The row (and its chunks) is gone; bytes left by a storage failure are
    // unreachable and only logged.
    if let Err(err) = state
        .store
        .delete_prefix(&storage_prefix(file.org_id, file.id))
        .await
    {
        tracing::warn!(file.id = %file.id, error = %err, "deleting a knowledge file's bytes failed");
    }
    Ok(HttpResponse::NoContent().finish())
}
