//! Waiting for a job to finish: sync requests and long polls.

use std::future::Future;
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
    Ok(
        until_finished_alongside(state, org_id, id, limit, || async {})
            .await?
            .0,
    )
}

/// [`until_finished`], and every read after a notification for a job last
/// seen running runs `alongside` concurrently with it (on its own
/// connection): what the job's completion changed (the balances its
/// settlement left) is read in the same round trip's time as the job. The
/// completion's notification is sent by its commit, so both reads see it.
/// (The notification that the job started reads the job alone; a periodic
/// re-read, which may race the commit, too.) Its answer comes with the job
/// when that read found the job terminal; `None` otherwise (the caller
/// reads it after, if it needs it).
pub async fn until_finished_alongside<T, F, Fut>(
    state: &AppState,
    org_id: Uuid,
    id: Uuid,
    limit: Duration,
    alongside: F,
) -> Result<(Job, Option<T>), ApiError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = T>,
{
    let deadline = Instant::now() + limit;
    let mut watch = state.hub.subscribe(id);
    let mut woken = false;
    let mut running = false;
    loop {
        // Boxed: a read's future is large, and thousands of parked waiters
        // would each reserve its size while they sleep between reads.
        let read = Box::pin(state.job_reads.read(org_id, id));
        let (read, beside) = if woken && running {
            let (read, beside) = tokio::join!(read, Box::pin(alongside()));
            (read, Some(beside))
        } else {
            (read.await, None)
        };
        let job = match read {
            Ok(job) => job.ok_or_else(|| ApiError::NotFound(format!("job {id} not found")))?,
            // The database is unreachable for a moment (the listener's
            // reconnect wakes us when it is back): the job is safe in it, so
            // keep waiting within the limit rather than fail the request.
            Err(DbError::Unavailable(_) | DbError::ConnectionLost(_))
                if Instant::now() + DB_RETRY_PAUSE < deadline =>
            {
                woken = tokio::select! {
                    _ = watch.changed() => true,
                    _ = tokio::time::sleep(DB_RETRY_PAUSE) => false,
                };
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        let status = job.status.parse::<JobStatus>();
        running = status == Ok(JobStatus::Processing);
        if status.is_ok_and(JobStatus::is_terminal) {
            return Ok((job, beside));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok((job, None));
        }
        // Not kept while parked: thousands of parked polls would each hold
        // a copy of their job's row.
        drop(job);
        let nap = state.limits.recheck.min(deadline - now);
        woken = tokio::select! {
            _ = watch.changed() => true,
            _ = tokio::time::sleep(nap) => false,
        };
    }
}
