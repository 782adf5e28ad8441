//! Agents: plan-checked creation, org-scoped reads and changes, templates.
//! An organization sees its own agents and the templates; it can change and
//! delete only its own.

use diesel::prelude::*;
use diesel::sql_types::{Integer, Text, Uuid as SqlUuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use unigen_core::domain::{AgentLimits, PlanRefusal};

use crate::DbError;
use crate::models::{Agent, AgentUpdate, NewAgent};
use crate::schema::{agent_runs, agents, knowledge_files};

#[derive(QueryableByName)]
struct LimitsRow {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Integer)]
    max_agents: i32,
    #[diesel(sql_type = Integer)]
    tools_per_agent: i32,
    #[diesel(sql_type = Integer)]
    max_iterations: i32,
    #[diesel(sql_type = Integer)]
    knowledge_files_per_agent: i32,
    #[diesel(sql_type = Integer)]
    max_file_size_mb: i32,
}

/// The organization's agent limits. `lock`: hold the organization's row
/// until the transaction ends, so concurrent creations count one by one.
async fn limits_of(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    lock: bool,
) -> Result<AgentLimits, DbError> {
    let sql = format!(
        "SELECT p.name, p.max_agents, p.tools_per_agent, p.max_iterations, \
                p.knowledge_files_per_agent, p.max_file_size_mb \
           FROM organizations o JOIN plans p ON p.code = o.plan_code WHERE o.id = $1{}",
        if lock { " FOR UPDATE OF o" } else { "" }
    );
    let row: LimitsRow = diesel::sql_query(sql)
        .bind::<SqlUuid, _>(org_id)
        .get_result(conn)
        .await?;
    Ok(AgentLimits {
        plan: row.name,
        max_agents: row.max_agents,
        tools_per_agent: row.tools_per_agent,
        max_iterations: row.max_iterations,
        knowledge_files_per_agent: row.knowledge_files_per_agent,
        max_file_size_mb: row.max_file_size_mb,
    })
}

pub async fn limits(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<AgentLimits, DbError> {
    limits_of(conn, org_id, false).await
}

#[derive(Debug)]
pub enum CreateOutcome {
    Created(Box<Agent>),
    Refused(PlanRefusal),
}

/// Creates the agent if the plan allows it: agents on the plan, one more
/// agent, its tools and iterations within the plan's.
pub async fn create_within_plan(
    conn: &mut AsyncPgConnection,
    new: &NewAgent,
) -> Result<CreateOutcome, DbError> {
    conn.transaction::<_, DbError, _>(async |conn| {
        let limits = limits_of(conn, new.org_id, true).await?;
        if let Err(refusal) = limits.admit(new.tools.len(), new.max_iterations) {
            return Ok(CreateOutcome::Refused(refusal));
        }
        let count: i64 = agents::table
            .filter(agents::org_id.eq(new.org_id))
            .count()
            .get_result(conn)
            .await?;
        if count >= i64::from(limits.max_agents) {
            return Ok(CreateOutcome::Refused(PlanRefusal::TooManyAgents {
                plan: limits.plan,
                max: limits.max_agents,
            }));
        }
        let agent = diesel::insert_into(agents::table)
            .values(new)
            .returning(Agent::as_returning())
            .get_result(conn)
            .await?;
        Ok(CreateOutcome::Created(Box::new(agent)))
    })
    .await
}

/// The organization's agents, newest first.
pub async fn list_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
) -> Result<Vec<Agent>, DbError> {
    Ok(agents::table
        .filter(agents::org_id.eq(org_id))
        .order((agents::created_at.desc(), agents::id.desc()))
        .select(Agent::as_select())
        .load(conn)
        .await?)
}

/// The templates, optionally of one category, by category and name.
pub async fn list_templates(
    conn: &mut AsyncPgConnection,
    category: Option<&str>,
) -> Result<Vec<Agent>, DbError> {
    let mut query = agents::table
        .filter(agents::is_template.eq(true))
        .order((agents::template_category.asc(), agents::name.asc()))
        .select(Agent::as_select())
        .into_boxed();
    if let Some(category) = category {
        query = query.filter(agents::template_category.eq(category));
    }
    Ok(query.load(conn).await?)
}

/// The organization's agent or a template; anything else is `None`,
/// another organization's agent exactly like an unknown id.
pub async fn find_visible(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
) -> Result<Option<Agent>, DbError> {
    Ok(agents::table
        .filter(agents::id.eq(id))
        .filter(agents::org_id.eq(org_id).or(agents::is_template.eq(true)))
        .select(Agent::as_select())
        .first(conn)
        .await
        .optional()?)
}

#[derive(Debug)]
pub enum UpdateOutcome {
    Updated(Box<Agent>),
    NotFound,
    /// Templates are read-only: duplicate one to change it.
    Template,
    Refused(PlanRefusal),
}

/// Applies `changes` to the organization's agent, if the result stays
/// within the plan.
pub async fn update(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    changes: AgentUpdate,
) -> Result<UpdateOutcome, DbError> {
    conn.transaction::<_, DbError, _>(async |conn| {
        let current = agents::table
            .filter(agents::id.eq(id))
            .filter(agents::org_id.eq(org_id).or(agents::is_template.eq(true)))
            .select(Agent::as_select())
            .for_update()
            .first(conn)
            .await
            .optional()?;
        let Some(current) = current else {
            return Ok(UpdateOutcome::NotFound);
        };
        if current.is_template {
            return Ok(UpdateOutcome::Template);
        }
        let tools = changes.tools.as_ref().map_or(current.tools.len(), Vec::len);
        let iterations = changes.max_iterations.unwrap_or(current.max_iterations);
        if changes.tools.is_some() || changes.max_iterations.is_some() {
            let limits = limits_of(conn, org_id, false).await?;
            if let Err(refusal) = limits.admit(tools, iterations) {
                return Ok(UpdateOutcome::Refused(refusal));
            }
        }
        let agent = diesel::update(agents::table.find(id))
            .set((&changes, agents::updated_at.eq(diesel::dsl::now)))
            .returning(Agent::as_returning())
            .get_result(conn)
            .await?;
        Ok(UpdateOutcome::Updated(Box::new(agent)))
    })
    .await
}

/// Deletes the organization's agent with its runs and knowledge files
/// (templates and others' agents: `None`). Returns the storage prefixes of
/// their files, for the caller to remove once this has committed.
pub async fn delete(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
) -> Result<Option<Vec<String>>, DbError> {
    conn.transaction::<_, DbError, _>(async |conn| {
        let files: Vec<Uuid> = knowledge_files::table
            .filter(knowledge_files::agent_id.eq(id))
            .filter(knowledge_files::org_id.eq(org_id))
            .select(knowledge_files::id)
            .load(conn)
            .await?;
        let runs: Vec<Uuid> = agent_runs::table
            .filter(agent_runs::agent_id.eq(id))
            .filter(agent_runs::org_id.eq(org_id))
            .select(agent_runs::id)
            .load(conn)
            .await?;
        let deleted = diesel::delete(
            agents::table
                .filter(agents::id.eq(id))
                .filter(agents::org_id.eq(org_id)),
        )
        .execute(conn)
        .await?;
        if deleted == 0 {
            return Ok(None);
        }
        let prefixes = files
            .into_iter()
            .map(|file| unigen_core::storage::knowledge_storage_prefix(org_id, file))
            .chain(
                runs.into_iter()
                    .map(unigen_core::storage::run_storage_prefix),
            )
            .collect();
        Ok(Some(prefixes))
    })
    .await
}
