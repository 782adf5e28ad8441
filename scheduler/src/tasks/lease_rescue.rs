//! Lease rescue: a job whose worker died (no lease renewal) goes back to the
//! queue, or fails after `jobs.max_attempts` claims.

use diesel_async::{AsyncConnection, AsyncPgConnection};
use futures_util::future::BoxFuture;
use unigen_shared::db::{DbError, PgPool, queries};
use unigen_shared::events;
use unigen_shared::notify::Notifier;

use crate::runner::{Activity, Task};

const BATCH: i64 = 200;

pub struct LeaseRescue {
    pool: PgPool,
    notifier: Notifier,
    max_attempts: i32,
}

impl LeaseRescue {
    pub fn new(pool: PgPool, notifier: Notifier, max_attempts: i32) -> Self {
        Self {
            pool,
            notifier,
            max_attempts,
        }
    }

    async fn round(&self) -> anyhow::Result<Activity> {
        let mut pooled = self.pool.get().await.map_err(DbError::from)?;
        let conn: &mut AsyncPgConnection = &mut pooled;
        // A job given up on reports `generation.failed` in the same commit.
        let rescued = conn
            .transaction::<_, DbError, _>(async |conn| {
                let rescued =
                    queries::jobs::rescue_expired_leases(conn, self.max_attempts, BATCH).await?;
                for job in rescued.iter().filter(|job| job.status == "failed") {
                    let message = job.error_message.as_deref().unwrap_or("the job failed");
                    let event = events::generation_failed(
                        job.org_id, job.id, &job.tool, &job.model, message,
                    );
                    queries::events::insert(conn, &event).await?;
                    // Given up on: the job consumes nothing.
                    queries::billing::release(conn, job.id, None).await?;
                }
                Ok(rescued)
            })
            .await?;
        if rescued.iter().any(|job| job.status == "failed") {
            self.notifier.events_recorded();
        }
        for job in &rescued {
            tracing::warn!(job.id = %job.id, attempt = job.attempt, status = %job.status, "lease expired; job rescued");
            self.notifier.job_changed(job.id);
        }
        Ok(if rescued.len() as i64 == BATCH {
            Activity::Busy
        } else {
            Activity::Idle
        })
    }
}

impl Task for LeaseRescue {
    fn name(&self) -> &'static str {
        "lease_rescue"
    }

    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>> {
        Box::pin(self.round())
    }
}
