//! OpenAI's Files and Batches APIs (`/api/v1/files`, `/api/v1/batches`):
//! the unchanged OpenAI Python SDK end to end (tests/sdk/python/
//! batches_check.py), bad input files, tenancy, cancel, expiry, a worker
//! killed mid-batch (each line charged once), a large batch next to sync
//! traffic, and metering as the sync endpoint.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, json_of};

use crate::clients::{client_command, root, run_to_success};

const STACK: &str = env!("CARGO_BIN_EXE_unigen-stack");
const CHAT: &str = "/v1/chat/completions";

fn chat_line(custom_id: &str, text: &str) -> Value {
    json!({"custom_id": custom_id, "method": "POST", "url": CHAT,
           "body": {"model": "local/echo", "messages": [{"role": "user", "content": text}]}})
}

fn jsonl(lines: &[Value]) -> Vec<u8> {
    let mut out = String::new();
    for line in lines {
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out.into_bytes()
}

async fn upload(app: &TestApp, key: &str, purpose: &str, bytes: Vec<u8>) -> (u16, Value) {
    let form = reqwest::multipart::Form::new()
        .text("purpose", purpose.to_owned())
        .part(
            "file",
            reqwest::multipart::Part::bytes(bytes).file_name("input.jsonl"),
        );
    json_of(
        app.client
            .post(app.url("/api/v1/files"))
            .bearer_auth(key)
            .multipart(form)
            .send()
            .await
            .unwrap(),
    )
    .await
}

async fn upload_ok(app: &TestApp, bytes: Vec<u8>) -> String {
    let (status, file) = upload(app, &app.key, "batch", bytes).await;
    assert_eq!(status, 200, "{file}");
    file["id"].as_str().unwrap().to_owned()
}

async fn create_batch(app: &TestApp, file_id: &str) -> (u16, Value) {
    json_of(
        app.post_json(
            "/api/v1/batches",
            &app.key,
            &json!({"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}),
        )
        .await,
    )
    .await
}

async fn batch(app: &TestApp, id: &str) -> Value {
    let (status, batch) = json_of(app.get(&format!("/api/v1/batches/{id}"), &app.key).await).await;
    assert_eq!(status, 200, "{batch}");
    batch
}

/// Polls the batch until its status is `status`.
async fn wait_for(app: &TestApp, id: &str, status: &str, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let batch = batch(app, id).await;
        if batch["status"] == status {
            return batch;
        }
        assert!(
            Instant::now() < deadline,
            "batch never reached {status}: {batch}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn until<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn file_lines(app: &TestApp, file_id: &str) -> Vec<Value> {
    let response = app
        .get(&format!("/api/v1/files/{file_id}/content"), &app.key)
        .await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn scalar(app: &TestApp, sql: &str) -> i64 {
    app.db.scalar_i64(sql).await
}

/// custom_id -> the output or error line, with each custom_id at most once.
async fn results(app: &TestApp, batch: &Value) -> HashMap<String, Value> {
    let mut all = HashMap::new();
    for key in ["output_file_id", "error_file_id"] {
        if let Some(id) = batch[key].as_str() {
            for line in file_lines(app, id).await {
                let custom_id = line["custom_id"].as_str().unwrap().to_owned();
                assert!(
                    all.insert(custom_id.clone(), line).is_none(),
                    "{custom_id} appears twice"
                );
            }
        }
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_runs_a_batch_to_completion() {
    let app = TestApp::spawn().await;
    let command = client_command(
        &app,
        &root().join(".venv/bin/python"),
        "tests/sdk/python/batches_check.py",
    );
    let printed = run_to_success(command, "tests/sdk/python/batches_check.py").await;
    eprintln!("{printed}");
    for flow in ["chat_batch", "errors"] {
        assert!(
            printed.contains(&format!("batches / {flow}\n")),
            "flow {flow} ran:\n{printed}"
        );
    }
    let events: Vec<String> = app
        .events()
        .await
        .into_iter()
        .map(|(kind, _)| kind)
        .collect();
    assert!(
        events.iter().any(|kind| kind == "batch.completed"),
        "a batch.completed event: {events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_input_file_is_refused_naming_its_first_bad_line() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let good = |n: usize| chat_line(&format!("r{n}"), "hi");
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (
            [jsonl(&[good(1), good(2)]), b"{not json\n".to_vec()].concat(),
            "line 3:",
            "not valid JSON",
        ),
        (
            jsonl(&[good(1), good(2), good(1)]),
            "line 3:",
            "\"r1\" is used by an earlier line",
        ),
        (
            jsonl(&[
                good(1),
                json!({"custom_id": "e", "method": "POST", "url": "/v1/embeddings", "body": {}}),
            ]),
            "line 2:",
            "must be the batch's endpoint",
        ),
        (
            jsonl(&[json!({"custom_id": "g", "method": "GET", "url": CHAT, "body": {}})]),
            "line 1:",
            "`method` must be \"POST\"",
        ),
        (
            jsonl(&[json!({"method": "POST", "url": CHAT, "body": {}})]),
            "line 1:",
            "`custom_id` is missing",
        ),
        (
            jsonl(&[json!({"custom_id": "b", "method": "POST", "url": CHAT, "body": [1]})]),
            "line 1:",
            "`body` must be a JSON object",
        ),
        (Vec::new(), "line 1:", "no request"),
    ];
    for (bytes, line, reason) in cases {
        let file_id = upload_ok(&app, bytes).await;
        let (status, body) = create_batch(&app, &file_id).await;
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(line), "{line}: {message}");
        assert!(message.contains(reason), "{reason}: {message}");
        assert_eq!(body["error"]["param"], "input_file_id");
    }
    // More than 50,000 requests: refused at the first extra line.
    let mut big = String::new();
    for n in 0..50_001 {
        big.push_str(&chat_line(&format!("n{n}"), "x").to_string());
        big.push('\n');
    }
    let file_id = upload_ok(&app, big.into_bytes()).await;
    let (status, body) = create_batch(&app, &file_id).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("line 50001: a batch holds at most 50000 requests"),
        "{body}"
    );
    // A refused batch leaves nothing behind.
    assert_eq!(scalar(&app, "SELECT count(*) FROM batches").await, 0);
    assert_eq!(scalar(&app, "SELECT count(*) FROM batch_lines").await, 0);

    // Bad fields name their param.
    let file_id = upload_ok(&app, jsonl(&[good(1)])).await;
    for (body, param) in [
        (
            json!({"input_file_id": file_id, "endpoint": "/v1/images/generations", "completion_window": "24h"}),
            "endpoint",
        ),
        (
            json!({"input_file_id": file_id, "endpoint": CHAT, "completion_window": "1h"}),
            "completion_window",
        ),
        (
            json!({"endpoint": CHAT, "completion_window": "24h"}),
            "input_file_id",
        ),
    ] {
        let (status, answer) =
            json_of(app.post_json("/api/v1/batches", &app.key, &body).await).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["param"], param, "{answer}");
    }
    // A file of another purpose is not a batch input.
    let (status, data) = upload(&app, &app.key, "user_data", jsonl(&[good(1)])).await;
    assert_eq!(status, 200, "{data}");
    let (status, answer) = create_batch(&app, data["id"].as_str().unwrap()).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["param"], "input_file_id");
    // A wrong purpose is refused and nothing is stored.
    let before = scalar(&app, "SELECT count(*) FROM files").await;
    for purpose in ["fine-tune", "batch_output", ""] {
        let (status, answer) = upload(&app, &app.key, purpose, jsonl(&[good(1)])).await;
        assert_eq!(status, 400, "{purpose}: {answer}");
        assert_eq!(answer["error"]["param"], "purpose", "{answer}");
    }
    assert_eq!(scalar(&app, "SELECT count(*) FROM files").await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_over_the_size_limit_is_refused_with_413() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.batches.max_file_bytes = 1000),
    )
    .await;
    let (status, answer) = upload(&app, &app.key, "batch", vec![b'a'; 5000]).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(scalar(&app, "SELECT count(*) FROM files").await, 0);
    let (status, _) = upload(&app, &app.key, "batch", vec![b'a'; 900]).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_organizations_files_and_batches_are_not_found() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let file_id = upload_ok(&app, jsonl(&[chat_line("a", "hi")])).await;
    let (status, created) = create_batch(&app, &file_id).await;
    assert_eq!(status, 200, "{created}");
    let batch_id = created["id"].as_str().unwrap();
    let other_org = app.create_org("Other", "pro").await;
    let other = app.create_key(other_org, &["all"], None).await;
    for path in [
        format!("/api/v1/files/{file_id}"),
        format!("/api/v1/files/{file_id}/content"),
        format!("/api/v1/batches/{batch_id}"),
    ] {
        let (status, body) = json_of(app.get(&path, &other).await).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (status, _) = json_of(
        app.delete(&format!("/api/v1/files/{file_id}"), &other)
            .await,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = json_of(
        app.post_json(
            &format!("/api/v1/batches/{batch_id}/cancel"),
            &other,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404);
    let (status, answer) = json_of(
        app.post_json(
            "/api/v1/batches",
            &other,
            &json!({"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404, "{answer}");
    let (_, listed) = json_of(app.get("/api/v1/batches", &other).await).await;
    assert_eq!(listed["data"], json!([]));
    let (_, listed) = json_of(app.get("/api/v1/files", &other).await).await;
    assert_eq!(listed["data"], json!([]));
    // The owner still sees both, also under `/v1`.
    let (status, _) = json_of(app.get(&format!("/v1/batches/{batch_id}"), &app.key).await).await;
    assert_eq!(status, 200);
    let (status, _) = json_of(app.get(&format!("/v1/files/{file_id}"), &app.key).await).await;
    assert_eq!(status, 200);
    // The batch is still cancelled by its owner (never ran: no worker).
    let (status, cancelled) = json_of(
        app.post_json(
            &format!("/api/v1/batches/{batch_id}/cancel"),
            &app.key,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelling");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_batch_mid_way_never_runs_or_charges_its_unstarted_lines() {
    let mut app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    // One line at a time, each taking a while: the batch is surely mid-way.
    app.sql("UPDATE plans SET max_batch_concurrency = 1").await;
    let _worker = app.spawn_worker(|s| s.local_provider.latency_ms = 300);
    let lines: Vec<Value> = (0..20).map(|n| chat_line(&format!("c{n}"), "hi")).collect();
    let file_id = upload_ok(&app, jsonl(&lines)).await;
    let (_, created) = create_batch(&app, &file_id).await;
    let id = created["id"].as_str().unwrap().to_owned();
    until("a first line answered", Duration::from_secs(60), || async {
        batch(&app, &id).await["request_counts"]["completed"]
            .as_i64()
            .unwrap()
            >= 1
    })
    .await;
    let (status, cancelling) = json_of(
        app.post_json(
            &format!("/api/v1/batches/{id}/cancel"),
            &app.key,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{cancelling}");
    assert_eq!(cancelling["status"], "cancelling");
    assert!(cancelling["cancelling_at"].is_i64());
    let ended = wait_for(&app, &id, "cancelled", Duration::from_secs(60)).await;
    assert!(ended["cancelled_at"].is_i64(), "{ended}");
    let completed = ended["request_counts"]["completed"].as_i64().unwrap();
    assert!((1..20).contains(&completed), "{ended}");
    assert_eq!(ended["request_counts"]["failed"], 0);
    let results = results(&app, &ended).await;
    assert_eq!(results.len(), 20, "every custom_id accounted for");
    let never_ran = results
        .values()
        .filter(|line| line["error"]["code"] == "batch_cancelled")
        .count() as i64;
    assert_eq!(never_ran + completed, 20);
    // Charged: exactly the answered lines; nothing is still held.
    assert_eq!(
        scalar(
            &app,
            "SELECT count(*) FROM usage_records WHERE endpoint = '/v1/chat/completions'"
        )
        .await,
        completed
    );
    assert_eq!(scalar(&app, "SELECT count(*) FROM reservations").await, 0);
    assert_eq!(
        scalar(
            &app,
            "SELECT count(*) FROM batch_lines WHERE status = 'cancelled'"
        )
        .await,
        never_ran
    );
    // An ended batch cannot be cancelled again.
    let (status, _) = json_of(
        app.post_json(
            &format!("/api/v1/batches/{id}/cancel"),
            &app.key,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400);
    let kinds: Vec<String> = app.events().await.into_iter().map(|(k, _)| k).collect();
    assert!(kinds.iter().any(|k| k == "batch.cancelled"), "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_past_its_window_expires_without_running_or_charging_its_lines() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let lines: Vec<Value> = (0..5).map(|n| chat_line(&format!("x{n}"), "hi")).collect();
    let file_id = upload_ok(&app, jsonl(&lines)).await;
    let (_, created) = create_batch(&app, &file_id).await;
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["status"], "in_progress");
    assert_eq!(
        created["expires_at"].as_i64().unwrap() - created["created_at"].as_i64().unwrap(),
        24 * 3600
    );
    app.sql(&format!(
        "UPDATE batches SET expires_at = now() - interval '1 second' WHERE id = '{id}'"
    ))
    .await;
    let ended = wait_for(&app, &id, "expired", Duration::from_secs(30)).await;
    assert!(ended["expired_at"].is_i64(), "{ended}");
    assert_eq!(ended["output_file_id"], Value::Null);
    let results = results(&app, &ended).await;
    assert_eq!(results.len(), 5);
    assert!(
        results
            .values()
            .all(|line| line["error"]["code"] == "batch_expired" && line["response"].is_null()),
        "{results:?}"
    );
    assert_eq!(scalar(&app, "SELECT count(*) FROM usage_records").await, 0);
    assert_eq!(scalar(&app, "SELECT count(*) FROM reservations").await, 0);
    let kinds: Vec<String> = app.events().await.into_iter().map(|(k, _)| k).collect();
    assert!(kinds.iter().any(|k| k == "batch.expired"), "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_batch_leaves_each_line_run_and_charged_once() {
    let mut app = TestApp::spawn_with(TestOptions::default().without_worker().configure(|s| {
        s.jobs.lease_seconds = 3;
        s.local_provider.latency_ms = 300;
        s.worker.tools = vec!["batch".into()];
    }))
    .await;
    let mut doomed = app.spawn_process(STACK, "worker", |_| {});
    let lines: Vec<Value> = (0..30)
        .map(|n| chat_line(&format!("k{n}"), &format!("m{n}")))
        .collect();
    let file_id = upload_ok(&app, jsonl(&lines)).await;
    let (_, created) = create_batch(&app, &file_id).await;
    let id = created["id"].as_str().unwrap().to_owned();
    until(
        "the worker to be mid-batch",
        Duration::from_secs(60),
        || async {
            let done = scalar(
                &app,
                "SELECT count(*) FROM batch_lines WHERE status = 'succeeded'",
            )
            .await;
            let running = scalar(
                &app,
                "SELECT count(*) FROM batch_lines WHERE status = 'running'",
            )
            .await;
            done >= 3 && running >= 1
        },
    )
    .await;
    doomed.kill().await;
    let _rescuer = app.spawn_worker(|_| {});
    let ended = wait_for(&app, &id, "completed", Duration::from_secs(120)).await;
    assert_eq!(ended["request_counts"]["completed"], 30, "{ended}");
    assert_eq!(ended["request_counts"]["failed"], 0, "{ended}");
    let results = results(&app, &ended).await;
    assert_eq!(results.len(), 30);
    for n in 0..30 {
        let line = &results[&format!("k{n}")];
        assert_eq!(
            line["response"]["body"]["choices"][0]["message"]["content"],
            format!("m{n}")
        );
    }
    // Each line charged exactly once, however many attempts it took.
    assert_eq!(
        scalar(&app, "SELECT count(*) FROM usage_records WHERE endpoint = '/v1/chat/completions' AND status = 'success'").await,
        30
    );
    assert_eq!(scalar(&app, "SELECT count(*) FROM reservations").await, 0);
    assert!(
        scalar(&app, "SELECT count(*) FROM batch_lines WHERE attempt > 1").await >= 1,
        "the lines the killed worker held ran again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_line_is_metered_as_the_same_sync_request() {
    let app = TestApp::spawn().await;
    let body = json!({"model": "local/echo", "messages": [{"role": "user", "content": "metered the same"}]});
    let (status, sync) = json_of(
        app.post_json("/api/v1/chat/completions", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{sync}");
    let line = json!({"custom_id": "m", "method": "POST", "url": CHAT, "body": body});
    let file_id = upload_ok(&app, jsonl(&[line])).await;
    let (_, created) = create_batch(&app, &file_id).await;
    let id = created["id"].as_str().unwrap().to_owned();
    let ended = wait_for(&app, &id, "completed", Duration::from_secs(60)).await;
    let results = results(&app, &ended).await;
    let answered = &results["m"]["response"]["body"];
    for field in [
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "credits_used",
    ] {
        assert_eq!(
            answered["usage"][field], sync["usage"][field],
            "{field}: {answered} vs {sync}"
        );
    }
    assert_eq!(answered["choices"], sync["choices"]);
    // Two usage records alike: same endpoint, model, tokens and credits.
    let alike = scalar(
        &app,
        "SELECT count(DISTINCT (endpoint, model, prompt_tokens, completion_tokens, credits, status))
           FROM usage_records",
    )
    .await;
    assert_eq!(alike, 1);
    assert_eq!(scalar(&app, "SELECT count(*) FROM usage_records").await, 2);
    // The batch line's key is recorded as the creator's.
    assert_eq!(
        scalar(&app, "SELECT count(DISTINCT api_key_id) FROM usage_records").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_thousand_line_batch_completes_while_sync_chat_still_answers() {
    let app = TestApp::spawn().await;
    app.sql("UPDATE plans SET rate_limit_per_minute = 1000000, concurrent_requests = 10000, chat_tokens = NULL")
        .await;
    // Credits for 10,000 lines (the account exists after a first request).
    let body = json!({"model": "local/echo", "messages": [{"role": "user", "content": "open the account"}]});
    let (status, _) = json_of(
        app.post_json("/api/v1/chat/completions", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200);
    app.sql(&format!(
        "UPDATE billing_accounts SET purchased_balance = 100000000 WHERE org_id = '{}'",
        app.org_id
    ))
    .await;
    let lines: Vec<Value> = (0..10_000)
        .map(|n| chat_line(&format!("t{n}"), "x"))
        .collect();
    let file_id = upload_ok(&app, jsonl(&lines)).await;
    let started = Instant::now();
    let (status, created) = create_batch(&app, &file_id).await;
    assert_eq!(status, 200, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let body =
        json!({"model": "local/echo", "messages": [{"role": "user", "content": "still here"}]});
    let mut sync_latencies = Vec::new();
    loop {
        let asked = Instant::now();
        let (status, answer) = json_of(
            app.post_json("/api/v1/chat/completions", &app.key, &body)
                .await,
        )
        .await;
        assert_eq!(status, 200, "sync chat answers during the batch: {answer}");
        sync_latencies.push(asked.elapsed());
        let batch = batch(&app, &id).await;
        if batch["status"] == "completed" {
            assert_eq!(batch["request_counts"]["completed"], 10_000, "{batch}");
            assert_eq!(batch["request_counts"]["failed"], 0, "{batch}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the batch did not complete: {batch}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = started.elapsed();
    sync_latencies.sort();
    eprintln!(
        "10,000-line batch on local/echo: {} ms ({:.0} lines/s); {} sync chat requests meanwhile, median {} ms, max {} ms",
        took.as_millis(),
        10_000.0 / took.as_secs_f64(),
        sync_latencies.len(),
        sync_latencies[sync_latencies.len() / 2].as_millis(),
        sync_latencies.last().unwrap().as_millis()
    );
}
