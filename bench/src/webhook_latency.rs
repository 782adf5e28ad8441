//! `webhook-latency`: time from a job's completion to the first delivery
//! attempt of its `generation.completed` webhook. The benchmark serves the
//! webhook receiver itself (plain http on loopback, so the stack must allow
//! private webhook targets), registers it, submits async jobs (images by
//! default; `--tool`, `--model`) at a fixed rate, and pairs each job's `completedAt` (written by the worker, on
//! PostgreSQL's clock) with the moment the receiver first saw its event
//! (this host's clock: the stack must run on the same machine).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, post, web};
use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};

use crate::jobs::{self, Api, micros_between, ms};
use crate::jobs_throughput::submit_at_rate;
use crate::load::histogram;
use crate::report;

#[derive(clap::Args)]
pub struct Args {
    /// unigen's API base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080/api/v1")]
    api: String,
    /// unigen API key with the tool's, the jobs and the webhooks scopes.
    #[arg(long, env = "UNIGEN_KEY", hide_env_values = true)]
    key: String,
    #[command(flatten)]
    job: jobs::JobArgs,
    /// Jobs submitted per second (open loop).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    rate: u32,
    /// Seconds of submitting.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Port of the webhook receiver this benchmark serves (127.0.0.1).
    #[arg(long, default_value_t = 9500)]
    receiver_port: u16,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
pub struct Results {
    pub rate: u32,
    pub jobs_completed: u64,
    pub deliveries_received: u64,
    /// Completed jobs whose event never reached the receiver in time.
    pub missing: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// First receipt time of each job's `generation.completed`, by job id.
type Receipts = Arc<Mutex<HashMap<String, DateTime<Utc>>>>;

#[post("/hook")]
async fn receive(receipts: web::Data<Receipts>, body: web::Bytes) -> HttpResponse {
    let at = Utc::now();
    if let Ok(event) = serde_json::from_slice::<Value>(&body)
        && event["type"] == "generation.completed"
        && let Some(job) = event["data"]["jobId"].as_str()
    {
        // A retried delivery keeps the first attempt's time.
        receipts
            .lock()
            .expect("not poisoned")
            .entry(job.to_owned())
            .or_insert(at);
    }
    HttpResponse::Ok().finish()
}

/// Registers the receiver for `generation.completed`; returns the webhook id.
async fn register(api: &Api, client: &reqwest::Client, port: u16) -> anyhow::Result<String> {
    let response = client
        .post(format!("{}/webhooks", api.base))
        .bearer_auth(&api.key)
        .json(&json!({
            "name": "unigen-bench webhook-latency",
            "url": format!("http://127.0.0.1:{port}/hook"),
            "events": ["generation.completed"],
        }))
        .send()
        .await?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or_default();
    if !status.is_success() {
        bail!(
            "registering the receiver answered {status}: {body} (start the stack with \
             UNIGEN__WEBHOOKS__ALLOW_PRIVATE_ADDRESSES=true for an http loopback receiver)"
        );
    }
    body["id"]
        .as_str()
        .map(str::to_owned)
        .context("the webhook answer has no id")
}

async fn measure(args: &Args) -> anyhow::Result<Results> {
    let receipts: Receipts = Arc::default();
    let data = web::Data::new(receipts.clone());
    let server = HttpServer::new(move || App::new().app_data(data.clone()).service(receive))
        .workers(2)
        .bind(("127.0.0.1", args.receiver_port))
        .with_context(|| format!("binding the receiver on port {}", args.receiver_port))?
        .run();
    let server_handle = server.handle();
    tokio::spawn(server);

    let api = Api::new(&args.api, &args.key, &args.job);
    let client = jobs::client(64, Duration::from_secs(60))?;
    let webhook = register(&api, &client, args.receiver_port).await?;
    let body = args.job.body();
    let submitted =
        submit_at_rate(&api, &body, args.rate, Duration::from_secs(args.duration)).await;
    let measured = match submitted {
        Ok(submitted) => pair_up(&api, &client, &submitted.ids, &receipts, args.rate).await,
        Err(err) => Err(err),
    };
    // Leave the account as it was, whatever happened.
    let _ = client
        .delete(format!("{}/webhooks/{webhook}", api.base))
        .bearer_auth(&api.key)
        .send()
        .await;
    server_handle.stop(true).await;
    measured
}

/// Waits for every job and for its delivery (at most 30 s after the last
/// completion), then computes completion -> first attempt.
async fn pair_up(
    api: &Api,
    client: &reqwest::Client,
    ids: &[String],
    receipts: &Receipts,
    rate: u32,
) -> anyhow::Result<Results> {
    let finished: Vec<anyhow::Result<Value>> = futures_util::stream::iter(ids)
        .map(|id| api.wait(client, id, 10))
        .buffer_unordered(64)
        .collect()
        .await;
    let completed: HashMap<String, DateTime<Utc>> = finished
        .iter()
        .filter_map(|job| job.as_ref().ok())
        .filter(|job| job["status"] == "completed")
        .filter_map(|job| {
            Some((
                job["id"].as_str()?.to_owned(),
                jobs::timestamp(job, "completedAt")?,
            ))
        })
        .collect();
    for _ in 0..300 {
        if all_in(&completed, receipts) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let receipts = receipts.lock().expect("not poisoned");
    let mut latency = histogram();
    let mut missing = 0;
    for (job, done) in &completed {
        match receipts.get(job) {
            Some(at) => latency.saturating_record(micros_between(*done, *at).max(1)),
            None => missing += 1,
        }
    }
    Ok(Results {
        rate,
        jobs_completed: completed.len() as u64,
        deliveries_received: latency.len(),
        missing,
        p50_ms: ms(latency.value_at_quantile(0.50)),
        p90_ms: ms(latency.value_at_quantile(0.90)),
        p99_ms: ms(latency.value_at_quantile(0.99)),
        max_ms: ms(latency.max()),
    })
}

fn all_in(completed: &HashMap<String, DateTime<Utc>>, receipts: &Receipts) -> bool {
    let receipts = receipts.lock().expect("not poisoned");
    completed.keys().all(|id| receipts.contains_key(id))
}

pub fn table(r: &Results) -> String {
    let rows = [
        ("jobs/s offered", r.rate.to_string()),
        ("jobs completed", r.jobs_completed.to_string()),
        ("deliveries received", r.deliveries_received.to_string()),
        ("missing", r.missing.to_string()),
        ("completion -> attempt p50 ms", format!("{:.3}", r.p50_ms)),
        ("completion -> attempt p90 ms", format!("{:.3}", r.p90_ms)),
        ("completion -> attempt p99 ms", format!("{:.3}", r.p99_ms)),
        ("completion -> attempt max ms", format!("{:.3}", r.max_ms)),
    ];
    rows.iter()
        .map(|(k, v)| format!("{k:<30} {v:>12}\n"))
        .collect()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let results = report::block_on(measure(&args))??;
    print!("{}", table(&results));
    report::write_json(
        args.json.as_deref(),
        &json!({
            "benchmark": "webhook-latency", "api": args.api, "job": args.job.describe(),
            "duration_seconds": args.duration, "results": results,
        }),
    )
}
