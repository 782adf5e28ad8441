//! Speech to text through the model's upstream (any adapter serving it: the
//! Whisper sidecar on the `openai` adapter by default, ElevenLabs' Scribe).

use unigen_core::ProviderError;
use unigen_core::params::transcription::{Transcript, TranscriptionParams};
use unigen_core::telemetry::semconv;
use unigen_db::models::Job;
use unigen_providers::vendor::TranscribeOptions;

use super::{params_of, required_input};
use crate::WorkerContext;
use crate::error::ToolError;
use crate::output::ToolOutput;
use crate::progress::Progress;

pub async fn run(
    context: &WorkerContext,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    let params: TranscriptionParams = params_of(job)?;
    let model = super::configured_model(context, job)?;
    let client = context.providers.transcription(model).ok_or_else(|| {
        ToolError::Provider(ProviderError::Permanent(format!(
            "model {} has no transcription upstream",
            job.model
        )))
    })?;
    let (audio, filename) = audio_of(context, &params).await?;
    progress.report(10).await;
    let options = TranscribeOptions {
        model: model.upstream_model.as_deref().unwrap_or(&model.id),
        language: (params.language != "auto").then_some(params.language.as_str()),
        words: params.wants_words(),
        diarization: params.diarization,
        translate: params.translation,
        prompt: params.prompt.as_deref(),
        temperature: params.temperature,
    };
    // Speech in, text out: `gen_ai.output.type` text.
    let span = crate::trace::media_call(model, semconv::output_type::TEXT);
    let transcript = crate::trace::call(
        span,
        model,
        None,
        client.transcribe(audio, &filename, &options),
    )
    .await?;
    priced(model, &transcript)
}

/// The stored audio and a file name with its extension.
async fn audio_of(
    context: &WorkerContext,
    params: &TranscriptionParams,
) -> Result<(Vec<u8>, String), ToolError> {
    let file = params
        .inputs
        .get("file")
        .map(|f| f.file.clone())
        .unwrap_or_default();
    let extension = file.rsplit('.').next().unwrap_or("wav").to_owned();
    let audio = required_input(context, &params.inputs, "file").await?;
    Ok((audio, format!("audio.{extension}")))
}

/// The transcript as the job's output, priced per started minute.
fn priced(
    model: &unigen_core::config::ModelEntry,
    transcript: &Transcript,
) -> Result<ToolOutput, ToolError> {
    let minutes = (transcript.duration / 60.0).ceil().max(1.0) as i64;
    Ok(ToolOutput {
        output: serde_json::to_value(transcript)
            .map_err(|e| ToolError::InvalidParams(e.to_string()))?,
        actual_credits: model.credits_per_unit * minutes,
    })
}
