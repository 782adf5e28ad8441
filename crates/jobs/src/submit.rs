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
use unigen_db::billing::{Estimate, Refusal};
use unigen_db::models::{Job, NewJob};
use unigen_db::queries::billing::ReserveItem;
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
        }
    }
}

type Persisted = Result<Job, Refusal>;

/// Persists jobs and hands them to the broker.
#[derive(Clone)]
pub struct JobSubmitter {
    pool: PgPool,
    publisher: Arc<Publisher>,
    confirmed: Batcher<Uuid>,
    submissions: Batched<Arc<Pending>, Persisted>,
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
            },
            handle,
        )
    }

    /// The job is durable once this returns; publishing is best effort here
    /// and guaranteed by the scheduler's relay.
    pub async fn submit(&self, request: NewJobRequest<'_>) -> Result<Job, SubmitError> {
        let pending = Arc::new(Pending {
            id: Uuid::now_v7(),
            org_id: request.org_id,
            api_key_id: request.api_key_id,
            tool: request.tool,
            model: request.model.id.clone(),
            model_tier: request.model.tier.as_str(),
            input_params: request.input_params,
            estimate: request.estimate,
            cancel_after: request.cancel_after,
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
        match self.publisher.publish(&message).await {
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
/// up (its first job, a new period) takes the single path, in a
/// transaction of its own. Answers in the items' order.
async fn persist(pool: &PgPool, items: &[Arc<Pending>]) -> Result<Vec<Persisted>, DbError> {
    let mut pooled = pool.get().await?;
    let conn: &mut AsyncPgConnection = &mut pooled;
    let reservation = |p: &Pending| ReserveItem {
        org_id: p.org_id,
        id: p.id,
        estimate: p.estimate.clone(),
        expires_at: None,
    };
    let new_jobs: Vec<NewJob<'_>> = items.iter().map(|p| p.new_job()).collect();
    let reservations: Vec<ReserveItem> = items.iter().map(|p| reservation(p)).collect();
    // One statement, committed on its own: every submission's round trips
    // are on a sync request's path.
    let outcomes = queries::jobs::insert_many_reserving(conn, &new_jobs, &reservations).await?;
    let mut answers: Vec<Option<Persisted>> = Vec::with_capacity(items.len());
    let mut setup = Vec::new();
    for (i, outcome) in outcomes.into_iter().enumerate() {
        answers.push(match outcome? {
            Reserving::Inserted(job) => Some(Ok(*job)),
            Reserving::Refused(refusal) => Some(Err(refusal)),
            Reserving::NeedsSetup => {
                setup.push(i);
                None
            }
        });
    }
    if !setup.is_empty() {
        // An organization's first job, or the first of a new period.
        let set_up = conn
            .transaction::<_, DbError, _>(async |conn| {
                let mut answers = Vec::with_capacity(setup.len());
                let mut admitted = Vec::new();
                for &i in &setup {
                    let p = &items[i];
                    match queries::billing::reserve(conn, p.org_id, p.id, &p.estimate, None).await?
                    {
                        Ok(()) => admitted.push(p.new_job()),
                        Err(refusal) => answers.push((p.id, Err(refusal))),
                    }
                }
                for job in queries::jobs::insert_many(conn, &admitted).await? {
                    answers.push((job.id, Ok(job)));
                }
                Ok(answers)
            })
            .await?;
        for (id, answer) in set_up {
            let at = items
                .iter()
                .position(|p| p.id == id)
                .ok_or_else(|| DbError::Query(diesel::result::Error::NotFound))?;
            answers[at] = Some(answer);
        }
    }
    Ok(answers
        .into_iter()
        .map(|answer| answer.expect("every submission answered"))
        .collect())
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
    conn.transaction::<_, DbError, _>(async |conn| {
        let outcome = queries::jobs::cancel(conn, org_id, id).await?;
        if let queries::jobs::CancelOutcome::Cancelled(job) = &outcome {
            let record = unigen_db::billing::job_usage_record(job, "cancelled");
            queries::billing::release(conn, id, Some(record)).await?;
        }
        Ok(outcome)
    })
    .await
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
    conn.transaction::<_, DbError, _>(async |conn| {
        let mut cancelled = queries::jobs::cancel_past_deadline(conn, limit).await?;
        record_deadline_cancellations(conn, &mut cancelled).await?;
        Ok(cancelled)
    })
    .await
}

/// [`cancel_past_deadline`] for one job of the organization (a sync request
/// whose deadline came while it waited); `None` when the job is finished or
/// its deadline has not passed on the database's clock.
pub async fn cancel_one_past_deadline(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
) -> Result<Option<Job>, DbError> {
    conn.transaction::<_, DbError, _>(async |conn| {
        let mut cancelled = queries::jobs::cancel_one_past_deadline(conn, org_id, id).await?;
        record_deadline_cancellations(conn, &mut cancelled).await?;
        Ok(cancelled.pop())
    })
    .await
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
