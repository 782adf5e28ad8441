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
