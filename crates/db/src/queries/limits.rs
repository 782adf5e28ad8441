//! Request-rate and concurrency limits, kept in PostgreSQL so they hold
//! across every API process. Each check is one statement. API processes
//! take rate tokens and concurrency slots in blocks and count requests
//! against them in memory (`api::rate_limit`, `api::metering::slots`).

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Nullable, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::DbError;
use crate::prepared::PrepareOnce;

#[derive(QueryableByName)]
struct Tokens {
    #[diesel(sql_type = Integer)]
    granted: i32,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    tat: Option<DateTime<Utc>>,
}

/// What [`take_rate_tokens`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateGrant {
    /// This many tokens (at least one, at most the number wanted), and the
    /// key's rate state after taking them.
    Granted(u32, RateState),
    /// None left: retry after this long.
    Refused(std::time::Duration),
}

/// A key's cell-rate state: its theoretical arrival time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateState {
    tat: DateTime<Utc>,
    interval_us: i64,
}

impl RateState {
    /// The state of a key at `per_minute` whose arrival time is `tat`.
    pub fn new(tat: DateTime<Utc>, per_minute: i32) -> Self {
        Self {
            tat,
            interval_us: 60_000_000 / i64::from(per_minute.max(1)),
        }
    }

    /// Requests the key may still make at once.
    pub fn remaining(&self, now: DateTime<Utc>) -> u32 {
        let window = (now + chrono::Duration::seconds(60) - self.tat)
            .num_microseconds()
            .unwrap_or(0);
        (window / self.interval_us.max(1)).clamp(0, i64::from(u32::MAX)) as u32
    }

    /// Until the key's whole burst is available again.
    pub fn until_full(&self, now: DateTime<Utc>) -> std::time::Duration {
        (self.tat - now).to_std().unwrap_or_default()
    }
}

/// The generic cell rate algorithm (`unigen_take_rate_tokens`, one
/// statement): bursts up to `per_minute` requests, then one per
/// `60 s / per_minute`. Takes up to `wanted` tokens at once, so an API
/// process can admit requests from a block without a round trip each.
pub async fn take_rate_tokens(
    conn: &mut AsyncPgConnection,
    api_key_id: Uuid,
    per_minute: i32,
    wanted: u32,
) -> Result<RateGrant, DbError> {
    let interval_us = 60_000_000 / i64::from(per_minute.max(1));
    let row: Tokens =
        diesel::sql_query("SELECT granted, tat FROM unigen_take_rate_tokens($1, $2, $3)")
            .bind::<SqlUuid, _>(api_key_id)
            .bind::<BigInt, _>(interval_us)
            .bind::<Integer, _>(wanted.min(i32::MAX as u32) as i32)
            .prepared()
            .get_result(conn)
            .await?;
    if row.granted >= 1 {
        let state = RateState {
            tat: row.tat.unwrap_or_else(Utc::now),
            interval_us,
        };
        return Ok(RateGrant::Granted(row.granted as u32, state));
    }
    let wait = row.tat.map_or(std::time::Duration::from_secs(1), |tat| {
        let at = tat + chrono::Duration::microseconds(interval_us) - chrono::Duration::seconds(60);
        (at - Utc::now()).to_std().unwrap_or_default()
    });
    Ok(RateGrant::Refused(wait))
}

#[derive(QueryableByName)]
struct Slot {
    #[diesel(sql_type = Integer)]
    slot: i32,
}

/// Takes one of the organization's `limit` concurrency slots for `holder`
/// until `lease` passes (a crashed API process frees its slots that way).
/// `None`: all slots are taken.
pub async fn acquire_slot(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    limit: i32,
    holder: Uuid,
    lease: std::time::Duration,
) -> Result<Option<i32>, DbError> {
    // Slots are numbered 1..=limit and created when none is free (first use,
    // or a plan raised the limit); a lowered limit takes effect at once
    // because slots above it are never chosen.
    if let Some(slot) = take_free_slot(conn, org_id, limit, holder, lease).await? {
        return Ok(Some(slot));
    }
    // A concurrent request may be creating the same slots: its insert makes
    // ours wait, then do nothing; either way the slots exist afterwards.
    diesel::sql_query(
        "INSERT INTO concurrency_slots (org_id, slot)
         SELECT $1, n FROM generate_series(
             (SELECT COALESCE(max(slot), 0) + 1 FROM concurrency_slots WHERE org_id = $1), $2) AS n
         ON CONFLICT DO NOTHING",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<Integer, _>(limit)
    .prepared()
    .execute(conn)
    .await?;
    take_free_slot(conn, org_id, limit, holder, lease).await
}

async fn take_free_slot(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    limit: i32,
    holder: Uuid,
    lease: std::time::Duration,
) -> Result<Option<i32>, DbError> {
    let slot: Option<Slot> = diesel::sql_query(
        "UPDATE concurrency_slots SET holder = $3, expires_at = now() + make_interval(secs => $4)
          WHERE (org_id, slot) = (
                SELECT org_id, slot FROM concurrency_slots
                 WHERE org_id = $1 AND slot <= $2
                   AND (holder IS NULL OR expires_at < now())
                 ORDER BY slot
                 LIMIT 1
                 FOR UPDATE SKIP LOCKED)
          RETURNING slot",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<Integer, _>(limit)
    .bind::<SqlUuid, _>(holder)
    .bind::<diesel::sql_types::Double, _>(lease.as_secs_f64())
    .prepared()
    .get_result(conn)
    .await
    .optional()?;
    Ok(slot.map(|s| s.slot))
}

pub async fn release_slot(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    slot: i32,
    holder: Uuid,
) -> Result<(), DbError> {
    diesel::sql_query(
        "UPDATE concurrency_slots SET holder = NULL, expires_at = NULL
          WHERE org_id = $1 AND slot = $2 AND holder = $3",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<Integer, _>(slot)
    .bind::<SqlUuid, _>(holder)
    .prepared()
    .execute(conn)
    .await?;
    Ok(())
}

#[derive(QueryableByName)]
struct Leased {
    #[diesel(sql_type = Integer)]
    unigen_lease_slots: i32,
}

/// Leases up to `wanted` of the organization's free slots `1..=limit` to
/// `holder` (an API process) until `lease` passes; the holder renews them
/// while it lives ([`renew_slots`]). Empty: none is free.
pub async fn lease_slots(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    limit: i32,
    holder: Uuid,
    wanted: i32,
    lease: std::time::Duration,
) -> Result<Vec<i32>, DbError> {
    let rows: Vec<Leased> =
        diesel::sql_query("SELECT unigen_lease_slots FROM unigen_lease_slots($1, $2, $3, $4, $5)")
            .bind::<SqlUuid, _>(org_id)
            .bind::<Integer, _>(limit)
            .bind::<SqlUuid, _>(holder)
            .bind::<Integer, _>(wanted.max(1))
            .bind::<diesel::sql_types::Double, _>(lease.as_secs_f64())
            .prepared()
            .load(conn)
            .await?;
    Ok(rows.into_iter().map(|r| r.unigen_lease_slots).collect())
}

/// Frees slots of one organization that `holder` leased.
pub async fn release_slots(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    slots: &[i32],
    holder: Uuid,
) -> Result<(), DbError> {
    diesel::sql_query(
        "UPDATE concurrency_slots SET holder = NULL, expires_at = NULL
          WHERE org_id = $1 AND slot = ANY($2) AND holder = $3",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<diesel::sql_types::Array<Integer>, _>(slots)
    .bind::<SqlUuid, _>(holder)
    .prepared()
    .execute(conn)
    .await?;
    Ok(())
}

/// Extends the lease of slots `holder` still holds (`orgs[i]`, `slots[i]`);
/// answers those it still held.
pub async fn renew_slots(
    conn: &mut AsyncPgConnection,
    orgs: &[Uuid],
    slots: &[i32],
    holder: Uuid,
    lease: std::time::Duration,
) -> Result<Vec<(Uuid, i32)>, DbError> {
    #[derive(QueryableByName)]
    struct Renewed {
        #[diesel(sql_type = SqlUuid)]
        org_id: Uuid,
        #[diesel(sql_type = Integer)]
        slot: i32,
    }
    let rows: Vec<Renewed> = diesel::sql_query(
        "UPDATE concurrency_slots s SET expires_at = now() + make_interval(secs => $4)
           FROM unnest($1::uuid[], $2::int4[]) AS x(org_id, slot)
          WHERE s.org_id = x.org_id AND s.slot = x.slot AND s.holder = $3
         RETURNING s.org_id, s.slot",
    )
    .bind::<diesel::sql_types::Array<SqlUuid>, _>(orgs)
    .bind::<diesel::sql_types::Array<Integer>, _>(slots)
    .bind::<SqlUuid, _>(holder)
    .bind::<diesel::sql_types::Double, _>(lease.as_secs_f64())
    .prepared()
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.org_id, r.slot)).collect())
}
