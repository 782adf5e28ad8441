//! The built-in offline provider: its test chat and embedding models, and the
//! latency and failures it injects. Its media renderers are `unigen-render`.

pub mod answer;
pub mod chat;
mod schema_instance;

use std::time::Duration;

use unigen_core::ProviderError;
use unigen_core::config::LocalProviderSettings;

/// Can add latency and fail a share of calls (for load and fault tests).
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
