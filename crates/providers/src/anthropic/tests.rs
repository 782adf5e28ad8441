//! The adapter against a fake Messages API speaking Anthropic's documented
//! wire format (request shape, SSE events, errors).

use futures_util::StreamExt;
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;

fn client(server: &MockServer) -> AnthropicClient {
    AnthropicClient::new(&UpstreamSettings {
        base_url: server.uri(),
        api_key: "sk-ant-secret".into(),
        timeout_seconds: 5,
        ..Default::default()
    })
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }})
}

/// A conversation after one tool round trip, as an OpenAI client sends it.
fn tool_conversation() -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "temperature": 1.5,
        "stop": "END",
        "user": "user-7",
        "parallel_tool_calls": false,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {"role": "user", "content": [
                {"type": "text", "text": "Weather in Paris and Rome? See:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.com/map.jpg"}}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "toolu_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "toolu_2", "content": [{"type": "text", "text": "rainy"}]}
        ],
        "tools": [weather_tool()],
        "tool_choice": "auto"
    })
}

#[test]
fn an_openai_tool_conversation_becomes_a_messages_request() {
    let request = to_messages_request(&tool_conversation(), false).unwrap();
    assert_eq!(
        request.body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 256,
            "temperature": 1.0,
            "stop_sequences": ["END"],
            "metadata": {"user_id": "user-7"},
            "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "Weather in Paris and Rome? See:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/map.jpg"}}
                ]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}}
                ]},
                // Both results in one user turn: turns alternate.
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "rainy"}
                ]}
            ],
            "tools": [{
                "name": "get_weather",
                "description": "Weather in a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
            }],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": true}
        })
    );
    assert_eq!(request.json_tool, None);
}

#[test]
fn tool_choices_and_the_default_max_tokens_map_to_anthropics() {
    let base = |extra: Value| {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [weather_tool()]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        to_messages_request(&body, true).unwrap().body
    };
    let plain = base(json!({}));
    assert_eq!(plain["max_tokens"], DEFAULT_MAX_TOKENS);
    assert_eq!(plain["stream"], true);
    assert!(plain.get("tool_choice").is_none());
    assert_eq!(base(json!({"max_completion_tokens": 9}))["max_tokens"], 9);
    assert_eq!(
        base(json!({"tool_choice": "required"}))["tool_choice"],
        json!({"type": "any"})
    );
    assert_eq!(
        base(json!({"tool_choice": "none"}))["tool_choice"],
        json!({"type": "none"})
    );
    assert_eq!(
        base(json!({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}))["tool_choice"],
        json!({"type": "tool", "name": "get_weather"})
    );
    let audio = json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]});
    assert!(
        matches!(to_messages_request(&audio, false), Err(ProviderError::Permanent(m)) if m.contains("input_audio"))
    );
}

#[tokio::test]
async fn a_tool_use_answer_comes_back_as_openai_tool_calls_with_usage() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", "sk-ant-secret"))
        .and(header("anthropic-version", API_VERSION))
        .and(body_partial_json(json!({"model": "claude-sonnet-4-5", "max_tokens": 256})))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Oslo"}}
            ],
            "stop_reason": "tool_use",
            "stop_sequence": null,
            "usage": {"input_tokens": 40, "cache_read_input_tokens": 2, "output_tokens": 12}
        })))
        .mount(&server)
        .await;
    let answer = client(&server)
        .complete(&tool_conversation())
        .await
        .unwrap();
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(answer["id"], "chatcmpl-msg_01");
    assert_eq!(answer["model"], "claude-sonnet-4-5-20250929");
    assert_eq!(
        answer["choices"][0],
        json!({
            "index": 0,
            "message": {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "toolu_9", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}
            ]},
            "logprobs": null,
            "finish_reason": "tool_calls"
        })
    );
    assert_eq!(
        answer["usage"],
        json!({"prompt_tokens": 42, "completion_tokens": 12, "total_tokens": 54})
    );
}

#[tokio::test]
async fn a_json_schema_response_format_is_a_forced_tool_whose_input_is_the_content() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(body_partial_json(json!({
            "tools": [{"name": "city", "description": "A city", "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}}}],
            "tool_choice": {"type": "tool", "name": "city"}
        })))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_02", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "city", "input": {"name": "Lyon"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 5, "output_tokens": 6}
        })))
        .mount(&server)
        .await;
    let body = json!({
        "model": "claude",
        "messages": [{"role": "user", "content": "A city in France"}],
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "city", "description": "A city", "strict": true,
            "schema": {"type": "object", "properties": {"name": {"type": "string"}}}
        }}
    });
    let answer = client(&server).complete(&body).await.unwrap();
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(
        choice["message"],
        json!({"role": "assistant", "content": "{\"name\":\"Lyon\"}"})
    );
}

#[tokio::test]
async fn a_bad_request_is_permanent_with_anthropics_message_and_overload_is_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"model": "bad"})))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "max_tokens: must be positive"}
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"model": "busy"})))
        .respond_with(
            ResponseTemplate::new(529)
                .insert_header("retry-after", "0")
                .set_body_json(json!({
                    "type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}
                })),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"model": "busy"})))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_03", "type": "message", "role": "assistant", "model": "busy",
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "max_tokens",
            "usage": {"input_tokens": 1, "output_tokens": 1}
        })))
        .mount(&server)
        .await;
    let client = client(&server);
    let message =
        |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(
        client.complete(&message("bad")).await,
        Err(ProviderError::Permanent(
            "max_tokens: must be positive".into()
        ))
    );
    let answer = client.complete(&message("busy")).await.unwrap();
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    assert_eq!(answer["choices"][0]["message"]["content"], "ok");
}

fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

async fn stream_server(events: &[Value]) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse(events), "text/event-stream"))
        .mount(&server)
        .await;
    server
}

async fn collect(server: &MockServer, body: &Value) -> Vec<Result<Value, ProviderError>> {
    client(server).stream(body).await.unwrap().collect().await
}

#[tokio::test]
async fn a_streamed_answer_with_a_tool_call_becomes_openai_chunks_and_a_usage_chunk() {
    let server = stream_server(&[
        json!({"type": "message_start", "message": {"id": "msg_s", "type": "message", "role": "assistant", "model": "claude-s", "content": [], "stop_reason": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "check."}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_s", "name": "get_weather", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": "}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"Oslo\"}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 30}}),
        json!({"type": "message_stop"}),
    ])
    .await;
    let mut body = tool_conversation();
    body["stream"] = json!(true);
    let chunks: Vec<Value> = collect(&server, &body)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0).map(|c| &c["delta"]))
        .collect();
    assert_eq!(deltas[0], &json!({"role": "assistant", "content": ""}));
    assert_eq!(deltas[1], &json!({"content": "Let me "}));
    assert_eq!(deltas[2], &json!({"content": "check."}));
    assert_eq!(
        deltas[3],
        &json!({"tool_calls": [{"index": 0, "id": "toolu_s", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]})
    );
    let arguments: String = deltas[4..]
        .iter()
        .filter_map(|d| d["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(arguments, "{\"city\": \"Oslo\"}");
    let finish: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str().map(|_| c))
        .collect();
    assert_eq!(finish.len(), 1);
    assert_eq!(finish[0]["choices"][0]["finish_reason"], "tool_calls");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(
        last["usage"],
        json!({"prompt_tokens": 25, "completion_tokens": 30, "total_tokens": 55})
    );
    assert!(
        chunks
            .iter()
            .all(|c| c["id"] == "chatcmpl-msg_s" && c["object"] == "chat.completion.chunk")
    );
}

#[tokio::test]
async fn a_streamed_json_answer_is_content_and_errors_or_a_cut_stream_end_it() {
    let start = json!({"type": "message_start", "message": {"id": "msg_j", "model": "claude", "usage": {"input_tokens": 3, "output_tokens": 0}}});
    let server = stream_server(&[
        start.clone(),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "json_object", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"a\":"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "1}"}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 4}}),
        json!({"type": "message_stop"}),
    ])
    .await;
    let body = json!({"model": "claude", "stream": true, "messages": [{"role": "user", "content": "json"}], "response_format": {"type": "json_object"}});
    let chunks: Vec<Value> = collect(&server, &body)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "{\"a\":1}");
    assert!(
        chunks
            .iter()
            .all(|c| c["choices"][0]["delta"].get("tool_calls").is_none())
    );
    assert!(
        chunks
            .iter()
            .any(|c| c["choices"][0]["finish_reason"] == "stop")
    );

    let failing = stream_server(&[
        start.clone(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        json!({"type": "message_stop"}),
    ])
    .await;
    let items = collect(&failing, &body).await;
    assert_eq!(
        items.last(),
        Some(&Err(ProviderError::Transient("Overloaded".into())))
    );
    assert_eq!(items.len(), 2, "nothing after the error");

    let cut = stream_server(&[start]).await;
    let items = collect(&cut, &body).await;
    assert!(
        matches!(items.last(), Some(Err(ProviderError::Transient(_)))),
        "{items:?}"
    );
}

#[tokio::test]
async fn configured_headers_replace_the_version_and_several_keys_take_turns() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(header("anthropic-version", "2099-01-01"))
        .and(header("anthropic-beta", "tools-2024"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "m", "model": "c", "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1}
        })))
        .mount(&server)
        .await;
    let client = AnthropicClient::new(&UpstreamSettings {
        base_url: format!("{}/", server.uri()),
        api_keys: vec!["k1".into(), "k2".into()],
        headers: [
            ("anthropic-version".to_owned(), "2099-01-01".to_owned()),
            ("anthropic-beta".to_owned(), "tools-2024".to_owned()),
        ]
        .into(),
        timeout_seconds: 5,
        ..Default::default()
    });
    let body = json!({"model": "c", "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..2 {
        client.complete(&body).await.unwrap();
    }
    let keys: Vec<String> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| r.headers["x-api-key"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys, ["k1", "k2"]);
}

#[tokio::test]
async fn a_native_request_goes_as_sent_with_the_clients_version_and_beta_headers() {
    let server = MockServer::start().await;
    let answer = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "text", "text": "Hi"}],
        "stop_reason": "end_turn", "stop_sequence": null, "usage": {"input_tokens": 5, "output_tokens": 2}});
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", "sk-ant-secret"))
        .and(header("anthropic-version", "2023-01-01"))
        .and(header("anthropic-beta", "interleaved-thinking-2025-05-14"))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer.clone()))
        .mount(&server)
        .await;
    let body = json!({"model": "claude-x", "max_tokens": 2048, "top_k": 3,
        "thinking": {"type": "enabled", "budget_tokens": 1024}, "messages": [{"role": "user", "content": "Hi"}]});
    let headers = [
        ("anthropic-version".to_owned(), "2023-01-01".to_owned()),
        (
            "anthropic-beta".to_owned(),
            "interleaved-thinking-2025-05-14".to_owned(),
        ),
        ("x-api-key".to_owned(), "sk-client-must-not-pass".to_owned()),
    ];
    let got = client(&server).messages(&body, &headers).await.unwrap();
    assert_eq!(got, answer, "the answer as Anthropic gave it");
    let sent: Value = server.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert_eq!(sent, body, "the request as the client sent it");
}

#[tokio::test]
async fn a_native_stream_is_anthropics_events_ending_at_message_stop_or_an_error() {
    let events = [
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [], "stop_reason": null, "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
        json!({"type": "message_stop"}),
        json!({"type": "ping"}),
    ];
    let server = stream_server(&events).await;
    let body = json!({"model": "m", "max_tokens": 8, "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let got: Vec<Value> = client(&server)
        .messages_stream(&body, &[])
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(got, events[..7].to_vec(), "as sent, up to message_stop");

    let failing = stream_server(&[
        events[0].clone(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ])
    .await;
    let got: Vec<Result<Value, ProviderError>> = client(&failing)
        .messages_stream(&body, &[])
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(got.len(), 2);
    assert!(matches!(&got[1], Err(ProviderError::Transient(m)) if m == "Overloaded"));
    let cut = stream_server(&events[..3]).await;
    let got: Vec<Result<Value, ProviderError>> = client(&cut)
        .messages_stream(&body, &[])
        .await
        .unwrap()
        .collect()
        .await;
    assert!(matches!(got.last(), Some(Err(ProviderError::Transient(_)))));
}
