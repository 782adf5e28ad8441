use std::collections::HashMap;

use actix_web::{HttpRequest, HttpResponse, post, web};
use serde_json::json;
use unigen_core::audio::measure_duration;
use unigen_core::domain::{ModelCategory, Scope, Tool};
use unigen_core::params::transcription::{Transcript, TranscriptionRequest, without_decoding};
use unigen_core::{ProviderError, ValidationError};
use unigen_providers::vendor::Capability;

use super::delivery::{CANCEL_AFTER_DOC, PREFER_DOC};
use super::generation::{self, Generation, Timing, Uploads};
use super::multipart::{self, Body, Form, FormSpec};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::json_body;
use crate::state::AppState;
use crate::views::{AsyncJobCreated, job_usage};

/// The parts of a multipart transcription: OpenAI's, then the JSON body's
/// other fields.
const TRANSCRIPTION_FORM: FormSpec = FormSpec {
    files: &["file"],
    fields: &[
        "model",
        "language",
        "prompt",
        "response_format",
        "temperature",
        "timestamp_granularities",
        "diarization",
        "translation",
        "model_inputs",
    ],
};

/// `multipart/form-data` body of `POST /audio/transcriptions`, as the OpenAI
/// SDKs send it. `diarization`, `translation` (`true`/`false`) and
/// `model_inputs` (JSON text) are accepted as text fields too.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // the schema only: routes::multipart reads the form
pub struct TranscriptionForm {
    /// The audio (MP3, WAV, M4A, FLAC, OGG, WebM). A URL or data URI as
    /// text is loaded as in JSON.
    #[schema(value_type = String, format = Binary)]
    file: Vec<u8>,
    model: Option<String>,
    /// `auto` (default) or an ISO 639-1 code.
    language: Option<String>,
    prompt: Option<String>,
    /// `json` (default), `verbose_json`, `text`, `srt`, `vtt`.
    response_format: Option<String>,
    temperature: Option<f64>,
    /// `segment` and/or `word`; repeated as `timestamp_granularities[]`.
    #[schema(rename = "timestamp_granularities[]")]
    timestamp_granularities: Option<Vec<String>>,
}

/// Speech to text. `response_format` json (default) answers `{text, segments,
/// language, duration, model, model_tier, usage}` (plus `words` top-level and
/// per segment with word granularity); `verbose_json` answers OpenAI's shape
/// (`task`, `language` as a name, `duration`, `text`, `segments` with their
/// decoding facts, `words` with word granularity, `usage` in seconds);
/// `text`, `srt` and `vtt` answer plain text. The body is JSON (the audio as
/// a URL or base64) or, as the OpenAI SDKs send it, `multipart/form-data`.
#[utoipa::path(
    tag = "audio",
    request_body(content(
        (TranscriptionRequest = "application/json"),
        (TranscriptionForm = "multipart/form-data"),
    )),
    params(
        ("async" = Option<bool>, Query, description = "Answer at once with the job (default false); given, it decides alone: `Prefer` is then ignored"),
        ("Prefer" = Option<String>, Header, description = PREFER_DOC),
        ("Cancel-After" = Option<String>, Header, description = CANCEL_AFTER_DOC),
    ),
    responses(
        (status = 200, description = "Transcript (JSON, OpenAI's verbose JSON, text, SRT or WebVTT, by `response_format`: `json` and `verbose_json` as JSON, `text` as text/plain, `srt` as application/x-subrip, `vtt` as text/vtt)", content(
            (crate::openapi::schemas::TranscriptionResponse = "application/json"),
            (String = "text/plain"),
            (String = "application/x-subrip"),
            (String = "text/vtt"),
        ), headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `wait=N` (N as applied, at most 60)"))),
        (status = 202, description = "Async job created, or the sync wait limit passed (the job itself): `JobAccepted`. With `Prefer: respond-async`, at once; with `Prefer: wait=N`, once N seconds passed: the async creation body, as for `async=true`", body = AsyncJobCreated, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `respond-async`, or `wait=N` when the wait passed before the job finished"))),
        (status = 400, description = "file missing, not audio, too large or longer than `jobs.max_audio_seconds` (default 2 hours); an invalid field; an unexpected file in a form; a malformed `Cancel-After`, or one over 24 hours (`param`: `Cancel-After`)", body = ErrorBody),
        (status = 402, description = "`quota_exceeded`: the transcription seconds quota, the credits or the overage hard limit", body = ErrorBody),
        (status = 403, description = "API key does not have required scope: stt", body = ErrorBody),
        (status = 408, description = "`deadline_exceeded`: the job was cancelled at its `Cancel-After` deadline while the request waited (the message names the job); nothing is charged", body = ErrorBody),
        (status = 409, description = "`job_cancelled`: the job was cancelled while the request waited", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
        (status = 500, description = "`generation_failed`: the transcription failed; or an internal error", body = ErrorBody),
        (status = 503, description = "`service_unavailable`: the audio could not be measured in time, or the database is unavailable; retry", body = ErrorBody),
    ),
    security(("bearer" = ["stt"]))
)]
#[post("/audio/transcriptions")]
pub async fn create_transcription(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
    http: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    // The key's scope first: no body is read for a key that cannot use it.
    caller.require(Scope::Stt)?;
    let body = multipart::read_body(&state, &http, payload, &TRANSCRIPTION_FORM).await?;
    let timing = Timing::read(&http, &query, false)?;
    let (request, uploads) = match body {
        Body::Json(bytes) => (json_body::<TranscriptionRequest>(&bytes)?, Uploads::new()),
        Body::Form(form) => transcription_request(form)?,
    };
    transcribe(&state, &caller, request, uploads, timing).await
}

/// The transcription request a form carries (uploaded audio in the uploads).
fn transcription_request(
    mut form: Form,
) -> Result<(TranscriptionRequest, Uploads), ValidationError> {
    let mut uploads = Uploads::new();
    let request = TranscriptionRequest {
        file: form.take_source("file", &mut uploads),
        model: form.text("model"),
        language: form.text("language"),
        response_format: form.text("response_format"),
        prompt: form.text("prompt"),
        temperature: form.number("temperature", "a number")?,
        timestamp_granularities: form.list("timestamp_granularities"),
        diarization: form.boolean("diarization")?,
        translation: form.boolean("translation")?,
        model_inputs: form.json("model_inputs")?,
    };
    Ok((request, uploads))
}

/// The length in seconds of the audio of `field`, or a 400 naming the field
/// when it is longer than `limit_seconds` or not readable as the audio its
/// magic bytes say. Measured by demuxing (no decoding, bounded in time and
/// memory), so it runs before the request takes a concurrency slot.
pub(super) async fn audio_length(
    field: &'static str,
    bytes: &[u8],
    limit_seconds: f64,
) -> Result<f64, ApiError> {
    match measure_duration(bytes, limit_seconds).await {
        Ok(seconds) if seconds > limit_seconds => Err(ValidationError::new(
            field,
            format!("{field} is longer than {limit_seconds} seconds, the longest audio accepted"),
        )
        .into()),
        Ok(seconds) => Ok(seconds),
        Err(ProviderError::Permanent(reason)) => Err(ValidationError::new(
            field,
            format!("{field} could not be read as audio ({reason})"),
        )
        .into()),
        Err(ProviderError::Transient(reason)) => Err(ApiError::Unavailable(format!(
            "{field} could not be measured in time ({reason}); try again"
        ))),
    }
}

/// Transcribes (or, with `translation`, translates): validates, stores the
/// audio, runs the job and renders the transcript in the asked format.
pub(super) async fn transcribe(
    state: &AppState,
    caller: &Caller,
    request: TranscriptionRequest,
    uploads: Uploads,
    timing: Timing,
) -> Result<HttpResponse, ApiError> {
    let model = state.catalogue.resolve_capable(
        request.model.as_deref(),
        ModelCategory::Audio,
        "speech_to_text",
    )?;
    let (mut params, media) = request.validate()?;
    // Not every vendor translates (ElevenLabs' Scribe transcribes only).
    let translates = unigen_providers::registry::adapter(&model.adapter)
        .is_some_and(|a| a.serves.contains(&Capability::Translation));
    if params.translation && !translates {
        return Err(ValidationError::new(
            "model",
            format!("model {} transcribes only; it does not translate", model.id),
        )
        .into());
    }
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
    let loaded = generation::fetch_uploaded_inputs(state, media, uploads).await?;
    // The audio's length sets what is reserved; the worker charges what
    // the transcription measured. Audio longer than `jobs.max_audio_seconds`
    // or that does not demux as the format its bytes claim is refused here.
    let duration_seconds = match loaded.iter().find(|(field, _)| *field == "file") {
        Some((_, audio)) => {
            audio_length("file", &audio.bytes, state.limits.max_audio_seconds).await?
        }
        None => 60.0,
    };
    let minutes = (duration_seconds / 60.0).ceil().max(1.0) as i64;
    params.inputs = generation::store_inputs(state, caller.org_id, loaded).await?;
    let format = params.response_format.clone();
    let translated = params.translation;
    let generation = Generation {
        tool: Tool::Stt,
        model,
        estimated_credits: model.credits_per_unit * minutes,
        quota_units: duration_seconds,
        params: serde_json::to_value(&params).map_err(ApiError::internal)?,
        timing,
        what: if translated {
            "translation"
        } else {
            "transcription"
        },
    };
    let (job, mut ok) = match generation::run(state, caller, generation)
        .await?
        .completed(state)
    {
        Ok(done) => done,
        Err(response) => return Ok(*response),
    };
    let output = job
        .output_data
        .clone()
        .ok_or_else(|| generation::malformed(&job))?;
    let transcript: Transcript =
        serde_json::from_value(output.clone()).map_err(|_| generation::malformed(&job))?;
    Ok(match format.as_str() {
        "text" => ok
            .content_type("text/plain; charset=utf-8")
            .body(format!("{}\n", transcript.text)),
        "srt" => ok
            .content_type("application/x-subrip; charset=utf-8")
            .body(transcript.to_srt()),
        "vtt" => ok
            .content_type("text/vtt; charset=utf-8")
            .body(transcript.to_vtt()),
        "verbose_json" => {
            let mut body = transcript.to_verbose_json(translated);
            body["model"] = json!(job.model);
            body["model_tier"] = json!(job.model_tier);
            // OpenAI's usage of audio models; credits are in the headers.
            body["usage"] = json!({ "type": "duration", "seconds": transcript.duration });
            ok.json(body)
        }
        _ => {
            let mut body = without_decoding(output);
            body["model"] = json!(job.model);
            body["model_tier"] = json!(job.model_tier);
            body["usage"] = job_usage(&job);
            ok.json(body)
        }
    })
}
