//! `POST /messages` and `POST /messages/count_tokens`: Anthropic's Messages
//! API, at `/v1` (where the Anthropic SDKs and Claude Code send it with
//! `ANTHROPIC_BASE_URL` set to the service's origin) and under `/api/v1`.
//!
//! Both run as chat completions do: the same model catalogue and aliases,
//! key, scope (`chat`), rate limit, concurrency slot, token reservation and
//! fallbacks. A model on an `anthropic` upstream gets the request natively
//! (`messages_native`: as sent, with `anthropic-version` and
//! `anthropic-beta`); every other model through chat: the request is
//! translated into a chat completion request (`unigen_protocols::anthropic`)
//! and the answer and the stream back. Every error is in Anthropic's shape.

use actix_web::{HttpRequest, HttpResponse, ResponseError, post, web};
use serde_json::{Value, json};
use unigen_core::config::ModelEntry;
use unigen_core::domain::{ModelCategory, Scope};
use unigen_protocols::anthropic::{self, ErrorKind, Invalid, error_body, to_message};
use unigen_providers::chat::{
    ChatCompletionRequest, ChatMessage, MAX_TOKENS_LIMIT, count_prompt_tokens, count_tokens,
};
use unigen_providers::completion::{ChatError, PreparedChat};

use super::{messages_native, messages_stream};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::metering::ConcurrencySlot;
use crate::metering::chat::reserve_tokens;
use crate::routes::params::json_body;
use crate::state::AppState;

/// An error in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`.
#[derive(Debug)]
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(err: ApiError) -> Self {
        Self(err)
    }
}

impl From<Invalid> for AnthropicError {
    fn from(invalid: Invalid) -> Self {
        Self(invalid.into())
    }
}

impl From<ChatError> for AnthropicError {
    fn from(err: ChatError) -> Self {
        Self(err.into())
    }
}

impl From<Invalid> for ApiError {
    fn from(invalid: Invalid) -> Self {
        ApiError::InvalidField {
            param: invalid.field.clone(),
            message: invalid.to_string(),
        }
    }
}

impl std::fmt::Display for AnthropicError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The Anthropic error type of one of ours: the model provider failing
/// (after retries and fallbacks) or the service being unavailable is
/// `overloaded_error` (529, which the SDKs retry); the others by status.
pub fn kind_of(err: &ApiError) -> ErrorKind {
    match err {
        ApiError::Upstream(_) | ApiError::Unavailable(_) => ErrorKind::Overloaded,
        other => ErrorKind::from_status(other.status_code().as_u16()),
    }
}

impl ResponseError for AnthropicError {
    fn status_code(&self) -> actix_web::http::StatusCode {
        actix_web::http::StatusCode::from_u16(kind_of(&self.0).status())
            .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        if let ApiError::Internal(err) = &self.0 {
            // The cause goes to the log, never to the client.
            tracing::error!(error = format!("{err:#}"), "request failed");
        }
        let mut response = HttpResponse::build(self.status_code());
        if let ApiError::RateLimited {
            retry_after_seconds,
            ..
        } = &self.0
        {
            response.insert_header(("Retry-After", retry_after_seconds.to_string()));
        }
        response.json(error_body(kind_of(&self.0), &self.0.to_string()))
    }
}

/// The catalogue model a request names (an id or an alias); an unknown
/// one is Anthropic's 404.
fn resolve_model(state: &AppState, requested: Option<&str>) -> Result<ModelEntry, ApiError> {
    state
        .catalogue
        .resolve(requested, ModelCategory::Chat)
        .cloned()
        .map_err(|err| match requested {
            Some(_) => ApiError::NotFound(err.message),
            None => err.into(),
        })
}

/// The client's `anthropic-version` and `anthropic-beta` headers.
fn anthropic_headers(http: &HttpRequest) -> Vec<(String, String)> {
    ["anthropic-version", "anthropic-beta"]
        .iter()
        .flat_map(|name| {
            http.headers()
                .get_all(*name)
                .filter_map(|value| value.to_str().ok())
                .map(|value| ((*name).to_owned(), value.to_owned()))
        })
        .collect()
}

/// The chat completion request of a translated Messages request.
fn chat_request(chat: Value, model: &str) -> Result<ChatCompletionRequest, ApiError> {
    let mut chat = chat;
    chat["model"] = json!(model);
    serde_json::from_value(chat).map_err(|err| ApiError::BadRequest(err.to_string()))
}

/// Create a message (Anthropic's Messages API; `stream: true` for SSE).
#[utoipa::path(
    tag = "messages",
    request_body(content = crate::openapi::messages::MessagesRequest, description = "Anthropic's Messages request: `model` (an id or alias of the catalogue), `max_tokens` (required), `messages` (text, image, tool_use, tool_result blocks), `system`, `tools`, `tool_choice`, `stop_sequences`, `temperature`, `top_p`, `top_k`, `metadata`, `thinking`, `stream`. A model on an `anthropic` upstream gets the request as sent (with `anthropic-version` and `anthropic-beta`); a field a model bridged through chat cannot honour (`top_k`, `thinking`, server tools, documents...) is a 400 naming it."),
    responses(
        (status = 200, description = "`message` (`id: msg_...`, `content`, `stop_reason`, `usage`), or (`stream`) `text/event-stream` of Anthropic's events: `message_start`, `ping`, `content_block_start`, `content_block_delta`, `content_block_stop`, `message_delta`, `message_stop` (an upstream failing mid-stream sends `event: error`)", content(
            (crate::openapi::messages::AnthropicMessage = "application/json"),
            ("text/event-stream"),
        )),
        (status = 400, description = "`invalid_request_error`: an invalid field, or one the model cannot honour", body = crate::openapi::messages::AnthropicErrorBody),
        (status = 401, description = "`authentication_error`: invalid or missing API key (`x-api-key` or `Authorization: Bearer`)", body = crate::openapi::messages::AnthropicErrorBody),
        (status = 402, description = "`billing_error`: the chat token quota, the credits or the overage hard limit", body = crate::openapi::messages::AnthropicErrorBody),
        (status = 403, description = "`permission_error`: the key lacks scope `chat`, or the organization is suspended", body = crate::openapi::messages::AnthropicErrorBody),
        (status = 404, description = "`not_found_error`: no chat model has that id or alias", body = crate::openapi::messages::AnthropicErrorBody),
        (status = 429, description = "`rate_limit_error`: the key's request rate or the plan's concurrent requests", body = crate::openapi::messages::AnthropicErrorBody),
        (status = 500, description = "`api_error`: internal error", body = crate::openapi::messages::AnthropicErrorBody),
        (status = 529, description = "`overloaded_error`: the model provider failed (after retries and fallbacks), or the service is unavailable", body = crate::openapi::messages::AnthropicErrorBody),
    ),
    security(("bearer" = ["chat"]), ("x-api-key" = ["chat"]))
)]
#[post("/messages")]
pub async fn create_message(
    state: web::Data<AppState>,
    caller: Result<Caller, ApiError>,
    http: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, AnthropicError> {
    let caller = caller?;
    caller.require(Scope::Chat)?;
    let raw: Value = json_body(&body)?;
    let parsed = anthropic::parse_request(&raw)?;
    let model = resolve_model(&state, parsed.model.as_deref())?;
    // An anthropic upstream takes the request as sent; others through chat.
    let native = state.chat.speaks_messages(&model);
    if !native && let Some(refusal) = parsed.bridge_refusals.first() {
        return Err(ApiError::from(refusal.clone()).into());
    }
    let mut chat = parsed.chat;
    if native {
        // Checked by Anthropic; chat's own limit applies to bridged models.
        chat["max_tokens"] = json!(
            parsed
                .max_tokens
                .unwrap_or(1)
                .min(u64::from(MAX_TOKENS_LIMIT))
        );
    }
    let request = chat_request(chat, &model.id)?;
    let PreparedChat {
        model,
        mut params,
        prompt_tokens,
    } = state.chat.prepare(&request, false).await?;
    if native {
        // What metering reserves: the completion Anthropic may give.
        params.max_tokens = u32::try_from(parsed.max_tokens.unwrap_or(1)).unwrap_or(u32::MAX);
    }
    let id = format!("msg_{}", uuid::Uuid::now_v7().simple());
    // Held for the whole exchange, streams included.
    let slot = ConcurrencySlot::acquire(&state, &caller).await?;
    let mut meter = reserve_tokens(&state, &caller, &model, &mut params, prompt_tokens).await?;
    if native {
        let exchange = messages_native::Native {
            model,
            body: raw,
            headers: anthropic_headers(&http),
            stream: parsed.stream,
            meter,
            slot,
        };
        return Ok(messages_native::respond(&state, &caller, exchange).await?);
    }
    if parsed.stream {
        let exchange = messages_stream::Exchange {
            id,
            model,
            params,
            prompt_tokens,
            meter,
            slot,
        };
        return Ok(messages_stream::respond(&state, exchange).await?);
    }
    let answer = match state.chat.complete(&model, &params, prompt_tokens).await {
        Ok(answer) => answer,
        Err(err) => {
            meter.release().await;
            return Err(ApiError::from(err).into());
        }
    };
    let (prompt, completion) = (answer.prompt_tokens, answer.completion_tokens);
    if let Some(settled) = meter.settle(prompt, completion).await {
        caller
            .charges
            .record(settled.credits, settled.account.clone());
    }
    let choice = answer.choices.first().cloned().unwrap_or_default();
    let finish = choice["finish_reason"].as_str().unwrap_or("stop");
    Ok(HttpResponse::Ok().json(to_message(
        &id,
        &model.id,
        &choice["message"],
        finish,
        prompt,
        completion,
    )))
}

/// Count the input tokens of a Messages request (cl100k, as metering counts them).
#[utoipa::path(
    tag = "messages",
    request_body(content = crate::openapi::messages::MessagesRequest, description = "A Messages request without `max_tokens`"),
    responses(
        (status = 200, description = "`{\"input_tokens\": n}`", body = crate::openapi::messages::AnthropicTokenCount),
        (status = 400, description = "`invalid_request_error`", body = crate::openapi::messages::AnthropicErrorBody),
        (status = 401, description = "`authentication_error`: invalid or missing API key (`x-api-key` or `Authorization: Bearer`)", body = crate::openapi::messages::AnthropicErrorBody),
        (status = 403, description = "`permission_error`: the key lacks scope `chat`, or the organization is suspended", body = crate::openapi::messages::AnthropicErrorBody),
        (status = 404, description = "`not_found_error`: no chat model has that id or alias", body = crate::openapi::messages::AnthropicErrorBody),
        (status = 429, description = "`rate_limit_error`: the key's request rate", body = crate::openapi::messages::AnthropicErrorBody),
        (status = 500, description = "`api_error`: internal error", body = crate::openapi::messages::AnthropicErrorBody),
        (status = 529, description = "`overloaded_error`: the service is unavailable", body = crate::openapi::messages::AnthropicErrorBody),
    ),
    security(("bearer" = ["chat"]), ("x-api-key" = ["chat"]))
)]
#[post("/messages/count_tokens")]
pub async fn count_message_tokens(
    state: web::Data<AppState>,
    caller: Result<Caller, ApiError>,
    body: web::Bytes,
) -> Result<HttpResponse, AnthropicError> {
    let caller = caller?;
    caller.require(Scope::Chat)?;
    let raw: Value = json_body(&body)?;
    let parsed = anthropic::parse_count_tokens(&raw)?;
    resolve_model(&state, parsed.model.as_deref())?;
    let messages: Vec<ChatMessage> = serde_json::from_value(parsed.chat["messages"].clone())
        .map_err(|err| ApiError::BadRequest(err.to_string()))?;
    let tools = match &parsed.chat["tools"] {
        Value::Null => 0,
        tools => count_tokens(&tools.to_string()),
    };
    let input_tokens = count_prompt_tokens(&messages) + tools;
    Ok(HttpResponse::Ok().json(json!({ "input_tokens": input_tokens })))
}
