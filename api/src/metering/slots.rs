//! The plan's `concurrent_requests`, per organization, across every API
//! process.
//!
//! The slots are rows in PostgreSQL (`concurrency_slots`), numbered
//! `1..=limit`. This process leases them in blocks (holder = the process),
//! renews the leases while it lives, and counts its requests against them in
//! memory: taking and freeing a slot costs no round trip, and a request's
//! slot is free again the moment it ends. A block whose slots were not all
//! in use for `metering.idle_ms` is given back down to what is in use, and a
//! crashed process's slots free themselves when their lease runs out.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use unigen_db::queries::limits;
use unigen_db::{DbError, PgPool};
use uuid::Uuid;

/// Largest block leased at once.
const MAX_BLOCK: usize = 64;

struct OrgSlots {
    /// Slot numbers this process holds in the database.
    leased: Vec<i32>,
    in_use: usize,
    /// The last time every leased slot was in use.
    last_full: Instant,
    /// One lease statement at a time per organization.
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl OrgSlots {
    fn new() -> Self {
        Self {
            leased: Vec::new(),
            in_use: 0,
            last_full: Instant::now(),
            gate: Arc::default(),
        }
    }

    fn take(&mut self, limit: usize) -> bool {
        if self.in_use >= self.leased.len().min(limit) {
            return false;
        }
        self.in_use += 1;
        if self.in_use == self.leased.len() {
            self.last_full = Instant::now();
        }
        true
    }
}

struct Inner {
    pool: PgPool,
    /// This process, as the holder of its leased slots.
    holder: Uuid,
    lease: Duration,
    idle: Duration,
    lease_from: i32,
    orgs: Mutex<HashMap<Uuid, OrgSlots>>,
}

/// This process's concurrency slots; cheap to clone.
#[derive(Clone)]
pub struct Slots {
    inner: Arc<Inner>,
}

/// One slot, held for the duration of a request; freed when dropped.
pub struct SlotGuard {
    slots: Slots,
    org_id: Uuid,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut orgs = self.slots.orgs();
        if let Some(org) = orgs.get_mut(&self.org_id) {
            org.in_use = org.in_use.saturating_sub(1);
        }
    }
}

impl Slots {
    /// Starts the housekeeping (unused slots given back, leases renewed);
    /// abort it at shutdown after [`Slots::close`].
    pub fn spawn(
        pool: PgPool,
        lease: Duration,
        idle: Duration,
        lease_from: i32,
    ) -> (Self, JoinHandle<()>) {
        let slots = Self {
            inner: Arc::new(Inner {
                pool,
                holder: Uuid::now_v7(),
                lease,
                idle,
                lease_from,
                orgs: Mutex::default(),
            }),
        };
        let task = super::housekeeping::spawn_housekeeping(slots.clone(), idle, lease);
        (slots, task)
    }

    /// The smallest `concurrent_requests` limit served from leased blocks;
    /// below it every request takes its own slot row.
    pub fn lease_from(&self) -> i32 {
        self.inner.lease_from
    }

    fn orgs(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, OrgSlots>> {
        self.inner.orgs.lock().expect("slots lock")
    }

    /// One of the organization's `limit` slots. `None`: all are in use.
    pub async fn acquire(&self, org_id: Uuid, limit: i32) -> Result<Option<SlotGuard>, DbError> {
        let limit = usize::try_from(limit).unwrap_or(0);
        let guard = || SlotGuard {
            slots: self.clone(),
            org_id,
        };
        let gate = {
            let mut orgs = self.orgs();
            let org = orgs.entry(org_id).or_insert_with(OrgSlots::new);
            if org.take(limit) {
                return Ok(Some(guard()));
            }
            org.gate.clone()
        };
        let _turn = gate.lock().await;
        let wanted = {
            let mut orgs = self.orgs();
            let org = orgs.entry(org_id).or_insert_with(OrgSlots::new);
            if org.take(limit) {
                return Ok(Some(guard()));
            }
            if org.leased.len() >= limit {
                return Ok(None);
            }
            // A quarter of what is in use, so a busy organization leases
            // rarely and an idle one a slot at a time; never more than an
            // eighth of the limit, so what a block holds unused stays a
            // small share of it for the other API processes.
            (org.in_use / 4)
                .min(limit / 8)
                .clamp(1, MAX_BLOCK)
                .min(limit - org.leased.len())
        };
        let leased = {
            let mut conn = self.inner.pool.get().await?;
            limits::lease_slots(
                &mut conn,
                org_id,
                i32::try_from(limit).unwrap_or(i32::MAX),
                self.inner.holder,
                i32::try_from(wanted).unwrap_or(1),
                self.inner.lease,
            )
            .await?
        };
        let mut orgs = self.orgs();
        let org = orgs.entry(org_id).or_insert_with(OrgSlots::new);
        org.leased.extend(leased);
        Ok(org.take(limit).then(guard))
    }

    /// Gives back leased slots not in use, where not every slot was in use
    /// for `idle`.
    async fn give_back_idle(&self) {
        let released: Vec<(Uuid, Vec<i32>)> = {
            let mut orgs = self.orgs();
            let idle = self.inner.idle;
            let released = orgs
                .iter_mut()
                .filter(|(_, org)| org.leased.len() > org.in_use && org.last_full.elapsed() >= idle)
                .map(|(org_id, org)| {
                    let spare = org.leased.split_off(org.in_use);
                    org.last_full = Instant::now();
                    (*org_id, spare)
                })
                .collect();
            orgs.retain(|_, org| {
                !(org.leased.is_empty() && org.in_use == 0 && Arc::strong_count(&org.gate) == 1)
            });
            released
        };
        for (org_id, slots) in released {
            self.release(org_id, &slots).await;
        }
    }

    async fn release(&self, org_id: Uuid, slots: &[i32]) {
        let result = async {
            let mut conn = self.inner.pool.get().await?;
            limits::release_slots(&mut conn, org_id, slots, self.inner.holder).await
        }
        .await;
        if let Err(err) = result {
            // Not renewed any more: they free themselves when the lease runs out.
            tracing::warn!(error = %err, org_id = %org_id, "giving back concurrency slots failed; they expire");
        }
    }

    /// Moves the leases of every held slot on; slots whose lease ran out
    /// and were taken by another process are forgotten.
    async fn renew(&self) {
        let (orgs, slots): (Vec<Uuid>, Vec<i32>) = {
            let orgs = self.orgs();
            orgs.iter()
                .flat_map(|(org_id, org)| org.leased.iter().map(move |slot| (*org_id, *slot)))
                .unzip()
        };
        if slots.is_empty() {
            return;
        }
        let renewed = async {
            let mut conn = self.inner.pool.get().await?;
            limits::renew_slots(
                &mut conn,
                &orgs,
                &slots,
                self.inner.holder,
                self.inner.lease,
            )
            .await
        }
        .await;
        match renewed {
            Ok(live) => {
                let asked: std::collections::HashSet<(Uuid, i32)> =
                    orgs.iter().copied().zip(slots.iter().copied()).collect();
                let live: std::collections::HashSet<(Uuid, i32)> = live.into_iter().collect();
                let mut held = self.orgs();
                for (org_id, org) in held.iter_mut() {
                    let before = org.leased.len();
                    // A slot leased after the renewal was read is still ours.
                    org.leased.retain(|slot| {
                        let pair = (*org_id, *slot);
                        !asked.contains(&pair) || live.contains(&pair)
                    });
                    if org.leased.len() < before {
                        tracing::warn!(org_id = %org_id, lost = before - org.leased.len(), "concurrency slots expired unrenewed");
                    }
                }
            }
            Err(err) => tracing::warn!(error = %err, "renewing concurrency slots failed"),
        }
    }

    /// Gives every slot back (shutdown, after the last request finished).
    pub async fn close(&self) {
        let held: Vec<(Uuid, Vec<i32>)> = {
            let mut orgs = self.orgs();
            orgs.iter_mut()
                .map(|(org_id, org)| (*org_id, std::mem::take(&mut org.leased)))
                .filter(|(_, slots)| !slots.is_empty())
                .collect()
        };
        for (org_id, slots) in held {
            self.release(org_id, &slots).await;
        }
    }
}

impl super::housekeeping::Housekeeping for Slots {
    fn give_back_idle(&self) -> impl Future<Output = ()> + Send {
        Slots::give_back_idle(self)
    }

    fn renew(&self) -> impl Future<Output = ()> + Send {
        Slots::renew(self)
    }
}
