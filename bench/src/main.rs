//! `unigen-bench`: measurements of unigen itself, one subcommand each, so
//! later benchmarks join as new subcommands sharing the load generator.

mod batch;
mod chat_overhead;
mod dashboard;
mod fake_upstream;
mod jobs;
mod jobs_throughput;
mod load;
mod long_poll;
mod otlp_sink;
mod pg_baseline;
mod report;
mod soak;
mod sync_overhead;
mod webhook_latency;

use clap::{Parser, Subcommand};

/// Shown after the options by `unigen-bench --help`: the whole workflow.
const WORKFLOW: &str = "\
Measuring the gateway's added latency for non-streaming chat:

  # 1. a fake OpenAI-compatible upstream (fixed answer, no work)
  unigen-bench fake-upstream --port 9400 &

  # 2. unigen with a chat model served by it: bench/unigen-bench.toml adds
  #    bench/fake-chat on the openai adapter to the built-in catalogue
  UNIGEN_CONFIG=bench/unigen-bench.toml scripts/dev-up --release   # prints an API key

  # 3. the same open-loop load through unigen, then straight at the upstream
  unigen-bench chat-overhead --key sk_... --model bench/fake-chat \\
      --rates 200,500 --duration 10 --json overhead.json
  # --mode stream: added time to first token instead; --mode both: both

The table gives p50/p90/p99/p99.9 per rate and target, and the added latency
(api - upstream). The load generator shares the machine with what it measures.

The job pipeline (plain scripts/dev-up --release; `unigen-bench <command> --help` for more):

  unigen-bench jobs-throughput --key sk_... --duration 30 [--rate 100]
  # UNIGEN__LOCAL_PROVIDER__LATENCY_MS=200 UNIGEN__WORKER__CONCURRENCY=128 scripts/dev-up --release
  unigen-bench sync-overhead --key sk_... --clients 20,100 --duration 10 --provider-latency-ms 200
  # what tracing costs: both also take --cpu-pid PID (CPU per request) and
  # --otlp-sink PORT (an OTLP/HTTP receiver; start the stack with
  # OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:PORT OTEL_TRACES_SAMPLER=always_on)
  # ulimit -n above 2 x waiters; plain scripts/dev-up --release: jobs queue behind the worker
  unigen-bench long-poll --key sk_... --waiters 10000 --api-pid $(pgrep -nx unigen-api) --pg-count unigen \\
      --database-url postgres://postgres@127.0.0.1:5432/unigen
  # UNIGEN__WEBHOOKS__ALLOW_PRIVATE_ADDRESSES=true scripts/dev-up --release
  unigen-bench webhook-latency --key sk_... --rate 100 --duration 10

Each submits image jobs by default; --tool image|image-edit|video|music|tts|stt
picks another tool and --model a model. With UNIGEN_CONFIG=bench/unigen-bench.toml,
--model bench/noop answers a stored output (no rendering, no upstream: the
pipeline alone; each worker renders the first job of a shape):

  unigen-bench jobs-throughput --key sk_... --tool video --model bench/noop

The dashboard's pages (server time per page; seeds an organization first):

  unigen-bench dashboard --email dev@unigen.local --password ... \\
      --database-url postgres://postgres@127.0.0.1:5432/unigen --org <uuid> \\
      --seed-jobs 100000 --seed-usage 1000000 --json dashboard.json";

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
    /// Completed async jobs per second (image by default), submit latency and completion lag.
    JobsThroughput(jobs_throughput::Args),
    /// Latency of sync generations (image by default) over the local provider's latency.
    #[command(
        after_help = "Start the stack with the provider latency set:\n  UNIGEN__LOCAL_PROVIDER__LATENCY_MS=200 UNIGEN__WORKER__CONCURRENCY=128 scripts/dev-up\n(worker concurrency at least --clients, or jobs queue behind 4 slots)\nthen: unigen-bench sync-overhead --key sk_... --clients 20,100 --duration 10 --provider-latency-ms 200\nThe added latency includes the local provider's rendering of the 512x512 PNG (~7-12 ms)."
    )]
    SyncOverhead(sync_overhead::Args),
    /// Wake-up latency of parked long polls (GET /jobs/{id}?poll=true), API RSS and PG connections.
    #[command(
        after_help = "Start the stack with slow jobs that all run at once, and enough open files:\n  ulimit -n 65536\n  UNIGEN__LOCAL_PROVIDER__LATENCY_MS=10000 UNIGEN__WORKER__CONCURRENCY=1000 scripts/dev-up\nthen (ulimit -n 65536 in this shell too):\n  unigen-bench long-poll --key sk_... --waiters 1000 --api-pid $(pgrep -nx unigen-api) --pg-count unigen\nJobs must still be running when all polls are parked: raise the latency for more waiters.\nWake-up = completedAt (worker, PostgreSQL clock) -> poll answer received (this host's clock)."
    )]
    LongPoll(long_poll::Args),
    /// Job completion -> first delivery attempt of its generation.completed webhook.
    #[command(
        after_help = "Start the stack allowing an http receiver on loopback:\n  UNIGEN__WEBHOOKS__ALLOW_PRIVATE_ADDRESSES=true scripts/dev-up\nthen: unigen-bench webhook-latency --key sk_... --rate 100 --duration 10\nThe benchmark serves the receiver (--receiver-port), registers it for generation.completed, and removes it at the end."
    )]
    WebhookLatency(webhook_latency::Args),
    /// Server time of every dashboard page (p50/p95/max), optionally after seeding jobs and usage.
    #[command(
        after_help = "Sign-in is a member's (scripts/dev-up prints the dev owner's email and password).\nSeeding inserts into --org with server-side INSERT ... SELECT (generate_series), spread over --days days,\nthen checks the usage rollups against the records. Seed a stack that runs the API only, or whose\nscheduler keeps jobs (UNIGEN__JOBS__RETENTION_SECONDS=0): seeded jobs reach back --days days.\n  unigen-bench dashboard --email dev@unigen.local --password ... --database-url postgres://postgres@127.0.0.1:5432/unigen \\\n      --org <uuid> --seed-jobs 100000 --seed-usage 1000000\nthen measure again without the --seed-* options (and without --database-url to skip the rollup check)."
    )]
    Dashboard(dashboard::Args),
    /// A mixed workload under faults for 20 minutes, then its invariants (jobs, charges, webhooks, 5xx, RSS).
    #[command(
        after_help = "Starts its own stack (two APIs, workers and schedulers as unigen-stack processes) on the\nmachine's PostgreSQL and RabbitMQ, with a database and queue prefix of its own:\n  cargo build --release -p unigen-bench -p unigen-tests --bin unigen-bench --bin unigen-stack\n  target/release/unigen-bench soak --duration 1200 --json soak.json\nExits non-zero when an invariant is broken; docs/book/src/operations/guarantees.md explains each."
    )]
    Soak(soak::Args),
    /// Lines per second of an N-line chat batch (Batch API), the batch concurrency cap, commits per line.
    #[command(
        after_help = "Start the stack, and a worker that runs batch lines (scripts/dev-up's worker does not):\n  scripts/dev-up\n  target/debug/unigen-worker --tools batch &\nthen: unigen-bench batch --key sk_... --lines 10000 [--pg-database unigen]\nLines run on local/echo (no upstream); at most the organization's plans.max_batch_concurrency at once."
    )]
    Batch(batch::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::FakeUpstream(args) => fake_upstream::run(args),
        Command::ChatOverhead(args) => chat_overhead::run(args),
        Command::JobsThroughput(args) => jobs_throughput::run(args),
        Command::SyncOverhead(args) => sync_overhead::run(args),
        Command::LongPoll(args) => long_poll::run(args),
        Command::WebhookLatency(args) => webhook_latency::run(args),
        Command::Dashboard(args) => dashboard::run(args),
        Command::Soak(args) => soak::run(args),
        Command::Batch(args) => batch::run(args),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn the_command_line_is_well_formed() {
        // What clap checks at parse time in debug builds only.
        Cli::command().debug_assert();
    }
}
