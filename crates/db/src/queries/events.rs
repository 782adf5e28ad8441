//! The event outbox: written inside the transactions that change state.

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Jsonb, Text, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::DbError;
use crate::models::Event;
use crate::prepared::PrepareOnce;
use crate::schema::events;

/// Records an event and, in the same statement (so the same transaction and
/// one round trip), a pending delivery for every enabled webhook of its
/// organization subscribed to its kind. Call `Notifier::events_recorded`
/// after the commit so delivery starts at once.
pub async fn insert(conn: &mut AsyncPgConnection, event: &Event) -> Result<(), DbError> {
    // `unigen_record_event` (migration 2026-11-22-090000_billing_functions)
    // is the one definition: billing events recorded in SQL use it too.
    diesel::sql_query("SELECT unigen_record_event($1, $2, $3, $4, $5)")
        .bind::<SqlUuid, _>(event.id)
        .bind::<SqlUuid, _>(event.org_id)
        .bind::<Text, _>(&event.kind)
        .bind::<Jsonb, _>(&event.data)
        .bind::<Timestamptz, _>(event.created_at)
        .prepared()
        .execute(conn)
        .await?;
    Ok(())
}

/// [`insert`] for many events in one statement (one round trip).
pub async fn insert_many(conn: &mut AsyncPgConnection, events: &[Event]) -> Result<(), DbError> {
    if events.is_empty() {
        return Ok(());
    }
    diesel::sql_query(
        "SELECT unigen_record_event(e.id, e.org_id, e.kind, e.data, e.at) \
           FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::jsonb[], $5::timestamptz[]) \
             AS e(id, org_id, kind, data, at)",
    )
    .bind::<Array<SqlUuid>, _>(events.iter().map(|e| e.id).collect::<Vec<_>>())
    .bind::<Array<SqlUuid>, _>(events.iter().map(|e| e.org_id).collect::<Vec<_>>())
    .bind::<Array<Text>, _>(events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>())
    .bind::<Array<Jsonb>, _>(events.iter().map(|e| &e.data).collect::<Vec<_>>())
    .bind::<Array<Timestamptz>, _>(events.iter().map(|e| e.created_at).collect::<Vec<_>>())
    .prepared()
    .execute(conn)
    .await?;
    Ok(())
}

/// An organization's events, oldest first.
pub async fn list_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
) -> Result<Vec<Event>, DbError> {
    Ok(events::table
        .filter(events::org_id.eq(org_id))
        .order((events::created_at.asc(), events::id.asc()))
        .select(Event::as_select())
        .load(conn)
        .await?)
}

/// Deletes up to `limit` events recorded more than `retention` ago, oldest
/// first, with their deliveries and attempts (cascade); an event with a
/// delivery still pending is kept until it is delivered or fails.
pub async fn delete_expired(
    conn: &mut AsyncPgConnection,
    retention: std::time::Duration,
    limit: i64,
) -> Result<usize, DbError> {
    Ok(diesel::sql_query(
        "DELETE FROM events WHERE id IN ( \
             SELECT e.id FROM events e \
              WHERE e.created_at < now() - make_interval(secs => $1) \
                AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d \
                                 WHERE d.event_id = e.id AND d.status = 'pending') \
              ORDER BY e.created_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
    )
    .bind::<BigInt, _>(retention.as_secs() as i64)
    .bind::<BigInt, _>(limit)
    .prepared()
    .execute(conn)
    .await?)
}
