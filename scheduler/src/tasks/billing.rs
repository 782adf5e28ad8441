//! Billing housekeeping: starts each organization's new period (its
//! `allocation`) when the old one ends, and releases the reservations of
//! sync requests whose API process died before settling them.

use diesel_async::{AsyncConnection, AsyncPgConnection};
use futures_util::future::BoxFuture;
use unigen_db::{DbError, PgPool, queries};

use crate::runner::{Activity, Task};

const BATCH: i64 = 100;

pub struct Billing {
    pool: PgPool,
}

impl Billing {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
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
        let released = self.release_expired(conn).await?;
        Ok(if rolled as i64 == BATCH || released as i64 == BATCH {
            Activity::Busy
        } else {
            Activity::Idle
        })
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
