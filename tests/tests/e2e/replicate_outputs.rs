//! Replicate output downloads through the whole stack: an output URL off the
//! upstream's own origin on a private address is refused unfetched, and an
//! output over the cap fails without being read (`unigen_providers::outputs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use serde_json::{Value, json};
use unigen_core::config::{ModelEntry, UpstreamSettings};
use unigen_tests::{TestApp, TestOptions, json_of};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn video_model() -> ModelEntry {
    serde_json::from_value(json!({
        "id": "acme/motion", "category": "video", "tier": "premium", "adapter": "replicate",
        "upstream": "replicate", "upstream_model": "acme/motion", "owned_by": "acme",
        "capabilities": ["text_to_video"], "credits_per_unit": 3, "max_duration_seconds": 10
    }))
    .unwrap()
}

/// A fake Replicate whose prediction succeeds at once with `output`.
async fn fake_replicate(output: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/models/acme/motion/predictions"))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({
            "id": "p1", "status": "succeeded", "output": output.replace("{base}", &server.uri())
        })))
        .mount(&server)
        .await;
    server
}

/// Runs a video job on the fake and returns the finished job.
async fn run_job(upstream: &str) -> Value {
    let url = upstream.to_owned();
    let app = TestApp::spawn_with(TestOptions::default().configure(move |s| {
        let settings: UpstreamSettings = serde_json::from_value(
            json!({"base_url": format!("{url}/v1"), "api_key": "r8_secret", "timeout_seconds": 10}),
        )
        .unwrap();
        s.upstreams.insert("replicate".into(), settings);
        s.models.push(video_model());
    }))
    .await;
    let body = json!({"model": "acme/motion", "prompt": "a comet", "duration_seconds": 1});
    let (status, created) = json_of(
        app.post_json("/api/v1/videos/generations", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 202, "{created}");
    app.wait_for_job(created["id"].as_str().unwrap(), Duration::from_secs(60))
        .await
}

fn error_message(job: &Value) -> &str {
    assert_eq!(job["status"], "failed", "{job}");
    job["errorMessage"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_on_another_private_address_fails_the_job_unfetched() {
    // Another service on the same loopback address as the fake upstream.
    let internal = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(b"internal".to_vec()))
        .mount(&internal)
        .await;
    for output in [
        format!("{}/admin/dump.mp4", internal.uri()),
        "http://169.254.169.254/latest/meta-data/out.mp4".to_owned(),
        // A redirect from the upstream's own origin does not launder it.
        "{base}/delivery/moved.mp4".to_owned(),
    ] {
        let server = fake_replicate(&output).await;
        Mock::given(method("GET"))
            .and(path("/delivery/moved.mp4"))
            .respond_with(ResponseTemplate::new(302).insert_header(
                "Location",
                format!("{}/admin/dump.mp4", internal.uri()).as_str(),
            ))
            .mount(&server)
            .await;
        let job = run_job(&server.uri()).await;
        let message = error_message(&job);
        assert!(
            message.contains("private, loopback or link-local address"),
            "{output}: {job}"
        );
        assert!(!message.contains("r8_secret"), "{message}");
    }
    assert!(internal.received_requests().await.unwrap().is_empty());
}

/// A fake Replicate on a bare socket (a mock server cannot announce a
/// length it does not send): creating the prediction answers it succeeded
/// with `/delivery/huge.mp4`, whose answer announces a terabyte and then
/// streams for as long as the client reads. Returns its base URL and the
/// number of body bytes it managed to send.
async fn endless_replicate() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let sent = Arc::new(AtomicUsize::new(0));
    let (output, counted) = (format!("{base}/delivery/huge.mp4"), sent.clone());
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let (output, counted) = (output.clone(), counted.clone());
            tokio::spawn(async move { serve(socket, &output, &counted).await });
        }
    });
    (base, sent)
}

async fn serve(socket: tokio::net::TcpStream, output: &str, sent: &AtomicUsize) {
    let mut socket = tokio::io::BufReader::new(socket);
    let mut request_line = String::new();
    if socket.read_line(&mut request_line).await.unwrap_or(0) == 0 {
        return;
    }
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if socket.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    if socket.read_exact(&mut body).await.is_err() {
        return;
    }
    let mut socket = socket.into_inner();
    if request_line.starts_with("POST ") {
        let prediction = json!({"id": "p1", "status": "succeeded", "output": output}).to_string();
        let answer = format!(
            "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{prediction}",
            prediction.len()
        );
        let _ = socket.write_all(answer.as_bytes()).await;
        return;
    }
    let head = "HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nContent-Length: 1099511627776\r\n\
                Connection: close\r\n\r\n";
    if socket.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let chunk = vec![0u8; 64 * 1024];
    while sent.load(Ordering::Relaxed) < 2 << 30 {
        if socket.write_all(&chunk).await.is_err() {
            return;
        }
        sent.fetch_add(chunk.len(), Ordering::Relaxed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_over_the_cap_fails_the_job_before_its_body_is_read() {
    let (base, sent) = endless_replicate().await;
    let job = run_job(&base).await;
    let message = error_message(&job);
    // The worker's cap is 512 MiB.
    assert!(
        message.contains("the output file is larger than 536870912 bytes"),
        "{job}"
    );
    // Refused on the announced length: only what filled socket buffers left.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = sent.load(Ordering::Relaxed);
    assert!(sent < 64 << 20, "{sent} bytes were sent");
}
