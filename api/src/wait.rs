//! Waiting for a job to finish: sync requests and long polls.

use std::time::Duration;

use tokio::time::Instant;
use unigen_shared::db::models::Job;
use unigen_shared::db::{DbError, queries};
use unigen_shared::domain::JobStatus;
use uuid::Uuid;

use crate::error::ApiError;
use crate::state::AppState;

/// Returns the job once it is terminal, or as it is when `limit` passes.
/// Subscribes before reading, so a completion between the read and the wait
/// still wakes us; re-reads periodically in case a notification was lost.
pub async fn until_finished(
    state: &AppState,
    org_id: Uuid,
    id: Uuid,
    limit: Duration,
) -> Result<Job, ApiError> {
    let deadline = Instant::now() + limit;
    let mut watch = state.hub.subscribe(id);
    loop {
        let job = {
            let mut conn = state.pool.get().await.map_err(DbError::from)?;
            queries::jobs::find_for_org(&mut conn, org_id, id).await?
        }
        .ok_or_else(|| ApiError::NotFound(format!("job {id} not found")))?;
        let terminal = job
            .status
            .parse::<JobStatus>()
            .is_ok_and(JobStatus::is_terminal);
        let now = Instant::now();
        if terminal || now >= deadline {
            return Ok(job);
        }
        let nap = state.limits.recheck.min(deadline - now);
        tokio::select! {
            _ = watch.changed() => {}
            _ = tokio::time::sleep(nap) => {}
        }
    }
}
