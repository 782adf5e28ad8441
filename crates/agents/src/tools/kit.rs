//! What every tool shares: its dependencies and scope, its result and
//! failure, and helpers.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use unigen_core::config::ModelEntry;
use unigen_core::{ProviderError, ValidationError};
use unigen_providers::chat::{ChatMessage, MessageContent};
use uuid::Uuid;

/// What the tools need, built once per process.
pub struct ToolDeps {
    pub pool: unigen_db::PgPool,
    pub catalogue: Arc<unigen_providers::Catalogue>,
    pub chat: unigen_providers::llm::ChatModels,
    pub fetcher: unigen_core::fetch::Fetcher,
    /// `None` when no search backend is configured.
    pub search: Option<unigen_providers::search::SearchClient>,
    pub store: Arc<dyn unigen_core::storage::FileStore>,
    pub signer: unigen_core::storage::UrlSigner,
    pub submitter: unigen_jobs::JobSubmitter,
    pub hub: unigen_db::notify::ListenerHub,
    /// Tells the worker running a job that generate_image gave up on it.
    pub notifier: unigen_db::notify::Notifier,
    /// How long generate_image waits for its job before giving up (and cancelling it).
    pub image_wait: Duration,
}

/// Who calls, from which run and step, with which model settings.
#[derive(Debug, Clone, Copy)]
pub struct ToolScope<'a> {
    pub org_id: Uuid,
    pub api_key_id: Uuid,
    pub run_id: Uuid,
    /// Names the files the call stores.
    pub step_number: i32,
    /// The agent's chat model (generate_text uses it).
    pub model: &'a ModelEntry,
    pub temperature: f64,
    /// The agent's max_tokens (upper bound for generate_text).
    pub max_tokens: u32,
}

/// A tool's result and the tokens its sub-completion used.
#[derive(Debug)]
pub(crate) struct Done {
    pub(crate) output: Value,
    pub(crate) prompt_tokens: u32,
    pub(crate) completion_tokens: u32,
}

impl Done {
    pub(crate) fn output(output: Value) -> Self {
        Self {
            output,
            prompt_tokens: 0,
            completion_tokens: 0,
        }
    }
}

/// Why a call failed, as the model and the client are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure(pub(crate) String);

impl Failure {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl From<ValidationError> for Failure {
    fn from(err: ValidationError) -> Self {
        Self(err.message)
    }
}

/// Runs CPU work (parsing, decoding, rendering) off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Failure> {
    tokio::task::spawn_blocking(work).await.map_err(|err| {
        tracing::error!(error = %err, "{what} work panicked");
        Failure::new(format!("the {what} step failed unexpectedly"))
    })
}

/// A sub-completion that failed: the cause is logged, never shown (it may
/// quote an upstream).
pub(crate) fn provider_failure(what: &str, model: &str, err: &ProviderError) -> Failure {
    tracing::warn!(model, error = %err, "{what} failed");
    match err {
        ProviderError::Transient(_) => Failure::new(format!(
            "{what} failed: the model `{model}` is temporarily unavailable; try again later"
        )),
        ProviderError::Permanent(_) => Failure::new(format!(
            "{what} failed: the model `{model}` could not answer"
        )),
    }
}

pub(crate) fn text_message(role: &str, text: &str) -> ChatMessage {
    ChatMessage {
        role: role.to_owned(),
        content: Some(MessageContent::Text(text.to_owned())),
        images: None,
        name: None,
        tool_call_id: None,
        tool_calls: None,
        extra: Default::default(),
    }
}
