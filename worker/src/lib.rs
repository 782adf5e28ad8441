//! unigen's job workers: consume a tool's queue, claim the job in PostgreSQL,
//! run the provider, store outputs, settle, notify.

mod batches;
mod budget;
mod claim;
mod consumer;
mod error;
mod execute;
mod finish;
mod knowledge;
mod metrics;
mod output;
mod progress;
mod registry;
mod tools;
mod trace;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use unigen_core::config::Settings;
use unigen_core::domain::Tool;
use unigen_core::storage::{FileStore, UrlSigner, build_store};
use unigen_db as db;
use unigen_db::PgPool;
use unigen_db::notify::{ListenerHub, Notifier};
use unigen_jobs::queue::{SharedConnection, Topology};
use unigen_providers::Catalogue;
use unigen_providers::local::LocalProvider;
use unigen_providers::registry::Providers;

/// What every job execution needs.
pub(crate) struct WorkerContext {
    pub pool: PgPool,
    pub store: Arc<dyn FileStore>,
    /// Signs output URLs carried by events.
    pub signer: UrlSigner,
    pub local: LocalProvider,
    pub catalogue: Catalogue,
    /// The upstreams' clients, per adapter, built once.
    pub providers: Providers,
    pub notifier: Notifier,
    pub hub: ListenerHub,
    pub worker_id: String,
    pub lease: Duration,
    pub amqp: SharedConnection,
    pub topology: Topology,
    /// The knowledge and batch queues' jobs at once (`worker.concurrency`,
    /// else 4).
    pub concurrency: usize,
    /// Each tool's jobs at once, per kind of model (remote, local).
    pub budgets: budget::Budgets,
    pub metrics: Arc<metrics::WorkerMetrics>,
    /// Job claims, batched when deliveries arrive together.
    pub claimer: claim::Claimer,
    /// Terminal writes, batched when jobs finish together.
    pub finisher: finish::Finisher,
    /// Outputs reused by models on the `fixture` adapter (benchmarks only).
    pub fixtures: tools::fixture::Fixtures,
    /// `[voices]`: raw voice ids allowed, cloned voices per organization.
    pub voices: unigen_core::config::VoiceSettings,
    /// The chat turn (with fallbacks) behind background responses and
    /// batch lines.
    pub chat: unigen_providers::completion::ChatService,
}

/// What a worker consumes: job queues of public tools and, when `knowledge`
/// is named, the internal knowledge-file queue (not a [`Tool`]: no job type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queues {
    pub tools: Vec<Tool>,
    pub knowledge: bool,
    /// `batch`: run the lines of OpenAI-style batches.
    pub batch: bool,
}

/// Parses the configured tool names (`knowledge` included).
pub fn parse_tools(names: &[String]) -> anyhow::Result<Queues> {
    if names.is_empty() {
        anyhow::bail!("no tools configured: pass --tools (e.g. --tools image)");
    }
    let mut queues = Queues {
        tools: Vec::new(),
        knowledge: false,
        batch: false,
    };
    for name in names {
        if name == unigen_jobs::queue::KNOWLEDGE_QUEUE {
            queues.knowledge = true;
            continue;
        }
        if name == unigen_jobs::batches::BATCH_QUEUE {
            queues.batch = true;
            continue;
        }
        let tool: Tool = name
            .parse()
            .map_err(|mut e: unigen_core::domain::ParseEnumError| {
                e.expected.push_str(", knowledge, batch");
                anyhow::anyhow!("--tools: {e}")
            })?;
        queues.tools.push(tool);
    }
    Ok(queues)
}

/// Runs consumers for the configured tools until `shutdown`; then stops
/// taking work, lets running jobs finish within `worker.grace_seconds`, and
/// hands back (requeues) whatever is still running.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    // The worker signs the URLs of the files it stores, as the API does.
    settings
        .check_url_secret()
        .map_err(|refusal| anyhow::anyhow!("refusing to start: {refusal}"))?;
    unigen_providers::registry::check_catalogue(&settings)
        .map_err(|refusal| anyhow::anyhow!("refusing to start: {refusal}"))?;
    let Queues {
        tools,
        knowledge,
        batch,
    } = parse_tools(&settings.worker.tools)?;
    // Its statements are few and plan well generically (see `Planning`).
    let pool = db::build_pool_planning(&settings.database, db::Planning::Generic)
        .context("building the database pool")?;
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
    let (finisher, _finisher_task) =
        finish::Finisher::spawn(pool.clone(), &settings.notify.channel);
    let (worker_id, lease) = (
        worker_id(),
        Duration::from_secs(settings.jobs.lease_seconds.max(3)),
    );
    let (claimer, _claimer_task) = claim::Claimer::spawn(
        pool.clone(),
        claim::ClaimSettings {
            worker_id: worker_id.clone(),
            lease,
            channel: settings.notify.channel.clone(),
        },
    );
    unigen_core::telemetry::metrics::set_models(&settings.models);
    let providers = Providers::new(&settings.upstreams);
    let local = LocalProvider::new(&settings.local_provider);
    let catalogue = Arc::new(Catalogue::new(settings.models.clone()));
    let search = unigen_providers::search::SearchClient::from_settings(&settings.search)
        .context("configuring web search")?;
    let chat = unigen_providers::completion::ChatService::new(
        catalogue.clone(),
        providers.clone(),
        local.clone(),
        search,
    );
    let context = Arc::new(WorkerContext {
        pool,
        store: build_store(&settings.storage).context("configuring storage")?,
        signer: UrlSigner::new(
            &settings.storage.url_secret,
            &settings.http.public_base_url,
            Duration::from_secs(settings.storage.url_ttl_seconds),
        ),
        local,
        catalogue: Catalogue::new(settings.models.clone()),
        providers,
        notifier,
        hub,
        worker_id,
        lease,
        amqp: SharedConnection::new(&settings.rabbitmq.url, "unigen-worker"),
        topology: Topology::new(&settings.rabbitmq),
        concurrency: match settings.worker.concurrency {
            0 => budget::DEFAULT_OTHER_QUEUES,
            set => set,
        },
        budgets: budget::Budgets::new(
            &settings.worker,
            &tools,
            &settings.models,
            budget::Machine::detect(),
        ),
        metrics: Arc::new(metrics::WorkerMetrics::new().context("registering metrics")?),
        claimer,
        finisher,
        fixtures: tools::fixture::Fixtures::new(&settings),
        voices: settings.voices.clone(),
        chat,
    });
    tracing::info!(worker_id = %context.worker_id, tools = ?tools, knowledge, concurrency = context.concurrency, "worker started");
    for &tool in &tools {
        let (limits, (_, prefetch)) = (context.budgets.limits(tool), context.budgets.queue(tool));
        tracing::info!(%tool, remote = limits.remote, local = limits.local, prefetch, "jobs at once");
    }
    // Bound to a name: the endpoint stops when `run` ends or is dropped.
    let _metrics_endpoint = unigen_jobs::metrics::serve(
        &settings.worker.metrics_addr,
        Arc::new(metrics::WorkerScrape {
            metrics: context.metrics.clone(),
            hub: context.hub.clone(),
        }),
    );

    let jobs = TaskTracker::new();
    let hard_stop = CancellationToken::new();
    let mut consumers: Vec<_> = tools
        .iter()
        .map(|&tool| {
            let (handler_context, hard_stop) = (context.clone(), hard_stop.clone());
            tokio::spawn(consumer::consume(
                context.clone(),
                tool.as_str(),
                context.budgets.queue(tool),
                shutdown.clone(),
                jobs.clone(),
                move |delivery| {
                    let (context, hard_stop) = (handler_context.clone(), hard_stop.clone());
                    async move {
                        consumer::handle_job_delivery(&context, tool, delivery, hard_stop).await;
                    }
                },
            ))
        })
        .collect();
    if knowledge {
        let worker = Arc::new(knowledge::KnowledgeWorker::new(&settings));
        let (handler_context, hard_stop) = (context.clone(), hard_stop.clone());
        consumers.push(tokio::spawn(consumer::consume(
            context.clone(),
            unigen_jobs::queue::KNOWLEDGE_QUEUE,
            (
                Arc::new(tokio::sync::Semaphore::new(context.concurrency)),
                context.concurrency,
            ),
            shutdown.clone(),
            jobs.clone(),
            move |delivery| {
                let (context, worker, hard_stop) =
                    (handler_context.clone(), worker.clone(), hard_stop.clone());
                async move {
                    knowledge::handle_delivery(&context, &worker, delivery, hard_stop).await;
                }
            },
        )));
    }
    if batch {
        let runner = Arc::new(batches::BatchRunner {
            pool: context.pool.clone(),
            worker_id: context.worker_id.clone(),
            lease: context.lease,
            chat: context.chat.clone(),
            embeddings: unigen_providers::embedding::EmbeddingService::new(
                context.providers.clone(),
                context.local.clone(),
            ),
            catalogue,
            settings: settings.batches.clone(),
            concurrency: context.concurrency,
        });
        consumers.push(tokio::spawn(batches::run(
            runner,
            shutdown.clone(),
            jobs.clone(),
        )));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knowledge_is_a_queue_a_worker_can_consume_but_not_a_tool() {
        let names = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            parse_tools(&names(&["image", "knowledge"])).unwrap(),
            Queues {
                tools: vec![Tool::Image],
                knowledge: true,
                batch: false,
            }
        );
        assert_eq!(
            parse_tools(&names(&["knowledge"])).unwrap(),
            Queues {
                tools: vec![],
                knowledge: true,
                batch: false,
            }
        );
        let err = parse_tools(&names(&["image", "teleport"])).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("stt, responses, knowledge, batch"),
            "the error lists knowledge: {err}"
        );
        assert!(
            "knowledge".parse::<Tool>().is_err(),
            "GET /jobs?tool= lists the tools that are job types"
        );
    }
}
