//! Process plumbing shared by the binaries: logging set-up and shutdown signals.
//! Logging: `RUST_LOG` filters (default `info`),
//! `UNIGEN_LOG_FORMAT=json` switches to JSON lines.

use tracing_subscriber::EnvFilter;

pub fn init(binary: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,lapin=warn,actix_server=warn"));
    let json = std::env::var("UNIGEN_LOG_FORMAT").is_ok_and(|v| v == "json");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let result = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    if result.is_ok() {
        tracing::info!(binary, version = env!("CARGO_PKG_VERSION"), "starting");
    }
}

/// SIGTERM or Ctrl-C starts a graceful shutdown.
pub async fn shutdown_on_signal(shutdown: tokio_util::sync::CancellationToken) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutdown requested");
    shutdown.cancel();
}
