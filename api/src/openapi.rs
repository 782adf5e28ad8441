//! The OpenAPI 3.1 document: paths are collected from the route table.

pub mod messages;
pub mod schemas;

use unigen_core::domain::ModelCategory;
use unigen_providers::Catalogue;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "unigen — unified AI generation API",
        version = "1.0.0",
        description = "One HTTP + JSON API for AI generation. Authenticate with `Authorization: Bearer sk_...`; \
each operation lists the scope it needs. Errors are `{\"error\": {\"message\", \"type\", \"code\", \"param\"}}` \
(`ErrorBody`; the legacy `/ai-image` routes answer theirs in their envelope). Every authenticated \
operation can answer 401 (no valid key), 403 (scope missing, organization suspended), 429 (the key's \
request rate or the plan's concurrent requests; `Retry-After` says when to retry), 500 and 503 \
(the database is unavailable; retry shortly)."
    ),
    modifiers(&BearerAuth),
    components(schemas(schemas::JobAccepted)),
    tags(
        (name = "images", description = "Image generation and editing"),
        (name = "video", description = "Video generation"),
        (name = "audio", description = "Text to speech and speech to text"),
        (name = "music", description = "Music generation"),
        (name = "models", description = "The model catalogue"),
        (name = "chat", description = "Chat completions (OpenAI format, SSE streaming)"),
        (name = "responses", description = "OpenAI's Responses API (`client.responses`, the OpenAI Agents SDK): bridged through chat completions with the same models, keys, scope `chat`, metering and fallbacks; stored responses, `previous_response_id`, typed SSE events"),
        (name = "messages", description = "Anthropic's Messages API (Anthropic SDKs, Claude Code): at `/v1/messages` and `/api/v1/messages`, with `x-api-key` or `Authorization: Bearer`; errors in Anthropic's shape (`AnthropicErrorBody`)"),
        (name = "embeddings", description = "Embeddings (OpenAI format)"),
        (name = "files", description = "OpenAI's Files API (`client.files`): uploads for batches (`purpose` `batch`) and `user_data`, streamed to storage; batches' output and error files (`batch_output`). Scope `chat`; at `/api/v1/files` and `/v1/files`"),
        (name = "batches", description = "OpenAI's Batch API (`client.batches`): JSONL files of chat completions, embeddings or responses requests run on the worker fleet, metered as the sync requests; output and error files in OpenAI's format. Scope `chat`; at `/api/v1/batches` and `/v1/batches`"),
        (name = "legacy", description = "Legacy image and logo interface (envelope responses)"),
        (name = "jobs", description = "Async jobs: list, read (long poll), cancel"),
        (name = "usage", description = "Usage analytics (envelope responses)"),
        (name = "webhooks", description = "Signed event delivery: manage webhooks, send a test event, read deliveries, redeliver one, replay failed ones"),
        (name = "billing", description = "Credits, quota buckets, overage and the account (envelope responses)"),
        (name = "agents", description = "Tool-using agents: templates, streamed runs, knowledge files"),
        (name = "keys", description = "The organization's API keys: create (value shown once), list, revoke"),
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
        // Anthropic's SDKs send the key in `x-api-key` (the /messages routes).
        components.add_security_scheme(
            "x-api-key",
            SecurityScheme::ApiKey(utoipa::openapi::security::ApiKey::Header(
                utoipa::openapi::security::ApiKeyValue::new("x-api-key"),
            )),
        );
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
        .service(utoipa_actix_web::scope("/v1").configure(crate::routes::configure_root_v1))
        .split_for_parts();
    let mut doc = doc;
    AuthenticatedErrors.modify(&mut doc);
    IdempotentPosts.modify(&mut doc);
    JobAccepted.modify(&mut doc);
    refine(doc)
}

/// A generation's 202 is the created job (`AsyncJobCreated`, `async=true`)
/// or, when the sync wait limit passed, the job itself (`JobView`): the
/// routes say `AsyncJobCreated`, the document says [`schemas::JobAccepted`].
struct JobAccepted;

impl Modify for JobAccepted {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{Ref, RefOr};
        let created = RefOr::Ref(Ref::from_schema_name("AsyncJobCreated"));
        for item in openapi.paths.paths.values_mut() {
            let operations = [&mut item.post, &mut item.put];
            for operation in operations.into_iter().flatten() {
                let Some(RefOr::T(accepted)) = operation.responses.responses.get_mut("202") else {
                    continue;
                };
                for content in accepted.content.values_mut() {
                    if let RefOr::T(content) = content
                        && content.schema.as_ref() == Some(&created)
                    {
                        content.schema = Some(RefOr::Ref(Ref::from_schema_name("JobAccepted")));
                    }
                }
            }
        }
    }
}

/// The answers every authenticated operation can give, whatever its
/// handler does: the key is checked (401, 403 for a suspended organization
/// or a missing scope), the key's request rate is counted (429), and the
/// database can fail (500) or be unreachable (503).
const AUTHENTICATED_ERRORS: [(u16, &str); 5] = [
    (
        401,
        "`unauthorized`: invalid or missing API key, or the key has expired",
    ),
    (
        403,
        "`forbidden`: the key lacks the operation's scope, or the organization is suspended",
    ),
    (
        429,
        "`rate_limited`: the organization's request rate (all its keys together) or the plan's \
         concurrent requests are used up (for `GET /jobs/{id}/events`: also its open event \
         streams on the server); `Retry-After` (always sent) says when to retry",
    ),
    (500, "`server_error`: internal error"),
    (
        503,
        "`service_unavailable`: the database is unavailable; retry shortly",
    ),
];

/// Adds [`AUTHENTICATED_ERRORS`] to every operation with a `security`
/// requirement that does not list the status itself (the legacy routes list
/// theirs: their errors are envelopes). A 429 documents `Retry-After`.
struct AuthenticatedErrors;

impl Modify for AuthenticatedErrors {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        use utoipa::openapi::{ContentBuilder, HeaderBuilder, Ref, ResponseBuilder};
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                if operation.security.as_ref().is_none_or(Vec::is_empty) {
                    continue;
                }
                // Anthropic's Messages API lists its own, in Anthropic's shape.
                if operation
                    .tags
                    .as_ref()
                    .is_some_and(|tags| tags.iter().any(|t| t == "messages"))
                {
                    continue;
                }
                for (status, description) in AUTHENTICATED_ERRORS {
                    let mut response = ResponseBuilder::new().description(description).content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ErrorBody")))
                            .build(),
                    );
                    if status == 429 {
                        response = response.header(
                            "Retry-After",
                            HeaderBuilder::new()
                                .schema(Some(
                                    ObjectBuilder::new()
                                        .schema_type(Type::Integer)
                                        .minimum(Some(1))
                                        .build(),
                                ))
                                .description(Some("Seconds to wait before retrying"))
                                .build(),
                        );
                    }
                    operation
                        .responses
                        .responses
                        .entry(status.to_string())
                        .or_insert_with(|| response.build().into());
                }
            }
        }
    }
}

/// `Idempotency-Key` on every authenticated `POST` (see `crate::idempotency`):
/// the header parameter, and its 409 and 422 answers.
struct IdempotentPosts;

impl Modify for IdempotentPosts {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        use utoipa::openapi::{
            ContentBuilder, HeaderBuilder, Ref, RefOr, Required, ResponseBuilder,
        };
        let answers = [
            (
                "400",
                "`invalid_request`: `Idempotency-Key` empty, longer than 255 characters, not \
                 printable ASCII, or sent more than once (`param` names it)",
            ),
            (
                "409",
                "`idempotency_key_in_use`: a request with this `Idempotency-Key` is still in progress",
            ),
            (
                "422",
                "`idempotency_key_reused`: the `Idempotency-Key` was used with another request \
                 (method, path, body or API key)",
            ),
        ];
        for (path, item) in openapi.paths.paths.iter_mut() {
            // The root `/v1` routes (Anthropic's) have no Idempotency-Key.
            if !path.starts_with("/api/v1/") || !crate::idempotency::applies_to(path) {
                continue;
            }
            let Some(operation) = item.post.as_mut() else {
                continue;
            };
            if operation.security.as_ref().is_none_or(Vec::is_empty) {
                continue;
            }
            operation.parameters.get_or_insert_with(Vec::new).push(
                ParameterBuilder::new()
                    .name(crate::idempotency::HEADER)
                    .parameter_in(ParameterIn::Header)
                    .required(Required::False)
                    .schema(Some(
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .min_length(Some(1))
                            .max_length(Some(crate::idempotency::MAX_KEY_CHARS))
                            .build(),
                    ))
                    .description(Some(
                        "Makes the request safe to retry (IETF draft `Idempotency-Key`): bare \
                         (`abc-123`) or a structured-field string (`\"abc-123\"`), 1 to 255 \
                         characters, per organization, kept 24 hours. A retry with the same key, \
                         API key, method, path and body gets the first response again with \
                         `Idempotent-Replayed: true`, and nothing is created or charged again. A \
                         request that failed without creating anything frees its key.",
                    ))
                    .build()
                    .into(),
            );
            // Every answer that can be kept says when it is a replay.
            for (status, response) in operation.responses.responses.iter_mut() {
                if let (true, RefOr::T(response)) = (status.starts_with('2'), response) {
                    response.headers.insert(
                        "Idempotent-Replayed".to_owned(),
                        HeaderBuilder::new()
                            .schema(Some(
                                ObjectBuilder::new()
                                    .schema_type(Type::String)
                                    .enum_values(Some(["true"]))
                                    .build(),
                            ))
                            .description(Some(
                                "`true` when this is the kept answer of an earlier request with \
                                 the same `Idempotency-Key`; absent otherwise",
                            ))
                            .build()
                            .into(),
                    );
                }
            }
            for (status, description) in answers {
                match operation.responses.responses.get_mut(status) {
                    Some(RefOr::T(existing)) => {
                        existing.description =
                            format!("{}; or {description}", existing.description);
                    }
                    Some(RefOr::Ref(_)) => {}
                    None => {
                        operation.responses.responses.insert(
                            status.to_owned(),
                            ResponseBuilder::new()
                                .description(description)
                                .content(
                                    "application/json",
                                    ContentBuilder::new()
                                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                                        .build(),
                                )
                                .build()
                                .into(),
                        );
                    }
                }
            }
        }
    }
}

/// The routes whose body names a model, the `(category, capability)` of the
/// models each accepts (as `Catalogue::resolve_capable` checks them).
const MODEL_ROUTES: [(&str, &str, ModelCategory, Option<&str>); 12] = [
    ("/api/v1/responses", "post", ModelCategory::Chat, None),
    (
        "/api/v1/chat/completions",
        "post",
        ModelCategory::Chat,
        None,
    ),
    ("/api/v1/embeddings", "post", ModelCategory::Embedding, None),
    (
        "/api/v1/images/generations",
        "post",
        ModelCategory::Image,
        Some("text_to_image"),
    ),
    (
        "/api/v1/images/edits",
        "post",
        ModelCategory::Image,
        Some("image_edit"),
    ),
    (
        "/api/v1/videos/generations",
        "post",
        ModelCategory::Video,
        None,
    ),
    (
        "/api/v1/audio/speech",
        "post",
        ModelCategory::Audio,
        Some("text_to_speech"),
    ),
    (
        "/api/v1/audio/transcriptions",
        "post",
        ModelCategory::Audio,
        Some("speech_to_text"),
    ),
    (
        "/api/v1/audio/translations",
        "post",
        ModelCategory::Audio,
        Some("speech_to_text"),
    ),
    (
        "/api/v1/music/generations",
        "post",
        ModelCategory::Music,
        None,
    ),
    ("/api/v1/agents", "post", ModelCategory::Chat, None),
    ("/api/v1/agents/{id}", "patch", ModelCategory::Chat, None),
];

/// The names a request may give a model of this kind: the ids and aliases
/// of the catalogue's models of the category (and capability), in order.
fn model_names(
    catalogue: &Catalogue,
    category: ModelCategory,
    capability: Option<&str>,
) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let fits = catalogue.all().iter().filter(|m| {
        m.category == category
            && capability.is_none_or(|c| m.capabilities.iter().any(|have| have == c))
    });
    for model in fits {
        for name in std::iter::once(&model.id).chain(&model.aliases) {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    names
}

/// The document as this deployment serves it: each request body's `model`
/// enumerates the catalogue's models of the kind the route accepts (ids
/// and aliases; `null` too where the field may be `null`). `docs/openapi.json`
/// is [`document`] without it, the same for every deployment.
pub fn for_catalogue(
    doc: utoipa::openapi::OpenApi,
    catalogue: &Catalogue,
) -> utoipa::openapi::OpenApi {
    use serde_json::{Value, json};
    let mut value = serde_json::to_value(&doc).expect("the document is JSON");
    for (path, method, category, capability) in MODEL_ROUTES {
        let names = model_names(catalogue, category, capability);
        if names.is_empty() {
            continue;
        }
        let pointer = format!(
            "/paths/{}/{method}/requestBody/content",
            path.replace('~', "~0").replace('/', "~1")
        );
        let bodies: Vec<String> = value
            .pointer(&pointer)
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|content| content.values())
            .filter_map(|media| media.pointer("/schema/$ref").and_then(Value::as_str))
            .filter_map(|r| r.strip_prefix("#/components/schemas/"))
            .map(str::to_owned)
            .collect();
        for body in bodies {
            let Some(model) = value
                .pointer_mut(&format!("/components/schemas/{body}/properties/model"))
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            let nullable = model
                .get("type")
                .and_then(Value::as_array)
                .is_some_and(|types| types.contains(&json!("null")));
            let mut allowed: Vec<Value> = names.iter().map(|n| json!(n)).collect();
            if nullable {
                allowed.push(Value::Null);
            }
            model.insert("enum".into(), Value::Array(allowed));
        }
    }
    serde_json::from_value(value).expect("the document is an OpenAPI document")
}

/// What utoipa's annotations cannot express, written into the document:
/// - every response has a `description` (OpenAPI requires one; utoipa
///   leaves it out when an annotation gives none): the status's reason;
/// - an error's `param` is always present (`null` but for invalid fields);
/// - `seed` fields are unsigned 64-bit integers (utoipa says int64);
/// - `events` of a webhook enumerate the event kinds, its `url` is a URI;
/// - an agent's `tools` are distinct;
/// - event streams (`text/event-stream`) describe one event each: `data`
///   is JSON (an agent run's `start`, `step`, `done` or `error`) or, for chat,
///   a `chat.completion.chunk` then `[DONE]`; a job's events carry the job
///   (`JobView`).
fn refine(doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    use serde_json::{Value, json};
    let mut value = serde_json::to_value(&doc).expect("the document is JSON");
    for item in value
        .get_mut("paths")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|paths| paths.values_mut())
    {
        for operation in item
            .as_object_mut()
            .into_iter()
            .flat_map(|o| o.values_mut())
        {
            let Some(responses) = operation
                .get_mut("responses")
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            for (status, response) in responses.iter_mut() {
                let reason = status
                    .parse::<u16>()
                    .ok()
                    .and_then(|s| actix_web::http::StatusCode::from_u16(s).ok())
                    .and_then(|s| s.canonical_reason())
                    .unwrap_or("Response");
                if let Some(response) = response.as_object_mut() {
                    response
                        .entry("description")
                        .or_insert_with(|| json!(reason));
                }
            }
        }
    }
    if let Some(schemas) = value
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        if let Some(required) = schemas
            .get_mut("ErrorDetail")
            .and_then(|s| s.get_mut("required"))
            .and_then(Value::as_array_mut)
            && !required.contains(&json!("param"))
        {
            required.push(json!("param"));
        }
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
                // At most 20. Names are RFC 9110 tokens (`propertyNames`,
                // which utoipa 6 keeps); that they are not reserved needs
                // `not`, which it drops: only the description says so.
                // Values are what `HeaderValue` takes (no control
                // characters but tab), at most 1,000 characters.
                headers.insert("maxProperties".into(), json!(20));
                headers.insert(
                    "propertyNames".into(),
                    json!({"type": "string", "pattern": "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"}),
                );
                headers.insert(
                    "additionalProperties".into(),
                    json!({
                        "type": "string",
                        "maxLength": 1000,
                        "pattern": "^[^\\x00-\\x08\\x0a-\\x1f\\x7f]*$"
                    }),
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
    if let Some(content) =
        value.pointer_mut("/paths/~1api~1v1~1responses/post/responses/200/content")
    {
        content["text/event-stream"] = json!({"schema": {
            "type": "object",
            "required": ["event", "data"],
            "properties": {
                "event": {"type": "string", "description": "The event's `type`: `response.created`, `response.in_progress`, `response.output_item.added`, `response.content_part.added`, `response.output_text.delta`, `response.output_text.done`, `response.content_part.done`, `response.function_call_arguments.delta`, `response.function_call_arguments.done`, `response.output_item.done`, then `response.completed`, `response.incomplete` or `response.failed`"},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": {
                        "type": "object",
                        "required": ["type", "sequence_number"],
                        "properties": {
                            "type": {"type": "string"},
                            "sequence_number": {"type": "integer", "minimum": 0}
                        }
                    }
                }
            }
        }});
    }
    if let Some(content) =
        value.pointer_mut("/paths/~1api~1v1~1jobs~1{id}~1events/get/responses/200/content")
    {
        content["text/event-stream"] = json!({"schema": {
            "type": "object",
            "required": ["event", "id", "data"],
            "properties": {
                "event": {"type": "string", "enum": ["status", "progress"]},
                "id": {"type": "string", "pattern": "^[0-2]-[0-9]+-[0-9]{1,3}$"},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": {"$ref": "#/components/schemas/JobView"}
                }
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

    /// Every `$ref` names a schema of the components.
    #[test]
    fn every_reference_resolves() {
        fn refs<'a>(value: &'a serde_json::Value, found: &mut Vec<&'a str>) {
            match value {
                serde_json::Value::Object(fields) => {
                    for (key, value) in fields {
                        match (key.as_str(), value.as_str()) {
                            ("$ref", Some(target)) => found.push(target),
                            _ => refs(value, found),
                        }
                    }
                }
                serde_json::Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
                _ => {}
            }
        }
        let doc = serde_json::to_value(super::document()).unwrap();
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(!found.is_empty());
        for target in found {
            assert!(doc.pointer(&target[1..]).is_some(), "{target} dangles");
        }
    }

    /// What `refine` writes survives utoipa's model (which silently drops
    /// keywords it does not know, such as `not` or `const`).
    #[test]
    fn refined_keywords_survive() {
        let doc = serde_json::to_value(super::document()).unwrap();
        let schemas = &doc["components"]["schemas"];
        for schema in ["WebhookRequest", "WebhookCreateRequest"] {
            let headers = &schemas[schema]["properties"]["headers"];
            assert!(headers["propertyNames"]["pattern"].is_string(), "{headers}");
            assert_eq!(headers["additionalProperties"]["maxLength"], 1000);
        }
        assert!(
            schemas["ErrorDetail"]["required"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!("param"))
        );
        let accepted = &doc["paths"]["/api/v1/images/generations"]["post"]["responses"]["202"];
        assert_eq!(
            accepted["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/JobAccepted"
        );
        let limited = &doc["paths"]["/api/v1/models"]["get"]["responses"]["429"];
        assert!(limited["headers"]["Retry-After"].is_object(), "{limited}");
    }

    /// The documentation enums spell the wire names of the domain's enums.
    #[test]
    fn documented_enums_match_the_domain() {
        use unigen_core::domain::{Bucket, ModelTier};
        let doc = serde_json::to_value(super::document()).unwrap();
        let names = |schema: &str| -> Vec<String> {
            doc["components"]["schemas"][schema]["enum"]
                .as_array()
                .unwrap_or_else(|| panic!("{schema} is an enum"))
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        };
        let tiers: Vec<String> = ModelTier::ALL.iter().map(|t| t.to_string()).collect();
        assert_eq!(names("Tier"), tiers);
        let buckets: Vec<String> = Bucket::ALL.iter().map(|b| b.to_string()).collect();
        assert_eq!(names("BucketName"), buckets);
    }

    #[test]
    fn the_served_document_enumerates_the_catalogue_models_per_kind() {
        let settings = unigen_core::config::Settings::load_with(None, &[]).unwrap();
        let catalogue = unigen_providers::Catalogue::new(settings.models);
        let doc =
            serde_json::to_value(super::for_catalogue(super::document(), &catalogue)).unwrap();
        let models = |schema: &str| -> Vec<serde_json::Value> {
            doc["components"]["schemas"][schema]["properties"]["model"]["enum"]
                .as_array()
                .unwrap_or_else(|| panic!("{schema}.model has an enum"))
                .clone()
        };
        let chat = models("ChatCompletionRequest");
        for name in ["local/echo", "local/echo-vision", "gpt-4o-mini"] {
            assert!(chat.contains(&serde_json::json!(name)), "{name}");
        }
        assert!(chat.contains(&serde_json::Value::Null), "model may be null");
        assert!(!chat.contains(&serde_json::json!("local/hash-embed")));
        assert_eq!(models("AgentCreateRequest"), chat);
        assert_eq!(models("AgentUpdateRequest"), chat);
        assert_eq!(models("ResponseCreateRequest"), chat);
        let edits = models("ImageEditRequest");
        assert!(edits.contains(&serde_json::json!("local/classic-edit")));
        assert!(edits.contains(&serde_json::json!("dall-e-2")));
        assert!(!edits.contains(&serde_json::json!("local/procedural-v1")));
        assert_eq!(models("ImageEditForm"), edits);
        let images = models("ImageGenerationRequest");
        assert!(images.contains(&serde_json::json!("dall-e-3")));
        assert!(!images.contains(&serde_json::json!("local/classic-edit")));
        for schema in [
            "EmbeddingRequest",
            "VideoGenerationRequest",
            "SpeechRequest",
            "TranscriptionRequest",
            "TranscriptionForm",
            "TranslationRequest",
            "TranslationForm",
            "MusicGenerationRequest",
        ] {
            assert!(models(schema).len() > 1, "{schema}");
        }
        assert!(models("SpeechRequest").contains(&serde_json::json!("tts-1")));
        assert!(!models("SpeechRequest").contains(&serde_json::json!("whisper-1")));
        // The static document names no deployment's models.
        let plain = serde_json::to_value(super::document()).unwrap();
        assert!(
            plain["components"]["schemas"]["ChatCompletionRequest"]["properties"]["model"]
                .get("enum")
                .is_none()
        );
    }

    #[test]
    fn every_path_is_under_the_versioned_prefix() {
        let doc = super::document();
        assert!(!doc.paths.paths.is_empty());
        for path in doc.paths.paths.keys() {
            // Anthropic's SDKs send the Messages API to the origin's `/v1`.
            let anthropic_root =
                ["/v1/messages", "/v1/messages/count_tokens"].contains(&path.as_str());
            // The OpenAI SDK with `OPENAI_BASE_URL=<origin>/v1`: Files and Batches.
            let openai_root = path.starts_with("/v1/files") || path.starts_with("/v1/batches");
            assert!(
                path.starts_with("/api/v1/") || anthropic_root || openai_root,
                "{path}"
            );
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
