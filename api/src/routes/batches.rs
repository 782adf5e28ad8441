//! OpenAI's Batch API (`client.batches`): create from an uploaded JSONL
//! file (validated line by line: the first bad line is a 400 naming it),
//! read, list and cancel. The lines run on the workers (`--tools batch`);
//! the scheduler ends batches. Scope `chat`; another organization's batch
//! is not found.

use std::collections::HashMap;

use actix_web::{HttpResponse, get, post, web};
use serde_json::{Map, Value};
use unigen_core::domain::Scope;
use unigen_db::{DbError, queries};
use unigen_jobs::batches::{self as logic, BatchError};

use super::batches_docs::{BatchCreateRequest, BatchList, BatchObject};
use super::openai_files::page;
use super::params::{json_body, query_limit};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

impl From<BatchError> for ApiError {
    fn from(err: BatchError) -> Self {
        match err {
            BatchError::Invalid { param, message } => ApiError::InvalidField {
                param: param.to_owned(),
                message,
            },
            BatchError::NotFound(message) => ApiError::NotFound(message),
            BatchError::Conflict(message) => ApiError::JobFinished(message),
            BatchError::TooLarge(max) => ApiError::PayloadTooLarge(max as usize),
            BatchError::Db(err) => err.into(),
            BatchError::Storage(err) => ApiError::Internal(err.into()),
        }
    }
}

/// Create a batch from an input file (purpose `batch`).
#[utoipa::path(
    tag = "batches",
    request_body = BatchCreateRequest,
    responses(
        (status = 200, description = "The batch, `in_progress` (its input was validated on creation)", body = BatchObject),
        (status = 400, description = "`invalid_request`: a bad field (`param` names it), or a bad input file: the message names its first bad line (`line 7: ...`), `param` is `input_file_id`", body = ErrorBody),
        (status = 404, description = "`input_file_id` names no file of the organization", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[post("/batches")]
pub async fn create_batch(
    state: web::Data<AppState>,
    caller: Caller,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Chat)?;
    let body: Map<String, Value> = json_body(&body)?;
    let request = logic::parse_create(&body)?;
    let batch = logic::create(
        &state.pool,
        state.store.as_ref(),
        caller.org_id,
        Some(caller.key_id),
        &request,
        chrono::Utc::now(),
    )
    .await?;
    Ok(HttpResponse::Ok().json(logic::batch_object(&batch, None)))
}

/// Read a batch (its request counts as they stand).
#[utoipa::path(
    tag = "batches",
    params(("id" = String, Path, description = "Batch id (`batch_...`)")),
    responses(
        (status = 200, body = BatchObject),
        (status = 404, description = "No such batch (another organization's included)", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[get("/batches/{id}")]
pub async fn get_batch(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Chat)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let batch = queries::batches::find(&mut conn, caller.org_id, &path)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("batch {} not found", path.as_str())))?;
    Ok(HttpResponse::Ok().json(logic::present(&mut conn, &batch).await?))
}

/// List the organization's batches, newest first.
#[utoipa::path(
    tag = "batches",
    params(
        ("after" = Option<String>, Query, description = "The last id of the previous page"),
        ("limit" = Option<i64>, Query, description = "1 to 100 (default 20)"),
    ),
    responses(
        (status = 200, body = BatchList),
        (status = 400, description = "`invalid_request`: a bad `limit`", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[get("/batches")]
pub async fn list_batches(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Chat)?;
    let limit = query_limit(&query, 20, 100)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let mut rows = queries::batches::list(
        &mut conn,
        caller.org_id,
        query.get("after").map(String::as_str),
        limit,
    )
    .await?;
    let has_more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let mut data = Vec::with_capacity(rows.len());
    for batch in &rows {
        data.push(logic::present(&mut conn, batch).await?);
    }
    Ok(HttpResponse::Ok().json(page(data, has_more)))
}

/// Cancel a batch: `cancelling` at once (its unstarted requests never run
/// and are not charged), `cancelled` once its running requests finish.
#[utoipa::path(
    tag = "batches",
    params(("id" = String, Path, description = "Batch id (`batch_...`)")),
    responses(
        (status = 200, description = "The batch, `cancelling`", body = BatchObject),
        (status = 400, description = "`job_finished`: the batch has ended (or is finalizing)", body = ErrorBody),
        (status = 404, description = "No such batch (another organization's included)", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[post("/batches/{id}/cancel")]
pub async fn cancel_batch(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Chat)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let batch = logic::cancel(&mut conn, caller.org_id, &path).await?;
    Ok(HttpResponse::Ok().json(logic::present(&mut conn, &batch).await?))
}
