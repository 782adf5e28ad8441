//! One handler per tool. Each reads its stored parameters and inputs, calls
//! the provider, stores the outputs and says what they cost.

pub mod edit;
pub mod fixture;
pub mod image;
pub mod music;
pub mod speech;
pub mod transcription;
pub mod video;

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use unigen_core::ProviderError;
use unigen_core::params::StoredInputs;
use unigen_db::models::Job;
use unigen_providers::replicate::{ReplicateClient, first_output_url};

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
    context
        .store
        .put(&key, bytes)
        .await
        .map_err(|e| ToolError::Storage(e.to_string()))?;
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

/// The OpenAI-wire client (`openai`, `azure-openai`) of a job's model (its
/// first configured upstream), or `None` for models on other adapters.
pub fn upstream_client<'a>(
    context: &'a WorkerContext,
    job: &Job,
) -> Result<
    Option<(
        &'a unigen_core::config::ModelEntry,
        unigen_providers::openai::OpenAiClient,
    )>,
    ToolError,
> {
    let model = context.catalogue.get(&job.model).ok_or_else(|| {
        ToolError::InvalidParams(format!("model {} is no longer configured", job.model))
    })?;
    // Configuration is checked at startup: a model on such an adapter names
    // a configured upstream.
    Ok(context
        .providers
        .openai(model)
        .map(|client| (model, client)))
}

/// Longest a Replicate prediction may run, and the largest output downloaded.
const REPLICATE_DEADLINE: Duration = Duration::from_secs(30 * 60);
const REPLICATE_MAX_OUTPUT: usize = 512 * 1024 * 1024;

/// The model's `replicate` client, or `None` when the model runs elsewhere.
pub fn replicate_client<'a>(
    context: &'a WorkerContext,
    job: &Job,
) -> Result<Option<(&'a unigen_core::config::ModelEntry, ReplicateClient)>, ToolError> {
    let model = context.catalogue.get(&job.model).ok_or_else(|| {
        ToolError::InvalidParams(format!("model {} is no longer configured", job.model))
    })?;
    Ok(context
        .providers
        .replicate(model)
        .map(|client| (model, client)))
}

/// Runs a prediction and downloads its first output file. The prediction
/// runs in its own task: if the job is cancelled (this future dropped), the
/// token fires and the task cancels the prediction upstream.
pub async fn run_replicate(
    model: &unigen_core::config::ModelEntry,
    client: &ReplicateClient,
    input: serde_json::Value,
    model_inputs: Option<&serde_json::Value>,
) -> Result<Vec<u8>, ToolError> {
    let input = with_model_inputs(input, model_inputs);
    let upstream_model = model
        .upstream_model
        .clone()
        .unwrap_or_else(|| model.id.clone());
    let cancel = CancellationToken::new();
    let _cancel_on_drop = cancel.clone().drop_guard();
    let task_client = client.clone();
    let prediction = tokio::spawn(async move {
        task_client
            .run(&upstream_model, &input, &cancel, REPLICATE_DEADLINE)
            .await
    });
    let output = prediction.await.map_err(|e| {
        ToolError::Provider(ProviderError::Permanent(format!(
            "the prediction task failed: {e}"
        )))
    })??;
    let url = first_output_url(&output).ok_or_else(|| {
        ToolError::Provider(ProviderError::Permanent(
            "the prediction produced no file".into(),
        ))
    })?;
    Ok(client.download(&url, REPLICATE_MAX_OUTPUT).await?)
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
