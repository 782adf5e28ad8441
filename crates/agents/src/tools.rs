//! The seven agent tools and the one executor an agent run calls them
//! through.
//!
//! [`ToolBox::execute`] runs a model's [`ToolCall`] and always answers a
//! [`ToolOutcome`]: a failure (unknown tool, bad arguments, an upstream or
//! a job that failed) is an outcome the run reports to the model, so it can
//! recover, and to the client. Messages name the argument at fault; causes
//! that are ours (database, storage, renderer, upstream bodies) are logged
//! and never shown.
//!
//! | tool | does | output |
//! |---|---|---|
//! | `web_search` | the configured search backend | `{query, results: [{title, url, snippet}]}` |
//! | `web_fetch` | an SSRF-guarded GET, HTML made readable | `{url, final_url, title, content, content_type, truncated}` |
//! | `generate_text` | a completion on the agent's model | `{text, finish_reason}` |
//! | `generate_image` | a job on the image pipeline, waited for | `{job_id, images: [{url, width, height}]}` |
//! | `analyze_image` | a vision model's answer + measured facts | `{answer, model, width, height, format, dominant_colors, mean_brightness}` |
//! | `generate_chart` | a PNG/SVG chart, stored | `{url, format, mime, width, height, bytes}` |
//! | `create_document` | a PDF/Markdown/CSV file, stored | `{url, format, mime, filename, bytes}` |

mod analyze_image;
mod args;
mod artifacts;
mod generate_image;
mod generate_text;
mod html;
mod specs;
mod web;

#[cfg(test)]
mod tests;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use serde_json::{Value, json};
use uuid::Uuid;

pub use specs::tool_specs;

use self::args::Args;
use super::{TOOLS, tool_cost};
use unigen_core::ProviderError;
use unigen_core::ValidationError;
use unigen_core::config::ModelEntry;
use unigen_providers::chat::ChatMessage;
use unigen_providers::chat::MessageContent;
use unigen_providers::llm::ToolCall;

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

/// The tool executor; cheap to clone.
#[derive(Clone)]
pub struct ToolBox(Arc<ToolDeps>);

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

/// What one call came to.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// The step's `tool_output` object: the tool's result, or `{"error": "<user-facing message>"}`.
    pub output: Value,
    pub succeeded: bool,
    /// The spec's price when it succeeded; 0 when it failed.
    pub credits: i64,
    /// Tokens of sub-completions (generate_text, analyze_image); 0 otherwise.
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
}

/// A tool's result and the tokens its sub-completion used.
#[derive(Debug)]
struct Done {
    output: Value,
    prompt_tokens: u32,
    completion_tokens: u32,
}

impl Done {
    fn output(output: Value) -> Self {
        Self {
            output,
            prompt_tokens: 0,
            completion_tokens: 0,
        }
    }
}

/// Why a call failed, as the model and the client are told.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure(String);

impl Failure {
    fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl From<ValidationError> for Failure {
    fn from(err: ValidationError) -> Self {
        Self(err.message)
    }
}

impl ToolBox {
    pub fn new(deps: ToolDeps) -> Self {
        Self(Arc::new(deps))
    }

    /// Runs one call. Never panics, never returns Err: a failure is an outcome the
    /// run reports to the model (so it can recover) and to the client.
    #[tracing::instrument(skip_all, fields(tool = %call.name, run.id = %scope.run_id, step = scope.step_number))]
    pub async fn execute(&self, scope: &ToolScope<'_>, call: &ToolCall) -> ToolOutcome {
        let started = Instant::now();
        let result = AssertUnwindSafe(self.dispatch(scope, call))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| {
                tracing::error!("the tool panicked");
                Err(Failure::new("the tool failed unexpectedly"))
            });
        let duration_ms = started.elapsed().as_millis() as u64;
        match result {
            Ok(done) => {
                tracing::info!(duration_ms, "tool call succeeded");
                ToolOutcome {
                    output: done.output,
                    succeeded: true,
                    credits: tool_cost(&call.name).unwrap_or(0),
                    prompt_tokens: done.prompt_tokens,
                    completion_tokens: done.completion_tokens,
                }
            }
            Err(Failure(message)) => {
                tracing::info!(duration_ms, reason = %message, "tool call failed");
                ToolOutcome {
                    output: json!({ "error": message }),
                    succeeded: false,
                    credits: 0,
                    prompt_tokens: 0,
                    completion_tokens: 0,
                }
            }
        }
    }

    async fn dispatch(&self, scope: &ToolScope<'_>, call: &ToolCall) -> Result<Done, Failure> {
        let deps = &*self.0;
        if tool_cost(&call.name).is_none() {
            let known: Vec<&str> = TOOLS.iter().map(|(name, _)| *name).collect();
            return Err(Failure::new(format!(
                "unknown tool `{}`; available: {}",
                call.name,
                known.join(", ")
            )));
        }
        let args = Args::of(&call.arguments)?;
        match call.name.as_str() {
            "web_search" => web::web_search(deps, &args).await,
            "web_fetch" => web::web_fetch(deps, &args).await,
            "generate_text" => generate_text::generate_text(deps, &args, scope).await,
            "generate_image" => generate_image::generate_image(deps, &args, scope).await,
            "analyze_image" => analyze_image::analyze_image(deps, &args, scope).await,
            "generate_chart" => artifacts::generate_chart(deps, &call.arguments, scope).await,
            "create_document" => artifacts::create_document(deps, &call.arguments, scope).await,
            other => {
                // TOOLS lists a tool this executor does not run: a bug.
                tracing::error!(tool = other, "no executor for a known tool");
                Err(Failure::new(format!("the tool `{other}` is not available")))
            }
        }
    }
}

/// Credits to reserve before executing `call`: its price, plus for
/// generate_text the worst-case token credits of its sub-completion (its
/// prompt and full `max_tokens` at the agent model's prices, as
/// [`unigen_db::billing::chat_credits`] counts them). analyze_image's answer is
/// reserved the same way (question + 1,500 image tokens + up to 1,000
/// answer tokens), as its tokens are metered too. Unknown tools and
/// arguments that will be refused reserve only the price (0 if unknown).
pub fn reserve_estimate(call: &ToolCall, scope: &ToolScope<'_>) -> i64 {
    let price = tool_cost(&call.name).unwrap_or(0);
    match call.name.as_str() {
        "generate_text" => price + generate_text::worst_case_credits(call, scope),
        "analyze_image" => price + analyze_image::worst_case_credits(call, scope),
        _ => price,
    }
}

/// Runs CPU work (parsing, decoding, rendering) off the async threads.
async fn blocking<T: Send + 'static>(
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
fn provider_failure(what: &str, model: &str, err: &ProviderError) -> Failure {
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

fn text_message(role: &str, text: &str) -> ChatMessage {
    ChatMessage {
        role: role.to_owned(),
        content: Some(MessageContent::Text(text.to_owned())),
        images: None,
        name: None,
        tool_call_id: None,
        tool_calls: None,
    }
}
