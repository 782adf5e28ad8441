//! Stored responses: read, delete, cancel (background responses only) and
//! list their input items. Scope `chat`; another organization's response
//! is not found. A background response is read from its job until it is
//! answered (`responses_background`).

use std::collections::HashMap;

use actix_web::{HttpResponse, delete, get, post, web};
use serde_json::{Value, json};
use unigen_core::domain::{ModelCategory, Scope};
use unigen_db::queries::responses::StoredResponse;
use unigen_db::{DbError, queries};
use unigen_protocols::responses::list;

use super::responses_background;
use super::responses_continued::invalid;
use super::responses_docs::{ResponseDeleted, ResponseItemList, ResponseObject};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

async fn stored(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Option<StoredResponse>, ApiError> {
    caller.require(Scope::Chat)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    Ok(queries::responses::find(&mut conn, caller.org_id, id).await?)
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("response {id} not found"))
}

/// Read a stored response.
#[utoipa::path(
    tag = "responses",
    params(("id" = String, Path, description = "Response id (`resp_...`)")),
    responses(
        (status = 200, body = ResponseObject),
        (status = 400, description = "`stream=true`: stored responses are read whole", body = ErrorBody),
        (status = 404, description = "No stored response (another organization's included)", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[get("/responses/{id}")]
pub async fn get_response(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    if query.get("stream").is_some_and(|s| s == "true") {
        return Err(ApiError::InvalidField {
            param: "stream".into(),
            message: "stream: a stored response is read whole; retrieve it without stream=true"
                .into(),
        });
    }
    let stored = stored(&state, &caller, &path).await?;
    let response = responses_background::current(&state, &caller, &path, stored).await?;
    Ok(HttpResponse::Ok().json(response))
}

/// Delete a stored response.
#[utoipa::path(
    tag = "responses",
    params(("id" = String, Path, description = "Response id (`resp_...`)")),
    responses(
        (status = 200, body = ResponseDeleted),
        (status = 404, description = "No stored response (another organization's included)", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[delete("/responses/{id}")]
pub async fn delete_response(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Chat)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let Some(deleted) = queries::responses::delete(&mut conn, caller.org_id, &path).await? else {
        drop(conn);
        return Err(
            match responses_background::unanswered_status(&state, &caller, &path).await? {
                Some(status @ ("queued" | "in_progress")) => ApiError::BadRequest(format!(
                    "response {path} has no answer to delete yet (it is {status}); cancel it with POST /responses/{path}/cancel"
                )),
                Some(status) => ApiError::BadRequest(format!(
                    "response {path} has no answer to delete: it is {status}"
                )),
                None => not_found(&path),
            },
        );
    };
    drop(conn);
    // A response a native upstream holds is deleted there too, when that
    // upstream still serves the model (it keeps it for its own retention
    // otherwise). Ours is gone already: a failure there is logged only.
    if let Some(upstream) = &deleted.upstream
        && let Ok(model) = state
            .catalogue
            .resolve(Some(&deleted.model), ModelCategory::Chat)
        && let Err(err) = state
            .chat
            .delete_upstream_response(model, upstream, &deleted.id)
            .await
    {
        tracing::warn!(error = %err, upstream = %upstream, "deleting a response upstream failed");
    }
    Ok(
        HttpResponse::Ok()
            .json(json!({"id": *path, "object": "response.deleted", "deleted": true})),
    )
}

/// Cancel a background response that is queued or in progress: nothing is
/// charged for it. A response answered in its request, or one that already
/// finished, is a 400.
#[utoipa::path(
    tag = "responses",
    params(("id" = String, Path, description = "Response id (`resp_...`)")),
    responses(
        (status = 200, description = "The response, `cancelled`", body = ResponseObject),
        (status = 400, description = "Not a background response (answered in its request), or it already completed or failed", body = ErrorBody),
        (status = 404, description = "No response (another organization's included)", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[post("/responses/{id}/cancel")]
pub async fn cancel_response(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let response = responses_background::cancel(&state, &caller, &path).await?;
    Ok(HttpResponse::Ok().json(response))
}

/// List a stored response's input items (newest first by default).
#[utoipa::path(
    tag = "responses",
    params(
        ("id" = String, Path, description = "Response id (`resp_...`)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Items per page (default 20)"),
        ("order" = Option<String>, Query, pattern = "^(asc|desc)$", description = "`desc` (default) or `asc`"),
        ("after" = Option<String>, Query, description = "An item id: the page starts after it"),
    ),
    responses(
        (status = 200, body = ResponseItemList),
        (status = 400, description = "An invalid `limit`, `order`, `after` or `include`", body = ErrorBody),
        (status = 404, description = "No stored response (another organization's included)", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[get("/responses/{id}/input_items")]
pub async fn list_input_items(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    query: web::Query<Vec<(String, String)>>,
) -> Result<HttpResponse, ApiError> {
    let mut order = None;
    let mut after = None;
    let mut limit = None;
    for (key, value) in query.iter() {
        match key.as_str() {
            "order" => order = Some(value.as_str()),
            "after" => after = Some(value.as_str()),
            "limit" => limit = Some(value.as_str()),
            "include" | "include[]" => {
                return Err(ApiError::InvalidField {
                    param: "include".into(),
                    message: format!("include: `{value}` is not supported by this service"),
                });
            }
            _ => {}
        }
    }
    let items = match stored(&state, &caller, &path).await? {
        Some(response) => match response.input_items {
            Value::Array(items) => items,
            _ => Vec::new(),
        },
        None => responses_background::input_items(&state, &caller, &path)
            .await?
            .ok_or_else(|| not_found(&path))?,
    };
    let items = items.as_slice();
    let page = list::page(items, order, after, limit).map_err(invalid)?;
    Ok(HttpResponse::Ok().json(page))
}
