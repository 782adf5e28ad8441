//! Stored responses of the Responses API past their `expires_at`
//! (`responses.retention_seconds` after they were stored): deleted in
//! batches. An expired response is already a 404 (the API reads only
//! unexpired ones); this frees its rows. Rows another scheduler is deleting
//! are skipped (`SKIP LOCKED`), so several may run.

use futures_util::future::BoxFuture;
use unigen_db::{PgPool, queries};

use crate::runner::{Activity, Task};

const BATCH: i64 = 500;

pub struct ResponseRetention {
    pool: PgPool,
}

impl ResponseRetention {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    async fn round(&self) -> anyhow::Result<Activity> {
        let mut conn = self.pool.get().await?;
        let deleted = queries::responses::delete_expired(&mut conn, BATCH).await?;
        if deleted > 0 {
            tracing::debug!(responses = deleted, "expired stored responses deleted");
        }
        Ok(if deleted as i64 == BATCH {
            Activity::Busy
        } else {
            Activity::Idle
        })
    }
}

impl Task for ResponseRetention {
    fn name(&self) -> &'static str {
        "response_retention"
    }

    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>> {
        Box::pin(self.round())
    }
}
