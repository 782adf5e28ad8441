use clap::Parser;
use tokio_util::sync::CancellationToken;
use unigen_core::config::Settings;

/// Consumes generation jobs for the given tools.
#[derive(Parser)]
#[command(name = "unigen-worker", version)]
struct Args {
    /// Comma-separated tools to consume (default from config `worker.tools`).
    #[arg(long, env = "UNIGEN_WORKER_TOOLS")]
    tools: Option<String>,
    /// Jobs run at once per tool and kind, every budget (default: config
    /// `worker.concurrency`, 0 = each tool sized by its work).
    #[arg(long, env = "UNIGEN_WORKER_CONCURRENCY")]
    concurrency: Option<usize>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut settings = Settings::load()?;
    if let Some(tools) = args.tools {
        settings.worker.tools = tools
            .split(',')
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect();
    }
    if let Some(concurrency) = args.concurrency {
        settings.worker.concurrency = concurrency.max(1);
    }
    let _telemetry =
        unigen_core::telemetry::init_logging("unigen-worker", &settings.telemetry, &settings.log);
    let shutdown = CancellationToken::new();
    tokio::spawn(unigen_core::telemetry::shutdown_on_signal(shutdown.clone()));
    unigen_worker::run(settings, shutdown).await
}
