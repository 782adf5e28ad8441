//! `sync-overhead`: what a sync generation (an image by default; `--tool`,
//! `--model`) costs beyond the provider's own latency. N closed-loop clients
//! each send the tool's request (e.g. `POST /images/generations`, sync)
//! back to back for the duration; the added latency is each percentile
//! minus the local provider's configured latency. It includes the whole
//! pipeline (auth, job row, RabbitMQ, worker, PostgreSQL NOTIFY) and the
//! model's own work: the local provider's rendering of the 512x512 PNG
//! (~7-12 ms) by default, none with `--model bench/noop` (it waits the
//! provider latency and answers a stored output).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::json;

use crate::jobs::{self, Api, ms};
use crate::load::histogram;
use crate::otlp_sink::{CpuMeter, CpuUse, Sink, SinkCounts, TraceArgs};
use crate::report;

#[derive(clap::Args)]
pub struct Args {
    /// unigen's API base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080/api/v1")]
    api: String,
    /// unigen API key with the tool's scope (scripts/dev-up prints one).
    #[arg(long, env = "UNIGEN_KEY", hide_env_values = true)]
    key: String,
    #[command(flatten)]
    job: jobs::JobArgs,
    /// Concurrent closed-loop clients, comma-separated: one pass each.
    #[arg(long, value_delimiter = ',', default_value = "20",
          value_parser = clap::value_parser!(u32).range(1..))]
    clients: Vec<u32>,
    /// Measured seconds per pass.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Unrecorded seconds of the same load before each pass.
    #[arg(long, default_value_t = 1)]
    warmup: u64,
    /// The stack's local provider latency (UNIGEN__LOCAL_PROVIDER__LATENCY_MS),
    /// subtracted to give the added latency.
    #[arg(long, default_value_t = 200)]
    provider_latency_ms: u64,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    trace: TraceArgs,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct PassResult {
    pub clients: u32,
    pub requests: u64,
    pub errors: u64,
    pub requests_per_second: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Percentile minus the provider latency.
    pub added_p50_ms: f64,
    pub added_p90_ms: f64,
    pub added_p99_ms: f64,
    /// With --cpu-pid: the processes' CPU time during the measured seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUse>,
}

impl PassResult {
    pub fn new(
        clients: u32,
        h: &Histogram<u64>,
        errors: u64,
        seconds: f64,
        provider_ms: u64,
    ) -> Self {
        let q = |q: f64| ms(h.value_at_quantile(q));
        let added = |v: f64| ((v - provider_ms as f64) * 1000.0).round() / 1000.0;
        Self {
            clients,
            requests: h.len() + errors,
            errors,
            requests_per_second: ((h.len() as f64 / seconds) * 10.0).round() / 10.0,
            p50_ms: q(0.5),
            p90_ms: q(0.9),
            p99_ms: q(0.99),
            max_ms: ms(h.max()),
            added_p50_ms: added(q(0.5)),
            added_p90_ms: added(q(0.9)),
            added_p99_ms: added(q(0.99)),
            cpu: None,
        }
    }
}

async fn pass(api: &Api, clients: u32, args: &Args) -> anyhow::Result<PassResult> {
    let client = jobs::client(clients as usize, Duration::from_secs(60))?;
    let body: Arc<[u8]> = args.job.body().into();
    let start = Instant::now();
    let measure_from = start + Duration::from_secs(args.warmup);
    let end = measure_from + Duration::from_secs(args.duration);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (api, client, body) = (api.clone(), client.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut h = histogram();
            let mut errors = 0;
            loop {
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                let ok = match api.generate(&client, &body, false).send().await {
                    Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
                    _ => false,
                };
                if sent < measure_from {
                    continue;
                }
                if ok {
                    h.saturating_record(sent.elapsed().as_micros() as u64);
                } else {
                    errors += 1;
                }
            }
            (h, errors)
        }));
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let cpu = CpuMeter::start(&args.trace.cpu_pids)?;
    tokio::time::sleep_until(end.into()).await;
    let cpu_ms = cpu.stop()?;
    let mut all = histogram();
    let mut errors = 0;
    for task in tasks {
        let (h, e) = task.await?;
        all.add(&h)?;
        errors += e;
    }
    let mut result = PassResult::new(
        clients,
        &all,
        errors,
        args.duration as f64,
        args.provider_latency_ms,
    );
    // The CPU of the measured seconds (read at their end, before the
    // requests still in flight finished), per request recorded.
    result.cpu = cpu_ms.map(|ms| CpuUse::new(ms, result.requests));
    eprintln!(
        "{clients:>5} clients  {} requests, {} errors, p50 {:.3} ms, p99 {:.3} ms{}",
        result.requests,
        result.errors,
        result.p50_ms,
        result.p99_ms,
        match &result.cpu {
            Some(c) => format!(", CPU {:.3} ms/request", c.cpu_ms_per_request),
            None => String::new(),
        }
    );
    Ok(result)
}

async fn measure(args: &Args) -> anyhow::Result<(Vec<PassResult>, Option<SinkCounts>)> {
    let sink = args.trace.otlp_sink.map(Sink::start).transpose()?;
    let api = Api::new(&args.api, &args.key, &args.job);
    let probe = jobs::client(1, Duration::from_secs(60))?;
    let response = api
        .generate(&probe, &args.job.body(), false)
        .send()
        .await
        .with_context(|| format!("cannot reach {}", api.base))?;
    let status = response.status();
    if !status.is_success() {
        bail!("{status}: {}", response.text().await.unwrap_or_default());
    }
    let mut results = Vec::new();
    for &clients in &args.clients {
        results.push(pass(&api, clients, args).await?);
    }
    let exported = match &sink {
        Some(sink) => Some(sink.finish(Duration::from_secs(10)).await?),
        None => None,
    };
    Ok((results, exported))
}

pub fn table(results: &[PassResult], provider_ms: u64, job: &jobs::JobArgs) -> String {
    let mut out = format!(
        "{:>7} {:>8} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        "clients",
        "requests",
        "errors",
        "req/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "+p50 ms",
        "+p90 ms",
        "+p99 ms"
    );
    for r in results {
        out += &format!(
            "{:>7} {:>8} {:>6} {:>7.1} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}\n",
            r.clients,
            r.requests,
            r.errors,
            r.requests_per_second,
            r.p50_ms,
            r.p90_ms,
            r.p99_ms,
            r.added_p50_ms,
            r.added_p90_ms,
            r.added_p99_ms
        );
    }
    for r in results {
        if let Some(cpu) = &r.cpu {
            out += &format!(
                "{:>7} clients: CPU {:.3} ms per request ({} ms per --cpu-pid)\n",
                r.clients,
                cpu.cpu_ms_per_request,
                cpu.cpu_ms
                    .iter()
                    .map(|ms| format!("{ms:.0}"))
                    .collect::<Vec<_>>()
                    .join(" + ")
            );
        }
    }
    out += &if job.is_default() {
        format!(
            "+pXX = pXX - provider latency ({provider_ms} ms); it includes the local provider's \
             rendering of the 512x512 image (~7-12 ms), not only the pipeline.\n"
        )
    } else {
        format!(
            "+pXX = pXX - provider latency ({provider_ms} ms); it includes the model's own work \
             for the job (none with bench/noop), not only the pipeline.\n"
        )
    };
    out
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (results, exported) = report::block_on(measure(&args))??;
    print!("{}", table(&results, args.provider_latency_ms, &args.job));
    if let Some(e) = exported {
        println!(
            "tracing on: the OTLP sink received {} batches, {} bytes",
            e.requests, e.bytes
        );
    }
    report::write_json(
        args.json.as_deref(),
        &json!({
            "benchmark": "sync-overhead", "api": args.api, "job": args.job.describe(),
            "provider_latency_ms": args.provider_latency_ms,
            "duration_seconds": args.duration, "warmup_seconds": args.warmup,
            "results": results,
            "otlp_sink": exported, "cpu_pids": args.trace.cpu_pids,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_latency_is_percentile_minus_provider_latency() {
        let mut h = histogram();
        // 1000 samples: 201..=300 ms, ten of each whole millisecond.
        for i in 0..1000u64 {
            h.record(201_000 + (i / 10) * 1000).unwrap();
        }
        let r = PassResult::new(20, &h, 5, 10.0, 200);
        assert_eq!(r.requests, 1005);
        assert_eq!(r.requests_per_second, 100.0);
        assert!((r.p50_ms - 250.0).abs() < 0.2, "{}", r.p50_ms);
        assert!((r.added_p50_ms - 50.0).abs() < 0.2, "{}", r.added_p50_ms);
        assert!((r.added_p99_ms - 99.0).abs() < 0.2, "{}", r.added_p99_ms);
        let image = jobs::JobArgs {
            tool: jobs::Tool::Image,
            model: None,
        };
        let t = table(&[r], 200, &image);
        assert_eq!(t.lines().count(), 3);
    }
}
