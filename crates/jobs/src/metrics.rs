//! Prometheus plumbing of the binaries: rendering a registry, the gauges of
//! the LISTEN connection (every process has one), and the small
//! `GET /metrics` + `GET /healthz` endpoint of the worker and the scheduler
//! (the API serves both on its own port).
//!
//! Each process owns its registries (no process-global one), so several
//! components in one process (the tests) never mix their counts.

use std::sync::Arc;

use actix_web::{App, HttpResponse, HttpServer, web};
use futures_util::future::BoxFuture;
use prometheus::{Encoder, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};
use tokio_util::sync::{CancellationToken, DropGuard};

use unigen_db::notify::ListenerHub;

/// The Prometheus text format of everything in `registry`.
pub fn render(registry: &Registry) -> String {
    let mut buffer = Vec::new();
    if let Err(err) = TextEncoder::new().encode(&registry.gather(), &mut buffer) {
        tracing::warn!(error = %err, "encoding metrics failed");
    }
    String::from_utf8(buffer).unwrap_or_default()
}

/// `unigen_listener_connected` and `unigen_listener_reconnects_total`.
pub struct ListenerMetrics {
    connected: IntGauge,
    reconnects: IntCounter,
}

impl ListenerMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let connected = IntGauge::new(
            "unigen_listener_connected",
            "1 while the LISTEN connection is up",
        )?;
        let reconnects = IntCounter::new(
            "unigen_listener_reconnects_total",
            "LISTEN connection re-establishments",
        )?;
        registry.register(Box::new(connected.clone()))?;
        registry.register(Box::new(reconnects.clone()))?;
        Ok(Self {
            connected,
            reconnects,
        })
    }

    /// Reads the hub's state (call before rendering).
    pub fn refresh(&self, hub: &ListenerHub) {
        self.connected.set(i64::from(hub.is_connected()));
        let (total, seen) = (hub.reconnects(), self.reconnects.get());
        if total > seen {
            self.reconnects.inc_by(total - seen);
        }
    }
}

/// `unigen_job_failures_total{tool, reason}`, registered in `registry`:
/// counted by the worker (provider and storage failures) and by the
/// scheduler (worker lost, deadline exceeded) under one definition.
pub fn job_failures(registry: &Registry) -> prometheus::Result<IntCounterVec> {
    let counter = IntCounterVec::new(
        Opts::new(
            "unigen_job_failures_total",
            "Jobs that failed for good, by reason",
        ),
        &["tool", "reason"],
    )?;
    registry.register(Box::new(counter.clone()))?;
    Ok(counter)
}

/// What a metrics endpoint serves.
pub trait Scrape: Send + Sync + 'static {
    /// Brings read-at-scrape-time gauges up to date and renders the text
    /// format. Runs on the process's main runtime, where its connections live.
    fn scrape(&self) -> BoxFuture<'_, String>;

    /// Called once when the endpoint stops: closes what scrapes opened.
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// Serves `GET /metrics` and `GET /healthz` on `addr` until the returned
/// guard is dropped (the end of the component's `run`, so a shutdown's drain
/// stays observable). `None` when `addr` is empty, or when it cannot be
/// bound: that is logged as an error and the process runs on, since metrics
/// are not worth stopping work for (e.g. a second worker on the same host).
pub fn serve(addr: &str, scrape: Arc<dyn Scrape>) -> Option<DropGuard> {
    if addr.is_empty() {
        return None;
    }
    // actix runs handlers on its own thread; scrapes run here.
    let state = web::Data::new((scrape.clone(), tokio::runtime::Handle::current()));
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .route("/metrics", web::get().to(render_scrape))
            .route(
                "/healthz",
                web::get().to(|| async {
                    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
                }),
            )
    })
    // Scrapes are rare: one thread, no signal handling of its own.
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
        scrape.close().await;
    });
    tokio::spawn(async move {
        if let Err(err) = server.await {
            tracing::error!(error = %err, "the metrics endpoint failed");
        }
    });
    Some(stop.drop_guard())
}

type ScrapeState = (Arc<dyn Scrape>, tokio::runtime::Handle);

async fn render_scrape(state: web::Data<ScrapeState>) -> HttpResponse {
    let (scrape, runtime) = state.get_ref().clone();
    let body = runtime
        .spawn(async move { scrape.scrape().await })
        .await
        .unwrap_or_default();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(body)
}
