//! `GET /jobs/{id}/events`: a job's changes as server-sent events, resumable
//! with `Last-Event-ID`.

use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, json_of};

type Body = Pin<Box<dyn Stream<Item = reqwest::Result<Vec<u8>>> + Send>>;

#[derive(Debug)]
struct Event {
    kind: String,
    id: String,
    data: Value,
}

/// An open event stream, read event by event.
struct Sse {
    body: Body,
    buffer: String,
}

impl Sse {
    async fn open(app: &TestApp, job: &str, last_event_id: Option<&str>) -> Sse {
        let mut request = app
            .client
            .get(app.url(&format!("/api/v1/jobs/{job}/events")))
            .bearer_auth(&app.key);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.expect("GET events");
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Sse {
            body: Box::pin(
                response
                    .bytes_stream()
                    .map(|chunk| chunk.map(|b| b.to_vec())),
            ),
            buffer: String::new(),
        }
    }

    /// The next event (keep-alive comments skipped); `None` once the server
    /// ended the stream.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = parse_frame(&self.next_frame().await?) {
                return Some(event);
            }
        }
    }

    /// The next frame as sent, comments included.
    async fn next_frame(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                return Some(self.buffer.drain(..end + 2).collect());
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.body.next())
                .await
                .expect("a frame or the end within 30 s")?
                .expect("reading the stream");
            self.buffer
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }

    /// Every event until the server ends the stream.
    async fn rest(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event);
        }
        events
    }
}

/// `None` for a comment-only frame (`: keep-alive`).
fn parse_frame(frame: &str) -> Option<Event> {
    let (mut kind, mut id, mut data) = (None, None, None);
    for line in frame.lines() {
        if let Some(value) = line.strip_prefix("event: ") {
            kind = Some(value.to_owned());
        } else if let Some(value) = line.strip_prefix("id: ") {
            id = Some(value.to_owned());
        } else if let Some(value) = line.strip_prefix("data: ") {
            data = Some(serde_json::from_str(value).expect("data is JSON"));
        } else {
            assert!(line.is_empty() || line.starts_with(':'), "{line:?}");
        }
    }
    let data = data?;
    Some(Event {
        kind: kind.expect("every event has a type"),
        id: id.expect("every event has an id"),
        data,
    })
}

/// An event id as its ordered parts (status rank, attempt, progress).
fn position(id: &str) -> (u8, i32, i16) {
    let parts: Vec<&str> = id.split('-').collect();
    assert_eq!(parts.len(), 3, "{id}");
    (
        parts[0].parse().unwrap(),
        parts[1].parse().unwrap(),
        parts[2].parse().unwrap(),
    )
}

/// Moves a job as a worker would (in SQL), then notifies as the worker does.
async fn move_job(app: &TestApp, id: &str, set: &str) {
    let channel = &app.settings.notify.channel;
    app.sql(&format!(
        "UPDATE jobs SET {set} WHERE id = '{id}'; SELECT pg_notify('{channel}', '{id}')"
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_streams_every_change_from_pending_to_completed() {
    let mut app = TestApp::spawn_with(TestOptions::default().without_worker().configure(|s| {
        // Each of the 4 images takes this long: progress 25, 50, 75 in between.
        s.local_provider.latency_ms = 700;
        // Streams must wake on notifications, not on this re-read.
        s.notify.recheck_seconds = 120;
    }))
    .await;
    let id = app
        .submit_image_async(&json!({"prompt": "a lighthouse", "n": 4}))
        .await;
    let mut stream = Sse::open(&app, &id, None).await;
    let first = stream.next().await.expect("the current state first");
    assert_eq!(first.kind, "status");
    assert_eq!(first.id, "0-0-0");
    assert_eq!(first.data["status"], "pending");
    assert_eq!(first.data["id"], id);

    app.spawn_worker(|_| {});
    let events = stream.rest().await;
    let last = events.last().expect("events after pending");
    assert_eq!(last.kind, "status");
    assert_eq!(last.id, "2-1-100");
    assert_eq!(last.data["status"], "completed", "{:?}", last.data);
    assert_eq!(
        last.data["outputData"]["images"].as_array().unwrap().len(),
        4
    );
    // The same JSON as GET /jobs/{id} (signed URLs aside, which carry their time).
    let job = app.job(&id).await;
    for field in [
        "id",
        "status",
        "progress",
        "actualCredits",
        "completedAt",
        "usage",
    ] {
        assert_eq!(last.data[field], job[field], "{field}");
    }

    let processing = &events[0];
    assert_eq!(processing.kind, "status", "{events:?}");
    assert_eq!(processing.id, "1-1-0");
    assert_eq!(processing.data["status"], "processing");
    let progress: Vec<&Event> = events.iter().filter(|e| e.kind == "progress").collect();
    assert!(!progress.is_empty(), "progress is streamed: {events:?}");
    for event in &progress {
        assert_eq!(event.data["status"], "processing");
        let percent = event.data["progress"].as_i64().unwrap();
        assert!([25, 50, 75].contains(&percent), "{percent}");
        assert_eq!(event.id, format!("1-1-{percent}"));
    }
    // One event per change, in the job's order: ids strictly increase.
    let mut ids = vec![position(&first.id)];
    ids.extend(events.iter().map(|e| position(&e.id)));
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_resumes_after_its_last_event_without_loss_or_repeat() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.notify.recheck_seconds = 120),
    )
    .await;
    let id = app.submit_image_async(&json!({"prompt": "resumed"})).await;

    let mut first = Sse::open(&app, &id, None).await;
    assert_eq!(first.next().await.unwrap().id, "0-0-0");
    move_job(
        &app,
        &id,
        "status = 'processing', attempt = 1, started_at = now(), progress = 0",
    )
    .await;
    let seen = first.next().await.unwrap();
    assert_eq!((seen.kind.as_str(), seen.id.as_str()), ("status", "1-1-0"));
    // The connection drops.
    drop(first);

    // Resumed at the current state: nothing is sent again; the next event
    // is the next change.
    let mut second = Sse::open(&app, &id, Some("1-1-0")).await;
    move_job(&app, &id, "progress = 40").await;
    let next = second.next().await.unwrap();
    assert_eq!(
        (next.kind.as_str(), next.id.as_str()),
        ("progress", "1-1-40")
    );
    assert_eq!(next.data["progress"], 40);
    drop(second);

    // Changes while nobody listens: the resumed stream starts with the
    // newest state, then the terminal one, and ends.
    move_job(&app, &id, "progress = 70").await;
    let mut third = Sse::open(&app, &id, Some("1-1-40")).await;
    let current = third.next().await.unwrap();
    assert_eq!(
        (current.kind.as_str(), current.id.as_str()),
        ("progress", "1-1-70")
    );
    let (status, _) = json_of(app.delete(&format!("/api/v1/jobs/{id}"), &app.key).await).await;
    assert_eq!(status, 200, "cancelled through the API");
    let rest = third.rest().await;
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0].kind, "status");
    assert_eq!(rest[0].data["status"], "cancelled");
    let terminal_id = rest[0].id.clone();
    assert_eq!(position(&terminal_id).0, 2);

    // Resumed after the terminal event: nothing more, the stream ends.
    let mut after_end = Sse::open(&app, &id, Some(&terminal_id)).await;
    assert!(after_end.rest().await.is_empty());
    // Resumed before it: exactly the terminal event again.
    let mut late = Sse::open(&app, &id, Some("1-1-70")).await;
    let events = late.rest().await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].id, terminal_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_streams_its_final_event_and_ends() {
    let app = TestApp::spawn().await;
    let id = app.submit_image_async(&json!({"prompt": "done"})).await;
    let job = app.wait_for_job(&id, Duration::from_secs(60)).await;
    assert_eq!(job["status"], "completed");

    let mut stream = Sse::open(&app, &id, None).await;
    let events = stream.rest().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].kind, "status");
    assert_eq!(events[0].id, "2-1-100");
    assert_eq!(events[0].data["status"], "completed");
    assert_eq!(events[0].data["id"], id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_organizations_job_stream_is_a_json_404_and_bad_requests_are_refused() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let id = app.submit_image_async(&json!({"prompt": "private"})).await;
    let other_org = app.create_org("Other", "pro").await;
    let other_key = app.create_key(other_org, &["jobs"], None).await;

    let response = app
        .get(&format!("/api/v1/jobs/{id}/events"), &other_key)
        .await;
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "an error, not a stream"
    );
    let (status, body) = json_of(response).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");

    let unknown = app
        .get(
            "/api/v1/jobs/0190a4a2-0000-7000-8000-000000000000/events",
            &app.key,
        )
        .await;
    assert_eq!(unknown.status(), 404);

    let image_only = app.create_key(app.org_id, &["image"], None).await;
    let (status, body) = json_of(
        app.get(&format!("/api/v1/jobs/{id}/events"), &image_only)
            .await,
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(
        body["error"]["message"],
        "API key does not have required scope: jobs"
    );
    let usage_only = app.create_key(app.org_id, &["usage"], None).await;
    let mut request = app
        .client
        .get(app.url(&format!("/api/v1/jobs/{id}/events")))
        .bearer_auth(&usage_only)
        .send()
        .await
        .unwrap();
    assert_eq!(request.status(), 200, "usage suffices");
    let first = request.chunk().await.unwrap().unwrap();
    assert!(
        std::str::from_utf8(&first)
            .unwrap()
            .starts_with("event: status\nid: 0-0-0\ndata: {"),
        "{first:?}"
    );
    drop(request);

    for bad in ["5", "1-1", "3-0-0", "1-1-101", "x-y-z"] {
        let response = app
            .client
            .get(app.url(&format!("/api/v1/jobs/{id}/events")))
            .bearer_auth(&app.key)
            .header("Last-Event-ID", bad)
            .send()
            .await
            .unwrap();
        let (status, body) = json_of(response).await;
        assert_eq!(status, 400, "{bad}");
        assert_eq!(body["error"]["param"], "Last-Event-ID", "{bad}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_stream_sends_keep_alive_comments() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let id = app
        .submit_image_async(&json!({"prompt": "nobody works"}))
        .await;
    let mut stream = Sse::open(&app, &id, None).await;
    assert_eq!(stream.next().await.unwrap().id, "0-0-0");
    // Nothing happens to the job: the next frame is a comment (15 s later).
    assert_eq!(stream.next_frame().await.unwrap(), ": keep-alive\n\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_api_ends_its_streams_for_clients_to_resume_elsewhere() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let id = app.submit_image_async(&json!({"prompt": "moving"})).await;
    let mut stream = Sse::open(&app, &id, None).await;
    assert_eq!(stream.next().await.unwrap().id, "0-0-0");
    app.stop_api();
    // Ended at once: not held through the graceful stop (no keep-alive first).
    assert_eq!(stream.next_frame().await, None);
}
