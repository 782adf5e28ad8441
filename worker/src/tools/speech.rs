//! Text to speech with espeak-ng.

use serde_json::json;
use unigen_core::audio;
use unigen_core::audio::AudioFormat;
use unigen_core::params::speech::SpeechParams;
use unigen_db::models::Job;
use unigen_render::speech;
use unigen_render::speech::SpeechSpec;

use super::{params_of, store_output};
use crate::WorkerContext;
use crate::error::ToolError;
use crate::progress::Progress;
use crate::registry::ToolOutput;

/// The validated `response_format`; mp3 for anything else (an old job).
pub fn format(name: &str) -> AudioFormat {
    AudioFormat::from_name(name).unwrap_or(AudioFormat::Mp3)
}

pub async fn run(
    context: &WorkerContext,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    let params: SpeechParams = params_of(job)?;
    let format = format(&params.response_format);
    if let Some((model, client)) = super::upstream_client(context, job)? {
        let body = json!({
            "model": model.upstream_model.as_deref().unwrap_or(&model.id),
            "input": params.input,
            "voice": params.voice,
            "speed": params.speed,
            "response_format": params.response_format,
        });
        let bytes = client.speech(&body).await?;
        let duration = audio::duration_in(&bytes, format).await?;
        return finish(context, job, &params, format, bytes, duration).await;
    }
    super::retry_transient(|| context.local.simulate_conditions()).await?;
    progress.report(10).await;
    // `reference_audio` is kept with the job; espeak-ng cannot clone voices.
    let speech = speech::synthesize(&SpeechSpec {
        text: &params.input,
        voice: &params.voice,
        speed: params.speed as f32,
        format,
    })
    .await?;
    finish(
        context,
        job,
        &params,
        format,
        speech.bytes,
        speech.duration_seconds,
    )
    .await
}

/// Stores the audio; speech is priced per started 1,000 characters.
async fn finish(
    context: &WorkerContext,
    job: &Job,
    params: &SpeechParams,
    format: AudioFormat,
    bytes: Vec<u8>,
    duration_seconds: f64,
) -> Result<ToolOutput, ToolError> {
    let key = store_output(
        context,
        job,
        &format!("speech.{}", format.extension()),
        bytes,
    )
    .await?;
    let characters = params.character_count() as i64;
    let price = job.estimated_credits / ((characters + 999) / 1000).max(1);
    Ok(ToolOutput {
        output: json!({
            "audio_file": key,
            "duration_seconds": duration_seconds,
            "character_count": characters,
            "format": params.response_format,
        }),
        actual_credits: price * ((characters + 999) / 1000),
    })
}
