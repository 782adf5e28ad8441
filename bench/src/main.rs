//! `unigen-bench`: measurements of unigen itself, one subcommand each, so
//! later benchmarks join as new subcommands sharing the load generator.

mod chat_overhead;
mod fake_upstream;
mod load;
mod report;

use clap::{Parser, Subcommand};

/// Shown after the options by `unigen-bench --help`: the whole workflow.
const WORKFLOW: &str = "\
Measuring the gateway's added latency for non-streaming chat:

  # 1. a fake OpenAI-compatible upstream (fixed answer, no work)
  unigen-bench fake-upstream --port 9400 &

  # 2. unigen with a chat model served by it: bench/unigen-bench.toml adds
  #    bench/fake-chat on the openai adapter to the built-in catalogue
  UNIGEN_CONFIG=bench/unigen-bench.toml scripts/dev-up      # prints an API key

  # 3. the same open-loop load through unigen, then straight at the upstream
  unigen-bench chat-overhead --key sk_... --model bench/fake-chat \\
      --rates 200,500 --duration 10 --json overhead.json

The table gives p50/p90/p99/p99.9 per rate and target, and the added latency
(api - upstream). The load generator shares the machine with what it measures.";

#[derive(Parser)]
#[command(name = "unigen-bench", version, about, after_help = WORKFLOW)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a minimal, fast OpenAI-compatible API (chat completions, models).
    FakeUpstream(fake_upstream::Args),
    /// Added latency of unigen's chat completions over calling the upstream directly.
    ChatOverhead(chat_overhead::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::FakeUpstream(args) => fake_upstream::run(args),
        Command::ChatOverhead(args) => chat_overhead::run(args),
    }
}
