//! Bearer-key authentication as an extractor, and scope checks.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};
use chrono::Utc;
use unigen_core::domain::{Scope, hash_key, looks_like_key};
use unigen_db::models::KeyAuthRow;
use unigen_db::queries;
use uuid::Uuid;

use crate::charge_slot::ChargeSlot;
use crate::effects::Effects;
use crate::error::ApiError;
use crate::rate_limit::Admission;
use crate::state::AppState;

/// The caller, authenticated by `Authorization: Bearer sk_...`.
#[derive(Debug, Clone)]
pub struct Caller {
    pub key_id: Uuid,
    pub org_id: Uuid,
    pub scopes: Vec<Scope>,
    /// The plan's `concurrent_requests`.
    pub concurrent_requests: i32,
    /// The key's own expiry: no key it creates outlives it.
    pub key_expires_at: Option<chrono::DateTime<Utc>>,
    /// The key's hash: a long-lived response (a job event stream) checks
    /// the key again with it.
    pub key_hash: [u8; 32],
    /// Where a handler records what the request was charged (for headers).
    pub charges: ChargeSlot,
    /// Where a handler records what it created (for `Idempotency-Key`).
    pub effects: Effects,
}

impl Caller {
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.scopes.contains(&scope) {
            Ok(())
        } else {
            Err(ApiError::MissingScope(scope.as_str()))
        }
    }

    /// Passes with any one of `scopes`; the error names the first.
    pub fn require_any(&self, scopes: &[Scope]) -> Result<(), ApiError> {
        if scopes.iter().any(|s| self.scopes.contains(s)) {
            Ok(())
        } else {
            Err(ApiError::MissingScope(scopes[0].as_str()))
        }
    }
}

/// The paths of Anthropic's Messages API, whose SDKs send the key in
/// `x-api-key` rather than `Authorization: Bearer`.
const X_API_KEY_PATHS: [&str; 4] = [
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/api/v1/messages",
    "/api/v1/messages/count_tokens",
];

/// The key of `Authorization: Bearer`, or on the Messages API's paths of
/// `x-api-key`.
fn api_key(req: &HttpRequest) -> Option<&str> {
    bearer_token(req).or_else(|| {
        if !X_API_KEY_PATHS.contains(&req.path()) {
            return None;
        }
        req.headers().get("x-api-key")?.to_str().ok().map(str::trim)
    })
}

fn bearer_token(req: &HttpRequest) -> Option<&str> {
    let value = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The key with this hash, if it may be used now (through the key cache):
/// not revoked, not expired, its organization active.
pub async fn valid_key(state: &AppState, hash: &[u8; 32]) -> Result<KeyAuthRow, ApiError> {
    let row = match state.keys.get(hash) {
        Some(row) => row,
        None => {
            let ticket = state.keys.ticket();
            let mut conn = state.pool.get().await.map_err(unigen_db::DbError::from)?;
            let row = queries::keys::find_for_auth(&mut conn, hash)
                .await?
                .ok_or(ApiError::InvalidKey)?;
            state.keys.put(*hash, row.clone(), ticket);
            row
        }
    };
    if row.revoked_at.is_some() {
        return Err(ApiError::InvalidKey);
    }
    if row.expires_at.is_some_and(|at| at <= Utc::now()) {
        return Err(ApiError::KeyExpired);
    }
    if row.org_status != "active" {
        return Err(ApiError::OrgSuspended);
    }
    Ok(row)
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        // Already authenticated (and counted against the rate) by the
        // idempotency middleware.
        if let Some(caller) = req.extensions().get::<Caller>().cloned() {
            return Box::pin(async move { Ok(caller) });
        }
        let token = api_key(req).map(str::to_owned);
        let state = req.app_data::<web::Data<AppState>>().cloned();
        let charges = req
            .extensions()
            .get::<ChargeSlot>()
            .cloned()
            .unwrap_or_default();
        // The rate status goes on the request, for the response's headers.
        let request = req.clone();
        Box::pin(async move {
            let state =
                state.ok_or_else(|| ApiError::internal(anyhow::anyhow!("state missing")))?;
            let token = token
                .filter(|t| looks_like_key(t))
                .ok_or(ApiError::InvalidKey)?;
            let hash = hash_key(&token);
            let row = valid_key(&state, &hash).await?;
            // Unknown names (a scope removed in a later version) grant nothing.
            let scopes = row.scopes.iter().filter_map(|s| s.parse().ok()).collect();
            // A key's own rate first, when one is set (so a key over it
            // spends nothing of its organization's).
            let per_key = state.limits.key_rate_per_minute;
            if per_key > 0
                && let Admission::Refused { wait, status } =
                    state.rate.admit(&state.pool, row.key_id, per_key).await?
            {
                request.extensions_mut().insert(status);
                return Err(ApiError::RateLimited {
                    message: "Too many requests: this key's rate limit was reached",
                    retry_after_seconds: wait.as_secs_f64().ceil().max(1.0) as u64,
                });
            }
            // Every authenticated request counts against the organization's
            // rate: the plan's, however many keys it mints.
            let admission = state
                .rate
                .admit(&state.pool, row.org_id, row.rate_limit_per_minute)
                .await?;
            match admission {
                Admission::Admitted(status) => {
                    request.extensions_mut().insert(status);
                    state.keys.record_use(row.key_id);
                }
                Admission::Refused { wait, status } => {
                    request.extensions_mut().insert(status);
                    return Err(ApiError::RateLimited {
                        message: "Too many requests: the plan's rate limit was reached",
                        retry_after_seconds: wait.as_secs_f64().ceil().max(1.0) as u64,
                    });
                }
            }
            crate::trace_context::record_caller(&request, row.org_id, row.key_id);
            Ok(Caller {
                key_id: row.key_id,
                org_id: row.org_id,
                scopes,
                concurrent_requests: row.concurrent_requests,
                key_expires_at: row.expires_at,
                key_hash: hash,
                charges,
                effects: Effects::default(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn bearer_tokens_are_read_case_insensitively_and_other_schemes_ignored() {
        let req = TestRequest::default()
            .insert_header(("Authorization", "Bearer sk_abc"))
            .to_http_request();
        assert_eq!(bearer_token(&req), Some("sk_abc"));
        let req = TestRequest::default()
            .insert_header(("Authorization", "bearer  sk_abc "))
            .to_http_request();
        assert_eq!(bearer_token(&req), Some("sk_abc"));
        let req = TestRequest::default()
            .insert_header(("Authorization", "Basic dXNlcg=="))
            .to_http_request();
        assert_eq!(bearer_token(&req), None);
        assert_eq!(
            bearer_token(&TestRequest::default().to_http_request()),
            None
        );
    }

    #[test]
    fn x_api_key_is_read_on_the_messages_paths_only() {
        let with_key = |path: &str| {
            TestRequest::post()
                .uri(path)
                .insert_header(("x-api-key", "sk_abc"))
                .to_http_request()
        };
        assert_eq!(api_key(&with_key("/v1/messages")), Some("sk_abc"));
        assert_eq!(
            api_key(&with_key("/api/v1/messages/count_tokens")),
            Some("sk_abc")
        );
        assert_eq!(api_key(&with_key("/api/v1/chat/completions")), None);
        let both = TestRequest::post()
            .uri("/v1/messages")
            .insert_header(("x-api-key", "sk_other"))
            .insert_header(("Authorization", "Bearer sk_abc"))
            .to_http_request();
        assert_eq!(api_key(&both), Some("sk_abc"), "Bearer wins");
    }

    #[test]
    fn scope_checks_name_the_missing_scope() {
        let caller = Caller {
            key_id: Uuid::nil(),
            org_id: Uuid::nil(),
            scopes: vec![Scope::Usage],
            concurrent_requests: 1,
            key_expires_at: None,
            key_hash: [0; 32],
            charges: ChargeSlot::default(),
            effects: Effects::default(),
        };
        assert!(caller.require_any(&[Scope::Jobs, Scope::Usage]).is_ok());
        let err = caller.require(Scope::Image).unwrap_err();
        assert_eq!(
            err.to_string(),
            "API key does not have required scope: image"
        );
    }
}
