//! Webhook delivery tools: redelivery of one delivery, replay of failed
//! deliveries, the Standard Webhooks headers (checked here with an HMAC of
//! the test's own and by the `standardwebhooks` PyPI library), 410 Gone and
//! `Retry-After`.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, json_of};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use crate::clients::{client_command, root, run_to_success};
use crate::webhooks::{
    deliveries, eventually, finished_deliveries, header, hmac_sha256_hex, receiver, register,
    requests_of, send_test_event, verified,
};

/// Checks the Standard Webhooks headers the way the specification says,
/// with the key decoded from the secret's base64 part, and that they name
/// the same event and time as the `x-service-*` ones. Returns `webhook-id`.
fn standard_verified(request: &Request, secret: &str) -> String {
    let id = header(request, "webhook-id");
    let timestamp = header(request, "webhook-timestamp");
    assert_eq!(id, header(request, "x-service-event-id"));
    assert_eq!(timestamp, header(request, "x-service-timestamp"));
    let key = BASE64
        .decode(secret.strip_prefix("whsec_").expect("whsec_ secret"))
        .expect("base64 secret");
    let mut signed = format!("{id}.{timestamp}.").into_bytes();
    signed.extend_from_slice(&request.body);
    let mac = hex::decode(hmac_sha256_hex(&key, &signed)).unwrap();
    assert_eq!(
        header(request, "webhook-signature"),
        format!("v1,{}", BASE64.encode(mac)),
        "webhook-signature"
    );
    id.to_owned()
}

async fn post(app: &TestApp, key: &str, path: &str, body: Value) -> (u16, Value) {
    json_of(app.post_json(path, key, &body).await).await
}

fn redeliver_path(webhook: &str, delivery: &str) -> String {
    format!("/api/v1/webhooks/{webhook}/deliveries/{delivery}/redeliver")
}

async fn webhook_of(app: &TestApp, webhook: &str) -> Value {
    let (status, body) = json_of(
        app.get(&format!("/api/v1/webhooks/{webhook}"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The only delivery of `webhook` once it has `attempts` recorded attempts.
async fn delivery_with_attempts(app: &TestApp, webhook: &str, attempts: usize) -> Value {
    eventually(&format!("a delivery with {attempts} attempts"), || async {
        let list = deliveries(app, webhook).await;
        list.first()
            .filter(|d| {
                d["attempts"]
                    .as_array()
                    .is_some_and(|a| a.len() == attempts)
            })
            .cloned()
    })
    .await
}

fn time(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .unwrap_or_else(|| panic!("a time, got {value}"))
        .parse()
        .unwrap()
}

fn status_codes(delivery: &Value) -> Vec<i64> {
    delivery["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status_code"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivery_attempts_a_finished_delivery_once_more_with_the_same_event_id() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.webhooks.retry_delays_ms = vec![10, 10, 10, 10]),
    )
    .await;
    // The 5 scheduled attempts and the first redelivery fail; then 200.
    let server = receiver(6, 500).await;
    let (webhook, secret) = register(&app, &server, &["generation.completed"]).await;
    let event_id = send_test_event(&app, &webhook).await;
    let list = finished_deliveries(&app, &webhook, 1).await;
    assert_eq!(list[0]["status"], "failed", "{list:?}");
    assert_eq!(list[0]["attempt_count"], 5);
    assert_eq!(webhook_of(&app, &webhook).await["consecutive_failures"], 1);
    let delivery_id = list[0]["id"].as_str().unwrap().to_owned();
    let path = redeliver_path(&webhook, &delivery_id);

    // One attempt now, and when it fails no retries: failed again, and
    // counted against the webhook (each failed extra attempt counts).
    let (status, body) = post(&app, &app.key, &path, json!({})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        body,
        json!({"delivery_id": delivery_id, "event_id": event_id})
    );
    let list = finished_deliveries(&app, &webhook, 1).await;
    assert_eq!(list[0]["status"], "failed", "{list:?}");
    assert_eq!(list[0]["attempt_count"], 6);
    assert_eq!(status_codes(&list[0]), [500; 6]);
    assert_eq!(webhook_of(&app, &webhook).await["consecutive_failures"], 2);
    assert_eq!(server.received_requests().await.unwrap().len(), 6);

    // Again: this time the receiver takes it.
    let (status, body) = post(&app, &app.key, &path, json!({})).await;
    assert_eq!(status, 202, "{body}");
    let list = finished_deliveries(&app, &webhook, 1).await;
    assert_eq!(list[0]["status"], "succeeded", "{list:?}");
    assert_eq!(list[0]["attempt_count"], 7);
    assert_eq!(list[0]["last_status_code"], 200);
    assert_eq!(list[0]["event_id"], event_id.as_str());
    assert_eq!(webhook_of(&app, &webhook).await["consecutive_failures"], 0);

    // Every request carried the one event id in both header families, and
    // both signatures.
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 7);
    for request in &requests {
        let envelope = verified(request, &secret);
        assert_eq!(envelope["id"], event_id.as_str());
        assert_eq!(standard_verified(request, &secret), event_id);
    }
    // A succeeded delivery can be redelivered too (a receiver that lost it).
    let (status, _) = post(&app, &app.key, &path, json!({})).await;
    assert_eq!(status, 202);
    let list = finished_deliveries(&app, &webhook, 1).await;
    assert_eq!(
        (&list[0]["status"], &list[0]["attempt_count"]),
        (&json!("succeeded"), &json!(8))
    );
    let last = requests_of(&server, 8).await.pop().unwrap();
    assert_eq!(standard_verified(&last, &secret), event_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redelivering_a_pending_delivery_attempts_it_now_and_keeps_its_scheduled_retry() {
    // Retries an hour apart: within the test only redeliveries attempt again.
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.webhooks.retry_delays_ms = vec![3_600_000; 4]),
    )
    .await;
    let server = receiver(2, 503).await;
    let (webhook, secret) = register(&app, &server, &["generation.completed"]).await;
    let event_id = send_test_event(&app, &webhook).await;
    let waiting = delivery_with_attempts(&app, &webhook, 1).await;
    assert_eq!(waiting["status"], "pending", "{waiting}");
    let scheduled = time(&waiting["next_attempt_at"]);
    assert!(scheduled > Utc::now() + chrono::Duration::minutes(50));
    let path = redeliver_path(&webhook, waiting["id"].as_str().unwrap());

    let (status, body) = post(&app, &app.key, &path, json!({})).await;
    assert_eq!(status, 202, "{body}");
    let after = delivery_with_attempts(&app, &webhook, 2).await;
    // Failed (503) outside the schedule: the scheduled retry stands as it was.
    assert_eq!(after["status"], "pending", "{after}");
    assert_eq!(time(&after["next_attempt_at"]), scheduled, "{after}");
    assert_eq!(status_codes(&after), [503, 503]);

    let (status, _) = post(&app, &app.key, &path, json!({})).await;
    assert_eq!(status, 202);
    let list = finished_deliveries(&app, &webhook, 1).await;
    assert_eq!(list[0]["status"], "succeeded", "{list:?}");
    assert_eq!(status_codes(&list[0]), [503, 503, 200]);
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(standard_verified(request, &secret), event_id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redelivery_is_scoped_to_the_organization_and_the_webhook_and_waits_for_an_attempt_in_flight()
 {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    // Polling through two 5 s attempts takes more requests than the plan's
    // rate limit allows.
    app.sql("UPDATE plans SET rate_limit_per_minute = 100000 WHERE code = 'pro'")
        .await;
    // The receiver holds each request 5 s (the attempt timeout is 10 s).
    let slow = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(5)))
        .mount(&slow)
        .await;
    let fast = receiver(0, 200).await;
    let (webhook, _) = register(&app, &slow, &["generation.completed"]).await;
    let (other_webhook, _) = register(&app, &fast, &["generation.completed"]).await;
    send_test_event(&app, &webhook).await;
    requests_of(&slow, 1).await;
    let delivery = deliveries(&app, &webhook).await.remove(0);
    let delivery_id = delivery["id"].as_str().unwrap().to_owned();
    let path = redeliver_path(&webhook, &delivery_id);

    // The first attempt is still waiting for its answer.
    let (status, body) = post(&app, &app.key, &path, json!({})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "delivery_in_flight", "{body}");

    let other_org = app.create_org("Other", "pro").await;
    let other_key = app.create_key(other_org, &["all"], None).await;
    let no_scope = app.create_key(app.org_id, &["image"], None).await;
    let (status, body) = post(&app, &no_scope, &path, json!({})).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body["error"]["message"],
        "API key does not have required scope: webhooks"
    );
    for (key, path, why) in [
        (&other_key, path.clone(), "another organization's webhook"),
        (
            &app.key,
            redeliver_path(&other_webhook, &delivery_id),
            "a delivery of another webhook",
        ),
        (
            &app.key,
            redeliver_path(&webhook, &uuid::Uuid::now_v7().to_string()),
            "an unknown delivery",
        ),
        (
            &app.key,
            redeliver_path(&webhook, "not-a-delivery"),
            "a malformed id",
        ),
        (
            &app.key,
            redeliver_path(&uuid::Uuid::now_v7().to_string(), &delivery_id),
            "an unknown webhook",
        ),
    ] {
        let (status, body) = post(&app, key, &path, json!({})).await;
        assert_eq!(status, 404, "{why}: {body}");
        assert_eq!(body["error"]["code"], "not_found", "{why}: {body}");
    }

    let list = finished_deliveries(&app, &webhook, 1).await;
    assert_eq!(list[0]["attempt_count"], 1, "nothing else was attempted");
    assert_eq!(fast.received_requests().await.unwrap().len(), 0);
    let (status, _) = post(&app, &app.key, &path, json!({})).await;
    assert_eq!(status, 202);
    let list = finished_deliveries(&app, &webhook, 1).await;
    assert_eq!(list[0]["attempt_count"], 2);
    assert_eq!(slow.received_requests().await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_sends_again_only_the_failed_deliveries_of_events_created_since() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.webhooks.retry_delays_ms = vec![10, 10, 10, 10]),
    )
    .await;
    // Three deliveries fail 5 times each; everything after succeeds.
    let server = receiver(15, 500).await;
    let (webhook, secret) = register(&app, &server, &["generation.completed"]).await;
    let mut events = Vec::new();
    for n in 1..=4 {
        events.push(send_test_event(&app, &webhook).await);
        finished_deliveries(&app, &webhook, n).await;
    }
    let [old, failed_1, failed_2, succeeded] = <[String; 4]>::try_from(events).unwrap();
    // The oldest event happened two hours ago.
    app.sql(&format!(
        "UPDATE events SET created_at = now() - interval '2 hours' WHERE id = '{old}'"
    ))
    .await;
    let by_event = |list: &[Value]| -> Vec<(String, String, i64)> {
        let mut rows: Vec<_> = list
            .iter()
            .map(|d| {
                (
                    d["event_id"].as_str().unwrap().to_owned(),
                    d["status"].as_str().unwrap().to_owned(),
                    d["attempt_count"].as_i64().unwrap(),
                )
            })
            .collect();
        rows.sort();
        rows
    };
    let expect = |rows: &[(&String, &str, i64)]| -> Vec<(String, String, i64)> {
        let mut rows: Vec<_> = rows
            .iter()
            .map(|(id, status, n)| ((*id).clone(), (*status).to_owned(), *n))
            .collect();
        rows.sort();
        rows
    };
    let before = by_event(&deliveries(&app, &webhook).await);
    assert_eq!(
        before,
        expect(&[
            (&old, "failed", 5),
            (&failed_1, "failed", 5),
            (&failed_2, "failed", 5),
            (&succeeded, "succeeded", 1),
        ])
    );

    let path = format!("/api/v1/webhooks/{webhook}/replay");
    let hour_ago = (Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    for (body, param, fragment) in [
        (json!({"status": "failed"}), "since", "required"),
        (
            json!({"since": null, "status": "failed"}),
            "since",
            "required",
        ),
        (
            json!({"since": "yesterday", "status": "failed"}),
            "since",
            "ISO 8601",
        ),
        (
            json!({"since": 1_700_000_000, "status": "failed"}),
            "since",
            "ISO 8601",
        ),
        (json!({"since": hour_ago}), "status", "failed"),
        (
            json!({"since": hour_ago, "status": "succeeded"}),
            "status",
            "only failed",
        ),
        (
            json!({"since": hour_ago, "status": ["failed"]}),
            "status",
            "failed",
        ),
    ] {
        let (status, error) = post(&app, &app.key, &path, body.clone()).await;
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains(fragment),
            "{body}: {error}"
        );
    }
    let other_org = app.create_org("Other", "pro").await;
    let other_key = app.create_key(other_org, &["all"], None).await;
    let (status, _) = post(
        &app,
        &other_key,
        &path,
        json!({"since": hour_ago, "status": "failed"}),
    )
    .await;
    assert_eq!(status, 404);
    // None of that changed anything.
    assert_eq!(by_event(&deliveries(&app, &webhook).await), before);
    assert_eq!(server.received_requests().await.unwrap().len(), 16);

    // Since an hour ago: the two recent failed deliveries, not the old one,
    // not the succeeded one.
    let (status, body) = post(
        &app,
        &app.key,
        &path,
        json!({"since": hour_ago, "status": "failed"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body, json!({"replayed": 2, "remaining": 0}));
    let list = finished_deliveries(&app, &webhook, 4).await;
    assert_eq!(
        by_event(&list),
        expect(&[
            (&old, "failed", 5),
            (&failed_1, "succeeded", 6),
            (&failed_2, "succeeded", 6),
            (&succeeded, "succeeded", 1),
        ])
    );
    let requests = requests_of(&server, 18).await;
    assert_eq!(requests.len(), 18);
    let mut replayed: Vec<String> = requests[16..]
        .iter()
        .map(|r| {
            verified(r, &secret);
            standard_verified(r, &secret)
        })
        .collect();
    replayed.sort();
    let mut wanted = vec![failed_1.clone(), failed_2.clone()];
    wanted.sort();
    assert_eq!(replayed, wanted, "the original event ids");

    // A date reaches the old one; then nothing failed is left.
    let three_hours_ago = (Utc::now() - chrono::Duration::hours(3))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let (status, body) = post(
        &app,
        &app.key,
        &path,
        json!({"since": three_hours_ago, "status": "failed"}),
    )
    .await;
    assert_eq!(
        (status, &body),
        (202, &json!({"replayed": 1, "remaining": 0}))
    );
    let list = finished_deliveries(&app, &webhook, 4).await;
    assert!(list.iter().all(|d| d["status"] == "succeeded"), "{list:?}");
    let (status, body) = post(
        &app,
        &app.key,
        &path,
        json!({"since": three_hours_ago, "status": "failed"}),
    )
    .await;
    assert_eq!(
        (status, &body),
        (202, &json!({"replayed": 0, "remaining": 0}))
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 19);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_answering_410_gone_disables_its_webhook_at_once() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.webhooks.retry_delays_ms = vec![10, 10, 10, 10]),
    )
    .await;
    let server = receiver(u64::MAX, 410).await;
    let (webhook, _) = register(&app, &server, &["generation.completed"]).await;
    send_test_event(&app, &webhook).await;
    let list = finished_deliveries(&app, &webhook, 1).await;
    assert_eq!(list[0]["status"], "failed", "{list:?}");
    assert_eq!(
        list[0]["attempt_count"], 1,
        "no retries after 410: {list:?}"
    );
    assert_eq!(list[0]["last_status_code"], 410);
    let read = webhook_of(&app, &webhook).await;
    assert_eq!(read["enabled"], false, "{read}");
    assert!(read["disabled_at"].is_string(), "{read}");
    assert!(
        read["disabled_reason"]
            .as_str()
            .unwrap()
            .contains("410 Gone"),
        "{read}"
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);

    // Disabled: nothing is sent to it until it is enabled again.
    let delivery_id = list[0]["id"].as_str().unwrap();
    for (path, body) in [
        (redeliver_path(&webhook, delivery_id), json!({})),
        (
            format!("/api/v1/webhooks/{webhook}/replay"),
            json!({"since": "2026-01-01", "status": "failed"}),
        ),
    ] {
        let (status, error) = post(&app, &app.key, &path, body).await;
        assert_eq!(status, 409, "{path}: {error}");
        assert_eq!(error["error"]["code"], "webhook_disabled", "{error}");
    }
    assert_eq!(deliveries(&app, &webhook).await[0]["attempt_count"], 1);
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_on_429_and_503_is_honoured_when_later_than_the_schedule_capped_at_its_longest_wait()
 {
    // The schedule waits 60 s after attempt 1 and at most 10 min.
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.webhooks.retry_delays_ms = vec![60_000, 60_000, 60_000, 600_000]),
    )
    .await;
    let in_five_minutes = Utc::now() + chrono::Duration::minutes(5);
    let http_date = in_five_minutes
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    // (status, Retry-After, the wait expected after the attempt, in seconds)
    let cases = [
        (503, "120".to_owned(), Some(120)),
        (429, http_date, None),
        (503, "86400".to_owned(), Some(600)),
        (429, "1".to_owned(), Some(60)),
        (500, "900".to_owned(), Some(60)),
    ];
    let mut webhooks = Vec::new();
    for (status, retry_after, _) in &cases {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(*status).insert_header("retry-after", retry_after))
            .mount(&server)
            .await;
        let (webhook, _) = register(&app, &server, &["generation.completed"]).await;
        send_test_event(&app, &webhook).await;
        webhooks.push((webhook, server));
    }
    for ((status, retry_after, wait), (webhook, _server)) in cases.iter().zip(&webhooks) {
        let delivery = delivery_with_attempts(&app, webhook, 1).await;
        let case = format!("{status} with Retry-After {retry_after}: {delivery}");
        assert_eq!(delivery["status"], "pending", "{case}");
        assert_eq!(delivery["last_status_code"], *status, "{case}");
        let next = time(&delivery["next_attempt_at"]);
        let attempt = &delivery["attempts"][0];
        let ended = time(&attempt["started_at"])
            + chrono::Duration::milliseconds(attempt["duration_ms"].as_i64().unwrap());
        match wait {
            // Counted from when the attempt was recorded, just after it ended.
            Some(seconds) => {
                let waited = (next - ended).num_milliseconds();
                assert!(
                    waited >= seconds * 1000 && waited < seconds * 1000 + 30_000,
                    "{case}: next attempt {waited} ms after the attempt"
                );
            }
            // The date itself (it has whole seconds).
            None => {
                let off = (next - in_five_minutes).num_milliseconds().abs();
                assert!(off < 2_000, "{case}: {off} ms from the date");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standardwebhooks_library_verifies_real_deliveries_for_new_and_old_secrets() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let server = receiver(0, 200).await;
    let (webhook, secret) = register(&app, &server, &["generation.completed"]).await;
    assert_eq!(
        BASE64
            .decode(secret.strip_prefix("whsec_").unwrap())
            .unwrap()
            .len(),
        32,
        "{secret}"
    );
    send_test_event(&app, &webhook).await;
    let new_form = requests_of(&server, 1).await.remove(0);
    // A secret issued before Standard Webhooks: whsec_ and 64 hex digits.
    let old_secret = format!("whsec_{}", "0123456789abcdef".repeat(4));
    app.sql(&format!(
        "UPDATE webhooks SET secret = '{old_secret}' WHERE id = '{webhook}'"
    ))
    .await;
    send_test_event(&app, &webhook).await;
    let old_form = requests_of(&server, 2).await.remove(1);
    let case = |request: &Request, secret: &str| {
        let headers: serde_json::Map<String, Value> = request
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    Value::String(value.to_str().unwrap().to_owned()),
                )
            })
            .collect();
        json!({
            "secret": secret,
            "headers": headers,
            "body": String::from_utf8(request.body.clone()).unwrap(),
        })
    };
    let deliveries = json!([case(&new_form, &secret), case(&old_form, &old_secret)]);
    let script = "tests/sdk/python/standardwebhooks_check.py";
    let mut command = client_command(&app, &root().join(".venv/bin/python"), script);
    command.env("WEBHOOK_DELIVERIES", deliveries.to_string());
    let output = run_to_success(command, script).await;
    assert_eq!(
        output.lines().filter(|l| l.starts_with("ok: ")).count(),
        12,
        "{output}"
    );
}
