//! Text to speech: the model's `openai` or `elevenlabs` upstream, or
//! espeak-ng (the built-in `local` model).

use std::collections::HashMap;

use serde_json::json;
use sha2::{Digest, Sha256};
use unigen_core::audio;
use unigen_core::audio::AudioFormat;
use unigen_core::config::ModelEntry;
use unigen_core::params::speech::SpeechParams;
use unigen_db::models::Job;
use unigen_providers::elevenlabs::{self, ElevenLabsClient, SpeechRequest};
use unigen_render::speech;
use unigen_render::speech::SpeechSpec;
use uuid::Uuid;

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
    if let Some(model) = context.catalogue.get(&job.model)
        && let Some(client) = context.providers.elevenlabs(model)
    {
        let bytes = elevenlabs_speech(context, job, &params, model, &client, format).await?;
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

/// Voice ids cloned at a vendor, by (organization, upstream model, SHA-256
/// of the sample): a sample is cloned once per process, then reused.
#[derive(Default)]
pub struct ClonedVoices {
    ids: tokio::sync::Mutex<HashMap<CloneKey, String>>,
}

/// Organization, catalogue model, SHA-256 of the sample.
type CloneKey = (Uuid, String, [u8; 32]);

/// ElevenLabs: the request's voice (through the model's `voices` names), or
/// a clone of its `reference_audio`; formats ElevenLabs does not produce
/// are made from its 24 kHz PCM.
async fn elevenlabs_speech(
    context: &WorkerContext,
    job: &Job,
    params: &SpeechParams,
    model: &ModelEntry,
    client: &ElevenLabsClient,
    format: AudioFormat,
) -> Result<Vec<u8>, ToolError> {
    let voice_id = match super::input(context, &params.inputs, "reference_audio").await? {
        Some(sample) => {
            let filename = params
                .inputs
                .get("reference_audio")
                .map_or_else(|| "sample.wav".to_owned(), |stored| stored.file.clone());
            // Only a plain extension names the sample's format to the vendor.
            let extension = filename
                .rsplit_once('.')
                .map(|(_, ext)| ext)
                .filter(|ext| {
                    (1..=5).contains(&ext.len()) && ext.bytes().all(|b| b.is_ascii_alphanumeric())
                })
                .unwrap_or("wav")
                .to_owned();
            cloned_voice(context, job, client, sample, &extension).await?
        }
        None => model
            .voices
            .get(&params.voice)
            .cloned()
            .unwrap_or_else(|| params.voice.clone()),
    };
    let native = elevenlabs::output_format(format.extension());
    let bytes = client
        .speech(&SpeechRequest {
            voice_id: &voice_id,
            model_id: model.upstream_model.as_deref().unwrap_or(&model.id),
            text: &params.input,
            output_format: native.unwrap_or("pcm_24000"),
            speed: (params.speed != 1.0).then_some(params.speed),
        })
        .await?;
    if native.is_some() {
        return Ok(bytes);
    }
    let samples: Vec<f32> = bytes
        .chunks_exact(2)
        .map(|pair| f32::from(i16::from_le_bytes([pair[0], pair[1]])) / 32768.0)
        .collect();
    Ok(audio::convert_wav(audio::encode_wav(&samples, 24_000), format).await?)
}

/// The vendor's voice cloned from `sample` for the job's organization,
/// created on first use.
async fn cloned_voice(
    context: &WorkerContext,
    job: &Job,
    client: &ElevenLabsClient,
    sample: Vec<u8>,
    extension: &str,
) -> Result<String, ToolError> {
    let digest: [u8; 32] = Sha256::digest(&sample).into();
    let key = (job.org_id, job.model.clone(), digest);
    // Held while cloning: two jobs with one sample create one voice.
    let mut ids = context.cloned_voices.ids.lock().await;
    if let Some(id) = ids.get(&key) {
        return Ok(id.clone());
    }
    let name = format!("unigen-{}-{}", job.org_id, &hex::encode(digest)[..12]);
    let id = client
        .add_voice(&name, sample, &format!("sample.{extension}"))
        .await?;
    ids.insert(key, id.clone());
    Ok(id)
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
