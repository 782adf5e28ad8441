//! Components as separate OS processes (the `unigen-stack` binary of this
//! package), configured through `UNIGEN__*` variables as in production, so
//! fault tests can kill them for real.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use unigen_core::config::Settings;

/// A running `unigen-stack <component>` process; killed when dropped.
pub struct StackProcess {
    child: tokio::process::Child,
}

impl StackProcess {
    pub(crate) fn start(binary: &str, component: &str, settings: &Settings) -> StackProcess {
        Self::start_with_env(binary, component, settings, &[])
    }

    /// Like [`StackProcess::start`], with `extra` variables set last (the
    /// soak's `UNIGEN_CONFIG` file, its API's port, settings the harness
    /// does not pass).
    pub fn start_with_env(
        binary: &str,
        component: &str,
        settings: &Settings,
        extra: &[(String, String)],
    ) -> StackProcess {
        let child = tokio::process::Command::new(binary)
            .arg(component)
            // Only what the settings say: no override file of the caller's.
            .env_remove("UNIGEN_CONFIG")
            .envs(settings_env(settings))
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info,lapin=warn".into()),
            )
            .envs(extra.iter().cloned())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {binary} {component}: {e}"));
        StackProcess { child }
    }

    pub fn id(&self) -> u32 {
        self.child.id().expect("a running process")
    }

    /// SIGKILL: no shutdown code runs, as in a crash or an OOM kill.
    pub async fn kill(&mut self) {
        self.child.start_kill().expect("SIGKILL");
        let _ = self.child.wait().await;
    }

    /// Waits for the process to exit.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// SIGTERM, then waits for the process to exit by itself.
    pub async fn terminate(&mut self, within: Duration) -> ExitStatus {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.id()).expect("a pid"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the process did not stop within {within:?} of SIGTERM"))
            .expect("waiting for the process")
    }
}

/// The settings the test harness changes, as `UNIGEN__<SECTION>__<KEY>`
/// variables (everything else is the embedded defaults, in both processes).
fn settings_env(s: &Settings) -> Vec<(String, String)> {
    let list = |values: &[String]| values.join(",");
    let mut vars: Vec<(&str, String)> = vec![
        ("DATABASE__URL", s.database.url.clone()),
        ("DATABASE__POOL_SIZE", s.database.pool_size.to_string()),
        ("RABBITMQ__URL", s.rabbitmq.url.clone()),
        ("RABBITMQ__PREFIX", s.rabbitmq.prefix.clone()),
        ("RABBITMQ__QUEUE_TYPE", s.rabbitmq.queue_type.clone()),
        ("HTTP__PUBLIC_BASE_URL", s.http.public_base_url.clone()),
        ("STORAGE__DIR", s.storage.dir.display().to_string()),
        ("STORAGE__URL_SECRET", s.storage.url_secret.clone()),
        (
            "FETCH__ALLOW_PRIVATE_ADDRESSES",
            s.fetch.allow_private_addresses.to_string(),
        ),
        ("JOBS__LEASE_SECONDS", s.jobs.lease_seconds.to_string()),
        ("JOBS__MAX_ATTEMPTS", s.jobs.max_attempts.to_string()),
        (
            "JOBS__RETENTION_SECONDS",
            s.jobs.retention_seconds.to_string(),
        ),
        ("NOTIFY__CHANNEL", s.notify.channel.clone()),
        ("NOTIFY__COALESCE_MS", s.notify.coalesce_ms.to_string()),
        (
            "NOTIFY__RECHECK_SECONDS",
            s.notify.recheck_seconds.to_string(),
        ),
        ("WORKER__TOOLS", list(&s.worker.tools)),
        ("WORKER__CONCURRENCY", s.worker.concurrency.to_string()),
        ("WORKER__GRACE_SECONDS", s.worker.grace_seconds.to_string()),
        ("WORKER__METRICS_ADDR", s.worker.metrics_addr.clone()),
        ("SCHEDULER__METRICS_ADDR", s.scheduler.metrics_addr.clone()),
        ("SCHEDULER__TICK_MS", s.scheduler.tick_ms.to_string()),
        (
            "SCHEDULER__GRACE_SECONDS",
            s.scheduler.grace_seconds.to_string(),
        ),
        (
            "SCHEDULER__RELAY_AFTER_SECONDS",
            s.scheduler.relay_after_seconds.to_string(),
        ),
        ("WEBHOOKS__TIMEOUT_MS", s.webhooks.timeout_ms.to_string()),
        ("TELEMETRY__ENABLED", s.telemetry.enabled.to_string()),
        ("TELEMETRY__ENDPOINT", s.telemetry.endpoint.clone()),
        (
            "TELEMETRY__RECORD_CONTENT",
            s.telemetry.record_content.to_string(),
        ),
        (
            "WEBHOOKS__LEASE_MARGIN_MS",
            s.webhooks.lease_margin_ms.to_string(),
        ),
        ("WEBHOOKS__CONCURRENCY", s.webhooks.concurrency.to_string()),
        (
            "WEBHOOKS__POLL_SECONDS",
            s.webhooks.poll_seconds.to_string(),
        ),
        (
            "WEBHOOKS__ALLOW_PRIVATE_ADDRESSES",
            s.webhooks.allow_private_addresses.to_string(),
        ),
        (
            "WEBHOOKS__RETRY_DELAYS_MS",
            s.webhooks
                .retry_delays_ms
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ),
        (
            "LOCAL_PROVIDER__LATENCY_MS",
            s.local_provider.latency_ms.to_string(),
        ),
        (
            "LOCAL_PROVIDER__FAILURE_RATE",
            s.local_provider.failure_rate.to_string(),
        ),
    ];
    if let Some(ms) = s.rabbitmq.queue_expires_ms {
        vars.push(("RABBITMQ__QUEUE_EXPIRES_MS", ms.to_string()));
    }
    let mut vars: Vec<(String, String)> = vars
        .into_iter()
        .map(|(key, value)| (format!("UNIGEN__{key}"), value))
        .collect();
    for (tool, seconds) in &s.jobs.max_run_seconds {
        vars.push((
            format!("UNIGEN__JOBS__MAX_RUN_SECONDS__{}", tool.to_uppercase()),
            seconds.to_string(),
        ));
    }
    for (name, upstream) in &s.upstreams {
        vars.push((
            format!("UNIGEN__UPSTREAMS__{}__BASE_URL", name.to_uppercase()),
            upstream.base_url.clone(),
        ));
    }
    vars
}
