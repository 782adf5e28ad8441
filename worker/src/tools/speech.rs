//! Text to speech: the model's upstream (any adapter serving speech), or
//! espeak-ng (the built-in `local` model).

use futures_util::future::BoxFuture;
use serde_json::json;
use unigen_core::ProviderError;
use unigen_core::audio;
use unigen_core::audio::AudioFormat;
use unigen_core::params::speech::SpeechParams;
use unigen_core::telemetry::semconv;
use unigen_db::models::Job;
use unigen_db::queries::voice_clones;
use unigen_db::{DbError, PgPool};
use unigen_providers::vendor::{CloneStore, SpeechCall};
use unigen_render::speech;
use unigen_render::speech::SpeechSpec;

use super::{params_of, store_output};
use crate::WorkerContext;
use crate::error::ToolError;
use crate::output::ToolOutput;
use crate::progress::Progress;

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
        let span = crate::trace::media_call(model, semconv::output_type::AUDIO);
        crate::trace::record_prompt(&span, &params.input);
        let call = SpeechCall {
            model,
            tenant: &tenant,
            text: &params.input,
            voice: &params.voice,
            speed: params.speed,
            response_format: &params.response_format,
            reference: reference
                .as_deref()
                .map(|sample| (sample, extension.as_str())),
            voices: &context.voices,
            clones: Some(&PgClones(&context.pool)),
        };
        let bytes = crate::trace::call(span, model, None, client.speak(&call)).await?;
        let duration = audio::duration_in(&bytes, format).await?;
        return finish(context, job, &params, format, bytes, duration).await;
    }
    super::simulate_local(context, job, semconv::output_type::AUDIO).await?;
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

/// Cloned voices recorded in Postgres (`voice_clones`), so that they
/// outlive this worker and are deleted upstream when evicted.
struct PgClones<'a>(&'a PgPool);

impl PgClones<'_> {
    async fn conn(&self) -> Result<unigen_db::PooledConnection, ProviderError> {
        self.0
            .get()
            .await
            .map_err(|err| unavailable(&DbError::from(err)))
    }
}

fn unavailable(err: &DbError) -> ProviderError {
    ProviderError::Transient(format!("cloned voices: {err}"))
}

fn org_of(tenant: &str) -> Result<uuid::Uuid, ProviderError> {
    tenant
        .parse()
        .map_err(|_| ProviderError::Permanent("the organization id is not valid".into()))
}

impl CloneStore for PgClones<'_> {
    fn touch<'a>(
        &'a self,
        tenant: &'a str,
        model: &'a str,
        sample_sha256: &'a [u8; 32],
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(async move {
            let org = org_of(tenant)?;
            voice_clones::touch(&mut *self.conn().await?, org, model, sample_sha256)
                .await
                .map_err(|err| unavailable(&err))
        })
    }

    fn record<'a>(
        &'a self,
        tenant: &'a str,
        model: &'a str,
        sample_sha256: &'a [u8; 32],
        voice_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(async move {
            let org = org_of(tenant)?;
            voice_clones::record(
                &mut *self.conn().await?,
                org,
                model,
                sample_sha256,
                voice_id,
            )
            .await
            .map_err(|err| unavailable(&err))
        })
    }

    fn take_least_recent<'a>(
        &'a self,
        tenant: &'a str,
        keep: u32,
    ) -> BoxFuture<'a, Result<Vec<String>, ProviderError>> {
        Box::pin(async move {
            let org = org_of(tenant)?;
            voice_clones::take_least_recent(&mut *self.conn().await?, org, i64::from(keep))
                .await
                .map_err(|err| unavailable(&err))
        })
    }

    fn take_idle(
        &self,
        idle_seconds: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<String>, ProviderError>> {
        Box::pin(async move {
            let idle = i64::try_from(idle_seconds).unwrap_or(i64::MAX);
            voice_clones::take_idle(&mut *self.conn().await?, idle, i64::from(limit))
                .await
                .map_err(|err| unavailable(&err))
        })
    }
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
