//! Speech to text through the model's `openai` upstream (the Whisper sidecar
//! by default).

use unigen_core::ProviderError;
use unigen_core::params::transcription::TranscriptionParams;
use unigen_db::models::Job;
use unigen_providers::openai::TranscribeOptions;

use super::{params_of, required_input};
use crate::WorkerContext;
use crate::error::ToolError;
use crate::progress::Progress;
use crate::registry::ToolOutput;

pub async fn run(
    context: &WorkerContext,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    let params: TranscriptionParams = params_of(job)?;
    let (model, client) = super::upstream_client(context, job)?.ok_or_else(|| {
        ToolError::Provider(ProviderError::Permanent(format!(
            "model {} has no transcription upstream",
            job.model
        )))
    })?;
    let file = params
        .inputs
        .get("file")
        .map(|f| f.file.clone())
        .unwrap_or_default();
    let extension = file.rsplit('.').next().unwrap_or("wav").to_owned();
    let audio = required_input(context, &params.inputs, "file").await?;
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
    let transcript = client
        .transcribe(audio, &format!("audio.{extension}"), &options)
        .await?;
    let minutes = (transcript.duration / 60.0).ceil().max(1.0) as i64;
    Ok(ToolOutput {
        output: serde_json::to_value(&transcript)
            .map_err(|e| ToolError::InvalidParams(e.to_string()))?,
        actual_credits: model.credits_per_unit * minutes,
    })
}
