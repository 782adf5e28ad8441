//! Batched reads of the jobs that parked requests are waiting for.
//!
//! When many jobs finish together, every long poll and sync request woken
//! by the listener must read its job again. One query per waiter would queue
//! thousands of reads on the pool; instead, whatever reads have queued since
//! the previous query are served by one `WHERE id = ANY(...)`.

use std::collections::HashMap;

use tokio::task::JoinHandle;
use unigen_db::models::Job;
use unigen_db::{DbError, PgPool, queries};
use uuid::Uuid;

use unigen_core::batched::Batched;

/// Largest batch: keeps each query's parameter list and result modest.
const MAX_BATCH: usize = 500;
/// Batches read at once (the rest of the pool serves other requests).
const PARALLEL_BATCHES: usize = 4;

#[derive(Clone)]
pub struct JobReader {
    /// (organization, job id) -> the organization's job, if any.
    reads: Batched<(Uuid, Uuid), Option<Job>>,
    pool: PgPool,
}

impl JobReader {
    pub fn spawn(pool: PgPool) -> (Self, JoinHandle<()>) {
        let batch_pool = pool.clone();
        let (reads, handle) = Batched::spawn(
            "job reads",
            MAX_BATCH,
            PARALLEL_BATCHES,
            move |reads: Vec<(Uuid, Uuid)>| {
                let pool = batch_pool.clone();
                async move { read_batch(&pool, reads).await }
            },
        );
        (Self { reads, pool }, handle)
    }

    /// The organization's job, or `None` when it has no job with this id.
    pub async fn read(&self, org_id: Uuid, id: Uuid) -> Result<Option<Job>, DbError> {
        if let Some(job) = self.reads.call((org_id, id)).await {
            return Ok(job);
        }
        // The batch failed (or the reader stopped): read alone, so the caller
        // sees this read's own error.
        let mut conn = self.pool.get().await?;
        queries::jobs::find_for_org(&mut conn, org_id, id).await
    }
}

async fn read_batch(pool: &PgPool, reads: Vec<(Uuid, Uuid)>) -> Result<Vec<Option<Job>>, DbError> {
    let mut ids: Vec<Uuid> = reads.iter().map(|&(_, id)| id).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut conn = pool.get().await?;
    let rows = queries::jobs::find_many(&mut conn, &ids).await?;
    let by_id: HashMap<Uuid, Job> = rows.into_iter().map(|job| (job.id, job)).collect();
    // Another organization's job is not found, as in a single read.
    Ok(reads
        .iter()
        .map(|(org_id, id)| by_id.get(id).filter(|job| job.org_id == *org_id).cloned())
        .collect())
}
