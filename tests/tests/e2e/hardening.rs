//! Bad input gets a clear JSON error and changes nothing (issue: hardening).

use serde_json::json;
use unigen_tests::{TestApp, TestOptions, json_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_a_413_json_error_and_creates_nothing() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.http.max_body_bytes = 64 * 1024),
    )
    .await;
    let prompt = "a".repeat(100 * 1024);
    for path in ["/api/v1/images/generations", "/api/v1/chat/completions"] {
        let (status, body) = json_of(
            app.post_json(path, &app.key, &json!({ "prompt": prompt, "messages": [] }))
                .await,
        )
        .await;
        assert_eq!(status, 413, "{path}: {body}");
        assert_eq!(body["error"]["code"], "payload_too_large", "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
        assert_eq!(
            body["error"]["message"],
            "the request body is larger than the limit of 65536 bytes"
        );
    }
    assert_eq!(app.count_jobs().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_character_is_a_400_naming_the_field_and_creates_nothing() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let nul = "a\u{0}b";
    let (status, agent) = json_of(
        app.post_json(
            "/api/v1/agents",
            &app.key,
            &json!({"name": "ok", "system_prompt": "x"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    let agent = agent["agent"]["id"].as_str().unwrap().to_owned();
    let cases = [
        (
            "POST",
            "/api/v1/agents".to_owned(),
            json!({"name": nul, "system_prompt": "x"}),
            "name",
        ),
        (
            "PATCH",
            format!("/api/v1/agents/{agent}"),
            json!({"system_prompt": nul}),
            "system_prompt",
        ),
        (
            "POST",
            format!("/api/v1/agents/{agent}/duplicate"),
            json!({"name": nul}),
            "name",
        ),
        (
            "POST",
            format!("/api/v1/agents/{agent}/run"),
            json!({"input": nul}),
            "input",
        ),
        (
            "POST",
            "/api/v1/images/generations".to_owned(),
            json!({"prompt": nul}),
            "prompt",
        ),
        (
            "POST",
            "/api/v1/audio/speech".to_owned(),
            json!({"input": nul}),
            "input",
        ),
        (
            "POST",
            "/api/v1/music/generations".to_owned(),
            json!({"prompt": nul}),
            "prompt",
        ),
        (
            "POST",
            "/api/v1/videos/generations".to_owned(),
            json!({"prompt": nul}),
            "prompt",
        ),
        (
            "POST",
            "/api/v1/chat/completions".to_owned(),
            json!({"messages": [{"role": "user", "content": nul}]}),
            "messages[0].content",
        ),
    ];
    for (method, path, body, field) in cases {
        let response = app
            .client
            .request(method.parse().unwrap(), app.url(&path))
            .bearer_auth(&app.key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, error) = json_of(response).await;
        assert_eq!(status, 400, "{method} {path}: {error}");
        assert_eq!(error["error"]["param"], field, "{method} {path}: {error}");
        assert!(
            error["error"]["message"].as_str().unwrap().contains("NUL"),
            "{error}"
        );
    }
    let (status, error) = json_of(app.get("/api/v1/usage?model=a%00b", &app.key).await).await;
    assert_eq!(
        (status, &error["error"]["param"]),
        (400, &json!("model")),
        "{error}"
    );
    assert_eq!(app.count_jobs().await, 0);
    let (_, agents) = json_of(app.get("/api/v1/agents", &app.key).await).await;
    assert_eq!(
        agents["agents"].as_array().unwrap().len(),
        1,
        "nothing was created"
    );
}
