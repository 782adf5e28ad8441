//! Allowances: this process holds a block of an organization's credits (and
//! of one quota bucket) as ONE reservation row and admits sync requests
//! (chat, embeddings) against it in memory.
//!
//! The block is an ordinary reservation, so limits stay exact: every other
//! reservation (jobs, other API processes) sees it, and a request is
//! admitted only from what this process holds in the database. When a
//! request needs more than the block's free part, the block is resized in
//! one statement that counts its own free part as available: a refusal is
//! exact, and near a limit the block shrinks to what requests need. Settling
//! a request charges its actual use out of the block (in batches: one
//! statement and one commit per batch, which the request waits for, so an
//! answer is never sent before its charge is durable) and gives the rest of
//! its estimate back to the free part. A block idle for `metering.idle_ms`
//! is given back; a crashed process's blocks expire after
//! `metering.lease_seconds` and the scheduler releases them.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::task::JoinHandle;
use unigen_db::billing::{Bucket, Charge, Refusal, Settled};
use unigen_db::models::UsageRecord;
use unigen_db::queries::billing;
use unigen_db::queries::billing::{AllowanceGrowth, Amount, Grown, ShareItem};
use unigen_db::{DbError, PgPool};
use uuid::Uuid;

use unigen_core::batched::Batched;

/// Largest settlement batch: bounds the statement and how long each
/// account lock is held.
const MAX_BATCH: usize = 500;
/// A block grows by at least this many times what the request needs.
const GROWTH_FACTOR: i64 = 8;
/// Idle entries without a hold are forgotten after this long.
const FORGET_AFTER: Duration = Duration::from_secs(600);

type Settlement = Result<Settled, DbError>;

/// Runs `work` to its end even when the request awaiting it is dropped (a
/// client gone mid-request): a block's row and this process's book of it
/// must agree, or requests would be admitted that no hold covers, or a
/// block would stay resizing (and reserved) until restart.
async fn to_completion<T: Send + 'static>(
    work: impl Future<Output = Result<T, DbError>> + Send + 'static,
) -> Result<T, DbError> {
    match tokio::spawn(work).await {
        Ok(result) => result,
        Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        // The runtime is shutting down.
        Err(_) => Err(DbError::Query(diesel::result::Error::QueryBuilderError(
            "the process is shutting down".into(),
        ))),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    org_id: Uuid,
    bucket: Option<Bucket>,
}

struct Allowance {
    id: Uuid,
    /// What the reservation row holds, as far as this process knows (never
    /// more than it does).
    held: Amount,
    /// Held by admitted requests that have not settled yet.
    promised: Amount,
    period_start: DateTime<Utc>,
    period_end: DateTime<Utc>,
    /// A resize is in flight: nothing is admitted from the free part, and
    /// what settles meanwhile is counted in `used_while_resizing`.
    resizing: bool,
    used_while_resizing: Amount,
    last_admitted: Instant,
    /// Charged out of the hold since `since`: sizes the next growth.
    charged: Amount,
    since: Instant,
    /// One resize at a time per allowance.
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl Allowance {
    fn new() -> Self {
        let now = Instant::now();
        Self {
            id: Uuid::now_v7(),
            held: Amount::default(),
            promised: Amount::default(),
            // Unknown until the first growth: nothing is free before it.
            period_start: DateTime::<Utc>::MIN_UTC,
            period_end: DateTime::<Utc>::MIN_UTC,
            resizing: false,
            used_while_resizing: Amount::default(),
            last_admitted: now,
            charged: Amount::default(),
            since: now,
            gate: Arc::default(),
        }
    }

    fn free(&self) -> Amount {
        self.held - self.promised
    }

    fn current(&self) -> bool {
        self.period_end > Utc::now()
    }

    /// What to ask for beyond `need`: several requests' worth, what is in
    /// flight, and a second of what was charged lately.
    fn extra_for(&mut self, need: Amount) -> Amount {
        let seconds = self.since.elapsed().as_secs_f64().max(0.001);
        let per_second = |charged: i64| (charged as f64 / seconds).ceil() as i64;
        let extra = Amount {
            credits: (need.credits * GROWTH_FACTOR)
                .max(self.promised.credits)
                .max(per_second(self.charged.credits)),
            milli: (need.milli * GROWTH_FACTOR)
                .max(self.promised.milli)
                .max(per_second(self.charged.milli)),
        };
        self.charged = Amount::default();
        self.since = Instant::now();
        extra
    }

    /// Records what the database holds after a resize that started with
    /// `resizing` set: settlements that ran meanwhile may have been applied
    /// before or after it, so they are taken off again (never overstating).
    fn resized(&mut self, held: Amount) {
        self.held = Amount {
            credits: (held.credits - self.used_while_resizing.credits).max(0),
            milli: (held.milli - self.used_while_resizing.milli).max(0),
        };
        self.used_while_resizing = Amount::default();
        self.resizing = false;
    }
}

#[derive(Default)]
struct Book {
    active: HashMap<Key, Allowance>,
    /// Blocks of ended periods: no longer admitting, settled and given back.
    retired: HashMap<Uuid, (Key, Allowance)>,
}

impl Book {
    fn find(&mut self, key: Key, id: Uuid) -> Option<&mut Allowance> {
        match self.active.get_mut(&key) {
            Some(allowance) if allowance.id == id => Some(allowance),
            _ => self.retired.get_mut(&id).map(|(_, allowance)| allowance),
        }
    }

    /// Moves the key's block to the retired ones; a fresh one takes its place.
    fn retire(&mut self, key: Key) {
        if let Some(old) = self.active.insert(key, Allowance::new()) {
            self.retired.insert(old.id, (key, old));
        }
    }
}

struct Inner {
    pool: PgPool,
    lease: Duration,
    idle: Duration,
    book: Mutex<Book>,
    settlements: Batched<Arc<ShareItem>, Settlement>,
}

/// This process's allowances; cheap to clone.
#[derive(Clone)]
pub struct Allowances {
    inner: Arc<Inner>,
}

/// What a request took from an allowance: settle it with what the request
/// used, or release it when the request failed. Dropped unsettled, it goes
/// back to the allowance's free part (nothing is charged or recorded).
pub struct Hold {
    allowances: Allowances,
    key: Key,
    id: Uuid,
    period_start: DateTime<Utc>,
    need: Amount,
    open: bool,
}

impl Allowances {
    /// Starts the housekeeping (idle blocks given back, leases renewed:
    /// abort it at shutdown, after [`Allowances::close`]) and the settlement
    /// batches (ending with the last clone).
    pub fn spawn(
        pool: PgPool,
        lease: Duration,
        idle: Duration,
    ) -> (Self, JoinHandle<()>, JoinHandle<()>) {
        let settle_pool = pool.clone();
        let (settlements, settle_task) = Batched::spawn(
            "settlements",
            MAX_BATCH,
            1,
            move |items: Vec<Arc<ShareItem>>| {
                let pool = settle_pool.clone();
                async move {
                    let mut conn = pool.get().await?;
                    billing::settle_shares(&mut conn, &items).await
                }
            },
        );
        let allowances = Self {
            inner: Arc::new(Inner {
                pool,
                lease,
                idle,
                book: Mutex::default(),
                settlements,
            }),
        };
        let task = super::housekeeping::spawn_housekeeping(allowances.clone(), idle, lease);
        (allowances, task, settle_task)
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.inner.book.lock().expect("allowances lock")
    }

    /// Admits a request needing `need` (credits, and thousandths of
    /// `bucket`). `Ok(Err(refusal))`: it does not fit; nothing changed.
    pub async fn admit(
        &self,
        org_id: Uuid,
        bucket: Option<Bucket>,
        need: Amount,
    ) -> Result<Result<Hold, Refusal>, DbError> {
        let key = Key { org_id, bucket };
        let need = Amount {
            credits: need.credits.max(0),
            milli: if bucket.is_some() {
                need.milli.max(0)
            } else {
                0
            },
        };
        if let Some(hold) = self.take_free(key, need) {
            return Ok(Ok(hold));
        }
        loop {
            let gate = self
                .book()
                .active
                .entry(key)
                .or_insert_with(Allowance::new)
                .gate
                .clone();
            let turn = gate.clone().lock_owned().await;
            // The entry may have been replaced while we waited.
            let same = self
                .book()
                .active
                .get(&key)
                .is_some_and(|a| Arc::ptr_eq(&a.gate, &gate));
            if !same {
                continue;
            }
            if let Some(hold) = self.take_free(key, need) {
                return Ok(Ok(hold));
            }
            // The turn goes with the resize: it is released when the resize
            // has ended, even if this request was dropped meanwhile.
            let allowances = self.clone();
            let grown = to_completion(async move {
                let _turn = turn;
                allowances.grow(key, need).await
            })
            .await?;
            match grown {
                Some(outcome) => return Ok(outcome),
                // An ended period: a fresh block (with its own gate).
                None => continue,
            }
        }
    }

    /// From the free part, without a round trip.
    fn take_free(&self, key: Key, need: Amount) -> Option<Hold> {
        let mut book = self.book();
        let allowance = book.active.get_mut(&key)?;
        if allowance.resizing || !allowance.current() || !need.fits_in(allowance.free()) {
            return None;
        }
        allowance.promised = allowance.promised + need;
        allowance.last_admitted = Instant::now();
        Some(self.hold(key, allowance, need))
    }

    fn hold(&self, key: Key, allowance: &Allowance, need: Amount) -> Hold {
        Hold {
            allowances: self.clone(),
            key,
            id: allowance.id,
            period_start: allowance.period_start,
            need,
            open: true,
        }
    }

    /// Resizes the key's block for `need` (its gate held). `None`: the block
    /// belonged to an ended period and was retired; try a fresh one.
    async fn grow(&self, key: Key, need: Amount) -> Result<Option<Result<Hold, Refusal>>, DbError> {
        let growth = {
            let mut book = self.book();
            let stale = book
                .active
                .get(&key)
                .is_some_and(|a| a.held != Amount::default() && !a.current());
            if stale {
                book.retire(key);
            }
            let allowance = book.active.get_mut(&key).expect("entry made by admit");
            allowance.resizing = true;
            AllowanceGrowth {
                id: allowance.id,
                org_id: key.org_id,
                bucket: key.bucket,
                keep: allowance.promised,
                need,
                extra: allowance.extra_for(need),
                expires_at: Utc::now() + self.inner.lease,
            }
        };
        let grown = async {
            let mut conn = self.inner.pool.get().await?;
            billing::grow_allowance(&mut conn, &growth).await
        }
        .await;
        let mut book = self.book();
        let allowance = book
            .active
            .get_mut(&key)
            .filter(|a| a.id == growth.id)
            .expect("a resizing block is neither retired nor replaced");
        match grown {
            Err(err) => {
                // Unknown whether it applied: the old hold stands (never overstated).
                let held = allowance.held;
                allowance.resized(held);
                Err(err)
            }
            Ok(Grown::Held {
                held,
                period_start,
                period_end,
            }) => {
                allowance.resized(held);
                allowance.period_start = period_start;
                allowance.period_end = period_end;
                allowance.promised = allowance.promised + need;
                allowance.last_admitted = Instant::now();
                Ok(Some(Ok(self.hold(key, allowance, need))))
            }
            Ok(Grown::Stale) => {
                let held = allowance.held;
                allowance.resized(held);
                book.retire(key);
                Ok(None)
            }
            Ok(Grown::Refused(refusal)) => {
                let held = allowance.held;
                allowance.resized(held);
                Ok(Some(Err(refusal)))
            }
        }
    }

    /// Runs a settlement in the next batch (alone if that batch fails).
    async fn settle(&self, item: ShareItem) -> Settlement {
        let item = Arc::new(item);
        if let Some(settled) = self.inner.settlements.call(item.clone()).await {
            return settled;
        }
        let mut conn = self.inner.pool.get().await?;
        billing::settle_shares(&mut conn, std::slice::from_ref(&item))
            .await?
            .pop()
            .expect("settle_shares answers every item")
    }

    /// A request is done with its hold: `used` of it was charged out of the
    /// block, the rest is free again.
    fn finished(&self, key: Key, id: Uuid, need: Amount, used: Amount) {
        let mut book = self.book();
        let Some(allowance) = book.find(key, id) else {
            return;
        };
        allowance.promised = allowance.promised - need;
        allowance.held = Amount {
            credits: (allowance.held.credits - used.credits).max(0),
            milli: (allowance.held.milli - used.milli).max(0),
        };
        allowance.charged = allowance.charged + used;
        if allowance.resizing {
            allowance.used_while_resizing = allowance.used_while_resizing + used;
        }
    }

    /// Gives back idle blocks (nothing promised, nothing admitted for
    /// `idle`) and what retired blocks hold beyond their requests.
    async fn give_back_idle(&self) {
        let mut shrinks: Vec<(Key, Uuid, Amount, tokio::sync::OwnedMutexGuard<()>)> = Vec::new();
        {
            let mut book = self.book();
            let idle = self.inner.idle;
            // Retired blocks: what their requests do not hold goes back;
            // once they are settled and empty, they are forgotten.
            book.retired.retain(|_, (_, allowance)| {
                allowance.resizing
                    || allowance.held != Amount::default()
                    || allowance.promised != Amount::default()
            });
            for (id, (key, allowance)) in &mut book.retired {
                if allowance.resizing || allowance.held == allowance.promised {
                    continue;
                }
                if let Ok(turn) = allowance.gate.clone().try_lock_owned() {
                    allowance.resizing = true;
                    shrinks.push((*key, *id, allowance.promised, turn));
                }
            }
            book.active.retain(|_, allowance| {
                !(allowance.held == Amount::default()
                    && allowance.promised == Amount::default()
                    && !allowance.resizing
                    && allowance.last_admitted.elapsed() >= FORGET_AFTER
                    && Arc::strong_count(&allowance.gate) == 1)
            });
            for (key, allowance) in &mut book.active {
                if allowance.resizing
                    || allowance.held == Amount::default()
                    || allowance.promised != Amount::default()
                    || allowance.last_admitted.elapsed() < idle
                {
                    continue;
                }
                if let Ok(turn) = allowance.gate.clone().try_lock_owned() {
                    allowance.resizing = true;
                    shrinks.push((*key, allowance.id, allowance.promised, turn));
                }
            }
        }
        for (key, id, keep, _turn) in shrinks {
            let result = async {
                let mut conn = self.inner.pool.get().await?;
                billing::shrink_allowance(&mut conn, id, keep).await
            }
            .await;
            let mut book = self.book();
            if let Some(allowance) = book.find(key, id) {
                match result {
                    Ok(()) => allowance.resized(keep),
                    Err(err) => {
                        tracing::warn!(error = %err, allowance = %id, "giving back an allowance failed; retried later");
                        let held = allowance.held;
                        allowance.resized(held);
                    }
                }
            }
        }
    }

    /// Moves the leases of every held block on; a block whose row is gone
    /// (its lease ran out and the scheduler released it) holds nothing.
    async fn renew(&self) {
        let ids: Vec<Uuid> = {
            let book = self.book();
            book.active
                .values()
                .chain(book.retired.values().map(|(_, a)| a))
                .filter(|a| a.held != Amount::default())
                .map(|a| a.id)
                .collect()
        };
        if ids.is_empty() {
            return;
        }
        let expires_at = Utc::now() + self.inner.lease;
        let renewed = async {
            let mut conn = self.inner.pool.get().await?;
            billing::renew_reservations(&mut conn, &ids, expires_at).await
        }
        .await;
        match renewed {
            Ok(live) => {
                let mut book = self.book();
                let Book { active, retired } = &mut *book;
                for allowance in active
                    .values_mut()
                    .chain(retired.values_mut().map(|(_, a)| a))
                {
                    if ids.contains(&allowance.id)
                        && !live.contains(&allowance.id)
                        && !allowance.resizing
                    {
                        tracing::warn!(allowance = %allowance.id, "an allowance expired unrenewed; it holds nothing now");
                        allowance.held = Amount::default();
                    }
                }
            }
            Err(err) => tracing::warn!(error = %err, "renewing allowances failed"),
        }
    }

    /// Gives everything back (shutdown, after the last request finished).
    pub async fn close(&self) {
        let blocks: Vec<(Uuid, Amount)> = {
            let book = self.book();
            book.active
                .values()
                .chain(book.retired.values().map(|(_, a)| a))
                .filter(|a| a.held != Amount::default())
                .map(|a| (a.id, a.promised))
                .collect()
        };
        for (id, keep) in blocks {
            let result = async {
                let mut conn = self.inner.pool.get().await?;
                billing::shrink_allowance(&mut conn, id, keep).await
            }
            .await;
            if let Err(err) = result {
                tracing::warn!(error = %err, allowance = %id, "giving back an allowance at shutdown failed; it expires");
            }
        }
    }
}

impl Hold {
    /// This request's settlement out of its allowance.
    fn share(&self, charge: Charge, multiplier: f64, usage: UsageRecord) -> ShareItem {
        ShareItem {
            allowance_id: self.id,
            period_start: self.period_start,
            bucket: self.key.bucket,
            hold: self.need,
            charge,
            multiplier,
            usage,
        }
    }

    /// Charges what the request used (status `success`), never more than
    /// it was admitted for: what it held passed the quota, balance, overage
    /// and hard-limit checks.
    pub async fn settle(
        mut self,
        charge: &Charge,
        multiplier: f64,
        usage: UsageRecord,
    ) -> Result<Settled, DbError> {
        self.open = false;
        let used = Amount {
            credits: charge.credits.clamp(0, self.need.credits),
            milli: charge.bucket_milli.clamp(0, self.need.milli),
        };
        let capped = Charge {
            credits: used.credits,
            bucket_milli: used.milli,
        };
        let item = self.share(capped, multiplier, usage);
        let (allowances, key, id, need) = (self.allowances.clone(), self.key, self.id, self.need);
        to_completion(async move {
            let result = allowances.settle(item).await;
            // Unknown whether it committed: count the whole hold as used, so
            // the block is never believed to hold more than its row does.
            let used = if result.is_ok() { used } else { need };
            allowances.finished(key, id, need, used);
            result
        })
        .await
    }

    /// The request failed: nothing is charged; its usage record (status
    /// `failed`) is written with the next batch.
    pub async fn release(mut self, usage: UsageRecord) {
        self.open = false;
        let nothing = Charge {
            credits: 0,
            bucket_milli: 0,
        };
        let item = self.share(nothing, 1.0, usage);
        self.allowances
            .finished(self.key, self.id, self.need, Amount::default());
        let allowances = self.allowances.clone();
        let recorded = to_completion(async move { allowances.settle(item).await }).await;
        if let Err(err) = recorded {
            tracing::warn!(error = %err, "recording a failed request's usage failed");
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.open {
            self.allowances
                .finished(self.key, self.id, self.need, Amount::default());
        }
    }
}

impl super::housekeeping::Housekeeping for Allowances {
    fn give_back_idle(&self) -> impl Future<Output = ()> + Send {
        Allowances::give_back_idle(self)
    }

    fn renew(&self) -> impl Future<Output = ()> + Send {
        Allowances::renew(self)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::{Notify, oneshot};

    use super::to_completion;

    #[tokio::test]
    async fn work_run_to_completion_ends_even_when_its_request_is_dropped() {
        let go_on = Arc::new(Notify::new());
        let (ended, ended_rx) = oneshot::channel();
        let work = {
            let go_on = go_on.clone();
            to_completion(async move {
                // A settlement or a resize waiting on the database.
                go_on.notified().await;
                let _ = ended.send(());
                Ok(())
            })
        };
        // The request is dropped (a client gone) while the work waits.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), work)
                .await
                .is_err()
        );
        go_on.notify_one();
        tokio::time::timeout(Duration::from_secs(5), ended_rx)
            .await
            .expect("the work ended")
            .expect("the work ran to its end");
    }
}
