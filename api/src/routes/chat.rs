//! `POST /chat/completions`: served by the API directly (no queue hop), as
//! JSON or as server-sent events in the OpenAI chunk format. The model call
//! is `unigen_providers::completion::ChatService`; this route holds the
//! concurrency slot and the token reservation, and shapes the answer.

use std::collections::HashMap;

use actix_web::{HttpResponse, post, web};
use serde_json::{Value, json};
use unigen_core::config::ModelEntry;
use unigen_core::domain::Scope;
use unigen_providers::chat::ChatCompletionRequest;
use unigen_providers::completion::{Answer, ChatService, PreparedChat};

use super::chat_stream::{Frames, event_stream, pieces_stream, relay_stream};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::metering::chat::{reserve_tokens, usage};
use crate::metering::{Charged, ConcurrencySlot};
use crate::routes::params::{json_body, query_bool};
use crate::state::AppState;

/// Chat completion in the OpenAI format (`stream: true` or `?stream=true` for SSE).
#[utoipa::path(
    tag = "chat",
    request_body = ChatCompletionRequest,
    params(("stream" = Option<bool>, Query, description = "Stream server-sent events (same as `stream: true`)")),
    responses(
        (status = 200, description = "`chat.completion`, or (`stream`) `text/event-stream` of `chat.completion.chunk` ending with `data: [DONE]`; an upstream failing mid-stream sends `data: {\"error\": {...}}` then `[DONE]`", content(
            (crate::openapi::schemas::ChatCompletion = "application/json"),
            ("text/event-stream"),
        )),
        (status = 400, description = "`invalid_request`: an invalid field (`param` names it), an unknown model", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 402, description = "`quota_exceeded`: the chat token quota, the credits or the overage hard limit", body = ErrorBody),
        (status = 403, description = "forbidden: API key does not have required scope: chat", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
        (status = 500, description = "`server_error`: the model provider failed (after retries and fallbacks); or an internal error", body = ErrorBody),
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
    let PreparedChat {
        model,
        mut params,
        prompt_tokens,
    } = state.chat.prepare(&request, stream_query).await?;
    let frames = Frames {
        id: format!("chatcmpl-{}", uuid::Uuid::now_v7().simple()),
        created: chrono::Utc::now().timestamp(),
        model: model.id.clone(),
    };
    // Held for the whole exchange, streams included.
    let slot = ConcurrencySlot::acquire(&state, &caller).await?;
    let mut meter = reserve_tokens(&state, &caller, &model, &mut params, prompt_tokens).await?;
    if params.stream && ChatService::streams_upstream(&model) {
        return match state.chat.open_stream(&model, &params).await {
            Ok(upstream) => Ok(event_stream(relay_stream(
                upstream, frames, params, meter, slot,
            ))),
            Err(err) => {
                meter.release().await;
                Err(err.into())
            }
        };
    }
    let answer = match state.chat.complete(&model, &params, prompt_tokens).await {
        Ok(answer) => answer,
        Err(err) => {
            meter.release().await;
            return Err(err.into());
        }
    };
    let (prompt, completion) = (answer.prompt_tokens, answer.completion_tokens);
    let settled = meter.settle(prompt, completion).await;
    record_charge(&caller, settled.as_ref());
    let spent = usage(prompt, completion, settled.as_ref());
    if params.stream {
        let spent = params.include_usage.then_some(spent);
        return Ok(pieces_stream(&frames, &answer.deltas, spent));
    }
    Ok(completion_response(&frames, &model, answer, spent))
}

fn record_charge(caller: &Caller, settled: Option<&Charged>) {
    if let Some(settled) = settled {
        caller
            .charges
            .record(settled.credits, settled.account.clone());
    }
}

/// The answer in OpenAI's shape: every choice and the upstream's other
/// fields (`system_fingerprint`...) as given, our id, model and usage.
fn completion_response(
    frames: &Frames,
    model: &ModelEntry,
    answer: Answer,
    usage: Value,
) -> HttpResponse {
    let mut body = answer.extra;
    body.extend([
        ("id".to_owned(), json!(frames.id)),
        ("object".to_owned(), json!("chat.completion")),
        ("created".to_owned(), json!(frames.created)),
        ("model".to_owned(), json!(model.id)),
        ("model_tier".to_owned(), json!(model.tier)),
        ("choices".to_owned(), Value::Array(answer.choices)),
        ("usage".to_owned(), usage),
    ]);
    HttpResponse::Ok().json(Value::Object(body))
}
