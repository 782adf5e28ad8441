//! Music synthesized from the prompt (or transformed from source audio).

use serde_json::json;
use unigen_core::audio;
use unigen_core::audio::AudioFormat;
use unigen_core::params::music::MusicParams;
use unigen_core::telemetry::semconv;
use unigen_db::models::Job;
use unigen_render::music;
use unigen_render::music::{MusicSpec, SAMPLE_RATE};

use super::{input, params_of, store_output};
use crate::WorkerContext;
use crate::error::ToolError;
use crate::output::ToolOutput;
use crate::progress::Progress;

pub async fn run(
    context: &WorkerContext,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    let params: MusicParams = params_of(job)?;
    let format = if params.output_format == "wav" {
        AudioFormat::Wav
    } else {
        AudioFormat::Mp3
    };
    if let Some((model, client)) = super::media_client(context, job)? {
        let mut body = json!({
            "prompt": params.prompt, "duration": params.duration_seconds, "seed": params.seed,
            "output_format": params.output_format,
        });
        if let Some(negative) = &params.negative_prompt {
            body["negative_prompt"] = json!(negative);
        }
        if let Some(uri) = super::input_data_uri(context, &params.inputs, "source_audio").await? {
            body["input_audio"] = json!(uri);
        }
        progress.report(10).await;
        let bytes = super::run_media(
            model,
            client.as_ref(),
            body,
            params.model_inputs.as_ref(),
            semconv::output_type::AUDIO,
        )
        .await?;
        let seconds = audio::probe_duration(&bytes).await?;
        let key = store_output(
            context,
            job,
            &format!("music.{}", format.extension()),
            bytes,
        )
        .await?;
        return Ok(ToolOutput {
            output: json!({ "audio": { "file": key, "duration_seconds": seconds, "format": params.output_format }}),
            actual_credits: job.estimated_credits,
        });
    }
    // The track loops or cuts the source to its own length, so only that
    // much is decoded: a long source never becomes minutes of samples.
    let used_seconds = params.duration_seconds.min(music::MAX_DURATION_SECONDS);
    let source = match input(context, &params.inputs, "source_audio").await? {
        Some(bytes) => Some(audio::decode_to_pcm(bytes, SAMPLE_RATE, used_seconds).await?),
        None => None,
    };
    super::simulate_local(context, job, semconv::output_type::AUDIO).await?;
    progress.report(20).await;
    let track = music::generate(&MusicSpec {
        prompt: &params.prompt,
        negative_prompt: params.negative_prompt.as_deref(),
        seed: params.seed,
        duration_seconds: params.duration_seconds,
        format,
        source: source.as_deref(),
    })
    .await?;
    let key = store_output(
        context,
        job,
        &format!("music.{}", format.extension()),
        track.bytes,
    )
    .await?;
    Ok(ToolOutput {
        output: json!({ "audio": {
            "file": key, "duration_seconds": track.duration_seconds, "format": params.output_format,
        }}),
        actual_credits: job.estimated_credits,
    })
}
