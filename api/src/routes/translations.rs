//! `POST /audio/translations` (OpenAI's): speech in any language to English
//! text. A transcription job with `translation` set, so it shares the stt
//! scope, pricing, formats and worker.

use std::collections::HashMap;

use actix_web::{HttpRequest, HttpResponse, post, web};
use unigen_core::ValidationError;
use unigen_core::domain::Scope;
use unigen_core::params::transcription::TranslationRequest;

use super::delivery::{CANCEL_AFTER_DOC, PREFER_DOC};
use super::generation::{Timing, Uploads};
use super::multipart::{self, Body, Form, FormSpec};
use super::transcriptions::transcribe;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::json_body;
use crate::state::AppState;
use crate::views::AsyncJobCreated;

const TRANSLATION_FORM: FormSpec = FormSpec {
    files: &["file"],
    fields: &[
        "model",
        "prompt",
        "response_format",
        "temperature",
        "model_inputs",
    ],
};

/// `multipart/form-data` body of `POST /audio/translations`, as the OpenAI
/// SDKs send it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // the schema only: routes::multipart reads the form
pub struct TranslationForm {
    /// The audio (MP3, WAV, M4A, FLAC, OGG, WebM). A URL or data URI as
    /// text is loaded as in JSON.
    #[schema(value_type = String, format = Binary)]
    file: Vec<u8>,
    model: Option<String>,
    /// Text to guide the style, in English.
    prompt: Option<String>,
    /// `json` (default), `verbose_json`, `text`, `srt`, `vtt`.
    response_format: Option<String>,
    temperature: Option<f64>,
}

/// Speech to English text. Answers as `POST /audio/transcriptions` does;
/// `verbose_json` has `task: translate` and `language: english`.
#[utoipa::path(
    tag = "audio",
    request_body(content(
        (TranslationRequest = "application/json"),
        (TranslationForm = "multipart/form-data"),
    )),
    params(
        ("async" = Option<bool>, Query, description = "Answer at once with the job (default false); given, it decides alone: `Prefer` is then ignored"),
        ("Prefer" = Option<String>, Header, description = PREFER_DOC),
        ("Cancel-After" = Option<String>, Header, description = CANCEL_AFTER_DOC),
    ),
    responses(
        (status = 200, description = "English text (JSON, OpenAI's verbose JSON, text, SRT or WebVTT, by `response_format`: `json` and `verbose_json` as JSON, `text` as text/plain, `srt` as application/x-subrip, `vtt` as text/vtt)", content(
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
        (status = 500, description = "`generation_failed`: the translation failed; or an internal error", body = ErrorBody),
        (status = 503, description = "`service_unavailable`: the audio could not be measured in time, or the database is unavailable; retry", body = ErrorBody),
    ),
    security(("bearer" = ["stt"]))
)]
#[post("/audio/translations")]
pub async fn create_translation(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
    http: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    // The key's scope first: no body is read for a key that cannot use it.
    caller.require(Scope::Stt)?;
    let body = multipart::read_body(&state, &http, payload, &TRANSLATION_FORM).await?;
    let timing = Timing::read(&http, &query, false)?;
    let (request, uploads) = match body {
        Body::Json(bytes) => (json_body::<TranslationRequest>(&bytes)?, Uploads::new()),
        Body::Form(form) => translation_request(form)?,
    };
    transcribe(
        &state,
        &caller,
        request.into_transcription(),
        uploads,
        timing,
    )
    .await
}

fn translation_request(mut form: Form) -> Result<(TranslationRequest, Uploads), ValidationError> {
    let mut uploads = Uploads::new();
    let request = TranslationRequest {
        file: form.take_source("file", &mut uploads),
        model: form.text("model"),
        prompt: form.text("prompt"),
        response_format: form.text("response_format"),
        temperature: form.number("temperature", "a number")?,
        model_inputs: form.json("model_inputs")?,
    };
    Ok((request, uploads))
}
