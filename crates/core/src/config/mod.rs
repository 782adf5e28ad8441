//! Layered, typed settings: the embedded `config/default.toml`, then the file
//! named by `UNIGEN_CONFIG` (if any), then `UNIGEN__<SECTION>__<KEY>` variables.

use std::path::PathBuf;

use serde::Deserialize;

use crate::domain::{ModelCategory, ModelTier};

mod batches;
mod dashboard;
mod responses;
mod search;
mod telemetry;
mod voices;
mod webhooks;

pub use batches::BatchSettings;
pub use dashboard::DashboardSettings;
pub use responses::ResponsesSettings;
pub use search::SearchSettings;
pub use telemetry::{LogSettings, TelemetrySettings};
pub use voices::VoiceSettings;
pub use webhooks::WebhookSettings;

/// Channel of the `unigen_auth_changed` trigger (migration
/// `auth_change_notify`): keys, organizations or plans changed. Key caches
/// listen on it; no job channel may take it.
pub const AUTH_CHANNEL: &str = "unigen_auth";

/// Accepts `[a-z0-9_]+` only: the name is interpolated into `LISTEN`.
pub fn validate_channel(name: &str) -> Result<(), String> {
    if name == AUTH_CHANNEL {
        return Err(format!("notify channel `{name}` is reserved"));
    }
    if !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        Ok(())
    } else {
        Err(format!("notify channel `{name}` must match [a-z0-9_]+"))
    }
}

const DEFAULTS: &str = include_str!("../../../../config/default.toml");

/// The `storage.url_secret` of `config/default.toml`. It is public, so file
/// links signed with it can be forged: only `dev_mode` accepts it.
pub const DEFAULT_URL_SECRET: &str = "dev-insecure-change-me";

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    /// `dev_mode`: a local development stack (`scripts/dev-up` sets it).
    /// Only then may the API and the worker sign file URLs with the
    /// built-in [`DEFAULT_URL_SECRET`] (see [`Settings::check_url_secret`]).
    #[serde(default)]
    pub dev_mode: bool,
    pub database: DatabaseSettings,
    pub rabbitmq: RabbitSettings,
    pub http: HttpSettings,
    pub storage: StorageSettings,
    pub fetch: FetchSettings,
    /// `[search]`: web search for `web_search: true` (the `search` module of unigen-providers).
    #[serde(default)]
    pub search: SearchSettings,
    /// `[responses]`: how long stored responses of the Responses API are kept.
    #[serde(default)]
    pub responses: ResponsesSettings,
    pub jobs: JobSettings,
    pub notify: NotifySettings,
    pub worker: WorkerSettings,
    pub scheduler: SchedulerSettings,
    /// `[agents]`: agent runs.
    pub agents: AgentSettings,
    /// `[knowledge]`: processing of agents' knowledge files.
    pub knowledge: KnowledgeSettings,
    /// `[webhooks]`: delivery of signed events (the `webhooks` module of unigen-jobs).
    #[serde(default)]
    pub webhooks: WebhookSettings,
    /// `[dashboard]`: the web dashboard served by the API.
    #[serde(default)]
    pub dashboard: DashboardSettings,
    /// `[telemetry]`: OpenTelemetry traces (`unigen_core::telemetry`).
    #[serde(default)]
    pub telemetry: TelemetrySettings,
    /// `[log]`: the log lines' format (text or JSON).
    #[serde(default)]
    pub log: LogSettings,
    /// `[voices]`: raw voice ids allowed, cloned voices per organization.
    #[serde(default)]
    pub voices: VoiceSettings,
    /// `[batches]`: the Files and Batches APIs.
    #[serde(default)]
    pub batches: BatchSettings,
    pub local_provider: LocalProviderSettings,
    /// `[metering]`: how API processes hold concurrency slots and credits.
    pub metering: MeteringSettings,
    #[serde(default)]
    pub upstreams: std::collections::BTreeMap<String, UpstreamSettings>,
    /// Legacy `/ai-image` model names -> catalogue ids.
    #[serde(default)]
    pub legacy_models: std::collections::BTreeMap<String, String>,
    pub models: Vec<ModelEntry>,
    /// Appended to `models`: an override file can add models without
    /// repeating the built-in catalogue (a `[[models]]` list replaces it).
    #[serde(default)]
    pub extra_models: Vec<ModelEntry>,
    /// `[aliases]`: more names for catalogue models (`"gpt-4o-mini" =
    /// "local/echo"`), added to the models' own `aliases` at load. A name
    /// may stand for several models of different kinds (`dall-e-2` for
    /// generation and for edits): each request takes the one that fits.
    #[serde(default)]
    pub aliases: std::collections::BTreeMap<String, AliasTarget>,
}

/// What an `[aliases]` entry names: one model id or several.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum AliasTarget {
    One(String),
    Many(Vec<String>),
}

/// `[upstreams.<name>]`: one vendor endpoint. `base_url` is what the
/// vendor's official SDK takes as its base URL (`https://api.openai.com/v1`,
/// `https://api.anthropic.com`, `https://generativelanguage.googleapis.com`);
/// `api_key`, or `api_keys` used in turn (a key answered 429 rests for its
/// `Retry-After`); `headers` sent with every request (they may override an
/// adapter's own, e.g. `anthropic-version`); `timeout_seconds` per request.
#[derive(Clone, Default, Deserialize)]
pub struct UpstreamSettings {
    /// What the vendor's official SDK takes as its base URL.
    pub base_url: String,
    /// The key sent to the vendor. Never logged.
    #[serde(default)]
    pub api_key: String,
    /// Several keys, used in turn (a key answered 429 rests for its
    /// `Retry-After`); wins over `api_key`.
    #[serde(default)]
    pub api_keys: Vec<String>,
    /// Headers sent with every request; they replace the adapter's own by
    /// name. Values never logged.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// Limit of one upstream request, in seconds.
    #[serde(default = "default_upstream_timeout")]
    pub timeout_seconds: u64,
    /// Azure OpenAI's `api-version` (the adapter's default when unset).
    #[serde(default)]
    pub api_version: Option<String>,
    /// `openai` and `azure-openai` upstreams: the upstream speaks OpenAI's
    /// Responses API (`POST {base}/responses`; Azure's
    /// `{endpoint}/openai/v1/responses`), so `POST /responses` requests for
    /// its models are forwarded to it as sent instead of bridged through
    /// chat completions.
    #[serde(default)]
    pub responses: bool,
}

fn default_upstream_timeout() -> u64 {
    60
}

impl UpstreamSettings {
    /// The keys to use in turn: `api_keys`, else `api_key` (none when empty).
    pub fn keys(&self) -> Vec<String> {
        let keys: Vec<String> = self
            .api_keys
            .iter()
            .filter(|k| !k.is_empty())
            .cloned()
            .collect();
        if !keys.is_empty() {
            keys
        } else if self.api_key.is_empty() {
            Vec::new()
        } else {
            vec![self.api_key.clone()]
        }
    }
}

impl std::fmt::Debug for UpstreamSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a key or a header value (headers may carry secrets).
        f.debug_struct("UpstreamSettings")
            .field("base_url", &self.base_url)
            .field("keys", &self.keys().len())
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout_seconds", &self.timeout_seconds)
            .finish()
    }
}

/// `[database]`: `url`, `pool_size`, `connect_timeout_ms`.
#[derive(Debug, Clone, Deserialize)]
pub struct DatabaseSettings {
    /// PostgreSQL connection URL.
    pub url: String,
    /// Connections per process (plus one LISTEN connection).
    pub pool_size: usize,
    /// Connect and pool-wait timeout, in milliseconds.
    pub connect_timeout_ms: u64,
}

/// `[rabbitmq]`: `url`, `prefix`, `queue_type`, `queue_expires_ms` (tests only).
#[derive(Debug, Clone, Deserialize)]
pub struct RabbitSettings {
    /// RabbitMQ connection URL (AMQP).
    pub url: String,
    pub prefix: String,
    /// `quorum` (replicated, durable; the production choice) or `classic`.
    pub queue_type: String,
    /// Tests only: queues expire after this long unused and the exchange
    /// auto-deletes (production queues are permanent).
    pub queue_expires_ms: Option<u32>,
}

/// `[http]`: `host`, `port`, `public_base_url`, `workers`, `max_body_bytes`,
/// `shutdown_grace_seconds`, `key_cache_seconds`.
#[derive(Debug, Clone, Deserialize)]
pub struct HttpSettings {
    /// The API's listen address.
    pub host: String,
    /// The API's listen port.
    pub port: u16,
    /// Base URL clients use to reach this API; file URLs are built from it.
    /// Empty: `http://<bound address>`.
    pub public_base_url: String,
    /// HTTP worker threads.
    pub workers: usize,
    /// Largest request body, in bytes (413 past it).
    pub max_body_bytes: usize,
    /// On SIGTERM, in-flight requests get this long to finish.
    pub shutdown_grace_seconds: u64,
    /// Verified API keys are cached this long (0: never); any change to
    /// keys, organizations or plans empties the cache at once.
    pub key_cache_seconds: u64,
    /// Open `GET /jobs/{id}/events` streams an organization may hold on one
    /// API process; past it a new one is a 429.
    #[serde(default = "default_event_streams_per_org")]
    pub max_event_streams_per_org: usize,
    /// Seconds between a job event stream's keep-alive comments; the
    /// stream's key is checked again at each (revoked or expired: it ends).
    #[serde(default = "default_event_keep_alive_seconds")]
    pub event_keep_alive_seconds: u64,
    /// Requests per minute one key may make, on top of the plan's rate for
    /// the whole organization; 0 (the default): no per-key limit.
    #[serde(default)]
    pub key_rate_limit_per_minute: u32,
}

fn default_event_streams_per_org() -> usize {
    100
}

fn default_event_keep_alive_seconds() -> u64 {
    15
}

/// `[storage]`: `backend` (`local` or `s3`), `dir` (local), `url_secret`,
/// `url_ttl_seconds`, and `[storage.s3]` for the `s3` backend.
#[derive(Debug, Clone, Deserialize)]
pub struct StorageSettings {
    /// Where files go: `local` (a directory) or `s3` (an S3-compatible bucket).
    pub backend: String,
    /// The `local` backend's directory (`<dir>/<key>`).
    pub dir: PathBuf,
    /// HMAC key of signed file URLs. The API and the worker refuse to start
    /// with the built-in default (or an empty key) unless `dev_mode` is on.
    pub url_secret: String,
    /// Lifetime of a file URL, in seconds (signed when shown).
    pub url_ttl_seconds: u64,
    #[serde(default)]
    pub s3: S3Settings,
}

/// `[storage.s3]`: an S3-compatible bucket (AWS, MinIO, R2...). `region`,
/// `endpoint` and the credentials left out come from the standard `AWS_*`
/// variables (`AWS_REGION`, `AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`).
#[derive(Clone, Deserialize)]
#[serde(default)]
pub struct S3Settings {
    /// The bucket's name.
    pub bucket: String,
    /// The bucket's region (`auto` for R2); unset: `AWS_REGION`.
    pub region: Option<String>,
    /// For S3-compatible servers (`https://<account>.r2.cloudflarestorage.com`,
    /// `http://minio:9000`); none for AWS.
    pub endpoint: Option<String>,
    /// Unset: `AWS_ACCESS_KEY_ID`.
    pub access_key_id: Option<String>,
    /// Unset: `AWS_SECRET_ACCESS_KEY`. Never logged.
    pub secret_access_key: Option<String>,
    /// Lets `endpoint` be plain `http://` (a server on the same host).
    pub allow_http: bool,
    /// `<endpoint>/<bucket>/<key>` URLs (true, the default), or
    /// virtual-hosted `<bucket>.<host>/<key>` (false; an `endpoint` must
    /// then name the bucket's host).
    pub path_style: bool,
    /// When set, `/files/...` redirects to a GET URL presigned for this long
    /// instead of streaming the file through the API.
    pub presign_seconds: Option<u64>,
}

impl Default for S3Settings {
    fn default() -> Self {
        Self {
            bucket: String::new(),
            region: None,
            endpoint: None,
            access_key_id: None,
            secret_access_key: None,
            allow_http: false,
            path_style: true,
            presign_seconds: None,
        }
    }
}

impl std::fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("allow_http", &self.allow_http)
            .field("path_style", &self.path_style)
            .field("presign_seconds", &self.presign_seconds)
            .finish()
    }
}

/// Presigned S3 URLs live at most seven days.
pub const MAX_PRESIGN_SECONDS: u64 = 7 * 24 * 3600;

/// `[fetch]`: `max_bytes`, `timeout_seconds`, `allow_private_addresses`.
#[derive(Debug, Clone, Deserialize)]
pub struct FetchSettings {
    /// Largest media input (a URL's body or base64 data), in bytes.
    pub max_bytes: usize,
    /// Limit of fetching one media URL.
    pub timeout_seconds: u64,
    /// Allows media URLs on private, loopback and link-local addresses
    /// (tests only).
    pub allow_private_addresses: bool,
}

/// `[jobs]`: `sync_wait_seconds`, `long_poll_seconds`, `lease_seconds`,
/// `max_attempts`, `max_run_seconds.<tool>`, `retention_seconds`,
/// `max_audio_seconds`.
#[derive(Debug, Clone, Deserialize)]
pub struct JobSettings {
    pub sync_wait_seconds: u64,
    pub long_poll_seconds: u64,
    pub lease_seconds: u64,
    pub max_attempts: i32,
    /// Longest one attempt of a tool's job may run before the scheduler
    /// fails it; a tool not listed gets [`DEFAULT_MAX_RUN_SECONDS`].
    #[serde(default)]
    pub max_run_seconds: std::collections::BTreeMap<String, u64>,
    /// Finished jobs (and their files) are deleted this long after they
    /// finished; 0 keeps them forever.
    pub retention_seconds: u64,
    /// Longest audio a transcription or translation accepts, in seconds;
    /// longer audio is refused at submission (400 naming `file`).
    #[serde(default = "default_max_audio_seconds")]
    pub max_audio_seconds: f64,
}

/// `jobs.max_audio_seconds` when the file does not set it: two hours.
pub const DEFAULT_MAX_AUDIO_SECONDS: f64 = 7200.0;

fn default_max_audio_seconds() -> f64 {
    DEFAULT_MAX_AUDIO_SECONDS
}

/// The deadline of a tool missing from `jobs.max_run_seconds`.
pub const DEFAULT_MAX_RUN_SECONDS: u64 = 3600;

impl JobSettings {
    /// The maximum run time of one attempt of `tool`'s jobs.
    pub fn max_run(&self, tool: crate::domain::Tool) -> std::time::Duration {
        std::time::Duration::from_secs(
            self.max_run_seconds
                .get(tool.as_str())
                .copied()
                .unwrap_or(DEFAULT_MAX_RUN_SECONDS),
        )
    }
}

/// `[notify]`: `channel`, `coalesce_ms`, `recheck_seconds`.
#[derive(Debug, Clone, Deserialize)]
pub struct NotifySettings {
    /// The PostgreSQL NOTIFY channel of job changes (`[a-z0-9_]+`).
    pub channel: String,
    pub coalesce_ms: u64,
    pub recheck_seconds: u64,
}

/// `[worker]`: `tools`, `concurrency`, `remote_concurrency`,
/// `local_concurrency`, `per_tool.<tool>.remote_concurrency` and
/// `per_tool.<tool>.local_concurrency`, `grace_seconds`, `metrics_addr`.
///
/// Each tool a worker serves has its own budgets of jobs at once: one for
/// its models on a network adapter (`fal`, `replicate`, `openai`...: the job
/// waits on the vendor), one for its models on the in-process `local`
/// adapter (the job renders on this CPU). Its queue's RabbitMQ prefetch is
/// the sum of the budgets of the kinds its catalogue models use. From the
/// most specific: `per_tool.<tool>.*_concurrency`, then `concurrency` (when
/// not 0: every budget, the old single setting), then
/// `remote_concurrency` / `local_concurrency`, then the built-in defaults
/// (remote: 512, at most one per 16 MiB of available memory; local: the
/// number of cores). In the environment:
/// `UNIGEN__WORKER__PER_TOOL__VIDEO__REMOTE_CONCURRENCY=128`.
#[derive(Debug, Clone, Deserialize)]
pub struct WorkerSettings {
    /// Tools whose queues the worker consumes (`image`, `image_edit`, `video`,
    /// `music`, `tts`, `stt`, `responses` (background Responses API
    /// requests), and `knowledge` and `batch`); `--tools` overrides it.
    pub tools: Vec<String>,
    /// When not 0, every per-tool budget (remote and local) unless
    /// `per_tool` sets it, and the knowledge and batch queues' concurrency
    /// (4 when 0); `--concurrency` overrides it. 0 (the default): the
    /// budgets below.
    #[serde(default)]
    pub concurrency: usize,
    /// Jobs at once per tool for models on a network adapter; unset: 512,
    /// capped at one job per 16 MiB of the memory available at start.
    #[serde(default)]
    pub remote_concurrency: Option<usize>,
    /// Jobs at once per tool for models on the in-process `local` adapter;
    /// unset: the number of cores (`std::thread::available_parallelism`).
    #[serde(default)]
    pub local_concurrency: Option<usize>,
    /// Budgets of one tool (`[worker.per_tool.video]`), by tool name.
    #[serde(default)]
    pub per_tool: std::collections::BTreeMap<String, ToolConcurrency>,
    pub grace_seconds: u64,
    /// Where the worker serves `GET /metrics` and `GET /healthz`; empty: no
    /// endpoint. A port in use is logged and the worker runs without it.
    #[serde(default = "default_worker_metrics_addr")]
    pub metrics_addr: String,
}

fn default_worker_metrics_addr() -> String {
    "127.0.0.1:9101".into()
}

/// `[worker.per_tool.<tool>]`: `remote_concurrency`, `local_concurrency`,
/// the tool's budgets (unset: `[worker]`'s).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ToolConcurrency {
    /// Jobs of this tool at once for models on a network adapter.
    #[serde(default)]
    pub remote_concurrency: Option<usize>,
    /// Jobs of this tool at once for models on the `local` adapter.
    #[serde(default)]
    pub local_concurrency: Option<usize>,
}

/// `[scheduler]`: `tick_ms`, `relay_after_seconds`, `relay_batch`, `grace_seconds`,
/// `metrics_addr`.
#[derive(Debug, Clone, Deserialize)]
pub struct SchedulerSettings {
    /// Idle pause of each scheduler task, in milliseconds.
    pub tick_ms: u64,
    /// Jobs whose publish the broker has not confirmed this long after
    /// creation are published again by the relay.
    pub relay_after_seconds: u64,
    /// Jobs per relay round.
    pub relay_batch: i64,
    /// On SIGTERM, the current rounds and webhook attempts get this long to
    /// finish; attempts still running then are retried by another
    /// scheduler once their lease expires.
    pub grace_seconds: u64,
    /// Where the scheduler serves `GET /metrics` (including the queue
    /// depths) and `GET /healthz`; empty: no endpoint. A port in use is
    /// logged and the scheduler runs without it.
    #[serde(default = "default_scheduler_metrics_addr")]
    pub metrics_addr: String,
}

fn default_scheduler_metrics_addr() -> String {
    "127.0.0.1:9102".into()
}

/// `[agents]`: `max_run_seconds`, `image_wait_seconds`,
/// `knowledge_excerpts`, `memory_exchanges`, `run_retention_seconds`.
#[derive(Debug, Clone, Deserialize)]
pub struct AgentSettings {
    /// The longest a run may take; past it the run fails. The scheduler
    /// fails runs left `running` this long (plus a margin) by an API process
    /// that died.
    pub max_run_seconds: u64,
    /// How long `generate_image` waits for its image job.
    pub image_wait_seconds: u64,
    /// Knowledge-base excerpts put in a run's context.
    pub knowledge_excerpts: usize,
    /// Earlier exchanges of a session an agent with memory sees.
    pub memory_exchanges: i64,
    /// Finished runs, their steps and their files are deleted this long
    /// after they ended; 0 keeps them.
    pub run_retention_seconds: u64,
}

/// `[knowledge]`: `chunk_tokens`, `chunk_overlap_tokens`,
/// `extract_timeout_seconds`, `concurrent_extractions`, `max_chunks_per_file`,
/// `embed_batch`, `republish_after_seconds`, `retry_delay_seconds`.
/// Leases and attempts follow `[jobs]` (`lease_seconds`, `max_attempts`).
#[derive(Debug, Clone, Deserialize)]
pub struct KnowledgeSettings {
    /// Largest chunk, in cl100k tokens.
    pub chunk_tokens: u32,
    /// Tokens of the previous chunk each chunk starts with.
    pub chunk_overlap_tokens: u32,
    /// Text extraction of one file; past it the file fails.
    pub extract_timeout_seconds: u64,
    /// Extractions at once per worker process (each holds a blocking thread,
    /// also after its time limit, until the parser returns).
    pub concurrent_extractions: usize,
    /// A file whose text makes more chunks fails (bounds storage and search).
    pub max_chunks_per_file: usize,
    /// Texts per embedding call.
    pub embed_batch: usize,
    /// A file whose message the broker has not confirmed this long after
    /// upload (or since it was handed back) is published by the scheduler.
    pub republish_after_seconds: u64,
    /// After a transient failure (an upstream down, storage unreadable) the
    /// file is retried this long times the attempt number later.
    pub retry_delay_seconds: u64,
}

/// `[metering]`: `lease_seconds` (how long slots and allowances an API
/// process holds outlive it if it dies; renewed every third of it),
/// `idle_ms` (unused slots and idle allowances are given back after this),
/// `lease_slots_from` (plans with at least this many concurrent requests
/// are served from leased blocks of slots; smaller ones a row per request),
/// `flush_sync_charges` (a sync answer waits for its charge record's WAL
/// flush too, not only its commit: see docs/spec-decisions.md, "Sync
/// settlement durability").
#[derive(Debug, Clone, Deserialize)]
pub struct MeteringSettings {
    pub lease_seconds: u64,
    pub idle_ms: u64,
    pub lease_slots_from: i32,
    #[serde(default)]
    pub flush_sync_charges: bool,
}

/// `[local_provider]`: `latency_ms`, `failure_rate`.
#[derive(Debug, Clone, Deserialize)]
pub struct LocalProviderSettings {
    /// Latency added to every call of the built-in provider (load tests).
    pub latency_ms: u64,
    /// Share of the built-in provider's calls that fail with a transient
    /// error, 0.0 to 1.0 (fault tests).
    pub failure_rate: f64,
}

/// One `[[models]]` entry of the catalogue.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelEntry {
    /// The model's id in requests and `GET /models` (`local/echo`).
    pub id: String,
    /// What it serves.
    pub category: ModelCategory,
    /// Its price tier (quota multipliers).
    pub tier: ModelTier,
    /// The vendor's wire format: `local`, `openai`, `azure-openai`,
    /// `anthropic`, `gemini`, `elevenlabs`, `fal` or `replicate`.
    pub adapter: String,
    /// `owned_by` in `GET /models`.
    pub owned_by: String,
    /// What it can do (`chat`, `streaming`, `vision`, `text_to_image`...),
    /// listed by `GET /models` and used to pick defaults.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Credits per unit of output: an image, an edit, a second of video, a
    /// music track, 1,000 characters of speech, a minute of transcribed audio.
    pub credits_per_unit: i64,
    /// Chat: credits per 1,000 completion tokens when they cost more than
    /// prompt tokens (`credits_per_unit` prices the prompt).
    #[serde(default)]
    pub completion_credits_per_unit: Option<i64>,
    /// Longest output a duration-based model produces (music, video), seconds.
    #[serde(default)]
    pub max_duration_seconds: Option<f64>,
    /// Languages a speech model handles (ISO 639-1); absent = any.
    #[serde(default)]
    pub languages: Option<Vec<String>>,
    /// Can read image inputs (chat vision, image edits).
    #[serde(default)]
    pub vision: bool,
    /// The model used when a request names none, per category and capability.
    #[serde(default)]
    pub default: bool,
    /// `openai` adapter: the `[upstreams.*]` entry and the model name there.
    #[serde(default)]
    pub upstream: Option<String>,
    /// The model's name at the upstream (a deployment on Azure, an app id
    /// on fal, `owner/model` on Replicate).
    #[serde(default)]
    pub upstream_model: Option<String>,
    /// Further `[upstreams.*]` to try, in order, when `upstream` fails.
    #[serde(default)]
    pub fallback_upstreams: Vec<String>,
    /// Traffic split: each request goes first to one of these upstreams,
    /// drawn by weight (the others, then `upstream` and the fallbacks, follow
    /// if it fails).
    #[serde(default)]
    pub upstream_weights: std::collections::BTreeMap<String, u32>,
    /// Text to speech: the voice names clients may use (OpenAI's `alloy`,
    /// `nova`...) and the vendor's voice id each stands for; other names
    /// are sent as they are.
    #[serde(default)]
    pub voices: std::collections::BTreeMap<String, String>,
    /// Other names requests may use for this model (OpenAI's model names,
    /// so unchanged client code runs).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// The upstream does not know the `developer` role: send it as `system`.
    #[serde(default)]
    pub developer_as_system: bool,
    /// Chat: the completion length sent when a request sets none (Anthropic
    /// requires one; its adapter sends 4,096 when this is unset too).
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// What the model is, for `GET /models` (the built-in ones say plainly
    /// that they are test models and renderers).
    #[serde(default)]
    pub description: Option<String>,
}

impl Settings {
    /// Refuses to sign file URLs with a forgeable key: an empty
    /// `storage.url_secret`, or the built-in [`DEFAULT_URL_SECRET`] outside
    /// `dev_mode`. The API and the worker (the processes that sign URLs)
    /// call it before they start; the message names the settings to change.
    pub fn check_url_secret(&self) -> Result<(), String> {
        let secret = self.storage.url_secret.as_str();
        let how = "set a long random secret with UNIGEN__STORAGE__URL_SECRET \
                   (e.g. `openssl rand -hex 32`) or storage.url_secret in the UNIGEN_CONFIG file";
        if secret.trim().is_empty() {
            return Err(format!(
                "storage.url_secret is empty, so anyone could forge file links: {how}"
            ));
        }
        if secret == DEFAULT_URL_SECRET && !self.dev_mode {
            return Err(format!(
                "storage.url_secret is the built-in default ({DEFAULT_URL_SECRET:?}), so anyone \
                 could forge file links: {how}; on a local development stack only, set \
                 dev_mode = true (UNIGEN__DEV_MODE=true, as scripts/dev-up does) to accept it"
            ));
        }
        Ok(())
    }

    /// Loads defaults, the optional `UNIGEN_CONFIG` file and the environment.
    pub fn load() -> Result<Self, config::ConfigError> {
        let file = std::env::var("UNIGEN_CONFIG").ok();
        Self::load_with(file.as_deref(), &[])
    }

    /// Like [`Settings::load`] with an explicit file and programmatic
    /// overrides applied last (used by tests and the CLI).
    pub fn load_with(
        file: Option<&str>,
        overrides: &[(&str, config::Value)],
    ) -> Result<Self, config::ConfigError> {
        let mut builder = config::Config::builder()
            .add_source(config::File::from_str(DEFAULTS, config::FileFormat::Toml));
        if let Some(path) = file {
            builder = builder.add_source(config::File::with_name(path));
        }
        builder = builder.add_source(
            config::Environment::with_prefix("UNIGEN")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true)
                .list_separator(",")
                .with_list_parse_key("worker.tools")
                .with_list_parse_key("webhooks.retry_delays_ms"),
        );
        for (key, value) in overrides {
            builder = builder.set_override(*key, value.clone())?;
        }
        let mut settings: Settings = builder.build()?.try_deserialize()?;
        let extra = std::mem::take(&mut settings.extra_models);
        settings.models.extend(extra);
        settings.apply_aliases()?;
        settings.validate()?;
        Ok(settings)
    }

    /// Adds the `[aliases]` table to the models it names.
    fn apply_aliases(&mut self) -> Result<(), config::ConfigError> {
        for (alias, target) in &self.aliases {
            let ids = match target {
                AliasTarget::One(id) => std::slice::from_ref(id),
                AliasTarget::Many(ids) => ids.as_slice(),
            };
            for id in ids {
                let model = self
                    .models
                    .iter_mut()
                    .find(|m| &m.id == id)
                    .ok_or_else(|| {
                        config::ConfigError::Message(format!(
                            "alias `{alias}` names `{id}`, which is not in the catalogue"
                        ))
                    })?;
                if !model.aliases.contains(alias) {
                    model.aliases.push(alias.clone());
                }
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), config::ConfigError> {
        let bad = |msg: String| Err(config::ConfigError::Message(msg));
        if !(0.0..=1.0).contains(&self.local_provider.failure_rate) {
            return bad("local_provider.failure_rate must be between 0.0 and 1.0".into());
        }
        let budgets = self.worker.per_tool.iter().flat_map(|(tool, limits)| {
            [
                (
                    format!("worker.per_tool.{tool}.remote_concurrency"),
                    limits.remote_concurrency,
                ),
                (
                    format!("worker.per_tool.{tool}.local_concurrency"),
                    limits.local_concurrency,
                ),
            ]
        });
        let budgets = [
            (
                "worker.remote_concurrency".to_owned(),
                self.worker.remote_concurrency,
            ),
            (
                "worker.local_concurrency".to_owned(),
                self.worker.local_concurrency,
            ),
        ]
        .into_iter()
        .chain(budgets);
        for (key, budget) in budgets {
            if budget == Some(0) {
                return bad(format!("{key} must be at least 1"));
            }
        }
        for tool in self.worker.per_tool.keys() {
            if tool.parse::<crate::domain::Tool>().is_err() {
                return bad(format!(
                    "worker.per_tool.{tool}: no such tool (image, image_edit, video, music, tts, stt, responses)"
                ));
            }
        }
        if self.knowledge.chunk_tokens < 16 || self.knowledge.chunk_tokens > 8192 {
            return bad("knowledge.chunk_tokens must be between 16 and 8192".into());
        }
        if self.knowledge.chunk_overlap_tokens >= self.knowledge.chunk_tokens / 2 {
            return bad(
                "knowledge.chunk_overlap_tokens must be less than half of chunk_tokens".into(),
            );
        }
        if self.knowledge.concurrent_extractions == 0
            || self.knowledge.embed_batch == 0
            || self.knowledge.max_chunks_per_file == 0
            || self.knowledge.extract_timeout_seconds == 0
        {
            return bad(
                "knowledge.concurrent_extractions, embed_batch, max_chunks_per_file and \
                 extract_timeout_seconds must be at least 1"
                    .into(),
            );
        }
        if self.jobs.max_attempts < 1 {
            return bad("jobs.max_attempts must be at least 1".into());
        }
        if !(self.jobs.max_audio_seconds.is_finite() && self.jobs.max_audio_seconds >= 1.0) {
            return bad("jobs.max_audio_seconds must be at least 1".into());
        }
        for (tool, seconds) in &self.jobs.max_run_seconds {
            if tool.parse::<crate::domain::Tool>().is_err() {
                return bad(format!(
                    "jobs.max_run_seconds names an unknown tool `{tool}`"
                ));
            }
            if *seconds == 0 {
                return bad(format!("jobs.max_run_seconds.{tool} must be at least 1"));
            }
        }
        if !matches!(self.rabbitmq.queue_type.as_str(), "quorum" | "classic") {
            return bad(format!(
                "rabbitmq.queue_type `{}` must be quorum or classic",
                self.rabbitmq.queue_type
            ));
        }
        validate_channel(&self.notify.channel).map_err(config::ConfigError::Message)?;
        self.webhooks
            .validate()
            .map_err(config::ConfigError::Message)?;
        match self.storage.backend.as_str() {
            "local" => {}
            "s3" => {
                let s3 = &self.storage.s3;
                if s3.bucket.is_empty() {
                    return bad("storage.backend is s3 but storage.s3.bucket is empty".into());
                }
                if let Some(seconds) = s3.presign_seconds
                    && !(1..=MAX_PRESIGN_SECONDS).contains(&seconds)
                {
                    return bad(format!(
                        "storage.s3.presign_seconds must be 1 to {MAX_PRESIGN_SECONDS}"
                    ));
                }
            }
            other => {
                return bad(format!(
                    "storage.backend `{other}` is not supported (supported: local, s3)"
                ));
            }
        }
        for (legacy, id) in &self.legacy_models {
            if !self
                .models
                .iter()
                .any(|m| &m.id == id && m.capabilities.iter().any(|c| c == "text_to_image"))
            {
                return bad(format!(
                    "legacy model `{legacy}` maps to `{id}`, which is not a text_to_image model"
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for model in &self.models {
            if !model.id.contains('/') {
                return bad(format!("model id `{}` must be <vendor>/<model>", model.id));
            }
            // Which adapters exist and what each serves is the providers'
            // registry's to check (`unigen_providers::registry::check_catalogue`).
            if !matches!(model.adapter.as_str(), "local" | "fixture")
                && !model
                    .upstream
                    .as_ref()
                    .is_some_and(|u| self.upstreams.contains_key(u))
            {
                return bad(format!(
                    "model `{}` uses the {} adapter: `upstream` must name an [upstreams.*] entry",
                    model.id, model.adapter
                ));
            }
            if let Some((name, weight)) = model
                .upstream_weights
                .iter()
                .find(|(name, weight)| **weight == 0 || !self.upstreams.contains_key(*name))
            {
                return bad(format!(
                    "model `{}`: upstream_weights.{name} = {weight} must name an [upstreams.*] entry with a weight of at least 1",
                    model.id
                ));
            }
            if !seen.insert(model.id.as_str()) {
                return bad(format!("model id `{}` is listed twice", model.id));
            }
        }
        for model in &self.models {
            if let Some(alias) = model.aliases.iter().find(|a| seen.contains(a.as_str())) {
                return bad(format!(
                    "alias `{alias}` of `{}` is the id of a model",
                    model.id
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_s3_backend_needs_a_bucket_and_a_presign_time_within_seven_days() {
        let load = |pairs: &[(&str, config::Value)]| Settings::load_with(None, pairs);
        let s3 = ("storage.backend", config::Value::from("s3"));
        let message = load(std::slice::from_ref(&s3)).unwrap_err().to_string();
        assert!(message.contains("storage.s3.bucket"), "{message}");
        let bucket = ("storage.s3.bucket", config::Value::from("outputs"));
        let settings = load(&[s3.clone(), bucket.clone()]).unwrap();
        assert_eq!(settings.storage.s3.bucket, "outputs");
        assert!(settings.storage.s3.path_style);
        assert_eq!(settings.storage.s3.presign_seconds, None);
        for bad in [0, MAX_PRESIGN_SECONDS + 1] {
            let presign = ("storage.s3.presign_seconds", config::Value::from(bad));
            let message = load(&[s3.clone(), bucket.clone(), presign])
                .unwrap_err()
                .to_string();
            assert!(message.contains("presign_seconds"), "{message}");
        }
        let presign = ("storage.s3.presign_seconds", config::Value::from(300));
        let settings = load(&[s3, bucket, presign]).unwrap();
        assert_eq!(settings.storage.s3.presign_seconds, Some(300));
        let message = load(&[("storage.backend", "gcs".into())])
            .unwrap_err()
            .to_string();
        assert!(message.contains("local, s3"), "{message}");
        let secret = S3Settings {
            secret_access_key: Some("hunter2".into()),
            ..S3Settings::default()
        };
        assert!(!format!("{secret:?}").contains("hunter2"));
    }

    #[test]
    fn the_default_url_secret_is_refused_outside_dev_mode() {
        let settings = Settings::load_with(None, &[]).unwrap();
        assert_eq!(settings.storage.url_secret, DEFAULT_URL_SECRET);
        assert!(!settings.dev_mode);
        let message = settings.check_url_secret().unwrap_err();
        assert!(message.contains("storage.url_secret"), "{message}");
        assert!(message.contains("UNIGEN__STORAGE__URL_SECRET"), "{message}");
        assert!(message.contains("UNIGEN__DEV_MODE=true"), "{message}");

        let dev = Settings::load_with(None, &[("dev_mode", true.into())]).unwrap();
        assert!(dev.dev_mode);
        assert_eq!(dev.check_url_secret(), Ok(()));

        let secret = "0f9c2a7d3e1b4c5a69788d7e6f5a4b3c";
        let set = Settings::load_with(None, &[("storage.url_secret", secret.into())]).unwrap();
        assert_eq!(set.check_url_secret(), Ok(()));

        // An empty key is forgeable too, dev mode or not.
        let empty = Settings::load_with(
            None,
            &[("storage.url_secret", "".into()), ("dev_mode", true.into())],
        )
        .unwrap();
        assert!(empty.check_url_secret().unwrap_err().contains("empty"));
    }

    #[test]
    fn defaults_load_and_overrides_apply() {
        let settings = Settings::load_with(
            None,
            &[("http.port", 9123.into()), ("worker.concurrency", 7.into())],
        )
        .unwrap();
        assert_eq!(settings.http.port, 9123);
        assert_eq!(settings.worker.concurrency, 7);
        assert!(settings.models.iter().any(|m| m.default));
    }

    #[test]
    fn an_override_file_can_add_models_to_the_catalogue() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/unigen-bench.toml");
        let settings = Settings::load_with(Some(path), &[]).unwrap();
        assert!(settings.models.iter().any(|m| m.id == "bench/fake-chat"));
        // One `bench/noop` fixture model per job tool.
        let noop: Vec<&str> = settings
            .models
            .iter()
            .filter(|m| m.adapter == "fixture")
            .inspect(|m| assert_eq!(m.aliases, ["bench/noop"], "{}", m.id))
            .map(|m| m.id.as_str())
            .collect();
        assert_eq!(
            noop,
            [
                "bench/noop-image",
                "bench/noop-edit",
                "bench/noop-video",
                "bench/noop-music",
                "bench/noop-tts",
                "bench/noop-stt"
            ]
        );
        assert!(
            settings.models.iter().any(|m| m.id == "local/echo"),
            "the built-in models stay"
        );
    }

    #[test]
    fn the_fixture_adapter_needs_no_upstream() {
        let dir = std::env::temp_dir().join(format!("unigen-fixture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let load = |name: &str, category: &str| {
            let path = dir.join(format!("{name}.toml"));
            std::fs::write(
                &path,
                format!(
                    "[[extra_models]]\nid = \"bench/{name}\"\ncategory = \"{category}\"\n\
                     tier = \"fast\"\nadapter = \"fixture\"\nowned_by = \"bench\"\n\
                     credits_per_unit = 1\n"
                ),
            )
            .unwrap();
            Settings::load_with(path.to_str(), &[])
        };
        for category in ["image", "video", "audio", "music"] {
            let settings = load(&format!("noop-{category}"), category).unwrap();
            let model = settings.models.last().unwrap();
            assert_eq!(
                (model.adapter.as_str(), model.upstream.as_deref()),
                ("fixture", None)
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn invalid_failure_rate_is_rejected() {
        let err =
            Settings::load_with(None, &[("local_provider.failure_rate", 1.5.into())]).unwrap_err();
        assert!(err.to_string().contains("failure_rate"));
    }
}
