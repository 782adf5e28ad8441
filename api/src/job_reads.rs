//! Batched reads of the jobs that parked requests are waiting for.
//!
//! When many jobs finish together, every long poll and sync request woken
//! by the listener must read its job again. One query per waiter would queue
//! thousands of reads on the pool; instead, waiters hand their reads to one
//! task that serves whatever has queued up since its last query with a
//! single `WHERE id = ANY(...)`. Under light load a batch is one read, so
//! nothing waits for a window to fill.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use unigen_shared::db::models::Job;
use unigen_shared::db::{DbError, PgPool, queries};
use uuid::Uuid;

/// Largest batch: keeps each query's parameter list and result modest.
const MAX_BATCH: usize = 500;
/// Batches read at once (the rest of the pool serves other requests).
const PARALLEL_BATCHES: usize = 4;

struct Read {
    org_id: Uuid,
    id: Uuid,
    /// `None`: the batch failed; the waiter reads on its own.
    reply: oneshot::Sender<Option<Option<Job>>>,
}

#[derive(Clone)]
pub struct JobReader {
    tx: mpsc::UnboundedSender<Read>,
    pool: PgPool,
}

impl JobReader {
    pub fn spawn(pool: PgPool) -> (Self, JoinHandle<()>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<Read>();
        let batch_pool = pool.clone();
        let handle = tokio::spawn(async move {
            let permits = Arc::new(Semaphore::new(PARALLEL_BATCHES));
            while let Some(first) = rx.recv().await {
                // Whatever queued while the previous batches ran joins this one.
                let permit = permits.clone().acquire_owned().await.expect("never closed");
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(read) => batch.push(read),
                        Err(_) => break,
                    }
                }
                let pool = batch_pool.clone();
                tokio::spawn(async move {
                    serve(&pool, batch).await;
                    drop(permit);
                });
            }
        });
        (Self { tx, pool }, handle)
    }

    /// The organization's job, or `None` when it has no job with this id.
    pub async fn read(&self, org_id: Uuid, id: Uuid) -> Result<Option<Job>, DbError> {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Read { org_id, id, reply }).is_ok()
            && let Ok(Some(job)) = answer.await
        {
            return Ok(job);
        }
        // The batch failed (or the reader stopped): read alone, so the caller
        // sees this read's own error.
        let mut conn = self.pool.get().await?;
        queries::jobs::find_for_org(&mut conn, org_id, id).await
    }
}

async fn serve(pool: &PgPool, batch: Vec<Read>) {
    let mut ids: Vec<Uuid> = batch.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    ids.dedup();
    let rows = async {
        let mut conn = pool.get().await?;
        queries::jobs::find_many(&mut conn, &ids).await
    }
    .await;
    match rows {
        Ok(rows) => {
            let by_id: HashMap<Uuid, Job> = rows.into_iter().map(|job| (job.id, job)).collect();
            for read in batch {
                // Another organization's job is not found, as in a single read.
                let job = by_id.get(&read.id).filter(|job| job.org_id == read.org_id);
                let _ = read.reply.send(Some(job.cloned()));
            }
        }
        Err(err) => {
            tracing::debug!(error = %err, reads = batch.len(), "batched job read failed");
            for read in batch {
                let _ = read.reply.send(None);
            }
        }
    }
}
