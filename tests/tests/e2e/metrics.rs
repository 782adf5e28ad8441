//! The worker's and the scheduler's own `/metrics` and `/healthz` endpoints.

use std::time::Duration;

use serde_json::json;
use unigen_tests::{TestApp, TestOptions, json_of};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const WAIT: Duration = Duration::from_secs(30);

/// A loopback address nothing listens on (bound, then released).
fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("bound address").to_string()
}

/// Scrapes until `line` appears (values are read or counted as things
/// happen, not at once); the metrics text.
async fn scrape_until(app: &TestApp, addr: &str, line: &str) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(response) = app
            .client
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
        {
            let text = response.text().await.unwrap_or_default();
            if has_line(&text, line) {
                return text;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no `{line}` at {addr}:\n{text}"
            );
        } else {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{addr} never answered"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for `/healthz` at `addr` (the endpoint starts with its process) and
/// checks its answer.
async fn healthy(app: &TestApp, addr: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(response) = app
            .client
            .get(format!("http://{addr}/healthz"))
            .send()
            .await
        {
            assert_eq!(json_of(response).await, (200, json!({"status": "ok"})));
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{addr} never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn has_line(metrics: &str, line: &str) -> bool {
    metrics.lines().any(|l| l == line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_and_the_scheduler_serve_job_queue_and_listener_metrics() {
    let mut app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let scheduler_addr = free_addr();
    let addr = scheduler_addr.clone();
    let _scheduler = app.spawn_scheduler(move |s| s.scheduler.metrics_addr = addr);

    healthy(&app, &scheduler_addr).await;

    // No worker yet: the job waits in its queue, and the scheduler sees it.
    let doomed = app.submit_image_async(&json!({"prompt": "doomed"})).await;
    let metrics = scrape_until(
        &app,
        &scheduler_addr,
        "unigen_queue_depth{tool=\"image\"} 1",
    )
    .await;
    assert!(
        has_line(&metrics, "unigen_dead_letter_depth{tool=\"image\"} 0"),
        "{metrics}"
    );
    assert!(
        has_line(&metrics, "unigen_queue_consumers{tool=\"image\"} 0"),
        "{metrics}"
    );
    let metrics = scrape_until(&app, &scheduler_addr, "unigen_listener_connected 1").await;
    assert!(
        has_line(&metrics, "unigen_listener_reconnects_total 0"),
        "{metrics}"
    );

    // A worker whose provider fails everything.
    let failing_addr = free_addr();
    let addr = failing_addr.clone();
    let failing = app.spawn_worker(move |s| {
        s.worker.metrics_addr = addr;
        s.local_provider.failure_rate = 1.0;
    });
    let job = app.wait_for_job(&doomed, WAIT).await;
    assert_eq!(job["status"], "failed", "{job}");
    // Counted just after the commit the job's status reports.
    let metrics = scrape_until(
        &app,
        &failing_addr,
        "unigen_job_failures_total{reason=\"provider_transient\",tool=\"image\"} 1",
    )
    .await;
    assert!(
        has_line(
            &metrics,
            "unigen_job_duration_seconds_count{model=\"local/procedural-v1\",outcome=\"failed\",tool=\"image\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        has_line(&metrics, "unigen_listener_connected 1"),
        "{metrics}"
    );
    assert!(
        has_line(&metrics, "unigen_listener_reconnects_total 0"),
        "{metrics}"
    );
    let metrics = scrape_until(
        &app,
        &scheduler_addr,
        "unigen_queue_depth{tool=\"image\"} 0",
    )
    .await;
    assert!(
        has_line(&metrics, "unigen_queue_consumers{tool=\"image\"} 1"),
        "the failing worker consumes: {metrics}"
    );

    // Its endpoint stops with the worker.
    failing.cancel();
    let deadline = tokio::time::Instant::now() + WAIT;
    while app
        .client
        .get(format!("http://{failing_addr}/healthz"))
        .send()
        .await
        .is_ok()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stopped worker still serves metrics"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A healthy worker completes the next job.
    let healthy_addr = free_addr();
    let addr = healthy_addr.clone();
    let _healthy = app.spawn_worker(move |s| s.worker.metrics_addr = addr);
    let id = app.submit_image_async(&json!({"prompt": "fine"})).await;
    let job = app.wait_for_job(&id, WAIT).await;
    assert_eq!(job["status"], "completed", "{job}");
    healthy(&app, &healthy_addr).await;
    let metrics = scrape_until(
        &app,
        &healthy_addr,
        "unigen_job_duration_seconds_count{model=\"local/procedural-v1\",outcome=\"completed\",tool=\"image\"} 1",
    )
    .await;
    assert!(
        !metrics.contains("unigen_job_failures_total{"),
        "each worker counts its own jobs: {metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_counts_jobs_given_up_on_and_webhook_attempts_by_outcome() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_scheduler()
            .configure(|s| s.jobs.max_attempts = 2),
    )
    .await;
    let scheduler_addr = free_addr();
    let addr = scheduler_addr.clone();
    let _scheduler = app.spawn_scheduler(move |s| {
        s.scheduler.metrics_addr = addr;
        s.webhooks.retry_delays_ms = vec![20, 20, 20, 20];
    });
    let receiver = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&receiver)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .with_priority(2)
        .mount(&receiver)
        .await;
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/webhooks",
            &app.key,
            &json!({
                "name": "receiver",
                "url": format!("{}/hook", receiver.uri()),
                "events": ["generation.failed"],
            }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // A finished job made to look like its worker died on its last attempt.
    let id = app.submit_image_async(&json!({"prompt": "orphaned"})).await;
    app.wait_for_job(&id, WAIT).await;
    let uuid: uuid::Uuid = id.parse().unwrap();
    app.db
        .client()
        .await
        .execute(
            "UPDATE jobs SET status = 'processing', attempt = 2, output_data = NULL, completed_at = NULL, \
             actual_credits = NULL, lease_expires_at = now() - interval '1 second' WHERE id = $1",
            &[&uuid],
        )
        .await
        .unwrap();
    let job = app.wait_for_job(&id, WAIT).await;
    assert_eq!(job["status"], "failed", "{job}");

    let metrics = scrape_until(
        &app,
        &scheduler_addr,
        "unigen_webhook_attempts_total{outcome=\"succeeded\",result=\"success\"} 1",
    )
    .await;
    assert!(
        has_line(
            &metrics,
            "unigen_job_failures_total{reason=\"worker_lost\",tool=\"image\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        has_line(
            &metrics,
            "unigen_webhook_attempts_total{outcome=\"retry_scheduled\",result=\"http_error\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        has_line(&metrics, "unigen_webhook_attempt_duration_seconds_count 2"),
        "{metrics}"
    );
}
