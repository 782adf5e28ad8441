//! `POST /images/generations`: request, validation, and the stored parameters.

use serde::{Deserialize, Serialize};

use super::ValidationError;
use super::validate::one_of;

pub const MAX_PROMPT_CHARS: usize = 4000;
pub const MAX_IMAGES: u32 = 10;
/// The union of both size lists of the spec.
pub const SIZES: [&str; 6] = [
    "512x512",
    "1024x1024",
    "1792x1024",
    "1024x1792",
    "1536x1024",
    "1024x1536",
];
pub const STYLES: [&str; 2] = ["vivid", "natural"];
pub const UPSCALES: [&str; 2] = ["2x", "4x"];
pub const RESPONSE_FORMATS: [&str; 2] = ["url", "b64_json"];

/// How a sync answer carries each image (OpenAI's `response_format`). Not
/// stored with the job: the job itself always holds files, shown as URLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResponseFormat {
    /// A signed URL of the stored file.
    #[default]
    Url,
    /// The file's bytes, base64, in `b64_json` (and no `url`).
    B64Json,
}

impl ResponseFormat {
    /// `url` (default) or `b64_json`; anything else is a 400 naming the field.
    pub fn parse(value: Option<&str>) -> Result<Self, ValidationError> {
        Ok(
            match one_of("response_format", value, &RESPONSE_FORMATS, "url")?.as_str() {
                "b64_json" => ResponseFormat::B64Json,
                _ => ResponseFormat::Url,
            },
        )
    }
}

/// Body of `POST /images/generations`. Unknown fields are ignored.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct ImageGenerationRequest {
    /// What to draw; 1 to 4000 characters.
    #[schema(
        required = true,
        nullable = false,
        min_length = 1,
        max_length = 4000,
        example = "a lighthouse on a cliff at dusk"
    )]
    pub prompt: Option<String>,
    /// Model id from `GET /models`; the default image model when omitted.
    #[schema(example = "local/procedural-v1")]
    pub model: Option<String>,
    /// Output size; default `1024x1024`.
    #[schema(
        example = "1024x1024",
        pattern = "^(512x512|1024x1024|1792x1024|1024x1792|1536x1024|1024x1536)$"
    )]
    pub size: Option<String>,
    /// Number of images, 1 to 10; default 1.
    #[schema(minimum = 1, maximum = 10)]
    pub n: Option<u32>,
    /// `vivid` (default) or `natural`.
    #[schema(pattern = "^(vivid|natural)$")]
    pub style: Option<String>,
    /// `2x` or `4x` multiplies the output size.
    #[schema(pattern = "^(2x|4x)$")]
    pub upscale: Option<String>,
    /// What to keep out of the picture.
    pub negative_prompt: Option<String>,
    /// Same seed and prompt give the same image; random when omitted.
    pub seed: Option<u64>,
    /// `url` (default) or `b64_json`: each `data[]` item carries the image
    /// itself, base64, instead of its URL. Sync answers only; a job keeps URLs.
    #[schema(example = "url", pattern = "^(url|b64_json)$")]
    pub response_format: Option<String>,
}

/// Validated parameters, stored as the job's `inputParams`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageParams {
    pub prompt: String,
    pub n: u32,
    pub size: String,
    pub style: String,
    pub upscale: Option<String>,
    pub negative_prompt: Option<String>,
    pub seed: u64,
    /// Output dimensions: `size` times the upscale factor.
    pub width: u32,
    pub height: u32,
    /// Set for legacy logo requests: render a logo instead of a scene.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logo: Option<LogoParams>,
}

impl ImageGenerationRequest {
    /// Checks every field; `random_seed` is used when the request has none,
    /// so the stored parameters always reproduce the output.
    pub fn validate(&self, random_seed: u64) -> Result<ImageParams, ValidationError> {
        let prompt = self
            .prompt
            .as_deref()
            .ok_or_else(|| ValidationError::new("prompt", "prompt is required"))?;
        if prompt.trim().is_empty() {
            return Err(ValidationError::new("prompt", "prompt must not be empty"));
        }
        if prompt.chars().count() > MAX_PROMPT_CHARS {
            return Err(ValidationError::new(
                "prompt",
                format!("prompt must be at most {MAX_PROMPT_CHARS} characters"),
            ));
        }
        let n = self.n.unwrap_or(1);
        if !(1..=MAX_IMAGES).contains(&n) {
            return Err(ValidationError::new(
                "n",
                format!("n must be between 1 and {MAX_IMAGES}"),
            ));
        }
        let size = one_of("size", self.size.as_deref(), &SIZES, "1024x1024")?;
        let style = one_of("style", self.style.as_deref(), &STYLES, "vivid")?;
        let upscale = match self.upscale.as_deref() {
            None => None,
            Some(value) => Some(one_of("upscale", Some(value), &UPSCALES, "")?),
        };
        if let Some(negative) = &self.negative_prompt
            && negative.chars().count() > MAX_PROMPT_CHARS
        {
            return Err(ValidationError::new(
                "negative_prompt",
                format!("negative_prompt must be at most {MAX_PROMPT_CHARS} characters"),
            ));
        }
        let (base_width, base_height) = parse_size(&size).expect("sizes in the list parse");
        let factor = match upscale.as_deref() {
            Some("4x") => 4,
            Some(_) => 2,
            None => 1,
        };
        Ok(ImageParams {
            prompt: prompt.to_owned(),
            n,
            size,
            style,
            upscale,
            negative_prompt: self
                .negative_prompt
                .clone()
                .filter(|s| !s.trim().is_empty()),
            seed: self.seed.unwrap_or(random_seed),
            width: base_width * factor,
            height: base_height * factor,
            logo: None,
        })
    }
}

/// `"WxH"` -> `(W, H)`.
pub fn parse_size(size: &str) -> Option<(u32, u32)> {
    let (w, h) = size.split_once('x')?;
    Some((w.parse().ok()?, h.parse().ok()?))
}

/// What a logo job renders (stored inside the image parameters).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogoParams {
    pub style: String,
    pub industry: String,
    pub color_scheme: Option<String>,
    pub typography: Option<String>,
    pub mood: Option<String>,
    pub complexity: u8,
    pub refine_prompt: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(prompt: &str) -> ImageGenerationRequest {
        ImageGenerationRequest {
            prompt: Some(prompt.into()),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_follow_the_spec() {
        let params = request("a cat").validate(7).unwrap();
        assert_eq!(
            (params.n, params.size.as_str(), params.style.as_str()),
            (1, "1024x1024", "vivid")
        );
        assert_eq!((params.width, params.height, params.seed), (1024, 1024, 7));
    }

    #[test]
    fn upscale_multiplies_the_output_size() {
        let mut req = request("a cat");
        req.size = Some("1792x1024".into());
        req.upscale = Some("2x".into());
        let params = req.validate(0).unwrap();
        assert_eq!((params.width, params.height), (3584, 2048));
    }

    #[test]
    fn each_field_is_validated_with_its_name() {
        let missing = ImageGenerationRequest::default().validate(0).unwrap_err();
        assert_eq!(
            (missing.field, missing.message.as_str()),
            ("prompt", "prompt is required")
        );
        assert_eq!(request("  ").validate(0).unwrap_err().field, "prompt");
        assert_eq!(
            request(&"é".repeat(4001)).validate(0).unwrap_err().field,
            "prompt"
        );
        assert!(request(&"é".repeat(4000)).validate(0).is_ok());
        for (n, ok) in [(0, false), (1, true), (10, true), (11, false)] {
            let mut req = request("x");
            req.n = Some(n);
            assert_eq!(req.validate(0).is_ok(), ok, "n={n}");
        }
        let mut req = request("x");
        req.size = Some("100x100".into());
        assert!(
            req.validate(0)
                .unwrap_err()
                .message
                .starts_with("size must be one of: 512x512")
        );
        let mut req = request("x");
        req.style = Some("cubist".into());
        assert_eq!(req.validate(0).unwrap_err().field, "style");
        let mut req = request("x");
        req.upscale = Some("3x".into());
        assert_eq!(req.validate(0).unwrap_err().field, "upscale");
    }

    #[test]
    fn response_formats() {
        assert_eq!(ResponseFormat::parse(None), Ok(ResponseFormat::Url));
        assert_eq!(ResponseFormat::parse(Some("url")), Ok(ResponseFormat::Url));
        assert_eq!(
            ResponseFormat::parse(Some("b64_json")),
            Ok(ResponseFormat::B64Json)
        );
        let err = ResponseFormat::parse(Some("base64")).unwrap_err();
        assert_eq!(
            (err.field, err.message.as_str()),
            (
                "response_format",
                "response_format must be one of: url, b64_json"
            )
        );
    }
}
