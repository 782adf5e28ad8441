//! Webhook delivery shared fairly between organizations (issue 34, finding
//! 2): per-organization and per-webhook in-flight caps, organizations
//! claimed in turn, manual sends (test, redeliver, replay) rate-limited per
//! webhook, replays capped per call, and failed manual attempts counted
//! towards the automatic disable.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use unigen_tests::{TestApp, TestOptions, json_of};
use uuid::Uuid;
use wiremock::MockServer;

use crate::webhooks::{create_webhook, receiver};

/// A receiver that accepts every connection and never answers: each
/// attempt holds its connection until the attempt's timeout closes it.
/// Counts the connections open now and the most ever open at once.
struct Tarpit {
    url: String,
    open: Arc<AtomicUsize>,
    most_open: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
}

impl Tarpit {
    async fn start() -> Tarpit {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let open = Arc::new(AtomicUsize::new(0));
        let most_open = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (o, m, a) = (open.clone(), most_open.clone(), accepted.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let now = o.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                let o = o.clone();
                tokio::spawn(async move {
                    // Read (and ignore) until the client gives up.
                    let mut buf = [0u8; 4096];
                    while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
                    o.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Tarpit {
            url,
            open,
            most_open,
            accepted,
        }
    }
}

async fn register_url(app: &TestApp, key: &str, url: &str, events: &[&str]) -> String {
    let (status, body) = create_webhook(
        app,
        key,
        json!({"name": "fairness", "url": url, "events": events}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

async fn post(app: &TestApp, key: &str, path: &str, body: Value) -> reqwest::Response {
    app.post_json(path, key, &body).await
}

/// `count` `webhook.test` deliveries to `webhook`, due since a minute ago
/// (older than anything the test sends later), written straight to the
/// database as a backlog.
async fn backlog(app: &TestApp, org: Uuid, webhook: &str, count: usize, status: &str) {
    let finished = if status == "pending" {
        "NULL::timestamptz"
    } else {
        "e.created_at + interval '1 second'"
    };
    app.sql(&format!(
        "WITH e AS ( \
           INSERT INTO events (id, org_id, type, data, created_at) \
           SELECT gen_random_uuid(), '{org}', 'webhook.test', \
                  jsonb_build_object('webhookId', '{webhook}'), \
                  now() - interval '1 minute' + n * interval '1 ms' \
             FROM generate_series(1, {count}) n RETURNING id, created_at) \
         INSERT INTO webhook_deliveries (id, webhook_id, event_id, status, attempts, \
                                         next_attempt_at, created_at, completed_at) \
         SELECT gen_random_uuid(), '{webhook}', e.id, '{status}', \
                CASE WHEN '{status}' = 'pending' THEN 0 ELSE 5 END, \
                e.created_at, e.created_at, {finished} FROM e"
    ))
    .await;
}

/// Sends a test event to `webhook` and returns how long until `server`
/// received it, waiting at most `limit`.
async fn test_event_latency(
    app: &TestApp,
    key: &str,
    webhook: &str,
    server: &MockServer,
    limit: Duration,
) -> Option<Duration> {
    let before = server.received_requests().await.unwrap().len();
    let started = Instant::now();
    let response = post(
        app,
        key,
        &format!("/api/v1/webhooks/{webhook}/test"),
        json!({}),
    )
    .await;
    assert_eq!(response.status(), 202);
    while started.elapsed() < limit {
        if server.received_requests().await.unwrap().len() > before {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_a_tarpit_and_1000_queued_deliveries_does_not_delay_another_tenant_s_webhook()
{
    // Production's attempt timeout (10 s) and scheduler concurrency (16);
    // the caps are the defaults, written out.
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(|s| {
        s.webhooks.timeout_ms = 10_000;
        s.webhooks.concurrency = 16;
        s.webhooks.max_in_flight_per_org = 8;
        s.webhooks.max_in_flight_per_webhook = 4;
    }))
    .await;
    // Tenant B: one webhook with a healthy receiver; its latency first,
    // with nothing else queued.
    let other_org = app.create_org("Other", "pro").await;
    let other_key = app.create_key(other_org, &["all"], None).await;
    let healthy = receiver(0, 200).await;
    let healthy_id = register_url(
        &app,
        &other_key,
        &format!("{}/hook", healthy.uri()),
        &["generation.completed"],
    )
    .await;
    let limit = Duration::from_secs(15);
    let baseline = test_event_latency(&app, &other_key, &healthy_id, &healthy, limit)
        .await
        .expect("delivered with nothing else queued");

    // Tenant A: three webhooks at a tarpit, 1,000 deliveries queued (older
    // than anything B sends), woken by a test event of A's.
    let tarpit = Tarpit::start().await;
    let mut tarpit_hooks = Vec::new();
    for _ in 0..3 {
        tarpit_hooks
            .push(register_url(&app, &app.key, &tarpit.url, &["generation.completed"]).await);
    }
    for (n, hook) in tarpit_hooks.iter().enumerate() {
        backlog(
            &app,
            app.org_id,
            hook,
            if n == 0 { 334 } else { 333 },
            "pending",
        )
        .await;
    }
    let response = post(
        &app,
        &app.key,
        &format!("/api/v1/webhooks/{}/test", tarpit_hooks[0]),
        json!({}),
    )
    .await;
    assert_eq!(response.status(), 202);
    // A's attempts fill what A may hold, and hang there.
    let deadline = Instant::now() + Duration::from_secs(5);
    while tarpit.open.load(Ordering::SeqCst) < 8 {
        assert!(
            Instant::now() < deadline,
            "the tarpit should hold 8 attempts, holds {}",
            tarpit.open.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // B's next delivery arrives as fast as before, not after A's backlog.
    let loaded = test_event_latency(&app, &other_key, &healthy_id, &healthy, limit).await;
    println!(
        "tenant B's test event reached its receiver after {baseline:?} alone, \
         {loaded:?} beside tenant A's 1,000 deliveries to a tarpit"
    );
    let loaded = loaded.expect("tenant B's delivery waited behind tenant A's backlog");
    assert!(
        loaded < baseline.max(Duration::from_millis(500)) * 4,
        "tenant B waited {loaded:?} (alone: {baseline:?})"
    );
    // A never held more than its organization's cap, across its webhooks,
    // and is still being served.
    let most = tarpit.most_open.load(Ordering::SeqCst);
    assert_eq!(most, 8, "attempts at the tarpit at once");
    let in_flight = app
        .db
        .scalar_i64(&format!(
            "SELECT count(*) FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id \
             WHERE w.org_id = '{}' AND d.leased_until > now()",
            app.org_id
        ))
        .await;
    assert!(in_flight <= 8, "{in_flight} of A's attempts in flight");
    let per_webhook = app
        .db
        .scalar_i64(&format!(
            "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM webhook_deliveries \
             WHERE webhook_id = '{}' AND leased_until > now()) c",
            tarpit_hooks[0]
        ))
        .await;
    assert!(per_webhook <= 4, "{per_webhook} attempts of one webhook");
    assert!(tarpit.accepted.load(Ordering::SeqCst) >= 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_sends_are_rate_limited_per_webhook_replays_capped_and_failed_extra_attempts_count()
{
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(|s| {
        s.webhooks.retry_delays_ms = vec![10, 10, 10, 10];
        s.webhooks.manual_sends_per_minute = 3;
        s.webhooks.replay_max_per_call = 2;
        s.webhooks.disable_after_failures = 4;
    }))
    .await;
    let failing = receiver(u64::MAX, 500).await;
    let url = format!("{}/hook", failing.uri());
    let webhook = register_url(&app, &app.key, &url, &["generation.completed"]).await;
    let other = register_url(&app, &app.key, &url, &["generation.completed"]).await;
    // Five deliveries that failed, as after five scheduled attempts each.
    backlog(&app, app.org_id, &webhook, 5, "failed").await;
    let base = format!("/api/v1/webhooks/{webhook}");
    let since = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let replay = json!({"since": since, "status": "failed"});
    let count = |sql: String| {
        let app = &app;
        async move { app.db.scalar_i64(&sql).await }
    };
    let failed_again = |n: i64| {
        let webhook = webhook.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let done = count(format!(
                    "SELECT count(*) FROM webhook_deliveries WHERE webhook_id = '{webhook}' \
                     AND status = 'failed' AND attempts > 5"
                ))
                .await;
                if done >= n {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "{done} of {n} extra attempts failed"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let failures = || async {
        let (_, read) = json_of(app.get(&base, &app.key).await).await;
        (
            read["consecutive_failures"].as_i64().unwrap(),
            read["enabled"].as_bool().unwrap(),
        )
    };

    // One replay queues at most two, and says how many are left.
    let (status, body) =
        json_of(post(&app, &app.key, &format!("{base}/replay"), replay.clone()).await).await;
    assert_eq!(
        (status, &body),
        (202, &json!({"replayed": 2, "remaining": 3}))
    );
    failed_again(2).await;
    // Each failed extra attempt counts towards the automatic disable.
    assert_eq!(failures().await, (2, true));

    // A redelivery of another failed one (the second manual send).
    let untouched = app
        .db
        .client()
        .await
        .query_one(
            &format!(
                "SELECT id::text FROM webhook_deliveries WHERE webhook_id = '{webhook}' \
                 AND attempts = 5 ORDER BY completed_at LIMIT 1"
            ),
            &[],
        )
        .await
        .unwrap()
        .get::<_, String>(0);
    let response = post(
        &app,
        &app.key,
        &format!("{base}/deliveries/{untouched}/redeliver"),
        json!({}),
    )
    .await;
    assert_eq!(response.status(), 202);
    failed_again(3).await;
    assert_eq!(failures().await, (3, true));

    // The third: a test event. The minute's sends are then spent: test,
    // redeliver and replay are refused with Retry-After.
    let response = post(&app, &app.key, &format!("{base}/test"), json!({})).await;
    assert_eq!(response.status(), 202);
    for (path, body) in [
        (format!("{base}/test"), json!({})),
        (format!("{base}/replay"), replay.clone()),
        (
            format!("{base}/deliveries/{untouched}/redeliver"),
            json!({}),
        ),
    ] {
        let response = post(&app, &app.key, &path, body).await;
        assert_eq!(response.status(), 429, "{path}");
        let retry_after: u64 = response.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
        let (_, error) = json_of(response).await;
        assert_eq!(error["error"]["code"], "rate_limited", "{error}");
        assert_eq!(error["error"]["type"], "rate_limit_error", "{error}");
    }
    // Per webhook: another webhook of the organization still sends.
    let response = post(
        &app,
        &app.key,
        &format!("/api/v1/webhooks/{other}/test"),
        json!({}),
    )
    .await;
    assert_eq!(response.status(), 202);

    // The test event fails its five scheduled attempts: the fourth failed
    // delivery in a row disables the webhook.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (failures, enabled) = failures().await;
        if !enabled {
            assert_eq!(failures, 4);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{failures} failures, still enabled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing beyond what the sends allowed reached the receiver: two
    // replayed, one redelivered, the test event's five attempts, and the
    // other webhook's test event (at least its first attempt).
    let sent = failing.received_requests().await.unwrap().len();
    assert!((9..=13).contains(&sent), "{sent} requests");
}
