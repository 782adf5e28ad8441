//! Adapter for Replicate's predictions API (`adapter = "replicate"`): video,
//! music and image-edit models. A prediction is created (asking Replicate to
//! hold the request a few seconds with `Prefer: wait`, so quick models answer
//! at once), then polled with a growing interval until it succeeds, fails or
//! is canceled. A cancelled job or a missed deadline cancels the prediction
//! upstream, so nothing keeps running (and billing) unobserved.
//!
//! Failures are classified as for the other upstreams: connection errors,
//! timeouts, 408, 429 and 5xx are transient and retried with backoff
//! (honouring `Retry-After`); other 4xx are permanent with Replicate's short
//! `detail`. The key is only ever sent to the configured base URL and never
//! appears in an error or a log line.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::http::{self, Attempt, connection_failure, with_retries};
use crate::queue_api::{self, QueueApi, Stop};
use crate::upstream::Auth;
use crate::vendor::{
    ImageCall, ImageUpstream, MEDIA_DEADLINE, MEDIA_MAX_OUTPUT, MediaUpstream, detached,
};
use futures_util::future::BoxFuture;
use unigen_core::ProviderError;
use unigen_core::config::UpstreamSettings;

/// Seconds Replicate may hold the create request open for a quick model.
const PREFER_WAIT: &str = "wait=5";
/// Lengths (in characters) of upstream texts passed on.
const DETAIL_CHARS: usize = 200;
const PREDICTION_ERROR_CHARS: usize = 300;

#[derive(Clone, Debug)]
pub struct ReplicateClient {
    api: QueueApi,
}

/// The parts of a prediction this adapter reads.
#[derive(Clone, Deserialize)]
struct Prediction {
    id: String,
    status: String,
    #[serde(default)]
    output: Value,
    #[serde(default)]
    error: Value,
    #[serde(default)]
    urls: Option<PredictionUrls>,
}

#[derive(Clone, Deserialize)]
struct PredictionUrls {
    #[serde(default)]
    get: Option<String>,
}

impl ReplicateClient {
    pub fn new(settings: &UpstreamSettings) -> Self {
        Self {
            api: QueueApi::new(settings, Auth::Bearer),
        }
    }

    /// Tests poll in milliseconds rather than seconds.
    #[cfg(test)]
    fn with_poll_interval(mut self, first: Duration, max: Duration) -> Self {
        self.api = self.api.with_polling(first, max);
        self
    }

    /// Creates a prediction for `model` ("owner/name" -> POST {base}/models/{owner}/{name}/predictions,
    /// or "owner/name:version" -> POST {base}/predictions with {"version": version}) with `input`,
    /// polls GET {base}/predictions/{id} (the `urls.get` link when given) with backoff (0.5 s growing to 5 s)
    /// until status is succeeded / failed / canceled, and returns the `output` JSON of a succeeded one.
    /// failed -> Permanent(<prediction `error`, trimmed to 300 chars>); canceled -> Permanent("the prediction was canceled").
    /// `cancel` firing (or the overall `deadline` passing) sends POST {base}/predictions/{id}/cancel (best effort) and
    /// returns Permanent("cancelled") / Transient("the prediction did not finish within Ns").
    /// Sends header `Prefer: wait=5` on create (Replicate may then answer with a finished prediction directly).
    pub async fn run(
        &self,
        model: &str,
        input: &Value,
        cancel: &CancellationToken,
        deadline: Duration,
    ) -> Result<Value, ProviderError> {
        let (url, body) = self.create_request(model, input)?;
        let create = async {
            let created = self.create(&url, &body).await?;
            tracing::debug!(model, prediction = %created.id, status = %created.status, "replicate prediction created");
            Ok(created)
        };
        queue_api::drive(
            cancel,
            deadline,
            "prediction",
            create,
            |created| self.wait_for(created),
            |created| async move { self.cancel_prediction(&created.id).await },
        )
        .await
    }

    /// Downloads an output file URL (Replicate's delivery URLs) with a size
    /// cap (bytes, enforced while the body streams) and the client's timeout
    /// over the whole download. Only http(s), and never a private, loopback
    /// or link-local address, directly or through a redirect, except the
    /// configured API's own origin (`outputs`). The key is sent only to the
    /// API itself.
    pub async fn download(&self, url: &str, max_bytes: usize) -> Result<Vec<u8>, ProviderError> {
        self.api
            .download(url, max_bytes, true, |response| {
                self.status_failure(response)
            })
            .await
    }

    /// The create URL and body for `owner/name` or `owner/name:version`.
    fn create_request(&self, model: &str, input: &Value) -> Result<(String, Value), ProviderError> {
        let invalid =
            || ProviderError::Permanent(format!("invalid Replicate model reference {model:?}"));
        let (path, version) = match model.split_once(':') {
            Some((path, version)) => (path, Some(version)),
            None => (model, None),
        };
        let (owner, name) = path.split_once('/').ok_or_else(invalid)?;
        let segment = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                && s != "."
                && s != ".."
        };
        if !segment(owner) || !segment(name) {
            return Err(invalid());
        }
        match version {
            None => Ok((
                format!("{}/models/{owner}/{name}/predictions", self.api.base_url),
                serde_json::json!({ "input": input }),
            )),
            Some(version)
                if !version.is_empty() && version.chars().all(|c| c.is_ascii_alphanumeric()) =>
            {
                Ok((
                    format!("{}/predictions", self.api.base_url),
                    serde_json::json!({ "version": version, "input": input }),
                ))
            }
            Some(_) => Err(invalid()),
        }
    }

    async fn create(&self, url: &str, body: &Value) -> Result<Prediction, ProviderError> {
        let prediction = with_retries(|| async {
            let response = self
                .api
                .upstream
                .send(|http| http.post(url).header("Prefer", PREFER_WAIT).json(body))
                .await?;
            self.read_prediction(response).await
        })
        .await?;
        if !valid_id(&prediction.id) {
            return Err(ProviderError::Permanent(
                "Replicate answered a prediction without a usable id".into(),
            ));
        }
        Ok(prediction)
    }

    /// Polls until the prediction ends, pausing `first_poll` growing to `max_poll`.
    async fn wait_for(&self, mut prediction: Prediction) -> Result<Value, Stop> {
        let get_url = self.poll_url(&prediction);
        let mut pauses = self.api.pauses();
        loop {
            if let Some(ended) = self.outcome(&mut prediction) {
                return ended.map_err(Stop::Ended);
            }
            tokio::time::sleep(pauses.next().unwrap_or_default()).await;
            prediction = with_retries(|| async {
                let response = self.api.upstream.send(|http| http.get(&get_url)).await?;
                self.read_prediction(response).await
            })
            .await
            .map_err(Stop::Lost)?;
        }
    }

    /// The result of an ended prediction, None while it is still starting or processing.
    fn outcome(&self, prediction: &mut Prediction) -> Option<Result<Value, ProviderError>> {
        match prediction.status.as_str() {
            "succeeded" => Some(Ok(prediction.output.take())),
            "failed" => {
                let reason = match &prediction.error {
                    Value::String(text) => text.trim().to_owned(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                Some(Err(ProviderError::Permanent(if reason.is_empty() {
                    "the prediction failed".to_owned()
                } else {
                    self.api.clip(&reason, PREDICTION_ERROR_CHARS)
                })))
            }
            "canceled" => Some(Err(ProviderError::Permanent(
                "the prediction was canceled".into(),
            ))),
            // Replicate gave up on it before it ran (e.g. no capacity in time).
            "aborted" => Some(Err(ProviderError::Transient(
                "the prediction was aborted before it ran".into(),
            ))),
            _ => None,
        }
    }

    /// `urls.get` when it points at the configured API (the key must not go
    /// anywhere else), else `{base}/predictions/{id}`.
    fn poll_url(&self, prediction: &Prediction) -> String {
        prediction
            .urls
            .as_ref()
            .and_then(|urls| urls.get.as_deref())
            .filter(|url| self.api.is_api_url(url))
            .map_or_else(
                || format!("{}/predictions/{}", self.api.base_url, prediction.id),
                str::to_owned,
            )
    }

    /// `POST {base}/predictions/{id}/cancel`, once, without failing the caller.
    async fn cancel_prediction(&self, id: &str) {
        let url = format!("{}/predictions/{id}/cancel", self.api.base_url);
        let timeout = self.api.cancel_timeout();
        match self
            .api
            .upstream
            .send(|http| http.post(url).timeout(timeout))
            .await
        {
            Ok(response) if response.status().is_success() => {
                tracing::debug!(prediction = %id, "replicate prediction canceled");
            }
            Ok(response) => {
                tracing::warn!(prediction = %id, status = %response.status(), "could not cancel a replicate prediction");
            }
            Err(failed) => {
                tracing::warn!(prediction = %id, error = %failed.error, "could not cancel a replicate prediction");
            }
        }
    }

    async fn read_prediction(&self, response: reqwest::Response) -> Result<Prediction, Attempt> {
        if !response.status().is_success() {
            return Err(self.status_failure(response).await);
        }
        // A body cut off in transit is a connection failure; one that does
        // not parse is Replicate's doing.
        let body = response.bytes().await.map_err(connection_failure)?;
        serde_json::from_slice::<Prediction>(&body)
            .map_err(|_| Attempt::permanent("Replicate answered an unreadable prediction"))
    }

    /// A non-success answer, with Replicate's `detail` (or `title`) as the
    /// explanation, the key redacted.
    async fn status_failure(&self, response: reqwest::Response) -> Attempt {
        http::status_failure(response, |body| {
            ["detail", "title"]
                .iter()
                .find_map(|field| {
                    body[*field]
                        .as_str()
                        .map(str::trim)
                        .filter(|t| !t.is_empty())
                })
                .map(|text| self.api.clip(text, DETAIL_CHARS))
        })
        .await
    }
}

impl MediaUpstream for ReplicateClient {
    fn run_to_file<'a>(
        &'a self,
        model: &'a str,
        input: Value,
    ) -> BoxFuture<'a, Result<Vec<u8>, ProviderError>> {
        Box::pin(async move {
            let (client, name) = (self.clone(), model.to_owned());
            let output = detached(move |cancel| async move {
                client.run(&name, &input, &cancel, MEDIA_DEADLINE).await
            })
            .await?;
            let url = first_output_url(&output).ok_or_else(|| {
                ProviderError::Permanent("the prediction produced no file".into())
            })?;
            self.download(&url, MEDIA_MAX_OUTPUT).await
        })
    }
}

impl ImageUpstream for ReplicateClient {
    /// One prediction per image (models differ in how many they return),
    /// each with its own seed so the images differ.
    fn generate<'a>(
        &'a self,
        call: &'a ImageCall<'a>,
    ) -> BoxFuture<'a, Result<Vec<Vec<u8>>, ProviderError>> {
        Box::pin(async move {
            let mut images = Vec::with_capacity(call.n as usize);
            for index in 0..call.n {
                let mut input = serde_json::json!({
                    "prompt": call.prompt,
                    "width": call.width,
                    "height": call.height,
                    "seed": call.seed.wrapping_add(u64::from(index)),
                });
                if let Some(negative) = call.negative_prompt {
                    input["negative_prompt"] = serde_json::json!(negative);
                }
                images.push(self.run_to_file(call.model, input).await?);
            }
            Ok(images)
        })
    }
}

/// Prediction ids are short lowercase alphanumerics; anything else must not
/// be put into a URL path.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

/// The first file URL in a prediction output: a string, or the first string of an array, or {"url": ...}.
pub fn first_output_url(output: &serde_json::Value) -> Option<String> {
    let usable = |url: &str| {
        let url = url.trim();
        (!url.is_empty()).then(|| url.to_owned())
    };
    match output {
        Value::String(url) => usable(url),
        Value::Array(items) => items.iter().find_map(|item| match item {
            Value::String(url) => usable(url),
            _ => item.get("url").and_then(Value::as_str).and_then(usable),
        }),
        Value::Object(_) => output.get("url").and_then(Value::as_str).and_then(usable),
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

    const KEY: &str = "r8_test_key_123";
    const NO_DEADLINE: Duration = Duration::from_secs(30);

    fn client(server: &MockServer) -> ReplicateClient {
        ReplicateClient::new(&UpstreamSettings {
            base_url: format!("{}/v1/", server.uri()),
            api_key: KEY.into(),
            timeout_seconds: 5,
            ..Default::default()
        })
        .with_poll_interval(Duration::from_millis(10), Duration::from_millis(40))
    }

    fn prediction(server: &MockServer, id: &str, status: &str) -> Value {
        json!({
            "id": id,
            "model": "acme/video",
            "version": "hidden",
            "input": {"prompt": "a cat"},
            "logs": "",
            "output": null,
            "error": null,
            "status": status,
            "created_at": "2025-01-01T00:00:00.000Z",
            "urls": {
                "get": format!("{}/v1/predictions/{id}", server.uri()),
                "cancel": format!("{}/v1/predictions/{id}/cancel", server.uri()),
                "web": format!("https://replicate.com/p/{id}"),
            }
        })
    }

    fn with(mut prediction: Value, field: &str, value: Value) -> Value {
        prediction[field] = value;
        prediction
    }

    async fn mount_create(server: &MockServer, body: Value) {
        Mock::given(method("POST"))
            .and(path("/v1/models/acme/video/predictions"))
            .respond_with(ResponseTemplate::new(201).set_body_json(body))
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

    async fn run(client: &ReplicateClient, model: &str) -> Result<Value, ProviderError> {
        client
            .run(
                model,
                &json!({"prompt": "a cat"}),
                &CancellationToken::new(),
                NO_DEADLINE,
            )
            .await
    }

    #[tokio::test]
    async fn a_prediction_is_created_polled_and_its_output_returned() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/models/acme/video/predictions"))
            .and(body_json(json!({"input": {"prompt": "a cat"}})))
            .respond_with(
                ResponseTemplate::new(201).set_body_json(prediction(&server, "p1", "starting")),
            )
            .expect(1)
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path("/v1/predictions/p1"))
            .respond_with(ResponseTemplate::new(200).set_body_json(prediction(
                &server,
                "p1",
                "processing",
            )))
            .up_to_n_times(2)
            .mount(&server)
            .await;
        let done = with(
            prediction(&server, "p1", "succeeded"),
            "output",
            json!(["https://replicate.delivery/xezq/out.mp4"]),
        );
        Mock::given(method("GET"))
            .and(path("/v1/predictions/p1"))
            .respond_with(ResponseTemplate::new(200).set_body_json(done))
            .mount(&server)
            .await;

        let output = run(&client(&server), "acme/video").await.unwrap();
        assert_eq!(output, json!(["https://replicate.delivery/xezq/out.mp4"]));
        assert_eq!(requests_to(&server, "GET", "/v1/predictions/p1").await, 3);
        // Every request, polls included, carries the key; nothing was cancelled.
        let requests = server.received_requests().await.unwrap();
        assert!(
            requests.iter().all(
                |r| r.headers.get("authorization").unwrap() == format!("Bearer {KEY}").as_str()
            )
        );
        assert_eq!(
            requests_to(&server, "POST", "/v1/predictions/p1/cancel").await,
            0
        );
    }

    #[tokio::test]
    async fn a_versioned_model_is_created_through_predictions_with_its_version() {
        let server = MockServer::start().await;
        let version = "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa";
        let done = with(
            prediction(&server, "p2", "succeeded"),
            "output",
            json!("https://replicate.delivery/xezq/out.wav"),
        );
        Mock::given(method("POST"))
            .and(path("/v1/predictions"))
            .and(body_json(
                json!({"version": version, "input": {"prompt": "a cat"}}),
            ))
            .respond_with(ResponseTemplate::new(201).set_body_json(done))
            .expect(1)
            .mount(&server)
            .await;

        let output = run(&client(&server), &format!("acme/music-gen:{version}"))
            .await
            .unwrap();
        assert_eq!(output, json!("https://replicate.delivery/xezq/out.wav"));
        server.verify().await;
    }

    #[tokio::test]
    async fn prefer_wait_and_the_bearer_token_are_sent_and_a_finished_answer_is_not_polled() {
        let server = MockServer::start().await;
        let done = with(
            prediction(&server, "p3", "succeeded"),
            "output",
            json!({"url": "https://replicate.delivery/a.png"}),
        );
        Mock::given(method("POST"))
            .and(path("/v1/models/acme/video/predictions"))
            .and(header("Prefer", "wait=5"))
            .and(header("Authorization", format!("Bearer {KEY}").as_str()))
            .respond_with(ResponseTemplate::new(201).set_body_json(done))
            .expect(1)
            .mount(&server)
            .await;

        let output = run(&client(&server), "acme/video").await.unwrap();
        assert_eq!(output["url"], "https://replicate.delivery/a.png");
        assert_eq!(server.received_requests().await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_failed_prediction_is_permanent_with_its_error_text() {
        let server = MockServer::start().await;
        mount_create(&server, prediction(&server, "p4", "starting")).await;
        let failed = with(
            prediction(&server, "p4", "failed"),
            "error",
            json!("  NSFW content detected. Try running it again, or try a different prompt.\n"),
        );
        Mock::given(method("GET"))
            .and(path("/v1/predictions/p4"))
            .respond_with(ResponseTemplate::new(200).set_body_json(failed))
            .mount(&server)
            .await;

        let err = run(&client(&server), "acme/video").await.unwrap_err();
        assert_eq!(
            err,
            ProviderError::Permanent(
                "NSFW content detected. Try running it again, or try a different prompt.".into()
            )
        );
        assert_eq!(
            requests_to(&server, "POST", "/v1/predictions/p4/cancel").await,
            0
        );
    }

    #[tokio::test]
    async fn a_long_prediction_error_is_cut_to_300_characters() {
        let server = MockServer::start().await;
        let failed = with(
            prediction(&server, "p5", "failed"),
            "error",
            json!("é".repeat(1000)),
        );
        mount_create(&server, failed).await;
        let ProviderError::Permanent(message) =
            run(&client(&server), "acme/video").await.unwrap_err()
        else {
            panic!("a failed prediction is permanent");
        };
        assert_eq!(message.chars().count(), 300);
    }

    #[tokio::test]
    async fn a_canceled_prediction_is_permanent() {
        let server = MockServer::start().await;
        mount_create(&server, prediction(&server, "p6", "canceled")).await;
        let err = run(&client(&server), "acme/video").await.unwrap_err();
        assert_eq!(
            err,
            ProviderError::Permanent("the prediction was canceled".into())
        );
    }

    #[tokio::test]
    async fn a_422_on_create_is_permanent_with_the_detail_and_without_the_key() {
        let server = MockServer::start().await;
        let detail = format!(
            "- input.prompt: Invalid type. Expected: string, given: integer (token {KEY}) {}",
            "x".repeat(400)
        );
        Mock::given(method("POST"))
            .and(path("/v1/models/acme/video/predictions"))
            .respond_with(ResponseTemplate::new(422).set_body_json(json!({
                "detail": detail, "status": 422, "title": "Input validation failed"
            })))
            .expect(1)
            .mount(&server)
            .await;

        let ProviderError::Permanent(message) =
            run(&client(&server), "acme/video").await.unwrap_err()
        else {
            panic!("a 422 is permanent");
        };
        assert!(
            message.starts_with("- input.prompt: Invalid type."),
            "{message}"
        );
        assert!(!message.contains(KEY), "{message}");
        assert_eq!(message.chars().count(), 200);
        server.verify().await;
    }

    #[tokio::test]
    async fn a_404_without_detail_names_the_status() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(404).set_body_string("not json"))
            .expect(1)
            .mount(&server)
            .await;
        let err = run(&client(&server), "acme/video").await.unwrap_err();
        assert_eq!(
            err,
            ProviderError::Permanent("the upstream rejected the request (404 Not Found)".into())
        );
    }

    #[tokio::test]
    async fn a_429_with_retry_after_is_retried_after_the_asked_delay() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/models/acme/video/predictions"))
            .respond_with(
                ResponseTemplate::new(429)
                    .insert_header("Retry-After", "1")
                    .set_body_json(json!({"detail": "Request was throttled.", "status": 429})),
            )
            .up_to_n_times(1)
            .mount(&server)
            .await;
        let done = with(prediction(&server, "p7", "succeeded"), "output", json!("u"));
        mount_create(&server, done).await;

        let started = Instant::now();
        let output = run(&client(&server), "acme/video").await.unwrap();
        assert_eq!(output, json!("u"));
        assert!(started.elapsed() >= Duration::from_millis(950));
        assert_eq!(
            requests_to(&server, "POST", "/v1/models/acme/video/predictions").await,
            2
        );
    }

    #[tokio::test]
    async fn persistent_5xx_on_create_is_transient_after_three_retries() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(502))
            .expect(4)
            .mount(&server)
            .await;
        let err = run(&client(&server), "acme/video").await.unwrap_err();
        assert!(matches!(err, ProviderError::Transient(_)), "{err:?}");
        server.verify().await;
    }

    #[tokio::test]
    async fn a_503_on_a_poll_is_retried() {
        let server = MockServer::start().await;
        mount_create(&server, prediction(&server, "p8", "processing")).await;
        Mock::given(method("GET"))
            .and(path("/v1/predictions/p8"))
            .respond_with(ResponseTemplate::new(503))
            .up_to_n_times(1)
            .mount(&server)
            .await;
        let done = with(
            prediction(&server, "p8", "succeeded"),
            "output",
            json!(["a", "b"]),
        );
        Mock::given(method("GET"))
            .and(path("/v1/predictions/p8"))
            .respond_with(ResponseTemplate::new(200).set_body_json(done))
            .mount(&server)
            .await;

        let output = run(&client(&server), "acme/video").await.unwrap();
        assert_eq!(output, json!(["a", "b"]));
        assert_eq!(requests_to(&server, "GET", "/v1/predictions/p8").await, 2);
    }

    #[tokio::test]
    async fn a_poll_link_to_another_host_is_not_followed() {
        let server = MockServer::start().await;
        let mut created = prediction(&server, "p9", "starting");
        created["urls"]["get"] = json!("http://127.0.0.1:9/v1/predictions/p9");
        mount_create(&server, created).await;
        let done = with(
            prediction(&server, "p9", "succeeded"),
            "output",
            json!("ok"),
        );
        Mock::given(method("GET"))
            .and(path("/v1/predictions/p9"))
            .respond_with(ResponseTemplate::new(200).set_body_json(done))
            .expect(1)
            .mount(&server)
            .await;
        assert_eq!(
            run(&client(&server), "acme/video").await.unwrap(),
            json!("ok")
        );
    }

    async fn mount_running_forever(server: &MockServer, id: &str) {
        mount_create(server, prediction(server, id, "starting")).await;
        Mock::given(method("GET"))
            .and(path(format!("/v1/predictions/{id}")))
            .respond_with(ResponseTemplate::new(200).set_body_json(prediction(
                server,
                id,
                "processing",
            )))
            .mount(server)
            .await;
        Mock::given(method("POST"))
            .and(path(format!("/v1/predictions/{id}/cancel")))
            .and(header("Authorization", format!("Bearer {KEY}").as_str()))
            .respond_with(
                ResponseTemplate::new(200).set_body_json(prediction(server, id, "canceled")),
            )
            .expect(1)
            .mount(server)
            .await;
    }

    #[tokio::test]
    async fn a_fired_cancel_token_cancels_the_prediction_upstream() {
        let server = MockServer::start().await;
        mount_running_forever(&server, "p10").await;
        let cancel = CancellationToken::new();
        let firing = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            firing.cancel();
        });

        let started = Instant::now();
        let err = client(&server)
            .run("acme/video", &json!({}), &cancel, NO_DEADLINE)
            .await
            .unwrap_err();
        assert_eq!(err, ProviderError::Permanent("cancelled".into()));
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(requests_to(&server, "GET", "/v1/predictions/p10").await >= 1);
        server.verify().await;
    }

    #[tokio::test]
    async fn an_already_fired_token_creates_nothing() {
        let server = MockServer::start().await;
        let cancel = CancellationToken::new();
        cancel.cancel();
        let err = client(&server)
            .run("acme/video", &json!({}), &cancel, NO_DEADLINE)
            .await
            .unwrap_err();
        assert_eq!(err, ProviderError::Permanent("cancelled".into()));
        assert!(server.received_requests().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_missed_deadline_is_transient_and_cancels_the_prediction() {
        let server = MockServer::start().await;
        mount_running_forever(&server, "p11").await;
        let err = client(&server)
            .run(
                "acme/video",
                &json!({}),
                &CancellationToken::new(),
                Duration::from_millis(300),
            )
            .await
            .unwrap_err();
        assert_eq!(
            err,
            ProviderError::Transient("the prediction did not finish within 1s".into())
        );
        server.verify().await;
    }

    #[tokio::test]
    async fn malformed_model_references_are_permanent_and_send_nothing() {
        let server = MockServer::start().await;
        let client = client(&server);
        for model in [
            "video",
            "acme/",
            "/video",
            "acme/video/extra",
            "acme/video:",
            "acme/video:../x",
            "../video",
            "acme/vi deo",
        ] {
            let err = run(&client, model).await.unwrap_err();
            assert!(
                matches!(err, ProviderError::Permanent(_)),
                "{model}: {err:?}"
            );
        }
        assert!(server.received_requests().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn downloads_are_capped() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/xezq/out.mp4"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(vec![7u8; 1000]))
            .mount(&server)
            .await;
        let client = client(&server);
        let url = format!("{}/xezq/out.mp4", server.uri());

        assert_eq!(client.download(&url, 1000).await.unwrap(), vec![7u8; 1000]);
        let err = client.download(&url, 999).await.unwrap_err();
        assert_eq!(
            err,
            ProviderError::Permanent("the output file is larger than 999 bytes".into())
        );
    }

    #[tokio::test]
    async fn a_streamed_download_without_length_is_capped_too() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 4096];
            let _ = socket.read(&mut request).await;
            let mut answer =
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                    .to_vec();
            for _ in 0..10 {
                answer.extend_from_slice(b"64\r\n");
                answer.extend_from_slice(&[1u8; 100]);
                answer.extend_from_slice(b"\r\n");
            }
            answer.extend_from_slice(b"0\r\n\r\n");
            let _ = socket.write_all(&answer).await;
        });
        // The file is on the API's own (loopback) origin.
        let err = ReplicateClient::new(&UpstreamSettings {
            base_url: format!("http://{address}/v1/"),
            api_key: KEY.into(),
            timeout_seconds: 5,
            ..Default::default()
        })
        .download(&format!("http://{address}/file.wav"), 500)
        .await
        .unwrap_err();
        assert_eq!(
            err,
            ProviderError::Permanent("the output file is larger than 500 bytes".into())
        );
    }

    #[tokio::test]
    async fn outputs_on_private_addresses_off_the_api_are_refused_unfetched() {
        let server = MockServer::start().await;
        let internal = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(b"secret".to_vec()))
            .mount(&internal)
            .await;
        Mock::given(method("GET"))
            .and(path("/delivery/moved.png"))
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
            format!("{}/delivery/moved.png", server.uri()),
        ] {
            let started = Instant::now();
            let err = client.download(&url, 1000).await.unwrap_err();
            let ProviderError::Permanent(message) = &err else {
                panic!("{url}: a refusal is permanent: {err:?}");
            };
            assert!(
                message.contains("private, loopback or link-local address"),
                "{url}: {message}"
            );
            assert!(started.elapsed() < Duration::from_secs(2), "{url}");
        }
        assert!(internal.received_requests().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_endless_output_is_cut_at_the_cap_without_reading_on() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let sent = Arc::new(AtomicUsize::new(0));
        let counted = sent.clone();
        let served = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 4096];
            let _ = socket.read(&mut request).await;
            let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
            socket.write_all(head).await.unwrap();
            let mut chunk = b"4000\r\n".to_vec();
            chunk.extend_from_slice(&[3u8; 0x4000]);
            chunk.extend_from_slice(b"\r\n");
            // Until the client hangs up (or far past anything it should read).
            while counted.load(Ordering::Relaxed) < 1 << 30 {
                if socket.write_all(&chunk).await.is_err() {
                    break;
                }
                counted.fetch_add(0x4000, Ordering::Relaxed);
            }
        });
        let client = ReplicateClient::new(&UpstreamSettings {
            base_url: format!("http://{address}/v1"),
            api_key: KEY.into(),
            timeout_seconds: 10,
            ..Default::default()
        });
        let err = client
            .download(&format!("http://{address}/endless.mp4"), 1 << 20)
            .await
            .unwrap_err();
        assert_eq!(
            err,
            ProviderError::Permanent("the output file is larger than 1048576 bytes".into())
        );
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .expect("the download hung up")
            .unwrap();
        // The cap plus what sat in socket buffers, not the gigabyte on offer.
        assert!(sent.load(Ordering::Relaxed) < 64 << 20, "{sent:?}");
    }

    #[tokio::test]
    async fn downloads_send_the_key_only_to_the_api() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(b"data".to_vec()))
            .mount(&server)
            .await;
        let client = client(&server);
        client
            .download(&format!("{}/delivery/a.png", server.uri()), 10)
            .await
            .unwrap();
        client
            .download(&format!("{}/v1/files/abc/download", server.uri()), 10)
            .await
            .unwrap();
        let requests = server.received_requests().await.unwrap();
        assert!(requests[0].headers.get("authorization").is_none());
        assert!(requests[1].headers.get("authorization").is_some());
    }

    #[tokio::test]
    async fn download_failures_are_classified() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/gone.png"))
            .respond_with(ResponseTemplate::new(404))
            .expect(1)
            .mount(&server)
            .await;
        let client = client(&server);
        let gone = client
            .download(&format!("{}/gone.png", server.uri()), 10)
            .await
            .unwrap_err();
        assert!(matches!(gone, ProviderError::Permanent(_)), "{gone:?}");
        for url in [
            "not a url",
            "file:///etc/passwd",
            "data:image/png;base64,AAAA",
        ] {
            let err = client.download(url, 10).await.unwrap_err();
            assert!(matches!(err, ProviderError::Permanent(_)), "{url}: {err:?}");
        }
        server.verify().await;
    }

    #[test]
    fn first_output_url_reads_the_usual_output_shapes() {
        let cases = [
            (
                json!("https://r.delivery/a.mp4"),
                Some("https://r.delivery/a.mp4"),
            ),
            (
                json!(["https://r.delivery/a.png", "https://r.delivery/b.png"]),
                Some("https://r.delivery/a.png"),
            ),
            (
                json!([null, "https://r.delivery/b.png"]),
                Some("https://r.delivery/b.png"),
            ),
            (
                json!({"url": "https://r.delivery/c.wav"}),
                Some("https://r.delivery/c.wav"),
            ),
            (
                json!([{"url": "https://r.delivery/d.wav"}]),
                Some("https://r.delivery/d.wav"),
            ),
            (json!(""), None),
            (json!([]), None),
            (json!({"audio": "x"}), None),
            (json!(null), None),
            (json!(42), None),
        ];
        for (output, expected) in cases {
            assert_eq!(first_output_url(&output).as_deref(), expected, "{output}");
        }
    }

    #[test]
    fn debug_never_prints_the_key() {
        let client = ReplicateClient::new(&UpstreamSettings {
            base_url: "https://api.replicate.com/v1".into(),
            api_key: KEY.into(),
            timeout_seconds: 60,
            ..Default::default()
        });
        let printed = format!("{client:?}");
        assert!(!printed.contains(KEY), "{printed}");
        assert!(printed.contains("keys: 1"), "{printed}");
    }
}
