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

/// The document with every `/api/v1` route, built from the route table, with
/// what the annotations cannot say (see [`refine`]).
pub fn document() -> utoipa::openapi::OpenApi {
    use utoipa_actix_web::AppExt;
    let (_, doc) = actix_web::App::new()
        .into_utoipa_app()
        .openapi(ApiDoc::openapi())
        .service(utoipa_actix_web::scope("/api/v1").configure(crate::routes::configure_v1))
        .split_for_parts();
    refine(doc)
}

/// What utoipa's annotations cannot express, written into the document:
/// - `seed` fields are unsigned 64-bit integers (utoipa says int64);
/// - `events` of a webhook enumerate the event kinds, its `url` is a URI;
/// - an agent's `tools` are distinct;
/// - event streams (`text/event-stream`) describe one event each: `data`
///   is JSON (an agent run's `start`, `step`, `done` or `error`) or, for chat,
///   a `chat.completion.chunk` then `[DONE]`.
fn refine(doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    use serde_json::{Value, json};
    let mut value = serde_json::to_value(&doc).expect("the document is JSON");
    if let Some(schemas) = value
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        for schema in schemas.values_mut() {
            if let Some(seed) = schema
                .pointer_mut("/properties/seed")
                .and_then(Value::as_object_mut)
                && seed.get("format") == Some(&json!("int64"))
                && seed.get("minimum") == Some(&json!(0))
            {
                seed.remove("format");
                seed.insert("maximum".into(), json!(u64::MAX));
            }
        }
        for schema in ["AgentCreateRequest", "AgentUpdateRequest"] {
            if let Some(tools) = schemas
                .get_mut(schema)
                .and_then(|s| s.pointer_mut("/properties/tools"))
                .and_then(Value::as_object_mut)
            {
                tools.insert("uniqueItems".into(), json!(true));
            }
        }
        for schema in ["WebhookRequest", "WebhookCreateRequest"] {
            if let Some(url) = schemas
                .get_mut(schema)
                .and_then(|s| s.pointer_mut("/properties/url"))
                .and_then(Value::as_object_mut)
            {
                url.insert("format".into(), json!("uri"));
                url.insert("pattern".into(), json!("^https?://[^/@\\s]+"));
            }
            if let Some(headers) = schemas
                .get_mut(schema)
                .and_then(|s| s.pointer_mut("/properties/headers"))
                .and_then(Value::as_object_mut)
            {
                // At most 20, with visible-ASCII values. Names must be
                // RFC 9110 tokens and not reserved: utoipa's model has no
                // `propertyNames`, so only the description says so.
                headers.insert("maxProperties".into(), json!(20));
                headers.insert(
                    "additionalProperties".into(),
                    json!({"type": "string", "pattern": "^[\\x20-\\x7e]*$"}),
                );
            }
        }
        let kinds: Vec<Value> = unigen_jobs::webhooks::EVENT_KINDS
            .iter()
            .map(|k| json!(k))
            .collect();
        for schema in ["WebhookRequest", "WebhookCreateRequest"] {
            if let Some(items) = schemas
                .get_mut(schema)
                .and_then(|s| s.pointer_mut("/properties/events"))
                .and_then(Value::as_object_mut)
            {
                items.insert("items".into(), json!({"type": "string", "enum": kinds}));
            }
        }
    }
    let run_event = json!({
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": {"type": "string"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {
                    "type": "object",
                    "required": ["type", "run_id"],
                    "properties": {
                        "type": {"type": "string", "enum": ["start", "step", "done", "error"]},
                        "run_id": {"type": "string"}
                    }
                }
            }
        }
    });
    if let Some(content) =
        value.pointer_mut("/paths/~1api~1v1~1agents~1{id}~1run/post/responses/200/content")
    {
        content["text/event-stream"] = json!({"schema": run_event});
    }
    if let Some(content) =
        value.pointer_mut("/paths/~1api~1v1~1chat~1completions/post/responses/200/content")
    {
        content["text/event-stream"] = json!({"schema": {
            "type": "object",
            "required": ["data"],
            "properties": {
                "event": {"type": "string"},
                "data": {"type": "string", "description": "A `chat.completion.chunk` as JSON, then `[DONE]`"}
            }
        }});
    }
    serde_json::from_value(value).expect("the refined document is an OpenAPI document")
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
