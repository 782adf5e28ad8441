//! `POST /audio/speech`.

use serde::{Deserialize, Serialize};

use super::validate::{number_in, one_of, optional_text, required_text};
use super::{MediaRef, StoredInputs, ValidationError};
use crate::fetch::MediaKind;

pub const MAX_INPUT_CHARS: usize = 10_000;
pub const FORMATS: [&str; 6] = ["mp3", "wav", "opus", "aac", "flac", "pcm"];

/// Body of `POST /audio/speech`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct SpeechRequest {
    /// Text to speak: 1 to 10,000 characters.
    #[schema(
        example = "The quick brown fox jumps over the lazy dog.",
        required = true,
        nullable = false,
        min_length = 1,
        max_length = 10000,
        pattern = "\\S"
    )]
    pub input: Option<String>,
    pub model: Option<String>,
    /// `alloy`, `echo`, `fable`, `onyx`, `nova` (default), `shimmer`, or a custom voice.
    pub voice: Option<String>,
    /// 0.25 to 4.0, default 1.0.
    #[schema(minimum = 0.25, maximum = 4)]
    pub speed: Option<f64>,
    /// `mp3` (default), `wav`, `opus`, `aac`, `flac`, or `pcm` (raw 24 kHz
    /// 16-bit signed little-endian mono samples, no header).
    #[schema(pattern = "^(mp3|wav|opus|aac|flac|pcm)$")]
    pub response_format: Option<String>,
    /// Voice cloning sample (URL or base64 audio).
    pub reference_audio: Option<String>,
    /// Transcript of the sample.
    pub reference_text: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub model_inputs: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeechParams {
    pub input: String,
    pub voice: String,
    pub speed: f64,
    pub response_format: String,
    pub reference_text: Option<String>,
    pub model_inputs: Option<serde_json::Value>,
    #[serde(default)]
    pub inputs: StoredInputs,
}

impl SpeechParams {
    pub fn character_count(&self) -> usize {
        self.input.chars().count()
    }
}

impl SpeechRequest {
    pub fn validate(&self) -> Result<(SpeechParams, Vec<MediaRef>), ValidationError> {
        let input = required_text("input", self.input.as_deref(), MAX_INPUT_CHARS)?;
        // Control characters are not spoken: text of only those is empty.
        if !input.chars().any(|c| !c.is_control() && !c.is_whitespace()) {
            return Err(ValidationError::new(
                "input",
                "input must contain text to speak, not only control characters",
            ));
        }
        super::validate::model_inputs(self.model_inputs.as_ref())?;
        let voice = optional_text("voice", self.voice.as_deref(), 100)?
            .unwrap_or_else(|| "nova".to_owned());
        let params = SpeechParams {
            input,
            voice,
            speed: number_in("speed", self.speed, 0.25, 4.0, 1.0)?,
            response_format: one_of(
                "response_format",
                self.response_format.as_deref(),
                &FORMATS,
                "mp3",
            )?,
            reference_text: optional_text(
                "reference_text",
                self.reference_text.as_deref(),
                MAX_INPUT_CHARS,
            )?,
            model_inputs: self.model_inputs.clone(),
            inputs: StoredInputs::new(),
        };
        let media = self
            .reference_audio
            .as_deref()
            .filter(|s| !s.trim().is_empty())
            .map(|s| MediaRef {
                field: "reference_audio",
                source: s.to_owned(),
                kind: MediaKind::Audio,
            })
            .into_iter()
            .collect();
        Ok((params, media))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_errors_and_defaults() {
        assert_eq!(
            SpeechRequest::default().validate().unwrap_err().message,
            "input is required"
        );
        let req = |input: &str| SpeechRequest {
            input: Some(input.into()),
            ..Default::default()
        };
        assert_eq!(
            req("").validate().unwrap_err().message,
            "input must not be empty"
        );
        let only_controls = req("\u{93}\u{7}").validate().unwrap_err();
        assert_eq!(only_controls.field, "input");
        assert_eq!(
            only_controls.message,
            "input must contain text to speak, not only control characters"
        );
        assert_eq!(
            req(&"a".repeat(10_001)).validate().unwrap_err().message,
            "input must be at most 10000 characters"
        );
        assert!(req(&"a".repeat(10_000)).validate().is_ok());
        let mut r = req("hi");
        r.speed = Some(0.2);
        assert_eq!(
            r.validate().unwrap_err().message,
            "speed must be between 0.25 and 4"
        );
        let (params, media) = req("hi").validate().unwrap();
        assert_eq!(
            (
                params.voice.as_str(),
                params.speed,
                params.response_format.as_str()
            ),
            ("nova", 1.0, "mp3")
        );
        assert!(media.is_empty());
        for format in ["flac", "pcm"] {
            let mut r = req("hi");
            r.response_format = Some(format.into());
            assert_eq!(r.validate().unwrap().0.response_format, format);
        }
        let mut r = req("hi");
        r.response_format = Some("m4a".into());
        assert_eq!(r.validate().unwrap_err().field, "response_format");
    }
}
