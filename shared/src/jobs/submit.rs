use std::sync::Arc;
use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use uuid::Uuid;

use crate::batch::Batcher;
use crate::billing::{Estimate, Refusal};
use crate::config::ModelEntry;
use crate::db::models::{Job, NewJob};
use crate::db::{DbError, PgPool, queries};
use crate::domain::Tool;
use crate::queue::{JobMessage, Publisher};

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
}

/// Persists jobs and hands them to the broker.
#[derive(Clone)]
pub struct JobSubmitter {
    pool: PgPool,
    publisher: Arc<Publisher>,
    confirmed: Batcher<Uuid>,
}

impl JobSubmitter {
    /// `confirmed` marks batches of broker-confirmed jobs as enqueued, one
    /// UPDATE per few milliseconds instead of one per job.
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
        (
            Self {
                pool,
                publisher,
                confirmed,
            },
            handle,
        )
    }

    /// The job is durable once this returns; publishing is best effort here
    /// and guaranteed by the scheduler's relay.
    pub async fn submit(&self, request: NewJobRequest<'_>) -> Result<Job, SubmitError> {
        let id = Uuid::now_v7();
        let new = NewJob {
            id,
            org_id: request.org_id,
            api_key_id: request.api_key_id,
            tool: request.tool.as_str(),
            model: &request.model.id,
            model_tier: request.model.tier.as_str(),
            input_params: &request.input_params,
            estimated_credits: request.estimate.credits,
        };
        let mut pooled = self.pool.get().await.map_err(DbError::from)?;
        let conn: &mut AsyncPgConnection = &mut pooled;
        // The reservation and the job commit together: a refused estimate
        // writes nothing, and every pending job holds its estimate. The
        // reservation goes last: it locks the organization's billing row,
        // which is then held only until the commit.
        let job = conn
            .transaction::<_, SubmitError, _>(async |conn| {
                let job = queries::jobs::insert(conn, &new).await?;
                queries::billing::reserve(conn, request.org_id, id, &request.estimate, None)
                    .await??;
                Ok(job)
            })
            .await?;
        drop(pooled);
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
            let record = crate::billing::job_usage_record(job, "cancelled");
            queries::billing::release(conn, id, Some(record)).await?;
        }
        Ok(outcome)
    })
    .await
}
