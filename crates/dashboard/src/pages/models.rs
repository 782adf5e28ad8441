//! Models (`/models`): the catalogue, as `GET /api/v1/models` lists it,
//! with category, tier, price and aliases.

use actix_web::{HttpResponse, web};
use askama::Template;
use unigen_core::config::ModelEntry;
use unigen_core::domain::ModelCategory;

use crate::error::DashError;
use crate::layout::Chrome;
use crate::session::SignedIn;
use crate::state::{DashboardState, render};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/models", web::get().to(models_page));
}

struct ModelRow {
    id: String,
    category: String,
    tier: String,
    price: String,
    aliases: String,
    description: String,
}

/// The model's price in credits, per its category's unit.
fn price(model: &ModelEntry) -> String {
    let per = model.credits_per_unit;
    let capabilities = &model.capabilities;
    match model.category {
        ModelCategory::Chat => match model.completion_credits_per_unit {
            Some(completion) => format!(
                "{per} credits / 1,000 prompt tokens, {completion} / 1,000 completion tokens"
            ),
            None => format!("{per} credits / 1,000 tokens"),
        },
        ModelCategory::Embedding => format!("{per} credits / 1,000 tokens"),
        ModelCategory::Image if capabilities.iter().any(|c| c.contains("edit")) => {
            format!("{per} credits / image or edit")
        }
        ModelCategory::Image => format!("{per} credits / image"),
        ModelCategory::Video => format!("{per} credits / second of video"),
        ModelCategory::Music => format!("{per} credits / track"),
        ModelCategory::Audio
            if capabilities
                .iter()
                .any(|c| c.contains("transcri") || c.contains("stt") || c.contains("translat")) =>
        {
            format!("{per} credits / minute of audio")
        }
        ModelCategory::Audio => format!("{per} credits / 1,000 characters"),
    }
}

#[derive(Template)]
#[template(path = "models.html")]
struct ModelsPage {
    chrome: Chrome,
    rows: Vec<ModelRow>,
}

async fn models_page(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
) -> Result<HttpResponse, DashError> {
    let mut models: Vec<&ModelEntry> = state.catalogue.all().iter().collect();
    models.sort_by(|a, b| {
        a.category
            .as_str()
            .cmp(b.category.as_str())
            .then_with(|| a.id.cmp(&b.id))
    });
    render(&ModelsPage {
        chrome: signed_in.chrome("models", "Models"),
        rows: models
            .into_iter()
            .map(|m| ModelRow {
                id: m.id.clone(),
                category: m.category.to_string(),
                tier: m.tier.to_string(),
                price: price(m),
                aliases: m.aliases.join(", "),
                description: m.description.clone().unwrap_or_default(),
            })
            .collect(),
    })
}
