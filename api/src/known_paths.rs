//! Which methods each known path takes, read from the OpenAPI document (so
//! the table cannot drift from the routes): a request that matched no route
//! is a 405 with `Allow` when its path is known, else a 404. The same table
//! tells the idempotency middleware, before it reads a byte of a body,
//! whether a `POST` goes anywhere and which scopes it needs.

use unigen_core::domain::Scope;
use utoipa::openapi::OpenApi;
use utoipa::openapi::path::Operation;

/// Paths outside the OpenAPI document, all `GET`.
const ROOT_PATHS: [&str; 5] = ["/files/{key}", "/healthz", "/readyz", "/metrics", "/docs"];
/// Templates whose last parameter spans slashes (model ids, storage keys).
const SLASHED_TAILS: [&str; 2] = ["/api/v1/models/{id}", "/files/{key}"];

struct KnownPath {
    template: String,
    segments: Vec<String>,
    slashed_tail: bool,
    allow: String,
    /// The `POST` operation's scopes, any one of which admits (empty: any
    /// valid key); `None` when the path takes no `POST`.
    post_scopes: Option<Vec<Scope>>,
}

/// A known path's `POST` operation.
pub struct PostRoute<'a> {
    /// The OpenAPI template (`/api/v1/agents/{id}/knowledge`).
    pub template: &'a str,
    pub scopes: &'a [Scope],
}

pub struct KnownPaths {
    paths: Vec<KnownPath>,
}

impl KnownPaths {
    pub fn from_openapi(document: &OpenApi) -> Self {
        let mut paths: Vec<KnownPath> = document
            .paths
            .paths
            .iter()
            .map(|(template, item)| {
                let methods = [
                    ("GET", item.get.is_some()),
                    ("POST", item.post.is_some()),
                    ("PUT", item.put.is_some()),
                    ("PATCH", item.patch.is_some()),
                    ("DELETE", item.delete.is_some()),
                ];
                let allow = methods
                    .iter()
                    .filter(|(_, present)| *present)
                    .map(|(method, _)| *method)
                    .collect::<Vec<_>>()
                    .join(", ");
                let mut known = KnownPath::new(template, allow);
                known.post_scopes = item.post.as_ref().map(operation_scopes);
                known
            })
            .collect();
        paths.extend(ROOT_PATHS.iter().map(|t| KnownPath::new(t, "GET".into())));
        Self { paths }
    }

    /// The `POST` operation `path` names, if any.
    pub fn post(&self, path: &str) -> Option<PostRoute<'_>> {
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        self.paths
            .iter()
            .filter(|known| known.post_scopes.is_some())
            .find(|known| known.matches(&segments))
            .and_then(|known| {
                Some(PostRoute {
                    template: &known.template,
                    scopes: known.post_scopes.as_deref()?,
                })
            })
    }

    /// The methods `path` takes, if it is a known path.
    pub fn allowed(&self, path: &str) -> Option<&str> {
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        self.paths
            .iter()
            .find(|known| known.matches(&segments))
            .map(|known| known.allow.as_str())
    }
}

impl KnownPath {
    fn new(template: &str, allow: String) -> Self {
        Self {
            template: template.to_owned(),
            post_scopes: None,
            segments: template.split('/').map(str::to_owned).collect(),
            slashed_tail: SLASHED_TAILS.contains(&template),
            allow,
        }
    }

    fn matches(&self, path: &[&str]) -> bool {
        let fits = |template: &String, segment: &&str| {
            if template.starts_with('{') {
                !segment.is_empty()
            } else {
                template == segment
            }
        };
        if self.slashed_tail && path.len() > self.segments.len() {
            let (head, _) = path.split_at(self.segments.len());
            return self.segments.iter().zip(head).all(|(t, s)| fits(t, s));
        }
        path.len() == self.segments.len() && self.segments.iter().zip(path).all(|(t, s)| fits(t, s))
    }
}

/// The scopes an operation's `bearer` requirements name (unknown names,
/// which no key can hold, are dropped).
fn operation_scopes(operation: &Operation) -> Vec<Scope> {
    operation
        .security
        .iter()
        .flatten()
        .filter_map(|requirement| serde_json::to_value(requirement).ok())
        .filter_map(|value| value.get("bearer").cloned())
        .filter_map(|scopes| serde_json::from_value::<Vec<String>>(scopes).ok())
        .flatten()
        .filter_map(|name| name.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_paths_and_their_methods_come_from_the_openapi_document() {
        let known = KnownPaths::from_openapi(&crate::openapi::document());
        assert_eq!(known.allowed("/api/v1/chat/completions"), Some("POST"));
        assert_eq!(known.allowed("/api/v1/jobs/0193"), Some("GET, DELETE"));
        assert_eq!(known.allowed("/api/v1/models/local/echo"), Some("GET"));
        assert_eq!(known.allowed("/api/v1/webhooks/"), Some("GET, POST"));
        assert_eq!(known.allowed("/healthz"), Some("GET"));
        assert_eq!(known.allowed("/api/v1/nope"), None);
        assert_eq!(known.allowed("/api/v1/jobs/a/b"), None);
    }

    #[test]
    fn post_routes_carry_the_scopes_their_operation_requires() {
        let known = KnownPaths::from_openapi(&crate::openapi::document());
        let route = known.post("/api/v1/images/generations").unwrap();
        assert_eq!(route.scopes, [Scope::Image]);
        let route = known.post("/api/v1/agents/0193/knowledge").unwrap();
        assert_eq!(route.template, crate::routes::KNOWLEDGE_UPLOAD_TEMPLATE);
        assert_eq!(route.scopes, [Scope::Agents]);
        assert!(known.post("/api/v1/embeddings").unwrap().scopes.is_empty());
        assert!(
            known.post("/api/v1/jobs/0193").is_none(),
            "GET and DELETE only"
        );
        assert!(known.post("/api/v1/nope").is_none());
    }
}
