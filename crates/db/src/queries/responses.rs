//! Stored responses of the Responses API: written once when answered (with
//! `store`), read, listed (their input items) and deleted, always within
//! their organization: another organization's response is not found.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;
use uuid::Uuid;

use crate::DbError;
use crate::schema::responses;

/// A response as stored.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = responses)]
pub struct StoredResponse {
    pub id: String,
    pub org_id: Uuid,
    pub model: String,
    pub status: String,
    /// The `response` object as answered.
    pub body: Value,
    /// The request's input items (stored shape, with ids).
    pub input_items: Value,
    /// What a `previous_response_id` naming it continues: the continued
    /// response's conversation, then the input items, then the output.
    pub conversation: Value,
    pub previous_response_id: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The upstream holding a response answered natively (the Responses
    /// API passed through); `None` for one bridged through chat.
    pub upstream: Option<String>,
    /// Past it, the response is not found (and the scheduler deletes it).
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = responses)]
pub struct NewResponse {
    pub id: String,
    pub org_id: Uuid,
    pub model: String,
    pub status: String,
    pub body: Value,
    pub input_items: Value,
    pub conversation: Value,
    pub previous_response_id: Option<String>,
    pub upstream: Option<String>,
    /// `None`: the table's default (30 days).
    pub expires_at: Option<DateTime<Utc>>,
}

pub async fn insert(conn: &mut AsyncPgConnection, new: &NewResponse) -> Result<(), DbError> {
    diesel::insert_into(responses::table)
        .values(new)
        .execute(conn)
        .await?;
    Ok(())
}

/// Stores `new`, replacing the answer of a row with its id: a batch line or
/// a background response run again after its worker died answers again.
pub async fn replace(conn: &mut AsyncPgConnection, new: &NewResponse) -> Result<(), DbError> {
    use diesel::upsert::excluded;
    diesel::insert_into(responses::table)
        .values(new)
        .on_conflict(responses::id)
        .do_update()
        .set((
            responses::model.eq(excluded(responses::model)),
            responses::status.eq(excluded(responses::status)),
            responses::body.eq(excluded(responses::body)),
            responses::input_items.eq(excluded(responses::input_items)),
            responses::conversation.eq(excluded(responses::conversation)),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// The organization's response `id`, if any (an expired one is none).
pub async fn find(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: &str,
) -> Result<Option<StoredResponse>, DbError> {
    Ok(responses::table
        .filter(responses::id.eq(id))
        .filter(responses::org_id.eq(org_id))
        .filter(responses::expires_at.gt(diesel::dsl::now))
        .select(StoredResponse::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Deletes the organization's response `id` (an expired one is gone
/// already); the deleted row, if there was one.
pub async fn delete(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: &str,
) -> Result<Option<StoredResponse>, DbError> {
    Ok(diesel::delete(
        responses::table
            .filter(responses::id.eq(id))
            .filter(responses::org_id.eq(org_id))
            .filter(responses::expires_at.gt(diesel::dsl::now)),
    )
    .returning(StoredResponse::as_returning())
    .get_result(conn)
    .await
    .optional()?)
}

/// Deletes at most `limit` expired responses (any organization); how many.
/// Rows another scheduler is deleting are skipped, not waited for.
pub async fn delete_expired(conn: &mut AsyncPgConnection, limit: i64) -> Result<usize, DbError> {
    Ok(diesel::sql_query(
        "DELETE FROM responses WHERE id IN \
         (SELECT id FROM responses WHERE expires_at <= now() \
          ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
    )
    .bind::<diesel::sql_types::BigInt, _>(limit)
    .execute(conn)
    .await?)
}
