//! Agent runs and their steps. A run's row is written when it starts, each
//! step as it is taken, and the totals once, by the transition out of
//! `running` (conditional on it, so the run's own end and the scheduler's
//! rescue of an abandoned run cannot both win).

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::DbError;
use crate::models::{AgentRun, AgentRunStep, NewAgentRun};
use crate::prepared::PrepareOnce;
use crate::schema::{agent_run_steps, agent_runs, agents};

/// Runs left `running` this long past their limit were abandoned by a
/// stopped API process.
pub const ABANDONED_MARGIN: Duration = Duration::from_secs(60);

pub const RUNNING: &str = "running";
pub const COMPLETED: &str = "completed";
pub const FAILED: &str = "failed";
pub const STATUSES: [&str; 3] = [RUNNING, COMPLETED, FAILED];

/// Records a started run and counts it on its agent.
pub async fn insert(
    conn: &mut AsyncPgConnection,
    new: &NewAgentRun<'_>,
) -> Result<AgentRun, DbError> {
    let run = diesel::insert_into(agent_runs::table)
        .values(new)
        .returning(AgentRun::as_returning())
        .get_result(conn)
        .await?;
    diesel::update(agents::table.find(new.agent_id))
        .set(agents::run_count.eq(agents::run_count + 1))
        .execute(conn)
        .await?;
    Ok(run)
}

pub async fn insert_step(conn: &mut AsyncPgConnection, step: &AgentRunStep) -> Result<(), DbError> {
    diesel::insert_into(agent_run_steps::table)
        .values(step)
        .execute(conn)
        .await?;
    Ok(())
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunEnd<'a> {
    pub status: &'a str,
    pub output: Option<&'a str>,
    pub error_message: Option<&'a str>,
    pub total_steps: i32,
    pub tokens_used: i64,
    pub credits_used: i64,
    pub duration_ms: i64,
}

/// Moves a running run to its end. `None`: it had already ended (the
/// scheduler gave it up), nothing written.
pub async fn finish(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    end: &RunEnd<'_>,
) -> Result<Option<AgentRun>, DbError> {
    Ok(diesel::update(agent_runs::table)
        .filter(agent_runs::id.eq(id))
        .filter(agent_runs::status.eq(RUNNING))
        .set((
            agent_runs::status.eq(end.status),
            agent_runs::output.eq(end.output),
            agent_runs::error_message.eq(end.error_message),
            agent_runs::total_steps.eq(end.total_steps),
            agent_runs::tokens_used.eq(end.tokens_used),
            agent_runs::credits_used.eq(end.credits_used),
            agent_runs::duration_ms.eq(end.duration_ms),
            agent_runs::completed_at.eq(diesel::dsl::now),
        ))
        .returning(AgentRun::as_returning())
        .get_result(conn)
        .await
        .optional()?)
}

/// A run of this organization's agent; anything else is `None`.
pub async fn find_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    agent_id: Uuid,
    id: Uuid,
) -> Result<Option<AgentRun>, DbError> {
    Ok(agent_runs::table
        .filter(agent_runs::id.eq(id))
        .filter(agent_runs::agent_id.eq(agent_id))
        .filter(agent_runs::org_id.eq(org_id))
        .select(AgentRun::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// A run of this organization, whichever agent ran it.
pub async fn find_in_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
) -> Result<Option<AgentRun>, DbError> {
    Ok(agent_runs::table
        .filter(agent_runs::id.eq(id))
        .filter(agent_runs::org_id.eq(org_id))
        .select(AgentRun::as_select())
        .first(conn)
        .await
        .optional()?)
}

pub async fn steps(
    conn: &mut AsyncPgConnection,
    run_id: Uuid,
) -> Result<Vec<AgentRunStep>, DbError> {
    Ok(agent_run_steps::table
        .filter(agent_run_steps::run_id.eq(run_id))
        .order(agent_run_steps::step_number.asc())
        .select(AgentRunStep::as_select())
        .load(conn)
        .await?)
}

/// The organization's runs of an agent, newest first.
pub async fn list_for_agent(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    agent_id: Uuid,
    status: Option<&str>,
    limit: i64,
) -> Result<Vec<AgentRun>, DbError> {
    let mut query = agent_runs::table
        .filter(agent_runs::agent_id.eq(agent_id))
        .filter(agent_runs::org_id.eq(org_id))
        .order((agent_runs::created_at.desc(), agent_runs::id.desc()))
        .limit(limit)
        .select(AgentRun::as_select())
        .into_boxed();
    if let Some(status) = status {
        query = query.filter(agent_runs::status.eq(status));
    }
    Ok(query.load(conn).await?)
}

/// The latest `limit` completed exchanges of a session, oldest first: what
/// an agent with memory remembers.
pub async fn session_history(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    agent_id: Uuid,
    session_id: &str,
    limit: i64,
) -> Result<Vec<(String, String)>, DbError> {
    let mut exchanges: Vec<(String, Option<String>)> = agent_runs::table
        .filter(agent_runs::agent_id.eq(agent_id))
        .filter(agent_runs::org_id.eq(org_id))
        .filter(agent_runs::session_id.eq(session_id))
        .filter(agent_runs::status.eq(COMPLETED))
        .order((agent_runs::created_at.desc(), agent_runs::id.desc()))
        .limit(limit)
        .select((agent_runs::input, agent_runs::output))
        .load(conn)
        .await?;
    exchanges.reverse();
    Ok(exchanges
        .into_iter()
        .map(|(input, output)| (input, output.unwrap_or_default()))
        .collect())
}

/// Runs that ended more than `retention` ago, oldest first, locked for this
/// transaction (concurrent schedulers take disjoint batches).
pub async fn lock_expired(
    conn: &mut AsyncPgConnection,
    retention: std::time::Duration,
    limit: i64,
) -> Result<Vec<Uuid>, DbError> {
    use diesel::sql_types::{BigInt, Uuid as SqlUuid};
    #[derive(QueryableByName)]
    struct Expired {
        #[diesel(sql_type = SqlUuid)]
        id: Uuid,
    }
    let expired: Vec<Expired> = diesel::sql_query(
        "SELECT id FROM agent_runs \
          WHERE status IN ('completed', 'failed') \
            AND completed_at < now() - make_interval(secs => $1) \
          ORDER BY completed_at LIMIT $2 FOR UPDATE SKIP LOCKED",
    )
    .bind::<BigInt, _>(retention.as_secs() as i64)
    .bind::<BigInt, _>(limit)
    .prepared()
    .load(conn)
    .await?;
    Ok(expired.into_iter().map(|run| run.id).collect())
}

/// Deletes runs with their steps.
pub async fn delete(conn: &mut AsyncPgConnection, ids: &[Uuid]) -> Result<usize, DbError> {
    Ok(
        diesel::delete(agent_runs::table.filter(agent_runs::id.eq_any(ids)))
            .execute(conn)
            .await?,
    )
}

/// Fails runs still `running` that started before `started_before` (their
/// API process died), returning them for their `agent.run.failed` events.
/// At most `limit` per call; safe with several schedulers.
pub async fn fail_abandoned(
    conn: &mut AsyncPgConnection,
    started_before: DateTime<Utc>,
    message: &str,
    limit: i64,
) -> Result<Vec<AgentRun>, DbError> {
    use diesel::sql_types::{BigInt, Text, Timestamptz};
    Ok(diesel::sql_query(
        "UPDATE agent_runs r SET status = 'failed', error_message = $2, completed_at = now(), \
                duration_ms = (extract(epoch FROM now() - r.created_at) * 1000)::bigint, \
                total_steps = (SELECT count(*) FROM agent_run_steps s WHERE s.run_id = r.id) \
          WHERE r.id IN (SELECT id FROM agent_runs WHERE status = 'running' AND created_at < $1 \
                          ORDER BY created_at LIMIT $3 FOR UPDATE SKIP LOCKED) \
            AND r.status = 'running' \
         RETURNING r.*",
    )
    .bind::<Timestamptz, _>(started_before)
    .bind::<Text, _>(message)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?)
}
