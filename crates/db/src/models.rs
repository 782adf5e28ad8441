//! Row types: `Queryable` structs mirror `schema.rs`; `New*` are insert forms.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use uuid::Uuid;

use super::schema::{
    agent_run_steps, agent_runs, agents, api_keys, billing_accounts, credit_transactions, events,
    jobs, knowledge_chunks, knowledge_files, organizations, plans, quota_usage, usage_records,
    webhook_attempts, webhook_deliveries, webhooks,
};

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = plans)]
pub struct Plan {
    pub code: String,
    pub name: String,
    pub included_credits: i64,
    pub overage_rate_micros: Option<i64>,
    pub rate_limit_per_minute: i32,
    pub concurrent_requests: i32,
    pub chat_tokens: Option<i64>,
    pub image_generations: Option<i64>,
    pub video_seconds: Option<i64>,
    pub stt_seconds: Option<i64>,
    pub tts_chars: Option<i64>,
    pub image_edits: Option<i64>,
    pub music_tracks: Option<i64>,
    pub agent_runs: Option<i64>,
    pub max_agents: i32,
    pub tools_per_agent: i32,
    pub max_iterations: i32,
    pub knowledge_files_per_agent: i32,
    pub max_file_size_mb: i32,
    pub max_webhooks: i32,
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = organizations)]
pub struct Organization {
    pub id: Uuid,
    pub name: String,
    pub email: Option<String>,
    pub plan_code: String,
    pub status: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = organizations)]
pub struct NewOrganization<'a> {
    pub id: Uuid,
    pub name: &'a str,
    pub email: Option<&'a str>,
    pub plan_code: &'a str,
}

/// An API key as listed to operators (no hash).
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = api_keys)]
pub struct ApiKey {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub key_prefix: String,
    pub scopes: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    /// The key that created it (`POST /keys`), if any.
    pub created_by_key: Option<Uuid>,
    /// The dashboard member who created it, if any.
    pub created_by_member: Option<Uuid>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = api_keys)]
pub struct NewApiKey<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: &'a str,
    pub key_hash: &'a [u8],
    pub key_prefix: &'a str,
    pub scopes: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Both `None` for the operator CLI.
    pub created_by_key: Option<Uuid>,
    pub created_by_member: Option<Uuid>,
}

/// What authentication needs about a key and its organization, in one row.
#[derive(Debug, Clone, Queryable)]
pub struct KeyAuthRow {
    pub key_id: Uuid,
    pub org_id: Uuid,
    pub scopes: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub org_status: String,
    pub plan_code: String,
    pub rate_limit_per_minute: i32,
    pub concurrent_requests: i32,
}

#[derive(Debug, Clone, Queryable, QueryableByName, Selectable)]
#[diesel(table_name = jobs)]
pub struct Job {
    pub id: Uuid,
    pub org_id: Uuid,
    pub api_key_id: Uuid,
    pub tool: String,
    pub status: String,
    pub progress: i16,
    pub model: String,
    pub model_tier: String,
    pub input_params: serde_json::Value,
    pub output_data: Option<serde_json::Value>,
    pub estimated_credits: i64,
    pub actual_credits: Option<i64>,
    pub error_message: Option<String>,
    pub attempt: i32,
    pub enqueued_at: Option<DateTime<Utc>>,
    pub worker_id: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    /// The settled usage object (set with the result).
    pub usage: Option<serde_json::Value>,
    /// `Cancel-After`: unfinished by then, the job is cancelled.
    pub cancel_after: Option<DateTime<Utc>>,
    /// The W3C `traceparent` of the span that published it (tracing on).
    pub trace_context: Option<String>,
}

/// A job to insert (`queries::jobs::insert_many`, one `unnest` statement).
#[derive(Debug)]
pub struct NewJob<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub api_key_id: Uuid,
    pub tool: &'a str,
    pub model: &'a str,
    pub model_tier: &'a str,
    pub input_params: &'a serde_json::Value,
    pub estimated_credits: i64,
    pub cancel_after: Option<DateTime<Utc>>,
    /// The `Idempotency-Key` claim (key and claim id) the job is created
    /// under: the submission statement writes the job on that claim.
    pub idempotency: Option<(&'a str, Uuid)>,
    /// The `traceparent` of the span publishing it (tracing on).
    pub trace_context: Option<&'a str>,
}

/// An outbox row: `type` is the event kind, `data` its payload.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = events)]
pub struct Event {
    pub id: Uuid,
    pub org_id: Uuid,
    pub kind: String,
    pub data: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

/// An organization's billing period and credit balances.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = billing_accounts)]
pub struct BillingAccount {
    pub org_id: Uuid,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub included_credits: i64,
    pub included_remaining: i64,
    pub purchased_balance: i64,
    pub reserved_credits: i64,
    pub overage_credits: i64,
    pub overage_enabled: bool,
    pub soft_limit: Option<i64>,
    pub hard_limit: Option<i64>,
    pub notification_email: Option<String>,
    pub notification_thresholds: Vec<i32>,
    pub soft_limit_notified: bool,
    pub credits_low_notified: bool,
    pub credits_depleted_notified: bool,
    pub last_notification_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl BillingAccount {
    /// The ledger balance: what the transactions of this account sum to.
    pub fn balance(&self) -> i64 {
        self.included_remaining + self.purchased_balance - self.overage_credits
    }
}

/// A quota bucket's state for one period, in thousandths of a unit.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = quota_usage)]
pub struct QuotaUsage {
    pub org_id: Uuid,
    pub period_start: DateTime<Utc>,
    pub bucket: String,
    pub used_milli: i64,
    pub reserved_milli: i64,
    pub low_notified: bool,
    pub depleted_notified: bool,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = credit_transactions)]
pub struct CreditTransaction {
    pub id: Uuid,
    pub org_id: Uuid,
    pub kind: String,
    pub amount: i64,
    pub balance_after: i64,
    pub description: String,
    pub metadata: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

/// One metered request: a sync call or a finished job.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = usage_records)]
pub struct UsageRecord {
    pub id: Uuid,
    pub org_id: Uuid,
    pub api_key_id: Option<Uuid>,
    pub endpoint: String,
    pub method: String,
    pub model: String,
    pub credits: i64,
    pub latency_ms: i64,
    pub status: String,
    pub tools_used: Vec<String>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub total_tokens: i64,
    pub created_at: DateTime<Utc>,
}

/// An agent: an organization's, or a built-in template (`org_id` None).
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = agents)]
pub struct Agent {
    pub id: Uuid,
    pub org_id: Option<Uuid>,
    pub name: String,
    pub description: String,
    pub icon: String,
    pub system_prompt: String,
    pub model: String,
    pub tools: Vec<String>,
    pub temperature: f64,
    pub max_tokens: i32,
    pub max_iterations: i32,
    pub memory_enabled: bool,
    pub is_template: bool,
    pub is_public: bool,
    pub template_category: Option<String>,
    pub run_count: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An organization's new agent (templates are only seeded by migrations).
#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = agents)]
pub struct NewAgent {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub description: String,
    pub icon: String,
    pub system_prompt: String,
    pub model: String,
    pub tools: Vec<String>,
    pub temperature: f64,
    pub max_tokens: i32,
    pub max_iterations: i32,
    pub memory_enabled: bool,
    pub is_public: bool,
    pub template_category: Option<String>,
}

/// Changes to an agent; `None` leaves a field as it is.
#[derive(Debug, Default, Clone, AsChangeset)]
#[diesel(table_name = agents)]
pub struct AgentUpdate {
    pub name: Option<String>,
    pub description: Option<String>,
    pub icon: Option<String>,
    pub system_prompt: Option<String>,
    pub model: Option<String>,
    pub tools: Option<Vec<String>>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<i32>,
    pub max_iterations: Option<i32>,
    pub memory_enabled: Option<bool>,
    pub is_public: Option<bool>,
}

/// An agent run: written when it starts, completed or failed at its end.
#[derive(Debug, Clone, Queryable, QueryableByName, Selectable)]
#[diesel(table_name = agent_runs)]
pub struct AgentRun {
    pub id: Uuid,
    pub org_id: Uuid,
    pub agent_id: Uuid,
    pub api_key_id: Option<Uuid>,
    pub session_id: String,
    pub status: String,
    pub input: String,
    pub output: Option<String>,
    pub error_message: Option<String>,
    pub total_steps: i32,
    pub tokens_used: i64,
    pub credits_used: i64,
    pub duration_ms: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = agent_runs)]
pub struct NewAgentRun<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub agent_id: Uuid,
    pub api_key_id: Option<Uuid>,
    pub session_id: &'a str,
    pub input: &'a str,
}

/// One step of a run, in order (`step_number` from 1).
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Insertable)]
#[diesel(table_name = agent_run_steps)]
pub struct AgentRunStep {
    pub run_id: Uuid,
    pub step_number: i32,
    pub step_type: String,
    pub content: String,
    pub tool_name: Option<String>,
    pub tool_input: Option<serde_json::Value>,
    pub tool_output: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
}

/// A knowledge file of an agent and its processing state.
#[derive(Debug, Clone, Queryable, QueryableByName, Selectable)]
#[diesel(table_name = knowledge_files)]
pub struct KnowledgeFile {
    pub id: Uuid,
    pub org_id: Uuid,
    pub agent_id: Uuid,
    pub filename: String,
    pub format: String,
    pub size_bytes: i64,
    pub storage_key: String,
    pub status: String,
    pub error_message: Option<String>,
    pub chunk_count: i32,
    pub attempt: i32,
    pub worker_id: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// When the broker confirmed its message; `None`: the scheduler publishes it.
    pub enqueued_at: Option<DateTime<Utc>>,
    /// The catalogue model that embedded its chunks.
    pub embedding_model: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub processed_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = knowledge_files)]
pub struct NewKnowledgeFile<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub agent_id: Uuid,
    pub filename: &'a str,
    pub format: &'a str,
    pub size_bytes: i64,
    pub storage_key: &'a str,
}

/// One chunk of a knowledge file with its embedding (a unit vector).
#[derive(Debug, Clone, PartialEq, Insertable)]
#[diesel(table_name = knowledge_chunks)]
pub struct NewKnowledgeChunk {
    pub file_id: Uuid,
    pub chunk_index: i32,
    pub agent_id: Uuid,
    pub content: String,
    pub token_count: i32,
    pub embedding: Vec<f32>,
}

/// A webhook row. `secret` is the HMAC key; views show it only when issued.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = webhooks)]
pub struct Webhook {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub url: String,
    pub events: Vec<String>,
    pub enabled: bool,
    pub secret: String,
    pub headers: serde_json::Value,
    pub consecutive_failures: i32,
    pub disabled_at: Option<DateTime<Utc>>,
    pub disabled_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = webhooks)]
pub struct NewWebhook<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: &'a str,
    pub url: &'a str,
    pub events: &'a [String],
    pub enabled: bool,
    pub secret: &'a str,
    pub headers: &'a serde_json::Value,
}

/// Changes to a webhook; `None` leaves a field as it is.
#[derive(Debug, Default, AsChangeset)]
#[diesel(table_name = webhooks)]
pub struct WebhookUpdate {
    pub name: Option<String>,
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub enabled: Option<bool>,
    pub headers: Option<serde_json::Value>,
}

/// One event to be delivered to one webhook.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = webhook_deliveries)]
pub struct WebhookDelivery {
    pub id: Uuid,
    pub webhook_id: Uuid,
    pub event_id: Uuid,
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

/// A finished attempt of a delivery.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = webhook_attempts)]
pub struct WebhookAttempt {
    pub delivery_id: Uuid,
    pub number: i32,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i32,
    pub status_code: Option<i32>,
    pub error: Option<String>,
    /// The exact request headers the attempt was sent (and signed) with,
    /// name -> value.
    pub request_headers: serde_json::Value,
    /// The first 1 KB of the receiver's answer (lossy UTF-8).
    pub response_body: Option<String>,
}

/// A dashboard team member, without the password hash.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = crate::schema::members)]
pub struct MemberRow {
    pub id: Uuid,
    pub org_id: Uuid,
    pub email: String,
    /// `owner`, `admin`, `member` or `viewer` (a CHECK constraint).
    pub role: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = crate::schema::members)]
pub struct NewMember<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    /// Lowercased and trimmed (`queries::members::normalize_email`).
    pub email: &'a str,
    pub password_hash: &'a str,
    pub role: &'a str,
}
