//! Writing a job's terminal state: its result (or failure), its event and
//! its charge commit together. Jobs that finish together on this worker
//! share one transaction: each organization's billing row is locked once
//! per batch instead of once per job, which is what bounded throughput when
//! many jobs of one organization finished at once.

use std::collections::HashSet;
use std::sync::Arc;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use tokio::task::JoinHandle;
use unigen_core::batched::Batched;
use unigen_db::models::{Event, Job};
use unigen_db::queries::billing::SettleItem;
use unigen_db::queries::jobs::Completion;
use unigen_db::{DbError, PgPool, billing, queries};
use uuid::Uuid;

/// Largest batch: bounds how long its locks are held.
const MAX_BATCH: usize = 100;
// A batch's completions are announced in one NOTIFY (ids and the events
// marker, comma-separated), whose payload must stay below 8000 bytes.
const _: () = assert!((MAX_BATCH + 1) * 37 < 8000);

pub enum Terminal {
    Complete {
        output: serde_json::Value,
        actual_credits: i64,
    },
    Fail(String),
}

/// One job's terminal state, written only if its attempt still owns the job.
pub struct Finish {
    pub job: Job,
    pub terminal: Terminal,
    pub event: Event,
}

/// This worker's terminal writes; cheap to clone.
#[derive(Clone)]
pub struct Finisher {
    pool: PgPool,
    channel: Arc<str>,
    batches: Batched<Arc<Finish>, bool>,
}

impl Finisher {
    /// The batch task ends with the last clone. Completions are announced
    /// on `channel` (job notifications) by their own commit.
    pub fn spawn(pool: PgPool, channel: &str) -> (Self, JoinHandle<()>) {
        let channel: Arc<str> = channel.into();
        let (batch_pool, batch_channel) = (pool.clone(), channel.clone());
        let (batches, task) = Batched::spawn(
            "job results",
            MAX_BATCH,
            1,
            move |items: Vec<Arc<Finish>>| {
                let (pool, channel) = (batch_pool.clone(), batch_channel.clone());
                async move { write(&pool, &channel, &items).await }
            },
        );
        let finisher = Self {
            pool,
            channel,
            batches,
        };
        (finisher, task)
    }

    /// Writes the job's terminal state with the next batch (alone if that
    /// batch fails). `Ok(false)`: the attempt no longer owns the job
    /// (cancelled or taken over); nothing was written. A completion written
    /// is already announced (the job and its event); anything else is the
    /// caller's to announce.
    pub async fn finish(&self, finish: Finish) -> Result<bool, DbError> {
        let finish = Arc::new(finish);
        if let Some(written) = self.batches.call(finish.clone()).await {
            return Ok(written);
        }
        Ok(write(&self.pool, &self.channel, std::slice::from_ref(&finish)).await?[0])
    }
}

/// One transaction for `items`; answers whether each was written. The job
/// rows are taken first, in id order, and the billing rows last (in
/// organization order): the order a cancel takes them in, so the two never
/// wait on each other.
async fn write(pool: &PgPool, channel: &str, items: &[Arc<Finish>]) -> Result<Vec<bool>, DbError> {
    let mut pooled = pool.get().await?;
    let conn: &mut AsyncPgConnection = &mut pooled;
    conn.transaction::<_, DbError, _>(async |conn| {
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by_key(|&i| items[i].job.id);
        let mut written = vec![false; items.len()];
        // The completions in one statement; failures (rare) one by one.
        let completions: Vec<Completion<'_>> = order
            .iter()
            .filter_map(|&i| match &items[i].terminal {
                Terminal::Complete {
                    output,
                    actual_credits,
                } => Some(Completion {
                    id: items[i].job.id,
                    attempt: items[i].job.attempt,
                    output,
                    actual_credits: *actual_credits,
                    event: &items[i].event,
                }),
                Terminal::Fail(_) => None,
            })
            .collect();
        let completed: HashSet<Uuid> = queries::jobs::complete_many(conn, &completions, channel)
            .await?
            .into_iter()
            .collect();
        for &i in &order {
            let Finish { job, terminal, .. } = &*items[i];
            written[i] = match terminal {
                Terminal::Complete { .. } => completed.contains(&job.id),
                Terminal::Fail(message) => {
                    queries::jobs::fail(conn, job.id, job.attempt, message).await?
                }
            };
        }
        // The completions' events went with their statement.
        let events: Vec<Event> = order
            .iter()
            .filter(|&&i| written[i] && matches!(items[i].terminal, Terminal::Fail(_)))
            .map(|&i| items[i].event.clone())
            .collect();
        queries::events::insert_many(conn, &events).await?;
        order.retain(|&i| written[i]);
        order.sort_by_key(|&i| (items[i].job.org_id, items[i].job.id));
        charge(conn, items, &order).await?;
        Ok(written)
    })
    .await
}

/// Completed means charged, exactly once; a failed job consumes nothing.
/// `written` is in organization order, the order accounts are locked in.
async fn charge(
    conn: &mut AsyncPgConnection,
    items: &[Arc<Finish>],
    written: &[usize],
) -> Result<(), DbError> {
    let all_completed = written
        .iter()
        .all(|&i| matches!(items[i].terminal, Terminal::Complete { .. }));
    if !all_completed {
        // Rare (a failure among them): one statement per job keeps the
        // organization order across releases and settlements.
        for &i in written {
            charge_one(conn, &items[i]).await?;
        }
        return Ok(());
    }
    // The batch's charges in one statement.
    let settlements: Vec<SettleItem> = written
        .iter()
        .map(|&i| {
            let Finish { job, terminal, .. } = &*items[i];
            let Terminal::Complete {
                output,
                actual_credits,
            } = terminal
            else {
                unreachable!("checked above")
            };
            let (charge, multiplier) = billing::job_charge(job, output, *actual_credits);
            SettleItem {
                id: job.id,
                charge,
                multiplier,
                usage: billing::completed_job_usage_record(job, output),
            }
        })
        .collect();
    let settled = queries::billing::settle_many(conn, &settlements).await?;
    let mut usages = Vec::with_capacity(written.len());
    for (&i, settled) in written.iter().zip(settled) {
        if let Some(settled) = settled? {
            usages.push((items[i].job.id, billing::usage_object(&settled)));
        }
    }
    // One statement: the organizations' billing rows stay locked until the
    // commit, so every round trip here is time other holds wait.
    queries::jobs::set_usage_many(conn, &usages).await
}

async fn charge_one(conn: &mut AsyncPgConnection, finish: &Finish) -> Result<(), DbError> {
    let job = &finish.job;
    match &finish.terminal {
        Terminal::Complete {
            output,
            actual_credits,
        } => {
            let (charge, multiplier) = billing::job_charge(job, output, *actual_credits);
            let record = billing::completed_job_usage_record(job, output);
            if let Some(settled) =
                queries::billing::settle(conn, job.id, &charge, multiplier, &record).await?
            {
                let usage = billing::usage_object(&settled);
                queries::jobs::set_usage(conn, job.id, &usage).await?;
            }
        }
        Terminal::Fail(_) => {
            let record = billing::job_usage_record(job, "failed");
            queries::billing::release(conn, job.id, Some(record)).await?;
        }
    }
    Ok(())
}
