//! Files of OpenAI's Files API: an organization's uploads (`batch`,
//! `user_data`) and its batches' output and error files (`batch_output`).
//! Every read is scoped to the organization: another's file is not found.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::DbError;
use crate::prepared::PrepareOnce;

/// A file as stored; its bytes are in the file store under `storage_key`.
#[derive(Debug, Clone, QueryableByName)]
pub struct FileRow {
    #[diesel(sql_type = Text)]
    pub id: String,
    #[diesel(sql_type = SqlUuid)]
    pub org_id: Uuid,
    #[diesel(sql_type = Text)]
    pub purpose: String,
    #[diesel(sql_type = Text)]
    pub filename: String,
    #[diesel(sql_type = BigInt)]
    pub bytes: i64,
    #[diesel(sql_type = Text)]
    pub storage_key: String,
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
}

pub struct NewFile<'a> {
    pub id: &'a str,
    pub org_id: Uuid,
    pub purpose: &'a str,
    pub filename: &'a str,
    pub bytes: i64,
    pub storage_key: &'a str,
}

const COLUMNS: &str = "id, org_id, purpose, filename, bytes, storage_key, created_at";

pub async fn insert(conn: &mut AsyncPgConnection, new: &NewFile<'_>) -> Result<FileRow, DbError> {
    Ok(diesel::sql_query(
        "INSERT INTO files (id, org_id, purpose, filename, bytes, storage_key)
         VALUES ($1, $2, $3, $4, $5, $6)
         RETURNING id, org_id, purpose, filename, bytes, storage_key, created_at",
    )
    .bind::<Text, _>(new.id)
    .bind::<SqlUuid, _>(new.org_id)
    .bind::<Text, _>(new.purpose)
    .bind::<Text, _>(new.filename)
    .bind::<BigInt, _>(new.bytes)
    .bind::<Text, _>(new.storage_key)
    .prepared()
    .get_result(conn)
    .await?)
}

/// The organization's file `id`, if any.
pub async fn find(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: &str,
) -> Result<Option<FileRow>, DbError> {
    Ok(diesel::sql_query(
        "SELECT id, org_id, purpose, filename, bytes, storage_key, created_at
           FROM files WHERE id = $1 AND org_id = $2",
    )
    .bind::<Text, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .prepared()
    .get_result(conn)
    .await
    .optional()?)
}

/// A page of the organization's files, newest first (`purpose` filters;
/// `after`: the last id of the previous page). One more than `limit` is
/// read, so the caller knows whether more follow.
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    purpose: Option<&str>,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<FileRow>, DbError> {
    Ok(diesel::sql_query(format!(
        "SELECT {COLUMNS} FROM files
          WHERE org_id = $1 AND ($2::text IS NULL OR purpose = $2)
            AND ($3::text IS NULL OR id < $3)
          ORDER BY id DESC LIMIT $4"
    ))
    .bind::<SqlUuid, _>(org_id)
    .bind::<Nullable<Text>, _>(purpose)
    .bind::<Nullable<Text>, _>(after)
    .bind::<BigInt, _>(limit + 1)
    .load(conn)
    .await?)
}

/// Deletes the organization's file `id`; the row it was (its bytes are the
/// caller's to delete).
pub async fn delete(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: &str,
) -> Result<Option<FileRow>, DbError> {
    Ok(diesel::sql_query(
        "DELETE FROM files WHERE id = $1 AND org_id = $2
         RETURNING id, org_id, purpose, filename, bytes, storage_key, created_at",
    )
    .bind::<Text, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .prepared()
    .get_result(conn)
    .await
    .optional()?)
}

/// Sets the purpose of the organization's file `id` (an upload whose
/// `purpose` field came after its bytes).
pub async fn set_purpose(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: &str,
    purpose: &str,
) -> Result<FileRow, DbError> {
    Ok(diesel::sql_query(
        "UPDATE files SET purpose = $3 WHERE id = $1 AND org_id = $2
         RETURNING id, org_id, purpose, filename, bytes, storage_key, created_at",
    )
    .bind::<Text, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .bind::<Text, _>(purpose)
    .prepared()
    .get_result(conn)
    .await?)
}
