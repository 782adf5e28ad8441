//! Knowledge files of agents and their chunks: plan-checked upload, reads and
//! deletion scoped to the organization and the agent, the worker's claim /
//! lease / complete / fail transitions (each conditional on the attempt that
//! owns the file, like jobs), the scheduler's rescue and relay queries, and
//! the nearest-chunk search.

use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Float4, Integer, Nullable, Text, Uuid as SqlUuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::DbError;
use crate::models::{KnowledgeFile, NewKnowledgeChunk, NewKnowledgeFile};
use crate::prepared::PrepareOnce;
use crate::schema::{agents, knowledge_chunks, knowledge_files};

use unigen_core::domain::{self as upload, UploadRefusal};

/// Chunks per INSERT: 6 parameters a row stays far below PostgreSQL's 65,535.
const INSERT_BATCH: usize = 1_000;

#[derive(Debug)]
pub enum InsertOutcome {
    Inserted(Box<KnowledgeFile>),
    /// Not an agent of the organization (templates included: they take no files).
    AgentNotFound,
    Refused(UploadRefusal),
}

/// Inserts the file if the agent is the organization's and has fewer files
/// than the plan allows. The agent's row is locked until the commit, so
/// concurrent uploads to one agent are counted one by one.
pub async fn insert_within_plan(
    conn: &mut AsyncPgConnection,
    new: &NewKnowledgeFile<'_>,
) -> Result<InsertOutcome, DbError> {
    conn.transaction::<_, DbError, _>(async |conn| {
        let agent: Option<Uuid> = agents::table
            .filter(agents::id.eq(new.agent_id))
            .filter(agents::org_id.eq(new.org_id))
            .filter(agents::is_template.eq(false))
            .select(agents::id)
            .for_update()
            .first(conn)
            .await
            .optional()?;
        if agent.is_none() {
            return Ok(InsertOutcome::AgentNotFound);
        }
        let limits = super::agents::limits(conn, new.org_id).await?;
        let existing: i64 = knowledge_files::table
            .filter(knowledge_files::agent_id.eq(new.agent_id))
            .count()
            .get_result(conn)
            .await?;
        if let Err(refusal) = upload::admit_count(&limits, existing) {
            return Ok(InsertOutcome::Refused(refusal));
        }
        let file = diesel::insert_into(knowledge_files::table)
            .values(new)
            .returning(KnowledgeFile::as_returning())
            .get_result(conn)
            .await?;
        Ok(InsertOutcome::Inserted(Box::new(file)))
    })
    .await
}

/// How many files the agent has (a pre-check before reading an upload; the
/// insert counts again under the lock).
pub async fn count_for_agent(conn: &mut AsyncPgConnection, agent_id: Uuid) -> Result<i64, DbError> {
    Ok(knowledge_files::table
        .filter(knowledge_files::agent_id.eq(agent_id))
        .count()
        .get_result(conn)
        .await?)
}

/// The organization's files of the agent, newest first.
pub async fn list_for_agent(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    agent_id: Uuid,
) -> Result<Vec<KnowledgeFile>, DbError> {
    Ok(knowledge_files::table
        .filter(knowledge_files::org_id.eq(org_id))
        .filter(knowledge_files::agent_id.eq(agent_id))
        .order((
            knowledge_files::created_at.desc(),
            knowledge_files::id.desc(),
        ))
        .select(KnowledgeFile::as_select())
        .load(conn)
        .await?)
}

/// A file of the organization's agent; anything else (another organization's
/// file, another agent's) is `None`, exactly like an unknown id.
pub async fn find_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    agent_id: Uuid,
    id: Uuid,
) -> Result<Option<KnowledgeFile>, DbError> {
    Ok(knowledge_files::table
        .filter(knowledge_files::id.eq(id))
        .filter(knowledge_files::org_id.eq(org_id))
        .filter(knowledge_files::agent_id.eq(agent_id))
        .select(KnowledgeFile::as_select())
        .first(conn)
        .await
        .optional()?)
}

pub async fn find(
    conn: &mut AsyncPgConnection,
    id: Uuid,
) -> Result<Option<KnowledgeFile>, DbError> {
    Ok(knowledge_files::table
        .find(id)
        .select(KnowledgeFile::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Deletes the file (its chunks go with it) and returns it, for its stored
/// bytes; `None` like [`find_for_org`]. A worker processing it loses its
/// lease renewal and its result is discarded.
pub async fn delete(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    agent_id: Uuid,
    id: Uuid,
) -> Result<Option<KnowledgeFile>, DbError> {
    Ok(diesel::delete(
        knowledge_files::table
            .filter(knowledge_files::id.eq(id))
            .filter(knowledge_files::org_id.eq(org_id))
            .filter(knowledge_files::agent_id.eq(agent_id)),
    )
    .returning(KnowledgeFile::as_returning())
    .get_result(conn)
    .await
    .optional()?)
}

/// Records that the broker confirmed the upload's message of these files. A
/// file handed back meanwhile ([`release`]: pending again, its row touched
/// since the upload) is left unmarked: the worker that released it consumed
/// that message, so only the relay's publish ([`mark_republished`]) may mark
/// it, or it would stay pending with no message. (A release puts the
/// attempt back, so the row's `updated_at` is what tells.)
pub async fn mark_enqueued(conn: &mut AsyncPgConnection, ids: &[Uuid]) -> Result<usize, DbError> {
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(diesel::update(knowledge_files::table)
        .filter(knowledge_files::id.eq_any(ids))
        .filter(knowledge_files::enqueued_at.is_null())
        .filter(
            knowledge_files::status
                .ne("pending")
                .or(knowledge_files::updated_at.eq(knowledge_files::created_at)),
        )
        .set(knowledge_files::enqueued_at.eq(diesel::dsl::now))
        .execute(conn)
        .await?)
}

/// Records that the relay published these files again, in the transaction
/// that locked them ([`lock_unpublished`]).
pub async fn mark_republished(
    conn: &mut AsyncPgConnection,
    ids: &[Uuid],
) -> Result<usize, DbError> {
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(diesel::update(knowledge_files::table)
        .filter(knowledge_files::id.eq_any(ids))
        .filter(knowledge_files::enqueued_at.is_null())
        .set(knowledge_files::enqueued_at.eq(diesel::dsl::now))
        .execute(conn)
        .await?)
}

/// Atomically takes a pending file for `worker_id` with a lease on the
/// database clock. `None`: another worker has it, or it is no longer pending
/// (finished, failed, deleted).
pub async fn claim(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    worker_id: &str,
    lease: Duration,
) -> Result<Option<KnowledgeFile>, DbError> {
    Ok(diesel::sql_query(
        "UPDATE knowledge_files SET status = 'processing', attempt = attempt + 1, worker_id = $2, \
             lease_expires_at = now() + make_interval(secs => $3), updated_at = now() \
         WHERE id = $1 AND status = 'pending' RETURNING *",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<Text, _>(worker_id)
    .bind::<BigInt, _>(lease.as_secs() as i64)
    .get_result(conn)
    .await
    .optional()?)
}

/// Filter: the file is still processing under this attempt (not deleted,
/// not rescued and handed to another worker).
macro_rules! owned_by_attempt {
    ($id:expr, $attempt:expr) => {
        knowledge_files::id
            .eq($id)
            .and(knowledge_files::attempt.eq($attempt))
            .and(knowledge_files::status.eq("processing"))
    };
}

/// Extends the lease of a file this attempt still owns. False: the worker
/// must stop (the file was deleted or taken over).
pub async fn renew_lease(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    attempt: i32,
    lease: Duration,
) -> Result<bool, DbError> {
    let updated = diesel::sql_query(
        "UPDATE knowledge_files SET lease_expires_at = now() + make_interval(secs => $3) \
         WHERE id = $1 AND attempt = $2 AND status = 'processing'",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<Integer, _>(attempt)
    .bind::<BigInt, _>(lease.as_secs() as i64)
    .prepared()
    .execute(conn)
    .await?;
    Ok(updated == 1)
}

/// Writes the chunks and marks the file `completed` with its chunk count, in
/// one transaction, if this attempt still owns it. False: nothing written.
pub async fn complete(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    attempt: i32,
    embedding_model: &str,
    chunks: &[NewKnowledgeChunk],
) -> Result<bool, DbError> {
    conn.transaction::<_, DbError, _>(async |conn| {
        // First, so the row is locked: a concurrent delete waits for the commit
        // (and then removes the chunks with the file).
        let updated = diesel::update(knowledge_files::table)
            .filter(owned_by_attempt!(id, attempt))
            .set((
                knowledge_files::status.eq("completed"),
                knowledge_files::chunk_count.eq(chunks.len() as i32),
                knowledge_files::embedding_model.eq(embedding_model),
                knowledge_files::error_message.eq(None::<String>),
                knowledge_files::worker_id.eq(None::<String>),
                knowledge_files::lease_expires_at.eq(None::<chrono::DateTime<chrono::Utc>>),
                knowledge_files::processed_at.eq(diesel::dsl::now),
                knowledge_files::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)
            .await?;
        if updated != 1 {
            return Ok(false);
        }
        diesel::delete(knowledge_chunks::table.filter(knowledge_chunks::file_id.eq(id)))
            .execute(conn)
            .await?;
        for batch in chunks.chunks(INSERT_BATCH) {
            diesel::insert_into(knowledge_chunks::table)
                .values(batch)
                .execute(conn)
                .await?;
        }
        Ok(true)
    })
    .await
}

/// Fails the file with a message for the user, if this attempt owns it.
pub async fn fail(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    attempt: i32,
    message: &str,
) -> Result<bool, DbError> {
    let updated = diesel::update(knowledge_files::table)
        .filter(owned_by_attempt!(id, attempt))
        .set((
            knowledge_files::status.eq("failed"),
            knowledge_files::error_message.eq(message),
            knowledge_files::worker_id.eq(None::<String>),
            knowledge_files::lease_expires_at.eq(None::<chrono::DateTime<chrono::Utc>>),
            knowledge_files::processed_at.eq(diesel::dsl::now),
            knowledge_files::updated_at.eq(diesel::dsl::now),
        ))
        .execute(conn)
        .await?;
    Ok(updated == 1)
}

/// After a transient failure: keeps the file `processing` but lets its lease
/// run out in `delay`, so the scheduler's rescue retries it (or fails it
/// once out of attempts, quoting `reason`).
pub async fn retry_later(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    attempt: i32,
    reason: &str,
    delay: Duration,
) -> Result<bool, DbError> {
    let updated = diesel::sql_query(
        "UPDATE knowledge_files SET lease_expires_at = now() + make_interval(secs => $4), \
             error_message = $3, updated_at = now() \
         WHERE id = $1 AND attempt = $2 AND status = 'processing'",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<Integer, _>(attempt)
    .bind::<Text, _>(reason)
    .bind::<diesel::sql_types::Double, _>(delay.as_secs_f64())
    .prepared()
    .execute(conn)
    .await?;
    Ok(updated == 1)
}

/// Hands a file back without counting the attempt (a worker stopping):
/// pending and unpublished, so the scheduler publishes it again.
pub async fn release(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    attempt: i32,
) -> Result<bool, DbError> {
    let updated = diesel::update(knowledge_files::table)
        .filter(owned_by_attempt!(id, attempt))
        .set((
            knowledge_files::status.eq("pending"),
            knowledge_files::attempt.eq(attempt - 1),
            knowledge_files::worker_id.eq(None::<String>),
            knowledge_files::lease_expires_at.eq(None::<chrono::DateTime<chrono::Utc>>),
            knowledge_files::enqueued_at.eq(None::<chrono::DateTime<chrono::Utc>>),
            knowledge_files::updated_at.eq(diesel::dsl::now),
        ))
        .execute(conn)
        .await?;
    Ok(updated == 1)
}

#[derive(Debug, Clone, QueryableByName)]
pub struct UnpublishedFile {
    #[diesel(sql_type = SqlUuid)]
    pub id: Uuid,
    #[diesel(sql_type = Integer)]
    pub attempt: i32,
}

/// Pending files the broker never confirmed, uploaded more than `grace` ago,
/// locked for this transaction so concurrent schedulers take disjoint batches.
pub async fn lock_unpublished(
    conn: &mut AsyncPgConnection,
    grace: Duration,
    limit: i64,
) -> Result<Vec<UnpublishedFile>, DbError> {
    Ok(diesel::sql_query(
        "SELECT id, attempt FROM knowledge_files \
         WHERE status = 'pending' AND enqueued_at IS NULL \
           AND created_at < now() - make_interval(secs => $1) \
         ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED",
    )
    .bind::<BigInt, _>(grace.as_secs() as i64)
    .bind::<BigInt, _>(limit)
    .prepared()
    .load(conn)
    .await?)
}

#[derive(Debug, Clone, QueryableByName)]
pub struct RescuedFile {
    #[diesel(sql_type = SqlUuid)]
    pub id: Uuid,
    #[diesel(sql_type = Text)]
    pub status: String,
    #[diesel(sql_type = Integer)]
    pub attempt: i32,
    #[diesel(sql_type = Nullable<Text>)]
    pub error_message: Option<String>,
}

/// Files whose lease ran out (the worker died, or put the file aside after a
/// transient failure): back to `pending` and unpublished, or `failed` once
/// they used `max_attempts` claims, with the last failure quoted.
pub async fn rescue_expired_leases(
    conn: &mut AsyncPgConnection,
    max_attempts: i32,
    limit: i64,
) -> Result<Vec<RescuedFile>, DbError> {
    Ok(diesel::sql_query(
        "UPDATE knowledge_files SET \
             status = CASE WHEN attempt >= $1 THEN 'failed' ELSE 'pending' END, \
             error_message = CASE WHEN attempt >= $1 \
                 THEN 'processing the file failed ' || attempt || ' times (' \
                      || COALESCE(error_message, 'the worker stopped') || '); upload it again later' \
                 ELSE error_message END, \
             processed_at = CASE WHEN attempt >= $1 THEN now() ELSE NULL END, \
             worker_id = NULL, lease_expires_at = NULL, enqueued_at = NULL, updated_at = now() \
         WHERE id IN (SELECT id FROM knowledge_files \
                      WHERE status = 'processing' AND lease_expires_at < now() \
                      ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
         RETURNING id, status, attempt, error_message",
    )
    .bind::<Integer, _>(max_attempts)
    .bind::<BigInt, _>(limit)
    .prepared()
    .load(conn)
    .await?)
}

#[derive(QueryableByName)]
struct Exists {
    #[diesel(sql_type = Bool)]
    found: bool,
}

/// Whether the agent has completed chunks embedded by `embedding_model`.
pub async fn has_chunks(
    conn: &mut AsyncPgConnection,
    agent_id: Uuid,
    embedding_model: &str,
) -> Result<bool, DbError> {
    let row: Exists = diesel::sql_query(
        "SELECT EXISTS (SELECT 1 FROM knowledge_files \
                        WHERE agent_id = $1 AND status = 'completed' \
                          AND embedding_model = $2 AND chunk_count > 0) AS found",
    )
    .bind::<SqlUuid, _>(agent_id)
    .bind::<Text, _>(embedding_model)
    .prepared()
    .get_result(conn)
    .await?;
    Ok(row.found)
}

/// A chunk and its similarity to the query.
#[derive(Debug, Clone, QueryableByName)]
pub struct ScoredChunk {
    #[diesel(sql_type = SqlUuid)]
    pub file_id: Uuid,
    #[diesel(sql_type = Text)]
    pub filename: String,
    #[diesel(sql_type = Integer)]
    pub chunk_index: i32,
    #[diesel(sql_type = Text)]
    pub content: String,
    #[diesel(sql_type = Float4)]
    pub score: f32,
}

/// The `limit` chunks of the agent's completed files (embedded by
/// `embedding_model`, of the query's dimension) with the largest dot product
/// with `query` (unit vectors: the cosine), best first; ties by file and
/// position. A scan of the agent's chunks: bounded by the plan's files per
/// agent and `knowledge.max_chunks_per_file`.
pub async fn nearest_chunks(
    conn: &mut AsyncPgConnection,
    agent_id: Uuid,
    embedding_model: &str,
    query: &[f32],
    limit: i64,
) -> Result<Vec<ScoredChunk>, DbError> {
    Ok(diesel::sql_query(
        "SELECT c.file_id, f.filename, c.chunk_index, c.content, \
                (SELECT COALESCE(sum(a * b), 0) FROM unnest(c.embedding, $3) AS v(a, b))::real \
                    AS score \
         FROM knowledge_chunks c JOIN knowledge_files f ON f.id = c.file_id \
         WHERE c.agent_id = $1 AND f.agent_id = $1 AND f.status = 'completed' \
           AND f.embedding_model = $2 AND cardinality(c.embedding) = cardinality($3) \
         ORDER BY score DESC, c.file_id, c.chunk_index LIMIT $4",
    )
    .bind::<SqlUuid, _>(agent_id)
    .bind::<Text, _>(embedding_model)
    .bind::<Array<Float4>, _>(query)
    .bind::<BigInt, _>(limit)
    .prepared()
    .load(conn)
    .await?)
}
