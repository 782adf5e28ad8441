//! OpenAI's Responses API (`/api/v1/responses`), bridged through chat
//! completions: on the built-in `local/echo` model offline, through an
//! OpenAI-compatible upstream (wiremock, recording what is forwarded), and
//! with the official OpenAI Python SDK unchanged
//! (tests/sdk/python/responses_check.py).

use std::path::Path;

use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, fake_chat_model, fake_upstream, json_of};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::clients::{client_command, root, run_to_success};

/// `(event, data)` of each server-sent event.
fn sse_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|event| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in event.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap_or_else(|e| panic!("{d}: {e}"));
                }
            }
            (name, data)
        })
        .collect()
}

async fn scalar(app: &TestApp, sql: &str) -> i64 {
    app.db.scalar_i64(sql).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_answers_in_the_responses_shape_is_metered_as_chat_and_stored() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let body = json!({"model": "local/echo", "input": "Hello, unigen!", "instructions": "Be brief.",
                      "metadata": {"k": "v"}, "temperature": 0.3});
    let (status, response) =
        json_of(app.post_json("/api/v1/responses", &app.key, &body).await).await;
    assert_eq!(status, 200, "{response}");
    let id = response["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("resp_"), "{id}");
    assert_eq!(response["object"], "response");
    assert_eq!(response["status"], "completed");
    assert_eq!(response["model"], "local/echo");
    assert_eq!(response["instructions"], "Be brief.");
    assert_eq!(response["metadata"], json!({"k": "v"}));
    assert_eq!(response["temperature"], 0.3);
    assert_eq!(response["store"], true);
    let message = &response["output"][0];
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["status"], "completed");
    assert_eq!(message["content"][0]["type"], "output_text");
    assert_eq!(message["content"][0]["text"], "Hello, unigen!");
    let usage = &response["usage"];
    assert_eq!(usage["output_tokens"], 5, "cl100k: Hello , un igen !");
    let input_tokens = usage["input_tokens"].as_i64().unwrap();
    assert_eq!(usage["total_tokens"].as_i64().unwrap(), input_tokens + 5);
    assert!(usage["credits_used"].is_i64(), "{usage}");
    // Metered as chat is: one usage record with the token counts.
    let recorded = scalar(
        &app,
        &format!(
            "SELECT count(*) FROM usage_records WHERE endpoint = '/v1/responses' AND status = 'success' \
             AND model = 'local/echo' AND prompt_tokens = {input_tokens} AND completion_tokens = 5"
        ),
    )
    .await;
    assert_eq!(recorded, 1);

    let (status, stored) =
        json_of(app.get(&format!("/api/v1/responses/{id}"), &app.key).await).await;
    assert_eq!(status, 200);
    assert_eq!(stored, response);
    let (status, items) = json_of(
        app.get(&format!("/api/v1/responses/{id}/input_items"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{items}");
    assert_eq!(items["object"], "list");
    assert_eq!(items["data"][0]["content"][0]["text"], "Hello, unigen!");
    assert_eq!(items["data"][0]["role"], "user");
    assert_eq!(items["has_more"], false);
    let (status, _) = json_of(
        app.post_json(
            &format!("/api/v1/responses/{id}/cancel"),
            &app.key,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "only background responses can be cancelled");

    let (status, deleted) = json_of(
        app.delete(&format!("/api/v1/responses/{id}"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        deleted,
        json!({"id": id, "object": "response.deleted", "deleted": true})
    );
    let (status, _) = json_of(app.get(&format!("/api/v1/responses/{id}"), &app.key).await).await;
    assert_eq!(status, 404);
    let (status, _) = json_of(
        app.delete(&format!("/api/v1/responses/{id}"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_responses_send_the_typed_events_in_order_and_are_stored() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let body = json!({"input": "Stream me, token by token.", "stream": true});
    let answer = app.post_json("/api/v1/responses", &app.key, &body).await;
    assert_eq!(answer.status(), 200);
    assert!(
        answer.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = sse_events(&answer.text().await.unwrap());
    for (n, (name, data)) in events.iter().enumerate() {
        assert_eq!(name, data["type"].as_str().unwrap(), "event names its type");
        assert_eq!(data["sequence_number"], n as u64);
    }
    let mut kinds: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    kinds.dedup();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Stream me, token by token.");
    let done = &events.last().unwrap().1["response"];
    assert_eq!(done["status"], "completed");
    assert!(done["usage"]["output_tokens"].as_u64().unwrap() > 1);
    let id = done["id"].as_str().unwrap();
    let (_, stored) = json_of(app.get(&format!("/api/v1/responses/{id}"), &app.key).await).await;
    assert_eq!(&stored, done);
    let recorded = scalar(
        &app,
        "SELECT count(*) FROM usage_records WHERE endpoint = '/v1/responses'",
    )
    .await;
    assert_eq!(recorded, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_tool_round_trip_continues_the_stored_conversation() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let tools = json!([{"type": "function", "name": "get_weather", "strict": true, "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}]);
    let (status, first) = json_of(
        app.post_json(
            "/api/v1/responses",
            &app.key,
            &json!({"input": "Paris", "tools": tools}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let call = &first["output"][0];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["call_id"], "call_0");
    assert_eq!(call["arguments"], "{\"city\":\"Paris\"}");
    assert_eq!(first["output"].as_array().unwrap().len(), 1);
    let next = json!({"previous_response_id": first["id"], "tools": tools,
                      "input": [{"type": "function_call_output", "call_id": "call_0", "output": "18 C"}]});
    let (status, second) = json_of(app.post_json("/api/v1/responses", &app.key, &next).await).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(
        second["output"][0]["content"][0]["text"],
        "Paris\n[get_weather] 18 C"
    );
    assert_eq!(second["previous_response_id"], first["id"]);
    // A third turn continues the whole chain.
    let third = json!({"previous_response_id": second["id"], "input": "Thanks"});
    let (_, third) = json_of(app.post_json("/api/v1/responses", &app.key, &third).await).await;
    assert_eq!(third["output"][0]["content"][0]["text"], "Thanks");

    // Streamed, the call's arguments arrive as deltas.
    let body = json!({"input": "Lyon", "tools": tools, "stream": true});
    let events = sse_events(
        &app.post_json("/api/v1/responses", &app.key, &body)
            .await
            .text()
            .await
            .unwrap(),
    );
    let arguments: String = events
        .iter()
        .filter(|(n, _)| n == "response.function_call_arguments.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(arguments, "{\"city\":\"Lyon\"}");
    let done = events
        .iter()
        .find(|(n, _)| n == "response.function_call_arguments.done")
        .unwrap();
    assert_eq!(done.1["arguments"], "{\"city\":\"Lyon\"}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_organizations_response_is_not_found_and_unsupported_fields_are_named() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let (_, mine) = json_of(
        app.post_json("/api/v1/responses", &app.key, &json!({"input": "secret"}))
            .await,
    )
    .await;
    let id = mine["id"].as_str().unwrap();
    let org = app.create_org("other", "free").await;
    let other = app.create_key(org, &["all"], None).await;
    for path in [
        format!("/api/v1/responses/{id}"),
        format!("/api/v1/responses/{id}/input_items"),
    ] {
        let (status, _) = json_of(app.get(&path, &other).await).await;
        assert_eq!(status, 404, "{path}");
    }
    let (status, _) = json_of(app.delete(&format!("/api/v1/responses/{id}"), &other).await).await;
    assert_eq!(status, 404);
    let continued = json!({"input": "x", "previous_response_id": id});
    let (status, _) = json_of(app.post_json("/api/v1/responses", &other, &continued).await).await;
    assert_eq!(status, 404);
    let (status, _) = json_of(app.get(&format!("/api/v1/responses/{id}"), &app.key).await).await;
    assert_eq!(status, 200, "still the owner's");

    for (body, param) in [
        (
            json!({"input": "x", "tools": [{"type": "file_search", "vector_store_ids": ["vs"]}]}),
            "tools[0].type",
        ),
        (
            json!({"input": "x", "tools": [{"type": "computer_use_preview"}]}),
            "tools[0].type",
        ),
        (
            json!({"input": "x", "background": true, "stream": true}),
            "stream",
        ),
        (
            json!({"input": "x", "background": true, "store": false}),
            "store",
        ),
        (
            json!({"input": "x", "conversation": "conv_1"}),
            "conversation",
        ),
        (
            json!({"input": "x", "frequency_penalty": 1}),
            "frequency_penalty",
        ),
        (
            json!({"input": "x", "max_output_tokens": 100000}),
            "max_output_tokens",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
            "input[0].content[0].type",
        ),
        (
            json!({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}}),
            "text.format.name",
        ),
        (json!({}), "input"),
    ] {
        let (status, error) =
            json_of(app.post_json("/api/v1/responses", &app.key, &body).await).await;
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["param"], param, "{error}");
    }
    let (status, error) = json_of(
        app.post_json(
            "/api/v1/responses",
            &app.key,
            &json!({"input": "x", "tools": [{"type": "file_search"}]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`file_search`"),
        "{error}"
    );
    let (_, unstored) = json_of(
        app.post_json(
            "/api/v1/responses",
            &app.key,
            &json!({"input": "x", "store": false}),
        )
        .await,
    )
    .await;
    assert_eq!(unstored["store"], false);
    let (status, _) = json_of(
        app.get(
            &format!("/api/v1/responses/{}", unstored["id"].as_str().unwrap()),
            &app.key,
        )
        .await,
    )
    .await;
    assert_eq!(status, 404, "store=false is not stored");
    // Scope chat.
    let images_only = app.create_key(org, &["image"], None).await;
    let (status, _) = json_of(
        app.post_json("/api/v1/responses", &images_only, &json!({"input": "x"}))
            .await,
    )
    .await;
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_compatible_upstream_gets_the_bridged_chat_request() {
    let upstream = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-up", "object": "chat.completion", "created": 1, "model": "gpt-upstream",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "call_up", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"x\"}"}}]}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        })))
        .mount(&upstream)
        .await;
    let url = upstream.uri();
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
        s.upstreams.insert("fake".into(), fake_upstream(&url));
        s.models.push(fake_chat_model("fake/gpt", "fake", vec![]));
    }))
    .await;
    let body = json!({"model": "fake/gpt", "instructions": "Use tools.", "max_output_tokens": 50,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "find x"}]}],
        "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}],
        "tool_choice": "required", "parallel_tool_calls": false,
        "text": {"format": {"type": "text"}}});
    let (status, response) =
        json_of(app.post_json("/api/v1/responses", &app.key, &body).await).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(
        response["output"],
        json!([{"id": response["output"][0]["id"], "type": "function_call", "status": "completed",
                "call_id": "call_up", "name": "lookup", "arguments": "{\"q\":\"x\"}"}])
    );
    assert_eq!(
        (
            response["usage"]["input_tokens"].as_u64(),
            response["usage"]["output_tokens"].as_u64()
        ),
        (Some(11), Some(7)),
        "the upstream's usage"
    );
    let forwarded: Value = upstream.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert_eq!(
        forwarded,
        json!({
            "model": "gpt-upstream",
            "messages": [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "find x"}],
            "max_completion_tokens": 50,
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}],
            "tool_choice": "required", "parallel_tool_calls": false,
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_stream_is_relayed_as_responses_events() {
    let upstream = MockServer::start().await;
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-upstream",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let chunks = [
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": "Hi"}), Value::Null),
        chunk(json!({"content": " there"}), Value::Null),
        chunk(json!({}), json!("length")),
        json!({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}}),
    ];
    let mut sse: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    sse.push_str("data: [DONE]\n\n");
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "text/event-stream")
                .set_body_string(sse),
        )
        .mount(&upstream)
        .await;
    let url = upstream.uri();
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
        s.upstreams.insert("fake".into(), fake_upstream(&url));
        s.models.push(fake_chat_model("fake/gpt", "fake", vec![]));
    }))
    .await;
    let body = json!({"model": "fake/gpt", "input": "hi", "stream": true, "max_output_tokens": 2});
    let events = sse_events(
        &app.post_json("/api/v1/responses", &app.key, &body)
            .await
            .text()
            .await
            .unwrap(),
    );
    let last = &events.last().unwrap().1;
    assert_eq!(last["type"], "response.incomplete", "{last}");
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(
        last["response"]["output"][0]["content"][0]["text"],
        "Hi there"
    );
    assert_eq!(last["response"]["usage"]["input_tokens"], 4);
    assert_eq!(last["response"]["usage"]["output_tokens"], 2);
    let forwarded: Value = upstream.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert_eq!(forwarded["stream"], true);
    assert_eq!(forwarded["stream_options"], json!({"include_usage": true}));
    let recorded = scalar(
        &app,
        "SELECT count(*) FROM usage_records WHERE endpoint = '/v1/responses' AND prompt_tokens = 4 AND completion_tokens = 2",
    )
    .await;
    assert_eq!(recorded, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_speaks_the_responses_api() {
    // With a worker: `background` responses run as jobs.
    let app = TestApp::spawn().await;
    let command = client_command(
        &app,
        &root().join(".venv/bin/python"),
        "tests/sdk/python/responses_check.py",
    );
    let printed = run_to_success(command, "tests/sdk/python/responses_check.py").await;
    eprintln!("{printed}");
    for flow in [
        "create_plain",
        "stream",
        "tools",
        "parse",
        "chaining",
        "stored",
        "background",
        "errors",
    ] {
        assert!(
            printed.contains(&format!("responses / {flow}\n")),
            "flow {flow} ran:\n{printed}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_agents_sdk_runs_an_agent_with_a_function_tool() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let command = client_command(
        &app,
        &root().join(".venv/bin/python"),
        "tests/sdk/python/agents_check.py",
    );
    let printed = run_to_success(command, "tests/sdk/python/agents_check.py").await;
    eprintln!("{printed}");
    for flow in ["run", "run_streamed"] {
        assert!(
            printed.contains(&format!(" / {flow}\n")),
            "flow {flow} ran:\n{printed}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_js_sdk_speaks_the_responses_api() {
    let modules = root().join("tests/sdk/js/node_modules/openai");
    assert!(
        modules.is_dir(),
        "{} is missing: scripts/test (ensure_sdk_js) runs npm ci in tests/sdk/js",
        modules.display()
    );
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let command = client_command(&app, Path::new("node"), "tests/sdk/js/responses_check.mjs");
    let printed = run_to_success(command, "tests/sdk/js/responses_check.mjs").await;
    for flow in ["create", "stream", "tools"] {
        assert!(
            printed.contains(&format!("responses / {flow}\n")),
            "flow {flow} ran:\n{printed}"
        );
    }
}

const NATIVE_MODEL: &str = "native/gpt";

/// The stack with `native/gpt` on the fake upstream (tests/sdk/fake_upstream.py)
/// declared `responses = true`, and `bridged/gpt` on the same upstream
/// without it.
async fn native_stack() -> (TestApp, crate::clients::FakeUpstream) {
    let upstream = crate::clients::FakeUpstream::start().await;
    let url = upstream.url.clone();
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
        let mut native = fake_upstream(&url);
        native.responses = true;
        s.upstreams.insert("native".into(), native);
        s.models
            .push(fake_chat_model(NATIVE_MODEL, "native", vec![]));
    }))
    .await;
    (app, upstream)
}

/// What the fake upstream recorded at `path`.
async fn recorded(upstream: &crate::clients::FakeUpstream, path: &str) -> Vec<Value> {
    let all: Value = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("{}/__recorded", upstream.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    all["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["path"] == path)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_responses_upstream_gets_the_sdks_requests_unchanged() {
    let (app, upstream) = native_stack().await;
    let mut command = client_command(
        &app,
        &root().join(".venv/bin/python"),
        "tests/sdk/python/responses_native_check.py",
    );
    command
        .env("FAKE_UPSTREAM_URL", &upstream.url)
        .env("NATIVE_MODEL", NATIVE_MODEL)
        .env("UPSTREAM_CHAT_MODEL", "gpt-upstream")
        .env("UPSTREAM_API_KEY", "sk-upstream-secret");
    let printed = run_to_success(command, "tests/sdk/python/responses_native_check.py").await;
    for flow in [
        "create",
        "stream",
        "tools",
        "delete",
        "not_stored",
        "errors",
    ] {
        assert!(
            printed.contains(&format!("native responses / {flow}\n")),
            "flow {flow} ran:\n{printed}"
        );
    }
    // Metered with the upstream's usage, streamed or not.
    for kind in ["create", "stream"] {
        let line = printed
            .lines()
            .find(|l| l.starts_with(&format!("USAGE {kind} ")))
            .unwrap_or_else(|| panic!("no usage printed for {kind}:\n{printed}"));
        let numbers: Vec<i64> = line
            .split(' ')
            .skip(2)
            .map(|n| n.parse().unwrap())
            .collect();
        let recorded = scalar(
            &app,
            &format!(
                "SELECT count(*) FROM usage_records WHERE endpoint = '/v1/responses' AND status = 'success' \
                 AND model = '{NATIVE_MODEL}' AND prompt_tokens = {} AND completion_tokens = {} AND credits > 0",
                numbers[0], numbers[1]
            ),
        )
        .await;
        assert!(recorded >= 1, "{kind}: no usage record with {line}");
    }
    let forwarded = recorded(&upstream, "/v1/responses").await.len() as i64;
    let records = scalar(
        &app,
        &format!("SELECT count(*) FROM usage_records WHERE endpoint = '/v1/responses' AND model = '{NATIVE_MODEL}'"),
    )
    .await;
    assert_eq!(records, forwarded, "one usage record per forwarded request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_continuation_stays_in_its_organization_and_a_bridged_one_is_inlined() {
    let (app, upstream) = native_stack().await;
    let (status, first) = json_of(
        app.post_json(
            "/api/v1/responses",
            &app.key,
            &json!({"model": NATIVE_MODEL, "input": "first turn"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let first_id = first["id"].as_str().unwrap();
    assert!(
        first_id.starts_with("resp_upstream"),
        "the upstream's id: {first_id}"
    );
    assert!(first["usage"]["credits_used"].is_i64(), "{first}");

    // Another organization naming it: a 404, and nothing reaches the upstream.
    let other_org = app.create_org("other", "free").await;
    let other_key = app.create_key(other_org, &["chat"], None).await;
    let before = recorded(&upstream, "/v1/responses").await.len();
    for key in [&other_key] {
        let (status, error) = json_of(
            app.post_json(
                "/api/v1/responses",
                key,
                &json!({"model": NATIVE_MODEL, "input": "steal", "previous_response_id": first_id}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 404, "{error}");
        let (status, _) =
            json_of(app.get(&format!("/api/v1/responses/{first_id}"), key).await).await;
        assert_eq!(status, 404);
    }
    assert_eq!(recorded(&upstream, "/v1/responses").await.len(), before);

    // A response bridged through chat (local/echo) continued on the native
    // model: the upstream does not hold it, so its conversation is sent
    // ahead of the input instead of previous_response_id.
    let (status, echo) = json_of(
        app.post_json(
            "/api/v1/responses",
            &app.key,
            &json!({"model": "local/echo", "input": "echo turn"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{echo}");
    let (status, next) = json_of(
        app.post_json(
            "/api/v1/responses",
            &app.key,
            &json!({"model": NATIVE_MODEL, "input": "native turn", "previous_response_id": echo["id"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{next}");
    let sent = &recorded(&upstream, "/v1/responses").await.last().unwrap()["body"].clone();
    assert!(sent.get("previous_response_id").is_none(), "{sent}");
    let input = sent["input"].as_array().unwrap();
    assert_eq!(input.len(), 3, "{sent}");
    assert_eq!(input[0]["content"][0]["text"], "echo turn");
    assert_eq!(input[1]["role"], "assistant");
    assert_eq!(input[1]["content"][0]["text"], "echo turn");
    assert_eq!(input[2]["content"][0]["text"], "native turn");
    assert_eq!(
        next["output"][0]["content"][0]["text"],
        "Upstream reply to: native turn"
    );
    // And the native response is continued by a bridged model from the
    // conversation stored here.
    let (status, bridged) = json_of(
        app.post_json(
            "/api/v1/responses",
            &app.key,
            &json!({"model": "local/echo", "input": "last turn", "previous_response_id": next["id"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{bridged}");
    assert_eq!(bridged["output"][0]["content"][0]["text"], "last turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_stored_response_is_not_found_and_deleted_by_the_scheduler() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let mut ids = Vec::new();
    for text in ["old", "new"] {
        let (status, response) = json_of(
            app.post_json(
                "/api/v1/responses",
                &app.key,
                &json!({"model": "local/echo", "input": text}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200, "{response}");
        ids.push(response["id"].as_str().unwrap().to_owned());
    }
    // Stored for the configured retention (30 days by default).
    let days = scalar(
        &app,
        &format!(
            "SELECT round(extract(epoch FROM expires_at - created_at) / 86400)::bigint FROM responses WHERE id = '{}'",
            ids[1]
        ),
    )
    .await;
    assert_eq!(days, 30);
    app.sql(&format!(
        "UPDATE responses SET expires_at = now() - interval '1 second' WHERE id = '{}'",
        ids[0]
    ))
    .await;
    for path in [
        format!("/api/v1/responses/{}", ids[0]),
        format!("/api/v1/responses/{}/input_items", ids[0]),
    ] {
        let (status, _) = json_of(app.get(&path, &app.key).await).await;
        assert_eq!(status, 404, "{path}");
    }
    let (status, _) = json_of(
        app.post_json(
            "/api/v1/responses",
            &app.key,
            &json!({"model": "local/echo", "input": "more", "previous_response_id": ids[0]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404, "an expired response is not continued");
    // The scheduler deletes it; the other stays.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let left = scalar(
            &app,
            &format!("SELECT count(*) FROM responses WHERE id = '{}'", ids[0]),
        )
        .await;
        if left == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the scheduler did not delete the expired response"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (status, _) = json_of(
        app.get(&format!("/api/v1/responses/{}", ids[1]), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200);
}

/// Long-polls a background response until it leaves `queued` and
/// `in_progress` (its job's long poll, as a client of `GET /jobs` would).
async fn answered(app: &TestApp, id: &str) -> Value {
    let job = id.strip_prefix("resp_").unwrap();
    app.wait_for_job(job, std::time::Duration::from_secs(60))
        .await;
    let (status, response) =
        json_of(app.get(&format!("/api/v1/responses/{id}"), &app.key).await).await;
    assert_eq!(status, 200, "{response}");
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_response_runs_as_a_job_and_is_metered_as_the_same_request_in_place() {
    let app = TestApp::spawn().await;
    let body = json!({"model": "local/echo", "input": "Later, please.", "background": true,
                      "metadata": {"k": "v"}, "max_output_tokens": 50});
    let (status, queued) = json_of(app.post_json("/api/v1/responses", &app.key, &body).await).await;
    assert_eq!(status, 200, "{queued}");
    let id = queued["id"].as_str().unwrap().to_owned();
    assert!(
        matches!(queued["status"].as_str(), Some("queued")),
        "{queued}"
    );
    assert_eq!(queued["background"], true);
    assert_eq!(queued["metadata"], json!({"k": "v"}));
    assert_eq!(queued["output"], json!([]));
    // A job of the `responses` tool: its id is the response's.
    let job_id = id.strip_prefix("resp_").unwrap();
    let (status, jobs) = json_of(app.get("/api/v1/jobs?tool=responses", &app.key).await).await;
    assert_eq!(status, 200, "{jobs}");
    let listed: Vec<String> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| job["id"].as_str().unwrap().replace('-', ""))
        .collect();
    assert_eq!(listed, vec![job_id.to_owned()], "{jobs}");

    let response = answered(&app, &id).await;
    assert_eq!(response["status"], "completed", "{response}");
    assert_eq!(response["id"], id);
    assert_eq!(response["background"], true);
    assert_eq!(
        response["output"][0]["content"][0]["text"],
        "Later, please."
    );
    let usage = &response["usage"];
    let (input, output) = (
        usage["input_tokens"].as_i64().unwrap(),
        usage["output_tokens"].as_i64().unwrap(),
    );
    assert!(input > 0 && output > 0, "{usage}");
    let credits = usage["credits_used"].as_i64().unwrap();
    assert!(credits > 0, "the job's charge is reported: {usage}");
    let (status, items) = json_of(
        app.get(&format!("/api/v1/responses/{id}/input_items"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{items}");
    assert_eq!(items["data"][0]["content"][0]["text"], "Later, please.");

    // The same request answered in place costs the same, and both are
    // recorded under the Responses endpoint with their tokens.
    let mut in_place = body.clone();
    in_place["background"] = json!(false);
    let (status, sync) = json_of(
        app.post_json("/api/v1/responses", &app.key, &in_place)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{sync}");
    assert_eq!(sync["usage"]["credits_used"].as_i64(), Some(credits));
    assert_eq!(
        scalar(
            &app,
            &format!(
                "SELECT count(*) FROM usage_records WHERE endpoint = '/v1/responses' AND status = 'success' \
                 AND prompt_tokens = {input} AND completion_tokens = {output} AND credits = {credits}"
            ),
        )
        .await,
        2
    );
    assert_eq!(
        scalar(
            &app,
            &format!("SELECT count(*) FROM reservations WHERE id = '{job_id}'")
        )
        .await,
        0,
        "the job's hold is settled"
    );

    // It continues like any stored response.
    let (status, next) = json_of(
        app.post_json(
            "/api/v1/responses",
            &app.key,
            &json!({"model": "local/echo", "input": "And then?", "previous_response_id": id, "background": true}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{next}");
    let next = answered(&app, next["id"].as_str().unwrap()).await;
    assert_eq!(next["status"], "completed", "{next}");
    assert_eq!(next["previous_response_id"], id);

    // Another organization sees none of it.
    let other = app.create_org("Other", "business").await;
    let other_key = app.create_key(other, &["all"], None).await;
    for path in [
        format!("/api/v1/responses/{id}"),
        format!("/api/v1/responses/{id}/input_items"),
        format!("/api/v1/jobs/{job_id}"),
    ] {
        let (status, _) = json_of(app.get(&path, &other_key).await).await;
        assert_eq!(status, 404, "{path}");
    }
    let (status, _) = json_of(
        app.post_json(
            &format!("/api/v1/responses/{id}/cancel"),
            &other_key,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404);
    // A finished one cannot be cancelled.
    let (status, error) = json_of(
        app.post_json(
            &format!("/api/v1/responses/{id}/cancel"),
            &app.key,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already completed"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_background_response_never_runs_and_costs_nothing() {
    // No worker at first: the jobs wait in their queue.
    let mut app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let create = |input: &str| json!({"model": "local/echo", "input": input, "background": true});
    let (_, cancelled) = json_of(
        app.post_json("/api/v1/responses", &app.key, &create("never"))
            .await,
    )
    .await;
    let (_, kept) = json_of(
        app.post_json("/api/v1/responses", &app.key, &create("kept"))
            .await,
    )
    .await;
    let id = cancelled["id"].as_str().unwrap().to_owned();
    let kept_id = kept["id"].as_str().unwrap().to_owned();
    let holds = format!(
        "SELECT count(*) FROM reservations WHERE id IN ('{}', '{}')",
        id.strip_prefix("resp_").unwrap(),
        kept_id.strip_prefix("resp_").unwrap()
    );
    assert_eq!(
        scalar(&app, &holds).await,
        2,
        "each holds its chat estimate"
    );
    let (status, polled) =
        json_of(app.get(&format!("/api/v1/responses/{id}"), &app.key).await).await;
    assert_eq!((status, polled["status"].as_str()), (200, Some("queued")));
    let (status, items) = json_of(
        app.get(&format!("/api/v1/responses/{id}/input_items"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{items}");
    assert_eq!(items["data"][0]["content"][0]["text"], "never");
    let (status, error) = json_of(
        app.delete(&format!("/api/v1/responses/{id}"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 400, "nothing to delete yet: {error}");

    let (status, response) = json_of(
        app.post_json(
            &format!("/api/v1/responses/{id}/cancel"),
            &app.key,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["status"], "cancelled");
    assert_eq!(response["output"], json!([]));
    // Cancelling again answers the same.
    let (status, again) = json_of(
        app.post_json(
            &format!("/api/v1/responses/{id}/cancel"),
            &app.key,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!((status, again["status"].as_str()), (200, Some("cancelled")));
    let job = app.job(id.strip_prefix("resp_").unwrap()).await;
    assert_eq!(job["status"], "cancelled", "{job}");
    let (status, error) = json_of(
        app.delete(&format!("/api/v1/responses/{id}"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 400, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("it is cancelled"),
        "{error}"
    );
    assert_eq!(
        scalar(&app, &holds).await,
        1,
        "the cancelled response's hold went back"
    );

    // A worker now runs the other one; the cancelled one stays so.
    app.spawn_worker(|_| {});
    let kept = answered(&app, &kept_id).await;
    assert_eq!(kept["status"], "completed", "{kept}");
    let (_, polled) = json_of(app.get(&format!("/api/v1/responses/{id}"), &app.key).await).await;
    assert_eq!(polled["status"], "cancelled");
    assert_eq!(
        scalar(
            &app,
            "SELECT count(*) FROM usage_records WHERE endpoint = '/v1/responses' AND status = 'success'"
        )
        .await,
        1,
        "only the response that ran is charged"
    );
    assert_eq!(scalar(&app, &holds).await, 0);
}
