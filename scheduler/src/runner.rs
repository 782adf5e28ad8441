//! A small task abstraction: `work()` does one round and says whether more
//! is waiting; the runner loops, sleeps when idle and backs off on errors.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// More work is waiting: run again at once.
    Busy,
    /// Nothing to do: sleep one tick.
    Idle,
}

pub trait Task: Send {
    fn name(&self) -> &'static str;
    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>>;
}

pub async fn run_task(mut task: Box<dyn Task>, tick: Duration, shutdown: CancellationToken) {
    let new_backoff = || {
        ExponentialBuilder::default()
            .with_min_delay(tick)
            // At most 10 s with jitter: a task resumes soon after an outage.
            .with_max_delay(Duration::from_secs(5))
            .with_jitter()
            .without_max_times()
            .build()
    };
    let mut backoff = new_backoff();
    while !shutdown.is_cancelled() {
        // A round is never interrupted: shutdown is checked between rounds.
        let pause = match task.work().await {
            Ok(Activity::Busy) => {
                backoff = new_backoff();
                continue;
            }
            Ok(Activity::Idle) => {
                backoff = new_backoff();
                tick
            }
            Err(err) => {
                let delay = backoff.next().unwrap_or(Duration::from_secs(5));
                tracing::warn!(
                    task = task.name(),
                    error = format!("{err:#}"),
                    retry_in_ms = delay.as_millis() as u64,
                    "task failed"
                );
                delay
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(pause) => {}
        }
    }
}
