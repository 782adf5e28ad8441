//! Documentation-only shapes of the answers handlers build with `json!`:
//! what the OpenAPI document says they send. Nothing here is constructed;
//! each type mirrors one handler's JSON (field names, which fields can be
//! absent, which can be `null`). A change to a handler's JSON is a change
//! here too.
#![allow(dead_code, clippy::large_enum_variant)]

use chrono::{DateTime, Utc};
use serde_json::Value;
use unigen_core::params::transcription::Word;
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use uuid::Uuid;

use crate::views::{AsyncJobCreated, GenerationUsage, JobView, Tier};

/// A string that is always `value`.
fn constant(value: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some([value]))
        .build()
}

fn list_object() -> Object {
    constant("list")
}

fn embedding_object() -> Object {
    constant("embedding")
}

fn chat_completion_object() -> Object {
    constant("chat.completion")
}

fn function_type() -> Object {
    constant("function")
}

fn duration_type() -> Object {
    constant("duration")
}

fn active_status() -> Object {
    constant("active")
}

fn credits_bucket() -> Object {
    constant("credits")
}

fn always_true() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Boolean)
        .enum_values(Some([true]))
        .build()
}

fn always_false() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Boolean)
        .enum_values(Some([false]))
        .build()
}

fn always_null() -> Object {
    ObjectBuilder::new().schema_type(Type::Null).build()
}

// ---------------------------------------------------------------- jobs

/// A generation answered with 202: the created job (`?async=true`), or the
/// job as it is when the sync wait limit passed (a `JobView`).
#[derive(ToSchema)]
#[serde(untagged)]
pub enum JobAccepted {
    Created(AsyncJobCreated),
    StillRunning(JobView),
}

// ---------------------------------------------------------------- images

/// One edited image: `url` (`response_format` `url`, the default) or
/// `b64_json` (`b64_json`), never both.
#[derive(ToSchema)]
pub struct EditedImage {
    /// Signed URL of the image.
    #[schema(nullable = false)]
    pub url: Option<String>,
    /// The image itself, base64.
    #[schema(nullable = false)]
    pub b64_json: Option<String>,
    pub width: u32,
    pub height: u32,
}

/// Sync answer of `POST /images/edits`.
#[derive(ToSchema)]
pub struct ImageEditResponse {
    /// Creation time of the job, Unix seconds.
    pub created: i64,
    pub data: Vec<EditedImage>,
    pub model: String,
    pub model_tier: Tier,
    pub usage: GenerationUsage,
}

// ---------------------------------------------------------------- video

/// The video of a finished generation.
#[derive(ToSchema)]
pub struct VideoOutput {
    /// Signed URL of the MP4.
    pub url: String,
    pub duration_seconds: f64,
    pub width: u32,
    pub height: u32,
}

/// Sync answer of `POST /videos/generations` (`async=false`).
#[derive(ToSchema)]
pub struct VideoGenerationResponse {
    pub created: i64,
    pub data: VideoOutput,
    pub model: String,
    pub model_tier: Tier,
    pub usage: GenerationUsage,
}

// ---------------------------------------------------------------- music

/// The track of a finished generation.
#[derive(ToSchema)]
pub struct MusicOutput {
    /// Signed URL of the audio.
    pub audio_url: String,
    pub duration_seconds: f64,
}

/// Sync answer of `POST /music/generations` (`async=false`).
#[derive(ToSchema)]
pub struct MusicGenerationResponse {
    pub created: i64,
    pub data: MusicOutput,
    pub model: String,
    pub model_tier: Tier,
    pub usage: GenerationUsage,
}

// ---------------------------------------------------------------- speech

/// JSON answer of `POST /audio/speech` (unless the client asked for audio).
#[derive(ToSchema)]
pub struct SpeechResponse {
    pub created: i64,
    /// Signed URL of the audio.
    pub audio_url: String,
    pub duration_seconds: f64,
    /// Characters synthesised (what is priced).
    pub character_count: i64,
    pub model: String,
    pub model_tier: Tier,
    pub usage: GenerationUsage,
}

// ---------------------------------------------------------------- transcription

/// A segment of a `json` transcript.
#[derive(ToSchema)]
pub struct TranscriptSegment {
    /// Seconds from the start of the audio.
    pub start: f64,
    pub end: f64,
    pub text: String,
    /// The speaker's label with diarization, else `null`.
    #[schema(required = true)]
    pub speaker: Option<String>,
    /// The segment's words, with word timestamps.
    #[schema(nullable = false)]
    pub words: Option<Vec<Word>>,
}

/// `response_format` `json` (the default): the transcript with unigen's
/// usage object.
#[derive(ToSchema)]
pub struct Transcript {
    pub text: String,
    pub segments: Vec<TranscriptSegment>,
    /// The language: as asked, or as detected (`auto`).
    pub language: String,
    /// Length of the audio, seconds.
    pub duration: f64,
    /// Every word, with word timestamps (`timestamp_granularities` `word`).
    #[schema(nullable = false)]
    pub words: Option<Vec<Word>>,
    pub model: String,
    pub model_tier: Tier,
    pub usage: GenerationUsage,
}

/// A segment of a `verbose_json` transcript: OpenAI's shape (the decoding
/// facts are zeros when the recognizer reported none).
#[derive(ToSchema)]
pub struct VerboseSegment {
    pub id: u32,
    pub seek: i64,
    pub start: f64,
    pub end: f64,
    pub text: String,
    pub tokens: Vec<i64>,
    pub temperature: f64,
    pub avg_logprob: f64,
    pub compression_ratio: f64,
    pub no_speech_prob: f64,
}

/// `transcribe`, or `translate` for `POST /audio/translations`.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum TranscriptionTask {
    Transcribe,
    Translate,
}

/// OpenAI's usage of audio models (credits are in the `X-Credits-*` headers).
#[derive(ToSchema)]
pub struct AudioDurationUsage {
    #[serde(rename = "type")]
    #[schema(schema_with = duration_type)]
    pub kind: String,
    pub seconds: f64,
}

/// `response_format` `verbose_json`: OpenAI's verbose transcript.
#[derive(ToSchema)]
pub struct VerboseTranscript {
    pub task: TranscriptionTask,
    /// The language's name (`english`); a translation's is `english`.
    pub language: String,
    pub duration: f64,
    pub text: String,
    pub segments: Vec<VerboseSegment>,
    /// With word timestamps.
    #[schema(nullable = false)]
    pub words: Option<Vec<Word>>,
    pub model: String,
    pub model_tier: Tier,
    pub usage: AudioDurationUsage,
}

/// The JSON answers of a transcription or translation: `json` or
/// `verbose_json`.
#[derive(ToSchema)]
#[serde(untagged)]
pub enum TranscriptionResponse {
    Json(Transcript),
    VerboseJson(VerboseTranscript),
}

// ---------------------------------------------------------------- chat

/// A function the model calls.
#[derive(ToSchema)]
pub struct ChatFunctionCall {
    pub name: String,
    /// The arguments, as JSON text.
    pub arguments: String,
}

#[derive(ToSchema)]
pub struct ChatToolCall {
    pub id: String,
    #[serde(rename = "type")]
    #[schema(schema_with = function_type)]
    pub kind: String,
    pub function: ChatFunctionCall,
}

/// The assistant's message. Other fields an upstream sends (`audio`,
/// `annotations`...) are passed through.
#[derive(ToSchema)]
pub struct ChatCompletionMessage {
    /// `assistant`.
    pub role: String,
    /// The text; `null` when the message is tool calls.
    #[schema(required = true)]
    pub content: Option<String>,
    /// A refusal's text, else `null`.
    pub refusal: Option<String>,
    /// The tool calls (`finish_reason` `tool_calls`). Some OpenAI-compatible
    /// upstreams send `null` instead of leaving it out.
    pub tool_calls: Option<Vec<ChatToolCall>>,
}

#[derive(ToSchema)]
pub struct ChatChoice {
    pub index: u32,
    pub message: ChatCompletionMessage,
    /// `stop`, `length`, `tool_calls`, or what an upstream gives
    /// (`content_filter`...).
    pub finish_reason: String,
    /// `null` unless an upstream returns log probabilities.
    #[schema(value_type = Option<Object>)]
    pub logprobs: Option<Value>,
}

/// Chat and embedding credits: per 1,000 tokens.
#[derive(ToSchema)]
pub struct TokenCredits {
    pub tokens: i64,
}

#[derive(ToSchema)]
pub struct ChatUsage {
    pub prompt_tokens: u32,
    /// Of every choice.
    pub completion_tokens: u32,
    pub total_tokens: u32,
    pub credits_used: i64,
    pub credits_breakdown: TokenCredits,
    /// The model tier's factor on the chat token bucket (once charged).
    #[schema(nullable = false)]
    pub quota_multiplier: Option<f64>,
    /// Tokens of this model's tier the period's bucket has left (`null`:
    /// unlimited); present with `quota_multiplier`.
    pub tokens_remaining_estimate: Option<i64>,
}

/// A `chat.completion`, in OpenAI's shape. The upstream's other top-level
/// fields (`system_fingerprint`, `service_tier`...) are passed through.
#[derive(ToSchema)]
pub struct ChatCompletion {
    #[schema(example = "chatcmpl-0193c1d2e3f4")]
    pub id: String,
    #[schema(schema_with = chat_completion_object)]
    pub object: String,
    pub created: i64,
    /// The catalogue id of the model that answered.
    pub model: String,
    pub model_tier: Tier,
    pub choices: Vec<ChatChoice>,
    pub usage: ChatUsage,
}

// ---------------------------------------------------------------- embeddings

/// Floats (`encoding_format` `float`, the default), or their little-endian
/// f32 bytes in base64 (`base64`).
#[derive(ToSchema)]
#[serde(untagged)]
pub enum EmbeddingVector {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(ToSchema)]
pub struct Embedding {
    #[schema(schema_with = embedding_object)]
    pub object: String,
    /// The input's position.
    pub index: u32,
    pub embedding: EmbeddingVector,
}

#[derive(ToSchema)]
pub struct EmbeddingUsage {
    pub prompt_tokens: u32,
    pub total_tokens: u32,
    pub credits_used: i64,
    pub credits_breakdown: TokenCredits,
}

/// Answer of `POST /embeddings`.
#[derive(ToSchema)]
pub struct EmbeddingList {
    #[schema(schema_with = list_object)]
    pub object: String,
    pub data: Vec<Embedding>,
    /// The catalogue id of the model.
    pub model: String,
    pub usage: EmbeddingUsage,
}

// ---------------------------------------------------------------- legacy

#[derive(ToSchema)]
pub struct LegacyImage {
    /// Signed URL of the image.
    pub url: String,
    pub width: u32,
    pub height: u32,
    /// The seed of this image (the request's seed plus its position).
    pub seed: u64,
}

#[derive(ToSchema)]
pub struct LegacyImages {
    pub images: Vec<LegacyImage>,
    /// The legacy model name asked for.
    pub model: String,
    /// The catalogue model that ran.
    pub resolved_model: String,
    pub prompt: String,
    pub job_id: Uuid,
}

#[derive(ToSchema)]
pub struct LegacyMeta {
    /// The job's id.
    pub request_id: Uuid,
    pub created: i64,
    pub processing_ms: u64,
    pub credits_used: i64,
}

/// The legacy envelope of finished images.
#[derive(ToSchema)]
pub struct LegacyImageEnvelope {
    #[schema(schema_with = always_true)]
    pub success: bool,
    pub data: LegacyImages,
    #[schema(schema_with = always_null)]
    pub error: (),
    pub meta: LegacyMeta,
}

#[derive(ToSchema)]
pub struct LegacyJobRef {
    pub job_id: Uuid,
    /// The job's status (`pending` or `processing`).
    pub status: String,
}

#[derive(ToSchema)]
pub struct LegacyAcceptedMeta {
    /// The job's id.
    pub request_id: Uuid,
    pub created: i64,
    pub processing_ms: u64,
}

/// The legacy envelope of a job not finished yet (`async=true`, or the
/// sync wait limit passed): poll `GET /jobs/{job_id}`.
#[derive(ToSchema)]
pub struct LegacyAcceptedEnvelope {
    #[schema(schema_with = always_true)]
    pub success: bool,
    pub data: LegacyJobRef,
    #[schema(schema_with = always_null)]
    pub error: (),
    pub meta: LegacyAcceptedMeta,
}

#[derive(ToSchema)]
pub struct LegacyError {
    /// `invalid_request` for an invalid field, else the code of the JSON
    /// errors (`unauthorized`, `forbidden`, `rate_limited`,
    /// `quota_exceeded`, `generation_failed`...).
    pub code: String,
    pub message: String,
    /// The request field at fault, else `null`.
    #[schema(required = true)]
    pub field: Option<String>,
}

#[derive(ToSchema)]
pub struct LegacyErrorMeta {
    pub request_id: Uuid,
    pub processing_ms: u64,
}

/// The legacy envelope of every error (a 429 here has no `Retry-After`).
#[derive(ToSchema)]
pub struct LegacyErrorEnvelope {
    #[schema(schema_with = always_false)]
    pub success: bool,
    #[schema(schema_with = always_null)]
    pub data: (),
    pub error: LegacyError,
    pub meta: LegacyErrorMeta,
}

// ---------------------------------------------------------------- billing

#[derive(ToSchema)]
pub struct BillingPeriod {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

#[derive(ToSchema)]
pub struct CreditBalance {
    /// Included plus purchased, less what requests in flight hold.
    pub total_available: i64,
    pub included_remaining: i64,
    pub purchased: i64,
    pub reserved: i64,
    /// Overage credits this period.
    pub overage_used: i64,
    /// USD.
    pub overage_cost: f64,
}

#[derive(ToSchema)]
pub struct CreditsPeriod {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub included_credits: i64,
    pub credits_used: i64,
    pub overage_active: bool,
}

#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum TransactionKind {
    Allocation,
    Consumption,
    Purchase,
    Overage,
}

/// A ledger entry.
#[derive(ToSchema)]
pub struct CreditTransactionView {
    pub id: Uuid,
    #[serde(rename = "type")]
    pub kind: TransactionKind,
    /// Signed: consumption is negative.
    pub amount: i64,
    pub balance_after: i64,
    pub created_at: DateTime<Utc>,
    pub description: String,
    #[schema(value_type = Object)]
    pub metadata: Value,
}

#[derive(ToSchema)]
pub struct LedgerPagination {
    pub limit: i64,
    pub offset: i64,
    pub total: i64,
    pub has_more: bool,
}

#[derive(ToSchema)]
pub struct CreditsMeta {
    pub pagination: LedgerPagination,
}

#[derive(ToSchema)]
pub struct CreditsData {
    pub balance: CreditBalance,
    pub current_period: CreditsPeriod,
    /// Newest first.
    pub transactions: Vec<CreditTransactionView>,
}

/// Answer of `GET /credits`.
#[derive(ToSchema)]
pub struct CreditsEnvelope {
    #[schema(schema_with = always_true)]
    pub success: bool,
    pub data: CreditsData,
    pub meta: CreditsMeta,
}

/// The period's credits, as a bucket.
#[derive(ToSchema)]
pub struct QuotaCredits {
    #[schema(schema_with = credits_bucket)]
    pub bucket: String,
    /// The plan's included credits.
    pub limit: i64,
    pub used: i64,
    pub remaining: i64,
    pub purchased: i64,
    pub reserved: i64,
}

/// A tier's multiplier on the bucket.
#[derive(ToSchema)]
pub struct TierMultipliers {
    pub fast: f64,
    pub standard: f64,
    pub premium: f64,
}

/// A quota bucket's name (`Bucket` spelled as on the wire).
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum BucketName {
    ChatTokens,
    ImageGenerations,
    VideoSeconds,
    SttSeconds,
    TtsChars,
    ImageEdits,
    MusicTracks,
    AgentRuns,
}

#[derive(ToSchema)]
pub struct QuotaBucket {
    pub bucket: BucketName,
    /// The plan's limit in units; `null`: unlimited, 0: not on the plan.
    #[schema(required = true)]
    pub limit: Option<i64>,
    pub used: f64,
    /// Held by requests in flight.
    pub reserved: f64,
    /// `null` when unlimited.
    #[schema(required = true)]
    pub remaining: Option<f64>,
    pub unlimited: bool,
    pub available: bool,
    pub multipliers: TierMultipliers,
}

#[derive(ToSchema)]
pub struct QuotaData {
    /// The plan's code.
    pub plan: String,
    pub period: BillingPeriod,
    pub credits: QuotaCredits,
    pub buckets: Vec<QuotaBucket>,
}

/// Answer of `GET /quota`.
#[derive(ToSchema)]
pub struct QuotaEnvelope {
    #[schema(schema_with = always_true)]
    pub success: bool,
    pub data: QuotaData,
    /// Empty.
    #[schema(value_type = Object)]
    pub meta: Value,
}

#[derive(ToSchema)]
pub struct OverageUsage {
    pub credits: i64,
    /// USD.
    pub cost: f64,
    pub billing_period: BillingPeriod,
}

#[derive(ToSchema)]
pub struct OverageLimits {
    #[schema(required = true)]
    pub soft_limit: Option<i64>,
    pub soft_limit_reached: bool,
    #[schema(required = true)]
    pub hard_limit: Option<i64>,
    pub hard_limit_reached: bool,
}

#[derive(ToSchema)]
pub struct OverageNotifications {
    pub email_alerts: bool,
    #[schema(required = true)]
    pub email: Option<String>,
    pub webhook_enabled: bool,
    /// Percentages of the soft limit.
    pub thresholds: Vec<i32>,
    #[schema(required = true)]
    pub last_notification: Option<DateTime<Utc>>,
}

#[derive(ToSchema)]
pub struct OverageStatus {
    pub enabled: bool,
    /// Whether the plan has overage at all.
    pub available: bool,
    /// USD per credit (0 without overage on the plan).
    pub rate_per_credit: f64,
    pub current_usage: OverageUsage,
    pub limits: OverageLimits,
    pub notifications: OverageNotifications,
}

/// Answer of `GET /overage/status` and `POST /overage/configure`.
#[derive(ToSchema)]
pub struct OverageEnvelope {
    #[schema(schema_with = always_true)]
    pub success: bool,
    pub data: OverageStatus,
    /// Empty.
    #[schema(value_type = Object)]
    pub meta: Value,
}

#[derive(ToSchema)]
pub struct AccountInfo {
    pub id: Uuid,
    pub name: String,
    #[schema(required = true)]
    pub email: Option<String>,
    pub created_at: DateTime<Utc>,
    pub status: String,
}

#[derive(ToSchema)]
pub struct PlanFeatures {
    pub included_credits: i64,
    pub overage_enabled: bool,
    /// USD per credit; `null` without overage on the plan.
    #[schema(required = true)]
    pub overage_rate: Option<f64>,
    /// Requests per minute per key.
    pub rate_limit: i32,
    pub concurrent_requests: i32,
    pub available_models: Vec<String>,
    /// e.g. `chat:completions`, `images:generations`, `webhooks`.
    pub api_features: Vec<String>,
}

#[derive(ToSchema)]
pub struct Subscription {
    /// The plan's code.
    pub plan: String,
    pub plan_name: String,
    #[schema(schema_with = active_status)]
    pub status: String,
    pub current_period: BillingPeriod,
    pub features: PlanFeatures,
}

#[derive(ToSchema)]
pub struct OverageSettingsView {
    pub enabled: bool,
    #[schema(required = true)]
    pub soft_limit: Option<i64>,
    #[schema(required = true)]
    pub hard_limit: Option<i64>,
    pub notification_thresholds: Vec<i32>,
}

#[derive(ToSchema)]
pub struct BillingInfo {
    /// Always `null` (no payment provider).
    #[schema(schema_with = always_null)]
    pub payment_method: (),
    pub next_billing_date: DateTime<Utc>,
    pub auto_renew: bool,
    pub overage_settings: OverageSettingsView,
}

#[derive(ToSchema)]
pub struct AccountData {
    pub account: AccountInfo,
    pub subscription: Subscription,
    pub billing: BillingInfo,
}

/// Answer of `GET /account`.
#[derive(ToSchema)]
pub struct AccountEnvelope {
    #[schema(schema_with = always_true)]
    pub success: bool,
    pub data: AccountData,
    /// Empty.
    #[schema(value_type = Object)]
    pub meta: Value,
}
