use actix_web::{HttpResponse, get, web};
use serde::Serialize;

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
        .map(|m| ModelView {
            id: m.id.clone(),
            object: "model",
            created: state.started_at,
            owned_by: m.owned_by.clone(),
            category: m.category.to_string(),
            capabilities: m.capabilities.clone(),
            tier: m.tier.to_string(),
        })
        .collect();
    data.sort_by(|a, b| a.category.cmp(&b.category).then_with(|| a.id.cmp(&b.id)));
    Ok(HttpResponse::Ok().json(ModelList {
        object: "list",
        data,
    }))
}
