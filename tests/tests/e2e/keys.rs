//! Keys API: `POST/GET /keys`, `DELETE /keys/{id}` under the `keys` scope.

use std::time::Duration;

use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, json_of};

async fn create(app: &TestApp, key: &str, body: Value) -> (u16, Value) {
    json_of(app.post_json("/api/v1/keys", key, &body).await).await
}

async fn list(app: &TestApp, key: &str) -> Vec<Value> {
    let (status, body) = json_of(app.get("/api/v1/keys", key).await).await;
    assert_eq!(status, 200, "{body}");
    body["keys"].as_array().expect("keys").clone()
}

async fn count_keys(app: &TestApp) -> i64 {
    app.db.scalar_i64("SELECT count(*) FROM api_keys").await
}

/// Polls `GET {base}/api/v1/jobs` with `key` until it answers `status` (within 5 s).
async fn wait_for_status(app: &TestApp, base: &str, key: &str, status: u16) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let got = app
            .client
            .get(format!("{base}/api/v1/jobs"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if got == status {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still {got}, expected {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_created_listed_and_revoked_and_their_value_is_shown_once() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let (status, created) = create(
        &app,
        &app.key,
        json!({"name": "ci pipeline", "scopes": ["jobs", "image", "jobs"], "expires_at": "2999-01-02T03:04:05Z"}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let value = created["key"].as_str().unwrap().to_owned();
    assert!(unigen_core::domain::looks_like_key(&value), "sk_ + 64 hex");
    assert_eq!(created["name"], "ci pipeline");
    assert_eq!(created["prefix"], value[..9]);
    assert_eq!(created["scopes"], json!(["jobs", "image"]));
    assert_eq!(created["expires_at"], "2999-01-02T03:04:05Z");
    assert_eq!(created["last_used_at"], Value::Null);
    assert!(created["created_at"].is_string());
    let id = created["id"].as_str().unwrap().to_owned();

    // Only the SHA-256 hash is stored; the value is nowhere in the row.
    let hash = unigen_core::domain::hash_key(&value);
    let row = app
        .db
        .client()
        .await
        .query_one(
            "SELECT id::text, row_to_json(k)::text FROM api_keys k WHERE key_hash = $1",
            &[&&hash[..]],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), id);
    assert!(!row.get::<_, String>(1).contains(&value[3..]));

    // The value authenticates, with the scopes it was given.
    assert_eq!(app.get("/api/v1/jobs", &value).await.status(), 200);
    let (status, body) = json_of(app.get("/api/v1/keys", &value).await).await;
    assert_eq!(status, 403);
    assert_eq!(
        body["error"]["message"],
        "API key does not have required scope: keys"
    );

    // Listed without value or hash; its use shows in last_used_at.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let listed = loop {
        let keys = list(&app, &app.key).await;
        assert_eq!(keys.len(), 2, "{keys:?}");
        let listed = keys.into_iter().find(|k| k["id"] == id.as_str()).unwrap();
        if !listed["last_used_at"].is_null() {
            break listed;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "last_used_at never set"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut fields: Vec<&str> = listed
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "created_at",
            "created_by",
            "expires_at",
            "id",
            "last_used_at",
            "name",
            "prefix",
            "scopes"
        ]
    );
    assert_eq!(listed["prefix"], created["prefix"]);
    assert_eq!(listed["created_at"], created["created_at"]);

    // Revoked: 204, at once refused, no longer listed, and a second revoke is a 404.
    let response = app.delete(&format!("/api/v1/keys/{id}"), &app.key).await;
    assert_eq!(response.status(), 204);
    assert_eq!(app.get("/api/v1/jobs", &value).await.status(), 401);
    assert!(
        list(&app, &app.key)
            .await
            .iter()
            .all(|k| k["id"] != id.as_str())
    );
    assert_eq!(
        app.delete(&format!("/api/v1/keys/{id}"), &app.key)
            .await
            .status(),
        404
    );
    assert_eq!(
        app.delete("/api/v1/keys/not-a-key", &app.key)
            .await
            .status(),
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_may_revoke_itself() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let (status, created) = create(
        &app,
        &app.key,
        json!({"name": "short-lived", "scopes": ["keys"]}),
    )
    .await;
    assert_eq!(status, 201);
    let value = created["key"].as_str().unwrap();
    let id = created["id"].as_str().unwrap();
    let response = app.delete(&format!("/api/v1/keys/{id}"), value).await;
    assert_eq!(response.status(), 204);
    assert_eq!(app.get("/api/v1/keys", value).await.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_cannot_grant_a_scope_it_does_not_hold() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let limited = app.create_key(app.org_id, &["keys", "image"], None).await;
    let before = count_keys(&app).await;
    for (scopes, missing) in [
        (json!(["image", "jobs"]), "jobs"),
        (json!(["all"]), "chat"),
        (json!(["webhooks"]), "webhooks"),
    ] {
        let (status, body) =
            create(&app, &limited, json!({"name": "wider", "scopes": scopes})).await;
        assert_eq!(status, 403, "{scopes}");
        assert_eq!(
            body["error"]["message"],
            format!("API key does not have required scope: {missing}")
        );
    }
    assert_eq!(count_keys(&app).await, before, "nothing created");
    let (status, body) = create(
        &app,
        &limited,
        json!({"name": "same", "scopes": ["image", "keys"]}),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // Without `keys`, no key is created, listed or revoked.
    let no_keys = app.create_key(app.org_id, &["image"], None).await;
    for response in [
        app.post_json(
            "/api/v1/keys",
            &no_keys,
            &json!({"name": "x", "scopes": ["image"]}),
        )
        .await,
        app.get("/api/v1/keys", &no_keys).await,
        app.delete(
            &format!("/api/v1/keys/{}", body["id"].as_str().unwrap()),
            &no_keys,
        )
        .await,
    ] {
        let (status, body) = json_of(response).await;
        assert_eq!(status, 403);
        assert_eq!(
            body["error"]["message"],
            "API key does not have required scope: keys"
        );
    }
    // Keys made with `all` hold `keys`.
    let (status, body) = create(
        &app,
        &app.key,
        json!({"name": "everything", "scopes": ["all"]}),
    )
    .await;
    assert_eq!(status, 201);
    assert!(body["scopes"].as_array().unwrap().contains(&json!("keys")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_organizations_keys_are_not_listed_nor_revocable() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let other_org = app.create_org("Other", "pro").await;
    let other_key = app.create_key(other_org, &["all"], None).await;
    let (status, theirs) = create(
        &app,
        &other_key,
        json!({"name": "theirs", "scopes": ["image"]}),
    )
    .await;
    assert_eq!(status, 201);
    let their_id = theirs["id"].as_str().unwrap();

    let ours = list(&app, &app.key).await;
    assert_eq!(ours.len(), 1, "only our own key: {ours:?}");
    let (status, body) = json_of(
        app.delete(&format!("/api/v1/keys/{their_id}"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");
    // Still active for its organization.
    assert_eq!(
        app.get("/api/v1/jobs", theirs["key"].as_str().unwrap())
            .await
            .status(),
        403,
        "authenticated (an image-only key lacks `jobs`), not revoked"
    );
    assert_eq!(list(&app, &other_key).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_key_requests_are_400s_naming_the_field_and_create_nothing() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let before = count_keys(&app).await;
    let long_name = "n".repeat(101);
    for (body, param) in [
        (json!({"scopes": ["image"]}), "name"),
        (json!({"name": "  ", "scopes": ["image"]}), "name"),
        (json!({"name": long_name, "scopes": ["image"]}), "name"),
        (json!({"name": 7, "scopes": ["image"]}), "name"),
        (json!({"name": "x"}), "scopes"),
        (json!({"name": "x", "scopes": []}), "scopes"),
        (
            json!({"name": "x", "scopes": ["image", "pixels"]}),
            "scopes",
        ),
        (json!({"name": "x", "scopes": "image"}), "scopes"),
        (
            json!({"name": "x", "scopes": ["image"], "expires_at": "2001-01-01T00:00:00Z"}),
            "expires_at",
        ),
        (
            json!({"name": "x", "scopes": ["image"], "expires_at": "next week"}),
            "expires_at",
        ),
        (
            json!({"name": "x", "scopes": ["image"], "expires_at": 1_900_000_000}),
            "expires_at",
        ),
    ] {
        let (status, error) = create(&app, &app.key, body.clone()).await;
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
    }
    let (status, _) = json_of(
        app.client
            .post(app.url("/api/v1/keys"))
            .bearer_auth(&app.key)
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(count_keys(&app).await, before, "nothing created");
}

/// Every API process caches verified keys (here for ten minutes); a
/// revocation through the API reaches the other process's cache at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_takes_effect_at_once_in_every_api_process() {
    let mut app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.http.key_cache_seconds = 600),
    )
    .await;
    let other_api = app.spawn_extra_api().await;
    let (status, created) = create(
        &app,
        &app.key,
        json!({"name": "shared", "scopes": ["jobs"]}),
    )
    .await;
    assert_eq!(status, 201);
    let value = created["key"].as_str().unwrap().to_owned();
    // Cached in both processes.
    wait_for_status(&app, &other_api, &value, 200).await;
    wait_for_status(&app, &app.base_url, &value, 200).await;

    let response = app
        .delete(
            &format!("/api/v1/keys/{}", created["id"].as_str().unwrap()),
            &app.key,
        )
        .await;
    assert_eq!(response.status(), 204);
    // The process that revoked it refuses it with its very next request...
    let own = app.get("/api/v1/jobs", &value).await;
    assert_eq!(own.status(), 401);
    // ... and the other as soon as the notification arrives, long before
    // its cache entry would expire.
    wait_for_status(&app, &other_api, &value, 401).await;
}

/// Recording a key's use (`last_used_at`) must not empty every process's
/// key cache: unlike a revocation, it sends no auth-change notification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recording_a_key_use_does_not_invalidate_key_caches() {
    use futures_util::StreamExt;
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let (client, mut connection) = tokio_postgres::connect(&app.db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let (tx, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let _ = tx.send(n.payload().to_owned());
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {}", unigen_db::notify::AUTH_CHANNEL))
        .await
        .unwrap();
    // Notifications arrive in commit order: one from the first update would
    // come before the second's.
    app.sql("UPDATE api_keys SET last_used_at = now()").await;
    app.sql("UPDATE organizations SET status = status").await;
    let first = tokio::time::timeout(Duration::from_secs(10), notifications.recv())
        .await
        .expect("the organization update notifies")
        .unwrap();
    assert_eq!(first, "organizations", "last_used_at notified");
    // While a revocation does notify, naming the key (each process drops
    // only that key from its cache).
    app.sql("UPDATE api_keys SET revoked_at = now()").await;
    let next = tokio::time::timeout(Duration::from_secs(10), notifications.recv())
        .await
        .expect("the revocation notifies")
        .unwrap();
    assert!(next.starts_with("api_keys:"), "{next}");
    assert!(
        next["api_keys:".len()..].parse::<uuid::Uuid>().is_ok(),
        "{next}"
    );
}
