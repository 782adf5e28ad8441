//! OpenAI drop-in, on the wire: what a client sends reaches an
//! OpenAI-compatible upstream unchanged (and nothing it did not send), the
//! upstream's answer comes back whole, the built-in test models follow the
//! same protocol offline, and the API's edges (ids with a slash, aliases,
//! 405, type errors, headers) behave as OpenAI's do.

use base64::Engine;
use serde_json::{Value, json};
use unigen_core::domain::ModelCategory;
use unigen_tests::{TestApp, TestOptions, fake_chat_model, fake_upstream, json_of};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const CHAT: &str = "/api/v1/chat/completions";

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

async fn upstream_app(server: &MockServer) -> TestApp {
    let url = server.uri();
    TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
        s.upstreams.insert("acme".into(), fake_upstream(&url));
        s.models.push(fake_chat_model("acme/gpt", "acme", vec![]));
        let mut embed = fake_chat_model("acme/embed", "acme", vec![]);
        embed.category = ModelCategory::Embedding;
        embed.capabilities = vec!["embeddings".into()];
        embed.upstream_model = Some("text-embed-upstream".into());
        s.models.push(embed);
    }))
    .await
}

async fn received(server: &MockServer, at: &str) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.url.path() == at)
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_reaches_the_upstream_as_sent_and_every_choice_comes_back() {
    let server = MockServer::start().await;
    let call = json!({"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}});
    let choices = json!([
        {"index": 0, "message": {"role": "assistant", "content": null, "refusal": null, "tool_calls": [call]},
         "logprobs": {"content": [{"token": "x", "logprob": -0.1, "bytes": [120], "top_logprobs": []}]}, "finish_reason": "tool_calls"},
        {"index": 1, "message": {"role": "assistant", "content": "Sunny.", "refusal": null}, "logprobs": null, "finish_reason": "stop"}
    ]);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-upstream", "object": "chat.completion", "created": 1, "model": "gpt-upstream",
            "system_fingerprint": "fp_test", "service_tier": "default", "choices": choices,
            "usage": {"prompt_tokens": 31, "completion_tokens": 17, "total_tokens": 48}
        })))
        .mount(&server)
        .await;
    let app = upstream_app(&server).await;
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}, "strict": true}}]);
    let sent = json!({
        "model": "acme/gpt",
        "messages": [{"role": "developer", "content": "Answer briefly."}, {"role": "user", "content": "Weather in Paris?"}],
        "tools": tools, "tool_choice": "required", "parallel_tool_calls": false, "n": 2,
        "logprobs": true, "top_logprobs": 1, "seed": 42, "logit_bias": {"50256": -100},
        "metadata": {"team": "a"}, "store": false, "reasoning_effort": "low", "service_tier": "auto",
        "max_completion_tokens": 100, "user": "u-1"
    });
    let (status, answer) = json_of(app.post_json(CHAT, &app.key, &sent).await).await;
    assert_eq!(status, 200, "{answer}");
    // The upstream got exactly what was sent, with its own model name, and
    // no default the client did not send.
    let forwarded = received(&server, "/v1/chat/completions").await.remove(0);
    let mut expected = sent.clone();
    expected["model"] = json!("gpt-upstream");
    assert_eq!(forwarded, expected);
    // The client got every choice whole, and the upstream's other fields.
    assert_eq!(answer["choices"], choices);
    assert_eq!(answer["choices"][0]["message"]["content"], Value::Null);
    assert_eq!(answer["system_fingerprint"], "fp_test");
    assert_eq!(answer["service_tier"], "default");
    assert!(answer["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_ne!(answer["id"], "chatcmpl-upstream");
    assert_eq!(answer["model"], "acme/gpt");
    assert_eq!(
        (
            answer["usage"]["prompt_tokens"].as_u64(),
            answer["usage"]["completion_tokens"].as_u64()
        ),
        (Some(31), Some(17)),
        "metering counts what the upstream reported for every choice"
    );
    // 2 credits per 1,000 prompt tokens, 6 per 1,000 completion tokens: 1.
    assert_eq!(answer["usage"]["credits_used"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_tool_calls_are_relayed_unchanged_and_usage_only_when_asked() {
    let server = MockServer::start().await;
    let chunk = |choices: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "up", "object": "chat.completion.chunk", "created": 1, "model": "gpt-upstream",
                   "system_fingerprint": "fp_s", "choices": choices})
        )
    };
    let mut sse = String::new();
    sse += &chunk(
        json!([{"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}, "finish_reason": null}]),
    );
    sse += &chunk(
        json!([{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}, "finish_reason": null}]),
    );
    sse += &chunk(
        json!([{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}, "finish_reason": null}]),
    );
    sse += &chunk(json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]));
    sse += &format!(
        "data: {}\n\n",
        json!({"id": "up", "object": "chat.completion.chunk", "created": 1, "model": "gpt-upstream", "choices": [],
               "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29}})
    );
    sse += "data: [DONE]\n\n";
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "text/event-stream")
                .set_body_string(sse),
        )
        .mount(&server)
        .await;
    let app = upstream_app(&server).await;
    let body = json!({"model": "acme/gpt", "stream": true, "temperature": 0.3,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]});
    let response = app.post_json(CHAT, &app.key, &body).await;
    assert_eq!(response.status(), 200);
    let chunks = sse_chunks(&response.text().await.unwrap());
    assert_eq!(
        chunks.len(),
        4,
        "the upstream's usage chunk is not relayed unasked: {chunks:?}"
    );
    assert!(
        chunks
            .iter()
            .all(|c| c["model"] == "acme/gpt" && c["system_fingerprint"] == "fp_s")
    );
    assert_eq!(
        chunks[0]["choices"][0]["delta"]["tool_calls"][0]["id"],
        "call_1"
    );
    let arguments: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(arguments, "{\"city\":\"Paris\"}");
    assert_eq!(chunks[3]["choices"][0]["finish_reason"], "tool_calls");
    let forwarded = received(&server, "/v1/chat/completions").await.remove(0);
    assert_eq!(forwarded["stream"], true);
    assert_eq!(forwarded["stream_options"], json!({"include_usage": true}));
    assert_eq!(forwarded["temperature"], 0.3);
    assert!(forwarded.get("max_tokens").is_none() && forwarded.get("top_p").is_none());
    assert_eq!(forwarded["tools"], body["tools"]);
    // Metering used the upstream's usage: 20 prompt + 9 completion tokens.
    let usage = app
        .get("/api/v1/usage?group_by=model", &app.key)
        .await
        .text()
        .await
        .unwrap();
    assert!(usage.contains("acme/gpt"), "{usage}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_models_call_tools_answer_schemas_and_honour_n_offline() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": false}}}]);
    // OpenAI's model name is an alias of local/echo.
    let ask = json!({"model": "gpt-4o-mini", "messages": [{"role": "developer", "content": "Use tools."}, {"role": "user", "content": "Paris"}], "tools": tools});
    let (status, answer) = json_of(app.post_json(CHAT, &app.key, &ask).await).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["model"], "local/echo");
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Paris", "days": 1}));

    let mut follow_up = ask.clone();
    follow_up["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": null, "tool_calls": [call]}),
        json!({"role": "tool", "tool_call_id": call["id"], "content": "18 C and sunny"}),
    ]);
    let (_, answer) = json_of(app.post_json(CHAT, &app.key, &follow_up).await).await;
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "Paris\n[get_weather] 18 C and sunny"
    );

    let structured = json!({"messages": [{"role": "user", "content": "Ada"}], "n": 2,
        "response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": true,
            "schema": {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
                       "required": ["name", "tags"], "additionalProperties": false}}}});
    let (_, answer) = json_of(app.post_json(CHAT, &app.key, &structured).await).await;
    assert_eq!(answer["choices"].as_array().unwrap().len(), 2);
    assert_eq!(answer["choices"][1]["index"], 1);
    let person: Value =
        serde_json::from_str(answer["choices"][1]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(person, json!({"name": "Ada", "tags": ["Ada"]}));
    let one_choice: u64 = answer["usage"]["completion_tokens"].as_u64().unwrap() / 2;
    assert!(one_choice > 0);

    // Streamed, the call comes as delta.tool_calls.
    let mut streamed = ask.clone();
    streamed["stream"] = json!(true);
    let response = app.post_json(CHAT, &app.key, &streamed).await;
    let chunks = sse_chunks(&response.text().await.unwrap());
    assert_eq!(
        chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"],
        "get_weather"
    );
    let arguments: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(arguments, call["function"]["arguments"].as_str().unwrap());
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_are_served_by_the_models_adapter_with_token_ids_and_base64() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "object": "list", "model": "text-embed-upstream",
            "data": [{"object": "embedding", "index": 1, "embedding": [0.0, 1.0, 0.5]},
                     {"object": "embedding", "index": 0, "embedding": [1.0, 0.0, 0.25]}],
            "usage": {"prompt_tokens": 5, "total_tokens": 5}
        })))
        .mount(&server)
        .await;
    let app = upstream_app(&server).await;
    // LangChain's default: token ids; the Python SDK's default: base64.
    let body = json!({"model": "acme/embed", "input": [[9906, 1917], [9906, 1917, 0]], "dimensions": 3, "encoding_format": "base64"});
    let (status, answer) =
        json_of(app.post_json("/api/v1/embeddings", &app.key, &body).await).await;
    assert_eq!(status, 200, "{answer}");
    let forwarded = received(&server, "/v1/embeddings").await.remove(0);
    assert_eq!(
        forwarded,
        json!({"model": "text-embed-upstream", "input": [[9906, 1917], [9906, 1917, 0]], "dimensions": 3, "encoding_format": "float"})
    );
    let decode = |item: &Value| -> Vec<f32> {
        base64::engine::general_purpose::STANDARD
            .decode(item["embedding"].as_str().unwrap())
            .unwrap()
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    assert_eq!(decode(&answer["data"][0]), vec![1.0, 0.0, 0.25]);
    assert_eq!(decode(&answer["data"][1]), vec![0.0, 1.0, 0.5]);
    assert_eq!(answer["usage"]["prompt_tokens"], 5);
    assert_eq!(answer["model"], "acme/embed");

    // The local model decodes token ids; an alias names it.
    let body = json!({"model": "text-embedding-3-small", "input": [9906, 1917]});
    let (status, ids) = json_of(app.post_json("/api/v1/embeddings", &app.key, &body).await).await;
    assert_eq!(status, 200, "{ids}");
    let body = json!({"model": "text-embedding-3-small", "input": "Hello world"});
    let (_, text) = json_of(app.post_json("/api/v1/embeddings", &app.key, &body).await).await;
    assert_eq!(ids["data"][0]["embedding"], text["data"][0]["embedding"]);
    assert_eq!(ids["model"], "local/hash-embed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_by_id_or_alias_405s_type_errors_and_openai_headers() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let (status, model) = json_of(app.get("/api/v1/models/local/echo", &app.key).await).await;
    assert_eq!((status, model["id"].as_str()), (200, Some("local/echo")));
    assert!(
        model["aliases"]
            .as_array()
            .unwrap()
            .contains(&json!("gpt-4o-mini"))
    );
    assert!(
        model["description"]
            .as_str()
            .unwrap()
            .contains("not a language model")
    );
    let (_, model) = json_of(app.get("/api/v1/models/gpt-4o-mini", &app.key).await).await;
    assert_eq!(model["id"], "local/echo");
    let (status, missing) = json_of(app.get("/api/v1/models/acme/none", &app.key).await).await;
    assert_eq!(
        (status, missing["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let (_, list) = json_of(app.get("/api/v1/models", &app.key).await).await;
    let image = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "local/procedural-v1")
        .unwrap();
    assert!(
        image["description"]
            .as_str()
            .unwrap()
            .contains("not a text-to-image model")
    );

    // A known path with a wrong method: 405 naming the methods it takes.
    let response = app
        .client
        .get(app.url(CHAT))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    let (_, error) = json_of(response).await;
    assert_eq!(error["error"]["code"], "method_not_allowed");
    let response = app
        .client
        .put(app.url("/api/v1/jobs/abc"))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(
        (
            response.status().as_u16(),
            response.headers()["allow"].to_str().unwrap()
        ),
        (405, "GET, DELETE")
    );
    let response = app
        .client
        .get(app.url("/api/v1/nowhere"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);

    // A type error names the field and says what it must be.
    let body = json!({"messages": [{"role": "user", "content": "x"}], "n": "2"});
    let (status, error) = json_of(app.post_json(CHAT, &app.key, &body).await).await;
    assert_eq!(status, 400);
    assert_eq!(error["error"]["param"], "n");
    assert_eq!(
        error["error"]["message"],
        "n must be a non-negative integer, got a string"
    );

    // OpenAI's headers: the request id (the client's is kept), the
    // processing time, the key's request rate.
    let response = app
        .client
        .get(app.url("/api/v1/models"))
        .bearer_auth(&app.key)
        .header("x-request-id", "client-id-42")
        .send()
        .await
        .unwrap();
    let headers = response.headers();
    assert_eq!(headers["x-request-id"], "client-id-42");
    assert!(
        headers["openai-processing-ms"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .is_ok()
    );
    let limit: u32 = headers["x-ratelimit-limit-requests"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let remaining: u32 = headers["x-ratelimit-remaining-requests"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(limit > 0 && remaining < limit, "{limit} {remaining}");
    assert!(headers.contains_key("x-ratelimit-reset-requests"));
    let response = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert!(
        response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .starts_with("req_")
    );
}
