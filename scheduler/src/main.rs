use tokio_util::sync::CancellationToken;
use unigen_shared::config::Settings;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::load()?;
    unigen_shared::telemetry::init("unigen-scheduler");
    let shutdown = CancellationToken::new();
    tokio::spawn(unigen_shared::telemetry::shutdown_on_signal(
        shutdown.clone(),
    ));
    unigen_scheduler::run(settings, shutdown).await
}
