//! Retention: finished jobs are deleted `jobs.retention_seconds` after they
//! finished, with their stored inputs and outputs; a deleted job is a 404
//! like an unknown one. Files go first, inside the transaction that holds
//! the rows: if the process dies half-way, the rows are still there and the
//! next round deletes what is left, so no file is orphaned.
//!
//! Finished agent runs, with their steps and files, go
//! `agents.run_retention_seconds` after they ended.
//!
//! Events (the webhook outbox) and their delivery history go
//! `webhooks.event_retention_seconds` after they were recorded, unless a
//! delivery is still pending.

use std::sync::Arc;
use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use futures_util::future::BoxFuture;
use unigen_core::storage::{FileStore, run_storage_prefix, stored_files};
use unigen_db::{PgPool, queries};

use crate::runner::{Activity, Task};

const BATCH: i64 = 200;
const EVENT_BATCH: i64 = 1000;

pub struct Retention {
    pool: PgPool,
    store: Arc<dyn FileStore>,
    retention: Duration,
}

impl Retention {
    pub fn new(pool: PgPool, store: Arc<dyn FileStore>, retention: Duration) -> Self {
        Self {
            pool,
            store,
            retention,
        }
    }

    async fn round(&self) -> anyhow::Result<Activity> {
        let mut pooled = self.pool.get().await?;
        let conn: &mut AsyncPgConnection = &mut pooled;
        let deleted = conn
            .transaction::<_, anyhow::Error, _>(async |conn| {
                let expired = queries::jobs::lock_expired(conn, self.retention, BATCH).await?;
                for job in &expired {
                    let mut keys = stored_files(&job.input_params, job.org_id);
                    if let Some(output) = &job.output_data {
                        keys.extend(stored_files(output, job.org_id));
                    }
                    // A file that cannot be deleted is logged and left: one
                    // job must never stop retention for every organization.
                    for key in &keys {
                        if let Err(error) = self.store.delete(key).await {
                            tracing::error!(job.id = %job.id, %key, %error, "retention: file not deleted");
                        }
                    }
                    // Outputs live under `<org>/<job>/`, partial ones of
                    // failed attempts too.
                    let prefix = format!("{}/{}", job.org_id, job.id);
                    if let Err(error) = self.store.delete_prefix(&prefix).await {
                        tracing::error!(job.id = %job.id, %prefix, %error, "retention: files not deleted");
                    }
                }
                let ids: Vec<_> = expired.iter().map(|job| job.id).collect();
                queries::jobs::delete(conn, &ids).await?;
                Ok(ids.len())
            })
            .await?;
        if deleted > 0 {
            tracing::info!(jobs = deleted, "expired jobs deleted");
        }
        Ok(if deleted as i64 == BATCH {
            Activity::Busy
        } else {
            Activity::Idle
        })
    }
}

impl Task for Retention {
    fn name(&self) -> &'static str {
        "retention"
    }

    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>> {
        Box::pin(self.round())
    }
}

/// Finished agent runs go `agents.run_retention_seconds` after they ended,
/// with their steps and the files their tools made (files first, as for jobs).
pub struct RunRetention {
    pool: PgPool,
    store: Arc<dyn FileStore>,
    retention: Duration,
}

impl RunRetention {
    pub fn new(pool: PgPool, store: Arc<dyn FileStore>, retention: Duration) -> Self {
        Self {
            pool,
            store,
            retention,
        }
    }

    async fn round(&self) -> anyhow::Result<Activity> {
        let mut pooled = self.pool.get().await?;
        let conn: &mut AsyncPgConnection = &mut pooled;
        let deleted = conn
            .transaction::<_, anyhow::Error, _>(async |conn| {
                let expired =
                    queries::agent_runs::lock_expired(conn, self.retention, BATCH).await?;
                for &run in &expired {
                    let prefix = run_storage_prefix(run);
                    if let Err(error) = self.store.delete_prefix(&prefix).await {
                        tracing::error!(run.id = %run, %prefix, %error, "run retention: files not deleted");
                    }
                }
                Ok(queries::agent_runs::delete(conn, &expired).await?)
            })
            .await?;
        if deleted > 0 {
            tracing::info!(runs = deleted, "expired agent runs deleted");
        }
        Ok(if deleted as i64 == BATCH {
            Activity::Busy
        } else {
            Activity::Idle
        })
    }
}

impl Task for RunRetention {
    fn name(&self) -> &'static str {
        "run_retention"
    }

    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>> {
        Box::pin(self.round())
    }
}

pub struct EventRetention {
    pool: PgPool,
    retention: Duration,
}

impl EventRetention {
    pub fn new(pool: PgPool, retention: Duration) -> Self {
        Self { pool, retention }
    }

    async fn round(&self) -> anyhow::Result<Activity> {
        let mut conn = self.pool.get().await?;
        let deleted =
            queries::events::delete_expired(&mut conn, self.retention, EVENT_BATCH).await?;
        if deleted > 0 {
            tracing::info!(events = deleted, "expired events deleted");
        }
        Ok(if deleted as i64 == EVENT_BATCH {
            Activity::Busy
        } else {
            Activity::Idle
        })
    }
}

impl Task for EventRetention {
    fn name(&self) -> &'static str {
        "event_retention"
    }

    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>> {
        Box::pin(self.round())
    }
}

/// Idempotency-Key records past their 24 hours.
pub struct IdempotencyRetention {
    pool: PgPool,
}

impl IdempotencyRetention {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    async fn round(&self) -> anyhow::Result<Activity> {
        let mut conn = self.pool.get().await?;
        let deleted = queries::idempotency::delete_expired(&mut conn, EVENT_BATCH).await?;
        if deleted > 0 {
            tracing::debug!(records = deleted, "expired idempotency keys deleted");
        }
        Ok(if deleted as i64 == EVENT_BATCH {
            Activity::Busy
        } else {
            Activity::Idle
        })
    }
}

impl Task for IdempotencyRetention {
    fn name(&self) -> &'static str {
        "idempotency_retention"
    }

    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>> {
        Box::pin(self.round())
    }
}
