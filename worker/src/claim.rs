//! Claiming jobs: a delivery's job becomes this worker's (status
//! `processing`, a lease) together with its `generation.started` event.
//! Deliveries that arrive together are claimed in one statement with their
//! events, not one transaction each: the claim is on every job's path (a
//! sync request waits for it), and each round trip of it is time the job
//! waits.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use diesel_async::AsyncPgConnection;
use tokio::task::JoinHandle;
use unigen_core::batched::Batched;
use unigen_db::models::Job;
use unigen_db::{DbError, PgPool, queries};
use uuid::Uuid;

/// Largest batch: bounds the statement and how long its row locks are held.
const MAX_BATCH: usize = 200;
// A batch's claims are announced in one NOTIFY (ids and the events marker,
// comma-separated), whose payload must stay below 8000 bytes.
const _: () = assert!((MAX_BATCH + 1) * 37 < 8000);

/// What became of one claim.
#[derive(Debug)]
pub enum Claimed {
    /// This worker owns the job now.
    Ours(Box<Job>),
    /// Taken by another worker, cancelled or finished: a duplicate message.
    /// Or past its `Cancel-After` deadline: never started (the scheduler
    /// cancels it).
    NotPending,
    /// No such job: the message is garbage.
    Unknown,
}

/// Who claims, for how long, and where claims are announced.
pub struct ClaimSettings {
    pub worker_id: String,
    pub lease: Duration,
    /// The job notification channel.
    pub channel: String,
}

/// This worker's claims; cheap to clone.
#[derive(Clone)]
pub struct Claimer {
    pool: PgPool,
    settings: Arc<ClaimSettings>,
    batches: Batched<Uuid, Claimed>,
}

impl Claimer {
    /// The batch task ends with the last clone.
    pub fn spawn(pool: PgPool, settings: ClaimSettings) -> (Self, JoinHandle<()>) {
        let settings = Arc::new(settings);
        let (batch_pool, batch_settings) = (pool.clone(), settings.clone());
        let (batches, task) = Batched::spawn("job claims", MAX_BATCH, 2, move |ids: Vec<Uuid>| {
            let (pool, settings) = (batch_pool.clone(), batch_settings.clone());
            async move { claim(&pool, &ids, &settings).await }
        });
        let claimer = Self {
            pool,
            settings,
            batches,
        };
        (claimer, task)
    }

    /// Claims the job with the next batch (alone if that batch fails).
    /// `Claimed::Ours` also means the `generation.started` event of a first
    /// attempt is committed, and the claim announced.
    pub async fn claim(&self, id: Uuid) -> Result<Claimed, DbError> {
        if let Some(claimed) = self.batches.call(id).await {
            return Ok(claimed);
        }
        let mut answers = claim(&self.pool, &[id], &self.settings).await?;
        Ok(answers.pop().expect("one answer per id"))
    }
}

/// One statement: the pending jobs among `ids` claimed, with the started
/// events of their first attempts (a retried attempt is the same
/// generation and announces nothing new) and the notification of both.
/// Answers in the order of `ids`.
async fn claim(
    pool: &PgPool,
    ids: &[Uuid],
    settings: &ClaimSettings,
) -> Result<Vec<Claimed>, DbError> {
    let mut pooled = pool.get().await?;
    let conn: &mut AsyncPgConnection = &mut pooled;
    // A message redelivered while its first copy waits in the same batch
    // names its job twice: claimed once, the copy is a duplicate.
    let mut distinct = ids.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    // Ids for the events of the jobs that turn out to be first attempts.
    let event_ids: Vec<Uuid> = distinct.iter().map(|_| Uuid::now_v7()).collect();
    let claimed = queries::jobs::claim_many_announcing(
        conn,
        &distinct,
        &event_ids,
        Utc::now(),
        &settings.worker_id,
        settings.lease,
        &settings.channel,
    )
    .await?;
    let ours: HashSet<Uuid> = claimed.iter().map(|job| job.id).collect();
    let missing: Vec<Uuid> = distinct
        .iter()
        .copied()
        .filter(|id| !ours.contains(id))
        .collect();
    // Rare (duplicates, garbage): one more statement only then.
    let existing: HashSet<Uuid> = queries::jobs::existing(conn, &missing)
        .await?
        .into_iter()
        .collect();
    let mut jobs: HashMap<Uuid, Job> = claimed.into_iter().map(|job| (job.id, job)).collect();
    Ok(ids
        .iter()
        .map(|id| match jobs.remove(id) {
            Some(job) => Claimed::Ours(Box::new(job)),
            None if ours.contains(id) || existing.contains(id) => Claimed::NotPending,
            None => Claimed::Unknown,
        })
        .collect())
}
