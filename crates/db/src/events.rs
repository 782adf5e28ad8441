//! Account events (the webhook payloads of the spec), built where the state
//! change happens and written to the outbox in the same transaction.

use chrono::Utc;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::models::{AgentRun, Event, Job, Plan};

use unigen_core::storage::{UrlSigner, present_files};

/// The kind of `POST /webhooks/{id}/test`; delivered only to that webhook.
pub const TEST_EVENT: &str = "webhook.test";

pub const GENERATION_STARTED: &str = "generation.started";
pub const GENERATION_COMPLETED: &str = "generation.completed";
pub const GENERATION_FAILED: &str = "generation.failed";
pub const SUBSCRIPTION_CREATED: &str = "subscription.created";
pub const SUBSCRIPTION_UPDATED: &str = "subscription.updated";
pub const AGENT_RUN_STARTED: &str = "agent.run.started";
pub const AGENT_RUN_COMPLETED: &str = "agent.run.completed";
pub const AGENT_RUN_FAILED: &str = "agent.run.failed";
// `credits.low`, `credits.depleted` and `overage.soft_limit_reached` are
// recorded by the settlement itself (`unigen_settle`, migration
// 2026-11-22-090000_billing_functions), in the charge's transaction.

fn event(org_id: Uuid, kind: &str, data: Value) -> Event {
    Event {
        id: Uuid::now_v7(),
        org_id,
        kind: kind.to_owned(),
        data,
        created_at: Utc::now(),
    }
}

// `generation.started` (`jobId`, `tool`, `model`) is recorded by the claim
// itself (`queries::jobs::claim_many_announcing`), from the claimed row.

/// `generation.completed`: `jobId`, `tool`, `model`, `outputUrl` (the first
/// output file, signed now), `durationMs`, `unitsUsed`, `unitType`.
pub fn generation_completed(
    job: &Job,
    output: &Value,
    duration_ms: i64,
    signer: &UrlSigner,
) -> Event {
    let (units, unit_type) = units_of(&job.tool, output);
    let presented = present_files(output, signer, Utc::now().timestamp(), job.org_id);
    event(
        job.org_id,
        GENERATION_COMPLETED,
        json!({
            "jobId": job.id,
            "tool": job.tool,
            "model": job.model,
            "outputUrl": first_url(&presented),
            "durationMs": duration_ms,
            "unitsUsed": units,
            "unitType": unit_type,
        }),
    )
}

/// `generation.failed`: `jobId`, `tool`, `model`, `errorMessage`.
pub fn generation_failed(
    org_id: Uuid,
    job_id: Uuid,
    tool: &str,
    model: &str,
    message: &str,
) -> Event {
    event(
        org_id,
        GENERATION_FAILED,
        json!({ "jobId": job_id, "tool": tool, "model": model, "errorMessage": message }),
    )
}

/// `webhook.test`: sent by `POST /webhooks/{id}/test` to that webhook only.
pub fn webhook_test(org_id: Uuid, webhook_id: Uuid) -> Event {
    event(
        org_id,
        TEST_EVENT,
        json!({
            "webhookId": webhook_id,
            "message": "A test event: your endpoint received and can verify this delivery.",
        }),
    )
}

/// `subscription.created` / `subscription.updated`: `subscriptionId` (the
/// organization: one subscription each), `planCode`, `planName`, `status`.
pub fn subscription(org_id: Uuid, plan: &Plan, kind: &str) -> Event {
    event(
        org_id,
        kind,
        json!({
            "subscriptionId": org_id,
            "planCode": plan.code,
            "planName": plan.name,
            "status": "active",
        }),
    )
}

/// The fields every `agent.run.*` event carries: `runId`, `agentId`,
/// `agentName`, `input`.
fn agent_run_data(run: &AgentRun, agent_name: &str) -> Value {
    json!({
        "runId": run.id,
        "agentId": run.agent_id,
        "agentName": agent_name,
        "input": run.input,
    })
}

/// `agent.run.started`.
pub fn agent_run_started(run: &AgentRun, agent_name: &str) -> Event {
    event(
        run.org_id,
        AGENT_RUN_STARTED,
        agent_run_data(run, agent_name),
    )
}

/// `agent.run.completed`: the started fields plus `output`, `totalSteps`,
/// `durationMs`, `unitsUsed` (one run) and `unitType` `agent_runs`.
pub fn agent_run_completed(run: &AgentRun, agent_name: &str) -> Event {
    let mut data = agent_run_data(run, agent_name);
    data["output"] = json!(run.output);
    data["totalSteps"] = json!(run.total_steps);
    data["durationMs"] = json!(run.duration_ms);
    data["unitsUsed"] = json!(1);
    data["unitType"] = json!("agent_runs");
    event(run.org_id, AGENT_RUN_COMPLETED, data)
}

/// `agent.run.failed`: the started fields plus `errorMessage`.
pub fn agent_run_failed(run: &AgentRun, agent_name: &str) -> Event {
    let mut data = agent_run_data(run, agent_name);
    data["errorMessage"] = json!(run.error_message);
    event(run.org_id, AGENT_RUN_FAILED, data)
}

/// What a finished job consumed, in its tool's unit.
pub fn units_of(tool: &str, output: &Value) -> (Value, &'static str) {
    match tool {
        "image" => (
            json!(output["images"].as_array().map_or(0, Vec::len)),
            "image_generations",
        ),
        "image_edit" => (json!(1), "image_edits"),
        "video" => (output["video"]["duration"].clone(), "video_seconds"),
        "music" => (json!(1), "music_tracks"),
        "tts" => (output["character_count"].clone(), "tts_chars"),
        "stt" => (output["duration"].clone(), "stt_seconds"),
        "responses" => (
            output["response"]["usage"]["total_tokens"].clone(),
            "chat_tokens",
        ),
        _ => (json!(0), "units"),
    }
}

/// The first URL in a presented output (images, video, audio, or none).
fn first_url(presented: &Value) -> Value {
    let candidates = [
        &presented["images"][0]["url"],
        &presented["video"]["url"],
        &presented["audio"]["url"],
        &presented["audio_url"],
    ];
    candidates
        .into_iter()
        .find(|v| v.is_string())
        .cloned()
        .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn units_and_urls_follow_each_tool_output_shape() {
        let signer = UrlSigner::new("s", "http://api", Duration::from_secs(60));
        let org = uuid::Uuid::now_v7();
        let cases = [
            (
                "image",
                json!({"images": [{"file": format!("{org}/j/0.png")}, {"file": format!("{org}/j/1.png")}]}),
                json!(2),
                "image_generations",
            ),
            (
                "video",
                json!({"video": {"file": format!("{org}/j/v.mp4"), "duration": 5.0}}),
                json!(5.0),
                "video_seconds",
            ),
            (
                "tts",
                json!({"audio_file": format!("{org}/j/s.mp3"), "character_count": 44}),
                json!(44),
                "tts_chars",
            ),
            (
                "stt",
                json!({"text": "hi", "duration": 2.5}),
                json!(2.5),
                "stt_seconds",
            ),
        ];
        for (tool, output, units, unit_type) in cases {
            assert_eq!(units_of(tool, &output), (units, unit_type), "{tool}");
            let url = first_url(&present_files(&output, &signer, 0, org));
            assert_eq!(url.is_string(), tool != "stt", "{tool}: {url}");
        }
    }
}
