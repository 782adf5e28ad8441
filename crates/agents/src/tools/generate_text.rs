//! `generate_text`: a separate completion on the agent's own model, without
//! tools and without the run's conversation.

use serde_json::json;

use super::args::Args;
use super::kit::{Done, Failure, ToolDeps, ToolScope, provider_failure, text_message};
use unigen_db::billing::chat_credits;
use unigen_providers::chat::{ChatMessage, count_prompt_tokens};
use unigen_providers::llm::{ToolCall, TurnRequest};

pub(super) const MAX_PROMPT_CHARS: usize = 50_000;
pub(super) const MAX_SYSTEM_CHARS: usize = crate::MAX_SYSTEM_PROMPT_CHARS;
/// Larger `max_tokens` are refused as nonsense; smaller ones above the
/// agent's `max_tokens` are capped to it.
const MAX_TOKENS_ASKED: i64 = 1_000_000;

/// The completion a call asks for.
struct TextRequest {
    messages: Vec<ChatMessage>,
    max_tokens: u32,
}

fn text_request(args: &Args<'_>, scope: &ToolScope<'_>) -> Result<TextRequest, Failure> {
    let prompt = args.required_text("prompt", MAX_PROMPT_CHARS)?;
    let system = args
        .text("system", MAX_SYSTEM_CHARS)?
        .filter(|s| !s.trim().is_empty());
    let ceiling = i64::from(scope.max_tokens.max(1));
    // A larger request is capped, not refused: the agent's limit is not
    // the model's to know.
    let max_tokens = match args.integer("max_tokens", 1, MAX_TOKENS_ASKED)? {
        Some(asked) => asked.min(ceiling),
        None => ceiling,
    };
    let mut messages = Vec::with_capacity(2);
    if let Some(system) = system {
        messages.push(text_message("system", system));
    }
    messages.push(text_message("user", prompt));
    Ok(TextRequest {
        messages,
        max_tokens: u32::try_from(max_tokens).unwrap_or(u32::MAX),
    })
}

pub(super) async fn generate_text(
    deps: &ToolDeps,
    args: &Args<'_>,
    scope: &ToolScope<'_>,
) -> Result<Done, Failure> {
    let request = text_request(args, scope)?;
    let turn = deps
        .chat
        .complete(&TurnRequest {
            model: scope.model,
            messages: &request.messages,
            tools: &[],
            temperature: scope.temperature,
            max_tokens: request.max_tokens,
        })
        .await
        .map_err(|err| provider_failure("text generation", &scope.model.id, &err))?;
    Ok(Done {
        output: json!({
            "text": turn.content.unwrap_or_default(),
            "finish_reason": turn.finish_reason,
        }),
        prompt_tokens: turn.prompt_tokens,
        completion_tokens: turn.completion_tokens,
    })
}

/// Token credits of the completion if it used all its `max_tokens`; 0 for
/// arguments that will be refused.
pub(super) fn worst_case_credits(call: &ToolCall, scope: &ToolScope<'_>) -> i64 {
    let Ok(request) = Args::of(&call.arguments).and_then(|args| text_request(&args, scope)) else {
        return 0;
    };
    chat_credits(
        count_prompt_tokens(&request.messages),
        request.max_tokens,
        scope.model,
    )
}
