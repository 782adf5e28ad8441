//! Voices cloned upstream (ElevenLabs' instant clones) for an organization:
//! one per (organization, model, SHA-256 of the sample). A clone is recorded
//! once made, so it outlives the worker that made it; the least recently
//! used ones past an organization's cap, and those idle too long, are taken
//! out (deleted here, returned so the caller deletes them upstream).

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bytea, Text, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::DbError;
use crate::schema::voice_clones;

#[derive(QueryableByName)]
struct VoiceId {
    #[diesel(sql_type = Text)]
    voice_id: String,
}

/// The recorded clone of `sample_sha256` for `org_id` and `model_id`, its
/// last use set to now.
pub async fn touch(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    model_id: &str,
    sample_sha256: &[u8],
) -> Result<Option<String>, DbError> {
    let voice = diesel::update(
        voice_clones::table
            .filter(voice_clones::org_id.eq(org_id))
            .filter(voice_clones::model_id.eq(model_id))
            .filter(voice_clones::sample_sha256.eq(sample_sha256)),
    )
    .set(voice_clones::last_used_at.eq(diesel::dsl::now))
    .returning(voice_clones::voice_id)
    .get_result::<String>(conn)
    .await
    .optional()?;
    Ok(voice)
}

/// Records a clone just made. Another process may have recorded one for
/// the same sample first: the voice that stands is returned (when it is
/// not `voice_id`, the caller deletes its own upstream). `None`: the
/// standing row was taken out meanwhile and ours is not recorded.
pub async fn record(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    model_id: &str,
    sample_sha256: &[u8],
    voice_id: &str,
) -> Result<Option<String>, DbError> {
    let row: Option<VoiceId> = diesel::sql_query(
        "WITH added AS ( \
           INSERT INTO voice_clones (org_id, model_id, sample_sha256, voice_id) \
           VALUES ($1, $2, $3, $4) \
           ON CONFLICT (org_id, model_id, sample_sha256) DO NOTHING \
           RETURNING voice_id) \
         SELECT voice_id FROM added \
         UNION ALL \
         SELECT voice_id FROM voice_clones \
          WHERE org_id = $1 AND model_id = $2 AND sample_sha256 = $3 \
            AND NOT EXISTS (SELECT 1 FROM added) \
         LIMIT 1",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<Text, _>(model_id)
    .bind::<Bytea, _>(sample_sha256)
    .bind::<Text, _>(voice_id)
    .get_result(conn)
    .await
    .optional()?;
    Ok(row.map(|r| r.voice_id))
}

/// Takes out `org_id`'s clones beyond its `keep` most recently used ones;
/// their voice ids, to delete upstream. A row another transaction is
/// taking out is skipped.
pub async fn take_least_recent(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    keep: i64,
) -> Result<Vec<String>, DbError> {
    let rows: Vec<VoiceId> = diesel::sql_query(
        "DELETE FROM voice_clones \
          WHERE voice_id IN ( \
            SELECT voice_id FROM voice_clones WHERE org_id = $1 \
             ORDER BY last_used_at DESC, created_at DESC \
            OFFSET $2 FOR UPDATE SKIP LOCKED) \
         RETURNING voice_id",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<BigInt, _>(keep.max(0))
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.voice_id).collect())
}

/// Takes out at most `limit` clones (of any organization) unused for
/// `idle_seconds`; their voice ids, to delete upstream.
pub async fn take_idle(
    conn: &mut AsyncPgConnection,
    idle_seconds: i64,
    limit: i64,
) -> Result<Vec<String>, DbError> {
    let rows: Vec<VoiceId> = diesel::sql_query(
        "DELETE FROM voice_clones \
          WHERE voice_id IN ( \
            SELECT voice_id FROM voice_clones \
             WHERE last_used_at < now() - make_interval(secs => $1::float8) \
             ORDER BY last_used_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
         RETURNING voice_id",
    )
    .bind::<BigInt, _>(idle_seconds.max(0))
    .bind::<BigInt, _>(limit.max(0))
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.voice_id).collect())
}

/// Takes out one clone by its voice id (after it was found gone upstream).
pub async fn forget(conn: &mut AsyncPgConnection, voice_id: &str) -> Result<(), DbError> {
    diesel::delete(voice_clones::table.filter(voice_clones::voice_id.eq(voice_id)))
        .execute(conn)
        .await?;
    Ok(())
}
