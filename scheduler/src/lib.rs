//! unigen's scheduler: the outbox relay, lease rescue, job deadlines,
//! retention of finished jobs, webhook delivery and billing periods. Every
//! task is safe to run in several scheduler processes at once.

mod metrics;
mod runner;
mod tasks;
mod trace;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use unigen_core::config::Settings;
use unigen_db as db;
use unigen_db::notify::{ListenerHub, Notifier};
use unigen_jobs::queue::{Publisher, Topology};

pub use runner::{Activity, Task};

/// Aborts the tasks when dropped: a `run` future dropped mid-flight (a
/// killed scheduler, in tests) leaves no task behind.
struct AbortOnDrop(Vec<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for handle in &self.0 {
            handle.abort();
        }
    }
}

/// Runs every task until `shutdown`; each finishes its current round first.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let pool = db::build_pool(&settings.database).context("building the database pool")?;
    let publisher = Arc::new(Publisher::new(
        &settings.rabbitmq.url,
        "unigen-scheduler",
        Topology::new(&settings.rabbitmq),
        Duration::from_secs(5),
    ));
    let (notifier, notifier_task) = Notifier::spawn(
        pool.clone(),
        settings.notify.channel.clone(),
        Duration::from_millis(settings.notify.coalesce_ms),
    );
    let tick = Duration::from_millis(settings.scheduler.tick_ms.max(10));
    // Shared by the tasks that count things (passed to their constructors).
    let metrics = Arc::new(metrics::SchedulerMetrics::new().context("registering metrics")?);
    unigen_core::telemetry::metrics::set_models(&settings.models);
    let mut tasks: Vec<Box<dyn Task>> = vec![
        Box::new(tasks::knowledge::KnowledgeFiles::new(
            pool.clone(),
            publisher.clone(),
            settings.jobs.max_attempts,
            Duration::from_secs(settings.knowledge.republish_after_seconds),
        )),
        Box::new(tasks::dead_letters::DeadLetters::new(
            pool.clone(),
            publisher.clone(),
            Topology::new(&settings.rabbitmq),
            notifier.clone(),
            metrics.clone(),
        )),
        Box::new(tasks::relay::Relay::new(
            pool.clone(),
            publisher,
            Duration::from_secs(settings.scheduler.relay_after_seconds),
            settings.scheduler.relay_batch,
        )),
        Box::new(tasks::lease_rescue::LeaseRescue::new(
            pool.clone(),
            notifier.clone(),
            settings.jobs.max_attempts,
            metrics.clone(),
        )),
        Box::new(tasks::deadlines::Deadlines::new(
            pool.clone(),
            notifier.clone(),
            &settings.jobs,
            metrics.clone(),
        )),
        Box::new(tasks::agent_runs::AbandonedRuns::new(
            pool.clone(),
            notifier.clone(),
            Duration::from_secs(settings.agents.max_run_seconds),
        )),
        Box::new(tasks::billing::Billing::new(
            pool.clone(),
            notifier.clone(),
            Duration::from_secs(settings.metering.lease_seconds.max(3)),
        )),
    ];
    tasks.push(Box::new(tasks::batches::Batches::new(
        pool.clone(),
        unigen_core::storage::build_store(&settings.storage).context("configuring storage")?,
        notifier.clone(),
    )));
    if settings.jobs.retention_seconds > 0 {
        tasks.push(Box::new(tasks::retention::Retention::new(
            pool.clone(),
            unigen_core::storage::build_store(&settings.storage).context("configuring storage")?,
            Duration::from_secs(settings.jobs.retention_seconds),
        )));
    }
    if settings.agents.run_retention_seconds > 0 {
        tasks.push(Box::new(tasks::retention::RunRetention::new(
            pool.clone(),
            unigen_core::storage::build_store(&settings.storage).context("configuring storage")?,
            Duration::from_secs(settings.agents.run_retention_seconds),
        )));
    }
    if settings.webhooks.event_retention_seconds > 0 {
        tasks.push(Box::new(tasks::retention::EventRetention::new(
            pool.clone(),
            Duration::from_secs(settings.webhooks.event_retention_seconds),
        )));
    }
    tasks.push(Box::new(tasks::retention::IdempotencyRetention::new(
        pool.clone(),
    )));
    tasks.push(Box::new(tasks::response_retention::ResponseRetention::new(
        pool.clone(),
    )));
    tracing::info!(
        tasks = tasks.len(),
        tick_ms = tick.as_millis() as u64,
        "scheduler started"
    );
    // The delivery task's wake-ups: events committed anywhere.
    let (hub, hub_task) = ListenerHub::spawn(
        settings.database.url.clone(),
        settings.notify.channel.clone(),
        shutdown.clone(),
    );
    // Bound to a name: the endpoint stops when `run` ends or is dropped.
    let _metrics_endpoint = unigen_jobs::metrics::serve(
        &settings.scheduler.metrics_addr,
        Arc::new(metrics::SchedulerScrape::new(
            metrics.clone(),
            hub.clone(),
            pool.clone(),
            &settings.rabbitmq.url,
            Topology::new(&settings.rabbitmq),
        )),
    );
    let delivery =
        tasks::webhooks::WebhookDelivery::new(pool.clone(), settings.webhooks, hub, metrics);
    let mut handles = AbortOnDrop(
        tasks
            .into_iter()
            .map(|task| tokio::spawn(runner::run_task(task, tick, shutdown.clone())))
            .collect(),
    );
    handles.0.push(tokio::spawn(delivery.run(shutdown.clone())));
    handles.0.push(hub_task);
    let finished = async {
        for handle in &mut handles.0 {
            let _ = handle.await;
        }
    };
    let grace = Duration::from_secs(settings.scheduler.grace_seconds);
    tokio::select! {
        () = finished => {}
        () = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
            // Dropping the handles aborts what is left; a webhook attempt cut
            // off here is retried by another scheduler when its lease expires.
            tracing::warn!(grace_seconds = grace.as_secs(), "grace period over; stopping the remaining tasks");
        }
    }
    drop(handles);
    let _ = tokio::time::timeout(Duration::from_secs(2), notifier_task).await;
    tracing::info!("scheduler stopped");
    Ok(())
}
