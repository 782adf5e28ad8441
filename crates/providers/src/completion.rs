//! Chat completions as a service: the model and the request validated,
//! grounded in web search results when asked, answered by the model's
//! upstreams (with fallbacks) or the built-in test model, and what was used.
//! The HTTP route keeps metering, headers and the SSE relay.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tracing::{Instrument, Span};
use unigen_core::config::ModelEntry;
use unigen_core::domain::ModelCategory;
use unigen_core::telemetry::metrics::{GenAiLabels, Timed};
use unigen_core::telemetry::semconv::operation::CHAT;
use unigen_core::telemetry::semconv::output_type::TEXT;
use unigen_core::telemetry::{self, spans};
use unigen_core::{ProviderError, ValidationError};

use crate::chat::{
    ChatCompletionRequest, ChatMessage, ChatParams, MessageContent, count_request_tokens,
    count_tokens,
};
use crate::local::LocalProvider;
use crate::local::answer::answer;
use crate::registry::{Capability, ChunkStream, Providers};
use crate::search::{SearchClient, grounding_prompt};
use crate::{Catalogue, fallback};

/// Why a completion was not served.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// The model provider or the search backend failed; the message says how.
    #[error("{0}")]
    Upstream(String),
}

/// A validated request: the model, its parameters and the prompt's tokens.
pub struct PreparedChat {
    pub model: ModelEntry,
    pub params: ChatParams,
    pub prompt_tokens: u32,
}

/// A whole answer.
pub struct Answer {
    /// Every choice in OpenAI's shape, as the model gave it (`message` with
    /// `tool_calls`, `refusal`, `logprobs`...).
    pub choices: Vec<Value>,
    /// The upstream's other top-level fields (`system_fingerprint`,
    /// `service_tier`...), passed through.
    pub extra: Map<String, Value>,
    pub prompt_tokens: u32,
    /// Of every choice.
    pub completion_tokens: u32,
    /// Per choice, the test model's stream deltas (after the role chunk) and
    /// finish reason; empty for upstream answers, which stream themselves.
    pub deltas: Vec<(Vec<Value>, String)>,
}

#[derive(Clone)]
pub struct ChatService {
    catalogue: Arc<Catalogue>,
    providers: Providers,
    local: LocalProvider,
    search: Option<SearchClient>,
}

impl ChatService {
    pub fn new(
        catalogue: Arc<Catalogue>,
        providers: Providers,
        local: LocalProvider,
        search: Option<SearchClient>,
    ) -> Self {
        Self {
            catalogue,
            providers,
            local,
            search,
        }
    }

    /// Resolves the model, validates the request (`stream_query`: `?stream=true`)
    /// and, for `web_search: true`, puts the search results ahead of the
    /// conversation.
    pub async fn prepare(
        &self,
        request: &ChatCompletionRequest,
        stream_query: bool,
    ) -> Result<PreparedChat, ChatError> {
        let model = self
            .catalogue
            .resolve(request.model.as_deref(), ModelCategory::Chat)?
            .clone();
        let mut params = request.validate(stream_query, model.vision)?;
        let adapter = crate::registry::adapter(&model.adapter);
        if !params.max_tokens_explicit
            && let Some(limit) = model
                .max_output_tokens
                .or(adapter.and_then(|a| a.default_max_tokens))
        {
            // What the upstream will be sent, and so what metering reserves.
            params.max_tokens = limit;
        }
        if let Some(taken) = adapter.and_then(|a| a.content_parts) {
            check_content_parts(&params.messages, taken, &model)?;
        }
        if params.n > 1 && adapter.is_some_and(|a| a.one_choice) {
            return Err(ValidationError::new(
                "n",
                format!(
                    "model `{}` answers one choice per request: n must be 1",
                    model.id
                ),
            )
            .into());
        }
        if params.web_search {
            self.ground_in_search_results(&mut params).await?;
        }
        // Everything sent upstream (tools, schemas, images), not only the
        // messages' text: the hold must cover what the upstream will count.
        let prompt_tokens = count_request_tokens(&params);
        Ok(PreparedChat {
            model,
            params,
            prompt_tokens,
        })
    }

    /// Whether a streamed request is relayed from an upstream stream (else
    /// the whole answer is streamed in pieces).
    pub fn streams_upstream(model: &ModelEntry) -> bool {
        Providers::serves_remotely(model, Capability::Chat)
    }

    /// The whole answer of `model` to `params`.
    pub async fn complete(
        &self,
        model: &ModelEntry,
        params: &ChatParams,
        prompt_tokens: u32,
    ) -> Result<Answer, ChatError> {
        if !Self::streams_upstream(model) {
            // The in-process test model: one GenAI span, no network call.
            let span = fallback::gen_ai_span(model, CHAT, TEXT, params.stream, None);
            let timed = Timed::start(GenAiLabels::new(CHAT, &model.adapter, &model.id));
            if let Err(err) = self
                .local
                .simulate_conditions()
                .instrument(span.clone())
                .await
            {
                timed.finish(spans::provider_error_type(&err));
                spans::fail(&span, spans::provider_error_type(&err));
                return Err(ChatError::Upstream(err.to_string()));
            }
            if params.stream {
                timed.labels().first_chunk(timed.elapsed());
            }
            let reply = answer(params);
            let answer = Answer {
                choices: reply
                    .choices
                    .iter()
                    .enumerate()
                    .map(|(index, c)| {
                        json!({"index": index, "message": c.message, "logprobs": null, "finish_reason": c.finish_reason})
                    })
                    .collect(),
                extra: Map::new(),
                prompt_tokens: reply.prompt_tokens,
                completion_tokens: reply.completion_tokens,
                deltas: reply
                    .choices
                    .into_iter()
                    .map(|c| (c.deltas, c.finish_reason.to_owned()))
                    .collect(),
            };
            timed.labels().tokens(
                Some(u64::from(answer.prompt_tokens)),
                Some(u64::from(answer.completion_tokens)),
            );
            timed.finish("");
            if !span.is_disabled() {
                spans::gen_ai_response(
                    &span,
                    Some(model.upstream_model.as_deref().unwrap_or(&model.id)),
                    None,
                    Some(i64::from(answer.prompt_tokens)),
                    Some(i64::from(answer.completion_tokens)),
                );
                if telemetry::record_content() {
                    let input: Value = params
                        .messages
                        .iter()
                        .map(|m| m.to_upstream(false))
                        .collect();
                    record_content(&span, &input, Some(&Value::Array(answer.choices.clone())));
                }
            }
            return Ok(answer);
        }
        let body = upstream_body(params, model, false);
        let traced = fallback::Traced {
            operation: CHAT,
            output_type: TEXT,
            stream: false,
            providers: &self.providers,
        };
        let mut upstream = fallback::in_order_traced(
            model,
            self.providers.chat(model),
            &traced,
            |client| {
                let body = &body;
                async move { client.chat(body).await }
            },
            |attempt, answer| {
                let tokens = |key: &str| answer["usage"][key].as_u64();
                attempt.tokens(tokens("prompt_tokens"), tokens("completion_tokens"));
                fallback::record_completion(&attempt.span, &answer);
                record_content(&attempt.span, &body["messages"], Some(&answer["choices"]));
                answer
            },
        )
        .await
        .map_err(upstream_error)?;
        let Some(Value::Array(choices)) =
            upstream.as_object_mut().and_then(|o| o.remove("choices"))
        else {
            return Err(ChatError::Upstream(
                "the model provider answered without choices".into(),
            ));
        };
        let reported = |key: &str| upstream["usage"][key].as_u64().map(|n| n as u32);
        let completion_tokens = reported("completion_tokens").unwrap_or_else(|| {
            choices
                .iter()
                .map(|c| count_tokens(&said_in(&c["message"])))
                .sum()
        });
        let prompt_tokens = reported("prompt_tokens").unwrap_or(prompt_tokens);
        let mut extra = match upstream {
            Value::Object(fields) => fields,
            _ => Map::new(),
        };
        // Ours: the id, object, creation time, model and usage.
        for key in ["id", "object", "created", "model", "usage"] {
            extra.remove(key);
        }
        Ok(Answer {
            choices,
            extra,
            prompt_tokens,
            completion_tokens,
            deltas: Vec::new(),
        })
    }

    /// The upstream's chunk stream, from the first upstream that opens one.
    pub async fn open_stream(
        &self,
        model: &ModelEntry,
        params: &ChatParams,
    ) -> Result<ChunkStream, ChatError> {
        let body = upstream_body(params, model, true);
        let traced = fallback::Traced {
            operation: CHAT,
            output_type: TEXT,
            stream: true,
            providers: &self.providers,
        };
        fallback::in_order_traced(
            model,
            self.providers.chat(model),
            &traced,
            |client| {
                let body = &body;
                async move { client.chat_stream(body).await }
            },
            |attempt, stream| {
                record_content(&attempt.span, &body["messages"], None);
                fallback::traced_stream(attempt, stream)
            },
        )
        .await
        .map_err(upstream_error)
    }

    /// Whether `model`'s upstreams speak Anthropic's Messages API natively
    /// (the `anthropic` adapter).
    pub fn speaks_messages(&self, model: &ModelEntry) -> bool {
        !self.providers.messages(model).is_empty()
    }

    /// A Messages request (`body`, with the upstream's model name) sent
    /// unchanged to the model's upstreams, with fallbacks; the answer as
    /// Anthropic gave it.
    pub async fn messages(
        &self,
        model: &ModelEntry,
        body: &Value,
        headers: &[(String, String)],
    ) -> Result<Value, ProviderError> {
        fallback::in_order_traced(
            model,
            self.providers.messages(model),
            &self.messages_traced(false),
            |client| async move { client.messages(body, headers).await },
            |attempt, answer| {
                let usage = &answer["usage"];
                let (input, output) = (
                    usage["input_tokens"].as_i64(),
                    usage["output_tokens"].as_i64(),
                );
                attempt.tokens(input.map(|n| n as u64), output.map(|n| n as u64));
                spans::gen_ai_response(
                    &attempt.span,
                    answer["model"].as_str(),
                    answer["id"].as_str(),
                    input,
                    output,
                );
                record_content(&attempt.span, &body["messages"], Some(&answer["content"]));
                answer
            },
        )
        .await
        .map_err(no_upstream)
    }

    /// The GenAI CLIENT spans and metrics of Messages API calls (the
    /// conventions' `chat` operation).
    fn messages_traced(&self, stream: bool) -> fallback::Traced<'_> {
        fallback::Traced {
            operation: CHAT,
            output_type: TEXT,
            stream,
            providers: &self.providers,
        }
    }

    /// The stream of [`ChatService::messages`]: Anthropic's events as sent.
    pub async fn messages_stream(
        &self,
        model: &ModelEntry,
        body: &Value,
        headers: &[(String, String)],
    ) -> Result<ChunkStream, ProviderError> {
        fallback::in_order_traced(
            model,
            self.providers.messages(model),
            &self.messages_traced(true),
            |client| async move { client.messages_stream(body, headers).await },
            |attempt, stream| {
                record_content(&attempt.span, &body["messages"], None);
                fallback::traced_stream(attempt, stream)
            },
        )
        .await
        .map_err(no_upstream)
    }

    /// Whether `model`'s upstreams speak OpenAI's Responses API natively
    /// (`openai` / `azure-openai` upstreams with `responses = true`).
    pub fn speaks_responses(&self, model: &ModelEntry) -> bool {
        !self.providers.responses(model).is_empty()
    }

    /// The model's Responses upstreams in the order they are tried, or only
    /// `pinned` (the upstream holding a continued response) when given.
    fn responses_upstreams(
        &self,
        model: &ModelEntry,
        pinned: Option<&str>,
    ) -> Vec<(String, Arc<dyn crate::registry::ResponsesUpstream>)> {
        let mut upstreams = self.providers.responses(model);
        if let Some(pinned) = pinned {
            upstreams.retain(|(name, _)| name == pinned);
        }
        upstreams
    }

    /// Whether `upstream` is one of `model`'s Responses upstreams.
    pub fn responses_upstream_serves(&self, model: &ModelEntry, upstream: &str) -> bool {
        !self.responses_upstreams(model, Some(upstream)).is_empty()
    }

    /// A Responses request (`body`, with the upstream's model name) sent
    /// unchanged to the model's Responses upstreams (or only `pinned`), with
    /// fallbacks; the upstream that answered and its `response`.
    pub async fn responses(
        &self,
        model: &ModelEntry,
        body: &Value,
        pinned: Option<&str>,
    ) -> Result<(String, Value), ProviderError> {
        fallback::in_order(
            model,
            self.responses_upstreams(model, pinned)
                .into_iter()
                .map(|(name, client)| (name.clone(), (name, client)))
                .collect(),
            |(name, client)| async move { client.responses(body).await.map(|r| (name, r)) },
        )
        .await
        .map_err(no_upstream)
    }

    /// The stream of [`ChatService::responses`]: the upstream that answered
    /// and OpenAI's typed events as sent.
    pub async fn responses_stream(
        &self,
        model: &ModelEntry,
        body: &Value,
        pinned: Option<&str>,
    ) -> Result<(String, ChunkStream), ProviderError> {
        fallback::in_order(
            model,
            self.responses_upstreams(model, pinned)
                .into_iter()
                .map(|(name, client)| (name.clone(), (name, client)))
                .collect(),
            |(name, client)| async move { client.responses_stream(body).await.map(|s| (name, s)) },
        )
        .await
        .map_err(no_upstream)
    }

    /// Deletes response `id` on `upstream` (the one that stored it), if it
    /// is still one of the model's Responses upstreams.
    pub async fn delete_upstream_response(
        &self,
        model: &ModelEntry,
        upstream: &str,
        id: &str,
    ) -> Result<(), ProviderError> {
        match self.responses_upstreams(model, Some(upstream)).first() {
            Some((_, client)) => client.delete_response(id).await,
            None => Ok(()),
        }
    }

    async fn ground_in_search_results(&self, params: &mut ChatParams) -> Result<(), ChatError> {
        let search = self.search.as_ref().ok_or_else(|| {
            ValidationError::new(
                "web_search",
                "web_search needs a search backend, and none is configured",
            )
        })?;
        let query = params.last_user_text();
        let results = search
            .search(&query)
            .await
            .map_err(|e| ChatError::Upstream(e.to_string()))?;
        let grounding = ChatMessage::with_text("system", grounding_prompt(&query, &results));
        params.messages.insert(0, grounding);
        Ok(())
    }
}

/// A content part the model's vendor does not take is the client's error.
fn check_content_parts(
    messages: &[ChatMessage],
    taken: &[&str],
    model: &ModelEntry,
) -> Result<(), ValidationError> {
    for (i, message) in messages.iter().enumerate() {
        let Some(MessageContent::Parts(parts)) = &message.content else {
            continue;
        };
        if let Some(other) = parts
            .iter()
            .filter_map(|p| p["type"].as_str())
            .find(|kind| !taken.contains(kind))
        {
            return Err(ValidationError::new(
                "messages",
                format!(
                    "messages[{i}]: model `{}` does not take `{other}` content parts (it takes {})",
                    model.id,
                    taken.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// The messages sent and the choices answered, on a GenAI span: only with
/// `telemetry.record_content` (nothing is even serialized without it).
fn record_content(span: &Span, input: &Value, output: Option<&Value>) {
    if span.is_disabled() || !telemetry::record_content() {
        return;
    }
    let output = output.map(Value::to_string);
    spans::gen_ai_content(span, Some(&input.to_string()), output.as_deref());
}

fn no_upstream(last: Option<ProviderError>) -> ProviderError {
    last.unwrap_or_else(|| ProviderError::Transient("no upstream is configured".to_owned()))
}

fn upstream_error(last: Option<unigen_core::ProviderError>) -> ChatError {
    ChatError::Upstream(
        last.map_or_else(|| "no upstream is configured".to_owned(), |e| e.to_string()),
    )
}

/// What a message or a stream delta says: its text, refusal and tool call
/// arguments (for usage when an upstream reports none).
pub fn said_in(message: &Value) -> String {
    let mut said = String::new();
    for key in ["content", "refusal"] {
        if let Some(text) = message[key].as_str() {
            said.push_str(text);
        }
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        for key in ["name", "arguments"] {
            if let Some(text) = call["function"][key].as_str() {
                said.push_str(text);
            }
        }
    }
    said
}

/// The request as the upstream's body: what the client sent, with the
/// upstream's model name and our messages (search grounding, `images`).
fn upstream_body(params: &ChatParams, model: &ModelEntry, stream: bool) -> Value {
    let mut body = params.forward.clone();
    body.insert(
        "model".into(),
        json!(model.upstream_model.as_deref().unwrap_or(&model.id)),
    );
    body.insert(
        "messages".into(),
        params
            .messages
            .iter()
            .map(|m| m.to_upstream(model.developer_as_system))
            .collect(),
    );
    if params.max_tokens_capped {
        // The quota has less left than the model would say.
        body.remove("max_completion_tokens");
        body.insert("max_tokens".into(), json!(params.max_tokens));
    } else if !params.max_tokens_explicit
        && (model.max_output_tokens.is_some()
            || crate::registry::adapter(&model.adapter)
                .is_some_and(|a| a.default_max_tokens.is_some()))
    {
        // The model's cap (Anthropic requires one), as metering reserved it.
        body.insert("max_tokens".into(), json!(params.max_tokens));
    }
    if stream {
        body.insert("stream".into(), json!(true));
        // Always ask: usage is recorded even when the client did not ask.
        let mut options = params.stream_options_extra.clone();
        options.insert("include_usage".into(), json!(true));
        body.insert("stream_options".into(), Value::Object(options));
    }
    Value::Object(body)
}
