//! `POST /audio/transcriptions`: request, parameters, and the response
//! formats (json, text, srt, vtt) rendered from a stored transcript.

use serde::{Deserialize, Serialize};

use super::validate::one_of;
use super::{MediaRef, StoredInputs, ValidationError};
use crate::fetch::MediaKind;

pub const FORMATS: [&str; 4] = ["json", "text", "srt", "vtt"];
pub const GRANULARITIES: [&str; 2] = ["segment", "word"];

/// Body of `POST /audio/transcriptions`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct TranscriptionRequest {
    /// Audio as an http(s) URL or base64 data (MP3, WAV, M4A, FLAC, OGG, WebM).
    pub file: Option<String>,
    pub model: Option<String>,
    /// `auto` (default) or an ISO 639-1 code.
    pub language: Option<String>,
    /// `json` (default), `text`, `srt`, `vtt`.
    pub response_format: Option<String>,
    /// Items `segment` (default) and/or `word`.
    pub timestamp_granularities: Option<Vec<String>>,
    /// Speaker labels `SPEAKER_00`, `SPEAKER_01`...
    pub diarization: Option<bool>,
    /// Output in English; `language` still reports the detected language.
    pub translation: Option<bool>,
    #[schema(value_type = Option<Object>)]
    pub model_inputs: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptionParams {
    pub language: String,
    pub response_format: String,
    pub timestamp_granularities: Vec<String>,
    pub diarization: bool,
    pub translation: bool,
    pub model_inputs: Option<serde_json::Value>,
    #[serde(default)]
    pub inputs: StoredInputs,
}

impl TranscriptionParams {
    pub fn wants_words(&self) -> bool {
        self.timestamp_granularities.iter().any(|g| g == "word")
    }
}

impl TranscriptionRequest {
    pub fn validate(&self) -> Result<(TranscriptionParams, Vec<MediaRef>), ValidationError> {
        let file = self
            .file
            .as_deref()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| ValidationError::new("file", "file is required"))?;
        let language = self.language.clone().unwrap_or_else(|| "auto".to_owned());
        let valid_code = language.len() == 2 && language.bytes().all(|b| b.is_ascii_lowercase());
        if language != "auto" && !valid_code {
            return Err(ValidationError::new(
                "language",
                "language must be `auto` or a two-letter ISO 639-1 code",
            ));
        }
        let granularities = self
            .timestamp_granularities
            .clone()
            .unwrap_or_else(|| vec!["segment".to_owned()]);
        for g in &granularities {
            one_of(
                "timestamp_granularities",
                Some(g),
                &GRANULARITIES,
                "segment",
            )?;
        }
        let params = TranscriptionParams {
            language,
            response_format: one_of(
                "response_format",
                self.response_format.as_deref(),
                &FORMATS,
                "json",
            )?,
            timestamp_granularities: granularities,
            diarization: self.diarization.unwrap_or(false),
            translation: self.translation.unwrap_or(false),
            model_inputs: self.model_inputs.clone(),
            inputs: StoredInputs::new(),
        };
        Ok((
            params,
            vec![MediaRef {
                field: "file",
                source: file.to_owned(),
                kind: MediaKind::Audio,
            }],
        ))
    }
}

/// A word with its timing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Word {
    pub word: String,
    pub start: f64,
    pub end: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Segment {
    pub start: f64,
    pub end: f64,
    pub text: String,
    pub speaker: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words: Option<Vec<Word>>,
}

/// The job's `outputData` for `stt`: `text`, `segments`, `duration` (+ language, words).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    pub text: String,
    pub segments: Vec<Segment>,
    pub language: String,
    pub duration: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words: Option<Vec<Word>>,
}

/// `HH:MM:SS<sep>mmm`.
fn timestamp(seconds: f64, separator: char) -> String {
    let millis = (seconds.max(0.0) * 1000.0).round() as u64;
    let (h, m, s, ms) = (
        millis / 3_600_000,
        millis / 60_000 % 60,
        millis / 1000 % 60,
        millis % 1000,
    );
    format!("{h:02}:{m:02}:{s:02}{separator}{ms:03}")
}

fn cue_text(segment: &Segment) -> String {
    match &segment.speaker {
        Some(speaker) => format!("[{speaker}] {}", segment.text.trim()),
        None => segment.text.trim().to_owned(),
    }
}

impl Transcript {
    /// SubRip: numbered cues, `HH:MM:SS,mmm --> HH:MM:SS,mmm`.
    pub fn to_srt(&self) -> String {
        self.segments
            .iter()
            .enumerate()
            .map(|(i, s)| {
                format!(
                    "{}\n{} --> {}\n{}\n",
                    i + 1,
                    timestamp(s.start, ','),
                    timestamp(s.end, ','),
                    cue_text(s)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// WebVTT: `WEBVTT` header, cues `HH:MM:SS.mmm --> HH:MM:SS.mmm`.
    pub fn to_vtt(&self) -> String {
        let mut out = String::from("WEBVTT\n");
        for s in &self.segments {
            out.push_str(&format!(
                "\n{} --> {}\n{}\n",
                timestamp(s.start, '.'),
                timestamp(s.end, '.'),
                cue_text(s)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript() -> Transcript {
        Transcript {
            text: "Hello there. General.".into(),
            segments: vec![
                Segment {
                    start: 0.0,
                    end: 1.5,
                    text: " Hello there.".into(),
                    speaker: None,
                    words: None,
                },
                Segment {
                    start: 3661.25,
                    end: 3662.0,
                    text: "General.".into(),
                    speaker: Some("SPEAKER_01".into()),
                    words: None,
                },
            ],
            language: "en".into(),
            duration: 3662.0,
            words: None,
        }
    }

    #[test]
    fn srt_and_vtt_use_the_spec_cue_formats() {
        assert_eq!(
            transcript().to_srt(),
            "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n2\n01:01:01,250 --> 01:01:02,000\n[SPEAKER_01] General.\n"
        );
        assert_eq!(
            transcript().to_vtt(),
            "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n01:01:01.250 --> 01:01:02.000\n[SPEAKER_01] General.\n"
        );
    }

    #[test]
    fn validation() {
        assert_eq!(
            TranscriptionRequest::default()
                .validate()
                .unwrap_err()
                .message,
            "file is required"
        );
        let req = |f: &str| TranscriptionRequest {
            file: Some("https://e.com/a.mp3".into()),
            response_format: Some(f.into()),
            ..Default::default()
        };
        assert_eq!(req("docx").validate().unwrap_err().field, "response_format");
        let mut r = req("srt");
        r.language = Some("english".into());
        assert_eq!(r.validate().unwrap_err().field, "language");
        r.language = Some("de".into());
        r.timestamp_granularities = Some(vec!["word".into(), "segment".into()]);
        assert!(r.validate().unwrap().0.wants_words());
        r.timestamp_granularities = Some(vec!["char".into()]);
        assert_eq!(r.validate().unwrap_err().field, "timestamp_granularities");
    }
}
