//! What the Responses routes (bridged, native, background, stored) share:
//! the endpoint's metering label, the stored response a
//! `previous_response_id` names, and a refused field as an error.
//! A leaf: it imports no other Responses module.

use unigen_db::queries::responses::StoredResponse;
use unigen_db::{DbError, queries};
use unigen_protocols::responses::Invalid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// The endpoint usage is recorded under.
pub const RESPONSES_ENDPOINT: &str = "/v1/responses";

/// The stored response `previous_response_id` names (none without one);
/// another organization's, or an expired one, is not found.
pub async fn continued_response(
    state: &AppState,
    caller: &Caller,
    previous: Option<&str>,
) -> Result<Option<StoredResponse>, ApiError> {
    let Some(previous) = previous else {
        return Ok(None);
    };
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let stored = queries::responses::find(&mut conn, caller.org_id, previous)
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "previous_response_id: response {previous} not found"
            ))
        })?;
    Ok(Some(stored))
}

/// A field the Responses bridge refused, as the error naming it.
pub fn invalid(err: Invalid) -> ApiError {
    ApiError::InvalidField {
        param: err.param,
        message: err.message,
    }
}
