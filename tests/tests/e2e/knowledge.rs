//! Knowledge files of agents: upload of every accepted format, processing by
//! the knowledge worker into embedded chunks, retrieval for runs, failures
//! with a user-facing message, plan limits, organization isolation,
//! deletion, and the scheduler's re-publishing and lease rescue.

use std::io::Write;
use std::time::Duration;

use reqwest::multipart::{Form, Part};
use serde_json::{Value, json};
use unigen_knowledge::retrieve::{Embedder, relevant_excerpts};
use unigen_tests::{TestApp, TestOptions, json_of};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);

async fn create_agent(app: &TestApp, key: &str, name: &str) -> String {
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/agents",
            key,
            &json!({"name": name, "system_prompt": "Answer from the knowledge base."}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body["agent"]["id"].as_str().unwrap().to_owned()
}

async fn upload_form(app: &TestApp, key: &str, agent: &str, form: Form) -> (u16, Value) {
    let response = app
        .client
        .post(app.url(&format!("/api/v1/agents/{agent}/knowledge")))
        .bearer_auth(key)
        .multipart(form)
        .send()
        .await
        .expect("POST knowledge");
    json_of(response).await
}

async fn upload(app: &TestApp, key: &str, agent: &str, name: &str, bytes: Vec<u8>) -> (u16, Value) {
    let form = Form::new().part("file", Part::bytes(bytes).file_name(name.to_owned()));
    upload_form(app, key, agent, form).await
}

/// Uploads and returns the file id (asserting 201 and `pending`).
async fn upload_ok(app: &TestApp, agent: &str, name: &str, bytes: Vec<u8>) -> String {
    let (status, body) = upload(app, &app.key, agent, name, bytes).await;
    assert_eq!(status, 201, "{name}: {body}");
    let file = &body["file"];
    assert_eq!(file["status"], "pending", "{body}");
    assert_eq!(file["agent_id"], agent);
    assert_eq!(file["filename"], name);
    assert_eq!(file["error_message"], Value::Null);
    file["id"].as_str().unwrap().to_owned()
}

/// Waits (reading the database: the plan's rate limit applies to the API)
/// until the file is `completed` or `failed`, then reads it through the API.
async fn wait_processed(app: &TestApp, agent: &str, id: &str) -> Value {
    let uuid: Uuid = id.parse().unwrap();
    let client = app.db.client().await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status: String = client
            .query_one("SELECT status FROM knowledge_files WHERE id = $1", &[&uuid])
            .await
            .expect("the file row")
            .get(0);
        if status == "completed" || status == "failed" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "file {id} still {status} after {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = json_of(
        app.get(&format!("/api/v1/agents/{agent}/knowledge/{id}"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["file"].clone()
}

async fn chunk_count(app: &TestApp, id: &str) -> i64 {
    let uuid: Uuid = id.parse().unwrap();
    app.db
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM knowledge_chunks WHERE file_id = $1",
            &[&uuid],
        )
        .await
        .unwrap()
        .get(0)
}

fn pdf(title: &str, content: &str) -> Vec<u8> {
    let spec = unigen_artifacts::document::parse_document_spec(
        &json!({"format": "pdf", "title": title, "content": content}),
    )
    .expect("a valid document");
    unigen_artifacts::document::render_document(&spec)
        .expect("a PDF")
        .bytes
}

fn docx(paragraphs: &[&str]) -> Vec<u8> {
    let body: String = paragraphs
        .iter()
        .map(|p| format!("<w:p><w:r><w:t>{p}</w:t></w:r></w:p>"))
        .collect();
    let xml = format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>{body}</w:body></w:document>"#
    );
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    writer.start_file("[Content_Types].xml", options).unwrap();
    writer
        .write_all(br#"<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>"#)
        .unwrap();
    writer.start_file("word/document.xml", options).unwrap();
    writer.write_all(xml.as_bytes()).unwrap();
    writer.finish().unwrap().into_inner()
}

async fn excerpts(app: &TestApp, agent: &str, query: &str) -> Vec<(String, String)> {
    let mut conn = app.db.connect().await;
    let embedder = Embedder::new(&app.settings);
    relevant_excerpts(&mut conn, &embedder, agent.parse().unwrap(), query, 3)
        .await
        .expect("retrieval")
        .into_iter()
        .map(|e| (e.file_id.to_string(), e.content))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knowledge_files_of_every_format_are_processed_and_the_right_one_is_retrieved() {
    let app = TestApp::spawn().await;
    let agent = create_agent(&app, &app.key, "Librarian").await;
    let other_agent = create_agent(&app, &app.key, "Other").await;
    let files = [
        (
            "notes.txt",
            b"The lighthouse keeper logs the weather every morning at six.\n\nStorms are reported to the harbour master by radio.".to_vec(),
        ),
        (
            "guide.md",
            b"# Sourdough\n\nFeed the starter with flour and water, then let the dough rise overnight.".to_vec(),
        ),
        (
            "prices.csv",
            b"product,price\nvolcanic basalt tiles,42\ngranite countertop slab,990\n".to_vec(),
        ),
        (
            "orbit.pdf",
            pdf("Orbital mechanics", "A satellite in geostationary orbit circles the planet once per sidereal day."),
        ),
        (
            "bees.docx",
            docx(&["Honeybees communicate the location of nectar with a waggle dance.", "The queen lays eggs in the brood comb."]),
        ),
    ];
    let mut ids = Vec::new();
    for (name, bytes) in &files {
        ids.push(upload_ok(&app, &agent, name, bytes.clone()).await);
    }
    // The same words under another agent must never be retrieved for this one.
    let (status, body) = upload(
        &app,
        &app.key,
        &other_agent,
        "decoy.txt",
        b"Honeybees communicate the location of nectar with a waggle dance.".to_vec(),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    for ((name, _), id) in files.iter().zip(&ids) {
        let file = wait_processed(&app, &agent, id).await;
        assert_eq!(file["status"], "completed", "{name}: {file}");
        assert_eq!(file["error_message"], Value::Null);
        let chunks = file["chunk_count"].as_i64().unwrap();
        assert!(chunks >= 1, "{name}: {file}");
        assert_eq!(chunk_count(&app, id).await, chunks, "{name}");
        assert!(file["processed_at"].is_string(), "{file}");
    }
    let expected_formats = ["text", "markdown", "csv", "pdf", "docx"];
    let (status, list) = json_of(
        app.get(&format!("/api/v1/agents/{agent}/knowledge"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{list}");
    let listed: Vec<&str> = list["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    let newest_first: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    assert_eq!(listed, newest_first, "newest first, only this agent's");
    let formats: Vec<&str> = list["files"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|f| f["format"].as_str().unwrap())
        .collect();
    assert_eq!(formats, expected_formats);

    for (query, index, needle) in [
        (
            "how do honeybees communicate where nectar is",
            4,
            "waggle dance",
        ),
        ("geostationary satellite orbit", 3, "geostationary"),
        ("price of granite countertop", 2, "granite"),
        ("sourdough starter flour", 1, "starter"),
        ("lighthouse keeper weather log", 0, "lighthouse"),
    ] {
        let found = excerpts(&app, &agent, query).await;
        assert!(!found.is_empty(), "{query}");
        assert_eq!(found[0].0, ids[index], "{query}: {found:?}");
        assert!(found[0].1.contains(needle), "{query}: {found:?}");
        assert!(
            found.iter().all(|(file, _)| ids.contains(file)),
            "only the agent's own files: {found:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_pdf_fails_with_a_message_for_the_user_and_is_never_retrieved() {
    let app = TestApp::spawn().await;
    let agent = create_agent(&app, &app.key, "Reader").await;
    let id = upload_ok(
        &app,
        &agent,
        "broken.pdf",
        b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\nthis is not a real PDF body".to_vec(),
    )
    .await;
    let file = wait_processed(&app, &agent, &id).await;
    assert_eq!(file["status"], "failed", "{file}");
    let message = file["error_message"].as_str().unwrap();
    assert!(
        message.starts_with("the PDF could not be read"),
        "{message}"
    );
    assert_eq!(file["chunk_count"], 0);
    assert_eq!(chunk_count(&app, &id).await, 0);
    let attempts = app
        .db
        .scalar_i64(&format!(
            "SELECT attempt::bigint FROM knowledge_files WHERE id = '{id}'"
        ))
        .await;
    assert_eq!(attempts, 1, "a corrupt file is not retried");
    assert!(excerpts(&app, &agent, "real PDF body").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_are_validated_with_the_file_field_named() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let agent = create_agent(&app, &app.key, "Strict").await;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "photo.png",
            b"\x89PNG\r\n\x1a\n....".to_vec(),
            "unsupported file type .png: upload PDF, Markdown, TXT, CSV or DOCX",
        ),
        (
            "README",
            b"no extension".to_vec(),
            "unsupported file type (the file name has no extension)",
        ),
        (
            "fake.pdf",
            b"just some text".to_vec(),
            "the file's content does not match its .pdf extension",
        ),
        ("empty.txt", Vec::new(), "the file contains no text"),
    ];
    for (name, bytes, message) in cases {
        let (status, body) = upload(&app, &app.key, &agent, name, bytes).await;
        assert_eq!(status, 400, "{name}: {body}");
        assert_eq!(body["error"]["param"], "file", "{name}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(message),
            "{name}: {body}"
        );
    }
    let form = Form::new().text("note", "no file here");
    let (status, body) = upload_form(&app, &app.key, &agent, form).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["message"], "file is required");
    assert_eq!(body["error"]["param"], "file");

    let (status, body) = json_of(
        app.post_json(
            &format!("/api/v1/agents/{agent}/knowledge"),
            &app.key,
            &json!({"file": "x"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "a JSON body: {body}");
    assert_eq!(body["error"]["param"], "file");

    // Templates take no files (duplicate them first).
    let (_, templates) = json_of(
        app.get("/api/v1/agents?include_templates=true", &app.key)
            .await,
    )
    .await;
    let template = templates["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["is_template"] == true)
        .expect("a template")["id"]
        .as_str()
        .unwrap();
    let (status, body) = upload(&app, &app.key, template, "a.txt", b"text".to_vec()).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "template_read_only", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("templates have no knowledge files"),
        "{body}"
    );
    let rows = app
        .db
        .scalar_i64("SELECT count(*) FROM knowledge_files")
        .await;
    assert_eq!(rows, 0, "nothing recorded");
    let stored = app.settings.storage.dir.join("knowledge");
    assert!(!stored.exists(), "nothing stored: {stored:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_limits_file_count_and_size_and_free_has_no_knowledge_files() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let agent = create_agent(&app, &app.key, "Pro agent").await;
    // Pro: 5 files per agent.
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(upload_ok(&app, &agent, &format!("f{i}.txt"), b"some words".to_vec()).await);
    }
    // Refused before the file is read, yet answered (the body is drained).
    let (status, body) = upload(&app, &app.key, &agent, "f5.txt", vec![b'a'; 3 << 20]).await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["code"], "limit_reached");
    assert_eq!(
        body["error"]["message"],
        "Knowledge file limit reached: the Pro plan allows 5 knowledge files per agent"
    );
    let response = app
        .delete(
            &format!("/api/v1/agents/{agent}/knowledge/{}", ids[0]),
            &app.key,
        )
        .await;
    assert_eq!(response.status(), 204);
    upload_ok(&app, &agent, "f5.txt", b"more".to_vec()).await;

    // Pro: 10 MB per file; one byte more is refused and nothing is stored.
    let second = create_agent(&app, &app.key, "Second").await;
    let too_big = vec![b'a'; 10 * 1024 * 1024 + 1];
    let (status, body) = upload(&app, &app.key, &second, "big.txt", too_big).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "file");
    assert_eq!(
        body["error"]["message"],
        "file is too large: the Pro plan allows files up to 10 MB"
    );
    let rows = app
        .db
        .scalar_i64(&format!(
            "SELECT count(*) FROM knowledge_files WHERE agent_id = '{second}'"
        ))
        .await;
    assert_eq!(rows, 0);

    // Free: agents (and so knowledge files) are not on the plan.
    let free = app.create_org("Free org", "free").await;
    let free_key = app.create_key(free, &["all"], None).await;
    let (status, body) = upload(
        &app,
        &free_key,
        &Uuid::now_v7().to_string(),
        "a.txt",
        b"x".to_vec(),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "not_available_on_plan");
    assert_eq!(
        body["error"]["message"],
        "Agents are not available on the Free plan"
    );
    // A key without the `agents` scope.
    let images_only = app.create_key(app.org_id, &["image"], None).await;
    let (status, body) = upload(&app, &images_only, &agent, "a.txt", b"x".to_vec()).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body["error"]["message"],
        "API key does not have required scope: agents"
    );
}

/// The status of `POST /agents` declaring a body of `length` bytes (only
/// `{}` is sent: the limit is checked against the declared length).
async fn declared_length_status(app: &TestApp, key: &str, length: usize) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = app.base_url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /api/v1/agents HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n{{}}"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.unwrap();
    let line = String::from_utf8_lossy(&head);
    line["HTTP/1.1 ".len()..].trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_larger_than_the_general_body_limit_fit_the_cli_team_plan_only_on_this_route() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let team = app.create_org("Team org", "cli_team").await;
    let team_key = app.create_key(team, &["all"], None).await;
    let agent = create_agent(&app, &team_key, "Big files").await;
    let max_body = app.settings.http.max_body_bytes;
    assert!(max_body < 30 * 1024 * 1024);
    let mut big = b"%PDF-1.7\n".to_vec();
    big.resize(30 * 1024 * 1024, b' ');
    let (status, body) = upload(&app, &team_key, &agent, "big.pdf", big.clone()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["file"]["size_bytes"], 30 * 1024 * 1024);
    // Other routes keep http.max_body_bytes: refused from the declared length.
    assert_eq!(
        declared_length_status(&app, &team_key, max_body + 1).await,
        413
    );
    assert_eq!(declared_length_status(&app, &team_key, 2).await, 400);
    // Above CLI Team's 50 MB: refused.
    big.resize(50 * 1024 * 1024 + 1, b' ');
    let (status, body) = upload(&app, &team_key, &agent, "bigger.pdf", big).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["error"]["message"],
        "file is too large: the CLI Team plan allows files up to 50 MB"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_organizations_agent_or_file_is_not_found_and_deletion_removes_everything() {
    let app = TestApp::spawn().await;
    let agent = create_agent(&app, &app.key, "Mine").await;
    let sibling = create_agent(&app, &app.key, "Sibling").await;
    let id = upload_ok(
        &app,
        &agent,
        "secret.md",
        b"# Launch plan\n\nThe product launches on the first of March.".to_vec(),
    )
    .await;
    let file = wait_processed(&app, &agent, &id).await;
    assert_eq!(file["status"], "completed", "{file}");
    assert!(chunk_count(&app, &id).await > 0);

    let other = app.create_org("Other", "pro").await;
    let other_key = app.create_key(other, &["all"], None).await;
    let unknown = Uuid::now_v7().to_string();
    let cases = [
        (
            format!("/api/v1/agents/{agent}/knowledge"),
            "agent",
            agent.clone(),
        ),
        (
            format!("/api/v1/agents/{agent}/knowledge/{id}"),
            "knowledge file",
            id.clone(),
        ),
    ];
    for (path, kind, raw) in &cases {
        let (status, body) = json_of(app.get(path, &other_key).await).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["error"]["message"], format!("{kind} {raw} not found"));
    }
    let (status, body) = json_of(
        app.get(
            &format!("/api/v1/agents/{agent}/knowledge/{unknown}"),
            &app.key,
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, &body["error"]["message"]),
        (404, &json!(format!("knowledge file {unknown} not found")))
    );
    let (status, _) = json_of(
        app.get(
            &format!("/api/v1/agents/{sibling}/knowledge/{id}"),
            &app.key,
        )
        .await,
    )
    .await;
    assert_eq!(status, 404, "a file is read under its own agent only");
    let (status, body) = upload(&app, &other_key, &agent, "x.txt", b"x".to_vec()).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["message"], format!("agent {agent} not found"));
    let response = app
        .delete(
            &format!("/api/v1/agents/{agent}/knowledge/{id}"),
            &other_key,
        )
        .await;
    assert_eq!(response.status(), 404);
    assert!(
        chunk_count(&app, &id).await > 0,
        "untouched by the other org"
    );

    let stored = app
        .settings
        .storage
        .dir
        .join(format!("knowledge/{}/{id}", app.org_id));
    assert!(stored.join("secret.md").is_file(), "{stored:?}");
    let response = app
        .delete(&format!("/api/v1/agents/{agent}/knowledge/{id}"), &app.key)
        .await;
    assert_eq!(response.status(), 204);
    assert_eq!(chunk_count(&app, &id).await, 0, "chunks deleted");
    assert!(!stored.exists(), "bytes deleted");
    let (status, _) = json_of(
        app.get(&format!("/api/v1/agents/{agent}/knowledge/{id}"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 404);
    assert!(
        excerpts(&app, &agent, "when does the product launch")
            .await
            .is_empty()
    );
    let response = app
        .delete(&format!("/api/v1/agents/{agent}/knowledge/{id}"), &app.key)
        .await;
    assert_eq!(response.status(), 404, "deleted once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_whose_publish_was_lost_is_processed_after_the_scheduler_publishes_it() {
    // The API cannot reach the broker: uploads still succeed, unpublished.
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_scheduler()
            .configure_api(|s| s.rabbitmq.url = "amqp://guest:guest@127.0.0.1:1/%2f".into()),
    )
    .await;
    let agent = create_agent(&app, &app.key, "Patient").await;
    let id = upload_ok(
        &app,
        &agent,
        "later.txt",
        b"The archive opens at nine and closes at five.".to_vec(),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let enqueued = app
        .db
        .scalar_i64(&format!(
            "SELECT count(*) FROM knowledge_files WHERE id = '{id}' AND status = 'pending' AND enqueued_at IS NULL"
        ))
        .await;
    assert_eq!(
        enqueued, 1,
        "unpublished and unprocessed without a scheduler"
    );
    let _scheduler = app.spawn_scheduler(|_| {});
    let file = wait_processed(&app, &agent, &id).await;
    assert_eq!(file["status"], "completed", "{file}");
    let found = excerpts(&app, &agent, "when does the archive open").await;
    assert_eq!(found.first().map(|f| f.0.as_str()), Some(id.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_leases_are_retried_and_a_file_out_of_attempts_fails_with_the_last_reason() {
    let mut app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let agent = create_agent(&app, &app.key, "Rescued").await;
    let lost = upload_ok(
        &app,
        &agent,
        "lost.txt",
        b"Ferries leave the pier hourly.".to_vec(),
    )
    .await;
    let doomed = upload_ok(&app, &agent, "doomed.txt", b"Never processed.".to_vec()).await;
    let max = app.settings.jobs.max_attempts;
    // As a worker that died leaves them: processing, lease run out.
    app.sql(&format!(
        "UPDATE knowledge_files SET status = 'processing', worker_id = 'dead-worker', \
             lease_expires_at = now() - interval '1 second', attempt = 1 WHERE id = '{lost}'; \
         UPDATE knowledge_files SET status = 'processing', worker_id = 'dead-worker', \
             lease_expires_at = now() - interval '1 second', attempt = {max}, \
             error_message = 'embedding the text failed: provider temporarily unavailable: the upstream timed out' \
             WHERE id = '{doomed}'"
    ))
    .await;
    let file = wait_processed(&app, &agent, &doomed).await;
    assert_eq!(file["status"], "failed", "{file}");
    assert_eq!(
        file["error_message"],
        format!(
            "processing the file failed {max} times (embedding the text failed: provider \
             temporarily unavailable: the upstream timed out); upload it again later"
        )
    );
    // The other is pending again, re-published, and a worker finishes it.
    let _worker = app.spawn_worker(|_| {});
    let file = wait_processed(&app, &agent, &lost).await;
    assert_eq!(file["status"], "completed", "{file}");
    let attempts = app
        .db
        .scalar_i64(&format!(
            "SELECT attempt::bigint FROM knowledge_files WHERE id = '{lost}'"
        ))
        .await;
    assert_eq!(attempts, 2, "the rescued attempt counts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_embedding_failure_is_retried_until_the_attempts_run_out() {
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        // Every embedding call fails transiently.
        s.local_provider.failure_rate = 1.0;
        s.knowledge.retry_delay_seconds = 1;
    }))
    .await;
    let agent = create_agent(&app, &app.key, "Unlucky").await;
    let id = upload_ok(&app, &agent, "flaky.txt", b"Retry me later.".to_vec()).await;
    let file = wait_processed(&app, &agent, &id).await;
    let max = app.settings.jobs.max_attempts;
    assert_eq!(file["status"], "failed", "{file}");
    assert_eq!(
        file["error_message"],
        format!(
            "processing the file failed {max} times (embedding the text failed: provider \
             temporarily unavailable: local provider: injected failure); upload it again later"
        )
    );
    let attempts = app
        .db
        .scalar_i64(&format!(
            "SELECT attempt::bigint FROM knowledge_files WHERE id = '{id}'"
        ))
        .await;
    assert_eq!(attempts, i64::from(max), "claimed once per attempt");
}

/// A worker that stops right after its claim hands the file back (pending,
/// unpublished) while the upload's publish confirm may still be on its way:
/// that late confirm must not mark the file published, or no message would
/// ever bring it to a worker again. The relay's own publish marks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_publish_confirm_leaves_a_handed_back_file_to_the_relay() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let agent = create_agent(&app, &app.key, "Handed back").await;
    let fresh: Uuid = upload_ok(&app, &agent, "fresh.txt", b"Still untouched.".to_vec())
        .await
        .parse()
        .unwrap();
    let released: Uuid = upload_ok(&app, &agent, "released.txt", b"Handed back.".to_vec())
        .await
        .parse()
        .unwrap();
    // Both as if their confirms had not arrived yet; the second as
    // `queries::knowledge::release` leaves a file: pending, attempt put back,
    // its row touched since the upload.
    app.sql(&format!(
        "UPDATE knowledge_files SET enqueued_at = NULL WHERE id = '{fresh}'; \
         UPDATE knowledge_files SET enqueued_at = NULL, updated_at = now() \
             WHERE id = '{released}'"
    ))
    .await;
    let mut conn = app.db.connect().await;
    let confirmed = unigen_db::queries::knowledge::mark_enqueued(&mut conn, &[fresh, released])
        .await
        .unwrap();
    assert_eq!(
        confirmed, 1,
        "the late confirms mark the untouched file only"
    );
    let unpublished = app
        .db
        .scalar_i64(&format!(
            "SELECT count(*) FROM knowledge_files WHERE id = '{released}' AND enqueued_at IS NULL"
        ))
        .await;
    assert_eq!(unpublished, 1, "the handed-back file is left to the relay");
    let republished = unigen_db::queries::knowledge::mark_republished(&mut conn, &[released])
        .await
        .unwrap();
    assert_eq!(republished, 1, "the relay's publish marks it");
}
