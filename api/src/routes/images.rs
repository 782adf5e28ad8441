use std::collections::HashMap;

use actix_web::{HttpRequest, HttpResponse, post, web};
use chrono::Utc;
use unigen_core::domain::{ModelCategory, Scope, Tool};
use unigen_core::params::image::{ImageGenerationRequest, ResponseFormat};

use super::delivery::{CANCEL_AFTER_DOC, PREFER_DOC};
use super::generation::{self, Generation, Timing, random_seed};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::json_body;
use crate::state::AppState;
use crate::views::{AsyncJobCreated, ImageGenerationResponse};

/// Generate images from a prompt.
///
/// Sync by default: answers when the images are ready, or 202 with the job
/// if that takes longer than the server's wait limit. `?async=true` answers
/// at once with the job id. With `response_format` `b64_json`, each `data[]`
/// item carries the image itself (base64) instead of its URL; a job keeps URLs.
#[utoipa::path(
    tag = "images",
    request_body = ImageGenerationRequest,
    params(
        ("async" = Option<bool>, Query, description = "Answer at once with the job instead of waiting (default false); given, it decides alone: `Prefer` is then ignored"),
        ("Prefer" = Option<String>, Header, description = PREFER_DOC),
        ("Cancel-After" = Option<String>, Header, description = CANCEL_AFTER_DOC),
    ),
    responses(
        (status = 200, description = "Images generated", body = ImageGenerationResponse, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `wait=N` (N as applied, at most 60)"))),
        (status = 202, description = "Async job created (`async=true`), or the sync wait limit passed (the job itself): `JobAccepted`. With `Prefer: respond-async`, at once; with `Prefer: wait=N`, once N seconds passed: the async creation body, as for `async=true`", body = AsyncJobCreated, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `respond-async`, or `wait=N` when the wait passed before the job finished"))),
        (status = 400, description = "Invalid request (e.g. `response_format` not `url` or `b64_json`); `param` names the field; a malformed `Cancel-After`, or one over 24 hours (`param`: `Cancel-After`)", body = ErrorBody),
        (status = 401, description = "invalid or missing API key / API key has expired", body = ErrorBody),
        (status = 402, description = "`quota_exceeded`: the image generation quota, the credits or the overage hard limit", body = ErrorBody),
        (status = 403, description = "API key does not have required scope: image", body = ErrorBody),
        (status = 408, description = "`deadline_exceeded`: the job was cancelled at its `Cancel-After` deadline while the request waited (the message names the job); nothing is charged", body = ErrorBody),
        (status = 409, description = "`job_cancelled`: the job was cancelled while the request waited", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
        (status = 500, description = "`generation_failed`: the job failed; or an internal error", body = ErrorBody),
    ),
    security(("bearer" = ["image"]))
)]
#[post("/images/generations")]
pub async fn create_image_generation(
    state: web::Data<AppState>,
    caller: Caller,
    http: HttpRequest,
    query: web::Query<HashMap<String, String>>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Image)?;
    let timing = Timing::read(&http, &query, false)?;
    let request: ImageGenerationRequest = json_body(&body)?;
    let response_format = ResponseFormat::parse(request.response_format.as_deref())?;
    let model = state.catalogue.resolve_capable(
        request.model.as_deref(),
        ModelCategory::Image,
        "text_to_image",
    )?;
    let params = request.validate(random_seed())?;
    let generation = Generation {
        tool: Tool::Image,
        model,
        estimated_credits: model.credits_per_unit * i64::from(params.n),
        quota_units: f64::from(params.n),
        params: serde_json::to_value(&params).map_err(ApiError::internal)?,
        timing,
        what: "image generation",
    };
    let (job, mut ok) = match generation::run(&state, &caller, generation)
        .await?
        .completed(&state)
    {
        Ok(done) => done,
        Err(response) => return Ok(*response),
    };
    let mut response = ImageGenerationResponse::from_job(&job, &state.signer, Utc::now())
        .ok_or_else(|| generation::malformed(&job))?;
    if response_format == ResponseFormat::B64Json {
        response = response.with_base64(generation::images_base64(&state, &job).await?);
    }
    Ok(ok.json(response))
}
