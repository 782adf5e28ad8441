//! Batches of OpenAI's Batch API and their lines. A batch's lines are rows
//! of `batch_lines` claimed by workers with a lease (as jobs are), within
//! the organization's `plans.max_batch_concurrency`; the scheduler ends
//! batches (finalizes, expires, finishes cancelling). Reads are scoped to
//! the organization: another's batch is not found.

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{
    Array, BigInt, Integer, Jsonb, Nullable, Text, Timestamptz, Uuid as SqlUuid,
};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde_json::Value;
use uuid::Uuid;

use crate::DbError;
use crate::prepared::PrepareOnce;

/// A batch as stored. `completed` and `failed` are final counts once the
/// batch ended; while it runs, [`line_counts`] tells them.
#[derive(Debug, Clone, QueryableByName)]
pub struct BatchRow {
    #[diesel(sql_type = Text)]
    pub id: String,
    #[diesel(sql_type = SqlUuid)]
    pub org_id: Uuid,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    pub api_key_id: Option<Uuid>,
    #[diesel(sql_type = Text)]
    pub endpoint: String,
    #[diesel(sql_type = Text)]
    pub input_file_id: String,
    #[diesel(sql_type = Text)]
    pub completion_window: String,
    #[diesel(sql_type = Text)]
    pub status: String,
    #[diesel(sql_type = Nullable<Jsonb>)]
    pub metadata: Option<Value>,
    #[diesel(sql_type = Nullable<Jsonb>)]
    pub errors: Option<Value>,
    #[diesel(sql_type = Nullable<Text>)]
    pub output_file_id: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    pub error_file_id: Option<String>,
    #[diesel(sql_type = Integer)]
    pub total: i32,
    #[diesel(sql_type = Integer)]
    pub completed: i32,
    #[diesel(sql_type = Integer)]
    pub failed: i32,
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub in_progress_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Timestamptz)]
    pub expires_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub finalizing_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub completed_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub failed_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub expired_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub cancelling_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub cancelled_at: Option<DateTime<Utc>>,
}

const BATCH_COLUMNS: &str = "id, org_id, api_key_id, endpoint, input_file_id, completion_window,
    status, metadata, errors, output_file_id, error_file_id, total, completed, failed, created_at,
    in_progress_at, expires_at, finalizing_at, completed_at, failed_at, expired_at, cancelling_at,
    cancelled_at";

impl BatchRow {
    /// Whether the batch has ended (its counts and files are final).
    pub fn ended(&self) -> bool {
        matches!(
            self.status.as_str(),
            "completed" | "failed" | "expired" | "cancelled"
        )
    }
}

pub struct NewBatch<'a> {
    pub id: &'a str,
    pub org_id: Uuid,
    pub api_key_id: Option<Uuid>,
    pub endpoint: &'a str,
    pub input_file_id: &'a str,
    pub completion_window: &'a str,
    pub metadata: Option<&'a Value>,
    pub expires_at: DateTime<Utc>,
}

/// One request of a new batch.
pub struct NewLine {
    pub id: Uuid,
    pub line_no: i32,
    pub custom_id: String,
    pub body: Value,
}

/// Inserts the batch (`in_progress`: its input was validated on creation)
/// with no line yet; call in the transaction that adds its lines with
/// [`insert_lines`] and [`set_total`].
pub async fn insert(conn: &mut AsyncPgConnection, new: &NewBatch<'_>) -> Result<(), DbError> {
    diesel::sql_query(
        "INSERT INTO batches (id, org_id, api_key_id, endpoint, input_file_id, completion_window,
                              status, metadata, total, in_progress_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, 'in_progress', $7, 0, now(), $8)",
    )
    .bind::<Text, _>(new.id)
    .bind::<SqlUuid, _>(new.org_id)
    .bind::<Nullable<SqlUuid>, _>(new.api_key_id)
    .bind::<Text, _>(new.endpoint)
    .bind::<Text, _>(new.input_file_id)
    .bind::<Text, _>(new.completion_window)
    .bind::<Nullable<Jsonb>, _>(new.metadata)
    .bind::<Timestamptz, _>(new.expires_at)
    .prepared()
    .execute(conn)
    .await?;
    Ok(())
}

/// Adds `lines` to batch `batch_id` in one statement.
pub async fn insert_lines(
    conn: &mut AsyncPgConnection,
    batch_id: &str,
    org_id: Uuid,
    lines: &[NewLine],
) -> Result<(), DbError> {
    let ids: Vec<Uuid> = lines.iter().map(|l| l.id).collect();
    let numbers: Vec<i32> = lines.iter().map(|l| l.line_no).collect();
    let custom_ids: Vec<&str> = lines.iter().map(|l| l.custom_id.as_str()).collect();
    let bodies: Vec<&Value> = lines.iter().map(|l| &l.body).collect();
    diesel::sql_query(
        "INSERT INTO batch_lines (id, batch_id, org_id, line_no, custom_id, body)
         SELECT u.id, $1, $2, u.line_no, u.custom_id, u.body
           FROM unnest($3::uuid[], $4::int[], $5::text[], $6::jsonb[])
                AS u(id, line_no, custom_id, body)",
    )
    .bind::<Text, _>(batch_id)
    .bind::<SqlUuid, _>(org_id)
    .bind::<Array<SqlUuid>, _>(&ids)
    .bind::<Array<Integer>, _>(&numbers)
    .bind::<Array<Text>, _>(&custom_ids)
    .bind::<Array<Jsonb>, _>(&bodies)
    .prepared()
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn set_total(conn: &mut AsyncPgConnection, id: &str, total: i32) -> Result<(), DbError> {
    diesel::sql_query("UPDATE batches SET total = $2 WHERE id = $1")
        .bind::<Text, _>(id)
        .bind::<Integer, _>(total)
        .prepared()
        .execute(conn)
        .await?;
    Ok(())
}

/// The organization's batch `id`, if any.
pub async fn find(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: &str,
) -> Result<Option<BatchRow>, DbError> {
    Ok(diesel::sql_query(format!(
        "SELECT {BATCH_COLUMNS} FROM batches WHERE id = $1 AND org_id = $2"
    ))
    .bind::<Text, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .get_result(conn)
    .await
    .optional()?)
}

/// A page of the organization's batches, newest first (`after`: the last
/// id of the previous page); one more than `limit`, to tell whether more
/// follow.
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<BatchRow>, DbError> {
    Ok(diesel::sql_query(format!(
        "SELECT {BATCH_COLUMNS} FROM batches
          WHERE org_id = $1 AND ($2::text IS NULL OR id < $2)
          ORDER BY id DESC LIMIT $3"
    ))
    .bind::<SqlUuid, _>(org_id)
    .bind::<Nullable<Text>, _>(after)
    .bind::<BigInt, _>(limit + 1)
    .load(conn)
    .await?)
}

/// Counts of a batch's lines by outcome so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, QueryableByName)]
pub struct LineCounts {
    #[diesel(sql_type = BigInt)]
    pub succeeded: i64,
    #[diesel(sql_type = BigInt)]
    pub failed: i64,
    /// Never run: cancelled or expired.
    #[diesel(sql_type = BigInt)]
    pub unrun: i64,
}

pub async fn line_counts(conn: &mut AsyncPgConnection, id: &str) -> Result<LineCounts, DbError> {
    Ok(diesel::sql_query(
        "SELECT count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
                count(*) FILTER (WHERE status = 'failed') AS failed,
                count(*) FILTER (WHERE status IN ('cancelled', 'expired')) AS unrun
           FROM batch_lines WHERE batch_id = $1",
    )
    .bind::<Text, _>(id)
    .prepared()
    .get_result(conn)
    .await?)
}

/// What cancelling did.
pub enum Cancelled {
    /// Now `cancelling` (or already was); its unstarted lines never run.
    Cancelling(BatchRow),
    /// The batch has ended (or is finalizing): nothing to cancel.
    Ended(BatchRow),
    NotFound,
}

/// Cancels the organization's batch `id`: `cancelling` at once, and every
/// line not started marked `cancelled` in the same transaction (never run,
/// never charged); lines running finish, then the scheduler ends it.
pub async fn cancel(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: &str,
) -> Result<Cancelled, DbError> {
    conn.transaction::<_, DbError, _>(async |conn| {
        let Some(batch) = find_for_update(conn, org_id, id).await? else {
            return Ok(Cancelled::NotFound);
        };
        match batch.status.as_str() {
            "validating" | "in_progress" => {}
            "cancelling" => return Ok(Cancelled::Cancelling(batch)),
            _ => return Ok(Cancelled::Ended(batch)),
        }
        diesel::sql_query(
            "UPDATE batch_lines SET status = 'cancelled', finished_at = now()
              WHERE batch_id = $1 AND status = 'queued'",
        )
        .bind::<Text, _>(id)
        .prepared()
        .execute(conn)
        .await?;
        let batch: BatchRow = diesel::sql_query(format!(
            "UPDATE batches SET status = 'cancelling', cancelling_at = now()
              WHERE id = $1 RETURNING {BATCH_COLUMNS}"
        ))
        .bind::<Text, _>(id)
        .get_result(conn)
        .await?;
        Ok(Cancelled::Cancelling(batch))
    })
    .await
}

async fn find_for_update(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: &str,
) -> Result<Option<BatchRow>, DbError> {
    Ok(diesel::sql_query(format!(
        "SELECT {BATCH_COLUMNS} FROM batches WHERE id = $1 AND org_id = $2 FOR UPDATE"
    ))
    .bind::<Text, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .get_result(conn)
    .await
    .optional()?)
}

/// A line a worker claimed, with what running it needs of its batch.
#[derive(Debug, Clone, QueryableByName)]
pub struct ClaimedLine {
    #[diesel(sql_type = SqlUuid)]
    pub id: Uuid,
    #[diesel(sql_type = Text)]
    pub batch_id: String,
    #[diesel(sql_type = SqlUuid)]
    pub org_id: Uuid,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    pub api_key_id: Option<Uuid>,
    #[diesel(sql_type = Text)]
    pub endpoint: String,
    #[diesel(sql_type = Text)]
    pub custom_id: String,
    #[diesel(sql_type = Jsonb)]
    pub body: Value,
    #[diesel(sql_type = Integer)]
    pub attempt: i32,
}

/// Every claim takes this transaction-scoped advisory lock: claims are
/// serialized, so an organization's running lines never exceed its plan's
/// `max_batch_concurrency`, whichever worker claims.
const CLAIM_LOCK: i64 = 0x6261_7463_6865_7321;

/// Claims up to `limit` runnable lines (queued and due, or running with an
/// expired lease: their worker died) of batches in progress, oldest first,
/// within each organization's concurrency cap; each is `running` under
/// `worker_id` until its lease ends, its attempt counted.
pub async fn claim_lines(
    conn: &mut AsyncPgConnection,
    worker_id: &str,
    lease: Duration,
    limit: i64,
) -> Result<Vec<ClaimedLine>, DbError> {
    conn.transaction::<_, DbError, _>(async |conn| {
        diesel::sql_query("SELECT pg_advisory_xact_lock($1)")
            .bind::<BigInt, _>(CLAIM_LOCK)
            .prepared()
            .execute(conn)
            .await?;
        Ok(diesel::sql_query(
            "WITH candidates AS (
                 SELECT l.id, l.org_id, l.run_after FROM batch_lines l
                   JOIN batches b ON b.id = l.batch_id AND b.status = 'in_progress'
                  WHERE l.status = 'queued' AND l.run_after <= now()
                  UNION ALL
                 SELECT l.id, l.org_id, l.run_after FROM batch_lines l
                   JOIN batches b ON b.id = l.batch_id AND b.status = 'in_progress'
                  WHERE l.status = 'running' AND l.lease_until < now()
                  ORDER BY run_after, id
                  LIMIT $3 * 4
             ), running AS (
                 SELECT org_id, count(*) AS n FROM batch_lines
                  WHERE status = 'running' AND lease_until >= now()
                    AND org_id IN (SELECT org_id FROM candidates)
                  GROUP BY org_id
             ), ranked AS (
                 SELECT c.id, c.org_id,
                        row_number() OVER (PARTITION BY c.org_id ORDER BY c.run_after, c.id) AS rn
                   FROM candidates c
             ), picked AS (
                 SELECT r.id FROM ranked r
                   JOIN organizations o ON o.id = r.org_id
                   JOIN plans p ON p.code = o.plan_code
                   LEFT JOIN running ru ON ru.org_id = r.org_id
                  WHERE r.rn <= p.max_batch_concurrency - COALESCE(ru.n, 0)
                  ORDER BY r.id
                  LIMIT $3
             )
             UPDATE batch_lines l
                SET status = 'running', attempt = l.attempt + 1, worker_id = $1,
                    lease_until = now() + make_interval(secs => $2)
               FROM picked, batches b
              WHERE l.id = picked.id AND b.id = l.batch_id
          RETURNING l.id, l.batch_id, l.org_id, b.api_key_id, b.endpoint, l.custom_id, l.body,
                    l.attempt",
        )
        .bind::<Text, _>(worker_id)
        .bind::<diesel::sql_types::Double, _>(lease.as_secs_f64())
        .bind::<BigInt, _>(limit)
        .prepared()
        .load(conn)
        .await?)
    })
    .await
}

/// Extends the lease of attempt `attempt` of line `id`; false when the
/// attempt no longer owns it.
pub async fn renew_lease(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    attempt: i32,
    lease: Duration,
) -> Result<bool, DbError> {
    let updated = diesel::sql_query(
        "UPDATE batch_lines SET lease_until = now() + make_interval(secs => $3)
          WHERE id = $1 AND attempt = $2 AND status = 'running'",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<Integer, _>(attempt)
    .bind::<diesel::sql_types::Double, _>(lease.as_secs_f64())
    .prepared()
    .execute(conn)
    .await?;
    Ok(updated == 1)
}

/// Locks line `id` if attempt `attempt` still owns it (running): the
/// answer's charge and record then commit for this attempt only.
pub async fn lock_owned(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    attempt: i32,
) -> Result<bool, DbError> {
    let locked = diesel::sql_query(
        "SELECT id FROM batch_lines WHERE id = $1 AND attempt = $2 AND status = 'running' FOR UPDATE",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<Integer, _>(attempt)
    .prepared()
    .execute(conn)
    .await?;
    Ok(locked == 1)
}

/// Records attempt `attempt`'s answer to line `id` (`succeeded`: a 2xx
/// answer; `failed`: any other). False, and nothing written, when the
/// attempt no longer owns the line. Call in the transaction that settles or
/// releases its charge.
pub async fn finish_line(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    attempt: i32,
    status_code: i32,
    response: &Value,
) -> Result<bool, DbError> {
    let updated = diesel::sql_query(
        "UPDATE batch_lines
            SET status = CASE WHEN $3 BETWEEN 200 AND 299 THEN 'succeeded' ELSE 'failed' END,
                status_code = $3, response = $4, finished_at = now(), lease_until = NULL
          WHERE id = $1 AND attempt = $2 AND status = 'running'",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<Integer, _>(attempt)
    .bind::<Integer, _>(status_code)
    .bind::<Jsonb, _>(response)
    .prepared()
    .execute(conn)
    .await?;
    Ok(updated == 1)
}

/// Puts line `id` back in the queue to run after `delay` (its upstream was
/// busy); false when the attempt no longer owns it.
pub async fn requeue_line(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    attempt: i32,
    delay: Duration,
) -> Result<bool, DbError> {
    let updated = diesel::sql_query(
        "UPDATE batch_lines
            SET status = 'queued', run_after = now() + make_interval(secs => $3),
                lease_until = NULL, worker_id = NULL
          WHERE id = $1 AND attempt = $2 AND status = 'running'",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<Integer, _>(attempt)
    .bind::<diesel::sql_types::Double, _>(delay.as_secs_f64())
    .prepared()
    .execute(conn)
    .await?;
    Ok(updated == 1)
}

/// Batches in progress past their window: each is `finalizing` with
/// `expired_at` set, and its lines not started are `expired` (never run,
/// never charged). Answers their ids.
pub async fn expire_due(conn: &mut AsyncPgConnection, limit: i64) -> Result<Vec<String>, DbError> {
    #[derive(QueryableByName)]
    struct Id {
        #[diesel(sql_type = Text)]
        id: String,
    }
    conn.transaction::<_, DbError, _>(async |conn| {
        let ids: Vec<Id> = diesel::sql_query(
            "UPDATE batches SET status = 'finalizing', expired_at = now(), finalizing_at = now()
              WHERE id IN (SELECT id FROM batches
                            WHERE status = 'in_progress' AND expires_at <= now()
                            ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
          RETURNING id",
        )
        .bind::<BigInt, _>(limit)
        .prepared()
        .load(conn)
        .await?;
        let ids: Vec<String> = ids.into_iter().map(|i| i.id).collect();
        if !ids.is_empty() {
            diesel::sql_query(
                "UPDATE batch_lines SET status = 'expired', finished_at = now()
                  WHERE batch_id = ANY($1) AND status = 'queued'",
            )
            .bind::<Array<Text>, _>(&ids)
            .prepared()
            .execute(conn)
            .await?;
        }
        Ok(ids)
    })
    .await
}

/// A batch ready to end: not `in_progress` any more (or with no line left
/// to run), with no line running under a live lease. Locked (skipping
/// batches another scheduler holds) until the caller's transaction ends.
/// Lines left `running` by a dead worker in a batch that will not run them
/// again are returned in `abandoned`, for their holds to be released.
pub async fn next_to_end(conn: &mut AsyncPgConnection) -> Result<Option<BatchRow>, DbError> {
    Ok(diesel::sql_query(format!(
        "SELECT {BATCH_COLUMNS} FROM batches b
          WHERE b.status IN ('in_progress', 'finalizing', 'cancelling')
            AND NOT EXISTS (SELECT 1 FROM batch_lines l WHERE l.batch_id = b.id
                               AND (l.status = 'running' AND l.lease_until >= now()
                                    OR l.status IN ('queued', 'running') AND b.status = 'in_progress'))
          ORDER BY b.id LIMIT 1 FOR UPDATE SKIP LOCKED"
    ))
    .get_result(conn)
    .await
    .optional()?)
}

/// Lines of an ending batch that will not run: left `running` by a dead
/// worker, or put back `queued` (a busy upstream) after the cancel or the
/// expiry; marked as never run (`status`: `cancelled` or `expired`). Their
/// ids, whose holds the caller releases.
pub async fn abandon_running(
    conn: &mut AsyncPgConnection,
    batch_id: &str,
    status: &str,
) -> Result<Vec<Uuid>, DbError> {
    #[derive(QueryableByName)]
    struct Id {
        #[diesel(sql_type = SqlUuid)]
        id: Uuid,
    }
    let ids: Vec<Id> = diesel::sql_query(
        "UPDATE batch_lines SET status = $2, finished_at = now(), lease_until = NULL
          WHERE batch_id = $1 AND status IN ('running', 'queued') RETURNING id",
    )
    .bind::<Text, _>(batch_id)
    .bind::<Text, _>(status)
    .prepared()
    .load(conn)
    .await?;
    Ok(ids.into_iter().map(|i| i.id).collect())
}

/// A finished line, as the output and error files show it.
#[derive(Debug, Clone, QueryableByName)]
pub struct LineResult {
    #[diesel(sql_type = SqlUuid)]
    pub id: Uuid,
    #[diesel(sql_type = Integer)]
    pub line_no: i32,
    #[diesel(sql_type = Text)]
    pub custom_id: String,
    #[diesel(sql_type = Text)]
    pub status: String,
    #[diesel(sql_type = Nullable<Integer>)]
    pub status_code: Option<i32>,
    #[diesel(sql_type = Nullable<Jsonb>)]
    pub response: Option<Value>,
}

/// The lines of batch `batch_id` after line `after`, in order, `limit` at
/// a time.
pub async fn line_results(
    conn: &mut AsyncPgConnection,
    batch_id: &str,
    after: i32,
    limit: i64,
) -> Result<Vec<LineResult>, DbError> {
    Ok(diesel::sql_query(
        "SELECT id, line_no, custom_id, status, status_code, response FROM batch_lines
          WHERE batch_id = $1 AND line_no > $2 ORDER BY line_no LIMIT $3",
    )
    .bind::<Text, _>(batch_id)
    .bind::<Integer, _>(after)
    .bind::<BigInt, _>(limit)
    .prepared()
    .load(conn)
    .await?)
}

/// How a batch ended.
pub struct Ending<'a> {
    pub status: &'a str,
    pub counts: LineCounts,
    pub output_file_id: Option<&'a str>,
    pub error_file_id: Option<&'a str>,
}

/// Writes batch `id`'s end: its status (and that status's timestamp), its
/// final counts and files.
pub async fn end(
    conn: &mut AsyncPgConnection,
    id: &str,
    ending: &Ending<'_>,
) -> Result<BatchRow, DbError> {
    Ok(diesel::sql_query(format!(
        "UPDATE batches
            SET status = $2, completed = $3, failed = $4, output_file_id = $5, error_file_id = $6,
                finalizing_at = COALESCE(finalizing_at, now()),
                completed_at = CASE WHEN $2 = 'completed' THEN now() END,
                cancelled_at = CASE WHEN $2 = 'cancelled' THEN now() END,
                expired_at = CASE WHEN $2 = 'expired' THEN COALESCE(expired_at, now()) END
          WHERE id = $1 RETURNING {BATCH_COLUMNS}"
    ))
    .bind::<Text, _>(id)
    .bind::<Text, _>(ending.status)
    .bind::<Integer, _>(ending.counts.succeeded as i32)
    .bind::<Integer, _>(ending.counts.failed as i32)
    .bind::<Nullable<Text>, _>(ending.output_file_id)
    .bind::<Nullable<Text>, _>(ending.error_file_id)
    .get_result(conn)
    .await?)
}
