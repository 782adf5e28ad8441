//! The OpenAPI 3.1 document: paths are collected from the route table.

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "unigen — unified AI generation API",
        version = "1.0.0",
        description = "One HTTP + JSON API for AI generation. Authenticate with `Authorization: Bearer sk_...`; \
each operation lists the scope it needs. Errors are `{\"error\": {\"message\", \"type\", \"code\"}}`."
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "images", description = "Image generation and editing"),
        (name = "video", description = "Video generation"),
        (name = "audio", description = "Text to speech and speech to text"),
        (name = "music", description = "Music generation"),
        (name = "models", description = "The model catalogue"),
        (name = "chat", description = "Chat completions (OpenAI format, SSE streaming)"),
        (name = "embeddings", description = "Embeddings (OpenAI format)"),
        (name = "legacy", description = "Legacy image and logo interface (envelope responses)"),
        (name = "jobs", description = "Async jobs: list, read (long poll), cancel"),
        (name = "usage", description = "Usage analytics (envelope responses)"),
        (name = "webhooks", description = "Signed event delivery: manage webhooks, send a test event, read deliveries"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut http = Http::new(HttpAuthScheme::Bearer);
        http.bearer_format = Some("sk_ followed by 64 hex characters".into());
        components.add_security_scheme("bearer", SecurityScheme::Http(http));
    }
}

/// The document with every `/api/v1` route, built from the route table.
pub fn document() -> utoipa::openapi::OpenApi {
    use utoipa_actix_web::AppExt;
    let (_, doc) = actix_web::App::new()
        .into_utoipa_app()
        .openapi(ApiDoc::openapi())
        .service(utoipa_actix_web::scope("/api/v1").configure(crate::routes::configure_v1))
        .split_for_parts();
    doc
}

#[cfg(test)]
mod tests {
    /// `docs/openapi.json` is the document as served: a change to the API's
    /// surface shows in review. After a deliberate change, write it anew with
    /// `UNIGEN_BLESS_OPENAPI=1 cargo nextest run -p unigen-api openapi`.
    #[test]
    fn the_document_is_the_one_in_docs() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
        let current = super::document().to_pretty_json().unwrap() + "\n";
        if std::env::var_os("UNIGEN_BLESS_OPENAPI").is_some() {
            std::fs::write(path, &current).unwrap();
            return;
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == current,
            "the OpenAPI document differs from docs/openapi.json; review the change, then \
             rerun with UNIGEN_BLESS_OPENAPI=1 to update the file"
        );
    }

    #[test]
    fn every_path_is_under_the_versioned_prefix() {
        let doc = super::document();
        assert!(!doc.paths.paths.is_empty());
        for path in doc.paths.paths.keys() {
            assert!(path.starts_with("/api/v1/"), "{path}");
        }
        for path in [
            "/api/v1/webhooks",
            "/api/v1/webhooks/{id}",
            "/api/v1/webhooks/{id}/rotate-secret",
            "/api/v1/webhooks/{id}/test",
            "/api/v1/webhooks/{id}/deliveries",
        ] {
            assert!(doc.paths.paths.contains_key(path), "{path} documented");
        }
    }
}
