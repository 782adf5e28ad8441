use std::collections::HashMap;

use actix_web::{HttpResponse, post, web};
use serde_json::json;
use unigen_core::ValidationError;
use unigen_core::audio::probe_duration;
use unigen_core::domain::{ModelCategory, Scope, Tool};
use unigen_core::params::transcription::{Transcript, TranscriptionRequest};

use super::generation::{self, Generation};

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::{json_body, query_bool};
use crate::state::AppState;
use crate::views::{AsyncJobCreated, job_usage};

/// Speech to text. `response_format` json (default) answers `{text, segments,
/// language, duration, model, model_tier, usage}` (plus `words` top-level and
/// per segment with word granularity); `text`, `srt` and `vtt` answer plain text.
#[utoipa::path(
    tag = "audio",
    request_body = TranscriptionRequest,
    params(("async" = Option<bool>, Query, description = "Answer at once with the job (default false)")),
    responses(
        (status = 200, description = "Transcript (JSON, text, SRT or WebVTT)", body = Object),
        (status = 202, description = "Async job created", body = AsyncJobCreated),
        (status = 400, description = "file missing, or not audio", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "API key does not have required scope: stt", body = ErrorBody),
        (status = 500, description = "transcription failed", body = ErrorBody),
    ),
    security(("bearer" = ["stt"]))
)]
#[post("/audio/transcriptions")]
pub async fn create_transcription(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Stt)?;
    let is_async = query_bool(&query, "async", false)?;
    let request: TranscriptionRequest = json_body(&body)?;
    let model = state.catalogue.resolve_capable(
        request.model.as_deref(),
        ModelCategory::Audio,
        "speech_to_text",
    )?;
    let (mut params, media) = request.validate()?;
    if let Some(languages) = &model.languages
        && params.language != "auto"
        && !languages.contains(&params.language)
    {
        return Err(ValidationError::new(
            "language",
            format!(
                "language `{}` is not supported by model {} (supported: {})",
                params.language,
                model.id,
                languages.join(", ")
            ),
        )
        .into());
    }
    let loaded = generation::fetch_inputs(&state, media).await?;
    // The audio's length sets what is reserved; the worker charges what
    // the transcription measured. Undecodable audio reserves one minute and
    // fails in the worker with the decoder's reason.
    let duration_seconds = match loaded.iter().find(|(field, _)| *field == "file") {
        Some((_, audio)) => probe_duration(&audio.bytes).await.unwrap_or(60.0),
        None => 60.0,
    };
    let minutes = (duration_seconds / 60.0).ceil().max(1.0) as i64;
    params.inputs = generation::store_inputs(&state, caller.org_id, loaded).await?;
    let format = params.response_format.clone();
    let generation = Generation {
        tool: Tool::Stt,
        model,
        estimated_credits: model.credits_per_unit * minutes,
        quota_units: duration_seconds,
        params: serde_json::to_value(&params).map_err(ApiError::internal)?,
        is_async,
        what: "transcription",
    };
    let job = match generation::run(&state, &caller, generation)
        .await?
        .completed(&state)
    {
        Ok(job) => job,
        Err(response) => return Ok(*response),
    };
    let output = job
        .output_data
        .clone()
        .ok_or_else(|| generation::malformed(&job))?;
    let transcript: Transcript =
        serde_json::from_value(output.clone()).map_err(|_| generation::malformed(&job))?;
    Ok(match format.as_str() {
        "text" => HttpResponse::Ok()
            .content_type("text/plain; charset=utf-8")
            .body(format!("{}\n", transcript.text)),
        "srt" => HttpResponse::Ok()
            .content_type("application/x-subrip; charset=utf-8")
            .body(transcript.to_srt()),
        "vtt" => HttpResponse::Ok()
            .content_type("text/vtt; charset=utf-8")
            .body(transcript.to_vtt()),
        _ => {
            let mut body = output;
            body["model"] = json!(job.model);
            body["model_tier"] = json!(job.model_tier);
            body["usage"] = job_usage(&job);
            HttpResponse::Ok().json(body)
        }
    })
}
