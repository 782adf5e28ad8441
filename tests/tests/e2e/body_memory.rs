//! A request's peak memory is a small multiple of its body: nothing builds a
//! parsed tree of a client's body before the route has checked it (hardening
//! finding 1). Measured with the test binary's counting allocator: nextest
//! runs each test in its own process, so the peak is this test's alone.

use std::time::Duration;

use serde_json::Value;
use unigen_tests::{TestApp, TestOptions, json_of};

use crate::PEAK;

/// `{"prompt": ..., <extra>, "pad": [0,0,...]}` of about `size` bytes.
fn padded_body(extra: &str, size: usize) -> Vec<u8> {
    let mut body = format!(r#"{{"prompt":"a red square",{extra},"pad":["#).into_bytes();
    while body.len() + 3 < size {
        body.extend_from_slice(b"0,");
    }
    body.extend_from_slice(b"0]}");
    body
}

/// The most the process's heap grew above where it stood while `send` ran.
async fn peak_growth<F: std::future::Future<Output = reqwest::Response>>(
    send: F,
) -> (usize, reqwest::Response) {
    // Let the stack's start-up work settle before measuring.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = PEAK.current_usage();
    PEAK.reset_peak_usage();
    let response = send.await;
    let growth = PEAK.peak_usage().saturating_sub(before);
    eprintln!("heap growth: {:.1} MiB", growth as f64 / (1024.0 * 1024.0));
    (growth, response)
}

async fn post(
    app: &TestApp,
    path: &str,
    key: &str,
    idempotency_key: Option<&str>,
    body: Vec<u8>,
) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url(path))
        .bearer_auth(key)
        .header("Content-Type", "application/json")
        .timeout(Duration::from_secs(60));
    if let Some(idempotency_key) = idempotency_key {
        request = request.header("Idempotency-Key", idempotency_key);
    }
    request.body(body).send().await.expect("request sent")
}

#[tokio::test]
async fn a_request_never_costs_more_than_a_small_multiple_of_its_body() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    const MIB: usize = 1024 * 1024;
    let size = 16 * MIB;
    // A generous multiple: the body is held by the client, the middleware
    // and the route's own buffer. A parsed tree of it took about 20 times.
    let bound = 4 * size;

    // Keyed: fingerprinted without a tree. The route then refuses the
    // response format, having parsed the body once more.
    let body = padded_body(r#""response_format":"svg""#, size);
    let (growth, response) = peak_growth(post(
        &app,
        "/api/v1/images/generations",
        &app.key,
        Some("memory-keyed"),
        body,
    ))
    .await;
    let (status, error) = json_of(response).await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], "response_format", "{error}");
    assert!(
        growth < bound,
        "a keyed 16 MiB body grew the heap by {} MiB",
        growth / MIB
    );

    // An integer sent as `1.0`: read as an integer without a tree.
    let body = padded_body(r#""n":1.0,"response_format":"svg""#, size);
    let (growth, response) = peak_growth(post(
        &app,
        "/api/v1/images/generations",
        &app.key,
        None,
        body,
    ))
    .await;
    let (status, error) = json_of(response).await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], "response_format", "{error}");
    assert!(
        growth < bound,
        "a 16 MiB body with an integral float grew the heap by {} MiB",
        growth / MIB
    );

    // A NUL character: its field is found without a tree.
    let body = padded_body(r#""model":"a\u0000b""#, size);
    let (growth, response) = peak_growth(post(
        &app,
        "/api/v1/images/generations",
        &app.key,
        None,
        body,
    ))
    .await;
    let (status, error) = json_of(response).await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], "model", "{error}");
    assert!(
        growth < bound,
        "a 16 MiB body with a NUL grew the heap by {} MiB",
        growth / MIB
    );
}

#[tokio::test]
async fn a_keyed_post_is_checked_for_its_route_scope_and_size_before_its_body_is_read() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    const MIB: usize = 1024 * 1024;
    let size = 16 * MIB;

    // No such route: a 404, the body unread.
    let (growth, response) = peak_growth(post(
        &app,
        "/api/v1/no/such/route",
        &app.key,
        Some("memory-404"),
        padded_body(r#""n":1"#, size),
    ))
    .await;
    assert_eq!(response.status(), 404);
    assert!(growth < size / 2, "grew by {} MiB", growth / MIB);

    // A key without the route's scope: a 403, the body unread.
    let chat_only = app.create_key(app.org_id, &["chat"], None).await;
    let (growth, response) = peak_growth(post(
        &app,
        "/api/v1/images/generations",
        &chat_only,
        Some("memory-403"),
        padded_body(r#""n":1"#, size),
    ))
    .await;
    let (status, error) = json_of(response).await;
    assert_eq!(status, 403, "{error}");
    assert_eq!(
        error["error"]["message"],
        "API key does not have required scope: image"
    );
    assert!(growth < size / 2, "grew by {} MiB", growth / MIB);

    // Over the route's own limit (`http.max_body_bytes`): a 413, unread.
    let over = app.settings.http.max_body_bytes + 1;
    let (growth, response) = peak_growth(post(
        &app,
        "/api/v1/images/generations",
        &app.key,
        Some("memory-413"),
        padded_body(r#""n":1"#, over),
    ))
    .await;
    let (status, error): (u16, Value) = json_of(response).await;
    assert_eq!(status, 413, "{error}");
    assert!(growth < size / 2, "grew by {} MiB", growth / MIB);
}

async fn upload_keyed(app: &TestApp, idempotency_key: &str, bytes: Vec<u8>) -> reqwest::Response {
    let form = reqwest::multipart::Form::new()
        .text("purpose", "user_data")
        .part(
            "file",
            reqwest::multipart::Part::bytes(bytes).file_name("notes.txt"),
        );
    app.client
        .post(app.url("/api/v1/files"))
        .bearer_auth(&app.key)
        .header("Idempotency-Key", idempotency_key)
        .timeout(Duration::from_secs(120))
        .multipart(form)
        .send()
        .await
        .expect("upload sent")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_upload_is_spooled_to_a_file_not_held_to_be_fingerprinted() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    const MIB: usize = 1024 * 1024;
    let size = 48 * MIB;
    // Held whole, the idempotency layer alone would grow the heap by the
    // upload's size.
    let (growth, response) = peak_growth(upload_keyed(&app, "upload-1", vec![b'x'; size])).await;
    let (status, file) = json_of(response).await;
    assert_eq!(status, 200, "{file}");
    assert_eq!(file["bytes"], size as u64, "{file}");
    assert!(
        growth < size / 4,
        "a keyed {size}-byte upload grew the heap by {growth} bytes"
    );
    // Still a keyed request: the same upload again is the same file, and
    // another under the same key is refused.
    let again = upload_keyed(&app, "upload-1", vec![b'x'; size]).await;
    assert_eq!(
        again
            .headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let (status, replayed) = json_of(again).await;
    assert_eq!((status, &replayed["id"]), (200, &file["id"]));
    let (status, error) = json_of(upload_keyed(&app, "upload-1", vec![b'y'; MIB]).await).await;
    assert_eq!(status, 422, "{error}");
    let content = app
        .get(
            &format!("/api/v1/files/{}/content", file["id"].as_str().unwrap()),
            &app.key,
        )
        .await;
    assert_eq!(content.status(), 200);
    let stored = content.bytes().await.unwrap();
    assert!(
        stored.len() == size && stored.iter().all(|&b| b == b'x'),
        "the spooled upload is stored intact"
    );
}
