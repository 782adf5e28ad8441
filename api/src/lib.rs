//! unigen's HTTP API: authentication, validation, job submission, sync waits,
//! long polls, file serving, health, metrics and OpenAPI.

mod auth;
mod charge_slot;
pub mod cli;
mod effects;
mod error;
mod event_streams;
mod http_metrics;
mod idempotency;
mod job_reads;
mod key_cache;
mod keyed_body;
mod known_paths;
mod metering;
mod metrics;
mod openapi;
mod rate_limit;
mod response_headers;
mod routes;
mod state;
mod trace_context;
mod views;
mod wait;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use anyhow::Context;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use unigen_agents::run::RunEnv;
use unigen_agents::tools::{ToolBox, ToolDeps};
use unigen_core::config::Settings;
use unigen_core::storage::{UrlSigner, build_store};
use unigen_db as db;
use unigen_db::notify::{ListenerHub, Notifier};
use unigen_jobs::JobSubmitter;
use unigen_jobs::queue::{Publisher, Topology};
use unigen_knowledge::retrieve::Embedder;
use unigen_providers::Catalogue;
use unigen_providers::completion::ChatService;
use unigen_providers::embedding::EmbeddingService;
use unigen_providers::llm::ChatModels;
use utoipa_swagger_ui::SwaggerUi;

pub use openapi::document as openapi_document;

use crate::error::ApiError;
use crate::state::{AppState, Limits};

const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// A started API server.
pub struct RunningApi {
    pub addr: SocketAddr,
    pub task: JoinHandle<anyhow::Result<()>>,
}

/// Binds, starts the background tasks and serves until `shutdown` fires, then
/// drains in-flight requests. Port 0 picks a free port (see `addr`).
pub async fn spawn(
    mut settings: Settings,
    shutdown: CancellationToken,
) -> anyhow::Result<RunningApi> {
    // File links are signed with it: a forgeable key opens every stored file.
    settings
        .check_url_secret()
        .map_err(|refusal| anyhow::anyhow!("refusing to start: {refusal}"))?;
    unigen_providers::registry::check_catalogue(&settings)
        .map_err(|refusal| anyhow::anyhow!("refusing to start: {refusal}"))?;
    if settings.dev_mode {
        tracing::warn!("dev_mode is on: not for production");
    }
    let listener = TcpListener::bind((settings.http.host.as_str(), settings.http.port))
        .with_context(|| format!("binding {}:{}", settings.http.host, settings.http.port))?;
    let addr = listener.local_addr()?;
    if settings.http.public_base_url.is_empty() {
        settings.http.public_base_url = format!("http://{addr}");
    }
    let pool = db::build_pool(&settings.database).context("building the database pool")?;
    let publisher = Arc::new(Publisher::new(
        &settings.rabbitmq.url,
        "unigen-api",
        Topology::new(&settings.rabbitmq),
        PUBLISH_TIMEOUT,
    ));
    if let Err(err) = publisher.ensure_connected().await {
        // Jobs are still accepted; the scheduler's relay publishes them later.
        tracing::warn!(error = %err, "RabbitMQ unavailable at start-up");
    }
    let (submitter, submitter_task) = JobSubmitter::new(pool.clone(), publisher.clone());
    let (notifier, notifier_task) = Notifier::spawn(
        pool.clone(),
        settings.notify.channel.clone(),
        Duration::from_millis(settings.notify.coalesce_ms),
    );
    let (hub, hub_task) = ListenerHub::spawn(
        settings.database.url.clone(),
        settings.notify.channel.clone(),
        shutdown.clone(),
    );
    let (job_reads, job_reads_task) = job_reads::JobReader::spawn(pool.clone());
    let metering_lease = Duration::from_secs(settings.metering.lease_seconds.max(3));
    let metering_idle = Duration::from_millis(settings.metering.idle_ms.max(10));
    let (slots, slots_task) = metering::slots::Slots::spawn(
        pool.clone(),
        metering_lease,
        metering_idle,
        settings.metering.lease_slots_from.max(1),
    );
    let (allowances, allowances_task, settle_task) = metering::allowances::Allowances::spawn(
        pool.clone(),
        notifier.clone(),
        metering_lease,
        metering_idle,
        settings.metering.flush_sync_charges,
    );
    let (key_usage, key_usage_task) = key_cache::KeyUsage::spawn(pool.clone());
    let (keys, keys_task) = key_cache::KeyCache::spawn(
        Duration::from_secs(settings.http.key_cache_seconds),
        hub.clone(),
    );
    let keys = keys.with_usage(key_usage);
    let metrics = Arc::new(metrics::Metrics::new()?);
    unigen_core::telemetry::metrics::set_models(&settings.models);
    let http_metrics = actix_web_prom::PrometheusMetricsBuilder::new("unigen_http")
        .registry(metrics.registry.clone())
        .mask_unmatched_patterns("UNMATCHED")
        .build()
        .map_err(|e| anyhow::anyhow!("building HTTP metrics: {e}"))?;
    let catalogue = Arc::new(Catalogue::new(settings.models.clone()));
    let store = build_store(&settings.storage).context("configuring storage")?;
    let fetcher = unigen_core::fetch::Fetcher::new(&settings.fetch);
    let local = unigen_providers::local::LocalProvider::new(&settings.local_provider);
    let search = unigen_providers::search::SearchClient::from_settings(&settings.search)
        .context("configuring web search")?;
    let providers = unigen_providers::registry::Providers::new(&settings.upstreams);
    let signer = UrlSigner::new(
        &settings.storage.url_secret,
        &settings.http.public_base_url,
        Duration::from_secs(settings.storage.url_ttl_seconds),
    );
    let chat_models = ChatModels::with_providers(providers.clone(), local.clone());
    let runs = RunEnv {
        pool: pool.clone(),
        notifier: notifier.clone(),
        catalogue: catalogue.clone(),
        chat: chat_models.clone(),
        tools: ToolBox::new(ToolDeps {
            pool: pool.clone(),
            catalogue: catalogue.clone(),
            chat: chat_models,
            fetcher: fetcher.clone(),
            search: search.clone(),
            store: store.clone(),
            signer: signer.clone(),
            submitter: submitter.clone(),
            hub: hub.clone(),
            notifier: notifier.clone(),
            image_wait: Duration::from_secs(settings.agents.image_wait_seconds),
        }),
        embedder: Embedder::new(&settings),
        settings: settings.agents.clone(),
        running: TaskTracker::new(),
    };
    let running_runs = runs.running.clone();
    let dashboard = settings.dashboard.enabled.then(|| {
        let keys = keys.clone();
        unigen_dashboard::DashboardState {
            pool: pool.clone(),
            hub: hub.clone(),
            notifier: notifier.clone(),
            catalogue: catalogue.clone(),
            signer: signer.clone(),
            prefix: settings.dashboard.normalized_prefix(),
            secure_cookies: settings.http.public_base_url.starts_with("https://"),
            settings: settings.dashboard.clone(),
            keys_changed: Arc::new(move |key_id| keys.evict(key_id)),
            allow_private_webhooks: settings.webhooks.allow_private_addresses,
            webhook_settings: settings.webhooks.clone(),
        }
    });
    let state = AppState {
        pool,
        submitter,
        publisher,
        hub,
        job_reads,
        keys,
        rate: Arc::default(),
        slots: slots.clone(),
        allowances: allowances.clone(),
        notifier,
        catalogue: catalogue.clone(),
        legacy_models: Arc::new(settings.legacy_models.clone()),
        store,
        fetcher,
        chat: ChatService::new(catalogue.clone(), providers.clone(), local.clone(), search),
        embeddings: EmbeddingService::new(providers, local),
        signer,
        metrics,
        limits: Limits::from_settings(&settings),
        allow_private_webhooks: settings.webhooks.allow_private_addresses,
        webhook_settings: settings.webhooks.clone(),
        started_at: chrono::Utc::now().timestamp(),
        runs,
        shutdown: shutdown.clone(),
        event_streams: Arc::new(event_streams::OpenStreams::new(
            settings.http.max_event_streams_per_org,
        )),
    };
    // Served with this deployment's model names; built once.
    let openapi = openapi::for_catalogue(openapi::document(), &catalogue);
    let known_paths = Arc::new(known_paths::KnownPaths::from_openapi(&openapi));
    let max_body = settings.http.max_body_bytes;
    let tracing_on = unigen_core::telemetry::enabled();
    let data = web::Data::new(state);
    let server = HttpServer::new(move || {
        use utoipa_actix_web::AppExt;
        let (app, _) = App::new()
            .wrap(
                actix_web::middleware::ErrorHandlers::new()
                    .handler(actix_web::http::StatusCode::PAYLOAD_TOO_LARGE, move |res| {
                        error::json_payload_too_large(res, max_body)
                    }),
            )
            .wrap(http_metrics.clone())
            .wrap(actix_web::middleware::from_fn(crate::http_metrics::record))
            .wrap(actix_web::middleware::from_fn(
                response_headers::response_headers,
            ))
            // Outermost: the SERVER span covers the whole request (tracing on).
            .wrap(actix_web::middleware::Condition::new(
                tracing_on,
                actix_web::middleware::from_fn(trace_context::server_span),
            ))
            .app_data(data.clone())
            .app_data(web::Data::from(known_paths.clone()))
            .app_data(web::PayloadConfig::new(max_body))
            .app_data(web::QueryConfig::default().error_handler(|err, _| {
                ApiError::BadRequest(format!("invalid query string: {err}")).into()
            }))
            .into_utoipa_app()
            .service(
                utoipa_actix_web::scope("/api/v1")
                    .wrap(actix_web::middleware::from_fn(idempotency::idempotency))
                    .wrap(actix_web::middleware::from_fn(metering::credit_headers))
                    .configure(routes::configure_v1),
            )
            .service(
                utoipa_actix_web::scope("/v1")
                    .wrap(actix_web::middleware::from_fn(metering::credit_headers))
                    .configure(routes::configure_root_v1),
            )
            .split_for_parts();
        let app = match &dashboard {
            Some(dashboard) => app.configure(unigen_dashboard::configure(dashboard.clone())),
            None => app,
        };
        app.configure(routes::configure_root)
            .service(SwaggerUi::new("/docs/{_:.*}").url("/api/openapi", openapi.clone()))
            .route(
                "/docs",
                web::get().to(|| async {
                    HttpResponse::PermanentRedirect()
                        .insert_header(("Location", "/docs/"))
                        .finish()
                }),
            )
            .default_service(web::to({
                let known_paths = known_paths.clone();
                move |request: actix_web::HttpRequest| {
                    let known_paths = known_paths.clone();
                    async move { unmatched(&request, &known_paths) }
                }
            }))
    })
    .workers(settings.http.workers.max(1))
    // Streamed chunks go out as written: with Nagle's algorithm a small SSE
    // chunk waited for the client's delayed ACK (40 ms at the p99 of time
    // to first token).
    .tcp_nodelay(true)
    .disable_signals()
    .shutdown_timeout(settings.http.shutdown_grace_seconds);
    let grace = Duration::from_secs(settings.http.shutdown_grace_seconds);
    let server = server.listen(listener)?.run();
    let handle = server.handle();
    tracing::info!(%addr, "API listening");
    let task = tokio::spawn(async move {
        let stopper = tokio::spawn(async move {
            shutdown.cancelled().await;
            // Graceful: stop accepting, let in-flight requests finish.
            handle.stop(true).await;
        });
        let result = server.await.context("HTTP server failed");
        stopper.abort();
        // Agent runs outlive their streams (a client may have gone): they
        // get the same grace as in-flight requests, then are abandoned to
        // the scheduler, which fails them.
        running_runs.close();
        if tokio::time::timeout(grace, running_runs.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                running = running_runs.len(),
                "agent runs still running at shutdown"
            );
        }
        // No request is left: what this process held goes back.
        slots.close().await;
        allowances.close().await;
        slots_task.abort();
        allowances_task.abort();
        drop(allowances);
        hub_task.abort();
        job_reads_task.abort();
        keys_task.abort();
        // The batchers flush what they hold and end once the server dropped
        // the last sender; give them a moment to do so.
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            let _ = notifier_task.await;
            let _ = submitter_task.await;
            let _ = settle_task.await;
            let _ = key_usage_task.await;
        })
        .await;
        result
    });
    Ok(RunningApi { addr, task })
}

/// A request no route took: a known path asked with another method is a
/// 405 naming the methods it takes; anything else is a 404.
fn unmatched(
    request: &actix_web::HttpRequest,
    known_paths: &known_paths::KnownPaths,
) -> HttpResponse {
    let error = match known_paths.allowed(request.path()) {
        Some(allow) => ApiError::MethodNotAllowed {
            method: request.method().to_string(),
            path: request.path().to_owned(),
            allow: allow.to_owned(),
        },
        None => ApiError::NotFound("no such route".into()),
    };
    actix_web::ResponseError::error_response(&error)
}

/// Runs the API until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    spawn(settings, shutdown).await?.task.await?
}
