//! The soak (issue 34): a mixed workload from several organizations on
//! `bench/noop` for a set time while faults are injected about every
//! minute, then invariants checked after a drain. Shared by
//! `unigen-bench soak` (20 minutes by default) and the e2e test
//! `soak::...` (about two minutes), so there is one scenario.
//!
//! The stack is two APIs, two workers and two schedulers, each its own OS
//! process (`unigen-stack`), on a database, RabbitMQ prefix and files
//! directory of the run's own, with RabbitMQ reached through a
//! [`FaultProxy`] (the shared broker is never touched). Slot 0 of each kind
//! lives the whole run; the faults go to slot 1: kill -9 of a worker (and a
//! new one), a restart (SIGTERM, drain, start) of an API or a scheduler, a
//! cut of every RabbitMQ connection for a few seconds.
//!
//! Checked at the end (each failure is a line of [`SoakReport::violations`]):
//! - every job is terminal, every accepted id is a job, and each has
//!   exactly its one terminal event (completed: one `generation.completed`;
//!   failed: one `generation.failed`; cancelled: no `generation.completed`);
//! - every completed job was charged exactly its `actual_credits`, once
//!   (one ledger row per kind), every failed or cancelled one nothing; every
//!   request in the ledger was charged what its usage record says;
//!   each organization's ledger adds up to its balances, nothing reserved;
//! - every event of a subscribed kind was delivered (the receiver answered
//!   2xx for its id) and no delivery is left pending or failed;
//! - no 5xx outside an injected fault's window (its start to its end plus
//!   `fault_allowance`); idempotent resends named the same job;
//! - RSS: see [`SoakConfig::rss_limit`].

mod load;
mod receiver;
mod stack;

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use unigen_core::config::Settings;
use unigen_core::domain::{ApiKeyMaterial, Scope};
use unigen_db::models::{NewApiKey, NewOrganization};
use unigen_db::queries;
use uuid::Uuid;

use crate::{FaultProxy, TestDatabase};
use load::{Ledger, Load, Tenant};
use stack::{Role, Stack};

pub use load::Action;

/// The event kinds the receiver is subscribed to.
const SUBSCRIBED: [&str; 3] = [
    "generation.started",
    "generation.completed",
    "generation.failed",
];

/// How a run goes.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// This package's `unigen-stack` binary.
    pub stack_binary: String,
    /// The `UNIGEN_CONFIG` file with the `bench/noop` models
    /// (`bench/unigen-bench.toml`).
    pub config_file: PathBuf,
    /// How long the load runs.
    pub duration: Duration,
    /// A fault every this often (the first one after one period).
    pub fault_every: Duration,
    /// How long after a fault's end answers still count as inside it.
    pub fault_allowance: Duration,
    /// How long RabbitMQ's connections stay cut.
    pub cut_for: Duration,
    /// Organizations, each with two keys and a webhook.
    pub organizations: usize,
    /// One action per organization this often.
    pub interval: Duration,
    /// At most this many actions in flight.
    pub max_in_flight: usize,
    /// RSS samples before this (from a process's start) are warm-up.
    pub warm_up: Duration,
    pub rss_every: Duration,
    /// If set, the long-lived processes' (slot 0's) RSS at the end may be
    /// at most this fraction above their first sample after the warm-up.
    pub rss_limit: Option<f64>,
    /// How long the drain may take (jobs terminal, webhooks retried).
    pub drain_timeout: Duration,
    /// Job lease: how soon a killed worker's jobs are taken again.
    pub lease_seconds: u64,
}

impl SoakConfig {
    /// The e2e test's short run.
    pub fn short(stack_binary: &str) -> SoakConfig {
        SoakConfig {
            stack_binary: stack_binary.to_owned(),
            config_file: default_config_file(),
            duration: Duration::from_secs(120),
            fault_every: Duration::from_secs(20),
            fault_allowance: Duration::from_secs(15),
            cut_for: Duration::from_secs(3),
            organizations: 3,
            interval: Duration::from_millis(500),
            max_in_flight: 64,
            warm_up: Duration::from_secs(30),
            rss_every: Duration::from_secs(5),
            rss_limit: None,
            drain_timeout: Duration::from_secs(120),
            lease_seconds: 10,
        }
    }

    /// The benchmark's default: 20 minutes, a fault a minute, RSS checked.
    pub fn long(stack_binary: &str) -> SoakConfig {
        SoakConfig {
            duration: Duration::from_secs(1200),
            fault_every: Duration::from_secs(60),
            fault_allowance: Duration::from_secs(20),
            cut_for: Duration::from_secs(5),
            warm_up: Duration::from_secs(180),
            rss_every: Duration::from_secs(10),
            rss_limit: Some(0.10),
            drain_timeout: Duration::from_secs(300),
            ..SoakConfig::short(stack_binary)
        }
    }
}

/// `bench/unigen-bench.toml` of this checkout.
pub fn default_config_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/unigen-bench.toml")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FaultKind {
    KillWorker,
    RestartApi,
    CutRabbitMq,
    RestartScheduler,
}

const FAULTS: [FaultKind; 4] = [
    FaultKind::KillWorker,
    FaultKind::RestartApi,
    FaultKind::CutRabbitMq,
    FaultKind::RestartScheduler,
];

impl FaultKind {
    fn name(self) -> &'static str {
        match self {
            FaultKind::KillWorker => "kill -9 worker-1, start another",
            FaultKind::RestartApi => "restart api-1 (SIGTERM, start)",
            FaultKind::CutRabbitMq => "cut RabbitMQ connections",
            FaultKind::RestartScheduler => "restart scheduler-1 (SIGTERM, start)",
        }
    }
}

struct Fault {
    kind: FaultKind,
    start: Instant,
    end: Instant,
}

/// One process incarnation's RSS, KiB.
#[derive(Clone, Debug)]
pub struct RssLine {
    pub process: String,
    pub incarnation: u32,
    pub pid: u32,
    pub long_lived: bool,
    /// First sample after the incarnation's own warm-up.
    pub after_warm_up: Option<u64>,
    pub end: Option<u64>,
    pub peak: u64,
    pub samples: usize,
}

/// What a run measured and found.
pub struct SoakReport {
    pub elapsed: Duration,
    pub drain: Duration,
    pub faults: Vec<(String, f64, f64)>,
    pub jobs_by_status: BTreeMap<String, i64>,
    pub accepted: usize,
    pub charges_checked: i64,
    pub requests_in_ledger: i64,
    pub organizations: Vec<Value>,
    pub webhook_events: i64,
    pub webhooks_delivered: usize,
    pub webhook_attempts: u64,
    pub webhook_failures_served: u64,
    pub deliveries_by_status: BTreeMap<String, i64>,
    pub answers_by_status: BTreeMap<String, u64>,
    /// `"<action> <status>"` -> answers.
    pub answers_by_action: BTreeMap<String, u64>,
    /// The first error answers of each status, with their bodies.
    pub error_examples: Vec<String>,
    pub server_errors_in_faults: u64,
    pub server_errors_outside: u64,
    pub no_answer_in_faults: u64,
    pub no_answer_outside: u64,
    pub streams_completed: u64,
    pub polls: u64,
    pub rss: Vec<RssLine>,
    pub violations: Vec<String>,
}

/// Runs the soak; `Err` only when the run itself could not be set up or
/// driven (the invariants' failures are in the report's `violations`).
pub async fn run(config: SoakConfig) -> anyhow::Result<SoakReport> {
    let db = TestDatabase::create().await?;
    let tag = Uuid::new_v4().simple().to_string();
    let dir = std::env::temp_dir().join(format!("unigen-soak-{}", &tag[..12]));
    std::fs::create_dir_all(&dir)?;
    let result = run_in(&config, &db, &tag, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run_in(
    config: &SoakConfig,
    db: &TestDatabase,
    tag: &str,
    dir: &std::path::Path,
) -> anyhow::Result<SoakReport> {
    let config_file = config.config_file.display().to_string();
    let mut settings = Settings::load_with(Some(&config_file), &[])
        .with_context(|| format!("loading {config_file}"))?;
    let rabbit = FaultProxy::rabbitmq().await;
    settings.database.url = db.url.clone();
    settings.database.pool_size = 8;
    settings.rabbitmq.url = rabbit.url_via(&crate::env::amqp_url());
    settings.rabbitmq.prefix = format!("soak.{}.", &tag[..12]);
    settings.rabbitmq.queue_expires_ms = Some(120_000);
    settings.rabbitmq.queue_type = "classic".into();
    settings.http.public_base_url = String::new();
    settings.storage.dir = dir.join("files");
    settings.storage.url_secret = format!("soak-{}", Uuid::new_v4().simple());
    settings.worker.tools = unigen_core::domain::Tool::ALL
        .iter()
        .map(|t| t.as_str().to_owned())
        .collect();
    settings.worker.concurrency = 8;
    settings.worker.grace_seconds = 5;
    settings.worker.metrics_addr = String::new();
    settings.scheduler.tick_ms = 200;
    settings.scheduler.metrics_addr = String::new();
    settings.scheduler.relay_after_seconds = 2;
    settings.scheduler.grace_seconds = 5;
    settings.jobs.lease_seconds = config.lease_seconds;
    settings.webhooks.allow_private_addresses = true;
    settings.webhooks.poll_seconds = 1;
    // Retried within the run: 1, 2, 4 and 8 s instead of up to an hour.
    settings.webhooks.retry_delays_ms = vec![1_000, 2_000, 4_000, 8_000];
    let env = vec![
        ("UNIGEN_CONFIG".to_owned(), config_file.clone()),
        ("UNIGEN__HTTP__HOST".to_owned(), "127.0.0.1".to_owned()),
        ("UNIGEN__HTTP__PORT".to_owned(), "0".to_owned()),
        ("UNIGEN__METERING__IDLE_MS".to_owned(), "500".to_owned()),
        (
            "RUST_LOG".to_owned(),
            std::env::var("UNIGEN_SOAK_LOG").unwrap_or_else(|_| "warn,lapin=error".to_owned()),
        ),
    ];
    let mut stack = Stack::new(&config.stack_binary, settings, env, dir.to_path_buf());
    stack.start_all().await?;
    let result = drive(config, db, &mut stack, &rabbit).await;
    stack.stop_all().await;
    result
}

async fn drive(
    config: &SoakConfig,
    db: &TestDatabase,
    stack: &mut Stack,
    rabbit: &FaultProxy,
) -> anyhow::Result<SoakReport> {
    let receiver = receiver::Receiver::start().await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let first_api = stack.api_urls.read().expect("urls")[0].clone();
    let tenants = tenants(db, &client, &first_api, config, &receiver).await?;
    let load = Arc::new(Load {
        client,
        urls: stack.api_urls.clone(),
        ledger: Arc::new(Ledger::default()),
        counter: AtomicU64::new(0),
    });
    let ledger = load.ledger.clone();
    let stop = CancellationToken::new();
    let started = Instant::now();
    let load_task = tokio::spawn(load.run(
        tenants.clone(),
        config.interval,
        config.max_in_flight,
        stop.clone(),
    ));

    let end = tokio::time::Instant::now() + config.duration;
    let mut next_fault = tokio::time::Instant::now() + config.fault_every;
    let mut rss = tokio::time::interval(config.rss_every);
    let mut faults = Vec::new();
    let mut violations = Vec::new();
    let mut n = 0;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(end) => break,
            _ = rss.tick() => stack.sample_rss(),
            _ = tokio::time::sleep_until(next_fault) => {
                let kind = FAULTS[n % FAULTS.len()];
                n += 1;
                let start = Instant::now();
                let outcome = inject(kind, stack, rabbit, config.cut_for).await;
                faults.push(Fault { kind, start, end: Instant::now() });
                if let Err(err) = outcome {
                    violations.push(format!("fault `{}` went wrong: {err:#}", kind.name()));
                }
                next_fault = tokio::time::Instant::now() + config.fault_every;
            }
        }
    }
    stack.sample_rss();
    let dead = stack.dead();
    if !dead.is_empty() {
        violations.push(format!("processes died by themselves: {}", dead.join(", ")));
    }
    stop.cancel();
    let elapsed = started.elapsed();
    if tokio::time::timeout(config.drain_timeout, load_task)
        .await
        .is_err()
    {
        violations.push("the load's last requests did not finish within the drain".into());
    }
    let drain_started = Instant::now();
    let drained = drain(db, config.drain_timeout).await?;
    if let Some(left) = drained {
        violations.push(format!(
            "not drained after {:?}: {left}",
            config.drain_timeout
        ));
    }
    let drain = drain_started.elapsed();
    // Deliveries for what the drain just saw finish: the receiver's count.
    let counts = receiver.counts();

    let mut report = SoakReport {
        elapsed,
        drain,
        faults: faults
            .iter()
            .map(|f| {
                (
                    f.kind.name().to_owned(),
                    f.start.duration_since(started).as_secs_f64(),
                    f.end.duration_since(f.start).as_secs_f64(),
                )
            })
            .collect(),
        jobs_by_status: BTreeMap::new(),
        accepted: 0,
        charges_checked: 0,
        requests_in_ledger: 0,
        organizations: Vec::new(),
        webhook_events: 0,
        webhooks_delivered: counts.delivered.len(),
        webhook_attempts: counts.attempts,
        webhook_failures_served: counts.failures_served,
        deliveries_by_status: BTreeMap::new(),
        answers_by_status: BTreeMap::new(),
        answers_by_action: BTreeMap::new(),
        error_examples: ledger.examples.lock().expect("examples").clone(),
        server_errors_in_faults: 0,
        server_errors_outside: 0,
        no_answer_in_faults: 0,
        no_answer_outside: 0,
        streams_completed: ledger.streams_completed.load(Ordering::Relaxed),
        polls: ledger.polls.load(Ordering::Relaxed),
        rss: Vec::new(),
        violations,
    };
    if counts.unreadable > 0 {
        report.violations.push(format!(
            "{} webhook bodies without an id",
            counts.unreadable
        ));
    }
    check_jobs(db, &ledger, &mut report).await?;
    check_charges(db, &mut report).await?;
    check_webhooks(db, &counts.delivered, &mut report).await?;
    check_answers(&ledger, &faults, config.fault_allowance, &mut report);
    check_rss(stack, config, &mut report);
    Ok(report)
}

/// Organizations on the business plan, each with two keys and a webhook
/// for the receiver.
async fn tenants(
    db: &TestDatabase,
    client: &reqwest::Client,
    api: &str,
    config: &SoakConfig,
    receiver: &receiver::Receiver,
) -> anyhow::Result<Vec<Tenant>> {
    let mut conn = db.connect().await;
    let mut tenants = Vec::new();
    for i in 0..config.organizations {
        let org = queries::orgs::create(
            &mut conn,
            &NewOrganization {
                id: Uuid::now_v7(),
                name: &format!("Soak org {i}"),
                email: None,
                plan_code: "business",
            },
        )
        .await?
        .id;
        let mut keys = Vec::new();
        for k in 0..2 {
            let material = ApiKeyMaterial::generate()?;
            queries::keys::insert(
                &mut conn,
                &NewApiKey {
                    id: Uuid::now_v7(),
                    org_id: org,
                    name: &format!("soak key {k}"),
                    key_hash: &material.hash,
                    key_prefix: &material.display_prefix,
                    scopes: Scope::parse_list("all")
                        .map_err(|e| anyhow::anyhow!("{e:?}"))?
                        .iter()
                        .map(|s| s.as_str().to_owned())
                        .collect(),
                    expires_at: None,
                    created_by_key: None,
                    created_by_member: None,
                },
            )
            .await?;
            keys.push(material.plaintext);
        }
        let response = client
            .post(format!("{api}/api/v1/webhooks"))
            .bearer_auth(&keys[0])
            .json(&json!({"name": "soak", "url": receiver.url(), "events": SUBSCRIBED}))
            .send()
            .await?;
        anyhow::ensure!(
            response.status() == 201,
            "registering the webhook: {} {}",
            response.status(),
            response.text().await.unwrap_or_default()
        );
        tenants.push(Tenant { keys });
    }
    Ok(tenants)
}

async fn inject(
    kind: FaultKind,
    stack: &mut Stack,
    rabbit: &FaultProxy,
    cut_for: Duration,
) -> anyhow::Result<()> {
    match kind {
        FaultKind::KillWorker => stack.kill_and_replace(Role::Worker, 1).await,
        FaultKind::RestartApi => stack.restart(Role::Api, 1).await,
        FaultKind::RestartScheduler => stack.restart(Role::Scheduler, 1).await,
        FaultKind::CutRabbitMq => {
            rabbit.cut();
            // The fault's length (pacing, not waiting for a result).
            tokio::time::sleep(cut_for).await;
            rabbit.restore();
            Ok(())
        }
    }
}

/// Polls until nothing is left in flight; `Some(what is left)` on timeout.
async fn drain(db: &TestDatabase, timeout: Duration) -> anyhow::Result<Option<String>> {
    let client = db.client().await;
    let deadline = Instant::now() + timeout;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        let row = client
            .query_one(
                "SELECT (SELECT count(*) FROM jobs WHERE status IN ('pending', 'processing')), \
                        (SELECT count(*) FROM reservations), \
                        (SELECT coalesce(sum(reserved_credits), 0)::bigint FROM billing_accounts), \
                        (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending')",
                &[],
            )
            .await?;
        let (jobs, reservations, reserved, deliveries): (i64, i64, i64, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        if jobs == 0 && reservations == 0 && reserved == 0 && deliveries == 0 {
            return Ok(None);
        }
        if Instant::now() > deadline {
            return Ok(Some(format!(
                "{jobs} jobs in flight, {reservations} reservations ({reserved} credits reserved), \
                 {deliveries} deliveries pending"
            )));
        }
    }
}

async fn check_jobs(
    db: &TestDatabase,
    ledger: &Ledger,
    report: &mut SoakReport,
) -> anyhow::Result<()> {
    let client = db.client().await;
    for row in client
        .query("SELECT status, count(*) FROM jobs GROUP BY status", &[])
        .await?
    {
        report.jobs_by_status.insert(row.get(0), row.get(1));
    }
    let ids: HashSet<String> = client
        .query("SELECT id::text FROM jobs", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let accepted = ledger.accepted.lock().expect("accepted").clone();
    report.accepted = accepted.len();
    let missing: Vec<_> = accepted.difference(&ids).take(5).collect();
    if !missing.is_empty() {
        report
            .violations
            .push(format!("accepted jobs that do not exist: {missing:?}"));
    }
    let wrong = client
        .query(
            "SELECT j.id::text, j.status, \
                    count(e.id) FILTER (WHERE e.type = 'generation.completed'), \
                    count(e.id) FILTER (WHERE e.type = 'generation.failed') \
             FROM jobs j LEFT JOIN events e \
               ON e.org_id = j.org_id AND e.data->>'jobId' = j.id::text \
              AND e.type IN ('generation.completed', 'generation.failed') \
             GROUP BY j.id, j.status",
            &[],
        )
        .await?
        .iter()
        .filter_map(|row| {
            let (id, status, completed, failed): (String, String, i64, i64) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            let right = match status.as_str() {
                "completed" => (completed, failed) == (1, 0),
                "failed" => (completed, failed) == (0, 1),
                "cancelled" => completed == 0 && failed <= 1,
                _ => false,
            };
            (!right)
                .then(|| format!("{id} {status}: {completed} completed, {failed} failed events"))
        })
        .collect::<Vec<_>>();
    if !wrong.is_empty() {
        report.violations.push(format!(
            "{} jobs without exactly one terminal state, e.g. {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        ));
    }
    let mismatches = ledger.idempotency_mismatches.lock().expect("mismatches");
    if !mismatches.is_empty() {
        report.violations.push(format!(
            "{} idempotent resends named another job, e.g. {:?}",
            mismatches.len(),
            &mismatches[..mismatches.len().min(5)]
        ));
    }
    Ok(())
}

async fn check_charges(db: &TestDatabase, report: &mut SoakReport) -> anyhow::Result<()> {
    let client = db.client().await;
    // Per job: what the ledger charged under its id, and in how many rows
    // of each kind (a second settlement would add a second row of a kind).
    let rows = client
        .query(
            "SELECT j.id::text, j.status, coalesce(j.actual_credits, 0), \
                    coalesce(-sum(t.amount), 0)::bigint, count(t.id), count(DISTINCT t.type) \
             FROM jobs j LEFT JOIN credit_transactions t \
               ON t.org_id = j.org_id AND t.metadata->>'request_id' = j.id::text \
              AND t.type IN ('consumption', 'overage') \
             GROUP BY j.id, j.status, j.actual_credits",
            &[],
        )
        .await?;
    let mut wrong = Vec::new();
    for row in &rows {
        let (id, status, actual, charged, n, kinds): (String, String, i64, i64, i64, i64) = (
            row.get(0),
            row.get(1),
            row.get(2),
            row.get(3),
            row.get(4),
            row.get(5),
        );
        let right = match status.as_str() {
            "completed" => charged == actual && n == kinds && (actual == 0) == (n == 0),
            _ => n == 0,
        };
        if !right {
            wrong.push(format!(
                "{id} {status}: actual {actual}, charged {charged} in {n} rows"
            ));
        }
        report.charges_checked += 1;
    }
    if !wrong.is_empty() {
        report.violations.push(format!(
            "{} jobs charged other than once, e.g. {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        ));
    }
    // Every request in the ledger (sync ones too): once per kind, and what
    // its usage record says it cost.
    let rows = client
        .query(
            "WITH l AS ( \
                SELECT metadata->>'request_id' AS id, -sum(amount)::bigint AS charged, \
                       count(*) AS n, count(DISTINCT type) AS kinds \
                FROM credit_transactions WHERE type IN ('consumption', 'overage') \
                GROUP BY 1) \
             SELECT l.id, l.charged, l.n, l.kinds, u.credits, u.status \
             FROM l LEFT JOIN usage_records u ON u.id::text = l.id",
            &[],
        )
        .await?;
    report.requests_in_ledger = i64::try_from(rows.len()).unwrap_or(i64::MAX);
    let wrong: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            let (id, charged, n, kinds): (Option<String>, i64, i64, i64) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            let (credits, status): (Option<i64>, Option<String>) = (row.get(4), row.get(5));
            let right =
                n == kinds && credits == Some(charged) && status.as_deref() == Some("success");
            (!right).then(|| {
                format!(
                    "{id:?}: charged {charged} in {n} rows, usage record {credits:?} {status:?}"
                )
            })
        })
        .collect();
    if !wrong.is_empty() {
        report.violations.push(format!(
            "{} requests whose ledger rows disagree with their usage, e.g. {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        ));
    }
    // Each organization: allocations + purchases - consumption = the
    // balances; overage rows = the overage counter; nothing reserved.
    for row in client
        .query(
            "SELECT a.org_id::text, a.included_remaining + a.purchased_balance, \
                    a.overage_credits, a.reserved_credits, \
                    (SELECT coalesce(sum(amount), 0)::bigint FROM credit_transactions t \
                      WHERE t.org_id = a.org_id AND t.type <> 'overage'), \
                    (SELECT coalesce(-sum(amount), 0)::bigint FROM credit_transactions t \
                      WHERE t.org_id = a.org_id AND t.type = 'overage'), \
                    (SELECT coalesce(-sum(amount), 0)::bigint FROM credit_transactions t \
                      WHERE t.org_id = a.org_id AND t.type IN ('consumption', 'overage')) \
             FROM billing_accounts a ORDER BY a.org_id",
            &[],
        )
        .await?
    {
        let (org, balance, overage, reserved, ledger, ledger_overage, spent): (
            String,
            i64,
            i64,
            i64,
            i64,
            i64,
            i64,
        ) = (
            row.get(0),
            row.get(1),
            row.get(2),
            row.get(3),
            row.get(4),
            row.get(5),
            row.get(6),
        );
        if balance != ledger || overage != ledger_overage || reserved != 0 {
            report.violations.push(format!(
                "org {org}: balance {balance} vs ledger {ledger}, overage {overage} vs ledger \
                 {ledger_overage}, {reserved} still reserved"
            ));
        }
        report.organizations.push(json!({
            "org": org, "balance": balance, "spent": spent, "overage": overage,
        }));
    }
    Ok(())
}

async fn check_webhooks(
    db: &TestDatabase,
    delivered: &HashSet<String>,
    report: &mut SoakReport,
) -> anyhow::Result<()> {
    let client = db.client().await;
    let kinds: Vec<String> = SUBSCRIBED.iter().map(|k| (*k).to_owned()).collect();
    let events: Vec<String> = client
        .query(
            "SELECT id::text FROM events WHERE type = ANY($1)",
            &[&kinds],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    report.webhook_events = i64::try_from(events.len()).unwrap_or(i64::MAX);
    let missing: Vec<&String> = events
        .iter()
        .filter(|id| !delivered.contains(*id))
        .collect();
    if !missing.is_empty() {
        report.violations.push(format!(
            "{} of {} events never delivered, e.g. {:?}",
            missing.len(),
            events.len(),
            &missing[..missing.len().min(5)]
        ));
    }
    for row in client
        .query(
            "SELECT status, count(*) FROM webhook_deliveries GROUP BY status",
            &[],
        )
        .await?
    {
        report.deliveries_by_status.insert(row.get(0), row.get(1));
    }
    let undelivered: i64 = client
        .query_one(
            "SELECT count(*) FROM events e WHERE e.type = ANY($1) AND NOT EXISTS \
               (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id \
                 AND d.status = 'succeeded')",
            &[&kinds],
        )
        .await?
        .get(0);
    if undelivered > 0 {
        report.violations.push(format!(
            "{undelivered} events without a succeeded delivery ({:?})",
            report.deliveries_by_status
        ));
    }
    Ok(())
}

fn check_answers(ledger: &Ledger, faults: &[Fault], allowance: Duration, report: &mut SoakReport) {
    let outcomes = ledger.outcomes.lock().expect("outcomes");
    let inside = |at: Instant| {
        faults
            .iter()
            .any(|f| at >= f.start && at <= f.end + allowance)
    };
    let mut outside_examples = Vec::new();
    for outcome in outcomes.iter() {
        let key = match outcome.status {
            Some(status) => status.to_string(),
            None => "no answer".to_owned(),
        };
        *report
            .answers_by_action
            .entry(format!("{:?} {key}", outcome.action))
            .or_default() += 1;
        *report.answers_by_status.entry(key).or_default() += 1;
        match outcome.status {
            Some(status) if status >= 500 => {
                if inside(outcome.at) {
                    report.server_errors_in_faults += 1;
                } else {
                    report.server_errors_outside += 1;
                    if outside_examples.len() < 5 {
                        outside_examples
                            .push(format!("{status} {:?} {}", outcome.action, outcome.what));
                    }
                }
            }
            None if outcome.what.starts_with("skipped") => {}
            None => {
                if inside(outcome.at) {
                    report.no_answer_in_faults += 1;
                } else {
                    report.no_answer_outside += 1;
                }
            }
            _ => {}
        }
    }
    // The load sends only valid requests: a refusal of one is a bug of
    // the run or of the API (429: the
    // plan's rate; a cancel that came after the job's end).
    let refused: u64 = outcomes
        .iter()
        .filter(|o| matches!(o.status, Some(s) if (400..500).contains(&s) && s != 429))
        .filter(|o| o.what != load::CANCEL_TOO_LATE)
        .count() as u64;
    if refused > 0 {
        report.violations.push(format!(
            "{refused} valid requests refused with a 4xx, e.g. {:?}",
            report.error_examples
        ));
    }
    if report.server_errors_outside > 0 {
        report.violations.push(format!(
            "{} 5xx outside any fault's window, e.g. {outside_examples:?}",
            report.server_errors_outside
        ));
    }
}

fn check_rss(stack: &Stack, config: &SoakConfig, report: &mut SoakReport) {
    for slot in &stack.slots {
        for incarnation in &slot.history {
            let warm = incarnation.started + config.warm_up;
            let after = incarnation
                .samples
                .iter()
                .find(|(at, _)| *at >= warm)
                .map(|(_, kib)| *kib);
            let line = RssLine {
                process: slot.name(),
                incarnation: incarnation.number,
                pid: incarnation.pid,
                long_lived: slot.index == 0,
                after_warm_up: after,
                end: incarnation.samples.last().map(|(_, kib)| *kib),
                peak: incarnation
                    .samples
                    .iter()
                    .map(|(_, kib)| *kib)
                    .max()
                    .unwrap_or(0),
                samples: incarnation.samples.len(),
            };
            if let (Some(limit), true, Some(after), Some(end)) = (
                config.rss_limit,
                line.long_lived,
                line.after_warm_up,
                line.end,
            ) {
                #[allow(clippy::cast_precision_loss)]
                let growth = (end as f64 - after as f64) / after as f64;
                if growth > limit {
                    report.violations.push(format!(
                        "{} RSS grew {:.1}% after its warm-up ({after} -> {end} KiB), over {:.0}%",
                        line.process,
                        growth * 100.0,
                        limit * 100.0
                    ));
                }
            }
            report.rss.push(line);
        }
    }
}

impl SoakReport {
    /// The report as JSON (the benchmark's `--json`).
    pub fn to_json(&self) -> Value {
        json!({
            "elapsed_seconds": self.elapsed.as_secs_f64(),
            "drain_seconds": self.drain.as_secs_f64(),
            "faults": self.faults.iter().map(|(kind, at, took)| json!({
                "fault": kind, "at_seconds": at, "took_seconds": took,
            })).collect::<Vec<_>>(),
            "jobs_by_status": self.jobs_by_status,
            "accepted_by_the_clients": self.accepted,
            "jobs_charge_checked": self.charges_checked,
            "requests_in_ledger": self.requests_in_ledger,
            "organizations": self.organizations,
            "webhook_events": self.webhook_events,
            "webhook_events_delivered": self.webhooks_delivered,
            "webhook_attempts_received": self.webhook_attempts,
            "webhook_failures_served": self.webhook_failures_served,
            "deliveries_by_status": self.deliveries_by_status,
            "answers_by_status": self.answers_by_status,
            "answers_by_action": self.answers_by_action,
            "error_examples": self.error_examples,
            "5xx_inside_fault_windows": self.server_errors_in_faults,
            "5xx_outside_fault_windows": self.server_errors_outside,
            "no_answer_inside_fault_windows": self.no_answer_in_faults,
            "no_answer_outside_fault_windows": self.no_answer_outside,
            "streams_completed": self.streams_completed,
            "long_poll_requests": self.polls,
            "rss_kib": self.rss.iter().map(|r| json!({
                "process": r.process, "incarnation": r.incarnation, "pid": r.pid, "long_lived": r.long_lived,
                "after_warm_up": r.after_warm_up, "end": r.end, "peak": r.peak, "samples": r.samples,
            })).collect::<Vec<_>>(),
            "violations": self.violations,
        })
    }
}

impl std::fmt::Display for SoakReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "soak: {:.0} s of load, drained in {:.1} s",
            self.elapsed.as_secs_f64(),
            self.drain.as_secs_f64()
        );
        let _ = writeln!(out, "faults injected: {}", self.faults.len());
        for (kind, at, took) in &self.faults {
            let _ = writeln!(out, "  at {at:>6.1} s  {kind} (took {took:.1} s)");
        }
        let _ = writeln!(
            out,
            "jobs by terminal state: {:?} ({} accepted by the clients)",
            self.jobs_by_status, self.accepted
        );
        let _ = writeln!(
            out,
            "charges checked: {} jobs, {} requests in the ledger; organizations: {}",
            self.charges_checked,
            self.requests_in_ledger,
            Value::from(self.organizations.clone())
        );
        let _ = writeln!(
            out,
            "webhooks: {} events, {} delivered, {} attempts received ({} failed on purpose); deliveries {:?}",
            self.webhook_events,
            self.webhooks_delivered,
            self.webhook_attempts,
            self.webhook_failures_served,
            self.deliveries_by_status
        );
        let _ = writeln!(out, "answers: {:?}", self.answers_by_status);
        let _ = writeln!(out, "answers by action: {:?}", self.answers_by_action);
        for example in &self.error_examples {
            let _ = writeln!(out, "  e.g. {example}");
        }
        let _ = writeln!(
            out,
            "5xx: {} inside fault windows, {} outside; no answer: {} inside, {} outside",
            self.server_errors_in_faults,
            self.server_errors_outside,
            self.no_answer_in_faults,
            self.no_answer_outside
        );
        let _ = writeln!(
            out,
            "streams completed: {}; long-poll requests: {}",
            self.streams_completed, self.polls
        );
        let _ = writeln!(out, "RSS (KiB, after warm-up -> end, peak):");
        for r in &self.rss {
            let _ = writeln!(
                out,
                "  {:<12} #{} {:<11} {:>8} -> {:>8}  peak {:>8}  ({} samples)",
                r.process,
                r.incarnation,
                if r.long_lived {
                    "long-lived"
                } else {
                    "faulted"
                },
                r.after_warm_up.map_or("-".into(), |v| v.to_string()),
                r.end.map_or("-".into(), |v| v.to_string()),
                r.peak,
                r.samples
            );
        }
        if self.violations.is_empty() {
            let _ = writeln!(out, "all invariants hold");
        } else {
            let _ = writeln!(out, "VIOLATIONS:");
            for v in &self.violations {
                let _ = writeln!(out, "  - {v}");
            }
        }
        f.write_str(&out)
    }
}
