use actix_web::{HttpResponse, get, web};
use serde::Serialize;

use unigen_core::config::ModelEntry;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

#[derive(Serialize, utoipa::ToSchema)]
pub struct ModelView {
    #[schema(example = "local/procedural-v1")]
    pub id: String,
    /// Always `model`.
    pub object: &'static str,
    pub created: i64,
    pub owned_by: String,
    /// `chat`, `image`, `video`, `audio`, `music` or `embedding`.
    pub category: String,
    pub capabilities: Vec<String>,
    /// `fast`, `standard` or `premium`.
    pub tier: String,
    /// Other names requests may use for the model (OpenAI's model names).
    pub aliases: Vec<String>,
    /// What the model is (the built-in ones are test models and renderers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl ModelView {
    fn of(model: &ModelEntry, created: i64) -> Self {
        Self {
            id: model.id.clone(),
            object: "model",
            created,
            owned_by: model.owned_by.clone(),
            category: model.category.to_string(),
            capabilities: model.capabilities.clone(),
            tier: model.tier.to_string(),
            aliases: model.aliases.clone(),
            description: model.description.clone(),
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ModelList {
    /// Always `list`.
    pub object: &'static str,
    pub data: Vec<ModelView>,
}

/// List the models, grouped by category (then by id). Any valid key may list.
#[utoipa::path(
    tag = "models",
    responses(
        (status = 200, body = ModelList),
        (status = 401, description = "invalid or missing API key / API key has expired", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
#[get("/models")]
pub async fn list_models(
    state: web::Data<AppState>,
    _caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let mut data: Vec<ModelView> = state
        .catalogue
        .all()
        .iter()
        .map(|m| ModelView::of(m, state.started_at))
        .collect();
    data.sort_by(|a, b| a.category.cmp(&b.category).then_with(|| a.id.cmp(&b.id)));
    Ok(HttpResponse::Ok().json(ModelList {
        object: "list",
        data,
    }))
}

/// One model, by id or alias (ids contain a slash: `GET /models/local/echo`).
#[utoipa::path(
    tag = "models",
    params(("id" = String, Path, description = "A model id (`local/echo`) or alias (`gpt-4o-mini`)")),
    responses(
        (status = 200, body = ModelView),
        (status = 401, description = "invalid or missing API key / API key has expired", body = ErrorBody),
        (status = 404, description = "no such model", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
#[get("/models/{id:.+}")]
pub async fn get_model(
    state: web::Data<AppState>,
    _caller: Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let model = state
        .catalogue
        .find(&id)
        .ok_or_else(|| ApiError::NotFound(format!("model `{id}` does not exist")))?;
    Ok(HttpResponse::Ok().json(ModelView::of(model, state.started_at)))
}
