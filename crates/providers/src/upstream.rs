//! One configured upstream (`[upstreams.<name>]`) as the adapters use it:
//! its base URL, its HTTP client with the configured timeout, its extra
//! headers, and its keys used in turn. A key answered 429 rests for the
//! answer's `Retry-After` (1 s when it names none) while the other keys go
//! on; when another key is ready, the retry goes out at once with it.
//!
//! Keys are sent only in the adapter's authentication header, never logged
//! and never part of an error.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use unigen_core::ProviderError;
use unigen_core::config::UpstreamSettings;

use crate::http::{Attempt, connection_failure, retry_after};

/// How long a key answered 429 without `Retry-After` rests.
const DEFAULT_REST: Duration = Duration::from_secs(1);

/// Where an adapter puts the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <key>` (OpenAI, Replicate).
    Bearer,
    /// The key alone in this header (`x-api-key`, `x-goog-api-key`, `api-key`,
    /// `xi-api-key`).
    Header(&'static str),
    /// `Authorization: <scheme> <key>` (fal's `Key`).
    Scheme(&'static str),
}

/// Keys used in turn; a key answered 429 rests until its time is up.
struct KeyRing {
    keys: Vec<String>,
    next: AtomicUsize,
    resting_until: Mutex<Vec<Option<Instant>>>,
}

impl KeyRing {
    fn new(keys: Vec<String>) -> Self {
        let resting_until = Mutex::new(vec![None; keys.len()]);
        Self {
            keys,
            next: AtomicUsize::new(0),
            resting_until,
        }
    }

    /// The next key in turn that is not resting; when all rest, the one
    /// whose rest ends first.
    fn pick(&self) -> Option<usize> {
        if self.keys.is_empty() {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let resting = self.resting_until.lock().expect("key ring lock");
        let count = self.keys.len();
        (0..count)
            .map(|offset| (start + offset) % count)
            .find(|&i| resting[i].is_none_or(|until| until <= now))
            .or_else(|| (0..count).min_by_key(|&i| resting[i]))
    }

    fn rest(&self, index: usize, for_how_long: Duration) {
        let mut resting = self.resting_until.lock().expect("key ring lock");
        resting[index] = Some(Instant::now() + for_how_long);
    }

    /// Some key other than `index` may be used now.
    fn another_ready(&self, index: usize) -> bool {
        let now = Instant::now();
        let resting = self.resting_until.lock().expect("key ring lock");
        resting
            .iter()
            .enumerate()
            .any(|(i, until)| i != index && until.is_none_or(|u| u <= now))
    }
}

/// An upstream ready for requests; cheap to clone.
#[derive(Clone)]
pub struct Upstream {
    base_url: String,
    auth: Auth,
    headers: HeaderMap,
    keys: std::sync::Arc<KeyRing>,
    http: reqwest::Client,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("base_url", &self.base_url)
            .field("keys", &self.keys.keys.len())
            .finish()
    }
}

impl Upstream {
    /// `defaults` are the adapter's own headers (e.g. `anthropic-version`);
    /// the configured `headers` replace them by name. A header the
    /// configuration got wrong (not a valid name or value) is skipped with a
    /// warning naming the header only.
    pub fn new(settings: &UpstreamSettings, auth: Auth, defaults: &[(&str, &str)]) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(settings.timeout_seconds.max(1)))
            .no_proxy()
            .build()
            .expect("the HTTP client configuration is valid");
        let mut headers = HeaderMap::new();
        let configured = settings
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()));
        for (name, value) in defaults.iter().copied().chain(configured) {
            match (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                (Ok(name), Ok(mut value)) => {
                    value.set_sensitive(true);
                    headers.insert(name, value);
                }
                _ => {
                    tracing::warn!(header = %name, "skipping an upstream header that is not valid HTTP")
                }
            }
        }
        let keys = settings.keys();
        // Never quoted back to a tenant by an upstream's error text.
        for key in &keys {
            crate::http::register_secret(key);
        }
        Self {
            base_url: settings.base_url.trim_end_matches('/').to_owned(),
            auth,
            headers,
            keys: std::sync::Arc::new(KeyRing::new(keys)),
            http,
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `{base_url}/{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("{}/{}", self.base_url, path.trim_start_matches('/'))
    }

    /// The HTTP client, for requests that must not carry the key (output
    /// downloads go through [`crate::outputs`] instead).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Sends one attempt of the request `build` makes, with the headers and
    /// the next key. A 429 rests that key; if another key is ready, the
    /// attempt fails transiently with no wait so the retry uses it at once.
    /// Any other answer is returned for the adapter to read.
    pub async fn send(
        &self,
        build: impl FnOnce(&reqwest::Client) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Attempt> {
        self.send_with_headers(build, &HeaderMap::new()).await
    }

    /// [`Upstream::send`] with `overrides` replacing the adapter's and the
    /// configured headers of the same names (a client's `anthropic-version`
    /// forwarded as sent).
    pub async fn send_with_headers(
        &self,
        build: impl FnOnce(&reqwest::Client) -> reqwest::RequestBuilder,
        overrides: &HeaderMap,
    ) -> Result<reqwest::Response, Attempt> {
        let key = self.keys.pick();
        let mut request = build(&self.http)
            .headers(self.headers.clone())
            .headers(overrides.clone());
        if let Some(index) = key {
            let key = &self.keys.keys[index];
            request = match self.auth {
                Auth::Bearer => request.bearer_auth(key),
                Auth::Header(name) => request.header(name, sensitive(key)),
                Auth::Scheme(scheme) => request.header(
                    reqwest::header::AUTHORIZATION,
                    sensitive(&format!("{scheme} {key}")),
                ),
            };
        }
        let response = request.send().await.map_err(connection_failure)?;
        if response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS
            && let Some(index) = key
        {
            let rest = retry_after(&response).unwrap_or(DEFAULT_REST);
            self.keys.rest(index, rest);
            if self.keys.another_ready(index) {
                return Err(Attempt {
                    error: ProviderError::Transient("the upstream answered 429".into()),
                    retry_after: Some(Duration::ZERO),
                });
            }
        }
        Ok(response)
    }
}

fn sensitive(value: &str) -> HeaderValue {
    let mut value = HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static(""));
    value.set_sensitive(true);
    value
}

#[cfg(test)]
mod tests {
    use wiremock::matchers::{header, method};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;
    use crate::http::with_retries;

    fn settings(url: &str, keys: &[&str]) -> UpstreamSettings {
        UpstreamSettings {
            base_url: url.to_owned(),
            api_keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            headers: [("x-extra".to_owned(), "on".to_owned())].into(),
            timeout_seconds: 5,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn keys_are_used_in_turn_and_a_key_answered_429_rests_while_the_next_goes_on() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(header("x-api-key", "k1"))
            .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "30"))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(header("x-api-key", "k2"))
            .and(header("x-extra", "on"))
            .respond_with(ResponseTemplate::new(200))
            .mount(&server)
            .await;
        let upstream = Upstream::new(
            &settings(&server.uri(), &["k1", "k2"]),
            Auth::Header("x-api-key"),
            &[],
        );
        let started = Instant::now();
        for _ in 0..4 {
            let status = with_retries(|| async {
                let response = upstream
                    .send(|http| http.post(upstream.url("/v1/x")))
                    .await?;
                Ok::<_, Attempt>(response.status())
            })
            .await
            .unwrap();
            assert_eq!(status, 200);
        }
        // k1 was asked once, then rested for 30 s: the retry went to k2
        // without waiting, and every later request too.
        let keys: Vec<String> = server
            .received_requests()
            .await
            .unwrap()
            .iter()
            .map(|r| r.headers["x-api-key"].to_str().unwrap().to_owned())
            .collect();
        assert_eq!(keys, ["k1", "k2", "k2", "k2", "k2"]);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn when_every_key_rests_the_one_whose_rest_ends_first_is_picked() {
        let ring = KeyRing::new(vec!["a".into(), "b".into()]);
        ring.rest(0, Duration::from_secs(60));
        ring.rest(1, Duration::from_secs(5));
        assert_eq!(ring.pick(), Some(1));
        assert!(!ring.another_ready(0));
        assert_eq!(KeyRing::new(Vec::new()).pick(), None);
    }

    #[test]
    fn configured_headers_replace_the_adapters_own_and_invalid_ones_are_skipped() {
        let mut settings = settings("http://127.0.0.1:1", &["k"]);
        settings
            .headers
            .insert("anthropic-version".into(), "2024-01-01".into());
        settings.headers.insert("bad header".into(), "x".into());
        let upstream = Upstream::new(
            &settings,
            Auth::Header("x-api-key"),
            &[("anthropic-version", "2023-06-01")],
        );
        assert_eq!(upstream.headers["anthropic-version"], "2024-01-01");
        assert_eq!(upstream.headers.len(), 2);
        let shown = format!("{upstream:?}");
        assert!(!shown.contains("\"k\""), "{shown}");
    }
}
