//! Request-rate and concurrency limits, kept in PostgreSQL so they hold
//! across every API process. Each check is one statement.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Nullable, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::db::DbError;

#[derive(QueryableByName)]
struct Admitted {
    #[diesel(sql_type = Nullable<Timestamptz>)]
    tat: Option<DateTime<Utc>>,
}

/// One rate-limit decision: see [`take_rate_token`].
const RATE_TOKEN_SQL: &str = "WITH admitted AS (
     INSERT INTO rate_limits AS r (api_key_id, tat)
     VALUES ($1, clock_timestamp() + make_interval(secs => $2 / 1e6))
     ON CONFLICT (api_key_id) DO UPDATE
        SET tat = greatest(r.tat, clock_timestamp()) + make_interval(secs => $2 / 1e6)
      WHERE greatest(r.tat, clock_timestamp()) + make_interval(secs => $2 / 1e6)
            <= clock_timestamp() + interval '60 seconds'
     RETURNING NULL::timestamptz AS tat
 )
 SELECT tat FROM admitted
 UNION ALL
 SELECT r.tat FROM rate_limits r
  WHERE r.api_key_id = $1 AND NOT EXISTS (SELECT 1 FROM admitted)
 LIMIT 1";

/// The generic cell rate algorithm: each request moves the key's theoretical
/// arrival time (TAT) one emission interval (`60 s / limit`) forward; a
/// request is admitted while the TAT stays within a minute of now (a burst
/// of up to `limit` requests, then one per interval). `Ok(None)`: admitted;
/// `Ok(Some(wait))`: refused, retry after `wait`.
pub async fn take_rate_token(
    conn: &mut AsyncPgConnection,
    api_key_id: Uuid,
    per_minute: i32,
) -> Result<Option<std::time::Duration>, DbError> {
    let interval_us = 60_000_000 / i64::from(per_minute.max(1));
    // Admitted: the upsert returns the new TAT. Refused: the WHERE of the
    // conflict branch fails and the CTE falls back to the current TAT.
    // That fallback reads the statement's snapshot, which misses a row
    // another request inserted meanwhile (the first burst of a new key):
    // no row at all, then, and the statement is run again with a fresh
    // snapshot that has it.
    let mut attempts = 0;
    let row: Admitted = loop {
        attempts += 1;
        let row: Option<Admitted> = diesel::sql_query(RATE_TOKEN_SQL)
            .bind::<SqlUuid, _>(api_key_id)
            .bind::<BigInt, _>(interval_us)
            .get_result(conn)
            .await
            .optional()?;
        match row {
            Some(row) => break row,
            None if attempts < 3 => continue,
            None => return Err(diesel::result::Error::NotFound.into()),
        }
    };
    Ok(row.tat.map(|tat| {
        // Admission needs tat + interval <= now + 60 s.
        let at = tat + chrono::Duration::microseconds(interval_us) - chrono::Duration::seconds(60);
        (at - Utc::now()).to_std().unwrap_or_default()
    }))
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
    .execute(conn)
    .await?;
    Ok(())
}
