//! Embeddings as a service: the model's adapter serves them (its upstreams,
//! with fallbacks, or the built-in feature-hashing test model).

use serde_json::json;
use unigen_core::ProviderError;
use unigen_core::config::ModelEntry;

use crate::chat::EmbeddingParams;
use crate::fallback;
use crate::local::LocalProvider;
use crate::local::chat::{DEFAULT_EMBEDDING_DIMENSIONS, embed};
use crate::registry::Providers;

/// Vectors in input order, and the input tokens they cost.
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    pub prompt_tokens: u32,
}

#[derive(Clone)]
pub struct EmbeddingService {
    providers: Providers,
    local: LocalProvider,
}

impl EmbeddingService {
    pub fn new(providers: Providers, local: LocalProvider) -> Self {
        Self { providers, local }
    }

    pub async fn embed(
        &self,
        model: &ModelEntry,
        params: &EmbeddingParams,
    ) -> Result<Embedded, ProviderError> {
        if model.adapter == "local" {
            self.local.simulate_conditions().await?;
            let dimensions = params.dimensions.unwrap_or(DEFAULT_EMBEDDING_DIMENSIONS);
            return Ok(Embedded {
                vectors: params
                    .inputs
                    .texts()
                    .iter()
                    .map(|text| embed(text, dimensions))
                    .collect(),
                prompt_tokens: params.inputs.token_count(),
            });
        }
        let takes_token_ids = crate::registry::adapter(&model.adapter).is_some_and(|a| a.token_ids);
        let input = if takes_token_ids {
            json!(params.sent)
        } else {
            json!(params.inputs.texts())
        };
        let mut body = json!({
            "model": model.upstream_model.as_deref().unwrap_or(&model.id),
            "input": input,
        });
        if let Some(dimensions) = params.dimensions {
            body["dimensions"] = json!(dimensions);
        }
        if let Some(user) = &params.user {
            body["user"] = json!(user);
        }
        let answer = fallback::in_order(model, self.providers.embeddings(model), |client| {
            let body = body.clone();
            async move { client.embed(body, params.inputs.len()).await }
        })
        .await
        .map_err(|last| {
            last.unwrap_or_else(|| {
                ProviderError::Permanent(format!(
                    "no upstream is configured for model `{}`",
                    model.id
                ))
            })
        })?;
        Ok(Embedded {
            vectors: answer.vectors,
            prompt_tokens: answer
                .prompt_tokens
                .unwrap_or_else(|| params.inputs.token_count()),
        })
    }
}
