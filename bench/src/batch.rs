//! `batch`: how fast the Batch API runs a large batch. Uploads an N-line
//! JSONL file of `/v1/chat/completions` requests (`POST /files`, purpose
//! `batch`), creates the batch, polls `GET /batches/{id}` until it ends,
//! and reports lines per second from the batch's own `in_progress_at` to
//! its `completed_at` (server clock, whole seconds, so the file's
//! finalization is included), and from the client's view (creation answered
//! → completion seen by a poll).
//!
//! The lines run on workers started with `--tools batch`, at most the
//! organization's `plans.max_batch_concurrency` at once: the cap is read
//! from PostgreSQL (`--pg-database`) and reported with the figure, as are
//! the commits per line (`pg_stat_database.xact_commit` around creation →
//! completion, the idle rate before it subtracted; see `pg_baseline`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde::Serialize;
use serde_json::{Value, json};

use crate::jobs;
use crate::pg_baseline::{self, Commits};
use crate::report;

#[derive(clap::Args)]
pub struct Args {
    /// unigen's API base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080/api/v1")]
    api: String,
    /// unigen API key with the chat scope (scripts/dev-up prints one).
    #[arg(long, env = "UNIGEN_KEY", hide_env_values = true)]
    key: String,
    /// Requests in the batch (at most 50,000).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=50_000))]
    lines: u32,
    /// The chat model of every line: `local/echo` answers with the last
    /// user message (no language model, no upstream), so the figure is the
    /// batch pipeline's own. `bench/noop` has no chat model.
    #[arg(long, default_value = "local/echo")]
    model: String,
    /// `max_tokens` of every line (what each line holds before it runs).
    #[arg(long, default_value_t = 16)]
    max_tokens: u32,
    /// Milliseconds between two polls of the batch.
    #[arg(long, default_value_t = 500)]
    poll_ms: u64,
    /// Give up after this many seconds of polling.
    #[arg(long, default_value_t = 3600)]
    timeout: u64,
    /// The stack's database: the organization's batch concurrency cap and
    /// the commits are read there (psql -h 127.0.0.1 -U postgres).
    #[arg(long, default_value = "unigen")]
    pg_database: String,
    /// Seconds of idle commit rate measured before the batch (subtracted).
    #[arg(long, default_value_t = 2)]
    pg_idle_seconds: u64,
    /// Read nothing from PostgreSQL (no cap, no commits).
    #[arg(long)]
    no_pg: bool,
    /// Free text naming this run in the table and JSON (e.g. "2 workers").
    #[arg(long)]
    label: Option<String>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
pub struct Results {
    pub label: Option<String>,
    pub batch_id: String,
    pub lines: u32,
    pub status: String,
    pub completed: u64,
    pub failed: u64,
    pub upload_seconds: f64,
    pub create_seconds: f64,
    /// `completed_at - in_progress_at` (whole seconds, server clock).
    pub server_seconds: Option<i64>,
    pub server_lines_per_second: Option<f64>,
    /// Creation answered → completion seen (client clock, ± one poll).
    pub client_seconds: f64,
    pub client_lines_per_second: f64,
    /// The organization's `plans.max_batch_concurrency`.
    pub concurrency_cap: Option<i64>,
    pub commits: Option<Commits>,
}

/// A JSONL batch file of `lines` chat completions on `model`.
pub fn input_file(lines: u32, model: &str, max_tokens: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(lines as usize * 160);
    for i in 0..lines {
        let line = json!({
            "custom_id": format!("req-{i}"),
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": model,
                "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": format!("Say {i}")}],
            },
        });
        serde_json::to_writer(&mut out, &line).expect("a Value serializes");
        out.push(b'\n');
    }
    out
}

/// Lines per second over `seconds` (None when nothing can be divided).
pub fn per_second(lines: u64, seconds: f64) -> Option<f64> {
    (seconds > 0.0).then(|| (lines as f64 / seconds * 10.0).round() / 10.0)
}

fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "expired" | "cancelled")
}

async fn checked(response: reqwest::Response, what: &str) -> anyhow::Result<Value> {
    let status = response.status();
    let text = response.text().await?;
    if !status.is_success() {
        bail!("{what}: {status} {text}");
    }
    serde_json::from_str(&text).with_context(|| format!("{what}: not JSON: {text}"))
}

/// The organization's batch concurrency cap, found through the batch.
fn concurrency_cap(db: &str, batch_id: &str) -> anyhow::Result<i64> {
    ensure!(
        batch_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
        "unexpected batch id {batch_id:?}"
    );
    let output = pg_baseline::psql(
        db,
        &[&format!(
            "SELECT p.max_batch_concurrency FROM batches b \
             JOIN organizations o ON o.id = b.org_id \
             JOIN plans p ON p.code = o.plan_code WHERE b.id = '{batch_id}'"
        )],
    )?;
    output
        .trim()
        .parse()
        .with_context(|| format!("no cap for batch {batch_id} (got {output:?})"))
}

/// Waits for the statistics of earlier commits (flushed at most once a
/// second), then reads the counters.
async fn flushed_sample(db: &str) -> anyhow::Result<pg_baseline::Sample> {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    pg_baseline::sample(db)
}

/// The idle sample, then (after `idle_seconds`) the one the run starts from.
async fn start_counting(
    db: &str,
    idle_seconds: u64,
) -> anyhow::Result<(pg_baseline::Sample, pg_baseline::Sample)> {
    let idle = flushed_sample(db).await?;
    tokio::time::sleep(Duration::from_secs(idle_seconds)).await;
    Ok((idle, pg_baseline::sample(db)?))
}

async fn measure(args: &Args) -> anyhow::Result<Results> {
    let base = args.api.trim_end_matches('/');
    let client = jobs::client(4, Duration::from_secs(600))?;
    let file = input_file(args.lines, &args.model, args.max_tokens);
    let size = file.len();

    let started = Instant::now();
    let form = reqwest::multipart::Form::new()
        .text("purpose", "batch")
        .part(
            "file",
            reqwest::multipart::Part::bytes(file)
                .file_name("bench.jsonl")
                .mime_str("application/jsonl")?,
        );
    let uploaded = checked(
        client
            .post(format!("{base}/files"))
            .bearer_auth(&args.key)
            .multipart(form)
            .send()
            .await?,
        "uploading the input file",
    )
    .await?;
    let upload_seconds = started.elapsed().as_secs_f64();
    let file_id = uploaded["id"]
        .as_str()
        .context("the file object has no id")?
        .to_owned();
    eprintln!(
        "uploaded {file_id} ({size} bytes, {} lines) in {upload_seconds:.2} s",
        args.lines
    );

    // The idle commit rate, then the reading the batch starts from; a
    // PostgreSQL that can't be read (e.g. out of connections) skips the count.
    let counting = if args.no_pg {
        None
    } else {
        start_counting(&args.pg_database, args.pg_idle_seconds)
            .await
            .map_err(|e| eprintln!("not counting PostgreSQL commits: {e:#}"))
            .ok()
    };

    let started = Instant::now();
    let created = checked(
        client
            .post(format!("{base}/batches"))
            .bearer_auth(&args.key)
            .json(&json!({
                "input_file_id": file_id,
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
                "metadata": {"bench": "unigen-bench batch"},
            }))
            .send()
            .await?,
        "creating the batch",
    )
    .await?;
    let created_at = Instant::now();
    let create_seconds = created_at.duration_since(started).as_secs_f64();
    let batch_id = created["id"]
        .as_str()
        .context("the batch object has no id")?
        .to_owned();
    eprintln!("created {batch_id} in {create_seconds:.2} s; polling");
    let concurrency_cap = if args.no_pg {
        None
    } else {
        concurrency_cap(&args.pg_database, &batch_id)
            .map_err(|e| eprintln!("not reporting the concurrency cap: {e:#}"))
            .ok()
    };

    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut last_report = Instant::now();
    let batch = loop {
        let batch = checked(
            client
                .get(format!("{base}/batches/{batch_id}"))
                .bearer_auth(&args.key)
                .send()
                .await?,
            "polling the batch",
        )
        .await?;
        let status = batch["status"].as_str().unwrap_or_default();
        if is_terminal(status) {
            break batch;
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "{status}: {} completed, {} failed of {}",
                batch["request_counts"]["completed"], batch["request_counts"]["failed"], args.lines
            );
        }
        ensure!(
            Instant::now() < deadline,
            "batch {batch_id} still {status} after {} s",
            args.timeout
        );
        tokio::time::sleep(Duration::from_millis(args.poll_ms)).await;
    };
    let client_seconds = created_at.elapsed().as_secs_f64();
    let count = |key: &str| batch["request_counts"][key].as_u64().unwrap_or(0);
    let (completed, failed) = (count("completed"), count("failed"));
    let commits = match counting {
        Some((idle, before)) => match flushed_sample(&args.pg_database).await {
            Ok(after) => Some(pg_baseline::commits(
                &args.pg_database,
                &idle,
                &before,
                &after,
                completed + failed,
            )),
            Err(e) => {
                eprintln!("not counting PostgreSQL commits: {e:#}");
                None
            }
        },
        None => None,
    };
    let server_seconds = batch["completed_at"]
        .as_i64()
        .zip(batch["in_progress_at"].as_i64())
        .map(|(end, start)| end - start);
    Ok(Results {
        label: args.label.clone(),
        batch_id,
        lines: args.lines,
        status: batch["status"].as_str().unwrap_or_default().to_owned(),
        completed,
        failed,
        upload_seconds,
        create_seconds,
        server_seconds,
        server_lines_per_second: server_seconds
            .and_then(|s| per_second(completed + failed, s as f64)),
        client_seconds,
        client_lines_per_second: per_second(completed + failed, client_seconds).unwrap_or(0.0),
        concurrency_cap,
        commits,
    })
}

pub fn table(r: &Results) -> String {
    let f2 = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
    let commits = r.commits.as_ref();
    let label = r.label.as_ref().map(|l| ("label", l.clone()));
    let rows = [
        ("batch", r.batch_id.clone()),
        ("status", r.status.clone()),
        ("lines", r.lines.to_string()),
        ("lines completed", r.completed.to_string()),
        ("lines failed", r.failed.to_string()),
        ("upload s", format!("{:.2}", r.upload_seconds)),
        ("create s", format!("{:.2}", r.create_seconds)),
        (
            "in_progress->completed s",
            r.server_seconds.map_or("-".into(), |s| s.to_string()),
        ),
        ("lines/s (server)", f2(r.server_lines_per_second)),
        ("client s", format!("{:.2}", r.client_seconds)),
        (
            "lines/s (client)",
            format!("{:.2}", r.client_lines_per_second),
        ),
        (
            "batch concurrency cap",
            r.concurrency_cap.map_or("-".into(), |c| c.to_string()),
        ),
        (
            "pg commits/line",
            f2(commits.and_then(|c| c.commits_per_job)),
        ),
        (
            "pg write xacts/line",
            f2(commits.and_then(|c| c.write_xacts_per_job)),
        ),
        (
            "pg idle commits/s",
            f2(commits.map(|c| c.idle_commits_per_second)),
        ),
    ];
    label
        .into_iter()
        .chain(rows)
        .map(|(k, v)| format!("{k:<26} {v:>22}\n"))
        .collect()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let results = report::block_on(measure(&args))??;
    print!("{}", table(&results));
    report::write_json(
        args.json.as_deref(),
        &json!({
            "benchmark": "batch", "label": args.label, "api": args.api,
            "model": args.model, "max_tokens": args.max_tokens, "results": results,
        }),
    )?;
    ensure!(
        results.status == "completed" && results.failed == 0,
        "batch ended {} with {} failed lines",
        results.status,
        results.failed
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_input_file_has_one_valid_chat_request_per_line() {
        let file = input_file(3, "local/echo", 16);
        let lines: Vec<Value> = file
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2]["custom_id"], "req-2");
        assert_eq!(lines[0]["url"], "/v1/chat/completions");
        assert_eq!(lines[1]["body"]["model"], "local/echo");
        assert_eq!(lines[1]["body"]["max_tokens"], 16);
    }

    #[test]
    fn lines_per_second_need_a_positive_duration() {
        assert_eq!(per_second(10_000, 40.0), Some(250.0));
        assert_eq!(per_second(10, 0.0), None);
    }

    #[test]
    fn table_names_the_cap_and_the_commits_per_line() {
        let results = Results {
            label: None,
            batch_id: "batch_1".into(),
            lines: 10,
            status: "completed".into(),
            completed: 10,
            failed: 0,
            upload_seconds: 0.1,
            create_seconds: 0.2,
            server_seconds: Some(2),
            server_lines_per_second: Some(5.0),
            client_seconds: 2.5,
            client_lines_per_second: 4.0,
            concurrency_cap: Some(8),
            commits: None,
        };
        let table = table(&results);
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("batch concurrency cap") && l.ends_with(" 8"))
        );
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("lines/s (server)") && l.ends_with("5.00"))
        );
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("pg commits/line") && l.ends_with(" -"))
        );
    }
}
