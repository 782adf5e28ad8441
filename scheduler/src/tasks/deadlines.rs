//! Job deadlines: a processing job whose attempt has run longer than its
//! tool's `jobs.max_run_seconds` fails with a reason, and an unfinished job
//! whose `Cancel-After` deadline passed is cancelled (nothing charged, a
//! `generation.failed` event with the reason). The worker running either is
//! woken by the job's notification, finds the job no longer its own and
//! aborts the provider call (or, without the notification, at its next lease
//! renewal).

use std::sync::Arc;
use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use futures_util::future::BoxFuture;
use unigen_core::config::JobSettings;
use unigen_core::domain::Tool;
use unigen_db::notify::Notifier;
use unigen_db::{DbError, PgPool, queries};

use crate::metrics::SchedulerMetrics;
use crate::runner::{Activity, Task};

const BATCH: i64 = 200;

pub struct Deadlines {
    pool: PgPool,
    notifier: Notifier,
    limits: Vec<(Tool, Duration)>,
    metrics: Arc<SchedulerMetrics>,
}

impl Deadlines {
    pub fn new(
        pool: PgPool,
        notifier: Notifier,
        jobs: &JobSettings,
        metrics: Arc<SchedulerMetrics>,
    ) -> Self {
        let limits = Tool::ALL
            .iter()
            .map(|&tool| (tool, jobs.max_run(tool)))
            .collect();
        Self {
            pool,
            notifier,
            limits,
            metrics,
        }
    }

    async fn round(&self) -> anyhow::Result<Activity> {
        let mut pooled = self.pool.get().await.map_err(DbError::from)?;
        let conn: &mut AsyncPgConnection = &mut pooled;
        // The failures, their events and the released reservations commit together.
        let failed = conn
            .transaction::<_, DbError, _>(async |conn| {
                let failed = queries::jobs::fail_overdue(conn, &self.limits, BATCH).await?;
                super::record_given_up(conn, &failed).await?;
                Ok(failed)
            })
            .await?;
        if !failed.is_empty() {
            self.notifier.events_recorded();
        }
        for job in &failed {
            self.metrics.job_failed(&job.tool, "deadline_exceeded");
            self.metrics.job_finished(
                &job.tool,
                &job.model,
                unigen_core::telemetry::metrics::job_status::FAILED,
            );
            tracing::warn!(job.id = %job.id, tool = %job.tool, attempt = job.attempt, error = job.error_message.as_deref(), "job past its deadline; failed");
            self.notifier.job_changed(job.id);
        }
        let cancelled = unigen_jobs::cancel_past_deadline(conn, BATCH).await?;
        if !cancelled.is_empty() {
            self.notifier.events_recorded();
        }
        for job in &cancelled {
            self.metrics.job_failed(&job.tool, "cancel_after");
            tracing::info!(job.id = %job.id, tool = %job.tool, cancel_after = ?job.cancel_after, "job past its Cancel-After deadline; cancelled");
            self.notifier.job_changed(job.id);
        }
        Ok(
            if failed.len() as i64 == BATCH || cancelled.len() as i64 == BATCH {
                Activity::Busy
            } else {
                Activity::Idle
            },
        )
    }
}

impl Task for Deadlines {
    fn name(&self) -> &'static str {
        "deadlines"
    }

    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>> {
        Box::pin(self.round())
    }
}
