use std::collections::HashMap;

use actix_web::{HttpRequest, HttpResponse, post, web};
use serde_json::json;
use unigen_core::domain::{ModelCategory, Scope, Tool};
use unigen_core::params::video::VideoGenerationRequest;

use super::delivery::{CANCEL_AFTER_DOC, PREFER_DOC};
use super::generation::{self, Generation, Timing, image_dimensions, random_seed};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::json_body;
use crate::state::AppState;
use crate::views::{AsyncJobCreated, job_usage};

/// Generate an MP4 (H.264) video from text, an image or a video. Async by
/// default (`async=false` waits).
#[utoipa::path(
    tag = "video",
    request_body = VideoGenerationRequest,
    params(
        ("async" = Option<bool>, Query, description = "Default true: answer at once with the job; given, it decides alone: `Prefer` is then ignored"),
        ("Prefer" = Option<String>, Header, description = PREFER_DOC),
        ("Cancel-After" = Option<String>, Header, description = CANCEL_AFTER_DOC),
    ),
    responses(
        (status = 200, description = "The video (`async=false`)", body = crate::openapi::schemas::VideoGenerationResponse, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `wait=N` (N as applied, at most 60)"))),
        (status = 202, description = "Async job created, or the sync wait limit passed (the job itself): `JobAccepted`. With `Prefer: respond-async`, at once; with `Prefer: wait=N`, once N seconds passed: the async creation body, as for `async=true`", body = AsyncJobCreated, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `respond-async`, or `wait=N` when the wait passed before the job finished"))),
        (status = 400, description = "Invalid request; `param` names the field; a malformed `Cancel-After`, or one over 24 hours (`param`: `Cancel-After`)", body = ErrorBody),
        (status = 402, description = "`quota_exceeded`: the video seconds quota, the credits or the overage hard limit", body = ErrorBody),
        (status = 403, description = "API key does not have required scope: video", body = ErrorBody),
        (status = 408, description = "`deadline_exceeded`: the job was cancelled at its `Cancel-After` deadline while the request waited (the message names the job); nothing is charged", body = ErrorBody),
        (status = 409, description = "`job_cancelled`: the job was cancelled while the request waited", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
        (status = 500, description = "`generation_failed`: the job failed; or an internal error", body = ErrorBody),
    ),
    security(("bearer" = ["video"]))
)]
#[post("/videos/generations")]
pub async fn create_video_generation(
    state: web::Data<AppState>,
    caller: Caller,
    http: HttpRequest,
    query: web::Query<HashMap<String, String>>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Video)?;
    let timing = Timing::read(&http, &query, true)?;
    let request: VideoGenerationRequest = json_body(&body)?;
    let model = state
        .catalogue
        .resolve(request.model.as_deref(), ModelCategory::Video)?;
    let (mut params, media) =
        request.validate(random_seed(), model.max_duration_seconds.unwrap_or(10.0))?;
    let loaded = generation::fetch_inputs(&state, media).await?;
    if let Some((field, image)) = loaded.iter().find(|(field, _)| *field == "source_image") {
        image_dimensions(field, image)?;
    }
    params.inputs = generation::store_inputs(&state, caller.org_id, loaded).await?;
    let generation = Generation {
        tool: Tool::Video,
        model,
        estimated_credits: model.credits_per_unit * params.duration_seconds.ceil() as i64,
        quota_units: params.duration_seconds,
        params: serde_json::to_value(&params).map_err(ApiError::internal)?,
        timing,
        what: "video generation",
    };
    let (job, mut ok) = match generation::run(&state, &caller, generation)
        .await?
        .completed(&state)
    {
        Ok(done) => done,
        Err(response) => return Ok(*response),
    };
    let output = generation::presented_output(&state, &job)?;
    let video = &output["video"];
    Ok(ok.json(json!({
        "created": job.created_at.timestamp(),
        "data": {
            "url": video["url"],
            "duration_seconds": video["duration"],
            "width": video["width"],
            "height": video["height"],
        },
        "model": job.model,
        "model_tier": job.model_tier,
        "usage": job_usage(&job),
    })))
}
