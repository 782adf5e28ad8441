//! What tracing costs: options shared by `chat-overhead` and `sync-overhead`.
//! `--otlp-sink PORT` serves a minimal OTLP/HTTP receiver on loopback that
//! answers 200 to every `POST /v1/traces` and counts the batches and bytes it
//! received, so a run with tracing on proves the spans were exported (start
//! the stack with `OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:PORT
//! OTEL_TRACES_SAMPLER=always_on`). `--cpu-pid PID` (repeatable) reads the
//! processes' CPU time (utime + stime in `/proc/PID/stat`) before and after
//! each measured pass, giving CPU milliseconds per request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use actix_web::{App, HttpResponse, HttpServer, post, web};
use anyhow::{Context, ensure};
use serde::Serialize;

#[derive(clap::Args, Clone, Debug, Default)]
pub struct TraceArgs {
    /// Serve an OTLP/HTTP trace receiver on 127.0.0.1:PORT (200 to POST
    /// /v1/traces, counted). Start the stack with
    /// OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:PORT OTEL_TRACES_SAMPLER=always_on
    /// to measure with tracing on; the run fails if no batch arrived.
    #[arg(long, value_name = "PORT")]
    pub otlp_sink: Option<u16>,
    /// A process of the stack (the API, the worker) whose CPU time per
    /// request is reported; repeat for several. Linux /proc only.
    #[arg(long = "cpu-pid", value_name = "PID")]
    pub cpu_pids: Vec<u32>,
}

/// What the receiver got.
#[derive(Debug, Default, Serialize, Clone, Copy, PartialEq, Eq)]
pub struct SinkCounts {
    pub requests: u64,
    pub bytes: u64,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    bytes: AtomicU64,
}

/// A running receiver; stopped on drop of the runtime.
pub struct Sink {
    counters: Arc<Counters>,
    port: u16,
}

#[post("/v1/traces")]
async fn traces(counters: web::Data<Arc<Counters>>, body: web::Bytes) -> HttpResponse {
    counters
        .bytes
        .fetch_add(body.len() as u64, Ordering::Relaxed);
    counters.requests.fetch_add(1, Ordering::Relaxed);
    // An empty ExportTraceServiceResponse is zero bytes of protobuf.
    HttpResponse::Ok()
        .content_type("application/x-protobuf")
        .finish()
}

impl Sink {
    /// Binds 127.0.0.1:`port` and serves on the current tokio runtime.
    pub fn start(port: u16) -> anyhow::Result<Self> {
        let counters = Arc::new(Counters::default());
        let data = web::Data::new(counters.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                // OTLP batches are at most a few MB (512 spans by default).
                .app_data(web::PayloadConfig::new(64 << 20))
                .service(traces)
        })
        .workers(1)
        .bind(("127.0.0.1", port))
        .with_context(|| format!("binding the OTLP sink on port {port}"))?
        .run();
        tokio::spawn(server);
        eprintln!(
            "OTLP sink on http://127.0.0.1:{port} (start the stack with \
             OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:{port} OTEL_TRACES_SAMPLER=always_on)"
        );
        Ok(Self { counters, port })
    }

    pub fn counts(&self) -> SinkCounts {
        SinkCounts {
            requests: self.counters.requests.load(Ordering::Relaxed),
            bytes: self.counters.bytes.load(Ordering::Relaxed),
        }
    }

    /// After the load: waits for the batch exporters' last flush (one more
    /// batch, or `grace` at most), then fails if nothing was ever received.
    pub async fn finish(&self, grace: Duration) -> anyhow::Result<SinkCounts> {
        let before = self.counts();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.counts() == before {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let counts = self.counts();
        ensure!(
            counts.requests > 0,
            "the OTLP sink on port {} received no trace batch: start the stack with \
             OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:{} OTEL_TRACES_SAMPLER=always_on",
            self.port,
            self.port
        );
        eprintln!(
            "OTLP sink: {} batches, {} bytes received",
            counts.requests, counts.bytes
        );
        Ok(counts)
    }
}

/// Ticks per second of /proc/PID/stat's times (USER_HZ): 100 on Linux.
const USER_HZ: f64 = 100.0;

/// utime + stime of `pid` in ticks, from /proc/PID/stat.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    parse_cpu_ticks(&stat).with_context(|| format!("parsing /proc/{pid}/stat"))
}

/// Fields 14 (utime) and 15 (stime), counted after the `)` closing the
/// command name (which may contain spaces).
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// CPU time of the `--cpu-pid` processes from `start` on.
pub struct CpuMeter {
    pids: Vec<u32>,
    start: Vec<u64>,
}

/// CPU used during a pass, per process and in total.
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct CpuUse {
    /// Per `--cpu-pid`, in the order given: CPU milliseconds.
    pub cpu_ms: Vec<f64>,
    /// All of them together, per request.
    pub cpu_ms_per_request: f64,
}

impl CpuMeter {
    pub fn start(pids: &[u32]) -> anyhow::Result<Self> {
        let start = pids
            .iter()
            .map(|&p| cpu_ticks(p))
            .collect::<anyhow::Result<_>>()?;
        Ok(Self {
            pids: pids.to_vec(),
            start,
        })
    }

    /// CPU milliseconds per process since `start`; None without `--cpu-pid`.
    pub fn stop(&self) -> anyhow::Result<Option<Vec<f64>>> {
        if self.pids.is_empty() {
            return Ok(None);
        }
        let mut cpu_ms = Vec::new();
        for (&pid, &start) in self.pids.iter().zip(&self.start) {
            let ticks = cpu_ticks(pid)?.saturating_sub(start);
            cpu_ms.push(ticks as f64 * 1000.0 / USER_HZ);
        }
        Ok(Some(cpu_ms))
    }
}

impl CpuUse {
    pub fn new(cpu_ms: Vec<f64>, requests: u64) -> Self {
        let total: f64 = cpu_ms.iter().sum();
        Self {
            cpu_ms,
            cpu_ms_per_request: ((total / requests.max(1) as f64) * 1000.0).round() / 1000.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_utime_plus_stime_even_with_spaces_in_the_name() {
        let stat = "4242 (unigen api) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    1234 567 0 0 20 0 9 0 100 1000000 2000 18446744073709551615";
        assert_eq!(parse_cpu_ticks(stat), Some(1234 + 567));
        assert_eq!(parse_cpu_ticks("4242 (x) S 1"), None);
    }

    #[test]
    fn the_cpu_time_of_this_process_is_read_and_divided_per_request() {
        let me = std::process::id();
        let meter = CpuMeter::start(&[me]).unwrap();
        let started = Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let used = CpuUse::new(meter.stop().unwrap().unwrap(), 10);
        assert_eq!(used.cpu_ms.len(), 1);
        assert!(used.cpu_ms[0] > 0.0, "{used:?}");
        assert!((used.cpu_ms_per_request - used.cpu_ms[0] / 10.0).abs() < 0.01);
        assert_eq!(CpuMeter::start(&[]).unwrap().stop().unwrap(), None);
    }

    #[test]
    fn the_sink_answers_200_to_trace_batches_and_counts_them() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let sink = Sink::start(port).unwrap();
            let client = reqwest::Client::new();
            let url = format!("http://127.0.0.1:{port}/v1/traces");
            // Bound before start returns: the connection waits in the backlog
            // until the server task runs.
            let status = client
                .post(&url)
                .body(vec![1u8; 300])
                .send()
                .await
                .unwrap()
                .status();
            assert_eq!(status, reqwest::StatusCode::OK);
            let counts = sink.finish(Duration::ZERO).await.unwrap();
            assert_eq!(
                counts,
                SinkCounts {
                    requests: 1,
                    bytes: 300
                }
            );
        });
    }
}
