//! Webhooks: management API, signed delivery to a real loopback receiver
//! (signatures checked with an HMAC written here, independently of the
//! service's), retries, failure, auto-disable, a killed scheduler, two
//! schedulers, and the receiver sample of docs/webhooks.md.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use unigen_tests::{TestApp, TestOptions, json_of};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

pub(crate) const WAIT: Duration = Duration::from_secs(60);

/// HMAC-SHA256 (RFC 2104) from SHA-256 alone: the receiver's own check.
pub(crate) fn hmac_sha256_hex(key: &[u8], message: &[u8]) -> String {
    const BLOCK: usize = 64;
    let mut key = if key.len() > BLOCK {
        Sha256::digest(key).to_vec()
    } else {
        key.to_vec()
    };
    key.resize(BLOCK, 0);
    let pad = |byte: u8| key.iter().map(|k| k ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    hex::encode(outer)
}

#[test]
fn the_tests_own_hmac_matches_rfc_4231() {
    assert_eq!(
        hmac_sha256_hex(b"Jefe", b"what do ya want for nothing?"),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    // Test case 6: a key longer than the block is hashed first.
    assert_eq!(
        hmac_sha256_hex(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First"
        ),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    );
}

/// A loopback receiver: answers `failures` requests with `status`, then 200.
pub(crate) async fn receiver(failures: u64, status: u16) -> MockServer {
    let server = MockServer::start().await;
    if failures > 0 {
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(status))
            .up_to_n_times(failures)
            .with_priority(1)
            .mount(&server)
            .await;
    }
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .with_priority(2)
        .mount(&server)
        .await;
    server
}

pub(crate) fn header<'a>(request: &'a Request, name: &str) -> &'a str {
    request
        .headers
        .get(name)
        .unwrap_or_else(|| panic!("header {name} missing"))
        .to_str()
        .expect("ASCII header")
}

/// Checks a received request the way a receiver must (signature, timestamp
/// tolerance, envelope) and returns the envelope.
pub(crate) fn verified(request: &Request, secret: &str) -> Value {
    assert_eq!(header(request, "content-type"), "application/json");
    let timestamp: i64 = header(request, "x-service-timestamp").parse().unwrap();
    let mut signed = format!("{timestamp}:").into_bytes();
    signed.extend_from_slice(&request.body);
    assert_eq!(
        header(request, "x-service-signature"),
        hmac_sha256_hex(secret.as_bytes(), &signed),
        "signature"
    );
    let age = chrono::Utc::now().timestamp() - timestamp;
    assert!(age.abs() <= 300, "timestamp {age} s away");
    let envelope: Value = serde_json::from_slice(&request.body).expect("JSON body");
    let mut keys: Vec<&str> = envelope
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["data", "id", "orgId", "timestamp", "type"]);
    assert_eq!(envelope["id"], header(request, "x-service-event-id"));
    assert_eq!(envelope["type"], header(request, "x-service-event-type"));
    assert!(
        chrono::DateTime::parse_from_rfc3339(envelope["timestamp"].as_str().unwrap()).is_ok(),
        "ISO 8601 timestamp"
    );
    envelope
}

/// Polls until `check` returns something, or fails after `WAIT`.
pub(crate) async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn requests_of(server: &MockServer, at_least: usize) -> Vec<Request> {
    eventually(&format!("{at_least} requests at the receiver"), || async {
        let requests = server.received_requests().await.unwrap_or_default();
        (requests.len() >= at_least).then_some(requests)
    })
    .await
}

pub(crate) async fn create_webhook(app: &TestApp, key: &str, body: Value) -> (u16, Value) {
    json_of(app.post_json("/api/v1/webhooks", key, &body).await).await
}

/// Registers a webhook for `events` at the receiver; `(id, secret)`.
pub(crate) async fn register(
    app: &TestApp,
    server: &MockServer,
    events: &[&str],
) -> (String, String) {
    let (status, body) = create_webhook(
        app,
        &app.key,
        json!({"name": "receiver", "url": format!("{}/hook", server.uri()), "events": events}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    (
        body["id"].as_str().unwrap().to_owned(),
        body["secret"].as_str().unwrap().to_owned(),
    )
}

pub(crate) async fn deliveries(app: &TestApp, webhook: &str) -> Vec<Value> {
    let (status, body) = json_of(
        app.get(
            &format!("/api/v1/webhooks/{webhook}/deliveries?limit=100"),
            &app.key,
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["deliveries"].as_array().unwrap().clone()
}

/// Waits until every delivery of the webhook is finished and `count` exist.
pub(crate) async fn finished_deliveries(app: &TestApp, webhook: &str, count: usize) -> Vec<Value> {
    eventually("finished deliveries", || async {
        let list = deliveries(app, webhook).await;
        (list.len() == count && list.iter().all(|d| d["status"] != "pending")).then_some(list)
    })
    .await
}

pub(crate) async fn send_test_event(app: &TestApp, webhook: &str) -> String {
    let (status, body) = json_of(
        app.post_json(
            &format!("/api/v1/webhooks/{webhook}/test"),
            &app.key,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    body["event_id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_job_delivers_a_signed_generation_completed_woken_by_the_commit_s_notification() {
    // Polling so slow that only the commit's notification can start the
    // delivery within the test's wait; subscribed to one kind only, so no
    // other delivery's end wakes the scheduler either.
    let app =
        TestApp::spawn_with(TestOptions::default().configure(|s| s.webhooks.poll_seconds = 3600))
            .await;
    let server = receiver(0, 200).await;
    let (webhook, secret) = register(&app, &server, &["generation.completed"]).await;
    let job = app
        .submit_image_async(&json!({"prompt": "a signed delivery", "size": "512x512"}))
        .await;
    app.wait_for_job(&job, WAIT).await;
    let requests = requests_of(&server, 1).await;
    assert_eq!(requests.len(), 1, "only the subscribed kind is delivered");
    let envelope = verified(&requests[0], &secret);
    assert_eq!(envelope["type"], "generation.completed");
    assert_eq!(envelope["orgId"], app.org_id.to_string());
    let completed = &envelope["data"];
    assert_eq!(completed["jobId"], job.as_str());
    assert_eq!(
        (
            completed["tool"].as_str(),
            completed["model"].as_str(),
            completed["unitsUsed"].as_i64(),
            completed["unitType"].as_str()
        ),
        (
            Some("image"),
            Some("local/procedural-v1"),
            Some(1),
            Some("image_generations")
        )
    );
    assert!(completed["durationMs"].as_i64().unwrap() >= 0);
    let output_url = completed["outputUrl"].as_str().unwrap();
    assert_eq!(app.download(output_url).await.status(), 200);

    let list = finished_deliveries(&app, &webhook, 1).await;
    assert_eq!(
        (&list[0]["status"], &list[0]["attempt_count"]),
        (&json!("succeeded"), &json!(1))
    );
    let row = app
        .db
        .client()
        .await
        .query_one(
            "SELECT (extract(epoch FROM a.started_at - j.completed_at) * 1000)::float8, \
                    a.duration_ms \
             FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id \
             JOIN events e ON e.id = d.event_id JOIN jobs j ON j.id = (e.data->>'jobId')::uuid \
             WHERE e.type = 'generation.completed' AND a.number = 1",
            &[],
        )
        .await
        .unwrap();
    let (latency_ms, attempt_ms): (f64, i32) = (row.get(0), row.get(1));
    println!(
        "job completed -> first delivery attempt started: {latency_ms:.1} ms; the attempt took {attempt_ms} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_delivers_generation_started_then_generation_failed_with_its_reason() {
    let app = TestApp::spawn_with(
        TestOptions::default().configure(|s| s.local_provider.failure_rate = 1.0),
    )
    .await;
    let server = receiver(0, 200).await;
    let (_, secret) = register(&app, &server, &["generation.started", "generation.failed"]).await;
    let job = app.submit_image_async(&json!({"prompt": "doomed"})).await;
    app.wait_for_job(&job, WAIT).await;
    let requests = requests_of(&server, 2).await;
    let mut by_type: HashMap<String, Value> = HashMap::new();
    for request in &requests {
        let envelope = verified(request, &secret);
        by_type.insert(envelope["type"].as_str().unwrap().to_owned(), envelope);
    }
    assert_eq!(by_type.len(), 2, "{by_type:?}");
    assert_eq!(
        by_type["generation.started"]["data"],
        json!({"jobId": job, "tool": "image", "model": "local/procedural-v1"})
    );
    let data = &by_type["generation.failed"]["data"];
    assert_eq!(
        (
            data["jobId"].as_str(),
            data["tool"].as_str(),
            data["model"].as_str()
        ),
        (
            Some(job.as_str()),
            Some("image"),
            Some("local/procedural-v1")
        )
    );
    assert!(
        data["errorMessage"]
            .as_str()
            .unwrap()
            .contains("injected failure")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_fan_out_only_to_enabled_subscribed_webhooks_of_their_organization() {
    let app = TestApp::spawn().await;
    let listening = receiver(0, 200).await;
    let (listening_id, _) = register(&app, &listening, &["generation.completed"]).await;
    let others = receiver(0, 200).await;
    let url = format!("{}/hook", others.uri());
    let (status, _) = create_webhook(
        &app,
        &app.key,
        json!({"name": "disabled", "url": url, "events": ["generation.completed"], "enabled": false}),
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = create_webhook(
        &app,
        &app.key,
        json!({"name": "other kind", "url": url, "events": ["credits.low"]}),
    )
    .await;
    assert_eq!(status, 201);
    let other_org = app.create_org("Other", "pro").await;
    let other_key = app.create_key(other_org, &["all"], None).await;
    let (status, _) = create_webhook(
        &app,
        &other_key,
        json!({"name": "other org", "url": url, "events": ["generation.completed"]}),
    )
    .await;
    assert_eq!(status, 201);

    let job = app.submit_image_async(&json!({"prompt": "fan-out"})).await;
    app.wait_for_job(&job, WAIT).await;
    finished_deliveries(&app, &listening_id, 1).await;
    let deliveries = app
        .db
        .scalar_i64("SELECT count(*) FROM webhook_deliveries")
        .await;
    assert_eq!(deliveries, 1, "one delivery, to the enabled subscriber");
    assert!(others.received_requests().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_management_validates_fields_scopes_organizations_and_shows_the_secret_once() {
    // Production rules for targets: https only, no private addresses.
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure_api(|s| s.webhooks.allow_private_addresses = false),
    )
    .await;
    let valid = json!({"name": "orders", "url": "https://hooks.example.com/in", "events": ["generation.completed"]});
    for (patch, param, fragment) in [
        (
            json!({"url": "http://hooks.example.com/in"}),
            "url",
            "https",
        ),
        (json!({"url": "https://127.0.0.1/in"}), "url", "private"),
        (
            json!({"events": ["generation.finished"]}),
            "events",
            "generation.finished",
        ),
        (json!({"events": []}), "events", "at least one"),
        (json!({"name": "n".repeat(101)}), "name", "100"),
        (
            json!({"headers": {"X-Service-Signature": "forged"}}),
            "headers",
            "reserved",
        ),
    ] {
        let mut body = valid.clone();
        for (k, v) in patch.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, error) = create_webhook(&app, &app.key, body).await;
        assert_eq!(status, 400, "{patch}: {error}");
        assert_eq!(error["error"]["param"], param, "{error}");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains(fragment),
            "{error}"
        );
    }
    let no_scope = app.create_key(app.org_id, &["image"], None).await;
    let (status, error) = create_webhook(&app, &no_scope, valid.clone()).await;
    assert_eq!(status, 403);
    assert_eq!(
        error["error"]["message"],
        "API key does not have required scope: webhooks"
    );

    let mut with_headers = valid.clone();
    with_headers["headers"] = json!({"Authorization": "Bearer receiver-token"});
    with_headers["enabled"] = json!(false);
    let (status, created) = create_webhook(&app, &app.key, with_headers).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{created}");
    assert_eq!(created["enabled"], false);
    assert_eq!(
        created["headers"],
        json!({"authorization": "Bearer receiver-token"})
    );

    let (_, read) = json_of(app.get(&format!("/api/v1/webhooks/{id}"), &app.key).await).await;
    assert!(read.get("secret").is_none(), "{read}");
    assert_eq!(read["url"], "https://hooks.example.com/in");
    let (_, list) = json_of(app.get("/api/v1/webhooks", &app.key).await).await;
    assert_eq!(list["webhooks"].as_array().unwrap().len(), 1);
    assert!(list["webhooks"][0].get("secret").is_none());

    let (status, rotated) = json_of(
        app.post_json(
            &format!("/api/v1/webhooks/{id}/rotate-secret"),
            &app.key,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    let new_secret = rotated["secret"].as_str().unwrap();
    assert!(new_secret.starts_with("whsec_") && new_secret != secret);

    let patched = app
        .client
        .patch(app.url(&format!("/api/v1/webhooks/{id}")))
        .bearer_auth(&app.key)
        .json(&json!({"name": "renamed", "events": ["credits.low", "credits.depleted"], "enabled": true}))
        .send()
        .await
        .unwrap();
    let (status, patched) = json_of(patched).await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(
        (&patched["name"], &patched["events"], &patched["enabled"]),
        (
            &json!("renamed"),
            &json!(["credits.low", "credits.depleted"]),
            &json!(true)
        )
    );

    // Another organization sees nothing of it.
    let other_org = app.create_org("Other", "pro").await;
    let other_key = app.create_key(other_org, &["all"], None).await;
    for path in [
        format!("/api/v1/webhooks/{id}"),
        format!("/api/v1/webhooks/{id}/deliveries"),
    ] {
        assert_eq!(app.get(&path, &other_key).await.status(), 404, "{path}");
    }
    let (status, _) = json_of(
        app.post_json(
            &format!("/api/v1/webhooks/{id}/test"),
            &other_key,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(
        app.delete(&format!("/api/v1/webhooks/{id}"), &other_key)
            .await
            .status(),
        404
    );
    let (_, others) = json_of(app.get("/api/v1/webhooks", &other_key).await).await;
    assert_eq!(others["webhooks"], json!([]));

    assert_eq!(
        app.delete(&format!("/api/v1/webhooks/{id}"), &app.key)
            .await
            .status(),
        204
    );
    assert_eq!(
        app.get(&format!("/api/v1/webhooks/{id}"), &app.key)
            .await
            .status(),
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_allow_no_webhooks_on_free_and_five_on_pro() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let body = json!({"name": "w", "url": "https://hooks.example.com/in", "events": ["generation.completed"]});
    let free_org = app.create_org("Free org", "free").await;
    let free_key = app.create_key(free_org, &["all"], None).await;
    let (status, error) = create_webhook(&app, &free_key, body.clone()).await;
    assert_eq!(status, 403, "{error}");
    assert_eq!(
        error["error"]["message"],
        "Webhooks are not available on the Free plan"
    );

    for n in 0..5 {
        let (status, created) = create_webhook(&app, &app.key, body.clone()).await;
        assert_eq!(status, 201, "webhook {n}: {created}");
    }
    let (status, error) = create_webhook(&app, &app.key, body.clone()).await;
    assert_eq!(status, 402, "{error}");
    assert_eq!(
        error["error"]["message"],
        "Webhook limit reached: the Pro plan allows 5 webhooks"
    );
    assert_eq!(error["error"]["code"], "limit_reached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_down_for_two_attempts_gets_the_third_on_the_retry_schedule() {
    let delays_ms = [300u64, 600, 900, 1200];
    let app = TestApp::spawn_with(
        TestOptions::default().configure(move |s| s.webhooks.retry_delays_ms = delays_ms.to_vec()),
    )
    .await;
    let server = receiver(2, 503).await;
    let (webhook, secret) = register(&app, &server, &["generation.completed"]).await;
    let job = app
        .submit_image_async(&json!({"prompt": "retried delivery"}))
        .await;
    app.wait_for_job(&job, WAIT).await;
    let waiting = eventually("a failed attempt with a retry scheduled", || async {
        let list = deliveries(&app, &webhook).await;
        list.first()
            .filter(|d| {
                d["status"] == "pending" && d["attempts"].as_array().is_some_and(|a| !a.is_empty())
            })
            .cloned()
    })
    .await;
    assert!(waiting["next_attempt_at"].is_string(), "{waiting}");
    println!(
        "while retrying ->\n{}",
        serde_json::to_string_pretty(&waiting).unwrap()
    );
    let event_id = waiting["event_id"].as_str().unwrap().to_owned();
    let list = finished_deliveries(&app, &webhook, 1).await;
    let delivery = &list[0];
    println!(
        "GET /api/v1/webhooks/{webhook}/deliveries ->\n{}",
        serde_json::to_string_pretty(&json!({"deliveries": list})).unwrap()
    );
    assert_eq!(delivery["status"], "succeeded", "{delivery}");
    assert_eq!(delivery["event_id"], event_id.as_str());
    assert_eq!(delivery["event_type"], "generation.completed");
    assert_eq!(delivery["attempt_count"], 3);
    assert_eq!(delivery["last_status_code"], 200);
    assert_eq!(delivery["next_attempt_at"], Value::Null);
    let attempts = delivery["attempts"].as_array().unwrap();
    let codes: Vec<i64> = attempts
        .iter()
        .map(|a| a["status_code"].as_i64().unwrap())
        .collect();
    assert_eq!(codes, [503, 503, 200]);
    // Each retry waited at least its configured delay.
    let started: Vec<chrono::DateTime<chrono::Utc>> = attempts
        .iter()
        .map(|a| a["started_at"].as_str().unwrap().parse().unwrap())
        .collect();
    for (n, pair) in started.windows(2).enumerate() {
        let gap = (pair[1] - pair[0]).num_milliseconds();
        assert!(gap >= delays_ms[n] as i64, "retry {} after {gap} ms", n + 2);
    }
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        let envelope = verified(request, &secret);
        assert_eq!(envelope["id"], event_id.as_str(), "same event every time");
        assert_eq!(envelope["data"]["jobId"], job.as_str());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_fails_five_times_is_failed_and_counted_against_the_webhook() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.webhooks.retry_delays_ms = vec![20, 20, 20, 20]),
    )
    .await;
    let server = receiver(u64::MAX, 500).await;
    let (webhook, _) = register(&app, &server, &["generation.completed"]).await;
    send_test_event(&app, &webhook).await;
    let list = finished_deliveries(&app, &webhook, 1).await;
    assert_eq!(list[0]["status"], "failed", "{list:?}");
    assert_eq!(list[0]["attempt_count"], 5);
    assert_eq!(list[0]["attempts"].as_array().unwrap().len(), 5);
    assert_eq!(list[0]["last_status_code"], 500);
    assert_eq!(server.received_requests().await.unwrap().len(), 5);
    let (_, read) = json_of(
        app.get(&format!("/api/v1/webhooks/{webhook}"), &app.key)
            .await,
    )
    .await;
    assert_eq!(read["consecutive_failures"], 1);
    assert_eq!(read["enabled"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_consecutive_failed_deliveries_disable_the_webhook_until_it_is_re_enabled() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.webhooks.retry_delays_ms = vec![10, 10, 10, 10]),
    )
    .await;
    // 10 deliveries x 5 attempts fail; everything after succeeds.
    let server = receiver(50, 500).await;
    let (webhook, _) = register(&app, &server, &["generation.completed"]).await;
    for _ in 0..10 {
        send_test_event(&app, &webhook).await;
    }
    let list = finished_deliveries(&app, &webhook, 10).await;
    assert!(list.iter().all(|d| d["status"] == "failed"), "{list:?}");
    let path = format!("/api/v1/webhooks/{webhook}");
    let (_, read) = json_of(app.get(&path, &app.key).await).await;
    assert_eq!(read["enabled"], false, "{read}");
    assert_eq!(read["consecutive_failures"], 10);
    assert!(read["disabled_at"].is_string());
    assert!(
        read["disabled_reason"]
            .as_str()
            .unwrap()
            .contains("10 consecutive")
    );
    let (status, body) = json_of(
        app.post_json(&format!("{path}/test"), &app.key, &json!({}))
            .await,
    )
    .await;
    assert_eq!(
        status, 409,
        "a disabled webhook takes no test event: {body}"
    );
    assert_eq!(body["error"]["code"], "webhook_disabled", "{body}");

    let response = app
        .client
        .patch(app.url(&path))
        .bearer_auth(&app.key)
        .json(&json!({"enabled": true}))
        .send()
        .await
        .unwrap();
    let (status, enabled) = json_of(response).await;
    assert_eq!(status, 200);
    assert_eq!(
        (
            &enabled["enabled"],
            &enabled["consecutive_failures"],
            &enabled["disabled_at"]
        ),
        (&json!(true), &json!(0), &Value::Null)
    );
    send_test_event(&app, &webhook).await;
    let list = finished_deliveries(&app, &webhook, 11).await;
    assert_eq!(list[0]["status"], "succeeded", "newest first: {list:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_not_followed_and_slow_receivers_time_out() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(|s| {
        s.webhooks.retry_delays_ms = vec![10, 10, 10, 10];
        s.webhooks.timeout_ms = 300;
    }))
    .await;
    let elsewhere = receiver(0, 200).await;
    let redirecting = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(307)
                .insert_header("location", format!("{}/hook", elsewhere.uri())),
        )
        .mount(&redirecting)
        .await;
    let slow = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(5)))
        .mount(&slow)
        .await;
    let (redirected, _) = register(&app, &redirecting, &["generation.completed"]).await;
    let (timed_out, _) = register(&app, &slow, &["generation.completed"]).await;
    send_test_event(&app, &redirected).await;
    send_test_event(&app, &timed_out).await;

    let list = finished_deliveries(&app, &redirected, 1).await;
    assert_eq!(
        (&list[0]["status"], &list[0]["last_status_code"]),
        (&json!("failed"), &json!(307))
    );
    assert!(elsewhere.received_requests().await.unwrap().is_empty());
    let list = finished_deliveries(&app, &timed_out, 1).await;
    assert_eq!(list[0]["status"], "failed");
    assert_eq!(list[0]["last_status_code"], Value::Null);
    assert_eq!(list[0]["last_error"], "timed out after 300 ms");
    assert_eq!(list[0]["attempts"].as_array().unwrap().len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_target_is_refused_at_delivery_time_without_a_request() {
    // Registered while allowed (the API's switch), delivered by a scheduler
    // with production rules: as if the name had moved to a private address.
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| {
                s.webhooks.allow_private_addresses = false;
                s.webhooks.retry_delays_ms = vec![10, 10, 10, 10];
            })
            .configure_api(|s| s.webhooks.allow_private_addresses = true),
    )
    .await;
    let server = receiver(0, 200).await;
    let (literal, _) = register(&app, &server, &["generation.completed"]).await;
    // A host name is checked by the resolver, after DNS.
    let by_name = server.uri().replace("127.0.0.1", "localhost");
    let (status, created) = create_webhook(
        &app,
        &app.key,
        json!({"name": "by name", "url": format!("{by_name}/hook"), "events": ["generation.completed"]}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let named = created["id"].as_str().unwrap().to_owned();
    for (webhook, reason) in [
        (&literal, "points to a private or loopback address"),
        (&named, "resolves to no public address"),
    ] {
        send_test_event(&app, webhook).await;
        let list = finished_deliveries(&app, webhook, 1).await;
        assert_eq!(list[0]["status"], "failed", "{list:?}");
        assert!(
            list[0]["last_error"].as_str().unwrap().contains(reason),
            "{reason}: {list:?}"
        );
    }
    assert!(server.received_requests().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_killed_mid_attempt_leaves_the_delivery_to_a_restarted_one() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let server = MockServer::start().await;
    // The first request hangs long past the kill; later ones succeed.
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(30)))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .with_priority(2)
        .mount(&server)
        .await;
    let short_lease = |s: &mut unigen_core::config::Settings| {
        // Long enough that the kill surely lands before the attempt's own timeout.
        s.webhooks.timeout_ms = 5_000;
        s.webhooks.lease_margin_ms = 500;
    };
    let first = app.spawn_scheduler(short_lease);
    let (webhook, secret) = register(&app, &server, &["generation.completed"]).await;
    let event_id = send_test_event(&app, &webhook).await;
    requests_of(&server, 1).await;
    first.abort();
    let _ = first.await;
    let _second = app.spawn_scheduler(short_lease);
    let list = finished_deliveries(&app, &webhook, 1).await;
    assert_eq!(list[0]["status"], "succeeded", "{list:?}");
    assert_eq!(
        list[0]["attempt_count"], 2,
        "the killed attempt counts as started"
    );
    let attempts = list[0]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "the killed attempt never finished");
    assert_eq!(
        (&attempts[0]["number"], &attempts[0]["status_code"]),
        (&json!(2), &json!(200))
    );
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(verified(request, &secret)["id"], event_id.as_str());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schedulers_attempt_each_delivery_exactly_once() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let _a = app.spawn_scheduler(|_| {});
    let _b = app.spawn_scheduler(|_| {});
    let server = receiver(0, 200).await;
    let (webhook, secret) = register(&app, &server, &["generation.completed"]).await;
    let mut sent = Vec::new();
    for _ in 0..30 {
        sent.push(send_test_event(&app, &webhook).await);
    }
    let list = finished_deliveries(&app, &webhook, 30).await;
    assert!(
        list.iter()
            .all(|d| d["status"] == "succeeded" && d["attempt_count"] == 1),
        "{list:?}"
    );
    let requests = requests_of(&server, 30).await;
    let mut per_event: HashMap<String, usize> = HashMap::new();
    for request in &requests {
        let id = verified(request, &secret)["id"]
            .as_str()
            .unwrap()
            .to_owned();
        *per_event.entry(id).or_default() += 1;
    }
    assert_eq!(per_event.len(), 30);
    assert!(per_event.values().all(|n| *n == 1), "{per_event:?}");
    assert!(sent.iter().all(|id| per_event.contains_key(id)));
}

/// The first ```python block of docs/webhooks.md: the receiver sample.
fn documented_python_receiver() -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/webhooks.md"))
        .expect("docs/webhooks.md");
    let start = doc.find("```python\n").expect("a python block") + "```python\n".len();
    let end = start + doc[start..].find("\n```").expect("the block's end");
    doc[start..end].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_python_receiver_accepts_a_real_delivery_and_rejects_forgeries() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let server = receiver(0, 200).await;
    let (webhook, secret) = register(&app, &server, &["generation.completed"]).await;
    send_test_event(&app, &webhook).await;
    let request = requests_of(&server, 1).await.remove(0);
    let body = String::from_utf8(request.body.clone()).unwrap();
    let headers: HashMap<&str, &str> = [
        "x-service-signature",
        "x-service-timestamp",
        "x-service-event-id",
        "x-service-event-type",
    ]
    .into_iter()
    .map(|name| (name, header(&request, name)))
    .collect();
    let tampered_body = body.replace("webhook.test", "webhook.tost");
    // A stale request, correctly signed (with the test's own HMAC) but 400 s old.
    let old = chrono::Utc::now().timestamp() - 400;
    let mut stale_headers = headers.clone();
    let stale_timestamp = old.to_string();
    let stale_signature = hmac_sha256_hex(secret.as_bytes(), format!("{old}:{body}").as_bytes());
    stale_headers.insert("x-service-timestamp", &stale_timestamp);
    stale_headers.insert("x-service-signature", &stale_signature);
    let cases = json!({
        "secret": secret,
        "requests": [
            {"headers": headers, "body": body},
            {"headers": headers, "body": body},
            {"headers": headers, "body": tampered_body},
            {"headers": stale_headers, "body": body},
        ],
    });
    let driver = r#"
import json, sys
cases = json.load(sys.stdin)
verifier = WebhookVerifier(cases["secret"])
for case in cases["requests"]:
    try:
        event = verifier.verify(case["headers"], case["body"].encode())
        print("duplicate" if event is None else "accepted " + event["type"])
    except ValueError as err:
        print("rejected: " + str(err))
"#;
    let script = format!("{}\n{driver}", documented_python_receiver());
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = root.join(".venv/bin/python");
    let python = if venv.exists() {
        venv
    } else {
        "python3".into()
    };
    let mut child = tokio::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python");
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(cases.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert_eq!(lines[0], "accepted webhook.test");
    assert_eq!(lines[1], "duplicate");
    assert!(
        lines[2].starts_with("rejected: ") && lines[2].contains("signature"),
        "{stdout}"
    );
    assert!(
        lines[3].starts_with("rejected: ") && lines[3].contains("timestamp"),
        "{stdout}"
    );
}
