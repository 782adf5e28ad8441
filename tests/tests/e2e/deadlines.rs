//! `Prefer` (RFC 7240: `wait=N`, `respond-async`) and `Cancel-After` on
//! generation requests.

use std::time::Duration;

use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, json_of};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);
const REASON: &str = "cancelled: Cancel-After deadline passed";

/// `POST` with extra headers.
async fn post(
    app: &TestApp,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url(path))
        .bearer_auth(&app.key)
        .json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("POST")
}

fn preference_applied(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get("Preference-Applied")
        .map(|v| v.to_str().unwrap().to_owned())
}

/// `(included_remaining, purchased, reserved, overage)` of the account.
async fn credits_state(app: &TestApp) -> (i64, i64, i64, i64) {
    let row = app
        .db
        .client()
        .await
        .query_one(
            "SELECT included_remaining, purchased_balance, reserved_credits, overage_credits
               FROM billing_accounts WHERE org_id = $1",
            &[&app.org_id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

/// The image bucket in `GET /quota`: `(used, reserved, remaining)`.
async fn image_quota(app: &TestApp) -> (Value, Value, Value) {
    let quota = json_of(app.get("/api/v1/quota", &app.key).await).await.1;
    let bucket = quota["data"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["bucket"] == "image_generations")
        .unwrap()
        .clone();
    (
        bucket["used"].clone(),
        bucket["reserved"].clone(),
        bucket["remaining"].clone(),
    )
}

async fn reservations_of(app: &TestApp, id: &str) -> i64 {
    app.db
        .scalar_i64(&format!(
            "SELECT count(*) FROM reservations WHERE id = '{id}'"
        ))
        .await
}

/// Polls until the job's `Cancel-After` has passed on the database's clock.
async fn until_deadline_passed(app: &TestApp, id: &str) {
    loop {
        let passed = app
            .db
            .scalar_i64(&format!(
                "SELECT count(*) FROM jobs WHERE id = '{id}' AND cancel_after <= now()"
            ))
            .await;
        if passed == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_wait_answers_the_finished_result_within_the_wait() {
    let app = TestApp::spawn().await;

    let response = post(
        &app,
        "/api/v1/images/generations",
        &[("Prefer", "wait=30")],
        &json!({"prompt": "a quick lighthouse"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(preference_applied(&response).as_deref(), Some("wait=30"));
    let body: Value = response.json().await.unwrap();
    assert!(body["data"][0]["url"].is_string(), "{body}");

    // Over 60 is taken as 60; several headers, parameters and a quoted value.
    let response = post(
        &app,
        "/api/v1/images/generations",
        &[
            ("Prefer", "return=minimal"),
            ("Prefer", "WAIT=\"100\"; foo=bar"),
        ],
        &json!({"prompt": "a quick harbour"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(preference_applied(&response).as_deref(), Some("wait=60"));

    // The legacy envelope too.
    let response = post(
        &app,
        "/api/v1/ai-image/generate",
        &[("Prefer", "wait=30")],
        &json!({"prompt": "a quick legacy lighthouse", "model": "flux-dev"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(preference_applied(&response).as_deref(), Some("wait=30"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["success"], true, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_or_zero_prefer_wait_is_ignored() {
    let app = TestApp::spawn().await;
    for prefer in ["wait=0", "wait=abc", "wait=-5", "wait=1.5", "wait"] {
        let response = post(
            &app,
            "/api/v1/images/generations",
            &[("Prefer", prefer)],
            &json!({"prompt": "a plain sync request"}),
        )
        .await;
        assert_eq!(response.status(), 200, "{prefer}");
        assert_eq!(preference_applied(&response), None, "{prefer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_wait_passing_first_answers_the_async_creation_body() {
    // No worker: the job cannot finish.
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let response = post(
        &app,
        "/api/v1/images/generations",
        &[("Prefer", "wait=1")],
        &json!({"prompt": "never rendered"}),
    )
    .await;
    assert_eq!(response.status(), 202);
    assert_eq!(preference_applied(&response).as_deref(), Some("wait=1"));
    let body: Value = response.json().await.unwrap();
    // `AsyncJobCreated`, as `async=true` answers, not the job itself.
    let id = body["id"].as_str().expect("job id").to_owned();
    assert_eq!(body["status"], "pending");
    assert!(body["estimated_credits"].is_i64(), "{body}");
    assert!(body.get("orgId").is_none(), "{body}");
    assert_eq!(app.job(&id).await["status"], "pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respond_async_answers_at_once_and_an_explicit_async_wins() {
    let app = TestApp::spawn().await;
    let body = json!({"prompt": "a lighthouse"});

    let response = post(
        &app,
        "/api/v1/images/generations",
        &[("Prefer", "respond-async")],
        &body,
    )
    .await;
    assert_eq!(response.status(), 202);
    assert_eq!(
        preference_applied(&response).as_deref(),
        Some("respond-async")
    );
    let created: Value = response.json().await.unwrap();
    assert!(created["id"].is_string(), "{created}");

    // `?async=false` wins over `respond-async`: the finished result.
    let response = post(
        &app,
        "/api/v1/images/generations?async=false",
        &[("Prefer", "respond-async")],
        &body,
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(preference_applied(&response), None);

    // `?async=true` wins over `wait`: answered at once.
    let response = post(
        &app,
        "/api/v1/images/generations?async=true",
        &[("Prefer", "wait=30")],
        &body,
    )
    .await;
    assert_eq!(response.status(), 202);
    assert_eq!(preference_applied(&response), None);
    let created: Value = response.json().await.unwrap();
    assert_eq!(created["status"], "pending");

    // Prefer wins over an endpoint's async default (video is async by default).
    let response = post(
        &app,
        "/api/v1/videos/generations",
        &[("Prefer", "respond-async")],
        &json!({"prompt": "waves", "duration_seconds": 1}),
    )
    .await;
    assert_eq!(response.status(), 202);
    assert_eq!(
        preference_applied(&response).as_deref(),
        Some("respond-async")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_cancel_after_is_cancelled_uncharged_and_frees_its_worker() {
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        s.local_provider.latency_ms = 60_000;
        s.worker.tools = vec!["image".into()];
        s.worker.concurrency = 1;
    }))
    .await;
    // Reading the quota first creates the billing account.
    let quota_before = image_quota(&app).await;
    let credits_before = credits_state(&app).await;

    let response = post(
        &app,
        "/api/v1/images/generations?async=true",
        &[("Cancel-After", "2s")],
        &json!({"prompt": "too slow"}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let first = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = app.submit_image_async(&json!({"prompt": "next"})).await;

    let shown = app.job(&first).await;
    let cancel_after = chrono::DateTime::parse_from_rfc3339(shown["cancelAfter"].as_str().unwrap())
        .expect("cancelAfter is an ISO 8601 time");
    let created =
        chrono::DateTime::parse_from_rfc3339(shown["createdAt"].as_str().unwrap()).unwrap();
    let after = (cancel_after - created).num_milliseconds();
    // Two seconds from the request, which came just before the job's creation.
    assert!(
        (1..=2_000).contains(&after),
        "deadline {after} ms after creation"
    );
    assert!(app.job(&second).await["cancelAfter"].is_null());

    let job = app.wait_for_job(&first, WAIT).await;
    assert_eq!(job["status"], "cancelled", "{job}");
    assert_eq!(job["errorMessage"], REASON);
    assert_eq!(job["actualCredits"], 0);
    assert!(
        job["startedAt"].is_string(),
        "it was running when cancelled: {job}"
    );
    assert_eq!(job["cancelAfter"], shown["cancelAfter"]);
    // The single slot was freed at once (the provider call had a minute to
    // go): the next job is being worked on.
    app.wait_for_status(&second, "processing", Duration::from_secs(10))
        .await;

    let events = app.events().await;
    let failed: Vec<_> = events
        .iter()
        .filter(|(kind, data)| kind == "generation.failed" && data["jobId"] == first.as_str())
        .collect();
    assert_eq!(failed.len(), 1, "{events:?}");
    assert_eq!(failed[0].1["errorMessage"], REASON);
    assert_eq!(reservations_of(&app, &first).await, 0, "released");
    let recorded = app
        .db
        .scalar_i64(&format!(
            "SELECT count(*) FROM usage_records WHERE id = '{first}' AND status = 'cancelled' AND credits = 0"
        ))
        .await;
    assert_eq!(recorded, 1);

    // Only the second job (still running) holds anything.
    app.delete(&format!("/api/v1/jobs/{second}"), &app.key)
        .await;
    assert_eq!(credits_state(&app).await, credits_before);
    assert_eq!(image_quota(&app).await, quota_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_job_past_its_cancel_after_is_never_started() {
    let mut app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let response = post(
        &app,
        "/api/v1/images/generations?async=true",
        &[("Cancel-After", "1")],
        &json!({"prompt": "queued too long"}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let late = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    until_deadline_passed(&app, &late).await;

    // A worker now takes the queue: the late job's message comes first.
    app.spawn_worker(|s| {
        s.worker.tools = vec!["image".into()];
        s.worker.concurrency = 1;
    });
    let later = app.submit_image_async(&json!({"prompt": "in time"})).await;
    assert_eq!(app.wait_for_job(&later, WAIT).await["status"], "completed");
    let job = app.job(&late).await;
    assert_eq!(job["status"], "pending", "not started: {job}");
    assert!(job["startedAt"].is_null(), "{job}");
    assert_eq!(app.attempt_of(&late).await, 0);

    // The scheduler's sweep cancels it.
    let _scheduler = app.spawn_scheduler(|_| {});
    let job = app.wait_for_job(&late, WAIT).await;
    assert_eq!(job["status"], "cancelled", "{job}");
    assert_eq!(job["errorMessage"], REASON);
    assert_eq!(reservations_of(&app, &late).await, 0);
    let started = app
        .events()
        .await
        .into_iter()
        .filter(|(kind, data)| kind == "generation.started" && data["jobId"] == late.as_str())
        .count();
    assert_eq!(started, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_request_whose_job_passes_its_cancel_after_answers_408() {
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        s.local_provider.latency_ms = 60_000;
    }))
    .await;
    image_quota(&app).await;
    let credits_before = credits_state(&app).await;

    for (path, headers) in [
        ("/api/v1/images/generations", vec![("Cancel-After", "1")]),
        // A deadline within a `Prefer: wait` answers as a sync request.
        (
            "/api/v1/images/generations",
            vec![("Cancel-After", "1"), ("Prefer", "wait=30")],
        ),
    ] {
        let response = post(&app, path, &headers, &json!({"prompt": "too slow"})).await;
        let (status, body) = json_of(response).await;
        assert_eq!(status, 408, "{headers:?}: {body}");
        assert_eq!(body["error"]["code"], "deadline_exceeded");
        let message = body["error"]["message"].as_str().unwrap();
        let id = message
            .split_whitespace()
            .find_map(|word| word.parse::<Uuid>().ok())
            .unwrap_or_else(|| panic!("the message names the job: {message}"))
            .to_string();
        let job = app.wait_for_job(&id, WAIT).await;
        assert_eq!(job["status"], "cancelled", "{job}");
        assert_eq!(job["errorMessage"], REASON);
        assert_eq!(job["actualCredits"], 0);
        assert_eq!(reservations_of(&app, &id).await, 0);
    }

    let response = post(
        &app,
        "/api/v1/ai-image/generate",
        &[("Cancel-After", "1")],
        &json!({"prompt": "too slow for the envelope", "model": "flux-dev"}),
    )
    .await;
    let (status, body) = json_of(response).await;
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["success"], false);
    assert_eq!(body["error"]["code"], "deadline_exceeded");

    assert_eq!(credits_state(&app).await, credits_before);
    let failed = app
        .events()
        .await
        .into_iter()
        .filter(|(kind, data)| kind == "generation.failed" && data["errorMessage"] == REASON)
        .count();
    assert_eq!(failed, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_cancel_after_is_a_400_naming_the_header_and_creates_nothing() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    for value in [
        "abc", "0", "0s", "25h", "86401", "24h1s", "1h1h", "-5", "1.5", "1d", "",
    ] {
        let response = post(
            &app,
            "/api/v1/images/generations?async=true",
            &[("Cancel-After", value)],
            &json!({"prompt": "never"}),
        )
        .await;
        let (status, body) = json_of(response).await;
        assert_eq!(status, 400, "`{value}`: {body}");
        assert_eq!(body["error"]["param"], "Cancel-After", "`{value}`: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("Cancel-After must be"),
            "{body}"
        );
    }
    let response = post(
        &app,
        "/api/v1/videos/generations",
        &[("Cancel-After", "2 hours")],
        &json!({"prompt": "waves", "duration_seconds": 1}),
    )
    .await;
    let (status, body) = json_of(response).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "Cancel-After");
    let response = post(
        &app,
        "/api/v1/ai-image/generate",
        &[("Cancel-After", "forever")],
        &json!({"prompt": "never"}),
    )
    .await;
    let (status, body) = json_of(response).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "Cancel-After");
    assert_eq!(app.count_jobs().await, 0);

    // A good one is stored and shown.
    let response = post(
        &app,
        "/api/v1/images/generations?async=true",
        &[("Cancel-After", "1h30m")],
        &json!({"prompt": "later"}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let id = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let job = app.job(&id).await;
    let cancel_after =
        chrono::DateTime::parse_from_rfc3339(job["cancelAfter"].as_str().unwrap()).unwrap();
    let created = chrono::DateTime::parse_from_rfc3339(job["createdAt"].as_str().unwrap()).unwrap();
    let after = (cancel_after - created).num_seconds();
    assert!((5_390..=5_400).contains(&after), "{after}");
}
