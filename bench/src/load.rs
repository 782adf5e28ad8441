//! Open-loop load at a fixed rate. Request `i` is due at `start + i / rate`
//! whatever happened to the earlier ones, and its latency counts from that
//! due time, not from when it was actually sent. A slow server, or a
//! scheduler that fell behind, then shows up in the latencies instead of
//! quietly lowering the offered rate (no coordinated omission).

use std::future::Future;
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

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
    /// How late the scheduler was at worst; large values mean the load
    /// generator itself could not keep up (its lateness is still counted in
    /// the latencies).
    pub max_lag: Duration,
}

/// Runs `schedule` from `start`. `send` starts one request; its future
/// resolves to whether the request succeeded (body read included). Each
/// request runs in its own task, so a slow answer never delays the next send.
pub async fn run<F, Fut>(schedule: Schedule, start: Instant, send: F) -> Pass
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool> + Send + 'static,
{
    let first_measured = schedule.count(schedule.warmup);
    let total = schedule.count(schedule.warmup + schedule.duration);
    let mut tasks = Vec::with_capacity((total - first_measured) as usize);
    let mut max_lag = Duration::ZERO;
    for i in 0..total {
        let due = start + schedule.due(i);
        tokio::time::sleep_until(due).await;
        let request = send();
        if i < first_measured {
            // Warm-up: opens connections and warms caches; not recorded.
            tokio::spawn(request);
            continue;
        }
        max_lag = max_lag.max(Instant::now().saturating_duration_since(due));
        tasks.push(tokio::spawn(async move {
            let ok = request.await;
            (ok, due.elapsed())
        }));
    }
    let mut histogram = Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
        .expect("static histogram bounds are valid");
    let mut errors = 0;
    for task in tasks {
        match task.await {
            Ok((true, latency)) => histogram.saturating_record(latency.as_micros() as u64),
            Ok((false, _)) | Err(_) => errors += 1,
        }
    }
    Pass {
        histogram,
        requests: total - first_measured,
        errors,
        max_lag,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn schedule(rate: u32, warmup: u64, duration: u64) -> Schedule {
        Schedule {
            rate,
            warmup: Duration::from_secs(warmup),
            duration: Duration::from_secs(duration),
        }
    }

    #[test]
    fn requests_are_due_at_even_intervals_without_drift() {
        let s = schedule(200, 1, 10);
        for i in 0..2_200 {
            assert_eq!(s.due(i + 1) - s.due(i), 5 * MS);
        }
        assert_eq!(s.count(s.warmup), 200);
        assert_eq!(s.count(s.warmup + s.duration), 2_200);
        // 1/3 s is not a whole number of nanoseconds; every third one still is exact.
        let thirds = schedule(3, 0, 1);
        assert_eq!(thirds.due(1), Duration::from_nanos(333_333_333));
        assert_eq!(thirds.due(3_000), Duration::from_secs(1_000));
    }

    #[tokio::test(start_paused = true)]
    async fn warm_up_is_sent_but_not_recorded() {
        let sent = Arc::new(AtomicU64::new(0));
        let pass = run(schedule(100, 1, 2), Instant::now(), || {
            let sent = sent.clone();
            async move {
                sent.fetch_add(1, Ordering::Relaxed);
                true
            }
        })
        .await;
        tokio::task::yield_now().await;
        assert_eq!(sent.load(Ordering::Relaxed), 300);
        assert_eq!(pass.requests, 200);
        assert_eq!(pass.histogram.len(), 200);
    }

    #[tokio::test(start_paused = true)]
    async fn latency_counts_from_the_due_time_even_when_sent_late() {
        // The scheduler starts 100 ms behind: requests due in that window go
        // out at once, and their wait is part of their latency.
        let start = Instant::now();
        tokio::time::advance(100 * MS).await;
        let pass = run(schedule(100, 0, 1), start, || async {
            tokio::time::sleep(50 * MS).await;
            true
        })
        .await;
        assert_eq!(pass.requests, 100);
        assert_eq!(pass.errors, 0);
        assert_eq!(pass.max_lag, 100 * MS);
        let h = &pass.histogram;
        assert!(h.equivalent(h.max(), 150_000), "max {}", h.max());
        assert!(h.equivalent(h.min(), 50_000), "min {}", h.min());
        assert!(h.equivalent(h.value_at_quantile(0.5), 50_000));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_counted_apart_from_latencies() {
        let n = AtomicU64::new(0);
        let pass = run(schedule(10, 0, 1), Instant::now(), || {
            let ok = n.fetch_add(1, Ordering::Relaxed).is_multiple_of(2);
            async move { ok }
        })
        .await;
        assert_eq!((pass.requests, pass.errors), (10, 5));
        assert_eq!(pass.histogram.len(), 5);
    }
}
