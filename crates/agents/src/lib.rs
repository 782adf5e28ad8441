//! Agents: their fields and limits, the tool ids and what a call costs, and
//! the plan's agent limits. Validation here; SQL in `db::queries::agents`.

pub mod run;
pub mod tools;

pub use unigen_core::domain::{AgentLimits, PlanRefusal};
pub use unigen_core::storage::run_storage_prefix;

use serde::Deserialize;

use unigen_db::models::{AgentUpdate, NewAgent};

use unigen_core::ValidationError;
use unigen_core::domain::ModelCategory;
use unigen_providers::Catalogue;

pub const MAX_NAME_CHARS: usize = 100;
pub const MAX_DESCRIPTION_CHARS: usize = 500;
pub const MAX_SYSTEM_PROMPT_CHARS: usize = 10_000;
pub const MAX_ICON_CHARS: usize = 64;
pub const MAX_TOKENS_RANGE: (i32, i32) = (100, 8_000);
pub const MAX_ITERATIONS_RANGE: (i32, i32) = (1, 20);
pub const DEFAULT_TEMPERATURE: f64 = 0.7;
pub const DEFAULT_MAX_TOKENS: i32 = 4_000;
pub const DEFAULT_MAX_ITERATIONS: i32 = 10;
pub const DEFAULT_ICON: &str = "bot";

/// The tools an agent may use and the credits one call costs (spec).
/// `generate_text` is charged as tokens instead.
pub const TOOLS: [(&str, i64); 7] = [
    ("web_search", 5),
    ("web_fetch", 3),
    ("generate_text", 0),
    ("generate_image", 15),
    ("analyze_image", 5),
    ("generate_chart", 2),
    ("create_document", 3),
];

pub const TEMPLATE_CATEGORIES: [&str; 6] = [
    "research",
    "content",
    "coding",
    "analysis",
    "support",
    "productivity",
];

/// Credits of one call of `tool`, `None` for an unknown tool.
pub fn tool_cost(tool: &str) -> Option<i64> {
    TOOLS
        .iter()
        .find(|(name, _)| *name == tool)
        .map(|(_, cost)| *cost)
}

/// Body of `POST /agents` (`name` and `system_prompt` required) and of
/// `PATCH /agents/{id}` (any subset). Unknown fields are ignored.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct AgentRequest {
    /// At most 100 characters.
    pub name: Option<String>,
    /// At most 500 characters.
    pub description: Option<String>,
    /// Default `bot`.
    pub icon: Option<String>,
    /// At most 10,000 characters.
    pub system_prompt: Option<String>,
    /// A chat model id (default: the default chat model).
    pub model: Option<String>,
    /// Tool ids: `web_search`, `web_fetch`, `generate_text`, `generate_image`,
    /// `analyze_image`, `generate_chart`, `create_document`.
    pub tools: Option<Vec<String>>,
    /// 0 to 2, default 0.7.
    pub temperature: Option<f64>,
    /// 100 to 8000, default 4000.
    pub max_tokens: Option<i64>,
    /// 1 to 20 (and at most the plan's), default 10.
    pub max_iterations: Option<i64>,
    /// Runs sharing a `session_id` see the earlier exchanges. Default false.
    pub memory_enabled: Option<bool>,
    /// Default false.
    pub is_public: Option<bool>,
}

fn text(
    field: &'static str,
    value: &str,
    max_chars: usize,
    required: bool,
) -> Result<String, ValidationError> {
    let trimmed = value.trim();
    if required && trimmed.is_empty() {
        return Err(ValidationError::new(field, format!("{field} is required")));
    }
    if trimmed.chars().count() > max_chars {
        return Err(ValidationError::new(
            field,
            format!("{field} must be at most {max_chars} characters"),
        ));
    }
    Ok(trimmed.to_owned())
}

/// An agent's name: required, at most 100 characters after trimming.
pub fn validate_name(name: &str) -> Result<String, ValidationError> {
    required_text("name", Some(name), MAX_NAME_CHARS)
}

fn required_text(
    field: &'static str,
    value: Option<&str>,
    max_chars: usize,
) -> Result<String, ValidationError> {
    text(field, value.unwrap_or_default(), max_chars, true)
}

fn integer_in(
    field: &'static str,
    value: i64,
    (min, max): (i32, i32),
) -> Result<i32, ValidationError> {
    if (i64::from(min)..=i64::from(max)).contains(&value) {
        Ok(value as i32)
    } else {
        Err(ValidationError::new(
            field,
            format!("{field} must be between {min} and {max}"),
        ))
    }
}

fn temperature(value: f64) -> Result<f64, ValidationError> {
    unigen_core::validate::number_in("temperature", Some(value), 0.0, 2.0, DEFAULT_TEMPERATURE)
}

/// Known, distinct tool ids; unknown ones are listed in one message.
pub fn validate_tools(tools: &[String]) -> Result<Vec<String>, ValidationError> {
    let unknown: Vec<&str> = tools
        .iter()
        .map(String::as_str)
        .filter(|t| tool_cost(t).is_none())
        .collect();
    if !unknown.is_empty() {
        let known: Vec<&str> = TOOLS.iter().map(|(name, _)| *name).collect();
        return Err(ValidationError::new(
            "tools",
            format!(
                "invalid tool ids: {}; available: {}",
                unknown.join(", "),
                known.join(", ")
            ),
        ));
    }
    let mut distinct: Vec<String> = Vec::with_capacity(tools.len());
    for tool in tools {
        if distinct.contains(tool) {
            return Err(ValidationError::new(
                "tools",
                format!("tools lists {tool} twice"),
            ));
        }
        distinct.push(tool.clone());
    }
    Ok(distinct)
}

fn chat_model(catalogue: &Catalogue, requested: Option<&str>) -> Result<String, ValidationError> {
    Ok(catalogue
        .resolve(requested, ModelCategory::Chat)?
        .id
        .clone())
}

impl AgentRequest {
    /// A complete new agent with the spec's defaults.
    pub fn to_new_agent(
        &self,
        catalogue: &Catalogue,
        id: uuid::Uuid,
        org_id: uuid::Uuid,
    ) -> Result<NewAgent, ValidationError> {
        Ok(NewAgent {
            id,
            org_id,
            name: validate_name(self.name.as_deref().unwrap_or_default())?,
            description: text(
                "description",
                self.description.as_deref().unwrap_or_default(),
                MAX_DESCRIPTION_CHARS,
                false,
            )?,
            icon: self.icon(DEFAULT_ICON)?,
            system_prompt: required_text(
                "system_prompt",
                self.system_prompt.as_deref(),
                MAX_SYSTEM_PROMPT_CHARS,
            )?,
            model: chat_model(catalogue, self.model.as_deref())?,
            tools: validate_tools(self.tools.as_deref().unwrap_or_default())?,
            temperature: temperature(self.temperature.unwrap_or(DEFAULT_TEMPERATURE))?,
            max_tokens: integer_in(
                "max_tokens",
                self.max_tokens.unwrap_or(i64::from(DEFAULT_MAX_TOKENS)),
                MAX_TOKENS_RANGE,
            )?,
            max_iterations: integer_in(
                "max_iterations",
                self.max_iterations
                    .unwrap_or(i64::from(DEFAULT_MAX_ITERATIONS)),
                MAX_ITERATIONS_RANGE,
            )?,
            memory_enabled: self.memory_enabled.unwrap_or(false),
            is_public: self.is_public.unwrap_or(false),
            template_category: None,
        })
    }

    /// The fields present, validated like on create.
    pub fn to_update(&self, catalogue: &Catalogue) -> Result<AgentUpdate, ValidationError> {
        Ok(AgentUpdate {
            name: self.name.as_deref().map(validate_name).transpose()?,
            description: self
                .description
                .as_deref()
                .map(|v| text("description", v, MAX_DESCRIPTION_CHARS, false))
                .transpose()?,
            icon: self
                .icon
                .as_ref()
                .map(|_| self.icon(DEFAULT_ICON))
                .transpose()?,
            system_prompt: self
                .system_prompt
                .as_deref()
                .map(|v| required_text("system_prompt", Some(v), MAX_SYSTEM_PROMPT_CHARS))
                .transpose()?,
            model: self
                .model
                .as_deref()
                .map(|m| chat_model(catalogue, Some(m)))
                .transpose()?,
            tools: self.tools.as_deref().map(validate_tools).transpose()?,
            temperature: self.temperature.map(temperature).transpose()?,
            max_tokens: self
                .max_tokens
                .map(|v| integer_in("max_tokens", v, MAX_TOKENS_RANGE))
                .transpose()?,
            max_iterations: self
                .max_iterations
                .map(|v| integer_in("max_iterations", v, MAX_ITERATIONS_RANGE))
                .transpose()?,
            memory_enabled: self.memory_enabled,
            is_public: self.is_public,
        })
    }

    fn icon(&self, default: &str) -> Result<String, ValidationError> {
        let icon = text(
            "icon",
            self.icon.as_deref().unwrap_or(default),
            MAX_ICON_CHARS,
            false,
        )?;
        Ok(if icon.is_empty() {
            default.to_owned()
        } else {
            icon
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalogue() -> Catalogue {
        Catalogue::new(
            unigen_core::config::Settings::load_with(None, &[])
                .unwrap()
                .models,
        )
    }

    fn request(json: serde_json::Value) -> AgentRequest {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_minimal_agent_gets_the_spec_defaults() {
        let id = uuid::Uuid::now_v7();
        let agent = request(serde_json::json!({"name": " Helper ", "system_prompt": "Be brief."}))
            .to_new_agent(&catalogue(), id, id)
            .unwrap();
        assert_eq!(agent.name, "Helper");
        assert_eq!(
            (
                agent.icon.as_str(),
                agent.temperature,
                agent.max_tokens,
                agent.max_iterations
            ),
            ("bot", 0.7, 4000, 10)
        );
        assert!(agent.tools.is_empty() && !agent.memory_enabled);
        assert_eq!(agent.model, "local/echo");
    }

    #[test]
    fn every_field_is_checked_with_a_message_naming_it() {
        let id = uuid::Uuid::now_v7();
        let cases = [
            (
                serde_json::json!({"system_prompt": "x"}),
                "name",
                "name is required",
            ),
            (
                serde_json::json!({"name": "n".repeat(101), "system_prompt": "x"}),
                "name",
                "name must be at most 100 characters",
            ),
            (
                serde_json::json!({"name": "a"}),
                "system_prompt",
                "system_prompt is required",
            ),
            (
                serde_json::json!({"name": "a", "system_prompt": "x", "description": "d".repeat(501)}),
                "description",
                "description must be at most 500 characters",
            ),
            (
                serde_json::json!({"name": "a", "system_prompt": "x", "tools": ["web_search", "teleport", "fly"]}),
                "tools",
                "invalid tool ids: teleport, fly; available: web_search, web_fetch, generate_text, generate_image, analyze_image, generate_chart, create_document",
            ),
            (
                serde_json::json!({"name": "a", "system_prompt": "x", "tools": ["web_fetch", "web_fetch"]}),
                "tools",
                "tools lists web_fetch twice",
            ),
            (
                serde_json::json!({"name": "a", "system_prompt": "x", "temperature": 2.5}),
                "temperature",
                "temperature must be between 0 and 2",
            ),
            (
                serde_json::json!({"name": "a", "system_prompt": "x", "max_tokens": 99}),
                "max_tokens",
                "max_tokens must be between 100 and 8000",
            ),
            (
                serde_json::json!({"name": "a", "system_prompt": "x", "max_iterations": 21}),
                "max_iterations",
                "max_iterations must be between 1 and 20",
            ),
            (
                serde_json::json!({"name": "a", "system_prompt": "x", "model": "local/procedural-v1"}),
                "model",
                "",
            ),
        ];
        for (body, field, message) in cases {
            let err = request(body.clone())
                .to_new_agent(&catalogue(), id, id)
                .unwrap_err();
            assert_eq!(err.field, field, "{body}");
            if !message.is_empty() {
                assert_eq!(err.message, message, "{body}");
            }
        }
    }

    #[test]
    fn an_update_validates_only_what_it_changes() {
        let update = request(serde_json::json!({"max_iterations": 3, "tools": ["web_fetch"]}))
            .to_update(&catalogue())
            .unwrap();
        assert_eq!(update.max_iterations, Some(3));
        assert_eq!(update.name, None);
        let err = request(serde_json::json!({"name": "  "}))
            .to_update(&catalogue())
            .unwrap_err();
        assert_eq!(err.field, "name");
    }

    #[test]
    fn plans_bound_tools_and_iterations() {
        let pro = AgentLimits {
            plan: "Pro".into(),
            max_agents: 5,
            tools_per_agent: 4,
            max_iterations: 10,
            knowledge_files_per_agent: 5,
            max_file_size_mb: 10,
        };
        assert_eq!(pro.admit(4, 10), Ok(()));
        assert_eq!(
            pro.admit(5, 10).unwrap_err().to_string(),
            "The Pro plan allows at most 4 tools per agent"
        );
        assert!(matches!(
            pro.admit(1, 11),
            Err(PlanRefusal::TooManyIterations { max: 10, .. })
        ));
        let free = AgentLimits {
            plan: "Free".into(),
            max_agents: 0,
            ..pro
        };
        assert_eq!(
            free.admit(0, 1).unwrap_err().to_string(),
            "Agents are not available on the Free plan"
        );
    }
}
