//! unigen's job workers: consume a tool's queue, claim the job in PostgreSQL,
//! run the provider, store outputs, settle, notify.

mod consumer;
mod error;
mod execute;
mod metrics;
mod registry;
mod tools;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use unigen_shared::config::Settings;
use unigen_shared::db::{self, PgPool};
use unigen_shared::domain::Tool;
use unigen_shared::notify::{ListenerHub, Notifier};
use unigen_shared::providers::Catalogue;
use unigen_shared::providers::local::LocalProvider;
use unigen_shared::providers::openai::OpenAiClient;
use unigen_shared::providers::replicate::ReplicateClient;
use unigen_shared::queue::{SharedConnection, Topology};
use unigen_shared::storage::{FileStore, UrlSigner, build_store};

/// What every job execution needs.
pub(crate) struct WorkerContext {
    pub pool: PgPool,
    pub store: Arc<dyn FileStore>,
    /// Signs output URLs carried by events.
    pub signer: UrlSigner,
    pub local: LocalProvider,
    pub catalogue: Catalogue,
    /// One client per `[upstreams.*]` entry, built once.
    pub upstreams: HashMap<String, OpenAiClient>,
    /// The same upstreams for models on the `replicate` adapter.
    pub replicates: HashMap<String, ReplicateClient>,
    pub notifier: Notifier,
    pub hub: ListenerHub,
    pub worker_id: String,
    pub lease: Duration,
    pub amqp: SharedConnection,
    pub topology: Topology,
    pub concurrency: usize,
    pub metrics: Arc<metrics::WorkerMetrics>,
}

/// Parses the configured tool names.
pub fn parse_tools(names: &[String]) -> anyhow::Result<Vec<Tool>> {
    if names.is_empty() {
        anyhow::bail!("no tools configured: pass --tools (e.g. --tools image)");
    }
    names
        .iter()
        .map(|name| name.parse().map_err(|e| anyhow::anyhow!("--tools: {e}")))
        .collect()
}

/// Runs consumers for the configured tools until `shutdown`; then stops
/// taking work, lets running jobs finish within `worker.grace_seconds`, and
/// hands back (requeues) whatever is still running.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let tools = parse_tools(&settings.worker.tools)?;
    let pool = db::build_pool(&settings.database).context("building the database pool")?;
    let (notifier, notifier_task) = Notifier::spawn(
        pool.clone(),
        settings.notify.channel.clone(),
        Duration::from_millis(settings.notify.coalesce_ms),
    );
    let listener_stop = CancellationToken::new();
    let (hub, hub_task) = ListenerHub::spawn(
        settings.database.url.clone(),
        settings.notify.channel.clone(),
        listener_stop.clone(),
    );
    let context = Arc::new(WorkerContext {
        pool,
        store: build_store(&settings.storage),
        signer: UrlSigner::new(
            &settings.storage.url_secret,
            &settings.http.public_base_url,
            Duration::from_secs(settings.storage.url_ttl_seconds),
        ),
        local: LocalProvider::new(&settings.local_provider),
        catalogue: Catalogue::new(settings.models.clone()),
        upstreams: settings
            .upstreams
            .iter()
            .map(|(name, upstream)| (name.clone(), OpenAiClient::new(upstream)))
            .collect(),
        replicates: settings
            .upstreams
            .iter()
            .map(|(name, upstream)| (name.clone(), ReplicateClient::new(upstream)))
            .collect(),
        notifier,
        hub,
        worker_id: worker_id(),
        lease: Duration::from_secs(settings.jobs.lease_seconds.max(3)),
        amqp: SharedConnection::new(&settings.rabbitmq.url, "unigen-worker"),
        topology: Topology::new(&settings.rabbitmq),
        concurrency: settings.worker.concurrency,
        metrics: Arc::new(metrics::WorkerMetrics::new().context("registering metrics")?),
    });
    tracing::info!(worker_id = %context.worker_id, tools = ?tools, concurrency = context.concurrency, "worker started");
    // Bound to a name: the endpoint stops when `run` ends or is dropped.
    let _metrics_endpoint = unigen_shared::metrics::serve(
        &settings.worker.metrics_addr,
        Arc::new(metrics::WorkerScrape {
            metrics: context.metrics.clone(),
            hub: context.hub.clone(),
        }),
    );

    let jobs = TaskTracker::new();
    let hard_stop = CancellationToken::new();
    let consumers: Vec<_> = tools
        .iter()
        .map(|&tool| {
            tokio::spawn(consumer::consume(
                context.clone(),
                tool,
                shutdown.clone(),
                hard_stop.clone(),
                jobs.clone(),
            ))
        })
        .collect();
    for consumer in consumers {
        let _ = consumer.await;
    }

    // Shutdown: no new work is taken; running jobs get the grace period.
    jobs.close();
    let grace = Duration::from_secs(settings.worker.grace_seconds);
    if tokio::time::timeout(grace, jobs.wait()).await.is_err() {
        tracing::warn!(
            running = jobs.len(),
            "grace period over; requeueing running jobs"
        );
        hard_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), jobs.wait()).await;
    }
    context.amqp.close().await;
    listener_stop.cancel();
    let _ = hub_task.await;
    drop(context);
    let _ = tokio::time::timeout(Duration::from_secs(2), notifier_task).await;
    tracing::info!("worker stopped");
    Ok(())
}

fn worker_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".into());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &suffix[..8])
}
