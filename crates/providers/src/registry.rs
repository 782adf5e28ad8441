//! The adapters and what each serves, in one table, and the clients built
//! for the configured models.
//!
//! A catalogue model names its `adapter` and its `upstream` (then its
//! `fallback_upstreams`). Every network adapter is one module that builds
//! its clients from an `[upstreams.*]` entry; [`ADAPTERS`] is the one place
//! that lists them with the capabilities they serve. Configuration is
//! checked against it ([`check_catalogue`]), and the API and the worker
//! dispatch through [`Providers`].
//!
//! What an adapter implements is in [`crate::vendor`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use unigen_core::config::{ModelEntry, Settings, UpstreamSettings};

use crate::anthropic::AnthropicClient;
use crate::elevenlabs::ElevenLabsClient;
use crate::fal::FalClient;
use crate::gemini::GeminiClient;
use crate::openai::OpenAiClient;
use crate::replicate::ReplicateClient;
pub use crate::vendor::{
    Capability, ChatUpstream, ChunkStream, EmbeddingUpstream, ImageUpstream, MediaUpstream,
    MessagesUpstream, ResponsesUpstream, SpeechUpstream, TranscriptionUpstream,
};

/// The clients one adapter builds for one upstream.
#[derive(Default, Clone)]
pub struct Clients {
    pub chat: Option<Arc<dyn ChatUpstream>>,
    /// Anthropic's Messages API, natively (the `anthropic` adapter).
    pub messages: Option<Arc<dyn MessagesUpstream>>,
    /// OpenAI's Responses API, natively (`openai` and `azure-openai`
    /// upstreams with `responses = true`).
    pub responses: Option<Arc<dyn ResponsesUpstream>>,
    pub embeddings: Option<Arc<dyn EmbeddingUpstream>>,
    pub images: Option<Arc<dyn ImageUpstream>>,
    /// Image edits, video and music.
    pub media: Option<Arc<dyn MediaUpstream>>,
    pub speech: Option<Arc<dyn SpeechUpstream>>,
    pub transcription: Option<Arc<dyn TranscriptionUpstream>>,
}

/// One adapter: its name in the catalogue, what it serves, and how its
/// clients are built (`None`: it runs in-process, with no upstream).
pub struct Adapter {
    pub name: &'static str,
    pub serves: &'static [Capability],
    pub build: Option<fn(&UpstreamSettings) -> Clients>,
    /// Chat: the completion length sent when neither the request nor the
    /// model sets one, for vendors that require it.
    pub default_max_tokens: Option<u32>,
    /// Chat: the vendor answers one choice per request (`n` must be 1).
    pub one_choice: bool,
    /// Chat: the message content part types the vendor takes (`None`: any,
    /// passed through).
    pub content_parts: Option<&'static [&'static str]>,
    /// Embeddings: the vendor takes cl100k token ids (OpenAI's); others are
    /// sent the ids decoded to text (LangChain sends ids by default).
    pub token_ids: bool,
}

use Capability::*;

/// Every adapter this build has. Adding a vendor: its module, and a line here.
/// An adapter's defaults: in-process, no chat limits, text-only embeddings.
const IN_PROCESS: Adapter = Adapter {
    name: "",
    serves: &[],
    build: None,
    default_max_tokens: None,
    one_choice: false,
    content_parts: None,
    token_ids: false,
};

pub const ADAPTERS: &[Adapter] = &[
    Adapter {
        name: "local",
        serves: &[
            Chat,
            Embeddings,
            ImageGeneration,
            ImageEdit,
            Video,
            Speech,
            Transcription,
            Translation,
            Music,
        ],
        token_ids: true,
        ..IN_PROCESS
    },
    // Benchmarks of the job pipeline only: a constant output per shape.
    Adapter {
        name: "fixture",
        serves: &[
            ImageGeneration,
            ImageEdit,
            Video,
            Speech,
            Transcription,
            Translation,
            Music,
        ],
        ..IN_PROCESS
    },
    Adapter {
        name: "openai",
        serves: &[
            Chat,
            Embeddings,
            ImageGeneration,
            Speech,
            Transcription,
            Translation,
        ],
        build: Some(|settings| openai_clients(OpenAiClient::new(settings), settings.responses)),
        token_ids: true,
        ..IN_PROCESS
    },
    Adapter {
        name: "azure-openai",
        serves: &[
            Chat,
            Embeddings,
            ImageGeneration,
            Speech,
            Transcription,
            Translation,
        ],
        build: Some(|settings| openai_clients(OpenAiClient::azure(settings), settings.responses)),
        token_ids: true,
        ..IN_PROCESS
    },
    Adapter {
        name: "anthropic",
        serves: &[Chat],
        build: Some(|settings| {
            let client = Arc::new(AnthropicClient::new(settings));
            Clients {
                chat: Some(client.clone()),
                messages: Some(client),
                ..Clients::default()
            }
        }),
        default_max_tokens: Some(crate::anthropic::DEFAULT_MAX_TOKENS),
        one_choice: true,
        content_parts: Some(&["text", "image_url"]),
        ..IN_PROCESS
    },
    Adapter {
        name: "fal",
        serves: &[ImageGeneration, ImageEdit, Video, Music],
        build: Some(|settings| {
            let client = Arc::new(FalClient::new(settings));
            Clients {
                images: Some(client.clone()),
                media: Some(client),
                ..Clients::default()
            }
        }),
        ..IN_PROCESS
    },
    Adapter {
        name: "gemini",
        serves: &[Chat, Embeddings],
        build: Some(|settings| {
            let client = Arc::new(GeminiClient::new(settings));
            Clients {
                chat: Some(client.clone()),
                embeddings: Some(client),
                ..Clients::default()
            }
        }),
        content_parts: Some(&["text", "image_url"]),
        ..IN_PROCESS
    },
    Adapter {
        name: "elevenlabs",
        serves: &[Speech, Transcription],
        build: Some(|settings| {
            let client = Arc::new(ElevenLabsClient::new(settings));
            Clients {
                speech: Some(client.clone()),
                transcription: Some(client),
                ..Clients::default()
            }
        }),
        ..IN_PROCESS
    },
    Adapter {
        name: "replicate",
        serves: &[ImageGeneration, ImageEdit, Video, Music],
        build: Some(|settings| {
            let client = Arc::new(ReplicateClient::new(settings));
            Clients {
                images: Some(client.clone()),
                media: Some(client),
                ..Clients::default()
            }
        }),
        ..IN_PROCESS
    },
];

/// `responses`: the upstream speaks the Responses API too.
fn openai_clients(client: OpenAiClient, responses: bool) -> Clients {
    let shared = Arc::new(client);
    Clients {
        chat: Some(shared.clone()),
        messages: None,
        responses: responses.then(|| shared.clone() as Arc<dyn ResponsesUpstream>),
        embeddings: Some(shared.clone()),
        images: Some(shared.clone()),
        speech: Some(shared.clone()),
        transcription: Some(shared),
        media: None,
    }
}

pub fn adapter(name: &str) -> Option<&'static Adapter> {
    ADAPTERS.iter().find(|a| a.name == name)
}

/// Every model's adapter exists and serves what the model is for.
pub fn check_catalogue(settings: &Settings) -> Result<(), String> {
    for model in &settings.models {
        let Some(adapter) = adapter(&model.adapter) else {
            let names: Vec<&str> = ADAPTERS.iter().map(|a| a.name).collect();
            return Err(format!(
                "model `{}` uses adapter `{}`; available adapters: {}",
                model.id,
                model.adapter,
                names.join(", ")
            ));
        };
        if let Some(missing) = Capability::needed_by(model)
            .into_iter()
            .find(|c| !adapter.serves.contains(c))
        {
            return Err(format!(
                "model `{}` is a {} model, but the {} adapter does not serve {}",
                model.id,
                model.category,
                adapter.name,
                missing.name()
            ));
        }
    }
    Ok(())
}

/// The configured upstreams, and each (adapter, upstream) pair's clients,
/// built on first use and kept for the process; cheap to clone.
#[derive(Clone, Default)]
pub struct Providers {
    upstreams: Arc<BTreeMap<String, UpstreamSettings>>,
    built: Arc<Mutex<HashMap<(String, String), Clients>>>,
}

impl Providers {
    pub fn new(upstreams: &BTreeMap<String, UpstreamSettings>) -> Self {
        Self {
            upstreams: Arc::new(upstreams.clone()),
            built: Arc::default(),
        }
    }

    fn clients(&self, adapter_name: &str, upstream: &str) -> Option<Clients> {
        let build = adapter(adapter_name)?.build?;
        let settings = self.upstreams.get(upstream)?;
        let mut built = self.built.lock().expect("providers lock");
        let clients = built
            .entry((adapter_name.to_owned(), upstream.to_owned()))
            .or_insert_with(|| build(settings));
        Some(clients.clone())
    }

    /// The model's upstreams in the order they are tried (see
    /// [`upstream_order`]), with what `pick` takes from their clients.
    pub fn in_order<T>(
        &self,
        model: &ModelEntry,
        pick: impl Fn(&Clients) -> Option<T>,
    ) -> Vec<(String, T)> {
        // No draw (a syscall) unless the model splits its traffic.
        let draw = if model.upstream_weights.is_empty() {
            0.0
        } else {
            random_unit()
        };
        upstream_order(model, draw)
            .into_iter()
            .filter_map(|name| {
                let clients = self.clients(&model.adapter, &name)?;
                let picked = pick(&clients)?;
                Some((name, picked))
            })
            .collect()
    }

    /// The host of upstream `name`'s base URL (`server.address` of its
    /// GenAI spans).
    pub fn server_address(&self, name: &str) -> Option<String> {
        let settings = self.upstreams.get(name)?;
        let url = url::Url::parse(&settings.base_url).ok()?;
        url.host_str().map(str::to_owned)
    }

    pub fn chat(&self, model: &ModelEntry) -> Vec<(String, Arc<dyn ChatUpstream>)> {
        self.in_order(model, |c| c.chat.clone())
    }

    /// The model's upstreams that speak Anthropic's Messages API natively.
    pub fn messages(&self, model: &ModelEntry) -> Vec<(String, Arc<dyn MessagesUpstream>)> {
        self.in_order(model, |c| c.messages.clone())
    }

    /// The model's upstreams that speak OpenAI's Responses API natively.
    pub fn responses(&self, model: &ModelEntry) -> Vec<(String, Arc<dyn ResponsesUpstream>)> {
        self.in_order(model, |c| c.responses.clone())
    }

    pub fn embeddings(&self, model: &ModelEntry) -> Vec<(String, Arc<dyn EmbeddingUpstream>)> {
        self.in_order(model, |c| c.embeddings.clone())
    }

    /// The first upstream's, as for every job tool (no fallbacks there).
    fn first<T>(&self, model: &ModelEntry, pick: impl Fn(&Clients) -> Option<T>) -> Option<T> {
        self.in_order(model, pick)
            .into_iter()
            .next()
            .map(|(_, client)| client)
    }

    pub fn images(&self, model: &ModelEntry) -> Option<Arc<dyn ImageUpstream>> {
        self.first(model, |c| c.images.clone())
    }

    pub fn media(&self, model: &ModelEntry) -> Option<Arc<dyn MediaUpstream>> {
        self.first(model, |c| c.media.clone())
    }

    pub fn speech(&self, model: &ModelEntry) -> Option<Arc<dyn SpeechUpstream>> {
        self.first(model, |c| c.speech.clone())
    }

    pub fn transcription(&self, model: &ModelEntry) -> Option<Arc<dyn TranscriptionUpstream>> {
        self.first(model, |c| c.transcription.clone())
    }

    /// Whether the model's adapter serves `capability` from a network
    /// upstream (not in-process).
    pub fn serves_remotely(model: &ModelEntry, capability: Capability) -> bool {
        adapter(&model.adapter).is_some_and(|a| a.build.is_some() && a.serves.contains(&capability))
    }
}

/// The order a request tries the model's upstreams: with
/// `upstream_weights`, the weighted ones drawn one after another by weight
/// (`draw` in 0..1 picks the first; the rest follow by weight, heaviest
/// first), then `upstream` and `fallback_upstreams` not tried yet.
pub fn upstream_order(model: &ModelEntry, draw: f64) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    let total: u64 = model.upstream_weights.values().map(|w| u64::from(*w)).sum();
    if total > 0 {
        let mut point = draw.clamp(0.0, 1.0) * total as f64;
        let first = model
            .upstream_weights
            .iter()
            .find(|(_, weight)| {
                point -= f64::from(**weight);
                point < 0.0
            })
            .or_else(|| model.upstream_weights.iter().last())
            .map(|(name, _)| name.clone());
        order.extend(first);
        let mut rest: Vec<(&String, &u32)> = model.upstream_weights.iter().collect();
        rest.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        order.extend(rest.into_iter().map(|(name, _)| name.clone()));
    }
    order.extend(model.upstream.iter().cloned());
    order.extend(model.fallback_upstreams.iter().cloned());
    let mut seen = std::collections::HashSet::new();
    order.retain(|name| seen.insert(name.clone()));
    order
}

/// A uniform draw in 0..1 (only spreads traffic: no secret depends on it).
fn random_unit() -> f64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.0;
    }
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use unigen_core::domain::ModelCategory;

    #[test]
    fn the_catalogue_is_checked_against_what_each_adapter_serves() {
        let mut settings = Settings::load_with(None, &[]).unwrap();
        assert_eq!(check_catalogue(&settings), Ok(()));
        let chat = settings
            .models
            .iter()
            .position(|m| m.category == ModelCategory::Chat)
            .unwrap();
        settings.models[chat].adapter = "replicate".into();
        let message = check_catalogue(&settings).unwrap_err();
        assert!(message.contains("does not serve chat"), "{message}");
        settings.models[chat].adapter = "fixture".into();
        let message = check_catalogue(&settings).unwrap_err();
        assert!(
            message.contains("fixture adapter does not serve chat"),
            "{message}"
        );
        settings.models[chat].adapter = "nope".into();
        let message = check_catalogue(&settings).unwrap_err();
        assert!(
            message.contains("anthropic") && message.contains("gemini"),
            "{message}"
        );
    }

    #[test]
    fn weighted_upstreams_split_traffic_and_the_rest_follow_as_fallbacks() {
        let mut model = Settings::load_with(None, &[]).unwrap().models.remove(0);
        model.upstream = Some("primary".into());
        model.fallback_upstreams = vec!["backup".into(), "a".into()];
        assert_eq!(upstream_order(&model, 0.5), ["primary", "backup", "a"]);
        model.upstream_weights = [("a".to_owned(), 3), ("b".to_owned(), 1)].into();
        // a covers draws 0..0.75, b 0.75..1.
        assert_eq!(upstream_order(&model, 0.0), ["a", "b", "primary", "backup"]);
        assert_eq!(
            upstream_order(&model, 0.74),
            ["a", "b", "primary", "backup"]
        );
        assert_eq!(
            upstream_order(&model, 0.76),
            ["b", "a", "primary", "backup"]
        );
        assert_eq!(upstream_order(&model, 1.0), ["b", "a", "primary", "backup"]);
        let firsts = (0..4000)
            .filter(|_| upstream_order(&model, random_unit())[0] == "a")
            .count();
        assert!((2700..3300).contains(&firsts), "{firsts} of 4000 went to a");
    }
}
