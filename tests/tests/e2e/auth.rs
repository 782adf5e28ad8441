use chrono::{Duration, Utc};
use serde_json::json;
use unigen_tests::{TestApp, TestOptions, json_of};

/// Revokes `key` straight in the database, as an operator in psql would.
async fn revoke_in_sql(app: &TestApp, key: &str) {
    let hash = unigen_core::domain::hash_key(key);
    app.db
        .client()
        .await
        .execute(
            "UPDATE api_keys SET revoked_at = now() WHERE key_hash = $1",
            &[&&hash[..]],
        )
        .await
        .unwrap();
}

async fn status_and_message(response: reqwest::Response) -> (u16, String) {
    let (status, body) = json_of(response).await;
    (
        status,
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_malformed_unknown_revoked_and_expired_keys_are_refused() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let invalid = (401, "invalid or missing API key".to_owned());

    let no_header = app
        .client
        .get(app.url("/api/v1/jobs"))
        .send()
        .await
        .unwrap();
    assert_eq!(status_and_message(no_header).await, invalid);
    let basic = app
        .client
        .get(app.url("/api/v1/jobs"))
        .basic_auth("user", Some(&app.key))
        .send()
        .await
        .unwrap();
    assert_eq!(status_and_message(basic).await, invalid);
    for bad in [
        "sk_123",
        "nonsense",
        &format!("sk_{}", "0".repeat(64)),
        &app.key.to_uppercase(),
    ] {
        assert_eq!(
            status_and_message(app.get("/api/v1/jobs", bad).await).await,
            invalid,
            "{bad}"
        );
    }

    let expired = app
        .create_key(
            app.org_id,
            &["all"],
            Some(Utc::now() - Duration::seconds(1)),
        )
        .await;
    assert_eq!(
        status_and_message(app.get("/api/v1/jobs", &expired).await).await,
        (401, "API key has expired".into())
    );
    let not_yet = app
        .create_key(app.org_id, &["all"], Some(Utc::now() + Duration::hours(1)))
        .await;
    assert_eq!(app.get("/api/v1/jobs", &not_yet).await.status(), 200);

    let revoked = app.create_key(app.org_id, &["all"], None).await;
    assert_eq!(app.get("/api/v1/jobs", &revoked).await.status(), 200);
    revoke_in_sql(&app, &revoked).await;
    assert_eq!(
        status_and_message(app.get("/api/v1/jobs", &revoked).await).await,
        invalid,
        "revocation is immediate"
    );

    // A generation request with a bad key creates nothing.
    let response = app
        .post_json(
            "/api/v1/images/generations",
            "sk_bad",
            &json!({"prompt": "x"}),
        )
        .await;
    assert_eq!(response.status(), 401);
    assert_eq!(app.count_jobs().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_only_reach_the_endpoints_of_their_scopes() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let chat_only = app.create_key(app.org_id, &["chat"], None).await;
    let (status, message) = status_and_message(
        app.post_json(
            "/api/v1/images/generations",
            &chat_only,
            &json!({"prompt": "x"}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, message.as_str()),
        (403, "API key does not have required scope: image")
    );
    let (status, message) = status_and_message(app.get("/api/v1/jobs", &chat_only).await).await;
    assert_eq!(
        (status, message.as_str()),
        (403, "API key does not have required scope: jobs")
    );

    // Jobs endpoints accept `jobs` or `usage`.
    let usage_only = app.create_key(app.org_id, &["usage"], None).await;
    assert_eq!(app.get("/api/v1/jobs", &usage_only).await.status(), 200);
    let jobs_only = app.create_key(app.org_id, &["jobs"], None).await;
    assert_eq!(app.get("/api/v1/jobs", &jobs_only).await.status(), 200);

    let image_only = app.create_key(app.org_id, &["image"], None).await;
    let response = app
        .post_json(
            "/api/v1/images/generations?async=true",
            &image_only,
            &json!({"prompt": "x"}),
        )
        .await;
    assert_eq!(response.status(), 202);
    let id = response.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) =
        status_and_message(app.delete(&format!("/api/v1/jobs/{id}"), &image_only).await).await;
    assert_eq!(status, 403, "cancelling needs jobs or usage");
    assert_eq!(app.job(&id).await["status"], "pending");
    assert_eq!(
        app.count_jobs().await,
        1,
        "the denied request created nothing"
    );
}

/// Verified keys are cached (here for ten minutes), and any change to keys,
/// organizations or plans, even straight in SQL, empties the cache at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_keys_are_dropped_as_soon_as_keys_organizations_or_plans_change() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure_api(|s| s.http.key_cache_seconds = 600),
    )
    .await;
    let key = app.create_key(app.org_id, &["all"], None).await;
    assert_eq!(app.get("/api/v1/jobs", &key).await.status(), 200);

    // With the trigger off, a revocation goes unnoticed: the key is served
    // from the cache (proof that it is cached at all).
    app.sql("ALTER TABLE api_keys DISABLE TRIGGER api_keys_auth_changed")
        .await;
    revoke_in_sql(&app, &key).await;
    assert_eq!(app.get("/api/v1/jobs", &key).await.status(), 200);

    // Any change to an organization (here a no-op update) empties the cache:
    // the revocation takes effect long before the ten minutes.
    app.sql("UPDATE organizations SET status = status").await;
    wait_for_status(&app, &key, 401).await;

    // And plans: a new key is cached, then its plan's scope of use changes.
    app.sql("ALTER TABLE api_keys ENABLE TRIGGER api_keys_auth_changed")
        .await;
    let second = app.create_key(app.org_id, &["all"], None).await;
    assert_eq!(app.get("/api/v1/jobs", &second).await.status(), 200);
    app.sql("UPDATE plans SET rate_limit_per_minute = 1 WHERE code = 'pro'")
        .await;
    app.sql("DELETE FROM rate_limits").await;
    // One request at the new rate passes, the next is refused: the plan was re-read.
    wait_for_status(&app, &second, 429).await;
}

/// Polls until a request with `key` answers `status` (within 5 s).
async fn wait_for_status(app: &TestApp, key: &str, status: u16) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let got = app.get("/api/v1/jobs", key).await.status().as_u16();
        if got == status {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still {got}, expected {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
