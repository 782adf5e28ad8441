//! The `fixture` adapter, for benchmarks of the job pipeline only
//! (`bench/noop` in `bench/unigen-bench.toml`): it answers with an output
//! already stored, so a benchmark measures the pipeline, not rendering.
//!
//! In each worker process, the first job of a shape (organization, model,
//! tool and the parameters that shape the output: size, count, duration,
//! format...) runs the tool's built-in `local` handler, so its output is a
//! real file of the requested shape. Every later job of that shape answers
//! with the same `outputData` (the same stored file keys: no rendering, no
//! upload) after `local_provider.latency_ms`, and the credits the handler
//! reported. Speech to text has no local handler (Whisper is an upstream):
//! it answers a constant transcript in the handler's shape.
//!
//! The reused files belong to the first job: retention deleting it (or any
//! job that reused them, whose `outputData` names them) deletes them for
//! all. Never use this adapter for real traffic.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::OnceCell;
use unigen_core::config::Settings;
use unigen_core::domain::Tool;
use unigen_core::params::edit::EditParams;
use unigen_core::params::image::ImageParams;
use unigen_core::params::music::MusicParams;
use unigen_core::params::speech::SpeechParams;
use unigen_core::params::transcription::{Segment, Transcript, TranscriptionParams, Word};
use unigen_core::params::video::VideoParams;
use unigen_db::models::Job;
use uuid::Uuid;

use super::{params_of, required_input};
use crate::WorkerContext;
use crate::error::ToolError;
use crate::output::ToolOutput;

/// The adapter's name in the catalogue.
pub const ADAPTER: &str = "fixture";

/// What the constant transcript says.
pub const TRANSCRIPT: &str = "This is the fixture transcript.";

/// Jobs that may share an output: files are the organization's, prices the
/// model's, and `params` holds what shapes the tool's output.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Shape {
    org: Uuid,
    model: String,
    tool: Tool,
    params: String,
}

/// A first job's result, handed to the later jobs of its shape.
#[derive(Debug, Clone)]
struct Stored {
    output: Value,
    credits: i64,
}

/// The worker's fixture state: one output per shape seen (a benchmark
/// uses a handful of shapes, so the map stays small).
pub struct Fixtures {
    latency: Duration,
    max_audio_seconds: f64,
    /// A cell per shape: jobs arriving while the first renders wait for it
    /// instead of rendering too.
    outputs: Mutex<HashMap<Shape, Arc<OnceCell<Stored>>>>,
}

impl Fixtures {
    pub fn new(settings: &Settings) -> Self {
        Self {
            latency: Duration::from_millis(settings.local_provider.latency_ms),
            max_audio_seconds: settings.jobs.max_audio_seconds,
            outputs: Mutex::default(),
        }
    }

    async fn wait(&self) {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
    }
}

/// Whether the job's model is on the fixture adapter.
pub fn serves(context: &WorkerContext, job: &Job) -> bool {
    context
        .catalogue
        .get(&job.model)
        .is_some_and(|model| model.adapter == ADAPTER)
}

/// Runs a fixture job: `local` is the tool's own handler, awaited only for
/// the first job of a shape (a future does nothing until awaited).
pub async fn run(
    context: &WorkerContext,
    tool: Tool,
    job: &Job,
    local: impl Future<Output = Result<ToolOutput, ToolError>>,
) -> Result<ToolOutput, ToolError> {
    if tool == Tool::Stt {
        return transcript(context, job).await;
    }
    let shape = Shape {
        org: job.org_id,
        model: job.model.clone(),
        tool,
        params: shape_of(context, tool, job).await?.to_string(),
    };
    let cell = context
        .fixtures
        .outputs
        .lock()
        .expect("fixture outputs lock")
        .entry(shape)
        .or_default()
        .clone();
    let mut rendered = false;
    // A failed first job stores nothing: the next job of the shape renders.
    let stored = cell
        .get_or_try_init(|| {
            rendered = true;
            async move {
                let output = local.await?;
                Ok::<_, ToolError>(Stored {
                    output: output.output,
                    credits: output.actual_credits,
                })
            }
        })
        .await?
        .clone();
    if !rendered {
        // The handler waited this long in the first job; reuse does too.
        context.fixtures.wait().await;
    }
    Ok(ToolOutput {
        output: stored.output,
        actual_credits: stored.credits,
    })
}

/// The parameters that decide the shape of the tool's output (prompt and
/// seed change only the content).
async fn shape_of(context: &WorkerContext, tool: Tool, job: &Job) -> Result<Value, ToolError> {
    Ok(match tool {
        Tool::Image => {
            let p: ImageParams = params_of(job)?;
            json!([p.n, p.width, p.height, p.logo.is_some()])
        }
        Tool::ImageEdit => {
            // The output's size follows the input's unless `size` is set.
            let p: EditParams = params_of(job)?;
            let image = required_input(context, &p.inputs, "image").await?;
            let (width, height) = image::ImageReader::new(std::io::Cursor::new(image))
                .with_guessed_format()
                .ok()
                .and_then(|reader| reader.into_dimensions().ok())
                .ok_or_else(|| ToolError::InvalidParams("the image could not be read".into()))?;
            json!([
                p.operation,
                p.size,
                p.scale,
                p.expand_pixels,
                p.direction,
                width,
                height
            ])
        }
        Tool::Video => {
            let p: VideoParams = params_of(job)?;
            json!([
                p.resolution,
                p.aspect_ratio,
                p.duration_seconds,
                p.fps,
                p.mode
            ])
        }
        Tool::Music => {
            let p: MusicParams = params_of(job)?;
            json!([p.duration_seconds, p.output_format, p.mode])
        }
        // Speech lasts as long as its text at its voice and speed, and is
        // priced per 1,000 characters.
        Tool::Tts => {
            let p: SpeechParams = params_of(job)?;
            json!([p.response_format, p.character_count(), p.voice, p.speed])
        }
        // Responses never reach a fixture (the registry runs them).
        Tool::Stt | Tool::Responses => Value::Null,
    })
}

/// A constant transcript as long as the audio, in the shape the stt handler
/// stores (word timings and speakers when asked for), priced as it prices:
/// per started minute.
async fn transcript(context: &WorkerContext, job: &Job) -> Result<ToolOutput, ToolError> {
    let params: TranscriptionParams = params_of(job)?;
    let model = context.catalogue.get(&job.model).ok_or_else(|| {
        ToolError::InvalidParams(format!("model {} is no longer configured", job.model))
    })?;
    let audio = required_input(context, &params.inputs, "file").await?;
    // A WAV is measured from its header; other audio is demuxed, not decoded.
    let duration =
        unigen_core::audio::measure_duration(&audio, context.fixtures.max_audio_seconds).await?;
    context.fixtures.wait().await;
    let transcript = constant_transcript(&params, duration);
    let minutes = (duration / 60.0).ceil().max(1.0) as i64;
    Ok(ToolOutput {
        output: serde_json::to_value(&transcript)
            .map_err(|e| ToolError::InvalidParams(e.to_string()))?,
        actual_credits: model.credits_per_unit * minutes,
    })
}

/// [`TRANSCRIPT`] as one segment over the whole audio, its words evenly spaced.
fn constant_transcript(params: &TranscriptionParams, duration: f64) -> Transcript {
    let words: Vec<&str> = TRANSCRIPT.split_whitespace().collect();
    let step = duration / words.len() as f64;
    let timed: Vec<Word> = words
        .iter()
        .enumerate()
        .map(|(i, word)| Word {
            word: (*word).to_owned(),
            start: i as f64 * step,
            end: (i + 1) as f64 * step,
        })
        .collect();
    let words = params.wants_words().then_some(timed);
    let language = match params.language.as_str() {
        "auto" => "en".to_owned(),
        code => code.to_owned(),
    };
    Transcript {
        text: TRANSCRIPT.to_owned(),
        segments: vec![Segment {
            start: 0.0,
            end: duration,
            text: TRANSCRIPT.to_owned(),
            speaker: params.diarization.then(|| "SPEAKER_00".to_owned()),
            words: words.clone(),
            decoding: None,
        }],
        language,
        duration,
        words,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(granularities: &[&str], diarization: bool) -> TranscriptionParams {
        TranscriptionParams {
            language: "auto".into(),
            response_format: "json".into(),
            timestamp_granularities: granularities.iter().map(|g| (*g).to_owned()).collect(),
            diarization,
            translation: false,
            prompt: None,
            temperature: None,
            model_inputs: None,
            inputs: Default::default(),
        }
    }

    #[test]
    fn the_constant_transcript_spans_the_audio_with_words_and_speakers_when_asked() {
        let plain = constant_transcript(&params(&["segment"], false), 2.5);
        assert_eq!(plain.text, TRANSCRIPT);
        assert_eq!((plain.language.as_str(), plain.duration), ("en", 2.5));
        assert_eq!(plain.segments.len(), 1);
        assert_eq!((plain.segments[0].start, plain.segments[0].end), (0.0, 2.5));
        assert!(plain.words.is_none() && plain.segments[0].speaker.is_none());

        let detailed = constant_transcript(&params(&["segment", "word"], true), 2.5);
        let words = detailed.words.as_ref().unwrap();
        assert_eq!(words.len(), TRANSCRIPT.split_whitespace().count());
        assert_eq!((words[0].start, words.last().unwrap().end), (0.0, 2.5));
        assert_eq!(detailed.segments[0].words.as_ref(), Some(words));
        assert_eq!(detailed.segments[0].speaker.as_deref(), Some("SPEAKER_00"));
    }
}
