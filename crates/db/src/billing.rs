//! Metering rules: quota buckets, tier multipliers, estimates and charges,
//! and the usage object a response reports. The SQL that applies them
//! atomically lives in `db::queries::billing`.

use chrono::Utc;
use serde_json::{Value, json};

use crate::models::{AgentRun, Job, Plan, UsageRecord};
pub use unigen_core::domain::Bucket;
use unigen_core::domain::{ModelTier, Tool};

/// The quota pseudo-bucket of credits, named in 402 messages and events.
pub const CREDITS: &str = "credits";

impl Plan {
    /// The plan's limit in units; `None` is unlimited, `Some(0)` not on the plan.
    pub fn limit(&self, bucket: Bucket) -> Option<i64> {
        let plan = self;
        match bucket {
            Bucket::ChatTokens => plan.chat_tokens,
            Bucket::ImageGenerations => plan.image_generations,
            Bucket::VideoSeconds => plan.video_seconds,
            Bucket::SttSeconds => plan.stt_seconds,
            Bucket::TtsChars => plan.tts_chars,
            Bucket::ImageEdits => plan.image_edits,
            Bucket::MusicTracks => plan.music_tracks,
            Bucket::AgentRuns => plan.agent_runs,
        }
    }
}

/// Units in thousandths, as buckets store them; rounded up so a fraction
/// of a unit is never free.
pub fn to_milli(units: f64, multiplier: f64) -> i64 {
    let exact = units.max(0.0) * multiplier * 1000.0;
    let nearest = exact.round();
    // Float noise (1.1 * 1000 = 1100.0000000000002) must not cost a unit.
    if (exact - nearest).abs() < 1e-6 {
        nearest as i64
    } else {
        exact.ceil() as i64
    }
}

/// Thousandths back to units for reports.
pub fn from_milli(milli: i64) -> f64 {
    milli as f64 / 1000.0
}

/// What a request may cost, held at submission.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub credits: i64,
    /// The bucket and the quota units (multiplier applied, thousandths).
    pub bucket: Option<(Bucket, i64)>,
}

/// What a request actually cost, charged at settlement.
#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    pub credits: i64,
    pub bucket_milli: i64,
}

/// Refusals of the metering rules (all 402).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("Quota exceeded for {bucket}")]
    Quota { bucket: String, remaining: f64 },
    #[error("Overage hard limit reached: {hard_limit} overage credits this billing period")]
    HardLimit { hard_limit: i64 },
}

impl Refusal {
    pub fn remaining(&self) -> f64 {
        match self {
            Refusal::Quota { remaining, .. } => *remaining,
            Refusal::HardLimit { .. } => 0.0,
        }
    }
}

/// The outcome of a settlement, for the response's usage object and headers.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    pub credits: i64,
    pub from_included: i64,
    pub from_purchased: i64,
    pub overage: i64,
    pub bucket: Option<BucketReport>,
    pub account: AccountSnapshot,
    /// Billing events were recorded: wake webhook delivery after commit.
    pub events_recorded: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BucketReport {
    pub bucket: Bucket,
    pub used_milli: i64,
    /// `None`: unlimited.
    pub remaining_milli: Option<i64>,
    pub multiplier: f64,
}

/// Balances after a charge, for the `X-Credits-*`/`X-Overage-*` headers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AccountSnapshot {
    pub credits_remaining: i64,
    pub overage_enabled: bool,
    pub overage_credits: i64,
    /// USD per credit in millionths; `None` when the plan has no overage.
    pub overage_rate_micros: Option<i64>,
}

impl AccountSnapshot {
    pub fn overage_active(&self) -> bool {
        self.overage_credits > 0
    }

    pub fn overage_cost_usd(&self) -> f64 {
        usd(self.overage_credits * self.overage_rate_micros.unwrap_or(0))
    }
}

pub fn usd(micros: i64) -> f64 {
    micros as f64 / 1_000_000.0
}

/// The spec's usage object for a generation tool: credits, their parts, and
/// the tool's bucket counters: `*_used` in the request's own units (images,
/// characters, seconds, tracks), `quota_multiplier` the tier's factor (the
/// bucket was charged used x multiplier), `*_remaining` what the period's
/// bucket has left (whole-unit buckets round down).
pub fn usage_object(settled: &Settled) -> Value {
    let mut usage = json!({
        "credits_used": settled.credits,
        "credits_breakdown": {
            "base": settled.credits,
            "included": settled.from_included,
            "purchased": settled.from_purchased,
            "overage": settled.overage,
        },
    });
    if let Some(report) = &settled.bucket {
        let used = from_milli(report.used_milli) / report.multiplier;
        let remaining = report.remaining_milli.map(from_milli);
        let (used_key, remaining_key, whole) = match report.bucket {
            Bucket::ImageGenerations => ("generations_used", "generations_remaining", true),
            Bucket::ImageEdits => ("edits_used", "edits_remaining", true),
            Bucket::MusicTracks => ("tracks_used", "tracks_remaining", true),
            Bucket::TtsChars => ("chars_used", "chars_remaining", true),
            Bucket::SttSeconds | Bucket::VideoSeconds => {
                ("seconds_used", "seconds_remaining", false)
            }
            Bucket::ChatTokens => ("tokens_used", "tokens_remaining", true),
            Bucket::AgentRuns => ("runs_used", "runs_remaining", true),
        };
        usage[used_key] = if whole {
            json!(used.round() as i64)
        } else {
            json!((used * 1000.0).round() / 1000.0)
        };
        // Whole-unit counters round what is left down: a fraction is not usable.
        usage[remaining_key] = match remaining {
            Some(v) if whole => json!(v.floor() as i64),
            Some(v) => json!(v),
            None => Value::Null,
        };
        if report.bucket != Bucket::ImageGenerations && report.bucket != Bucket::VideoSeconds {
            usage["quota_multiplier"] = json!(report.multiplier);
        }
    }
    usage
}

/// Credits of a completion: per 1,000 tokens at the model's prompt and
/// completion prices, rounded up.
pub fn chat_credits(
    prompt_tokens: u32,
    completion_tokens: u32,
    model: &unigen_core::config::ModelEntry,
) -> i64 {
    let completion_price = model
        .completion_credits_per_unit
        .unwrap_or(model.credits_per_unit);
    let cost = i64::from(prompt_tokens) * model.credits_per_unit
        + i64::from(completion_tokens) * completion_price;
    (cost + 999) / 1000
}

/// The endpoint a tool's jobs are created through, as usage records name it.
pub fn endpoint_of_tool(tool: Tool) -> &'static str {
    match tool {
        Tool::Image => "/v1/images/generations",
        Tool::ImageEdit => "/v1/images/edits",
        Tool::Video => "/v1/videos/generations",
        Tool::Music => "/v1/music/generations",
        Tool::Tts => "/v1/audio/speech",
        Tool::Stt => "/v1/audio/transcriptions",
        Tool::Responses => "/v1/responses",
    }
}

/// The endpoint runs are recorded under in usage analytics.
pub const RUN_ENDPOINT: &str = "/v1/agents/run";

/// A run's usage record (`credits` is set by the settlement).
pub fn run_usage_record(
    run: &AgentRun,
    model: &str,
    status: &str,
    tools_used: Vec<String>,
    (prompt_tokens, completion_tokens): (u32, u32),
) -> UsageRecord {
    let now = Utc::now();
    UsageRecord {
        id: run.id,
        org_id: run.org_id,
        api_key_id: run.api_key_id,
        endpoint: RUN_ENDPOINT.to_owned(),
        method: "POST".to_owned(),
        model: model.to_owned(),
        credits: 0,
        latency_ms: (now - run.created_at).num_milliseconds().max(0),
        status: status.to_owned(),
        tools_used,
        prompt_tokens: i64::from(prompt_tokens),
        completion_tokens: i64::from(completion_tokens),
        total_tokens: i64::from(prompt_tokens) + i64::from(completion_tokens),
        created_at: now,
    }
}

/// The usage record of a finished job (`credits` is set by the settlement).
pub fn job_usage_record(job: &Job, status: &str) -> UsageRecord {
    let now = Utc::now();
    let tool = job.tool.parse::<Tool>().ok();
    UsageRecord {
        id: job.id,
        org_id: job.org_id,
        api_key_id: Some(job.api_key_id),
        endpoint: tool.map_or("/v1/jobs", endpoint_of_tool).to_owned(),
        method: "POST".to_owned(),
        model: job.model.clone(),
        credits: 0,
        latency_ms: (now - job.created_at).num_milliseconds().max(0),
        status: status.to_owned(),
        tools_used: tool
            .map(|t| vec![t.as_str().to_owned()])
            .unwrap_or_default(),
        prompt_tokens: 0,
        completion_tokens: 0,
        total_tokens: 0,
        created_at: now,
    }
}

/// A completed job's usage record; a background response's carries the
/// tokens its answer reports, as the same request answered in place does.
pub fn completed_job_usage_record(job: &Job, output: &Value) -> UsageRecord {
    let mut record = job_usage_record(job, "success");
    if job.tool == Tool::Responses.as_str() {
        let usage = &output["response"]["usage"];
        let count = |key: &str| usage[key].as_i64().unwrap_or(0);
        record.prompt_tokens = count("input_tokens");
        record.completion_tokens = count("output_tokens");
        record.total_tokens = record.prompt_tokens + record.completion_tokens;
        record.tools_used = Vec::new();
    }
    record
}

/// What a completed job is charged: its actual credits and its measured
/// units in the tool's bucket, with the tier's multiplier.
pub fn job_charge(job: &Job, output: &Value, actual_credits: i64) -> (Charge, f64) {
    let Ok(tool) = job.tool.parse::<Tool>() else {
        return (
            Charge {
                credits: actual_credits,
                bucket_milli: 0,
            },
            1.0,
        );
    };
    let bucket = Bucket::for_tool(tool);
    let multiplier = job
        .model_tier
        .parse::<ModelTier>()
        .map_or(1.0, |tier| bucket.multiplier(tier));
    let units = crate::events::units_of(&job.tool, output)
        .0
        .as_f64()
        .unwrap_or(0.0);
    (
        Charge {
            credits: actual_credits,
            bucket_milli: to_milli(units, multiplier),
        },
        multiplier,
    )
}

/// Who made a sync request (or a batch line, metered as the same request)
/// and on what, for its usage record.
pub struct RequestMeta<'a> {
    /// The record's id (the request's reservation id, or a fresh one).
    pub id: uuid::Uuid,
    pub org_id: uuid::Uuid,
    pub api_key_id: Option<uuid::Uuid>,
    pub endpoint: &'a str,
    pub model: &'a str,
    pub started: std::time::Instant,
}

impl RequestMeta<'_> {
    /// The request's usage record (`credits` is set by the settlement).
    pub fn usage_record(
        &self,
        status: &str,
        (prompt_tokens, completion_tokens): (i64, i64),
        tools_used: Vec<String>,
    ) -> UsageRecord {
        UsageRecord {
            id: self.id,
            org_id: self.org_id,
            api_key_id: self.api_key_id,
            endpoint: self.endpoint.to_owned(),
            method: "POST".to_owned(),
            model: self.model.to_owned(),
            credits: 0,
            latency_ms: self.started.elapsed().as_millis() as i64,
            status: status.to_owned(),
            tools_used,
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            created_at: Utc::now(),
        }
    }
}

/// What a chat completion holds before it runs (the sync route and a batch
/// line alike): its prompt and `max_tokens` per choice at the model's
/// prices, and as many tokens of the chat bucket at the tier's multiplier
/// (the multiplier is the second value).
pub fn chat_hold(
    prompt_tokens: u32,
    max_tokens: u32,
    choices: u32,
    model: &unigen_core::config::ModelEntry,
) -> (Estimate, f64) {
    let multiplier = Bucket::ChatTokens.multiplier(model.tier);
    let completion = max_tokens.saturating_mul(choices.max(1));
    let estimate = Estimate {
        credits: chat_credits(prompt_tokens, completion, model),
        bucket: Some((
            Bucket::ChatTokens,
            to_milli(
                f64::from(prompt_tokens.saturating_add(completion)),
                multiplier,
            ),
        )),
    };
    (estimate, multiplier)
}

/// What a chat completion is charged once answered (see [`chat_hold`]).
pub fn chat_charge(
    prompt_tokens: u32,
    completion_tokens: u32,
    multiplier: f64,
    model: &unigen_core::config::ModelEntry,
) -> Charge {
    Charge {
        credits: chat_credits(prompt_tokens, completion_tokens, model),
        bucket_milli: to_milli(f64::from(prompt_tokens + completion_tokens), multiplier),
    }
}

/// Credits of embeddings: per 1,000 input tokens, rounded up (no bucket).
pub fn embedding_credits(tokens: u32, model: &unigen_core::config::ModelEntry) -> i64 {
    (i64::from(tokens) * model.credits_per_unit + 999) / 1000
}

/// An embeddings answer's `usage` object (the sync route and a batch line
/// alike): the input tokens and the credits they cost.
pub fn embedding_usage(tokens: u32, credits: i64) -> Value {
    json!({
        "prompt_tokens": tokens,
        "total_tokens": tokens,
        "credits_used": credits,
        "credits_breakdown": { "tokens": credits },
    })
}

/// A chat answer's `usage` object, as the sync route gives it: tokens,
/// credits, and what the token quota has left after the charge.
pub fn chat_usage(prompt_tokens: u32, completion_tokens: u32, settled: Option<&Settled>) -> Value {
    chat_usage_of(
        prompt_tokens,
        completion_tokens,
        settled.map(|s| (s.credits, s.bucket.as_ref())),
    )
}

/// [`chat_usage`] from the credits charged and the chat bucket's report,
/// for a charge known otherwise than as a [`Settled`] (the API's projected
/// charges); `None`: nothing was charged (yet).
pub fn chat_usage_of(
    prompt_tokens: u32,
    completion_tokens: u32,
    charged: Option<(i64, Option<&BucketReport>)>,
) -> Value {
    let credits = charged.map_or(0, |(credits, _)| credits);
    let mut usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "credits_used": credits,
        "credits_breakdown": { "tokens": credits },
    });
    if let Some(report) = charged.and_then(|(_, bucket)| bucket) {
        usage["quota_multiplier"] = json!(report.multiplier);
        usage["tokens_remaining_estimate"] = match report.remaining_milli {
            Some(milli) => json!((milli as f64 / 1000.0 / report.multiplier).floor() as i64),
            None => Value::Null,
        };
    }
    usage
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milli_units_are_exact_for_tier_multipliers_and_round_up_fractions() {
        assert_eq!(to_milli(4.0, 1.25), 5000);
        assert_eq!(to_milli(100.0, 1.5), 150_000);
        assert_eq!(to_milli(2.5, 1.25), 3125);
        assert_eq!(to_milli(0.0001, 1.0), 1);
        assert_eq!(to_milli(-3.0, 1.0), 0);
    }

    #[test]
    fn multipliers_follow_the_spec_per_bucket() {
        assert_eq!(Bucket::TtsChars.multiplier(ModelTier::Standard), 1.25);
        assert_eq!(Bucket::MusicTracks.multiplier(ModelTier::Premium), 1.5);
        assert_eq!(Bucket::ChatTokens.multiplier(ModelTier::Premium), 2.0);
        assert_eq!(Bucket::ImageGenerations.multiplier(ModelTier::Premium), 1.0);
    }

    #[test]
    fn chat_usage_reports_tokens_credits_and_what_the_token_quota_has_left() {
        let report = BucketReport {
            bucket: Bucket::ChatTokens,
            used_milli: 60_000,
            remaining_milli: Some(1_000_500),
            multiplier: 2.0,
        };
        let usage = chat_usage_of(10, 20, Some((3, Some(&report))));
        assert_eq!(usage["total_tokens"], 30);
        assert_eq!(usage["credits_used"], 3);
        assert_eq!(usage["credits_breakdown"]["tokens"], 3);
        assert_eq!(usage["quota_multiplier"], 2.0);
        // 1,000.5 units at x2 leave 500 whole tokens.
        assert_eq!(usage["tokens_remaining_estimate"], 500);
        let nothing = chat_usage_of(10, 20, None);
        assert_eq!(nothing["credits_used"], 0);
        assert!(nothing.get("quota_multiplier").is_none());
        assert_eq!(
            embedding_usage(7, 1),
            json!({"prompt_tokens": 7, "total_tokens": 7, "credits_used": 1,
                   "credits_breakdown": {"tokens": 1}})
        );
    }

    #[test]
    fn usage_objects_name_each_tools_counters() {
        let settled = Settled {
            credits: 12,
            from_included: 10,
            from_purchased: 2,
            overage: 0,
            bucket: Some(BucketReport {
                bucket: Bucket::TtsChars,
                used_milli: 125_000,
                remaining_milli: Some(199_874_500),
                multiplier: 1.25,
            }),
            account: AccountSnapshot::default(),
            events_recorded: false,
        };
        let usage = usage_object(&settled);
        assert_eq!(usage["credits_used"], 12);
        assert_eq!(usage["credits_breakdown"]["purchased"], 2);
        assert_eq!(usage["chars_used"], 100);
        assert_eq!(usage["chars_remaining"], 199_874);
        assert_eq!(usage["quota_multiplier"], 1.25);
    }
}
