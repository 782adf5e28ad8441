//! One component of the stack as its own OS process, for the fault tests
//! that kill processes: `unigen-stack worker`, `unigen-stack scheduler` or
//! `unigen-stack api` (which writes its bound address to the file named by
//! `UNIGEN_STACK_ADDR_FILE`, if set: it listens on any free port).
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
    let _telemetry = unigen_core::telemetry::init_logging(
        &format!("unigen-{component}"),
        &settings.telemetry,
        &settings.log,
    );
    let shutdown = CancellationToken::new();
    tokio::spawn(unigen_core::telemetry::shutdown_on_signal(shutdown.clone()));
    match component.as_str() {
        "worker" => unigen_worker::run(settings, shutdown).await,
        "scheduler" => unigen_scheduler::run(settings, shutdown).await,
        "api" => {
            let api = unigen_api::spawn(settings, shutdown).await?;
            if let Ok(path) = std::env::var("UNIGEN_STACK_ADDR_FILE") {
                // Written whole under another name, then renamed: a reader
                // never sees half an address.
                let partial = format!("{path}.partial");
                std::fs::write(&partial, api.addr.to_string())?;
                std::fs::rename(&partial, &path)?;
            }
            api.task.await?
        }
        other => anyhow::bail!("unknown component `{other}`: worker, scheduler or api"),
    }
}
