//! The second hardening review (issue 34): one tenant, with an ordinary
//! key, can never spend what every tenant shares. One regression test (or
//! more) per finding.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use unigen_db::queries::idempotency::{self, Claim, Released, StoredResponse};
use unigen_tests::{TestApp, TestOptions, json_of};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn keyed_post(
    app: &TestApp,
    path: &str,
    key: &str,
    idem: &str,
    body: &Value,
) -> (u16, bool, Value) {
    let response = app
        .client
        .post(app.url(path))
        .bearer_auth(key)
        .header("Idempotency-Key", idem)
        .json(body)
        .send()
        .await
        .expect("POST");
    let replayed = response.headers().contains_key("idempotent-replayed");
    let (status, body) = json_of(response).await;
    (status, replayed, body)
}

// ---- Finding 7: the 15-minute takeover is fenced by the claim ----

/// At the query level: a claim taken over can neither complete nor free
/// the key, and its successor's claim is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_over_claim_neither_completes_nor_frees_the_key() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let mut conn = app.db.connect().await;
    let print = [7u8; 32];
    let Claim::Claimed(first) = idempotency::claim(&mut conn, app.org_id, "late", &print)
        .await
        .unwrap()
    else {
        panic!("the first claim")
    };
    // The first request looks abandoned: a retry takes the key over.
    app.sql("UPDATE idempotency_keys SET created_at = now() - interval '16 minutes'")
        .await;
    let Claim::Claimed(second) = idempotency::claim(&mut conn, app.org_id, "late", &print)
        .await
        .unwrap()
    else {
        panic!("the takeover")
    };
    assert_ne!(first.claim_id, second.claim_id);

    // The late first request ends after all: it frees nothing...
    assert_eq!(
        idempotency::release(&mut conn, app.org_id, &first)
            .await
            .unwrap(),
        Released::NotHeld
    );
    // ...and completes nothing.
    let stale = StoredResponse {
        status_code: 200,
        content_type: Some("application/json"),
        body: Some(b"{\"stale\":true}"),
        agent_run_id: None,
    };
    assert!(
        !idempotency::complete(&mut conn, app.org_id, &first, &stale)
            .await
            .unwrap()
    );
    let record = idempotency::find(&mut conn, app.org_id, "late")
        .await
        .unwrap()
        .expect("the successor's claim is still there");
    assert_eq!(record.state, "in_flight");
    assert_eq!(record.claim_id, second.claim_id);

    // The successor settles its own claim.
    let fresh = StoredResponse {
        body: Some(b"{\"fresh\":true}"),
        ..stale
    };
    assert!(
        idempotency::complete(&mut conn, app.org_id, &second, &fresh)
            .await
            .unwrap()
    );
    let body = idempotency::stored_body(&mut conn, app.org_id, "late", second.claim_id)
        .await
        .unwrap();
    assert_eq!(body.as_deref(), Some(&b"{\"fresh\":true}"[..]));
}

/// Through the API: a first request, slow on a media URL, is taken over
/// after 15 minutes; when it then fails, the key stays with the request
/// that took it over (a third meets 409, not a fresh run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_failing_first_request_does_not_free_the_key_it_lost() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let media = MockServer::start().await;
    // The first fetch fails after 2 s, every later one after 6 s.
    Mock::given(method("GET"))
        .and(path("/slow.png"))
        .respond_with(ResponseTemplate::new(404).set_delay(Duration::from_secs(2)))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&media)
        .await;
    Mock::given(method("GET"))
        .and(path("/slow.png"))
        .respond_with(ResponseTemplate::new(404).set_delay(Duration::from_secs(6)))
        .with_priority(2)
        .mount(&media)
        .await;
    let body = json!({
        "prompt": "a kite",
        "mode": "image_to_video",
        "source_image": format!("{}/slow.png", media.uri()),
    });
    let path = "/api/v1/videos/generations?async=true";
    let first = {
        let (app, body) = (&app, &body);
        async move { keyed_post(app, path, &app.key, "takeover", body).await }
    };
    let takeover = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        app.sql("UPDATE idempotency_keys SET created_at = now() - interval '16 minutes'")
            .await;
        let second = keyed_post(&app, path, &app.key, "takeover", &body);
        let third = async {
            // After the first request failed (2 s), before the second does
            // (6.5 s).
            tokio::time::sleep(Duration::from_millis(2500)).await;
            let started = std::time::Instant::now();
            let third = keyed_post(&app, path, &app.key, "takeover", &body).await;
            (third, started.elapsed())
        };
        tokio::join!(second, third)
    };
    let (first, (second, (third, third_took))) = tokio::join!(first, takeover);
    assert_eq!(first.0, 400, "{:?}", first.2);
    assert_eq!(second.0, 400, "{:?}", second.2);
    assert_eq!(
        third.0, 409,
        "the key is still the second request's: {:?}",
        third.2
    );
    assert_eq!(third.2["error"]["code"], "idempotency_key_in_use");
    assert!(third_took < Duration::from_secs(2), "answered at once");
    assert_eq!(app.count_jobs().await, 0);
}

// ---- Finding 8: the job is written on its key in the job's statement ----

/// A TCP proxy to the broker that can hold every byte (a broker that stops
/// answering): a publish then waits for a confirm that does not come.
struct StallProxy {
    addr: std::net::SocketAddr,
    /// The broker's address, learnt from the settings it is put in.
    target: Arc<std::sync::Mutex<Option<String>>>,
    stalled: Arc<AtomicBool>,
}

impl StallProxy {
    async fn start() -> StallProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stalled = Arc::new(AtomicBool::new(false));
        let target = Arc::new(std::sync::Mutex::new(None::<String>));
        let (flag, to) = (stalled.clone(), target.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Some(target) = to.lock().unwrap().clone() else {
                    continue;
                };
                let Ok(upstream) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (upstream_read, upstream_write) = upstream.into_split();
                tokio::spawn(pump(client_read, upstream_write, flag.clone()));
                tokio::spawn(pump(upstream_read, client_write, flag.clone()));
            }
        });
        StallProxy {
            addr,
            target,
            stalled,
        }
    }

    /// `amqp_url` through the proxy (which then forwards to it).
    fn route(&self, amqp_url: &str) -> String {
        let (scheme, rest) = amqp_url.split_once("://").unwrap();
        let (authority, tail) = rest.split_once('/').unwrap_or((rest, ""));
        let (user, host) = match authority.rsplit_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, authority),
        };
        *self.target.lock().unwrap() = Some(host.replace("localhost", "127.0.0.1"));
        match user {
            Some(user) => format!("{scheme}://{user}@{}/{tail}", self.addr),
            None => format!("{scheme}://{}/{tail}", self.addr),
        }
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stalled: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while stalled.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A request whose process ends between its job's commit and the
/// broker's confirm (here: a broker that stops answering, and the process
/// taken for dead 15 minutes later) never settles its key. The retry finds
/// the job written on the key's claim and answers it (202, replayed)
/// instead of taking the key over and creating and charging a second job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_died_after_its_job_keeps_the_key_for_that_job() {
    let proxy = Arc::new(StallProxy::start().await);
    let via = proxy.clone();
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .without_scheduler()
            .configure_api(move |s| s.rabbitmq.url = via.route(&s.rabbitmq.url)),
    )
    .await;
    let body = json!({"prompt": "a lighthouse", "size": "512x512"});
    let path = "/api/v1/images/generations?async=true";
    proxy.stalled.store(true, Ordering::SeqCst);
    let gone = app
        .client
        .post(app.url(path))
        .bearer_auth(&app.key)
        .header("Idempotency-Key", "died-1")
        .json(&body)
        .timeout(Duration::from_millis(1500))
        .send()
        .await;
    assert!(
        gone.as_ref().is_err_and(|e| e.is_timeout()),
        "the request hung on the broker after its job: {gone:?}"
    );
    assert_eq!(app.count_jobs().await, 1);
    let job_id = app
        .db
        .client()
        .await
        .query_one("SELECT id::text FROM jobs", &[])
        .await
        .unwrap()
        .get::<_, String>(0);
    // Its process is taken for dead: the claim is past the takeover age.
    app.sql("UPDATE idempotency_keys SET created_at = now() - interval '16 minutes'")
        .await;

    let retry = app
        .client
        .post(app.url(path))
        .bearer_auth(&app.key)
        .header("Idempotency-Key", "died-1")
        .json(&body)
        .timeout(Duration::from_secs(3))
        .send()
        .await
        .expect("the retry is answered from the key, without the broker");
    let replayed = retry.headers().contains_key("idempotent-replayed");
    let (status, again) = json_of(retry).await;
    assert_eq!(status, 202, "{again}");
    assert!(replayed, "{again}");
    assert_eq!(again["id"], job_id.as_str(), "{again}");
    assert_eq!(again["status"], "pending", "{again}");
    assert_eq!(app.count_jobs().await, 1, "no second job");
    proxy.stalled.store(false, Ordering::SeqCst);
}

/// At the query level: a request dropped after its job's statement (the
/// job is written on its claim there) cannot free the key; releasing it
/// keeps the key for that job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_claim_whose_job_exists_keeps_the_key_for_the_job() {
    use unigen_db::models::NewJob;
    use unigen_db::queries::jobs::{Reserving, insert_many_reserving};
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let mut conn = app.db.connect().await;
    unigen_db::queries::billing::setup_account(&mut conn, app.org_id)
        .await
        .unwrap();
    let key_id: uuid::Uuid = app
        .db
        .client()
        .await
        .query_one("SELECT id FROM api_keys", &[])
        .await
        .unwrap()
        .get(0);
    let print = [9u8; 32];
    let Claim::Claimed(claim) = idempotency::claim(&mut conn, app.org_id, "dropped", &print)
        .await
        .unwrap()
    else {
        panic!("claimed")
    };
    let params = json!({"prompt": "x"});
    let job_id = uuid::Uuid::now_v7();
    let inserted = insert_many_reserving(
        &mut conn,
        &[NewJob {
            id: job_id,
            org_id: app.org_id,
            api_key_id: key_id,
            tool: "image",
            model: "local/mock-image",
            model_tier: "standard",
            input_params: &params,
            estimated_credits: 0,
            cancel_after: None,
            idempotency: Some((&claim.key, claim.claim_id)),
            trace_context: None,
        }],
        &[None],
    )
    .await
    .unwrap();
    assert!(matches!(inserted[0], Ok(Reserving::Inserted(_))));

    // The handler is dropped before it learnt of its job: it releases.
    assert_eq!(
        idempotency::release(&mut conn, app.org_id, &claim)
            .await
            .unwrap(),
        Released::KeptForJob
    );
    let record = idempotency::find(&mut conn, app.org_id, "dropped")
        .await
        .unwrap()
        .expect("the key is not freed");
    assert_eq!(record.state, "completed");
    assert_eq!(record.status_code, Some(202));
    assert_eq!(record.job_id, Some(job_id));
}

// ---- Finding 9: replay reads and stores only what it must ----

/// The signing secret of a created or rotated webhook is answered once and
/// never stored with the key's record; the replay has every other field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_secrets_are_never_stored_with_an_idempotency_key() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let hook = json!({
        "name": "receiver",
        "url": "http://127.0.0.1:9/hook",
        "events": ["generation.completed"],
    });
    let (status, replayed, created) =
        keyed_post(&app, "/api/v1/webhooks", &app.key, "hook-secret", &hook).await;
    assert_eq!((status, replayed), (201, false), "{created}");
    let secret = created["secret"]
        .as_str()
        .expect("the secret, once")
        .to_owned();
    let id = created["id"].as_str().unwrap().to_owned();
    let rotate = format!("/api/v1/webhooks/{id}/rotate-secret");
    let (status, replayed, rotated) =
        keyed_post(&app, &rotate, &app.key, "rotate-secret", &json!({})).await;
    assert_eq!((status, replayed), (200, false), "{rotated}");
    let rotated_secret = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(rotated_secret, secret);

    let stored = app
        .db
        .client()
        .await
        .query(
            "SELECT convert_from(body, 'UTF8') FROM idempotency_keys WHERE body IS NOT NULL",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(stored.len(), 2);
    for row in stored {
        let body: String = row.get(0);
        assert!(
            !body.contains(&secret) && !body.contains(&rotated_secret),
            "{body}"
        );
        assert!(!body.contains("whsec_"), "{body}");
    }

    for (path, idem, body, first, status) in [
        ("/api/v1/webhooks", "hook-secret", &hook, &created, 201),
        (rotate.as_str(), "rotate-secret", &json!({}), &rotated, 200),
    ] {
        let (again_status, replayed, again) = keyed_post(&app, path, &app.key, idem, body).await;
        assert_eq!((again_status, replayed), (status, true), "{again}");
        let mut expected = first.clone();
        expected.as_object_mut().unwrap().remove("secret");
        assert_eq!(again, expected);
    }
    assert_eq!(app.db.scalar_i64("SELECT count(*) FROM webhooks").await, 1);
}

/// A retry that the record refuses (another body: 422) reads no kept body:
/// eight of them at once against a 16 MiB kept answer cost far less than
/// one copy of it.
#[tokio::test]
async fn a_refused_retry_never_reads_the_kept_body() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    const MIB: usize = 1024 * 1024;
    let first = json!({"name": "first", "system_prompt": "x"});
    let (status, _, _) = keyed_post(&app, "/api/v1/agents", &app.key, "big", &first).await;
    assert_eq!(status, 201);
    // As if the answer kept were 16 MiB (the most that is kept).
    app.sql("UPDATE idempotency_keys SET body = convert_to(repeat('a', 16 * 1024 * 1024), 'UTF8')")
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = crate::PEAK.current_usage();
    crate::PEAK.reset_peak_usage();
    let other = json!({"name": "second", "system_prompt": "x"});
    let refusals = (0..8).map(|_| keyed_post(&app, "/api/v1/agents", &app.key, "big", &other));
    for (status, _, error) in futures_util::future::join_all(refusals).await {
        assert_eq!(status, 422, "{error}");
        assert_eq!(error["error"]["code"], "idempotency_key_reused");
    }
    let growth = crate::PEAK.peak_usage().saturating_sub(before);
    eprintln!("heap growth: {:.1} MiB", growth as f64 / MIB as f64);
    assert!(
        growth < 8 * MIB,
        "refused retries read the kept body: the heap grew by {growth} bytes"
    );
    // The matching retry still gets the kept answer.
    let (status, replayed, _) = json_text(&app, "big", &first).await;
    assert_eq!((status, replayed), (201, true));
}

/// A keyed POST of `/agents`, its status, whether it was replayed, and the
/// length of its body (a replayed 16 MiB body is not JSON).
async fn json_text(app: &TestApp, idem: &str, body: &Value) -> (u16, bool, usize) {
    let response = app
        .client
        .post(app.url("/api/v1/agents"))
        .bearer_auth(&app.key)
        .header("Idempotency-Key", idem)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let length = response.bytes().await.unwrap().len();
    assert_eq!(length, 16 * 1024 * 1024);
    (status, replayed, length)
}

// ---- Finding 6: no key outlives the key that created it ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiring_key_mints_no_key_that_outlives_it_and_each_key_shows_its_creator() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let expiry = chrono::Utc::now() + chrono::Duration::days(2);
    let expiring = app.create_key(app.org_id, &["all"], Some(expiry)).await;
    let expiring_id = app
        .db
        .client()
        .await
        .query_one(
            "SELECT id::text FROM api_keys WHERE expires_at IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get::<_, String>(0);
    let keys_before = app.db.scalar_i64("SELECT count(*) FROM api_keys").await;

    // Past its own expiry: refused, naming the field; nothing is created.
    let (status, error) = json_of(
        app.post_json(
            "/api/v1/keys",
            &expiring,
            &json!({"name": "forever", "scopes": ["image"], "expires_at": "2999-01-01"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], "expires_at", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("expires_at must not be later than the creating key's own expiry"),
        "{error}"
    );
    assert_eq!(
        app.db.scalar_i64("SELECT count(*) FROM api_keys").await,
        keys_before
    );

    // No expiry asked: the creator's.
    let (status, created) = json_of(
        app.post_json(
            "/api/v1/keys",
            &expiring,
            &json!({"name": "child", "scopes": ["image"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let child_expiry: chrono::DateTime<chrono::Utc> =
        created["expires_at"].as_str().unwrap().parse().unwrap();
    assert!(
        (child_expiry - expiry).num_milliseconds().abs() < 2,
        "{child_expiry} vs {expiry}"
    );
    assert_eq!(
        created["created_by"],
        json!({"type": "key", "id": expiring_id})
    );

    // Listed with its creator; the operator's keys have none.
    let (status, list) = json_of(app.get("/api/v1/keys", &app.key).await).await;
    assert_eq!(status, 200, "{list}");
    let keys = list["keys"].as_array().unwrap();
    let child = keys.iter().find(|k| k["id"] == created["id"]).unwrap();
    assert_eq!(
        child["created_by"],
        json!({"type": "key", "id": expiring_id})
    );
    let operator = keys
        .iter()
        .find(|k| k["id"] == expiring_id.as_str())
        .unwrap();
    assert_eq!(operator["created_by"], Value::Null);
}

// ---- Finding 3: minting keys multiplies nothing ----

/// The plan's rate is the organization's: a fresh key gets no fresh burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_is_the_organizations_however_many_keys_it_mints() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let mut keys = vec![app.key.clone()];
    for _ in 0..4 {
        keys.push(app.create_key(app.org_id, &["all"], None).await);
    }
    let other_org = app.create_org("Other", "pro").await;
    let other_key = app.create_key(other_org, &["all"], None).await;
    // A burst of 3 requests a minute, for the whole organization.
    app.sql("UPDATE plans SET rate_limit_per_minute = 3 WHERE code = 'pro'")
        .await;
    let mut statuses = Vec::new();
    for key in &keys {
        let response = app.get("/api/v1/keys", key).await;
        statuses.push(response.status().as_u16());
        if response.status() == 429 {
            assert!(response.headers().contains_key("retry-after"));
            let (_, error) = json_of(response).await;
            assert_eq!(error["error"]["code"], "rate_limited", "{error}");
        }
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 429, 429],
        "one burst for five keys"
    );
    // Another organization has its own.
    assert_eq!(app.get("/api/v1/keys", &other_key).await.status(), 200);
}

/// A per-key rate may still be set (`http.key_rate_limit_per_minute`), on
/// top of the organization's: a key over its own is refused while the
/// organization's other keys go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_rate_may_be_set_on_top_of_the_organizations() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .without_scheduler()
            .configure(|s| s.http.key_rate_limit_per_minute = 2),
    )
    .await;
    let second = app.create_key(app.org_id, &["all"], None).await;
    let mut statuses = Vec::new();
    for key in [&app.key, &app.key, &app.key, &second] {
        statuses.push(app.get("/api/v1/keys", key).await.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429, 200]);
    let (_, error) = json_of(app.get("/api/v1/keys", &app.key).await).await;
    assert_eq!(
        error["error"]["message"],
        "Too many requests: this key's rate limit was reached"
    );
}

/// `POST /keys` and the dashboard refuse a key past the plan's cap on
/// active keys; a revoked or expired key frees its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_caps_active_keys_for_the_api_and_the_dashboard() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    // app.key and an expired one (not counted); the cap is 2 active keys.
    app.create_key(
        app.org_id,
        &["all"],
        Some(chrono::Utc::now() - chrono::Duration::hours(1)),
    )
    .await;
    app.sql("UPDATE plans SET max_api_keys = 2 WHERE code = 'pro'")
        .await;
    let request = json!({"name": "one more", "scopes": ["image"]});
    let (status, created) = json_of(app.post_json("/api/v1/keys", &app.key, &request).await).await;
    assert_eq!(status, 201, "{created}");
    let before = app.db.scalar_i64("SELECT count(*) FROM api_keys").await;
    let (status, error) = json_of(app.post_json("/api/v1/keys", &app.key, &request).await).await;
    assert_eq!(status, 402, "{error}");
    assert_eq!(error["error"]["code"], "limit_reached", "{error}");
    assert_eq!(
        error["error"]["message"],
        "API key limit reached: the Pro plan allows 2 active keys; revoke one first"
    );
    assert_eq!(
        app.db.scalar_i64("SELECT count(*) FROM api_keys").await,
        before
    );

    // The dashboard: the same cap and words.
    let (owner, _) = app.signed_in("owner").await;
    let response = owner
        .post("/keys", "/keys/new", &[("name", "web"), ("scope", "usage")])
        .await;
    assert_eq!(response.status(), 402);
    let page = response.text().await.unwrap();
    assert!(
        page.contains("API key limit reached: the Pro plan allows 2 active keys"),
        "{page}"
    );
    assert_eq!(
        app.db.scalar_i64("SELECT count(*) FROM api_keys").await,
        before
    );

    // A revoked key frees its place.
    let id = created["id"].as_str().unwrap();
    let response = app.delete(&format!("/api/v1/keys/{id}"), &app.key).await;
    assert_eq!(response.status(), 204);
    let response = owner
        .post("/keys", "/keys/new", &[("name", "web"), ("scope", "usage")])
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        app.db.scalar_i64("SELECT count(*) FROM api_keys").await,
        before + 1
    );
}

/// A revocation drops that key from every API process's cache, and only
/// it: another key's cached entry stays (here: a change made behind the
/// triggers' back stays unseen, which shows the entry was not dropped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_evicts_only_that_key_from_every_api_process() {
    let mut app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .without_scheduler()
            .configure(|s| s.http.key_cache_seconds = 300),
    )
    .await;
    let second = app.spawn_extra_api().await;
    let revoked = app.create_key(app.org_id, &["all"], None).await;
    let kept = app.create_key(app.org_id, &["all"], None).await;
    let revoked_id: String = app
        .db
        .client()
        .await
        .query_one(
            "SELECT id::text FROM api_keys ORDER BY created_at DESC, id DESC OFFSET 1 LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let get = |base: &str, key: &str| {
        app.client
            .get(format!("{base}/api/v1/keys"))
            .bearer_auth(key)
            .send()
    };
    // Cached in both processes.
    for base in [app.base_url.as_str(), second.as_str()] {
        for key in [&revoked, &kept] {
            assert_eq!(get(base, key).await.unwrap().status(), 200);
        }
    }
    // `kept` loses its scopes without a notification (no trigger runs).
    app.sql(
        "SET session_replication_role = replica; \
         UPDATE api_keys SET scopes = '{usage}' WHERE id <> ALL (SELECT id FROM api_keys \
           ORDER BY created_at DESC, id DESC OFFSET 1); \
         SET session_replication_role = DEFAULT",
    )
    .await;
    let response = app
        .delete(&format!("/api/v1/keys/{revoked_id}"), &app.key)
        .await;
    assert_eq!(response.status(), 204);
    for base in [app.base_url.as_str(), second.as_str()] {
        // The revoked key is refused at once (the other process within the
        // notification's round trip).
        let mut status = 0;
        for _ in 0..100 {
            status = get(base, &revoked).await.unwrap().status().as_u16();
            if status == 401 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(status, 401, "{base}: the revoked key is refused");
        // The other key was not dropped: still its cached entry.
        assert_eq!(
            get(base, &kept).await.unwrap().status(),
            200,
            "{base}: another key's cache entry survives a revocation"
        );
    }
}

// ---- Finding 10: event streams are capped and end with their key ----

async fn open_events(app: &TestApp, job: &str, key: &str) -> reqwest::Response {
    app.client
        .get(app.url(&format!("/api/v1/jobs/{job}/events")))
        .bearer_auth(key)
        .send()
        .await
        .expect("GET events")
}

/// The next chunk of an open stream, `None` once it ended.
async fn next_chunk(response: &mut reqwest::Response, within: Duration) -> Option<String> {
    tokio::time::timeout(within, response.chunk())
        .await
        .expect("the stream sent something or ended in time")
        .expect("the stream reads")
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_organization_holds_a_capped_number_of_open_event_streams() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .without_scheduler()
            .configure(|s| {
                s.http.max_event_streams_per_org = 2;
                s.http.event_keep_alive_seconds = 1;
            }),
    )
    .await;
    let job = app.submit_image_async(&json!({"prompt": "a kite"})).await;
    let mut first = open_events(&app, &job, &app.key).await;
    let mut second = open_events(&app, &job, &app.key).await;
    for stream in [&mut first, &mut second] {
        assert_eq!(stream.status(), 200);
        assert!(next_chunk(stream, Duration::from_secs(5)).await.is_some());
    }
    let third = open_events(&app, &job, &app.key).await;
    assert_eq!(third.status(), 429, "a third stream is refused");
    let (_, error) = json_of(third).await;
    assert_eq!(error["error"]["code"], "rate_limited", "{error}");
    assert_eq!(
        error["error"]["message"],
        "Too many open job event streams for this organization; close one first"
    );
    // Another organization is not affected.
    let other = app.create_org("Other", "pro").await;
    let other_key = app.create_key(other, &["all"], None).await;
    let job_of_other = {
        let (status, body) = json_of(
            app.post_json(
                "/api/v1/images/generations?async=true",
                &other_key,
                &json!({"prompt": "x"}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 202, "{body}");
        body["id"].as_str().unwrap().to_owned()
    };
    assert_eq!(
        open_events(&app, &job_of_other, &other_key).await.status(),
        200
    );
    // A closed stream frees its place (noticed at its next keep-alive).
    drop(first);
    let mut reopened = None;
    for _ in 0..50 {
        let response = open_events(&app, &job, &app.key).await;
        if response.status() == 200 {
            reopened = Some(response);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reopened.is_some(), "the closed stream's place was freed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_ends_once_its_key_is_revoked() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .without_scheduler()
            .configure(|s| s.http.event_keep_alive_seconds = 1),
    )
    .await;
    let job = app.submit_image_async(&json!({"prompt": "a kite"})).await;
    let key = app.create_key(app.org_id, &["jobs"], None).await;
    let mut stream = open_events(&app, &job, &key).await;
    assert_eq!(stream.status(), 200);
    let first = next_chunk(&mut stream, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(first.contains("event: status"), "{first}");
    let keep_alive = next_chunk(&mut stream, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(keep_alive.contains(": keep-alive"), "{keep_alive}");

    app.sql("UPDATE api_keys SET revoked_at = now() WHERE scopes = '{jobs}'")
        .await;
    // At the next keep-alive the stream ends; nothing more is sent.
    let started = std::time::Instant::now();
    loop {
        match next_chunk(&mut stream, Duration::from_secs(5)).await {
            None => break,
            Some(chunk) => assert!(
                chunk.contains(": keep-alive") && started.elapsed() < Duration::from_secs(3),
                "the stream went on after its key was revoked: {chunk}"
            ),
        }
    }
}

// ---- Finding 11: our own signed URLs keep to fetch.max_bytes ----

/// A media field holding one of our own signed URLs is refused by its size,
/// before the object is read: a 48 MiB stored file against a 1 MiB cap
/// costs no more than a few MiB of heap.
#[tokio::test]
async fn an_own_signed_url_over_the_size_cap_is_refused_unread() {
    use unigen_core::storage::{UrlSigner, build_store};
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .without_scheduler()
            .configure(|s| s.fetch.max_bytes = 1024 * 1024),
    )
    .await;
    const MIB: usize = 1024 * 1024;
    let key = format!("{}/outputs/big/image.png", app.org_id);
    {
        // A PNG header (512x512) and 48 MiB of padding.
        let mut png = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
        png.extend_from_slice(&[0, 0, 0, 13, b'I', b'H', b'D', b'R']);
        png.extend_from_slice(&512u32.to_be_bytes());
        png.extend_from_slice(&512u32.to_be_bytes());
        png.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
        png.resize(48 * MIB, 0);
        build_store(&app.settings.storage)
            .unwrap()
            .put(&key, png)
            .await
            .unwrap();
    }
    let url = UrlSigner::new(
        &app.settings.storage.url_secret,
        &app.base_url,
        Duration::from_secs(600),
    )
    .sign_url(&key, chrono::Utc::now().timestamp());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = crate::PEAK.current_usage();
    crate::PEAK.reset_peak_usage();
    let (status, error) = json_of(
        app.post_json(
            "/api/v1/videos/generations?async=true",
            &app.key,
            &json!({"prompt": "a kite", "mode": "image_to_video", "source_image": url}),
        )
        .await,
    )
    .await;
    let growth = crate::PEAK.peak_usage().saturating_sub(before);
    eprintln!("heap growth: {:.1} MiB", growth as f64 / MIB as f64);
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], "source_image", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("source_image is larger than"),
        "{error}"
    );
    assert!(growth < 8 * MIB, "the object was read: {growth} bytes");
    assert_eq!(app.count_jobs().await, 0);
}
