//! Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`,
//! and the same under `/api/v1`): answers, streams and errors in Anthropic's
//! shapes, offline on `local/echo` (bridged through chat) and natively on a
//! catalogue model of the `anthropic` adapter (behind `native_providers`'
//! fake, which speaks Anthropic's documented wire format and refuses what
//! breaks it), and the official Anthropic Python SDK run unchanged against
//! both.

use serde_json::{Value, json};
use unigen_core::config::{ModelEntry, UpstreamSettings};
use unigen_tests::{TestApp, TestOptions, json_of};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

use crate::clients::{client_command, root, run_to_success};
use crate::native_providers::{ANTHROPIC_KEY, FakeAnthropic};

pub(crate) const CLAUDE: &str = "anthropic/claude";
const CLAUDE_ALIAS: &str = "claude-sonnet-4-5";

pub(crate) async fn fake_anthropic() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(FakeAnthropic)
        .mount(&server)
        .await;
    server
}

/// The stack with `anthropic/claude` (alias `claude-sonnet-4-5`) on the fake.
pub(crate) async fn stack(fake: &MockServer) -> TestApp {
    let base_url = fake.uri();
    TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
        s.upstreams.insert(
            "claude".into(),
            UpstreamSettings {
                base_url,
                api_keys: vec![ANTHROPIC_KEY.into()],
                timeout_seconds: 10,
                ..Default::default()
            },
        );
        let model: ModelEntry = serde_json::from_value(json!({
            "id": CLAUDE, "category": "chat", "tier": "standard", "adapter": "anthropic", "owned_by": "anthropic",
            "capabilities": ["chat", "streaming"], "credits_per_unit": 2, "completion_credits_per_unit": 6,
            "upstream": "claude", "upstream_model": "claude-sonnet-4-5-20250929", "aliases": [CLAUDE_ALIAS]
        }))
        .unwrap();
        s.models.push(model);
    }))
    .await
}

async fn post(app: &TestApp, path: &str, key: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(app.url(path))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// `(event name, data)` of each server-sent event.
fn sse_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|frame| !frame.trim().is_empty())
        .map(|frame| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in frame.lines() {
                if let Some(rest) = line.strip_prefix("event: ") {
                    name = rest.to_owned();
                } else if let Some(rest) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(rest).unwrap();
                }
            }
            assert_eq!(data["type"], name.as_str(), "{frame}");
            (name, data)
        })
        .collect()
}

fn hello(model: &str) -> Value {
    json!({"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "Hello there"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_answer_in_anthropics_shape_at_both_roots_with_either_key_header() {
    let fake = fake_anthropic().await;
    let app = stack(&fake).await;
    let response = post(&app, "/v1/messages", &app.key, &hello("local/echo")).await;
    assert_eq!(response.status(), 200);
    let (_, answer) = json_of(response).await;
    assert!(
        answer["id"].as_str().unwrap().starts_with("msg_"),
        "{answer}"
    );
    assert_eq!(answer["type"], "message");
    assert_eq!(answer["role"], "assistant");
    assert_eq!(answer["model"], "local/echo");
    assert_eq!(
        answer["content"],
        json!([{"type": "text", "text": "Hello there"}])
    );
    assert_eq!(answer["stop_reason"], "end_turn");
    assert_eq!(answer["stop_sequence"], Value::Null);
    assert!(answer["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(answer["usage"]["output_tokens"], 2);

    let (status, answer) = json_of(
        app.post_json("/api/v1/messages", &app.key, &hello("local/echo"))
            .await,
    )
    .await;
    assert_eq!(status, 200, "Bearer under /api/v1: {answer}");
    assert_eq!(answer["content"][0]["text"], "Hello there");

    let (status, counted) = json_of(
        post(
            &app,
            "/api/v1/messages/count_tokens",
            &app.key,
            &json!({"model": "local/echo", "messages": [{"role": "user", "content": "Hello there"}]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{counted}");
    assert!(counted["input_tokens"].as_u64().unwrap() > 0, "{counted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_message_sends_anthropics_events_in_order() {
    let fake = fake_anthropic().await;
    let app = stack(&fake).await;
    let mut body = hello("local/echo");
    body["stream"] = json!(true);
    let response = post(&app, "/v1/messages", &app.key, &body).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = sse_events(&response.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    let deltas = names.len() - 6;
    let mut expected = vec!["message_start", "ping", "content_block_start"];
    expected.extend(std::iter::repeat_n("content_block_delta", deltas));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected);
    let text: String = events
        .iter()
        .filter_map(|(_, e)| e["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "Hello there");
    assert!(
        events[0].1["message"]["id"]
            .as_str()
            .unwrap()
            .starts_with("msg_")
    );
    let delta = &events[names.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 2);

    // An upstream stream, bridged: the fake's text and tool call as blocks.
    let body = json!({"model": CLAUDE_ALIAS, "max_tokens": 128, "stream": true,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    let response = post(&app, "/v1/messages", &app.key, &body).await;
    assert_eq!(response.status(), 200);
    let events = sse_events(&response.text().await.unwrap());
    let starts: Vec<&Value> = events
        .iter()
        .filter(|(name, _)| name == "content_block_start")
        .map(|(_, e)| &e["content_block"])
        .collect();
    assert_eq!(starts[0]["type"], "text");
    assert_eq!(
        (
            starts[1]["type"].as_str(),
            starts[1]["id"].as_str(),
            starts[1]["name"].as_str()
        ),
        (Some("tool_use"), Some("toolu_paris"), Some("get_weather"))
    );
    let input: String = events
        .iter()
        .filter_map(|(_, e)| e["delta"]["partial_json"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&input).unwrap(),
        json!({"city": "Paris"})
    );
    let (_, delta) = &events[events.len() - 2];
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 11, "the upstream's usage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_model_by_its_alias_is_served_and_metered() {
    let fake = fake_anthropic().await;
    let app = stack(&fake).await;
    let body = json!({"model": CLAUDE_ALIAS, "max_tokens": 300, "system": [{"type": "text", "text": "Be brief."}],
        "messages": [{"role": "user", "content": "Hello"}], "metadata": {"user_id": "u-1"},
        "temperature": 0.2, "stop_sequences": ["END"]});
    let response = post(&app, "/v1/messages", &app.key, &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["x-credits-used"],
        "1",
        "2/1k prompt + 6/1k completion tokens, rounded up"
    );
    let (_, answer) = json_of(response).await;
    assert_eq!(answer["model"], CLAUDE);
    assert_eq!(
        answer["content"],
        json!([{"type": "text", "text": "Hello."}])
    );
    assert_eq!(
        answer["usage"],
        json!({"input_tokens": 30, "output_tokens": 11})
    );
    let sent: Value = fake.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert_eq!(sent["model"], "claude-sonnet-4-5-20250929");
    assert_eq!(sent["max_tokens"], 300);
    assert_eq!(
        sent["system"],
        json!([{"type": "text", "text": "Be brief."}])
    );
    assert_eq!(sent["temperature"], 0.2);
    assert_eq!(sent["stop_sequences"], json!(["END"]));
    assert_eq!(sent["metadata"], json!({"user_id": "u-1"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_in_anthropics_shape_with_matching_statuses() {
    let fake = fake_anthropic().await;
    let app = stack(&fake).await;
    let check = |status: u16, kind: &str, response: (u16, Value)| {
        assert_eq!(response.0, status, "{}", response.1);
        assert_eq!(response.1["type"], "error", "{}", response.1);
        assert_eq!(response.1["error"]["type"], kind, "{}", response.1);
        assert!(response.1["error"]["message"].is_string());
    };
    let bad_key = format!("sk_{}", "0".repeat(64));
    check(
        401,
        "authentication_error",
        json_of(post(&app, "/v1/messages", &bad_key, &hello("local/echo")).await).await,
    );
    let no_chat = app.create_key(app.org_id, &["image"], None).await;
    check(
        403,
        "permission_error",
        json_of(post(&app, "/v1/messages", &no_chat, &hello("local/echo")).await).await,
    );
    check(
        404,
        "not_found_error",
        json_of(post(&app, "/v1/messages", &app.key, &hello("claude-unknown")).await).await,
    );
    let mut no_max = hello("local/echo");
    no_max.as_object_mut().unwrap().remove("max_tokens");
    let response = json_of(post(&app, "/v1/messages", &app.key, &no_max).await).await;
    assert!(
        response.1["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens"),
        "{}",
        response.1
    );
    check(400, "invalid_request_error", response);
    // What a bridged model cannot honour is refused, naming it.
    for (field, value) in [
        ("top_k", json!(5)),
        (
            "thinking",
            json!({"type": "enabled", "budget_tokens": 1024}),
        ),
    ] {
        let mut body = hello("local/echo");
        body["max_tokens"] = json!(2048);
        body[field] = value;
        let response = json_of(post(&app, "/v1/messages", &app.key, &body).await).await;
        assert!(
            response.1["error"]["message"]
                .as_str()
                .unwrap()
                .contains(field),
            "{}",
            response.1
        );
        check(400, "invalid_request_error", response);
    }
    let response = app
        .client
        .post(app.url("/v1/messages"))
        .header("x-api-key", &app.key)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    check(400, "invalid_request_error", json_of(response).await);

    // An upstream that is overloaded (after retries) is `overloaded_error`,
    // 529; one that refuses the request, the client's 400.
    let broken = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(529).insert_header("retry-after", "0").set_body_json(
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ))
        .mount(&broken)
        .await;
    let app = stack(&broken).await;
    let response = json_of(post(&app, "/v1/messages", &app.key, &hello(CLAUDE)).await).await;
    check(529, "overloaded_error", response);
    let refusing = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(400).set_body_json(
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "messages.0: bad"}}),
        ))
        .mount(&refusing)
        .await;
    let app = stack(&refusing).await;
    let response = json_of(post(&app, "/v1/messages", &app.key, &hello(CLAUDE)).await).await;
    assert!(
        response.1["error"]["message"]
            .as_str()
            .unwrap()
            .contains("messages.0: bad"),
        "{}",
        response.1
    );
    check(400, "invalid_request_error", response);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_upstream_gets_the_request_natively_with_its_headers() {
    let fake = fake_anthropic().await;
    let app = stack(&fake).await;
    let body = json!({"model": CLAUDE_ALIAS, "max_tokens": 40000, "top_k": 5,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
        "service_tier": "auto"});
    let response = reqwest::Client::new()
        .post(app.url("/v1/messages"))
        .header("x-api-key", &app.key)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "interleaved-thinking-2025-05-14")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-credits-used"], "1");
    let (_, answer) = json_of(response).await;
    assert_eq!(answer["model"], CLAUDE, "{answer}");
    assert_eq!(answer["id"], "msg_fake");
    let requests = fake.received_requests().await.unwrap();
    let request = &requests[0];
    assert_eq!(request.headers["x-api-key"], ANTHROPIC_KEY);
    assert_eq!(request.headers["anthropic-version"], "2023-06-01");
    assert_eq!(
        request.headers["anthropic-beta"],
        "interleaved-thinking-2025-05-14"
    );
    let mut expected = body.clone();
    expected["model"] = json!("claude-sonnet-4-5-20250929");
    assert_eq!(
        request.body_json::<Value>().unwrap(),
        expected,
        "as sent, but for the model's name"
    );

    // Streamed: the upstream's events as sent, the catalogue's model name.
    let mut body = hello(CLAUDE_ALIAS);
    body["stream"] = json!(true);
    let response = post(&app, "/v1/messages", &app.key, &body).await;
    assert_eq!(response.status(), 200);
    let events = sse_events(&response.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(events[0].1["message"]["model"], CLAUDE);
    assert_eq!(events[3].1["delta"]["text"], "Hello.");
    let sent: Value = fake.received_requests().await.unwrap()[1]
        .body_json()
        .unwrap();
    assert_eq!(sent["stream"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_python_sdk_works_unchanged() {
    let fake = fake_anthropic().await;
    let app = stack(&fake).await;
    let no_chat = app.create_key(app.org_id, &["image"], None).await;
    let mut command = client_command(
        &app,
        &root().join(".venv/bin/python"),
        "tests/sdk/python/anthropic_check.py",
    );
    command
        .env("ANTHROPIC_BASE_URL", app.url(""))
        .env("ANTHROPIC_API_KEY", &app.key)
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env("NO_CHAT_KEY", &no_chat)
        .env("CLAUDE_MODEL", CLAUDE_ALIAS)
        .env("CLAUDE_CATALOGUE_ID", CLAUDE);
    run_to_success(command, "tests/sdk/python/anthropic_check.py").await;
    // What the anthropic upstream got from the SDK's requests: Anthropic's
    // wire format with its key and version (the fake refuses anything else),
    // the upstream's model name.
    let received = fake.received_requests().await.unwrap();
    assert!(received.len() >= 6, "{}", received.len());
    let sdk_version = received[0].headers["anthropic-version"]
        .to_str()
        .unwrap()
        .to_owned();
    for request in received {
        let sent: Value = request.body_json().unwrap();
        assert_eq!(sent["model"], "claude-sonnet-4-5-20250929");
        assert_eq!(request.headers["x-api-key"], ANTHROPIC_KEY);
        // The SDK's own version, forwarded (the adapter's default is 2023-06-01).
        let version = request.headers["anthropic-version"].to_str().unwrap();
        assert_eq!(version, sdk_version, "one version throughout");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_typescript_sdk_works_unchanged() {
    let modules = root().join("tests/sdk/js/node_modules/@anthropic-ai/sdk");
    assert!(
        modules.is_dir(),
        "{} is missing: scripts/test (ensure_sdk_js) runs npm ci in tests/sdk/js",
        modules.display()
    );
    let fake = fake_anthropic().await;
    let app = stack(&fake).await;
    let no_chat = app.create_key(app.org_id, &["image"], None).await;
    let mut command = client_command(
        &app,
        std::path::Path::new("node"),
        "tests/sdk/js/anthropic_check.mjs",
    );
    command
        .env("ANTHROPIC_BASE_URL", app.url(""))
        .env("ANTHROPIC_API_KEY", &app.key)
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env("NO_CHAT_KEY", &no_chat)
        .env("CLAUDE_MODEL", CLAUDE_ALIAS)
        .env("CLAUDE_CATALOGUE_ID", CLAUDE);
    let printed = run_to_success(command, "tests/sdk/js/anthropic_check.mjs").await;
    for flow in [
        "offline_create",
        "offline_stream",
        "offline_tools",
        "offline_count_tokens",
        "claude_create",
        "claude_tools",
        "errors",
    ] {
        assert!(
            printed.contains(&format!(" / {flow}\n")),
            "flow {flow} ran:\n{printed}"
        );
    }
    // What the anthropic upstream got from the SDK's requests: Anthropic's
    // wire format with its key (the fake refuses anything else), the
    // upstream's model name, and the SDK's own anthropic-version.
    let received = fake.received_requests().await.unwrap();
    assert!(received.len() >= 5, "{}", received.len());
    for request in received {
        let sent: Value = request.body_json().unwrap();
        assert_eq!(sent["model"], "claude-sonnet-4-5-20250929");
        assert_eq!(request.headers["x-api-key"], ANTHROPIC_KEY);
        assert!(request.headers.get("anthropic-version").is_some());
    }
}
