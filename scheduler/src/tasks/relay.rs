//! The outbox relay: publishes jobs the broker never confirmed (the API's
//! publish failed, the broker was down, or a job was handed back).

use std::sync::Arc;
use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use futures_util::future::BoxFuture;
use unigen_core::telemetry::propagation;
use unigen_db::{DbError, PgPool, queries};
use unigen_jobs::queue::{JobMessage, Publisher};

use crate::runner::{Activity, Task};

pub struct Relay {
    pool: PgPool,
    publisher: Arc<Publisher>,
    /// Leaves the API time to publish a fresh job itself.
    grace: Duration,
    batch: i64,
}

impl Relay {
    pub fn new(pool: PgPool, publisher: Arc<Publisher>, grace: Duration, batch: i64) -> Self {
        Self {
            pool,
            publisher,
            grace,
            batch,
        }
    }

    /// Locks a batch (other relays skip it), publishes each with a confirm,
    /// and marks the confirmed ones in the same transaction.
    async fn round(&self) -> anyhow::Result<Activity> {
        let mut pooled = self.pool.get().await.map_err(DbError::from)?;
        let conn: &mut AsyncPgConnection = &mut pooled;
        let (published, full) = conn
            .transaction::<_, anyhow::Error, _>(async |conn| {
                let jobs = queries::jobs::lock_unpublished(conn, self.grace, self.batch).await?;
                let mut confirmed = Vec::with_capacity(jobs.len());
                let mut failure = None;
                for job in &jobs {
                    let message = JobMessage {
                        job_id: job.id,
                        tool: job.tool.clone(),
                        attempt: job.attempt,
                    };
                    // A new PRODUCER span (a trace of its own), linked to
                    // the job's first publish.
                    let link = propagation::span_context_from(job.trace_context.as_deref());
                    let span = self.publisher.job_span(&message, link);
                    match self.publisher.publish_in(&message, &span).await {
                        Ok(()) => confirmed.push(job.id),
                        Err(err) => {
                            failure = Some(err);
                            break;
                        }
                    }
                }
                queries::jobs::mark_republished(conn, &confirmed).await?;
                if let Some(err) = failure {
                    if confirmed.is_empty() {
                        return Err(anyhow::anyhow!(err).context("relay publish failed"));
                    }
                    tracing::warn!(error = %err, "relay publish failed part-way");
                }
                Ok((confirmed.len(), jobs.len() as i64 == self.batch))
            })
            .await?;
        if published > 0 {
            tracing::info!(jobs = published, "relay published unconfirmed jobs");
        }
        Ok(if full { Activity::Busy } else { Activity::Idle })
    }
}

impl Task for Relay {
    fn name(&self) -> &'static str {
        "relay"
    }

    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>> {
        Box::pin(self.round())
    }
}
