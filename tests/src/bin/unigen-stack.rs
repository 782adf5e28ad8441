//! One component of the stack as its own OS process, for the fault tests
//! that kill processes: `unigen-stack worker` or `unigen-stack scheduler`.
//! Configured exactly like the real binaries (the defaults, `UNIGEN_CONFIG`,
//! then `UNIGEN__*` variables) and running the same library entry points as
//! their `main`s; it exists because a test can only locate binaries of its
//! own package.

use tokio_util::sync::CancellationToken;
use unigen_core::config::Settings;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let component = std::env::args().nth(1).unwrap_or_default();
    let settings = Settings::load()?;
    let _telemetry =
        unigen_core::telemetry::init(&format!("unigen-{component}"), &settings.telemetry);
    let shutdown = CancellationToken::new();
    tokio::spawn(unigen_core::telemetry::shutdown_on_signal(shutdown.clone()));
    match component.as_str() {
        "worker" => unigen_worker::run(settings, shutdown).await,
        "scheduler" => unigen_scheduler::run(settings, shutdown).await,
        other => anyhow::bail!("unknown component `{other}`: worker or scheduler"),
    }
}
