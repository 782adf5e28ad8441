//! `Idempotency-Key` on creates: one job and one charge for 20 concurrent
//! retries, replays with `Idempotent-Replayed`, 422 for another request
//! under the same key, key syntax, errors freeing the key, per-organization
//! scope, and replays of chat, a multipart upload, a webhook and an agent
//! run's stream.

use reqwest::multipart::{Form, Part};
use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions};

struct Answer {
    status: u16,
    replayed: bool,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }
}

async fn answer(response: reqwest::Response) -> Answer {
    let status = response.status().as_u16();
    let replayed = match response.headers().get("idempotent-replayed") {
        Some(value) => {
            assert_eq!(value, "true");
            true
        }
        None => false,
    };
    Answer {
        status,
        replayed,
        text: response.text().await.expect("body"),
    }
}

async fn post(app: &TestApp, path: &str, api_key: &str, idem: &str, body: &Value) -> Answer {
    answer(
        app.client
            .post(app.url(path))
            .bearer_auth(api_key)
            .header("Idempotency-Key", idem)
            .json(body)
            .send()
            .await
            .expect("POST"),
    )
    .await
}

async fn charged_credits(app: &TestApp) -> i64 {
    app.db
        .scalar_i64(
            "SELECT COALESCE(-sum(amount), 0)::bigint FROM credit_transactions \
              WHERE type IN ('consumption', 'overage')",
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_retries_create_one_job_and_charge_once() {
    let app = TestApp::spawn().await;
    let body = json!({"prompt": "a lighthouse at dusk", "size": "512x512"});
    let requests = (0..20).map(|_| {
        let app = &app;
        let body = &body;
        async move { post(app, "/api/v1/images/generations", &app.key, "gen-1", body).await }
    });
    let answers = futures_util::future::join_all(requests).await;
    let ok: Vec<&Answer> = answers.iter().filter(|a| a.status == 200).collect();
    for a in &answers {
        assert!(
            a.status == 200 || a.status == 409,
            "{}: {}",
            a.status,
            a.text
        );
        if a.status == 409 {
            let error = a.json();
            assert_eq!(error["error"]["code"], "idempotency_key_in_use");
            assert_eq!(error["error"]["param"], "Idempotency-Key");
        }
    }
    assert!(!ok.is_empty(), "the first request completed");
    assert_eq!(app.count_jobs().await, 1, "one job for twenty requests");
    let first = ok
        .iter()
        .find(|a| !a.replayed)
        .expect("one original answer");
    assert_eq!(
        ok.iter().filter(|a| !a.replayed).count(),
        1,
        "only one request ran"
    );
    for a in &ok {
        assert_eq!(a.text, first.text, "a replay is the first response");
    }

    // Settled once: the charge of one image job.
    let charged = charged_credits(&app).await;
    assert!(charged > 0);
    let again = post(&app, "/api/v1/images/generations", &app.key, "gen-1", &body).await;
    assert_eq!(again.status, 200);
    assert!(again.replayed);
    assert_eq!(again.text, first.text);
    assert_eq!(app.count_jobs().await, 1);
    assert_eq!(charged_credits(&app).await, charged, "no second charge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_creates_replay_and_a_key_names_one_request_per_organization() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let path = "/api/v1/images/generations?async=true";
    let body = json!({"prompt": "a red kite", "n": 2});
    let first = post(&app, path, &app.key, "abc-123", &body).await;
    assert_eq!(first.status, 202, "{}", first.text);
    assert!(!first.replayed);
    let job_id = first.json()["id"].as_str().unwrap().to_owned();

    // The same key, bare or as a structured-field string, the same body with
    // its keys in another order: the first response.
    let reordered = json!({"n": 2, "prompt": "a red kite"});
    for key in ["abc-123", "\"abc-123\""] {
        let again = post(&app, path, &app.key, key, &reordered).await;
        assert_eq!(again.status, 202);
        assert!(again.replayed);
        assert_eq!(again.json()["id"], job_id.as_str());
        assert_eq!(again.text, first.text);
    }
    assert_eq!(app.count_jobs().await, 1);

    // Another body, another endpoint, or another API key of the organization:
    // another request under a used key.
    let other_key = app.create_key(app.org_id, &["all"], None).await;
    for (path, api_key, body) in [
        (
            path,
            app.key.as_str(),
            json!({"prompt": "a blue kite", "n": 2}),
        ),
        (
            "/api/v1/videos/generations?async=true",
            app.key.as_str(),
            json!({"prompt": "a red kite"}),
        ),
        (path, other_key.as_str(), body.clone()),
    ] {
        let refused = post(&app, path, api_key, "abc-123", &body).await;
        assert_eq!(refused.status, 422, "{}", refused.text);
        let error = refused.json();
        assert_eq!(error["error"]["code"], "idempotency_key_reused");
        assert_eq!(error["error"]["param"], "Idempotency-Key");
    }
    assert_eq!(app.count_jobs().await, 1);

    // Keys are per organization: the same key elsewhere is a new request.
    let org = app.create_org("Other", "pro").await;
    let elsewhere = app.create_key(org, &["all"], None).await;
    let theirs = post(&app, path, &elsewhere, "abc-123", &body).await;
    assert_eq!(theirs.status, 202);
    assert!(!theirs.replayed);
    assert_ne!(theirs.json()["id"], job_id.as_str());
    assert_eq!(app.count_jobs().await, 2);

    // Syntax: empty, too long, several.
    let long = "k".repeat(256);
    for bad in ["\"\"", long.as_str(), "\"unterminated"] {
        let refused = post(&app, path, &app.key, bad, &body).await;
        assert_eq!(refused.status, 400, "{bad}: {}", refused.text);
        assert_eq!(refused.json()["error"]["param"], "Idempotency-Key");
    }
    let longest = "k".repeat(255);
    let fits = post(&app, path, &app.key, &longest, &body).await;
    assert_eq!(fits.status, 202, "{}", fits.text);
    let several = app
        .client
        .post(app.url(path))
        .bearer_auth(&app.key)
        .header("Idempotency-Key", "one")
        .header("Idempotency-Key", "two")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(several.status(), 400);
    assert_eq!(app.count_jobs().await, 3);

    // A request refused for its input created nothing and frees its key: the
    // corrected request then runs under it.
    let refused = post(&app, path, &app.key, "fix-me", &json!({"prompt": ""})).await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    let fixed = post(&app, path, &app.key, "fix-me", &body).await;
    assert_eq!(fixed.status, 202, "{}", fixed.text);
    assert!(!fixed.replayed);
    assert_eq!(app.count_jobs().await, 4);

    // Records expire after 24 hours: an expired key names a new request.
    app.sql("UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE idem_key = 'abc-123'")
        .await;
    let renewed = post(
        &app,
        path,
        &app.key,
        "abc-123",
        &json!({"prompt": "a green kite"}),
    )
    .await;
    assert_eq!(renewed.status, 202, "{}", renewed.text);
    assert!(!renewed.replayed);
    assert_eq!(app.count_jobs().await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_uploads_webhooks_and_agent_runs_replay_without_running_again() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;

    // Chat without streaming: the same completion, charged once.
    let chat = json!({"messages": [{"role": "user", "content": "Hello, unigen!"}]});
    let first = post(&app, "/api/v1/chat/completions", &app.key, "chat-1", &chat).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let charged = charged_credits(&app).await;
    let again = post(&app, "/api/v1/chat/completions", &app.key, "chat-1", &chat).await;
    assert!(again.replayed);
    assert_eq!(again.text, first.text);
    assert_eq!(
        app.db
            .scalar_i64(
                "SELECT count(*) FROM usage_records WHERE endpoint LIKE '%chat/completions'"
            )
            .await,
        1,
        "one chat request recorded"
    );
    assert_eq!(charged_credits(&app).await, charged);

    // A webhook.
    let receiver = wiremock::MockServer::start().await;
    let hook = json!({
        "name": "receiver",
        "url": format!("{}/hook", receiver.uri()),
        "events": ["generation.completed"],
    });
    let created = post(&app, "/api/v1/webhooks", &app.key, "hook-1", &hook).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let again = post(&app, "/api/v1/webhooks", &app.key, "hook-1", &hook).await;
    assert_eq!(again.status, 201);
    assert!(again.replayed);
    // The same answer but for the signing secret, which is never stored.
    let mut without_secret = created.json();
    assert!(without_secret["secret"].is_string());
    without_secret.as_object_mut().unwrap().remove("secret");
    assert_eq!(again.json(), without_secret);
    assert_eq!(app.db.scalar_i64("SELECT count(*) FROM webhooks").await, 1);

    // A key: the replay has the same id and fields, never the value.
    let request = json!({"name": "ci", "scopes": ["image"]});
    let created = post(&app, "/api/v1/keys", &app.key, "key-1", &request).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let created = created.json();
    assert!(created["key"].as_str().unwrap().starts_with("sk_"));
    let again = post(&app, "/api/v1/keys", &app.key, "key-1", &request).await;
    assert_eq!(again.status, 201);
    assert!(again.replayed);
    let mut expected = created.clone();
    expected.as_object_mut().unwrap().remove("key");
    assert_eq!(again.json(), expected);
    assert!(!again.text.contains(created["key"].as_str().unwrap()));
    assert_eq!(
        app.db
            .scalar_i64("SELECT count(*) FROM api_keys WHERE name = 'ci'")
            .await,
        1
    );
    assert_eq!(
        app.db
            .scalar_i64(&format!(
                "SELECT count(*) FROM idempotency_keys WHERE position('{}' in convert_from(body, 'UTF8')) > 0",
                created["key"].as_str().unwrap()
            ))
            .await,
        0,
        "the value is not stored"
    );

    // A multipart upload: each attempt has its own random boundary.
    let (status, agent) = {
        let a = post(
            &app,
            "/api/v1/agents",
            &app.key,
            "agent-1",
            &json!({"name": "Librarian", "system_prompt": "Answer briefly."}),
        )
        .await;
        (a.status, a.json())
    };
    assert_eq!(status, 201, "{agent}");
    let agent_id = agent["agent"]["id"].as_str().unwrap().to_owned();
    let upload = || async {
        let form = Form::new().part(
            "file",
            Part::bytes(b"The harbour opens at dawn.".to_vec()).file_name("notes.txt"),
        );
        answer(
            app.client
                .post(app.url(&format!("/api/v1/agents/{agent_id}/knowledge")))
                .bearer_auth(&app.key)
                .header("Idempotency-Key", "upload-1")
                .multipart(form)
                .send()
                .await
                .unwrap(),
        )
        .await
    };
    let uploaded = upload().await;
    assert_eq!(uploaded.status, 201, "{}", uploaded.text);
    let again = upload().await;
    assert!(again.replayed, "{}", again.text);
    assert_eq!(again.text, uploaded.text);
    assert_eq!(
        app.db
            .scalar_i64("SELECT count(*) FROM knowledge_files")
            .await,
        1
    );

    // An agent run: the replay streams the stored run (same run_id); no
    // second run starts.
    let run_path = format!("/api/v1/agents/{agent_id}/run");
    let events = |text: &str| -> Vec<Value> {
        text.split("\n\n")
            .filter_map(|frame| frame.strip_prefix("data: "))
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    };
    let run = post(
        &app,
        &run_path,
        &app.key,
        "run-1",
        &json!({"input": "hello"}),
    )
    .await;
    assert_eq!(run.status, 200, "{}", run.text);
    let original = events(&run.text);
    assert_eq!(original.last().unwrap()["type"], "done", "{original:?}");
    let replay = post(
        &app,
        &run_path,
        &app.key,
        "run-1",
        &json!({"input": "hello"}),
    )
    .await;
    assert_eq!(replay.status, 200);
    assert!(replay.replayed);
    let replayed = events(&replay.text);
    assert_eq!(replayed, original, "the same events, the same run_id");
    assert_eq!(
        app.db.scalar_i64("SELECT count(*) FROM agent_runs").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_while_the_first_request_waits_is_409_then_gets_the_first_answer() {
    // No worker: the sync request waits out the server's 3 s wait limit.
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|settings| settings.jobs.sync_wait_seconds = 3),
    )
    .await;
    let body = json!({"prompt": "a slow lighthouse"});
    let gave_up = app
        .client
        .post(app.url("/api/v1/images/generations"))
        .bearer_auth(&app.key)
        .header("Idempotency-Key", "impatient-1")
        .timeout(std::time::Duration::from_millis(1000))
        .json(&body)
        .send()
        .await;
    assert!(gave_up.is_err(), "the client timed out");
    assert_eq!(app.count_jobs().await, 1);
    let retry = post(
        &app,
        "/api/v1/images/generations",
        &app.key,
        "impatient-1",
        &body,
    )
    .await;
    assert_eq!(retry.status, 409, "{}", retry.text);
    assert_eq!(retry.json()["error"]["code"], "idempotency_key_in_use");
    // Once the first request has answered (202: still running), its answer
    // is the key's.
    let retry = loop {
        let retry = post(
            &app,
            "/api/v1/images/generations",
            &app.key,
            "impatient-1",
            &body,
        )
        .await;
        if retry.status != 409 {
            break retry;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    assert_eq!(retry.status, 202, "{}", retry.text);
    assert!(retry.replayed);
    let job = retry.json();
    assert_eq!(job["status"], "pending");
    assert_eq!(app.count_jobs().await, 1, "no second job");
    assert_eq!(app.job(job["id"].as_str().unwrap()).await["id"], job["id"]);
}
