//! API keys: only hashes are stored; lookups are by hash.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::DbError;
use crate::models::{ApiKey, KeyAuthRow, NewApiKey};
use crate::schema::{api_keys, organizations, plans};

pub async fn insert(conn: &mut AsyncPgConnection, new: &NewApiKey<'_>) -> Result<ApiKey, DbError> {
    Ok(diesel::insert_into(api_keys::table)
        .values(new)
        .returning(ApiKey::as_returning())
        .get_result(conn)
        .await?)
}

/// The key with this hash and its organization, whatever its state: the
/// caller decides between revoked, expired and valid.
pub async fn find_for_auth(
    conn: &mut AsyncPgConnection,
    hash: &[u8; 32],
) -> Result<Option<KeyAuthRow>, DbError> {
    Ok(api_keys::table
        .inner_join(organizations::table.inner_join(plans::table))
        .filter(api_keys::key_hash.eq(&hash[..]))
        .select((
            api_keys::id,
            api_keys::org_id,
            api_keys::scopes,
            api_keys::expires_at,
            api_keys::revoked_at,
            organizations::status,
            organizations::plan_code,
            plans::rate_limit_per_minute,
            plans::concurrent_requests,
        ))
        .first(conn)
        .await
        .optional()?)
}

pub async fn list_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
) -> Result<Vec<ApiKey>, DbError> {
    Ok(api_keys::table
        .filter(api_keys::org_id.eq(org_id))
        .order(api_keys::created_at.desc())
        .select(ApiKey::as_select())
        .load(conn)
        .await?)
}

/// The organization's keys not revoked (expired ones included), newest first.
pub async fn list_active_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
) -> Result<Vec<ApiKey>, DbError> {
    Ok(api_keys::table
        .filter(api_keys::org_id.eq(org_id))
        .filter(api_keys::revoked_at.is_null())
        .order((api_keys::created_at.desc(), api_keys::id.desc()))
        .select(ApiKey::as_select())
        .load(conn)
        .await?)
}

/// Revokes one of the organization's keys; false when it has no active key
/// with this id (another organization's key included).
pub async fn revoke_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    key_id: Uuid,
    at: DateTime<Utc>,
) -> Result<bool, DbError> {
    let updated = diesel::update(api_keys::table)
        .filter(api_keys::id.eq(key_id))
        .filter(api_keys::org_id.eq(org_id))
        .filter(api_keys::revoked_at.is_null())
        .set(api_keys::revoked_at.eq(at))
        .execute(conn)
        .await?;
    Ok(updated == 1)
}

/// Records that these keys were used now, in one statement. Only
/// `last_used_at` changes, so the auth-change trigger stays silent (key
/// caches are kept).
pub async fn touch_last_used(conn: &mut AsyncPgConnection, ids: &[Uuid]) -> Result<(), DbError> {
    if ids.is_empty() {
        return Ok(());
    }
    diesel::update(api_keys::table)
        .filter(api_keys::id.eq_any(ids))
        .set(api_keys::last_used_at.eq(diesel::dsl::now))
        .execute(conn)
        .await?;
    Ok(())
}

/// Revokes a key; returns false when no active key has this id. Revocation
/// is permanent: a revoked key is never reactivated.
pub async fn revoke(
    conn: &mut AsyncPgConnection,
    key_id: Uuid,
    at: DateTime<Utc>,
) -> Result<bool, DbError> {
    let updated = diesel::update(api_keys::table)
        .filter(api_keys::id.eq(key_id))
        .filter(api_keys::revoked_at.is_null())
        .set(api_keys::revoked_at.eq(at))
        .execute(conn)
        .await?;
    Ok(updated == 1)
}
