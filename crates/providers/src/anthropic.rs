//! Adapter for Anthropic's Messages API (`adapter = "anthropic"`):
//! `POST {base}/v1/messages` with the key in `x-api-key` and the
//! `anthropic-version` header (an upstream's `headers` may set another).
//!
//! The chat endpoint speaks OpenAI's protocol, so this module translates:
//! - system and developer messages become `system`; images become image
//!   blocks (base64 from data URLs, else URL sources);
//! - `tools`, `tool_choice` and `parallel_tool_calls` become Anthropic's
//!   tools and tool choice; an assistant's `tool_calls` become `tool_use`
//!   blocks and `tool` messages `tool_result` blocks (consecutive messages of
//!   one role are merged, as the API wants turns to alternate);
//! - `response_format` (`json_schema` or `json_object`) becomes a tool the
//!   model must call, whose input is the answer's content;
//! - `stop` becomes `stop_sequences`, `user` `metadata.user_id`, and
//!   `max_tokens` (required there) is the request's, else 4,096;
//! - answers and stream events come back as OpenAI completions and chunks:
//!   `input_json_delta` becomes `delta.tool_calls[].function.arguments`.
//!
//! It also speaks the Messages API natively ([`MessagesUpstream`], for the
//! API's `/v1/messages`): the client's request, its `anthropic-version` and
//! `anthropic-beta` headers, the answer and the events, untranslated.

use std::collections::{HashMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use serde_json::{Map, Value, json};
use unigen_core::ProviderError;
use unigen_core::config::UpstreamSettings;

use crate::http::{self, Attempt, with_retries};
use crate::sse;
use crate::upstream::{Auth, Upstream};
use crate::vendor::{ChatUpstream, ChunkStream, MessagesUpstream};

/// The API version this adapter speaks (Anthropic's documented header).
pub const API_VERSION: &str = "2023-06-01";
/// `max_tokens` when neither the request nor the model sets one.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// The forced tool of `response_format: json_object`.
const JSON_OBJECT_TOOL: &str = "json_object";

pub struct AnthropicClient {
    upstream: Upstream,
}

impl AnthropicClient {
    pub fn new(settings: &UpstreamSettings) -> Self {
        Self {
            upstream: Upstream::new(
                settings,
                Auth::Header("x-api-key"),
                &[("anthropic-version", API_VERSION)],
            ),
        }
    }

    async fn post(&self, body: &Value) -> Result<reqwest::Response, Attempt> {
        let url = self.upstream.url("v1/messages");
        let response = self.upstream.send(|http| http.post(url).json(body)).await?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(status_failure(response).await)
        }
    }

    /// The Messages request as sent, with the client's headers.
    async fn post_native(
        &self,
        body: &Value,
        headers: &reqwest::header::HeaderMap,
    ) -> Result<reqwest::Response, Attempt> {
        let url = self.upstream.url("v1/messages");
        let response = self
            .upstream
            .send_with_headers(|http| http.post(url).json(body), headers)
            .await?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(status_failure(response).await)
        }
    }

    async fn native(
        &self,
        body: &Value,
        headers: &[(String, String)],
    ) -> Result<Value, ProviderError> {
        let headers = forwarded(headers);
        with_retries(|| async {
            let response = self.post_native(body, &headers).await?;
            response.json::<Value>().await.map_err(|err| {
                Attempt::permanent(format!(
                    "the upstream answered an unreadable response: {err}"
                ))
            })
        })
        .await
    }

    async fn native_stream(
        &self,
        body: &Value,
        headers: &[(String, String)],
    ) -> Result<ChunkStream, ProviderError> {
        let headers = forwarded(headers);
        let response = with_retries(|| self.post_native(body, &headers)).await?;
        Ok(Box::pin(native_events(sse::events(
            response.bytes_stream(),
        ))))
    }

    async fn complete(&self, body: &Value) -> Result<Value, ProviderError> {
        let request = to_messages_request(body, false)?;
        let message: Value = with_retries(|| async {
            let response = self.post(&request.body).await?;
            response.json::<Value>().await.map_err(|err| {
                Attempt::permanent(format!(
                    "the upstream answered an unreadable response: {err}"
                ))
            })
        })
        .await?;
        to_completion(&message, request.json_tool.as_deref(), &request.model)
    }

    async fn stream(&self, body: &Value) -> Result<ChunkStream, ProviderError> {
        let request = to_messages_request(body, true)?;
        let response = with_retries(|| self.post(&request.body)).await?;
        Ok(Box::pin(chunks(
            sse::events(response.bytes_stream()),
            StreamState::new(request.json_tool, request.model),
        )))
    }
}

impl ChatUpstream for AnthropicClient {
    fn chat<'a>(&'a self, body: &'a Value) -> BoxFuture<'a, Result<Value, ProviderError>> {
        Box::pin(self.complete(body))
    }

    fn chat_stream<'a>(
        &'a self,
        body: &'a Value,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        Box::pin(self.stream(body))
    }
}

impl MessagesUpstream for AnthropicClient {
    fn messages<'a>(
        &'a self,
        body: &'a Value,
        headers: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<Value, ProviderError>> {
        Box::pin(self.native(body, headers))
    }

    fn messages_stream<'a>(
        &'a self,
        body: &'a Value,
        headers: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        Box::pin(self.native_stream(body, headers))
    }
}

/// The client's headers that reach Anthropic: `anthropic-version` and
/// `anthropic-beta` (others, and values that are not valid HTTP, are not).
fn forwarded(headers: &[(String, String)]) -> reqwest::header::HeaderMap {
    let mut map = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        if !matches!(name.as_str(), "anthropic-version" | "anthropic-beta") {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            reqwest::header::HeaderName::from_bytes(name.as_bytes()),
            reqwest::header::HeaderValue::from_str(value),
        ) {
            map.append(name, value);
        }
    }
    map
}

/// A stream's `error` event as a failure: overloaded, API, rate-limit and
/// timeout errors are transient.
fn event_error(event: &Value) -> ProviderError {
    let kind = event["error"]["type"].as_str().unwrap_or_default();
    let message: String = event["error"]["message"]
        .as_str()
        .unwrap_or("the upstream stream failed")
        .chars()
        .take(200)
        .collect();
    match kind {
        "overloaded_error" | "api_error" | "rate_limit_error" | "timeout_error" => {
            ProviderError::Transient(message)
        }
        _ => ProviderError::Permanent(message),
    }
}

/// The native stream's events as JSON, ending after `message_stop`; an
/// `error` event, or a stream that ends before `message_stop`, is an error
/// that ends it.
fn native_events(
    events: impl Stream<Item = Result<sse::Event, ProviderError>> + Send + 'static,
) -> impl Stream<Item = Result<Value, ProviderError>> + Send {
    let events = Box::pin(events);
    futures_util::stream::unfold((events, false), |(mut events, done)| async move {
        if done {
            return None;
        }
        loop {
            let item = match events.next().await {
                None => Err(ProviderError::Transient(
                    "the upstream stream ended before the message did".into(),
                )),
                Some(Err(err)) => Err(err),
                Some(Ok(event)) => match serde_json::from_str::<Value>(&event.data) {
                    Ok(data) if data["type"] == "error" => Err(event_error(&data)),
                    Ok(data) => Ok(data),
                    Err(_) => {
                        tracing::debug!("skipping an unreadable stream event");
                        continue;
                    }
                },
            };
            let done = match &item {
                Ok(data) => data["type"] == "message_stop",
                Err(_) => true,
            };
            return Some((item, (events, done)));
        }
    })
}

/// A non-success answer, with Anthropic's `error.message` as the explanation.
async fn status_failure(response: reqwest::Response) -> Attempt {
    http::status_failure(response, |body| {
        body["error"]["message"]
            .as_str()
            .map(|m| m.chars().take(200).collect())
    })
    .await
}

/// A Messages request, and the name of the tool whose input is the answer
/// (`response_format`).
struct MessagesRequest {
    body: Value,
    json_tool: Option<String>,
    model: String,
}

fn unsupported(what: &str) -> ProviderError {
    ProviderError::Permanent(format!("{what} is not supported by Anthropic models"))
}

/// An OpenAI chat completion request as a Messages request.
fn to_messages_request(openai: &Value, stream: bool) -> Result<MessagesRequest, ProviderError> {
    let model = openai["model"].as_str().unwrap_or_default().to_owned();
    let max_tokens = openai["max_completion_tokens"]
        .as_u64()
        .or_else(|| openai["max_tokens"].as_u64())
        .unwrap_or(u64::from(DEFAULT_MAX_TOKENS));
    let (system, messages) =
        to_messages(openai["messages"].as_array().map_or(&[][..], Vec::as_slice))?;
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("max_tokens".into(), json!(max_tokens));
    body.insert("messages".into(), Value::Array(messages));
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    // OpenAI's range is 0-2, Anthropic's 0-1.
    if let Some(temperature) = openai["temperature"].as_f64() {
        body.insert("temperature".into(), json!(temperature.clamp(0.0, 1.0)));
    }
    if let Some(top_p) = openai["top_p"].as_f64() {
        body.insert("top_p".into(), json!(top_p));
    }
    match &openai["stop"] {
        Value::String(stop) => {
            body.insert("stop_sequences".into(), json!([stop]));
        }
        Value::Array(stops) if !stops.is_empty() => {
            body.insert("stop_sequences".into(), Value::Array(stops.clone()));
        }
        _ => {}
    }
    if let Some(user) = openai["user"].as_str() {
        body.insert("metadata".into(), json!({"user_id": user}));
    }
    let mut tools: Vec<Value> = openai["tools"]
        .as_array()
        .map(|tools| tools.iter().map(to_tool).collect::<Result<_, _>>())
        .transpose()?
        .unwrap_or_default();
    let mut tool_choice = to_tool_choice(&openai["tool_choice"]);
    let json_tool = match openai["response_format"]["type"].as_str() {
        Some("json_schema") => {
            let format = &openai["response_format"]["json_schema"];
            let name = format["name"]
                .as_str()
                .unwrap_or("json_response")
                .to_owned();
            let mut tool = json!({
                "name": name,
                "input_schema": schema_object(&format["schema"]),
            });
            if let Some(description) = format["description"].as_str() {
                tool["description"] = json!(description);
            }
            tools.push(tool);
            Some(name)
        }
        Some("json_object") => {
            tools.push(json!({
                "name": JSON_OBJECT_TOOL,
                "description": "Answer with a JSON object.",
                "input_schema": {"type": "object"},
            }));
            Some(JSON_OBJECT_TOOL.to_owned())
        }
        _ => None,
    };
    if let Some(name) = &json_tool {
        // The answer is that tool's input; with the client's own tools
        // beside it, the model must call one of them or that one.
        tool_choice = Some(if tools.len() > 1 {
            json!({"type": "any"})
        } else {
            json!({"type": "tool", "name": name})
        });
    }
    if openai["parallel_tool_calls"] == json!(false) && !tools.is_empty() {
        let choice = tool_choice.get_or_insert_with(|| json!({"type": "auto"}));
        if choice["type"] != "none" {
            choice["disable_parallel_tool_use"] = json!(true);
        }
    }
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = tool_choice
        && body.contains_key("tools")
    {
        body.insert("tool_choice".into(), choice);
    }
    if stream {
        body.insert("stream".into(), json!(true));
    }
    Ok(MessagesRequest {
        body: Value::Object(body),
        json_tool,
        model,
    })
}

/// A JSON schema as a tool's `input_schema`, which must describe an object.
fn schema_object(schema: &Value) -> Value {
    match schema {
        Value::Object(fields) if fields.get("type").is_some_and(|t| t == "object") => {
            schema.clone()
        }
        Value::Object(_) => {
            json!({"type": "object", "properties": {"value": schema}, "required": ["value"]})
        }
        _ => json!({"type": "object"}),
    }
}

fn to_tool(tool: &Value) -> Result<Value, ProviderError> {
    if tool["type"] != "function" {
        return Err(unsupported("a tool of another type than `function`"));
    }
    let function = &tool["function"];
    let mut out = json!({
        "name": function["name"],
        "input_schema": if function["parameters"].is_object() {
            function["parameters"].clone()
        } else {
            json!({"type": "object", "properties": {}})
        },
    });
    if let Some(description) = function["description"].as_str() {
        out["description"] = json!(description);
    }
    Ok(out)
}

fn to_tool_choice(choice: &Value) -> Option<Value> {
    match choice {
        Value::String(mode) => match mode.as_str() {
            "auto" => Some(json!({"type": "auto"})),
            "none" => Some(json!({"type": "none"})),
            "required" => Some(json!({"type": "any"})),
            _ => None,
        },
        Value::Object(_) => choice["function"]["name"]
            .as_str()
            .map(|name| json!({"type": "tool", "name": name})),
        _ => None,
    }
}

/// The `system` blocks and the alternating user/assistant turns.
fn to_messages(openai: &[Value]) -> Result<(Vec<Value>, Vec<Value>), ProviderError> {
    let mut system = Vec::new();
    let mut turns: Vec<(String, Vec<Value>)> = Vec::new();
    for message in openai {
        let role = message["role"].as_str().unwrap_or_default();
        let (turn_role, blocks) = match role {
            "system" | "developer" => {
                let text = text_of(&message["content"]);
                if !text.is_empty() {
                    system.push(json!({"type": "text", "text": text}));
                }
                continue;
            }
            "user" => ("user", user_blocks(&message["content"])?),
            "assistant" => ("assistant", assistant_blocks(message)),
            "tool" => {
                let mut result = json!({
                    "type": "tool_result",
                    "tool_use_id": message["tool_call_id"],
                    "content": text_of(&message["content"]),
                });
                if message["is_error"] == json!(true) {
                    result["is_error"] = json!(true);
                }
                ("user", vec![result])
            }
            other => return Err(unsupported(&format!("a message with role `{other}`"))),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if last == turn_role => existing.extend(blocks),
            _ => turns.push((turn_role.to_owned(), blocks)),
        }
    }
    let messages = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    Ok((system, messages))
}

/// The text of a content string or of its text parts.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

fn user_blocks(content: &Value) -> Result<Vec<Value>, ProviderError> {
    match content {
        Value::String(text) if text.is_empty() => Ok(Vec::new()),
        Value::String(text) => Ok(vec![json!({"type": "text", "text": text})]),
        Value::Array(parts) => parts
            .iter()
            .filter(|part| {
                part["type"] != "text" || part["text"].as_str().is_some_and(|t| !t.is_empty())
            })
            .map(|part| match part["type"].as_str() {
                Some("text") => Ok(json!({"type": "text", "text": part["text"]})),
                Some("image_url") => {
                    image_block(part["image_url"]["url"].as_str().unwrap_or_default())
                }
                Some(other) => Err(unsupported(&format!("a `{other}` content part"))),
                None => Err(unsupported("a content part without a type")),
            })
            .collect(),
        _ => Ok(Vec::new()),
    }
}

/// A data URL as a base64 source, any other URL as a URL source.
fn image_block(url: &str) -> Result<Value, ProviderError> {
    if let Some(rest) = url.strip_prefix("data:") {
        let (media_type, data) = rest
            .split_once(";base64,")
            .ok_or_else(|| unsupported("an image data URL that is not base64"))?;
        return Ok(json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }));
    }
    Ok(json!({"type": "image", "source": {"type": "url", "url": url}}))
}

fn assistant_blocks(message: &Value) -> Vec<Value> {
    let mut blocks = Vec::new();
    let text = text_of(&message["content"]);
    if !text.is_empty() {
        blocks.push(json!({"type": "text", "text": text}));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let arguments = call["function"]["arguments"].as_str().unwrap_or("{}");
        let input = match serde_json::from_str::<Value>(arguments) {
            Ok(Value::Object(fields)) => Value::Object(fields),
            _ => json!({}),
        };
        blocks.push(json!({
            "type": "tool_use",
            "id": call["id"],
            "name": call["function"]["name"],
            "input": input,
        }));
    }
    blocks
}

fn finish_reason(stop_reason: Option<&str>, called_tools: bool) -> &'static str {
    match stop_reason {
        Some("max_tokens") => "length",
        Some("tool_use") if called_tools => "tool_calls",
        Some("refusal") => "content_filter",
        _ => "stop",
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Anthropic's usage as OpenAI's: cached input counts as prompt tokens.
fn prompt_tokens(usage: &Value) -> u64 {
    [
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ]
    .iter()
    .filter_map(|key| usage[*key].as_u64())
    .sum()
}

/// A Messages answer as an OpenAI chat completion.
fn to_completion(
    message: &Value,
    json_tool: Option<&str>,
    model: &str,
) -> Result<Value, ProviderError> {
    let blocks = message["content"]
        .as_array()
        .ok_or_else(|| ProviderError::Permanent("the upstream answered no content".into()))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") if json_tool.is_some_and(|t| block["name"] == t) => {
                text.push_str(&block["input"].to_string());
            }
            Some("tool_use") => tool_calls.push(json!({
                "id": block["id"],
                "type": "function",
                "function": {"name": block["name"], "arguments": block["input"].to_string()},
            })),
            // Thinking blocks are not part of the answer.
            _ => {}
        }
    }
    let called_tools = !tool_calls.is_empty();
    let mut answer = json!({"role": "assistant", "content": if text.is_empty() && called_tools { Value::Null } else { json!(text) }});
    if called_tools {
        answer["tool_calls"] = Value::Array(tool_calls);
    }
    let usage = &message["usage"];
    let (prompt, completion) = (
        prompt_tokens(usage),
        usage["output_tokens"].as_u64().unwrap_or(0),
    );
    Ok(json!({
        "id": message["id"].as_str().map_or_else(|| "chatcmpl-anthropic".to_owned(), |id| format!("chatcmpl-{id}")),
        "object": "chat.completion",
        "created": now(),
        "model": message["model"].as_str().unwrap_or(model),
        "choices": [{
            "index": 0,
            "message": answer,
            "logprobs": null,
            "finish_reason": finish_reason(message["stop_reason"].as_str(), called_tools),
        }],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }))
}

/// What a content block of the stream carries.
enum Block {
    Text,
    /// A tool call: its index among the answer's `tool_calls`.
    Tool(usize),
    /// The `response_format` tool: its input is the content.
    Answer,
    Ignored,
}

/// Translates the stream's events into chunks.
struct StreamState {
    json_tool: Option<String>,
    id: String,
    model: String,
    created: i64,
    blocks: HashMap<u64, Block>,
    tool_calls: usize,
    prompt_tokens: u64,
    completion_tokens: u64,
}

impl StreamState {
    fn new(json_tool: Option<String>, model: String) -> Self {
        Self {
            json_tool,
            id: "chatcmpl-anthropic".into(),
            model,
            created: now(),
            blocks: HashMap::new(),
            tool_calls: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
        }
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        })
    }

    /// The chunks of one event; `Err` ends the stream, as does `Ok(None)`
    /// after `message_stop`.
    fn on_event(&mut self, event: &Value) -> Result<(Vec<Value>, bool), ProviderError> {
        let mut out = Vec::new();
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let message = &event["message"];
                if let Some(id) = message["id"].as_str() {
                    self.id = format!("chatcmpl-{id}");
                }
                if let Some(model) = message["model"].as_str() {
                    self.model = model.to_owned();
                }
                self.prompt_tokens = prompt_tokens(&message["usage"]);
                self.completion_tokens = message["usage"]["output_tokens"].as_u64().unwrap_or(0);
                out.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
            }
            "content_block_start" => {
                let index = event["index"].as_u64().unwrap_or_default();
                let block = &event["content_block"];
                let kind = match block["type"].as_str() {
                    Some("text") => {
                        if let Some(text) = block["text"].as_str().filter(|t| !t.is_empty()) {
                            out.push(self.chunk(json!({"content": text}), None));
                        }
                        Block::Text
                    }
                    Some("tool_use")
                        if self
                            .json_tool
                            .as_deref()
                            .is_some_and(|t| block["name"] == t) =>
                    {
                        Block::Answer
                    }
                    Some("tool_use") => {
                        let position = self.tool_calls;
                        self.tool_calls += 1;
                        out.push(self.chunk(
                            json!({"tool_calls": [{
                                "index": position,
                                "id": block["id"],
                                "type": "function",
                                "function": {"name": block["name"], "arguments": ""},
                            }]}),
                            None,
                        ));
                        Block::Tool(position)
                    }
                    _ => Block::Ignored,
                };
                self.blocks.insert(index, kind);
            }
            "content_block_delta" => {
                let index = event["index"].as_u64().unwrap_or_default();
                let delta = &event["delta"];
                match (self.blocks.get(&index), delta["type"].as_str()) {
                    (Some(Block::Text), Some("text_delta")) => {
                        out.push(self.chunk(json!({"content": delta["text"]}), None));
                    }
                    (Some(Block::Tool(position)), Some("input_json_delta")) => {
                        out.push(self.chunk(
                            json!({"tool_calls": [{"index": position, "function": {"arguments": delta["partial_json"]}}]}),
                            None,
                        ));
                    }
                    (Some(Block::Answer), Some("input_json_delta")) => {
                        out.push(self.chunk(json!({"content": delta["partial_json"]}), None));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(tokens) = event["usage"]["output_tokens"].as_u64() {
                    self.completion_tokens = tokens;
                }
                if let Some(tokens) = event["usage"]["input_tokens"].as_u64() {
                    self.prompt_tokens = self.prompt_tokens.max(tokens);
                }
                if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                    let finish = finish_reason(Some(reason), self.tool_calls > 0);
                    out.push(self.chunk(json!({}), Some(finish)));
                }
            }
            "message_stop" => {
                let (prompt, completion) = (self.prompt_tokens, self.completion_tokens);
                out.push(json!({
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
                }));
                return Ok((out, true));
            }
            "error" => return Err(event_error(event)),
            // `ping` and events this adapter does not know.
            _ => {}
        }
        Ok((out, false))
    }
}

/// The chunks of an event stream, ending after `message_stop`; a stream
/// that ends before it is a transient failure.
fn chunks(
    events: impl Stream<Item = Result<sse::Event, ProviderError>> + Send + 'static,
    state: StreamState,
) -> impl Stream<Item = Result<Value, ProviderError>> + Send {
    let events = Box::pin(events);
    futures_util::stream::unfold(
        (events, state, VecDeque::new(), false),
        |(mut events, mut state, mut ready, mut done)| async move {
            loop {
                if let Some(item) = ready.pop_front() {
                    return Some((item, (events, state, ready, done)));
                }
                if done {
                    return None;
                }
                let item = match events.next().await {
                    None => Err(ProviderError::Transient(
                        "the upstream stream ended before the message did".into(),
                    )),
                    Some(Err(err)) => Err(err),
                    Some(Ok(event)) => match serde_json::from_str::<Value>(&event.data) {
                        Ok(data) => state.on_event(&data),
                        Err(_) if event.data.trim().is_empty() => Ok((Vec::new(), false)),
                        Err(_) => {
                            tracing::debug!("skipping an unreadable stream event");
                            Ok((Vec::new(), false))
                        }
                    },
                };
                match item {
                    Ok((chunks, finished)) => {
                        ready.extend(chunks.into_iter().map(Ok));
                        done = finished;
                    }
                    Err(err) => {
                        ready.push_back(Err(err));
                        done = true;
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests;
