//! `POST /responses` on a model whose upstream speaks OpenAI's Responses
//! API natively (an `openai` or `azure-openai` upstream with `responses =
//! true`): the request goes as the client sent it (but for the upstream's
//! model name), with the model's fallbacks; the `response` and the stream's
//! typed events come back as the upstream sent them (but for the
//! catalogue's model name), metered with the `usage` it reports.
//!
//! Stored conversations: the upstream's response id is the one returned,
//! and the response is stored here too (with `store`), under the caller's
//! organization, with the upstream that holds it. A `previous_response_id`
//! is looked up here first (another organization's is a 404 and never
//! reaches an upstream); when that upstream holds it and serves the model,
//! the request goes there unchanged (no fallback: no other upstream holds
//! the conversation); otherwise the stored conversation is sent ahead of
//! the input in place of `previous_response_id`.

use actix_web::HttpResponse;
use actix_web::web::Bytes;
use futures_util::stream::{self, StreamExt};
use serde_json::{Map, Value, json};
use unigen_core::ProviderError;
use unigen_core::config::ModelEntry;
use unigen_protocols::responses::Ids;
use unigen_protocols::responses::native::{
    NativeRequest, add_to_usage, hold_text, inline_conversation, native_input_items, said_in_event,
    said_in_output, usage_tokens,
};
use unigen_providers::chat::{
    ChatCompletionRequest, IMAGE_TOKEN_ALLOWANCE, MAX_TOKENS_LIMIT, count_tokens,
};
use unigen_providers::completion::PreparedChat;
use unigen_providers::openai::{ChunkStream, is_terminal_event};

use super::responses_continued::{RESPONSES_ENDPOINT, continued_response};
use super::responses_stream::Conversation;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::metering::ConcurrencySlot;
use crate::metering::chat::{ChatMeter, reserve_tokens_at, usage};
use crate::routes::chat_stream::event_stream;
use crate::state::AppState;

/// An upstream's refusal of the request (4xx) is the client's error;
/// anything else is the provider failing.
fn upstream_failure(err: ProviderError) -> ApiError {
    match err {
        ProviderError::Permanent(message) => ApiError::BadRequest(format!(
            "the model provider rejected the request: {message}"
        )),
        ProviderError::Transient(_) => ApiError::Upstream(err.to_string()),
    }
}

pub async fn respond(
    state: &AppState,
    caller: &Caller,
    model: ModelEntry,
    mut body: Map<String, Value>,
    request: NativeRequest,
) -> Result<HttpResponse, ApiError> {
    let unique = uuid::Uuid::now_v7().simple().to_string();
    let input = native_input_items(
        body.get("input").unwrap_or(&Value::Null),
        &mut Ids::new(&unique),
    );
    // The conversation continued, and the upstream holding it (if it
    // serves this model).
    let mut context = Vec::new();
    let mut pinned = None;
    if let Some(previous) =
        continued_response(state, caller, request.previous_response_id.as_deref()).await?
    {
        context = match previous.conversation {
            Value::Array(items) => items,
            _ => Vec::new(),
        };
        match previous.upstream {
            Some(upstream) if state.chat.responses_upstream_serves(&model, &upstream) => {
                pinned = Some(upstream);
            }
            _ => inline_conversation(&mut body, &context, &input),
        }
    }
    let (text, images) = hold_text(&body, if pinned.is_some() { &context } else { &[] });
    let prompt_tokens = count_tokens(&text).saturating_add(images * IMAGE_TOKEN_ALLOWANCE);
    // The model's output cap and the chat checks (n, parts) as chat applies
    // them; the hold counts what the upstream will.
    let mut chat = json!({"model": model.id, "messages": [{"role": "user", "content": "."}]});
    if let Some(max) = request.max_output_tokens {
        chat["max_tokens"] = json!(max.min(u64::from(MAX_TOKENS_LIMIT)));
    }
    let chat: ChatCompletionRequest =
        serde_json::from_value(chat).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let PreparedChat {
        model, mut params, ..
    } = state.chat.prepare(&chat, false).await?;
    if let Some(max) = request.max_output_tokens {
        params.max_tokens = u32::try_from(max).unwrap_or(u32::MAX);
    }
    let slot = ConcurrencySlot::acquire(state, caller).await?;
    let meter = reserve_tokens_at(
        RESPONSES_ENDPOINT,
        state,
        caller,
        &model,
        &mut params,
        prompt_tokens,
    )
    .await?;
    if params.max_tokens_capped
        || (!params.max_tokens_explicit && model.max_output_tokens.is_some())
    {
        // The quota has less left than the model would say, or the model's
        // cap, as metering reserved it (chat completions do the same).
        body.insert("max_output_tokens".into(), json!(params.max_tokens));
    }
    body.insert(
        "model".into(),
        json!(model.upstream_model.as_deref().unwrap_or(&model.id)),
    );
    let conversation = Conversation {
        pool: state.pool.clone(),
        org_id: caller.org_id,
        store: request.store,
        previous_response_id: request.previous_response_id.clone(),
        context,
        input,
        upstream: None,
        retention: state.limits.response_retention,
    };
    let body = Value::Object(body);
    if request.stream {
        return stream(state, model, body, pinned, conversation, meter, slot).await;
    }
    whole(state, caller, model, body, pinned, conversation, meter).await
}

async fn whole(
    state: &AppState,
    caller: &Caller,
    model: ModelEntry,
    body: Value,
    pinned: Option<String>,
    mut conversation: Conversation,
    mut meter: ChatMeter,
) -> Result<HttpResponse, ApiError> {
    let (upstream, mut response) =
        match state.chat.responses(&model, &body, pinned.as_deref()).await {
            Ok(answer) => answer,
            Err(err) => {
                meter.release().await;
                return Err(upstream_failure(err));
            }
        };
    let (prompt, completion) = usage_tokens(&response);
    let prompt = prompt.unwrap_or(meter.prompt_tokens);
    let completion = completion.unwrap_or_else(|| count_tokens(&said_in_output(&response)));
    let settled = meter.settle(prompt, completion).await;
    if let Some(settled) = settled.as_ref() {
        caller
            .charges
            .record(settled.credits, settled.account.clone());
    }
    add_to_usage(
        &mut response,
        &ours(&usage(prompt, completion, settled.as_ref())),
    );
    response["model"] = json!(model.id);
    conversation.upstream = Some(upstream);
    conversation.store(&response).await?;
    Ok(HttpResponse::Ok().json(response))
}

/// The service's own usage fields (credits, quota) of a chat usage object.
fn ours(chat_usage: &Value) -> Map<String, Value> {
    let mut fields = chat_usage.as_object().cloned().unwrap_or_default();
    for key in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        fields.remove(key);
    }
    fields
}

async fn stream(
    state: &AppState,
    model: ModelEntry,
    body: Value,
    pinned: Option<String>,
    mut conversation: Conversation,
    mut meter: ChatMeter,
    slot: ConcurrencySlot,
) -> Result<HttpResponse, ApiError> {
    match state
        .chat
        .responses_stream(&model, &body, pinned.as_deref())
        .await
    {
        Ok((upstream, events)) => {
            conversation.upstream = Some(upstream);
            Ok(event_stream(relay(
                events,
                model.id,
                conversation,
                meter,
                slot,
            )))
        }
        Err(err) => {
            meter.release().await;
            Err(upstream_failure(err))
        }
    }
}

fn frame(event: &Value) -> Bytes {
    let name = event["type"].as_str().unwrap_or("message");
    Bytes::from(format!("event: {name}\ndata: {event}\n\n"))
}

/// Relays the upstream's events as they arrive (the catalogue's model name
/// in each `response`), settles the meter with the terminal event's usage
/// and stores that response. Dropping it (client gone) drops the upstream
/// stream and charges what was said.
fn relay(
    upstream: ChunkStream,
    model: String,
    conversation: Conversation,
    meter: ChatMeter,
    slot: ConcurrencySlot,
) -> impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> {
    struct Relay {
        upstream: ChunkStream,
        model: String,
        conversation: Conversation,
        meter: ChatMeter,
        _slot: ConcurrencySlot,
        said: String,
        next_sequence: u64,
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
        conversation,
        meter,
        _slot: slot,
        said: String::new(),
        next_sequence: 0,
        finished: false,
    };
    stream::unfold(Some(relay), |state| async move {
        let mut relay = state?;
        if relay.finished {
            return None;
        }
        match relay.upstream.next().await {
            Some(Ok(mut event)) => {
                if let Some(n) = event["sequence_number"].as_u64() {
                    relay.next_sequence = n + 1;
                }
                relay.said.push_str(said_in_event(&event));
                if event["response"].is_object() {
                    event["response"]["model"] = json!(relay.model);
                }
                if is_terminal_event(&event) {
                    relay.finished = true;
                    let (prompt, completion) = usage_tokens(&event["response"]);
                    let prompt = prompt.unwrap_or(relay.meter.prompt_tokens);
                    let completion = completion.unwrap_or_else(|| count_tokens(&relay.said));
                    let settled = relay.meter.settle(prompt, completion).await;
                    add_to_usage(
                        &mut event["response"],
                        &ours(&usage(prompt, completion, settled.as_ref())),
                    );
                    if let Err(err) = relay.conversation.store(&event["response"]).await {
                        tracing::error!(error = %err, response.id = %event["response"]["id"], "storing a streamed response failed");
                    }
                }
                Some((Ok(frame(&event)), Some(relay)))
            }
            Some(Err(err)) => {
                relay.finished = true;
                // What was generated before the failure is charged.
                let (prompt, said) = (relay.meter.prompt_tokens, count_tokens(&relay.said));
                relay.meter.settle(prompt, said).await;
                let event = json!({
                    "type": "error", "code": "server_error", "param": null,
                    "message": format!("the model provider failed: {err}"),
                    "sequence_number": relay.next_sequence,
                });
                Some((Ok(frame(&event)), Some(relay)))
            }
            None => None,
        }
    })
}
