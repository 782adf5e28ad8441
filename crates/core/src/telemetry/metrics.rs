//! Prometheus series recorded where the work happens, deep in the provider
//! and telemetry code, and shared by the binaries (issue 37): the GenAI
//! client metrics of the OpenTelemetry conventions (v1.37.0), the gateway
//! overhead, the jobs finished (by whichever process finished them: a
//! worker, the scheduler, or the API or dashboard cancelling one), and the
//! spans the trace exporter dropped.
//!
//! They are process-wide (one set per process, like the tracer provider):
//! each binary registers them in its own registry with [`register`], so its
//! `/metrics` serves them. In one process running several components (the
//! tests), every component's endpoint shows the same, shared series.
//!
//! Labels are bounded: `gen_ai_request_model` is a catalogue id (anything
//! else is `other`, see [`set_models`]), the provider an adapter's name, the
//! operation and error type fixed words; never an organization, key, job or
//! request id.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, RwLock};
use std::time::{Duration, Instant};

use std::collections::HashMap;

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
};

use crate::config::ModelEntry;

use super::semconv;

/// `gen_ai.client.operation.duration` buckets of the conventions (seconds).
pub const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// `gen_ai.client.token.usage` buckets of the conventions (tokens).
pub const TOKEN_BUCKETS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// Time to first chunk: the conventions' `gen_ai.server.time_to_first_token`
/// buckets (seconds).
pub const FIRST_CHUNK_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// Gateway overhead: our own time around a provider call, usually
/// milliseconds.
pub const OVERHEAD_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// The model label of a name outside the catalogue.
pub const OTHER: &str = "other";

struct Shared {
    operation_duration: HistogramVec,
    token_usage: HistogramVec,
    first_chunk: HistogramVec,
    gateway_overhead: HistogramVec,
    jobs_finished: IntCounterVec,
    provider_health: IntGaugeVec,
    spans_dropped: IntCounter,
}

static SHARED: LazyLock<Shared> = LazyLock::new(|| {
    let histogram = |name: &str, help: &str, buckets: &[f64], labels: &[&str]| {
        HistogramVec::new(
            HistogramOpts::new(name, help).buckets(buckets.to_vec()),
            labels,
        )
        .expect("a valid histogram definition")
    };
    Shared {
        operation_duration: histogram(
            "gen_ai_client_operation_duration_seconds",
            "GenAI operation duration, per upstream attempt (OpenTelemetry GenAI conventions)",
            DURATION_BUCKETS,
            &[
                "gen_ai_operation_name",
                "gen_ai_provider_name",
                "gen_ai_request_model",
                "error_type",
            ],
        ),
        token_usage: histogram(
            "gen_ai_client_token_usage",
            "Tokens used per GenAI operation, by type (OpenTelemetry GenAI conventions)",
            TOKEN_BUCKETS,
            &[
                "gen_ai_operation_name",
                "gen_ai_provider_name",
                "gen_ai_request_model",
                "gen_ai_token_type",
            ],
        ),
        first_chunk: histogram(
            "gen_ai_client_time_to_first_chunk_seconds",
            "Time from the start of a streamed GenAI call to its first chunk",
            FIRST_CHUNK_BUCKETS,
            &[
                "gen_ai_operation_name",
                "gen_ai_provider_name",
                "gen_ai_request_model",
            ],
        ),
        gateway_overhead: histogram(
            "unigen_gateway_overhead_seconds",
            "A request's time minus the time it waited on providers (or, for sync jobs, on the job)",
            OVERHEAD_BUCKETS,
            &["http_route"],
        ),
        jobs_finished: IntCounterVec::new(
            Opts::new(
                "unigen_jobs_finished_total",
                "Jobs that reached a terminal state, by tool, provider and status",
            ),
            &["tool", "provider", "status"],
        )
        .expect("a valid counter definition"),
        provider_health: IntGaugeVec::new(
            Opts::new(
                "unigen_provider_health",
                "1 while a provider answers, 0 after consecutive failed attempts until one succeeds",
            ),
            &["provider"],
        )
        .expect("a valid gauge definition"),
        spans_dropped: IntCounter::new(
            "unigen_otel_spans_dropped_total",
            "Trace spans dropped: the export queue was full, or their export failed",
        )
        .expect("a valid counter definition"),
    }
});

/// The catalogue: model id -> `gen_ai.provider.name` of its adapter.
static MODELS: LazyLock<RwLock<HashMap<String, String>>> = LazyLock::new(RwLock::default);

/// Registers the shared series in `registry` (each binary's own).
pub fn register(registry: &Registry) -> prometheus::Result<()> {
    let shared = &*SHARED;
    registry.register(Box::new(shared.operation_duration.clone()))?;
    registry.register(Box::new(shared.token_usage.clone()))?;
    registry.register(Box::new(shared.first_chunk.clone()))?;
    registry.register(Box::new(shared.gateway_overhead.clone()))?;
    registry.register(Box::new(shared.jobs_finished.clone()))?;
    registry.register(Box::new(shared.provider_health.clone()))?;
    registry.register(Box::new(shared.spans_dropped.clone()))?;
    Ok(())
}

/// The catalogue: its model ids are the only values `gen_ai_request_model`
/// takes (besides `other`), and a job's `provider` label is its model's
/// adapter. Each binary calls it with its catalogue at start.
pub fn set_models(catalogue: &[ModelEntry]) {
    let mut models = MODELS.write().unwrap_or_else(|e| e.into_inner());
    for model in catalogue {
        models.insert(
            model.id.clone(),
            semconv::provider::for_adapter(&model.adapter).to_owned(),
        );
    }
}

/// `model` if the catalogue has it, else [`OTHER`].
pub fn model_label(model: &str) -> String {
    let models = MODELS.read().unwrap_or_else(|e| e.into_inner());
    if models.contains_key(model) {
        model.to_owned()
    } else {
        OTHER.to_owned()
    }
}

/// The provider of a catalogue model, else [`OTHER`].
pub fn provider_label(model: &str) -> String {
    let models = MODELS.read().unwrap_or_else(|e| e.into_inner());
    models
        .get(model)
        .cloned()
        .unwrap_or_else(|| OTHER.to_owned())
}

/// Job statuses of `unigen_jobs_finished_total`.
pub mod job_status {
    pub const COMPLETED: &str = "completed";
    pub const FAILED: &str = "failed";
    pub const CANCELLED: &str = "cancelled";
}

/// A job of `tool` on `model` reached `status` ([`job_status`]); call it
/// after the commit that wrote it.
pub fn job_finished(tool: &str, model: &str, status: &'static str) {
    SHARED
        .jobs_finished
        .with_label_values(&[tool, provider_label(model).as_str(), status])
        .inc();
}

/// Failed attempts in a row after which a provider counts as down.
pub const UNHEALTHY_AFTER: u32 = 3;

/// Consecutive failed attempts per provider.
static FAILURES_IN_A_ROW: LazyLock<RwLock<HashMap<String, u32>>> = LazyLock::new(RwLock::default);

/// `unigen_provider_health`: a success makes the provider healthy; a
/// failure that is the provider's (not a request it refused as invalid,
/// [`semconv::error_type::PERMANENT`]) counts towards [`UNHEALTHY_AFTER`].
fn provider_answered(provider: &str, error_type: &str) {
    if error_type == semconv::error_type::PERMANENT {
        return;
    }
    let mut failures = FAILURES_IN_A_ROW.write().unwrap_or_else(|e| e.into_inner());
    let count = failures.entry(provider.to_owned()).or_default();
    *count = if error_type.is_empty() {
        0
    } else {
        count.saturating_add(1)
    };
    SHARED
        .provider_health
        .with_label_values(&[provider])
        .set(i64::from(*count < UNHEALTHY_AFTER));
}

pub(crate) fn spans_dropped(count: u64) {
    SHARED.spans_dropped.inc_by(count);
}

/// The labels of one GenAI call, recording its series.
#[derive(Clone, Debug)]
pub struct GenAiLabels {
    operation: &'static str,
    provider: String,
    model: String,
}

impl GenAiLabels {
    /// `adapter`: the catalogue entry's adapter; `model`: its id.
    pub fn new(operation: &'static str, adapter: &str, model: &str) -> Self {
        Self {
            operation,
            provider: semconv::provider::for_adapter(adapter).to_owned(),
            model: model_label(model),
        }
    }

    /// One attempt took `elapsed`; `error_type` empty on success. The time
    /// also counts as the current request's provider wait ([`measure`]).
    pub fn duration(&self, elapsed: Duration, error_type: &str) {
        SHARED
            .operation_duration
            .with_label_values(&[
                self.operation,
                self.provider.as_str(),
                self.model.as_str(),
                error_type,
            ])
            .observe(elapsed.as_secs_f64());
        add_provider_wait(elapsed);
        provider_answered(&self.provider, error_type);
    }

    /// The tokens an answer reports (or that were counted for it).
    pub fn tokens(&self, input: Option<u64>, output: Option<u64>) {
        for (kind, count) in [("input", input), ("output", output)] {
            if let Some(count) = count {
                SHARED
                    .token_usage
                    .with_label_values(&[
                        self.operation,
                        self.provider.as_str(),
                        self.model.as_str(),
                        kind,
                    ])
                    .observe(count as f64);
            }
        }
    }

    /// A stream's first chunk came `elapsed` after its call started.
    pub fn first_chunk(&self, elapsed: Duration) {
        SHARED
            .first_chunk
            .with_label_values(&[self.operation, self.provider.as_str(), self.model.as_str()])
            .observe(elapsed.as_secs_f64());
    }
}

/// Times one provider attempt: records its duration when finished, or as
/// failed (`error_type` [`semconv::error_type::OTHER`]) when dropped
/// unfinished (a cancelled request).
pub struct Timed {
    labels: GenAiLabels,
    started: Instant,
    done: bool,
}

impl Timed {
    pub fn start(labels: GenAiLabels) -> Self {
        Self {
            labels,
            started: Instant::now(),
            done: false,
        }
    }

    pub fn labels(&self) -> &GenAiLabels {
        &self.labels
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Records the attempt (`error_type` empty on success).
    pub fn finish(mut self, error_type: &str) {
        self.done = true;
        self.labels.duration(self.started.elapsed(), error_type);
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        if !self.done {
            self.labels
                .duration(self.started.elapsed(), semconv::error_type::OTHER);
        }
    }
}

/// The time a request spent waiting on providers (or on its job).
#[derive(Default)]
struct Waited {
    nanos: AtomicU64,
    any: AtomicBool,
}

tokio::task_local! {
    static PROVIDER_WAIT: Arc<Waited>;
}

fn add_provider_wait(elapsed: Duration) {
    let _ = PROVIDER_WAIT.try_with(|waited| {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        waited.nanos.fetch_add(nanos, Ordering::Relaxed);
        waited.any.store(true, Ordering::Relaxed);
    });
}

/// Runs `work` (a request's handling) and returns, with its output, how
/// long it waited on providers, or `None` when it made no provider call and
/// waited on no job. Provider attempts timed by [`GenAiLabels::duration`]
/// and waits wrapped in [`waiting_on_upstream`] within `work`'s task count.
pub async fn measure<T>(work: impl Future<Output = T>) -> (T, Option<Duration>) {
    let waited = Arc::new(Waited::default());
    let output = PROVIDER_WAIT.scope(waited.clone(), work).await;
    let any = waited.any.load(Ordering::Relaxed);
    let nanos = waited.nanos.load(Ordering::Relaxed);
    (output, any.then(|| Duration::from_nanos(nanos)))
}

/// Counts the time `wait` takes as upstream time of the current request:
/// a sync job's wait for the worker.
pub async fn waiting_on_upstream<T>(wait: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let output = wait.await;
    add_provider_wait(started.elapsed());
    output
}

/// `unigen_gateway_overhead_seconds{http_route}`: `total` minus `upstream`.
pub fn gateway_overhead(route: &str, total: Duration, upstream: Duration) {
    SHARED
        .gateway_overhead
        .with_label_values(&[route])
        .observe(total.saturating_sub(upstream).as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_outside_the_catalogue_are_labelled_other() {
        let model: ModelEntry = serde_json::from_value(serde_json::json!({
            "id": "catalogued-model", "category": "chat", "tier": "fast", "adapter": "gemini",
            "owned_by": "google", "credits_per_unit": 1,
        }))
        .expect("a catalogue entry");
        set_models(&[model]);
        assert_eq!(model_label("catalogued-model"), "catalogued-model");
        assert_eq!(provider_label("catalogued-model"), "gcp.gemini");
        assert_eq!(model_label("gpt-9-from-a-client"), OTHER);
        assert_eq!(provider_label("gpt-9-from-a-client"), OTHER);
    }

    #[tokio::test]
    async fn a_request_measures_only_its_own_provider_time() {
        let labels = GenAiLabels::new(semconv::operation::CHAT, "openai", "m");
        let ((), waited) = measure(async {
            labels.duration(Duration::from_millis(30), "");
            waiting_on_upstream(async {}).await;
        })
        .await;
        assert!(waited.expect("a provider wait") >= Duration::from_millis(30));
        let ((), none) = measure(async {}).await;
        assert_eq!(none, None);
    }
}
