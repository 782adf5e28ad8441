//! The API's Prometheus metrics. HTTP request counts and latencies come from
//! actix-web-prom's middleware, registered in the same registry.

use prometheus::{
    Encoder, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use unigen_shared::db::queries;
use unigen_shared::domain::Tool;

use crate::state::AppState;

pub struct Metrics {
    pub registry: Registry,
    jobs: IntGaugeVec,
    jobs_submitted: IntCounterVec,
    listener_connected: IntGauge,
    listener_reconnects: IntCounter,
    waiters: IntGauge,
}

impl Metrics {
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let jobs = IntGaugeVec::new(
            Opts::new(
                "unigen_jobs",
                "Jobs by tool and status (read from PostgreSQL at scrape time)",
            ),
            &["tool", "status"],
        )?;
        let jobs_submitted = IntCounterVec::new(
            Opts::new(
                "unigen_jobs_submitted_total",
                "Jobs accepted by this process",
            ),
            &["tool"],
        )?;
        let listener_connected = IntGauge::new(
            "unigen_listener_connected",
            "1 while the LISTEN connection is up",
        )?;
        let listener_reconnects = IntCounter::new(
            "unigen_listener_reconnects_total",
            "LISTEN connection re-establishments",
        )?;
        let waiters = IntGauge::new(
            "unigen_job_waiters",
            "Jobs with at least one waiting request",
        )?;
        registry.register(Box::new(jobs.clone()))?;
        registry.register(Box::new(jobs_submitted.clone()))?;
        registry.register(Box::new(listener_connected.clone()))?;
        registry.register(Box::new(listener_reconnects.clone()))?;
        registry.register(Box::new(waiters.clone()))?;
        Ok(Self {
            registry,
            jobs,
            jobs_submitted,
            listener_connected,
            listener_reconnects,
            waiters,
        })
    }

    pub fn job_submitted(&self, tool: Tool) {
        self.jobs_submitted
            .with_label_values(&[tool.as_str()])
            .inc();
    }

    /// Updates the gauges that are read rather than counted.
    pub async fn refresh(&self, state: &AppState) {
        self.listener_connected
            .set(i64::from(state.hub.is_connected()));
        let reconnects = state.hub.reconnects();
        let seen = self.listener_reconnects.get();
        if reconnects > seen {
            self.listener_reconnects.inc_by(reconnects - seen);
        }
        self.waiters.set(state.hub.watch_count() as i64);
        let counts = async {
            let mut conn = state.pool.get().await.ok()?;
            queries::jobs::count_by_tool_and_status(&mut conn)
                .await
                .ok()
        }
        .await;
        if let Some(counts) = counts {
            self.jobs.reset();
            for row in counts {
                self.jobs
                    .with_label_values(&[row.tool.as_str(), row.status.as_str()])
                    .set(row.count);
            }
        }
    }

    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        let encoder = TextEncoder::new();
        if let Err(err) = encoder.encode(&self.registry.gather(), &mut buffer) {
            tracing::warn!(error = %err, "encoding metrics failed");
        }
        String::from_utf8(buffer).unwrap_or_default()
    }
}
