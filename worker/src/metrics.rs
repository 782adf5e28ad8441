//! The worker's Prometheus metrics, served by
//! [`unigen_jobs::metrics::serve`] on `worker.metrics_addr`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Registry};
use unigen_core::domain::Tool;
use unigen_core::telemetry::metrics;
use unigen_db::notify::ListenerHub;
use unigen_jobs::metrics::{ListenerMetrics, Scrape, job_failures, render};

/// Job run times span a 10 ms echo to a 30 min video.
const JOB_DURATION_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1200.0, 1800.0,
];

pub(crate) struct WorkerMetrics {
    registry: Registry,
    job_duration: HistogramVec,
    queue_wait: HistogramVec,
    run: HistogramVec,
    job_failures: IntCounterVec,
    listener: ListenerMetrics,
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
        let job_failures = job_failures(&registry)?;
        registry.register(Box::new(job_duration.clone()))?;
        let listener = ListenerMetrics::register(&registry)?;
        let queue_wait = HistogramVec::new(
            HistogramOpts::new(
                "unigen_job_queue_wait_seconds",
                "Time from a job's submission to a worker starting its first attempt",
            )
            .buckets(JOB_DURATION_BUCKETS.to_vec()),
            &["tool"],
        )?;
        let run = HistogramVec::new(
            HistogramOpts::new(
                "unigen_job_run_seconds",
                "Run time of job attempts that reached a terminal state",
            )
            .buckets(JOB_DURATION_BUCKETS.to_vec()),
            &["tool"],
        )?;
        registry.register(Box::new(queue_wait.clone()))?;
        registry.register(Box::new(run.clone()))?;
        unigen_core::telemetry::metrics::register(&registry)?;
        Ok(Self {
            registry,
            job_duration,
            queue_wait,
            run,
            job_failures,
            listener,
        })
    }

    /// A job's first attempt started, `waited` after its submission.
    pub fn job_started(&self, tool: Tool, waited: Duration) {
        self.queue_wait
            .with_label_values(&[tool.as_str()])
            .observe(waited.as_secs_f64());
    }

    /// A job's result was written.
    pub fn job_completed(&self, tool: Tool, model: &str, elapsed: Duration) {
        self.job_duration
            .with_label_values(&[tool.as_str(), model, "completed"])
            .observe(elapsed.as_secs_f64());
        self.run
            .with_label_values(&[tool.as_str()])
            .observe(elapsed.as_secs_f64());
        metrics::job_finished(tool.as_str(), model, metrics::job_status::COMPLETED);
    }

    /// A job's failure was written; `reason` from [`crate::error::ToolError::reason`].
    pub fn job_failed(&self, tool: Tool, model: &str, reason: &'static str, elapsed: Duration) {
        self.job_duration
            .with_label_values(&[tool.as_str(), model, "failed"])
            .observe(elapsed.as_secs_f64());
        self.run
            .with_label_values(&[tool.as_str()])
            .observe(elapsed.as_secs_f64());
        metrics::job_finished(tool.as_str(), model, metrics::job_status::FAILED);
        self.job_failures
            .with_label_values(&[tool.as_str(), reason])
            .inc();
    }
}

/// What the worker's endpoint serves (`worker.metrics_addr`).
pub(crate) struct WorkerScrape {
    pub metrics: Arc<WorkerMetrics>,
    pub hub: ListenerHub,
}

impl Scrape for WorkerScrape {
    fn scrape(&self) -> BoxFuture<'_, String> {
        self.metrics.listener.refresh(&self.hub);
        Box::pin(async { render(&self.metrics.registry) })
    }
}
