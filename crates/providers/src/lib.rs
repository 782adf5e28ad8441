//! Model catalogue and provider adapters (`local` is built in and offline),
//! chat requests and the tool-calling turn over any chat model, web search.

pub mod anthropic;
pub mod chat;
pub mod completion;
pub mod elevenlabs;
pub mod embedding;
pub mod fal;
pub mod fallback;
pub mod gemini;
mod http;
pub mod llm;
pub mod local;
pub mod openai;
mod outputs;
mod queue_api;
pub mod registry;
pub mod replicate;
pub mod search;
mod sse;
pub mod turn;
pub mod upstream;
pub mod vendor;

use unigen_core::ValidationError;
use unigen_core::config::ModelEntry;
use unigen_core::domain::ModelCategory;

pub use unigen_core::ProviderError;

/// The configured models, by id and category.
#[derive(Debug, Clone)]
pub struct Catalogue {
    models: Vec<ModelEntry>,
}

impl Catalogue {
    pub fn new(models: Vec<ModelEntry>) -> Self {
        Self { models }
    }

    pub fn all(&self) -> &[ModelEntry] {
        &self.models
    }

    pub fn get(&self, id: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.id == id)
    }

    /// The model with this id, else the first with this alias.
    pub fn find(&self, name: &str) -> Option<&ModelEntry> {
        self.get(name).or_else(|| {
            self.models
                .iter()
                .find(|m| m.aliases.iter().any(|a| a == name))
        })
    }

    /// The requested model, or the category's default. An unknown id, or a
    /// model of another category, is a 400 naming the `model` field.
    pub fn resolve(
        &self,
        requested: Option<&str>,
        category: ModelCategory,
    ) -> Result<&ModelEntry, ValidationError> {
        self.resolve_with(requested, category, None)
    }

    /// Like [`Catalogue::resolve`], restricted to models with `capability`
    /// (e.g. `image_edit` among image models, `text_to_speech` among audio).
    pub fn resolve_capable(
        &self,
        requested: Option<&str>,
        category: ModelCategory,
        capability: &str,
    ) -> Result<&ModelEntry, ValidationError> {
        self.resolve_with(requested, category, Some(capability))
    }

    fn resolve_with(
        &self,
        requested: Option<&str>,
        category: ModelCategory,
        capability: Option<&str>,
    ) -> Result<&ModelEntry, ValidationError> {
        let fits = |m: &&ModelEntry| {
            m.category == category
                && capability.is_none_or(|c| m.capabilities.iter().any(|have| have == c))
        };
        let found = match requested {
            // An id names one model; an alias may name one of each kind.
            Some(id) => self.get(id).filter(fits).or_else(|| {
                self.models
                    .iter()
                    .filter(fits)
                    .find(|m| m.aliases.iter().any(|a| a == id))
            }),
            None => {
                let candidates: Vec<&ModelEntry> = self.models.iter().filter(fits).collect();
                candidates
                    .iter()
                    .find(|m| m.default)
                    .or(candidates.first())
                    .copied()
            }
        };
        let what = capability.map_or_else(|| category.to_string(), |c| c.replace('_', " "));
        found.ok_or_else(|| match requested {
            Some(id) => ValidationError::new(
                "model",
                format!(
                    "model `{id}` is not an available {what} model; GET /api/v1/models lists them"
                ),
            ),
            None => ValidationError::new("model", format!("no {what} model is configured")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use unigen_core::config::Settings;

    #[test]
    fn resolves_defaults_and_rejects_unknown_or_wrong_category_models() {
        let catalogue = Catalogue::new(Settings::load_with(None, &[]).unwrap().models);
        let default = catalogue.resolve(None, ModelCategory::Image).unwrap();
        assert!(default.default);
        assert_eq!(
            catalogue
                .resolve(Some("local/procedural-hd"), ModelCategory::Image)
                .unwrap()
                .id,
            "local/procedural-hd"
        );
        let err = catalogue
            .resolve(Some("acme/nope"), ModelCategory::Image)
            .unwrap_err();
        assert_eq!(err.field, "model");
        assert!(err.message.contains("acme/nope"));
        assert!(
            catalogue
                .resolve(Some("local/procedural-v1"), ModelCategory::Video)
                .is_err()
        );
        // OpenAI's names are aliases; one name may stand for a model of each kind.
        let named = |name, category, capability| {
            catalogue
                .resolve_capable(Some(name), category, capability)
                .unwrap()
                .id
                .as_str()
        };
        assert_eq!(
            named("gpt-4o-mini", ModelCategory::Chat, "chat"),
            "local/echo"
        );
        assert_eq!(
            named("dall-e-2", ModelCategory::Image, "text_to_image"),
            "local/procedural-v1"
        );
        assert_eq!(
            named("dall-e-2", ModelCategory::Image, "image_edit"),
            "local/classic-edit"
        );
        assert_eq!(
            named("whisper-1", ModelCategory::Audio, "speech_to_text"),
            "local/whisper-tiny-en"
        );
        assert!(
            catalogue
                .resolve(Some("tts-1"), ModelCategory::Chat)
                .is_err()
        );
        assert_eq!(
            catalogue.find("text-embedding-3-small").unwrap().id,
            "local/hash-embed"
        );
    }

    #[test]
    fn the_bench_noop_alias_names_one_fixture_model_per_job_tool() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/unigen-bench.toml");
        let catalogue = Catalogue::new(Settings::load_with(Some(path), &[]).unwrap().models);
        // As each tool's route resolves its model.
        let named = |category, capability: Option<&str>| {
            let model = match capability {
                Some(c) => catalogue.resolve_capable(Some("bench/noop"), category, c),
                None => catalogue.resolve(Some("bench/noop"), category),
            }
            .unwrap();
            assert_eq!(model.adapter, "fixture");
            model.id.as_str()
        };
        let image = Some("text_to_image");
        assert_eq!(named(ModelCategory::Image, image), "bench/noop-image");
        let edit = Some("image_edit");
        assert_eq!(named(ModelCategory::Image, edit), "bench/noop-edit");
        assert_eq!(named(ModelCategory::Video, None), "bench/noop-video");
        assert_eq!(named(ModelCategory::Music, None), "bench/noop-music");
        let tts = Some("text_to_speech");
        assert_eq!(named(ModelCategory::Audio, tts), "bench/noop-tts");
        let stt = Some("speech_to_text");
        assert_eq!(named(ModelCategory::Audio, stt), "bench/noop-stt");
        assert!(
            catalogue
                .resolve(Some("bench/noop"), ModelCategory::Chat)
                .is_err()
        );
        // Requests naming no model keep the built-in defaults.
        let default = catalogue.resolve_capable(None, ModelCategory::Image, "text_to_image");
        assert_eq!(default.unwrap().id, "local/procedural-v1");
    }
}
