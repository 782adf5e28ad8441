//! Results as a table and as JSON: percentiles per rate and target, and the
//! gateway's added latency (api - upstream) at the same percentiles.

use std::fmt::Write;

use serde::Serialize;

use crate::load::Pass;

/// One pass in milliseconds.
#[derive(Debug, Serialize)]
pub struct Stats {
    pub requests: u64,
    pub errors: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// How late the load generator sent requests (part of the latencies):
    /// its floor, and whether it kept up.
    pub send_lag_p50_ms: f64,
    pub send_lag_p99_ms: f64,
    pub send_lag_max_ms: f64,
}

/// What the gateway adds, per percentile (negative: it was faster, i.e. noise).
#[derive(Debug, Serialize)]
pub struct Added {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct RateResult {
    pub rate: u32,
    pub api: Stats,
    pub upstream: Stats,
    pub added: Added,
}

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

impl Stats {
    pub fn from_pass(pass: &Pass) -> Self {
        let h = &pass.histogram;
        Self {
            requests: pass.requests,
            errors: pass.errors,
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
            send_lag_p50_ms: ms(pass.lag.value_at_quantile(0.50)),
            send_lag_p99_ms: ms(pass.lag.value_at_quantile(0.99)),
            send_lag_max_ms: ms(pass.lag.max()),
        }
    }
}

impl RateResult {
    pub fn new(rate: u32, api: Stats, upstream: Stats) -> Self {
        // Both sides are whole microseconds: rounding keeps the JSON free of
        // float noise (0.418, not 0.41800000000000004).
        let diff = |a: f64, b: f64| ((a - b) * 1000.0).round() / 1000.0;
        let added = Added {
            p50_ms: diff(api.p50_ms, upstream.p50_ms),
            p90_ms: diff(api.p90_ms, upstream.p90_ms),
            p99_ms: diff(api.p99_ms, upstream.p99_ms),
        };
        Self {
            rate,
            api,
            upstream,
            added,
        }
    }
}

/// The results table, latencies in ms with 3 decimals.
pub fn table(results: &[RateResult]) -> String {
    let mut out = format!(
        "{:>6}  {:<9} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9}\n",
        "rate/s", "target", "requests", "errors", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms"
    );
    for r in results {
        for (target, s) in [("api", &r.api), ("upstream", &r.upstream)] {
            let _ = writeln!(
                out,
                "{:>6}  {:<9} {:>8} {:>7} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                r.rate, target, s.requests, s.errors, s.p50_ms, s.p90_ms, s.p99_ms, s.p999_ms
            );
        }
        let a = &r.added;
        let _ = writeln!(
            out,
            "{:>6}  {:<9} {:>8} {:>7} {:>9.3} {:>9.3} {:>9.3}",
            r.rate, "added", "", "", a.p50_ms, a.p90_ms, a.p99_ms
        );
    }
    out
}

/// Runs a scenario's measurement on a multi-thread runtime of its own.
pub fn block_on<F: std::future::Future>(measure: F) -> anyhow::Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    Ok(runtime.block_on(measure))
}

/// Writes `report` as pretty JSON to `path`, when one was given (`--json`).
pub fn write_json(
    path: Option<&std::path::Path>,
    report: &serde_json::Value,
) -> anyhow::Result<()> {
    use anyhow::Context;
    if let Some(path) = path {
        std::fs::write(path, serde_json::to_vec_pretty(report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::histogram;

    /// A pass whose latencies are 1..=1000 times `step_us`.
    fn pass(step_us: u64) -> Pass {
        let mut latencies = histogram();
        for i in 1..=1000 {
            latencies.record(i * step_us).unwrap();
        }
        let mut lag = histogram();
        lag.record(1500).unwrap();
        Pass {
            histogram: latencies,
            requests: 1001,
            errors: 1,
            lag,
        }
    }

    #[test]
    fn percentiles_are_in_milliseconds_and_added_is_api_minus_upstream() {
        // Values under 2048 us are stored exactly at 3 significant figures.
        let result = RateResult::new(200, Stats::from_pass(&pass(2)), Stats::from_pass(&pass(1)));
        assert_eq!(result.upstream.p50_ms, 0.5);
        assert_eq!(result.upstream.p99_ms, 0.99);
        assert_eq!(result.api.p50_ms, 1.0);
        assert_eq!(result.api.send_lag_max_ms, 1.5);
        assert_eq!(result.added.p50_ms, 0.5);
        assert_eq!(result.added.p90_ms, 0.9);
        assert_eq!(result.added.p99_ms, 0.99);

        let table = table(&[result]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4);
        let cells = |line: &str| {
            line.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            cells(lines[1]),
            [
                "200", "api", "1001", "1", "1.000", "1.800", "1.980", "1.998"
            ]
        );
        assert_eq!(cells(lines[3]), ["200", "added", "0.500", "0.900", "0.990"]);
    }
}
