//! One tool-calling chat turn on any catalogue chat model, in the OpenAI
//! function-calling protocol: what an agent's loop calls on every step.
//!
//! - `openai` adapter: `POST /chat/completions` with `tools` and
//!   `tool_choice: "auto"`, with the chat endpoint's retries (per upstream)
//!   and its fallback order (`upstream`, then `fallback_upstreams`; any
//!   failure moves on to the next). `function.arguments` arrives as a JSON
//!   string and is parsed; arguments that are not a JSON object become
//!   `{"_raw": "<the string>"}`, so the runner reports a tool error to the
//!   model instead of failing the turn. Usage the upstream does not report
//!   is counted with cl100k.
//! - `local` adapter (`local/echo`, `local/echo-vision`): the deterministic
//!   directive model of [`crate::local::chat::directive_turn`]:
//!   `@tool <name> <json>` lines in the latest user message become tool
//!   calls, one per turn, and the final answer quotes the tool results.
//!   It lets the whole agent feature run and be tested without upstream keys.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tracing::Instrument;
use unigen_core::telemetry::spans;

use crate::chat::{count_prompt_tokens, count_tokens};

use crate::fallback;
use crate::local::{LocalProvider, chat};
use crate::registry::{Capability, Providers};
use unigen_core::ProviderError;
use unigen_core::config::{LocalProviderSettings, UpstreamSettings};
use unigen_core::domain::ModelCategory;
use unigen_core::telemetry::metrics::{GenAiLabels, Timed};

pub use crate::turn::{
    ToolCall, ToolSpec, Turn, TurnRequest, parse_arguments, tool_result_message,
};

/// The chat models of the catalogue, ready to run turns: the upstreams'
/// clients (built once per process) and the local provider.
#[derive(Clone)]
pub struct ChatModels {
    providers: Providers,
    local: LocalProvider,
}

impl ChatModels {
    pub fn new(
        upstreams: &BTreeMap<String, UpstreamSettings>,
        local: &LocalProviderSettings,
    ) -> Self {
        Self::with_providers(Providers::new(upstreams), LocalProvider::new(local))
    }

    /// Shares the clients a process already has (e.g. the API's).
    pub fn with_providers(providers: Providers, local: LocalProvider) -> Self {
        Self { providers, local }
    }

    /// Runs one turn of `request.model`.
    #[tracing::instrument(skip_all, fields(model = %request.model.id))]
    pub async fn complete(&self, request: &TurnRequest<'_>) -> Result<Turn, ProviderError> {
        let model = request.model;
        if model.category != ModelCategory::Chat {
            return Err(ProviderError::Permanent(format!(
                "model `{}` is a {} model, not a chat model",
                model.id, model.category
            )));
        }
        match model.adapter.as_str() {
            "local" => {
                // The in-process test model: one GenAI span, no network call.
                let span = fallback::gen_ai_span(
                    model,
                    unigen_core::telemetry::semconv::operation::CHAT,
                    unigen_core::telemetry::semconv::output_type::TEXT,
                    false,
                    None,
                );
                let timed = Timed::start(GenAiLabels::new(
                    unigen_core::telemetry::semconv::operation::CHAT,
                    &model.adapter,
                    &model.id,
                ));
                let simulated = self
                    .local
                    .simulate_conditions()
                    .instrument(span.clone())
                    .await;
                if let Err(err) = simulated {
                    spans::fail(&span, spans::provider_error_type(&err));
                    timed.finish(spans::provider_error_type(&err));
                    return Err(err);
                }
                let turn = chat::directive_turn(request.messages, request.max_tokens);
                timed.labels().tokens(
                    Some(u64::from(turn.prompt_tokens)),
                    Some(u64::from(turn.completion_tokens)),
                );
                timed.finish("");
                spans::gen_ai_response(
                    &span,
                    Some(model.upstream_model.as_deref().unwrap_or(&model.id)),
                    None,
                    Some(i64::from(turn.prompt_tokens)),
                    Some(i64::from(turn.completion_tokens)),
                );
                Ok(turn)
            }
            _ if Providers::serves_remotely(model, Capability::Chat) => {
                self.complete_upstream(request).await
            }
            other => Err(ProviderError::Permanent(format!(
                "model `{}` uses the {other} adapter, which does not serve chat",
                model.id
            ))),
        }
    }

    /// The model's upstream, then each fallback in order, as the chat
    /// endpoint does (one loop: [`fallback::in_order`]).
    async fn complete_upstream(&self, request: &TurnRequest<'_>) -> Result<Turn, ProviderError> {
        let model = request.model;
        let body = upstream_body(request);
        let traced = fallback::Traced {
            operation: unigen_core::telemetry::semconv::operation::CHAT,
            output_type: unigen_core::telemetry::semconv::output_type::TEXT,
            stream: false,
            providers: &self.providers,
        };
        // The answer's id, model and usage are recorded before it is parsed.
        fallback::in_order_traced(
            model,
            self.providers.chat(model),
            &traced,
            |client| {
                let body = &body;
                async move {
                    let answer = client.chat(body).await?;
                    if unigen_core::telemetry::enabled() {
                        // The attempt's span, which this future runs in.
                        fallback::record_completion(&tracing::Span::current(), &answer);
                    }
                    parse_turn(&answer, request)
                }
            },
            |attempt, turn| {
                attempt.tokens(
                    Some(u64::from(turn.prompt_tokens)),
                    Some(u64::from(turn.completion_tokens)),
                );
                turn
            },
        )
        .await
        .map_err(|last| {
            last.unwrap_or_else(|| {
                ProviderError::Permanent(format!(
                    "no upstream is configured for model `{}`",
                    model.id
                ))
            })
        })
    }
}

/// The upstream request body; `tools` only when there are some (OpenAI
/// rejects an empty list).
fn upstream_body(request: &TurnRequest<'_>) -> Value {
    let model = request.model;
    let mut body = json!({
        "model": model.upstream_model.as_deref().unwrap_or(&model.id),
        "messages": request
            .messages
            .iter()
            .map(|m| m.to_upstream(model.developer_as_system))
            .collect::<Vec<_>>(),
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
    });
    if !request.tools.is_empty() {
        body["tools"] = request.tools.iter().map(ToolSpec::to_upstream).collect();
        body["tool_choice"] = json!("auto");
    }
    body
}

/// Reads `choices[0]` and `usage` of a chat completion.
fn parse_turn(answer: &Value, request: &TurnRequest<'_>) -> Result<Turn, ProviderError> {
    let choice = answer["choices"]
        .get(0)
        .ok_or_else(|| ProviderError::Permanent("the upstream answered no choices".into()))?;
    let message = &choice["message"];
    let content = match &message["content"] {
        Value::String(text) => Some(text.clone()),
        // Some OpenAI-compatible servers answer content parts.
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
        ),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_) => None,
    };
    let tool_calls: Vec<ToolCall> = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(i, call)| ToolCall::from_upstream(i, call))
                .collect()
        })
        .unwrap_or_default();
    let finish_reason = choice["finish_reason"].as_str().map_or_else(
        || {
            if tool_calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            }
            .to_owned()
        },
        str::to_owned,
    );
    let reported = |key: &str| {
        answer["usage"][key]
            .as_u64()
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    let prompt_tokens = reported("prompt_tokens").unwrap_or_else(|| {
        let tools: Vec<Value> = request.tools.iter().map(ToolSpec::to_upstream).collect();
        let tools = if tools.is_empty() {
            0
        } else {
            count_tokens(&Value::Array(tools).to_string())
        };
        count_prompt_tokens(request.messages) + tools
    });
    let completion_tokens = reported("completion_tokens").unwrap_or_else(|| {
        content.as_deref().map_or(0, count_tokens)
            + tool_calls
                .iter()
                .map(|c| count_tokens(&c.name) + count_tokens(&c.arguments.to_string()))
                .sum::<u32>()
    });
    Ok(Turn {
        content,
        tool_calls,
        finish_reason,
        prompt_tokens,
        completion_tokens,
    })
}

#[cfg(test)]
mod tests {
    use crate::chat::ChatMessage;
    use std::time::Duration;
    use unigen_core::config::ModelEntry;

    use crate::chat::MessageContent;

    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;
    use unigen_core::domain::ModelTier;

    fn model(adapter: &str, upstream: Option<&str>, fallbacks: &[&str]) -> ModelEntry {
        ModelEntry {
            id: format!("{adapter}/test-chat"),
            category: ModelCategory::Chat,
            tier: ModelTier::Fast,
            adapter: adapter.into(),
            owned_by: "test".into(),
            capabilities: vec!["chat".into()],
            credits_per_unit: 1,
            completion_credits_per_unit: None,
            max_duration_seconds: None,
            languages: None,
            vision: false,
            default: false,
            upstream: upstream.map(str::to_owned),
            upstream_model: Some("gpt-test".into()),
            fallback_upstreams: fallbacks.iter().map(|s| (*s).to_owned()).collect(),
            aliases: Vec::new(),
            developer_as_system: false,
            max_output_tokens: None,
            upstream_weights: Default::default(),
            voices: Default::default(),
            description: None,
        }
    }

    fn message(role: &str, text: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: Some(MessageContent::Text(text.into())),
            images: None,
            name: None,
            tool_call_id: None,
            tool_calls: None,
            extra: Default::default(),
        }
    }

    fn search_tool() -> ToolSpec {
        ToolSpec {
            name: "web_search".into(),
            description: "Search the web".into(),
            parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
        }
    }

    fn models(servers: &[(&str, &MockServer)]) -> ChatModels {
        let upstreams = servers
            .iter()
            .map(|(name, server)| {
                let settings = UpstreamSettings {
                    base_url: format!("{}/v1", server.uri()),
                    api_key: "sk-secret".into(),
                    timeout_seconds: 5,
                    ..Default::default()
                };
                ((*name).to_owned(), settings)
            })
            .collect();
        ChatModels::new(
            &upstreams,
            &LocalProviderSettings {
                latency_ms: 0,
                failure_rate: 0.0,
            },
        )
    }

    /// A real OpenAI answer asking for a tool call.
    fn tool_call_answer() -> Value {
        json!({
            "id": "chatcmpl-abc123",
            "object": "chat.completion",
            "created": 1_722_000_000,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{
                        "id": "call_Xy12",
                        "type": "function",
                        "function": {"name": "web_search", "arguments": "{\"query\":\"rust\"}"}
                    }],
                    "refusal": null
                },
                "logprobs": null,
                "finish_reason": "tool_calls"
            }],
            "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99},
            "system_fingerprint": "fp_0123"
        })
    }

    async fn answering(answer: Value) -> MockServer {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(ResponseTemplate::new(200).set_body_json(answer))
            .mount(&server)
            .await;
        server
    }

    #[tokio::test]
    async fn llm_openai_tool_calls_are_parsed_with_their_json_arguments() {
        let server = answering(tool_call_answer()).await;
        let model = model("openai", Some("main"), &[]);
        let messages = [message("user", "find rust news")];
        let tools = [search_tool()];
        let request = TurnRequest {
            model: &model,
            messages: &messages,
            tools: &tools,
            temperature: 0.2,
            max_tokens: 500,
        };
        let turn = models(&[("main", &server)])
            .complete(&request)
            .await
            .unwrap();
        assert_eq!(
            turn,
            Turn {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "call_Xy12".into(),
                    name: "web_search".into(),
                    arguments: json!({"query": "rust"}),
                }],
                finish_reason: "tool_calls".into(),
                prompt_tokens: 82,
                completion_tokens: 17,
            }
        );
        let sent: Value = server.received_requests().await.unwrap()[0]
            .body_json()
            .unwrap();
        assert_eq!(sent["model"], "gpt-test");
        assert_eq!(sent["tool_choice"], "auto");
        assert_eq!(sent["tools"][0]["type"], "function");
        assert_eq!(sent["tools"][0]["function"]["name"], "web_search");
        assert_eq!(
            sent["tools"][0]["function"]["parameters"]["required"],
            json!(["query"])
        );
        assert_eq!(
            (sent["temperature"].as_f64(), sent["max_tokens"].as_u64()),
            (Some(0.2), Some(500))
        );
    }

    #[tokio::test]
    async fn llm_openai_request_carries_the_assistant_calls_and_tool_results() {
        let final_answer = json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Rust 1.80 is out."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 8, "total_tokens": 128}
        });
        let server = answering(final_answer).await;
        let model = model("openai", Some("main"), &[]);
        let call = ToolCall {
            id: "call_Xy12".into(),
            name: "web_search".into(),
            arguments: json!({"query": "rust"}),
        };
        let asked = Turn {
            content: None,
            tool_calls: vec![call.clone()],
            finish_reason: "tool_calls".into(),
            prompt_tokens: 0,
            completion_tokens: 0,
        };
        let messages = [
            message("system", "You research."),
            message("user", "find rust news"),
            asked.assistant_message(),
            tool_result_message(&call, &json!({"results": [{"title": "Rust 1.80"}]})),
        ];
        let tools = [search_tool()];
        let request = TurnRequest {
            model: &model,
            messages: &messages,
            tools: &tools,
            temperature: 0.7,
            max_tokens: 100,
        };
        let turn = models(&[("main", &server)])
            .complete(&request)
            .await
            .unwrap();
        assert_eq!(turn.content.as_deref(), Some("Rust 1.80 is out."));
        assert!(turn.tool_calls.is_empty());
        assert_eq!(turn.finish_reason, "stop");
        let requests = server.received_requests().await.unwrap();
        let sent: Value = requests[0].body_json().unwrap();
        let sent_messages = sent["messages"].as_array().unwrap();
        assert_eq!(sent_messages.len(), 4);
        assert_eq!(
            sent_messages[2],
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_Xy12", "type": "function",
                "function": {"name": "web_search", "arguments": "{\"query\":\"rust\"}"}
            }]})
        );
        assert_eq!(
            sent_messages[3],
            json!({"role": "tool", "tool_call_id": "call_Xy12", "content": "{\"results\":[{\"title\":\"Rust 1.80\"}]}"})
        );
        assert!(sent["tools"].is_array());
        assert_eq!(
            requests[0].headers.get("authorization").unwrap(),
            "Bearer sk-secret"
        );
    }

    #[tokio::test]
    async fn llm_openai_failing_upstream_falls_back_to_the_next_without_leaking_its_body() {
        let broken = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(500)
                    .insert_header("retry-after", "0")
                    .set_body_string("internal secret trace"),
            )
            .mount(&broken)
            .await;
        let healthy = answering(tool_call_answer()).await;
        let model = model("openai", Some("primary"), &["missing", "backup"]);
        let messages = [message("user", "find rust news")];
        let request = TurnRequest {
            model: &model,
            messages: &messages,
            tools: &[search_tool()],
            temperature: 0.7,
            max_tokens: 100,
        };
        let chat_models = models(&[("primary", &broken), ("backup", &healthy)]);
        let turn = tokio::time::timeout(Duration::from_secs(10), chat_models.complete(&request))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(turn.tool_calls[0].name, "web_search");
        let tries = broken.received_requests().await.unwrap().len();
        assert!(
            tries > 1,
            "the primary is retried as for chat ({tries} tries)"
        );
        assert_eq!(healthy.received_requests().await.unwrap().len(), 1);

        let alone = model_without_fallbacks("primary");
        let request = TurnRequest {
            model: &alone,
            ..request
        };
        let err = chat_models.complete(&request).await.unwrap_err();
        assert!(matches!(err, ProviderError::Transient(_)), "{err:?}");
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    fn model_without_fallbacks(upstream: &str) -> ModelEntry {
        model("openai", Some(upstream), &[])
    }

    #[tokio::test]
    async fn llm_openai_null_content_bad_arguments_and_missing_usage_are_handled() {
        let answer = json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "web_fetch", "arguments": "{\"url\": \"https://exa"}},
                {"type": "function", "function": {"name": "generate_chart", "arguments": ""}}
            ]}}]
        });
        let server = answering(answer).await;
        let model = model("openai", Some("main"), &[]);
        let messages = [message("user", "fetch it")];
        let request = TurnRequest {
            model: &model,
            messages: &messages,
            tools: &[],
            temperature: 0.7,
            max_tokens: 100,
        };
        let turn = models(&[("main", &server)])
            .complete(&request)
            .await
            .unwrap();
        assert_eq!(turn.content, None);
        assert_eq!(
            turn.tool_calls[0].arguments,
            json!({"_raw": "{\"url\": \"https://exa"})
        );
        assert_eq!(
            (
                turn.tool_calls[1].id.as_str(),
                &turn.tool_calls[1].arguments
            ),
            ("call_1", &json!({})),
            "a call without id is named by its index"
        );
        assert_eq!(turn.finish_reason, "tool_calls");
        assert_eq!(turn.prompt_tokens, count_prompt_tokens(&messages));
        assert!(turn.completion_tokens > 0);
        let sent: Value = server.received_requests().await.unwrap()[0]
            .body_json()
            .unwrap();
        assert!(sent.get("tools").is_none() && sent.get("tool_choice").is_none());

        let stop = answering(json!({"choices": [{"message": {"role": "assistant", "content": null}, "finish_reason": "stop"}]})).await;
        let turn = models(&[("main", &stop)]).complete(&request).await.unwrap();
        assert_eq!((turn.content.clone(), turn.completion_tokens), (None, 0));
        assert_eq!(
            turn.assistant_message().content,
            Some(MessageContent::Text(String::new())),
            "an assistant message without calls always has content"
        );
    }

    #[tokio::test]
    async fn llm_models_that_cannot_chat_fail_permanently() {
        let chat_models = models(&[]);
        let messages = [message("user", "hi")];
        let mut image = model("local", None, &[]);
        image.category = ModelCategory::Image;
        let mut replicate = model("replicate", Some("main"), &[]);
        replicate.id = "acme/chat".into();
        let unrouted = model("openai", Some("nowhere"), &[]);
        for (entry, expected) in [
            (&image, "is a image model, not a chat model"),
            (&replicate, "uses the replicate adapter"),
            (&unrouted, "no upstream is configured"),
        ] {
            let request = TurnRequest {
                model: entry,
                messages: &messages,
                tools: &[],
                temperature: 0.7,
                max_tokens: 100,
            };
            match chat_models.complete(&request).await {
                Err(ProviderError::Permanent(message)) => {
                    assert!(message.contains(expected), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    async fn run(chat_models: &ChatModels, model: &ModelEntry, messages: &[ChatMessage]) -> Turn {
        let request = TurnRequest {
            model,
            messages,
            tools: &[],
            temperature: 0.7,
            max_tokens: 100,
        };
        chat_models.complete(&request).await.unwrap()
    }

    #[tokio::test]
    async fn llm_local_models_run_the_directive_protocol() {
        let chat_models = models(&[]);
        let model = model("local", None, &[]);
        let mut messages = vec![message(
            "user",
            "Look it up\n@tool web_search {\"query\": \"rust\"}",
        )];
        let turn = run(&chat_models, &model, &messages).await;
        assert_eq!(turn.tool_calls[0].arguments, json!({"query": "rust"}));
        messages.push(turn.assistant_message());
        messages.push(tool_result_message(
            &turn.tool_calls[0],
            &json!({"hits": 3}),
        ));
        let turn = run(&chat_models, &model, &messages).await;
        assert_eq!(
            turn.content.as_deref(),
            Some("Look it up\n[web_search] {\"hits\":3}")
        );
    }

    #[test]
    fn llm_arguments_that_are_not_an_object_are_kept_raw() {
        assert_eq!(parse_arguments("{\"a\": 1}"), json!({"a": 1}));
        assert_eq!(parse_arguments("  "), json!({}));
        assert_eq!(parse_arguments("[1]"), json!({"_raw": "[1]"}));
        assert_eq!(parse_arguments("{oops"), json!({"_raw": "{oops"}));
        let call = ToolCall::from_upstream(
            4,
            &json!({"function": {"name": "x", "arguments": {"k": true}}}),
        );
        assert_eq!(
            (call.id.as_str(), call.arguments),
            ("call_4", json!({"k": true}))
        );
    }
}
