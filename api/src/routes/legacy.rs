//! The legacy image and logo interface. Every answer, errors included, is the
//! envelope `{success, data, error, meta}`:
//! - `data`: `{images: [{url, width, height, seed}], model, resolved_model,
//!   prompt, job_id}` (or `{job_id, status}` for `async=true`);
//! - `error`: `{code, message, field}` or null;
//! - `meta`: `{request_id, created, processing_ms, credits_used}`.

use std::collections::HashMap;
use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, HttpResponseBuilder, ResponseError, post, web};
use serde_json::{Value, json};
use unigen_core::domain::{Scope, Tool};
use unigen_core::params::image::ImageParams;
use unigen_core::params::legacy::{
    LegacyExtras, LegacyGenerateRequest, LegacyLogoRequest, LegacyRequest,
};
use unigen_db::models::Job;

use super::delivery::{CANCEL_AFTER_DOC, PREFER_DOC};
use super::generation::{self, Generation, Outcome, Timing, random_seed};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::routes::params::json_body;
use crate::state::AppState;

fn envelope_error(err: &ApiError, started: Instant) -> HttpResponse {
    let status = err.status_code();
    let (code, field) = match err {
        ApiError::Validation(v) => ("invalid_request", Some(v.field.to_owned())),
        ApiError::InvalidField { param, .. } => ("invalid_request", Some(param.clone())),
        other => (other.code(), None),
    };
    if let ApiError::Internal(cause) = err {
        // The cause goes to the log; the client reads "internal error".
        tracing::error!(error = format!("{cause:#}"), "legacy request failed");
    }
    let message = err.to_string();
    HttpResponse::build(status).json(json!({
        "success": false,
        "data": null,
        "error": { "code": code, "message": message, "field": field },
        "meta": { "request_id": uuid::Uuid::now_v7(), "processing_ms": started.elapsed().as_millis() as u64 },
    }))
}

fn envelope_ok(
    mut ok: HttpResponseBuilder,
    job: &Job,
    data: Value,
    started: Instant,
) -> HttpResponse {
    ok.json(json!({
        "success": true,
        "data": data,
        "error": null,
        "meta": {
            "request_id": job.id,
            "created": job.created_at.timestamp(),
            "processing_ms": started.elapsed().as_millis() as u64,
            "credits_used": job.actual_credits.unwrap_or(0),
        },
    }))
}

async fn submit(
    state: &AppState,
    caller: &Caller,
    timing: Timing,
    params: ImageParams,
    extras: LegacyExtras,
    started: Instant,
) -> Result<HttpResponse, ApiError> {
    let model_id = state
        .legacy_models
        .get(&extras.legacy_model)
        .ok_or_else(|| {
            ApiError::internal(anyhow::anyhow!("no mapping for {}", extras.legacy_model))
        })?;
    let model = state.catalogue.get(model_id).ok_or_else(|| {
        ApiError::internal(anyhow::anyhow!("legacy model maps to unknown {model_id}"))
    })?;
    let mut stored = serde_json::to_value(&params).map_err(ApiError::internal)?;
    stored["legacy"] = serde_json::to_value(&extras).map_err(ApiError::internal)?;
    let generation = Generation {
        tool: Tool::Image,
        model,
        estimated_credits: model.credits_per_unit * i64::from(params.n),
        quota_units: f64::from(params.n),
        params: stored,
        timing,
        what: "image generation",
    };
    let answer = generation::run(state, caller, generation).await?;
    let ok = answer.respond(StatusCode::OK);
    let job = match answer.outcome {
        Outcome::Completed(job) => job,
        Outcome::Accepted(ref job) | Outcome::StillRunning(ref job) => {
            return Ok(answer.respond(StatusCode::ACCEPTED).json(json!({
                "success": true,
                "data": { "job_id": job.id, "status": job.status },
                "error": null,
                "meta": {
                    "request_id": job.id,
                    "created": job.created_at.timestamp(),
                    "processing_ms": started.elapsed().as_millis() as u64,
                },
            })));
        }
    };
    let output = generation::presented_output(state, &job)?;
    let images: Vec<Value> = output["images"]
        .as_array()
        .ok_or_else(|| generation::malformed(&job))?
        .iter()
        .enumerate()
        .map(|(i, image)| {
            json!({ "url": image["url"], "width": image["width"], "height": image["height"], "seed": params.seed.wrapping_add(i as u64) })
        })
        .collect();
    let data = json!({
        "images": images,
        "model": extras.legacy_model,
        "resolved_model": job.model,
        "prompt": params.prompt,
        "job_id": job.id,
    });
    Ok(envelope_ok(ok, &job, data, started))
}

/// Auth, then parse and validate, then submit; every outcome in the envelope.
async fn handle<R: LegacyRequest>(
    state: &AppState,
    caller: Result<Caller, ApiError>,
    http: &HttpRequest,
    query: &HashMap<String, String>,
    body: &[u8],
) -> HttpResponse {
    let started = Instant::now();
    let result = async {
        let caller = caller?;
        caller.require(Scope::Image)?;
        let timing = Timing::read(http, query, false)?;
        let request: R = json_body(body)?;
        let (params, extras) = request.validate(random_seed())?;
        submit(state, &caller, timing, params, extras, started).await
    }
    .await;
    result.unwrap_or_else(|err| envelope_error(&err, started))
}

/// Legacy image generation (envelope response).
#[utoipa::path(
    tag = "legacy",
    request_body = LegacyGenerateRequest,
    params(
        ("async" = Option<bool>, Query, description = "Answer at once with the job id (default false); given, it decides alone: `Prefer` is then ignored"),
        ("Prefer" = Option<String>, Header, description = PREFER_DOC),
        ("Cancel-After" = Option<String>, Header, description = CANCEL_AFTER_DOC),
    ),
    responses(
        (status = 200, description = "The images, in the envelope `{success: true, data, error: null, meta}`", body = crate::openapi::schemas::LegacyImageEnvelope, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `wait=N` (N as applied, at most 60)"))),
        (status = 202, description = "The job is not finished (`async=true`, or the sync wait limit passed): poll `GET /jobs/{job_id}`. With `Prefer: respond-async`, at once; with `Prefer: wait=N`, once N seconds passed: the async creation body, as for `async=true`", body = crate::openapi::schemas::LegacyAcceptedEnvelope, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `respond-async`, or `wait=N` when the wait passed before the job finished"))),
        (status = 400, description = "`invalid_request`: an invalid field (`error.field` names it), or an invalid `async`; a malformed `Cancel-After`, or one over 24 hours (`param`: `Cancel-After`)", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 401, description = "`unauthorized`: invalid or missing API key, or the key has expired", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 402, description = "`quota_exceeded`: the image generation quota, the credits or the overage hard limit", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 403, description = "`forbidden`: the key lacks scope `image`, or the organization is suspended", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 408, description = "`deadline_exceeded`: the job was cancelled at its `Cancel-After` deadline while the request waited (the message names the job); nothing is charged", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 409, description = "`job_cancelled`: the job was cancelled while the request waited", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit (rejected before the handler: the JSON error body, not the envelope)", body = crate::error::ErrorBody),
        (status = 429, description = "`rate_limited`: the key's request rate or the plan's concurrent requests are used up (no `Retry-After` here)", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 500, description = "`generation_failed` or `server_error`", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 503, description = "`service_unavailable`: the database is unavailable; retry shortly", body = crate::openapi::schemas::LegacyErrorEnvelope),
    ),
    security(("bearer" = ["image"]))
)]
#[post("/ai-image/generate")]
pub async fn legacy_generate(
    state: web::Data<AppState>,
    caller: Result<Caller, ApiError>,
    http: HttpRequest,
    query: web::Query<HashMap<String, String>>,
    body: web::Bytes,
) -> HttpResponse {
    handle::<LegacyGenerateRequest>(&state, caller, &http, &query, &body).await
}

/// Legacy logo generation (envelope response): an emblem and the brand name.
#[utoipa::path(
    tag = "legacy",
    request_body = LegacyLogoRequest,
    params(
        ("async" = Option<bool>, Query, description = "Answer at once with the job id (default false); given, it decides alone: `Prefer` is then ignored"),
        ("Prefer" = Option<String>, Header, description = PREFER_DOC),
        ("Cancel-After" = Option<String>, Header, description = CANCEL_AFTER_DOC),
    ),
    responses(
        (status = 200, description = "The logo, in the envelope of /ai-image/generate", body = crate::openapi::schemas::LegacyImageEnvelope, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `wait=N` (N as applied, at most 60)"))),
        (status = 202, description = "The job is not finished (`async=true`, or the sync wait limit passed): poll `GET /jobs/{job_id}`. With `Prefer: respond-async`, at once; with `Prefer: wait=N`, once N seconds passed: the async creation body, as for `async=true`", body = crate::openapi::schemas::LegacyAcceptedEnvelope, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `respond-async`, or `wait=N` when the wait passed before the job finished"))),
        (status = 400, description = "`invalid_request`: an invalid field (`error.field` names it), or an invalid `async`; a malformed `Cancel-After`, or one over 24 hours (`param`: `Cancel-After`)", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 401, description = "`unauthorized`: invalid or missing API key, or the key has expired", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 402, description = "`quota_exceeded`: the image generation quota, the credits or the overage hard limit", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 403, description = "`forbidden`: the key lacks scope `image`, or the organization is suspended", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 408, description = "`deadline_exceeded`: the job was cancelled at its `Cancel-After` deadline while the request waited (the message names the job); nothing is charged", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 409, description = "`job_cancelled`: the job was cancelled while the request waited", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit (rejected before the handler: the JSON error body, not the envelope)", body = crate::error::ErrorBody),
        (status = 429, description = "`rate_limited`: the key's request rate or the plan's concurrent requests are used up (no `Retry-After` here)", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 500, description = "`generation_failed` or `server_error`", body = crate::openapi::schemas::LegacyErrorEnvelope),
        (status = 503, description = "`service_unavailable`: the database is unavailable; retry shortly", body = crate::openapi::schemas::LegacyErrorEnvelope),
    ),
    security(("bearer" = ["image"]))
)]
#[post("/ai-image/logo")]
pub async fn legacy_logo(
    state: web::Data<AppState>,
    caller: Result<Caller, ApiError>,
    http: HttpRequest,
    query: web::Query<HashMap<String, String>>,
    body: web::Bytes,
) -> HttpResponse {
    handle::<LegacyLogoRequest>(&state, caller, &http, &query, &body).await
}
