//! The one fallback loop: a model's `upstream`, then each of its
//! `fallback_upstreams` in order ([`crate::Providers::in_order`]); any
//! failure moves on to the next.

use unigen_core::ProviderError;
use unigen_core::config::ModelEntry;

/// The first answer of `call` on `clients` (the model's upstreams, in
/// order). `Err(None)` when there is none; otherwise the last failure.
pub async fn in_order<C, T, F, Fut>(
    model: &ModelEntry,
    clients: Vec<(String, C)>,
    call: F,
) -> Result<T, Option<ProviderError>>
where
    F: Fn(C) -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    let mut last = None;
    for (name, client) in clients {
        match call(client).await {
            Ok(value) => return Ok(value),
            Err(err) => {
                tracing::warn!(model = %model.id, upstream = %name, error = %err, "upstream failed; trying the next");
                last = Some(err);
            }
        }
    }
    Err(last)
}
