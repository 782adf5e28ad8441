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
mod kit;
mod specs;
mod web;

#[cfg(test)]
mod tests;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use serde_json::{Value, json};
use tracing::{Instrument, Span};
use unigen_core::telemetry::{self, semconv, spans};

pub use kit::{ToolDeps, ToolScope};
pub use specs::tool_specs;

use kit::{Done, Failure};

use self::args::Args;
use super::{TOOLS, tool_cost};
use unigen_providers::llm::ToolCall;

/// The tool executor; cheap to clone.
#[derive(Clone)]
pub struct ToolBox(Arc<ToolDeps>);

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

impl ToolBox {
    pub fn new(deps: ToolDeps) -> Self {
        Self(Arc::new(deps))
    }

    /// Runs one call. Never panics, never returns Err: a failure is an outcome the
    /// run reports to the model (so it can recover) and to the client.
    #[tracing::instrument(skip_all, fields(tool = %call.name, run.id = %scope.run_id, step = scope.step_number))]
    pub async fn execute(&self, scope: &ToolScope<'_>, call: &ToolCall) -> ToolOutcome {
        let started = Instant::now();
        // `execute_tool {tool}` (none with tracing off); its arguments and
        // result only with the content opt-in.
        let span = if telemetry::enabled() {
            spans::execute_tool(&call.name, &call.id)
        } else {
            Span::none()
        };
        let result = AssertUnwindSafe(self.dispatch(scope, call))
            .catch_unwind()
            .instrument(span.clone())
            .await
            .unwrap_or_else(|_| {
                tracing::error!("the tool panicked");
                Err(Failure::new("the tool failed unexpectedly"))
            });
        let duration_ms = started.elapsed().as_millis() as u64;
        if !span.is_disabled() {
            if let Err(Failure(_)) = &result {
                spans::fail(&span, semconv::error_type::OTHER);
            }
            if telemetry::record_content() {
                let output = match &result {
                    Ok(done) => done.output.to_string(),
                    Err(Failure(message)) => json!({ "error": message }).to_string(),
                };
                let arguments = call.arguments.to_string();
                spans::execute_tool_content(&span, Some(&arguments), Some(&output));
            }
        }
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
