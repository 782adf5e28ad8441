use tokio_util::sync::CancellationToken;
use unigen_core::config::Settings;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::load()?;
    let _telemetry = unigen_core::telemetry::init_logging(
        "unigen-scheduler",
        &settings.telemetry,
        &settings.log,
    );
    let shutdown = CancellationToken::new();
    tokio::spawn(unigen_core::telemetry::shutdown_on_signal(shutdown.clone()));
    unigen_scheduler::run(settings, shutdown).await
}
