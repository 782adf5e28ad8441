//! An agent run: the model decides tool calls, the run executes them and
//! feeds the results back, until a final answer or `max_iterations`.
//!
//! - Every step is written to PostgreSQL, then sent to the client's stream;
//!   the loop runs in a task of its own, so a client that goes away loses
//!   nothing: the run finishes and is readable afterwards.
//! - Metering: the run's base price and its `agent_runs` unit are reserved
//!   when it starts (a refusal is the request's 402); each model turn and
//!   each tool call grows the reservation before it happens, so a run stops
//!   with an error step instead of spending credits the organization lacks.
//!   The end settles the actual cost in the transaction that ends the run.
//! - A completed run costs 2 credits, plus its tokens at the agent model's
//!   chat prices, plus each successful tool call's price. A failed run is
//!   charged only what it consumed (tokens, successful tool calls), never the
//!   base price or the `agent_runs` unit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use chrono::Utc;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, Span};
use uuid::Uuid;

use super::tools::{ToolBox, ToolScope, reserve_estimate, tool_specs};
use super::{AgentLimits, PlanRefusal};
use unigen_core::config::{AgentSettings, ModelEntry};
use unigen_core::telemetry::{self, semconv, spans};
use unigen_core::{ProviderError, ValidationError};
use unigen_db::billing::{Bucket, Charge, Estimate, Refusal, chat_credits};
use unigen_db::models::{Agent, AgentRun, AgentRunStep, NewAgentRun};
use unigen_db::notify::Notifier;
use unigen_db::queries::agent_runs;
use unigen_db::queries::agent_runs::RunEnd;
use unigen_db::{DbError, PgPool, events, queries};
use unigen_knowledge::retrieve::{Embedder, KnowledgeExcerpt, RetrievalError, relevant_excerpts};
use unigen_providers::Catalogue;
use unigen_providers::chat::{ChatMessage, MessageContent, count_prompt_tokens, count_tokens};
use unigen_providers::llm::{ChatModels, ToolCall, TurnRequest, tool_result_message};

/// The spec's price of one run, on top of tokens and tools.
pub const RUN_BASE_CREDITS: i64 = 2;
pub const MAX_INPUT_CHARS: usize = 10_000;
pub const MAX_SESSION_ID_CHARS: usize = 200;
pub const MAX_HISTORY_MESSAGES: usize = 50;
pub const MAX_ATTACHMENTS: usize = 10;
/// Images a vision model is shown, as for chat messages.
const MAX_IMAGES: usize = 4;
pub use unigen_db::billing::{RUN_ENDPOINT, run_usage_record as usage_record};
pub use unigen_db::queries::agent_runs::ABANDONED_MARGIN;

/// Body of `POST /agents/{id}/run`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct RunRequest {
    /// Required, at most 10,000 characters.
    pub input: Option<String>,
    /// Files or images the input refers to: `{type, url, name}`; images are
    /// shown to vision-capable models.
    pub attachments: Option<Vec<Attachment>>,
    /// Earlier messages `{role, content}` (`user` or `assistant`) the
    /// client keeps itself.
    pub conversation_history: Option<Vec<HistoryMessage>>,
    /// Groups runs into a conversation: an agent with `memory_enabled` sees
    /// the session's earlier exchanges. Default: a new session.
    pub session_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct Attachment {
    /// `image`, `document`, `file` or `link`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// An http(s) URL.
    pub url: Option<String>,
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct HistoryMessage {
    pub role: Option<String>,
    pub content: Option<String>,
}

const ATTACHMENT_TYPES: [&str; 4] = ["image", "document", "file", "link"];

/// A validated run request.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInput {
    pub input: String,
    pub session_id: String,
    pub history: Vec<(String, String)>,
    /// `(type, url, name)`.
    pub attachments: Vec<(String, String, String)>,
}

impl RunRequest {
    pub fn validate(&self) -> Result<RunInput, ValidationError> {
        let input = self.input.as_deref().unwrap_or_default().trim();
        if input.is_empty() {
            return Err(ValidationError::new("input", "input is required"));
        }
        if input.chars().count() > MAX_INPUT_CHARS {
            return Err(ValidationError::new(
                "input",
                format!("input must be at most {MAX_INPUT_CHARS} characters"),
            ));
        }
        let session_id = match self.session_id.as_deref().map(str::trim) {
            None => Uuid::now_v7().to_string(),
            Some("") => {
                return Err(ValidationError::new(
                    "session_id",
                    "session_id must not be empty",
                ));
            }
            Some(id) if id.chars().count() > MAX_SESSION_ID_CHARS => {
                return Err(ValidationError::new(
                    "session_id",
                    format!("session_id must be at most {MAX_SESSION_ID_CHARS} characters"),
                ));
            }
            Some(id) => id.to_owned(),
        };
        let history = self.conversation_history.as_deref().unwrap_or_default();
        if history.len() > MAX_HISTORY_MESSAGES {
            return Err(ValidationError::new(
                "conversation_history",
                format!("conversation_history may hold at most {MAX_HISTORY_MESSAGES} messages"),
            ));
        }
        let history = history
            .iter()
            .enumerate()
            .map(|(i, message)| {
                let role = message.role.as_deref().unwrap_or_default();
                if role != "user" && role != "assistant" {
                    return Err(ValidationError::new(
                        "conversation_history",
                        format!("conversation_history[{i}].role must be user or assistant"),
                    ));
                }
                let content = message.content.as_deref().unwrap_or_default();
                if content.chars().count() > MAX_INPUT_CHARS {
                    return Err(ValidationError::new(
                        "conversation_history",
                        format!(
                            "conversation_history[{i}].content must be at most {MAX_INPUT_CHARS} characters"
                        ),
                    ));
                }
                Ok((role.to_owned(), content.to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let attachments = self.attachments.as_deref().unwrap_or_default();
        if attachments.len() > MAX_ATTACHMENTS {
            return Err(ValidationError::new(
                "attachments",
                format!("attachments may hold at most {MAX_ATTACHMENTS} items"),
            ));
        }
        let attachments = attachments
            .iter()
            .enumerate()
            .map(|(i, attachment)| {
                let kind = attachment.kind.as_deref().unwrap_or("file");
                if !ATTACHMENT_TYPES.contains(&kind) {
                    return Err(ValidationError::new(
                        "attachments",
                        format!(
                            "attachments[{i}].type must be one of {}",
                            ATTACHMENT_TYPES.join(", ")
                        ),
                    ));
                }
                let url = attachment.url.as_deref().unwrap_or_default().trim();
                let parsed = url::Url::parse(url).ok();
                if !parsed.is_some_and(|u| u.scheme() == "https" || u.scheme() == "http") {
                    return Err(ValidationError::new(
                        "attachments",
                        format!("attachments[{i}].url must be an http(s) URL"),
                    ));
                }
                let name = attachment.name.as_deref().unwrap_or_default().trim();
                let name: String = if name.is_empty() {
                    url.rsplit('/')
                        .next()
                        .unwrap_or(url)
                        .chars()
                        .take(200)
                        .collect()
                } else {
                    name.chars().take(200).collect()
                };
                Ok((kind.to_owned(), url.to_owned(), name))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RunInput {
            input: input.to_owned(),
            session_id,
            history,
            attachments,
        })
    }
}

/// One event of the run stream (`data: <json>` lines).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    Start {
        run_id: Uuid,
        session_id: String,
    },
    Step {
        run_id: Uuid,
        step: StepView,
    },
    Done {
        run_id: Uuid,
        output: String,
        credits_used: i64,
        tokens_used: i64,
    },
    Error {
        run_id: Uuid,
        error: String,
    },
}

/// A step as the stream shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepView {
    pub step_number: i32,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_output: Option<Value>,
}

impl From<&AgentRunStep> for StepView {
    fn from(step: &AgentRunStep) -> Self {
        Self {
            step_number: step.step_number,
            kind: step.step_type.clone(),
            content: step.content.clone(),
            tool: step.tool_name.clone(),
            tool_input: step.tool_input.clone(),
            tool_output: step.tool_output.clone(),
        }
    }
}

/// What runs need, built once per API process.
#[derive(Clone)]
pub struct RunEnv {
    pub pool: PgPool,
    pub notifier: Notifier,
    pub catalogue: Arc<Catalogue>,
    pub chat: ChatModels,
    pub tools: ToolBox,
    pub embedder: Embedder,
    pub settings: AgentSettings,
    /// The runs in progress: a stopping API gives them its grace period.
    pub running: TaskTracker,
}

/// Why a run could not start (nothing was written or reserved).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Plan(#[from] PlanRefusal),
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<diesel::result::Error> for StartError {
    fn from(err: diesel::result::Error) -> Self {
        StartError::Db(err.into())
    }
}

/// Who runs the agent.
#[derive(Debug, Clone, Copy)]
pub struct RunCaller {
    pub org_id: Uuid,
    pub api_key_id: Uuid,
}

/// Checks the plan, reserves the base price and one `agent_runs` unit,
/// records the run and its `agent.run.started` event, then runs it in a
/// task of its own. Returns the run's id and its stream, which starts with
/// `start`; `guard` is held until the run ends (e.g. the request's
/// concurrency slot).
pub async fn start(
    env: &RunEnv,
    agent: Agent,
    caller: RunCaller,
    request: RunInput,
    guard: Box<dyn Send>,
) -> Result<(Uuid, mpsc::UnboundedReceiver<RunEvent>), StartError> {
    let model = env.catalogue.get(&agent.model).cloned().ok_or_else(|| {
        ValidationError::new(
            "model",
            format!(
                "the agent's model `{}` is no longer available: update the agent",
                agent.model
            ),
        )
    })?;
    let mut conn = env.pool.get().await.map_err(DbError::from)?;
    let limits: AgentLimits = queries::agents::limits(&mut conn, caller.org_id).await?;
    if limits.max_agents <= 0 {
        return Err(PlanRefusal::NotOnPlan(limits.plan).into());
    }
    let run_id = Uuid::now_v7();
    let expires_at =
        Utc::now() + Duration::from_secs(env.settings.max_run_seconds) + ABANDONED_MARGIN;
    let estimate = Estimate {
        credits: RUN_BASE_CREDITS,
        bucket: Some((Bucket::AgentRuns, 1000)),
    };
    let new = NewAgentRun {
        id: run_id,
        org_id: caller.org_id,
        agent_id: agent.id,
        api_key_id: Some(caller.api_key_id),
        session_id: &request.session_id,
        input: &request.input,
    };
    let agent_name = agent.name.clone();
    // The run, its event and its reservation commit together: a refusal
    // writes nothing. The reservation goes last: it locks the billing row,
    // then held only until the commit.
    let run = conn
        .transaction::<_, StartError, _>(async |conn| {
            let run = agent_runs::insert(conn, &new).await?;
            queries::events::insert(conn, &events::agent_run_started(&run, &agent_name)).await?;
            queries::billing::reserve(conn, caller.org_id, run_id, &estimate, Some(expires_at))
                .await??;
            Ok(run)
        })
        .await?;
    drop(conn);
    env.notifier.events_recorded();

    let (sender, receiver) = mpsc::unbounded_channel();
    let _ = sender.send(RunEvent::Start {
        run_id,
        session_id: request.session_id.clone(),
    });
    let max_iterations = agent.max_iterations.min(limits.max_iterations).max(1);
    // `invoke_agent {name}`, under the request's span: the parent of the
    // run's model calls and tool calls (none with tracing off).
    let span = if telemetry::enabled() {
        spans::invoke_agent(
            &agent.name,
            &agent.id.to_string(),
            &run_id.to_string(),
            semconv::provider::for_adapter(&model.adapter),
            model.upstream_model.as_deref().unwrap_or(&model.id),
        )
    } else {
        Span::none()
    };
    let runner = Runner {
        env: env.clone(),
        run,
        agent,
        model,
        caller,
        max_iterations,
        sender,
        steps: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        tool_credits: 0,
        tools_used: Vec::new(),
        started: Instant::now(),
        span: span.clone(),
    };
    env.running.spawn(
        async move {
            let _guard = guard;
            runner.run(request).await;
        }
        .instrument(span),
    );
    Ok((run_id, receiver))
}

/// Why a run stopped without a final answer: the message of its error step.
struct Stop(String);

impl From<DbError> for Stop {
    fn from(err: DbError) -> Self {
        tracing::error!(error = %err, "agent run: database error");
        Stop("the run could not be recorded (database error); retry shortly".into())
    }
}

struct Runner {
    env: RunEnv,
    run: AgentRun,
    agent: Agent,
    model: ModelEntry,
    caller: RunCaller,
    max_iterations: i32,
    sender: mpsc::UnboundedSender<RunEvent>,
    steps: i32,
    prompt_tokens: u32,
    completion_tokens: u32,
    tool_credits: i64,
    tools_used: Vec<String>,
    started: Instant,
    /// The run's `invoke_agent` span.
    span: Span,
}

impl Runner {
    #[tracing::instrument(skip_all, fields(run.id = %self.run.id, agent.id = %self.agent.id))]
    async fn run(mut self, request: RunInput) {
        let limit = Duration::from_secs(self.env.settings.max_run_seconds);
        let outcome = match tokio::time::timeout(limit, self.converse(&request)).await {
            Ok(outcome) => {
                if outcome.is_err() {
                    spans::fail(&self.span, semconv::error_type::OTHER);
                }
                outcome
            }
            Err(_) => {
                spans::fail(&self.span, semconv::error_type::TIMEOUT);
                Err(Stop(format!(
                    "the run exceeded its maximum run time of {} s",
                    limit.as_secs()
                )))
            }
        };
        match outcome {
            Ok(answer) => self.finish(Ok(answer)).await,
            Err(Stop(message)) => {
                // The error step is best effort: the end below is what counts.
                if let Err(err) = self.step("error", &message, None, None, None).await {
                    tracing::warn!(error = %err.0, "recording the error step failed");
                }
                self.finish(Err(message)).await;
            }
        }
    }

    /// The loop; `Ok` is the final answer.
    async fn converse(&mut self, request: &RunInput) -> Result<String, Stop> {
        let mut messages = self.context(request).await?;
        let specs = tool_specs(&self.agent.tools);
        let spec_tokens: u32 = specs
            .iter()
            .map(|spec| count_tokens(&spec.to_upstream().to_string()))
            .sum();
        let max_tokens = u32::try_from(self.agent.max_tokens).unwrap_or(u32::MAX);
        for _ in 0..self.max_iterations {
            let prompt = count_prompt_tokens(&messages) + spec_tokens;
            self.reserve(chat_credits(prompt, max_tokens, &self.model))
                .await?;
            let turn = self
                .env
                .chat
                .complete(&TurnRequest {
                    model: &self.model,
                    messages: &messages,
                    tools: &specs,
                    temperature: self.agent.temperature,
                    max_tokens,
                })
                .await
                .map_err(|err| {
                    // The cause may quote an upstream: logged, not shown.
                    tracing::warn!(error = %err, "agent model turn failed");
                    let model = &self.model.id;
                    Stop(match err {
                        ProviderError::Transient(_) => format!(
                            "the model `{model}` is temporarily unavailable; try again later"
                        ),
                        ProviderError::Permanent(_) => {
                            format!("the model `{model}` could not answer")
                        }
                    })
                })?;
            self.prompt_tokens += turn.prompt_tokens;
            self.completion_tokens += turn.completion_tokens;
            if turn.tool_calls.is_empty() {
                let answer = turn.content.unwrap_or_default();
                self.step("response", &answer, None, None, None).await?;
                return Ok(answer);
            }
            if let Some(thought) = turn.content.as_deref().filter(|t| !t.trim().is_empty()) {
                self.step("thinking", thought, None, None, None).await?;
            }
            messages.push(turn.assistant_message());
            for call in &turn.tool_calls {
                let output = self.call_tool(call).await?;
                messages.push(tool_result_message(call, &output));
            }
        }
        Err(Stop(format!(
            "the agent reached its maximum of {} iterations without a final answer",
            self.max_iterations
        )))
    }

    /// Runs one tool call as a `tool_call` and a `tool_result` step; returns
    /// what the model is told.
    async fn call_tool(&mut self, call: &ToolCall) -> Result<Value, Stop> {
        self.step(
            "tool_call",
            "",
            Some(&call.name),
            Some(&call.arguments),
            None,
        )
        .await?;
        let scope = ToolScope {
            org_id: self.caller.org_id,
            api_key_id: self.caller.api_key_id,
            run_id: self.run.id,
            step_number: self.steps + 1,
            model: &self.model,
            temperature: self.agent.temperature,
            max_tokens: u32::try_from(self.agent.max_tokens).unwrap_or(u32::MAX),
        };
        let (output, content) = if self.agent.tools.contains(&call.name) {
            self.reserve(reserve_estimate(call, &scope)).await?;
            let outcome = self.env.tools.execute(&scope, call).await;
            self.tool_credits += outcome.credits;
            self.prompt_tokens += outcome.prompt_tokens;
            self.completion_tokens += outcome.completion_tokens;
            if outcome.succeeded && !self.tools_used.contains(&call.name) {
                self.tools_used.push(call.name.clone());
            }
            let content = if outcome.succeeded {
                String::new()
            } else {
                outcome.output["error"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            };
            (outcome.output, content)
        } else {
            let message = format!(
                "the tool `{}` is not enabled for this agent; available: {}",
                call.name,
                self.agent.tools.join(", ")
            );
            (json!({ "error": message }), message)
        };
        self.step(
            "tool_result",
            &content,
            Some(&call.name),
            None,
            Some(&output),
        )
        .await?;
        Ok(output)
    }

    /// The conversation the model starts from: the system prompt (with
    /// knowledge excerpts), the session's memory, the client's history, and
    /// the input with its attachments.
    async fn context(&mut self, request: &RunInput) -> Result<Vec<ChatMessage>, Stop> {
        let mut system = self.agent.system_prompt.clone();
        let excerpts = self.knowledge(&request.input).await;
        if !excerpts.is_empty() {
            system.push_str(
                "\n\nKnowledge base excerpts (cite them as [K1], [K2]... when you use them):",
            );
            for (i, excerpt) in excerpts.iter().enumerate() {
                system.push_str(&format!(
                    "\n[K{}] {} (part {}): {}",
                    i + 1,
                    excerpt.filename,
                    excerpt.chunk_index + 1,
                    excerpt.content
                ));
            }
            let cited: Vec<String> = excerpts
                .iter()
                .enumerate()
                .map(|(i, e)| format!("[K{}] {} (part {})", i + 1, e.filename, e.chunk_index + 1))
                .collect();
            self.step(
                "thinking",
                &format!("Consulted the knowledge base: {}", cited.join(", ")),
                None,
                None,
                None,
            )
            .await?;
        }
        let mut messages = vec![message("system", system, None)];
        if self.agent.memory_enabled {
            let mut conn = self.env.pool.get().await.map_err(DbError::from)?;
            let remembered = agent_runs::session_history(
                &mut conn,
                self.caller.org_id,
                self.agent.id,
                &request.session_id,
                self.env.settings.memory_exchanges,
            )
            .await?;
            // The run being made is `running`, so it is not among them.
            for (input, output) in remembered {
                messages.push(message("user", input, None));
                messages.push(message("assistant", output, None));
            }
        }
        for (role, content) in &request.history {
            messages.push(message(role, content.clone(), None));
        }
        let mut input = request.input.clone();
        if !request.attachments.is_empty() {
            input.push_str("\n\nAttachments:");
            for (kind, url, name) in &request.attachments {
                input.push_str(&format!("\n- {name} ({kind}): {url}"));
            }
        }
        let images: Vec<String> = request
            .attachments
            .iter()
            .filter(|(kind, _, _)| kind == "image")
            .map(|(_, url, _)| url.clone())
            .take(MAX_IMAGES)
            .collect();
        let images = (self.model.vision && !images.is_empty()).then_some(images);
        messages.push(message("user", input, images));
        Ok(messages)
    }

    /// The most relevant excerpts of the agent's knowledge files; a failed
    /// look-up is logged and the run goes on without them.
    async fn knowledge(&self, query: &str) -> Vec<KnowledgeExcerpt> {
        let limit = self.env.settings.knowledge_excerpts;
        if limit == 0 {
            return Vec::new();
        }
        let found = async {
            let mut conn = self
                .env
                .pool
                .get()
                .await
                .map_err(|e| RetrievalError::Db(e.into()))?;
            relevant_excerpts(&mut conn, &self.env.embedder, self.agent.id, query, limit).await
        }
        .await;
        found.unwrap_or_else(|err| {
            tracing::warn!(error = %err, "knowledge look-up failed; running without it");
            Vec::new()
        })
    }

    /// Grows the run's reservation before spending.
    async fn reserve(&self, credits: i64) -> Result<(), Stop> {
        if credits <= 0 {
            return Ok(());
        }
        let mut conn = self.env.pool.get().await.map_err(DbError::from)?;
        queries::billing::reserve_more(&mut conn, self.run.id, credits)
            .await?
            .map_err(|refusal| Stop(refusal.to_string()))
    }

    /// Writes the next step, then sends it to the stream (a client that has
    /// gone away is not an error).
    async fn step(
        &mut self,
        kind: &str,
        content: &str,
        tool: Option<&str>,
        tool_input: Option<&Value>,
        tool_output: Option<&Value>,
    ) -> Result<(), Stop> {
        let step = AgentRunStep {
            run_id: self.run.id,
            step_number: self.steps + 1,
            step_type: kind.to_owned(),
            content: content.to_owned(),
            tool_name: tool.map(str::to_owned),
            tool_input: tool_input.cloned(),
            tool_output: tool_output.cloned(),
            created_at: Utc::now(),
        };
        let mut conn = self.env.pool.get().await.map_err(DbError::from)?;
        agent_runs::insert_step(&mut conn, &step).await?;
        self.steps += 1;
        let _ = self.sender.send(RunEvent::Step {
            run_id: self.run.id,
            step: StepView::from(&step),
        });
        Ok(())
    }

    fn tokens_used(&self) -> i64 {
        i64::from(self.prompt_tokens) + i64::from(self.completion_tokens)
    }

    /// What the run is charged (see the module docs).
    fn charge(&self, completed: bool) -> Charge {
        let tokens = chat_credits(self.prompt_tokens, self.completion_tokens, &self.model);
        let base = if completed { RUN_BASE_CREDITS } else { 0 };
        Charge {
            credits: base + tokens + self.tool_credits,
            bucket_milli: if completed { 1000 } else { 0 },
        }
    }

    /// Ends the run, its charge and its event in one transaction, retried
    /// through a database outage; then the stream's last event.
    async fn finish(self, result: Result<String, String>) {
        spans::gen_ai_response(
            &self.span,
            None,
            None,
            Some(i64::from(self.prompt_tokens)),
            Some(i64::from(self.completion_tokens)),
        );
        let completed = result.is_ok();
        let charge = self.charge(completed);
        let duration_ms = self.started.elapsed().as_millis() as i64;
        let (output, error) = match &result {
            Ok(answer) => (Some(answer.as_str()), None),
            Err(message) => (None, Some(message.as_str())),
        };
        let end = RunEnd {
            status: if completed {
                agent_runs::COMPLETED
            } else {
                agent_runs::FAILED
            },
            output,
            error_message: error,
            total_steps: self.steps,
            tokens_used: self.tokens_used(),
            credits_used: charge.credits,
            duration_ms,
        };
        let record = usage_record(
            &self.run,
            &self.model.id,
            if completed { "success" } else { "failed" },
            self.tools_used.clone(),
            (self.prompt_tokens, self.completion_tokens),
        );
        let (pool, run_id, agent_name) = (&self.env.pool, self.run.id, self.agent.name.as_str());
        let (end, record, charge) = (&end, &record, &charge);
        let write = || async move {
            let mut pooled = pool.get().await.map_err(DbError::from)?;
            let conn: &mut AsyncPgConnection = &mut pooled;
            conn.transaction::<_, DbError, _>(async |conn| {
                let Some(run) = agent_runs::finish(conn, run_id, end).await? else {
                    return Ok(None);
                };
                let event = if completed {
                    events::agent_run_completed(&run, agent_name)
                } else {
                    events::agent_run_failed(&run, agent_name)
                };
                queries::events::insert(conn, &event).await?;
                // Billing last: it locks the organization's billing row until commit.
                if charge.credits > 0 || charge.bucket_milli > 0 {
                    queries::billing::settle(conn, run_id, charge, 1.0, record).await?;
                } else {
                    queries::billing::release(conn, run_id, Some(record.clone())).await?;
                }
                Ok(Some(run))
            })
            .await
        };
        let written = write
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(200))
                    .with_max_delay(Duration::from_secs(5))
                    .with_max_times(8),
            )
            .when(|err: &DbError| {
                matches!(err, DbError::Unavailable(_) | DbError::ConnectionLost(_))
            })
            .await;
        let last = match written {
            Ok(Some(run)) => {
                self.env.notifier.events_recorded();
                tracing::info!(
                    status = %run.status, steps = run.total_steps, credits = run.credits_used,
                    duration_ms, "agent run ended"
                );
                match result {
                    Ok(answer) => RunEvent::Done {
                        run_id: run.id,
                        output: answer,
                        credits_used: run.credits_used,
                        tokens_used: run.tokens_used,
                    },
                    Err(message) => RunEvent::Error {
                        run_id: run.id,
                        error: message,
                    },
                }
            }
            Ok(None) => RunEvent::Error {
                run_id: self.run.id,
                error: "the run was given up before it could finish".into(),
            },
            Err(err) => {
                // The scheduler fails the run and the reservation expires.
                tracing::error!(error = %err, "recording the end of an agent run failed");
                RunEvent::Error {
                    run_id: self.run.id,
                    error: "the run's result could not be recorded; retry shortly".into(),
                }
            }
        };
        let _ = self.sender.send(last);
    }
}

fn message(role: &str, text: String, images: Option<Vec<String>>) -> ChatMessage {
    ChatMessage {
        role: role.to_owned(),
        content: Some(MessageContent::Text(text)),
        images,
        name: None,
        tool_call_id: None,
        tool_calls: None,
        extra: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> RunRequest {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn a_run_request_is_validated_with_the_field_named() {
        let cases = [
            (json!({}), "input", "input is required"),
            (json!({"input": "   "}), "input", "input is required"),
            (
                json!({"input": "x".repeat(10_001)}),
                "input",
                "input must be at most 10000 characters",
            ),
            (
                json!({"input": "hi", "session_id": ""}),
                "session_id",
                "session_id must not be empty",
            ),
            (
                json!({"input": "hi", "conversation_history": [{"role": "tool", "content": "x"}]}),
                "conversation_history",
                "conversation_history[0].role must be user or assistant",
            ),
            (
                json!({"input": "hi", "attachments": [{"type": "image", "url": "ftp://x/y.png"}]}),
                "attachments",
                "attachments[0].url must be an http(s) URL",
            ),
            (
                json!({"input": "hi", "attachments": [{"type": "video", "url": "https://x/y"}]}),
                "attachments",
                "attachments[0].type must be one of image, document, file, link",
            ),
        ];
        for (body, field, message) in cases {
            let err = request(body.clone()).validate().unwrap_err();
            assert_eq!(
                (err.field, err.message.as_str()),
                (field, message),
                "{body}"
            );
        }
    }

    #[test]
    fn a_valid_request_keeps_its_session_history_and_attachments() {
        let input = request(json!({
            "input": " Summarise ",
            "session_id": "s-1",
            "conversation_history": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
            "attachments": [{"type": "image", "url": "https://example.com/a/chart.png"}]
        }))
        .validate()
        .unwrap();
        assert_eq!(input.input, "Summarise");
        assert_eq!(input.session_id, "s-1");
        assert_eq!(input.history.len(), 2);
        assert_eq!(
            input.attachments,
            vec![(
                "image".to_owned(),
                "https://example.com/a/chart.png".to_owned(),
                "chart.png".to_owned()
            )]
        );
        let fresh = request(json!({"input": "x"})).validate().unwrap();
        assert!(Uuid::parse_str(&fresh.session_id).is_ok(), "a new session");
    }

    #[test]
    fn stream_events_have_the_spec_shape() {
        let run_id = Uuid::nil();
        let step = RunEvent::Step {
            run_id,
            step: StepView {
                step_number: 2,
                kind: "tool_call".into(),
                content: String::new(),
                tool: Some("web_search".into()),
                tool_input: Some(json!({"query": "rust"})),
                tool_output: None,
            },
        };
        assert_eq!(
            serde_json::to_value(&step).unwrap(),
            json!({"type": "step", "run_id": run_id, "step": {
                "step_number": 2, "type": "tool_call", "tool": "web_search", "tool_input": {"query": "rust"}
            }})
        );
        let done = RunEvent::Done {
            run_id,
            output: "ok".into(),
            credits_used: 9,
            tokens_used: 120,
        };
        assert_eq!(
            serde_json::to_value(&done).unwrap(),
            json!({"type": "done", "run_id": run_id, "output": "ok", "credits_used": 9, "tokens_used": 120})
        );
    }
}
