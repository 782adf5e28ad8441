//! Shared by the job benchmarks: the job each submits (`--tool`,
//! `--model`), submitting it, long-polling it to a terminal state, and
//! summarising server-side job timestamps.

use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine;
use chrono::{DateTime, Utc};
use hdrhistogram::Histogram;
use reqwest::header::CONTENT_TYPE;
use serde::Serialize;
use serde_json::{Value, json};

/// A job tool, as `--tool` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Tool {
    Image,
    ImageEdit,
    Video,
    Music,
    Tts,
    Stt,
}

/// Which job a benchmark submits: `--tool` and `--model`.
#[derive(Debug, Clone, clap::Args)]
pub struct JobArgs {
    /// The tool whose jobs are submitted (each gets a small valid request).
    #[arg(long, value_enum, default_value_t = Tool::Image)]
    pub tool: Tool,
    /// The model to ask for, e.g. bench/noop (bench/unigen-bench.toml: no
    /// rendering). Default: the server's default model for the tool.
    #[arg(long)]
    pub model: Option<String>,
}

impl JobArgs {
    /// The endpoint under the API base, e.g. `/images/generations`.
    pub fn path(&self) -> &'static str {
        match self.tool {
            Tool::Image => "/images/generations",
            Tool::ImageEdit => "/images/edits",
            Tool::Video => "/videos/generations",
            Tool::Music => "/music/generations",
            Tool::Tts => "/audio/speech",
            Tool::Stt => "/audio/transcriptions",
        }
    }

    /// The JSON request every job of the run sends: a small valid one,
    /// the same each time (one output shape).
    pub fn body(&self) -> Vec<u8> {
        let mut body = match self.tool {
            Tool::Image => json!({ "prompt": "bench", "size": "512x512" }),
            Tool::ImageEdit => {
                json!({ "image": base64(&gradient_png()), "operation": "colorization" })
            }
            Tool::Video => {
                json!({ "prompt": "bench", "duration_seconds": 1, "resolution": "720p" })
            }
            Tool::Music => json!({ "prompt": "bench", "duration_seconds": 1 }),
            Tool::Tts => json!({ "input": "bench" }),
            Tool::Stt => json!({ "file": base64(&tone_wav()) }),
        };
        if let Some(model) = &self.model {
            body["model"] = json!(model);
        }
        body.to_string().into_bytes()
    }

    /// Names the job in the JSON reports: `tool` as `--tool` spells it,
    /// `model` (null: the server's default).
    pub fn describe(&self) -> Value {
        let tool = clap::ValueEnum::to_possible_value(&self.tool).expect("no tool is skipped");
        json!({ "tool": tool.get_name(), "model": self.model })
    }

    /// Today's job: an image with the server's default model.
    pub fn is_default(&self) -> bool {
        self.tool == Tool::Image && self.model.is_none()
    }
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A 64x64 RGB gradient PNG: the image edits' input.
pub fn gradient_png() -> Vec<u8> {
    let image = image::RgbImage::from_fn(64, 64, |x, y| {
        image::Rgb([(x * 4) as u8, (y * 4) as u8, 128])
    });
    let mut png = Vec::new();
    image
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .expect("encoding a PNG in memory");
    png
}

/// One second of a 440 Hz tone, 16 kHz 16-bit mono WAV: the transcriptions' input.
pub fn tone_wav() -> Vec<u8> {
    const RATE: u32 = 16_000;
    let samples: Vec<i16> = (0..RATE)
        .map(|i| {
            let t = f64::from(i) / f64::from(RATE);
            ((t * 440.0 * std::f64::consts::TAU).sin() * 8000.0) as i16
        })
        .collect();
    let data_len = (samples.len() * 2) as u32;
    let mut wav = Vec::with_capacity(44 + data_len as usize);
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + data_len).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    // PCM, mono, RATE Hz, RATE * 2 bytes/s, 2-byte frames, 16 bits.
    for field in [16u32, 1 | (1 << 16), RATE, RATE * 2, 2 | (16 << 16)] {
        wav.extend_from_slice(&field.to_le_bytes());
    }
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&data_len.to_le_bytes());
    for sample in samples {
        wav.extend_from_slice(&sample.to_le_bytes());
    }
    wav
}

/// A client keeping up to `connections` idle connections per host.
pub fn client(connections: usize, timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(connections)
        .pool_idle_timeout(Duration::from_secs(90))
        .connect_timeout(Duration::from_secs(10))
        .timeout(timeout)
        .build()
}

/// The API endpoints the job benchmarks call.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub key: String,
    /// The tool's endpoint, e.g. `/images/generations` ([`JobArgs::path`]).
    pub path: &'static str,
}

impl Api {
    pub fn new(base: &str, key: &str, job: &JobArgs) -> Self {
        Self {
            base: base.trim_end_matches('/').to_owned(),
            key: key.to_owned(),
            path: job.path(),
        }
    }

    /// `POST {api}{path}`, async or sync. `async` is always explicit: video
    /// and music jobs are async by default.
    pub fn generate(
        &self,
        client: &reqwest::Client,
        body: &[u8],
        async_: bool,
    ) -> reqwest::RequestBuilder {
        client
            .post(format!("{}{}?async={async_}", self.base, self.path))
            .bearer_auth(&self.key)
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_vec())
    }

    /// Submits an async job and returns its id.
    pub async fn submit(&self, client: &reqwest::Client, body: &[u8]) -> anyhow::Result<String> {
        let response = self.generate(client, body, true).send().await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            bail!("submit answered {status}: {text}");
        }
        let job: Value = serde_json::from_str(&text).context("submit answer is not JSON")?;
        job["id"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("submit answer has no id: {text}"))
    }

    /// One `GET {api}/jobs/{id}?poll=true`: the job as the API returned it.
    pub async fn poll_once(&self, client: &reqwest::Client, id: &str) -> anyhow::Result<Value> {
        let response = client
            .get(format!("{}/jobs/{id}?poll=true", self.base))
            .bearer_auth(&self.key)
            .send()
            .await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            bail!("poll answered {status}: {text}");
        }
        serde_json::from_str(&text).context("poll answer is not JSON")
    }

    /// Long-polls until the job is terminal (each poll waits up to the API's
    /// long-poll limit), giving up after `give_up` polls.
    pub async fn wait(
        &self,
        client: &reqwest::Client,
        id: &str,
        give_up: u32,
    ) -> anyhow::Result<Value> {
        for _ in 0..give_up {
            let job = self.poll_once(client, id).await?;
            if is_terminal(&job) {
                return Ok(job);
            }
        }
        bail!("job {id} still not finished after {give_up} long polls")
    }
}

pub fn is_terminal(job: &Value) -> bool {
    matches!(
        job["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
}

pub fn timestamp(job: &Value, field: &str) -> Option<DateTime<Utc>> {
    let text = job[field].as_str()?;
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// A finished job's server-side times (`createdAt`, `completedAt`).
#[derive(Debug, Clone, Copy)]
pub struct JobTimes {
    pub created: DateTime<Utc>,
    pub completed: DateTime<Utc>,
}

impl JobTimes {
    pub fn from_job(job: &Value) -> Option<Self> {
        Some(Self {
            created: timestamp(job, "createdAt")?,
            completed: timestamp(job, "completedAt")?,
        })
    }
}

/// Microseconds from `from` to `to`, 0 when `to` is earlier.
pub fn micros_between(from: DateTime<Utc>, to: DateTime<Utc>) -> u64 {
    (to - from)
        .num_microseconds()
        .map_or(0, |us| u64::try_from(us).unwrap_or(0))
}

/// Throughput and lag over a set of completed jobs.
#[derive(Debug, Serialize, PartialEq)]
pub struct Throughput {
    pub completed: u64,
    /// From the first job's creation to the last job's completion.
    pub window_seconds: f64,
    pub jobs_per_second: f64,
    pub lag_p50_ms: f64,
    pub lag_p99_ms: f64,
    pub lag_max_ms: f64,
}

pub fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

/// Completions per second over [first createdAt, last completedAt], and the
/// created → completed lag percentiles. None without jobs.
pub fn throughput(jobs: &[JobTimes]) -> Option<Throughput> {
    let first = jobs.iter().map(|j| j.created).min()?;
    let last = jobs.iter().map(|j| j.completed).max()?;
    // Lags can exceed the load histogram's minute when a backlog builds up.
    let mut lag: Histogram<u64> =
        Histogram::new_with_bounds(1, 24 * 3_600_000_000, 3).expect("static bounds are valid");
    for job in jobs {
        lag.saturating_record(micros_between(job.created, job.completed).max(1));
    }
    let window = micros_between(first, last) as f64 / 1e6;
    let rate = if window > 0.0 {
        jobs.len() as f64 / window
    } else {
        0.0
    };
    Some(Throughput {
        completed: jobs.len() as u64,
        window_seconds: (window * 1000.0).round() / 1000.0,
        jobs_per_second: (rate * 10.0).round() / 10.0,
        lag_p50_ms: ms(lag.value_at_quantile(0.50)),
        lag_p99_ms: ms(lag.value_at_quantile(0.99)),
        lag_max_ms: ms(lag.max()),
    })
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    #[test]
    fn throughput_spans_first_creation_to_last_completion() {
        let t0 = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        // 100 jobs created every 10 ms, each done 5 ms (i even) or 15 ms later.
        let jobs: Vec<JobTimes> = (0..100)
            .map(|i| {
                let created = t0 + TimeDelta::milliseconds(10 * i);
                let lag = if i % 2 == 0 { 5 } else { 15 };
                JobTimes {
                    created,
                    completed: created + TimeDelta::milliseconds(lag),
                }
            })
            .collect();
        let t = throughput(&jobs).unwrap();
        assert_eq!(t.completed, 100);
        // Last created at 990 ms, completed 15 ms later.
        assert_eq!(t.window_seconds, 1.005);
        assert_eq!(t.jobs_per_second, 99.5);
        assert!((t.lag_p50_ms - 5.0).abs() < 0.01, "{}", t.lag_p50_ms);
        assert!((t.lag_p99_ms - 15.0).abs() < 0.02, "{}", t.lag_p99_ms);
        assert!(throughput(&[]).is_none());
    }

    #[test]
    fn every_tool_has_an_endpoint_and_a_valid_body() {
        let job = |tool, model: Option<&str>| JobArgs {
            tool,
            model: model.map(str::to_owned),
        };
        let body = |args: &JobArgs| serde_json::from_slice::<Value>(&args.body()).unwrap();
        // The default stays today's image job, with no model.
        let image = job(Tool::Image, None);
        assert_eq!(image.path(), "/images/generations");
        assert_eq!(
            body(&image),
            json!({ "prompt": "bench", "size": "512x512" })
        );
        assert!(image.is_default());
        assert_eq!(image.describe(), json!({"tool": "image", "model": null}));
        let stt = job(Tool::Stt, Some("bench/noop"));
        assert!(!stt.is_default());
        assert_eq!(stt.path(), "/audio/transcriptions");
        assert_eq!(body(&stt)["model"], "bench/noop");
        let wav = base64::engine::general_purpose::STANDARD
            .decode(body(&stt)["file"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            (&wav[..4], &wav[8..16], wav.len()),
            (&b"RIFF"[..], &b"WAVEfmt "[..], 44 + 32_000)
        );
        let edit = job(Tool::ImageEdit, None);
        assert_eq!(edit.describe()["tool"], "image-edit");
        let png = base64::engine::general_purpose::STANDARD
            .decode(body(&edit)["image"].as_str().unwrap())
            .unwrap();
        let decoded = image::load_from_memory(&png).unwrap();
        assert_eq!((decoded.width(), decoded.height()), (64, 64));
    }

    #[test]
    fn job_json_fields_are_parsed() {
        let job = json!({
            "id": "j", "status": "completed",
            "createdAt": "2026-01-01T00:00:00.100Z",
            "completedAt": "2026-01-01T00:00:00.350123Z",
        });
        assert!(is_terminal(&job));
        let t = JobTimes::from_job(&job).unwrap();
        assert_eq!(micros_between(t.created, t.completed), 250_123);
        assert_eq!(micros_between(t.completed, t.created), 0);
        assert!(!is_terminal(&json!({"status": "processing"})));
        assert!(JobTimes::from_job(&json!({"createdAt": "x"})).is_none());
    }
}
