use std::time::{Duration, Instant};

use serde_json::json;
use unigen_tests::{TestApp, TestOptions, json_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_list_is_newest_first_and_filters_by_tool_pending_and_limit() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            app.submit_image_async(&json!({"prompt": format!("job {i}")}))
                .await,
        );
    }
    app.delete(&format!("/api/v1/jobs/{}", ids[0]), &app.key)
        .await;

    let (status, body) = json_of(app.get("/api/v1/jobs", &app.key).await).await;
    assert_eq!(status, 200);
    let listed: Vec<&str> = body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        vec![ids[2].as_str(), ids[1].as_str(), ids[0].as_str()]
    );
    assert_eq!(body["jobs"][0]["tool"], "image");
    assert_eq!(body["jobs"][0]["orgId"], app.org_id.to_string());

    let (_, body) = json_of(app.get("/api/v1/jobs?pending=true", &app.key).await).await;
    assert_eq!(
        body["jobs"].as_array().unwrap().len(),
        2,
        "the cancelled job is not pending"
    );
    let (_, body) = json_of(app.get("/api/v1/jobs?limit=1", &app.key).await).await;
    assert_eq!(body["jobs"].as_array().unwrap().len(), 1);
    let (_, body) = json_of(app.get("/api/v1/jobs?tool=video", &app.key).await).await;
    assert!(body["jobs"].as_array().unwrap().is_empty());

    for (query, message) in [
        ("limit=0", "limit must be an integer from 1 to 100, got `0`"),
        (
            "limit=101",
            "limit must be an integer from 1 to 100, got `101`",
        ),
        (
            "limit=ten",
            "limit must be an integer from 1 to 100, got `ten`",
        ),
        (
            "tool=poetry",
            "tool: `poetry` is not one of: image, image_edit, video, music, tts, stt, responses",
        ),
        (
            "pending=perhaps",
            "pending must be true or false, got `perhaps`",
        ),
    ] {
        let (status, body) =
            json_of(app.get(&format!("/api/v1/jobs?{query}"), &app.key).await).await;
        assert_eq!(status, 400, "{query}");
        assert_eq!(body["error"]["message"], message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_returns_as_soon_as_the_job_completes() {
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        s.local_provider.latency_ms = 1_500;
        s.jobs.long_poll_seconds = 25;
        // Without notifications a waiter would only notice at this re-check.
        s.notify.recheck_seconds = 20;
    }))
    .await;
    let id = app.submit_image_async(&json!({"prompt": "waiting"})).await;
    let started = Instant::now();
    let (status, job) = json_of(
        app.get(&format!("/api/v1/jobs/{id}?poll=true"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(job["status"], "completed", "{job}");
    // Returned on the completion notification, far before the poll limit and
    // the periodic re-check.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_answers_with_the_current_state_at_the_limit() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.jobs.long_poll_seconds = 1),
    )
    .await;
    let id = app
        .submit_image_async(&json!({"prompt": "nobody works"}))
        .await;
    let started = Instant::now();
    let (status, job) = json_of(
        app.get(&format!("/api/v1/jobs/{id}?poll=true"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(job["status"], "pending");
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_wakes_on_cancel() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(|s| {
        s.jobs.long_poll_seconds = 25;
        s.notify.recheck_seconds = 20;
    }))
    .await;
    let id = app
        .submit_image_async(&json!({"prompt": "cancel me"}))
        .await;
    let poll = {
        let (client, url, key) = (
            app.client.clone(),
            app.url(&format!("/api/v1/jobs/{id}?poll=true")),
            app.key.clone(),
        );
        tokio::spawn(async move { client.get(url).bearer_auth(key).send().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    assert_eq!(
        app.delete(&format!("/api/v1/jobs/{id}"), &app.key)
            .await
            .status(),
        200
    );
    let (_, job) = json_of(poll.await.unwrap()).await;
    assert_eq!(job["status"], "cancelled");
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_pending_job_succeeds_once_and_then_is_a_400() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let id = app
        .submit_image_async(&json!({"prompt": "never mind"}))
        .await;
    let (status, body) = json_of(app.delete(&format!("/api/v1/jobs/{id}"), &app.key).await).await;
    assert_eq!((status, body), (200, json!({"success": true})));
    let job = app.job(&id).await;
    assert_eq!(job["status"], "cancelled");
    assert!(job["completedAt"].is_string());
    let (status, body) = json_of(app.delete(&format!("/api/v1/jobs/{id}"), &app.key).await).await;
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["message"],
        "job cannot be cancelled: it is already cancelled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_completed_job_is_a_400_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let id = app.submit_image_async(&json!({"prompt": "done"})).await;
    let before = app.wait_for_job(&id, Duration::from_secs(30)).await;
    assert_eq!(before["status"], "completed");
    let (status, body) = json_of(app.delete(&format!("/api/v1/jobs/{id}"), &app.key).await).await;
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["message"],
        "job cannot be cancelled: it is already completed"
    );
    assert_eq!(body["error"]["code"], "job_finished");
    let after = app.job(&id).await;
    assert_eq!(after["status"], "completed");
    assert_eq!(
        after["outputData"]["images"][0]["width"],
        before["outputData"]["images"][0]["width"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_processing_job_cancelled_never_turns_completed() {
    let app = TestApp::spawn_with(
        TestOptions::default().configure(|s| s.local_provider.latency_ms = 1_500),
    )
    .await;
    let id = app
        .submit_image_async(&json!({"prompt": "interrupted"}))
        .await;
    app.wait_for_status(&id, "processing", Duration::from_secs(20))
        .await;
    assert_eq!(
        app.delete(&format!("/api/v1/jobs/{id}"), &app.key)
            .await
            .status(),
        200
    );
    // Longer than the provider call: a worker that ignored the cancel would finish by now.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let job = app.job(&id).await;
    assert_eq!(job["status"], "cancelled", "{job}");
    assert!(job["outputData"].is_null());
    assert!(job["actualCredits"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_organizations_job_is_a_404_like_an_unknown_id() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let id = app.submit_image_async(&json!({"prompt": "private"})).await;
    let other_org = app.create_org("Other", "pro").await;
    let other_key = app.create_key(other_org, &["all"], None).await;

    let unknown = uuid::Uuid::now_v7();
    for (path_id, label) in [
        (id.clone(), "foreign"),
        (unknown.to_string(), "unknown"),
        ("not-a-uuid".into(), "garbage"),
    ] {
        let (status, body) = json_of(
            app.get(&format!("/api/v1/jobs/{path_id}"), &other_key)
                .await,
        )
        .await;
        assert_eq!(status, 404, "{label}");
        assert_eq!(body["error"]["message"], format!("job {path_id} not found"));
        let (status, _) = json_of(
            app.get(&format!("/api/v1/jobs/{path_id}?poll=true"), &other_key)
                .await,
        )
        .await;
        assert_eq!(status, 404, "{label} poll");
        let (status, _) = json_of(
            app.delete(&format!("/api/v1/jobs/{path_id}"), &other_key)
                .await,
        )
        .await;
        assert_eq!(status, 404, "{label} cancel");
    }
    let (_, list) = json_of(app.get("/api/v1/jobs", &other_key).await).await;
    assert!(list["jobs"].as_array().unwrap().is_empty());
    assert_eq!(
        app.job(&id).await["status"],
        "pending",
        "the other org's cancel changed nothing"
    );
}
