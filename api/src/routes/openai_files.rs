//! OpenAI's Files API (`client.files`): upload (multipart, streamed to the
//! file store, never whole in memory), list, read, read the content
//! (streamed) and delete. Scope `chat` (files feed batches of chat,
//! embeddings and responses requests); another organization's file is not
//! found. Not the signed output URLs at the root `/files/{key}`.

use std::collections::HashMap;

use actix_multipart::Multipart;
use actix_web::http::header;
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, delete, get, post, web};
use futures_util::{StreamExt, TryStreamExt};
use serde_json::{Value, json};
use unigen_core::domain::Scope;
use unigen_core::storage::StorageError;
use unigen_db::queries::files::FileRow;
use unigen_db::{DbError, queries};
use unigen_jobs::batches::{self as logic, BatchError};

use super::batches_docs::{FileDeleted, FileList, FileObject, FileUploadForm};
use super::params::query_limit;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// The upload route, as the OpenAPI document names it.
pub const FILES_UPLOAD_TEMPLATE: &str = "/api/v1/files";
/// Room for the multipart framing and the `purpose` field.
pub const FILES_MULTIPART_OVERHEAD: u64 = 64 * 1024;
/// The longest text field read (`purpose`).
const MAX_TEXT: usize = 1024;

/// Upload a file (`purpose`: `batch` or `user_data`).
#[utoipa::path(
    tag = "files",
    request_body(content = FileUploadForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "The stored file", body = FileObject),
        (status = 400, description = "`invalid_request`: no `file`, or `purpose` not `batch` / `user_data` (`param`: `purpose`)", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the file is larger than `batches.max_file_bytes` (200 MB by default)", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[post("/files")]
pub async fn create_file(
    state: web::Data<AppState>,
    caller: Caller,
    request: HttpRequest,
    mut multipart: Multipart,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Chat)?;
    let max_file = state.limits.max_file_bytes;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > max_file + FILES_MULTIPART_OVERHEAD) {
        return Err(ApiError::PayloadTooLarge(max_file as usize));
    }
    let mut purpose: Option<String> = None;
    let mut stored: Option<(FileRow, String)> = None;
    while let Some(field) = multipart.next().await {
        let mut field = field.map_err(malformed)?;
        match field.name() {
            Some("purpose") => {
                let mut text = Vec::new();
                while let Some(chunk) = field.next().await {
                    let chunk = chunk.map_err(malformed)?;
                    if text.len() + chunk.len() > MAX_TEXT {
                        return Err(ApiError::InvalidField {
                            param: "purpose".into(),
                            message: "`purpose` is too long".into(),
                        });
                    }
                    text.extend_from_slice(&chunk);
                }
                let text = String::from_utf8_lossy(&text).trim().to_owned();
                // Checked as soon as it is known: a bad purpose stores nothing.
                logic::check_purpose(Some(&text)).map_err(ApiError::from)?;
                purpose = Some(text);
            }
            Some("file") if stored.is_none() => {
                let filename = field
                    .content_disposition()
                    .and_then(|d| d.get_filename())
                    .map(display_name)
                    .unwrap_or_else(|| "file".to_owned());
                // The purpose decides nothing about the bytes: when it comes
                // after the file, the file is stored first and kept only if
                // the purpose is valid.
                let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, StorageError>>(4);
                let upload = logic::upload(
                    &state.pool,
                    state.store.as_ref(),
                    caller.org_id,
                    purpose.as_deref().unwrap_or("batch"),
                    &filename,
                    logic::receiver_stream(rx),
                    max_file,
                );
                let feed = async move {
                    while let Some(chunk) = field.next().await {
                        let item = chunk.map_err(|e| {
                            StorageError::Io(std::io::Error::other(format!(
                                "the upload could not be read: {e}"
                            )))
                        });
                        let failed = item.is_err();
                        if tx.send(item).await.is_err() || failed {
                            break;
                        }
                    }
                };
                let (row, ()) = futures_util::join!(upload, feed);
                let row = match row {
                    Ok(row) => row,
                    Err(BatchError::TooLarge(max)) => {
                        return Err(ApiError::PayloadTooLarge(max as usize));
                    }
                    Err(err) => return Err(err.into()),
                };
                stored = Some((row, filename));
            }
            _ => {
                // Other fields are read and dropped (bounded by the body limit).
                while let Some(chunk) = field.next().await {
                    chunk.map_err(malformed)?;
                }
            }
        }
    }
    let Some((row, _)) = stored else {
        return Err(ApiError::InvalidField {
            param: "file".into(),
            message: "`file` is required".into(),
        });
    };
    let purpose = match logic::check_purpose(purpose.as_deref()) {
        Ok(purpose) => purpose,
        Err(err) => {
            forget(&state, &caller, &row).await;
            return Err(err.into());
        }
    };
    let row = if row.purpose == purpose {
        row
    } else {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::files::set_purpose(&mut conn, caller.org_id, &row.id, purpose).await?
    };
    Ok(HttpResponse::Ok().json(logic::file_object(&row)))
}

/// Removes an upload refused after it was stored.
async fn forget(state: &AppState, caller: &Caller, row: &FileRow) {
    if let Ok(mut conn) = state.pool.get().await {
        let _ = queries::files::delete(&mut conn, caller.org_id, &row.id).await;
    }
    if let Err(err) = state.store.delete(&row.storage_key).await {
        tracing::warn!(error = %err, "deleting a refused upload failed");
    }
}

fn display_name(raw: &str) -> String {
    let name = raw.rsplit(['/', '\\']).next().unwrap_or(raw);
    let name: String = name.chars().filter(|c| !c.is_control()).take(255).collect();
    if name.is_empty() {
        "file".to_owned()
    } else {
        name
    }
}

fn malformed(err: actix_multipart::MultipartError) -> ApiError {
    ApiError::InvalidField {
        param: "file".into(),
        message: format!(
            "the body must be multipart/form-data with the file in the field `file`: {err}"
        ),
    }
}

/// List the organization's files, newest first.
#[utoipa::path(
    tag = "files",
    params(
        ("purpose" = Option<String>, Query, description = "Only files of this purpose"),
        ("after" = Option<String>, Query, description = "The last id of the previous page"),
        ("limit" = Option<i64>, Query, description = "1 to 10000 (default 10000)"),
    ),
    responses(
        (status = 200, body = FileList),
        (status = 400, description = "`invalid_request`: a bad `limit`", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[get("/files")]
pub async fn list_files(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Chat)?;
    let limit = query_limit(&query, 10_000, 10_000)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let mut rows = queries::files::list(
        &mut conn,
        caller.org_id,
        query.get("purpose").map(String::as_str),
        query.get("after").map(String::as_str),
        limit,
    )
    .await?;
    let has_more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let data: Vec<Value> = rows.iter().map(logic::file_object).collect();
    Ok(HttpResponse::Ok().json(page(data, has_more)))
}

/// An OpenAI list page.
pub fn page(data: Vec<Value>, has_more: bool) -> Value {
    json!({
        "object": "list",
        "first_id": data.first().map(|d| d["id"].clone()),
        "last_id": data.last().map(|d| d["id"].clone()),
        "has_more": has_more,
        "data": data,
    })
}

async fn own_file(state: &AppState, caller: &Caller, id: &str) -> Result<FileRow, ApiError> {
    caller.require(Scope::Chat)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    queries::files::find(&mut conn, caller.org_id, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("file {id} not found")))
}

/// Read a file.
#[utoipa::path(
    tag = "files",
    params(("id" = String, Path, description = "File id (`file-...`)")),
    responses(
        (status = 200, body = FileObject),
        (status = 404, description = "No such file (another organization's included)", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[get("/files/{id}")]
pub async fn get_file(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let row = own_file(&state, &caller, &path).await?;
    Ok(HttpResponse::Ok().json(logic::file_object(&row)))
}

/// Read a file's content (streamed).
#[utoipa::path(
    tag = "files",
    params(("id" = String, Path, description = "File id (`file-...`)")),
    responses(
        (status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = String),
        (status = 404, description = "No such file (another organization's included)", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[get("/files/{id}/content")]
pub async fn get_file_content(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let row = own_file(&state, &caller, &path).await?;
    let stream = state
        .store
        .stream(&row.storage_key, 0..row.bytes as u64)
        .await
        .map_err(|e| ApiError::Internal(e.into()))?
        .ok_or_else(|| ApiError::NotFound(format!("file {} has no content", row.id)))?;
    let content_type = if row.purpose == "batch_output" || row.filename.ends_with(".jsonl") {
        "application/jsonl"
    } else {
        "application/octet-stream"
    };
    Ok(HttpResponse::Ok()
        .content_type(content_type)
        .no_chunking(row.bytes as u64)
        .streaming(stream.map_err(|e| actix_web::error::ErrorInternalServerError(e.to_string()))))
}

/// Delete a file (its bytes too).
#[utoipa::path(
    tag = "files",
    params(("id" = String, Path, description = "File id (`file-...`)")),
    responses(
        (status = 200, body = FileDeleted),
        (status = 404, description = "No such file (another organization's included)", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[delete("/files/{id}")]
pub async fn delete_file(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Chat)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let row = queries::files::delete(&mut conn, caller.org_id, &path)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("file {} not found", path.as_str())))?;
    if let Err(err) = state.store.delete(&row.storage_key).await {
        tracing::warn!(error = %err, file.id = %row.id, "deleting a file's bytes failed");
    }
    Ok(HttpResponse::Ok().json(json!({"id": row.id, "object": "file", "deleted": true})))
}
