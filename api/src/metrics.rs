//! The API's Prometheus metrics. HTTP request counts and latencies come from
//! actix-web-prom's middleware, registered in the same registry.

use std::time::Duration;

use prometheus::{
    HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use unigen_core::domain::Tool;
use unigen_db::notify::ListenerHub;
use unigen_db::{PgPool, queries};
use unigen_jobs::metrics::ListenerMetrics;

/// The OpenTelemetry HTTP conventions' `http.server.request.duration`
/// buckets (seconds).
pub const HTTP_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// The route label of a request that matched no route.
pub const UNMATCHED: &str = "other";

pub struct Metrics {
    pub registry: Registry,
    jobs: IntGaugeVec,
    jobs_submitted: IntCounterVec,
    listener: ListenerMetrics,
    waiters: IntGauge,
    http_duration: HistogramVec,
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
        let http_duration = HistogramVec::new(
            HistogramOpts::new(
                "http_server_request_duration_seconds",
                "Duration of HTTP requests served (OpenTelemetry HTTP conventions)",
            )
            .buckets(HTTP_DURATION_BUCKETS.to_vec()),
            &[
                "http_request_method",
                "http_route",
                "http_response_status_code",
            ],
        )?;
        registry.register(Box::new(http_duration.clone()))?;
        unigen_core::telemetry::metrics::register(&registry)?;
        Ok(Self {
            http_duration,
            registry,
            jobs,
            jobs_submitted,
            listener,
            waiters,
        })
    }

    /// One request served: `route` is the route template (or
    /// [`UNMATCHED`]).
    pub fn http_request(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        self.http_duration
            .with_label_values(&[method, route, status.to_string().as_str()])
            .observe(elapsed.as_secs_f64());
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
