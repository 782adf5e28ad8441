//! The soak's mixed workload: per organization, one action per tick, in
//! turn: a sync image, an async image followed by long polls, an async image
//! followed by its event stream, an async image resent with the same
//! `Idempotency-Key`, an async image cancelled at once, a chat completion,
//! a streamed chat completion. Every answer is recorded with its time, so
//! 5xx can be matched against the faults' windows.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// An organization of the run: its keys.
#[derive(Clone)]
pub(crate) struct Tenant {
    pub keys: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    SyncImage,
    AsyncLongPoll,
    AsyncEvents,
    Idempotent,
    Cancel,
    Chat,
    ChatStream,
}

const ACTIONS: [Action; 7] = [
    Action::SyncImage,
    Action::AsyncLongPoll,
    Action::AsyncEvents,
    Action::Idempotent,
    Action::Cancel,
    Action::Chat,
    Action::ChatStream,
];

/// What a cancel that came after the job's end is recorded as.
pub(crate) const CANCEL_TOO_LATE: &str = "cancel: the job had already ended";

/// One answer (or a request that got none).
#[derive(Clone, Debug)]
pub(crate) struct Outcome {
    pub at: Instant,
    pub action: Action,
    /// The HTTP status, `None` when the connection failed or was cut.
    pub status: Option<u16>,
    pub what: &'static str,
}

/// What the clients saw, shared by every task of the load.
#[derive(Default)]
pub(crate) struct Ledger {
    pub outcomes: Mutex<Vec<Outcome>>,
    /// Job ids the API answered 202 for.
    pub accepted: Mutex<HashSet<String>>,
    /// Idempotent resends that named another job than the first answer.
    pub idempotency_mismatches: Mutex<Vec<String>>,
    /// Completed streams (chat `[DONE]`, job event streams ending terminal).
    pub streams_completed: AtomicU64,
    /// The first answers of each 4xx/5xx status with their body, to say why.
    pub examples: Mutex<Vec<String>>,
    pub polls: AtomicU64,
}

impl Ledger {
    fn example(&self, action: Action, status: u16, body: &str) {
        let mut examples = self.examples.lock().expect("examples");
        let prefix = format!("{status} {action:?}");
        if examples.iter().filter(|e| e.starts_with(&prefix)).count() < 2 {
            examples.push(format!(
                "{prefix}: {}",
                body.chars().take(300).collect::<String>()
            ));
        }
    }

    fn record(&self, action: Action, status: Option<u16>, what: &'static str) {
        self.outcomes.lock().expect("outcomes").push(Outcome {
            at: Instant::now(),
            action,
            status,
            what,
        });
    }
}

pub(crate) struct Load {
    pub client: reqwest::Client,
    pub urls: Arc<RwLock<Vec<String>>>,
    pub ledger: Arc<Ledger>,
    pub counter: AtomicU64,
}

impl Load {
    /// Alternates between the API processes.
    fn url(&self, n: u64, path: &str) -> String {
        let urls = self.urls.read().expect("urls");
        let base = &urls[usize::try_from(n).unwrap_or(0) % urls.len()];
        format!("{base}{path}")
    }

    /// Runs until `stop`: one action per `interval` per tenant (open loop:
    /// an action does not wait for the previous one), at most `max_in_flight`
    /// at once in all.
    pub(crate) async fn run(
        self: Arc<Self>,
        tenants: Vec<Tenant>,
        interval: Duration,
        max_in_flight: usize,
        stop: CancellationToken,
    ) {
        let slots = Arc::new(tokio::sync::Semaphore::new(max_in_flight));
        let mut tasks = JoinSet::new();
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut round = 0usize;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            for (t, tenant) in tenants.iter().enumerate() {
                let action = ACTIONS[(round + t) % ACTIONS.len()];
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    self.ledger
                        .record(action, None, "skipped: too many in flight");
                    continue;
                };
                let load = self.clone();
                let key = tenant.keys[round % tenant.keys.len()].clone();
                tasks.spawn(async move {
                    load.act(action, &key).await;
                    drop(permit);
                });
            }
            round += 1;
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
    }

    async fn act(&self, action: Action, key: &str) {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        match action {
            Action::SyncImage => {
                let body = image_body(n);
                self.post(action, n, "/api/v1/images/generations", key, &body, None)
                    .await;
            }
            Action::AsyncLongPoll => {
                if let Some(id) = self.submit(action, n, key, None).await {
                    self.long_poll(action, n, key, &id).await;
                }
            }
            Action::AsyncEvents => {
                // Cut mid-stream (a restart): the job's end by polling.
                if let Some(id) = self.submit(action, n, key, None).await
                    && !self.events(action, n, key, &id).await
                {
                    self.long_poll(action, n + 1, key, &id).await;
                }
            }
            Action::Idempotent => {
                let idem = format!("soak-{}", uuid::Uuid::new_v4().simple());
                let body = image_body(n);
                let first = self.submit_body(action, n, key, Some(&idem), &body).await;
                // The same request resent (as a client that lost the answer
                // would), to the other API process.
                let second = self
                    .submit_body(action, n + 1, key, Some(&idem), &body)
                    .await;
                if let (Some(a), Some(b)) = (&first, &second)
                    && a != b
                {
                    self.ledger
                        .idempotency_mismatches
                        .lock()
                        .expect("mismatches")
                        .push(format!("{idem}: {a} then {b}"));
                }
            }
            Action::Cancel => {
                if let Some(id) = self.submit(action, n, key, None).await {
                    let response = self
                        .client
                        .delete(self.url(n, &format!("/api/v1/jobs/{id}")))
                        .bearer_auth(key)
                        .send()
                        .await;
                    let Ok(response) = response else {
                        self.ledger.record(action, None, "cancel");
                        return;
                    };
                    let status = response.status().as_u16();
                    let text = response.text().await.unwrap_or_default();
                    // The job may end before the cancel arrives: a 400
                    // `job cannot be cancelled: it is already completed`.
                    if status == 400 && text.contains("cannot be cancelled") {
                        self.ledger.record(action, Some(status), CANCEL_TOO_LATE);
                        return;
                    }
                    if status >= 400 {
                        self.ledger.example(action, status, &text);
                    }
                    self.ledger.record(action, Some(status), "cancel");
                }
            }
            Action::Chat | Action::ChatStream => {
                let stream = action == Action::ChatStream;
                let body = json!({
                    "model": "local/echo",
                    "messages": [{"role": "user", "content": format!("soak message {n}")}],
                    "stream": stream,
                });
                let response = self
                    .client
                    .post(self.url(n, "/api/v1/chat/completions"))
                    .bearer_auth(key)
                    .json(&body)
                    .send()
                    .await;
                match response {
                    Ok(response) if stream && response.status().is_success() => {
                        let status = response.status().as_u16();
                        let text = read_to_end(response).await;
                        match text {
                            Some(text) if text.contains("data: [DONE]") => {
                                self.ledger
                                    .streams_completed
                                    .fetch_add(1, Ordering::Relaxed);
                                self.ledger.record(action, Some(status), "chat stream");
                            }
                            _ => self.ledger.record(action, None, "chat stream cut"),
                        }
                    }
                    Ok(response) => {
                        let status = response.status().as_u16();
                        if status >= 400 {
                            let text = response.text().await.unwrap_or_default();
                            self.ledger.example(action, status, &text);
                        }
                        self.ledger.record(action, Some(status), "chat");
                    }
                    Err(_) => self.ledger.record(action, None, "chat"),
                }
            }
        }
    }

    async fn post(
        &self,
        action: Action,
        n: u64,
        path: &str,
        key: &str,
        body: &Value,
        idempotency_key: Option<&str>,
    ) -> Option<(u16, Value)> {
        let mut request = self
            .client
            .post(self.url(n, path))
            .bearer_auth(key)
            .json(body);
        if let Some(idem) = idempotency_key {
            request = request.header("Idempotency-Key", idem);
        }
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                let text = response.text().await.unwrap_or_default();
                if status >= 400 {
                    self.ledger.example(action, status, &text);
                }
                let body = serde_json::from_str(&text).unwrap_or(Value::Null);
                self.ledger.record(action, Some(status), "submit");
                Some((status, body))
            }
            Err(_) => {
                self.ledger.record(action, None, "submit");
                None
            }
        }
    }

    /// An async image job; its id when accepted.
    async fn submit(
        &self,
        action: Action,
        n: u64,
        key: &str,
        idempotency_key: Option<&str>,
    ) -> Option<String> {
        self.submit_body(action, n, key, idempotency_key, &image_body(n))
            .await
    }

    async fn submit_body(
        &self,
        action: Action,
        n: u64,
        key: &str,
        idempotency_key: Option<&str>,
        request: &Value,
    ) -> Option<String> {
        let (status, body) = self
            .post(
                action,
                n,
                "/api/v1/images/generations?async=true",
                key,
                request,
                idempotency_key,
            )
            .await?;
        if status != 202 && status != 200 {
            return None;
        }
        let id = body["id"].as_str()?.to_owned();
        self.ledger
            .accepted
            .lock()
            .expect("accepted")
            .insert(id.clone());
        Some(id)
    }

    /// Long polls until the job is terminal (a failed request is retried on
    /// the next tick, as a client would).
    async fn long_poll(&self, action: Action, n: u64, key: &str, id: &str) {
        let deadline = Instant::now() + Duration::from_secs(300);
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut attempt = 0;
        while Instant::now() < deadline {
            tick.tick().await;
            attempt += 1;
            self.ledger.polls.fetch_add(1, Ordering::Relaxed);
            let response = self
                .client
                .get(self.url(n + attempt, &format!("/api/v1/jobs/{id}?poll=true")))
                .bearer_auth(key)
                .send()
                .await;
            let Ok(response) = response else {
                self.ledger.record(action, None, "long poll");
                continue;
            };
            let status = response.status().as_u16();
            self.ledger.record(action, Some(status), "long poll");
            let job: Value = response.json().await.unwrap_or(Value::Null);
            if terminal(&job["status"]) {
                return;
            }
        }
    }

    /// Reads the job's event stream to its end; whether it ended with a
    /// terminal status event.
    async fn events(&self, action: Action, n: u64, key: &str, id: &str) -> bool {
        let response = self
            .client
            .get(self.url(n, &format!("/api/v1/jobs/{id}/events")))
            .bearer_auth(key)
            .header("Accept", "text/event-stream")
            .send()
            .await;
        let Ok(response) = response else {
            self.ledger.record(action, None, "event stream");
            return false;
        };
        let status = response.status().as_u16();
        if status != 200 {
            self.ledger.record(action, Some(status), "event stream");
            return false;
        }
        let Some(text) = read_to_end(response).await else {
            self.ledger.record(action, None, "event stream cut");
            return false;
        };
        let ended = text
            .split("\n\n")
            .filter_map(|event| {
                event
                    .lines()
                    .find_map(|line| line.strip_prefix("data:"))
                    .and_then(|data| serde_json::from_str::<Value>(data.trim()).ok())
            })
            .any(|data| terminal(&data["status"]));
        if ended {
            self.ledger
                .streams_completed
                .fetch_add(1, Ordering::Relaxed);
        }
        self.ledger.record(action, Some(status), "event stream");
        ended
    }
}

fn terminal(status: &Value) -> bool {
    matches!(status.as_str(), Some("completed" | "failed" | "cancelled"))
}

/// `bench/noop` images in a few shapes (each worker renders the first of a
/// shape, then answers with its stored output).
fn image_body(n: u64) -> Value {
    let size = ["512x512", "1024x1024"][usize::try_from(n % 2).unwrap_or(0)];
    json!({"model": "bench/noop", "prompt": format!("soak {n}"), "size": size})
}

/// The whole body, or `None` if the connection broke before its end
/// (bounded: the answers of this load are small).
async fn read_to_end(response: reqwest::Response) -> Option<String> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        body.extend_from_slice(&chunk.ok()?);
        if body.len() > 4 << 20 {
            return None;
        }
    }
    String::from_utf8(body).ok()
}
