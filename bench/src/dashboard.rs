//! `dashboard`: server time of every dashboard page for an organization
//! with many jobs and usage records. Optionally seeds the organization first
//! (`--seed-jobs`, `--seed-usage`: server-side `INSERT ... SELECT ... FROM
//! generate_series`, created_at spread over `--days` days, several tools,
//! statuses, models, endpoints and the organization's keys), then checks
//! that the daily usage rollups (`usage_daily`, kept by the trigger on
//! `usage_records`) still equal the records, group by group.
//!
//! Measuring signs in through the form as a browser does (the sign-in
//! page's `csrf_token` and cookie, then the POST), then sends `--requests`
//! sequential GETs per page after `--warmup` ones, and reports p50/p95/max
//! per page: the time from sending the request to the last byte of the
//! answer, on loopback (so server time plus well under a millisecond).
//! Pages over `--budget-ms` at p95 are flagged.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::{Days, Utc};
use serde::Serialize;
use serde_json::json;
use tokio_postgres::Client;

use crate::jobs::ms;
use crate::load::histogram;
use crate::report;

#[derive(clap::Args)]
pub struct Args {
    /// unigen's base URL (the dashboard is under `--prefix`).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    base: String,
    /// The stack's `dashboard.path_prefix`.
    #[arg(long, default_value = "/dashboard")]
    prefix: String,
    /// A member of the organization (`unigen-api admin user create`).
    #[arg(long)]
    email: String,
    /// The member's password.
    #[arg(long, env = "UNIGEN_DASHBOARD_PASSWORD", hide_env_values = true)]
    password: String,
    /// Measured requests per page (sequential).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    requests: u64,
    /// Unmeasured requests per page first.
    #[arg(long, default_value_t = 3)]
    warmup: u64,
    /// Flag pages whose p95 is above this.
    #[arg(long, default_value_t = 200.0)]
    budget_ms: f64,
    /// Days of the long usage range measured (and of the seeded history).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=366))]
    days: u64,
    /// The stack's database: seeding and the rollup check use it.
    #[arg(long)]
    database_url: Option<String>,
    /// The member's organization: seeded and checked (needs --database-url).
    #[arg(long)]
    org: Option<String>,
    /// Jobs to insert into --org before measuring.
    #[arg(long, default_value_t = 0)]
    seed_jobs: u64,
    /// Usage records to insert into --org before measuring.
    #[arg(long, default_value_t = 0)]
    seed_usage: u64,
    /// Seed and check only; measure nothing.
    #[arg(long)]
    seed_only: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Rows per seeding statement (each is one transaction; the rollup trigger
/// aggregates each statement's rows).
const BATCH: u64 = 100_000;

/// What the jobs are made of: (tool, model, tier, credits), repeated for
/// weight (half the jobs are images).
const JOB_SHAPES: &str = "(VALUES
    (0, 'image', 'local/procedural-v1', 'fast', 1),
    (1, 'image', 'local/procedural-v1', 'fast', 1),
    (2, 'image', 'local/procedural-v1', 'fast', 1),
    (3, 'image', 'local/procedural-hd', 'standard', 2),
    (4, 'image', 'local/procedural-hd', 'standard', 2),
    (5, 'image_edit', 'local/classic-edit', 'fast', 2),
    (6, 'video', 'local/motion-v1', 'standard', 10),
    (7, 'music', 'local/synth-v1', 'fast', 5),
    (8, 'tts', 'local/espeak', 'fast', 1),
    (9, 'stt', 'local/whisper-tiny-en', 'fast', 1)
) AS shape(n, tool, model, tier, credits)";

/// What the usage records are made of: (endpoint, model, tokens?, credits).
const USAGE_SHAPES: &str = "(VALUES
    (0, '/v1/chat/completions', 'local/echo', true, 0),
    (1, '/v1/chat/completions', 'local/echo', true, 0),
    (2, '/v1/chat/completions', 'local/echo', true, 0),
    (3, '/v1/chat/completions', 'local/echo-vision', true, 0),
    (4, '/v1/messages', 'local/echo', true, 0),
    (5, '/v1/embeddings', 'local/hash-embed', true, 0),
    (6, '/v1/embeddings', 'local/hash-embed', true, 0),
    (7, '/v1/images/generations', 'local/procedural-v1', false, 1),
    (8, '/v1/images/generations', 'local/procedural-hd', false, 2),
    (9, '/v1/images/edits', 'local/classic-edit', false, 2),
    (10, '/v1/videos/generations', 'local/motion-v1', false, 10),
    (11, '/v1/music/generations', 'local/synth-v1', false, 5),
    (12, '/v1/audio/speech', 'local/espeak', false, 1),
    (13, '/v1/audio/transcriptions', 'local/whisper-tiny-en', false, 1)
) AS shape(n, endpoint, model, tokens, credits)";

/// Jobs `$3..=$4` of `$5` for org `$1`, keys `$2`, over `$6` days (the
/// newest now). Ids are UUIDv7 of created_at, as the API makes them. The
/// newest 1% of jobs are partly pending or processing (published, no
/// lease), the rest finished; nothing here wakes a worker or the relay.
fn jobs_statement() -> String {
    format!(
        "INSERT INTO jobs (id, org_id, api_key_id, tool, status, progress, model, model_tier,
                           input_params, output_data, estimated_credits, actual_credits,
                           error_message, attempt, enqueued_at, created_at, started_at,
                           completed_at)
         SELECT (lpad(to_hex((extract(epoch FROM s.at) * 1000)::bigint), 12, '0') || '7'
                 || substr(s.h, 1, 3) || '8' || substr(s.h, 4, 15))::uuid,
                $1::text::uuid, ($2::text[])[1 + s.i % cardinality($2::text[])]::uuid,
                s.tool, s.status,
                CASE s.status WHEN 'completed' THEN 100 WHEN 'processing' THEN 40 ELSE 0 END,
                s.model, s.tier,
                jsonb_build_object('prompt', 'seeded job ' || s.i, 'model', s.model, 'n', 1),
                CASE WHEN s.status = 'completed' THEN jsonb_build_object('seeded', true) END,
                s.credits,
                CASE s.status WHEN 'completed' THEN s.credits
                              WHEN 'failed' THEN 0 WHEN 'cancelled' THEN 0 END,
                CASE WHEN s.status = 'failed' THEN 'seeded failure' END,
                CASE WHEN s.status = 'pending' THEN 0 ELSE 1 END,
                s.at, s.at,
                CASE WHEN s.status <> 'pending' THEN s.at + interval '1 second' END,
                CASE WHEN s.status IN ('completed', 'failed', 'cancelled')
                     THEN s.at + make_interval(secs => 2 + s.i % 40) END
           FROM (SELECT g.i, md5('unigen-bench job ' || g.i) AS h,
                        now() - make_interval(secs => $6::float8 * 86400
                                                      * (1 - g.i::float8 / $5::bigint::float8)) AS at,
                        shape.tool, shape.model, shape.tier, shape.credits::bigint AS credits,
                        CASE WHEN g.i >= $5::bigint - $5::bigint / 100 AND abs(hashint8(g.i + 77)) % 2 = 0
                             THEN CASE WHEN abs(hashint8(g.i + 78)) % 2 = 0
                                       THEN 'pending' ELSE 'processing' END
                             WHEN abs(hashint8(g.i + 79)) % 100 < 88 THEN 'completed'
                             WHEN abs(hashint8(g.i + 79)) % 100 < 97 THEN 'failed'
                             ELSE 'cancelled' END AS status
                   FROM generate_series($3::bigint, $4::bigint) AS g(i)
                   JOIN {JOB_SHAPES} ON shape.n = abs(hashint8(g.i)) % 10) AS s"
    )
}

/// Usage records `$3..=$4` of `$5`, as [`jobs_statement`]. The rollup
/// trigger runs once per statement over exactly these rows.
fn usage_statement() -> String {
    format!(
        "INSERT INTO usage_records (id, org_id, api_key_id, endpoint, method, model, credits,
                                    latency_ms, status, prompt_tokens, completion_tokens,
                                    total_tokens, created_at)
         SELECT gen_random_uuid(), $1::text::uuid,
                ($2::text[])[1 + abs(hashint8(s.i + 5)) % cardinality($2::text[])]::uuid,
                s.endpoint, 'POST', s.model,
                CASE WHEN s.tokens THEN (s.prompt + s.completion + 999) / 1000 ELSE s.credits END,
                20 + abs(hashint8(s.i + 7)) % 3000,
                CASE WHEN abs(hashint8(s.i + 9)) % 100 < 95 THEN 'success'
                     WHEN abs(hashint8(s.i + 9)) % 100 < 99 THEN 'failed'
                     ELSE 'cancelled' END,
                s.prompt, s.completion, s.prompt + s.completion, s.at
           FROM (SELECT g.i, shape.endpoint, shape.model, shape.tokens,
                        shape.credits::bigint AS credits,
                        now() - make_interval(secs => $6::float8 * 86400
                                                      * (1 - g.i::float8 / $5::bigint::float8)) AS at,
                        CASE WHEN shape.tokens THEN 10 + abs(hashint8(g.i + 11)) % 4000
                             ELSE 0 END::bigint AS prompt,
                        CASE WHEN shape.tokens AND shape.endpoint <> '/v1/embeddings'
                             THEN abs(hashint8(g.i + 13)) % 1000 ELSE 0 END::bigint AS completion
                   FROM generate_series($3::bigint, $4::bigint) AS g(i)
                   JOIN {USAGE_SHAPES} ON shape.n = abs(hashint8(g.i)) % 14) AS s"
    )
}

/// The organization's rollups against its records: every (day, model,
/// endpoint, key) group's sums, both ways. Rows are the differing groups.
const ROLLUP_CHECK: &str = "
    WITH records AS (
        SELECT (created_at AT TIME ZONE 'UTC')::date AS day, model, endpoint, api_key_id,
               count(*) AS requests, count(*) FILTER (WHERE status = 'success') AS successes,
               sum(credits) AS credits, sum(prompt_tokens) AS prompt_tokens,
               sum(completion_tokens) AS completion_tokens, sum(total_tokens) AS total_tokens,
               sum(latency_ms) AS latency_ms_sum
          FROM usage_records WHERE org_id = $1::text::uuid
         GROUP BY 1, 2, 3, 4),
    rollups AS (
        SELECT day, model, endpoint, api_key_id, requests, successes, credits::numeric,
               prompt_tokens::numeric, completion_tokens::numeric, total_tokens::numeric,
               latency_ms_sum::numeric
          FROM usage_daily WHERE org_id = $1::text::uuid)
    SELECT (SELECT count(*) FROM (TABLE records EXCEPT TABLE rollups) AS x),
           (SELECT count(*) FROM (TABLE rollups EXCEPT TABLE records) AS y),
           (SELECT count(*) FROM rollups),
           (SELECT coalesce(sum(requests), 0)::bigint FROM records),
           (SELECT coalesce(sum(credits), 0)::bigint FROM records),
           (SELECT coalesce(sum(requests), 0)::bigint FROM rollups),
           (SELECT coalesce(sum(credits), 0)::bigint FROM rollups)";

#[derive(Debug, Serialize)]
pub struct Seeded {
    pub jobs_inserted: u64,
    pub usage_inserted: u64,
    pub jobs_seconds: f64,
    pub usage_seconds: f64,
    /// The organization's totals afterwards.
    pub org_jobs: i64,
    pub org_usage_records: i64,
}

#[derive(Debug, Serialize)]
pub struct RollupCheck {
    /// (day, model, endpoint, key) groups whose sums differ, each way.
    pub groups_missing_or_wrong: i64,
    pub groups_extra_or_wrong: i64,
    pub rollup_rows: i64,
    pub records_requests: i64,
    pub records_credits: i64,
    pub rollup_requests: i64,
    pub rollup_credits: i64,
    pub exact: bool,
    pub seconds: f64,
}

#[derive(Debug, Serialize)]
pub struct PageResult {
    pub page: String,
    pub path: String,
    pub requests: u64,
    pub errors: u64,
    pub bytes: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
    pub over_budget: bool,
}

async fn connect(url: &str) -> anyhow::Result<Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .context("connecting to PostgreSQL (--database-url)")?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Inserts `count` rows with `statement` in batches, printing progress.
async fn insert_batches(
    db: &Client,
    what: &str,
    statement: &str,
    org: &str,
    keys: &[String],
    count: u64,
    days: u64,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let prepared = db.prepare(statement).await?;
    let (total, days) = (count as i64, days as f64);
    let mut from = 0u64;
    while from < count {
        let to = (from + BATCH).min(count) - 1;
        db.execute(
            &prepared,
            &[&org, &keys, &(from as i64), &(to as i64), &total, &days],
        )
        .await
        .with_context(|| format!("inserting {what} {from}..={to}"))?;
        from = to + 1;
        eprintln!(
            "seeded {from}/{count} {what} ({:.1} s)",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(started.elapsed().as_secs_f64())
}

async fn seed(db: &Client, org: &str, args: &Args) -> anyhow::Result<Seeded> {
    let keys: Vec<String> = db
        .query(
            "SELECT id::text FROM api_keys WHERE org_id = $1::text::uuid ORDER BY created_at",
            &[&org],
        )
        .await
        .context("reading the organization's keys (is --org an organization?)")?
        .iter()
        .map(|row| row.get(0))
        .collect();
    if keys.is_empty() && (args.seed_jobs > 0 || args.seed_usage > 0) {
        bail!("organization {org} has no API key: create a few (unigen-api admin key create)");
    }
    let jobs_seconds = match args.seed_jobs {
        0 => 0.0,
        n => insert_batches(db, "jobs", &jobs_statement(), org, &keys, n, args.days).await?,
    };
    let usage_seconds = match args.seed_usage {
        0 => 0.0,
        n => {
            let statement = usage_statement();
            insert_batches(db, "usage records", &statement, org, &keys, n, args.days).await?
        }
    };
    if args.seed_jobs > 0 || args.seed_usage > 0 {
        // What autovacuum does soon after a bulk load: statistics, and the
        // visibility map index-only scans need.
        eprintln!("vacuum analyze");
        db.batch_execute("VACUUM (ANALYZE) jobs, usage_records, usage_daily")
            .await?;
    }
    let counts = db
        .query_one(
            "SELECT (SELECT count(*) FROM jobs WHERE org_id = $1::text::uuid),
                    (SELECT count(*) FROM usage_records WHERE org_id = $1::text::uuid)",
            &[&org],
        )
        .await?;
    Ok(Seeded {
        jobs_inserted: args.seed_jobs,
        usage_inserted: args.seed_usage,
        jobs_seconds,
        usage_seconds,
        org_jobs: counts.get(0),
        org_usage_records: counts.get(1),
    })
}

async fn check_rollups(db: &Client, org: &str) -> anyhow::Result<RollupCheck> {
    let started = Instant::now();
    let row = db.query_one(ROLLUP_CHECK, &[&org]).await?;
    let check = RollupCheck {
        groups_missing_or_wrong: row.get(0),
        groups_extra_or_wrong: row.get(1),
        rollup_rows: row.get(2),
        records_requests: row.get(3),
        records_credits: row.get(4),
        rollup_requests: row.get(5),
        rollup_credits: row.get(6),
        exact: false,
        seconds: started.elapsed().as_secs_f64(),
    };
    Ok(RollupCheck {
        exact: check.groups_missing_or_wrong == 0
            && check.groups_extra_or_wrong == 0
            && check.records_requests == check.rollup_requests
            && check.records_credits == check.rollup_credits,
        ..check
    })
}

/// The dashboard, signed in (the client keeps the session cookie).
struct Dashboard {
    client: reqwest::Client,
    /// `{base}{prefix}`.
    root: String,
    /// `{base}`: links in pages are absolute paths.
    origin: String,
}

/// The text of `<input ... name="csrf_token" value="...">`.
pub fn csrf_token(html: &str) -> Option<&str> {
    let at = html.find("name=\"csrf_token\"")?;
    let rest = &html[at..];
    let value = rest.find("value=\"")? + "value=\"".len();
    let end = rest[value..].find('"')?;
    Some(&rest[value..value + end])
}

/// Undoes the HTML escaping of an attribute value (askama escapes `&` and,
/// in some versions, `/`).
pub fn unescape(value: &str) -> String {
    value
        .replace("&#x2f;", "/")
        .replace("&#47;", "/")
        .replace("&#x27;", "'")
        .replace("&#39;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The `href` of the link marked `rel="next"`.
pub fn next_link(html: &str) -> Option<String> {
    let rel = html.find("rel=\"next\"")?;
    let tag = html[..rel].rfind('<')?;
    let a = &html[tag..rel];
    let href = a.find("href=\"")? + "href=\"".len();
    let end = a[href..].find('"')?;
    Some(unescape(&a[href..href + end]))
}

/// The first job page linked from a jobs list: `{prefix}/jobs/<uuid>`.
pub fn first_job_link(html: &str, prefix: &str) -> Option<String> {
    let html = html.replace("&#x2f;", "/").replace("&#47;", "/");
    let needle = format!("href=\"{prefix}/jobs/");
    let at = html.find(&needle)? + "href=\"".len();
    let end = html[at..].find('"')?;
    let path = html[at..at + end].to_owned();
    let id = path.rsplit('/').next()?;
    (id.len() == 36 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')).then_some(path)
}

impl Dashboard {
    async fn sign_in(args: &Args) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .http1_only()
            .tcp_nodelay(true)
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(60))
            .build()?;
        let origin = args.base.trim_end_matches('/').to_owned();
        let root = format!("{origin}{}", args.prefix.trim_end_matches('/'));
        let login = client
            .get(format!("{root}/login"))
            .send()
            .await
            .with_context(|| format!("GET {root}/login"))?;
        if !login.status().is_success() {
            bail!("GET {root}/login answered {}", login.status());
        }
        let html = login.text().await?;
        let token = csrf_token(&html)
            .context("the sign-in page has no csrf_token field")?
            .to_owned();
        let answer = client
            .post(format!("{root}/login"))
            .form(&[
                ("email", args.email.as_str()),
                ("password", args.password.as_str()),
                ("csrf_token", token.as_str()),
            ])
            .send()
            .await?;
        if answer.status() != reqwest::StatusCode::SEE_OTHER {
            bail!(
                "signing in as {} answered {} (wrong email or password?)",
                args.email,
                answer.status()
            );
        }
        let dashboard = Self {
            client,
            root,
            origin,
        };
        let (status, _) = dashboard.get("/").await?;
        if status != reqwest::StatusCode::OK {
            bail!("the overview answered {status} after signing in");
        }
        Ok(dashboard)
    }

    /// GET a path under the dashboard (`/jobs`) or an absolute path
    /// (`/dashboard/jobs?...`, as pages link).
    fn url(&self, path: &str) -> String {
        let prefix = &self.root[self.origin.len()..];
        if !prefix.is_empty() && path.starts_with(prefix) {
            format!("{}{path}", self.origin)
        } else {
            format!("{}{path}", self.root)
        }
    }

    async fn get(&self, path: &str) -> anyhow::Result<(reqwest::StatusCode, String)> {
        let response = self.client.get(self.url(path)).send().await?;
        let status = response.status();
        Ok((status, response.text().await?))
    }

    /// `warmup` then `requests` sequential GETs of `path`.
    async fn measure(&self, page: &str, path: &str, args: &Args) -> PageResult {
        let url = self.url(path);
        for _ in 0..args.warmup {
            if let Ok(response) = self.client.get(&url).send().await {
                let _ = response.bytes().await;
            }
        }
        let mut latency = histogram();
        let (mut errors, mut bytes) = (0, 0);
        let mut first_error = None;
        for _ in 0..args.requests {
            let started = Instant::now();
            let answer = match self.client.get(&url).send().await {
                Ok(response) => {
                    let status = response.status();
                    response.bytes().await.map(|body| (status, body))
                }
                Err(err) => Err(err),
            };
            let took = started.elapsed();
            match answer {
                Ok((status, body)) if status == reqwest::StatusCode::OK => {
                    bytes = body.len();
                    latency.saturating_record(took.as_micros().try_into().unwrap_or(u64::MAX));
                }
                Ok((status, _)) => {
                    errors += 1;
                    first_error.get_or_insert_with(|| format!("answered {status}"));
                }
                Err(err) => {
                    errors += 1;
                    first_error.get_or_insert_with(|| err.to_string());
                }
            }
        }
        if let Some(error) = first_error {
            eprintln!("{page} ({path}): {errors} errors, the first: {error}");
        }
        let p95_ms = ms(latency.value_at_quantile(0.95));
        PageResult {
            page: page.to_owned(),
            path: path.to_owned(),
            requests: latency.len(),
            errors,
            bytes,
            p50_ms: ms(latency.value_at_quantile(0.50)),
            p95_ms,
            max_ms: ms(latency.max()),
            over_budget: p95_ms > args.budget_ms,
        }
    }
}

/// The pages measured, in order: (name, path under the dashboard).
async fn pages(dashboard: &Dashboard, args: &Args) -> anyhow::Result<Vec<(String, String)>> {
    let today = Utc::now().date_naive();
    let from = today
        .checked_sub_days(Days::new(args.days - 1))
        .context("--days")?;
    let range = |group: &str| format!("from={from}&to={today}&group={group}");
    let mut pages: Vec<(String, String)> = vec![
        ("overview".into(), "/".into()),
        ("keys".into(), "/keys".into()),
        ("usage (default range)".into(), "/usage".into()),
    ];
    for group in ["model", "endpoint", "key"] {
        pages.push((
            format!("usage {} days by {group}", args.days),
            format!("/usage?{}", range(group)),
        ));
    }
    for group in ["model", "endpoint", "key"] {
        pages.push((
            format!("usage.csv {} days by {group}", args.days),
            format!("/usage.csv?{}", range(group)),
        ));
    }
    pages.push(("jobs".into(), "/jobs".into()));
    pages.push((
        "jobs image+completed".into(),
        "/jobs?tool=image&status=completed".into(),
    ));
    let (status, html) = dashboard.get("/jobs").await?;
    if status != reqwest::StatusCode::OK {
        bail!("the jobs page answered {status}");
    }
    match next_link(&html) {
        Some(next) => pages.push(("jobs page 2".into(), next)),
        None => eprintln!("the jobs list has no next page (fewer than a page of jobs?)"),
    }
    let prefix = &dashboard.root[dashboard.origin.len()..];
    match first_job_link(&html, prefix) {
        Some(job) => pages.push(("job".into(), job)),
        None => eprintln!("the jobs list links no job: the job page is not measured"),
    }
    for page in ["webhooks", "credits", "models", "team"] {
        pages.push((page.into(), format!("/{page}")));
    }
    Ok(pages)
}

pub fn table(results: &[PageResult], budget_ms: f64) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "{:<30} {:>8} {:>6} {:>8} {:>9} {:>9} {:>9}\n",
        "page", "requests", "errors", "KiB", "p50 ms", "p95 ms", "max ms"
    );
    for r in results {
        let _ = writeln!(
            out,
            "{:<30} {:>8} {:>6} {:>8.1} {:>9.3} {:>9.3} {:>9.3}{}",
            r.page,
            r.requests,
            r.errors,
            r.bytes as f64 / 1024.0,
            r.p50_ms,
            r.p95_ms,
            r.max_ms,
            if r.over_budget {
                format!("  OVER {budget_ms} ms at p95")
            } else {
                String::new()
            }
        );
    }
    out
}

async fn run_all(args: &Args) -> anyhow::Result<serde_json::Value> {
    let mut report = json!({
        "benchmark": "dashboard", "base": args.base, "requests_per_page": args.requests,
        "warmup": args.warmup, "budget_ms": args.budget_ms, "days": args.days,
    });
    if let Some(url) = &args.database_url {
        let org = args
            .org
            .as_deref()
            .context("--database-url needs --org (the member's organization)")?;
        let db = connect(url).await?;
        let seeded = seed(&db, org, args).await?;
        eprintln!(
            "organization {org}: {} jobs, {} usage records",
            seeded.org_jobs, seeded.org_usage_records
        );
        let check = check_rollups(&db, org).await?;
        eprintln!(
            "rollups {}: {} rows; requests {} (records) / {} (rollups), credits {} / {}; \
             differing groups {} + {} ({:.1} s)",
            if check.exact { "exact" } else { "NOT EXACT" },
            check.rollup_rows,
            check.records_requests,
            check.rollup_requests,
            check.records_credits,
            check.rollup_credits,
            check.groups_missing_or_wrong,
            check.groups_extra_or_wrong,
            check.seconds
        );
        let exact = check.exact;
        report["seeded"] = json!(seeded);
        report["rollups"] = json!(check);
        if !exact {
            bail!("the usage rollups do not match the usage records");
        }
    } else if args.seed_jobs > 0 || args.seed_usage > 0 {
        bail!("seeding needs --database-url and --org");
    }
    if args.seed_only {
        return Ok(report);
    }
    let dashboard = Dashboard::sign_in(args).await?;
    let mut results = Vec::new();
    for (page, path) in pages(&dashboard, args).await? {
        let result = dashboard.measure(&page, &path, args).await;
        eprintln!(
            "{page}: p50 {:.1} ms, p95 {:.1} ms",
            result.p50_ms, result.p95_ms
        );
        results.push(result);
    }
    print!("{}", table(&results, args.budget_ms));
    let over: Vec<&str> = results
        .iter()
        .filter(|r| r.over_budget)
        .map(|r| r.page.as_str())
        .collect();
    if !over.is_empty() {
        println!("over {} ms at p95: {}", args.budget_ms, over.join(", "));
    }
    report["pages"] = json!(results);
    Ok(report)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let report = report::block_on(run_all(&args))??;
    report::write_json(args.json.as_deref(), &report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sign_in_token_is_read_from_its_field() {
        let html = r#"<form><input type="hidden" name="csrf_token" value="ab12"><input name="email" value=""></form>"#;
        assert_eq!(csrf_token(html), Some("ab12"));
        assert_eq!(csrf_token("<form></form>"), None);
    }

    #[test]
    fn links_are_read_and_unescaped() {
        let html = r#"<td><a href="/dashboard/jobs/0190a5c4-0000-7000-8000-000000000001">x</a></td>
            <a href="&#x2f;dashboard&#x2f;jobs?tool=&amp;status=&amp;before=abc" rel="next">Older jobs</a>"#;
        assert_eq!(
            next_link(html).as_deref(),
            Some("/dashboard/jobs?tool=&status=&before=abc")
        );
        assert_eq!(
            first_job_link(html, "/dashboard").as_deref(),
            Some("/dashboard/jobs/0190a5c4-0000-7000-8000-000000000001")
        );
        assert_eq!(next_link("<a href=\"/x\">no</a>"), None);
    }
}
