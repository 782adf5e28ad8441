//! Agents (scope `agents`): create, list (with templates), read, update,
//! delete, duplicate. Templates are readable and duplicable by every
//! organization and changed by none.

use std::collections::HashMap;

use actix_web::{HttpResponse, delete, get, patch, post, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use unigen_agents as agents;
use unigen_agents::{AgentRequest, MAX_NAME_CHARS, TEMPLATE_CATEGORIES};
use unigen_core::ValidationError;
use unigen_core::domain::Scope;
use unigen_db::models::{Agent, NewAgent};
use unigen_db::queries::agents::{CreateOutcome, UpdateOutcome};
use unigen_db::{DbError, queries};
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::{json_body, not_found, path_id, query_bool};
use crate::state::AppState;

const KIND: &str = "agent";

/// An agent (the organization's, or a template).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AgentView {
    pub id: Uuid,
    pub name: String,
    pub description: String,
    pub icon: String,
    pub system_prompt: String,
    pub model: String,
    pub tools: Vec<String>,
    pub temperature: f64,
    pub max_tokens: i32,
    pub max_iterations: i32,
    pub memory_enabled: bool,
    pub is_template: bool,
    pub is_public: bool,
    /// A template's category (kept by its duplicates): `research`, `content`,
    /// `coding`, `analysis`, `support`, `productivity`.
    pub template_category: Option<String>,
    pub run_count: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<Agent> for AgentView {
    fn from(agent: Agent) -> Self {
        Self {
            id: agent.id,
            name: agent.name,
            description: agent.description,
            icon: agent.icon,
            system_prompt: agent.system_prompt,
            model: agent.model,
            tools: agent.tools,
            temperature: agent.temperature,
            max_tokens: agent.max_tokens,
            max_iterations: agent.max_iterations,
            memory_enabled: agent.memory_enabled,
            is_template: agent.is_template,
            is_public: agent.is_public,
            template_category: agent.template_category,
            run_count: agent.run_count,
            created_at: agent.created_at,
            updated_at: agent.updated_at,
        }
    }
}

/// `{agent: {...}}`, as the spec wraps a created agent.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AgentEnvelope {
    pub agent: AgentView,
}

impl AgentEnvelope {
    fn of(agent: Agent) -> Self {
        Self {
            agent: agent.into(),
        }
    }
}

/// The organization's agents (newest first), then the templates when asked for.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AgentList {
    pub agents: Vec<AgentView>,
}

/// An agent tool id.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum AgentTool {
    WebSearch,
    WebFetch,
    GenerateText,
    GenerateImage,
    AnalyzeImage,
    GenerateChart,
    CreateDocument,
}

/// Body of `POST /agents`, as documented (the handler reads an
/// [`AgentRequest`]). Unknown fields are ignored.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct AgentCreateRequest {
    /// 1 to 100 characters, not only spaces.
    #[schema(min_length = 1, max_length = 100, pattern = "\\S")]
    pub name: String,
    /// At most 500 characters.
    #[schema(max_length = 500)]
    pub description: Option<String>,
    /// Default `bot`; at most 64 characters.
    #[schema(max_length = 64)]
    pub icon: Option<String>,
    /// 1 to 10,000 characters, not only spaces.
    #[schema(min_length = 1, max_length = 10000, pattern = "\\S")]
    pub system_prompt: String,
    /// A chat model id (default: the default chat model).
    pub model: Option<String>,
    /// Distinct tool ids, at most the plan's `tools_per_agent`.
    #[schema(max_items = 7)]
    pub tools: Option<Vec<AgentTool>>,
    /// 0 to 2, default 0.7.
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f64>,
    /// 100 to 8000, default 4000.
    #[schema(minimum = 100, maximum = 8000)]
    pub max_tokens: Option<i64>,
    /// 1 to 20 (and at most the plan's), default 10.
    #[schema(minimum = 1, maximum = 20)]
    pub max_iterations: Option<i64>,
    /// Runs sharing a `session_id` see the earlier exchanges. Default false.
    pub memory_enabled: Option<bool>,
    /// Default false.
    pub is_public: Option<bool>,
}

/// Body of `PATCH /agents/{id}`: any subset of the create fields.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct AgentUpdateRequest {
    #[schema(min_length = 1, max_length = 100, pattern = "\\S")]
    pub name: Option<String>,
    #[schema(max_length = 500)]
    pub description: Option<String>,
    #[schema(max_length = 64)]
    pub icon: Option<String>,
    #[schema(min_length = 1, max_length = 10000, pattern = "\\S")]
    pub system_prompt: Option<String>,
    pub model: Option<String>,
    #[schema(max_items = 7)]
    pub tools: Option<Vec<AgentTool>>,
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f64>,
    #[schema(minimum = 100, maximum = 8000)]
    pub max_tokens: Option<i64>,
    #[schema(minimum = 1, maximum = 20)]
    pub max_iterations: Option<i64>,
    pub memory_enabled: Option<bool>,
    pub is_public: Option<bool>,
}

/// Body of `POST /agents/{id}/duplicate` (optional).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct DuplicateRequest {
    /// The copy's name (default: the original's name followed by ` (copy)`).
    #[schema(min_length = 1, max_length = 100, pattern = "\\S")]
    pub name: Option<String>,
}

async fn create_within_plan(state: &AppState, new: &NewAgent) -> Result<HttpResponse, ApiError> {
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    match queries::agents::create_within_plan(&mut conn, new).await? {
        CreateOutcome::Created(agent) => {
            Ok(HttpResponse::Created().json(AgentEnvelope::of(*agent)))
        }
        CreateOutcome::Refused(refusal) => Err(refusal.into()),
    }
}

/// Create an agent.
#[utoipa::path(
    tag = "agents",
    request_body = AgentCreateRequest,
    responses(
        (status = 201, body = AgentEnvelope),
        (status = 400, description = "Invalid field; `param` names it (`name` missing, invalid tool ids, an unknown model...)", body = ErrorBody),
        (status = 402, description = "`limit_reached`: agent limit reached, or more tools or iterations than the plan allows", body = ErrorBody),
        (status = 403, description = "Missing scope `agents`, or `not_available_on_plan`: agents not available on the plan", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
    ),
    security(("bearer" = ["agents"]))
)]
#[post("/agents")]
pub async fn create_agent(
    state: web::Data<AppState>,
    caller: Caller,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Agents)?;
    let request: AgentRequest = json_body(&body)?;
    let new = request.to_new_agent(&state.catalogue, Uuid::now_v7(), caller.org_id)?;
    create_within_plan(&state, &new).await
}

/// List the organization's agents, and the templates with `include_templates`.
#[utoipa::path(
    tag = "agents",
    params(
        ("include_templates" = Option<bool>, Query, description = "Also list the built-in templates (default false)"),
        ("template_category" = Option<String>, Query, pattern = "^(research|content|coding|analysis|support|productivity)$", description = "Only templates of this category: research, content, coding, analysis, support, productivity (implies include_templates)"),
    ),
    responses(
        (status = 200, body = AgentList),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
    ),
    security(("bearer" = ["agents"]))
)]
#[get("/agents")]
pub async fn list_agents(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Agents)?;
    let category = match query.get("template_category") {
        None => None,
        Some(raw) if TEMPLATE_CATEGORIES.contains(&raw.as_str()) => Some(raw.as_str()),
        Some(raw) => {
            return Err(ValidationError::new(
                "template_category",
                format!(
                    "template_category must be one of {}, got `{raw}`",
                    TEMPLATE_CATEGORIES.join(", ")
                ),
            )
            .into());
        }
    };
    let with_templates = query_bool(&query, "include_templates", category.is_some())?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let mut agents = queries::agents::list_for_org(&mut conn, caller.org_id).await?;
    if with_templates {
        agents.extend(queries::agents::list_templates(&mut conn, category).await?);
    }
    Ok(HttpResponse::Ok().json(AgentList {
        agents: agents.into_iter().map(AgentView::from).collect(),
    }))
}

/// Read an agent (the organization's, or a template).
#[utoipa::path(
    tag = "agents",
    params(("id" = String, Path, description = "Agent id")),
    responses(
        (status = 200, body = AgentEnvelope),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, description = "Agent not found (another organization's included)", body = ErrorBody),
    ),
    security(("bearer" = ["agents"]))
)]
#[get("/agents/{id}")]
pub async fn get_agent(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Agents)?;
    let id = path_id(KIND, &path)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let agent = queries::agents::find_visible(&mut conn, caller.org_id, id)
        .await?
        .ok_or_else(|| not_found(KIND, &path))?;
    Ok(HttpResponse::Ok().json(AgentEnvelope::of(agent)))
}

/// Change any of the create fields of the organization's agent.
#[utoipa::path(
    tag = "agents",
    params(("id" = String, Path, description = "Agent id")),
    request_body = AgentUpdateRequest,
    responses(
        (status = 200, body = AgentEnvelope),
        (status = 400, description = "Invalid field; `param` names it", body = ErrorBody),
        (status = 402, description = "`limit_reached`: more tools or iterations than the plan allows", body = ErrorBody),
        (status = 403, description = "`template_read_only`: a template (shared) agent cannot be changed, duplicate it; `not_available_on_plan`; or scope `agents` missing", body = ErrorBody),
        (status = 404, description = "Agent not found (another organization's included)", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
    ),
    security(("bearer" = ["agents"]))
)]
#[patch("/agents/{id}")]
pub async fn update_agent(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Agents)?;
    let id = path_id(KIND, &path)?;
    let request: AgentRequest = json_body(&body)?;
    let changes = request.to_update(&state.catalogue)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    match queries::agents::update(&mut conn, caller.org_id, id, changes).await? {
        UpdateOutcome::Updated(agent) => Ok(HttpResponse::Ok().json(AgentEnvelope::of(*agent))),
        UpdateOutcome::NotFound => Err(not_found(KIND, &path)),
        UpdateOutcome::Template => Err(ApiError::TemplateReadOnly(
            "templates cannot be changed: duplicate the template and change the copy".into(),
        )),
        UpdateOutcome::Refused(refusal) => Err(refusal.into()),
    }
}

/// Delete the organization's agent, with its runs and knowledge files.
#[utoipa::path(
    tag = "agents",
    params(("id" = String, Path, description = "Agent id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, description = "Agent not found (templates cannot be deleted)", body = ErrorBody),
    ),
    security(("bearer" = ["agents"]))
)]
#[delete("/agents/{id}")]
pub async fn delete_agent(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Agents)?;
    let id = path_id(KIND, &path)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let prefixes = queries::agents::delete(&mut conn, caller.org_id, id)
        .await?
        .ok_or_else(|| not_found(KIND, &path))?;
    drop(conn);
    // The rows are gone: a file left behind is only unreachable storage.
    for prefix in prefixes {
        if let Err(err) = state.store.delete_prefix(&prefix).await {
            tracing::warn!(error = %err, %prefix, "removing a deleted agent's files failed");
        }
    }
    Ok(HttpResponse::NoContent().finish())
}

/// Copy an agent or a template into a new agent of the organization.
#[utoipa::path(
    tag = "agents",
    params(("id" = String, Path, description = "Agent or template id")),
    request_body(content = Option<DuplicateRequest>, description = "Optional: the copy's name"),
    responses(
        (status = 201, body = AgentEnvelope),
        (status = 400, description = "Invalid `name`, or a body that is not JSON", body = ErrorBody),
        (status = 402, description = "`limit_reached`: agent limit reached, or more tools or iterations than the plan allows", body = ErrorBody),
        (status = 403, description = "Missing scope `agents`, or `not_available_on_plan`: agents not available on the plan", body = ErrorBody),
        (status = 404, description = "Agent not found", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
    ),
    security(("bearer" = ["agents"]))
)]
#[post("/agents/{id}/duplicate")]
pub async fn duplicate_agent(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Agents)?;
    let id = path_id(KIND, &path)?;
    // The body is optional: none, or a JSON `null`, keeps the default name.
    let request: DuplicateRequest = if body.trim_ascii().is_empty() || body.trim_ascii() == b"null"
    {
        DuplicateRequest::default()
    } else {
        json_body(&body)?
    };
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let source = queries::agents::find_visible(&mut conn, caller.org_id, id)
        .await?
        .ok_or_else(|| not_found(KIND, &path))?;
    drop(conn);
    let name = match request.name.as_deref() {
        Some(name) => agents::validate_name(name)?,
        None => copy_name(&source.name),
    };
    let new = NewAgent {
        id: Uuid::now_v7(),
        org_id: caller.org_id,
        name,
        description: source.description,
        icon: source.icon,
        system_prompt: source.system_prompt,
        model: source.model,
        tools: source.tools,
        temperature: source.temperature,
        max_tokens: source.max_tokens,
        max_iterations: source.max_iterations,
        memory_enabled: source.memory_enabled,
        is_public: false,
        template_category: source.template_category,
    };
    create_within_plan(&state, &new).await
}

/// `<name> (copy)`, shortened so it stays within the name limit.
fn copy_name(name: &str) -> String {
    const SUFFIX: &str = " (copy)";
    let keep = MAX_NAME_CHARS - SUFFIX.len();
    let base: String = name.chars().take(keep).collect();
    format!("{}{SUFFIX}", base.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_name_stays_within_the_limit() {
        assert_eq!(copy_name("Analyst"), "Analyst (copy)");
        let long = "x".repeat(100);
        let copy = copy_name(&long);
        assert_eq!(copy.chars().count(), 100);
        assert!(copy.ends_with(" (copy)"));
    }
}
