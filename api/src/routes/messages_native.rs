//! `POST /messages` on a model whose upstream speaks Anthropic's Messages
//! API (the `anthropic` adapter): the request goes as the client sent it
//! (but for the upstream's model name), with its `anthropic-version` and
//! `anthropic-beta` headers; the answer and the stream's events come back
//! as Anthropic sent them (but for the catalogue's model name), metered
//! with the usage Anthropic reports.

use actix_web::HttpResponse;
use actix_web::web::Bytes;
use futures_util::stream::{self, StreamExt};
use serde_json::{Value, json};
use unigen_core::ProviderError;
use unigen_core::config::ModelEntry;
use unigen_protocols::anthropic::{ErrorKind, Event};
use unigen_providers::chat::count_tokens;
use unigen_providers::openai::ChunkStream;

use super::chat_stream::event_stream;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::metering::ConcurrencySlot;
use crate::metering::chat::ChatMeter;
use crate::state::AppState;

/// A native exchange, prepared and reserved.
pub struct Native {
    pub model: ModelEntry,
    /// The client's body.
    pub body: Value,
    /// `anthropic-version` and `anthropic-beta`, as the client sent them.
    pub headers: Vec<(String, String)>,
    pub stream: bool,
    pub meter: ChatMeter,
    pub slot: ConcurrencySlot,
}

/// An upstream's refusal of the request (4xx) is the client's error;
/// anything else is `overloaded_error`.
fn upstream_failure(err: ProviderError) -> ApiError {
    match err {
        ProviderError::Permanent(message) => ApiError::BadRequest(format!(
            "the model provider rejected the request: {message}"
        )),
        ProviderError::Transient(_) => ApiError::Upstream(err.to_string()),
    }
}

/// Prompt tokens (cached ones included) and output tokens of a usage object.
fn usage_of(usage: &Value) -> (Option<u32>, Option<u32>) {
    let prompt = [
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ]
    .iter()
    .filter_map(|key| usage[*key].as_u64())
    .reduce(|a, b| a + b)
    .map(|n| n as u32);
    (prompt, usage["output_tokens"].as_u64().map(|n| n as u32))
}

pub async fn respond(
    state: &AppState,
    caller: &Caller,
    native: Native,
) -> Result<HttpResponse, ApiError> {
    let Native {
        model,
        mut body,
        headers,
        stream,
        mut meter,
        slot,
    } = native;
    body["model"] = json!(model.upstream_model.as_deref().unwrap_or(&model.id));
    if stream {
        return match state.chat.messages_stream(&model, &body, &headers).await {
            Ok(upstream) => Ok(event_stream(relay(upstream, model.id.clone(), meter, slot))),
            Err(err) => {
                meter.release().await;
                Err(upstream_failure(err))
            }
        };
    }
    let mut answer = match state.chat.messages(&model, &body, &headers).await {
        Ok(answer) => answer,
        Err(err) => {
            meter.release().await;
            return Err(upstream_failure(err));
        }
    };
    drop(slot);
    let (prompt, completion) = usage_of(&answer["usage"]);
    let prompt = prompt.unwrap_or(meter.prompt_tokens);
    let completion = completion.unwrap_or_else(|| count_tokens(&said_in(&answer["content"])));
    if let Some(settled) = meter.settle(prompt, completion).await {
        caller
            .charges
            .record(settled.credits, settled.account.clone());
    }
    answer["model"] = json!(model.id);
    Ok(HttpResponse::Ok().json(answer))
}

/// What content blocks or a delta say (for usage when none is reported).
fn said_in(value: &Value) -> String {
    let mut said = String::new();
    let mut add = |block: &Value| {
        for key in ["text", "thinking", "partial_json"] {
            if let Some(text) = block[key].as_str() {
                said.push_str(text);
            }
        }
        if block["type"] == "tool_use" {
            said.push_str(&block["input"].to_string());
        }
    };
    match value {
        Value::Array(blocks) => blocks.iter().for_each(&mut add),
        other => add(other),
    }
    said
}

fn frame(event: &Value) -> Bytes {
    let name = event["type"].as_str().unwrap_or("message");
    Bytes::from(format!("event: {name}\ndata: {event}\n\n"))
}

/// Relays the upstream's events as they arrive (the catalogue's model name
/// in `message_start`), reads its usage, and settles the meter at
/// `message_stop`. Dropping it (client gone) drops the upstream stream and
/// charges what was said.
fn relay(
    upstream: ChunkStream,
    model: String,
    meter: ChatMeter,
    slot: ConcurrencySlot,
) -> impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> {
    struct Relay {
        upstream: ChunkStream,
        model: String,
        meter: ChatMeter,
        _slot: ConcurrencySlot,
        said: String,
        prompt: Option<u32>,
        completion: Option<u32>,
        finished: bool,
    }
    impl Drop for Relay {
        fn drop(&mut self) {
            if !self.finished {
                self.meter.counted = count_tokens(&self.said);
            }
        }
    }
    let relay = Relay {
        upstream,
        model,
        meter,
        _slot: slot,
        said: String::new(),
        prompt: None,
        completion: None,
        finished: false,
    };
    stream::unfold(Some(relay), |state| async move {
        let mut relay = state?;
        if relay.finished {
            return None;
        }
        match relay.upstream.next().await {
            Some(Ok(mut event)) => {
                match event["type"].as_str().unwrap_or_default() {
                    "message_start" => {
                        event["message"]["model"] = json!(relay.model);
                        let (prompt, completion) = usage_of(&event["message"]["usage"]);
                        relay.prompt = prompt;
                        relay.completion = completion;
                    }
                    "content_block_start" => {
                        relay.said.push_str(&said_in(&event["content_block"]));
                    }
                    "content_block_delta" => relay.said.push_str(&said_in(&event["delta"])),
                    "message_delta" => {
                        let (prompt, completion) = usage_of(&event["usage"]);
                        relay.prompt = prompt.or(relay.prompt);
                        relay.completion = completion.or(relay.completion);
                    }
                    "message_stop" => {
                        relay.finished = true;
                        let prompt = relay.prompt.unwrap_or(relay.meter.prompt_tokens);
                        let completion = relay
                            .completion
                            .unwrap_or_else(|| count_tokens(&relay.said));
                        relay.meter.settle(prompt, completion).await;
                    }
                    _ => {}
                }
                Some((Ok(frame(&event)), Some(relay)))
            }
            Some(Err(err)) => {
                relay.finished = true;
                // What was generated before the failure is charged.
                let (prompt, said) = (
                    relay.prompt.unwrap_or(relay.meter.prompt_tokens),
                    count_tokens(&relay.said),
                );
                relay.meter.settle(prompt, said).await;
                let kind = match err {
                    ProviderError::Transient(_) => ErrorKind::Overloaded,
                    ProviderError::Permanent(_) => ErrorKind::Api,
                };
                let event = Event::error(kind, &format!("the model provider failed: {err}"));
                Some((Ok(Bytes::from(event.to_sse())), Some(relay)))
            }
            None => None,
        }
    })
}
