//! Waiting for a job to finish: sync requests and long polls.

use std::time::Duration;

use tokio::time::Instant;
use unigen_core::domain::JobStatus;
use unigen_db::DbError;
use unigen_db::models::Job;
use uuid::Uuid;

use crate::error::ApiError;
use crate::state::AppState;

/// Pause between reads while the database is unreachable.
const DB_RETRY_PAUSE: Duration = Duration::from_millis(250);

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
        let job = match state.job_reads.read(org_id, id).await {
            Ok(job) => job.ok_or_else(|| ApiError::NotFound(format!("job {id} not found")))?,
            // The database is unreachable for a moment (the listener's
            // reconnect wakes us when it is back): the job is safe in it, so
            // keep waiting within the limit rather than fail the request.
            Err(DbError::Unavailable(_) | DbError::ConnectionLost(_))
                if Instant::now() + DB_RETRY_PAUSE < deadline =>
            {
                tokio::select! {
                    _ = watch.changed() => {}
                    _ = tokio::time::sleep(DB_RETRY_PAUSE) => {}
                }
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        let terminal = job
            .status
            .parse::<JobStatus>()
            .is_ok_and(JobStatus::is_terminal);
        let now = Instant::now();
        if terminal || now >= deadline {
            return Ok(job);
        }
        // Not kept while parked: thousands of parked polls would each hold
        // a copy of their job's row.
        drop(job);
        let nap = state.limits.recheck.min(deadline - now);
        tokio::select! {
            _ = watch.changed() => {}
            _ = tokio::time::sleep(nap) => {}
        }
    }
}
