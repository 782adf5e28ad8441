use std::collections::HashMap;

use actix_web::{HttpRequest, HttpResponse, post, web};
use serde_json::json;
use unigen_core::domain::{ModelCategory, Scope, Tool};
use unigen_core::params::music::MusicGenerationRequest;

use super::delivery::{CANCEL_AFTER_DOC, PREFER_DOC};
use super::generation::{self, Generation, Timing, random_seed};
use super::transcriptions::audio_length;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::json_body;
use crate::state::AppState;
use crate::views::{AsyncJobCreated, job_usage};

/// Longest `source_audio` audio_to_audio accepts, in seconds. The track
/// uses as much of it as its own length (at most a model's maximum), so ten
/// minutes leaves room for whole songs and refuses hours of audio.
const MAX_SOURCE_AUDIO_SECONDS: f64 = 600.0;

/// Generate music from text or from source audio. Async by default.
#[utoipa::path(
    tag = "music",
    request_body = MusicGenerationRequest,
    params(
        ("async" = Option<bool>, Query, description = "Default true: answer at once with the job; given, it decides alone: `Prefer` is then ignored"),
        ("Prefer" = Option<String>, Header, description = PREFER_DOC),
        ("Cancel-After" = Option<String>, Header, description = CANCEL_AFTER_DOC),
    ),
    responses(
        (status = 200, description = "The track (`async=false`)", body = crate::openapi::schemas::MusicGenerationResponse, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `wait=N` (N as applied, at most 60)"))),
        (status = 202, description = "Async job created, or the sync wait limit passed (the job itself): `JobAccepted`. With `Prefer: respond-async`, at once; with `Prefer: wait=N`, once N seconds passed: the async creation body, as for `async=true`", body = AsyncJobCreated, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `respond-async`, or `wait=N` when the wait passed before the job finished"))),
        (status = 400, description = "prompt missing; duration_seconds above the model maximum; source_audio not audio or longer than 10 minutes; a malformed `Cancel-After`, or one over 24 hours (`param`: `Cancel-After`)", body = ErrorBody),
        (status = 402, description = "`quota_exceeded`: the music track quota, the credits or the overage hard limit", body = ErrorBody),
        (status = 403, description = "API key does not have required scope: music", body = ErrorBody),
        (status = 408, description = "`deadline_exceeded`: the job was cancelled at its `Cancel-After` deadline while the request waited (the message names the job); nothing is charged", body = ErrorBody),
        (status = 409, description = "`job_cancelled`: the job was cancelled while the request waited", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
        (status = 500, description = "`generation_failed`: the job failed; or an internal error", body = ErrorBody),
        (status = 503, description = "`service_unavailable`: `source_audio` could not be measured in time, or the database is unavailable; retry", body = ErrorBody),
    ),
    security(("bearer" = ["music"]))
)]
#[post("/music/generations")]
pub async fn create_music_generation(
    state: web::Data<AppState>,
    caller: Caller,
    http: HttpRequest,
    query: web::Query<HashMap<String, String>>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Music)?;
    let timing = Timing::read(&http, &query, true)?;
    let request: MusicGenerationRequest = json_body(&body)?;
    let model = state
        .catalogue
        .resolve(request.model.as_deref(), ModelCategory::Music)?;
    let max_duration = model.max_duration_seconds.unwrap_or(47.0);
    let (mut params, media) = request.validate(random_seed(), &model.id, max_duration)?;
    let loaded = generation::fetch_inputs(&state, media).await?;
    if let Some((field, source)) = loaded.iter().find(|(field, _)| *field == "source_audio") {
        audio_length(field, &source.bytes, MAX_SOURCE_AUDIO_SECONDS).await?;
    }
    params.inputs = generation::store_inputs(&state, caller.org_id, loaded).await?;
    let generation = Generation {
        tool: Tool::Music,
        model,
        estimated_credits: model.credits_per_unit,
        quota_units: 1.0,
        params: serde_json::to_value(&params).map_err(ApiError::internal)?,
        timing,
        what: "music generation",
    };
    let (job, mut ok) = match generation::run(&state, &caller, generation)
        .await?
        .completed(&state)
    {
        Ok(done) => done,
        Err(response) => return Ok(*response),
    };
    let output = generation::presented_output(&state, &job)?;
    Ok(ok.json(json!({
        "created": job.created_at.timestamp(),
        "data": { "audio_url": output["audio"]["url"], "duration_seconds": output["audio"]["duration_seconds"] },
        "model": job.model,
        "model_tier": job.model_tier,
        "usage": job_usage(&job),
    })))
}
