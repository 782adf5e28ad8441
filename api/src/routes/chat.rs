//! `POST /chat/completions`: served by the API directly (no queue hop), as
//! JSON or as server-sent events in the OpenAI chunk format. Models run on
//! the built-in test model (`local`) or an OpenAI-compatible upstream
//! (`openai`, with an ordered fallback list).

use std::collections::HashMap;

use actix_web::web::Bytes;
use actix_web::{HttpResponse, post, web};
use futures_util::stream::{self, StreamExt};
use serde_json::{Value, json};
use unigen_core::ProviderError;
use unigen_core::ValidationError;
use unigen_core::config::ModelEntry;
use unigen_core::domain::ModelCategory;
use unigen_core::domain::Scope;
use unigen_db::billing::Bucket;
use unigen_db::billing::Charge;
use unigen_db::billing::Estimate;
use unigen_db::billing::Refusal;
use unigen_db::billing::Settled;
use unigen_db::billing::chat_credits;
use unigen_db::billing::to_milli;
use unigen_providers::chat::ChatCompletionRequest;
use unigen_providers::chat::ChatMessage;
use unigen_providers::chat::ChatParams;
use unigen_providers::chat::MessageContent;
use unigen_providers::chat::count_prompt_tokens;
use unigen_providers::chat::count_tokens;
use unigen_providers::local::chat;
use unigen_providers::openai::ChunkStream;
use unigen_providers::openai::OpenAiClient;
use unigen_providers::search::grounding_prompt;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::metering::{ConcurrencySlot, SyncReservation};
use crate::routes::params::{json_body, query_bool};
use crate::state::AppState;

const CHAT_ENDPOINT: &str = "/v1/chat/completions";

/// The usage object: token counts, credits, and what the token quota has
/// left (in tokens of this model's tier) after the charge.
fn usage(prompt_tokens: u32, completion_tokens: u32, settled: Option<&Settled>) -> Value {
    let credits = settled.map_or(0, |s| s.credits);
    let mut usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "credits_used": credits,
        "credits_breakdown": { "tokens": credits },
    });
    if let Some(report) = settled.and_then(|s| s.bucket.as_ref()) {
        usage["quota_multiplier"] = json!(report.multiplier);
        usage["tokens_remaining_estimate"] = match report.remaining_milli {
            Some(milli) => json!((milli as f64 / 1000.0 / report.multiplier).floor() as i64),
            None => Value::Null,
        };
    }
    usage
}

/// What a completion may cost, reserved before the model runs. Without an
/// explicit `max_tokens`, the completion is capped to what the token quota
/// has left, so a nearly empty bucket still answers briefly instead of 402.
async fn reserve_tokens(
    state: &AppState,
    caller: &Caller,
    model: &ModelEntry,
    params: &mut ChatParams,
    prompt_tokens: u32,
) -> Result<ChatMeter, ApiError> {
    let multiplier = Bucket::ChatTokens.multiplier(model.tier);
    let estimate = |completion: u32| Estimate {
        credits: chat_credits(prompt_tokens, completion, model),
        bucket: Some((
            Bucket::ChatTokens,
            to_milli(f64::from(prompt_tokens + completion), multiplier),
        )),
    };
    let first = SyncReservation::reserve(
        state,
        caller,
        CHAT_ENDPOINT,
        &model.id,
        &estimate(params.max_tokens),
    )
    .await;
    let reservation = match first {
        Err(ApiError::Quota(Refusal::Quota { bucket, remaining }))
            if !params.max_tokens_explicit && bucket == Bucket::ChatTokens.as_str() =>
        {
            let fits = (remaining / multiplier).floor() as i64 - i64::from(prompt_tokens);
            if fits < 1 {
                return Err(ApiError::Quota(Refusal::Quota { bucket, remaining }));
            }
            params.max_tokens = fits as u32;
            SyncReservation::reserve(
                state,
                caller,
                CHAT_ENDPOINT,
                &model.id,
                &estimate(params.max_tokens),
            )
            .await?
        }
        other => other?,
    };
    Ok(ChatMeter {
        reservation: Some(reservation),
        model: model.clone(),
        multiplier,
        tools_used: if params.web_search {
            vec!["web_search".to_owned()]
        } else {
            Vec::new()
        },
        prompt_tokens,
        counted: 0,
    })
}

/// Settles a completion's reservation once; a stream dropped before its end
/// (client gone) is charged for what was generated until then.
struct ChatMeter {
    reservation: Option<SyncReservation>,
    model: ModelEntry,
    multiplier: f64,
    tools_used: Vec<String>,
    prompt_tokens: u32,
    /// Completion tokens counted so far (streams).
    counted: u32,
}

impl ChatMeter {
    async fn settle(&mut self, prompt: u32, completion: u32) -> Option<Settled> {
        let reservation = self.reservation.take()?;
        let charge = Charge {
            credits: chat_credits(prompt, completion, &self.model),
            bucket_milli: to_milli(f64::from(prompt + completion), self.multiplier),
        };
        let tokens = (i64::from(prompt), i64::from(completion));
        match reservation
            .settle(&charge, self.multiplier, tokens, self.tools_used.clone())
            .await
        {
            Ok(settled) => settled,
            Err(err) => {
                tracing::error!(error = %err, "settling a chat completion failed; its reservation expires");
                None
            }
        }
    }

    async fn release(&mut self) {
        if let Some(reservation) = self.reservation.take() {
            reservation.release().await;
        }
    }
}

impl Drop for ChatMeter {
    fn drop(&mut self) {
        let Some(reservation) = self.reservation.take() else {
            return;
        };
        let mut rest = ChatMeter {
            reservation: Some(reservation),
            model: self.model.clone(),
            multiplier: self.multiplier,
            tools_used: std::mem::take(&mut self.tools_used),
            prompt_tokens: self.prompt_tokens,
            counted: self.counted,
        };
        tokio::spawn(async move {
            let (prompt, completion) = (rest.prompt_tokens, rest.counted);
            rest.settle(prompt, completion).await;
        });
    }
}

/// The request as the upstream's body.
fn upstream_body(params: &ChatParams, model: &ModelEntry, stream: bool) -> Value {
    let mut body = json!({
        "model": model.upstream_model.as_deref().unwrap_or(&model.id),
        "messages": params.messages.iter().map(|m| m.to_upstream()).collect::<Vec<_>>(),
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_tokens": params.max_tokens,
        "frequency_penalty": params.frequency_penalty,
        "presence_penalty": params.presence_penalty,
        "stream": stream,
    });
    if !params.stop.is_empty() {
        body["stop"] = json!(params.stop);
    }
    if let Some(user) = &params.user {
        body["user"] = json!(user);
    }
    if stream {
        // Always ask: usage is recorded even when the client did not ask.
        body["stream_options"] = json!({ "include_usage": true });
    }
    body
}

/// Searches for the last user message and puts the results, numbered for
/// citation, in a system message ahead of the conversation.
async fn ground_in_search_results(
    state: &AppState,
    params: &mut ChatParams,
) -> Result<(), ApiError> {
    let search = state.search.as_ref().ok_or_else(|| {
        ApiError::from(ValidationError::new(
            "web_search",
            "web_search needs a search backend, and none is configured",
        ))
    })?;
    let query = params.last_user_text();
    let results = search
        .search(&query)
        .await
        .map_err(|e| ApiError::Upstream(e.to_string()))?;
    let grounding = ChatMessage {
        role: "system".into(),
        content: Some(MessageContent::Text(grounding_prompt(&query, &results))),
        images: None,
        name: None,
        tool_call_id: None,
        tool_calls: None,
    };
    params.messages.insert(0, grounding);
    Ok(())
}

/// Tries the model's upstream, then each fallback in order.
async fn with_fallbacks<T, F, Fut>(
    state: &AppState,
    model: &ModelEntry,
    call: F,
) -> Result<T, ApiError>
where
    F: Fn(OpenAiClient) -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    let mut last = None;
    for name in model.upstream.iter().chain(&model.fallback_upstreams) {
        let Some(client) = state.upstreams.get(name) else {
            continue;
        };
        match call(client.clone()).await {
            Ok(value) => return Ok(value),
            Err(err) => {
                tracing::warn!(model = %model.id, upstream = %name, error = %err, "upstream failed; trying the next");
                last = Some(err);
            }
        }
    }
    Err(ApiError::Upstream(last.map_or_else(
        || "no upstream is configured".to_owned(),
        |e| e.to_string(),
    )))
}

struct Frames {
    id: String,
    created: i64,
    model: String,
}

impl Frames {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        })
    }

    fn usage_chunk(&self, usage: Value) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [], "usage": usage,
        })
    }
}

fn sse(event: &Value) -> Result<Bytes, actix_web::Error> {
    Ok(Bytes::from(format!("data: {event}\n\n")))
}

fn event_stream(
    body: impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> + 'static,
) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
}

/// Chat completion in the OpenAI format (`stream: true` or `?stream=true` for SSE).
#[utoipa::path(
    tag = "chat",
    request_body = ChatCompletionRequest,
    params(("stream" = Option<bool>, Query, description = "Stream server-sent events (same as `stream: true`)")),
    responses(
        (status = 200, description = "`chat.completion`, or `text/event-stream` of `chat.completion.chunk` ending with `data: [DONE]`", body = Object),
        (status = 400, description = "invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: API key does not have required scope: chat", body = ErrorBody),
        (status = 500, description = "server_error", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[post("/chat/completions")]
pub async fn create_chat_completion(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Chat)?;
    let stream_query = query_bool(&query, "stream", false)?;
    let request: ChatCompletionRequest = json_body(&body)?;
    let model = state
        .catalogue
        .resolve(request.model.as_deref(), ModelCategory::Chat)?
        .clone();
    let mut params = request.validate(stream_query, model.vision)?;
    if params.web_search {
        ground_in_search_results(&state, &mut params).await?;
    }
    let frames = Frames {
        id: format!("chatcmpl-{}", uuid::Uuid::now_v7().simple()),
        created: chrono::Utc::now().timestamp(),
        model: model.id.clone(),
    };
    // Held for the whole exchange, streams included.
    let slot = ConcurrencySlot::acquire(&state, &caller).await?;
    let prompt_tokens = count_prompt_tokens(&params.messages);
    let mut meter = reserve_tokens(&state, &caller, &model, &mut params, prompt_tokens).await?;
    match (model.adapter.as_str(), params.stream) {
        ("openai", false) => {
            let upstream = with_fallbacks(&state, &model, |client| {
                let body = upstream_body(&params, &model, false);
                async move { client.chat(&body).await }
            })
            .await;
            let upstream = match upstream {
                Ok(upstream) => upstream,
                Err(err) => {
                    meter.release().await;
                    return Err(err);
                }
            };
            let choice = &upstream["choices"][0];
            let content = choice["message"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let prompt = upstream["usage"]["prompt_tokens"]
                .as_u64()
                .map_or(prompt_tokens, |n| n as u32);
            let completion = upstream["usage"]["completion_tokens"]
                .as_u64()
                .map_or_else(|| count_tokens(&content), |n| n as u32);
            let mut message = json!({ "role": "assistant", "content": content });
            if let Some(calls) = choice["message"].get("tool_calls").filter(|c| !c.is_null()) {
                message["tool_calls"] = calls.clone();
            }
            let settled = meter.settle(prompt, completion).await;
            record_charge(&caller, settled.as_ref());
            Ok(completion_response(
                &frames,
                &model,
                message,
                choice["finish_reason"].as_str().unwrap_or("stop"),
                usage(prompt, completion, settled.as_ref()),
            ))
        }
        ("openai", true) => {
            let upstream = with_fallbacks(&state, &model, |client| {
                let body = upstream_body(&params, &model, true);
                async move { client.chat_stream(&body).await }
            })
            .await;
            let upstream = match upstream {
                Ok(upstream) => upstream,
                Err(err) => {
                    meter.release().await;
                    return Err(err);
                }
            };
            Ok(event_stream(relay_stream(
                upstream, frames, params, meter, slot,
            )))
        }
        (_, stream) => {
            if let Err(err) = state.local.simulate_conditions().await {
                meter.release().await;
                return Err(ApiError::Upstream(err.to_string()));
            }
            let reply = chat::echo(&params);
            let settled = meter
                .settle(reply.prompt_tokens, reply.completion_tokens)
                .await;
            record_charge(&caller, settled.as_ref());
            let spent = usage(
                reply.prompt_tokens,
                reply.completion_tokens,
                settled.as_ref(),
            );
            if !stream {
                let message = json!({ "role": "assistant", "content": reply.text });
                return Ok(completion_response(
                    &frames,
                    &model,
                    message,
                    reply.finish_reason,
                    spent,
                ));
            }
            let mut events = vec![frames.chunk(json!({"role": "assistant", "content": ""}), None)];
            events.extend(
                reply
                    .pieces
                    .iter()
                    .map(|piece| frames.chunk(json!({"content": piece}), None)),
            );
            events.push(frames.chunk(json!({}), Some(reply.finish_reason)));
            if params.include_usage {
                events.push(frames.usage_chunk(spent));
            }
            let frames = events.iter().map(sse).collect::<Vec<_>>();
            Ok(event_stream(stream::iter(frames).chain(stream::once(
                async { Ok(Bytes::from_static(b"data: [DONE]\n\n")) },
            ))))
        }
    }
}

fn record_charge(caller: &Caller, settled: Option<&Settled>) {
    if let Some(settled) = settled {
        caller
            .charges
            .record(settled.credits, settled.account.clone());
    }
}

fn completion_response(
    frames: &Frames,
    model: &ModelEntry,
    message: Value,
    finish_reason: &str,
    usage: Value,
) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "id": frames.id,
        "object": "chat.completion",
        "created": frames.created,
        "model": model.id,
        "model_tier": model.tier,
        "choices": [{ "index": 0, "message": message, "finish_reason": finish_reason }],
        "usage": usage,
    }))
}

/// Forwards upstream chunks as they arrive (our id and model), counts what
/// was said for usage when the upstream reports none, and ends with the
/// usage chunk (if asked) and `[DONE]`. Dropping it (client gone) drops the
/// upstream stream, which closes the upstream request.
fn relay_stream(
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
                    let Some(choice) = chunk["choices"].get(0) else {
                        continue;
                    };
                    if let Some(text) = choice["delta"]["content"].as_str() {
                        relay.said.push_str(text);
                    }
                    let finish = choice["finish_reason"].as_str();
                    let event = relay.frames.chunk(choice["delta"].clone(), finish);
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
