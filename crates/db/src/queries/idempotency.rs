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

/// A record as a claim meets it: everything but the kept body, which is
/// read only for a retry it answers ([`stored_body`]).
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = idempotency_keys)]
pub struct IdempotencyRecord {
    pub fingerprint: Vec<u8>,
    pub state: String,
    pub status_code: Option<i16>,
    pub content_type: Option<String>,
    pub agent_run_id: Option<Uuid>,
    /// The job the claim created (written with the job), when it made one.
    pub job_id: Option<Uuid>,
    pub claim_id: Uuid,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// One claim of a key: completing or releasing the key matches it, so a
/// request whose abandoned claim was taken over touches nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimToken {
    pub key: String,
    pub claim_id: Uuid,
}

/// What claiming a key found.
#[derive(Debug)]
pub enum Claim {
    /// The key is this request's: run it.
    Claimed(ClaimToken),
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

/// What releasing a claim did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The key is free again.
    Freed,
    /// The claim created a job: the key now answers with that job.
    KeptForJob,
    /// The claim is no longer there (completed, expired, or taken over).
    NotHeld,
}

/// Claims `key` for a request with `fingerprint`. An expired or abandoned
/// record is replaced (once); a live one is returned for the caller to judge.
/// An abandoned claim that created a job is not replaced: it answers with
/// its job from then on.
pub async fn claim(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    key: &str,
    fingerprint: &[u8; 32],
) -> Result<Claim, DbError> {
    for _ in 0..2 {
        let now = Utc::now();
        let claim_id = Uuid::new_v4();
        let inserted = diesel::insert_into(idempotency_keys::table)
            .values((
                idempotency_keys::org_id.eq(org_id),
                idempotency_keys::idem_key.eq(key),
                idempotency_keys::fingerprint.eq(&fingerprint[..]),
                idempotency_keys::state.eq("in_flight"),
                idempotency_keys::created_at.eq(now),
                idempotency_keys::expires_at.eq(now + RETENTION),
                idempotency_keys::claim_id.eq(claim_id),
            ))
            .on_conflict((idempotency_keys::org_id, idempotency_keys::idem_key))
            .do_nothing()
            .execute(conn)
            .await?;
        if inserted == 1 {
            return Ok(Claim::Claimed(ClaimToken {
                key: key.to_owned(),
                claim_id,
            }));
        }
        let Some(record) = find(conn, org_id, key).await? else {
            // Deleted between the insert and the read: claim again.
            continue;
        };
        let abandoned = record.state == "in_flight" && record.created_at + ABANDONED_AFTER <= now;
        if record.expires_at > now && !abandoned {
            return Ok(Claim::Taken(record));
        }
        if record.expires_at > now && record.job_id.is_some() {
            // Its process died after the job was written: the key keeps it.
            let token = ClaimToken {
                key: key.to_owned(),
                claim_id: record.claim_id,
            };
            keep_for_job(conn, org_id, &token).await?;
            continue;
        }
        // Only the record that was read goes: a concurrent claimer that
        // replaced it first keeps its own.
        diesel::delete(
            idempotency_keys::table
                .filter(idempotency_keys::org_id.eq(org_id))
                .filter(idempotency_keys::idem_key.eq(key))
                .filter(idempotency_keys::claim_id.eq(record.claim_id)),
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

/// The body kept by the completed claim `claim_id` (`None`: none kept, or
/// the record has gone since it was read).
pub async fn stored_body(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    key: &str,
    claim_id: Uuid,
) -> Result<Option<Vec<u8>>, DbError> {
    Ok(idempotency_keys::table
        .filter(idempotency_keys::org_id.eq(org_id))
        .filter(idempotency_keys::idem_key.eq(key))
        .filter(idempotency_keys::claim_id.eq(claim_id))
        .filter(idempotency_keys::state.eq("completed"))
        .select(idempotency_keys::body)
        .first::<Option<Vec<u8>>>(conn)
        .await
        .optional()?
        .flatten())
}

/// Stores the response the key answers with from now on, if `claim` still
/// holds it; `false` if it does not (taken over, or settled already).
pub async fn complete(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    claim: &ClaimToken,
    response: &StoredResponse<'_>,
) -> Result<bool, DbError> {
    let updated = diesel::update(
        idempotency_keys::table
            .filter(idempotency_keys::org_id.eq(org_id))
            .filter(idempotency_keys::idem_key.eq(&claim.key))
            .filter(idempotency_keys::claim_id.eq(claim.claim_id))
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
    Ok(updated == 1)
}

/// A claim that created a job answers with it (`202`, rendered from the
/// job) from now on.
async fn keep_for_job(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    claim: &ClaimToken,
) -> Result<bool, DbError> {
    let updated = diesel::update(
        idempotency_keys::table
            .filter(idempotency_keys::org_id.eq(org_id))
            .filter(idempotency_keys::idem_key.eq(&claim.key))
            .filter(idempotency_keys::claim_id.eq(claim.claim_id))
            .filter(idempotency_keys::state.eq("in_flight"))
            .filter(idempotency_keys::job_id.is_not_null()),
    )
    .set((
        idempotency_keys::state.eq("completed"),
        idempotency_keys::status_code.eq(202i16),
        idempotency_keys::content_type.eq("application/json"),
        idempotency_keys::body.eq(None::<Vec<u8>>),
    ))
    .execute(conn)
    .await?;
    Ok(updated == 1)
}

/// Frees the key of a request that created nothing, so it may be retried;
/// a claim whose job was written meanwhile keeps the key for that job.
pub async fn release(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    claim: &ClaimToken,
) -> Result<Released, DbError> {
    // A submission still committing holds the row (it writes `job_id`):
    // the delete waits for it and then sees its job, so the second round
    // keeps the key for it.
    for _ in 0..2 {
        if keep_for_job(conn, org_id, claim).await? {
            return Ok(Released::KeptForJob);
        }
        let deleted = diesel::delete(
            idempotency_keys::table
                .filter(idempotency_keys::org_id.eq(org_id))
                .filter(idempotency_keys::idem_key.eq(&claim.key))
                .filter(idempotency_keys::claim_id.eq(claim.claim_id))
                .filter(idempotency_keys::state.eq("in_flight"))
                .filter(idempotency_keys::job_id.is_null()),
        )
        .execute(conn)
        .await?;
        if deleted == 1 {
            return Ok(Released::Freed);
        }
    }
    Ok(Released::NotHeld)
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
