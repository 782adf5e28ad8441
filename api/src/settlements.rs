//! Settlement of sync requests (chat, embeddings) in batches.
//!
//! Every settlement of an organization takes its account's row lock until
//! commit, so under load they queue on it one commit at a time. Here they
//! queue in memory instead: one task settles whatever has arrived since its
//! previous statement with one `unigen_settle` per item in a single
//! statement and commit (`settle_many`). Under light load a batch is one
//! settlement, so nothing waits for a window to fill. Each request still
//! answers only after its settlement committed.

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use unigen_shared::billing::{Charge, Settled};
use unigen_shared::db::models::UsageRecord;
use unigen_shared::db::queries::billing::{self, SettleItem};
use unigen_shared::db::{DbError, PgPool};
use uuid::Uuid;

/// Largest batch: bounds the statement and the time each lock is held.
const MAX_BATCH: usize = 200;

struct Pending {
    org_id: Uuid,
    id: Uuid,
    charge: Charge,
    multiplier: f64,
    usage: UsageRecord,
    /// `None`: the batch failed; the request settles on its own.
    reply: oneshot::Sender<Option<Option<Settled>>>,
}

#[derive(Clone)]
pub struct Settlements {
    tx: mpsc::UnboundedSender<Pending>,
    pool: PgPool,
}

impl Settlements {
    pub fn spawn(pool: PgPool) -> (Self, JoinHandle<()>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<Pending>();
        let batch_pool = pool.clone();
        let handle = tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(pending) => batch.push(pending),
                        Err(_) => break,
                    }
                }
                settle_batch(&batch_pool, batch).await;
            }
        });
        (Self { tx, pool }, handle)
    }

    /// Charges `charge` against reservation `id` (see `billing::settle`).
    /// `None`: the reservation was already settled or released.
    pub async fn settle(
        &self,
        org_id: Uuid,
        id: Uuid,
        charge: Charge,
        multiplier: f64,
        usage: UsageRecord,
    ) -> Result<Option<Settled>, DbError> {
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            org_id,
            id,
            charge: charge.clone(),
            multiplier,
            usage: usage.clone(),
            reply,
        };
        if self.tx.send(pending).is_ok()
            && let Ok(Some(settled)) = answer.await
        {
            return Ok(settled);
        }
        // The batch failed as a whole (or the task stopped): settle alone, so
        // this request sees its own error. A settlement is idempotent: an
        // item the failed batch did commit answers `None` here.
        let mut conn = self.pool.get().await?;
        billing::settle(&mut conn, id, &charge, multiplier, &usage).await
    }
}

async fn settle_batch(pool: &PgPool, mut batch: Vec<Pending>) {
    // One lock order for every batch: by organization.
    batch.sort_by_key(|p| p.org_id);
    let result = async {
        let items: Vec<SettleItem<'_>> = batch
            .iter()
            .map(|p| SettleItem {
                id: p.id,
                charge: p.charge.clone(),
                multiplier: p.multiplier,
                usage: &p.usage,
            })
            .collect();
        let mut conn = pool.get().await?;
        billing::settle_many(&mut conn, &items).await
    }
    .await;
    match result {
        Ok(settled) => {
            for (pending, settled) in batch.into_iter().zip(settled) {
                let _ = pending.reply.send(Some(settled));
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, settlements = batch.len(), "batched settlement failed; settling one by one");
            for pending in batch {
                let _ = pending.reply.send(None);
            }
        }
    }
}
