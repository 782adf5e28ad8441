//! Embeddings of knowledge chunks and queries, and retrieval for agent runs:
//! the query is embedded with the catalogue's default embedding model, then
//! the agent's completed chunks embedded by the same model are ranked by dot
//! product (the vectors are unit length, so it is the cosine) in SQL.

use std::collections::BTreeMap;
use std::sync::Arc;

use diesel_async::AsyncPgConnection;
use uuid::Uuid;

use unigen_core::config::{ModelEntry, Settings, UpstreamSettings};

use unigen_core::ProviderError;
use unigen_core::domain::ModelCategory;
use unigen_db::{DbError, queries};
use unigen_providers::local::LocalProvider;
use unigen_providers::local::chat::{DEFAULT_EMBEDDING_DIMENSIONS, embed};
use unigen_providers::registry::{Capability, EmbeddingUpstream, Providers};
use unigen_providers::{Catalogue, fallback};

/// A chunk of one of the agent's knowledge files, with its similarity to the
/// query (cosine, -1..1).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KnowledgeExcerpt {
    pub file_id: Uuid,
    pub filename: String,
    /// Position of the chunk in its file, from 0.
    pub chunk_index: i32,
    pub content: String,
    pub score: f32,
}

/// Embeds texts with the catalogue's default embedding model: the `local`
/// adapter's `hash-embed` in-process, any other model through its adapter's
/// upstream (then its fallbacks). Vectors are returned at unit length. Built
/// once per process; cheap to clone.
#[derive(Clone)]
pub struct Embedder {
    inner: Arc<Inner>,
}

struct Inner {
    /// The catalogue id stored with the chunks (`embedding_model`).
    model_id: String,
    backend: Backend,
}

enum Backend {
    Local {
        provider: LocalProvider,
        dimensions: u32,
    },
    Upstream {
        /// The catalogue entry (its upstream and fallbacks, in order).
        entry: Box<ModelEntry>,
        /// One client per upstream the entry names, in order.
        clients: Vec<(String, Arc<dyn EmbeddingUpstream>)>,
    },
    /// No usable embedding model: every call fails permanently with this.
    Unavailable(String),
}

impl Embedder {
    /// The catalogue's default embedding model, with the local provider's
    /// simulated conditions and one client per upstream it names.
    pub fn new(settings: &Settings) -> Self {
        let catalogue = Catalogue::new(settings.models.clone());
        match catalogue.resolve(None, ModelCategory::Embedding) {
            Ok(model) => Self::for_model(
                model,
                &settings.upstreams,
                LocalProvider::new(&settings.local_provider),
            ),
            Err(err) => Self::unavailable("none", err.message),
        }
    }

    /// An embedder for `model` (an embedding model of the catalogue).
    pub fn for_model(
        model: &ModelEntry,
        upstreams: &BTreeMap<String, UpstreamSettings>,
        local: LocalProvider,
    ) -> Self {
        let backend = match model.adapter.as_str() {
            "local" => Backend::Local {
                provider: local,
                dimensions: DEFAULT_EMBEDDING_DIMENSIONS,
            },
            _ if Providers::serves_remotely(model, Capability::Embeddings) => Backend::Upstream {
                entry: Box::new(model.clone()),
                clients: Providers::new(upstreams).embeddings(model),
            },
            other => Backend::Unavailable(format!(
                "model `{}` uses the {other} adapter, which does not serve embeddings",
                model.id
            )),
        };
        Self {
            inner: Arc::new(Inner {
                model_id: model.id.clone(),
                backend,
            }),
        }
    }

    fn unavailable(model_id: &str, reason: String) -> Self {
        Self {
            inner: Arc::new(Inner {
                model_id: model_id.to_owned(),
                backend: Backend::Unavailable(reason),
            }),
        }
    }

    /// The catalogue id of the model (stored with the chunks it embeds).
    pub fn model_id(&self) -> &str {
        &self.inner.model_id
    }

    /// One unit vector per text, in order.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        match &self.inner.backend {
            Backend::Local {
                provider,
                dimensions,
            } => {
                provider.simulate_conditions().await?;
                // Already unit vectors.
                Ok(texts.iter().map(|text| embed(text, *dimensions)).collect())
            }
            Backend::Upstream { entry, clients } => {
                let mut vectors = embed_upstream(entry, clients, texts).await?;
                vectors.iter_mut().for_each(|v| normalize(v));
                Ok(vectors)
            }
            Backend::Unavailable(reason) => Err(ProviderError::Permanent(reason.clone())),
        }
    }
}

/// The model's upstream, then each fallback in order (the one loop of
/// [`fallback::in_order`]).
async fn embed_upstream(
    entry: &ModelEntry,
    clients: &[(String, Arc<dyn EmbeddingUpstream>)],
    texts: &[String],
) -> Result<Vec<Vec<f32>>, ProviderError> {
    let model = entry.upstream_model.as_deref().unwrap_or(&entry.id);
    let body = serde_json::json!({ "model": model, "input": texts });
    fallback::in_order(entry, clients.to_vec(), |client| {
        let body = body.clone();
        async move { Ok(client.embed(body, texts.len()).await?.vectors) }
    })
    .await
    .map_err(|last| {
        last.unwrap_or_else(|| {
            ProviderError::Permanent(format!(
                "no upstream is configured for model `{}`",
                entry.id
            ))
        })
    })
}

/// Scales to unit length, so similarity is a dot product (upstreams such as
/// Ollama do not normalise). A zero vector stays zero: it matches nothing.
fn normalize(vector: &mut [f32]) {
    let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        vector.iter_mut().for_each(|v| *v /= norm);
    }
}

/// Why excerpts could not be looked up.
#[derive(Debug, thiserror::Error)]
pub enum RetrievalError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("embedding the query failed: {0}")]
    Embedding(#[from] ProviderError),
}

/// The agent's most relevant completed chunks for `query`, best first (at
/// most `limit`). Only chunks embedded by this embedder's model take part
/// (files processed under another default model are skipped until
/// re-uploaded). An agent without such chunks costs one query and no
/// embedding call.
///
/// A run logs a failure and goes on without excerpts.
pub async fn relevant_excerpts(
    conn: &mut AsyncPgConnection,
    embedder: &Embedder,
    agent_id: Uuid,
    query: &str,
    limit: usize,
) -> Result<Vec<KnowledgeExcerpt>, RetrievalError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    if limit == 0
        || query.trim().is_empty()
        || !queries::knowledge::has_chunks(conn, agent_id, embedder.model_id()).await?
    {
        return Ok(Vec::new());
    }
    let vector = embedder
        .embed(&[query.to_owned()])
        .await?
        .pop()
        .unwrap_or_default();
    let found =
        queries::knowledge::nearest_chunks(conn, agent_id, embedder.model_id(), &vector, limit)
            .await?;
    Ok(found
        .into_iter()
        .map(|chunk| KnowledgeExcerpt {
            file_id: chunk.file_id,
            filename: chunk.filename,
            chunk_index: chunk.chunk_index,
            content: chunk.content,
            score: chunk.score,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;
    use unigen_core::config::LocalProviderSettings;

    fn local() -> LocalProvider {
        LocalProvider::new(&LocalProviderSettings {
            latency_ms: 0,
            failure_rate: 0.0,
        })
    }

    fn settings() -> Settings {
        Settings::load_with(None, &[]).unwrap()
    }

    #[tokio::test]
    async fn the_default_catalogue_embeds_locally_with_unit_vectors() {
        let embedder = Embedder::new(&settings());
        assert_eq!(embedder.model_id(), "local/hash-embed");
        let texts = vec!["invoices are due in 30 days".to_owned(), String::new()];
        let vectors = embedder.embed(&texts).await.unwrap();
        assert_eq!(vectors.len(), 2);
        for vector in &vectors {
            assert_eq!(vector.len(), DEFAULT_EMBEDDING_DIMENSIONS as usize);
            let norm: f32 = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        }
        assert_eq!(vectors[0], embed(&texts[0], DEFAULT_EMBEDDING_DIMENSIONS));
        assert!(embedder.embed(&[]).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_openai_model_embeds_through_its_upstream_then_its_fallback() {
        let broken = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(400)
                    .set_body_json(serde_json::json!({"error": {"message": "unknown model"}})),
            )
            .mount(&broken)
            .await;
        let working = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/embeddings"))
            .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
                "data": [{"index": 0, "embedding": [3.0, 4.0]}]
            })))
            .mount(&working)
            .await;
        let upstream = |url: String| UpstreamSettings {
            base_url: format!("{url}/v1"),
            api_key: String::new(),
            timeout_seconds: 5,
            ..Default::default()
        };
        let upstreams = BTreeMap::from([
            ("primary".to_owned(), upstream(broken.uri())),
            ("secondary".to_owned(), upstream(working.uri())),
        ]);
        let mut model = settings()
            .models
            .into_iter()
            .find(|m| m.id == "local/hash-embed")
            .unwrap();
        model.id = "acme/embed".into();
        model.adapter = "openai".into();
        model.upstream = Some("primary".into());
        model.fallback_upstreams = vec!["secondary".into()];
        model.upstream_model = Some("text-embed".into());
        let embedder = Embedder::for_model(&model, &upstreams, local());
        assert_eq!(embedder.model_id(), "acme/embed");
        let vectors = embedder.embed(&["hello".to_owned()]).await.unwrap();
        assert_eq!(vectors, vec![vec![0.6, 0.8]], "normalised");
        assert_eq!(broken.received_requests().await.unwrap().len(), 1);

        model.fallback_upstreams.clear();
        let alone = Embedder::for_model(&model, &upstreams, local());
        assert_eq!(
            alone.embed(&["hello".to_owned()]).await,
            Err(ProviderError::Permanent("unknown model".into()))
        );
    }

    #[tokio::test]
    async fn without_an_embedding_model_every_call_fails_permanently() {
        let mut settings = settings();
        settings
            .models
            .retain(|m| m.category != ModelCategory::Embedding);
        let embedder = Embedder::new(&settings);
        let err = embedder.embed(&["x".to_owned()]).await.unwrap_err();
        assert!(
            matches!(&err, ProviderError::Permanent(m) if m.contains("no embedding model")),
            "{err:?}"
        );
    }
}
