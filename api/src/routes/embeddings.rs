//! `POST /embeddings`: served by the API directly.

use actix_web::{HttpResponse, post, web};
use base64::Engine;
use serde_json::json;
use unigen_core::domain::ModelCategory;
use unigen_db::billing::{Charge, Estimate};
use unigen_providers::chat::{EmbeddingRequest, count_tokens};
use unigen_providers::local::chat::{DEFAULT_EMBEDDING_DIMENSIONS, embed};

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::metering::{ConcurrencySlot, SyncReservation};
use crate::routes::params::json_body;
use crate::state::AppState;

/// Embeddings in the OpenAI format. Any valid key may embed.
#[utoipa::path(
    tag = "embeddings",
    request_body = EmbeddingRequest,
    responses(
        (status = 200, description = "`{object: list, data: [{object: embedding, index, embedding}], model, usage: {prompt_tokens, total_tokens}}`", body = Object),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
#[post("/embeddings")]
pub async fn create_embeddings(
    state: web::Data<AppState>,
    caller: Caller,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let request: EmbeddingRequest = json_body(&body)?;
    let model = state
        .catalogue
        .resolve(request.model.as_deref(), ModelCategory::Embedding)?;
    let (inputs, dimensions, as_base64) = request.validate()?;
    let dimensions = dimensions.unwrap_or(DEFAULT_EMBEDDING_DIMENSIONS);
    let _slot = ConcurrencySlot::acquire(&state, &caller).await?;
    // Embeddings cost credits per 1,000 input tokens; they use no bucket.
    let tokens: u32 = inputs.iter().map(|text| count_tokens(text)).sum();
    let credits = (i64::from(tokens) * model.credits_per_unit + 999) / 1000;
    let estimate = Estimate {
        credits,
        bucket: None,
    };
    let reservation =
        SyncReservation::reserve(&state, &caller, "/v1/embeddings", &model.id, &estimate).await?;
    if let Err(err) = state.local.simulate_conditions().await {
        reservation.release().await;
        return Err(ApiError::GenerationFailed(err.to_string()));
    }
    let data: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let vector = embed(text, dimensions);
            let embedding = if as_base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(vector)
            };
            json!({ "object": "embedding", "index": index, "embedding": embedding })
        })
        .collect();
    let charge = Charge {
        credits,
        bucket_milli: 0,
    };
    let tokens_used = (i64::from(tokens), 0);
    let settled = reservation
        .settle(&charge, 1.0, tokens_used, Vec::new())
        .await?;
    let credits_used = settled.as_ref().map_or(0, |s| s.credits);
    if let Some(settled) = settled {
        caller.charges.record(settled.credits, settled.account);
    }
    Ok(HttpResponse::Ok().json(json!({
        "object": "list",
        "data": data,
        "model": model.id,
        "usage": {
            "prompt_tokens": tokens,
            "total_tokens": tokens,
            "credits_used": credits_used,
            "credits_breakdown": { "tokens": credits_used },
        },
    })))
}
