//! The one fallback loop: a model's `upstream`, then each of its
//! `fallback_upstreams` in order; any failure moves on to the next.

use std::collections::HashMap;

use unigen_core::ProviderError;
use unigen_core::config::ModelEntry;

use crate::openai::OpenAiClient;

/// The first answer of `call` on the model's upstreams, in order. `Err(None)`
/// when the model names no configured upstream; otherwise the last failure.
pub async fn in_order<T, F, Fut>(
    upstreams: &HashMap<String, OpenAiClient>,
    model: &ModelEntry,
    call: F,
) -> Result<T, Option<ProviderError>>
where
    F: Fn(OpenAiClient) -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    let mut last = None;
    for name in model.upstream.iter().chain(&model.fallback_upstreams) {
        let Some(client) = upstreams.get(name) else {
            continue;
        };
        match call(client.clone()).await {
            Ok(value) => return Ok(value),
            Err(err) => {
                tracing::warn!(model = %model.id, upstream = %name, error = %err, "upstream failed; trying the next");
                last = Some(err);
            }
        }
    }
    Err(last)
}
