//! `POST /music/generations`.

use serde::{Deserialize, Serialize};

use super::validate::{one_of, optional_text, required_text};
use super::{MediaRef, StoredInputs, ValidationError};
use crate::fetch::MediaKind;

pub const MODES: [&str; 2] = ["text_to_music", "audio_to_audio"];
pub const FORMATS: [&str; 2] = ["mp3", "wav"];

/// Body of `POST /music/generations`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct MusicGenerationRequest {
    #[schema(example = "calm piano melody")]
    pub prompt: Option<String>,
    pub model: Option<String>,
    /// Default 30; 1 to 47 for the default model (the model's maximum).
    #[schema(minimum = 1)]
    pub duration_seconds: Option<f64>,
    /// `text_to_music` (default) or `audio_to_audio`.
    #[schema(pattern = "^(text_to_music|audio_to_audio)$")]
    pub mode: Option<String>,
    /// audio_to_audio: URL or base64 audio.
    pub source_audio: Option<String>,
    /// `mp3` (default) or `wav`.
    #[schema(pattern = "^(mp3|wav)$")]
    pub output_format: Option<String>,
    pub negative_prompt: Option<String>,
    pub seed: Option<u64>,
    #[schema(value_type = Option<Object>)]
    pub model_inputs: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MusicParams {
    pub prompt: String,
    pub duration_seconds: f64,
    pub mode: String,
    pub output_format: String,
    pub negative_prompt: Option<String>,
    pub seed: u64,
    pub model_inputs: Option<serde_json::Value>,
    #[serde(default)]
    pub inputs: StoredInputs,
}

impl MusicGenerationRequest {
    /// `model_id` and `max_duration` name the resolved model in the error.
    pub fn validate(
        &self,
        random_seed: u64,
        model_id: &str,
        max_duration: f64,
    ) -> Result<(MusicParams, Vec<MediaRef>), ValidationError> {
        let prompt = required_text("prompt", self.prompt.as_deref(), 4000)?;
        super::validate::model_inputs(self.model_inputs.as_ref())?;
        let duration_seconds = self.duration_seconds.unwrap_or(30.0);
        if !duration_seconds.is_finite() || duration_seconds < 1.0 {
            return Err(ValidationError::new(
                "duration_seconds",
                "duration_seconds must be at least 1",
            ));
        }
        if duration_seconds > max_duration {
            return Err(ValidationError::new(
                "duration_seconds",
                format!("duration_seconds must be at most {max_duration} for model {model_id}"),
            ));
        }
        let mode = one_of("mode", self.mode.as_deref(), &MODES, "text_to_music")?;
        let mut media = Vec::new();
        if mode == "audio_to_audio" {
            let source = self
                .source_audio
                .as_deref()
                .filter(|s| !s.trim().is_empty())
                .ok_or_else(|| {
                    ValidationError::new(
                        "source_audio",
                        "source_audio is required for audio_to_audio",
                    )
                })?;
            media.push(MediaRef {
                field: "source_audio",
                source: source.to_owned(),
                kind: MediaKind::Audio,
            });
        }
        let params = MusicParams {
            prompt,
            duration_seconds,
            mode,
            output_format: one_of(
                "output_format",
                self.output_format.as_deref(),
                &FORMATS,
                "mp3",
            )?,
            negative_prompt: optional_text(
                "negative_prompt",
                self.negative_prompt.as_deref(),
                4000,
            )?,
            seed: self.seed.unwrap_or(random_seed),
            model_inputs: self.model_inputs.clone(),
            inputs: StoredInputs::new(),
        };
        Ok((params, media))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_above_the_model_maximum_is_rejected() {
        let req = MusicGenerationRequest {
            prompt: Some("piano".into()),
            duration_seconds: Some(48.0),
            ..Default::default()
        };
        let err = req.validate(0, "local/synth-v1", 47.0).unwrap_err();
        assert_eq!(
            err.message,
            "duration_seconds must be at most 47 for model local/synth-v1"
        );
        assert!(req.validate(0, "local/synth-long", 60.0).is_ok());
        assert_eq!(
            MusicGenerationRequest::default()
                .validate(0, "m", 47.0)
                .unwrap_err()
                .message,
            "prompt is required"
        );
        let (params, _) = MusicGenerationRequest {
            prompt: Some("x".into()),
            ..Default::default()
        }
        .validate(0, "m", 47.0)
        .unwrap();
        assert_eq!(
            (params.duration_seconds, params.output_format.as_str()),
            (30.0, "mp3")
        );
    }
}
