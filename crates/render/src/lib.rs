//! The local provider's procedural renderers: images, logos, image edits,
//! video frames, music and speech. Test models and classical algorithms, not
//! AI; deterministic from the seed, and every output a real file.

pub mod edit;
pub mod logo;
pub mod music;
mod random;
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

#[cfg(test)]
mod tests {
    use crate::random::fnv1a;

    /// The same seed gives the same file: a refactor of the renderers must
    /// not change a pixel or a sample. (Update the values only for a
    /// deliberate change of what the renderers draw.)
    #[test]
    fn renderers_keep_their_outputs_for_a_seed() {
        let scene = crate::render::render(&crate::render::RenderSpec {
            prompt: "a lighthouse at dusk",
            negative_prompt: None,
            seed: 42,
            style: crate::render::RenderStyle::Vivid,
            width: 256,
            height: 192,
        });
        let logo = crate::logo::render(&crate::logo::LogoSpec {
            prompt: "Acme Rockets, launch vehicles",
            style: "tech",
            industry: "technology",
            color_scheme: Some("navy and orange"),
            typography: None,
            mood: None,
            complexity: 3,
            negative_prompt: None,
            seed: 7,
            width: 256,
            height: 256,
        });
        let samples = crate::music::compose(&crate::music::MusicSpec {
            prompt: "calm piano",
            negative_prompt: None,
            seed: 9,
            duration_seconds: 3.0,
            format: unigen_core::audio::AudioFormat::Wav,
            source: None,
        });
        let pcm: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
        assert_eq!(
            [fnv1a(scene.as_raw()), fnv1a(logo.as_raw()), fnv1a(&pcm)],
            [
                0x5a22_7ef9_00d2_2398,
                0x7d7b_8d91_9bb2_a74b,
                0x04ad_76a7_8838_7d39
            ]
        );
    }
}
