//! The event outbox: written inside the transactions that change state.

use diesel::prelude::*;
use diesel::sql_types::{Text, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::db::DbError;
use crate::db::models::Event;
use crate::db::schema::events;

/// Records an event and, in the same transaction, a pending delivery for
/// every enabled webhook of its organization subscribed to its kind. Call
/// `Notifier::events_recorded` after the commit so delivery starts at once.
pub async fn insert(conn: &mut AsyncPgConnection, event: &Event) -> Result<(), DbError> {
    diesel::insert_into(events::table)
        .values(event)
        .execute(conn)
        .await?;
    diesel::sql_query(
        "INSERT INTO webhook_deliveries (id, webhook_id, event_id) \
         SELECT gen_random_uuid(), id, $1 FROM webhooks \
         WHERE org_id = $2 AND enabled AND $3 = ANY(events)",
    )
    .bind::<SqlUuid, _>(event.id)
    .bind::<SqlUuid, _>(event.org_id)
    .bind::<Text, _>(&event.kind)
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
