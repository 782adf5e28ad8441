//! Reservations and settlements of sync requests (chat, embeddings) in
//! batches.
//!
//! Each reservation and settlement of an organization takes its account's
//! row lock until commit, so under load they queue on it one commit at a
//! time. Here they queue in memory instead: one task per kind runs whatever
//! has arrived since its previous statement as one `unigen_reserve` or
//! `unigen_settle` per item in a single statement and commit. Items are
//! ordered by organization, so two batches never lock two accounts in
//! opposite orders. Each request still waits for its own commit.

use tokio::task::JoinHandle;
use unigen_shared::billing::{Charge, Estimate, Refusal, Settled};
use unigen_shared::db::models::UsageRecord;
use unigen_shared::db::queries::billing::{self, ReserveItem, SettleItem};
use unigen_shared::db::{DbError, PgPool};
use uuid::Uuid;

use crate::batched::Batched;

/// Largest batch: bounds the statement and how long each lock is held.
const MAX_BATCH: usize = 200;

pub struct Reserve {
    pub org_id: Uuid,
    pub id: Uuid,
    pub estimate: Estimate,
    pub expires_at: chrono::DateTime<chrono::Utc>,
}

pub struct Settle {
    pub org_id: Uuid,
    pub id: Uuid,
    pub charge: Charge,
    pub multiplier: f64,
    pub usage: UsageRecord,
}

#[derive(Clone)]
pub struct BillingBatches {
    reservations: Batched<Reserve, Result<Result<(), Refusal>, DbError>>,
    settlements: Batched<Settle, Result<Option<Settled>, DbError>>,
    pool: PgPool,
}

/// Runs `items` in organization order, answers in arrival order.
fn by_organization<T>(items: &[T], org: impl Fn(&T) -> Uuid) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| org(&items[i]));
    order
}

fn in_arrival_order<O>(order: &[usize], answers: Vec<O>) -> Vec<O> {
    let mut slots: Vec<Option<O>> = (0..order.len()).map(|_| None).collect();
    for (&index, answer) in order.iter().zip(answers) {
        slots[index] = Some(answer);
    }
    slots
        .into_iter()
        .map(|slot| slot.expect("one answer per item"))
        .collect()
}

impl BillingBatches {
    pub fn spawn(pool: PgPool) -> (Self, JoinHandle<()>, JoinHandle<()>) {
        let reserve_pool = pool.clone();
        let (reservations, reserve_task) = Batched::spawn(MAX_BATCH, move |items: Vec<Reserve>| {
            let pool = reserve_pool.clone();
            async move {
                let order = by_organization(&items, |r| r.org_id);
                let batch: Vec<ReserveItem<'_>> = order
                    .iter()
                    .map(|&i| ReserveItem {
                        org_id: items[i].org_id,
                        id: items[i].id,
                        estimate: &items[i].estimate,
                        expires_at: Some(items[i].expires_at),
                    })
                    .collect();
                let result = async {
                    let mut conn = pool.get().await?;
                    billing::reserve_many(&mut conn, &batch).await
                }
                .await;
                match result {
                    Ok(answers) => Some(in_arrival_order(&order, answers)),
                    Err(err) => {
                        tracing::warn!(error = %err, reservations = items.len(), "batched reservation failed; reserving one by one");
                        None
                    }
                }
            }
        });
        let settle_pool = pool.clone();
        let (settlements, settle_task) = Batched::spawn(MAX_BATCH, move |items: Vec<Settle>| {
            let pool = settle_pool.clone();
            async move {
                let order = by_organization(&items, |s| s.org_id);
                let batch: Vec<SettleItem<'_>> = order
                    .iter()
                    .map(|&i| SettleItem {
                        id: items[i].id,
                        charge: items[i].charge.clone(),
                        multiplier: items[i].multiplier,
                        usage: &items[i].usage,
                    })
                    .collect();
                let result = async {
                    let mut conn = pool.get().await?;
                    billing::settle_many(&mut conn, &batch).await
                }
                .await;
                match result {
                    Ok(answers) => Some(in_arrival_order(&order, answers)),
                    Err(err) => {
                        tracing::warn!(error = %err, settlements = items.len(), "batched settlement failed; settling one by one");
                        None
                    }
                }
            }
        });
        (
            Self {
                reservations,
                settlements,
                pool,
            },
            reserve_task,
            settle_task,
        )
    }

    /// Holds `estimate` for sync request `id` until `expires_at` (see
    /// `billing::reserve`); `Ok(Err(refusal))` changes nothing.
    pub async fn reserve(&self, item: Reserve) -> Result<Result<(), Refusal>, DbError> {
        let (org_id, id, estimate, expires_at) =
            (item.org_id, item.id, item.estimate.clone(), item.expires_at);
        if let Some(outcome) = self.reservations.call(item).await {
            return outcome;
        }
        // The batch failed as a whole (one statement: it changed nothing).
        let mut conn = self.pool.get().await?;
        billing::reserve(&mut conn, org_id, id, &estimate, Some(expires_at)).await
    }

    /// Charges a reservation (see `billing::settle`). `None`: it was already
    /// settled or released.
    pub async fn settle(&self, item: Settle) -> Result<Option<Settled>, DbError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_run_in_organization_order_and_answer_in_arrival_order() {
        let orgs = [Uuid::from_u128(3), Uuid::from_u128(1), Uuid::from_u128(2)];
        let order = by_organization(&orgs, |o| *o);
        assert_eq!(order, vec![1, 2, 0]);
        // Answers come back in run order: org 1, 2, 3.
        let answers = in_arrival_order(&order, vec!["one", "two", "three"]);
        assert_eq!(answers, vec!["three", "one", "two"]);
    }
}
