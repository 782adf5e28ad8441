//! The worker's Prometheus metrics and its small `GET /metrics` +
//! `GET /healthz` endpoint (`worker.metrics_addr`).
//!
//! Every worker owns its registry (no process-global one), so several
//! workers in one process (the tests) never mix their counts.

use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};
use serde_json::json;
use tokio_util::sync::{CancellationToken, DropGuard};
use unigen_shared::domain::Tool;
use unigen_shared::notify::ListenerHub;

/// Job run times span a 10 ms echo to a 30 min video.
const JOB_DURATION_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1200.0, 1800.0,
];

pub(crate) struct WorkerMetrics {
    registry: Registry,
    job_duration: HistogramVec,
    job_failures: IntCounterVec,
    listener_connected: IntGauge,
    listener_reconnects: IntCounter,
}

impl WorkerMetrics {
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let job_duration = HistogramVec::new(
            HistogramOpts::new(
                "unigen_job_duration_seconds",
                "Run time of job attempts that reached a terminal state, by outcome",
            )
            .buckets(JOB_DURATION_BUCKETS.to_vec()),
            &["tool", "model", "outcome"],
        )?;
        let job_failures = IntCounterVec::new(
            Opts::new(
                "unigen_job_failures_total",
                "Jobs that failed for good, by reason",
            ),
            &["tool", "reason"],
        )?;
        let listener_connected = IntGauge::new(
            "unigen_listener_connected",
            "1 while the LISTEN connection is up",
        )?;
        let listener_reconnects = IntCounter::new(
            "unigen_listener_reconnects_total",
            "LISTEN connection re-establishments",
        )?;
        registry.register(Box::new(job_duration.clone()))?;
        registry.register(Box::new(job_failures.clone()))?;
        registry.register(Box::new(listener_connected.clone()))?;
        registry.register(Box::new(listener_reconnects.clone()))?;
        Ok(Self {
            registry,
            job_duration,
            job_failures,
            listener_connected,
            listener_reconnects,
        })
    }

    /// A job's result was written.
    pub fn job_completed(&self, tool: Tool, model: &str, elapsed: Duration) {
        self.job_duration
            .with_label_values(&[tool.as_str(), model, "completed"])
            .observe(elapsed.as_secs_f64());
    }

    /// A job's failure was written; `reason` from [`crate::error::ToolError::reason`].
    pub fn job_failed(&self, tool: Tool, model: &str, reason: &'static str, elapsed: Duration) {
        self.job_duration
            .with_label_values(&[tool.as_str(), model, "failed"])
            .observe(elapsed.as_secs_f64());
        self.job_failures
            .with_label_values(&[tool.as_str(), reason])
            .inc();
    }

    /// Brings the listener's gauges up to date and renders the text format.
    fn render(&self, hub: &ListenerHub) -> String {
        self.listener_connected.set(i64::from(hub.is_connected()));
        let (reconnects, seen) = (hub.reconnects(), self.listener_reconnects.get());
        if reconnects > seen {
            self.listener_reconnects.inc_by(reconnects - seen);
        }
        let mut buffer = Vec::new();
        if let Err(err) = TextEncoder::new().encode(&self.registry.gather(), &mut buffer) {
            tracing::warn!(error = %err, "encoding metrics failed");
        }
        String::from_utf8(buffer).unwrap_or_default()
    }
}

/// Serves `GET /metrics` and `GET /healthz` on `addr` until the returned
/// guard is dropped (the end of `run`, so the drain after a shutdown stays
/// observable). `None` when `addr` is empty, or when it cannot be bound: that
/// is logged as an error and the worker runs on, since metrics are not worth
/// stopping job processing for (e.g. a second worker on the same host).
pub(crate) fn serve(
    addr: &str,
    metrics: Arc<WorkerMetrics>,
    hub: ListenerHub,
) -> Option<DropGuard> {
    if addr.is_empty() {
        return None;
    }
    let state = web::Data::new((metrics, hub));
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .route("/metrics", web::get().to(render_metrics))
            .route("/healthz", web::get().to(healthz))
    })
    // Scrapes are rare and cheap: one thread, no signal handling of its own.
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .bind(addr);
    let server = match server {
        Ok(server) => server,
        Err(err) => {
            tracing::error!(addr, error = %err, "binding the metrics endpoint failed; running without it");
            return None;
        }
    };
    tracing::info!(addrs = ?server.addrs(), "metrics endpoint listening");
    let server = server.run();
    let handle = server.handle();
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        stopped.cancelled().await;
        handle.stop(false).await;
    });
    tokio::spawn(async move {
        if let Err(err) = server.await {
            tracing::error!(error = %err, "the metrics endpoint failed");
        }
    });
    Some(stop.drop_guard())
}

async fn render_metrics(state: web::Data<(Arc<WorkerMetrics>, ListenerHub)>) -> HttpResponse {
    let (metrics, hub) = state.get_ref();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(metrics.render(hub))
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok" }))
}
