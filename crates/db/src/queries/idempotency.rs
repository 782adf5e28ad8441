//! Idempotency-Key records: claimed before a request runs, completed with
//! its response (or released when it created nothing), expired after 24 h.

use chrono::{DateTime, Duration, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::DbError;
use crate::prepared::PrepareOnce;
use crate::schema::idempotency_keys;

/// How long a record answers for its key.
pub const RETENTION: Duration = Duration::hours(24);
/// An `in_flight` record older than this belongs to a request whose process
/// died; a retry takes it over instead of meeting 409 for a day. Longer than
/// any request may run (the sync wait is at most a few minutes).
pub const ABANDONED_AFTER: Duration = Duration::minutes(15);

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = idempotency_keys)]
pub struct IdempotencyRecord {
    pub fingerprint: Vec<u8>,
    pub state: String,
    pub status_code: Option<i16>,
    pub content_type: Option<String>,
    pub body: Option<Vec<u8>>,
    pub agent_run_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// What claiming a key found.
#[derive(Debug)]
pub enum Claim {
    /// The key is this request's: run it.
    Claimed,
    /// The key is already taken (in flight, completed, or another body).
    Taken(IdempotencyRecord),
}

/// The stored response of a completed request.
pub struct StoredResponse<'a> {
    pub status_code: i16,
    pub content_type: Option<&'a str>,
    pub body: Option<&'a [u8]>,
    pub agent_run_id: Option<Uuid>,
}

/// Claims `key` for a request with `fingerprint`. An expired or abandoned
/// record is replaced (once); a live one is returned for the caller to judge.
pub async fn claim(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    key: &str,
    fingerprint: &[u8; 32],
) -> Result<Claim, DbError> {
    for _ in 0..2 {
        let now = Utc::now();
        let inserted = diesel::insert_into(idempotency_keys::table)
            .values((
                idempotency_keys::org_id.eq(org_id),
                idempotency_keys::idem_key.eq(key),
                idempotency_keys::fingerprint.eq(&fingerprint[..]),
                idempotency_keys::state.eq("in_flight"),
                idempotency_keys::created_at.eq(now),
                idempotency_keys::expires_at.eq(now + RETENTION),
            ))
            .on_conflict((idempotency_keys::org_id, idempotency_keys::idem_key))
            .do_nothing()
            .execute(conn)
            .await?;
        if inserted == 1 {
            return Ok(Claim::Claimed);
        }
        let Some(record) = find(conn, org_id, key).await? else {
            // Deleted between the insert and the read: claim again.
            continue;
        };
        let abandoned = record.state == "in_flight" && record.created_at + ABANDONED_AFTER <= now;
        if record.expires_at > now && !abandoned {
            return Ok(Claim::Taken(record));
        }
        // Only the record that was read goes: a concurrent claimer that
        // replaced it first keeps its own.
        diesel::delete(
            idempotency_keys::table
                .filter(idempotency_keys::org_id.eq(org_id))
                .filter(idempotency_keys::idem_key.eq(key))
                .filter(idempotency_keys::created_at.eq(record.created_at)),
        )
        .execute(conn)
        .await?;
    }
    // Two rounds lost to concurrent claimers: whoever holds it now wins.
    match find(conn, org_id, key).await? {
        Some(record) => Ok(Claim::Taken(record)),
        None => Err(DbError::Query(diesel::result::Error::NotFound)),
    }
}

pub async fn find(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    key: &str,
) -> Result<Option<IdempotencyRecord>, DbError> {
    Ok(idempotency_keys::table
        .filter(idempotency_keys::org_id.eq(org_id))
        .filter(idempotency_keys::idem_key.eq(key))
        .select(IdempotencyRecord::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Stores the response the key answers with from now on.
pub async fn complete(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    key: &str,
    response: &StoredResponse<'_>,
) -> Result<(), DbError> {
    diesel::update(
        idempotency_keys::table
            .filter(idempotency_keys::org_id.eq(org_id))
            .filter(idempotency_keys::idem_key.eq(key))
            .filter(idempotency_keys::state.eq("in_flight")),
    )
    .set((
        idempotency_keys::state.eq("completed"),
        idempotency_keys::status_code.eq(response.status_code),
        idempotency_keys::content_type.eq(response.content_type),
        idempotency_keys::body.eq(response.body),
        idempotency_keys::agent_run_id.eq(response.agent_run_id),
    ))
    .execute(conn)
    .await?;
    Ok(())
}

/// Frees the key of a request that created nothing, so it may be retried.
pub async fn release(conn: &mut AsyncPgConnection, org_id: Uuid, key: &str) -> Result<(), DbError> {
    diesel::delete(
        idempotency_keys::table
            .filter(idempotency_keys::org_id.eq(org_id))
            .filter(idempotency_keys::idem_key.eq(key))
            .filter(idempotency_keys::state.eq("in_flight")),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes up to `limit` expired records; returns how many went.
pub async fn delete_expired(conn: &mut AsyncPgConnection, limit: i64) -> Result<usize, DbError> {
    Ok(diesel::sql_query(
        "DELETE FROM idempotency_keys WHERE ctid IN \
         (SELECT ctid FROM idempotency_keys WHERE expires_at <= now() LIMIT $1)",
    )
    .bind::<diesel::sql_types::BigInt, _>(limit)
    .prepared()
    .execute(conn)
    .await?)
}
