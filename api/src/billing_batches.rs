//! Reservations and settlements of sync requests (chat, embeddings) in
//! batches.
//!
//! Each reservation and settlement of an organization takes its account's
//! row lock until commit, so under load they queue on it one commit at a
//! time. Here they queue in memory instead: one task per kind runs whatever
//! has arrived since its previous statement as one `unigen_reserve` or
//! `unigen_settle` per item in a single statement and commit
//! (`billing::reserve_many` / `settle_many`). Each request still waits for
//! its own commit.

use tokio::task::JoinHandle;
use unigen_shared::billing::{Refusal, Settled};
use unigen_shared::db::queries::billing::{self, ReserveItem, SettleItem};
use unigen_shared::db::{DbError, PgPool};

use crate::batched::Batched;

/// Largest batch: bounds the statement and how long each lock is held.
const MAX_BATCH: usize = 200;

type Reserved = Result<Result<(), Refusal>, DbError>;
type Settlement = Result<Option<Settled>, DbError>;

#[derive(Clone)]
pub struct BillingBatches {
    reservations: Batched<ReserveItem, Reserved>,
    settlements: Batched<SettleItem, Settlement>,
    pool: PgPool,
}

/// `None` (logged): the batch failed as a whole and changed nothing.
fn whole_batch<O>(what: &str, result: Result<Vec<O>, DbError>) -> Option<Vec<O>> {
    result
        .map_err(|err| tracing::warn!(error = %err, "batched {what} failed; one by one instead"))
        .ok()
}

impl BillingBatches {
    pub fn spawn(pool: PgPool) -> (Self, JoinHandle<()>, JoinHandle<()>) {
        let reserve_pool = pool.clone();
        let (reservations, reserve_task) =
            Batched::spawn(MAX_BATCH, 1, move |items: Vec<ReserveItem>| {
                let pool = reserve_pool.clone();
                async move {
                    let result = async {
                        let mut conn = pool.get().await?;
                        billing::reserve_many(&mut conn, &items).await
                    };
                    whole_batch("reservation", result.await)
                }
            });
        let settle_pool = pool.clone();
        let (settlements, settle_task) =
            Batched::spawn(MAX_BATCH, 1, move |items: Vec<SettleItem>| {
                let pool = settle_pool.clone();
                async move {
                    let result = async {
                        let mut conn = pool.get().await?;
                        billing::settle_many(&mut conn, &items).await
                    };
                    whole_batch("settlement", result.await)
                }
            });
        let batches = Self {
            reservations,
            settlements,
            pool,
        };
        (batches, reserve_task, settle_task)
    }

    /// Holds an estimate for a sync request (see `billing::reserve`);
    /// `Ok(Err(refusal))` changes nothing.
    pub async fn reserve(&self, item: ReserveItem) -> Reserved {
        let (org_id, id, estimate, expires_at) =
            (item.org_id, item.id, item.estimate.clone(), item.expires_at);
        if let Some(outcome) = self.reservations.call(item).await {
            return outcome;
        }
        // The batch failed as a whole (one statement: it changed nothing).
        let mut conn = self.pool.get().await?;
        billing::reserve(&mut conn, org_id, id, &estimate, expires_at).await
    }

    /// Charges a reservation (see `billing::settle`). `None`: it was already
    /// settled or released.
    pub async fn settle(&self, item: SettleItem) -> Settlement {
        let (id, charge, multiplier, usage) = (
            item.id,
            item.charge.clone(),
            item.multiplier,
            item.usage.clone(),
        );
        if let Some(settled) = self.settlements.call(item).await {
            return settled;
        }
        // The batch failed: settle alone, so this request sees its own
        // error. Settling is idempotent: one already settled answers `None`.
        let mut conn = self.pool.get().await?;
        billing::settle(&mut conn, id, &charge, multiplier, &usage).await
    }
}
