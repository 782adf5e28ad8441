//! Chat completions and embeddings, on the local test models and through the
//! openai adapter against a fake upstream speaking the real wire format.

use serde_json::{Value, json};
use unigen_core::config::{ModelEntry, UpstreamSettings};
use unigen_core::domain::ModelCategory;
use unigen_tests::{TestApp, TestOptions, json_of};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// `data:` payloads of an SSE body, `[DONE]` included.
fn sse_events(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_answer_in_the_openai_format_with_real_token_usage() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let body = json!({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello, unigen!"}]});
    let (status, completion) = json_of(
        app.post_json("/api/v1/chat/completions", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{completion}");
    assert_eq!(completion["object"], "chat.completion");
    assert!(completion["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(completion["model"], "local/echo");
    assert_eq!(completion["model_tier"], "fast");
    assert_eq!(
        completion["choices"][0]["message"],
        json!({"role": "assistant", "content": "Hello, unigen!", "refusal": null})
    );
    assert_eq!(completion["choices"][0]["finish_reason"], "stop");
    let usage = &completion["usage"];
    assert_eq!(usage["completion_tokens"], 5, "cl100k: Hello , un igen !");
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["prompt_tokens"].as_u64().unwrap() + 5)
    );

    let limited = json!({"messages": [{"role": "user", "content": "one two three four five"}], "max_tokens": 2});
    let (_, completion) = json_of(
        app.post_json("/api/v1/chat/completions", &app.key, &limited)
            .await,
    )
    .await;
    assert_eq!(completion["choices"][0]["finish_reason"], "length");
    assert_eq!(completion["usage"]["completion_tokens"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_streams_chunks_then_usage_then_done() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let body = json!({"messages": [{"role": "user", "content": "Stream me, token by token."}], "stream": true,
                      "stream_options": {"include_usage": true}});
    let response = app
        .post_json("/api/v1/chat/completions", &app.key, &body)
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Stream me, token by token.");
    assert!(chunks.len() > 5, "token by token");
    let finish = chunks
        .iter()
        .find(|c| c["choices"][0]["finish_reason"].is_string())
        .unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 3);

    // ?stream=true works too; without include_usage there is no usage chunk.
    let plain = json!({"messages": [{"role": "user", "content": "hi"}]});
    let response = app
        .post_json("/api/v1/chat/completions?stream=true", &app.key, &plain)
        .await;
    let events = sse_events(&response.text().await.unwrap());
    assert!(events.iter().all(|e| !e.contains("\"usage\"")));
    assert_eq!(events.last().unwrap(), "[DONE]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_errors_follow_the_chat_table() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let path = "/api/v1/chat/completions";
    for (body, field, message) in [
        (json!({}), "messages", "messages is required"),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "temperature": 2.1}),
            "temperature",
            "temperature must be between 0 and 2",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "top_p": 1.5}),
            "top_p",
            "top_p must be between 0 and 1",
        ),
        (
            json!({"messages": [{"role": "robot", "content": "x"}]}),
            "messages",
            "messages[0].role must be one of: system, developer, user, assistant, tool, function",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x", "images": ["https://e.com/a.png"]}]}),
            "messages",
            "images are only accepted by vision-capable models",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "web_search": true}),
            "web_search",
            "web_search needs a search backend, and none is configured",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "model": "acme/gpt"}),
            "model",
            "model `acme/gpt` is not an available chat model; GET /api/v1/models lists them",
        ),
    ] {
        let (status, error) = json_of(app.post_json(path, &app.key, &body).await).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(
            (
                error["error"]["param"].as_str(),
                error["error"]["message"].as_str()
            ),
            (Some(field), Some(message))
        );
        assert_eq!(error["error"]["code"], "invalid_request");
    }
    let vision = json!({"model": "local/echo-vision", "messages": [{"role": "user", "content": "x", "images": ["https://e.com/a.png"]}]});
    assert_eq!(app.post_json(path, &app.key, &vision).await.status(), 200);
    let image_only = app.create_key(app.org_id, &["image"], None).await;
    let (status, error) = json_of(
        app.post_json(
            path,
            &image_only,
            &json!({"messages": [{"role": "user", "content": "x"}]}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, error["error"]["code"].as_str()),
        (403, Some("forbidden"))
    );
    assert_eq!(
        error["error"]["message"],
        "API key does not have required scope: chat"
    );
    let (status, error) = json_of(app.post_json(path, "sk_x", &json!({})).await).await;
    assert_eq!(
        (status, error["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_are_normalized_vectors_where_similar_texts_are_closer() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let body = json!({"input": ["The cat sat on the mat", "A cat sitting on a mat", "Quarterly earnings beat expectations"], "dimensions": 128});
    let (status, result) =
        json_of(app.post_json("/api/v1/embeddings", &app.key, &body).await).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["object"], "list");
    assert_eq!(result["model"], "local/hash-embed");
    let vectors: Vec<Vec<f64>> = result["data"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, item)| {
            assert_eq!(
                (item["object"].as_str(), item["index"].as_u64()),
                (Some("embedding"), Some(i as u64))
            );
            item["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        })
        .collect();
    assert!(vectors.iter().all(|v| v.len() == 128));
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    assert!((dot(&vectors[0], &vectors[0]) - 1.0).abs() < 1e-4);
    assert!(dot(&vectors[0], &vectors[1]) > dot(&vectors[0], &vectors[2]));
    assert!(result["usage"]["prompt_tokens"].as_u64().unwrap() > 10);
    // base64 (what the OpenAI SDKs ask for) carries the same little-endian f32s.
    let body =
        json!({"input": "The cat sat on the mat", "dimensions": 128, "encoding_format": "base64"});
    let (_, encoded) = json_of(app.post_json("/api/v1/embeddings", &app.key, &body).await).await;
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let decoded: Vec<f64> = bytes
        .chunks(4)
        .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
        .collect();
    assert_eq!(decoded.len(), vectors[0].len());
    assert!(
        decoded
            .iter()
            .zip(&vectors[0])
            .all(|(a, b)| (a - b).abs() < 1e-6),
        "same vector as the float answer"
    );
    let (status, error) = json_of(
        app.post_json("/api/v1/embeddings", &app.key, &json!({"input": []}))
            .await,
    )
    .await;
    assert_eq!(
        (status, error["error"]["param"].as_str()),
        (400, Some("input"))
    );
}

fn upstream_model(id: &str, upstream: &str, fallbacks: Vec<String>) -> ModelEntry {
    unigen_tests::fake_chat_model(id, upstream, fallbacks)
}

fn upstream(url: &str) -> UpstreamSettings {
    unigen_tests::fake_upstream(url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_model_falls_back_when_its_first_upstream_fails_and_retries_429() {
    let broken = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(500).set_body_json(
                json!({"error": {"message": "boom, internal key sk-upstream-secret"}}),
            ),
        )
        .mount(&broken)
        .await;
    let flaky = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "1"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&flaky)
        .await;
    Mock::given(method("POST")).and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-upstream", "object": "chat.completion", "created": 1, "model": "gpt-upstream",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi from upstream"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}
        })))
        .with_priority(2)
        .mount(&flaky)
        .await;
    let (broken_url, flaky_url) = (broken.uri(), flaky.uri());
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
        s.upstreams.insert("broken".into(), upstream(&broken_url));
        s.upstreams.insert("flaky".into(), upstream(&flaky_url));
        s.models.push(upstream_model(
            "acme/gpt-test",
            "broken",
            vec!["flaky".into()],
        ));
        s.models
            .push(upstream_model("acme/only-broken", "broken", vec![]));
    }))
    .await;
    let body =
        json!({"model": "acme/gpt-test", "messages": [{"role": "user", "content": "hello"}]});
    let (status, completion) = json_of(
        app.post_json("/api/v1/chat/completions", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{completion}");
    assert_eq!(
        completion["model"], "acme/gpt-test",
        "our model id, not the upstream's"
    );
    assert_eq!(
        completion["choices"][0]["message"]["content"],
        "Hi from upstream"
    );
    assert_eq!(completion["usage"]["total_tokens"], 15);
    assert_eq!(
        completion["usage"]["credits_used"], 1,
        "(11 x 2 + 4 x 6) / 1000, rounded up"
    );
    let sent = &flaky.received_requests().await.unwrap();
    assert_eq!(sent.len(), 2, "the 429 was retried");
    let forwarded: Value = serde_json::from_slice(&sent[1].body).unwrap();
    assert_eq!(forwarded["model"], "gpt-upstream");
    assert_eq!(
        sent[1].headers["authorization"],
        "Bearer sk-upstream-secret"
    );
    assert_eq!(
        broken.received_requests().await.unwrap().len(),
        4,
        "the first upstream: 1 try + 3 retries"
    );

    // With every upstream failing, the client sees our error, not upstream internals.
    let body =
        json!({"model": "acme/only-broken", "messages": [{"role": "user", "content": "hello"}]});
    let (status, error) = json_of(
        app.post_json("/api/v1/chat/completions", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(
        (status, error["error"]["code"].as_str()),
        (500, Some("server_error"))
    );
    let text = error.to_string();
    assert!(
        !text.contains("sk-upstream-secret") && !text.contains("boom"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_stream_is_relayed_chunk_by_chunk_with_usage() {
    let server = MockServer::start().await;
    let chunk = |content: &str| {
        json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "gpt-upstream",
               "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]})
    };
    let mut sse = String::new();
    for piece in ["Hel", "lo ", "world"] {
        sse.push_str(&format!("data: {}\n\n", chunk(piece)));
    }
    sse.push_str(&format!(
        "data: {}\n\n",
        json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "gpt-upstream",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    ));
    sse.push_str(&format!(
        "data: {}\n\n",
        json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "gpt-upstream",
        "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}})
    ));
    sse.push_str("data: [DONE]\n\n");
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "text/event-stream")
                .set_body_string(sse),
        )
        .mount(&server)
        .await;
    let url = server.uri();
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
        s.upstreams.insert("acme".into(), upstream(&url));
        s.models
            .push(upstream_model("acme/gpt-test", "acme", vec![]));
    }))
    .await;
    let body = json!({"model": "acme/gpt-test", "stream": true, "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "hi"}]});
    let response = app
        .post_json("/api/v1/chat/completions", &app.key, &body)
        .await;
    assert_eq!(response.status(), 200);
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Hello world");
    assert!(chunks.iter().all(|c| c["model"] == "acme/gpt-test"));
    assert_eq!(chunks.last().unwrap()["usage"]["total_tokens"], 12);
    let forwarded: Value =
        serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
    assert_eq!(forwarded["stream"], true);
    assert_eq!(forwarded["stream_options"]["include_usage"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_and_speech_models_can_run_on_an_openai_compatible_upstream() {
    use base64::Engine;
    let server = MockServer::start().await;
    let mut png = Vec::new();
    image::RgbImage::from_pixel(64, 48, image::Rgb([200, 30, 30]))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    Mock::given(method("POST"))
        .and(path("/v1/images/generations"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "created": 1, "data": [{"b64_json": base64::engine::general_purpose::STANDARD.encode(&png)}]
        })))
        .mount(&server)
        .await;
    let mut wav = Vec::new();
    {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 16_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut writer = hound::WavWriter::new(std::io::Cursor::new(&mut wav), spec).unwrap();
        for i in 0..32_000 {
            writer
                .write_sample(((i as f32 * 0.05).sin() * 8000.0) as i16)
                .unwrap();
        }
        writer.finalize().unwrap();
    }
    Mock::given(method("POST"))
        .and(path("/v1/audio/speech"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "audio/wav")
                .set_body_bytes(wav),
        )
        .mount(&server)
        .await;
    let url = server.uri();
    let app = TestApp::spawn_with(TestOptions::default().configure(move |s| {
        s.upstreams.insert("acme".into(), upstream(&url));
        let mut painter = upstream_model("acme/painter", "acme", vec![]);
        painter.category = ModelCategory::Image;
        painter.capabilities = vec!["text_to_image".into()];
        s.models.push(painter);
        let mut voice = upstream_model("acme/voice", "acme", vec![]);
        voice.category = ModelCategory::Audio;
        voice.capabilities = vec!["text_to_speech".into()];
        s.models.push(voice);
    }))
    .await;

    let body = json!({"model": "acme/painter", "prompt": "a red square", "size": "512x512"});
    let (status, result) = json_of(
        app.post_json("/api/v1/images/generations", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(
        (
            result["data"][0]["width"].as_u64(),
            result["data"][0]["height"].as_u64()
        ),
        (Some(64), Some(48)),
        "the upstream's real size"
    );
    let stored = crate::media::fetch(&app, result["data"][0]["url"].as_str().unwrap()).await;
    assert_eq!(stored, png);
    let sent: Value =
        serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
    assert_eq!(
        (sent["model"].as_str(), sent["response_format"].as_str()),
        (Some("gpt-upstream"), Some("b64_json"))
    );

    let body = json!({"model": "acme/voice", "input": "hello", "response_format": "wav"});
    let (status, result) =
        json_of(app.post_json("/api/v1/audio/speech", &app.key, &body).await).await;
    assert_eq!(status, 200, "{result}");
    assert!(
        (result["duration_seconds"].as_f64().unwrap() - 2.0).abs() < 0.05,
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_search_grounds_the_answer_in_searxng_results() {
    let searx = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/search"))
        .and(wiremock::matchers::query_param("format", "json"))
        .and(wiremock::matchers::query_param("q", "who maintains tokio"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"query": "who maintains tokio", "results": [
            {"title": "Tokio - An asynchronous Rust runtime", "url": "https://tokio.rs/", "content": "Tokio is maintained by the <b>Tokio</b> team."},
            {"title": "tokio-rs/tokio", "url": "https://github.com/tokio-rs/tokio", "content": "A runtime for writing reliable network applications."}
        ]})))
        .mount(&searx)
        .await;
    let upstream_server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "x", "object": "chat.completion", "created": 1, "model": "gpt-upstream",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "The Tokio team [1]."}, "finish_reason": "stop"}]
        })))
        .mount(&upstream_server)
        .await;
    let (searx_url, upstream_url) = (searx.uri(), upstream_server.uri());
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
        s.search.backend = "searxng".into();
        s.search.url = Some(searx_url);
        s.upstreams.insert("acme".into(), upstream(&upstream_url));
        s.models
            .push(upstream_model("acme/gpt-test", "acme", vec![]));
    }))
    .await;
    let body = json!({"model": "acme/gpt-test", "web_search": true, "messages": [{"role": "user", "content": "who maintains tokio"}]});
    let (status, completion) = json_of(
        app.post_json("/api/v1/chat/completions", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{completion}");
    assert_eq!(
        completion["choices"][0]["message"]["content"],
        "The Tokio team [1]."
    );
    let sent: Value =
        serde_json::from_slice(&upstream_server.received_requests().await.unwrap()[0].body)
            .unwrap();
    let grounding = &sent["messages"][0];
    assert_eq!(grounding["role"], "system");
    let text = grounding["content"].as_str().unwrap();
    assert!(
        text.contains("[1]") && text.contains("https://tokio.rs/") && text.contains("Tokio team"),
        "{text}"
    );
    assert!(!text.contains("<b>"), "snippets are plain text");
    assert_eq!(sent["messages"][1]["content"], "who maintains tokio");

    // A search backend that fails is a server error, not a silent ungrounded answer.
    Mock::given(method("GET"))
        .and(path("/search"))
        .and(wiremock::matchers::query_param("q", "boom"))
        .respond_with(ResponseTemplate::new(500))
        .mount(&searx)
        .await;
    let failing = json!({"model": "acme/gpt-test", "web_search": true, "messages": [{"role": "user", "content": "boom"}]});
    let (status, error) = json_of(
        app.post_json("/api/v1/chat/completions", &app.key, &failing)
            .await,
    )
    .await;
    assert_eq!(
        (status, error["error"]["code"].as_str()),
        (500, Some("server_error")),
        "{error}"
    );
    assert_eq!(
        upstream_server.received_requests().await.unwrap().len(),
        1,
        "no ungrounded call was made"
    );
}

/// An upstream that streams a chunk every 100 ms for up to 20 s, and reports
/// when its client closes the connection.
async fn slow_sse_upstream() -> (String, tokio::sync::oneshot::Receiver<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let (mut reader, mut writer) = socket.into_split();
        let mut request = Vec::new();
        let mut buffer = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = reader.read(&mut buffer).await.unwrap();
            request.extend_from_slice(&buffer[..n]);
        }
        writer
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
            )
            .await
            .unwrap();
        let streaming = async {
            for i in 0..200 {
                let chunk = json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                   "choices": [{"index": 0, "delta": {"content": format!("w{i} ")}, "finish_reason": null}]});
                if writer
                    .write_all(format!("data: {chunk}\n\n").as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        };
        // Whichever comes first: the client closes (EOF or error on read), or we finish.
        tokio::select! {
            () = streaming => {}
            _ = async { loop { match reader.read(&mut buffer).await { Ok(0) | Err(_) => break, Ok(_) => {} } } } => {
                let _ = closed_tx.send(());
            }
        }
    });
    (url, closed_rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_stream_cancels_the_upstream_request() {
    let (url, upstream_closed) = slow_sse_upstream().await;
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
        s.upstreams.insert("slow".into(), upstream(&url));
        s.models.push(upstream_model("acme/slow", "slow", vec![]));
    }))
    .await;
    let body = json!({"model": "acme/slow", "stream": true, "messages": [{"role": "user", "content": "talk slowly"}]});
    let mut response = app
        .post_json("/api/v1/chat/completions", &app.key, &body)
        .await;
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("data: "),
        "tokens flow before the upstream finishes"
    );
    drop(response);
    tokio::time::timeout(std::time::Duration::from_secs(10), upstream_closed)
        .await
        .expect("the upstream connection was closed soon after the client left")
        .expect("closed, not abandoned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_slower_than_its_timeout_is_abandoned_for_the_next_one() {
    let slow = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_delay(std::time::Duration::from_secs(5))
                .set_body_json(json!({})),
        )
        .mount(&slow)
        .await;
    let fast = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "fast answer"}, "finish_reason": "stop"}]
        })))
        .mount(&fast)
        .await;
    let (slow_url, fast_url) = (slow.uri(), fast.uri());
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
        let mut slow_upstream = upstream(&slow_url);
        slow_upstream.timeout_seconds = 1;
        s.upstreams.insert("slow".into(), slow_upstream);
        s.upstreams.insert("fast".into(), upstream(&fast_url));
        s.models
            .push(upstream_model("acme/gpt-test", "slow", vec!["fast".into()]));
    }))
    .await;
    let body = json!({"model": "acme/gpt-test", "messages": [{"role": "user", "content": "hi"}]});
    let (status, completion) = json_of(
        app.post_json("/api/v1/chat/completions", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{completion}");
    assert_eq!(
        completion["choices"][0]["message"]["content"],
        "fast answer"
    );
    assert!(
        completion["usage"]["completion_tokens"].as_u64().unwrap() > 0,
        "counted locally when the upstream reports none"
    );
}
