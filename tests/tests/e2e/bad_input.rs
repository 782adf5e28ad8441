//! Bad input on every create endpoint: NUL characters, invalid UTF-8, wrong
//! types, deep nesting, huge numbers, a body over `http.max_body_bytes` and
//! a gzip bomb. Each answer is a 4xx JSON error with a message, and nothing
//! is written (hardening issue).

use std::io::Write;

use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, json_of};

const MAX_BODY: usize = 64 * 1024;

/// Every endpoint that creates something, with a body it would accept.
fn with_nul_in_every_string(value: &mut Value) {
    match value {
        Value::String(text) => text.insert(0, '\u{0}'),
        Value::Array(items) => items.iter_mut().for_each(with_nul_in_every_string),
        Value::Object(fields) => fields.values_mut().for_each(with_nul_in_every_string),
        _ => {}
    }
}

fn endpoints(agent: &str, webhook: &str) -> Vec<(String, Value)> {
    vec![
        (
            "/api/v1/images/generations".into(),
            json!({"prompt": "a house"}),
        ),
        (
            "/api/v1/images/edits".into(),
            json!({"image": "aGVsbG8=", "operation": "colorization"}),
        ),
        (
            "/api/v1/videos/generations".into(),
            json!({"prompt": "waves", "duration_seconds": 1}),
        ),
        ("/api/v1/audio/speech".into(), json!({"input": "hello"})),
        (
            "/api/v1/audio/transcriptions".into(),
            json!({"file": "aGVsbG8="}),
        ),
        (
            "/api/v1/audio/translations".into(),
            json!({"file": "aGVsbG8="}),
        ),
        (
            "/api/v1/music/generations".into(),
            json!({"prompt": "piano", "duration_seconds": 5}),
        ),
        (
            "/api/v1/ai-image/generate".into(),
            json!({"prompt": "a fox", "model": "flux-schnell"}),
        ),
        (
            "/api/v1/ai-image/logo".into(),
            json!({"prompt": "Acme", "model": "flux-pro"}),
        ),
        (
            "/api/v1/chat/completions".into(),
            json!({"messages": [{"role": "user", "content": "hi"}]}),
        ),
        ("/api/v1/embeddings".into(), json!({"input": "hi"})),
        (
            "/api/v1/webhooks".into(),
            json!({"name": "w", "url": "https://example.com/h", "events": ["generation.completed"]}),
        ),
        (
            format!("/api/v1/webhooks/{webhook}/rotate-secret"),
            json!({}),
        ),
        (
            "/api/v1/agents".into(),
            json!({"name": "a", "system_prompt": "x"}),
        ),
        (
            format!("/api/v1/agents/{agent}/duplicate"),
            json!({"name": "b"}),
        ),
        (
            format!("/api/v1/agents/{agent}/run"),
            json!({"input": "hi"}),
        ),
        (
            "/api/v1/overage/configure".into(),
            json!({"enabled": false, "notification_email": "ops@example.com"}),
        ),
    ]
}

/// What the database holds that a request could have written.
async fn written(app: &TestApp) -> Vec<i64> {
    let mut counts = Vec::new();
    for table in [
        "jobs",
        "agents",
        "agent_runs",
        "webhooks",
        "reservations",
        "usage_records",
        "credit_transactions",
    ] {
        counts.push(
            app.db
                .scalar_i64(&format!("SELECT count(*) FROM {table}"))
                .await,
        );
    }
    counts
}

async fn post_raw(app: &TestApp, path: &str, body: Vec<u8>, gzip: bool) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url(path))
        .bearer_auth(&app.key)
        .header("content-type", "application/json");
    if gzip {
        request = request.header("content-encoding", "gzip");
    }
    request.body(body).send().await.expect("the API answers")
}

/// A gzip stream of `size` bytes of `{"prompt": "aaaa...` (it never ends).
fn gzip_bomb(size: usize) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(br#"{"prompt": ""#).unwrap();
    let chunk = vec![b'a'; 1 << 20];
    for _ in 0..size / chunk.len() {
        encoder.write_all(&chunk).unwrap();
    }
    encoder.finish().unwrap()
}

/// `good` with every field it reads, and a few numeric ones, set to numbers
/// no field can hold (a float beyond f64, an integer beyond u64).
fn huge_numbers(good: &Value) -> Vec<u8> {
    let mut fields: Vec<String> = good
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    fields.extend(["n", "seed", "duration_seconds", "max_tokens"].map(str::to_owned));
    let body: Vec<String> = fields
        .iter()
        .enumerate()
        .map(|(i, field)| {
            let number = if i % 2 == 0 {
                "1e400"
            } else {
                "18446744073709551616"
            };
            format!("\"{field}\": {number}")
        })
        .collect();
    format!("{{{}}}", body.join(", ")).into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_on_every_create_endpoint_are_4xx_json_errors_that_write_nothing() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.http.max_body_bytes = MAX_BODY),
    )
    .await;
    let (status, agent) = json_of(
        app.post_json(
            "/api/v1/agents",
            &app.key,
            &json!({"name": "base", "system_prompt": "x"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    let agent = agent["agent"]["id"].as_str().unwrap().to_owned();
    let webhook = "00000000-0000-0000-0000-000000000000";
    let before = written(&app).await;

    let deep = format!("{{\"prompt\": {}1{}}}", "[".repeat(5000), "]".repeat(5000));
    let bomb = gzip_bomb(512 << 20);
    assert!(bomb.len() < MAX_BODY * 16, "the bomb is small on the wire");
    for (path, good) in endpoints(&agent, webhook) {
        // NUL in every text field the endpoint reads (a field it does not
        // read is not kept, so a NUL there is harmless and allowed).
        let mut nul = good.clone();
        with_nul_in_every_string(&mut nul);
        let mut wrong_types = good.clone();
        for field in [
            "prompt", "input", "messages", "name", "model", "n", "enabled",
        ] {
            wrong_types[field] = json!({"not": ["what", "it", "takes"]});
        }
        let mut over = good.clone();
        over["prompt"] = json!("a".repeat(MAX_BODY + 1));
        let cases: Vec<(&str, Vec<u8>, bool)> = vec![
            ("NUL", serde_json::to_vec(&nul).unwrap(), false),
            (
                "invalid UTF-8",
                b"{\"prompt\": \"\xff\xfe\xfd\", \"input\": \"\xc3\x28\"}".to_vec(),
                false,
            ),
            (
                "wrong types",
                serde_json::to_vec(&wrong_types).unwrap(),
                false,
            ),
            ("deep nesting", deep.clone().into_bytes(), false),
            ("huge numbers", huge_numbers(&good), false),
            ("over the limit", serde_json::to_vec(&over).unwrap(), false),
            ("gzip bomb", bomb.clone(), true),
        ];
        for (case, body, gzip) in cases {
            let response = post_raw(&app, &path, body, gzip).await;
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            assert!(
                (400..500).contains(&status),
                "{case} on {path}: {status} {text}"
            );
            let error: Value = serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("{case} on {path}: not JSON: {text}"));
            // The legacy interface answers its own envelope (`success: false`).
            let legacy = path.contains("/ai-image/");
            assert!(
                error["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty())
                    && error["error"]["code"].is_string()
                    && (error["error"]["type"].is_string() || legacy && error["success"] == false),
                "{case} on {path}: {error}"
            );
        }
    }
    assert_eq!(written(&app).await, before, "nothing was written");
}
