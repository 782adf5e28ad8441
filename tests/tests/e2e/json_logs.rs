//! `log.format = "json"` (issue 37): one JSON object per line, with the
//! trace and span ids of the trace span it happened in and the request's and
//! job's ids; never an API key, a webhook secret, a signed URL's signature or
//! prompt text (the content opt-in is off).

use std::io::Write;
use std::sync::{Arc, Mutex};

use opentelemetry_sdk::trace::InMemorySpanExporter;
use serde_json::{Value, json};
use unigen_core::config::TelemetrySettings;
use unigen_core::telemetry::{self, BoxMakeWriter};
use unigen_tests::{TestApp, TestOptions, json_of};

use crate::webhooks::{eventually, receiver, register, requests_of};

/// Everything the process logged.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).expect("UTF-8 log lines")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_carry_trace_request_and_job_ids_and_never_a_key_secret_signature_or_prompt() {
    let captured = Captured::default();
    let writer = captured.clone();
    let _telemetry = telemetry::init_with_exporter_logging_to(
        "unigen-tests",
        &TelemetrySettings::default(),
        InMemorySpanExporter::default(),
        BoxMakeWriter::new(move || writer.clone()),
    );
    assert!(
        telemetry::enabled(),
        "run under nextest (one process per test)"
    );
    let app = TestApp::spawn_with(
        TestOptions::default().configure(|s| s.webhooks.retry_delays_ms = vec![20, 20, 20, 20]),
    )
    .await;
    let hooks = receiver(1, 500).await;
    let (_webhook, secret) = register(&app, &hooks, &["generation.completed"]).await;

    let prompt = "a lighthouse painted by an otter named Wistleberry";
    let (status, image) = json_of(
        app.post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": prompt, "size": "512x512"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{image}");
    let url = image["data"][0]["url"].as_str().expect("a signed URL");
    let signature = url
        .split_once("sig=")
        .map(|(_, sig)| sig.split('&').next().unwrap_or_default().to_owned())
        .expect("a signature");
    assert!(signature.len() >= 16, "{url}");
    let download = app.download(url).await;
    assert_eq!(download.status(), 200);
    let chat_prompt = "the otter Wistleberry asks about tides";
    let (status, chat) = json_of(
        app.post_json(
            "/api/v1/chat/completions",
            &app.key,
            &json!({"model": "local/echo", "messages": [{"role": "user", "content": chat_prompt}]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{chat}");
    // The webhook's first attempt fails (logged), the second succeeds.
    requests_of(&hooks, 2).await;
    let jobs: Vec<String> = {
        let (_, list) = json_of(app.get("/api/v1/jobs", &app.key).await).await;
        list["jobs"]
            .as_array()
            .or_else(|| list["data"].as_array())
            .expect("a job list")
            .iter()
            .filter_map(|job| job["id"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job_id = jobs[0].clone();

    // The worker's "job completed" and the scheduler's webhook lines.
    let lines: Vec<Value> = eventually("the worker's and the scheduler's lines", || {
        let text = captured.text();
        let job_id = job_id.clone();
        async move {
            let lines: Vec<Value> = text
                .lines()
                .map(|line| {
                    serde_json::from_str(line)
                        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"))
                })
                .collect();
            let done = lines
                .iter()
                .any(|l| l["job_id"] == job_id.as_str() && l["message"] == "job completed")
                && lines.iter().any(|l| l["message"] == "webhook delivered");
            done.then_some(lines)
        }
    })
    .await;
    let text = captured.text();
    for (what, secret) in [
        ("the API key", app.key.as_str()),
        ("the webhook secret", secret.as_str()),
        ("the URL's signature", signature.as_str()),
        ("the image prompt", prompt),
        ("the chat prompt", chat_prompt),
        ("the prompts' words", "Wistleberry"),
    ] {
        assert!(!text.contains(secret), "{what} was logged:\n{text}");
    }
    let completed = lines
        .iter()
        .find(|l| l["message"] == "job completed")
        .expect("the job's completion line");
    assert_eq!(completed["job_id"], job_id.as_str(), "{completed}");
    let hex = |v: &Value, n: usize| {
        v.as_str()
            .is_some_and(|s| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    assert!(
        hex(&completed["trace_id"], 32) && hex(&completed["span_id"], 16),
        "the worker's line is in the job's trace: {completed}"
    );
    for line in &lines {
        assert!(
            line["timestamp"].is_string() && line["level"].is_string(),
            "{line}"
        );
        assert!(line["message"].is_string(), "{line}");
    }
    let job = app.job(&job_id).await;
    assert_eq!(
        completed["trace_id"].as_str(),
        job["traceId"].as_str(),
        "the line's trace is the job's: {job}"
    );
    let submitted = lines
        .iter()
        .find(|l| l["message"] == "job submitted")
        .expect("the API's submission line");
    assert!(
        submitted["request_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("req_")),
        "{submitted}"
    );
    assert_eq!(submitted["job_id"], job_id.as_str(), "{submitted}");
    assert!(
        hex(&submitted["trace_id"], 32) && hex(&submitted["span_id"], 16),
        "{submitted}"
    );
    assert_eq!(
        submitted["trace_id"], completed["trace_id"],
        "the request's line and the worker's are one trace"
    );
}
