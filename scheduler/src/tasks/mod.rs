pub mod agent_runs;
pub mod batches;
pub mod billing;
pub mod dead_letters;
pub mod deadlines;
pub mod knowledge;
pub mod lease_rescue;
pub mod relay;
pub mod response_retention;
pub mod retention;
pub mod webhooks;

use diesel_async::AsyncPgConnection;
use unigen_db::billing::job_usage_record;
use unigen_db::queries::jobs::RescuedJob;
use unigen_db::{DbError, events, queries};

/// For jobs the scheduler just failed (out of attempts, past the deadline):
/// their `generation.failed` events, their reservations released (a failed
/// job consumes nothing) and a `failed` usage record, as when a worker fails
/// a job. Call in the transaction that failed them.
pub(crate) async fn record_given_up(
    conn: &mut AsyncPgConnection,
    jobs: &[RescuedJob],
) -> Result<(), DbError> {
    for job in jobs.iter().filter(|job| job.status == "failed") {
        let message = job.error_message.as_deref().unwrap_or("the job failed");
        let event = events::generation_failed(job.org_id, job.id, &job.tool, &job.model, message);
        queries::events::insert(conn, &event).await?;
        let record = queries::jobs::find(conn, job.id)
            .await?
            .map(|row| job_usage_record(&row, "failed"));
        queries::billing::release(conn, job.id, record).await?;
    }
    Ok(())
}
