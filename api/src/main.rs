#[tokio::main]
async fn main() -> anyhow::Result<()> {
    unigen_api::cli::main().await
}
