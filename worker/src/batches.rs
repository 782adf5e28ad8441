//! Runs the lines of OpenAI-style batches (`--tools batch`): claims lines
//! from `batch_lines` with a lease (within each organization's
//! `plans.max_batch_concurrency`), runs each through the same services as
//! the sync endpoints (the chat turn with fallbacks, embeddings, the
//! Responses bridge), meters it as the sync request would be (the same
//! hold, charge and usage record, under the same endpoint), and records its
//! answer with its charge in one transaction. A line's hold and charge are
//! keyed on the line's id: a line rerun after its worker died is charged
//! once. An upstream that is busy or unavailable (after the provider's own
//! retries) puts the line back with a growing delay.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use chrono::Utc;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use unigen_core::ProviderError;
use unigen_core::config::{BatchSettings, ModelEntry};
use unigen_core::domain::ModelCategory;
use unigen_db::billing::{
    Charge, Estimate, RequestMeta, Settled, chat_charge, chat_hold, chat_usage, embedding_credits,
    embedding_usage,
};
use unigen_db::models::UsageRecord;
use unigen_db::queries::batches::{self, ClaimedLine};
use unigen_db::queries::responses::NewResponse;
use unigen_db::{DbError, PgPool, queries};
use unigen_protocols::batch::error_body;
use unigen_protocols::responses::output::{self, Details, Head};
use unigen_protocols::responses::{Ids, parse_request, responses_param};
use unigen_providers::Catalogue;
use unigen_providers::chat::{ChatCompletionRequest, EmbeddingRequest};
use unigen_providers::completion::{ChatError, ChatService, PreparedChat};
use unigen_providers::embedding::EmbeddingService;
use uuid::Uuid;

/// How long a line's hold lives if nothing settles or releases it.
const HOLD_TTL: chrono::Duration = chrono::Duration::hours(6);

pub(crate) struct BatchRunner {
    pub pool: PgPool,
    pub worker_id: String,
    pub lease: Duration,
    pub catalogue: Arc<Catalogue>,
    pub chat: ChatService,
    pub embeddings: EmbeddingService,
    pub settings: BatchSettings,
    pub concurrency: usize,
}

/// How a line's charge ends.
enum Billing {
    /// Nothing was held (refused before the model ran).
    None,
    Settle {
        charge: Charge,
        multiplier: f64,
        usage: UsageRecord,
    },
    /// The model failed: the hold goes back, with a `failed` usage row
    /// when the model was known.
    Release(Option<UsageRecord>),
}

type Body = Box<dyn FnOnce(Option<&Settled>) -> Value + Send>;

enum Outcome {
    /// An answer (any status), recorded with its charge.
    Answer {
        status: u16,
        body: Body,
        billing: Box<Billing>,
    },
    /// The upstream (or the database) was busy or unavailable: run again
    /// later; the hold, if any, goes back.
    Retry(String),
}

impl Outcome {
    fn error(
        status: u16,
        kind: &str,
        code: &str,
        param: Option<&str>,
        message: String,
        billing: Billing,
    ) -> Self {
        let body = error_body(&message, kind, code, param);
        Self::Answer {
            status,
            body: Box::new(move |_| body),
            billing: Box::new(billing),
        }
    }

    fn invalid(param: Option<&str>, message: String) -> Self {
        Self::error(
            400,
            "invalid_request_error",
            "invalid_request",
            param,
            message,
            Billing::None,
        )
    }
}

/// Claims and runs lines until `shutdown`; the lines running then finish
/// within the worker's grace period (`tracker`).
pub(crate) async fn run(
    runner: Arc<BatchRunner>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let permits = Arc::new(Semaphore::new(runner.concurrency.max(1)));
    let poll = Duration::from_millis(runner.settings.poll_ms.max(10));
    while !shutdown.is_cancelled() {
        let free = permits.available_permits();
        if free == 0 {
            tokio::select! {
                () = shutdown.cancelled() => break,
                permit = permits.clone().acquire_owned() => drop(permit),
            }
            continue;
        }
        let claimed = async {
            let mut conn = runner.pool.get().await.map_err(DbError::from)?;
            batches::claim_lines(&mut conn, &runner.worker_id, runner.lease, free as i64).await
        }
        .await;
        let lines = match claimed {
            Ok(lines) => lines,
            Err(err) => {
                tracing::warn!(error = %err, "claiming batch lines failed");
                Vec::new()
            }
        };
        let full = lines.len() == free;
        for line in lines {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            let runner = runner.clone();
            tracker.spawn(async move {
                let _permit = permit;
                runner.run_line(line).await;
            });
        }
        if !full {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(poll) => {}
            }
        }
    }
}

impl BatchRunner {
    #[tracing::instrument(skip_all, fields(batch.id = %line.batch_id, line.id = %line.id, attempt = line.attempt))]
    async fn run_line(&self, line: ClaimedLine) {
        let started = Instant::now();
        let work = self.execute(&line, started);
        tokio::pin!(work);
        let mut renew = tokio::time::interval(self.lease / 3);
        renew.tick().await;
        let outcome = loop {
            tokio::select! {
                outcome = &mut work => break outcome,
                _ = renew.tick() => {
                    let renewed = async {
                        let mut conn = self.pool.get().await.map_err(DbError::from)?;
                        batches::renew_lease(&mut conn, line.id, line.attempt, self.lease).await
                    }.await;
                    if let Err(err) = renewed {
                        tracing::warn!(error = %err, "renewing a batch line's lease failed");
                    }
                }
            }
        };
        if let Err(err) = self.record(&line, outcome).await {
            // The lease runs out and the line runs again; its hold is
            // released then, and its charge (keyed on the line) is taken once.
            tracing::error!(error = %err, "recording a batch line's answer failed");
        }
    }

    async fn execute(&self, line: &ClaimedLine, started: Instant) -> Outcome {
        match line.endpoint.as_str() {
            "/v1/chat/completions" => self.chat_completion(line, started).await,
            "/v1/embeddings" => self.embedding(line, started).await,
            "/v1/responses" => self.response(line, started).await,
            other => Outcome::invalid(
                Some("endpoint"),
                format!("unknown batch endpoint `{other}`"),
            ),
        }
    }

    fn usage_record(
        &self,
        line: &ClaimedLine,
        model: &str,
        started: Instant,
        status: &str,
        tokens: (i64, i64),
        tools_used: Vec<String>,
    ) -> UsageRecord {
        RequestMeta {
            id: Uuid::now_v7(),
            org_id: line.org_id,
            api_key_id: line.api_key_id,
            endpoint: &line.endpoint,
            model,
            started,
        }
        .usage_record(status, tokens, tools_used)
    }

    /// Holds `estimate` for the line (a hold left by a dead attempt of the
    /// same line is released first); `Err`: the line's answer instead.
    async fn reserve(&self, line: &ClaimedLine, estimate: &Estimate) -> Result<(), Outcome> {
        let held = async {
            let mut conn = self.pool.get().await.map_err(DbError::from)?;
            queries::billing::release(&mut conn, line.id, None).await?;
            queries::billing::reserve(
                &mut conn,
                line.org_id,
                line.id,
                estimate,
                Some(Utc::now() + HOLD_TTL),
            )
            .await
        }
        .await;
        match held {
            Ok(Ok(())) => Ok(()),
            Ok(Err(refusal)) => Err(Outcome::error(
                402,
                "insufficient_quota",
                "quota_exceeded",
                None,
                refusal.to_string(),
                Billing::None,
            )),
            Err(err) => Err(Outcome::Retry(format!("holding credits failed: {err}"))),
        }
    }

    fn upstream_failed(&self, message: String, billing: Billing) -> Outcome {
        // `ProviderError::Transient`'s message: busy (429) or unavailable
        // after the provider layer's own retries and fallbacks.
        if message.starts_with("provider temporarily unavailable") {
            return Outcome::Retry(message);
        }
        Outcome::error(
            500,
            "server_error",
            "upstream_error",
            None,
            format!("the model provider failed: {message}"),
            billing,
        )
    }

    async fn chat_completion(&self, line: &ClaimedLine, started: Instant) -> Outcome {
        let request: ChatCompletionRequest = match serde_json::from_value(line.body.clone()) {
            Ok(request) => request,
            Err(err) => {
                return Outcome::invalid(None, format!("the request body is invalid: {err}"));
            }
        };
        let PreparedChat {
            model,
            params,
            prompt_tokens,
        } = match self.chat.prepare(&request, false).await {
            Ok(prepared) => prepared,
            Err(ChatError::Invalid(invalid)) => {
                return Outcome::invalid(Some(invalid.field), invalid.message);
            }
            Err(ChatError::Upstream(message)) => {
                return self.upstream_failed(message, Billing::None);
            }
        };
        let (estimate, multiplier) = chat_hold(prompt_tokens, params.max_tokens, params.n, &model);
        if let Err(refused) = self.reserve(line, &estimate).await {
            return refused;
        }
        let tools = if params.web_search {
            vec!["web_search".to_owned()]
        } else {
            Vec::new()
        };
        let answer = match self.chat.complete(&model, &params, prompt_tokens).await {
            Ok(answer) => answer,
            Err(err) => {
                let record =
                    self.usage_record(line, &model.id, started, "failed", (0, 0), Vec::new());
                return self.upstream_failed(err.to_string(), Billing::Release(Some(record)));
            }
        };
        let (prompt, completion) = (answer.prompt_tokens, answer.completion_tokens);
        let charge = chat_charge(prompt, completion, multiplier, &model);
        let usage = self.usage_record(
            line,
            &model.id,
            started,
            "success",
            (i64::from(prompt), i64::from(completion)),
            tools,
        );
        let id = format!("chatcmpl-{}", line.id.simple());
        let model_entry = model.clone();
        Outcome::Answer {
            status: 200,
            body: Box::new(move |settled| {
                let mut body = answer.extra;
                body.extend([
                    ("id".to_owned(), json!(id)),
                    ("object".to_owned(), json!("chat.completion")),
                    ("created".to_owned(), json!(Utc::now().timestamp())),
                    ("model".to_owned(), json!(model_entry.id)),
                    ("model_tier".to_owned(), json!(model_entry.tier)),
                    ("choices".to_owned(), Value::Array(answer.choices)),
                    ("usage".to_owned(), chat_usage(prompt, completion, settled)),
                ]);
                Value::Object(body)
            }),
            billing: Box::new(Billing::Settle {
                charge,
                multiplier,
                usage,
            }),
        }
    }

    async fn embedding(&self, line: &ClaimedLine, started: Instant) -> Outcome {
        let request: EmbeddingRequest = match serde_json::from_value(line.body.clone()) {
            Ok(request) => request,
            Err(err) => {
                return Outcome::invalid(None, format!("the request body is invalid: {err}"));
            }
        };
        let model: ModelEntry = match self
            .catalogue
            .resolve(request.model.as_deref(), ModelCategory::Embedding)
        {
            Ok(model) => model.clone(),
            Err(invalid) => return Outcome::invalid(Some(invalid.field), invalid.message),
        };
        let params = match request.validate() {
            Ok(params) => params,
            Err(invalid) => return Outcome::invalid(Some(invalid.field), invalid.message),
        };
        let estimate = Estimate {
            credits: embedding_credits(params.inputs.token_count(), &model),
            bucket: None,
        };
        if let Err(refused) = self.reserve(line, &estimate).await {
            return refused;
        }
        let embedded = match self.embeddings.embed(&model, &params).await {
            Ok(embedded) => embedded,
            Err(err) => {
                let record =
                    self.usage_record(line, &model.id, started, "failed", (0, 0), Vec::new());
                return match err {
                    ProviderError::Transient(_) => {
                        self.upstream_failed(err.to_string(), Billing::Release(Some(record)))
                    }
                    ProviderError::Permanent(message) => Outcome::error(
                        500,
                        "server_error",
                        "generation_failed",
                        None,
                        message,
                        Billing::Release(Some(record)),
                    ),
                };
            }
        };
        let tokens = embedded.prompt_tokens;
        let charge = Charge {
            credits: embedding_credits(tokens, &model),
            bucket_milli: 0,
        };
        let usage = self.usage_record(
            line,
            &model.id,
            started,
            "success",
            (i64::from(tokens), 0),
            Vec::new(),
        );
        let base64 = params.base64;
        let model_id = model.id.clone();
        Outcome::Answer {
            status: 200,
            body: Box::new(move |settled| {
                let credits = settled.map_or(0, |s| s.credits);
                let data: Vec<Value> = embedded
                    .vectors
                    .iter()
                    .enumerate()
                    .map(|(index, vector)| {
                        let embedding = if base64 {
                            let bytes: Vec<u8> =
                                vector.iter().flat_map(|v| v.to_le_bytes()).collect();
                            json!(base64::engine::general_purpose::STANDARD.encode(bytes))
                        } else {
                            json!(vector)
                        };
                        json!({ "object": "embedding", "index": index, "embedding": embedding })
                    })
                    .collect();
                json!({
                    "object": "list",
                    "data": data,
                    "model": model_id,
                    "usage": embedding_usage(tokens, credits),
                })
            }),
            billing: Box::new(Billing::Settle {
                charge,
                multiplier: 1.0,
                usage,
            }),
        }
    }

    async fn response(&self, line: &ClaimedLine, started: Instant) -> Outcome {
        let Value::Object(body) = &line.body else {
            return Outcome::invalid(None, "the request body must be an object".to_owned());
        };
        let request = match parse_request(body) {
            Ok(request) => request,
            Err(invalid) => return Outcome::invalid(Some(invalid.param.as_str()), invalid.message),
        };
        let unique = line.id.simple().to_string();
        let mut ids = Ids::new(&unique);
        let input = match request.input_items(&mut ids) {
            Ok(input) => input,
            Err(invalid) => return Outcome::invalid(Some(invalid.param.as_str()), invalid.message),
        };
        let context = match &request.previous_response_id {
            None => Vec::new(),
            Some(previous) => {
                let stored = async {
                    let mut conn = self.pool.get().await.map_err(DbError::from)?;
                    queries::responses::find(&mut conn, line.org_id, previous).await
                }
                .await;
                match stored {
                    Ok(Some(stored)) => match stored.conversation {
                        Value::Array(items) => items,
                        _ => Vec::new(),
                    },
                    Ok(None) => {
                        return Outcome::error(
                            404,
                            "invalid_request_error",
                            "not_found",
                            Some("previous_response_id"),
                            format!("previous_response_id: response {previous} not found"),
                            Billing::None,
                        );
                    }
                    Err(err) => {
                        return Outcome::Retry(format!(
                            "reading the previous response failed: {err}"
                        ));
                    }
                }
            }
        };
        let chat: ChatCompletionRequest =
            match serde_json::from_value(request.to_chat(&context, &input)) {
                Ok(chat) => chat,
                Err(err) => {
                    return Outcome::invalid(None, format!("the request cannot be bridged: {err}"));
                }
            };
        let PreparedChat {
            model,
            params,
            prompt_tokens,
        } = match self.chat.prepare(&chat, false).await {
            Ok(prepared) => prepared,
            Err(ChatError::Invalid(invalid)) => {
                let param = responses_param(invalid.field);
                return Outcome::invalid(
                    Some(param),
                    invalid.message.replace(invalid.field, param),
                );
            }
            Err(ChatError::Upstream(message)) => {
                return self.upstream_failed(message, Billing::None);
            }
        };
        let (estimate, multiplier) = chat_hold(prompt_tokens, params.max_tokens, params.n, &model);
        if let Err(refused) = self.reserve(line, &estimate).await {
            return refused;
        }
        let answer = match self.chat.complete(&model, &params, prompt_tokens).await {
            Ok(answer) => answer,
            Err(err) => {
                let record =
                    self.usage_record(line, &model.id, started, "failed", (0, 0), Vec::new());
                return self.upstream_failed(err.to_string(), Billing::Release(Some(record)));
            }
        };
        let (prompt, completion) = (answer.prompt_tokens, answer.completion_tokens);
        let charge = chat_charge(prompt, completion, multiplier, &model);
        let usage = self.usage_record(
            line,
            &model.id,
            started,
            "success",
            (i64::from(prompt), i64::from(completion)),
            if params.web_search {
                vec!["web_search".to_owned()]
            } else {
                Vec::new()
            },
        );
        let head = Head {
            id: format!("resp_{unique}"),
            created_at: Utc::now().timestamp(),
            model: model.id.clone(),
        };
        let choice = answer.choices.first().cloned().unwrap_or(Value::Null);
        let items = output::output_items(&choice["message"], &mut ids);
        let (status, incomplete) =
            output::status_of(choice["finish_reason"].as_str().unwrap_or("stop"));
        let echo = request.echo();
        let response_of = move |settled: Option<&Settled>| {
            let spent = output::usage(&chat_usage(prompt, completion, settled));
            let details = Details {
                incomplete: incomplete.clone(),
                completed_at: Some(Utc::now().timestamp()),
                ..Details::default()
            };
            output::response_object(&head, &echo, status, &items, spent, details)
        };
        if request.store {
            // Stored now (as answered, before its charge is known) so that a
            // later `previous_response_id` can continue it.
            let response = response_of(None);
            let mut conversation = context.clone();
            conversation.extend(input.iter().cloned());
            conversation.extend(response["output"].as_array().into_iter().flatten().cloned());
            let new = NewResponse {
                id: response["id"].as_str().unwrap_or_default().to_owned(),
                org_id: line.org_id,
                model: model.id.clone(),
                status: response["status"].as_str().unwrap_or_default().to_owned(),
                body: response,
                input_items: json!(input),
                conversation: Value::Array(conversation),
                previous_response_id: request.previous_response_id.clone(),
                upstream: None,
                // The table's default retention.
                expires_at: None,
            };
            let stored = async {
                let mut conn = self.pool.get().await.map_err(DbError::from)?;
                // A rerun of the line stores the same id again.
                queries::responses::replace(&mut conn, &new).await
            }
            .await;
            if let Err(err) = stored {
                tracing::warn!(error = %err, "storing a batch line's response failed");
            }
        }
        Outcome::Answer {
            status: 200,
            body: Box::new(response_of),
            billing: Box::new(Billing::Settle {
                charge,
                multiplier,
                usage,
            }),
        }
    }

    /// Writes the line's answer with its charge (or puts it back), only if
    /// this attempt still owns the line.
    async fn record(&self, line: &ClaimedLine, outcome: Outcome) -> Result<(), DbError> {
        let mut pooled = self.pool.get().await?;
        let conn: &mut AsyncPgConnection = &mut pooled;
        let outcome = match outcome {
            Outcome::Retry(reason) if line.attempt < self.settings.line_attempts as i32 => {
                let delay = Duration::from_millis(
                    self.settings
                        .retry_base_ms
                        .saturating_mul(1 << (line.attempt.clamp(1, 10) - 1)),
                );
                tracing::info!(reason = %reason, delay_ms = delay.as_millis() as u64, "batch line put back: its upstream is busy");
                return conn
                    .transaction::<_, DbError, _>(async |conn| {
                        if batches::requeue_line(conn, line.id, line.attempt, delay).await? {
                            queries::billing::release(conn, line.id, None).await?;
                        }
                        Ok(())
                    })
                    .await;
            }
            Outcome::Retry(reason) => Outcome::error(
                503,
                "server_error",
                "upstream_unavailable",
                None,
                format!(
                    "the model provider stayed unavailable after {} attempts: {reason}",
                    line.attempt
                ),
                Billing::Release(None),
            ),
            answer => answer,
        };
        let Outcome::Answer {
            status,
            body,
            billing,
        } = outcome
        else {
            unreachable!("retries returned above")
        };
        conn.transaction::<_, DbError, _>(async |conn| {
            if !batches::lock_owned(conn, line.id, line.attempt).await? {
                tracing::info!("batch line no longer ours (cancelled, expired or taken over); its answer is dropped");
                return Ok(());
            }
            let settled = match *billing {
                Billing::None => None,
                Billing::Settle {
                    charge,
                    multiplier,
                    usage,
                } => {
                    let settled =
                        queries::billing::settle(conn, line.id, &charge, multiplier, &usage).await?;
                    if settled.is_none() {
                        tracing::warn!("a batch line's hold was gone at settlement; not charged");
                    }
                    settled
                }
                Billing::Release(usage) => {
                    queries::billing::release(conn, line.id, usage).await?;
                    None
                }
            };
            let body = body(settled.as_ref());
            batches::finish_line(conn, line.id, line.attempt, i32::from(status), &body).await?;
            Ok(())
        })
        .await
    }
}
