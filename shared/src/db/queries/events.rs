//! The event outbox: written inside the transactions that change state.

use diesel::prelude::*;
use diesel::sql_types::{Jsonb, Text, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::db::DbError;
use crate::db::models::Event;
use crate::db::schema::events;

/// Records an event and, in the same statement (so the same transaction and
/// one round trip), a pending delivery for every enabled webhook of its
/// organization subscribed to its kind. Call `Notifier::events_recorded`
/// after the commit so delivery starts at once.
pub async fn insert(conn: &mut AsyncPgConnection, event: &Event) -> Result<(), DbError> {
    diesel::sql_query(
        "WITH event AS ( \
           INSERT INTO events (id, org_id, type, data, created_at) VALUES ($1, $2, $3, $4, $5) \
           RETURNING id, org_id, type) \
         INSERT INTO webhook_deliveries (id, webhook_id, event_id) \
         SELECT gen_random_uuid(), w.id, event.id FROM event \
           JOIN webhooks w ON w.org_id = event.org_id AND w.enabled AND event.type = ANY(w.events)",
    )
    .bind::<SqlUuid, _>(event.id)
    .bind::<SqlUuid, _>(event.org_id)
    .bind::<Text, _>(&event.kind)
    .bind::<Jsonb, _>(&event.data)
    .bind::<Timestamptz, _>(event.created_at)
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
