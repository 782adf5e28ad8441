//! `long-poll`: how fast parked long polls wake up when their jobs finish.
//! W async jobs (images by default; `--tool`, `--model`) are submitted to a stack whose local provider is slow
//! (UNIGEN__LOCAL_PROVIDER__LATENCY_MS, e.g. 5000) and whose worker runs
//! them all at once (UNIGEN__WORKER__CONCURRENCY >= W), then one
//! `GET /jobs/{id}?poll=true` per job is parked while they run. Wake-up
//! latency is the job's `completedAt` (written by the worker) to the moment
//! its poll answer arrived here, both on this host's clock. Polls sent after
//! their job had already finished measure nothing and are counted as late.
//!
//! `completedAt` is PostgreSQL's `now()`, the start of the worker's
//! completion transaction, so that figure also holds the rest of that
//! transaction (its wait for the organization's billing row among them).
//! With `--database-url`, the benchmark also LISTENs on the jobs channel as
//! the API does, and reports the time from the notification of a job's
//! completion (sent after its commit) to the poll's answer: the API's own
//! wake-up path.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::jobs::{self, Api, is_terminal, micros_between, ms, timestamp};
use crate::load::histogram;
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
    /// Jobs, and parked long polls (one per job).
    #[arg(long, default_value_t = 1000)]
    waiters: usize,
    /// Long polls per job before it counts as an error (each waits up to the
    /// stack's `jobs.long_poll_seconds`).
    #[arg(long, default_value_t = 20)]
    max_polls: u32,
    /// Concurrent submissions while creating the jobs.
    #[arg(long, default_value_t = 64)]
    submitters: usize,
    /// The API process id: its VmRSS is read from /proc every 100 ms while
    /// the polls are parked (until the first answer); the peak is reported.
    #[arg(long)]
    api_pid: Option<u32>,
    /// Count PostgreSQL connections to this database (psql -h 127.0.0.1 -U
    /// postgres) while the polls are parked.
    #[arg(long, num_args = 0..=1, default_missing_value = "unigen")]
    pg_count: Option<String>,
    /// Also LISTEN on the stack's job channel through this database URL and
    /// measure from each job's notification to its poll's answer.
    #[arg(long)]
    database_url: Option<String>,
    /// The stack's `notify.channel`.
    #[arg(long, default_value = "unigen_jobs")]
    notify_channel: String,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
pub struct Results {
    pub waiters: usize,
    /// Polls that were parked before their job finished: the measured ones.
    pub woken: u64,
    /// Polls sent after their job had already finished (nothing to measure).
    pub late: u64,
    pub errors: u64,
    pub wake_p50_ms: f64,
    pub wake_p90_ms: f64,
    pub wake_p99_ms: f64,
    pub wake_max_ms: f64,
    /// From the job's completion notification to the poll's answer
    /// (`--database-url`): the API's wake-up path alone.
    pub notified_p50_ms: Option<f64>,
    pub notified_p90_ms: Option<f64>,
    pub notified_p99_ms: Option<f64>,
    pub notified_max_ms: Option<f64>,
    pub api_rss_before_mib: Option<f64>,
    pub api_rss_parked_mib: Option<f64>,
    pub pg_connections_before: Option<u64>,
    pub pg_connections_parked: Option<u64>,
}

/// One poll's outcome: when it was sent, when its answer arrived, the job.
struct Woken {
    id: String,
    sent: DateTime<Utc>,
    arrived: DateTime<Utc>,
    completed: Option<DateTime<Utc>>,
}

/// When each job id was last announced on the channel (this host's clock).
type Announced = Arc<Mutex<HashMap<String, DateTime<Utc>>>>;

/// A LISTEN session on the stack's job channel; stops when dropped.
struct Listening {
    announced: Announced,
    _client: tokio_postgres::Client,
    driver: JoinHandle<()>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Payloads are comma-separated job ids, as the stack's notifier sends them.
async fn listen(database_url: &str, channel: &str) -> anyhow::Result<Listening> {
    let (client, mut connection) = tokio_postgres::connect(database_url, tokio_postgres::NoTls)
        .await
        .context("connecting to PostgreSQL for LISTEN")?;
    let announced: Announced = Arc::default();
    let sink = Arc::clone(&announced);
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let at = Utc::now();
                let mut seen = sink.lock().expect("announced lock");
                for id in n.payload().split(',') {
                    seen.insert(id.to_owned(), at);
                }
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN \"{}\"", channel.replace('"', "")))
        .await
        .context("LISTEN on the job channel")?;
    Ok(Listening {
        announced,
        _client: client,
        driver,
    })
}

fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss_kib(&status).map(|kib| (kib as f64 / 1024.0 * 10.0).round() / 10.0)
}

/// The `VmRSS:  12345 kB` line of /proc/<pid>/status, in KiB.
pub fn parse_vm_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn pg_connections(db: &str) -> Option<u64> {
    let query = format!("select count(*) from pg_stat_activity where datname = '{db}'");
    crate::pg_baseline::psql("postgres", &[&query])
        .ok()?
        .trim()
        .parse()
        .ok()
}

async fn measure(args: &Args) -> anyhow::Result<Results> {
    let api = Api::new(&args.api, &args.key, &args.job);
    let submitter = jobs::client(args.submitters, Duration::from_secs(30))?;
    let body = args.job.body();
    let listening = match &args.database_url {
        Some(url) => Some(listen(url, &args.notify_channel).await?),
        None => None,
    };
    let rss_before = args.api_pid.and_then(rss_mib);
    let pg_before = args.pg_count.as_deref().and_then(pg_connections);

    let submitted: Vec<anyhow::Result<String>> = futures_util::stream::iter(0..args.waiters)
        .map(|_| api.submit(&submitter, &body))
        .buffer_unordered(args.submitters.max(1))
        .collect()
        .await;
    let mut errors = 0u64;
    let ids: Vec<String> = submitted
        .into_iter()
        .filter_map(|r| r.map_err(|e| eprintln!("submit: {e:#}")).ok())
        .collect();
    errors += (args.waiters - ids.len()) as u64;
    eprintln!("submitted {} jobs; parking {} polls", ids.len(), ids.len());

    // One connection per waiter: a parked poll holds its connection.
    let poller = jobs::client(ids.len().max(1), Duration::from_secs(120))?;
    let api = Arc::new(api);
    let answered = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::with_capacity(ids.len());
    for id in ids {
        let (api, poller, max_polls) = (Arc::clone(&api), poller.clone(), args.max_polls);
        let answered = Arc::clone(&answered);
        tasks.push(tokio::spawn(async move {
            let mut sent = Utc::now();
            for _ in 0..max_polls {
                let job = api.poll_once(&poller, &id).await;
                answered.store(true, Ordering::Relaxed);
                let job = job?;
                let arrived = Utc::now();
                if is_terminal(&job) {
                    let completed = timestamp(&job, "completedAt");
                    return Ok(Woken {
                        id,
                        sent,
                        arrived,
                        completed,
                    });
                }
                sent = Utc::now();
            }
            bail!("job {id} not finished after {max_polls} long polls")
        }));
    }
    // Sample the API while the polls park and wait, until the first answer
    // arrives: its memory peaks once every poll is parked, which takes
    // seconds on a slow machine, so one early sample would miss it.
    let mut rss_parked = None;
    let sampling_ends = tokio::time::Instant::now() + Duration::from_secs(120);
    while !answered.load(Ordering::Relaxed) && tokio::time::Instant::now() < sampling_ends {
        if let Some(now) = args.api_pid.and_then(rss_mib) {
            rss_parked = Some(rss_parked.map_or(now, |peak: f64| peak.max(now)));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pg_parked = args.pg_count.as_deref().and_then(pg_connections);

    let mut wake = histogram();
    let mut notified = histogram();
    let mut late = 0;
    let mut finished = Vec::new();
    for task in tasks {
        finished.push(task.await?);
    }
    let announced = listening
        .as_ref()
        .map(|l| l.announced.lock().expect("announced lock").clone());
    for outcome in finished {
        match outcome {
            Ok(Woken {
                id,
                sent,
                arrived,
                completed: Some(completed),
            }) if sent < completed => {
                wake.saturating_record(micros_between(completed, arrived).max(1));
                // The last notification naming the job before the answer is
                // the completion's (an earlier one announced the claim).
                if let Some(at) = announced.as_ref().and_then(|a| a.get(&id)) {
                    notified.saturating_record(micros_between(*at, arrived).max(1));
                }
            }
            Ok(Woken {
                completed: Some(_), ..
            }) => late += 1,
            Ok(_) => errors += 1,
            Err(e) => {
                eprintln!("poll: {e:#}");
                errors += 1;
            }
        }
    }
    Ok(Results {
        waiters: args.waiters,
        woken: wake.len(),
        late,
        errors,
        wake_p50_ms: ms(wake.value_at_quantile(0.5)),
        wake_p90_ms: ms(wake.value_at_quantile(0.9)),
        wake_p99_ms: ms(wake.value_at_quantile(0.99)),
        wake_max_ms: ms(wake.max()),
        notified_p50_ms: (!notified.is_empty()).then(|| ms(notified.value_at_quantile(0.5))),
        notified_p90_ms: (!notified.is_empty()).then(|| ms(notified.value_at_quantile(0.9))),
        notified_p99_ms: (!notified.is_empty()).then(|| ms(notified.value_at_quantile(0.99))),
        notified_max_ms: (!notified.is_empty()).then(|| ms(notified.max())),
        api_rss_before_mib: rss_before,
        api_rss_parked_mib: rss_parked,
        pg_connections_before: pg_before,
        pg_connections_parked: pg_parked,
    })
}

pub fn table(r: &Results) -> String {
    let opt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
    let opt3 = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
    let opt_n = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    let rows = [
        ("waiters", r.waiters.to_string()),
        ("woken (measured)", r.woken.to_string()),
        ("late (job done first)", r.late.to_string()),
        ("errors", r.errors.to_string()),
        ("wake-up p50 ms", format!("{:.3}", r.wake_p50_ms)),
        ("wake-up p90 ms", format!("{:.3}", r.wake_p90_ms)),
        ("wake-up p99 ms", format!("{:.3}", r.wake_p99_ms)),
        ("wake-up max ms", format!("{:.3}", r.wake_max_ms)),
        ("notify->answer p50 ms", opt3(r.notified_p50_ms)),
        ("notify->answer p90 ms", opt3(r.notified_p90_ms)),
        ("notify->answer p99 ms", opt3(r.notified_p99_ms)),
        ("notify->answer max ms", opt3(r.notified_max_ms)),
        ("api RSS before MiB", opt(r.api_rss_before_mib)),
        ("api RSS parked MiB (peak)", opt(r.api_rss_parked_mib)),
        ("pg conns before", opt_n(r.pg_connections_before)),
        ("pg conns parked", opt_n(r.pg_connections_parked)),
    ];
    rows.iter()
        .map(|(k, v)| format!("{k:<22} {v:>12}\n"))
        .collect()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.waiters == 0 {
        bail!("--waiters must be at least 1");
    }
    let results = report::block_on(measure(&args))??;
    print!("{}", table(&results));
    report::write_json(
        args.json.as_deref(),
        &json!({
            "benchmark": "long-poll", "api": args.api, "job": args.job.describe(),
            "results": results,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_from_proc_status() {
        let status = "Name:\tunigen-api\nVmPeak:\t  999 kB\nVmRSS:\t   51200 kB\nThreads:\t9\n";
        assert_eq!(parse_vm_rss_kib(status), Some(51_200));
        assert_eq!(parse_vm_rss_kib("Name: x\n"), None);
        let own = rss_mib(std::process::id()).unwrap();
        assert!(own > 0.0);
    }
}
