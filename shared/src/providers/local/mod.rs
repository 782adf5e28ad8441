//! The built-in offline provider: deterministic from the seed, real files.

pub mod audio;
pub mod chat;
pub mod edit;
pub mod logo;
pub mod music;
mod render;
pub mod speech;
pub mod video;

use std::time::Duration;

use crate::config::LocalProviderSettings;
use crate::jobs::image::ImageParams;
use crate::providers::ProviderError;

pub use render::{RenderSpec, RenderStyle};

/// Renders procedurally; can add latency and fail a share of calls (for load
/// and fault tests).
#[derive(Debug, Clone)]
pub struct LocalProvider {
    latency: Duration,
    failure_rate: f64,
}

impl LocalProvider {
    pub fn new(settings: &LocalProviderSettings) -> Self {
        Self {
            latency: Duration::from_millis(settings.latency_ms),
            failure_rate: settings.failure_rate,
        }
    }

    /// Image `index` (0-based) of a request, as PNG bytes of exactly
    /// `params.width` x `params.height`. Each index gets its own seed so the
    /// `n` images of a request differ.
    pub async fn generate_image(
        &self,
        params: &ImageParams,
        index: u32,
    ) -> Result<Vec<u8>, ProviderError> {
        self.simulate_conditions().await?;
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
    pub async fn generate_logo(
        &self,
        params: &ImageParams,
        index: u32,
    ) -> Result<Vec<u8>, ProviderError> {
        self.simulate_conditions().await?;
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

    /// Applies the configured latency and failure share; every local tool
    /// calls this once per provider call.
    pub async fn simulate_conditions(&self) -> Result<(), ProviderError> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        if self.failure_rate > 0.0 && unit_random() < self.failure_rate {
            return Err(ProviderError::Transient(
                "local provider: injected failure".into(),
            ));
        }
        Ok(())
    }
}

/// A uniform value in [0, 1) from the OS random source.
fn unit_random() -> f64 {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("OS random source");
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}
