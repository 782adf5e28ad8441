//! `jobs-throughput`: how many async jobs (image by default; `--tool`,
//! `--model`) the pipeline completes per second. Jobs are submitted with `?async=true` at a fixed rate (open loop,
//! latency from the due time) or, without `--rate`, as fast as a bounded
//! number of in-flight submissions allows; then every job is long-polled
//! (`GET /jobs/{id}?poll=true`, many at once) until it is terminal.
//! Throughput and completion lag come from the jobs' own `createdAt` and
//! `completedAt`, not from client timing.
//!
//! PostgreSQL's share (issue 9): the commits per job, counted in
//! `pg_stat_database` around the run with the idle rate subtracted, and the
//! jobs/s PostgreSQL alone reaches at that many commits per job (pgbench on a
//! scratch database right after the run); the pipeline should reach 50% of
//! it. See `pg_baseline`. Run without `--rate` for the pipeline's maximum.
//!
//! `--provider-latency-ms`: every job makes one remote call of that latency.
//! The benchmark serves the fake vendor itself (OpenAI's image generation,
//! on `--provider-port`) and asks for `bench/remote-image`, whose upstream
//! in `bench/unigen-bench.toml` is that port: the figure of a worker whose
//! jobs wait on fal, Replicate or OpenAI (issue 39).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::json;

use crate::jobs::{self, Api, JobTimes, Throughput, ms};
use crate::load::{self, Schedule, histogram};
use crate::pg_baseline;
use crate::report;

#[derive(clap::Args)]
pub struct Args {
    /// unigen's API base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080/api/v1")]
    api: String,
    /// unigen API key with the tool's and the jobs scopes (scripts/dev-up prints one).
    #[arg(long, env = "UNIGEN_KEY", hide_env_values = true)]
    key: String,
    #[command(flatten)]
    job: jobs::JobArgs,
    /// Seconds of submitting.
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// Submissions per second (open loop). Without it: as fast as
    /// `--in-flight` concurrent submitters go (closed loop).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    rate: Option<u32>,
    /// Concurrent submitters when no --rate is given.
    #[arg(long, default_value_t = 32)]
    in_flight: usize,
    /// Long polls in flight at once while waiting for completions.
    #[arg(long, default_value_t = 1000)]
    pollers: usize,
    /// Serve a fake vendor answering each job's image request after this
    /// many milliseconds, and submit `bench/remote-image` jobs to it (the
    /// stack started with UNIGEN_CONFIG=bench/unigen-bench.toml).
    #[arg(long)]
    provider_latency_ms: Option<u64>,
    /// The fake vendor's port (`[upstreams.bench-media]` in
    /// bench/unigen-bench.toml).
    #[arg(long, default_value_t = 9401)]
    provider_port: u16,
    /// Free text naming this run in the table and JSON (e.g. "1 worker").
    #[arg(long)]
    label: Option<String>,
    #[command(flatten)]
    pg: pg_baseline::Args,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
pub struct Results {
    pub label: Option<String>,
    pub mode: String,
    pub submitted: u64,
    pub submit_errors: u64,
    pub completed: u64,
    /// Jobs that ended failed or cancelled, or whose polling failed.
    pub failed: u64,
    pub submit_p50_ms: f64,
    pub submit_p99_ms: f64,
    pub submit_max_ms: f64,
    /// Server-side: first createdAt → last completedAt, and created → completed.
    pub pipeline: Option<Throughput>,
    /// Commits per job, and the pgbench baseline at as many per job.
    pub postgres: pg_baseline::Report,
}

pub(crate) struct Submitted {
    pub ids: Vec<String>,
    latency: Histogram<u64>,
    errors: u64,
}

pub(crate) async fn submit_at_rate(
    api: &Api,
    body: &[u8],
    rate: u32,
    duration: Duration,
) -> anyhow::Result<Submitted> {
    let client = jobs::client(rate as usize, Duration::from_secs(30))?;
    let ids = Arc::new(Mutex::new(Vec::new()));
    let body: Arc<[u8]> = body.into();
    let (api, sink) = (api.clone(), Arc::clone(&ids));
    let schedule = Schedule {
        rate,
        warmup: Duration::ZERO,
        duration,
    };
    let pass = load::run(schedule, Instant::now(), move || {
        let (api, client, body, sink) = (api.clone(), client.clone(), body.clone(), sink.clone());
        async move {
            match api.submit(&client, &body).await {
                Ok(id) => {
                    sink.lock().expect("not poisoned").push(id);
                    true
                }
                Err(_) => false,
            }
        }
    })
    .await;
    let ids = std::mem::take(&mut *ids.lock().expect("not poisoned"));
    Ok(Submitted {
        ids,
        latency: pass.histogram,
        errors: pass.errors,
    })
}

async fn submit_closed_loop(
    api: &Api,
    body: &[u8],
    in_flight: usize,
    duration: Duration,
) -> anyhow::Result<Submitted> {
    let client = jobs::client(in_flight, Duration::from_secs(30))?;
    let body: Arc<[u8]> = body.into();
    let end = Instant::now() + duration;
    let mut tasks = Vec::new();
    for _ in 0..in_flight {
        let (api, client, body) = (api.clone(), client.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Submitted {
                ids: Vec::new(),
                latency: histogram(),
                errors: 0,
            };
            while Instant::now() < end {
                let sent = Instant::now();
                match api.submit(&client, &body).await {
                    Ok(id) => {
                        out.latency
                            .saturating_record(sent.elapsed().as_micros() as u64);
                        out.ids.push(id);
                    }
                    Err(_) => out.errors += 1,
                }
            }
            out
        }));
    }
    let mut all = Submitted {
        ids: Vec::new(),
        latency: histogram(),
        errors: 0,
    };
    for task in tasks {
        let part = task.await?;
        all.ids.extend(part.ids);
        all.latency.add(&part.latency)?;
        all.errors += part.errors;
    }
    Ok(all)
}

async fn measure(args: &Args) -> anyhow::Result<Results> {
    let api = Api::new(&args.api, &args.key, &args.job);
    let body = args.job.body();
    let duration = Duration::from_secs(args.duration);
    // One job first, so a wrong key or URL fails with its reason.
    let probe = jobs::client(1, Duration::from_secs(60))?;
    let id = api.submit(&probe, &body).await?;
    api.wait(&probe, &id, 4).await?;
    let counting = pg_baseline::Counting::start(&args.pg).await;

    let (mode, submitted) = match args.rate {
        Some(rate) => (
            format!("{rate}/s"),
            submit_at_rate(&api, &body, rate, duration).await?,
        ),
        None => (
            format!("max ({} in flight)", args.in_flight),
            submit_closed_loop(&api, &body, args.in_flight, duration).await?,
        ),
    };
    eprintln!(
        "submitted {} jobs ({} errors); waiting for completions",
        submitted.ids.len(),
        submitted.errors
    );

    let poller = jobs::client(args.pollers, Duration::from_secs(60))?;
    let outcomes: Vec<anyhow::Result<serde_json::Value>> =
        futures_util::stream::iter(submitted.ids.iter())
            .map(|id| {
                let (api, poller) = (&api, &poller);
                async move { api.wait(poller, id, 10).await }
            })
            .buffer_unordered(args.pollers.max(1))
            .collect()
            .await;
    let mut times = Vec::new();
    let mut failed = 0;
    for outcome in &outcomes {
        match outcome {
            Ok(job) if job["status"] == "completed" => match JobTimes::from_job(job) {
                Some(t) => times.push(t),
                None => failed += 1,
            },
            _ => failed += 1,
        }
    }
    let commits = match counting {
        Some(counting) => counting.finish(times.len() as u64).await,
        None => None,
    };
    let h = &submitted.latency;
    Ok(Results {
        label: args.label.clone(),
        mode,
        submitted: submitted.ids.len() as u64 + submitted.errors,
        submit_errors: submitted.errors,
        completed: times.len() as u64,
        failed,
        submit_p50_ms: ms(h.value_at_quantile(0.50)),
        submit_p99_ms: ms(h.value_at_quantile(0.99)),
        submit_max_ms: ms(h.max()),
        pipeline: jobs::throughput(&times),
        postgres: pg_baseline::Report {
            commits,
            ..Default::default()
        },
    })
}

pub fn table(r: &Results) -> String {
    let p = r.pipeline.as_ref();
    let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
    let label = r.label.as_ref().map(|l| ("label", l.clone()));
    let rows = [
        ("mode", r.mode.clone()),
        ("jobs submitted", r.submitted.to_string()),
        ("submit errors", r.submit_errors.to_string()),
        ("jobs completed", r.completed.to_string()),
        ("jobs failed", r.failed.to_string()),
        ("window s", f(p.map(|p| p.window_seconds))),
        (
            "completed jobs/s",
            p.map_or("-".into(), |p| format!("{:.1}", p.jobs_per_second)),
        ),
        ("submit p50 ms", format!("{:.3}", r.submit_p50_ms)),
        ("submit p99 ms", format!("{:.3}", r.submit_p99_ms)),
        ("completion lag p50 ms", f(p.map(|p| p.lag_p50_ms))),
        ("completion lag p99 ms", f(p.map(|p| p.lag_p99_ms))),
        ("completion lag max ms", f(p.map(|p| p.lag_max_ms))),
    ];
    label
        .into_iter()
        .chain(rows)
        .chain(r.postgres.rows())
        .map(|(k, v)| format!("{k:<22} {v:>18}\n"))
        .collect()
}

/// The remote model `--provider-latency-ms` runs.
const REMOTE_MODEL: &str = "bench/remote-image";

pub fn run(mut args: Args) -> anyhow::Result<()> {
    if let Some(latency_ms) = args.provider_latency_ms {
        if args.job.tool != jobs::Tool::Image {
            anyhow::bail!("--provider-latency-ms runs image jobs (--tool image)");
        }
        crate::fake_upstream::spawn(args.provider_port, latency_ms)?;
        args.job.model = Some(REMOTE_MODEL.into());
        eprintln!(
            "fake vendor on 127.0.0.1:{} ({latency_ms} ms per image); model {REMOTE_MODEL}",
            args.provider_port
        );
    }
    let mut results = report::block_on(measure(&args))??;
    let pipeline = results.pipeline.as_ref().map(|p| p.jobs_per_second);
    results.postgres.baseline(&args.pg, pipeline);
    if args.rate.is_some() && results.postgres.comparison.is_some() {
        eprintln!("note: --rate caps the pipeline's jobs/s; run without it for the ratio");
    }
    print!("{}", table(&results));
    report::write_json(
        args.json.as_deref(),
        &json!({
            "benchmark": "jobs-throughput", "label": args.label, "api": args.api,
            "job": args.job.describe(), "duration_seconds": args.duration,
            "provider_latency_ms": args.provider_latency_ms, "results": results,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg_baseline::Report;

    #[test]
    fn table_shows_the_label_and_postgres_rows() {
        let results = Results {
            label: Some("1 worker".into()),
            mode: "max (32 in flight)".into(),
            submitted: 100,
            submit_errors: 0,
            completed: 100,
            failed: 0,
            submit_p50_ms: 1.0,
            submit_p99_ms: 2.0,
            submit_max_ms: 3.0,
            pipeline: None,
            postgres: Report {
                pgbench_skipped: Some("--no-pgbench".into()),
                ..Default::default()
            },
        };
        let table = table(&results);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("label") && lines[0].ends_with("1 worker"));
        assert!(lines.iter().any(|l| l.starts_with("pg commits/job")));
        assert!(lines.last().unwrap().ends_with("skipped: --no-pgbench"));
        let json = serde_json::to_value(&results).unwrap();
        assert_eq!(json["label"], "1 worker");
        assert_eq!(json["postgres"]["pgbench_skipped"], "--no-pgbench");
    }
}
