//! The event outbox: written with the state change it reports.

use std::time::Duration;

use serde_json::json;
use unigen_tests::{TestApp, TestOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_job_records_started_then_completed_with_the_spec_payload() {
    let app = TestApp::spawn().await;
    let id = app
        .submit_image_async(&json!({"prompt": "evented", "size": "512x512", "n": 2}))
        .await;
    app.wait_for_job(&id, Duration::from_secs(30)).await;
    let events = app.events().await;
    let kinds: Vec<&str> = events.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(kinds, ["generation.started", "generation.completed"]);
    let started = &events[0].1;
    assert_eq!(
        started,
        &json!({"jobId": id, "tool": "image", "model": "local/procedural-v1"})
    );
    let completed = &events[1].1;
    assert_eq!(
        (completed["jobId"].as_str(), completed["tool"].as_str()),
        (Some(id.as_str()), Some("image"))
    );
    assert_eq!(
        (
            completed["unitsUsed"].as_u64(),
            completed["unitType"].as_str()
        ),
        (Some(2), Some("image_generations"))
    );
    assert!(completed["durationMs"].as_i64().unwrap() >= 0);
    let url = completed["outputUrl"].as_str().unwrap();
    assert_eq!(
        app.download(url).await.status(),
        200,
        "the event's outputUrl downloads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_records_generation_failed_with_its_reason_and_a_cancelled_one_nothing() {
    let app = TestApp::spawn_with(
        TestOptions::default().configure(|s| s.local_provider.failure_rate = 1.0),
    )
    .await;
    let id = app.submit_image_async(&json!({"prompt": "doomed"})).await;
    app.wait_for_job(&id, Duration::from_secs(30)).await;
    let events = app.events().await;
    assert_eq!(events.len(), 2, "{events:?}");
    let (kind, data) = &events[1];
    assert_eq!(kind, "generation.failed");
    assert_eq!(
        (data["jobId"].as_str(), data["model"].as_str()),
        (Some(id.as_str()), Some("local/procedural-v1"))
    );
    assert!(
        data["errorMessage"]
            .as_str()
            .unwrap()
            .contains("injected failure")
    );

    let quiet = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let pending = quiet
        .submit_image_async(&json!({"prompt": "never mind"}))
        .await;
    assert_eq!(
        quiet
            .delete(&format!("/api/v1/jobs/{pending}"), &quiet.key)
            .await
            .status(),
        200
    );
    assert!(
        quiet.events().await.is_empty(),
        "no generation events for a job that never ran"
    );
}
