//! Which methods each known path takes, read from the OpenAPI document (so
//! the table cannot drift from the routes): a request that matched no route
//! is a 405 with `Allow` when its path is known, else a 404.

use utoipa::openapi::OpenApi;

/// Paths outside the OpenAPI document, all `GET`.
const ROOT_PATHS: [&str; 5] = ["/files/{key}", "/healthz", "/readyz", "/metrics", "/docs"];
/// Templates whose last parameter spans slashes (model ids, storage keys).
const SLASHED_TAILS: [&str; 2] = ["/api/v1/models/{id}", "/files/{key}"];

struct KnownPath {
    segments: Vec<String>,
    slashed_tail: bool,
    allow: String,
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
                KnownPath::new(template, allow)
            })
            .collect();
        paths.extend(ROOT_PATHS.iter().map(|t| KnownPath::new(t, "GET".into())));
        Self { paths }
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
}
