//! Knowledge files: expired leases (a worker died, or put a file aside after
//! a transient failure) go back to `pending`, or fail after
//! `jobs.max_attempts` claims; then every pending file the broker never
//! confirmed (a lost publish, a rescued or handed-back file) is published to
//! the `knowledge` queue. Both steps lock with SKIP LOCKED, so several
//! schedulers share the work.

use std::sync::Arc;
use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use futures_util::future::BoxFuture;
use unigen_db::{DbError, PgPool, queries};
use unigen_jobs::queue::{KnowledgeMessage, Publisher};

use crate::runner::{Activity, Task};

const BATCH: i64 = 200;

pub struct KnowledgeFiles {
    pool: PgPool,
    publisher: Arc<Publisher>,
    max_attempts: i32,
    /// Leaves the API time to publish a fresh upload itself.
    republish_after: Duration,
}

impl KnowledgeFiles {
    pub fn new(
        pool: PgPool,
        publisher: Arc<Publisher>,
        max_attempts: i32,
        republish_after: Duration,
    ) -> Self {
        Self {
            pool,
            publisher,
            max_attempts,
            republish_after,
        }
    }

    async fn round(&self) -> anyhow::Result<Activity> {
        let mut pooled = self.pool.get().await.map_err(DbError::from)?;
        let conn: &mut AsyncPgConnection = &mut pooled;
        let rescued =
            queries::knowledge::rescue_expired_leases(conn, self.max_attempts, BATCH).await?;
        for file in &rescued {
            tracing::warn!(file.id = %file.id, attempt = file.attempt, status = %file.status,
                reason = file.error_message.as_deref().unwrap_or("worker lost"),
                "knowledge file lease expired; rescued");
        }
        let (published, full) = conn
            .transaction::<_, anyhow::Error, _>(async |conn| {
                let files =
                    queries::knowledge::lock_unpublished(conn, self.republish_after, BATCH).await?;
                let mut confirmed = Vec::with_capacity(files.len());
                let mut failure = None;
                for file in &files {
                    let message = KnowledgeMessage {
                        file_id: file.id,
                        attempt: file.attempt,
                    };
                    match self.publisher.publish_knowledge(&message).await {
                        Ok(()) => confirmed.push(file.id),
                        Err(err) => {
                            failure = Some(err);
                            break;
                        }
                    }
                }
                queries::knowledge::mark_republished(conn, &confirmed).await?;
                if let Some(err) = failure {
                    if confirmed.is_empty() {
                        return Err(
                            anyhow::anyhow!(err).context("publishing knowledge files failed")
                        );
                    }
                    tracing::warn!(error = %err, "publishing knowledge files failed part-way");
                }
                Ok((confirmed.len(), files.len() as i64 == BATCH))
            })
            .await?;
        if published > 0 {
            tracing::info!(files = published, "published unconfirmed knowledge files");
        }
        Ok(if full || rescued.len() as i64 == BATCH {
            Activity::Busy
        } else {
            Activity::Idle
        })
    }
}

impl Task for KnowledgeFiles {
    fn name(&self) -> &'static str {
        "knowledge_files"
    }

    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>> {
        Box::pin(self.round())
    }
}
