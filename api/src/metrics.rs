//! The API's Prometheus metrics. HTTP request counts and latencies come from
//! actix-web-prom's middleware, registered in the same registry.

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use unigen_core::domain::Tool;
use unigen_db::notify::ListenerHub;
use unigen_db::{PgPool, queries};
use unigen_jobs::metrics::ListenerMetrics;

pub struct Metrics {
    pub registry: Registry,
    jobs: IntGaugeVec,
    jobs_submitted: IntCounterVec,
    listener: ListenerMetrics,
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
        let waiters = IntGauge::new(
            "unigen_job_waiters",
            "Jobs with at least one waiting request",
        )?;
        registry.register(Box::new(jobs.clone()))?;
        registry.register(Box::new(jobs_submitted.clone()))?;
        let listener = ListenerMetrics::register(&registry)?;
        registry.register(Box::new(waiters.clone()))?;
        Ok(Self {
            registry,
            jobs,
            jobs_submitted,
            listener,
            waiters,
        })
    }

    pub fn job_submitted(&self, tool: Tool) {
        self.jobs_submitted
            .with_label_values(&[tool.as_str()])
            .inc();
    }

    /// Updates the gauges that are read rather than counted.
    pub async fn refresh(&self, hub: &ListenerHub, pool: &PgPool) {
        self.listener.refresh(hub);
        self.waiters.set(hub.watch_count() as i64);
        let counts = async {
            let mut conn = pool.get().await.ok()?;
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
        unigen_jobs::metrics::render(&self.registry)
    }
}
