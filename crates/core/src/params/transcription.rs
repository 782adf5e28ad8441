//! `POST /audio/transcriptions` and `/audio/translations`: request,
//! parameters, and the response formats (json, verbose_json, text, srt, vtt)
//! rendered from a stored transcript.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::validate::{number_in, one_of, optional_text};
use super::{MediaRef, StoredInputs, ValidationError};
use crate::fetch::MediaKind;

pub const FORMATS: [&str; 5] = ["json", "verbose_json", "text", "srt", "vtt"];
pub const MAX_PROMPT_CHARS: usize = 4000;
pub const GRANULARITIES: [&str; 2] = ["segment", "word"];

/// Body of `POST /audio/transcriptions`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct TranscriptionRequest {
    /// Audio as an http(s) URL or base64 data (MP3, WAV, M4A, FLAC, OGG, WebM).
    pub file: Option<String>,
    pub model: Option<String>,
    /// `auto` (default) or an ISO 639-1 code.
    pub language: Option<String>,
    /// `json` (default), `verbose_json` (OpenAI's shape), `text`, `srt`, `vtt`.
    pub response_format: Option<String>,
    /// Text to guide the style or continue an earlier segment (at most 4000 characters).
    pub prompt: Option<String>,
    /// Sampling temperature, 0 to 1 (the upstream's default when omitted).
    #[schema(minimum = 0, maximum = 1)]
    pub temperature: Option<f64>,
    /// Items `segment` (default) and/or `word`.
    pub timestamp_granularities: Option<Vec<String>>,
    /// Speaker labels `SPEAKER_00`, `SPEAKER_01`...
    pub diarization: Option<bool>,
    /// Output in English; `language` still reports the detected language.
    pub translation: Option<bool>,
    #[schema(value_type = Option<Object>)]
    pub model_inputs: Option<serde_json::Value>,
}

/// Body of `POST /audio/translations`: speech in any language to English text.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct TranslationRequest {
    /// Audio as an http(s) URL or base64 data (MP3, WAV, M4A, FLAC, OGG, WebM).
    pub file: Option<String>,
    pub model: Option<String>,
    /// Text to guide the style, in English (at most 4000 characters).
    pub prompt: Option<String>,
    /// `json` (default), `verbose_json`, `text`, `srt`, `vtt`.
    pub response_format: Option<String>,
    /// Sampling temperature, 0 to 1.
    #[schema(minimum = 0, maximum = 1)]
    pub temperature: Option<f64>,
    #[schema(value_type = Option<Object>)]
    pub model_inputs: Option<serde_json::Value>,
}

impl TranslationRequest {
    /// The transcription that translates: the language is detected.
    pub fn into_transcription(self) -> TranscriptionRequest {
        TranscriptionRequest {
            file: self.file,
            model: self.model,
            response_format: self.response_format,
            prompt: self.prompt,
            temperature: self.temperature,
            translation: Some(true),
            model_inputs: self.model_inputs,
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptionParams {
    pub language: String,
    pub response_format: String,
    pub timestamp_granularities: Vec<String>,
    pub diarization: bool,
    pub translation: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
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
        super::validate::model_inputs(self.model_inputs.as_ref())?;
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
            prompt: optional_text("prompt", self.prompt.as_deref(), MAX_PROMPT_CHARS)?,
            temperature: match self.temperature {
                None => None,
                Some(t) => Some(number_in("temperature", Some(t), 0.0, 1.0, 0.0)?),
            },
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
    /// What the recognizer reported about the segment, kept for
    /// `verbose_json`; the `json` answer leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoding: Option<SegmentDecoding>,
}

/// Whisper's per-segment decoding facts, as OpenAI's `verbose_json` has them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SegmentDecoding {
    pub seek: i64,
    pub tokens: Vec<i64>,
    pub temperature: f64,
    pub avg_logprob: f64,
    pub compression_ratio: f64,
    pub no_speech_prob: f64,
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
    /// OpenAI's `verbose_json`: `task` (`transcribe` or `translate`),
    /// `language` as a name (`english`), `duration`, `text`, `segments` with
    /// their decoding facts (zeros when the upstream gave none) and, when
    /// word timestamps were asked for, `words`.
    pub fn to_verbose_json(&self, translated: bool) -> Value {
        let segments: Vec<Value> = self
            .segments
            .iter()
            .enumerate()
            .map(|(id, s)| {
                let d = s.decoding.clone().unwrap_or(SegmentDecoding {
                    seek: 0,
                    tokens: Vec::new(),
                    temperature: 0.0,
                    avg_logprob: 0.0,
                    compression_ratio: 0.0,
                    no_speech_prob: 0.0,
                });
                json!({
                    "id": id, "seek": d.seek, "start": s.start, "end": s.end, "text": s.text,
                    "tokens": d.tokens, "temperature": d.temperature, "avg_logprob": d.avg_logprob,
                    "compression_ratio": d.compression_ratio, "no_speech_prob": d.no_speech_prob,
                })
            })
            .collect();
        let mut body = json!({
            "task": if translated { "translate" } else { "transcribe" },
            // A translation's language is its output's (OpenAI's rule).
            "language": if translated { "english".to_owned() } else { language_name(&self.language) },
            "duration": self.duration,
            "text": self.text,
            "segments": segments,
        });
        if let Some(words) = &self.words {
            body["words"] = json!(words);
        }
        body
    }

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

/// The job output of a transcript without the segments' decoding facts:
/// the `json` answer's shape.
pub fn without_decoding(mut output: Value) -> Value {
    if let Some(segments) = output["segments"].as_array_mut() {
        for segment in segments {
            if let Some(segment) = segment.as_object_mut() {
                segment.remove("decoding");
            }
        }
    }
    output
}

/// ISO 639-1 codes and the names Whisper (and OpenAI's `verbose_json`) use.
const LANGUAGES: [(&str, &str); 98] = [
    ("en", "english"),
    ("zh", "chinese"),
    ("de", "german"),
    ("es", "spanish"),
    ("ru", "russian"),
    ("ko", "korean"),
    ("fr", "french"),
    ("ja", "japanese"),
    ("pt", "portuguese"),
    ("tr", "turkish"),
    ("pl", "polish"),
    ("ca", "catalan"),
    ("nl", "dutch"),
    ("ar", "arabic"),
    ("sv", "swedish"),
    ("it", "italian"),
    ("id", "indonesian"),
    ("hi", "hindi"),
    ("fi", "finnish"),
    ("vi", "vietnamese"),
    ("he", "hebrew"),
    ("uk", "ukrainian"),
    ("el", "greek"),
    ("ms", "malay"),
    ("cs", "czech"),
    ("ro", "romanian"),
    ("da", "danish"),
    ("hu", "hungarian"),
    ("ta", "tamil"),
    ("no", "norwegian"),
    ("th", "thai"),
    ("ur", "urdu"),
    ("hr", "croatian"),
    ("bg", "bulgarian"),
    ("lt", "lithuanian"),
    ("la", "latin"),
    ("mi", "maori"),
    ("ml", "malayalam"),
    ("cy", "welsh"),
    ("sk", "slovak"),
    ("te", "telugu"),
    ("fa", "persian"),
    ("lv", "latvian"),
    ("bn", "bengali"),
    ("sr", "serbian"),
    ("az", "azerbaijani"),
    ("sl", "slovenian"),
    ("kn", "kannada"),
    ("et", "estonian"),
    ("mk", "macedonian"),
    ("br", "breton"),
    ("eu", "basque"),
    ("is", "icelandic"),
    ("hy", "armenian"),
    ("ne", "nepali"),
    ("mn", "mongolian"),
    ("bs", "bosnian"),
    ("kk", "kazakh"),
    ("sq", "albanian"),
    ("sw", "swahili"),
    ("gl", "galician"),
    ("mr", "marathi"),
    ("pa", "punjabi"),
    ("si", "sinhala"),
    ("km", "khmer"),
    ("sn", "shona"),
    ("yo", "yoruba"),
    ("so", "somali"),
    ("af", "afrikaans"),
    ("oc", "occitan"),
    ("ka", "georgian"),
    ("be", "belarusian"),
    ("tg", "tajik"),
    ("sd", "sindhi"),
    ("gu", "gujarati"),
    ("am", "amharic"),
    ("yi", "yiddish"),
    ("lo", "lao"),
    ("uz", "uzbek"),
    ("fo", "faroese"),
    ("ht", "haitian creole"),
    ("ps", "pashto"),
    ("tk", "turkmen"),
    ("nn", "nynorsk"),
    ("mt", "maltese"),
    ("sa", "sanskrit"),
    ("lb", "luxembourgish"),
    ("my", "myanmar"),
    ("bo", "tibetan"),
    ("tl", "tagalog"),
    ("mg", "malagasy"),
    ("as", "assamese"),
    ("tt", "tatar"),
    ("ln", "lingala"),
    ("ha", "hausa"),
    ("ba", "bashkir"),
    ("jw", "javanese"),
    ("su", "sundanese"),
];

/// `en` -> `english`; a name or an unknown code is returned as it is.
pub fn language_name(code: &str) -> String {
    let lower = code.to_ascii_lowercase();
    LANGUAGES
        .iter()
        .find(|(c, _)| *c == lower)
        .map_or(lower, |(_, name)| (*name).to_owned())
}

/// `english` -> `en` (upstreams report names); a code or an unknown name is
/// returned lowercased.
pub fn language_code(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    LANGUAGES
        .iter()
        .find(|(_, n)| *n == lower)
        .map_or(lower, |(code, _)| (*code).to_owned())
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
                    decoding: None,
                },
                Segment {
                    start: 3661.25,
                    end: 3662.0,
                    text: "General.".into(),
                    speaker: Some("SPEAKER_01".into()),
                    words: None,
                    decoding: Some(SegmentDecoding {
                        seek: 0,
                        tokens: vec![50364, 6996],
                        temperature: 0.0,
                        avg_logprob: -0.25,
                        compression_ratio: 0.8,
                        no_speech_prob: 0.01,
                    }),
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
        r.timestamp_granularities = None;
        r.response_format = Some("verbose_json".into());
        r.temperature = Some(1.5);
        assert_eq!(r.validate().unwrap_err().field, "temperature");
        r.temperature = Some(0.2);
        r.prompt = Some("x".repeat(4001));
        assert_eq!(r.validate().unwrap_err().field, "prompt");
        r.prompt = Some("Glossary: unigen".into());
        let (params, _) = r.validate().unwrap();
        assert_eq!(
            (params.prompt.as_deref(), params.temperature),
            (Some("Glossary: unigen"), Some(0.2))
        );
    }

    #[test]
    fn verbose_json_has_openai_shape() {
        let body = transcript().to_verbose_json(false);
        assert_eq!(body["task"], "transcribe");
        assert_eq!(body["language"], "english");
        assert_eq!(body["duration"], 3662.0);
        let first = &body["segments"][0];
        for key in [
            "id",
            "seek",
            "start",
            "end",
            "text",
            "tokens",
            "temperature",
            "avg_logprob",
            "compression_ratio",
            "no_speech_prob",
        ] {
            assert!(first.get(key).is_some(), "{key} in {first}");
        }
        assert_eq!(body["segments"][1]["id"], 1);
        assert_eq!(body["segments"][1]["tokens"], json!([50364, 6996]));
        assert!(body.get("words").is_none());
        let translated = transcript().to_verbose_json(true);
        assert_eq!(
            (&translated["task"], &translated["language"]),
            (&json!("translate"), &json!("english"))
        );
        let json_answer = without_decoding(serde_json::to_value(transcript()).unwrap());
        assert!(json_answer["segments"][1].get("decoding").is_none());
        assert_eq!(json_answer["segments"][1]["speaker"], "SPEAKER_01");
    }

    #[test]
    fn a_translation_is_a_translating_transcription() {
        let request = TranslationRequest {
            file: Some("https://e.com/a.mp3".into()),
            response_format: Some("verbose_json".into()),
            ..Default::default()
        }
        .into_transcription();
        let (params, media) = request.validate().unwrap();
        assert!(params.translation);
        assert_eq!(params.language, "auto");
        assert_eq!(media[0].field, "file");
    }

    #[test]
    fn language_names_and_codes() {
        assert_eq!(language_name("en"), "english");
        assert_eq!(language_name("de"), "german");
        assert_eq!(language_name("english"), "english");
        assert_eq!(language_code("English"), "en");
        assert_eq!(language_code("haitian creole"), "ht");
        assert_eq!(language_code("klingon"), "klingon");
    }
}
