//! Job deadlines, retention of finished jobs, and the API's answers while
//! PostgreSQL is unreachable.

use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::json;
use unigen_tests::{FaultProxy, TestApp, TestOptions, json_of};

fn png_base64() -> String {
    let image = image::RgbImage::from_fn(64, 48, |x, y| image::Rgb([x as u8 * 4, y as u8 * 5, 80]));
    let mut bytes = std::io::Cursor::new(Vec::new());
    image.write_to(&mut bytes, image::ImageFormat::Png).unwrap();
    base64::engine::general_purpose::STANDARD.encode(bytes.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_tool_deadline_fails_with_a_reason_and_frees_its_worker() {
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        s.jobs.max_run_seconds.insert("image".into(), 1);
        s.local_provider.latency_ms = 60_000;
        s.worker.tools = vec!["image".into()];
        s.worker.concurrency = 1;
    }))
    .await;
    let first = app.submit_image_async(&json!({"prompt": "too slow"})).await;
    let second = app.submit_image_async(&json!({"prompt": "next"})).await;

    let job = app.wait_for_job(&first, Duration::from_secs(30)).await;
    assert_eq!(job["status"], "failed", "{job}");
    assert_eq!(
        job["errorMessage"],
        "the job exceeded its maximum run time of 1 s"
    );
    assert_eq!(job["actualCredits"], 0);
    // The single slot was freed at once (the provider call had a minute to
    // go): the next job is being worked on.
    app.wait_for_status(&second, "processing", Duration::from_secs(5))
        .await;
    let events = app.events().await;
    let failed: Vec<_> = events
        .iter()
        .filter(|(kind, data)| kind == "generation.failed" && data["jobId"] == first.as_str())
        .collect();
    assert_eq!(failed.len(), 1, "{events:?}");
    assert_eq!(
        failed[0].1["errorMessage"],
        "the job exceeded its maximum run time of 1 s"
    );
    let reserved = app
        .db
        .scalar_i64(&format!(
            "SELECT count(*) FROM reservations WHERE id = '{first}'"
        ))
        .await;
    assert_eq!(reserved, 0, "a failed job consumes nothing");
    let recorded = app
        .db
        .scalar_i64(&format!(
            "SELECT count(*) FROM usage_records WHERE id = '{first}' AND status = 'failed' AND credits = 0"
        ))
        .await;
    assert_eq!(recorded, 1, "the failure counts in usage analytics");
}

/// Hardening finding 9: a job whose message was dead-lettered does not stay
/// `pending` forever with its reservation held: the scheduler fails it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_message_was_dead_lettered_fails_and_releases_its_reservation() {
    // No worker: the job stays pending, as when no consumer can take it.
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let stranded = app.submit_image_async(&json!({"prompt": "stranded"})).await;
    let waiting = app
        .submit_image_async(&json!({"prompt": "still queued"}))
        .await;
    let message =
        json!({"job_id": stranded, "tool": "image", "attempt": app.attempt_of(&stranded).await});
    let raw = app.raw_publisher().await;
    raw.dead_letter("image", message.to_string().as_bytes())
        .await;
    // An unreadable message is taken off the queue too.
    raw.dead_letter("image", b"not a job message").await;

    let job = app
        .wait_for_status(&stranded, "failed", Duration::from_secs(30))
        .await;
    assert_eq!(
        job["errorMessage"],
        "no worker could take the job (its queue message was dead-lettered)"
    );
    assert_eq!(job["actualCredits"], 0);
    let reserved = app
        .db
        .scalar_i64(&format!(
            "SELECT count(*) FROM reservations WHERE id = '{stranded}'"
        ))
        .await;
    assert_eq!(reserved, 0, "its reservation is released");
    let events = app.events().await;
    assert!(
        events
            .iter()
            .any(|(kind, data)| kind == "generation.failed" && data["jobId"] == stranded.as_str()),
        "{events:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while raw.dead_letters("image").await > 0 {
        assert!(
            Instant::now() < deadline,
            "the dead letters were never taken"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        app.job(&waiting).await["status"],
        "pending",
        "other jobs are untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_and_their_files_are_deleted_after_the_retention_time() {
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        s.jobs.retention_seconds = 3;
    }))
    .await;
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/images/edits?async=true",
            &app.key,
            &json!({"image": png_base64(), "operation": "colorization"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let job = app.wait_for_job(&id, Duration::from_secs(30)).await;
    assert_eq!(job["status"], "completed", "{job}");
    let url = job["outputData"]["images"][0]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(app.download(&url).await.status(), 200);
    let files: Vec<_> = walk(&app.settings.storage.dir.join(app.org_id.to_string()));
    assert_eq!(files.len(), 2, "the stored input and the output: {files:?}");

    // A job not finished is never expired, however long ago it was touched.
    let kept = app.submit_image_async(&json!({"prompt": "kept"})).await;
    app.wait_for_job(&kept, Duration::from_secs(30)).await;
    app.sql(&format!(
        "UPDATE jobs SET status = 'processing', completed_at = now() - interval '1 day' WHERE id = '{kept}'"
    ))
    .await;

    let started = Instant::now();
    loop {
        let response = app.get(&format!("/api/v1/jobs/{id}"), &app.key).await;
        if response.status() == 404 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the job was never deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = json_of(app.get(&format!("/api/v1/jobs/{id}"), &app.key).await).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(app.download(&url).await.status(), 404, "the output is gone");
    for file in &files {
        assert!(!file.exists(), "{} was not deleted", file.display());
    }
    assert!(
        !app.settings
            .storage
            .dir
            .join(format!("{}/{id}", app.org_id))
            .exists(),
        "the job's output directory is gone"
    );
    assert_eq!(
        app.db
            .scalar_i64(&format!("SELECT count(*) FROM jobs WHERE id = '{kept}'"))
            .await,
        1,
        "unfinished jobs are kept"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_503_while_postgres_is_unreachable_and_recovers_by_itself() {
    let postgres = std::sync::Arc::new(FaultProxy::postgres().await);
    let proxy = postgres.clone();
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(move |s| s.database.url = proxy.url_via(&s.database.url)),
    )
    .await;
    let (status, _) = json_of(app.get("/api/v1/jobs", &app.key).await).await;
    assert_eq!(status, 200);

    postgres.cut();
    for (status, body) in [
        json_of(app.get("/api/v1/jobs", &app.key).await).await,
        json_of(
            app.post_json(
                "/api/v1/images/generations?async=true",
                &app.key,
                &json!({"prompt": "not now"}),
            )
            .await,
        )
        .await,
        // Even a key the database would reject: its status cannot be known.
        json_of(
            app.get("/api/v1/jobs", &format!("sk_{}", "0".repeat(64)))
                .await,
        )
        .await,
    ] {
        assert_eq!(status, 503, "{body}");
        assert_eq!(
            body["error"],
            json!({"message": "the database is unavailable; retry shortly",
                   "type": "server_error", "code": "service_unavailable", "param": null})
        );
    }
    let (status, body) = json_of(app.client.get(app.url("/readyz")).send().await.unwrap()).await;
    assert_eq!(status, 503);
    assert_eq!(body["checks"]["postgres"], false);

    postgres.restore();
    let restored = Instant::now();
    loop {
        let (status, body) =
            json_of(app.client.get(app.url("/readyz")).send().await.unwrap()).await;
        if status == 200 {
            assert_eq!(body["checks"]["listener"], true);
            break;
        }
        assert!(
            restored.elapsed() < Duration::from_secs(15),
            "never ready again: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = json_of(app.get("/api/v1/jobs", &app.key).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        app.count_jobs().await,
        0,
        "the refused submission wrote nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_api_finishes_the_sync_request_in_flight_and_refuses_new_ones() {
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        s.local_provider.latency_ms = 1_000;
    }))
    .await;
    let in_flight = {
        let (client, url, key) = (
            app.client.clone(),
            app.url("/api/v1/images/generations"),
            app.key.clone(),
        );
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(key)
                .json(&json!({"prompt": "finish me", "size": "512x512"}))
                .send()
                .await
        })
    };
    let started = Instant::now();
    while app.count_jobs().await == 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "no job");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.stop_api();
    let (status, body) = json_of(in_flight.await.unwrap().expect("answered")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"][0]["width"], 512);
    assert!(
        app.client.get(app.url("/healthz")).send().await.is_err(),
        "a stopped API accepts no new connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_stopped_with_sigterm_finishes_the_delivery_in_flight() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let receiver = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_delay(Duration::from_secs(1)))
        .mount(&receiver)
        .await;
    let (status, webhook) = json_of(
        app.post_json(
            "/api/v1/webhooks",
            &app.key,
            &json!({"name": "graceful", "url": format!("{}/hook", receiver.uri()),
                    "events": ["generation.completed"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{webhook}");
    let mut scheduler = app.spawn_process(env!("CARGO_BIN_EXE_unigen-stack"), "scheduler", |_| {});
    let id = webhook["id"].as_str().unwrap();
    let (status, _) = json_of(
        app.post_json(&format!("/api/v1/webhooks/{id}/test"), &app.key, &json!({}))
            .await,
    )
    .await;
    assert!(status < 300);
    let started = Instant::now();
    while receiver.received_requests().await.unwrap().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(20), "no attempt");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let exit = scheduler.terminate(Duration::from_secs(15)).await;
    assert!(exit.success(), "{exit:?}");
    let (status, body) = json_of(
        app.get(&format!("/api/v1/webhooks/{id}/deliveries"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let deliveries = body["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 1, "{body}");
    assert_eq!(
        deliveries[0]["status"], "succeeded",
        "the attempt in flight finished: {body}"
    );
    assert_eq!(deliveries[0]["attempt_count"], 1);
    assert_eq!(receiver.received_requests().await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_their_delivery_history_expire_unless_a_delivery_is_pending() {
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        s.webhooks.event_retention_seconds = 2;
        // A failed attempt waits long for its retry: its delivery stays pending.
        s.webhooks.retry_delays_ms = vec![600_000];
    }))
    .await;
    let register = |kind: &'static str, status: u16| {
        let app = &app;
        async move {
            let receiver = wiremock::MockServer::start().await;
            wiremock::Mock::given(wiremock::matchers::method("POST"))
                .respond_with(wiremock::ResponseTemplate::new(status))
                .mount(&receiver)
                .await;
            let (code, body) = json_of(
                app.post_json(
                    "/api/v1/webhooks",
                    &app.key,
                    &json!({"name": kind, "url": format!("{}/hook", receiver.uri()), "events": [kind]}),
                )
                .await,
            )
            .await;
            assert_eq!(code, 201, "{body}");
            (receiver, body["id"].as_str().unwrap().to_owned())
        }
    };
    let (_delivered_to, delivered) = register("generation.completed", 200).await;
    let (_failing, failing) = register("generation.started", 500).await;
    let id = app
        .submit_image_async(&json!({"prompt": "remembered briefly"}))
        .await;
    app.wait_for_job(&id, Duration::from_secs(30)).await;

    let count = |sql: String| {
        let app = &app;
        async move { app.db.scalar_i64(&sql).await }
    };
    let deliveries_of = |webhook: &str| {
        format!("SELECT count(*) FROM webhook_deliveries WHERE webhook_id = '{webhook}'")
    };
    let started = Instant::now();
    while count(deliveries_of(&delivered)).await != 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the delivered event never expired"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        count("SELECT count(*) FROM events WHERE type = 'generation.completed'".into()).await,
        0,
        "the delivered event is gone with its delivery"
    );
    assert_eq!(
        count("SELECT count(*) FROM events WHERE type = 'generation.started'".into()).await,
        1,
        "an event with a pending delivery is kept"
    );
    assert_eq!(count(deliveries_of(&failing)).await, 1);
    let (status, job) = json_of(app.get(&format!("/api/v1/jobs/{id}"), &app.key).await).await;
    assert_eq!(
        (status, &job["status"]),
        (200, &json!("completed")),
        "jobs keep their own retention"
    );
}
