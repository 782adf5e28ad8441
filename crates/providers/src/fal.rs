//! Adapter for fal.ai's Queue API (`adapter = "fal"`, `https://queue.fal.run`,
//! the key sent as `Authorization: Key <key>`): image, video and audio apps.
//! A request is submitted to an app (`POST {base}/{app_id}`), its status is
//! polled with a growing interval until it is `COMPLETED`, then its result
//! (the app's output JSON) is fetched. A cancelled job or a missed deadline
//! cancels the request upstream, so nothing keeps running (and billing)
//! unobserved.
//!
//! App ids are `owner/app` with an optional endpoint path (`fal-ai/flux/dev`);
//! status, result and cancel live under the first two segments only
//! (`{base}/{owner}/{app}/requests/{request_id}...`). The links fal answers
//! on submit are followed when they point under the configured base URL,
//! else built. App ids and request ids are checked before they go into a URL
//! path.
//!
//! Failures are classified as for the other upstreams ([`crate::http`]):
//! connection errors, timeouts, 408, 429 and 5xx are transient and retried
//! with backoff (honouring `Retry-After`); other 4xx are permanent with fal's
//! short `detail`. The key is only ever sent to the configured base URL (never
//! with an output download) and never appears in an error or a log line.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::http::{self, Attempt, connection_failure, with_retries};
use crate::queue_api::{self, QueueApi, Stop};
use crate::upstream::Auth;
use crate::vendor::{
    ImageCall, ImageUpstream, MEDIA_DEADLINE, MEDIA_MAX_OUTPUT, MediaUpstream, detached,
};
use unigen_core::ProviderError;
use unigen_core::config::UpstreamSettings;

/// The longest upstream message (in characters) an error keeps.
const DETAIL_CHARS: usize = 200;
/// The longest request id accepted (fal's are UUIDs).
const MAX_REQUEST_ID_CHARS: usize = 64;
/// The longest app id accepted.
const MAX_APP_ID_CHARS: usize = 256;

/// A fal queue upstream; cheap to clone.
#[derive(Clone, Debug)]
pub struct FalClient {
    api: QueueApi,
}

/// The parts of a submit answer this adapter reads.
#[derive(Deserialize)]
struct Submitted {
    #[serde(default)]
    request_id: Option<String>,
    #[serde(default)]
    status_url: Option<String>,
    #[serde(default)]
    response_url: Option<String>,
    #[serde(default)]
    cancel_url: Option<String>,
}

/// The parts of a status answer this adapter reads.
#[derive(Deserialize)]
struct QueueStatus {
    status: String,
    #[serde(default)]
    error: Value,
}

/// A submitted request: its id and where to ask about it.
#[derive(Clone)]
struct Queued {
    id: String,
    status_url: String,
    response_url: String,
    cancel_url: String,
}

impl FalClient {
    pub fn new(settings: &UpstreamSettings) -> Self {
        Self {
            api: QueueApi::new(settings, Auth::Scheme("Key")),
        }
    }

    /// Tests poll in milliseconds rather than seconds.
    #[cfg(test)]
    fn with_polling(mut self, first: Duration, max: Duration) -> Self {
        self.api = self.api.with_polling(first, max);
        self
    }

    /// Submits `input` to `app` (`POST {base}/{app}`), polls the request's
    /// status with backoff (0.5 s growing x1.5 to 5 s) until it is
    /// `COMPLETED`, and returns the result JSON (`GET` of its response URL).
    /// A completed request with an error, or a result fal refuses (4xx), is
    /// Permanent with fal's short detail. `cancel` firing (or `deadline`
    /// passing) sends `PUT .../requests/{id}/cancel` (best effort) and returns
    /// Permanent("cancelled") / Transient("the request did not finish within Ns").
    /// Losing the request while polling (retries used up) cancels it too and
    /// returns the error.
    pub async fn run(
        &self,
        app: &str,
        input: &Value,
        cancel: &CancellationToken,
        deadline: Duration,
    ) -> Result<Value, ProviderError> {
        let owner_app = requests_root(app)?;
        let submit_url = self.api.upstream.url(app);
        let submit = async {
            let queued = self.queued(owner_app, self.submit(&submit_url, input).await?)?;
            tracing::debug!(app, request = %queued.id, "fal request queued");
            Ok(queued)
        };
        queue_api::drive(
            cancel,
            deadline,
            "request",
            submit,
            |queued| async move { self.wait_for(&queued).await },
            |queued| async move { self.cancel_request(&queued).await },
        )
        .await
    }

    /// Downloads an output file URL (fal's CDN, e.g. `https://v3.fal.media/files/...`)
    /// with a size cap (bytes, enforced while the body streams) and the
    /// client's timeout over the whole download. Only http(s), and never a
    /// private, loopback or link-local address, directly or through a
    /// redirect, except the configured API's own origin (`outputs`). The key
    /// is never sent.
    pub async fn download(&self, url: &str, max_bytes: usize) -> Result<Vec<u8>, ProviderError> {
        self.api
            .download(url, max_bytes, false, |response| {
                self.status_failure(response)
            })
            .await
    }

    async fn submit(&self, url: &str, input: &Value) -> Result<Submitted, ProviderError> {
        with_retries(|| async {
            let response = self
                .api
                .upstream
                .send(|http| http.post(url).json(input))
                .await?;
            self.read_json::<Submitted>(response, "fal answered an unreadable submit response")
                .await
        })
        .await
    }

    /// The submitted request's id (checked) and links: those fal answered
    /// when they point under the configured base URL (the key must not go
    /// anywhere else), else `{base}/{owner}/{app}/requests/{id}[/status|/cancel]`.
    fn queued(&self, owner_app: &str, submitted: Submitted) -> Result<Queued, ProviderError> {
        let id = submitted
            .request_id
            .filter(|id| valid_request_id(id))
            .ok_or_else(|| {
                ProviderError::Permanent("fal answered a request without a usable id".into())
            })?;
        let root = self.api.upstream.url(&format!("{owner_app}/requests/{id}"));
        let link = |given: Option<String>, built: String| {
            given
                .filter(|url| self.api.is_api_url(url))
                .unwrap_or(built)
        };
        Ok(Queued {
            status_url: link(submitted.status_url, format!("{root}/status")),
            response_url: link(submitted.response_url, root.clone()),
            cancel_url: link(submitted.cancel_url, format!("{root}/cancel")),
            id,
        })
    }

    /// Polls until the request is completed, pausing `first_poll` growing to
    /// `max_poll`, then fetches its result.
    async fn wait_for(&self, queued: &Queued) -> Result<Value, Stop> {
        for pause in self.api.pauses() {
            tokio::time::sleep(pause).await;
            let status = with_retries(|| async {
                let response = self
                    .api
                    .upstream
                    .send(|http| http.get(&queued.status_url))
                    .await?;
                self.read_json::<QueueStatus>(response, "fal answered an unreadable status")
                    .await
            })
            .await
            .map_err(Stop::Lost)?;
            let failure = self.error_text(&status.error);
            match status.status.as_str() {
                "COMPLETED" => match failure {
                    Some(reason) => return Err(Stop::Ended(ProviderError::Permanent(reason))),
                    None => break,
                },
                "IN_QUEUE" | "IN_PROGRESS" => {}
                // Not a status fal documents: one naming an error has ended,
                // any other is waited on (the deadline bounds it).
                other => {
                    if let Some(reason) = failure {
                        return Err(Stop::Ended(ProviderError::Permanent(reason)));
                    }
                    tracing::debug!(request = %queued.id, status = %other, "unexpected fal request status");
                }
            }
        }
        // A completed request is not cancelled when its result cannot be had.
        with_retries(|| async {
            let response = self
                .api
                .upstream
                .send(|http| http.get(&queued.response_url))
                .await?;
            self.read_json::<Value>(response, "fal answered an unreadable result")
                .await
        })
        .await
        .map_err(Stop::Ended)
    }

    /// `PUT` the request's cancel link, once, without failing the caller.
    async fn cancel_request(&self, queued: &Queued) {
        let id = queued.id.as_str();
        let timeout = self.api.cancel_timeout();
        match self
            .api
            .upstream
            .send(|http| http.put(&queued.cancel_url).timeout(timeout))
            .await
        {
            Ok(response) if response.status().is_success() => {
                tracing::debug!(request = %id, "fal request cancellation requested");
            }
            Ok(response) if response.status() == reqwest::StatusCode::BAD_REQUEST => {
                // `ALREADY_COMPLETED`: nothing left running.
                tracing::debug!(request = %id, "fal request already completed when cancelled");
            }
            Ok(response) => {
                tracing::warn!(request = %id, status = %response.status(), "could not cancel a fal request");
            }
            Err(failed) => {
                tracing::warn!(request = %id, error = %failed.error, "could not cancel a fal request");
            }
        }
    }

    async fn read_json<T: serde::de::DeserializeOwned>(
        &self,
        response: reqwest::Response,
        unreadable: &'static str,
    ) -> Result<T, Attempt> {
        if !response.status().is_success() {
            return Err(self.status_failure(response).await);
        }
        // A body cut off in transit is a connection failure; one that does
        // not parse is fal's doing.
        let body = response.bytes().await.map_err(connection_failure)?;
        serde_json::from_slice::<T>(&body).map_err(|_| Attempt::permanent(unreadable))
    }

    /// A non-success answer, with fal's `detail` as the explanation, the key
    /// redacted.
    async fn status_failure(&self, response: reqwest::Response) -> Attempt {
        http::status_failure(response, |body| {
            ["detail", "error", "message"]
                .iter()
                .find_map(|field| self.error_text(&body[*field]))
        })
        .await
    }

    /// fal's explanation in `value` (a string, `{"msg"|"message"|"detail": ...}`
    /// or a list of those, as validation errors are), short and without the key.
    fn error_text(&self, value: &Value) -> Option<String> {
        let text = match value {
            Value::Array(items) => {
                let parts: Vec<String> = items.iter().filter_map(message).collect();
                (!parts.is_empty()).then(|| parts.join("; "))
            }
            _ => message(value),
        }?;
        Some(self.api.clip(&text, DETAIL_CHARS))
    }
}

/// One error's text: a string, or an object's `msg` / `message` / `detail`,
/// after the field it names (`loc` without the leading `body`) when given.
fn message(value: &Value) -> Option<String> {
    let text = match value {
        Value::String(text) => text.as_str(),
        Value::Object(_) => ["msg", "message", "detail"]
            .iter()
            .find_map(|field| value[*field].as_str())?,
        _ => return None,
    }
    .trim();
    if text.is_empty() {
        return None;
    }
    let location: Vec<String> = value["loc"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|part| match part {
            Value::String(name) => Some(name.clone()),
            Value::Number(index) => Some(index.to_string()),
            _ => None,
        })
        .skip_while(|part| part == "body")
        .collect();
    Some(if location.is_empty() {
        text.to_owned()
    } else {
        format!("{}: {text}", location.join("."))
    })
}

/// `owner/app` of an app id `owner/app[/path...]` whose segments are all
/// `[A-Za-z0-9._-]+` (not `.` or `..`): where its requests live.
fn requests_root(app: &str) -> Result<&str, ProviderError> {
    let segment = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    let valid =
        app.len() <= MAX_APP_ID_CHARS && app.split('/').count() >= 2 && app.split('/').all(segment);
    if !valid {
        return Err(ProviderError::Permanent(format!(
            "invalid fal app id {:?}",
            app.chars().take(DETAIL_CHARS).collect::<String>()
        )));
    }
    let end = app
        .match_indices('/')
        .nth(1)
        .map_or(app.len(), |(at, _)| at);
    Ok(&app[..end])
}

/// Request ids are UUIDs; anything but `[0-9A-Za-z-]{1,64}` must not be put
/// into a URL path.
fn valid_request_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_REQUEST_ID_CHARS
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

impl MediaUpstream for FalClient {
    /// fal's apps name their file inputs `*_url`: a data URI given as
    /// `image`, `mask`, `video` or `audio` is also given under that name.
    fn run_to_file<'a>(
        &'a self,
        model: &'a str,
        mut input: Value,
    ) -> BoxFuture<'a, Result<Vec<u8>, ProviderError>> {
        if let Some(fields) = input.as_object_mut() {
            for name in ["image", "mask", "video", "audio", "input_audio"] {
                let url_name = format!("{}_url", name.trim_start_matches("input_"));
                if let Some(uri) = fields.get(name).filter(|v| v.is_string()).cloned() {
                    fields.entry(url_name).or_insert(uri);
                }
            }
        }
        Box::pin(async move {
            let (client, app) = (self.clone(), model.to_owned());
            let result = detached(move |cancel| async move {
                client.run(&app, &input, &cancel, MEDIA_DEADLINE).await
            })
            .await?;
            let url = first_output_url(&result).ok_or_else(|| {
                ProviderError::Permanent("the fal request produced no file".into())
            })?;
            self.download(&url, MEDIA_MAX_OUTPUT).await
        })
    }
}

impl ImageUpstream for FalClient {
    /// One request per image, each with its own seed; fal's image apps take
    /// a size object and a count.
    fn generate<'a>(
        &'a self,
        call: &'a ImageCall<'a>,
    ) -> BoxFuture<'a, Result<Vec<Vec<u8>>, ProviderError>> {
        Box::pin(async move {
            let mut images = Vec::with_capacity(call.n as usize);
            for index in 0..call.n {
                let mut input = json!({
                    "prompt": call.prompt,
                    "image_size": {"width": call.width, "height": call.height},
                    "num_images": 1,
                    "seed": call.seed.wrapping_add(u64::from(index)),
                });
                if let Some(negative) = call.negative_prompt {
                    input["negative_prompt"] = json!(negative);
                }
                images.push(self.run_to_file(call.model, input).await?);
            }
            Ok(images)
        })
    }
}

/// The first output file URL of a result: `images[0].url`, `image.url`,
/// `video.url`, `audio_file.url`, `audio.url`, `audio_url.url`, else the first
/// `url` string found depth-first. Only http(s) URLs count.
pub fn first_output_url(result: &Value) -> Option<String> {
    let usable = |url: Option<&Value>| {
        let url = url?.as_str()?.trim();
        let scheme = url.split_once(':')?.0;
        (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
            .then(|| url.to_owned())
    };
    result
        .get("images")
        .and_then(Value::as_array)
        .and_then(|images| images.iter().find_map(|image| usable(image.get("url"))))
        .or_else(|| {
            ["image", "video", "audio_file", "audio", "audio_url"]
                .iter()
                .find_map(|field| usable(result.get(*field).and_then(|file| file.get("url"))))
        })
        .or_else(|| first_url_anywhere(result, &usable))
}

/// Depth-first: an object's own `url` before what it holds.
fn first_url_anywhere(
    value: &Value,
    usable: &impl Fn(Option<&Value>) -> Option<String>,
) -> Option<String> {
    match value {
        Value::Object(fields) => usable(fields.get("url")).or_else(|| {
            fields
                .values()
                .find_map(|inner| first_url_anywhere(inner, usable))
        }),
        Value::Array(items) => items
            .iter()
            .find_map(|inner| first_url_anywhere(inner, usable)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::json;
    use wiremock::matchers::{body_json, header, method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;

    const KEY: &str = "fal_test_key_4f2c9a";
    const APP: &str = "fal-ai/flux/dev";
    const NO_DEADLINE: Duration = Duration::from_secs(30);

    fn client(server: &MockServer) -> FalClient {
        FalClient::new(&UpstreamSettings {
            base_url: format!("{}/", server.uri()),
            api_key: KEY.into(),
            timeout_seconds: 5,
            ..Default::default()
        })
        .with_polling(Duration::from_millis(10), Duration::from_millis(40))
    }

    /// fal's submit answer, its links under `server`.
    fn submitted(server: &MockServer, id: &str) -> Value {
        let root = format!("{}/fal-ai/flux/requests/{id}", server.uri());
        json!({
            "status": "IN_QUEUE",
            "request_id": id,
            "response_url": root,
            "status_url": format!("{root}/status"),
            "cancel_url": format!("{root}/cancel"),
            "logs": null,
            "metrics": {},
            "queue_position": 0
        })
    }

    fn status(server: &MockServer, id: &str, status: &str) -> Value {
        json!({
            "status": status,
            "request_id": id,
            "response_url": format!("{}/fal-ai/flux/requests/{id}", server.uri()),
            "queue_position": 0,
            "logs": null
        })
    }

    fn requests_path(id: &str) -> String {
        format!("/fal-ai/flux/requests/{id}")
    }

    async fn mount_submit(server: &MockServer, answer: Value) {
        Mock::given(method("POST"))
            .and(path("/fal-ai/flux/dev"))
            .respond_with(ResponseTemplate::new(200).set_body_json(answer))
            .mount(server)
            .await;
    }

    async fn mount_status(server: &MockServer, id: &str, answer: Value, times: Option<u64>) {
        let mock = Mock::given(method("GET"))
            .and(path(format!("{}/status", requests_path(id))))
            .respond_with(ResponseTemplate::new(200).set_body_json(answer));
        match times {
            Some(n) => mock.up_to_n_times(n).mount(server).await,
            None => mock.mount(server).await,
        }
    }

    async fn mount_cancel(server: &MockServer, id: &str) {
        Mock::given(method("PUT"))
            .and(path(format!("{}/cancel", requests_path(id))))
            .and(header("Authorization", format!("Key {KEY}").as_str()))
            .respond_with(
                ResponseTemplate::new(202)
                    .set_body_json(json!({"status": "CANCELLATION_REQUESTED"})),
            )
            .expect(1)
            .mount(server)
            .await;
    }

    async fn requests_to(server: &MockServer, verb: &str, to: &str) -> usize {
        server
            .received_requests()
            .await
            .unwrap()
            .iter()
            .filter(|r| r.method.as_str() == verb && r.url.path() == to)
            .count()
    }

    async fn run(client: &FalClient, app: &str) -> Result<Value, ProviderError> {
        client
            .run(
                app,
                &json!({"prompt": "a cat"}),
                &CancellationToken::new(),
                NO_DEADLINE,
            )
            .await
    }

    #[tokio::test]
    async fn a_request_is_submitted_polled_and_its_result_returned() {
        let server = MockServer::start().await;
        let id = "764cabcf-b745-4b3e-ae38-1200304cf45b";
        Mock::given(method("POST"))
            .and(path("/fal-ai/flux/dev"))
            .and(header("Authorization", format!("Key {KEY}").as_str()))
            .and(body_json(json!({"prompt": "a cat"})))
            .respond_with(ResponseTemplate::new(200).set_body_json(submitted(&server, id)))
            .expect(1)
            .mount(&server)
            .await;
        mount_status(&server, id, status(&server, id, "IN_QUEUE"), Some(1)).await;
        mount_status(&server, id, status(&server, id, "IN_PROGRESS"), Some(1)).await;
        mount_status(&server, id, status(&server, id, "COMPLETED"), None).await;
        let result = json!({
            "images": [{
                "url": "https://v3.fal.media/files/rabbit/out.jpeg",
                "width": 1024, "height": 768, "content_type": "image/jpeg"
            }],
            "seed": 42,
            "has_nsfw_concepts": [false]
        });
        Mock::given(method("GET"))
            .and(path(requests_path(id)))
            .respond_with(ResponseTemplate::new(200).set_body_json(result.clone()))
            .expect(1)
            .mount(&server)
            .await;

        assert_eq!(run(&client(&server), APP).await.unwrap(), result);
        let status_path = format!("{}/status", requests_path(id));
        assert_eq!(requests_to(&server, "GET", &status_path).await, 3);
        // Every request, polls included, carries the key; nothing was cancelled.
        let requests = server.received_requests().await.unwrap();
        assert!(
            requests
                .iter()
                .all(|r| r.headers["authorization"] == format!("Key {KEY}").as_str())
        );
        assert!(requests.iter().all(|r| r.method.as_str() != "PUT"));
        server.verify().await;
    }

    #[tokio::test]
    async fn request_links_are_built_from_owner_and_app_when_fal_names_none_or_foreign_ones() {
        for answered_links in [false, true] {
            let server = MockServer::start().await;
            let id = "0b9d8f0e-aaaa-4bbb-8ccc-123456789abc";
            let answer = if answered_links {
                // Links elsewhere must not get the key.
                json!({
                    "request_id": id,
                    "status_url": format!("http://127.0.0.1:9/fal-ai/flux/requests/{id}/status"),
                    "response_url": format!("https://evil.example/fal-ai/flux/requests/{id}"),
                    "cancel_url": format!("{}.evil.example/x", server.uri()),
                })
            } else {
                json!({"request_id": id})
            };
            mount_submit(&server, answer).await;
            mount_status(&server, id, status(&server, id, "COMPLETED"), None).await;
            Mock::given(method("GET"))
                .and(path(requests_path(id)))
                .respond_with(
                    ResponseTemplate::new(200)
                        .set_body_json(json!({"video": {"url": "https://v3.fal.media/v.mp4"}})),
                )
                .expect(1)
                .mount(&server)
                .await;
            let result = run(&client(&server), APP).await.unwrap();
            assert_eq!(result["video"]["url"], "https://v3.fal.media/v.mp4");
            server.verify().await;
        }
    }

    #[tokio::test]
    async fn a_fired_cancel_token_sends_the_cancel_and_is_permanent() {
        let server = MockServer::start().await;
        let id = "11111111-2222-3333-4444-555555555555";
        mount_submit(&server, submitted(&server, id)).await;
        mount_status(&server, id, status(&server, id, "IN_PROGRESS"), None).await;
        mount_cancel(&server, id).await;
        let cancel = CancellationToken::new();
        let firing = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            firing.cancel();
        });

        let started = Instant::now();
        let err = client(&server)
            .run(APP, &json!({}), &cancel, NO_DEADLINE)
            .await
            .unwrap_err();
        assert_eq!(err, ProviderError::Permanent("cancelled".into()));
        assert!(started.elapsed() < Duration::from_secs(3));
        let status_path = format!("{}/status", requests_path(id));
        assert!(requests_to(&server, "GET", &status_path).await >= 1);
        assert_eq!(requests_to(&server, "GET", &requests_path(id)).await, 0);
        server.verify().await;
    }

    #[tokio::test]
    async fn an_already_fired_token_submits_nothing() {
        let server = MockServer::start().await;
        let cancel = CancellationToken::new();
        cancel.cancel();
        let err = client(&server)
            .run(APP, &json!({}), &cancel, NO_DEADLINE)
            .await
            .unwrap_err();
        assert_eq!(err, ProviderError::Permanent("cancelled".into()));
        assert!(server.received_requests().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_missed_deadline_is_transient_and_cancels_the_request() {
        let server = MockServer::start().await;
        let id = "deadline-0001";
        mount_submit(&server, submitted(&server, id)).await;
        mount_status(&server, id, status(&server, id, "IN_QUEUE"), None).await;
        mount_cancel(&server, id).await;
        let err = client(&server)
            .run(
                APP,
                &json!({}),
                &CancellationToken::new(),
                Duration::from_millis(300),
            )
            .await
            .unwrap_err();
        assert_eq!(
            err,
            ProviderError::Transient("the request did not finish within 1s".into())
        );
        server.verify().await;
    }

    #[tokio::test]
    async fn a_completed_request_with_an_error_is_permanent_and_its_result_not_fetched() {
        let server = MockServer::start().await;
        let id = "c0ffee00-0000-4000-8000-000000000001";
        mount_submit(&server, submitted(&server, id)).await;
        let mut failed = status(&server, id, "COMPLETED");
        failed["error"] = json!(format!(
            "  Internal error (key {KEY}) {}\n",
            "x".repeat(400)
        ));
        failed["error_type"] = json!("runner_server_error");
        mount_status(&server, id, failed, None).await;

        let ProviderError::Permanent(message) = run(&client(&server), APP).await.unwrap_err()
        else {
            panic!("a completed request with an error is permanent");
        };
        assert!(message.starts_with("Internal error (key "), "{message}");
        assert!(!message.contains(KEY), "{message}");
        assert_eq!(message.chars().count(), 200);
        assert_eq!(requests_to(&server, "GET", &requests_path(id)).await, 0);
        let requests = server.received_requests().await.unwrap();
        assert!(requests.iter().all(|r| r.method.as_str() != "PUT"));
    }

    #[tokio::test]
    async fn a_refused_result_is_permanent_with_fals_detail_and_without_the_key() {
        let server = MockServer::start().await;
        let id = "c0ffee00-0000-4000-8000-000000000002";
        mount_submit(&server, submitted(&server, id)).await;
        mount_status(&server, id, status(&server, id, "COMPLETED"), None).await;
        Mock::given(method("GET"))
            .and(path(requests_path(id)))
            .respond_with(ResponseTemplate::new(422).set_body_json(json!({
                "detail": [
                    {"loc": ["body", "image_size"], "msg": format!("unexpected value {KEY}"),
                     "type": "value_error"},
                    {"loc": ["body", "num_images"], "msg": "ensure this value is less than 5",
                     "type": "value_error"}
                ]
            })))
            .expect(1)
            .mount(&server)
            .await;

        let err = run(&client(&server), APP).await.unwrap_err();
        assert_eq!(
            err,
            ProviderError::Permanent(
                "image_size: unexpected value <redacted>; \
                 num_images: ensure this value is less than 5"
                    .into()
            )
        );
        // The request had completed: nothing to cancel.
        let requests = server.received_requests().await.unwrap();
        assert!(requests.iter().all(|r| r.method.as_str() != "PUT"));
        server.verify().await;
    }

    #[tokio::test]
    async fn a_refused_submit_is_permanent_and_an_account_refusal_neutral() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(403).set_body_json(json!({
                "detail": "User is locked. Reason: Exhausted balance."
            })))
            .expect(1)
            .mount(&server)
            .await;
        let err = run(&client(&server), APP).await.unwrap_err();
        // The operator's fal account, not the tenant's request: neutral.
        assert_eq!(
            err,
            ProviderError::Permanent(crate::http::ACCOUNT_UNAVAILABLE.into())
        );
        server.verify().await;
    }

    #[tokio::test]
    async fn a_503_on_submit_is_retried() {
        let server = MockServer::start().await;
        let id = "retry-0001";
        Mock::given(method("POST"))
            .and(path("/fal-ai/flux/dev"))
            .respond_with(ResponseTemplate::new(503))
            .up_to_n_times(1)
            .mount(&server)
            .await;
        mount_submit(&server, submitted(&server, id)).await;
        mount_status(&server, id, status(&server, id, "COMPLETED"), None).await;
        Mock::given(method("GET"))
            .and(path(requests_path(id)))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({"ok": true})))
            .mount(&server)
            .await;

        assert_eq!(
            run(&client(&server), APP).await.unwrap(),
            json!({"ok": true})
        );
        assert_eq!(requests_to(&server, "POST", "/fal-ai/flux/dev").await, 2);
    }

    #[tokio::test]
    async fn a_503_on_a_status_poll_or_the_result_is_retried() {
        let server = MockServer::start().await;
        let id = "retry-0002";
        mount_submit(&server, submitted(&server, id)).await;
        let status_path = format!("{}/status", requests_path(id));
        for to in [status_path.clone(), requests_path(id)] {
            Mock::given(method("GET"))
                .and(path(to))
                .respond_with(ResponseTemplate::new(503))
                .up_to_n_times(1)
                .mount(&server)
                .await;
        }
        mount_status(&server, id, status(&server, id, "COMPLETED"), None).await;
        Mock::given(method("GET"))
            .and(path(requests_path(id)))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({"ok": 1})))
            .mount(&server)
            .await;

        assert_eq!(run(&client(&server), APP).await.unwrap(), json!({"ok": 1}));
        assert_eq!(requests_to(&server, "GET", &status_path).await, 2);
        assert_eq!(requests_to(&server, "GET", &requests_path(id)).await, 2);
    }

    #[tokio::test]
    async fn persistent_5xx_on_submit_is_transient_after_three_retries() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(502))
            .expect(4)
            .mount(&server)
            .await;
        let err = run(&client(&server), APP).await.unwrap_err();
        assert!(matches!(err, ProviderError::Transient(_)), "{err:?}");
        server.verify().await;
    }

    #[tokio::test]
    async fn losing_the_request_while_polling_cancels_it() {
        let server = MockServer::start().await;
        let id = "lost-0001";
        mount_submit(&server, submitted(&server, id)).await;
        Mock::given(method("GET"))
            .and(path(format!("{}/status", requests_path(id))))
            .respond_with(
                ResponseTemplate::new(404).set_body_json(json!({"detail": "Request not found"})),
            )
            .mount(&server)
            .await;
        mount_cancel(&server, id).await;
        let err = run(&client(&server), APP).await.unwrap_err();
        assert_eq!(err, ProviderError::Permanent("Request not found".into()));
        server.verify().await;
    }

    #[tokio::test]
    async fn an_unusable_request_id_is_refused_without_any_further_request() {
        for id in [
            json!("../../admin"),
            json!("a/b"),
            json!("abc?x=1"),
            json!("a b"),
            json!("id_with_underscore"),
            json!(""),
            json!("a".repeat(65)),
            json!(null),
        ] {
            let server = MockServer::start().await;
            let mut answer = submitted(&server, "placeholder");
            answer["request_id"] = id.clone();
            mount_submit(&server, answer).await;
            let err = run(&client(&server), APP).await.unwrap_err();
            assert_eq!(
                err,
                ProviderError::Permanent("fal answered a request without a usable id".into()),
                "{id}"
            );
            let requests = server.received_requests().await.unwrap();
            assert_eq!(requests.len(), 1, "{id}");
            assert_eq!(requests[0].method.as_str(), "POST", "{id}");
        }
    }

    #[tokio::test]
    async fn malformed_app_ids_are_permanent_and_send_nothing() {
        let server = MockServer::start().await;
        let client = client(&server);
        for app in [
            "flux",
            "fal-ai/",
            "/flux",
            "fal-ai//dev",
            "fal-ai/../admin",
            "fal-ai/./flux",
            "fal-ai/flux?x=1",
            "fal-ai/fl ux",
            "fal-ai/flux#dev",
            "https://evil.example/x",
            "",
        ] {
            let err = run(&client, app).await.unwrap_err();
            assert!(matches!(err, ProviderError::Permanent(_)), "{app}: {err:?}");
        }
        assert!(server.received_requests().await.unwrap().is_empty());
    }

    #[test]
    fn requests_live_under_owner_and_app() {
        assert_eq!(requests_root("fal-ai/flux/dev").unwrap(), "fal-ai/flux");
        assert_eq!(
            requests_root("fal-ai/kling-video/v2.1/master/text-to-video").unwrap(),
            "fal-ai/kling-video"
        );
        assert_eq!(requests_root("fal-ai/flux-pro").unwrap(), "fal-ai/flux-pro");
    }

    #[tokio::test]
    async fn downloads_are_capped_and_never_carry_the_key() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/files/out.mp4"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(vec![7u8; 1000]))
            .mount(&server)
            .await;
        let client = client(&server);
        let url = format!("{}/files/out.mp4", server.uri());

        assert_eq!(client.download(&url, 1000).await.unwrap(), vec![7u8; 1000]);
        let err = client.download(&url, 999).await.unwrap_err();
        assert_eq!(
            err,
            ProviderError::Permanent("the output file is larger than 999 bytes".into())
        );
        // Not even to the API's own origin.
        let requests = server.received_requests().await.unwrap();
        assert!(!requests.is_empty());
        assert!(
            requests
                .iter()
                .all(|r| r.headers.get("authorization").is_none())
        );
    }

    #[tokio::test]
    async fn downloads_from_private_addresses_are_refused_unfetched() {
        let server = MockServer::start().await;
        let internal = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(b"secret".to_vec()))
            .mount(&internal)
            .await;
        Mock::given(method("GET"))
            .and(path("/files/moved.png"))
            .respond_with(
                ResponseTemplate::new(302)
                    .insert_header("Location", format!("{}/secret", internal.uri()).as_str()),
            )
            .mount(&server)
            .await;
        let client = client(&server);
        for url in [
            format!("{}/secret", internal.uri()),
            "http://169.254.169.254/latest/meta-data/iam/".to_owned(),
            "http://10.0.0.7/files/a.png".to_owned(),
            format!("{}/files/moved.png", server.uri()),
        ] {
            let err = client.download(&url, 1000).await.unwrap_err();
            let ProviderError::Permanent(message) = &err else {
                panic!("{url}: a refusal is permanent: {err:?}");
            };
            assert!(
                message.contains("private, loopback or link-local address"),
                "{url}: {message}"
            );
        }
        assert!(internal.received_requests().await.unwrap().is_empty());
        for url in [
            "not a url",
            "file:///etc/passwd",
            "data:image/png;base64,AAAA",
        ] {
            let err = client.download(url, 10).await.unwrap_err();
            assert!(matches!(err, ProviderError::Permanent(_)), "{url}: {err:?}");
        }
    }

    #[test]
    fn first_output_url_reads_fals_output_shapes() {
        let cases = [
            (
                json!({"images": [
                    {"url": "https://v3.fal.media/files/a.png", "width": 1024, "height": 1024},
                    {"url": "https://v3.fal.media/files/b.png"}
                ]}),
                Some("https://v3.fal.media/files/a.png"),
            ),
            (
                json!({"image": {"url": "https://v3.fal.media/files/c.png"}}),
                Some("https://v3.fal.media/files/c.png"),
            ),
            (
                json!({"video": {"url": "https://v3.fal.media/files/d.mp4"}, "seed": 1}),
                Some("https://v3.fal.media/files/d.mp4"),
            ),
            (
                json!({"audio_file": {"url": "https://v3.fal.media/files/e.wav"}}),
                Some("https://v3.fal.media/files/e.wav"),
            ),
            (
                json!({"audio": {"url": "https://v3.fal.media/files/f.mp3"}}),
                Some("https://v3.fal.media/files/f.mp3"),
            ),
            (
                json!({"audio_url": {"url": "https://v3.fal.media/files/g.wav"}}),
                Some("https://v3.fal.media/files/g.wav"),
            ),
            // The named fields come first, wherever they sit.
            (
                json!({"a_thumbnail": {"url": "https://v3.fal.media/t.png"},
                       "video": {"url": "https://v3.fal.media/v.mp4"}}),
                Some("https://v3.fal.media/v.mp4"),
            ),
            // Else the first `url` found depth-first.
            (
                json!({"output": {"clips": [{"file": {"url": "https://v3.fal.media/h.mp4"}}]}}),
                Some("https://v3.fal.media/h.mp4"),
            ),
            (
                json!([{"url": "http://v3.fal.media/i.png"}]),
                Some("http://v3.fal.media/i.png"),
            ),
            // Only http(s).
            (
                json!({"images": [{"url": "data:image/png;base64,AAAA"}]}),
                None,
            ),
            (json!({"video": {"url": "file:///etc/passwd"}}), None),
            (json!({"video": {"url": ""}}), None),
            (json!({"video": "https://v3.fal.media/j.mp4"}), None),
            (json!({"images": []}), None),
            (json!(null), None),
            (json!("https://v3.fal.media/k.png"), None),
        ];
        for (result, expected) in cases {
            assert_eq!(first_output_url(&result).as_deref(), expected, "{result}");
        }
    }

    #[test]
    fn debug_never_prints_the_key() {
        let client = FalClient::new(&UpstreamSettings {
            base_url: "https://queue.fal.run".into(),
            api_key: KEY.into(),
            timeout_seconds: 60,
            ..Default::default()
        });
        let printed = format!("{client:?}");
        assert!(!printed.contains(KEY), "{printed}");
        assert!(printed.contains("keys: 1"), "{printed}");
    }
}
