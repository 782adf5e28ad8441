use std::collections::HashMap;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, post, web};
use serde_json::json;
use unigen_core::audio::AudioFormat;
use unigen_core::domain::{ModelCategory, Scope, Tool};
use unigen_core::params::speech::SpeechRequest;

use super::delivery::{CANCEL_AFTER_DOC, PREFER_DOC};
use super::generation::{self, Generation, Timing};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::json_body;
use crate::state::AppState;
use crate::views::{AsyncJobCreated, job_usage};

/// Clients such as the OpenAI SDKs ask for the audio itself (`Accept:
/// application/octet-stream` or `audio/*`); others get the spec's JSON.
fn wants_raw_audio(request: &HttpRequest) -> bool {
    request
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| {
            accept.contains("application/octet-stream") || accept.contains("audio/")
        })
}

fn content_type(format: &str) -> &'static str {
    AudioFormat::from_name(format)
        .unwrap_or(AudioFormat::Mp3)
        .content_type()
}

/// Text to speech. Answers `{created, audio_url, duration_seconds,
/// character_count, model, model_tier, usage}`, or the audio bytes when the
/// client asks for audio (`Accept: audio/*` or `application/octet-stream`).
/// `response_format` mp3 (default), wav, opus, aac, flac, or pcm: raw 24 kHz
/// 16-bit signed little-endian mono samples without a header (`audio/pcm`).
#[utoipa::path(
    tag = "audio",
    request_body = SpeechRequest,
    params(
        ("async" = Option<bool>, Query, description = "Answer at once with the job (default false); given, it decides alone: `Prefer` is then ignored"),
        ("Prefer" = Option<String>, Header, description = PREFER_DOC),
        ("Cancel-After" = Option<String>, Header, description = CANCEL_AFTER_DOC),
    ),
    responses(
        (status = 200, description = "JSON with `audio_url`; or, for `Accept: audio/*` or `application/octet-stream`, the audio itself in its `response_format`: mp3 `audio/mpeg`, wav `audio/wav`, opus `audio/ogg`, aac `audio/aac`, flac `audio/flac`, pcm `audio/pcm`", content(
            (crate::openapi::schemas::SpeechResponse = "application/json"),
            ("audio/mpeg"),
            ("audio/wav"),
            ("audio/ogg"),
            ("audio/aac"),
            ("audio/flac"),
            ("audio/pcm"),
        ), headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `wait=N` (N as applied, at most 60)"))),
        (status = 202, description = "Async job created, or the sync wait limit passed (the job itself): `JobAccepted`. With `Prefer: respond-async`, at once; with `Prefer: wait=N`, once N seconds passed: the async creation body, as for `async=true`", body = AsyncJobCreated, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `respond-async`, or `wait=N` when the wait passed before the job finished"))),
        (status = 400, description = "input missing or empty; input longer than 10,000 chars; speed outside 0.25 to 4.0; response_format not mp3, wav, opus, aac, flac or pcm; a malformed `Cancel-After`, or one over 24 hours (`param`: `Cancel-After`)", body = ErrorBody),
        (status = 402, description = "`quota_exceeded`: the speech characters quota, the credits or the overage hard limit", body = ErrorBody),
        (status = 403, description = "API key does not have required scope: tts", body = ErrorBody),
        (status = 408, description = "`deadline_exceeded`: the job was cancelled at its `Cancel-After` deadline while the request waited (the message names the job); nothing is charged", body = ErrorBody),
        (status = 409, description = "`job_cancelled`: the job was cancelled while the request waited", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
        (status = 500, description = "`generation_failed`: the job failed; or an internal error", body = ErrorBody),
    ),
    security(("bearer" = ["tts"]))
)]
#[post("/audio/speech")]
pub async fn create_speech(
    state: web::Data<AppState>,
    caller: Caller,
    http: HttpRequest,
    query: web::Query<HashMap<String, String>>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Tts)?;
    let timing = Timing::read(&http, &query, false)?;
    let request: SpeechRequest = json_body(&body)?;
    let model = state.catalogue.resolve_capable(
        request.model.as_deref(),
        ModelCategory::Audio,
        "text_to_speech",
    )?;
    let (mut params, media) = request.validate()?;
    let loaded = generation::fetch_inputs(&state, media).await?;
    params.inputs = generation::store_inputs(&state, caller.org_id, loaded).await?;
    let characters = params.character_count() as i64;
    let raw = wants_raw_audio(&http);
    let generation = Generation {
        tool: Tool::Tts,
        model,
        estimated_credits: model.credits_per_unit * ((characters + 999) / 1000),
        quota_units: characters as f64,
        params: serde_json::to_value(&params).map_err(ApiError::internal)?,
        timing,
        what: "speech synthesis",
    };
    let (job, mut ok) = match generation::run(&state, &caller, generation)
        .await?
        .completed(&state)
    {
        Ok(done) => done,
        Err(response) => return Ok(*response),
    };
    if raw {
        let key = job
            .output_data
            .as_ref()
            .and_then(|o| o["audio_file"].as_str())
            .ok_or_else(|| generation::malformed(&job))?;
        let bytes = state
            .store
            .get(key)
            .await
            .map_err(ApiError::internal)?
            .ok_or_else(|| generation::malformed(&job))?;
        return Ok(ok
            .content_type(content_type(&params_format(&job)))
            .body(bytes));
    }
    let output = generation::presented_output(&state, &job)?;
    Ok(ok.json(json!({
        "created": job.created_at.timestamp(),
        "audio_url": output["audio_url"],
        "duration_seconds": output["duration_seconds"],
        "character_count": output["character_count"],
        "model": job.model,
        "model_tier": job.model_tier,
        "usage": job_usage(&job),
    })))
}

fn params_format(job: &unigen_db::models::Job) -> String {
    job.input_params["response_format"]
        .as_str()
        .unwrap_or("mp3")
        .to_owned()
}
