//! Chat completions as a service: the model and the request validated,
//! grounded in web search results when asked, answered by the model's
//! upstreams (with fallbacks) or the built-in test model, and what was used.
//! The HTTP route keeps metering, headers and the SSE relay.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};
use unigen_core::ValidationError;
use unigen_core::config::ModelEntry;
use unigen_core::domain::ModelCategory;

use crate::Catalogue;
use crate::chat::{
    ChatCompletionRequest, ChatMessage, ChatParams, MessageContent, count_prompt_tokens,
    count_tokens,
};
use crate::fallback;
use crate::local::{LocalProvider, chat};
use crate::openai::{ChunkStream, OpenAiClient};
use crate::search::{SearchClient, grounding_prompt};

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
    /// The assistant message in the OpenAI shape (`tool_calls` when any).
    pub message: Value,
    pub finish_reason: String,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// The text as the test model streams it (one token or more a piece);
    /// empty for upstream answers.
    pub pieces: Vec<String>,
}

#[derive(Clone)]
pub struct ChatService {
    catalogue: Arc<Catalogue>,
    upstreams: Arc<HashMap<String, OpenAiClient>>,
    local: LocalProvider,
    search: Option<SearchClient>,
}

impl ChatService {
    pub fn new(
        catalogue: Arc<Catalogue>,
        upstreams: Arc<HashMap<String, OpenAiClient>>,
        local: LocalProvider,
        search: Option<SearchClient>,
    ) -> Self {
        Self {
            catalogue,
            upstreams,
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
        if params.web_search {
            self.ground_in_search_results(&mut params).await?;
        }
        let prompt_tokens = count_prompt_tokens(&params.messages);
        Ok(PreparedChat {
            model,
            params,
            prompt_tokens,
        })
    }

    /// Whether a streamed request is relayed from an upstream stream (else
    /// the whole answer is streamed in pieces).
    pub fn streams_upstream(model: &ModelEntry) -> bool {
        model.adapter == "openai"
    }

    /// The whole answer of `model` to `params`.
    pub async fn complete(
        &self,
        model: &ModelEntry,
        params: &ChatParams,
        prompt_tokens: u32,
    ) -> Result<Answer, ChatError> {
        if !Self::streams_upstream(model) {
            self.local
                .simulate_conditions()
                .await
                .map_err(|e| ChatError::Upstream(e.to_string()))?;
            let reply = chat::echo(params);
            return Ok(Answer {
                message: json!({ "role": "assistant", "content": reply.text }),
                finish_reason: reply.finish_reason.to_owned(),
                prompt_tokens: reply.prompt_tokens,
                completion_tokens: reply.completion_tokens,
                pieces: reply.pieces,
            });
        }
        let body = upstream_body(params, model, false);
        let upstream = fallback::in_order(&self.upstreams, model, |client| {
            let body = &body;
            async move { client.chat(body).await }
        })
        .await
        .map_err(upstream_error)?;
        let choice = &upstream["choices"][0];
        let content = choice["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let reported = |key: &str| upstream["usage"][key].as_u64().map(|n| n as u32);
        let completion_tokens =
            reported("completion_tokens").unwrap_or_else(|| count_tokens(&content));
        let mut message = json!({ "role": "assistant", "content": content });
        if let Some(calls) = choice["message"].get("tool_calls").filter(|c| !c.is_null()) {
            message["tool_calls"] = calls.clone();
        }
        Ok(Answer {
            message,
            finish_reason: choice["finish_reason"]
                .as_str()
                .unwrap_or("stop")
                .to_owned(),
            prompt_tokens: reported("prompt_tokens").unwrap_or(prompt_tokens),
            completion_tokens,
            pieces: Vec::new(),
        })
    }

    /// The upstream's chunk stream, from the first upstream that opens one.
    pub async fn open_stream(
        &self,
        model: &ModelEntry,
        params: &ChatParams,
    ) -> Result<ChunkStream, ChatError> {
        let body = upstream_body(params, model, true);
        fallback::in_order(&self.upstreams, model, |client| {
            let body = &body;
            async move { client.chat_stream(body).await }
        })
        .await
        .map_err(upstream_error)
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
}

fn upstream_error(last: Option<unigen_core::ProviderError>) -> ChatError {
    ChatError::Upstream(
        last.map_or_else(|| "no upstream is configured".to_owned(), |e| e.to_string()),
    )
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
