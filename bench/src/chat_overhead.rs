//! `chat-overhead`: the latency unigen adds to a chat completion. The same
//! open-loop load goes through the gateway, then straight at the upstream the
//! gateway calls; the difference per percentile is the gateway's cost (auth,
//! validation, proxying, accounting). Non-streaming requests are timed to the
//! whole answer; streaming ones (`--mode stream`) to the first token, the
//! first server-sent chunk with content, while still being read to `[DONE]`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use reqwest::header::CONTENT_TYPE;
use serde_json::{Value, json};

use crate::load::{self, Pass, Schedule};
use crate::otlp_sink::{CpuMeter, CpuUse, Sink, SinkCounts, TraceArgs};
use crate::report::{self, RateResult, Stats};

#[derive(clap::Args)]
pub struct Args {
    /// unigen's API base URL; requests go to {api}/chat/completions.
    #[arg(long, default_value = "http://127.0.0.1:8080/api/v1")]
    api: String,
    /// unigen API key with the chat scope (scripts/dev-up prints one).
    #[arg(long, env = "UNIGEN_KEY", hide_env_values = true)]
    key: String,
    /// The upstream's base URL, called directly: {upstream}/chat/completions.
    #[arg(long, default_value = "http://127.0.0.1:9400/v1")]
    upstream: String,
    /// unigen model id served by that upstream.
    #[arg(long, default_value = "bench/fake-chat")]
    model: String,
    /// Model name sent straight to the upstream (the model's upstream_model).
    #[arg(long, default_value = "bench")]
    upstream_model: String,
    /// Request rates to measure, in requests per second, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "200",
          value_parser = clap::value_parser!(u32).range(1..))]
    rates: Vec<u32>,
    /// Measured seconds per pass (one pass per rate and target).
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Seconds of unrecorded load at the same rate before each pass.
    #[arg(long, default_value_t = 1)]
    warmup: u64,
    /// Per-request timeout in seconds; a timed-out request counts as an error.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// Also write the results as JSON to this file. Non-streaming results are
    /// under "results"; with --mode stream or both, time-to-first-token results
    /// (same fields, in ms) are under "ttft_results".
    #[arg(long)]
    json: Option<PathBuf>,
    /// Which requests to measure. Each mode runs every rate through unigen
    /// and then directly, and has its own table.
    #[arg(long, value_enum, default_value_t = Mode::Plain)]
    mode: Mode,
    /// Skip the direct passes at the upstream (e.g. when only comparing two
    /// runs of the gateway, tracing off and on); the upstream columns are then
    /// 0 and the added ones the api's own latencies.
    #[arg(long)]
    no_direct: bool,
    #[command(flatten)]
    trace: TraceArgs,
}

/// What a pass sends and what it times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    /// Non-streaming requests, timed to the whole answer.
    Plain,
    /// "stream": true, timed to the first token: the first SSE data event
    /// whose choices[0].delta.content is non-empty. The stream is still read
    /// to its end; one without content or without `data: [DONE]` is an error.
    Stream,
    /// Plain, then stream.
    Both,
}

impl Mode {
    /// The passes' `stream` flags, in the order they run.
    fn streams(self) -> &'static [bool] {
        match self {
            Mode::Plain => &[false],
            Mode::Stream => &[true],
            Mode::Both => &[false, true],
        }
    }
}

/// Where one pass sends its requests, and whether it asks for a stream.
struct Target {
    name: &'static str,
    url: String,
    key: Option<String>,
    body: Vec<u8>,
    stream: bool,
}

impl Target {
    fn new(name: &'static str, base: &str, key: Option<&str>, model: &str, stream: bool) -> Self {
        let mut body =
            json!({ "model": model, "messages": [{ "role": "user", "content": "hello" }] });
        if stream {
            body["stream"] = Value::Bool(true);
        }
        Self {
            name,
            url: format!("{}/chat/completions", base.trim_end_matches('/')),
            key: key.map(str::to_owned),
            body: body.to_string().into_bytes(),
            stream,
        }
    }

    fn request(&self, client: &reqwest::Client) -> reqwest::RequestBuilder {
        let request = client
            .post(&self.url)
            .header(CONTENT_TYPE, "application/json")
            .body(self.body.clone());
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// One request first, so a wrong key, model or URL fails with its reason
    /// instead of as a table full of errors.
    async fn check(&self, client: &reqwest::Client) -> anyhow::Result<()> {
        let response = self
            .request(client)
            .send()
            .await
            .with_context(|| format!("{}: cannot reach {}", self.name, self.url))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            bail!("{}: {} answered {status}: {body}", self.name, self.url);
        }
        read_answer(response, self.stream)
            .await
            .with_context(|| format!("{}: reading the answer of {}", self.name, self.url))?;
        Ok(())
    }
}

/// Reads an answer to its end. Resolves to when its measured part ended: the
/// whole answer, or for a stream the arrival of the first content.
async fn read_answer(response: reqwest::Response, stream: bool) -> anyhow::Result<Instant> {
    let status = response.status();
    ensure!(status.is_success(), "answered {status}");
    if stream {
        first_token(response).await
    } else {
        response.bytes().await?;
        Ok(Instant::now())
    }
}

/// Reads a server-sent chat completion stream to its end; resolves to when
/// the network chunk completing the first event with content arrived.
async fn first_token(mut response: reqwest::Response) -> anyhow::Result<Instant> {
    let mut sse = SseScan::default();
    let mut first = None;
    while let Some(chunk) = response.chunk().await? {
        let arrived = Instant::now();
        if sse.feed(&chunk)? {
            first = Some(arrived);
        }
    }
    sse.finish()?;
    first.context("the stream had no content")
}

/// Follows an OpenAI chat completion stream (server-sent events) one network
/// chunk at a time: lines and events may be split anywhere between chunks.
/// Events are dispatched at their terminating blank line, as an SSE client
/// does; lines end with LF, CRLF or CR.
#[derive(Default)]
struct SseScan {
    /// The current line so far (it may continue in the next chunk).
    line: Vec<u8>,
    /// The last chunk ended with CR: an LF starting the next one belongs to it.
    after_cr: bool,
    /// The current event's data lines, each followed by LF.
    data: Vec<u8>,
    /// An event with non-empty `choices[0].delta.content` was seen.
    content: bool,
    /// `data: [DONE]` was seen.
    done: bool,
}

impl SseScan {
    /// Reads one network chunk. True when it completed the first event with
    /// content; an error for a malformed chunk, an error event, or data after
    /// `[DONE]`.
    fn feed(&mut self, bytes: &[u8]) -> anyhow::Result<bool> {
        let had_content = self.content;
        let mut rest = bytes;
        if self.after_cr {
            self.after_cr = false;
            rest = rest.strip_prefix(b"\n").unwrap_or(rest);
        }
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&rest[..end]);
            let cr = rest[end] == b'\r';
            rest = &rest[end + 1..];
            if cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let line = std::mem::take(&mut self.line);
            self.line_ended(&line)?;
        }
        self.line.extend_from_slice(rest);
        Ok(!had_content && self.content)
    }

    fn line_ended(&mut self, line: &[u8]) -> anyhow::Result<()> {
        if line.is_empty() {
            return self.dispatch();
        }
        // `field: value` (one optional space); no colon: the whole line is the
        // field name; a leading colon: a comment.
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            self.data.extend_from_slice(value);
            self.data.push(b'\n');
        }
        Ok(())
    }

    fn dispatch(&mut self) -> anyhow::Result<()> {
        let Some((&b'\n', data)) = self.data.split_last() else {
            return Ok(()); // no data lines: nothing to dispatch
        };
        ensure!(!self.done, "data after [DONE]");
        if data == b"[DONE]" {
            self.done = true;
        } else {
            let chunk: Value = serde_json::from_slice(data).with_context(|| {
                format!(
                    "a data event is not JSON: {}",
                    String::from_utf8_lossy(data)
                )
            })?;
            ensure!(chunk.get("error").is_none(), "an error event: {chunk}");
            let content = &chunk["choices"][0]["delta"]["content"];
            self.content |= content.as_str().is_some_and(|text| !text.is_empty());
        }
        self.data.clear();
        Ok(())
    }

    /// The stream ended: it must have carried content, then `[DONE]` (a last
    /// event without its blank line is incomplete, and not dispatched).
    fn finish(self) -> anyhow::Result<()> {
        ensure!(self.content, "the stream ended without content");
        ensure!(self.done, "the stream ended without data: [DONE]");
        Ok(())
    }
}

/// A fresh client per pass (no connections carried over between targets),
/// keeping up to `rate` idle connections so keep-alive covers every request
/// in flight; the warm-up opens them.
fn client(rate: u32, timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(rate as usize)
        .pool_idle_timeout(Duration::from_secs(60))
        .connect_timeout(timeout)
        .timeout(timeout)
        .build()
}

async fn pass(target: &Arc<Target>, schedule: Schedule, timeout: Duration) -> anyhow::Result<Pass> {
    let client = client(schedule.rate, timeout)?;
    let (name, stream) = (target.name, target.stream);
    let target = Arc::clone(target);
    let pass = load::run_timed(schedule, Instant::now(), move || {
        let response = target.request(&client).send();
        async move {
            let response = response.await.ok()?;
            read_answer(response, stream).await.ok()
        }
    })
    .await;
    let stats = Stats::from_pass(&pass);
    let metric = if stream { "ttft " } else { "" };
    eprintln!(
        "{:>5}/s {:<8}  {} requests, {} errors, {metric}p50 {:.3} ms, {metric}p99 {:.3} ms; send lag p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        schedule.rate,
        name,
        stats.requests,
        stats.errors,
        stats.p50_ms,
        stats.p99_ms,
        stats.send_lag_p50_ms,
        stats.send_lag_p99_ms,
        stats.send_lag_max_ms,
    );
    Ok(pass)
}

/// Per mode run (plain first), the results per rate.
struct Results {
    plain: Option<Vec<RateResult>>,
    stream: Option<Vec<RateResult>>,
    /// With --cpu-pid: per pass through the API, its rate, streaming, CPU.
    cpu: Vec<(u32, bool, CpuUse)>,
    /// With --otlp-sink: what it received.
    exported: Option<SinkCounts>,
}

async fn measure(args: &Args) -> anyhow::Result<Results> {
    let sink = args.trace.otlp_sink.map(Sink::start).transpose()?;
    let timeout = Duration::from_secs(args.timeout);
    let probe = client(1, timeout)?;
    let mut targets = Vec::new();
    for &stream in args.mode.streams() {
        let api = Target::new("api", &args.api, Some(&args.key), &args.model, stream);
        let upstream = Target::new(
            "upstream",
            &args.upstream,
            None,
            &args.upstream_model,
            stream,
        );
        // Every check before any load, so a broken stream fails at once.
        api.check(&probe).await?;
        if !args.no_direct {
            upstream.check(&probe).await?;
        }
        targets.push((stream, Arc::new(api), Arc::new(upstream)));
    }
    let mut results = Results {
        plain: None,
        stream: None,
        cpu: Vec::new(),
        exported: None,
    };
    for (stream, api, upstream) in targets {
        let mut per_rate = Vec::new();
        for &rate in &args.rates {
            let schedule = Schedule {
                rate,
                warmup: Duration::from_secs(args.warmup),
                duration: Duration::from_secs(args.duration),
            };
            // The CPU of the whole pass (warm-up included), per request sent.
            let cpu = CpuMeter::start(&args.trace.cpu_pids)?;
            let through_api = pass(&api, schedule, timeout).await?;
            if let Some(ms) = cpu.stop()? {
                let used = CpuUse::new(ms, through_api.requests + u64::from(rate) * args.warmup);
                eprintln!(
                    "{rate:>5}/s api       CPU {:.3} ms per request",
                    used.cpu_ms_per_request
                );
                results.cpu.push((rate, stream, used));
            }
            let direct = if args.no_direct {
                Pass {
                    histogram: load::histogram(),
                    requests: 0,
                    errors: 0,
                    lag: load::histogram(),
                }
            } else {
                pass(&upstream, schedule, timeout).await?
            };
            per_rate.push(RateResult::new(
                rate,
                Stats::from_pass(&through_api),
                Stats::from_pass(&direct),
            ));
        }
        if stream {
            results.stream = Some(per_rate);
        } else {
            results.plain = Some(per_rate);
        }
    }
    if let Some(sink) = &sink {
        results.exported = Some(sink.finish(Duration::from_secs(10)).await?);
    }
    Ok(results)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let results = report::block_on(measure(&args))??;
    let mut report = json!({
        "benchmark": "chat-overhead",
        "api": args.api, "upstream": args.upstream,
        "model": args.model, "upstream_model": args.upstream_model,
        "duration_seconds": args.duration, "warmup_seconds": args.warmup,
    });
    if let Some(plain) = &results.plain {
        if args.mode != Mode::Plain {
            println!("non-streaming: latency to the whole answer");
        }
        print!("{}", report::table(plain));
        report["results"] = json!(plain);
    }
    if let Some(stream) = &results.stream {
        if results.plain.is_some() {
            println!();
        }
        println!("streaming: time to first token (first SSE chunk with content)");
        print!("{}", report::table(stream));
        report["mode"] = json!(args.mode);
        report["ttft_results"] = json!(stream);
    }
    if !results.cpu.is_empty() {
        println!();
        for (rate, stream, cpu) in &results.cpu {
            println!(
                "{rate:>5}/s{}: CPU {:.3} ms per request through the api ({} ms per --cpu-pid)",
                if *stream { " stream" } else { "" },
                cpu.cpu_ms_per_request,
                cpu.cpu_ms
                    .iter()
                    .map(|ms| format!("{ms:.0}"))
                    .collect::<Vec<_>>()
                    .join(" + ")
            );
        }
        report["cpu"] = json!(
            results
                .cpu
                .iter()
                .map(|(rate, stream, cpu)| json!({ "rate": rate, "stream": stream, "cpu": cpu }))
                .collect::<Vec<_>>()
        );
        report["cpu_pids"] = json!(args.trace.cpu_pids);
    }
    if let Some(e) = results.exported {
        println!(
            "tracing on: the OTLP sink received {} batches, {} bytes",
            e.requests, e.bytes
        );
        report["otlp_sink"] = json!(e);
    }
    report::write_json(args.json.as_deref(), &report)
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener as StdListener;

    use clap::Parser;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::fake_upstream;

    /// A stream as the fake upstream sends it: the role with empty content,
    /// then the content in two pieces, the finish reason, usage, `[DONE]`.
    const EVENTS: [&str; 6] = [
        r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        r#"data: {"choices":[{"index":0,"delta":{"content":"Hello "}}]}"#,
        r#"data: {"choices":[{"index":0,"delta":{"content":"there."}}]}"#,
        r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        r#"data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}"#,
        "data: [DONE]",
    ];

    fn body(newline: &str) -> String {
        EVENTS
            .iter()
            .map(|e| format!("{e}{newline}{newline}"))
            .collect()
    }

    /// Feeds `chunks`; the index of the chunk that completed the first
    /// content event, and how the stream ended.
    fn scan<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> (Option<usize>, anyhow::Result<()>) {
        let mut sse = SseScan::default();
        let mut first = None;
        for (i, chunk) in chunks.into_iter().enumerate() {
            match sse.feed(chunk) {
                Ok(true) => {
                    assert_eq!(first, None, "first content reported twice");
                    first = Some(i);
                }
                Ok(false) => {}
                Err(err) => return (first, Err(err)),
            }
        }
        (first, sse.finish())
    }

    /// Where the first content event's terminating blank line ends.
    fn first_content_end(body: &str, newline: &str) -> usize {
        let blank = format!("{newline}{newline}");
        body.match_indices(&blank).nth(1).unwrap().0 + blank.len()
    }

    #[test]
    fn first_content_is_found_wherever_the_chunks_split_the_stream() {
        for newline in ["\n", "\r\n", "\r"] {
            let body = body(newline);
            let bytes = body.as_bytes();
            // The first content event is complete once its blank line
            // ended: for CRLF at its CR already (the LF is then skipped).
            let end = first_content_end(&body, newline);
            let complete = end - (newline.len() - 1);
            // Two network chunks, split at every byte boundary.
            for split in 0..=bytes.len() {
                let (first, ended) = scan([&bytes[..split], &bytes[split..]]);
                ended.unwrap();
                let expected = if split >= complete { 0 } else { 1 };
                assert_eq!(
                    first,
                    Some(expected),
                    "newline {newline:?}, split at {split}"
                );
            }
            // One byte at a time: found at the byte ending the blank line.
            let (first, ended) = scan(bytes.chunks(1));
            ended.unwrap();
            assert_eq!(
                first,
                Some(complete - 1),
                "newline {newline:?}, byte by byte"
            );
        }
    }

    #[test]
    fn role_only_and_empty_content_are_not_the_first_token() {
        let (first, ended) = scan([format!("{}\n\n", EVENTS[0]).as_bytes()]);
        assert_eq!(first, None);
        assert!(ended.is_err());
        // Comments, other fields and `data:` without its space are SSE too.
        let stream = concat!(
            ": keep-alive\n\n",
            "event: message\nid: 1\n",
            r#"data:{"choices":[{"index":0,"delta":{"content":"x"}}]}"#,
            "\n\ndata: [DONE]\n\n",
        );
        let mut sse = SseScan::default();
        assert!(!sse.feed(&stream.as_bytes()[..30]).unwrap());
        assert!(sse.feed(&stream.as_bytes()[30..]).unwrap());
        sse.finish().unwrap();
    }

    #[test]
    fn data_lines_of_one_event_are_joined() {
        let stream =
            "data: {\"choices\":\ndata: [{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n";
        let (first, ended) = scan([stream.as_bytes()]);
        assert_eq!(first, Some(0));
        ended.unwrap();
    }

    #[test]
    fn streams_without_content_or_done_or_with_bad_events_are_errors() {
        let body = body("\n");
        let error = |chunks: &[&str]| {
            let (_, ended) = scan(chunks.iter().map(|c| c.as_bytes()));
            ended.unwrap_err().to_string()
        };
        // Cut before [DONE], or [DONE] without its blank line.
        let without_done = body.strip_suffix("data: [DONE]\n\n").unwrap();
        assert!(error(&[without_done]).contains("[DONE]"));
        assert!(error(&[body.strip_suffix('\n').unwrap()]).contains("[DONE]"));
        // [DONE] but no content.
        let no_content = format!("{}\n\n{}\n\n{}\n\n", EVENTS[0], EVENTS[3], EVENTS[5]);
        assert!(error(&[&no_content]).contains("without content"));
        // Not JSON, an error object, data after [DONE].
        assert!(error(&["data: {\"choices\n\n"]).contains("not JSON"));
        let failed = r#"data: {"error":{"message":"upstream failed"}}"#;
        let mid_stream = [&without_done[..40], &without_done[40..], failed, "\n\n"];
        assert!(error(&mid_stream).contains("error event"));
        assert!(error(&[&body, "data: {}\n\n"]).contains("after [DONE]"));
        // A JSON answer where a stream was asked for.
        assert!(error(&[r#"{"choices":[{"message":{"content":"hi"}}]}"#]).contains("content"));
    }

    #[test]
    fn only_stream_targets_ask_for_a_stream() {
        let plain = Target::new("api", "http://h/v1/", Some("k"), "m", false);
        let stream = Target::new("api", "http://h/v1/", Some("k"), "m", true);
        assert_eq!(plain.url, "http://h/v1/chat/completions");
        let body = |t: &Target| serde_json::from_slice::<Value>(&t.body).unwrap();
        assert_eq!(body(&plain).get("stream"), None);
        assert_eq!(body(&stream)["stream"], true);
        assert_eq!(body(&stream)["model"], "m");
        assert_eq!(Mode::Both.streams(), [false, true]);
    }

    fn free_port() -> u16 {
        StdListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// The real fake upstream, on its own thread and actix system.
    async fn start_fake_upstream() -> String {
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: fake_upstream::Args,
        }
        let port = free_port();
        let cli = Cli::parse_from(["fake-upstream", "--port", &port.to_string()]);
        std::thread::spawn(move || fake_upstream::run(cli.args));
        for _ in 0..500 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return format!("http://127.0.0.1:{port}/v1");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the fake upstream did not start on port {port}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_against_the_fake_upstream_measure_every_request() {
        let base = start_fake_upstream().await;
        let schedule = Schedule {
            rate: 200,
            warmup: Duration::from_millis(100),
            duration: Duration::from_millis(250),
        };
        let timeout = Duration::from_secs(5);
        for stream in [false, true] {
            let target = Arc::new(Target::new("upstream", &base, None, "bench", stream));
            target.check(&client(1, timeout).unwrap()).await.unwrap();
            let pass = pass(&target, schedule, timeout).await.unwrap();
            assert_eq!((pass.requests, pass.errors), (50, 0), "stream {stream}");
            assert_eq!(pass.histogram.len(), 50);
        }
    }

    /// Serves one streamed answer by hand on `listener`: a role event, then
    /// after `gap` the first content, its `data:` line split over two
    /// writes, then after `gap` again the rest (or a stream cut before
    /// `[DONE]`).
    async fn serve_slow_stream(listener: TcpListener, gap: Duration, complete: bool) {
        let (mut socket, _) = listener.accept().await.unwrap();
        socket.set_nodelay(true).unwrap();
        let mut request = Vec::new();
        let mut buf = [0; 4096];
        // The request: headers, then a body of Content-Length bytes.
        loop {
            let n = socket.read(&mut buf).await.unwrap();
            request.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&request);
            if let Some(end) = text.find("\r\n\r\n") {
                let length: usize = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if request.len() >= end + 4 + length {
                    break;
                }
            }
        }
        let mut write = async |bytes: &str| {
            socket.write_all(bytes.as_bytes()).await.unwrap();
            socket.flush().await.unwrap();
        };
        write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
            .await;
        write(&format!("{}\n\n", EVENTS[0])).await;
        tokio::time::sleep(gap).await;
        let (head, tail) = EVENTS[1].split_at(3);
        write(head).await;
        tokio::time::sleep(gap / 4).await;
        write(&format!("{tail}\n\n")).await;
        tokio::time::sleep(gap).await;
        let rest = body("\n");
        let rest = &rest[first_content_end(&rest, "\n")..];
        write(if complete {
            rest
        } else {
            rest.strip_suffix("data: [DONE]\n\n").unwrap()
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_token_is_timed_at_its_arrival_and_the_stream_read_to_the_end() {
        let gap = Duration::from_millis(80);
        for complete in [true, false] {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base = format!("http://{}/v1", listener.local_addr().unwrap());
            let server = tokio::spawn(serve_slow_stream(listener, gap, complete));
            let target = Target::new("upstream", &base, None, "bench", true);
            let sent = Instant::now();
            let response = target
                .request(&client(1, Duration::from_secs(5)).unwrap())
                .send();
            let answer = read_answer(response.await.unwrap(), true).await;
            let (ended, ()) = (sent.elapsed(), server.await.unwrap());
            if !complete {
                assert!(answer.unwrap_err().to_string().contains("[DONE]"));
                continue;
            }
            let ttft = answer.unwrap() - sent;
            // After the split line's second half, well before the end.
            assert!(ttft >= gap + gap / 4, "ttft {ttft:?}");
            assert!(ttft + gap / 2 < ended, "ttft {ttft:?}, ended {ended:?}");
            assert!(ended >= 2 * gap + gap / 4, "ended {ended:?}");
        }
    }
}
