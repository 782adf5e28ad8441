//! `POST /videos/generations`.

use serde::{Deserialize, Serialize};

use super::validate::{number_in, one_of, optional_text, required_text};
use super::{MediaRef, StoredInputs, ValidationError};
use crate::fetch::MediaKind;

pub const RESOLUTIONS: [&str; 3] = ["720p", "1080p", "4k"];
pub const ASPECT_RATIOS: [&str; 5] = ["16:9", "9:16", "1:1", "4:3", "3:4"];
pub const MODES: [&str; 3] = ["text_to_video", "image_to_video", "video_to_video"];

/// Body of `POST /videos/generations`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct VideoGenerationRequest {
    #[schema(example = "waves rolling onto a beach at sunset")]
    pub prompt: Option<String>,
    pub model: Option<String>,
    /// 1 to 10, default 5.
    #[schema(minimum = 1, maximum = 10)]
    pub duration_seconds: Option<f64>,
    /// `720p` (default), `1080p`, `4k`.
    #[schema(pattern = "^(720p|1080p|4k)$")]
    pub resolution: Option<String>,
    /// 30 (default) or 60.
    #[schema(minimum = 30, maximum = 60, multiple_of = 30)]
    pub fps: Option<u32>,
    /// `16:9` (default), `9:16`, `1:1`, `4:3`, `3:4`.
    #[schema(pattern = "^(16:9|9:16|1:1|4:3|3:4)$")]
    pub aspect_ratio: Option<String>,
    /// `text_to_video` (default), `image_to_video`, `video_to_video`.
    #[schema(pattern = "^(text_to_video|image_to_video|video_to_video)$")]
    pub mode: Option<String>,
    /// image_to_video: URL or base64 image.
    pub source_image: Option<String>,
    /// video_to_video: URL or base64 video.
    pub source_video: Option<String>,
    pub negative_prompt: Option<String>,
    pub seed: Option<u64>,
    /// Default true.
    pub prompt_optimizer: Option<bool>,
    /// Default false: a seamlessly looping video.
    #[serde(rename = "loop")]
    pub looping: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VideoParams {
    pub prompt: String,
    pub duration_seconds: f64,
    pub resolution: String,
    pub fps: u32,
    pub aspect_ratio: String,
    pub mode: String,
    pub negative_prompt: Option<String>,
    pub seed: u64,
    pub prompt_optimizer: bool,
    #[serde(rename = "loop")]
    pub looping: bool,
    #[serde(default)]
    pub inputs: StoredInputs,
}

impl VideoGenerationRequest {
    pub fn validate(
        &self,
        random_seed: u64,
        max_duration: f64,
    ) -> Result<(VideoParams, Vec<MediaRef>), ValidationError> {
        let prompt = required_text("prompt", self.prompt.as_deref(), 4000)?;
        let duration_seconds = number_in(
            "duration_seconds",
            self.duration_seconds,
            1.0,
            max_duration,
            5.0,
        )?;
        let fps = match self.fps {
            None | Some(30) => 30,
            Some(60) => 60,
            Some(_) => return Err(ValidationError::new("fps", "fps must be 30 or 60")),
        };
        let mode = one_of("mode", self.mode.as_deref(), &MODES, "text_to_video")?;
        let mut media = Vec::new();
        let source = |field: &'static str, value: &Option<String>, kind| {
            value
                .as_deref()
                .filter(|s| !s.trim().is_empty())
                .map(|s| MediaRef {
                    field,
                    source: s.to_owned(),
                    kind,
                })
                .ok_or_else(|| {
                    ValidationError::new(field, format!("{field} is required for {mode}"))
                })
        };
        match mode.as_str() {
            "image_to_video" => media.push(source(
                "source_image",
                &self.source_image,
                MediaKind::Image,
            )?),
            "video_to_video" => media.push(source(
                "source_video",
                &self.source_video,
                MediaKind::Video,
            )?),
            _ => {}
        }
        let params = VideoParams {
            prompt,
            duration_seconds,
            resolution: one_of(
                "resolution",
                self.resolution.as_deref(),
                &RESOLUTIONS,
                "720p",
            )?,
            fps,
            aspect_ratio: one_of(
                "aspect_ratio",
                self.aspect_ratio.as_deref(),
                &ASPECT_RATIOS,
                "16:9",
            )?,
            mode,
            negative_prompt: optional_text(
                "negative_prompt",
                self.negative_prompt.as_deref(),
                4000,
            )?,
            seed: self.seed.unwrap_or(random_seed),
            prompt_optimizer: self.prompt_optimizer.unwrap_or(true),
            looping: self.looping.unwrap_or(false),
            inputs: StoredInputs::new(),
        };
        Ok((params, media))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_limits_and_sources() {
        let req = VideoGenerationRequest {
            prompt: Some("waves".into()),
            ..Default::default()
        };
        let (params, media) = req.validate(9, 10.0).unwrap();
        assert_eq!(
            (
                params.duration_seconds,
                params.fps,
                params.resolution.as_str()
            ),
            (5.0, 30, "720p")
        );
        assert!(media.is_empty() && params.prompt_optimizer && !params.looping);
        let mut req = VideoGenerationRequest {
            prompt: Some("w".into()),
            duration_seconds: Some(11.0),
            ..Default::default()
        };
        assert_eq!(
            req.validate(0, 10.0).unwrap_err().message,
            "duration_seconds must be between 1 and 10"
        );
        req.duration_seconds = Some(2.0);
        req.fps = Some(24);
        assert_eq!(req.validate(0, 10.0).unwrap_err().field, "fps");
        req.fps = None;
        req.mode = Some("image_to_video".into());
        assert_eq!(
            req.validate(0, 10.0).unwrap_err().message,
            "source_image is required for image_to_video"
        );
        req.source_image = Some("https://e.com/a.png".into());
        assert_eq!(req.validate(0, 10.0).unwrap().1[0].field, "source_image");
        assert_eq!(
            VideoGenerationRequest::default()
                .validate(0, 10.0)
                .unwrap_err()
                .message,
            "prompt is required"
        );
    }
}
