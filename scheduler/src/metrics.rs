//! The scheduler's Prometheus metrics and its small `GET /metrics` +
//! `GET /healthz` endpoint (`scheduler.metrics_addr`).
//!
//! The queue depths live here rather than in the API: one scheduler (or a
//! few) asks the broker per scrape, where every API replica would.
//!
//! Tasks get the metrics as an `Arc<SchedulerMetrics>` passed to their
//! constructor in `crate::run`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use lapin::Channel;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use prometheus::{Gauge, Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry};
use unigen_core::domain::Tool;
use unigen_db::PgPool;
use unigen_db::notify::ListenerHub;
use unigen_jobs::metrics::{ListenerMetrics, Scrape, job_failures, render};
use unigen_jobs::queue::{SharedConnection, Topology};

/// A scrape never waits longer than this on the broker.
const BROKER_READ_TIMEOUT: Duration = Duration::from_secs(3);

/// Attempts are bounded by `webhooks.timeout_ms` (10 s by default).
const WEBHOOK_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

pub struct SchedulerMetrics {
    registry: Registry,
    job_failures: IntCounterVec,
    webhook_attempts: IntCounterVec,
    webhook_duration: Histogram,
    queue_depth: IntGaugeVec,
    dead_letter_depth: IntGaugeVec,
    queue_consumers: IntGaugeVec,
    webhook_oldest_pending: Gauge,
    listener: ListenerMetrics,
}

impl SchedulerMetrics {
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let job_failures = job_failures(&registry)?;
        let webhook_attempts = IntCounterVec::new(
            Opts::new(
                "unigen_webhook_attempts_total",
                "Webhook delivery attempts, by what recording them settled (outcome) and how the POST went (result)",
            ),
            &["outcome", "result"],
        )?;
        let webhook_duration = Histogram::with_opts(
            HistogramOpts::new(
                "unigen_webhook_attempt_duration_seconds",
                "Duration of webhook delivery attempts (the POST)",
            )
            .buckets(WEBHOOK_DURATION_BUCKETS.to_vec()),
        )?;
        let queue_depth = IntGaugeVec::new(
            Opts::new(
                "unigen_queue_depth",
                "Messages ready in a tool's job queue (read from RabbitMQ at scrape time)",
            ),
            &["tool"],
        )?;
        let dead_letter_depth = IntGaugeVec::new(
            Opts::new(
                "unigen_dead_letter_depth",
                "Messages in a tool's dead-letter queue (read from RabbitMQ at scrape time)",
            ),
            &["tool"],
        )?;
        let queue_consumers = IntGaugeVec::new(
            Opts::new(
                "unigen_queue_consumers",
                "Consumers (worker tool slots) on a tool's job queue (read at scrape time)",
            ),
            &["tool"],
        )?;
        registry.register(Box::new(webhook_attempts.clone()))?;
        registry.register(Box::new(webhook_duration.clone()))?;
        registry.register(Box::new(queue_depth.clone()))?;
        registry.register(Box::new(dead_letter_depth.clone()))?;
        registry.register(Box::new(queue_consumers.clone()))?;
        let webhook_oldest_pending = Gauge::new(
            "unigen_webhook_oldest_pending_age_seconds",
            "Age of the oldest pending webhook delivery, 0 when none (read from PostgreSQL at scrape time)",
        )?;
        registry.register(Box::new(webhook_oldest_pending.clone()))?;
        unigen_core::telemetry::metrics::register(&registry)?;
        let listener = ListenerMetrics::register(&registry)?;
        Ok(Self {
            registry,
            job_failures,
            webhook_attempts,
            webhook_duration,
            queue_depth,
            dead_letter_depth,
            queue_consumers,
            webhook_oldest_pending,
            listener,
        })
    }

    /// Counts a job the scheduler failed for good in
    /// `unigen_job_failures_total{tool, reason}`. Call it after the commit
    /// that failed the job. `reason` is a fixed snake_case word per cause
    /// (`worker_lost`, `deadline_exceeded`): it is a label, so never put
    /// anything variable in it.
    pub fn job_failed(&self, tool: &str, reason: &'static str) {
        self.job_failures.with_label_values(&[tool, reason]).inc();
    }

    /// Counts a webhook attempt by the outcome recorded for it
    /// (`succeeded`, `retry_scheduled`, `failed`, `deleted`, `stale`,
    /// `record_error`) and its transport result
    /// ([`unigen_jobs::webhooks::DeliveryClient::result_label`]), and
    /// observes how long its POST took.
    pub fn webhook_attempt(&self, outcome: &'static str, result: &'static str, duration: Duration) {
        // Duration first: a scrape that sees the count sees its duration too.
        self.webhook_duration.observe(duration.as_secs_f64());
        self.webhook_attempts
            .with_label_values(&[outcome, result])
            .inc();
    }

    /// A job the scheduler failed or cancelled, in
    /// `unigen_jobs_finished_total` (after the commit that wrote it).
    pub fn job_finished(&self, tool: &str, model: &str, status: &'static str) {
        unigen_core::telemetry::metrics::job_finished(tool, model, status);
    }

    /// Brings the read-at-scrape-time gauges up to date.
    async fn refresh(&self, hub: &ListenerHub, broker: &Broker) {
        self.listener.refresh(hub);
        // Gauges the broker did not answer for are left out, not left stale.
        self.queue_depth.reset();
        self.dead_letter_depth.reset();
        self.queue_consumers.reset();
        if tokio::time::timeout(BROKER_READ_TIMEOUT, self.read_queues(broker))
            .await
            .is_err()
        {
            tracing::debug!("reading queue depths timed out");
        }
    }

    /// `unigen_webhook_oldest_pending_age_seconds`; left as it was when
    /// the database does not answer within [`BROKER_READ_TIMEOUT`].
    async fn read_webhook_backlog(&self, pool: &PgPool) {
        let read = async {
            let mut conn = pool.get().await.ok()?;
            unigen_db::queries::webhooks::oldest_pending_age_seconds(&mut conn)
                .await
                .ok()
        };
        match tokio::time::timeout(BROKER_READ_TIMEOUT, read).await {
            Ok(Some(seconds)) => self.webhook_oldest_pending.set(seconds),
            _ => tracing::debug!("reading the webhook backlog's age failed"),
        }
    }

    async fn read_queues(&self, broker: &Broker) {
        let mut channel = None;
        for tool in Tool::ALL {
            let tool = tool.as_str();
            if let Some(queue) = broker
                .inspect(&mut channel, &broker.topology.queue(tool))
                .await
            {
                self.queue_depth
                    .with_label_values(&[tool])
                    .set(i64::from(queue.message_count()));
                self.queue_consumers
                    .with_label_values(&[tool])
                    .set(i64::from(queue.consumer_count()));
            }
            if let Some(queue) = broker
                .inspect(&mut channel, &broker.topology.dead_letter_queue(tool))
                .await
            {
                self.dead_letter_depth
                    .with_label_values(&[tool])
                    .set(i64::from(queue.message_count()));
            }
        }
        if let Some(channel) = channel {
            let _ = channel.close(200, "metrics read".into()).await;
        }
    }
}

/// The broker connection of the scrapes: opened on the first scrape, and
/// separate from the relay's publisher, whose channel a failed passive
/// declare (404: queue not declared yet) would close.
struct Broker {
    connection: SharedConnection,
    topology: Topology,
}

impl Broker {
    /// Passively declares `queue`: its counts, or `None` (logged at debug) if
    /// the broker is unreachable or the queue does not exist (yet).
    async fn inspect(&self, channel: &mut Option<Channel>, queue: &str) -> Option<lapin::Queue> {
        let open = match channel.take() {
            Some(open) if open.status().connected() => open,
            _ => match self.connection.channel().await {
                Ok(open) => open,
                Err(err) => {
                    tracing::debug!(error = %err, "no broker channel for queue depths");
                    return None;
                }
            },
        };
        let declared = open
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await;
        match declared {
            Ok(declared) => {
                *channel = Some(open);
                Some(declared)
            }
            // The broker closed the channel; the next queue opens another.
            Err(err) => {
                tracing::debug!(queue, error = %err, "reading a queue depth failed");
                None
            }
        }
    }
}

/// What the scheduler's endpoint serves (`scheduler.metrics_addr`): its
/// counters, the listener's state and the queue depths read from RabbitMQ.
pub(crate) struct SchedulerScrape {
    metrics: Arc<SchedulerMetrics>,
    hub: ListenerHub,
    pool: PgPool,
    broker: Broker,
}

impl SchedulerScrape {
    pub fn new(
        metrics: Arc<SchedulerMetrics>,
        hub: ListenerHub,
        pool: PgPool,
        rabbitmq_url: &str,
        topology: Topology,
    ) -> Self {
        Self {
            metrics,
            hub,
            pool,
            broker: Broker {
                connection: SharedConnection::new(rabbitmq_url, "unigen-scheduler-metrics"),
                topology,
            },
        }
    }
}

impl Scrape for SchedulerScrape {
    fn scrape(&self) -> BoxFuture<'_, String> {
        Box::pin(async {
            self.metrics.refresh(&self.hub, &self.broker).await;
            self.metrics.read_webhook_backlog(&self.pool).await;
            render(&self.metrics.registry)
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.broker.connection.close())
    }
}
