//! Progress reports of a running job (best effort: a lost update is only
//! logged).

use unigen_db::{DbError, queries};
use uuid::Uuid;

use crate::WorkerContext;

/// Reports progress (0..99; 100 is written with the result).
pub struct Progress<'a> {
    context: &'a WorkerContext,
    id: Uuid,
    attempt: i32,
}

impl<'a> Progress<'a> {
    pub fn new(context: &'a WorkerContext, id: Uuid, attempt: i32) -> Self {
        Self {
            context,
            id,
            attempt,
        }
    }

    pub async fn report(&self, percent: i16) {
        let result = async {
            let mut conn = self.context.pool.get().await.map_err(DbError::from)?;
            queries::jobs::set_progress(&mut conn, self.id, self.attempt, percent.clamp(0, 99))
                .await
        }
        .await;
        match result {
            // Event streams (`GET /jobs/{id}/events`) wake on it; the
            // notifier coalesces it with other changes into one NOTIFY.
            Ok(true) => self.context.notifier.job_changed(self.id),
            Ok(false) => {}
            Err(err) => tracing::debug!(error = %err, "progress update failed"),
        }
    }
}
