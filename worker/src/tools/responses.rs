//! Background responses (`POST /responses` with `background: true`): the
//! request, checked when it was created, runs here through the same
//! Responses-to-chat bridge and chat turn (with fallbacks) as a request
//! answered in place. The job holds the chat hold taken at creation; the
//! finisher charges the tokens the answer reports (`units_of`), so a
//! response is metered as the same request answered in place.
//!
//! The answer is stored (for `GET`, `input_items` and a later
//! `previous_response_id`) before the job completes; a rerun after a
//! worker died stores it again under the same id.

use chrono::Utc;
use serde_json::{Value, json};
use unigen_core::ProviderError;
use unigen_db::billing::{chat_charge, chat_usage};
use unigen_db::models::Job;
use unigen_db::queries::responses::NewResponse;
use unigen_db::{DbError, queries};
use unigen_protocols::responses::background::{self, BackgroundJob};
use unigen_protocols::responses::output::{self, Head};
use unigen_protocols::responses::{Ids, Invalid, parse_request};
use unigen_providers::chat::ChatCompletionRequest;
use unigen_providers::completion::{ChatError, PreparedChat};

use super::params_of;
use crate::WorkerContext;
use crate::error::ToolError;
use crate::output::ToolOutput;

pub async fn run(context: &WorkerContext, job: &Job) -> Result<ToolOutput, ToolError> {
    let BackgroundJob { request: body } = params_of(job)?;
    let request = parse_request(&body).map_err(invalid)?;
    let unique = background::unique_of(job.id);
    let mut ids = Ids::new(&unique);
    let input = request.input_items(&mut ids).map_err(invalid)?;
    let conversation = match &request.previous_response_id {
        None => Vec::new(),
        Some(previous) => previous_conversation(context, job, previous).await?,
    };
    let chat: ChatCompletionRequest =
        serde_json::from_value(request.to_chat(&conversation, &input))
            .map_err(|e| ToolError::InvalidParams(format!("the request cannot be bridged: {e}")))?;
    let PreparedChat {
        model,
        params,
        prompt_tokens,
    } = context
        .chat
        .prepare(&chat, false)
        .await
        .map_err(provider_error)?;
    let answer = context
        .chat
        .complete(&model, &params, prompt_tokens)
        .await
        .map_err(provider_error)?;
    let (prompt, completion) = (answer.prompt_tokens, answer.completion_tokens);
    let multiplier = unigen_db::billing::Bucket::ChatTokens.multiplier(model.tier);
    let charge = chat_charge(prompt, completion, multiplier, &model);
    let head = Head {
        id: background::response_id(job.id),
        created_at: job.created_at.timestamp(),
        model: model.id.clone(),
    };
    // The credits are known once the finisher charges them: `GET` reads
    // them from the job.
    let spent = output::usage(&chat_usage(prompt, completion, None));
    let response = output::answered(
        &head,
        &request.echo(),
        &answer.choices,
        &mut ids,
        spent,
        Utc::now().timestamp(),
    );
    store(context, job, &request, conversation, input, &response).await?;
    Ok(ToolOutput {
        output: json!({ "response": response }),
        actual_credits: charge.credits,
    })
}

/// The stored conversation `previous` continues (checked at creation; gone
/// since, the job fails saying so).
async fn previous_conversation(
    context: &WorkerContext,
    job: &Job,
    previous: &str,
) -> Result<Vec<Value>, ToolError> {
    let stored = async {
        let mut conn = context.pool.get().await.map_err(DbError::from)?;
        queries::responses::find(&mut conn, job.org_id, previous).await
    }
    .await
    .map_err(|e| ProviderError::Transient(format!("reading the previous response failed: {e}")))?;
    match stored.map(|s| s.conversation) {
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Ok(Vec::new()),
        None => Err(ToolError::Provider(ProviderError::Permanent(format!(
            "previous_response_id: response {previous} not found"
        )))),
    }
}

async fn store(
    context: &WorkerContext,
    job: &Job,
    request: &unigen_protocols::responses::ResponsesRequest,
    mut conversation: Vec<Value>,
    input: Vec<Value>,
    response: &Value,
) -> Result<(), ToolError> {
    conversation.extend(input.iter().cloned());
    conversation.extend(response["output"].as_array().into_iter().flatten().cloned());
    let new = NewResponse {
        id: background::response_id(job.id),
        org_id: job.org_id,
        model: response["model"].as_str().unwrap_or_default().to_owned(),
        status: response["status"].as_str().unwrap_or_default().to_owned(),
        body: response.clone(),
        input_items: json!(input),
        conversation: Value::Array(conversation),
        previous_response_id: request.previous_response_id.clone(),
        upstream: None,
        // The table's default retention.
        expires_at: None,
    };
    let mut conn = context
        .pool
        .get()
        .await
        .map_err(|e| ToolError::Storage(e.to_string()))?;
    queries::responses::replace(&mut conn, &new)
        .await
        .map_err(|e| ToolError::Storage(e.to_string()))
}

fn invalid(err: Invalid) -> ToolError {
    ToolError::InvalidParams(format!("{}: {}", err.param, err.message))
}

/// A chat failure as the job's: the message is the client's to read.
fn provider_error(err: ChatError) -> ToolError {
    ToolError::Provider(match err {
        ChatError::Invalid(invalid) => ProviderError::Permanent(invalid.message),
        // The provider layer's message for a busy or unavailable upstream
        // after its own retries and fallbacks.
        ChatError::Upstream(message) if message.starts_with("provider temporarily unavailable") => {
            ProviderError::Transient(message)
        }
        ChatError::Upstream(message) => ProviderError::Permanent(message),
    })
}
