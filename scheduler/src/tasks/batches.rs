//! Ends OpenAI-style batches: those past their window expire (their
//! unstarted lines never run, never charged), and a batch with no line left
//! to run (all answered, or cancelled or expired with its running lines
//! done) gets its output and error files, final counts, status and webhook
//! event (`unigen_jobs::batches::end_next`). Safe in several schedulers:
//! each batch is taken with SKIP LOCKED.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use unigen_core::storage::FileStore;
use unigen_db::notify::Notifier;
use unigen_db::{DbError, PgPool, queries};

use crate::runner::{Activity, Task};

const EXPIRE_BATCH: i64 = 50;
/// Batches ended per round at most (each writes two files).
const END_PER_ROUND: usize = 4;

pub struct Batches {
    pool: PgPool,
    store: Arc<dyn FileStore>,
    notifier: Notifier,
}

impl Batches {
    pub fn new(pool: PgPool, store: Arc<dyn FileStore>, notifier: Notifier) -> Self {
        Self {
            pool,
            store,
            notifier,
        }
    }

    async fn round(&self) -> anyhow::Result<Activity> {
        let expired = {
            let mut conn = self.pool.get().await.map_err(DbError::from)?;
            queries::batches::expire_due(&mut conn, EXPIRE_BATCH).await?
        };
        for id in &expired {
            tracing::info!(batch.id = %id, "batch past its completion window; expiring");
        }
        let mut ended = 0;
        while ended < END_PER_ROUND {
            let Some(batch) = unigen_jobs::batches::end_next(&self.pool, &self.store).await? else {
                break;
            };
            ended += 1;
            self.notifier.events_recorded();
            tracing::info!(
                batch.id = %batch.id,
                status = %batch.status,
                completed = batch.completed,
                failed = batch.failed,
                "batch ended"
            );
        }
        Ok(
            if ended == END_PER_ROUND || expired.len() as i64 == EXPIRE_BATCH {
                Activity::Busy
            } else {
                Activity::Idle
            },
        )
    }
}

impl Task for Batches {
    fn name(&self) -> &'static str {
        "batches"
    }

    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>> {
        Box::pin(self.round())
    }
}
