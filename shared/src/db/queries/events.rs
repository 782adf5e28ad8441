//! The event outbox: written inside the transactions that change state.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::db::DbError;
use crate::db::models::Event;
use crate::db::schema::events;

pub async fn insert(conn: &mut AsyncPgConnection, event: &Event) -> Result<(), DbError> {
    diesel::insert_into(events::table)
        .values(event)
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
