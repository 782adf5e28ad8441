//! `POST /embeddings`: served by the API directly.

use actix_web::{HttpResponse, post, web};
use base64::Engine;
use serde_json::json;
use unigen_core::domain::ModelCategory;
use unigen_db::billing::{Charge, Estimate, embedding_credits, embedding_usage};
use unigen_providers::chat::EmbeddingRequest;

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
        (status = 200, description = "One embedding per input, in order. `input`: a string, strings, token ids or lists of token ids; the model's adapter serves it", body = crate::openapi::schemas::EmbeddingList),
        (status = 400, description = "`invalid_request`: an invalid field (`param` names it), an unknown model", body = ErrorBody),
        (status = 402, description = "`quota_exceeded`: the credits or the overage hard limit", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
        (status = 500, description = "`generation_failed`: the model failed; or an internal error", body = ErrorBody),
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
    let params = request.validate()?;
    let _slot = ConcurrencySlot::acquire(&state, &caller).await?;
    // Embeddings cost credits per 1,000 input tokens; they use no bucket.
    let estimate = Estimate {
        credits: embedding_credits(params.inputs.token_count(), model),
        bucket: None,
    };
    let reservation =
        SyncReservation::reserve(&state, &caller, "/v1/embeddings", &model.id, &estimate).await?;
    let embedded = match state.embeddings.embed(model, &params).await {
        Ok(embedded) => embedded,
        Err(err) => {
            reservation.release().await;
            return Err(ApiError::GenerationFailed(err.to_string()));
        }
    };
    let tokens = embedded.prompt_tokens;
    let data: Vec<_> = embedded
        .vectors
        .iter()
        .enumerate()
        .map(|(index, vector)| {
            let embedding = if params.base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(vector)
            };
            json!({ "object": "embedding", "index": index, "embedding": embedding })
        })
        .collect();
    // What the upstream counted (its tokenizer may differ from our estimate's).
    let charge = Charge {
        credits: embedding_credits(tokens, model),
        bucket_milli: 0,
    };
    let charged = reservation
        .settle(&charge, 1.0, (i64::from(tokens), 0), Vec::new())
        .await?;
    let credits_used = charged.credits;
    caller.charges.record(charged.credits, charged.account);
    Ok(HttpResponse::Ok().json(json!({
        "object": "list",
        "data": data,
        "model": model.id,
        "usage": embedding_usage(tokens, credits_used),
    })))
}
