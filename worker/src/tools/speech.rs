//! Text to speech: the model's upstream (any adapter serving speech), or
//! espeak-ng (the built-in `local` model).

use serde_json::json;
use unigen_core::audio;
use unigen_core::audio::AudioFormat;
use unigen_core::params::speech::SpeechParams;
use unigen_db::models::Job;
use unigen_providers::vendor::SpeechCall;
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
    let model = super::configured_model(context, job)?;
    if let Some(client) = context.providers.speech(model) {
        let reference = super::input(context, &params.inputs, "reference_audio").await?;
        let extension = reference_extension(&params);
        let tenant = job.org_id.to_string();
        let bytes = client
            .speak(&SpeechCall {
                model,
                tenant: &tenant,
                text: &params.input,
                voice: &params.voice,
                speed: params.speed,
                response_format: &params.response_format,
                reference: reference
                    .as_deref()
                    .map(|sample| (sample, extension.as_str())),
            })
            .await?;
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

/// The reference sample's file extension, when it is a plain one (it only
/// names the sample's format to the vendor).
fn reference_extension(params: &SpeechParams) -> String {
    params
        .inputs
        .get("reference_audio")
        .and_then(|stored| stored.file.rsplit_once('.').map(|(_, ext)| ext.to_owned()))
        .filter(|ext| {
            (1..=5).contains(&ext.len()) && ext.bytes().all(|b| b.is_ascii_alphanumeric())
        })
        .unwrap_or_else(|| "wav".to_owned())
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
