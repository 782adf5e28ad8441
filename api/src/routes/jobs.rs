use std::collections::HashMap;

use actix_web::{HttpResponse, delete, get, web};
use chrono::Utc;
use unigen_core::domain::{Scope, Tool};
use unigen_db::queries::jobs::{CancelOutcome, JobFilter};
use unigen_db::{DbError, queries};

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::{not_found, path_id, query_bool, query_limit};
use crate::state::AppState;
use crate::views::{CancelResponse, JobList, JobView};
use crate::wait;

pub(super) const JOB_SCOPES: [Scope; 2] = [Scope::Jobs, Scope::Usage];

const KIND: &str = "job";

/// List the organization's jobs, newest first.
#[utoipa::path(
    tag = "jobs",
    params(
        ("tool" = Option<String>, Query, pattern = "^(image|image_edit|video|music|tts|stt|responses)$", description = "image, image_edit, video, music, tts, stt or responses (background Responses API requests)"),
        ("pending" = Option<bool>, Query, description = "Only pending and processing jobs (default false)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "1 to 100, default 20"),
    ),
    responses(
        (status = 200, body = JobList),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "API key does not have required scope: jobs (or usage)", body = ErrorBody),
    ),
    security(("bearer" = ["jobs", "usage"]))
)]
#[get("/jobs")]
pub async fn list_jobs(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    caller.require_any(&JOB_SCOPES)?;
    let tool = match query.get("tool") {
        None => None,
        Some(raw) => Some(
            raw.parse::<Tool>()
                .map_err(|e| ApiError::BadRequest(format!("tool: {e}")))?,
        ),
    };
    let limit = query_limit(&query, 20, 100)?;
    let filter = JobFilter {
        tool,
        active_only: query_bool(&query, "pending", false)?,
        limit,
    };
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let jobs = queries::jobs::list_for_org(&mut conn, caller.org_id, filter).await?;
    let now = Utc::now();
    let jobs = jobs
        .iter()
        .map(|job| JobView::new(job, &state.signer, now))
        .collect();
    Ok(HttpResponse::Ok().json(JobList { jobs }))
}

/// Read a job; `poll=true` waits up to 30 s for it to finish.
#[utoipa::path(
    tag = "jobs",
    params(
        ("id" = String, Path, description = "Job id"),
        ("poll" = Option<bool>, Query, description = "Wait up to 30 seconds for completion"),
    ),
    responses(
        (status = 200, body = JobView),
        (status = 400, description = "`poll` is not true or false", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, description = "Unknown or expired job (another organization's job included)", body = ErrorBody),
    ),
    security(("bearer" = ["jobs", "usage"]))
)]
#[get("/jobs/{id}")]
pub async fn get_job(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    caller.require_any(&JOB_SCOPES)?;
    let id = path_id(KIND, &path)?;
    let poll = query_bool(&query, "poll", false)?;
    let job = if poll {
        wait::until_finished(&state, caller.org_id, id, state.limits.long_poll).await?
    } else {
        // Boxed, so that a parked poll does not reserve this read's size.
        Box::pin(async {
            let mut conn = state.pool.get().await.map_err(DbError::from)?;
            queries::jobs::find_for_org(&mut conn, caller.org_id, id).await
        })
        .await?
        .ok_or_else(|| not_found(KIND, &path))?
    };
    Ok(HttpResponse::Ok().json(JobView::new(&job, &state.signer, Utc::now())))
}

/// Cancel a pending or processing job; a cancelled job consumes nothing.
#[utoipa::path(
    tag = "jobs",
    params(("id" = String, Path, description = "Job id")),
    responses(
        (status = 200, body = CancelResponse),
        (status = 400, description = "The job already finished", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = ["jobs", "usage"]))
)]
#[delete("/jobs/{id}")]
pub async fn cancel_job(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require_any(&JOB_SCOPES)?;
    let id = path_id(KIND, &path)?;
    let outcome = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        unigen_jobs::cancel(&mut conn, caller.org_id, id).await?
    };
    match outcome {
        CancelOutcome::Cancelled(_) => {
            // Wakes waiters and the worker running it.
            state.notifier.job_changed(id);
            Ok(HttpResponse::Ok().json(CancelResponse { success: true }))
        }
        CancelOutcome::AlreadyFinished(status) => Err(ApiError::JobFinished(format!(
            "job cannot be cancelled: it is already {status}"
        ))),
        CancelOutcome::NotFound => Err(not_found(KIND, &path)),
    }
}
