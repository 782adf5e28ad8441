//! `soak`: a mixed workload from several organizations on `bench/noop` for
//! a set time (20 minutes by default) with a fault about every minute, then
//! the invariants checked after a drain. The scenario is
//! `unigen_tests::soak`, shared with the e2e test `soak::...` (its short
//! run): this command starts its own stack (two APIs, two workers, two
//! schedulers as `unigen-stack` processes, on a database and RabbitMQ
//! prefix of its own, RabbitMQ behind a fault proxy), so it needs no
//! `scripts/dev-up`, only the machine's PostgreSQL and RabbitMQ
//! (`UNIGEN_TEST_DATABASE_URL`, `UNIGEN_TEST_AMQP_URL` to point elsewhere).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use unigen_tests::soak::{self, SoakConfig};

#[derive(clap::Args)]
pub struct Args {
    /// Seconds of load.
    #[arg(long, default_value_t = 1200)]
    duration: u64,
    /// Seconds between faults (kill -9 worker, restart API, cut RabbitMQ,
    /// restart scheduler, in turn).
    #[arg(long, default_value_t = 60)]
    fault_every: u64,
    /// Organizations (each with two keys and a webhook).
    #[arg(long, default_value_t = 3)]
    organizations: usize,
    /// Milliseconds between two actions of one organization.
    #[arg(long, default_value_t = 500)]
    interval_ms: u64,
    /// Seconds from a process's start before its RSS counts.
    #[arg(long, default_value_t = 180)]
    warm_up: u64,
    /// The long-lived processes' RSS may grow this many percent after the
    /// warm-up (0 to report only).
    #[arg(long, default_value_t = 10.0)]
    rss_limit_percent: f64,
    /// The `unigen-stack` binary (default: next to this one; build it with
    /// `cargo build --release -p unigen-tests --bin unigen-stack`).
    #[arg(long)]
    stack_bin: Option<PathBuf>,
    /// The configuration with the `bench/noop` models.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let stack = match args.stack_bin {
        Some(path) => path,
        None => std::env::current_exe()?
            .parent()
            .context("this binary's folder")?
            .join("unigen-stack"),
    };
    anyhow::ensure!(
        stack.exists(),
        "{} not found: cargo build --release -p unigen-tests --bin unigen-stack, or --stack-bin",
        stack.display()
    );
    let mut config = SoakConfig::long(&stack.display().to_string());
    config.duration = Duration::from_secs(args.duration);
    config.fault_every = Duration::from_secs(args.fault_every.max(1));
    config.organizations = args.organizations.max(1);
    config.interval = Duration::from_millis(args.interval_ms.max(1));
    config.warm_up = Duration::from_secs(args.warm_up);
    config.rss_limit = (args.rss_limit_percent > 0.0).then_some(args.rss_limit_percent / 100.0);
    if let Some(file) = args.config {
        config.config_file = file;
    }
    eprintln!(
        "soak: {} s of load, a fault every {} s, {} organizations",
        args.duration, args.fault_every, config.organizations
    );
    let report = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(soak::run(config))?;
    println!("{report}");
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_vec_pretty(&report.to_json())?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    anyhow::ensure!(
        report.violations.is_empty(),
        "{} invariants broken",
        report.violations.len()
    );
    Ok(())
}
