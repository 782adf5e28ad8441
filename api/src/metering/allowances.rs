//! Allowances: this process holds a block of an organization's credits (and
//! of one quota bucket) as ONE reservation row and admits sync requests
//! (chat, embeddings) against it in memory.
//!
//! The block is an ordinary reservation, so limits stay exact: every other
//! reservation (jobs, other API processes) sees it, and a request is
//! admitted only from what this process holds in the database. When a
//! request needs more than the block's free part, the block is resized in
//! one statement that counts its own free part as available: a refusal is
//! exact, and near a limit the block shrinks to what requests need.
//!
//! A request's charge is first recorded (`recorded_charges`, one batched
//! insert; the answer waits for that commit, so an API crash loses nothing)
//! and settled afterwards, off the answer's path, in batches: its actual use
//! charged out of the block, the rest of its estimate given back to the free
//! part. The answer reports balances projected from the last settlement
//! this process applied less what it recorded since; when it cannot (no
//! settlement in the last second, or near the end of the credits) the
//! answer waits for its own settlement and reports that.
//! A block idle for `metering.idle_ms` is given back; a crashed process's
//! blocks expire after `metering.lease_seconds` and the scheduler releases
//! them, after settling the charges it left recorded.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use unigen_db::billing::{AccountSnapshot, Bucket, BucketReport, Charge, Refusal, Settled};
use unigen_db::models::UsageRecord;
use unigen_db::notify::Notifier;
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
/// Charge records written at once: each batch is one insert and one commit.
const PARALLEL_RECORDS: usize = 1;
/// How long the balances of a settlement serve to project answers from.
const FRESH_FOR: Duration = Duration::from_secs(1);
/// How long a read of an organization's balances or usage waits for the
/// charges this process recorded before it to be settled.
const READ_WAIT: Duration = Duration::from_secs(5);

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

/// A charge recorded and not settled yet.
struct Unsettled {
    credits: i64,
    bucket: Option<Bucket>,
    milli: i64,
}

/// What this process knows of an organization's balances, for the answers.
#[derive(Default)]
struct Ledger {
    /// Balances after the last settlement this process applied; `None`
    /// while unknown (none yet, or the organization's blocks went back).
    account: Option<AccountSnapshot>,
    /// When that settlement was applied: older balances may miss what
    /// others (jobs, other processes, purchases) changed since.
    settled_at: Option<Instant>,
    /// Each bucket's remaining thousandths after that settlement (inner
    /// `None`: unlimited).
    remaining: HashMap<Bucket, Option<i64>>,
    /// Recorded charges not settled yet, by sequence number.
    unsettled: BTreeMap<u64, Unsettled>,
}

impl Ledger {
    fn forget_balances(&mut self) {
        self.account = None;
        self.remaining.clear();
    }

    /// The answer for a charge of `used` (already in `unsettled`) without
    /// waiting for its settlement: the last settlement's balances less every
    /// charge recorded since. `None` when they are unknown or older than
    /// [`FRESH_FOR`] (light traffic: the request waits for its own), or when
    /// the charges may reach into overage, whose split only the settlement
    /// knows.
    fn project(&self, bucket: Option<Bucket>, used: Amount, multiplier: f64) -> Option<Charged> {
        let account = self.account.as_ref()?;
        if self.settled_at.is_none_or(|at| at.elapsed() > FRESH_FOR) || account.overage_active() {
            return None;
        }
        let unsettled_credits: i64 = self.unsettled.values().map(|u| u.credits).sum();
        let credits_remaining = account.credits_remaining - unsettled_credits;
        if credits_remaining < 0 {
            return None;
        }
        let bucket = match bucket {
            None => None,
            Some(bucket) => {
                let remaining = (*self.remaining.get(&bucket)?).map(|milli| {
                    let unsettled: i64 = self
                        .unsettled
                        .values()
                        .filter(|u| u.bucket == Some(bucket))
                        .map(|u| u.milli)
                        .sum();
                    (milli - unsettled).max(0)
                });
                Some(BucketReport {
                    bucket,
                    used_milli: used.milli,
                    remaining_milli: remaining,
                    multiplier,
                })
            }
        };
        Some(Charged {
            credits: used.credits,
            bucket,
            account: AccountSnapshot {
                credits_remaining,
                ..account.clone()
            },
        })
    }

    /// A charge's settlement was applied (`settled`: by this process, with
    /// the balances after it; `None`: by another, or not at all).
    fn settled(&mut self, seq: u64, settled: Option<&Settled>) {
        self.unsettled.remove(&seq);
        if let Some(settled) = settled {
            self.account = Some(settled.account.clone());
            self.settled_at = Some(Instant::now());
            if let Some(report) = &settled.bucket {
                self.remaining.insert(report.bucket, report.remaining_milli);
            }
        }
    }
}

#[derive(Default)]
struct Book {
    active: HashMap<Key, Allowance>,
    /// Blocks of ended periods: no longer admitting, settled and given back.
    retired: HashMap<Uuid, (Key, Allowance)>,
    ledgers: HashMap<Uuid, Ledger>,
    next_seq: u64,
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
        self.forget_balances(key.org_id);
        if let Some(old) = self.active.insert(key, Allowance::new()) {
            self.retired.insert(old.id, (key, old));
        }
    }

    fn forget_balances(&mut self, org_id: Uuid) {
        if let Some(ledger) = self.ledgers.get_mut(&org_id) {
            ledger.forget_balances();
        }
    }

    /// A request is done with its hold: `used` of it was charged out of the
    /// block, the rest is free again.
    fn finish(&mut self, key: Key, id: Uuid, need: Amount, used: Amount) {
        let Some(allowance) = self.find(key, id) else {
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

    /// Registers a charge about to be recorded; answers its sequence number.
    fn unsettled(&mut self, org_id: Uuid, charge: Unsettled) -> u64 {
        self.next_seq += 1;
        let seq = self.next_seq;
        self.ledgers
            .entry(org_id)
            .or_default()
            .unsettled
            .insert(seq, charge);
        seq
    }

    /// Whether every charge of `org_id` up to `seq` is settled.
    fn settled_through(&self, org_id: Uuid, seq: u64) -> bool {
        self.ledgers
            .get(&org_id)
            .and_then(|ledger| ledger.unsettled.keys().next())
            .is_none_or(|&first| first > seq)
    }
}

/// What a sync request was charged, for its answer's usage object and
/// headers: exact, or projected (see [`Ledger::project`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Charged {
    pub credits: i64,
    pub bucket: Option<BucketReport>,
    pub account: AccountSnapshot,
}

impl Charged {
    /// For a charge whose answer nobody reads.
    fn unknown(used: Amount) -> Self {
        Self {
            credits: used.credits,
            bucket: None,
            account: AccountSnapshot::default(),
        }
    }
}

impl From<Settled> for Charged {
    fn from(settled: Settled) -> Self {
        Self {
            credits: settled.credits,
            bucket: settled.bucket,
            account: settled.account,
        }
    }
}

/// A recorded charge on its way to settlement.
#[derive(Clone)]
struct Pending {
    seq: u64,
    key: Key,
    allowance_id: Uuid,
    need: Amount,
    used: Amount,
    request_id: Uuid,
}

/// Shared by the request path and the settlement batches.
struct Shared {
    pool: PgPool,
    notifier: Notifier,
    book: Mutex<Book>,
    /// Notified after every applied settlement (reads waiting for theirs).
    progress: Notify,
}

impl Shared {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().expect("allowances lock")
    }

    /// Settles recorded charges in one transaction, then updates the book:
    /// each request's hold is finished, each organization's balances are
    /// those after its last charge in the batch.
    async fn settle(&self, pending: Vec<Pending>) -> Result<Vec<Option<Settled>>, DbError> {
        let ids: Vec<Uuid> = pending.iter().map(|p| p.request_id).collect();
        let answers = {
            let mut conn = self.pool.get().await?;
            billing::settle_recorded(&mut conn, &ids).await?
        };
        let mut events = false;
        {
            let mut book = self.book();
            for (p, answer) in pending.iter().zip(&answers) {
                // Not recorded any more: the scheduler settled it as it was recorded.
                book.finish(p.key, p.allowance_id, p.need, p.used);
                if let Some(ledger) = book.ledgers.get_mut(&p.key.org_id) {
                    ledger.settled(p.seq, answer.as_ref());
                }
                events |= answer.as_ref().is_some_and(|s| s.events_recorded);
            }
        }
        if events {
            self.notifier.events_recorded();
        }
        self.progress.notify_waiters();
        Ok(answers)
    }

    /// [`Shared::settle`] for a batch; when it fails, each charge on its own,
    /// so one that cannot be settled holds up no other. Those that fail
    /// alone answer `None` and are retried in the background, with pauses,
    /// for up to `lease`; then they are left to the scheduler.
    async fn settle_isolating(
        self: Arc<Self>,
        pending: Vec<Pending>,
        lease: Duration,
    ) -> Result<Vec<Option<Settled>>, DbError> {
        match self.settle(pending.clone()).await {
            Ok(answers) => return Ok(answers),
            Err(err) => {
                tracing::warn!(error = %err, charges = pending.len(), "settling recorded charges failed; one by one instead");
            }
        }
        let mut answers = Vec::with_capacity(pending.len());
        for p in pending {
            match self.settle(vec![p.clone()]).await {
                Ok(mut answer) => answers.push(answer.pop().flatten()),
                Err(_) => {
                    tokio::spawn(self.clone().retry(p, lease));
                    answers.push(None);
                }
            }
        }
        Ok(answers)
    }

    async fn retry(self: Arc<Self>, p: Pending, lease: Duration) {
        let give_up = Instant::now() + lease;
        let mut pause = Duration::from_millis(50);
        loop {
            tokio::time::sleep(pause).await;
            match self.settle(vec![p.clone()]).await {
                Ok(_) => return,
                Err(err) if Instant::now() < give_up => {
                    tracing::warn!(error = %err, request = %p.request_id, "settling a recorded charge failed; retrying");
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
                Err(err) => {
                    tracing::error!(error = %err, request = %p.request_id, "settling a recorded charge failed; the scheduler settles it");
                    self.abandon(&p);
                    return;
                }
            }
        }
    }

    /// A charge that could not be recorded or settled: its hold is counted
    /// as used (the block is never believed to hold more than its row does)
    /// and it leaves the ledger; if it was recorded, the scheduler settles it.
    fn abandon(&self, p: &Pending) {
        let mut book = self.book();
        book.finish(p.key, p.allowance_id, p.need, p.need);
        if let Some(ledger) = book.ledgers.get_mut(&p.key.org_id) {
            ledger.settled(p.seq, None);
            ledger.forget_balances();
        }
        drop(book);
        self.progress.notify_waiters();
    }
}

struct Inner {
    shared: Arc<Shared>,
    lease: Duration,
    idle: Duration,
    flush: bool,
    records: Batched<Arc<ShareItem>, ()>,
    settlements: Batched<Pending, Option<Settled>>,
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
    /// abort it at shutdown, after [`Allowances::close`]) and the batches
    /// that record and settle charges (ending with the last clone).
    /// `flush`: `metering.flush_sync_charges`.
    pub fn spawn(
        pool: PgPool,
        notifier: Notifier,
        lease: Duration,
        idle: Duration,
        flush: bool,
    ) -> (Self, JoinHandle<()>, JoinHandle<()>) {
        let shared = Arc::new(Shared {
            pool: pool.clone(),
            notifier,
            book: Mutex::default(),
            progress: Notify::new(),
        });
        let (records, records_task) = Batched::spawn(
            "charge records",
            MAX_BATCH,
            PARALLEL_RECORDS,
            move |items: Vec<Arc<ShareItem>>| {
                let pool = pool.clone();
                async move {
                    let mut conn = pool.get().await?;
                    billing::record_charges(&mut conn, &items, flush).await?;
                    Ok::<_, DbError>(vec![(); items.len()])
                }
            },
        );
        let settle_shared = shared.clone();
        let (settlements, settle_task) =
            Batched::spawn("settlements", MAX_BATCH, 1, move |pending: Vec<Pending>| {
                let shared = settle_shared.clone();
                shared.settle_isolating(pending, lease)
            });
        let allowances = Self {
            inner: Arc::new(Inner {
                shared,
                lease,
                idle,
                flush,
                records,
                settlements,
            }),
        };
        let task = super::housekeeping::spawn_housekeeping(allowances.clone(), idle, lease);
        let batches = tokio::spawn(async move {
            let _ = records_task.await;
            let _ = settle_task.await;
        });
        (allowances, task, batches)
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.inner.shared.book()
    }

    fn pool(&self) -> &PgPool {
        &self.inner.shared.pool
    }

    /// Waits (up to a few seconds) until every charge this process recorded
    /// for `org_id` so far is settled: a read of balances, usage or the
    /// ledger then shows the answers it follows.
    pub async fn settled(&self, org_id: Uuid) {
        let Some(last) = self
            .book()
            .ledgers
            .get(&org_id)
            .and_then(|ledger| ledger.unsettled.keys().next_back().copied())
        else {
            return;
        };
        let deadline = tokio::time::Instant::now() + READ_WAIT;
        loop {
            let progress = self.inner.shared.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            if self.book().settled_through(org_id, last) {
                return;
            }
            if tokio::time::timeout_at(deadline, progress).await.is_err() {
                tracing::warn!(org = %org_id, "reading before this process's charges were settled");
                return;
            }
        }
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
            let mut conn = self.pool().get().await?;
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

    /// Records a request's charge and hands it to the settlement batches.
    /// Answers once the record is committed: with projected balances when
    /// the ledger allows, otherwise after the request's own settlement.
    /// `answer` false: nobody reads the balances (a failed request's record).
    async fn charge(
        &self,
        key: Key,
        id: Uuid,
        need: Amount,
        item: ShareItem,
        answer: bool,
    ) -> Result<Charged, DbError> {
        let used = Amount {
            credits: item.charge.credits,
            milli: item.charge.bucket_milli,
        };
        let (seq, projected) = {
            let mut book = self.book();
            let seq = book.unsettled(
                key.org_id,
                Unsettled {
                    credits: used.credits,
                    bucket: key.bucket,
                    milli: used.milli,
                },
            );
            let projected = book.ledgers[&key.org_id].project(key.bucket, used, item.multiplier);
            (seq, projected.or((!answer).then(|| Charged::unknown(used))))
        };
        let pending = Pending {
            seq,
            key,
            allowance_id: id,
            need,
            used,
            request_id: item.usage.id,
        };
        if let Err(err) = self.record(Arc::new(item)).await {
            self.inner.shared.abandon(&pending);
            return Err(err);
        }
        match projected {
            Some(charged) => {
                if !self.inner.settlements.send(pending.clone()) {
                    tracing::warn!("settlements have stopped; the scheduler settles the charge");
                    self.inner.shared.abandon(&pending);
                }
                Ok(charged)
            }
            // `None`: settled by another process, or left to the scheduler.
            None => match self.inner.settlements.call(pending).await.flatten() {
                Some(settled) => Ok(settled.into()),
                None => Err(DbError::Query(diesel::result::Error::NotFound)),
            },
        }
    }

    /// Writes a charge record in the next batch (alone if that batch fails;
    /// the write is idempotent, so an ambiguous failure is retried once).
    async fn record(&self, item: Arc<ShareItem>) -> Result<(), DbError> {
        if self.inner.records.call(item.clone()).await.is_some() {
            return Ok(());
        }
        let mut last = None;
        for _ in 0..2 {
            let written = async {
                let mut conn = self.pool().get().await?;
                billing::record_charges(&mut conn, std::slice::from_ref(&item), self.inner.flush)
                    .await
            }
            .await;
            match written {
                Ok(()) => return Ok(()),
                Err(err) => last = Some(err),
            }
        }
        Err(last.expect("two attempts"))
    }

    /// A request is done with its hold without a charge record.
    fn finished(&self, key: Key, id: Uuid, need: Amount, used: Amount) {
        self.book().finish(key, id, need, used);
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
            let Book {
                active,
                retired,
                ledgers,
                ..
            } = &mut *book;
            ledgers.retain(|org, ledger| {
                !ledger.unsettled.is_empty()
                    || active.keys().any(|key| key.org_id == *org)
                    || retired.values().any(|(key, _)| key.org_id == *org)
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
                let mut conn = self.pool().get().await?;
                billing::shrink_allowance(&mut conn, id, keep).await
            }
            .await;
            let mut book = self.book();
            book.forget_balances(key.org_id);
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
            let mut conn = self.pool().get().await?;
            billing::renew_reservations(&mut conn, &ids, expires_at).await
        }
        .await;
        match renewed {
            Ok(live) => {
                let mut book = self.book();
                let Book {
                    active, retired, ..
                } = &mut *book;
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

    /// Gives everything back (shutdown, after the last request finished),
    /// once the recorded charges are settled (what is left after a lease is
    /// the scheduler's).
    pub async fn close(&self) {
        let deadline = tokio::time::Instant::now() + self.inner.lease;
        loop {
            let progress = self.inner.shared.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            let unsettled: usize = self
                .book()
                .ledgers
                .values()
                .map(|ledger| ledger.unsettled.len())
                .sum();
            if unsettled == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, progress).await.is_err() {
                tracing::warn!(
                    unsettled,
                    "charges left recorded at shutdown; the scheduler settles them"
                );
                break;
            }
        }
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
                let mut conn = self.pool().get().await?;
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
    /// and hard-limit checks. Answers once the charge is recorded.
    pub async fn settle(
        mut self,
        charge: &Charge,
        multiplier: f64,
        usage: UsageRecord,
    ) -> Result<Charged, DbError> {
        self.open = false;
        let capped = Charge {
            credits: charge.credits.clamp(0, self.need.credits),
            bucket_milli: charge.bucket_milli.clamp(0, self.need.milli),
        };
        let item = self.share(capped, multiplier, usage);
        let (allowances, key, id, need) = (self.allowances.clone(), self.key, self.id, self.need);
        to_completion(async move { allowances.charge(key, id, need, item, true).await }).await
    }

    /// The request failed: nothing is charged; its usage record (status
    /// `failed`) is recorded and settled like a charge.
    pub async fn release(mut self, usage: UsageRecord) {
        self.open = false;
        let nothing = Charge {
            credits: 0,
            bucket_milli: 0,
        };
        let item = self.share(nothing, 1.0, usage);
        let (allowances, key, id, need) = (self.allowances.clone(), self.key, self.id, self.need);
        let recorded =
            to_completion(async move { allowances.charge(key, id, need, item, false).await }).await;
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
    use std::time::{Duration, Instant};

    use tokio::sync::{Notify, oneshot};
    use unigen_db::billing::{AccountSnapshot, Bucket, BucketReport, Settled};
    use unigen_db::queries::billing::Amount;

    use super::{Ledger, Unsettled, to_completion};

    fn account(credits_remaining: i64, overage_credits: i64) -> AccountSnapshot {
        AccountSnapshot {
            credits_remaining,
            overage_enabled: true,
            overage_credits,
            overage_rate_micros: Some(10_000),
        }
    }

    fn charge(credits: i64, bucket: Option<Bucket>, milli: i64) -> Unsettled {
        Unsettled {
            credits,
            bucket,
            milli,
        }
    }

    fn used(credits: i64, milli: i64) -> Amount {
        Amount { credits, milli }
    }

    #[test]
    fn answers_are_the_last_settlement_less_every_charge_recorded_since() {
        let chat = Some(Bucket::ChatTokens);
        let mut ledger = Ledger::default();
        ledger.unsettled.insert(1, charge(10, chat, 5_000));
        assert_eq!(
            ledger.project(chat, used(10, 5_000), 1.0),
            None,
            "nothing known yet"
        );

        ledger.account = Some(account(100, 0));
        ledger.settled_at = Some(Instant::now());
        ledger.remaining.insert(Bucket::ChatTokens, Some(50_000));
        // An embeddings charge (no bucket) counts against the credits only.
        ledger.unsettled.insert(2, charge(20, None, 0));
        ledger.unsettled.insert(3, charge(1, chat, 3_000));
        let answer = ledger.project(chat, used(1, 3_000), 1.5).expect("known");
        assert_eq!(answer.credits, 1);
        assert_eq!(answer.account.credits_remaining, 100 - 31);
        assert_eq!(
            answer.bucket,
            Some(BucketReport {
                bucket: Bucket::ChatTokens,
                used_milli: 3_000,
                remaining_milli: Some(50_000 - 8_000),
                multiplier: 1.5,
            })
        );
        // A bucket no settlement reported: unknown.
        ledger
            .unsettled
            .insert(4, charge(1, Some(Bucket::TtsChars), 10));
        assert_eq!(
            ledger.project(Some(Bucket::TtsChars), used(1, 10), 1.0),
            None
        );
        ledger.unsettled.remove(&4);

        // The first charge settles: its balances replace the last ones.
        let settled = Settled {
            credits: 10,
            from_included: 10,
            from_purchased: 0,
            overage: 0,
            bucket: Some(BucketReport {
                bucket: Bucket::ChatTokens,
                used_milli: 5_000,
                remaining_milli: Some(45_000),
                multiplier: 1.0,
            }),
            account: account(90, 0),
            events_recorded: false,
        };
        ledger.settled(1, Some(&settled));
        let answer = ledger.project(chat, used(1, 3_000), 1.0).expect("known");
        assert_eq!(answer.account.credits_remaining, 90 - 21);
        assert_eq!(answer.bucket.unwrap().remaining_milli, Some(45_000 - 3_000));
    }

    #[test]
    fn charges_that_may_reach_overage_wait_for_their_settlement() {
        let mut ledger = Ledger {
            account: Some(account(10, 0)),
            settled_at: Some(Instant::now()),
            ..Ledger::default()
        };
        ledger.unsettled.insert(1, charge(6, None, 0));
        assert!(ledger.project(None, used(6, 0), 1.0).is_some());
        ledger.unsettled.insert(2, charge(6, None, 0));
        assert_eq!(
            ledger.project(None, used(6, 0), 1.0),
            None,
            "past the balance"
        );
        ledger.unsettled.remove(&2);
        ledger.account = Some(account(0, 3));
        assert_eq!(ledger.project(None, used(6, 0), 1.0), None, "in overage");
        ledger.account = Some(account(10, 0));
        ledger.settled_at = Some(Instant::now() - Duration::from_secs(2));
        assert_eq!(ledger.project(None, used(6, 0), 1.0), None, "too old");
        ledger.settled_at = Some(Instant::now());
        assert!(ledger.project(None, used(6, 0), 1.0).is_some());
        ledger.forget_balances();
        assert_eq!(ledger.project(None, used(6, 0), 1.0), None, "forgotten");
    }

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
