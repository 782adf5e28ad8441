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
use unigen_providers::fal::FalClient;
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

/// The job's catalogue model.
pub fn configured_model<'a>(
    context: &'a WorkerContext,
    job: &Job,
) -> Result<&'a unigen_core::config::ModelEntry, ToolError> {
    context.catalogue.get(&job.model).ok_or_else(|| {
        ToolError::InvalidParams(format!("model {} is no longer configured", job.model))
    })
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

/// The queue-style vendor (Replicate predictions, fal's queue) of a job's
/// model, or `None` when the model runs elsewhere.
pub fn media_client<'a>(
    context: &'a WorkerContext,
    job: &Job,
) -> Result<Option<(&'a unigen_core::config::ModelEntry, MediaClient)>, ToolError> {
    if let Some((model, client)) = replicate_client(context, job)? {
        return Ok(Some((model, MediaClient::Replicate(client))));
    }
    let model = context.catalogue.get(&job.model).ok_or_else(|| {
        ToolError::InvalidParams(format!("model {} is no longer configured", job.model))
    })?;
    Ok(context
        .providers
        .fal(model)
        .map(|client| (model, MediaClient::Fal(client))))
}

/// A vendor that runs a request to completion and answers output files.
#[derive(Clone)]
pub enum MediaClient {
    Replicate(ReplicateClient),
    Fal(FalClient),
}

/// Longest a Replicate prediction or fal request may run, and the largest
/// output downloaded.
const MEDIA_DEADLINE: Duration = Duration::from_secs(30 * 60);
const MEDIA_MAX_OUTPUT: usize = 512 * 1024 * 1024;

impl MediaClient {
    /// Runs `input` (plus the client's `model_inputs`) on the model and
    /// downloads its first output file. The request runs in its own task:
    /// if the job is cancelled (this future dropped), the token fires and
    /// the task cancels the request upstream. fal's apps name their file
    /// inputs `*_url`: a data URI given as `image`, `mask`, `video` or
    /// `audio` is also given under that name.
    pub async fn run(
        &self,
        model: &unigen_core::config::ModelEntry,
        input: serde_json::Value,
        model_inputs: Option<&serde_json::Value>,
    ) -> Result<Vec<u8>, ToolError> {
        let mut input = with_model_inputs(input, model_inputs);
        if let (MediaClient::Fal(_), Some(fields)) = (self, input.as_object_mut()) {
            for name in ["image", "mask", "video", "audio", "input_audio"] {
                let url_name = format!("{}_url", name.trim_start_matches("input_"));
                if let Some(uri) = fields.get(name).filter(|v| v.is_string()).cloned() {
                    fields.entry(url_name).or_insert(uri);
                }
            }
        }
        let upstream_model = model
            .upstream_model
            .clone()
            .unwrap_or_else(|| model.id.clone());
        let cancel = CancellationToken::new();
        let _cancel_on_drop = cancel.clone().drop_guard();
        let task_client = self.clone();
        let request = tokio::spawn(async move {
            match &task_client {
                MediaClient::Replicate(client) => {
                    client
                        .run(&upstream_model, &input, &cancel, MEDIA_DEADLINE)
                        .await
                }
                MediaClient::Fal(client) => {
                    client
                        .run(&upstream_model, &input, &cancel, MEDIA_DEADLINE)
                        .await
                }
            }
        });
        let output = request.await.map_err(|e| {
            ToolError::Provider(ProviderError::Permanent(format!(
                "the upstream request's task failed: {e}"
            )))
        })??;
        let url = match self {
            MediaClient::Replicate(_) => first_output_url(&output),
            MediaClient::Fal(_) => unigen_providers::fal::first_output_url(&output),
        }
        .ok_or_else(|| {
            ToolError::Provider(ProviderError::Permanent(
                "the upstream request produced no file".into(),
            ))
        })?;
        Ok(match self {
            MediaClient::Replicate(client) => client.download(&url, MEDIA_MAX_OUTPUT).await?,
            MediaClient::Fal(client) => client.download(&url, MEDIA_MAX_OUTPUT).await?,
        })
    }
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
