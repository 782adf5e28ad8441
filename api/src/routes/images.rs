use std::collections::HashMap;

use actix_web::{HttpResponse, post, web};
use chrono::Utc;
use unigen_core::domain::{ModelCategory, Scope, Tool};
use unigen_core::params::image::{ImageGenerationRequest, ResponseFormat};

use super::generation::{self, Generation, random_seed};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::{json_body, query_bool};
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
    params(("async" = Option<bool>, Query, description = "Answer at once with the job instead of waiting (default false)")),
    responses(
        (status = 200, description = "Images generated", body = ImageGenerationResponse),
        (status = 202, description = "Async job created (`async=true`), or the sync wait limit passed (the job itself): `JobAccepted`", body = AsyncJobCreated),
        (status = 400, description = "Invalid request (e.g. `response_format` not `url` or `b64_json`); `param` names the field", body = ErrorBody),
        (status = 401, description = "invalid or missing API key / API key has expired", body = ErrorBody),
        (status = 402, description = "`quota_exceeded`: the image generation quota, the credits or the overage hard limit", body = ErrorBody),
        (status = 403, description = "API key does not have required scope: image", body = ErrorBody),
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
    query: web::Query<HashMap<String, String>>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Image)?;
    let is_async = query_bool(&query, "async", false)?;
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
        is_async,
        what: "image generation",
    };
    let job = match generation::run(&state, &caller, generation)
        .await?
        .completed(&state)
    {
        Ok(job) => job,
        Err(response) => return Ok(*response),
    };
    let mut response = ImageGenerationResponse::from_job(&job, &state.signer, Utc::now())
        .ok_or_else(|| generation::malformed(&job))?;
    if response_format == ResponseFormat::B64Json {
        response = response.with_base64(generation::images_base64(&state, &job).await?);
    }
    Ok(HttpResponse::Ok().json(response))
}
