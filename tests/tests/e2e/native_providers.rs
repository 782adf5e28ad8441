//! Native vendor adapters through the whole API: catalogue models on the
//! `anthropic` and `gemini` adapters, served by fakes that speak each
//! vendor's documented wire format and refuse (with the vendor's error
//! body) a request that breaks it: Anthropic's Messages API (`x-api-key`,
//! `anthropic-version`, a `max_tokens`, alternating turns, every
//! `tool_result` answering a `tool_use`) and Gemini's `generateContent` /
//! `streamGenerateContent?alt=sse` (`x-goog-api-key`, `user`/`model` turns,
//! every `functionResponse` answering a `functionCall`).
//!
//! The fakes answer like a model would: asked with a weather tool, they
//! call it for Paris; once the conversation holds its result, they answer
//! a sentence quoting it; asked for JSON, they give `{"city": "Paris",
//! "celsius": 18}`.

use std::collections::HashSet;

use serde_json::{Value, json};
use unigen_core::config::{ModelEntry, UpstreamSettings};
use unigen_tests::{TestApp, TestOptions, json_of};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::clients::{client_command, root, run_to_success};

const CHAT: &str = "/api/v1/chat/completions";
pub(crate) const ANTHROPIC_KEY: &str = "sk-ant-upstream-secret";
const GEMINI_KEY: &str = "gemini-upstream-secret";
const CLAUDE: &str = "anthropic/claude";
const GEMINI: &str = "google/gemini";
const GEMINI_EMBED: &str = "google/gemini-embed";
const JSON_ANSWER: &str = r#"{"city":"Paris","celsius":18}"#;

fn weather_tool() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
}

// ---- Anthropic ----------------------------------------------------------

/// What the fake Messages API finds wrong with a request, as Anthropic's
/// docs define it.
fn anthropic_problem(request: &Request, body: &Value) -> Option<String> {
    let header = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok());
    if header("x-api-key") != Some(ANTHROPIC_KEY) {
        return Some("invalid x-api-key".into());
    }
    if header("anthropic-version").is_none() {
        return Some("anthropic-version: header is required".into());
    }
    if body["max_tokens"].as_u64().is_none_or(|n| n == 0) {
        return Some("max_tokens: Field required".into());
    }
    let Some(messages) = body["messages"].as_array().filter(|m| !m.is_empty()) else {
        return Some("messages: Field required".into());
    };
    let mut tool_uses = HashSet::new();
    for (i, message) in messages.iter().enumerate() {
        let expected = if i % 2 == 0 { "user" } else { "assistant" };
        if message["role"] != expected {
            return Some(format!(
                "messages.{i}: roles must alternate, starting with user"
            ));
        }
        for block in message["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("text") if block["text"].as_str().is_some_and(|t| !t.is_empty()) => {}
                Some("tool_use") => {
                    tool_uses.insert(block["id"].as_str().unwrap_or_default().to_owned());
                    if !block["input"].is_object() {
                        return Some("tool_use.input must be an object".into());
                    }
                }
                Some("tool_result")
                    if tool_uses.contains(block["tool_use_id"].as_str().unwrap_or_default()) => {}
                Some("image") => {}
                other => return Some(format!("messages.{i}: unexpected content block {other:?}")),
            }
        }
    }
    for tool in body["tools"].as_array().into_iter().flatten() {
        if !tool["name"].is_string() || !tool["input_schema"].is_object() {
            return Some("tools: name and input_schema are required".into());
        }
    }
    None
}

/// The fake's answer: content blocks and the stop reason.
fn anthropic_answer(body: &Value) -> (Vec<Value>, &'static str) {
    if body["tool_choice"]["type"] == "tool" {
        let name = body["tool_choice"]["name"].clone();
        let input: Value = serde_json::from_str(JSON_ANSWER).unwrap();
        return (
            vec![json!({"type": "tool_use", "id": "toolu_json", "name": name, "input": input})],
            "tool_use",
        );
    }
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    let result = last["content"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["type"] == "tool_result")
        .map(|b| b["content"].to_string());
    match result {
        Some(result) => (
            vec![json!({"type": "text", "text": format!("The tool says {result}.")})],
            "end_turn",
        ),
        None if body["tools"].is_array() => (
            vec![
                json!({"type": "text", "text": "Let me look."}),
                json!({"type": "tool_use", "id": "toolu_paris", "name": "get_weather", "input": {"city": "Paris"}}),
            ],
            "tool_use",
        ),
        None => (vec![json!({"type": "text", "text": "Hello."})], "end_turn"),
    }
}

/// Also behind the Messages API tests (`anthropic_messages`).
pub(crate) struct FakeAnthropic;

impl Respond for FakeAnthropic {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        if let Some(problem) = anthropic_problem(request, &body) {
            return ResponseTemplate::new(400).set_body_json(
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": problem}}),
            );
        }
        let (content, stop_reason) = anthropic_answer(&body);
        let usage = json!({"input_tokens": 30, "output_tokens": 11});
        if body["stream"] != true {
            return ResponseTemplate::new(200).set_body_json(json!({
                "id": "msg_fake", "type": "message", "role": "assistant", "model": body["model"],
                "content": content, "stop_reason": stop_reason, "stop_sequence": null, "usage": usage
            }));
        }
        let mut events = vec![
            json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message", "role": "assistant",
                "model": body["model"], "content": [], "stop_reason": null, "usage": {"input_tokens": 30, "output_tokens": 1}}}),
            json!({"type": "ping"}),
        ];
        for (index, block) in content.iter().enumerate() {
            match block["type"].as_str() {
                Some("text") => {
                    events.push(json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}));
                    events.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": block["text"]}}));
                }
                _ => {
                    let input = block["input"].to_string();
                    let (head, tail) = input.split_at(input.len() / 2);
                    events.push(json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}));
                    for part in ["", head, tail] {
                        events.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": part}}));
                    }
                }
            }
            events.push(json!({"type": "content_block_stop", "index": index}));
        }
        events.push(json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 11}}));
        events.push(json!({"type": "message_stop"}));
        let sse: String = events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect();
        ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream")
    }
}

// ---- Gemini -------------------------------------------------------------

fn gemini_problem(request: &Request, body: &Value) -> Option<String> {
    let header = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok());
    if header("x-goog-api-key") != Some(GEMINI_KEY) {
        return Some("API key not valid. Please pass a valid API key.".into());
    }
    let Some(contents) = body["contents"].as_array().filter(|c| !c.is_empty()) else {
        return Some("contents is required".into());
    };
    let mut called = HashSet::new();
    for (i, content) in contents.iter().enumerate() {
        let role = content["role"].as_str().unwrap_or_default();
        if !matches!(role, "user" | "model") {
            return Some(format!("contents[{i}].role must be user or model"));
        }
        for part in content["parts"].as_array().into_iter().flatten() {
            if let Some(name) = part["functionCall"]["name"].as_str() {
                called.insert(name.to_owned());
            }
            if let Some(name) = part["functionResponse"]["name"].as_str()
                && !called.contains(name)
            {
                return Some(format!(
                    "contents[{i}]: functionResponse {name} answers no functionCall"
                ));
            }
        }
    }
    for tool in body["tools"].as_array().into_iter().flatten() {
        if !tool["functionDeclarations"].is_array() {
            return Some("tools[].functionDeclarations is required".into());
        }
    }
    None
}

/// The fake's answer parts and finish reason.
fn gemini_answer(body: &Value) -> Vec<Value> {
    if body["generationConfig"]["responseMimeType"] == "application/json" {
        return vec![json!({"text": JSON_ANSWER})];
    }
    let last = body["contents"]
        .as_array()
        .and_then(|c| c.last())
        .cloned()
        .unwrap_or_default();
    let result = last["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|p| p.get("functionResponse").map(|r| r["response"].to_string()));
    match result {
        Some(result) => vec![json!({"text": format!("The tool says {result}.")})],
        None if body["tools"].is_array() => {
            vec![json!({"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}})]
        }
        None => vec![json!({"text": "Hello."})],
    }
}

struct FakeGemini;

impl Respond for FakeGemini {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        if let Some(problem) = gemini_problem(request, &body) {
            return ResponseTemplate::new(400).set_body_json(
                json!({"error": {"code": 400, "message": problem, "status": "INVALID_ARGUMENT"}}),
            );
        }
        let usage =
            json!({"promptTokenCount": 21, "candidatesTokenCount": 9, "totalTokenCount": 30});
        let parts = gemini_answer(&body);
        let streaming = request.url.path().ends_with(":streamGenerateContent");
        if !streaming {
            return ResponseTemplate::new(200).set_body_json(json!({
                "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": usage, "modelVersion": "gemini-fake-001", "responseId": "resp-fake"
            }));
        }
        if !request
            .url
            .query_pairs()
            .any(|(k, v)| k == "alt" && v == "sse")
        {
            return ResponseTemplate::new(400).set_body_json(
                json!({"error": {"code": 400, "message": "this fake streams SSE only", "status": "INVALID_ARGUMENT"}}),
            );
        }
        let mut chunks: Vec<Value> = parts
            .iter()
            .map(|part| json!({"candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}], "modelVersion": "gemini-fake-001", "responseId": "resp-fake"}))
            .collect();
        chunks.push(json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage, "modelVersion": "gemini-fake-001", "responseId": "resp-fake"}));
        let sse: String = chunks
            .iter()
            .map(|c| format!("data: {c}\r\n\r\n"))
            .collect();
        ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream")
    }
}

struct FakeGeminiEmbeddings;

impl Respond for FakeGeminiEmbeddings {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        if request
            .headers
            .get("x-goog-api-key")
            .and_then(|v| v.to_str().ok())
            != Some(GEMINI_KEY)
        {
            return ResponseTemplate::new(403).set_body_json(
                json!({"error": {"code": 403, "message": "denied", "status": "PERMISSION_DENIED"}}),
            );
        }
        // A vector per text: its length, then 1s up to the dimensions asked.
        let vector = |content: &Value, dimensions: &Value| {
            let text = content["parts"][0]["text"].as_str().unwrap_or_default();
            let size = dimensions.as_u64().unwrap_or(4) as usize;
            let mut values = vec![1.0; size];
            values[0] = text.len() as f64;
            json!({"values": values})
        };
        if request.url.path().ends_with(":batchEmbedContents") {
            let embeddings: Vec<Value> = body["requests"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| vector(&r["content"], &r["outputDimensionality"]))
                .collect();
            return ResponseTemplate::new(200).set_body_json(json!({"embeddings": embeddings}));
        }
        ResponseTemplate::new(200).set_body_json(
            json!({"embedding": vector(&body["content"], &body["outputDimensionality"])}),
        )
    }
}

// ---- The stack ----------------------------------------------------------

fn model(
    id: &str,
    category: &str,
    adapter: &str,
    upstream: &str,
    upstream_model: &str,
) -> ModelEntry {
    let capabilities = if category == "chat" {
        json!(["chat", "streaming"])
    } else {
        json!(["embeddings"])
    };
    serde_json::from_value(json!({
        "id": id, "category": category, "tier": "standard", "adapter": adapter, "owned_by": "vendor",
        "capabilities": capabilities, "credits_per_unit": 2, "completion_credits_per_unit": 6,
        "upstream": upstream, "upstream_model": upstream_model
    }))
    .unwrap()
}

struct Vendors {
    anthropic: MockServer,
    gemini: MockServer,
}

async fn vendors() -> Vendors {
    let anthropic = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(FakeAnthropic)
        .mount(&anthropic)
        .await;
    let gemini = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path_regex(
            r"^/v1beta/models/[^/:]+:(batchEmbedContents|embedContent)$",
        ))
        .respond_with(FakeGeminiEmbeddings)
        .mount(&gemini)
        .await;
    Mock::given(method("POST"))
        .and(path_regex(
            r"^/v1beta/models/[^/:]+:(generateContent|streamGenerateContent)$",
        ))
        .respond_with(FakeGemini)
        .mount(&gemini)
        .await;
    Vendors { anthropic, gemini }
}

async fn stack(vendors: &Vendors, anthropic_keys: Vec<String>) -> TestApp {
    let (anthropic, gemini) = (vendors.anthropic.uri(), vendors.gemini.uri());
    TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
        let upstream = |base_url: String, keys: Vec<String>| UpstreamSettings {
            base_url,
            api_keys: keys,
            timeout_seconds: 10,
            ..Default::default()
        };
        s.upstreams
            .insert("claude".into(), upstream(anthropic, anthropic_keys));
        s.upstreams
            .insert("google".into(), upstream(gemini, vec![GEMINI_KEY.into()]));
        s.models.push(model(
            CLAUDE,
            "chat",
            "anthropic",
            "claude",
            "claude-sonnet-4-5",
        ));
        s.models.push(model(
            GEMINI,
            "chat",
            "gemini",
            "google",
            "gemini-2.5-flash",
        ));
        s.models.push(model(
            GEMINI_EMBED,
            "embedding",
            "gemini",
            "google",
            "gemini-embedding-001",
        ));
    }))
    .await
}

async fn received(server: &MockServer) -> Vec<(Request, Value)> {
    server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            let body = serde_json::from_slice(&r.body).unwrap();
            (r, body)
        })
        .collect()
}

fn sse_chunks(body: &str) -> Vec<Value> {
    let events: Vec<&str> = body
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"), "{body}");
    events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_model_calls_tools_streams_and_is_metered_through_the_api() {
    let vendors = vendors().await;
    let app = stack(&vendors, vec![ANTHROPIC_KEY.into()]).await;
    let ask = json!({"model": CLAUDE, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}],
        "tools": [weather_tool()]});
    let (status, answer) = json_of(app.post_json(CHAT, &app.key, &ask).await).await;
    assert_eq!(status, 200, "{answer}");
    let message = &answer["choices"][0]["message"];
    assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(message["content"], "Let me look.");
    assert_eq!(
        message["tool_calls"][0]["function"],
        json!({"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"})
    );
    assert_eq!(answer["model"], CLAUDE);
    assert_eq!(
        (
            answer["usage"]["prompt_tokens"].as_u64(),
            answer["usage"]["completion_tokens"].as_u64()
        ),
        (Some(30), Some(11))
    );
    assert_eq!(
        answer["usage"]["credits_used"], 1,
        "2/1k prompt + 6/1k completion tokens, rounded up"
    );
    // What Anthropic was sent: the system prompt apart, the model's name
    // there, the required max_tokens (the adapter's 4,096, which metering
    // reserved), the tool as Anthropic declares tools.
    let (request, sent) = received(&vendors.anthropic).await.remove(0);
    assert_eq!(request.headers["anthropic-version"], "2023-06-01");
    assert_eq!(sent["model"], "claude-sonnet-4-5");
    assert_eq!(sent["max_tokens"], 4096);
    assert_eq!(
        sent["system"],
        json!([{"type": "text", "text": "Be brief."}])
    );
    assert_eq!(
        sent["tools"][0]["input_schema"]["required"],
        json!(["city"])
    );

    // The tool's result goes back; the answer quotes it.
    let call = message["tool_calls"][0].clone();
    let follow = json!({"model": CLAUDE, "tools": [weather_tool()], "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 18 C"}]});
    let (status, answer) = json_of(app.post_json(CHAT, &app.key, &follow).await).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "The tool says \"sunny, 18 C\"."
    );
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");

    // Streamed: OpenAI chunks, the call's arguments in pieces, usage when asked.
    let mut streamed = ask.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let response = app.post_json(CHAT, &app.key, &streamed).await;
    assert_eq!(response.status(), 200);
    let chunks = sse_chunks(&response.text().await.unwrap());
    let arguments: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(arguments, "{\"city\":\"Paris\"}");
    assert!(
        chunks
            .iter()
            .all(|c| c["model"] == CLAUDE && c["object"] == "chat.completion.chunk")
    );
    assert!(
        chunks
            .iter()
            .any(|c| c["choices"][0]["finish_reason"] == "tool_calls")
    );
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 11);

    // One choice per request at Anthropic: n > 1 is the client's error.
    let mut two = ask.clone();
    two["n"] = json!(2);
    let (status, error) = json_of(app.post_json(CHAT, &app.key, &two).await).await;
    assert_eq!(
        (status, error["error"]["param"].as_str()),
        (400, Some("n")),
        "{error}"
    );
    assert_eq!(
        vendors.anthropic.received_requests().await.unwrap().len(),
        3
    );

    let usage = app
        .get("/api/v1/usage?group_by=model", &app.key)
        .await
        .text()
        .await
        .unwrap();
    assert!(usage.contains(CLAUDE), "{usage}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vendor_error_is_relayed_briefly_and_a_rate_limited_key_rests_while_the_next_serves() {
    let vendors = vendors().await;
    // The first key is refused with 429 (Retry-After 60) by its own mock.
    let limited = MockServer::start().await;
    Mock::given(method("POST"))
        .and(wiremock::matchers::header("x-api-key", "sk-ant-limited"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "60").set_body_json(
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Number of requests exceeded"}}),
        ))
        .mount(&limited)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(FakeAnthropic)
        .mount(&limited)
        .await;
    let vendors = Vendors {
        anthropic: limited,
        gemini: vendors.gemini,
    };
    let app = stack(
        &vendors,
        vec!["sk-ant-limited".into(), ANTHROPIC_KEY.into()],
    )
    .await;
    let ask = json!({"model": CLAUDE, "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..3 {
        let (status, answer) = json_of(app.post_json(CHAT, &app.key, &ask).await).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["choices"][0]["message"]["content"], "Hello.");
    }
    let keys: Vec<String> = received(&vendors.anthropic)
        .await
        .iter()
        .map(|(r, _)| r.headers["x-api-key"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        keys,
        [
            "sk-ant-limited",
            ANTHROPIC_KEY,
            ANTHROPIC_KEY,
            ANTHROPIC_KEY
        ],
        "the limited key rests 60 s"
    );

    // A part Anthropic does not take is the client's error, named, and
    // nothing reaches the vendor.
    let bad = json!({"model": CLAUDE, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]});
    let (status, error) = json_of(app.post_json(CHAT, &app.key, &bad).await).await;
    assert_eq!(
        (status, error["error"]["param"].as_str()),
        (400, Some("messages")),
        "{error}"
    );
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("input_audio"),
        "{error}"
    );
    assert_eq!(
        vendors.anthropic.received_requests().await.unwrap().len(),
        4
    );

    // The vendor refuses a request: its short message, never its body or a key.
    let refused =
        json!({"model": CLAUDE, "messages": [{"role": "assistant", "content": "I start."}]});
    let response = app.post_json(CHAT, &app.key, &refused).await;
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    assert_eq!(status, 500, "{text}");
    assert!(text.contains("roles must alternate"), "{text}");
    assert!(
        !text.contains("sk-ant") && !text.contains("invalid_request_error"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_model_calls_tools_streams_and_embeds_through_the_api() {
    let vendors = vendors().await;
    let app = stack(&vendors, vec![ANTHROPIC_KEY.into()]).await;
    let ask = json!({"model": GEMINI, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [weather_tool()]});
    let (status, answer) = json_of(app.post_json(CHAT, &app.key, &ask).await).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");
    let call = answer["choices"][0]["message"]["tool_calls"][0].clone();
    assert_eq!(
        call["function"],
        json!({"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"})
    );
    assert_eq!(
        (
            answer["usage"]["prompt_tokens"].as_u64(),
            answer["usage"]["completion_tokens"].as_u64()
        ),
        (Some(21), Some(9))
    );
    let (request, sent) = received(&vendors.gemini).await.remove(0);
    assert_eq!(
        request.url.path(),
        "/v1beta/models/gemini-2.5-flash:generateContent"
    );
    assert_eq!(
        sent["tools"][0]["functionDeclarations"][0]["name"],
        "get_weather"
    );

    let follow = json!({"model": GEMINI, "tools": [weather_tool()], "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [call.clone()]},
        {"role": "tool", "tool_call_id": call["id"], "content": "{\"forecast\":\"sunny\"}"}]});
    let (status, answer) = json_of(app.post_json(CHAT, &app.key, &follow).await).await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("sunny"),
        "{answer}"
    );

    let mut streamed = ask.clone();
    streamed["stream"] = json!(true);
    let response = app.post_json(CHAT, &app.key, &streamed).await;
    assert_eq!(response.status(), 200);
    let chunks = sse_chunks(&response.text().await.unwrap());
    let arguments: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(arguments, "{\"city\":\"Paris\"}");
    assert!(
        chunks
            .iter()
            .any(|c| c["choices"][0]["finish_reason"] == "tool_calls")
    );

    // Embeddings: several inputs in one batch call, in order, with dimensions.
    let (status, vectors) = json_of(
        app.post_json(
            "/api/v1/embeddings",
            &app.key,
            &json!({"model": GEMINI_EMBED, "input": ["a", "abc"], "dimensions": 3}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{vectors}");
    assert_eq!(vectors["data"][0]["embedding"], json!([1.0, 1.0, 1.0]));
    assert_eq!(vectors["data"][1]["embedding"], json!([3.0, 1.0, 1.0]));
    // Token ids (LangChain's default) reach Gemini as the text they encode.
    let (status, vectors) = json_of(
        app.post_json(
            "/api/v1/embeddings",
            &app.key,
            &json!({"model": GEMINI_EMBED, "input": [[15339, 1917]]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{vectors}");
    let sent = received(&vendors.gemini)
        .await
        .into_iter()
        .find(|(r, _)| r.url.path().ends_with(":embedContent"))
        .unwrap();
    assert_eq!(sent.1["content"]["parts"][0]["text"], "hello world");
    assert_eq!(vectors["data"][0]["embedding"][0], 11.0);
    let batch = received(&vendors.gemini)
        .await
        .into_iter()
        .find(|(r, _)| r.url.path().ends_with(":batchEmbedContents"))
        .unwrap();
    assert_eq!(
        batch.0.url.path(),
        "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    );
    assert_eq!(batch.1["requests"][1]["outputDimensionality"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_calls_tools_on_anthropic_and_gemini_models() {
    let vendors = vendors().await;
    let app = stack(&vendors, vec![ANTHROPIC_KEY.into()]).await;
    let script = "tests/sdk/python/native_tools_check.py";
    let mut command = client_command(&app, &root().join(".venv/bin/python"), script);
    command.env("NATIVE_MODELS", format!("{CLAUDE},{GEMINI}"));
    let printed = run_to_success(command, script).await;
    // Every flow ran on both models: 15 checks each.
    assert!(printed.contains(": 30 checks ok, 0 failed"), "{printed}");
}
