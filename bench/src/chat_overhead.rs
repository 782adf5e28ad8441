//! `chat-overhead`: the latency unigen adds to a non-streaming chat
//! completion. The same open-loop load goes through the gateway, then
//! straight at the upstream the gateway calls; the difference per percentile
//! is the gateway's cost (auth, validation, proxying, accounting).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::header::CONTENT_TYPE;
use serde_json::json;

use crate::load::{self, Pass, Schedule};
use crate::report::{self, RateResult, Stats};

#[derive(clap::Args)]
pub struct Args {
    /// unigen's API base URL; requests go to {api}/chat/completions.
    #[arg(long, default_value = "http://127.0.0.1:8080/api/v1")]
    api: String,
    /// unigen API key with the chat scope (scripts/dev-up prints one).
    #[arg(long, env = "UNIGEN_KEY", hide_env_values = true)]
    key: String,
    /// The upstream's base URL, called directly: {upstream}/chat/completions.
    #[arg(long, default_value = "http://127.0.0.1:9400/v1")]
    upstream: String,
    /// unigen model id served by that upstream.
    #[arg(long, default_value = "bench/fake-chat")]
    model: String,
    /// Model name sent straight to the upstream (the model's upstream_model).
    #[arg(long, default_value = "bench")]
    upstream_model: String,
    /// Request rates to measure, in requests per second, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "200",
          value_parser = clap::value_parser!(u32).range(1..))]
    rates: Vec<u32>,
    /// Measured seconds per pass (one pass per rate and target).
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Seconds of unrecorded load at the same rate before each pass.
    #[arg(long, default_value_t = 1)]
    warmup: u64,
    /// Per-request timeout in seconds; a timed-out request counts as an error.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Where one pass sends its requests.
struct Target {
    name: &'static str,
    url: String,
    key: Option<String>,
    body: Vec<u8>,
}

impl Target {
    fn new(name: &'static str, base: &str, key: Option<&str>, model: &str) -> Self {
        let body = json!({ "model": model, "messages": [{ "role": "user", "content": "hello" }] });
        Self {
            name,
            url: format!("{}/chat/completions", base.trim_end_matches('/')),
            key: key.map(str::to_owned),
            body: body.to_string().into_bytes(),
        }
    }

    fn request(&self, client: &reqwest::Client) -> reqwest::RequestBuilder {
        let request = client
            .post(&self.url)
            .header(CONTENT_TYPE, "application/json")
            .body(self.body.clone());
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// One request first, so a wrong key, model or URL fails with its reason
    /// instead of as a table full of errors.
    async fn check(&self, client: &reqwest::Client) -> anyhow::Result<()> {
        let response = self
            .request(client)
            .send()
            .await
            .with_context(|| format!("{}: cannot reach {}", self.name, self.url))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            bail!("{}: {} answered {status}: {body}", self.name, self.url);
        }
        Ok(())
    }
}

/// A fresh client per pass (no connections carried over between targets),
/// keeping up to `rate` idle connections so keep-alive covers every request
/// in flight; the warm-up opens them.
fn client(rate: u32, timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(rate as usize)
        .pool_idle_timeout(Duration::from_secs(60))
        .connect_timeout(timeout)
        .timeout(timeout)
        .build()
}

async fn pass(target: &Arc<Target>, schedule: Schedule, timeout: Duration) -> anyhow::Result<Pass> {
    let client = client(schedule.rate, timeout)?;
    let name = target.name;
    let target = Arc::clone(target);
    let pass = load::run(schedule, Instant::now(), move || {
        let response = target.request(&client).send();
        async move {
            match response.await {
                Ok(response) if response.status().is_success() => response.bytes().await.is_ok(),
                _ => false,
            }
        }
    })
    .await;
    let stats = Stats::from_pass(&pass);
    eprintln!(
        "{:>5}/s {:<8}  {} requests, {} errors, p50 {:.3} ms, p99 {:.3} ms; send lag p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        schedule.rate,
        name,
        stats.requests,
        stats.errors,
        stats.p50_ms,
        stats.p99_ms,
        stats.send_lag_p50_ms,
        stats.send_lag_p99_ms,
        stats.send_lag_max_ms,
    );
    Ok(pass)
}

async fn measure(args: &Args) -> anyhow::Result<Vec<RateResult>> {
    let api = Arc::new(Target::new("api", &args.api, Some(&args.key), &args.model));
    let upstream = Arc::new(Target::new(
        "upstream",
        &args.upstream,
        None,
        &args.upstream_model,
    ));
    let timeout = Duration::from_secs(args.timeout);
    let probe = client(1, timeout)?;
    api.check(&probe).await?;
    upstream.check(&probe).await?;
    let mut results = Vec::new();
    for &rate in &args.rates {
        let schedule = Schedule {
            rate,
            warmup: Duration::from_secs(args.warmup),
            duration: Duration::from_secs(args.duration),
        };
        let through_api = pass(&api, schedule, timeout).await?;
        let direct = pass(&upstream, schedule, timeout).await?;
        results.push(RateResult::new(
            rate,
            Stats::from_pass(&through_api),
            Stats::from_pass(&direct),
        ));
    }
    Ok(results)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let results = report::block_on(measure(&args))??;
    print!("{}", report::table(&results));
    report::write_json(
        args.json.as_deref(),
        &json!({
            "benchmark": "chat-overhead",
            "api": args.api, "upstream": args.upstream,
            "model": args.model, "upstream_model": args.upstream_model,
            "duration_seconds": args.duration, "warmup_seconds": args.warmup,
            "results": results,
        }),
    )
}
