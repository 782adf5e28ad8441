//! Server-sent events of `POST /messages` (`stream: true`): a chat chunk
//! stream, or the built-in model's whole answer, as Anthropic's events
//! ([`StreamTranslator`]), metered as the chat stream is.

use actix_web::HttpResponse;
use actix_web::web::Bytes;
use futures_util::stream::{self, StreamExt};
use unigen_core::config::ModelEntry;
use unigen_protocols::anthropic::{ErrorKind, Event, StreamTranslator};
use unigen_providers::chat::{ChatParams, count_tokens};
use unigen_providers::completion::{ChatService, said_in};
use unigen_providers::openai::ChunkStream;

use super::chat_stream::event_stream;
use crate::error::ApiError;
use crate::metering::ConcurrencySlot;
use crate::metering::chat::ChatMeter;
use crate::state::AppState;

/// A prepared streamed exchange: its id, model, parameters, and what it holds.
pub struct Exchange {
    pub id: String,
    pub model: ModelEntry,
    pub params: ChatParams,
    pub prompt_tokens: u32,
    pub meter: ChatMeter,
    pub slot: ConcurrencySlot,
}

fn frames(events: Vec<Event>) -> Bytes {
    Bytes::from(events.iter().map(Event::to_sse).collect::<String>())
}

/// The stream; an upstream that cannot open one is an error response
/// (nothing has been sent yet), its reservation released.
pub async fn respond(state: &AppState, exchange: Exchange) -> Result<HttpResponse, ApiError> {
    let Exchange {
        id,
        model,
        params,
        prompt_tokens,
        mut meter,
        slot,
    } = exchange;
    let mut translator = StreamTranslator::new(id, model.id.clone(), prompt_tokens);
    if ChatService::streams_upstream(&model) {
        return match state.chat.open_stream(&model, &params).await {
            Ok(upstream) => Ok(event_stream(relay(upstream, translator, meter, slot))),
            Err(err) => {
                meter.release().await;
                Err(err.into())
            }
        };
    }
    // The built-in model: its whole answer, in its pieces.
    let answer = match state.chat.complete(&model, &params, prompt_tokens).await {
        Ok(answer) => answer,
        Err(err) => {
            meter.release().await;
            return Err(err.into());
        }
    };
    meter
        .settle(answer.prompt_tokens, answer.completion_tokens)
        .await;
    drop(slot);
    let mut events = translator.start();
    if let Some((deltas, finish)) = answer.deltas.first() {
        for delta in deltas {
            events.extend(translator.on_delta(delta));
        }
        events.extend(translator.finish(finish, answer.prompt_tokens, answer.completion_tokens));
    }
    Ok(event_stream(stream::once(async move {
        Ok::<_, actix_web::Error>(frames(events))
    })))
}

/// Translates upstream chunks as they arrive, counts what was said for
/// usage when the upstream reports none, and settles the meter at the end.
/// Dropping it (client gone) drops the upstream stream and charges what was
/// said.
fn relay(
    upstream: ChunkStream,
    translator: StreamTranslator,
    meter: ChatMeter,
    slot: ConcurrencySlot,
) -> impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> {
    struct Relay {
        upstream: ChunkStream,
        translator: StreamTranslator,
        meter: ChatMeter,
        _slot: ConcurrencySlot,
        said: String,
        usage: Option<(u32, u32)>,
        finish: Option<String>,
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
    let relay = Relay {
        upstream,
        translator,
        meter,
        _slot: slot,
        said: String::new(),
        usage: None,
        finish: None,
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
            let start = frames(relay.translator.start());
            return Some((Ok(start), Some(relay)));
        }
        loop {
            match relay.upstream.next().await {
                Some(Ok(chunk)) => {
                    if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
                        let read = |k: &str| u[k].as_u64().unwrap_or(0) as u32;
                        relay.usage = Some((read("prompt_tokens"), read("completion_tokens")));
                    }
                    // One choice: the Messages API has no `n`.
                    let Some(choice) = chunk["choices"].get(0) else {
                        continue;
                    };
                    if let Some(reason) = choice["finish_reason"].as_str() {
                        relay.finish = Some(reason.to_owned());
                    }
                    relay.said.push_str(&said_in(&choice["delta"]));
                    let events = relay.translator.on_delta(&choice["delta"]);
                    if events.is_empty() {
                        continue;
                    }
                    return Some((Ok(frames(events)), Some(relay)));
                }
                Some(Err(err)) => {
                    relay.finished = true;
                    // What was generated before the failure is charged.
                    let (prompt, said) = (relay.meter.prompt_tokens, count_tokens(&relay.said));
                    relay.meter.settle(prompt, said).await;
                    let event = Event::error(
                        ErrorKind::Overloaded,
                        &format!("the model provider failed: {err}"),
                    );
                    return Some((Ok(frames(vec![event])), Some(relay)));
                }
                None => {
                    relay.finished = true;
                    let (prompt, completion) = relay
                        .usage
                        .unwrap_or_else(|| (relay.meter.prompt_tokens, count_tokens(&relay.said)));
                    relay.meter.settle(prompt, completion).await;
                    let finish = relay.finish.take().unwrap_or_else(|| "stop".to_owned());
                    let tail = relay.translator.finish(&finish, prompt, completion);
                    return Some((Ok(frames(tail)), Some(relay)));
                }
            }
        }
    })
}
