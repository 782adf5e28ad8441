//! The legacy image and logo interface (`/ai-image/generate`, `/ai-image/logo`):
//! its own field names, enums and ranges, run as `image` jobs.

use serde::{Deserialize, Serialize};

use super::ValidationError;
use super::image::{ImageParams, LogoParams};
use super::validate::{integer_in, number_in, one_of, optional_text, required_text};

/// The eight legacy model names; `[legacy_models]` maps them to catalogue ids.
pub const MODELS: [&str; 8] = [
    "flux-schnell",
    "flux-dev",
    "flux-pro",
    "flux-pro-ultra",
    "sd-3.5-large",
    "sd-3.5-medium",
    "sdxl",
    "dall-e-3",
];
pub const SIZES: [&str; 7] = [
    "square",
    "square_hd",
    "square_small",
    "landscape_4_3",
    "landscape_16_9",
    "portrait_4_3",
    "portrait_16_9",
];
pub const STYLES: [&str; 8] = [
    "photorealistic",
    "anime",
    "digital_art",
    "oil_painting",
    "watercolor",
    "sketch",
    "cartoon",
    "abstract",
];
pub const QUALITIES: [&str; 2] = ["standard", "hd"];
pub const LOGO_STYLES: [&str; 8] = [
    "minimal",
    "modern",
    "vintage",
    "playful",
    "corporate",
    "tech",
    "organic",
    "geometric",
];
pub const INDUSTRIES: [&str; 8] = [
    "technology",
    "healthcare",
    "finance",
    "education",
    "retail",
    "food",
    "travel",
    "entertainment",
];
pub const TYPOGRAPHIES: [&str; 5] = ["sans-serif", "serif", "script", "display", "monospace"];
pub const MOODS: [&str; 5] = ["professional", "friendly", "bold", "elegant", "playful"];

/// Pixel size of a legacy size name.
pub fn size_pixels(size: &str) -> (u32, u32) {
    match size {
        "square_hd" => (1024, 1024),
        "square_small" => (256, 256),
        "landscape_4_3" => (1024, 768),
        "landscape_16_9" => (1024, 576),
        "portrait_4_3" => (768, 1024),
        "portrait_16_9" => (576, 1024),
        _ => (512, 512),
    }
}

/// Body of `POST /ai-image/generate`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct LegacyGenerateRequest {
    /// 1 to 4000 characters.
    #[schema(
        required = true,
        nullable = false,
        min_length = 1,
        max_length = 4000,
        pattern = "\\S"
    )]
    pub prompt: Option<String>,
    /// One of the eight legacy model names.
    #[schema(
        example = "flux-schnell",
        required = true,
        nullable = false,
        pattern = "^(flux-schnell|flux-dev|flux-pro|flux-pro-ultra|sd-3\\.5-large|sd-3\\.5-medium|sdxl|dall-e-3)$"
    )]
    pub model: Option<String>,
    /// Default `square`.
    #[schema(
        pattern = "^(square|square_hd|square_small|landscape_4_3|landscape_16_9|portrait_4_3|portrait_16_9)$"
    )]
    pub size: Option<String>,
    /// 1 to 4, default 1.
    #[schema(minimum = 1, maximum = 4)]
    pub n: Option<i64>,
    /// At most 1000 characters.
    #[schema(max_length = 1000)]
    pub negative_prompt: Option<String>,
    #[schema(
        pattern = "^(photorealistic|anime|digital_art|oil_painting|watercolor|sketch|cartoon|abstract)$"
    )]
    pub style: Option<String>,
    /// `standard` (default) or `hd`.
    #[schema(pattern = "^(standard|hd)$")]
    pub quality: Option<String>,
    pub seed: Option<u64>,
    /// 1 to 20.
    #[schema(minimum = 1, maximum = 20)]
    pub guidance_scale: Option<f64>,
    /// 10 to 150.
    #[schema(minimum = 10, maximum = 150)]
    pub num_inference_steps: Option<i64>,
}

/// Body of `POST /ai-image/logo`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct LegacyLogoRequest {
    /// 1 to 2000 characters: the brand and what it does.
    #[schema(
        required = true,
        nullable = false,
        min_length = 1,
        max_length = 2000,
        pattern = "\\S"
    )]
    pub prompt: Option<String>,
    /// One of the eight legacy model names.
    #[schema(
        required = true,
        nullable = false,
        pattern = "^(flux-schnell|flux-dev|flux-pro|flux-pro-ultra|sd-3\\.5-large|sd-3\\.5-medium|sdxl|dall-e-3)$"
    )]
    pub model: Option<String>,
    #[schema(
        required = true,
        nullable = false,
        pattern = "^(minimal|modern|vintage|playful|corporate|tech|organic|geometric)$"
    )]
    pub style: Option<String>,
    #[schema(
        required = true,
        nullable = false,
        pattern = "^(technology|healthcare|finance|education|retail|food|travel|entertainment)$"
    )]
    pub industry: Option<String>,
    /// Default `square`.
    #[schema(
        pattern = "^(square|square_hd|square_small|landscape_4_3|landscape_16_9|portrait_4_3|portrait_16_9)$"
    )]
    pub size: Option<String>,
    /// 1 to 4, default 1.
    #[schema(minimum = 1, maximum = 4)]
    pub n: Option<i64>,
    /// At most 1000 characters.
    #[schema(max_length = 1000)]
    pub negative_prompt: Option<String>,
    /// At most 200 characters, e.g. "navy and gold".
    #[schema(max_length = 200)]
    pub color_scheme: Option<String>,
    #[schema(pattern = "^(sans-serif|serif|script|display|monospace)$")]
    pub typography: Option<String>,
    #[schema(pattern = "^(professional|friendly|bold|elegant|playful)$")]
    pub mood: Option<String>,
    /// 1 to 5, default 3.
    #[schema(minimum = 1, maximum = 5)]
    pub complexity: Option<i64>,
    /// Default true.
    pub refine_prompt: Option<bool>,
    pub seed: Option<u64>,
}

/// Legacy extras kept with the job (the local provider has no use for them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LegacyExtras {
    pub legacy_model: String,
    pub quality: Option<String>,
    pub guidance_scale: Option<f64>,
    pub num_inference_steps: Option<i64>,
}

/// Both legacy request kinds validate into image parameters plus extras.
pub trait LegacyRequest: serde::de::DeserializeOwned {
    fn validate(&self, random_seed: u64) -> Result<(ImageParams, LegacyExtras), ValidationError>;
}

impl LegacyRequest for LegacyGenerateRequest {
    fn validate(&self, random_seed: u64) -> Result<(ImageParams, LegacyExtras), ValidationError> {
        LegacyGenerateRequest::validate(self, random_seed)
    }
}

impl LegacyRequest for LegacyLogoRequest {
    fn validate(&self, random_seed: u64) -> Result<(ImageParams, LegacyExtras), ValidationError> {
        LegacyLogoRequest::validate(self, random_seed)
    }
}

fn required_model(value: Option<&str>) -> Result<String, ValidationError> {
    let model = value.ok_or_else(|| ValidationError::new("model", "model is required"))?;
    one_of("model", Some(model), &MODELS, "")
}

fn size_and_count(size: Option<&str>, n: Option<i64>) -> Result<(String, u32), ValidationError> {
    Ok((
        one_of("size", size, &SIZES, "square")?,
        integer_in("n", n, 1, 4, 1)? as u32,
    ))
}

impl LegacyGenerateRequest {
    pub fn validate(
        &self,
        random_seed: u64,
    ) -> Result<(ImageParams, LegacyExtras), ValidationError> {
        let prompt = required_text("prompt", self.prompt.as_deref(), 4000)?;
        let model = required_model(self.model.as_deref())?;
        let (size, n) = size_and_count(self.size.as_deref(), self.n)?;
        let negative_prompt =
            optional_text("negative_prompt", self.negative_prompt.as_deref(), 1000)?;
        let style = match self.style.as_deref() {
            None => None,
            Some(s) => Some(one_of("style", Some(s), &STYLES, "")?),
        };
        let quality = match self.quality.as_deref() {
            None => None,
            Some(q) => Some(one_of("quality", Some(q), &QUALITIES, "standard")?),
        };
        let guidance_scale = match self.guidance_scale {
            None => None,
            Some(g) => Some(number_in("guidance_scale", Some(g), 1.0, 20.0, 7.5)?),
        };
        let num_inference_steps = match self.num_inference_steps {
            None => None,
            Some(s) => Some(integer_in("num_inference_steps", Some(s), 10, 150, 28)?),
        };
        let (width, height) = size_pixels(&size);
        // The style steers the palette through the prompt; painterly styles
        // render with the muted (natural) look.
        let render_style = match style.as_deref() {
            Some("photorealistic" | "oil_painting" | "watercolor" | "sketch") => "natural",
            _ => "vivid",
        };
        let render_prompt = match &style {
            Some(style) => format!("{prompt}, {} style", style.replace('_', " ")),
            None => prompt.clone(),
        };
        let params = ImageParams {
            prompt: render_prompt,
            n,
            size,
            style: render_style.to_owned(),
            upscale: None,
            negative_prompt,
            seed: self.seed.unwrap_or(random_seed),
            width,
            height,
            logo: None,
        };
        Ok((
            params,
            LegacyExtras {
                legacy_model: model,
                quality,
                guidance_scale,
                num_inference_steps,
            },
        ))
    }
}

impl LegacyLogoRequest {
    pub fn validate(
        &self,
        random_seed: u64,
    ) -> Result<(ImageParams, LegacyExtras), ValidationError> {
        let prompt = required_text("prompt", self.prompt.as_deref(), 2000)?;
        let model = required_model(self.model.as_deref())?;
        let style = one_of(
            "style",
            Some(
                self.style
                    .as_deref()
                    .ok_or_else(|| ValidationError::new("style", "style is required"))?,
            ),
            &LOGO_STYLES,
            "",
        )?;
        let industry = one_of(
            "industry",
            Some(
                self.industry
                    .as_deref()
                    .ok_or_else(|| ValidationError::new("industry", "industry is required"))?,
            ),
            &INDUSTRIES,
            "",
        )?;
        let (size, n) = size_and_count(self.size.as_deref(), self.n)?;
        let logo = LogoParams {
            style,
            industry,
            color_scheme: optional_text("color_scheme", self.color_scheme.as_deref(), 200)?,
            typography: match self.typography.as_deref() {
                None => None,
                Some(t) => Some(one_of("typography", Some(t), &TYPOGRAPHIES, "")?),
            },
            mood: match self.mood.as_deref() {
                None => None,
                Some(m) => Some(one_of("mood", Some(m), &MOODS, "")?),
            },
            complexity: integer_in("complexity", self.complexity, 1, 5, 3)? as u8,
            refine_prompt: self.refine_prompt.unwrap_or(true),
        };
        let (width, height) = size_pixels(&size);
        let params = ImageParams {
            prompt,
            n,
            size,
            style: "vivid".to_owned(),
            upscale: None,
            negative_prompt: optional_text(
                "negative_prompt",
                self.negative_prompt.as_deref(),
                1000,
            )?,
            seed: self.seed.unwrap_or(random_seed),
            width,
            height,
            logo: Some(logo),
        };
        Ok((
            params,
            LegacyExtras {
                legacy_model: model,
                quality: None,
                guidance_scale: None,
                num_inference_steps: None,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generate_fields_enums_and_ranges() {
        let ok = LegacyGenerateRequest {
            prompt: Some("a cat".into()),
            model: Some("flux-dev".into()),
            ..Default::default()
        };
        let (params, extras) = ok.validate(1).unwrap();
        assert_eq!((params.width, params.height, params.n), (512, 512, 1));
        assert_eq!(extras.legacy_model, "flux-dev");
        let check = |req: LegacyGenerateRequest| req.validate(0).unwrap_err();
        assert_eq!(
            check(LegacyGenerateRequest {
                model: Some("sdxl".into()),
                ..Default::default()
            })
            .message,
            "prompt is required"
        );
        assert_eq!(
            check(LegacyGenerateRequest {
                prompt: Some("x".into()),
                ..Default::default()
            })
            .message,
            "model is required"
        );
        let with = |f: fn(&mut LegacyGenerateRequest)| {
            let mut req = ok.clone();
            f(&mut req);
            req.validate(0).unwrap_err().field
        };
        assert_eq!(with(|r| r.model = Some("midjourney".into())), "model");
        assert_eq!(with(|r| r.n = Some(5)), "n");
        assert_eq!(with(|r| r.size = Some("huge".into())), "size");
        assert_eq!(
            with(|r| r.negative_prompt = Some("x".repeat(1001))),
            "negative_prompt"
        );
        assert_eq!(with(|r| r.style = Some("cubism".into())), "style");
        assert_eq!(with(|r| r.quality = Some("ultra".into())), "quality");
        assert_eq!(with(|r| r.guidance_scale = Some(0.5)), "guidance_scale");
        assert_eq!(
            with(|r| r.num_inference_steps = Some(151)),
            "num_inference_steps"
        );
    }

    #[test]
    fn logo_requires_style_and_industry_and_checks_ranges() {
        let ok = LegacyLogoRequest {
            prompt: Some("Acme rockets".into()),
            model: Some("flux-pro".into()),
            style: Some("tech".into()),
            industry: Some("technology".into()),
            ..Default::default()
        };
        let (params, _) = ok.validate(0).unwrap();
        assert_eq!(params.logo.as_ref().unwrap().complexity, 3);
        let mut req = ok.clone();
        req.style = None;
        assert_eq!(req.validate(0).unwrap_err().message, "style is required");
        let mut req = ok.clone();
        req.industry = Some("mining".into());
        assert_eq!(req.validate(0).unwrap_err().field, "industry");
        let mut req = ok.clone();
        req.complexity = Some(6);
        assert_eq!(
            req.validate(0).unwrap_err().message,
            "complexity must be between 1 and 5"
        );
        let mut req = ok.clone();
        req.prompt = Some("x".repeat(2001));
        assert_eq!(req.validate(0).unwrap_err().field, "prompt");
        let mut req = ok;
        req.color_scheme = Some("x".repeat(201));
        assert_eq!(req.validate(0).unwrap_err().field, "color_scheme");
    }
}
