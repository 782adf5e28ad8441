//! Agent runs (scope `agents`): start one as a server-sent event stream,
//! list an agent's runs, read one with its steps.

use std::collections::HashMap;
use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::{HttpResponse, get, post, web};
use chrono::{DateTime, Utc};
use futures_util::stream;
use serde::Serialize;
use tokio::sync::mpsc::UnboundedReceiver;
use unigen_agents::run;
use unigen_agents::run::{RunCaller, RunEvent, RunRequest};
use unigen_core::domain::Scope;
use unigen_db::models::{AgentRun, AgentRunStep};
use unigen_db::queries::agent_runs::STATUSES;
use unigen_db::{DbError, queries};
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::metering::ConcurrencySlot;
use crate::routes::params::{json_body, not_found, path_id, query_limit};
use crate::state::AppState;

/// A comment line sent while a step takes long, so proxies keep the stream open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A run (without its steps in lists).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunView {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub session_id: String,
    /// `running`, `completed` or `failed`.
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepRecordView>>,
}

/// A recorded step: `step_type` `thinking`, `tool_call`, `tool_result`,
/// `response` or `error`; the tool fields on tool steps.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StepRecordView {
    pub step_number: i32,
    pub step_type: String,
    pub content: String,
    pub tool_name: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub tool_input: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub tool_output: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
}

impl From<AgentRunStep> for StepRecordView {
    fn from(step: AgentRunStep) -> Self {
        Self {
            step_number: step.step_number,
            step_type: step.step_type,
            content: step.content,
            tool_name: step.tool_name,
            tool_input: step.tool_input,
            tool_output: step.tool_output,
            created_at: step.created_at,
        }
    }
}

impl RunView {
    fn new(run: AgentRun, steps: Option<Vec<AgentRunStep>>) -> Self {
        Self {
            id: run.id,
            agent_id: run.agent_id,
            session_id: run.session_id,
            status: run.status,
            input: run.input,
            output: run.output,
            error_message: run.error_message,
            total_steps: run.total_steps,
            tokens_used: run.tokens_used,
            credits_used: run.credits_used,
            duration_ms: run.duration_ms,
            created_at: run.created_at,
            completed_at: run.completed_at,
            steps: steps.map(|steps| steps.into_iter().map(StepRecordView::from).collect()),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunEnvelope {
    pub run: RunView,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunList {
    pub runs: Vec<RunView>,
}

/// The stream's `data:` frames, with keep-alive comments between slow steps;
/// it ends after `done` or `error`.
fn event_frames(
    events: UnboundedReceiver<RunEvent>,
) -> impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> {
    stream::unfold(Some(events), |events| async move {
        let mut events = events?;
        let frame = tokio::select! {
            event = events.recv() => match event {
                Some(event) => {
                    let last = matches!(event, RunEvent::Done { .. } | RunEvent::Error { .. });
                    let json = serde_json::to_string(&event).unwrap_or_default();
                    let frame = Bytes::from(format!("data: {json}\n\n"));
                    return Some((Ok(frame), (!last).then_some(events)));
                }
                None => return None,
            },
            () = tokio::time::sleep(KEEP_ALIVE) => Bytes::from_static(b": keep-alive\n\n"),
        };
        Some((Ok(frame), Some(events)))
    })
}

/// Body of `POST /agents/{id}/run`, as documented (the handler reads a
/// [`RunRequest`]).
#[derive(utoipa::ToSchema)]
#[schema(as = RunRequest)]
#[allow(dead_code)]
pub struct RunRequestDoc {
    /// 1 to 10,000 characters, not only spaces.
    #[schema(min_length = 1, max_length = 10000, pattern = "\\S")]
    pub input: String,
    /// Files or images the input refers to: `{type, url, name}`; images are
    /// shown to vision-capable models.
    pub attachments: Option<Vec<unigen_agents::run::Attachment>>,
    /// Earlier messages `{role, content}` (`user` or `assistant`) the
    /// client keeps itself.
    pub conversation_history: Option<Vec<unigen_agents::run::HistoryMessage>>,
    /// Groups runs into a conversation: an agent with `memory_enabled` sees
    /// the session's earlier exchanges. Default: a new session.
    #[schema(min_length = 1, pattern = "\\S")]
    pub session_id: Option<String>,
}

/// Run an agent; the response is a stream of `data: <json>` events:
/// `start`, `step`s, then `done` or `error`.
#[utoipa::path(
    tag = "agents",
    params(("id" = String, Path, description = "Agent (or template) id")),
    request_body(content = RunRequestDoc, content_type = "application/json"),
    responses(
        (status = 200, description = "`text/event-stream`: `start` {run_id, session_id}, `step` {run_id, step: {step_number, type, content, tool, tool_input, tool_output}}, then `done` {run_id, output, credits_used, tokens_used} or `error` {run_id, error}", body = String, content_type = "text/event-stream"),
        (status = 400, description = "input missing or longer than 10,000 characters, or an invalid field (`param` names it)", body = ErrorBody),
        (status = 402, description = "`quota_exceeded`: the agent_runs quota, the credits or the overage hard limit; `limit_reached`: more tools or iterations than the plan allows", body = ErrorBody),
        (status = 403, description = "Missing scope `agents`, or `not_available_on_plan`: agents not available on the plan", body = ErrorBody),
        (status = 404, description = "Agent not found", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
    ),
    security(("bearer" = ["agents"]))
)]
#[post("/agents/{id}/run")]
pub async fn run_agent(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Agents)?;
    let id = path_id("agent", &path)?;
    let request: RunRequest = json_body(&body)?;
    let input = request.validate()?;
    let agent = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::agents::find_visible(&mut conn, caller.org_id, id)
            .await?
            .ok_or_else(|| not_found("agent", &path))?
    };
    let slot = ConcurrencySlot::acquire(&state, &caller).await?;
    let who = RunCaller {
        org_id: caller.org_id,
        api_key_id: caller.key_id,
    };
    let (run_id, events) = run::start(&state.runs, agent, who, input, Box::new(slot)).await?;
    caller.effects.run_started(run_id);
    Ok(event_stream(event_frames(events)))
}

fn event_stream(
    frames: impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> + 'static,
) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(frames)
}

/// A finished run's stream again, from what was recorded: `start`, its
/// steps, then `done` or `error` (an `Idempotency-Key` retry of the run).
/// A run still going answers 409: its first request is still in progress.
pub async fn replay(
    state: &AppState,
    org_id: Uuid,
    run_id: Uuid,
) -> Result<HttpResponse, ApiError> {
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let Some(run) = queries::agent_runs::find_in_org(&mut conn, org_id, run_id).await? else {
        return Err(ApiError::NotFound(format!("run {run_id} no longer exists")));
    };
    let last = match run.status.as_str() {
        "completed" => RunEvent::Done {
            run_id,
            output: run.output.clone().unwrap_or_default(),
            credits_used: run.credits_used,
            tokens_used: run.tokens_used,
        },
        "failed" => RunEvent::Error {
            run_id,
            error: run.error_message.clone().unwrap_or_default(),
        },
        _ => return Err(ApiError::IdempotencyKeyInUse),
    };
    let steps = queries::agent_runs::steps(&mut conn, run_id).await?;
    let events = std::iter::once(RunEvent::Start {
        run_id,
        session_id: run.session_id.clone(),
    })
    .chain(steps.iter().map(|step| RunEvent::Step {
        run_id,
        step: step.into(),
    }))
    .chain(std::iter::once(last));
    let frames: Vec<Result<Bytes, actix_web::Error>> = events
        .map(|event| {
            let json = serde_json::to_string(&event).unwrap_or_default();
            Ok(Bytes::from(format!("data: {json}\n\n")))
        })
        .collect();
    Ok(event_stream(stream::iter(frames)))
}

/// The organization's runs of an agent, newest first.
#[utoipa::path(
    tag = "agents",
    params(
        ("id" = String, Path, description = "Agent id"),
        ("status" = Option<String>, Query, pattern = "^(running|completed|failed)$", description = "running, completed or failed"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "1 to 100, default 20"),
    ),
    responses(
        (status = 200, body = RunList),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = ["agents"]))
)]
#[get("/agents/{id}/runs")]
pub async fn list_runs(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Agents)?;
    let id = path_id("agent", &path)?;
    let status = match query.get("status") {
        None => None,
        Some(raw) if STATUSES.contains(&raw.as_str()) => Some(raw.as_str()),
        Some(raw) => {
            return Err(ApiError::BadRequest(format!(
                "status must be one of {}, got `{raw}`",
                STATUSES.join(", ")
            )));
        }
    };
    let limit = query_limit(&query, 20, 100)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    queries::agents::find_visible(&mut conn, caller.org_id, id)
        .await?
        .ok_or_else(|| not_found("agent", &path))?;
    let runs =
        queries::agent_runs::list_for_agent(&mut conn, caller.org_id, id, status, limit).await?;
    Ok(HttpResponse::Ok().json(RunList {
        runs: runs
            .into_iter()
            .map(|run| RunView::new(run, None))
            .collect(),
    }))
}

/// One run with its steps: `{run: {...}}`.
#[utoipa::path(
    tag = "agents",
    params(
        ("id" = String, Path, description = "Agent id"),
        ("run_id" = String, Path, description = "Run id"),
    ),
    responses(
        (status = 200, body = RunEnvelope),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, description = "Agent or run not found (another organization's included)", body = ErrorBody),
    ),
    security(("bearer" = ["agents"]))
)]
#[get("/agents/{id}/runs/{run_id}")]
pub async fn get_run(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Agents)?;
    let (raw_agent, raw_run) = path.into_inner();
    let agent_id = path_id("agent", &raw_agent)?;
    let run_id = path_id("run", &raw_run)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let run = queries::agent_runs::find_for_org(&mut conn, caller.org_id, agent_id, run_id)
        .await?
        .ok_or_else(|| not_found("run", &raw_run))?;
    let steps = queries::agent_runs::steps(&mut conn, run.id).await?;
    Ok(HttpResponse::Ok().json(RunEnvelope {
        run: RunView::new(run, Some(steps)),
    }))
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use unigen_agents::run::StepView;

    use super::*;

    #[tokio::test]
    async fn the_stream_frames_each_event_and_ends_after_done() {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let run_id = Uuid::nil();
        sender
            .send(RunEvent::Start {
                run_id,
                session_id: "s".into(),
            })
            .unwrap();
        sender
            .send(RunEvent::Step {
                run_id,
                step: StepView {
                    step_number: 1,
                    kind: "response".into(),
                    content: "hi".into(),
                    tool: None,
                    tool_input: None,
                    tool_output: None,
                },
            })
            .unwrap();
        sender
            .send(RunEvent::Done {
                run_id,
                output: "hi".into(),
                credits_used: 3,
                tokens_used: 10,
            })
            .unwrap();
        // Anything after `done` is never sent; the sender stays open.
        sender
            .send(RunEvent::Error {
                run_id,
                error: "late".into(),
            })
            .unwrap();
        let frames: Vec<String> = event_frames(receiver)
            .map(|frame| String::from_utf8(frame.unwrap().to_vec()).unwrap())
            .collect()
            .await;
        assert_eq!(frames.len(), 3);
        assert!(frames[0].starts_with("data: {\"type\":\"start\""));
        assert!(frames[1].contains("\"type\":\"step\""));
        assert!(frames[2].contains("\"type\":\"done\"") && frames[2].ends_with("\n\n"));
    }
}
