use std::collections::HashMap;

use actix_web::http::header;
use actix_web::{HttpResponse, get, web};
use chrono::Utc;

use crate::error::ApiError;
use crate::state::AppState;

/// Serves a stored output file under a signed, expiring URL. The signature is
/// the authorization: these links are handed to browsers and other tools.
#[get("/files/{key}*")]
pub async fn get_file(
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    let key = path.into_inner();
    let expires = query.get("expires").and_then(|v| v.parse::<i64>().ok());
    let signature = query.get("sig");
    let now = Utc::now().timestamp();
    let valid = match (expires, signature) {
        (Some(expires), Some(sig)) => state.signer.verify(&key, expires, sig, now),
        _ => false,
    };
    if !valid {
        // Same answer for a bad signature, an expired link and a missing file
        // with a bad signature: nothing about the store leaks.
        return Err(ApiError::NotFound("file not found or link expired".into()));
    }
    let bytes = state
        .store
        .get(&key)
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::NotFound("file not found or link expired".into()))?;
    let content_type = mime_guess::from_path(&key).first_or_octet_stream();
    let max_age = (expires.unwrap_or(now) - now).max(0);
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, content_type.as_ref()))
        .insert_header((header::CACHE_CONTROL, format!("private, max-age={max_age}")))
        .body(bytes))
}
