//! Jobs: creation, org-scoped reads, cancellation, and the worker's claim /
//! lease / settle transitions. Every transition is conditional on the state it
//! leaves, so racing actors (cancel vs. complete, two workers) cannot both win.

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{
    Array, BigInt, Integer, Jsonb, Nullable, Text, Timestamptz, Uuid as SqlUuid,
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::DbError;
use crate::billing::{Bucket, Refusal};
use crate::models::{Event, Job, NewJob};
use crate::prepared::PrepareOnce;
use crate::queries::billing;
use crate::schema::jobs;
use unigen_core::domain::{JobStatus, Tool};

const ACTIVE: [&str; 2] = ["pending", "processing"];

/// Every column of [`Job`], in its order: what the raw statements that
/// answer jobs return (never `*`, which a prepared statement must not).
macro_rules! job_columns {
    () => {
        "id, org_id, api_key_id, tool, status, progress, model, model_tier, input_params, \
         output_data, estimated_credits, actual_credits, error_message, attempt, enqueued_at, \
         worker_id, lease_expires_at, created_at, started_at, completed_at, usage, cancel_after, \
         trace_context"
    };
}

/// What became of one job of [`insert_many_reserving`].
pub enum Reserving {
    /// Reserved and inserted, committed together.
    Inserted(Box<Job>),
    /// Refused; nothing was reserved or inserted.
    Refused(Refusal),
    /// The organization's account must first be created or rolled over to
    /// a new period ([`billing::setup_account`]): nothing was done.
    NeedsSetup,
}

/// Reserves each job's estimate (its `estimated_credits`, and `quota[i]`
/// of a bucket for `new[i]`) and inserts the jobs whose reservation was
/// admitted, in one statement (one round trip, and one commit when called
/// outside a transaction). Each item is decided exactly as on its own by
/// [`billing::reserve`] (`unigen_reserve_many`: a refusal changes nothing
/// for its item), but each organization's account row is locked and
/// updated once. Answers in the items' order.
pub async fn insert_many_reserving(
    conn: &mut AsyncPgConnection,
    new: &[NewJob<'_>],
    quota: &[Option<(Bucket, i64)>],
) -> Result<Vec<Result<Reserving, DbError>>, DbError> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        ord: i64,
        #[diesel(embed)]
        reserved: billing::Reserved,
        #[diesel(embed)]
        job: Option<Job>,
    }
    debug_assert_eq!(new.len(), quota.len());
    if new.is_empty() {
        return Ok(Vec::new());
    }
    // Accounts are locked in organization order, as every batch does.
    let order = billing::organization_order(new, |j| j.org_id);
    let jobs: Vec<&NewJob<'_>> = order.iter().map(|&i| &new[i]).collect();
    let buckets: Vec<Option<&str>> = order
        .iter()
        .map(|&i| quota[i].map(|(bucket, _)| bucket.as_str()))
        .collect();
    let rows: Vec<Row> = diesel::sql_query(concat!(
        "WITH r AS MATERIALIZED ( \
           SELECT r.ord, r.outcome, r.remaining, r.hard_limit \
             FROM unigen_reserve_many($1::uuid[], $2::uuid[], $3::int8[], $4::text[], $5::int8[], \
                                      $6::timestamptz[]) AS r), \
         inserted AS ( \
           INSERT INTO jobs (id, org_id, api_key_id, tool, model, model_tier, input_params, \
                             estimated_credits, cancel_after, trace_context) \
           SELECT j.id, j.org_id, j.api_key_id, j.tool, j.model, j.model_tier, j.input_params, \
                  j.estimated_credits, j.cancel_after, j.trace_context \
             FROM unnest($2::uuid[], $1::uuid[], $7::uuid[], $8::text[], $9::text[], $10::text[], \
                         $11::jsonb[], $12::int8[], $13::timestamptz[], $16::text[]) WITH ORDINALITY \
                  AS j(id, org_id, api_key_id, tool, model, model_tier, input_params, \
                       estimated_credits, cancel_after, trace_context, ord) \
             JOIN r ON r.ord = j.ord AND r.outcome = 'ok' \
           RETURNING ",
        job_columns!(),
        "), \
         claimed AS ( \
           UPDATE idempotency_keys k SET job_id = c.job_id \
             FROM unnest($1::uuid[], $2::uuid[], $14::text[], $15::uuid[]) \
                  AS c(org_id, job_id, idem_key, claim_id) \
             JOIN inserted ON inserted.id = c.job_id \
            WHERE k.org_id = c.org_id AND k.idem_key = c.idem_key \
              AND k.claim_id = c.claim_id AND k.state = 'in_flight' \
           RETURNING k.job_id) \
         SELECT r.ord, r.outcome, r.remaining, r.hard_limit, inserted.* \
           FROM r LEFT JOIN inserted ON inserted.id = ($2::uuid[])[r.ord] \
          ORDER BY r.ord"
    ))
    .bind::<Array<SqlUuid>, _>(jobs.iter().map(|j| j.org_id).collect::<Vec<_>>())
    .bind::<Array<SqlUuid>, _>(jobs.iter().map(|j| j.id).collect::<Vec<_>>())
    .bind::<Array<BigInt>, _>(jobs.iter().map(|j| j.estimated_credits).collect::<Vec<_>>())
    .bind::<Array<Nullable<Text>>, _>(&buckets)
    .bind::<Array<BigInt>, _>(
        order
            .iter()
            .map(|&i| quota[i].map_or(0, |(_, milli)| milli))
            .collect::<Vec<_>>(),
    )
    // A job's hold never expires on its own: it ends with the job.
    .bind::<Array<Nullable<Timestamptz>>, _>(vec![None::<DateTime<Utc>>; jobs.len()])
    .bind::<Array<SqlUuid>, _>(jobs.iter().map(|j| j.api_key_id).collect::<Vec<_>>())
    .bind::<Array<Text>, _>(jobs.iter().map(|j| j.tool).collect::<Vec<_>>())
    .bind::<Array<Text>, _>(jobs.iter().map(|j| j.model).collect::<Vec<_>>())
    .bind::<Array<Text>, _>(jobs.iter().map(|j| j.model_tier).collect::<Vec<_>>())
    .bind::<Array<Jsonb>, _>(jobs.iter().map(|j| j.input_params).collect::<Vec<_>>())
    .bind::<Array<BigInt>, _>(jobs.iter().map(|j| j.estimated_credits).collect::<Vec<_>>())
    .bind::<Array<Nullable<Timestamptz>>, _>(
        jobs.iter().map(|j| j.cancel_after).collect::<Vec<_>>(),
    )
    // The Idempotency-Key claim each job is created under: written in this
    // statement, so no request can end between the job and its key.
    .bind::<Array<Nullable<Text>>, _>(
        jobs.iter()
            .map(|j| j.idempotency.map(|(key, _)| key))
            .collect::<Vec<_>>(),
    )
    .bind::<Array<Nullable<SqlUuid>>, _>(
        jobs.iter()
            .map(|j| j.idempotency.map(|(_, claim)| claim))
            .collect::<Vec<_>>(),
    )
    // The publishing span's traceparent (issue 37), NULL with tracing off.
    .bind::<Array<Nullable<Text>>, _>(jobs.iter().map(|j| j.trace_context).collect::<Vec<_>>())
    .prepared()
    .load(conn)
    .await?;
    let answers = rows
        .into_iter()
        .zip(&buckets)
        .map(|(row, bucket)| {
            let answer = match (row.reserved.outcome.as_str(), row.job) {
                ("setup", _) => Ok(Reserving::NeedsSetup),
                (_, Some(job)) => Ok(Reserving::Inserted(Box::new(job))),
                (_, None) => match billing::reservation_outcome(row.reserved, *bucket) {
                    Ok(Err(refusal)) => Ok(Reserving::Refused(refusal)),
                    Ok(Ok(())) => Err(DbError::Query(diesel::result::Error::NotFound)),
                    Err(err) => Err(err),
                },
            };
            (row.ord, answer)
        })
        .collect();
    Ok(billing::in_item_order(&order, answers))
}

/// A job of this organization; another organization's job is `None`, exactly
/// like an unknown id.
pub async fn find_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
) -> Result<Option<Job>, DbError> {
    Ok(jobs::table
        .filter(jobs::id.eq(id))
        .filter(jobs::org_id.eq(org_id))
        .select(Job::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The jobs with these ids, in no particular order (ids without a row are
/// absent). Callers scope the rows to an organization themselves.
pub async fn find_many(conn: &mut AsyncPgConnection, ids: &[Uuid]) -> Result<Vec<Job>, DbError> {
    Ok(jobs::table
        .filter(jobs::id.eq_any(ids))
        .select(Job::as_select())
        .load(conn)
        .await?)
}

pub async fn find(conn: &mut AsyncPgConnection, id: Uuid) -> Result<Option<Job>, DbError> {
    Ok(jobs::table
        .find(id)
        .select(Job::as_select())
        .first(conn)
        .await
        .optional()?)
}

#[derive(Debug, Clone, Copy)]
pub struct JobFilter {
    pub tool: Option<Tool>,
    /// Only `pending` and `processing` jobs.
    pub active_only: bool,
    pub limit: i64,
}

/// Newest first.
pub async fn list_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    filter: JobFilter,
) -> Result<Vec<Job>, DbError> {
    let mut query = jobs::table
        .filter(jobs::org_id.eq(org_id))
        .select(Job::as_select())
        .order((jobs::created_at.desc(), jobs::id.desc()))
        .limit(filter.limit)
        .into_boxed();
    if let Some(tool) = filter.tool {
        query = query.filter(jobs::tool.eq(tool.as_str()));
    }
    if filter.active_only {
        query = query.filter(jobs::status.eq_any(ACTIVE));
    }
    Ok(query.load(conn).await?)
}

/// A job as a list row shows it: no parameters or outputs.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = jobs)]
pub struct JobSummary {
    pub id: Uuid,
    pub tool: String,
    pub status: String,
    pub model: String,
    pub estimated_credits: i64,
    pub actual_credits: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
}

/// A keyset page of an organization's jobs, newest first.
#[derive(Debug, Clone)]
pub struct JobPage {
    pub tool: Option<Tool>,
    pub status: Option<JobStatus>,
    /// The last row of the previous page (`created_at`, `id`): only older
    /// jobs are listed.
    pub before: Option<(DateTime<Utc>, Uuid)>,
    pub limit: i64,
}

/// One keyset page (`(created_at, id) < before`, newest first), read through
/// `jobs_org_created_idx`, `jobs_org_tool_created_idx` or
/// `jobs_org_status_created_idx`: the cost does not grow with the depth.
pub async fn page_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    page: &JobPage,
) -> Result<Vec<JobSummary>, DbError> {
    let mut query = jobs::table
        .filter(jobs::org_id.eq(org_id))
        .select(JobSummary::as_select())
        .order((jobs::created_at.desc(), jobs::id.desc()))
        .limit(page.limit)
        .into_boxed();
    if let Some(tool) = page.tool {
        query = query.filter(jobs::tool.eq(tool.as_str()));
    }
    if let Some(status) = page.status {
        query = query.filter(jobs::status.eq(status.as_str()));
    }
    if let Some((at, id)) = page.before {
        query = query.filter(
            jobs::created_at
                .lt(at)
                .or(jobs::created_at.eq(at).and(jobs::id.lt(id))),
        );
    }
    Ok(query.load(conn).await?)
}

/// An organization's jobs counted by status (the overview's figures).
pub async fn count_by_status_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
) -> Result<Vec<(String, i64)>, DbError> {
    Ok(jobs::table
        .filter(jobs::org_id.eq(org_id))
        .group_by(jobs::status)
        .select((jobs::status, diesel::dsl::count_star()))
        .order(jobs::status.asc())
        .load(conn)
        .await?)
}

#[derive(Debug)]
pub enum CancelOutcome {
    Cancelled(Box<Job>),
    AlreadyFinished(JobStatus),
    NotFound,
}

/// Moves a pending or processing job of this organization to `cancelled`.
pub async fn cancel(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
) -> Result<CancelOutcome, DbError> {
    let cancelled = diesel::update(jobs::table)
        .filter(jobs::id.eq(id))
        .filter(jobs::org_id.eq(org_id))
        .filter(jobs::status.eq_any(ACTIVE))
        .set((
            jobs::status.eq(JobStatus::Cancelled.as_str()),
            jobs::completed_at.eq(diesel::dsl::now),
            jobs::lease_expires_at.eq(None::<DateTime<Utc>>),
        ))
        .returning(Job::as_returning())
        .get_result(conn)
        .await
        .optional()?;
    if let Some(job) = cancelled {
        return Ok(CancelOutcome::Cancelled(Box::new(job)));
    }
    let status: Option<String> = jobs::table
        .filter(jobs::id.eq(id))
        .filter(jobs::org_id.eq(org_id))
        .select(jobs::status)
        .first(conn)
        .await
        .optional()?;
    Ok(match status.and_then(|s| s.parse().ok()) {
        Some(status) => CancelOutcome::AlreadyFinished(status),
        None => CancelOutcome::NotFound,
    })
}

/// The reason a job cancelled at its `Cancel-After` deadline carries (its
/// `errorMessage` and its `generation.failed` event).
pub const CANCEL_AFTER_REASON: &str = "cancelled: Cancel-After deadline passed";

/// What a cancellation at the deadline writes: as a cancel, with the reason
/// and nothing charged.
const CANCEL_AT_DEADLINE: &str = "UPDATE jobs SET status = 'cancelled', error_message = $1, \
     actual_credits = 0, completed_at = now(), lease_expires_at = NULL";

/// Unfinished jobs whose `Cancel-After` deadline passed on the database
/// clock, soonest first and at most `limit` (read through
/// `jobs_cancel_after_idx`, which holds only unfinished jobs with a
/// deadline): `cancelled` with [`CANCEL_AFTER_REASON`]. Rows another
/// transaction holds (a worker settling one) are skipped this round.
pub async fn cancel_past_deadline(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> Result<Vec<Job>, DbError> {
    Ok(diesel::sql_query(format!(
        "{CANCEL_AT_DEADLINE} \
         WHERE id IN (SELECT id FROM jobs \
                       WHERE cancel_after IS NOT NULL AND status IN ('pending', 'processing') \
                         AND cancel_after <= now() \
                       ORDER BY cancel_after LIMIT $2 FOR UPDATE SKIP LOCKED) \
           AND status IN ('pending', 'processing') \
         RETURNING *"
    ))
    .bind::<Text, _>(CANCEL_AFTER_REASON)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?)
}

/// [`cancel_past_deadline`] for one job of this organization: empty when
/// it is finished or its deadline has not passed.
pub async fn cancel_one_past_deadline(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
) -> Result<Vec<Job>, DbError> {
    Ok(diesel::sql_query(format!(
        "{CANCEL_AT_DEADLINE} \
         WHERE id = $2 AND org_id = $3 AND status IN ('pending', 'processing') \
           AND cancel_after <= now() \
         RETURNING *"
    ))
    .bind::<Text, _>(CANCEL_AFTER_REASON)
    .bind::<SqlUuid, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .load(conn)
    .await?)
}

/// Atomically takes the jobs among `ids` still pending for `worker_id`, with
/// a lease measured on the database clock, in no particular order; the
/// others are taken, cancelled, finished, unknown or past their
/// `Cancel-After` deadline (never started: the scheduler cancels them).
///
/// The same statement (one round trip, committed with the claim) records
/// the `generation.started` event of every first attempt it takes (a retry
/// is the same generation and announces nothing new), its payload
/// (`jobId`, `tool`, `model`) built from the claimed row: `event_ids[i]` is
/// the event id for `ids[i]`, `at` its time. `ids` must be distinct.
///
/// The claimed jobs (now `processing`) and their events are announced on
/// `channel` (see [`crate::notify`]) by the same statement, delivered when
/// it commits: no statement of its own after it, and the worker's own
/// ownership watch, subscribed after the claim, is seldom woken by it.
pub async fn claim_many_announcing(
    conn: &mut AsyncPgConnection,
    ids: &[Uuid],
    event_ids: &[Uuid],
    at: DateTime<Utc>,
    worker_id: &str,
    lease: Duration,
    channel: &str,
) -> Result<Vec<Job>, DbError> {
    debug_assert_eq!(ids.len(), event_ids.len());
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(diesel::sql_query(concat!(
        "WITH claimed AS ( \
           UPDATE jobs SET status = 'processing', attempt = attempt + 1, worker_id = $3, \
                  lease_expires_at = now() + make_interval(secs => $4), started_at = now(), \
                  progress = 0 \
            WHERE id = ANY($1) AND status = 'pending' \
              AND (cancel_after IS NULL OR cancel_after > now()) \
           RETURNING ",
        job_columns!(),
        "), \
         started AS MATERIALIZED ( \
           SELECT unigen_record_event(e.event_id, c.org_id, $5, \
                    jsonb_build_object('jobId', c.id, 'tool', c.tool, 'model', c.model), $6) \
             FROM claimed c JOIN unnest($1::uuid[], $2::uuid[]) AS e(job_id, event_id) \
               ON e.job_id = c.id \
            WHERE c.attempt = 1), \
         notified AS MATERIALIZED ( \
           SELECT pg_notify($7, string_agg(id::text, ',') \
                    || CASE WHEN bool_or(attempt = 1) THEN ',' || $8 ELSE '' END) \
             FROM claimed HAVING count(*) > 0) \
         SELECT ",
        job_columns!(),
        " FROM claimed \
          WHERE (SELECT count(*) FROM started) >= 0 AND (SELECT count(*) FROM notified) >= 0"
    ))
    .bind::<Array<SqlUuid>, _>(ids)
    .bind::<Array<SqlUuid>, _>(event_ids)
    .bind::<Text, _>(worker_id)
    .bind::<BigInt, _>(lease.as_secs() as i64)
    .bind::<Text, _>(crate::events::GENERATION_STARTED)
    .bind::<Timestamptz, _>(at)
    .bind::<Text, _>(channel)
    .bind::<Text, _>(crate::notify::EVENTS_RECORDED.to_string())
    .prepared()
    .load(conn)
    .await?)
}

/// Which of `ids` name a job (of any state, any organization).
pub async fn existing(conn: &mut AsyncPgConnection, ids: &[Uuid]) -> Result<Vec<Uuid>, DbError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(jobs::table
        .filter(jobs::id.eq_any(ids))
        .select(jobs::id)
        .load(conn)
        .await?)
}

/// Extends the lease of a job this attempt still owns. False: the job was
/// cancelled, finished or taken over, and the worker must stop.
pub async fn renew_lease(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    attempt: i32,
    lease: Duration,
) -> Result<bool, DbError> {
    let updated = diesel::sql_query(
        "UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $3) \
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

/// Filter: the job is still processing under this attempt (not cancelled,
/// not rescued and handed to another worker).
macro_rules! owned_by_attempt {
    ($id:expr, $attempt:expr) => {
        jobs::id
            .eq($id)
            .and(jobs::attempt.eq($attempt))
            .and(jobs::status.eq(JobStatus::Processing.as_str()))
    };
}

/// Raises a running job's progress; false when it changed nothing (not
/// owned by this attempt any more, or not above the stored progress), so
/// progress only grows while a job is processing.
pub async fn set_progress(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    attempt: i32,
    progress: i16,
) -> Result<bool, DbError> {
    let progress = progress.clamp(0, 100);
    let updated = diesel::update(jobs::table)
        .filter(owned_by_attempt!(id, attempt))
        .filter(jobs::progress.lt(progress))
        .set(jobs::progress.eq(progress))
        .execute(conn)
        .await?;
    Ok(updated == 1)
}

/// One finished job for [`complete_many`], with the event that announces it.
pub struct Completion<'a> {
    pub id: Uuid,
    pub attempt: i32,
    pub output: &'a serde_json::Value,
    pub actual_credits: i64,
    pub event: &'a Event,
}

/// Writes the results of jobs whose attempts still own them, with the
/// event of each one written, in one statement (one round trip); the rows
/// are locked in id order (as a cancel or another batch takes them).
/// Answers the ids written; a job cancelled (or taken over) meanwhile stays
/// as it is and announces nothing.
///
/// The written jobs and their events are announced on `channel` (see
/// [`crate::notify`]) by the same statement, delivered when the
/// transaction commits: waiters wake with no round trip after the commit.
/// (PostgreSQL serializes the commits of notifying transactions; a worker
/// writes one batch at a time, so that wait stays short.)
pub async fn complete_many(
    conn: &mut AsyncPgConnection,
    completions: &[Completion<'_>],
    channel: &str,
) -> Result<Vec<Uuid>, DbError> {
    #[derive(QueryableByName)]
    struct Written {
        #[diesel(sql_type = SqlUuid)]
        id: Uuid,
    }
    if completions.is_empty() {
        return Ok(Vec::new());
    }
    let written: Vec<Written> = diesel::sql_query(
        "WITH x AS (SELECT * FROM unnest($1::uuid[], $2::int4[], $3::jsonb[], $4::int8[], \
                                         $5::uuid[], $6::text[], $7::jsonb[], $8::timestamptz[]) \
                      AS x(id, attempt, output, credits, event_id, event_kind, event_data, event_at)), \
              owned AS (SELECT j.id FROM jobs j JOIN x ON x.id = j.id \
                         WHERE j.attempt = x.attempt AND j.status = 'processing' \
                         ORDER BY j.id FOR UPDATE OF j), \
              done AS (UPDATE jobs SET status = 'completed', progress = 100, output_data = x.output, \
                              actual_credits = x.credits, completed_at = now(), lease_expires_at = NULL \
                         FROM x JOIN owned ON owned.id = x.id \
                        WHERE jobs.id = x.id \
                       RETURNING jobs.id, jobs.org_id), \
              announced AS MATERIALIZED ( \
                SELECT unigen_record_event(x.event_id, done.org_id, x.event_kind, x.event_data, x.event_at) \
                  FROM done JOIN x ON x.id = done.id ORDER BY done.id), \
              notified AS MATERIALIZED ( \
                SELECT pg_notify($9, string_agg(id::text, ',') || ',' || $10) FROM done \
                HAVING count(*) > 0) \
         SELECT id FROM done \
          WHERE (SELECT count(*) FROM announced) >= 0 AND (SELECT count(*) FROM notified) >= 0",
    )
    .bind::<Array<SqlUuid>, _>(completions.iter().map(|c| c.id).collect::<Vec<_>>())
    .bind::<Array<Integer>, _>(completions.iter().map(|c| c.attempt).collect::<Vec<_>>())
    .bind::<Array<Jsonb>, _>(completions.iter().map(|c| c.output).collect::<Vec<_>>())
    .bind::<Array<BigInt>, _>(
        completions
            .iter()
            .map(|c| c.actual_credits)
            .collect::<Vec<_>>(),
    )
    .bind::<Array<SqlUuid>, _>(completions.iter().map(|c| c.event.id).collect::<Vec<_>>())
    .bind::<Array<Text>, _>(
        completions
            .iter()
            .map(|c| c.event.kind.as_str())
            .collect::<Vec<_>>(),
    )
    .bind::<Array<Jsonb>, _>(completions.iter().map(|c| &c.event.data).collect::<Vec<_>>())
    .bind::<Array<Timestamptz>, _>(
        completions
            .iter()
            .map(|c| c.event.created_at)
            .collect::<Vec<_>>(),
    )
    .bind::<Text, _>(channel)
    .bind::<Text, _>(crate::notify::EVENTS_RECORDED.to_string())
    .prepared()
    .load(conn)
    .await?;
    Ok(written.into_iter().map(|w| w.id).collect())
}

/// Stores the settled usage object of a finished job.
pub async fn set_usage(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    usage: &serde_json::Value,
) -> Result<(), DbError> {
    diesel::update(jobs::table.find(id))
        .set(jobs::usage.eq(usage))
        .execute(conn)
        .await?;
    Ok(())
}

/// [`set_usage`] for many jobs in one statement.
pub async fn set_usage_many(
    conn: &mut AsyncPgConnection,
    usages: &[(Uuid, serde_json::Value)],
) -> Result<(), DbError> {
    if usages.is_empty() {
        return Ok(());
    }
    diesel::sql_query(
        "UPDATE jobs SET usage = x.usage \
           FROM unnest($1::uuid[], $2::jsonb[]) AS x(id, usage) WHERE jobs.id = x.id",
    )
    .bind::<Array<SqlUuid>, _>(usages.iter().map(|(id, _)| *id).collect::<Vec<_>>())
    .bind::<Array<diesel::sql_types::Jsonb>, _>(
        usages.iter().map(|(_, usage)| usage).collect::<Vec<_>>(),
    )
    .prepared()
    .execute(conn)
    .await?;
    Ok(())
}

/// Fails the job with a reason; a failed job consumes nothing.
pub async fn fail(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    attempt: i32,
    message: &str,
) -> Result<bool, DbError> {
    let updated = diesel::update(jobs::table)
        .filter(owned_by_attempt!(id, attempt))
        .set((
            jobs::status.eq(JobStatus::Failed.as_str()),
            jobs::error_message.eq(message),
            jobs::actual_credits.eq(0),
            jobs::completed_at.eq(diesel::dsl::now),
            jobs::lease_expires_at.eq(None::<DateTime<Utc>>),
        ))
        .execute(conn)
        .await?;
    Ok(updated == 1)
}

/// Hands a job back to the queue without counting the attempt (graceful
/// shutdown): pending again, unpublished, so the relay re-publishes it.
pub async fn release(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    attempt: i32,
) -> Result<bool, DbError> {
    let updated = diesel::update(jobs::table)
        .filter(owned_by_attempt!(id, attempt))
        .set((
            jobs::status.eq(JobStatus::Pending.as_str()),
            jobs::attempt.eq(attempt - 1),
            jobs::progress.eq(0),
            jobs::worker_id.eq(None::<String>),
            jobs::lease_expires_at.eq(None::<DateTime<Utc>>),
            jobs::enqueued_at.eq(None::<DateTime<Utc>>),
        ))
        .execute(conn)
        .await?;
    Ok(updated == 1)
}

/// Records that the broker confirmed these jobs' first messages (the
/// submitter's confirms arrive after the commit, in batches). A job handed
/// back meanwhile ([`release`]: pending again after it started) is left
/// unmarked: its message was consumed by the worker that released it, so
/// only the relay's publish ([`mark_republished`]) may mark it, or it would
/// stay pending with no message.
pub async fn mark_enqueued(conn: &mut AsyncPgConnection, ids: &[Uuid]) -> Result<usize, DbError> {
    Ok(diesel::update(jobs::table)
        .filter(jobs::id.eq_any(ids))
        .filter(jobs::enqueued_at.is_null())
        .filter(
            jobs::status
                .ne(JobStatus::Pending.as_str())
                .or(jobs::started_at.is_null()),
        )
        .set(jobs::enqueued_at.eq(diesel::dsl::now))
        // diesel does not cache this one (its `ANY` over a list); the text is constant.
        .prepared()
        .execute(conn)
        .await?)
}

/// Records that the relay published these jobs again, in the transaction
/// that locked them ([`lock_unpublished`]).
pub async fn mark_republished(
    conn: &mut AsyncPgConnection,
    ids: &[Uuid],
) -> Result<usize, DbError> {
    Ok(diesel::update(jobs::table)
        .filter(jobs::id.eq_any(ids))
        .filter(jobs::enqueued_at.is_null())
        .set(jobs::enqueued_at.eq(diesel::dsl::now))
        // diesel does not cache this one (its `ANY` over a list); the text is constant.
        .prepared()
        .execute(conn)
        .await?)
}

#[derive(Debug, Clone, QueryableByName)]
pub struct UnpublishedJob {
    #[diesel(sql_type = SqlUuid)]
    pub id: Uuid,
    #[diesel(sql_type = Text)]
    pub tool: String,
    #[diesel(sql_type = Integer)]
    pub attempt: i32,
    /// The `traceparent` of the job's first publish (tracing on).
    #[diesel(sql_type = Nullable<Text>)]
    pub trace_context: Option<String>,
}

/// Pending jobs the broker never confirmed, created more than `grace` ago,
/// locked for this transaction so concurrent relays take disjoint batches.
pub async fn lock_unpublished(
    conn: &mut AsyncPgConnection,
    grace: Duration,
    limit: i64,
) -> Result<Vec<UnpublishedJob>, DbError> {
    Ok(diesel::sql_query(
        "SELECT id, tool, attempt, trace_context FROM jobs \
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
pub struct ToolStatusCount {
    #[diesel(sql_type = Text)]
    pub tool: String,
    #[diesel(sql_type = Text)]
    pub status: String,
    #[diesel(sql_type = BigInt)]
    pub count: i64,
}

/// Jobs per tool and status, for the metrics gauge.
pub async fn count_by_tool_and_status(
    conn: &mut AsyncPgConnection,
) -> Result<Vec<ToolStatusCount>, DbError> {
    Ok(
        diesel::sql_query("SELECT tool, status, count(*) AS count FROM jobs GROUP BY tool, status")
            .prepared()
            .load(conn)
            .await?,
    )
}

#[derive(Debug, Clone, QueryableByName)]
pub struct RescuedJob {
    #[diesel(sql_type = SqlUuid)]
    pub id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    pub org_id: Uuid,
    #[diesel(sql_type = Text)]
    pub tool: String,
    #[diesel(sql_type = Text)]
    pub model: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<Text>)]
    pub error_message: Option<String>,
    #[diesel(sql_type = Text)]
    pub status: String,
    #[diesel(sql_type = Integer)]
    pub attempt: i32,
}

/// Jobs whose queue message was dead-lettered (no worker could take it):
/// each still `pending` in the attempt its message carried fails with a
/// reason. A job claimed, finished or re-published since is left alone.
pub async fn fail_dead_lettered(
    conn: &mut AsyncPgConnection,
    messages: &[(Uuid, i32)],
) -> Result<Vec<RescuedJob>, DbError> {
    let ids: Vec<Uuid> = messages.iter().map(|(id, _)| *id).collect();
    let attempts: Vec<i32> = messages.iter().map(|(_, attempt)| *attempt).collect();
    Ok(diesel::sql_query(
        "WITH dead(id, attempt) AS (SELECT * FROM unnest($1::uuid[], $2::int[])), \
              stranded AS (SELECT j.id FROM jobs j JOIN dead d ON d.id = j.id AND d.attempt = j.attempt \
                            WHERE j.status = 'pending' ORDER BY j.id FOR UPDATE OF j SKIP LOCKED) \
         UPDATE jobs SET status = 'failed', \
             error_message = 'no worker could take the job (its queue message was dead-lettered)', \
             actual_credits = 0, completed_at = now(), lease_expires_at = NULL \
         FROM stranded WHERE jobs.id = stranded.id \
         RETURNING jobs.id, jobs.org_id, jobs.tool, jobs.model, jobs.error_message, jobs.status, jobs.attempt",
    )
    .bind::<Array<SqlUuid>, _>(ids)
    .bind::<Array<Integer>, _>(attempts)
    .prepared()
    .load(conn)
    .await?)
}

/// Jobs whose worker stopped renewing its lease: back to `pending` (and
/// unpublished, so the relay re-publishes them), or `failed` once they used
/// `max_attempts` claims.
pub async fn rescue_expired_leases(
    conn: &mut AsyncPgConnection,
    max_attempts: i32,
    limit: i64,
) -> Result<Vec<RescuedJob>, DbError> {
    Ok(diesel::sql_query(
        "UPDATE jobs SET \
             status = CASE WHEN attempt >= $1 THEN 'failed' ELSE 'pending' END, \
             error_message = CASE WHEN attempt >= $1 \
                 THEN 'the job was interrupted ' || attempt || ' times (worker lost); giving up' \
                 ELSE error_message END, \
             actual_credits = CASE WHEN attempt >= $1 THEN 0 ELSE actual_credits END, \
             completed_at = CASE WHEN attempt >= $1 THEN now() ELSE NULL END, \
             progress = 0, worker_id = NULL, lease_expires_at = NULL, enqueued_at = NULL \
         WHERE id IN (SELECT id FROM jobs WHERE status = 'processing' AND lease_expires_at < now() \
                      ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
         RETURNING id, org_id, tool, model, error_message, status, attempt",
    )
    .bind::<Integer, _>(max_attempts)
    .bind::<BigInt, _>(limit)
    .prepared()
    .load(conn)
    .await?)
}

/// Processing jobs whose current attempt started longer ago than their
/// tool's limit in `limits`: failed with a reason (not retried: another
/// attempt would most likely overrun too), in one statement for all tools.
/// The worker running one sees it is no longer its job and aborts.
pub async fn fail_overdue(
    conn: &mut AsyncPgConnection,
    limits: &[(Tool, Duration)],
    limit: i64,
) -> Result<Vec<RescuedJob>, DbError> {
    let tools: Vec<&str> = limits.iter().map(|(tool, _)| tool.as_str()).collect();
    let seconds: Vec<i64> = limits.iter().map(|(_, max)| max.as_secs() as i64).collect();
    Ok(diesel::sql_query(
        "WITH max_run(tool, secs) AS (SELECT * FROM unnest($1::text[], $2::bigint[])), \
              overdue AS (SELECT j.id, m.secs FROM jobs j JOIN max_run m ON m.tool = j.tool \
                           WHERE j.status = 'processing' \
                             AND j.started_at < now() - make_interval(secs => m.secs) \
                           ORDER BY j.started_at LIMIT $3 FOR UPDATE OF j SKIP LOCKED) \
         UPDATE jobs SET status = 'failed', \
             error_message = 'the job exceeded its maximum run time of ' || overdue.secs || ' s', \
             actual_credits = 0, completed_at = now(), lease_expires_at = NULL \
         FROM overdue WHERE jobs.id = overdue.id \
         RETURNING jobs.id, jobs.org_id, jobs.tool, jobs.model, jobs.error_message, jobs.status, jobs.attempt",
    )
    .bind::<Array<Text>, _>(tools)
    .bind::<Array<BigInt>, _>(seconds)
    .bind::<BigInt, _>(limit)
    .prepared()
    .load(conn)
    .await?)
}

#[derive(Debug, Clone, QueryableByName)]
pub struct ExpiredJob {
    #[diesel(sql_type = SqlUuid)]
    pub id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    pub org_id: Uuid,
    #[diesel(sql_type = diesel::sql_types::Jsonb)]
    pub input_params: serde_json::Value,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Jsonb>)]
    pub output_data: Option<serde_json::Value>,
}

/// Finished jobs that finished more than `retention` ago, oldest first,
/// locked for this transaction (concurrent schedulers take disjoint batches).
pub async fn lock_expired(
    conn: &mut AsyncPgConnection,
    retention: Duration,
    limit: i64,
) -> Result<Vec<ExpiredJob>, DbError> {
    Ok(diesel::sql_query(
        "SELECT id, org_id, input_params, output_data FROM jobs \
         WHERE status IN ('completed', 'failed', 'cancelled') \
           AND completed_at < now() - make_interval(secs => $1) \
         ORDER BY completed_at LIMIT $2 FOR UPDATE SKIP LOCKED",
    )
    .bind::<BigInt, _>(retention.as_secs() as i64)
    .bind::<BigInt, _>(limit)
    .prepared()
    .load(conn)
    .await?)
}

pub async fn delete(conn: &mut AsyncPgConnection, ids: &[Uuid]) -> Result<usize, DbError> {
    Ok(diesel::delete(jobs::table.filter(jobs::id.eq_any(ids)))
        .execute(conn)
        .await?)
}

/// The W3C `traceparent` the job was first published under (issue 37), for
/// the spans of later work on it (webhook attempts) to link to.
pub async fn trace_context(
    conn: &mut AsyncPgConnection,
    id: Uuid,
) -> Result<Option<String>, DbError> {
    Ok(jobs::table
        .find(id)
        .select(jobs::trace_context)
        .first::<Option<String>>(conn)
        .await
        .optional()?
        .flatten())
}

#[cfg(test)]
mod tests {
    use diesel::pg::Pg;

    use super::*;

    #[test]
    fn the_raw_statements_return_every_column_of_a_job_in_order() {
        let select =
            diesel::debug_query::<Pg, _>(&jobs::table.select(Job::as_select())).to_string();
        let listed: Vec<String> = select
            .trim_start_matches("SELECT ")
            .split(" FROM ")
            .next()
            .expect("a select list")
            .split(", ")
            .map(|column| {
                column
                    .rsplit('.')
                    .next()
                    .unwrap()
                    .trim_matches('"')
                    .to_string()
            })
            .collect();
        let ours: Vec<&str> = job_columns!().split(',').map(str::trim).collect();
        assert_eq!(listed, ours);
    }
}
