//! Jobs at once per tool and kind of model (issue 39): a tool whose model
//! waits on a vendor runs many jobs together by default; a tool rendering
//! locally runs no more at once than the machine has cores.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine;
use futures_util::future::join_all;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use unigen_core::config::{ModelEntry, Settings, UpstreamSettings};
use unigen_tests::{TestApp, TestOptions};

const JOBS: usize = 32;
const WAIT: Duration = Duration::from_secs(120);

/// A fake of OpenAI's `POST /v1/images/generations` that counts the
/// requests it holds at once. Each answer waits until `release_at` requests
/// are in flight together (then all are answered), or until no request
/// has come or gone for `quiet`: a worker that sends them all at once gets
/// them all held together, one that sends fewer still finishes.
struct SlowImages {
    url: String,
    max_in_flight: Arc<AtomicUsize>,
}

impl SlowImages {
    async fn start(release_at: usize, quiet: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let max_in_flight = Arc::new(AtomicUsize::new(0));
        let (in_flight, _) = watch::channel(0usize);
        let in_flight = Arc::new(in_flight);
        let max = max_in_flight.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (in_flight, max) = (in_flight.clone(), max.clone());
                tokio::spawn(serve(stream, in_flight, max, release_at, quiet));
            }
        });
        Self { url, max_in_flight }
    }
}

/// One keep-alive connection: a request at a time.
async fn serve(
    mut stream: TcpStream,
    in_flight: Arc<watch::Sender<usize>>,
    max: Arc<AtomicUsize>,
    release_at: usize,
    quiet: Duration,
) {
    let mut buffer = Vec::new();
    loop {
        let Some(head_end) = read_head(&mut stream, &mut buffer).await else {
            return;
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buffer.len() < head_end + length {
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        buffer.drain(..head_end + length);

        in_flight.send_modify(|n| *n += 1);
        max.fetch_max(*in_flight.borrow(), Ordering::SeqCst);
        let mut watcher = in_flight.subscribe();
        while *watcher.borrow_and_update() < release_at {
            // Every arrival and answer is a change: wait while they come.
            match tokio::time::timeout(quiet, watcher.changed()).await {
                Ok(Ok(())) => {}
                _ => break,
            }
        }
        in_flight.send_modify(|n| *n -= 1);

        let body = json!({"created": 1, "data": [{"b64_json": png_b64()}]}).to_string();
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads until the end of a request head; its length (with the blank line).
async fn read_head(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(at + 4);
        }
        let mut chunk = [0u8; 8192];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}

fn png_b64() -> String {
    let mut png = Vec::new();
    image::RgbImage::from_pixel(8, 8, image::Rgb([10, 200, 30]))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    base64::engine::general_purpose::STANDARD.encode(png)
}

fn remote_painter() -> ModelEntry {
    serde_json::from_value(json!({
        "id": "acme/painter", "category": "image", "tier": "fast", "adapter": "openai",
        "owned_by": "acme", "upstream": "acme", "upstream_model": "painter",
        "capabilities": ["text_to_image"], "credits_per_unit": 1
    }))
    .unwrap()
}

/// The stack without a worker; with a `url`, the remote image model routed
/// to it (else the image models are all local).
async fn stack(url: Option<String>, latency_ms: u64) -> TestApp {
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(
        move |s: &mut Settings| {
            if let Some(url) = url {
                s.upstreams.insert(
                    "acme".into(),
                    UpstreamSettings {
                        base_url: url,
                        timeout_seconds: 60,
                        ..Default::default()
                    },
                );
                s.models.push(remote_painter());
            }
            s.local_provider.latency_ms = latency_ms;
        },
    ))
    .await;
    // Every job submitted at once is accepted.
    app.sql("UPDATE plans SET rate_limit_per_minute = 1000000, concurrent_requests = 10000")
        .await;
    app
}

async fn submit_all(app: &TestApp, model: &str, count: usize) -> Vec<String> {
    let body = json!({"model": model, "prompt": "a field", "size": "512x512"});
    join_all((0..count).map(|_| app.submit_image_async(&body))).await
}

async fn wait_all_completed(app: &TestApp, ids: &[String]) {
    for job in join_all(ids.iter().map(|id| app.wait_for_job(id, WAIT))).await {
        assert_eq!(job["status"], "completed", "{job}");
    }
}

/// Runs `JOBS` jobs of the remote model on a worker configured by
/// `configure`; the most requests the vendor held at once.
async fn remote_jobs_at_once(configure: impl FnOnce(&mut Settings)) -> usize {
    let fake = SlowImages::start(JOBS, Duration::from_secs(1)).await;
    let mut app = stack(Some(fake.url.clone()), 0).await;
    let ids = submit_all(&app, "acme/painter", JOBS).await;
    app.spawn_worker(configure);
    wait_all_completed(&app, &ids).await;
    fake.max_in_flight.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_waiting_on_a_vendor_runs_many_jobs_at_once_by_default() {
    // The harness pins `worker.concurrency = 4` for its workers; 0 is the
    // shipped default (`config/default.toml`).
    let shipped = Settings::load_with(None, &[]).unwrap().worker.concurrency;
    assert_eq!(shipped, 0);
    let at_once = remote_jobs_at_once(|s| s.worker.concurrency = shipped).await;
    assert!(
        at_once >= JOBS,
        "the vendor held {at_once} requests at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_single_setting_still_caps_a_remote_tool() {
    // What every tool ran at before the budgets: 4 jobs at once.
    let at_once = remote_jobs_at_once(|s| s.worker.concurrency = 4).await;
    assert_eq!(at_once, 4, "the vendor held {at_once} requests at once");
    // A tool's own budget wins over it.
    let at_once = remote_jobs_at_once(|s| {
        s.worker.concurrency = 4;
        s.worker.per_tool.insert(
            "image".into(),
            unigen_core::config::ToolConcurrency {
                remote_concurrency: Some(7),
                local_concurrency: None,
            },
        );
    })
    .await;
    assert_eq!(at_once, 7, "the vendor held {at_once} requests at once");
}

/// The most jobs whose `started_at`..`completed_at` overlap.
fn most_at_once(jobs: &[(f64, f64)]) -> usize {
    let mut edges: Vec<(f64, i32)> = jobs
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    // An end and a start at the same instant do not overlap.
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_rendering_locally_runs_no_more_jobs_than_cores() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Each local job lasts at least the simulated latency, so the queued
    // jobs would overlap as far as the worker lets them.
    let mut app = stack(None, 400).await;
    let ids = submit_all(&app, "local/procedural-v1", 3 * cores + 2).await;
    app.spawn_worker(|s| s.worker.concurrency = 0);
    wait_all_completed(&app, &ids).await;
    let rows = app
        .db
        .client()
        .await
        .query(
            "SELECT extract(epoch FROM started_at)::float8, \
             extract(epoch FROM completed_at)::float8 FROM jobs",
            &[],
        )
        .await
        .unwrap();
    let spans: Vec<(f64, f64)> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    assert_eq!(spans.len(), ids.len());
    let at_once = most_at_once(&spans);
    assert!(
        at_once <= cores,
        "{at_once} local jobs ran at once on {cores} cores"
    );
    assert_eq!(at_once, cores, "the worker used every core");
}
