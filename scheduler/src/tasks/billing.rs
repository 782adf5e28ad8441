//! Billing housekeeping: starts each organization's new period (its
//! `allocation`) when the old one ends, settles the charges an API process
//! recorded and did not settle (it died), and releases the reservations of
//! sync requests whose API process died before settling them.

use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use futures_util::future::BoxFuture;
use unigen_db::notify::Notifier;
use unigen_db::{DbError, PgPool, queries};

use crate::runner::{Activity, Task};

const BATCH: i64 = 100;

pub struct Billing {
    pool: PgPool,
    notifier: Notifier,
    /// `metering.lease_seconds`: a live API process settles its recorded
    /// charges within milliseconds, and gives up on them after this long.
    orphaned_after: Duration,
}

impl Billing {
    pub fn new(pool: PgPool, notifier: Notifier, orphaned_after: Duration) -> Self {
        Self {
            pool,
            notifier,
            orphaned_after,
        }
    }

    /// Settles recorded charges left by a dead API process, before its
    /// allowances expire and are released (their holds then pay for them).
    async fn settle_orphaned(&self, conn: &mut AsyncPgConnection) -> Result<usize, DbError> {
        let before = chrono::Utc::now()
            - chrono::Duration::from_std(self.orphaned_after).unwrap_or(chrono::Duration::MAX);
        let orphaned = queries::billing::orphaned_charges(conn, before, BATCH).await?;
        if orphaned.is_empty() {
            return Ok(0);
        }
        let settled = queries::billing::settle_recorded(conn, &orphaned).await?;
        let count = settled.iter().flatten().count();
        if settled.iter().flatten().any(|s| s.events_recorded) {
            self.notifier.events_recorded();
        }
        if count > 0 {
            tracing::warn!(
                charges = count,
                "settled charges recorded by an API process that did not settle them"
            );
        }
        Ok(orphaned.len())
    }

    /// Rolls over the accounts whose period ended; several schedulers split
    /// them (SKIP LOCKED), and `lock_account` rolls over at most once.
    async fn roll_over_periods(&self, conn: &mut AsyncPgConnection) -> Result<usize, DbError> {
        conn.transaction::<_, DbError, _>(async |conn| {
            let due = queries::billing::lock_due_for_rollover(conn, BATCH).await?;
            for org_id in &due {
                queries::billing::lock_account(conn, *org_id).await?;
            }
            Ok(due.len())
        })
        .await
    }

    async fn release_expired(&self, conn: &mut AsyncPgConnection) -> Result<usize, DbError> {
        let expired = queries::billing::expired_reservations(conn, BATCH).await?;
        for id in &expired {
            // Each in its own transaction: one org's lock never holds another's.
            conn.transaction::<_, DbError, _>(async |conn| {
                queries::billing::release(conn, *id, None).await
            })
            .await?;
            tracing::warn!(reservation = %id, "sync reservation expired unsettled; released");
        }
        Ok(expired.len())
    }

    async fn round(&self) -> anyhow::Result<Activity> {
        let mut pooled = self.pool.get().await.map_err(DbError::from)?;
        let conn: &mut AsyncPgConnection = &mut pooled;
        let rolled = self.roll_over_periods(conn).await?;
        if rolled > 0 {
            tracing::info!(accounts = rolled, "billing periods rolled over");
        }
        // A charge that cannot be settled must not keep expired blocks held.
        let orphaned = self.settle_orphaned(conn).await.unwrap_or_else(|err| {
            tracing::warn!(error = %err, "settling orphaned charges failed; retried next round");
            0
        });
        let released = self.release_expired(conn).await?;
        Ok(
            if [rolled, orphaned, released].contains(&(BATCH as usize)) {
                Activity::Busy
            } else {
                Activity::Idle
            },
        )
    }
}

impl Task for Billing {
    fn name(&self) -> &'static str {
        "billing"
    }

    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>> {
        Box::pin(self.round())
    }
}
