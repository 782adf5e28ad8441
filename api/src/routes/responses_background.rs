//! Background responses (`POST /responses` with `background: true`): each
//! is a job of the `responses` tool on the job pipeline, so it is listed by
//! `GET /jobs`, runs on a worker consuming `responses`, survives a worker's
//! death like any job, and is cancelled like one. The client polls it with
//! `GET /responses/{id}` and cancels it with `/cancel`.
//!
//! The chat hold is taken when the job is submitted (a 402 then, not a
//! failed job later) and settled with the tokens of the answer.

use actix_web::HttpResponse;
use serde_json::{Map, Value, json};
use unigen_core::config::ModelEntry;
use unigen_core::domain::{Scope, Tool};
use unigen_db::billing::{Bucket, Refusal, chat_hold};
use unigen_db::models::Job;
use unigen_db::queries::jobs::CancelOutcome;
use unigen_db::queries::responses::StoredResponse;
use unigen_db::{DbError, queries};
use unigen_jobs::{NewJobRequest, SubmitError};
use unigen_protocols::responses::background::{self, BackgroundJob};
use unigen_protocols::responses::output::Head;
use unigen_protocols::responses::{Ids, parse_request};
use unigen_providers::chat::ChatParams;

use super::responses_continued::invalid;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::metering::ConcurrencySlot;
use crate::state::AppState;

/// A background response's request, checked whole by the caller (the
/// bridge, the model, `previous_response_id`): submitted as a job, and
/// answered at once `queued`.
pub async fn create(
    state: &AppState,
    caller: &Caller,
    mut request: Map<String, Value>,
    model: &ModelEntry,
    params: &ChatParams,
    prompt_tokens: u32,
) -> Result<HttpResponse, ApiError> {
    let _slot = ConcurrencySlot::acquire(state, caller).await?;
    let choices = params.n.max(1);
    let mut max_tokens = params.max_tokens;
    let job = loop {
        let (estimate, _) = chat_hold(prompt_tokens, max_tokens, choices, model);
        let submitted = state
            .submitter
            .submit(NewJobRequest {
                org_id: caller.org_id,
                api_key_id: caller.key_id,
                tool: Tool::Responses,
                model,
                input_params: json!(BackgroundJob {
                    request: request.clone()
                }),
                estimate,
                cancel_after: None,
                idempotency: caller.effects.claim(),
            })
            .await;
        match submitted {
            Ok(job) => break job,
            // As in place: without an explicit `max_output_tokens`, the
            // answer is capped at what the chat quota still holds (the cap
            // travels with the request, and the response shows it).
            Err(SubmitError::Refused(Refusal::Quota { bucket, remaining }))
                if !params.max_tokens_explicit
                    && max_tokens == params.max_tokens
                    && bucket == Bucket::ChatTokens.as_str() =>
            {
                let multiplier = Bucket::ChatTokens.multiplier(model.tier);
                let fits = ((remaining / multiplier).floor() as i64 - i64::from(prompt_tokens))
                    / i64::from(choices);
                if fits < 1 {
                    return Err(ApiError::Quota(Refusal::Quota { bucket, remaining }));
                }
                max_tokens = fits as u32;
                request.insert("max_output_tokens".to_owned(), json!(max_tokens));
            }
            Err(err) => return Err(err.into()),
        }
    };
    state.metrics.job_submitted(Tool::Responses);
    tracing::info!(job_id = %job.id, tool = %Tool::Responses, "background response submitted");
    let queued = unanswered(&job);
    caller
        .effects
        .job_submitted(|| serde_json::to_vec(&queued).ok().map(Into::into));
    Ok(HttpResponse::Ok().json(queued))
}

/// The organization's background response `id`: its job (a response
/// answered in its request has none).
async fn job_of(state: &AppState, caller: &Caller, id: &str) -> Result<Option<Job>, ApiError> {
    let Some(job_id) = background::job_id_of(id) else {
        return Ok(None);
    };
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let job = queries::jobs::find_for_org(&mut conn, caller.org_id, job_id).await?;
    Ok(job.filter(|job| job.tool == Tool::Responses.as_str()))
}

/// A response as the client reads it: stored, or a background response's
/// current state (its job's status until answered; a completed job's answer
/// with its charge).
pub async fn current(
    state: &AppState,
    caller: &Caller,
    id: &str,
    stored: Option<StoredResponse>,
) -> Result<Value, ApiError> {
    caller.require(Scope::Chat)?;
    let stored = match stored {
        Some(stored) if stored.body["background"] != json!(true) => return Ok(stored.body),
        stored => stored,
    };
    match (job_of(state, caller, id).await?, stored) {
        // The worker stores the answer before it completes the job: a
        // completed job without one was deleted (or has expired).
        (Some(job), Some(stored)) if job.status == "completed" => {
            Ok(background::with_charge(stored.body, job.usage.as_ref()))
        }
        (Some(job), _) if job.status != "completed" => Ok(unanswered(&job)),
        // The job is gone (its retention), the answer is not.
        (None, Some(stored)) => Ok(stored.body),
        _ => Err(not_found(id)),
    }
}

/// The response object of a job without an answer (queued, in progress,
/// failed or cancelled).
fn unanswered(job: &Job) -> Value {
    let head = Head {
        id: background::response_id(job.id),
        created_at: job.created_at.timestamp(),
        model: job.model.clone(),
    };
    let echo = request_of(job)
        .and_then(|request| parse_request(&request).ok())
        .map(|request| request.echo())
        .unwrap_or_default();
    background::unanswered(&head, &echo, &job.status, job.error_message.as_deref())
}

fn request_of(job: &Job) -> Option<Map<String, Value>> {
    serde_json::from_value::<BackgroundJob>(job.input_params.clone())
        .ok()
        .map(|job| job.request)
}

/// Cancels a background response that is queued or in progress; its hold
/// goes back and nothing is charged. One already cancelled is answered as
/// it is; one that finished otherwise is a 400.
pub async fn cancel(state: &AppState, caller: &Caller, id: &str) -> Result<Value, ApiError> {
    caller.require(Scope::Chat)?;
    let Some(job) = job_of(state, caller, id).await? else {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        return match queries::responses::find(&mut conn, caller.org_id, id).await? {
            Some(stored) => Err(ApiError::BadRequest(format!(
                "only background responses can be cancelled; response {id} was answered in its request (status {})",
                stored.status
            ))),
            None => Err(not_found(id)),
        };
    };
    let outcome = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        unigen_jobs::cancel(&mut conn, caller.org_id, job.id).await?
    };
    match outcome {
        CancelOutcome::Cancelled(cancelled) => {
            // Wakes the worker running it (it aborts) and any waiter.
            state.notifier.job_changed(job.id);
            Ok(unanswered(&cancelled))
        }
        CancelOutcome::AlreadyFinished(status) if status.as_str() == "cancelled" => {
            Ok(unanswered(&job))
        }
        CancelOutcome::AlreadyFinished(status) => Err(ApiError::BadRequest(format!(
            "response {id} cannot be cancelled: it is already {}",
            background::status_of_job(status.as_str())
        ))),
        CancelOutcome::NotFound => Err(not_found(id)),
    }
}

/// The input items of a background response not answered yet (minted as
/// the worker mints them, from the job's id); `None`: not a background
/// response of the organization.
pub async fn input_items(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Option<Vec<Value>>, ApiError> {
    let Some(job) = job_of(state, caller, id).await? else {
        return Ok(None);
    };
    let Some(request) = request_of(&job) else {
        return Ok(Some(Vec::new()));
    };
    let request = parse_request(&request).map_err(invalid)?;
    let mut ids = Ids::new(background::unique_of(job.id));
    Ok(Some(request.input_items(&mut ids).map_err(invalid)?))
}

/// Whether `id` is a background response of the organization not answered
/// yet (nothing stored to delete).
pub async fn unanswered_status(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Option<&'static str>, ApiError> {
    Ok(job_of(state, caller, id)
        .await?
        .map(|job| background::status_of_job(&job.status)))
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("response {id} not found"))
}
