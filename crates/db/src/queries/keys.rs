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

/// What [`insert_within_plan`] did.
pub enum KeyInsert {
    Created(Box<ApiKey>),
    /// The organization has as many active keys as its plan allows.
    LimitReached {
        plan: String,
        max: i32,
    },
}

/// Inserts a key unless the organization already has its plan's
/// `max_api_keys` active keys (not revoked, not expired): `POST /keys` and
/// the dashboard. The organization's row is locked, so concurrent creations
/// cannot both take the last place.
pub async fn insert_within_plan(
    conn: &mut AsyncPgConnection,
    new: &NewApiKey<'_>,
) -> Result<KeyInsert, DbError> {
    use diesel_async::AsyncConnection;
    #[derive(QueryableByName)]
    struct Limit {
        #[diesel(sql_type = diesel::sql_types::Text)]
        name: String,
        #[diesel(sql_type = diesel::sql_types::Integer)]
        max_api_keys: i32,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        active: i64,
    }
    conn.transaction::<_, DbError, _>(async |conn| {
        let limit: Limit = diesel::sql_query(
            "SELECT p.name, p.max_api_keys, \
                    (SELECT count(*) FROM api_keys k \
                      WHERE k.org_id = o.id AND k.revoked_at IS NULL \
                        AND (k.expires_at IS NULL OR k.expires_at > now())) AS active \
               FROM organizations o JOIN plans p ON p.code = o.plan_code \
              WHERE o.id = $1 FOR UPDATE OF o",
        )
        .bind::<diesel::sql_types::Uuid, _>(new.org_id)
        .get_result(conn)
        .await?;
        if limit.active >= i64::from(limit.max_api_keys) {
            return Ok(KeyInsert::LimitReached {
                plan: limit.name,
                max: limit.max_api_keys,
            });
        }
        Ok(KeyInsert::Created(Box::new(insert(conn, new).await?)))
    })
    .await
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

/// How a page of keys is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySort {
    /// Newest first.
    Created,
    /// Most recently used first; never used last.
    LastUsed,
    /// Soonest expiry first; keys that never expire last.
    Expiry,
}

impl KeySort {
    /// The ordering expression and direction (fixed text, never input).
    fn order(self) -> (&'static str, &'static str) {
        match self {
            KeySort::Created => ("k.created_at", "DESC"),
            KeySort::LastUsed => (
                "coalesce(k.last_used_at, '0001-01-01'::timestamptz)",
                "DESC",
            ),
            KeySort::Expiry => ("coalesce(k.expires_at, '9999-12-31'::timestamptz)", "ASC"),
        }
    }
}

/// What a page of the dashboard's key list asks for.
#[derive(Debug, Clone)]
pub struct KeyPageQuery<'a> {
    pub org_id: Uuid,
    /// Keys whose name contains this (case-insensitive); `None`: all.
    pub search: Option<&'a str>,
    pub sort: KeySort,
    /// The last key of the previous page (keyset pagination).
    pub after: Option<Uuid>,
    pub limit: i64,
    /// Credits are summed from this UTC day on (the billing period's start).
    pub period_start: chrono::NaiveDate,
}

/// A key as the dashboard lists it, with the credits its requests used in
/// the billing period.
#[derive(Debug, Clone, QueryableByName)]
pub struct KeyPageRow {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub id: Uuid,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub name: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub key_prefix: String,
    #[diesel(sql_type = diesel::sql_types::Array<diesel::sql_types::Text>)]
    pub scopes: Vec<String>,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    pub created_at: DateTime<Utc>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    pub last_used_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    pub expires_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub credits_in_period: i64,
}

/// `%`, `_` and `\` taken literally in a LIKE pattern.
fn like_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One page of the organization's active keys (revoked ones are gone;
/// expired ones are listed), with each key's credits in the period summed
/// from the daily usage rollups. One statement.
pub async fn page_for_org(
    conn: &mut AsyncPgConnection,
    query: &KeyPageQuery<'_>,
) -> Result<Vec<KeyPageRow>, DbError> {
    use diesel::sql_types::{BigInt, Date, Nullable, Text, Uuid as SqlUuid};
    let (expr, dir) = query.sort.order();
    let cmp = if dir == "DESC" { "<" } else { ">" };
    let sql = format!(
        "SELECT k.id, k.name, k.key_prefix, k.scopes, k.created_at, k.last_used_at, k.expires_at, \
                coalesce(u.credits, 0)::bigint AS credits_in_period \
           FROM api_keys k \
           LEFT JOIN (SELECT api_key_id, sum(credits) AS credits FROM usage_daily \
                       WHERE org_id = $1 AND day >= $2 AND api_key_id IS NOT NULL \
                       GROUP BY api_key_id) u ON u.api_key_id = k.id \
          WHERE k.org_id = $1 AND k.revoked_at IS NULL \
            AND ($3::text IS NULL OR k.name ILIKE '%' || $3 || '%') \
            AND ($4::uuid IS NULL OR ({expr}, k.id) {cmp} \
                 (SELECT {expr}, k.id FROM api_keys k WHERE k.id = $4 AND k.org_id = $1)) \
          ORDER BY {expr} {dir}, k.id {dir} \
          LIMIT $5"
    );
    Ok(diesel::sql_query(sql)
        .bind::<SqlUuid, _>(query.org_id)
        .bind::<Date, _>(query.period_start)
        .bind::<Nullable<Text>, _>(query.search.map(like_literal))
        .bind::<Nullable<SqlUuid>, _>(query.after)
        .bind::<BigInt, _>(query.limit)
        .load(conn)
        .await?)
}

/// One of the organization's active keys.
pub async fn find_active_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    key_id: Uuid,
) -> Result<Option<ApiKey>, DbError> {
    Ok(api_keys::table
        .filter(api_keys::id.eq(key_id))
        .filter(api_keys::org_id.eq(org_id))
        .filter(api_keys::revoked_at.is_null())
        .select(ApiKey::as_select())
        .first(conn)
        .await
        .optional()?)
}
