//! `POST /images/edits`: nine operations on an input image.

use serde::{Deserialize, Serialize};

use super::image::ResponseFormat;
use super::validate::{integer_in, number_in, one_of, optional_text};
use super::{MediaRef, StoredInputs, ValidationError};
use crate::fetch::MediaKind;

pub const OPERATIONS: [&str; 9] = [
    "inpainting",
    "outpainting",
    "backgroundRemoval",
    "backgroundReplace",
    "objectRemoval",
    "superResolution",
    "faceEnhancement",
    "colorization",
    "styleTransfer",
];
pub const DIRECTIONS: [&str; 5] = ["left", "right", "top", "bottom", "all"];
pub const EDIT_SIZES: [&str; 2] = ["512x512", "1024x1024"];
/// Largest input side accepted, and largest output side produced.
pub const MAX_INPUT_SIDE: u32 = 4096;
pub const MAX_OUTPUT_SIDE: u32 = 8192;

/// Body of `POST /images/edits`. Unknown fields are ignored.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct ImageEditRequest {
    /// The image to edit: an http(s) URL or base64 data (JPEG, PNG, WebP).
    pub image: Option<String>,
    /// One of the nine operations. Without it, a `mask` means inpainting,
    /// otherwise styleTransfer (the formal schema's body has no operation).
    #[schema(example = "backgroundRemoval")]
    pub operation: Option<String>,
    /// Required for inpainting and styleTransfer.
    pub prompt: Option<String>,
    /// White = edit, black = keep; same size as the image. Required for
    /// inpainting and objectRemoval.
    pub mask: Option<String>,
    pub model: Option<String>,
    /// Resize the output to `512x512` or `1024x1024` (formal schema);
    /// `auto` keeps the operation's own size, as omitting it does.
    pub size: Option<String>,
    /// Number of results: only 1 (an edit has one result).
    #[schema(minimum = 1, maximum = 1)]
    pub n: Option<u32>,
    /// `url` (default) or `b64_json`: `data[]` items carry the image itself,
    /// base64, instead of its URL (sync answers only).
    pub response_format: Option<String>,
    /// 0 to 1, default 0.95: how strongly the edit applies.
    pub strength: Option<f64>,
    /// outpainting: `left`, `right`, `top`, `bottom` or `all`.
    pub direction: Option<String>,
    /// outpainting: pixels added per side, default 256 (1 to 2048).
    pub expand_pixels: Option<i64>,
    /// backgroundReplace: the new background, as text.
    pub new_background: Option<String>,
    /// superResolution: 2 (default) or 4.
    pub scale: Option<i64>,
    /// Same seed, same result; random when omitted.
    pub seed: Option<u64>,
    #[schema(value_type = Option<Object>)]
    pub model_inputs: Option<serde_json::Value>,
}

/// Stored as the job's `inputParams`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EditParams {
    pub operation: String,
    pub prompt: Option<String>,
    pub strength: f64,
    pub direction: Option<String>,
    pub expand_pixels: u32,
    pub new_background: Option<String>,
    pub scale: u32,
    pub size: Option<String>,
    pub seed: u64,
    pub model_inputs: Option<serde_json::Value>,
    /// `image` and, when given, `mask`.
    #[serde(default)]
    pub inputs: StoredInputs,
    /// OpenAI's mask convention (multipart uploads): the mask's transparent
    /// pixels are the ones to edit, instead of its white ones.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mask_from_alpha: bool,
}

impl EditParams {
    /// PNG for operations whose output has transparency, JPEG otherwise.
    pub fn output_is_png(&self) -> bool {
        self.operation == "backgroundRemoval"
    }
}

impl ImageEditRequest {
    /// Checks the fields; returns the parameters (inputs still empty) and the
    /// media to load.
    pub fn validate(
        &self,
        random_seed: u64,
    ) -> Result<(EditParams, Vec<MediaRef>), ValidationError> {
        let image = self
            .image
            .as_deref()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| ValidationError::new("image", "image is required"))?;
        let mask = self.mask.as_deref().filter(|s| !s.trim().is_empty());
        let operation = match self.operation.as_deref() {
            Some(op) if OPERATIONS.contains(&op) => op.to_owned(),
            Some(_) => {
                return Err(ValidationError::new(
                    "operation",
                    format!(
                        "invalid operation: must be one of {}",
                        OPERATIONS.join(", ")
                    ),
                ));
            }
            None if mask.is_some() => "inpainting".to_owned(),
            None => "styleTransfer".to_owned(),
        };
        let prompt = optional_text("prompt", self.prompt.as_deref(), 4000)?;
        let needs = |field: &'static str, what: &str| {
            ValidationError::new(field, format!("{field} is required for {what}"))
        };
        match operation.as_str() {
            "inpainting" | "objectRemoval" if mask.is_none() => {
                return Err(needs("mask", &operation));
            }
            "inpainting" | "styleTransfer" if prompt.is_none() => {
                return Err(needs("prompt", &operation));
            }
            "outpainting" if self.direction.is_none() => {
                return Err(needs("direction", &operation));
            }
            "backgroundReplace"
                if self
                    .new_background
                    .as_deref()
                    .is_none_or(|s| s.trim().is_empty()) =>
            {
                return Err(needs("new_background", &operation));
            }
            _ => {}
        }
        let direction = match self.direction.as_deref() {
            None => None,
            Some(d) => Some(one_of("direction", Some(d), &DIRECTIONS, "all")?),
        };
        let scale = match self.scale {
            None | Some(2) => 2,
            Some(4) => 4,
            Some(_) => return Err(ValidationError::new("scale", "scale must be 2 or 4")),
        };
        let size = match self.size.as_deref() {
            None | Some("auto") => None,
            Some(s) => Some(one_of("size", Some(s), &EDIT_SIZES, "1024x1024")?),
        };
        if self.n.is_some_and(|n| n != 1) {
            return Err(ValidationError::new(
                "n",
                "n must be 1: an edit has one result",
            ));
        }
        ResponseFormat::parse(self.response_format.as_deref())?;
        super::validate::model_inputs(self.model_inputs.as_ref())?;
        let params = EditParams {
            operation: operation.clone(),
            prompt,
            // A blended-back removal would leave a ghost of the object.
            strength: number_in(
                "strength",
                self.strength,
                0.0,
                1.0,
                if operation == "objectRemoval" {
                    1.0
                } else {
                    0.95
                },
            )?,
            direction,
            expand_pixels: integer_in("expand_pixels", self.expand_pixels, 1, 2048, 256)? as u32,
            new_background: optional_text("new_background", self.new_background.as_deref(), 1000)?,
            scale,
            size,
            seed: self.seed.unwrap_or(random_seed),
            model_inputs: self.model_inputs.clone(),
            inputs: StoredInputs::new(),
            mask_from_alpha: false,
        };
        let mut media = vec![MediaRef {
            field: "image",
            source: image.to_owned(),
            kind: MediaKind::Image,
        }];
        // Only operations that use a mask load it.
        if let Some(mask) =
            mask.filter(|_| matches!(params.operation.as_str(), "inpainting" | "objectRemoval"))
        {
            media.push(MediaRef {
                field: "mask",
                source: mask.to_owned(),
                kind: MediaKind::Image,
            });
        }
        Ok((params, media))
    }
}

/// Output size of an edit of a `width` x `height` image, to check limits
/// before any work is done.
pub fn output_size(params: &EditParams, width: u32, height: u32) -> (u32, u32) {
    if let Some((w, h)) = params.size.as_deref().and_then(super::image::parse_size) {
        return (w, h);
    }
    match params.operation.as_str() {
        "superResolution" => (width * params.scale, height * params.scale),
        "outpainting" => {
            let e = params.expand_pixels;
            match params.direction.as_deref() {
                Some("left" | "right") => (width + e, height),
                Some("top" | "bottom") => (width, height + e),
                _ => (width + 2 * e, height + 2 * e),
            }
        }
        _ => (width, height),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(operation: &str) -> ImageEditRequest {
        ImageEditRequest {
            image: Some("https://example.com/a.png".into()),
            operation: Some(operation.into()),
            ..Default::default()
        }
    }

    #[test]
    fn spec_errors_for_missing_image_invalid_operation_and_missing_mask() {
        let err = ImageEditRequest::default().validate(0).unwrap_err();
        assert_eq!(
            (err.field, err.message.as_str()),
            ("image", "image is required")
        );
        let err = request("sharpen").validate(0).unwrap_err();
        assert_eq!(err.field, "operation");
        assert!(err.message.starts_with("invalid operation"));
        for op in ["inpainting", "objectRemoval"] {
            let mut req = request(op);
            req.prompt = Some("a cat".into());
            let err = req.validate(0).unwrap_err();
            assert_eq!(
                (err.field, err.message.clone()),
                ("mask", format!("mask is required for {op}"))
            );
        }
        assert_eq!(
            request("styleTransfer").validate(0).unwrap_err().field,
            "prompt"
        );
        assert_eq!(
            request("outpainting").validate(0).unwrap_err().field,
            "direction"
        );
        assert_eq!(
            request("backgroundReplace").validate(0).unwrap_err().field,
            "new_background"
        );
    }

    #[test]
    fn the_formal_schema_body_without_operation_is_accepted() {
        let req = ImageEditRequest {
            image: Some("https://e.com/a.png".into()),
            prompt: Some("a hat".into()),
            mask: Some("https://e.com/m.png".into()),
            ..Default::default()
        };
        let (params, media) = req.validate(3).unwrap();
        assert_eq!(params.operation, "inpainting");
        assert_eq!(media.len(), 2);
        let req = ImageEditRequest {
            image: Some("https://e.com/a.png".into()),
            prompt: Some("noir".into()),
            ..Default::default()
        };
        assert_eq!(req.validate(3).unwrap().0.operation, "styleTransfer");
    }

    #[test]
    fn defaults_ranges_and_output_sizes() {
        let (params, media) = request("superResolution").validate(1).unwrap();
        assert_eq!((params.scale, params.strength, media.len()), (2, 0.95, 1));
        assert_eq!(output_size(&params, 100, 50), (200, 100));
        let mut req = request("superResolution");
        req.scale = Some(3);
        assert_eq!(req.validate(0).unwrap_err().message, "scale must be 2 or 4");
        let mut req = request("faceEnhancement");
        req.strength = Some(1.5);
        assert_eq!(
            req.validate(0).unwrap_err().message,
            "strength must be between 0 and 1"
        );
        let mut req = request("outpainting");
        req.direction = Some("left".into());
        let (params, _) = req.validate(0).unwrap();
        assert_eq!(output_size(&params, 100, 50), (356, 50));
    }

    #[test]
    fn openai_fields_n_size_auto_and_response_format() {
        let mut req = request("colorization");
        req.size = Some("auto".into());
        req.n = Some(1);
        req.response_format = Some("b64_json".into());
        let (params, _) = req.validate(0).unwrap();
        assert_eq!(params.size, None);
        req.n = Some(2);
        assert_eq!(req.validate(0).unwrap_err().field, "n");
        req.n = None;
        req.response_format = Some("png".into());
        assert_eq!(req.validate(0).unwrap_err().field, "response_format");
    }
}
