//! Response shapes. Job rows keep file keys; URLs are signed here, when shown.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use unigen_core::domain::ModelTier;
use unigen_core::storage::{UrlSigner, present_files};
use unigen_db::models::Job;

/// A job: the union of the spec's representation A (jobs API) and B (status
/// schema), so clients written against either find their fields.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobView {
    pub id: String,
    pub org_id: String,
    /// The API key that created the job (unigen has no separate users).
    pub user_id: String,
    #[schema(example = "image")]
    pub tool: String,
    #[schema(example = "completed")]
    pub status: String,
    #[schema(minimum = 0, maximum = 100)]
    pub progress: i16,
    #[schema(value_type = Object)]
    pub input_params: Value,
    #[schema(value_type = Option<Object>)]
    pub output_data: Option<Value>,
    pub estimated_credits: i64,
    pub actual_credits: Option<i64>,
    pub error_message: Option<String>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub model: String,
    pub model_tier: String,
    /// Representation B: creation time, Unix seconds.
    pub created: i64,
    /// Representation B: completion time, Unix seconds.
    pub completed: Option<i64>,
    /// Representation B: what the job consumed, once finished.
    #[schema(value_type = Option<GenerationUsage>)]
    pub usage: Option<Value>,
    /// The request's `Cancel-After` deadline: unfinished by then, the job is
    /// cancelled (nothing charged). Null without one.
    pub cancel_after: Option<DateTime<Utc>>,
    /// The job's W3C trace id (32 hex digits) when tracing is on: the trace
    /// holds the request, the queue wait, the worker and the provider call
    /// (README, "Observability"). Null with tracing off.
    #[schema(example = "4bf92f3577b34da6a3ce929d0e0e4736")]
    pub trace_id: Option<String>,
}

impl JobView {
    pub fn new(job: &Job, signer: &UrlSigner, now: DateTime<Utc>) -> Self {
        let finished = job.completed_at.is_some();
        Self {
            id: job.id.to_string(),
            org_id: job.org_id.to_string(),
            user_id: job.api_key_id.to_string(),
            tool: job.tool.clone(),
            status: job.status.clone(),
            progress: job.progress,
            input_params: present_files(&job.input_params, signer, now.timestamp(), job.org_id),
            output_data: job
                .output_data
                .as_ref()
                .map(|o| present_files(o, signer, now.timestamp(), job.org_id)),
            estimated_credits: job.estimated_credits,
            actual_credits: job.actual_credits,
            error_message: job.error_message.clone(),
            created_at: job.created_at,
            started_at: job.started_at,
            completed_at: job.completed_at,
            model: job.model.clone(),
            model_tier: job.model_tier.clone(),
            created: job.created_at.timestamp(),
            completed: job.completed_at.map(|t| t.timestamp()),
            usage: finished.then(|| job_usage(job)),
            cancel_after: job.cancel_after,
            trace_id: job
                .trace_context
                .as_deref()
                .and_then(unigen_core::telemetry::propagation::trace_id),
        }
    }
}

/// The usage object of a finished job: credits, plus the tool's own counters
/// (and the tier's quota multiplier where the spec has one).
pub fn job_usage(job: &Job) -> Value {
    // Settled jobs carry the usage object the settlement computed (with the
    // bucket's remaining at that moment); the rest is derived.
    if let Some(settled) = &job.usage {
        return settled.clone();
    }
    let credits = job.actual_credits.unwrap_or(0);
    let mut usage = json!({ "credits_used": credits, "credits_breakdown": { "base": credits } });
    if job.status != "completed" {
        return usage;
    }
    let output = job.output_data.as_ref().unwrap_or(&Value::Null);
    let multiplier = job
        .model_tier
        .parse::<ModelTier>()
        .map_or(1.0, ModelTier::quota_multiplier);
    let counters = match job.tool.as_str() {
        "image" => json!({ "generations_used": output["images"].as_array().map_or(0, Vec::len) }),
        "image_edit" => json!({ "edits_used": 1, "quota_multiplier": multiplier }),
        "video" => json!({ "seconds_used": output["video"]["duration"] }),
        "tts" => json!({ "chars_used": output["character_count"], "quota_multiplier": multiplier }),
        "stt" => json!({ "seconds_used": output["duration"], "quota_multiplier": multiplier }),
        "music" => json!({ "tracks_used": 1, "quota_multiplier": multiplier }),
        "responses" => json!({ "tokens_used": output["response"]["usage"]["total_tokens"] }),
        _ => json!({}),
    };
    if let (Value::Object(usage), Value::Object(counters)) = (&mut usage, counters) {
        usage.extend(counters);
    }
    usage
}

/// A model's tier, as answers name it (`ModelTier` spelled as on the wire;
/// the core enum's derived schema does not see its serde names).
/// Documentation only.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum Tier {
    Fast,
    Standard,
    Premium,
}

/// The usage object of a generation (what `job_usage` builds): credits,
/// their parts, and the counters of the tool's quota bucket. The counters
/// present depend on the tool; `*_remaining` is `null` for an unlimited
/// bucket. Documentation only.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct GenerationUsage {
    /// Credits charged for the request.
    pub credits_used: i64,
    pub credits_breakdown: CreditsBreakdown,
    /// Images generated (`POST /images/generations`).
    #[schema(nullable = false)]
    pub generations_used: Option<i64>,
    /// What the period's image generation bucket has left.
    pub generations_remaining: Option<i64>,
    /// Edits made (`POST /images/edits`).
    #[schema(nullable = false)]
    pub edits_used: Option<i64>,
    pub edits_remaining: Option<i64>,
    /// Seconds of video produced or of audio transcribed.
    #[schema(nullable = false)]
    pub seconds_used: Option<f64>,
    pub seconds_remaining: Option<f64>,
    /// Characters of speech synthesised.
    #[schema(nullable = false)]
    pub chars_used: Option<i64>,
    pub chars_remaining: Option<i64>,
    /// Music tracks generated.
    #[schema(nullable = false)]
    pub tracks_used: Option<i64>,
    pub tracks_remaining: Option<i64>,
    /// The model tier's factor on the bucket (the bucket was charged
    /// used x multiplier); absent for image generations and video.
    #[schema(nullable = false)]
    pub quota_multiplier: Option<f64>,
}

/// Where a generation's credits came from. Documentation only.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct CreditsBreakdown {
    /// The credits of the request.
    pub base: i64,
    /// Taken from the period's included credits (once the job settled).
    #[schema(nullable = false)]
    pub included: Option<i64>,
    /// Taken from purchased credits.
    #[schema(nullable = false)]
    pub purchased: Option<i64>,
    /// Charged as overage.
    #[schema(nullable = false)]
    pub overage: Option<i64>,
}

/// `?async=true` answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AsyncJobCreated {
    pub id: String,
    #[schema(example = "pending")]
    pub status: String,
    pub created: i64,
    pub model: String,
    pub estimated_credits: i64,
}

impl From<&Job> for AsyncJobCreated {
    fn from(job: &Job) -> Self {
        Self {
            id: job.id.to_string(),
            status: job.status.clone(),
            created: job.created_at.timestamp(),
            model: job.model.clone(),
            estimated_credits: job.estimated_credits,
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ImageData {
    /// Signed URL of the image (`response_format` `url`, the default).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub url: Option<String>,
    /// The image itself, base64 (`response_format` `b64_json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub b64_json: Option<String>,
    pub revised_prompt: String,
    pub width: u32,
    pub height: u32,
}

/// Sync answer of `POST /images/generations`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ImageGenerationResponse {
    pub created: i64,
    pub data: Vec<ImageData>,
    pub model: String,
    #[schema(value_type = Tier)]
    pub model_tier: String,
    #[schema(value_type = GenerationUsage)]
    pub usage: Value,
}

impl ImageGenerationResponse {
    /// From a completed image job; `None` if its output is malformed.
    pub fn from_job(job: &Job, signer: &UrlSigner, now: DateTime<Utc>) -> Option<Self> {
        let prompt = job.input_params["prompt"].as_str().unwrap_or_default();
        let output = present_files(
            job.output_data.as_ref()?,
            signer,
            now.timestamp(),
            job.org_id,
        );
        let data = output["images"]
            .as_array()?
            .iter()
            .map(|image| {
                Some(ImageData {
                    url: Some(image["url"].as_str()?.to_owned()),
                    b64_json: None,
                    revised_prompt: prompt.to_owned(),
                    width: u32::try_from(image["width"].as_u64()?).ok()?,
                    height: u32::try_from(image["height"].as_u64()?).ok()?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            created: job.created_at.timestamp(),
            data,
            model: job.model.clone(),
            model_tier: job.model_tier.clone(),
            usage: job_usage(job),
        })
    }

    /// `response_format=b64_json`: each image carries its bytes instead of
    /// its URL (`encoded` in the order of `data`).
    pub fn with_base64(mut self, encoded: Vec<String>) -> Self {
        for (image, b64) in self.data.iter_mut().zip(encoded) {
            image.url = None;
            image.b64_json = Some(b64);
        }
        self
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobList {
    pub jobs: Vec<JobView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CancelResponse {
    pub success: bool,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use uuid::Uuid;

    use super::*;

    fn completed_job() -> Job {
        let now = Utc::now();
        let org_id = Uuid::now_v7();
        Job {
            id: Uuid::now_v7(),
            org_id,
            api_key_id: Uuid::now_v7(),
            tool: "image".into(),
            status: "completed".into(),
            progress: 100,
            model: "local/procedural-v1".into(),
            model_tier: "fast".into(),
            input_params: json!({"prompt": "a cat", "n": 1}),
            output_data: Some(
                json!({"images": [{"file": format!("{org_id}/j/0.png"), "width": 512, "height": 512}]}),
            ),
            estimated_credits: 1,
            actual_credits: Some(1),
            error_message: None,
            attempt: 1,
            enqueued_at: Some(now),
            worker_id: Some("w".into()),
            lease_expires_at: None,
            created_at: now,
            started_at: Some(now),
            completed_at: Some(now),
            usage: None,
            cancel_after: None,
            trace_context: None,
        }
    }

    #[test]
    fn job_json_carries_both_representations_and_signed_urls() {
        let signer = UrlSigner::new("s", "http://api", Duration::from_secs(60));
        let job = completed_job();
        let value = serde_json::to_value(JobView::new(&job, &signer, Utc::now())).unwrap();
        for field in [
            "id",
            "orgId",
            "userId",
            "tool",
            "status",
            "progress",
            "inputParams",
            "outputData",
            "estimatedCredits",
            "actualCredits",
            "errorMessage",
            "createdAt",
            "startedAt",
            "completedAt",
            "model",
            "modelTier",
            "created",
            "completed",
            "usage",
        ] {
            assert!(value.get(field).is_some(), "missing {field}");
        }
        assert_eq!(value["created"], job.created_at.timestamp());
        let url = value["outputData"]["images"][0]["url"].as_str().unwrap();
        assert!(url.starts_with(&format!("http://api/files/{}/j/0.png?expires=", job.org_id)));
        assert!(value["outputData"]["images"][0].get("file").is_none());
        assert_eq!(value["usage"]["generations_used"], 1);
    }

    #[test]
    fn pending_jobs_have_null_results_and_no_usage() {
        let signer = UrlSigner::new("s", "http://api", Duration::from_secs(60));
        let mut job = completed_job();
        job.status = "pending".into();
        job.output_data = None;
        job.actual_credits = None;
        job.completed_at = None;
        let value = serde_json::to_value(JobView::new(&job, &signer, Utc::now())).unwrap();
        assert!(
            value["outputData"].is_null()
                && value["usage"].is_null()
                && value["completed"].is_null()
        );
    }

    #[test]
    fn image_response_lists_each_image_with_the_prompt() {
        let signer = UrlSigner::new("s", "http://api", Duration::from_secs(60));
        let response =
            ImageGenerationResponse::from_job(&completed_job(), &signer, Utc::now()).unwrap();
        assert_eq!(response.data.len(), 1);
        assert_eq!(
            (
                response.data[0].width,
                response.data[0].revised_prompt.as_str()
            ),
            (512, "a cat")
        );
        let json = serde_json::to_value(&response).unwrap();
        assert!(json["data"][0]["url"].is_string() && json["data"][0].get("b64_json").is_none());
        let json = serde_json::to_value(response.with_base64(vec!["iVBORw0K".into()])).unwrap();
        assert_eq!(json["data"][0]["b64_json"], "iVBORw0K");
        assert!(json["data"][0].get("url").is_none(), "{json}");
        assert_eq!(json["data"][0]["width"], 512);
    }
}
