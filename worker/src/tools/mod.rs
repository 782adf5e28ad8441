//! One handler per tool. Each reads its stored parameters and inputs, calls
//! the provider, stores the outputs and says what they cost.

pub mod edit;
pub mod fixture;
pub mod image;
pub mod music;
pub mod responses;
pub mod speech;
pub mod transcription;
pub mod video;

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use serde::de::DeserializeOwned;
use tracing::Instrument;

use unigen_core::ProviderError;
use unigen_core::params::StoredInputs;
use unigen_db::models::Job;
use unigen_providers::vendor::MediaUpstream;

use crate::WorkerContext;
use crate::error::ToolError;

pub fn params_of<T: DeserializeOwned>(job: &Job) -> Result<T, ToolError> {
    serde_json::from_value(job.input_params.clone())
        .map_err(|e| ToolError::InvalidParams(e.to_string()))
}

/// The bytes of a stored input, if the request had that field.
pub async fn input(
    context: &WorkerContext,
    inputs: &StoredInputs,
    field: &str,
) -> Result<Option<Vec<u8>>, ToolError> {
    let Some(stored) = inputs.get(field) else {
        return Ok(None);
    };
    let bytes = context
        .store
        .get(&stored.file)
        .await
        .map_err(|e| ToolError::Storage(e.to_string()))?
        .ok_or_else(|| ToolError::InvalidParams(format!("the stored {field} is missing")))?;
    Ok(Some(bytes))
}

/// Like [`input`] for a field the parameters require.
pub async fn required_input(
    context: &WorkerContext,
    inputs: &StoredInputs,
    field: &str,
) -> Result<Vec<u8>, ToolError> {
    input(context, inputs, field)
        .await?
        .ok_or_else(|| ToolError::InvalidParams(format!("{field} is missing")))
}

pub async fn store_output(
    context: &WorkerContext,
    job: &Job,
    name: &str,
    bytes: Vec<u8>,
) -> Result<String, ToolError> {
    let key = format!("{}/{}/{name}", job.org_id, job.id);
    let span = if unigen_core::telemetry::enabled() {
        unigen_core::telemetry::spans::store_output(name, bytes.len())
    } else {
        tracing::Span::none()
    };
    let stored = context
        .store
        .put(&key, bytes)
        .instrument(span.clone())
        .await;
    if stored.is_err() {
        unigen_core::telemetry::spans::fail(
            &span,
            unigen_core::telemetry::semconv::error_type::STORAGE,
        );
    }
    stored.map_err(|e| ToolError::Storage(e.to_string()))?;
    Ok(key)
}

/// Runs CPU-bound work off the async threads.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| {
        ToolError::Provider(unigen_core::ProviderError::Permanent(format!(
            "processing crashed: {e}"
        )))
    })?
}

/// Retries a provider call while it fails transiently (3 retries, 50 ms to
/// 2 s with jitter); permanent failures return at once.
pub async fn retry_transient<T, F, Fut>(call: F) -> Result<T, ProviderError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    call.retry(
        ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_secs(2))
            .with_max_times(3)
            .with_jitter(),
    )
    .when(|e| matches!(e, ProviderError::Transient(_)))
    .await
}

/// The job's catalogue model.
pub fn configured_model<'a>(
    context: &'a WorkerContext,
    job: &Job,
) -> Result<&'a unigen_core::config::ModelEntry, ToolError> {
    context.catalogue.get(&job.model).ok_or_else(|| {
        ToolError::InvalidParams(format!("model {} is no longer configured", job.model))
    })
}

/// A job's model and its media vendor.
pub type MediaVendor<'a> = (&'a unigen_core::config::ModelEntry, Arc<dyn MediaUpstream>);

/// The model's image-edit, video or music vendor (Replicate, fal), or
/// `None` when the model runs in-process.
pub fn media_client<'a>(
    context: &'a WorkerContext,
    job: &Job,
) -> Result<Option<MediaVendor<'a>>, ToolError> {
    let model = configured_model(context, job)?;
    Ok(context.providers.media(model).map(|client| (model, client)))
}

/// Runs `input` (plus the client's `model_inputs`) on the model's vendor
/// and returns its first output file, in a `generate_content` CLIENT span
/// of `output_type` ([`semconv::output_type`]); a cancelled job cancels the
/// request upstream.
pub async fn run_media(
    model: &unigen_core::config::ModelEntry,
    client: &dyn MediaUpstream,
    input: serde_json::Value,
    model_inputs: Option<&serde_json::Value>,
    output_type: &str,
) -> Result<Vec<u8>, ToolError> {
    let input = with_model_inputs(input, model_inputs);
    let upstream_model = model.upstream_model.as_deref().unwrap_or(&model.id);
    let span = crate::trace::media_call(model, output_type);
    crate::trace::record_prompt(&span, input["prompt"].as_str().unwrap_or_default());
    Ok(crate::trace::call(span, model, None, client.run_to_file(upstream_model, input)).await?)
}

/// The in-process provider's part of a media job (its simulated latency
/// and failures): transient failures retried, each attempt a
/// `generate_content` CLIENT span of `output_type`.
pub async fn simulate_local(
    context: &WorkerContext,
    job: &Job,
    output_type: &str,
) -> Result<(), ToolError> {
    let model = configured_model(context, job)?;
    retry_transient(|| {
        crate::trace::call(
            crate::trace::media_call(model, output_type),
            model,
            Some(&model.id),
            context.local.simulate_conditions(),
        )
    })
    .await?;
    Ok(())
}

/// The prediction input: the validated fields, plus the client's
/// `model_inputs` for every other field of the model. A validated field
/// always wins (null included): `duration`, `scale` and the like are what
/// the job was priced on.
fn with_model_inputs(
    mut input: serde_json::Value,
    model_inputs: Option<&serde_json::Value>,
) -> serde_json::Value {
    if let (Some(extra), Some(fields)) = (
        model_inputs.and_then(|v| v.as_object()),
        input.as_object_mut(),
    ) {
        for (key, value) in extra {
            fields.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    input
}

/// A stored input as inline data for a Replicate file input, if the request had it.
pub async fn input_data_uri(
    context: &WorkerContext,
    inputs: &StoredInputs,
    field: &str,
) -> Result<Option<String>, ToolError> {
    use base64::Engine;
    let Some(bytes) = input(context, inputs, field).await? else {
        return Ok(None);
    };
    let mime = inputs
        .get(field)
        .map_or("application/octet-stream".to_owned(), |stored| {
            mime_guess::from_path(&stored.file)
                .first_or_octet_stream()
                .to_string()
        });
    Ok(Some(format!(
        "data:{mime};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::with_model_inputs;

    #[test]
    fn model_inputs_add_fields_but_never_override_the_priced_ones() {
        let validated = json!({"prompt": "calm piano", "duration": 5.0, "seed": null});
        let client = json!({"duration": 600, "seed": 7, "top_k": 250, "prompt": "other"});
        assert_eq!(
            with_model_inputs(validated.clone(), Some(&client)),
            json!({"prompt": "calm piano", "duration": 5.0, "seed": null, "top_k": 250})
        );
        assert_eq!(with_model_inputs(validated.clone(), None), validated);
    }
}
