//! Open-loop load at a fixed rate. Request `i` is due at `start + i / rate`
//! whatever happened to the earlier ones, and its latency counts from that
//! due time, not from when it was actually sent. A slow server, or a
//! scheduler that fell behind, then shows up in the latencies instead of
//! quietly lowering the offered rate (no coordinated omission).
//!
//! Requests are paced by a dedicated thread with OS sleeps, precise to tens
//! of microseconds; tokio's timer rounds to whole milliseconds, which would
//! add up to a millisecond to every latency measured from the due time, more
//! than the gateway overhead being measured.

use std::future::Future;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::task::JoinHandle;

/// Latencies are recorded in microseconds up to a minute (longer ones saturate).
const MAX_LATENCY_US: u64 = 60_000_000;
const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// `rate` requests per second: `warmup` unrecorded, then `duration` measured.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    pub rate: u32,
    pub warmup: Duration,
    pub duration: Duration,
}

impl Schedule {
    /// When request `i` is due, after the start. Computed from `i` rather than
    /// by adding intervals, so rounding never accumulates into drift.
    pub fn due(&self, i: u64) -> Duration {
        let nanos = u128::from(i) * NANOS_PER_SECOND / u128::from(self.rate);
        Duration::from_nanos(nanos as u64)
    }

    /// How many requests are due within `span` of the start.
    fn count(&self, span: Duration) -> u64 {
        let scaled = span.as_nanos() * u128::from(self.rate);
        scaled.div_ceil(NANOS_PER_SECOND) as u64
    }
}

/// What one measured pass saw.
pub struct Pass {
    /// Latencies of the successful requests, in microseconds from their due time.
    pub histogram: Histogram<u64>,
    /// Measured requests sent (successes and errors).
    pub requests: u64,
    /// Requests that failed: transport errors, timeouts, non-2xx answers.
    pub errors: u64,
    /// How late each measured request was sent, in microseconds: the load
    /// generator's own share of the latencies (sleep precision, and falling
    /// behind when the machine is busy). It is counted in the latencies.
    pub lag: Histogram<u64>,
}

/// A measured request in flight: its latency, or `None` when it failed.
type InFlight = JoinHandle<Option<Duration>>;

/// Runs `schedule` from `start`. `send` starts one request; its future
/// resolves to whether the request succeeded (body read included). Each
/// request runs in its own task on the current runtime, so a slow answer
/// never delays the next send.
pub async fn run<F, Fut>(schedule: Schedule, start: Instant, send: F) -> Pass
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    run_timed(schedule, start, move || {
        let request = send();
        async move { request.await.then(Instant::now) }
    })
    .await
}

/// [`run`] for requests whose measured part ends before they do (say, the
/// first token of a stream that is still read to its end): `send`'s future
/// resolves to the moment the measurement ends, or `None` when the request
/// failed. The latency is still counted from the due time.
pub async fn run_timed<F, Fut>(schedule: Schedule, start: Instant, send: F) -> Pass
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Option<Instant>> + Send + 'static,
{
    let (tasks, lag) = tokio::task::spawn_blocking(move || pace(schedule, start, send))
        .await
        .expect("the pacing thread does not panic");
    let mut histogram = histogram();
    let mut errors = 0;
    let requests = tasks.len() as u64;
    for task in tasks {
        match task.await {
            Ok(Some(latency)) => histogram.saturating_record(micros(latency)),
            Ok(None) | Err(_) => errors += 1,
        }
    }
    Pass {
        histogram,
        requests,
        errors,
        lag,
    }
}

/// The pacing loop, on a blocking-pool thread (which can spawn onto the
/// runtime): sleeps until each request is due, or sends at once when late.
fn pace<F, Fut>(schedule: Schedule, start: Instant, send: F) -> (Vec<InFlight>, Histogram<u64>)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<Instant>> + Send + 'static,
{
    let runtime = tokio::runtime::Handle::current();
    let first_measured = schedule.count(schedule.warmup);
    let total = schedule.count(schedule.warmup + schedule.duration);
    let mut tasks = Vec::with_capacity((total - first_measured) as usize);
    let mut lag = histogram();
    for i in 0..total {
        let due = start + schedule.due(i);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let request = send();
        if i < first_measured {
            // Warm-up: opens connections and warms caches; not recorded.
            runtime.spawn(request);
            continue;
        }
        lag.saturating_record(micros(due.elapsed()));
        tasks.push(runtime.spawn(async move {
            let end = request.await?;
            Some(end.saturating_duration_since(due))
        }));
    }
    (tasks, lag)
}

/// Microseconds from 1 us to a minute, 3 significant figures.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("static histogram bounds are valid")
}

fn micros(duration: Duration) -> u64 {
    duration.as_micros().try_into().unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn schedule(rate: u32, warmup_ms: u64, duration_ms: u64) -> Schedule {
        Schedule {
            rate,
            warmup: Duration::from_millis(warmup_ms),
            duration: Duration::from_millis(duration_ms),
        }
    }

    #[test]
    fn requests_are_due_at_even_intervals_without_drift() {
        let s = schedule(200, 1_000, 10_000);
        for i in 0..2_200 {
            assert_eq!(s.due(i + 1) - s.due(i), 5 * MS);
        }
        assert_eq!(s.count(s.warmup), 200);
        assert_eq!(s.count(s.warmup + s.duration), 2_200);
        // 1/3 s is not a whole number of nanoseconds; every third one still is exact.
        let thirds = schedule(3, 0, 1_000);
        assert_eq!(thirds.due(1), Duration::from_nanos(333_333_333));
        assert_eq!(thirds.due(3_000), Duration::from_secs(1_000));
    }

    #[tokio::test]
    async fn warm_up_is_sent_but_not_recorded() {
        let sent = Arc::new(AtomicU64::new(0));
        let counter = sent.clone();
        let pass = run(schedule(1_000, 100, 200), Instant::now(), move || {
            let sent = counter.clone();
            async move {
                sent.fetch_add(1, Ordering::Relaxed);
                true
            }
        })
        .await;
        tokio::time::sleep(10 * MS).await;
        assert_eq!(sent.load(Ordering::Relaxed), 300);
        assert_eq!((pass.requests, pass.errors), (200, 0));
        assert_eq!(pass.histogram.len(), 200);
    }

    #[tokio::test]
    async fn latency_counts_from_the_due_time_even_when_sent_late() {
        // The pacer starts 100 ms behind: the requests due in that window go
        // out at once, and their wait is part of their latency.
        let start = Instant::now() - 100 * MS;
        let pass = run(schedule(100, 0, 200), start, || async {
            tokio::time::sleep(20 * MS).await;
            true
        })
        .await;
        assert_eq!((pass.requests, pass.errors), (20, 0));
        let (h, lag) = (&pass.histogram, &pass.lag);
        assert!(
            lag.max() >= 100_000 && lag.max() < 150_000,
            "lag {}",
            lag.max()
        );
        assert!(h.max() >= 120_000 && h.max() < 200_000, "max {}", h.max());
        assert!(h.min() >= 20_000 && h.min() < 60_000, "min {}", h.min());
    }

    #[tokio::test]
    async fn failures_are_counted_apart_from_latencies() {
        let n = AtomicU64::new(0);
        let pass = run(schedule(100, 0, 100), Instant::now(), move || {
            let ok = n.fetch_add(1, Ordering::Relaxed).is_multiple_of(2);
            async move { ok }
        })
        .await;
        assert_eq!((pass.requests, pass.errors), (10, 5));
        assert_eq!(pass.histogram.len(), 5);
    }

    #[tokio::test]
    async fn timed_latency_ends_at_the_reported_moment_not_the_request_end() {
        let pass = run_timed(schedule(100, 0, 100), Instant::now(), || async {
            tokio::time::sleep(5 * MS).await;
            let measured = Instant::now();
            tokio::time::sleep(50 * MS).await;
            Some(measured)
        })
        .await;
        assert_eq!((pass.requests, pass.errors), (10, 0));
        let h = &pass.histogram;
        assert!(
            h.min() >= 5_000 && h.max() < 40_000,
            "{}..{}",
            h.min(),
            h.max()
        );
    }
}
