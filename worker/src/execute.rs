//! Running one claimed job: lease renewal, cancellation, settlement.

use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use unigen_core::domain::{JobStatus, Tool};
use unigen_db::models::Job;
use unigen_db::{DbError, events, queries};
use uuid::Uuid;

use crate::WorkerContext;
use crate::finish::{Finish, Terminal};
use crate::output::ToolOutput;
use crate::progress::Progress;
use crate::registry;

enum Outcome {
    Finished(Result<ToolOutput, crate::error::ToolError>),
    /// Cancelled by the client, or the lease was lost to a rescue.
    NoLongerOurs,
    /// The worker is stopping and the grace period is over.
    Shutdown,
}

/// Runs a claimed job to a terminal state (or hands it back on shutdown).
pub async fn run_claimed(
    context: &WorkerContext,
    tool: Tool,
    job: Job,
    hard_stop: CancellationToken,
) {
    let span = tracing::info_span!("job", job_id = %job.id, tool = %tool, attempt = job.attempt);
    async move {
        let started = std::time::Instant::now();
        let (id, attempt) = (job.id, job.attempt);
        if attempt <= 1 {
            // Submission to this start, on the database's clock (the claim
            // set `started_at`).
            let waited = job
                .started_at
                .map(|at| (at - job.created_at).to_std().unwrap_or_default());
            if let Some(waited) = waited {
                context.metrics.job_started(tool, waited);
            }
        }
        let progress = Progress::new(context, id, attempt);
        let outcome = tokio::select! {
            result = registry::run(context, tool, &job, &progress) => Outcome::Finished(result),
            () = watch_ownership(context, id, attempt) => Outcome::NoLongerOurs,
            () = hard_stop.cancelled() => Outcome::Shutdown,
        };
        let elapsed = started.elapsed();
        let duration_ms = elapsed.as_millis() as u64;
        match outcome {
            Outcome::Finished(Ok(output)) => {
                match settle(
                    context,
                    &job,
                    duration_ms as i64,
                    Settlement::Complete(&output),
                )
                .await
                {
                    Some(true) => {
                        context.metrics.job_completed(tool, &job.model, elapsed);
                        tracing::info!(duration_ms, "job completed");
                    }
                    Some(false) => {
                        tracing::info!(duration_ms, "job was cancelled meanwhile; result discarded")
                    }
                    None => {}
                }
            }
            Outcome::Finished(Err(err)) => {
                let message = err.client_message();
                tracing::warn!(error = %err, duration_ms, "job failed");
                let settled = settle(
                    context,
                    &job,
                    duration_ms as i64,
                    Settlement::Fail(&message),
                )
                .await;
                // Counted once written: an unwritten failure is retried and
                // would otherwise count twice.
                if settled == Some(true) {
                    context
                        .metrics
                        .job_failed(tool, &job.model, err.reason(), elapsed);
                }
            }
            Outcome::NoLongerOurs => {
                tracing::info!(duration_ms, "job cancelled or taken over; aborted")
            }
            Outcome::Shutdown => {
                let mut released = false;
                if let Ok(mut conn) = context.pool.get().await {
                    released = queries::jobs::release(&mut conn, id, attempt)
                        .await
                        .unwrap_or(false);
                }
                // If the release failed, the lease expires and the scheduler rescues the job.
                tracing::info!(released, "worker stopping; job handed back");
            }
        }
    }
    .instrument(span)
    .await
}

enum Settlement<'a> {
    Complete(&'a ToolOutput),
    Fail(&'a str),
}

/// Writes a terminal state (only if this attempt still owns the job), then
/// wakes waiters. `Some(false)`: cancelled meanwhile, nothing written. `None`:
/// the database was unreachable; the lease expires and the job is retried.
async fn settle(
    context: &WorkerContext,
    job: &Job,
    duration_ms: i64,
    settlement: Settlement<'_>,
) -> Option<bool> {
    let id = job.id;
    let (terminal, event) = match settlement {
        Settlement::Complete(output) => (
            Terminal::Complete {
                output: output.output.clone(),
                actual_credits: output.actual_credits,
            },
            events::generation_completed(job, &output.output, duration_ms, &context.signer),
        ),
        Settlement::Fail(message) => (
            Terminal::Fail(message.to_owned()),
            events::generation_failed(job.org_id, id, &job.tool, &job.model, message),
        ),
    };
    let finish = Finish {
        job: job.clone(),
        terminal,
        event,
    };
    let completes = matches!(finish.terminal, Terminal::Complete { .. });
    match context.finisher.finish(finish).await {
        Ok(written) => {
            // A completion written was announced by its own commit.
            if !(written && completes) {
                context.notifier.job_changed(id);
                if written {
                    context.notifier.events_recorded();
                }
            }
            Some(written)
        }
        Err(err) => {
            tracing::error!(error = %err, "writing the job result failed; the lease will expire and the job be retried");
            None
        }
    }
}

/// Resolves when this attempt no longer owns the job: it was cancelled
/// (notification, checked at once) or the lease could not be renewed.
/// Renews the lease every third of its length meanwhile.
async fn watch_ownership(context: &WorkerContext, id: Uuid, attempt: i32) {
    let mut watch = context.hub.subscribe(id);
    let renew_every = context.lease / 3;
    let mut renew =
        tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
    loop {
        tokio::select! {
            () = watch.changed() => {
                if !still_ours(context, id, attempt).await {
                    return;
                }
            }
            _ = renew.tick() => {
                let renewed = async {
                    let mut conn = context.pool.get().await.map_err(DbError::from)?;
                    queries::jobs::renew_lease(&mut conn, id, attempt, context.lease).await
                }
                .await;
                match renewed {
                    Ok(true) => {}
                    Ok(false) => return,
                    // Keep working through a database blip; the next renewal may succeed.
                    Err(err) => tracing::warn!(error = %err, "lease renewal failed"),
                }
            }
        }
    }
}

async fn still_ours(context: &WorkerContext, id: Uuid, attempt: i32) -> bool {
    let job = async {
        let mut conn = context.pool.get().await.map_err(DbError::from)?;
        queries::jobs::find(&mut conn, id).await
    }
    .await;
    match job {
        Ok(Some(job)) => job.status == JobStatus::Processing.as_str() && job.attempt == attempt,
        Ok(None) => false,
        // Unknown: keep working; the renewal decides.
        Err(_) => true,
    }
}
