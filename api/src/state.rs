use std::sync::Arc;
use std::time::Duration;

use unigen_core::config::Settings;
use unigen_core::fetch::Fetcher;
use unigen_core::storage::{FileStore, UrlSigner};
use unigen_db::PgPool;
use unigen_db::notify::{ListenerHub, Notifier};
use unigen_jobs::JobSubmitter;
use unigen_jobs::queue::Publisher;
use unigen_providers::Catalogue;

use crate::metrics::Metrics;

/// Everything handlers share; cheap to clone (all handles).
#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub submitter: JobSubmitter,
    pub publisher: Arc<Publisher>,
    pub hub: ListenerHub,
    /// Verified keys, cached briefly.
    pub keys: crate::key_cache::KeyCache,
    /// The plan's request rate per organization, taken in blocks.
    pub rate: Arc<crate::rate_limit::RateLimiter>,
    /// Concurrency slots, leased in blocks and counted in memory.
    pub slots: crate::metering::slots::Slots,
    /// Credits and quota of sync requests, held in blocks per organization.
    pub allowances: crate::metering::allowances::Allowances,
    /// Batched re-reads for requests waiting on jobs.
    pub job_reads: crate::job_reads::JobReader,
    pub notifier: Notifier,
    pub catalogue: Arc<Catalogue>,
    /// Legacy `/ai-image` model names -> catalogue ids.
    pub legacy_models: Arc<std::collections::BTreeMap<String, String>>,
    pub store: Arc<dyn FileStore>,
    pub fetcher: Fetcher,
    /// Chat completions: validation, search grounding, upstreams with fallbacks.
    pub chat: unigen_providers::completion::ChatService,
    pub embeddings: unigen_providers::embedding::EmbeddingService,
    pub signer: UrlSigner,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
    /// `webhooks.allow_private_addresses`: http:// and private webhook targets.
    pub allow_private_webhooks: bool,
    /// `[webhooks]`: the manual-send rate and the replay cap.
    pub webhook_settings: unigen_core::config::WebhookSettings,
    /// Unix time the process started: the `created` of configured models.
    pub started_at: i64,
    /// What agent runs need (their tools, models, knowledge look-ups).
    pub runs: unigen_agents::run::RunEnv,
    /// Fires when the process starts stopping: open job event streams end
    /// (clients resume on another process with `Last-Event-ID`).
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Open job event streams per organization (`http.max_event_streams_per_org`).
    pub event_streams: Arc<crate::event_streams::OpenStreams>,
}

/// Wait limits from `[jobs]` and `[notify]`.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub sync_wait: Duration,
    pub long_poll: Duration,
    pub recheck: Duration,
    /// `http.max_body_bytes`: bodies read by hand (multipart) keep to it too.
    pub max_body: usize,
    /// `jobs.max_audio_seconds`: the longest audio a transcription accepts.
    pub max_audio_seconds: f64,
    /// `http.event_keep_alive_seconds`: job event streams' keep-alive.
    pub event_keep_alive: Duration,
    /// `http.key_rate_limit_per_minute`: each key's own rate (0: none).
    pub key_rate_per_minute: i32,
    /// `responses.retention_seconds`: how long a stored response is kept.
    pub response_retention: Duration,
    /// `batches.max_file_bytes`: the largest `POST /files` upload.
    pub max_file_bytes: u64,
}

impl Limits {
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            sync_wait: Duration::from_secs(settings.jobs.sync_wait_seconds),
            long_poll: Duration::from_secs(settings.jobs.long_poll_seconds),
            recheck: Duration::from_secs(settings.notify.recheck_seconds.max(1)),
            max_body: settings.http.max_body_bytes,
            max_audio_seconds: settings.jobs.max_audio_seconds,
            event_keep_alive: Duration::from_secs(settings.http.event_keep_alive_seconds.max(1)),
            key_rate_per_minute: i32::try_from(settings.http.key_rate_limit_per_minute)
                .unwrap_or(i32::MAX),
            response_retention: Duration::from_secs(settings.responses.retention_seconds),
            max_file_bytes: settings.batches.max_file_bytes,
        }
    }
}
