//! Server-sent events of `POST /chat/completions`: OpenAI chunk frames, the
//! relay of an upstream's stream, and a whole answer streamed in pieces.

use actix_web::HttpResponse;
use actix_web::web::Bytes;
use futures_util::stream::{self, StreamExt};
use serde_json::{Value, json};
use unigen_providers::chat::{ChatParams, count_tokens};
use unigen_providers::completion::said_in;
use unigen_providers::openai::ChunkStream;

use crate::metering::ConcurrencySlot;
use crate::metering::chat::{ChatMeter, usage};

/// Our id, creation time and model on every chunk.
pub struct Frames {
    pub id: String,
    pub created: i64,
    pub model: String,
}

impl Frames {
    /// A chunk of choice `index`.
    pub fn chunk(&self, index: usize, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{ "index": index, "delta": delta, "logprobs": null, "finish_reason": finish }],
        })
    }

    pub fn usage_chunk(&self, usage: Value) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [], "usage": usage,
        })
    }

    /// An upstream chunk as ours: its choices (deltas, tool calls,
    /// logprobs) and other fields as given, our id, model and creation time.
    /// `None` for a chunk without choices (the upstream's usage chunk).
    pub fn relayed(&self, mut chunk: Value) -> Option<Value> {
        let fields = chunk.as_object_mut()?;
        fields.remove("usage");
        if fields
            .get("choices")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            return None;
        }
        fields.insert("id".into(), json!(self.id));
        fields.insert("object".into(), json!("chat.completion.chunk"));
        fields.insert("created".into(), json!(self.created));
        fields.insert("model".into(), json!(self.model));
        Some(chunk)
    }
}

fn sse(event: &Value) -> Result<Bytes, actix_web::Error> {
    Ok(Bytes::from(format!("data: {event}\n\n")))
}

pub fn event_stream(
    body: impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> + 'static,
) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
}

/// A whole answer as a stream: per choice, the role, its deltas and its
/// finish reason; then the usage chunk (if asked) and `[DONE]`.
pub fn pieces_stream(
    frames: &Frames,
    choices: &[(Vec<Value>, String)],
    spent: Option<Value>,
) -> HttpResponse {
    let mut events = Vec::new();
    for (index, (deltas, finish_reason)) in choices.iter().enumerate() {
        let calls = deltas
            .first()
            .is_some_and(|d| d.get("tool_calls").is_some());
        let role = if calls {
            json!({"role": "assistant", "content": null})
        } else {
            json!({"role": "assistant", "content": ""})
        };
        events.push(frames.chunk(index, role, None));
        events.extend(
            deltas
                .iter()
                .map(|delta| frames.chunk(index, delta.clone(), None)),
        );
        events.push(frames.chunk(index, json!({}), Some(finish_reason)));
    }
    if let Some(spent) = spent {
        events.push(frames.usage_chunk(spent));
    }
    let frames = events.iter().map(sse).collect::<Vec<_>>();
    event_stream(stream::iter(frames).chain(stream::once(async {
        Ok(Bytes::from_static(b"data: [DONE]\n\n"))
    })))
}

/// Forwards upstream chunks as they arrive (our id and model), counts what
/// was said for usage when the upstream reports none, and ends with the
/// usage chunk (if asked) and `[DONE]`. Dropping it (client gone) drops the
/// upstream stream, which closes the upstream request.
pub fn relay_stream(
    upstream: ChunkStream,
    frames: Frames,
    params: ChatParams,
    meter: ChatMeter,
    slot: ConcurrencySlot,
) -> impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> {
    struct Relay {
        upstream: ChunkStream,
        frames: Frames,
        params: ChatParams,
        meter: ChatMeter,
        _slot: ConcurrencySlot,
        said: String,
        usage: Option<(u32, u32)>,
        finished: bool,
    }
    impl Drop for Relay {
        fn drop(&mut self) {
            // A client gone mid-stream: the meter charges what was said.
            if !self.finished {
                self.meter.counted = count_tokens(&self.said);
            }
        }
    }
    let relay = Relay {
        upstream,
        frames,
        params,
        meter,
        _slot: slot,
        said: String::new(),
        usage: None,
        finished: false,
    };
    stream::unfold(Some(relay), |state| async move {
        let mut relay = state?;
        if relay.finished {
            return None;
        }
        loop {
            match relay.upstream.next().await {
                Some(Ok(chunk)) => {
                    if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
                        let read = |k: &str| u[k].as_u64().unwrap_or(0) as u32;
                        relay.usage = Some((read("prompt_tokens"), read("completion_tokens")));
                    }
                    for choice in chunk["choices"].as_array().into_iter().flatten() {
                        relay.said.push_str(&said_in(&choice["delta"]));
                    }
                    let Some(event) = relay.frames.relayed(chunk) else {
                        continue;
                    };
                    return Some((sse(&event), Some(relay)));
                }
                Some(Err(err)) => {
                    let event = json!({ "error": { "message": format!("the model provider failed: {err}"), "type": "server_error", "code": "server_error" } });
                    relay.finished = true;
                    // What was generated before the failure is charged.
                    let (prompt, said) = (relay.meter.prompt_tokens, count_tokens(&relay.said));
                    relay.meter.settle(prompt, said).await;
                    let tail = format!("data: {event}\n\ndata: [DONE]\n\n");
                    return Some((Ok(Bytes::from(tail)), Some(relay)));
                }
                None => {
                    relay.finished = true;
                    let (prompt, completion) = relay
                        .usage
                        .unwrap_or_else(|| (relay.meter.prompt_tokens, count_tokens(&relay.said)));
                    let settled = relay.meter.settle(prompt, completion).await;
                    let mut tail = String::new();
                    if relay.params.include_usage {
                        let spent = usage(prompt, completion, settled.as_ref());
                        tail.push_str(&format!("data: {}\n\n", relay.frames.usage_chunk(spent)));
                    }
                    tail.push_str("data: [DONE]\n\n");
                    return Some((Ok(Bytes::from(tail)), Some(relay)));
                }
            }
        }
    })
}
