//! Server-sent events of `POST /responses` with `stream: true`: the chat
//! chunk stream (an upstream's, or the built-in model's answer in pieces)
//! translated event by event ([`StreamBridge`]), metered as chat streams
//! are, and the response stored once it ends.

use actix_web::web::Bytes;
use futures_util::stream::{self, StreamExt};
use serde_json::{Map, Value, json};
use unigen_db::PgPool;
use unigen_protocols::responses::Ids;
use unigen_protocols::responses::output::{self, Head};
use unigen_protocols::responses::stream::StreamBridge;
use unigen_providers::chat::count_tokens;
use unigen_providers::completion::{Answer, said_in};
use unigen_providers::openai::ChunkStream;
use uuid::Uuid;

use crate::metering::ConcurrencySlot;
use crate::metering::chat::{ChatMeter, usage};

/// Where and whether a response is stored, and what it continues.
pub struct Conversation {
    pub pool: PgPool,
    pub org_id: Uuid,
    pub store: bool,
    pub previous_response_id: Option<String>,
    /// The stored conversation continued (`previous_response_id`).
    pub context: Vec<Value>,
    /// This request's input items.
    pub input: Vec<Value>,
    /// The upstream holding the response (a native Responses upstream);
    /// `None` when bridged through chat.
    pub upstream: Option<String>,
    /// How long the stored response is kept (`responses.retention_seconds`).
    pub retention: std::time::Duration,
}

/// The built-in model's whole answer as a chat chunk stream: its first
/// choice's deltas, its finish reason, then its usage.
pub fn local_chunks(answer: Answer) -> ChunkStream {
    let mut chunks = Vec::new();
    if let Some((deltas, finish)) = answer.deltas.into_iter().next() {
        chunks.extend(deltas.into_iter().map(
            |delta| json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}]}),
        ));
        chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}));
    }
    chunks.push(json!({"choices": [], "usage": {
        "prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
    }}));
    Box::pin(stream::iter(chunks.into_iter().map(Ok)))
}

fn sse(events: Vec<Value>) -> Bytes {
    let mut text = String::new();
    for event in events {
        let kind = event["type"].as_str().unwrap_or("message").to_owned();
        text.push_str(&format!("event: {kind}\ndata: {event}\n\n"));
    }
    Bytes::from(text)
}

/// The events of `upstream`'s chunks, as they arrive. Dropping it (client
/// gone) drops the upstream stream; the meter then charges what was said.
pub fn relay(
    upstream: ChunkStream,
    head: Head,
    echo: Map<String, Value>,
    ids: Ids,
    conversation: Conversation,
    meter: ChatMeter,
    slot: ConcurrencySlot,
) -> impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> {
    struct Relay {
        upstream: ChunkStream,
        bridge: StreamBridge,
        conversation: Conversation,
        meter: ChatMeter,
        _slot: ConcurrencySlot,
        said: String,
        usage: Option<(u32, u32)>,
        started: bool,
        finished: bool,
    }
    impl Drop for Relay {
        fn drop(&mut self) {
            if !self.finished {
                self.meter.counted = count_tokens(&self.said);
            }
        }
    }
    impl Relay {
        /// Settles the meter; the usage in the Responses shape.
        async fn settle(&mut self, prompt: u32, completion: u32) -> Value {
            let settled = self.meter.settle(prompt, completion).await;
            output::usage(&usage(prompt, completion, settled.as_ref()))
        }

        async fn store(&self) {
            let Some(response) = self.bridge.response() else {
                return;
            };
            if let Err(err) = self.conversation.store(response).await {
                tracing::error!(error = %err, response.id = %response["id"], "storing a streamed response failed");
            }
        }
    }
    let relay = Relay {
        upstream,
        bridge: StreamBridge::new(head, echo, ids),
        conversation,
        meter,
        _slot: slot,
        said: String::new(),
        usage: None,
        started: false,
        finished: false,
    };
    stream::unfold(Some(relay), |state| async move {
        let mut relay = state?;
        if relay.finished {
            return None;
        }
        if !relay.started {
            relay.started = true;
            let events = relay.bridge.start();
            return Some((Ok(sse(events)), Some(relay)));
        }
        loop {
            match relay.upstream.next().await {
                Some(Ok(chunk)) => {
                    if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
                        let read = |k: &str| u[k].as_u64().unwrap_or(0) as u32;
                        relay.usage = Some((read("prompt_tokens"), read("completion_tokens")));
                    }
                    for choice in chunk["choices"].as_array().into_iter().flatten() {
                        if choice["index"].as_u64().unwrap_or(0) == 0 {
                            relay.said.push_str(&said_in(&choice["delta"]));
                        }
                    }
                    let events = relay.bridge.push(&chunk);
                    if events.is_empty() {
                        continue;
                    }
                    return Some((Ok(sse(events)), Some(relay)));
                }
                Some(Err(err)) => {
                    relay.finished = true;
                    // What was generated before the failure is charged.
                    let (prompt, said) = (relay.meter.prompt_tokens, count_tokens(&relay.said));
                    let spent = relay.settle(prompt, said).await;
                    let events = relay
                        .bridge
                        .fail(&format!("the model provider failed: {err}"), spent);
                    relay.store().await;
                    return Some((Ok(sse(events)), Some(relay)));
                }
                None => {
                    relay.finished = true;
                    let (prompt, completion) = relay
                        .usage
                        .unwrap_or_else(|| (relay.meter.prompt_tokens, count_tokens(&relay.said)));
                    let spent = relay.settle(prompt, completion).await;
                    let events = relay.bridge.finish(spent, chrono::Utc::now().timestamp());
                    relay.store().await;
                    return Some((Ok(sse(events)), Some(relay)));
                }
            }
        }
    })
}
