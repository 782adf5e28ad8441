//! `POST /responses`: OpenAI's Responses API, bridged through the chat
//! completion path (`unigen_protocols::responses`): the same catalogue,
//! keys, scope `chat`, rate limits, metering and fallbacks as
//! `POST /chat/completions`. Stored (`store`, the default) for `GET`,
//! `input_items` and `previous_response_id`. `background: true` runs it as
//! a job instead (`responses_background`).

use actix_web::{HttpResponse, post, web};
use serde_json::{Map, Value, json};
use unigen_core::config::ModelEntry;
use unigen_core::domain::{ModelCategory, Scope};
use unigen_db::queries::responses::NewResponse;
use unigen_db::{DbError, queries};
use unigen_protocols::responses::native::read_native;
use unigen_protocols::responses::output::{self, Head};
use unigen_protocols::responses::{Ids, Invalid, ResponsesRequest, parse_request, responses_param};
use unigen_providers::chat::ChatCompletionRequest;
use unigen_providers::completion::{ChatError, ChatService, PreparedChat};

use super::responses_background;
use super::responses_continued::{RESPONSES_ENDPOINT, continued_response, invalid};
use super::responses_native;
use super::responses_stream::{Conversation, local_chunks, relay};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::metering::ConcurrencySlot;
use crate::metering::chat::{reserve_tokens_at, usage};
use crate::routes::chat_stream::event_stream;
use crate::routes::params::json_body;
use crate::state::AppState;

/// Create a model response (OpenAI Responses API), as JSON or (`stream: true`) typed server-sent events.
#[utoipa::path(
    tag = "responses",
    request_body = super::responses_docs::ResponseCreateRequest,
    responses(
        (status = 200, description = "The `response` object (`background`: `queued`, to poll); or (`stream`) `text/event-stream` of typed events (`event: response.created` ... `response.completed`, `response.incomplete` or `response.failed`), each `data` a JSON object with `type` and `sequence_number`", content(
            (super::responses_docs::ResponseObject = "application/json"),
            ("text/event-stream"),
        )),
        (status = 400, description = "`invalid_request`: an invalid field, or one the service cannot honour (hosted tool types, `background` with `stream` or without `store`...): `param` names it", body = ErrorBody),
        (status = 402, description = "`quota_exceeded`: the chat token quota, the credits or the overage hard limit", body = ErrorBody),
        (status = 404, description = "`previous_response_id` names no stored response of the organization", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
        (status = 500, description = "`server_error`: the model provider failed (after retries and fallbacks); or an internal error", body = ErrorBody),
    ),
    security(("bearer" = ["chat"]))
)]
#[post("/responses")]
pub async fn create_response(
    state: web::Data<AppState>,
    caller: Caller,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Chat)?;
    let body: Map<String, Value> = json_body(&body)?;
    if let Some(model) = native_model(&state, &body) {
        // Passed through as sent: the upstream reads every other field.
        let request = read_native(&body).map_err(invalid)?;
        if request.background {
            return Err(invalid(Invalid::new(
                "background",
                "background mode is not available for models served by a native Responses upstream; send the request without `background`",
            )));
        }
        return responses_native::respond(&state, &caller, model, body, request).await;
    }
    let request = parse_request(&body).map_err(invalid)?;
    if request.background {
        refuse_in_background(&request).map_err(invalid)?;
    }
    let unique = uuid::Uuid::now_v7().simple().to_string();
    let mut ids = Ids::new(&unique);
    let input = request.input_items(&mut ids).map_err(invalid)?;
    let context = continued(&state, &caller, &request).await?;
    let chat: ChatCompletionRequest = serde_json::from_value(request.to_chat(&context, &input))
        .map_err(|e| ApiError::BadRequest(format!("the request cannot be bridged: {e}")))?;
    let PreparedChat {
        model,
        mut params,
        prompt_tokens,
    } = state.chat.prepare(&chat, false).await.map_err(chat_error)?;
    if request.background {
        return responses_background::create(&state, &caller, body, &model, &params, prompt_tokens)
            .await;
    }
    let head = Head {
        id: format!("resp_{unique}"),
        created_at: chrono::Utc::now().timestamp(),
        model: model.id.clone(),
    };
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
    let slot = ConcurrencySlot::acquire(&state, &caller).await?;
    let mut meter = reserve_tokens_at(
        RESPONSES_ENDPOINT,
        &state,
        &caller,
        &model,
        &mut params,
        prompt_tokens,
    )
    .await?;
    if params.stream {
        let chunks = if ChatService::streams_upstream(&model) {
            state.chat.open_stream(&model, &params).await
        } else {
            state
                .chat
                .complete(&model, &params, prompt_tokens)
                .await
                .map(local_chunks)
        };
        return match chunks {
            Ok(chunks) => Ok(event_stream(relay(
                chunks,
                head,
                request.echo(),
                ids,
                conversation,
                meter,
                slot,
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
    if let Some(settled) = settled.as_ref() {
        caller
            .charges
            .record(settled.credits, settled.account.clone());
    }
    let spent = output::usage(&usage(prompt, completion, settled.as_ref()));
    let response = output::answered(
        &head,
        &request.echo(),
        &answer.choices,
        &mut ids,
        spent,
        chrono::Utc::now().timestamp(),
    );
    conversation.store(&response).await?;
    Ok(HttpResponse::Ok().json(response))
}

/// What a background response cannot be: streamed (it is polled), or
/// unstored (its answer is read later).
fn refuse_in_background(request: &ResponsesRequest) -> Result<(), Invalid> {
    if request.stream {
        return Err(Invalid::new(
            "stream",
            "stream: a background response is polled with GET /responses/{id}, not streamed; send `background` or `stream`, not both",
        ));
    }
    if !request.store {
        return Err(Invalid::new(
            "store",
            "store: a background response is read later, so it must be stored; send `store: true` (the default) with `background`",
        ));
    }
    Ok(())
}

/// The catalogue model a request names, when its upstreams speak the
/// Responses API natively (else the request is bridged through chat, which
/// reports a bad or unknown model).
fn native_model(state: &AppState, body: &Map<String, Value>) -> Option<ModelEntry> {
    let name = body.get("model")?.as_str()?;
    let model = state
        .catalogue
        .resolve(Some(name), ModelCategory::Chat)
        .ok()?;
    state.chat.speaks_responses(model).then(|| model.clone())
}

/// The stored conversation `previous_response_id` continues (none without
/// one); another organization's response is not found.
async fn continued(
    state: &AppState,
    caller: &Caller,
    request: &ResponsesRequest,
) -> Result<Vec<Value>, ApiError> {
    let stored = continued_response(state, caller, request.previous_response_id.as_deref()).await?;
    Ok(match stored.map(|s| s.conversation) {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    })
}

impl Conversation {
    /// Stores the answered `response` (with `store`): its input items and
    /// the conversation a later `previous_response_id` continues.
    pub async fn store(&self, response: &Value) -> Result<(), ApiError> {
        if !self.store {
            return Ok(());
        }
        let mut conversation = self.context.clone();
        conversation.extend(self.input.iter().cloned());
        conversation.extend(response["output"].as_array().into_iter().flatten().cloned());
        let new = NewResponse {
            id: response["id"].as_str().unwrap_or_default().to_owned(),
            org_id: self.org_id,
            model: response["model"].as_str().unwrap_or_default().to_owned(),
            status: response["status"].as_str().unwrap_or_default().to_owned(),
            body: response.clone(),
            input_items: json!(self.input),
            conversation: Value::Array(conversation),
            previous_response_id: self.previous_response_id.clone(),
            upstream: self.upstream.clone(),
            expires_at: chrono::Duration::from_std(self.retention)
                .ok()
                .and_then(|retention| chrono::Utc::now().checked_add_signed(retention)),
        };
        let mut conn = self.pool.get().await.map_err(DbError::from)?;
        queries::responses::insert(&mut conn, &new).await?;
        Ok(())
    }
}

/// A chat validation error named as the client's Responses field.
fn chat_error(err: ChatError) -> ApiError {
    match err {
        ChatError::Invalid(v) => {
            let param = responses_param(v.field);
            ApiError::InvalidField {
                message: v.message.replace(v.field, param),
                param: param.to_owned(),
            }
        }
        other => other.into(),
    }
}
