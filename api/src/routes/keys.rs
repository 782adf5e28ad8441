//! Keys API: an organization creates, lists and revokes its own API keys
//! (scope `keys`). Keys are made as the operator CLI makes them (`sk_` + 64
//! hex characters from the OS random source); only their SHA-256 hash is
//! stored, and the value is answered once, at creation.

use actix_web::{HttpResponse, delete, get, post, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use unigen_core::ValidationError;
use unigen_core::domain::key_rules::{self, KeyRequest, ValidKey};
use unigen_core::domain::{ApiKeyMaterial, Scope};
use unigen_db::models::{ApiKey, NewApiKey};
use unigen_db::queries::keys::KeyInsert;
use unigen_db::{DbError, queries};
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::{json_body, not_found, path_id};
use crate::state::AppState;

const KIND: &str = "key";

/// Body of `POST /keys`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct KeyCreateRequest {
    /// A label, 1 to 100 characters.
    #[schema(min_length = 1, max_length = 100, example = "ci pipeline")]
    pub name: Option<String>,
    /// Scope names (`chat`, `image`, `image_edit`, `video`, `music`, `tts`,
    /// `stt`, `usage`, `jobs`, `agents`, `webhooks`, `keys`), or `all`.
    /// Each must be held by the calling key.
    #[schema(min_items = 1, example = json!(["image", "jobs"]))]
    pub scopes: Option<Vec<String>>,
    /// Optional expiry, in the future: an ISO 8601 date-time
    /// (`2027-01-31T12:00:00Z`) or a date (midnight UTC). No later than the
    /// calling key's own expiry, which a key created by an expiring key
    /// takes when it names none.
    #[schema(example = "2027-01-31T00:00:00Z")]
    pub expires_at: Option<String>,
}

/// An API key as listed: never its value or its hash.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyView {
    pub id: Uuid,
    pub name: String,
    /// `sk_` and the value's first 6 hex characters.
    #[schema(example = "sk_3f9a1c")]
    pub prefix: String,
    pub scopes: Vec<String>,
    pub created_at: DateTime<Utc>,
    /// When the key last authenticated a request (about a minute's precision); null if never.
    pub last_used_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Who created the key; null for a key made by the operator.
    pub created_by: Option<KeyCreator>,
}

/// The creator of a key: another API key (`POST /keys`) or a dashboard member.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct KeyCreator {
    #[serde(rename = "type")]
    pub kind: KeyCreatorKind,
    /// The creating key's id, or the member's.
    pub id: Uuid,
}

#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum KeyCreatorKind {
    Key,
    Member,
}

impl KeyCreator {
    fn of(key: &ApiKey) -> Option<Self> {
        match (key.created_by_key, key.created_by_member) {
            (Some(id), _) => Some(Self {
                kind: KeyCreatorKind::Key,
                id,
            }),
            (None, Some(id)) => Some(Self {
                kind: KeyCreatorKind::Member,
                id,
            }),
            (None, None) => None,
        }
    }
}

impl From<&ApiKey> for KeyView {
    fn from(key: &ApiKey) -> Self {
        Self {
            id: key.id,
            name: key.name.clone(),
            prefix: key.key_prefix.clone(),
            scopes: key.scopes.clone(),
            created_at: key.created_at,
            last_used_at: key.last_used_at,
            expires_at: key.expires_at,
            created_by: KeyCreator::of(key),
        }
    }
}

/// A key just created, with its value: shown this once, never again.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CreatedKey {
    pub id: Uuid,
    pub name: String,
    pub prefix: String,
    pub scopes: Vec<String>,
    pub created_at: DateTime<Utc>,
    /// Always null at creation.
    pub last_used_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    /// The calling key.
    pub created_by: Option<KeyCreator>,
    /// The key's value (`sk_` + 64 hex characters). Store it now: only its
    /// hash is kept, so it cannot be shown again.
    #[schema(pattern = "^sk_[0-9a-f]{64}$")]
    pub key: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct KeyList {
    pub keys: Vec<KeyView>,
}

impl KeyCreateRequest {
    /// The shared key rules (`unigen_core::domain::key_rules`).
    fn validate(
        &self,
        now: DateTime<Utc>,
        granter_expires_at: Option<DateTime<Utc>>,
    ) -> Result<ValidKey, ValidationError> {
        KeyRequest {
            name: self.name.as_deref(),
            scopes: self.scopes.as_deref(),
            expires_at: self.expires_at.as_deref(),
            granter_expires_at,
        }
        .validate(now)
    }
}

/// Create a key for the caller's organization; its value is answered once.
#[utoipa::path(
    tag = "keys",
    request_body = KeyCreateRequest,
    responses(
        (status = 201, description = "The key, with its value in `key` (shown only this once)", body = CreatedKey),
        (status = 400, description = "`name` empty or over 100 characters, `scopes` empty or naming an unknown scope, or `expires_at` malformed, not in the future, or later than the calling key's own expiry (`param` names the field)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 402, description = "`limit_reached`: the organization has as many active keys as its plan allows (Free 3, Pro 20, Business 100)", body = ErrorBody),
        (status = 403, description = "`API key does not have required scope: <scope>`: the caller lacks `keys`, or a scope it asked to grant", body = ErrorBody),
    ),
    security(("bearer" = ["keys"]))
)]
#[post("/keys")]
pub async fn create_key(
    state: web::Data<AppState>,
    caller: Caller,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Keys)?;
    let request: KeyCreateRequest = json_body(&body)?;
    let new = request.validate(Utc::now(), caller.key_expires_at)?;
    // No key grants more than its creator holds.
    if let Some(scope) = key_rules::first_ungranted(&new.scopes, &caller.scopes) {
        caller.require(scope)?;
    }
    let material = ApiKeyMaterial::generate().map_err(ApiError::internal)?;
    let inserted = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::keys::insert_within_plan(
            &mut conn,
            &NewApiKey {
                id: Uuid::now_v7(),
                org_id: caller.org_id,
                name: &new.name,
                key_hash: &material.hash,
                key_prefix: &material.display_prefix,
                scopes: new.scope_names(),
                expires_at: new.expires_at,
                created_by_key: Some(caller.key_id),
                created_by_member: None,
            },
        )
        .await?
    };
    let key = match inserted {
        KeyInsert::Created(key) => key,
        KeyInsert::LimitReached { plan, max } => {
            return Err(ApiError::LimitReached(key_rules::limit_message(&plan, max)));
        }
    };
    let view = KeyView::from(&*key);
    // An Idempotency-Key replay answers the same fields without the value.
    caller
        .effects
        .replay_with(|| serde_json::to_vec(&view).ok().map(Into::into));
    Ok(HttpResponse::Created().json(CreatedKey {
        id: view.id,
        name: view.name,
        prefix: view.prefix,
        scopes: view.scopes,
        created_at: view.created_at,
        last_used_at: view.last_used_at,
        expires_at: view.expires_at,
        created_by: view.created_by,
        key: material.plaintext,
    }))
}

/// The organization's keys that are not revoked (expired ones included), newest first.
#[utoipa::path(
    tag = "keys",
    responses(
        (status = 200, body = KeyList),
        (status = 401, body = ErrorBody),
        (status = 403, description = "API key does not have required scope: keys", body = ErrorBody),
    ),
    security(("bearer" = ["keys"]))
)]
#[get("/keys")]
pub async fn list_keys(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Keys)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let keys = queries::keys::list_active_for_org(&mut conn, caller.org_id).await?;
    Ok(HttpResponse::Ok().json(KeyList {
        keys: keys.iter().map(KeyView::from).collect(),
    }))
}

/// Revoke a key, immediately (in every API process) and permanently. The
/// calling key may revoke itself: this request succeeds, the next fails.
#[utoipa::path(
    tag = "keys",
    params(("id" = String, Path, description = "Key id")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 401, body = ErrorBody),
        (status = 403, description = "API key does not have required scope: keys", body = ErrorBody),
        (status = 404, description = "No active key with this id in the organization (another organization's key or an already revoked one included)", body = ErrorBody),
    ),
    security(("bearer" = ["keys"]))
)]
#[delete("/keys/{id}")]
pub async fn delete_key(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Keys)?;
    let id = path_id(KIND, &path)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    // The update's trigger notifies every API process, which drops this
    // key (and only it) from its cache.
    if !queries::keys::revoke_for_org(&mut conn, caller.org_id, id, Utc::now()).await? {
        return Err(not_found(KIND, &path));
    }
    // This process too, without waiting for the notification's round trip.
    state.keys.evict(id);
    Ok(HttpResponse::NoContent().finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    // The rules themselves are tested in `unigen_core::domain::key_rules`.
    #[test]
    fn creation_requests_go_through_the_shared_key_rules() {
        let request = KeyCreateRequest {
            name: Some("ci".into()),
            scopes: Some(vec!["image".into(), "jobs".into()]),
            expires_at: Some("2999-01-02".into()),
        };
        let key = request.validate(Utc::now(), None).unwrap();
        assert_eq!(key.scopes, vec![Scope::Image, Scope::Jobs]);
        let missing = KeyCreateRequest {
            name: None,
            scopes: None,
            expires_at: None,
        };
        assert_eq!(
            missing.validate(Utc::now(), None).unwrap_err().field,
            "name"
        );
    }
}
