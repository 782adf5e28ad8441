//! Abandoned agent runs: a run still `running` well past
//! `agents.max_run_seconds` lost its API process (a run ends itself within
//! its limit). It fails with a reason and its `agent.run.failed` event; its
//! reservation is released (a failed run is charged only what it recorded
//! as consumed, and an abandoned one recorded nothing).

use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use futures_util::future::BoxFuture;
use unigen_db::billing::run_usage_record as usage_record;
use unigen_db::notify::Notifier;
use unigen_db::queries::agent_runs::ABANDONED_MARGIN;
use unigen_db::{DbError, PgPool, events, queries};

use crate::runner::{Activity, Task};

const BATCH: i64 = 100;
pub const ABANDONED_MESSAGE: &str =
    "the run was interrupted: the server running it stopped before it finished";

pub struct AbandonedRuns {
    pool: PgPool,
    notifier: Notifier,
    /// A run older than this and still running is abandoned.
    after: Duration,
}

impl AbandonedRuns {
    pub fn new(pool: PgPool, notifier: Notifier, max_run: Duration) -> Self {
        Self {
            pool,
            notifier,
            after: max_run + ABANDONED_MARGIN,
        }
    }

    async fn round(&self) -> anyhow::Result<Activity> {
        let started_before = chrono::Utc::now() - self.after;
        let mut pooled = self.pool.get().await.map_err(DbError::from)?;
        let conn: &mut AsyncPgConnection = &mut pooled;
        let failed = conn
            .transaction::<_, DbError, _>(async |conn| {
                let failed = queries::agent_runs::fail_abandoned(
                    conn,
                    started_before,
                    ABANDONED_MESSAGE,
                    BATCH,
                )
                .await?;
                for run in &failed {
                    let agent =
                        queries::agents::find_visible(conn, run.org_id, run.agent_id).await?;
                    let (name, model) = agent.map(|a| (a.name, a.model)).unwrap_or_default();
                    queries::events::insert(conn, &events::agent_run_failed(run, &name)).await?;
                    let record = usage_record(run, &model, "failed", Vec::new(), (0, 0));
                    queries::billing::release(conn, run.id, Some(record)).await?;
                }
                Ok(failed)
            })
            .await?;
        if !failed.is_empty() {
            self.notifier.events_recorded();
        }
        for run in &failed {
            tracing::warn!(run.id = %run.id, agent.id = %run.agent_id, "agent run abandoned by its API process; failed");
        }
        Ok(if failed.len() as i64 == BATCH {
            Activity::Busy
        } else {
            Activity::Idle
        })
    }
}

impl Task for AbandonedRuns {
    fn name(&self) -> &'static str {
        "abandoned_agent_runs"
    }

    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>> {
        Box::pin(self.round())
    }
}
