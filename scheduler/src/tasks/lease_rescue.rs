//! Lease rescue: a job whose worker died (no lease renewal) goes back to the
//! queue, or fails after `jobs.max_attempts` claims.

use std::sync::Arc;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use futures_util::future::BoxFuture;
use unigen_db::notify::Notifier;
use unigen_db::{DbError, PgPool, queries};

use crate::metrics::SchedulerMetrics;
use crate::runner::{Activity, Task};

const BATCH: i64 = 200;

pub struct LeaseRescue {
    pool: PgPool,
    notifier: Notifier,
    max_attempts: i32,
    metrics: Arc<SchedulerMetrics>,
}

impl LeaseRescue {
    pub fn new(
        pool: PgPool,
        notifier: Notifier,
        max_attempts: i32,
        metrics: Arc<SchedulerMetrics>,
    ) -> Self {
        Self {
            pool,
            notifier,
            max_attempts,
            metrics,
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
                super::record_given_up(conn, &rescued).await?;
                Ok(rescued)
            })
            .await?;
        for job in rescued.iter().filter(|job| job.status == "failed") {
            self.metrics.job_failed(&job.tool, "worker_lost");
            self.metrics.job_finished(
                &job.tool,
                &job.model,
                unigen_core::telemetry::metrics::job_status::FAILED,
            );
        }
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
