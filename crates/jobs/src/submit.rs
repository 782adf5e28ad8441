use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use uuid::Uuid;

use crate::queue::{JobMessage, Publisher};
use unigen_core::batch::Batcher;
use unigen_core::batched::Batched;
use unigen_core::config::ModelEntry;
use unigen_core::domain::Tool;
use unigen_core::telemetry::propagation;
use unigen_db::billing::{Estimate, Refusal};
use unigen_db::models::{Job, NewJob};
use unigen_db::queries::jobs::Reserving;
use unigen_db::{DbError, PgPool, queries};

/// Largest submission batch: bounds the statement and how long its locks
/// are held.
const MAX_BATCH: usize = 200;

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    Db(#[from] DbError),
    /// The estimate does not fit a quota or the credits: nothing was written.
    #[error(transparent)]
    Refused(#[from] Refusal),
}

pub struct NewJobRequest<'a> {
    pub org_id: Uuid,
    pub api_key_id: Uuid,
    pub tool: Tool,
    pub model: &'a ModelEntry,
    pub input_params: serde_json::Value,
    /// Held at submission, settled on completion, released otherwise.
    pub estimate: Estimate,
    /// `Cancel-After`: unfinished by then, the job is cancelled.
    pub cancel_after: Option<DateTime<Utc>>,
    /// The `Idempotency-Key` claim (key, claim id) the request holds: the
    /// job is written on it in the statement that creates the job.
    pub idempotency: Option<(String, Uuid)>,
}

/// A job to persist, owned so that a batch task can write it.
struct Pending {
    id: Uuid,
    org_id: Uuid,
    api_key_id: Uuid,
    tool: Tool,
    model: String,
    model_tier: &'static str,
    input_params: serde_json::Value,
    estimate: Estimate,
    cancel_after: Option<DateTime<Utc>>,
    idempotency: Option<(String, Uuid)>,
    /// The publishing span's `traceparent`, kept on the row (issue 37).
    trace_context: Option<String>,
    /// Its `Idempotency-Key` claim is on its way while this lives (the
    /// batch holds it until its statement is done).
    _claim_in_flight: Option<ClaimInFlight>,
}

/// `Idempotency-Key` claims whose job is on its way to the database. A
/// request dropped mid-submission waits for its claim here before it frees
/// its key: the statement writing the job also writes it on the claim.
#[derive(Clone, Default)]
struct ClaimsInFlight(
    Arc<std::sync::Mutex<std::collections::HashMap<Uuid, tokio::sync::watch::Sender<()>>>>,
);

/// One claim's submission, registered until dropped.
struct ClaimInFlight {
    claims: ClaimsInFlight,
    claim_id: Uuid,
}

impl ClaimsInFlight {
    fn register(&self, claim_id: Uuid) -> ClaimInFlight {
        self.0
            .lock()
            .expect("claims lock")
            .insert(claim_id, tokio::sync::watch::channel(()).0);
        ClaimInFlight {
            claims: self.clone(),
            claim_id,
        }
    }

    /// Returns once no submission of `claim_id` is on its way.
    async fn settled(&self, claim_id: Uuid) {
        let watching = self
            .0
            .lock()
            .expect("claims lock")
            .get(&claim_id)
            .map(tokio::sync::watch::Sender::subscribe);
        if let Some(mut watching) = watching {
            // Nothing is ever sent: this returns when the sender is dropped.
            let _ = watching.changed().await;
        }
    }
}

impl Drop for ClaimInFlight {
    fn drop(&mut self) {
        self.claims
            .0
            .lock()
            .expect("claims lock")
            .remove(&self.claim_id);
    }
}

impl Pending {
    fn new_job(&self) -> NewJob<'_> {
        NewJob {
            id: self.id,
            org_id: self.org_id,
            api_key_id: self.api_key_id,
            tool: self.tool.as_str(),
            model: &self.model,
            model_tier: self.model_tier,
            input_params: &self.input_params,
            estimated_credits: self.estimate.credits,
            cancel_after: self.cancel_after,
            idempotency: self
                .idempotency
                .as_ref()
                .map(|(key, claim)| (key.as_str(), *claim)),
            trace_context: self.trace_context.as_deref(),
        }
    }
}

/// A submission's own answer. A batch whose first statement failed changed
/// nothing and is an `Err` of the whole batch (each is then tried alone);
/// anything failing after it is the item's own error, since other items of
/// the batch may be committed by then.
type Persisted = Result<Job, SubmitError>;

/// Persists jobs and hands them to the broker.
#[derive(Clone)]
pub struct JobSubmitter {
    pool: PgPool,
    publisher: Arc<Publisher>,
    confirmed: Batcher<Uuid>,
    submissions: Batched<Arc<Pending>, Persisted>,
    claims: ClaimsInFlight,
}

impl JobSubmitter {
    /// `confirmed` marks batches of broker-confirmed jobs as enqueued, one
    /// UPDATE per few milliseconds instead of one per job. Submissions that
    /// arrive together are persisted in one transaction (see [`persist`]).
    /// The tasks end with the last clone.
    pub fn new(pool: PgPool, publisher: Arc<Publisher>) -> (Self, tokio::task::JoinHandle<()>) {
        let flush_pool = pool.clone();
        let (confirmed, handle) = Batcher::spawn(
            Duration::from_millis(5),
            1000,
            move |ids: Vec<Uuid>| {
                let pool = flush_pool.clone();
                async move {
                    let result = async {
                        let mut conn = pool.get().await?;
                        queries::jobs::mark_enqueued(&mut conn, &ids).await
                    }
                    .await;
                    if let Err(err) = result {
                        // The relay will publish these again; the atomic claim makes
                        // the duplicate harmless.
                        tracing::warn!(error = %err, jobs = ids.len(), "marking jobs enqueued failed");
                    }
                }
            },
        );
        let batch_pool = pool.clone();
        let (submissions, _) = Batched::spawn(
            "job submissions",
            MAX_BATCH,
            1,
            move |items: Vec<Arc<Pending>>| {
                let pool = batch_pool.clone();
                async move { persist(&pool, &items).await }
            },
        );
        (
            Self {
                pool,
                publisher,
                confirmed,
                submissions,
                claims: ClaimsInFlight::default(),
            },
            handle,
        )
    }

    /// Returns once no job of this `Idempotency-Key` claim is on its way to
    /// the database (written, refused, or never to be): a request dropped
    /// mid-submission waits here before it frees its key.
    pub async fn claim_settled(&self, claim_id: Uuid) {
        self.claims.settled(claim_id).await;
    }

    /// The job is durable once this returns; publishing is best effort here
    /// and guaranteed by the scheduler's relay.
    pub async fn submit(&self, request: NewJobRequest<'_>) -> Result<Job, SubmitError> {
        let id = Uuid::now_v7();
        // The PRODUCER span opens before the row is written: the row keeps
        // its context for work that starts outside a message (the relay, the
        // deadline sweep, webhook attempts).
        let span = self.publisher.job_span(
            &JobMessage {
                job_id: id,
                tool: request.tool.as_str().to_owned(),
                attempt: 0,
            },
            None,
        );
        let trace_context = propagation::traceparent_of(&span);
        let claim_in_flight = request
            .idempotency
            .as_ref()
            .map(|(_, claim_id)| self.claims.register(*claim_id));
        let pending = Arc::new(Pending {
            id,
            org_id: request.org_id,
            api_key_id: request.api_key_id,
            tool: request.tool,
            model: request.model.id.clone(),
            model_tier: request.model.tier.as_str(),
            input_params: request.input_params,
            estimate: request.estimate,
            cancel_after: request.cancel_after,
            idempotency: request.idempotency,
            trace_context,
            _claim_in_flight: claim_in_flight,
        });
        let persisted = match self.submissions.call(pending.clone()).await {
            Some(persisted) => persisted,
            None => persist(&self.pool, std::slice::from_ref(&pending))
                .await?
                .pop()
                .expect("one answer per submission"),
        };
        let job = persisted?;
        let message = JobMessage {
            job_id: job.id,
            tool: job.tool.clone(),
            attempt: job.attempt,
        };
        match self.publisher.publish_in(&message, &span).await {
            Ok(()) => self.confirmed.push(job.id),
            Err(err) => {
                tracing::warn!(job.id = %job.id, error = %err, "publish failed; the relay will retry")
            }
        }
        Ok(job)
    }
}

/// Persists submissions in one statement: each estimate is reserved
/// exactly as on its own (a refused one writes nothing) and the admitted
/// jobs are inserted with their holds. Every pending job holds its
/// estimate, and the organizations' billing rows are locked once per batch,
/// in organization order. An organization whose account must first be set
/// up (its first job, a new period) has it set up, and its jobs go again.
/// Answers in the items' order.
async fn persist(pool: &PgPool, items: &[Arc<Pending>]) -> Result<Vec<Persisted>, DbError> {
    let mut pooled = pool.get().await?;
    let conn: &mut AsyncPgConnection = &mut pooled;
    let mut answers: Vec<Option<Persisted>> = (0..items.len()).map(|_| None).collect();
    let mut waiting: Vec<usize> = (0..items.len()).collect();
    // Twice at most: a set-up account admits on the second round.
    for round in 0..2 {
        let new_jobs: Vec<NewJob<'_>> = waiting.iter().map(|&i| items[i].new_job()).collect();
        let quota: Vec<_> = waiting.iter().map(|&i| items[i].estimate.bucket).collect();
        // One statement, committed on its own: every submission's round
        // trips are on a sync request's path.
        let outcomes = match queries::jobs::insert_many_reserving(conn, &new_jobs, &quota).await {
            Ok(outcomes) => outcomes,
            Err(err) if round == 0 => return Err(err),
            Err(err) => {
                fail_each(&mut answers, &waiting, &err);
                break;
            }
        };
        let mut setup = Vec::new();
        for (&i, outcome) in waiting.iter().zip(outcomes) {
            answers[i] = match outcome {
                Ok(Reserving::Inserted(job)) => Some(Ok(*job)),
                Ok(Reserving::Refused(refusal)) => Some(Err(refusal.into())),
                Ok(Reserving::NeedsSetup) => {
                    setup.push(i);
                    None
                }
                Err(err) => Some(Err(err.into())),
            };
        }
        if setup.is_empty() {
            break;
        }
        let mut orgs: Vec<Uuid> = setup.iter().map(|&i| items[i].org_id).collect();
        orgs.sort_unstable();
        orgs.dedup();
        for org in orgs {
            if let Err(err) = queries::billing::setup_account(conn, org).await {
                let of_org: Vec<usize> = setup
                    .iter()
                    .copied()
                    .filter(|&i| items[i].org_id == org)
                    .collect();
                fail_each(&mut answers, &of_org, &err);
                setup.retain(|&i| items[i].org_id != org);
            }
        }
        waiting = setup;
    }
    Ok(answers
        .into_iter()
        .map(|answer| {
            // Still needing set-up after it was set up: never expected.
            answer.unwrap_or_else(|| {
                Err(SubmitError::Db(DbError::Query(
                    diesel::result::Error::QueryBuilderError(
                        "the organization's billing account could not be set up".into(),
                    ),
                )))
            })
        })
        .collect())
}

/// Answers each of `items` with `err`, keeping its class (an unreachable
/// database stays a 503); logged once.
fn fail_each(answers: &mut [Option<Persisted>], items: &[usize], err: &DbError) {
    tracing::error!(error = %err, jobs = items.len(), "persisting submissions failed");
    for &i in items {
        let described = diesel::result::Error::QueryBuilderError(err.to_string().into());
        answers[i] = Some(Err(SubmitError::Db(match err {
            DbError::Unavailable(_) | DbError::ConnectionLost(_) => {
                DbError::ConnectionLost(described)
            }
            DbError::Query(_) => DbError::Query(described),
        })));
    }
}

impl From<diesel::result::Error> for SubmitError {
    fn from(err: diesel::result::Error) -> Self {
        SubmitError::Db(err.into())
    }
}

/// Cancels a pending or processing job of the organization and releases its
/// reservation in the same transaction: a cancelled job consumes nothing.
pub async fn cancel(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
) -> Result<queries::jobs::CancelOutcome, DbError> {
    let outcome = conn
        .transaction::<_, DbError, _>(async |conn| {
            let outcome = queries::jobs::cancel(conn, org_id, id).await?;
            if let queries::jobs::CancelOutcome::Cancelled(job) = &outcome {
                let record = unigen_db::billing::job_usage_record(job, "cancelled");
                queries::billing::release(conn, id, Some(record)).await?;
            }
            Ok(outcome)
        })
        .await?;
    if let queries::jobs::CancelOutcome::Cancelled(job) = &outcome {
        count_cancelled(std::slice::from_ref(job));
    }
    Ok(outcome)
}

/// `unigen_jobs_finished_total{status="cancelled"}`, after the commit.
fn count_cancelled(jobs: &[Job]) {
    for job in jobs {
        unigen_core::telemetry::metrics::job_finished(
            &job.tool,
            &job.model,
            unigen_core::telemetry::metrics::job_status::CANCELLED,
        );
    }
}

/// Cancels unfinished jobs whose `Cancel-After` deadline passed, at most
/// `limit`, as [`cancel`] does (the reservation released with a `cancelled`
/// usage record: nothing charged), with a reason and a `generation.failed`
/// event each, in one transaction. Callers notify the jobs (waking their
/// workers, which abort) and the event delivery.
pub async fn cancel_past_deadline(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> Result<Vec<Job>, DbError> {
    let cancelled = conn
        .transaction::<_, DbError, _>(async |conn| {
            let mut cancelled = queries::jobs::cancel_past_deadline(conn, limit).await?;
            record_deadline_cancellations(conn, &mut cancelled).await?;
            Ok(cancelled)
        })
        .await?;
    count_cancelled(&cancelled);
    Ok(cancelled)
}

/// [`cancel_past_deadline`] for one job of the organization (a sync request
/// whose deadline came while it waited); `None` when the job is finished or
/// its deadline has not passed on the database's clock.
pub async fn cancel_one_past_deadline(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
) -> Result<Option<Job>, DbError> {
    let cancelled = conn
        .transaction::<_, DbError, _>(async |conn| {
            let mut cancelled = queries::jobs::cancel_one_past_deadline(conn, org_id, id).await?;
            record_deadline_cancellations(conn, &mut cancelled).await?;
            Ok(cancelled.pop())
        })
        .await?;
    count_cancelled(cancelled.as_slice());
    Ok(cancelled)
}

/// The events and the released reservations of jobs just cancelled at their
/// deadline; billing rows are taken in organization order, as a worker's
/// settlement takes them, so the two never wait on each other.
async fn record_deadline_cancellations(
    conn: &mut AsyncPgConnection,
    cancelled: &mut [Job],
) -> Result<(), DbError> {
    cancelled.sort_by_key(|job| (job.org_id, job.id));
    let events: Vec<_> = cancelled
        .iter()
        .map(|job| {
            unigen_db::events::generation_failed(
                job.org_id,
                job.id,
                &job.tool,
                &job.model,
                queries::jobs::CANCEL_AFTER_REASON,
            )
        })
        .collect();
    queries::events::insert_many(conn, &events).await?;
    for job in cancelled.iter() {
        let record = unigen_db::billing::job_usage_record(job, "cancelled");
        queries::billing::release(conn, job.id, Some(record)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod claim_tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_claim_is_settled_once_its_submission_is_done() {
        let claims = ClaimsInFlight::default();
        let claim = Uuid::new_v4();
        // Nothing on its way: at once.
        tokio::time::timeout(Duration::from_millis(50), claims.settled(claim))
            .await
            .expect("settled at once");
        let in_flight = claims.register(claim);
        let waiting = tokio::spawn({
            let claims = claims.clone();
            async move { claims.settled(claim).await }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiting.is_finished(), "waits while the job is on its way");
        drop(in_flight);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("settled once the submission is done")
            .unwrap();
    }
}
