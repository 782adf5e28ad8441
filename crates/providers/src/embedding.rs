//! Embeddings as a service: the model's adapter serves them (its upstreams,
//! with fallbacks, or the built-in feature-hashing test model).

use serde_json::json;
use tracing::Instrument;
use unigen_core::ProviderError;
use unigen_core::config::ModelEntry;
use unigen_core::telemetry::metrics::{GenAiLabels, Timed};
use unigen_core::telemetry::semconv::operation::EMBEDDINGS;
use unigen_core::telemetry::spans;

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
            // The in-process test model: one GenAI span, no network call.
            let span = fallback::gen_ai_span(model, EMBEDDINGS, "", false, None);
            let timed = Timed::start(GenAiLabels::new(EMBEDDINGS, &model.adapter, &model.id));
            if let Err(err) = self
                .local
                .simulate_conditions()
                .instrument(span.clone())
                .await
            {
                timed.finish(spans::provider_error_type(&err));
                spans::fail(&span, spans::provider_error_type(&err));
                return Err(err);
            }
            let tokens = i64::from(params.inputs.token_count());
            timed.labels().tokens(Some(tokens as u64), None);
            timed.finish("");
            spans::gen_ai_response(
                &span,
                Some(model.upstream_model.as_deref().unwrap_or(&model.id)),
                None,
                Some(tokens),
                None,
            );
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
        let traced = fallback::Traced {
            operation: EMBEDDINGS,
            output_type: "",
            stream: false,
            providers: &self.providers,
        };
        let answer = fallback::in_order_traced(
            model,
            self.providers.embeddings(model),
            &traced,
            |client| {
                let body = body.clone();
                async move { client.embed(body, params.inputs.len()).await }
            },
            |attempt, answer| {
                let tokens = answer
                    .prompt_tokens
                    .unwrap_or_else(|| params.inputs.token_count());
                attempt.tokens(Some(u64::from(tokens)), None);
                spans::gen_ai_response(&attempt.span, None, None, Some(i64::from(tokens)), None);
                answer
            },
        )
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
