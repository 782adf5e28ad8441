//! The local provider's procedural renderers: images, logos, image edits,
//! video frames, music and speech. Test models and classical algorithms, not
//! AI; deterministic from the seed, and every output a real file.

pub mod edit;
pub mod logo;
pub mod music;
pub mod render;
pub mod speech;
pub mod video;

use unigen_core::ProviderError;
use unigen_core::params::image::ImageParams;

use render::{RenderSpec, RenderStyle};

/// Image `index` (0-based) of a request, as PNG bytes of exactly
/// `params.width` x `params.height`. Each index gets its own seed so the
/// `n` images of a request differ.
pub async fn image(params: &ImageParams, index: u32) -> Result<Vec<u8>, ProviderError> {
    let params = params.clone();
    tokio::task::spawn_blocking(move || {
        let spec = RenderSpec {
            prompt: &params.prompt,
            negative_prompt: params.negative_prompt.as_deref(),
            seed: params.seed.wrapping_add(u64::from(index)),
            style: if params.style == "natural" {
                RenderStyle::Natural
            } else {
                RenderStyle::Vivid
            },
            width: params.width,
            height: params.height,
        };
        render::encode_png(&render::render(&spec))
    })
    .await
    .map_err(|e| ProviderError::Permanent(format!("image rendering crashed: {e}")))
}

/// Logo `index` of a legacy logo request, as PNG bytes.
pub async fn logo(params: &ImageParams, index: u32) -> Result<Vec<u8>, ProviderError> {
    let params = params.clone();
    tokio::task::spawn_blocking(move || {
        let logo = params.logo.as_ref().expect("called for logo requests");
        let spec = logo::LogoSpec {
            prompt: &params.prompt,
            style: &logo.style,
            industry: &logo.industry,
            color_scheme: logo.color_scheme.as_deref(),
            typography: logo.typography.as_deref(),
            mood: logo.mood.as_deref(),
            complexity: logo.complexity,
            negative_prompt: params.negative_prompt.as_deref(),
            seed: params.seed.wrapping_add(u64::from(index)),
            width: params.width,
            height: params.height,
        };
        render::encode_png(&logo::render(&spec))
    })
    .await
    .map_err(|e| ProviderError::Permanent(format!("logo rendering crashed: {e}")))
}
