//! Image edits with classical image processing.

use image::imageops::FilterType;
use serde_json::json;
use unigen_core::ProviderError;
use unigen_core::params::edit::EditParams;
use unigen_core::params::image::parse_size;
use unigen_core::telemetry::semconv;
use unigen_db::models::Job;
use unigen_render::edit;
use unigen_render::edit::{Direction, EditOperation, EditSpec};

use super::{blocking, input, params_of, required_input, store_output};
use crate::WorkerContext;
use crate::error::ToolError;
use crate::output::ToolOutput;
use crate::progress::Progress;

fn operation(name: &str) -> Option<EditOperation> {
    Some(match name {
        "inpainting" => EditOperation::Inpainting,
        "outpainting" => EditOperation::Outpainting,
        "backgroundRemoval" => EditOperation::BackgroundRemoval,
        "backgroundReplace" => EditOperation::BackgroundReplace,
        "objectRemoval" => EditOperation::ObjectRemoval,
        "superResolution" => EditOperation::SuperResolution,
        "faceEnhancement" => EditOperation::FaceEnhancement,
        "colorization" => EditOperation::Colorization,
        "styleTransfer" => EditOperation::StyleTransfer,
        _ => return None,
    })
}

fn direction(name: Option<&str>) -> Direction {
    match name {
        Some("left") => Direction::Left,
        Some("right") => Direction::Right,
        Some("top") => Direction::Top,
        Some("bottom") => Direction::Bottom,
        _ => Direction::All,
    }
}

fn undecodable(field: &str) -> ToolError {
    ToolError::Provider(ProviderError::Permanent(format!(
        "the {field} could not be decoded"
    )))
}

/// An input image decoded within the input limits (the API checked the
/// header already; the stored bytes are decoded here with the same caps).
fn decode_input(field: &str, bytes: &[u8]) -> Result<image::DynamicImage, ToolError> {
    use unigen_core::images::{ImageLimitError, MAX_DECODE_ALLOC, decode_bounded};
    use unigen_core::params::edit::MAX_INPUT_SIDE;
    decode_bounded(bytes, MAX_INPUT_SIDE, MAX_DECODE_ALLOC).map_err(|err| match err {
        ImageLimitError::Undecodable => undecodable(field),
        too_large => ToolError::Provider(ProviderError::Permanent(format!(
            "the {field} is too large: {too_large}"
        ))),
    })
}

/// Largest side accepted from an upstream edit (a 4x super-resolution of the
/// largest input).
const UPSTREAM_MAX_SIDE: u32 = 4 * unigen_core::params::edit::MAX_INPUT_SIDE;

pub async fn run(
    context: &WorkerContext,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    let params: EditParams = params_of(job)?;
    let op = operation(&params.operation).ok_or_else(|| {
        ToolError::InvalidParams(format!("unknown operation {}", params.operation))
    })?;
    if let Some((model, client)) = super::media_client(context, job)? {
        super::retry_transient(|| context.local.simulate_conditions()).await?;
        return run_upstream_edit(context, job, &params, model, client.as_ref()).await;
    }
    super::simulate_local(context, job, semconv::output_type::IMAGE).await?;
    let image_bytes = required_input(context, &params.inputs, "image").await?;
    let mask_bytes = input(context, &params.inputs, "mask").await?;
    progress.report(10).await;
    let png = params.output_is_png();
    let (bytes, width, height) = blocking(move || {
        let image = decode_input("image", &image_bytes)?;
        let mask = match mask_bytes {
            Some(bytes) => Some(edit_mask(
                &decode_input("mask", &bytes)?,
                params.mask_from_alpha,
            )),
            None => None,
        };
        let spec = EditSpec {
            operation: op,
            prompt: params.prompt.as_deref(),
            strength: params.strength as f32,
            seed: params.seed,
            direction: direction(params.direction.as_deref()),
            expand_pixels: params.expand_pixels,
            new_background: params.new_background.as_deref(),
            scale: params.scale,
        };
        let mut result = edit::apply(&spec, &image, mask.as_ref())?;
        if let Some((w, h)) = params.size.as_deref().and_then(parse_size) {
            result = result.resize_exact(w, h, FilterType::Lanczos3);
        }
        let bytes = if png {
            edit::encode_png(&result)
        } else {
            edit::encode_jpeg(&result)
        };
        Ok((bytes, result.width(), result.height()))
    })
    .await?;
    let key = store_output(context, job, if png { "0.png" } else { "0.jpg" }, bytes).await?;
    Ok(ToolOutput {
        output: json!({ "images": [{ "file": key, "width": width, "height": height }] }),
        actual_credits: job.estimated_credits,
    })
}

/// The mask as the renderer reads it: white = edit. OpenAI's masks mark the
/// area to edit by transparency instead; one without any transparency is
/// read by its brightness.
fn edit_mask(mask: &image::DynamicImage, from_alpha: bool) -> image::GrayImage {
    if from_alpha && mask.color().has_alpha() {
        let rgba = mask.to_rgba8();
        if rgba.pixels().any(|p| p[3] < 255) {
            return image::GrayImage::from_fn(rgba.width(), rgba.height(), |x, y| {
                image::Luma([255 - rgba.get_pixel(x, y)[3]])
            });
        }
    }
    mask.to_luma8()
}

/// The edit on a Replicate or fal model: the parameters as the input.
async fn run_upstream_edit(
    context: &WorkerContext,
    job: &Job,
    params: &EditParams,
    model: &unigen_core::config::ModelEntry,
    client: &dyn unigen_providers::vendor::MediaUpstream,
) -> Result<ToolOutput, ToolError> {
    let mut body = json!({
        "operation": params.operation, "prompt": params.prompt, "strength": params.strength, "seed": params.seed,
        "direction": params.direction, "expand_pixels": params.expand_pixels,
        "new_background": params.new_background, "scale": params.scale,
    });
    for field in ["image", "mask"] {
        if let Some(uri) = super::input_data_uri(context, &params.inputs, field).await? {
            body[field] = json!(uri);
        }
    }
    let bytes = super::run_media(
        model,
        client,
        body,
        params.model_inputs.as_ref(),
        semconv::output_type::IMAGE,
    )
    .await?;
    let format = image::guess_format(&bytes).map_err(|_| undecodable("upstream result"))?;
    let decoded = unigen_core::images::decode_bounded(
        &bytes,
        UPSTREAM_MAX_SIDE,
        4 * unigen_core::images::MAX_DECODE_ALLOC,
    )
    .map_err(|_| undecodable("upstream result"))?;
    // JPEG and PNG are kept as they came; anything else is stored as PNG.
    let (name, bytes) = match format {
        image::ImageFormat::Jpeg => ("0.jpg", bytes),
        image::ImageFormat::Png => ("0.png", bytes),
        _ => ("0.png", edit::encode_png(&decoded)),
    };
    let key = store_output(context, job, name, bytes).await?;
    Ok(ToolOutput {
        output: json!({ "images": [{ "file": key, "width": decoded.width(), "height": decoded.height() }] }),
        actual_credits: job.estimated_credits,
    })
}

#[cfg(test)]
mod tests {
    use image::{DynamicImage, Rgba, RgbaImage};

    use super::edit_mask;

    #[test]
    fn openai_masks_edit_their_transparent_pixels() {
        // Opaque black, except a transparent (alpha 0) square to edit.
        let mask = RgbaImage::from_fn(8, 8, |x, y| {
            let hole = (2..6).contains(&x) && (2..6).contains(&y);
            Rgba([0, 0, 0, if hole { 0 } else { 255 }])
        });
        let mask = DynamicImage::ImageRgba8(mask);
        let openai = edit_mask(&mask, true);
        assert_eq!(
            (openai.get_pixel(3, 3)[0], openai.get_pixel(0, 0)[0]),
            (255, 0)
        );
        // Our own convention reads brightness: all black, nothing to edit.
        assert_eq!(edit_mask(&mask, false).get_pixel(3, 3)[0], 0);
        // A fully opaque mask is read by brightness under either convention.
        let white = DynamicImage::ImageRgba8(RgbaImage::from_pixel(4, 4, Rgba([255; 4])));
        assert_eq!(edit_mask(&white, true).get_pixel(1, 1)[0], 255);
    }
}
