//! Adapter for OpenAI-compatible upstreams (OpenAI, vLLM, llama.cpp, the
//! local Whisper sidecar...). Failures are classified here, once: 4xx other
//! than 408/429 are permanent, 408/429/5xx and connection errors transient
//! and retried with backoff (honouring `Retry-After`). Upstream bodies and
//! keys never reach clients; only a short upstream message for 4xx does.

use std::time::Duration;

use futures_util::future::BoxFuture;
use reqwest::multipart::{Form, Part};
use serde::Deserialize;

use super::http::{self, Attempt, connection_failure, with_retries};
use crate::upstream::{Auth, Upstream};
use unigen_core::ProviderError;
use unigen_core::config::UpstreamSettings;
use unigen_core::params::transcription::{
    Segment, SegmentDecoding, Transcript, Word, language_code,
};

/// An OpenAI-compatible upstream (`adapter = "openai"`), or Azure OpenAI
/// (`adapter = "azure-openai"`): the same wire format under
/// `{base}/openai/deployments/{deployment}/...?api-version=...`, the model's
/// `upstream_model` naming the deployment, with the key in `api-key`.
#[derive(Clone)]
pub struct OpenAiClient {
    upstream: Upstream,
    /// Azure's `api-version`, for an Azure upstream.
    azure: Option<String>,
}

/// Azure OpenAI's GA data-plane API version used when the upstream sets none.
pub const AZURE_API_VERSION: &str = "2024-10-21";

#[derive(Deserialize)]
struct VerboseTranscription {
    text: String,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    duration: Option<f64>,
    #[serde(default)]
    segments: Vec<VerboseSegment>,
    #[serde(default)]
    words: Option<Vec<Word>>,
}

#[derive(Deserialize)]
struct VerboseSegment {
    start: f64,
    end: f64,
    text: String,
    #[serde(default)]
    speaker: Option<String>,
    // Whisper's decoding facts, kept for our own `verbose_json` answers.
    #[serde(default)]
    seek: Option<i64>,
    #[serde(default)]
    tokens: Option<Vec<i64>>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    avg_logprob: Option<f64>,
    #[serde(default)]
    compression_ratio: Option<f64>,
    #[serde(default)]
    no_speech_prob: Option<f64>,
}

impl VerboseSegment {
    /// Present when the upstream reported any of them (missing ones are 0).
    fn decoding(&self) -> Option<SegmentDecoding> {
        let reported = self.seek.is_some()
            || self.tokens.is_some()
            || self.avg_logprob.is_some()
            || self.no_speech_prob.is_some();
        reported.then(|| SegmentDecoding {
            seek: self.seek.unwrap_or(0),
            tokens: self.tokens.clone().unwrap_or_default(),
            temperature: self.temperature.unwrap_or(0.0),
            avg_logprob: self.avg_logprob.unwrap_or(0.0),
            compression_ratio: self.compression_ratio.unwrap_or(0.0),
            no_speech_prob: self.no_speech_prob.unwrap_or(0.0),
        })
    }
}

pub use crate::vendor::TranscribeOptions;

impl OpenAiClient {
    pub fn new(settings: &UpstreamSettings) -> Self {
        Self {
            upstream: Upstream::new(settings, Auth::Bearer, &[]),
            azure: None,
        }
    }

    /// An Azure OpenAI resource: `base_url` is its endpoint
    /// (`https://<resource>.openai.azure.com`).
    pub fn azure(settings: &UpstreamSettings) -> Self {
        let version = settings
            .api_version
            .clone()
            .unwrap_or_else(|| AZURE_API_VERSION.to_owned());
        Self {
            upstream: Upstream::new(settings, Auth::Header("api-key"), &[]),
            azure: Some(version),
        }
    }

    /// The URL of `path` (`chat/completions`...) for `model`: on Azure, under
    /// the deployment the model names.
    fn endpoint(&self, path: &str, model: &str) -> String {
        match &self.azure {
            None => self.upstream.url(path),
            Some(version) => {
                let base = self.upstream.url("openai/deployments");
                let Ok(mut url) = url::Url::parse(&base) else {
                    // An unparsable base URL fails at the request, as any other.
                    return base;
                };
                if let Ok(mut segments) = url.path_segments_mut() {
                    // Percent-encoded: a deployment name is one segment.
                    segments.push(model).extend(path.split('/'));
                }
                url.query_pairs_mut().append_pair("api-version", version);
                url.into()
            }
        }
    }

    /// `POST {base}/audio/transcriptions` (or `/audio/translations` when
    /// translating) with `response_format=verbose_json`.
    pub async fn transcribe(
        &self,
        audio: Vec<u8>,
        filename: &str,
        options: &TranscribeOptions<'_>,
    ) -> Result<Transcript, ProviderError> {
        let endpoint = if options.translate {
            "audio/translations"
        } else {
            "audio/transcriptions"
        };
        let attempt = || async {
            let mut form = Form::new()
                .part(
                    "file",
                    Part::bytes(audio.clone()).file_name(filename.to_owned()),
                )
                .text("model", options.model.to_owned())
                .text("response_format", "verbose_json")
                .text("timestamp_granularities[]", "segment");
            if options.words {
                form = form.text("timestamp_granularities[]", "word");
            }
            if let Some(language) = options.language {
                form = form.text("language", language.to_owned());
            }
            if options.diarization {
                form = form.text("diarization", "true");
            }
            if let Some(prompt) = options.prompt {
                form = form.text("prompt", prompt.to_owned());
            }
            if let Some(temperature) = options.temperature {
                form = form.text("temperature", temperature.to_string());
            }
            let url = self.endpoint(endpoint, options.model);
            let response = self
                .upstream
                .send(|http| http.post(url).multipart(form))
                .await?;
            read_json::<VerboseTranscription>(response).await
        };
        let verbose = with_retries(attempt).await?;
        Ok(into_transcript(verbose, options.words))
    }

    /// `POST {base}/{path}` with a JSON body; a connection failure is transient.
    async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<reqwest::Response, Attempt> {
        let url = self.endpoint(path, body["model"].as_str().unwrap_or_default());
        self.upstream.send(|http| http.post(url).json(body)).await
    }
}

async fn read_json<T: serde::de::DeserializeOwned>(
    response: reqwest::Response,
) -> Result<T, Attempt> {
    if response.status().is_success() {
        return response.json::<T>().await.map_err(|err| {
            Attempt::permanent(format!(
                "the upstream answered an unreadable response: {err}"
            ))
        });
    }
    Err(status_failure(response).await)
}

/// A non-success answer, with OpenAI's `error.message` as the explanation.
async fn status_failure(response: reqwest::Response) -> Attempt {
    http::status_failure(response, |body| {
        body["error"]["message"]
            .as_str()
            .map(|m| m.chars().take(200).collect())
    })
    .await
}

/// Words are reported both top-level and nested in the segment holding
/// their midpoint; language names are turned into ISO codes.
fn into_transcript(verbose: VerboseTranscription, with_words: bool) -> Transcript {
    let words = if with_words {
        verbose.words.clone()
    } else {
        None
    };
    let segments = verbose
        .segments
        .into_iter()
        .map(|s| {
            let decoding = s.decoding();
            let nested = words.as_ref().map(|all| {
                all.iter()
                    .filter(|w| {
                        let mid = (w.start + w.end) / 2.0;
                        mid >= s.start && mid < s.end.max(s.start + f64::EPSILON)
                    })
                    .cloned()
                    .collect()
            });
            Segment {
                start: s.start,
                end: s.end,
                text: s.text.trim().to_owned(),
                speaker: s.speaker,
                words: nested,
                decoding,
            }
        })
        .collect::<Vec<_>>();
    let duration = verbose
        .duration
        .unwrap_or_else(|| segments.last().map_or(0.0, |s| s.end));
    Transcript {
        text: verbose.text.trim().to_owned(),
        segments,
        language: verbose
            .language
            .as_deref()
            .map_or_else(|| "en".to_owned(), language_code),
        duration,
        words,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_nested_into_their_segments_and_languages_become_codes() {
        let verbose: VerboseTranscription = serde_json::from_value(serde_json::json!({
            "text": " Hello world. Bye.", "language": "english", "duration": 3.0,
            "segments": [{"start": 0.0, "end": 1.5, "text": " Hello world."}, {"start": 1.5, "end": 3.0, "text": " Bye."}],
            "words": [{"word": "Hello", "start": 0.1, "end": 0.5}, {"word": "world", "start": 0.6, "end": 1.2},
                      {"word": "Bye", "start": 1.8, "end": 2.2}]
        }))
        .unwrap();
        let transcript = into_transcript(verbose, true);
        assert_eq!(transcript.language, "en");
        assert_eq!(transcript.segments[0].decoding, None);
        assert_eq!(transcript.text, "Hello world. Bye.");
        assert_eq!(transcript.segments[0].words.as_ref().unwrap().len(), 2);
        assert_eq!(
            transcript.segments[1].words.as_ref().unwrap()[0].word,
            "Bye"
        );
        assert_eq!(transcript.words.as_ref().unwrap().len(), 3);
    }

    #[test]
    fn segment_decoding_facts_are_kept() {
        let verbose: VerboseTranscription = serde_json::from_value(serde_json::json!({
            "text": "Hi.", "language": "german",
            "segments": [{"id": 0, "seek": 0, "start": 0.0, "end": 1.0, "text": " Hi.",
                          "tokens": [50364, 2421], "temperature": 0.0, "avg_logprob": -0.3,
                          "compression_ratio": 0.6, "no_speech_prob": 0.02}]
        }))
        .unwrap();
        let transcript = into_transcript(verbose, false);
        assert_eq!(transcript.language, "de");
        let decoding = transcript.segments[0].decoding.as_ref().unwrap();
        assert_eq!(
            (decoding.tokens.clone(), decoding.avg_logprob),
            (vec![50364, 2421], -0.3)
        );
    }
}

/// A server-sent event stream of JSON chunks (`data: {...}`), ending at
/// `data: [DONE]` or when the upstream closes.
pub use crate::vendor::ChunkStream;

impl crate::vendor::ChatUpstream for OpenAiClient {
    fn chat<'a>(
        &'a self,
        body: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<serde_json::Value, ProviderError>> {
        Box::pin(OpenAiClient::chat(self, body))
    }

    fn chat_stream<'a>(
        &'a self,
        body: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        Box::pin(OpenAiClient::chat_stream(self, body))
    }
}

impl crate::vendor::TranscriptionUpstream for OpenAiClient {
    fn transcribe<'a>(
        &'a self,
        audio: Vec<u8>,
        filename: &'a str,
        options: &'a TranscribeOptions<'a>,
    ) -> BoxFuture<'a, Result<Transcript, ProviderError>> {
        Box::pin(OpenAiClient::transcribe(self, audio, filename, options))
    }
}

impl crate::vendor::SpeechUpstream for OpenAiClient {
    /// `POST {base}/audio/speech`; a reference sample is not used (OpenAI's
    /// speech has no voice cloning).
    fn speak<'a>(
        &'a self,
        call: &'a crate::vendor::SpeechCall<'a>,
    ) -> BoxFuture<'a, Result<Vec<u8>, ProviderError>> {
        let body = serde_json::json!({
            "model": call.model.upstream_model.as_deref().unwrap_or(&call.model.id),
            "input": call.text,
            "voice": call.voice,
            "speed": call.speed,
            "response_format": call.response_format,
        });
        Box::pin(async move { self.speech(&body).await })
    }
}

impl crate::vendor::ImageUpstream for OpenAiClient {
    /// `POST {base}/images/generations`: all `n` images in one call.
    fn generate<'a>(
        &'a self,
        call: &'a crate::vendor::ImageCall<'a>,
    ) -> BoxFuture<'a, Result<Vec<Vec<u8>>, ProviderError>> {
        let body = serde_json::json!({
            "model": call.model,
            "prompt": call.prompt,
            "n": call.n,
            "size": format!("{}x{}", call.width, call.height),
            "response_format": "b64_json",
            "style": call.style,
            // Not every upstream knows `seed`; it is sent for those that do.
            "seed": call.seed,
        });
        Box::pin(async move { self.generate_images(&body).await })
    }
}

impl crate::vendor::EmbeddingUpstream for OpenAiClient {
    fn embed(
        &self,
        body: serde_json::Value,
        inputs: usize,
    ) -> BoxFuture<'_, Result<Embeddings, ProviderError>> {
        Box::pin(OpenAiClient::embed(self, body, inputs))
    }
}

impl OpenAiClient {
    /// `POST {base}/chat/completions` without streaming.
    pub async fn chat(&self, body: &serde_json::Value) -> Result<serde_json::Value, ProviderError> {
        with_retries(|| async {
            let response = self.post_json("chat/completions", body).await?;
            read_json::<serde_json::Value>(response).await
        })
        .await
    }

    /// `POST {base}/chat/completions` with `stream: true`. Failures before the
    /// first byte are retried; once streaming, an error ends the stream.
    /// Dropping the stream closes the upstream connection (cancels it).
    pub async fn chat_stream(
        &self,
        body: &serde_json::Value,
    ) -> Result<ChunkStream, ProviderError> {
        let response = with_retries(|| async {
            let response = self.post_json("chat/completions", body).await?;
            if response.status().is_success() {
                Ok(response)
            } else {
                Err(status_failure(response).await)
            }
        })
        .await?;
        Ok(sse_chunks(response.bytes_stream()))
    }
}

/// The `data:` payloads of a byte stream as JSON chunks, up to `[DONE]`.
fn sse_chunks<S, B>(bytes: S) -> ChunkStream
where
    S: futures_util::Stream<Item = Result<B, reqwest::Error>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
{
    use futures_util::StreamExt;
    let chunks = crate::sse::events(bytes)
        .take_while(|event| {
            let done = matches!(event, Ok(e) if e.data.trim() == "[DONE]");
            std::future::ready(!done)
        })
        .filter_map(|event| {
            std::future::ready(match event {
                Err(err) => Some(Err(err)),
                Ok(event) if event.data.trim().is_empty() => None,
                Ok(event) => match serde_json::from_str(&event.data) {
                    Ok(chunk) => Some(Ok(chunk)),
                    Err(_) => {
                        tracing::debug!("skipping an unreadable stream event");
                        None
                    }
                },
            })
        });
    Box::pin(chunks)
}

#[cfg(test)]
mod sse_tests {
    use futures_util::StreamExt;

    use super::*;

    #[tokio::test]
    async fn events_split_across_reads_are_reassembled_and_done_ends_the_stream() {
        let parts: Vec<Result<Vec<u8>, reqwest::Error>> = vec![
            Ok(b"data: {\"a\":".to_vec()),
            Ok(b"1}\n\n: comment\n\ndata: {\"a\":2}\r\n\r\ndata: [DO".to_vec()),
            Ok(b"NE]\n\ndata: {\"a\":3}\n\n".to_vec()),
        ];
        let chunks: Vec<_> = sse_chunks(futures_util::stream::iter(parts))
            .collect()
            .await;
        let values: Vec<i64> = chunks
            .into_iter()
            .map(|c| c.unwrap()["a"].as_i64().unwrap())
            .collect();
        assert_eq!(values, vec![1, 2]);
    }
}

impl OpenAiClient {
    /// `POST {base}/images/generations` asking for `b64_json`; returns the
    /// image bytes (a URL answer is downloaded from the upstream).
    pub async fn generate_images(
        &self,
        body: &serde_json::Value,
    ) -> Result<Vec<Vec<u8>>, ProviderError> {
        use base64::Engine;
        let answer: serde_json::Value = with_retries(|| async {
            let response = self.post_json("images/generations", body).await?;
            read_json(response).await
        })
        .await?;
        let items = answer["data"]
            .as_array()
            .ok_or_else(|| ProviderError::Permanent("the upstream answered no images".into()))?;
        let mut images = Vec::with_capacity(items.len());
        for item in items {
            if let Some(encoded) = item["b64_json"].as_str() {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .map_err(|_| {
                        ProviderError::Permanent(
                            "the upstream answered undecodable image data".into(),
                        )
                    })?;
                images.push(bytes);
            } else if let Some(url) = item["url"].as_str() {
                // The URL comes from the answer: http(s) only, no private
                // address but the upstream's own origin, capped, timed
                // (`outputs`). The key is never sent with it.
                const MAX_IMAGE_BYTES: usize = 64 * 1024 * 1024;
                const IMAGE_DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(60);
                let source = super::outputs::OutputSource {
                    base_url: self.upstream.base_url(),
                    api_key: None,
                    timeout: IMAGE_DOWNLOAD_TIMEOUT,
                };
                let response = source.open(url).await.map_err(|a| a.error)?;
                if !response.status().is_success() {
                    return Err(ProviderError::Transient(format!(
                        "downloading the upstream image answered {}",
                        response.status()
                    )));
                }
                images.push(
                    super::outputs::read_capped(response, MAX_IMAGE_BYTES)
                        .await
                        .map_err(|a| a.error)?,
                );
            } else {
                return Err(ProviderError::Permanent(
                    "the upstream answered an image without data".into(),
                ));
            }
        }
        Ok(images)
    }

    /// `POST {base}/audio/speech`: the audio bytes.
    pub async fn speech(&self, body: &serde_json::Value) -> Result<Vec<u8>, ProviderError> {
        with_retries(|| async {
            let response = self.post_json("audio/speech", body).await?;
            if !response.status().is_success() {
                return Err(status_failure(response).await);
            }
            response
                .bytes()
                .await
                .map(|b| b.to_vec())
                .map_err(connection_failure)
        })
        .await
    }
}

#[cfg(test)]
mod retry_tests {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;

    #[tokio::test]
    async fn an_upstream_that_always_asks_to_retry_later_is_given_up_on() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "0"))
            .mount(&server)
            .await;
        let client = OpenAiClient::new(&UpstreamSettings {
            base_url: format!("{}/v1", server.uri()),
            api_key: String::new(),
            timeout_seconds: 5,
            ..Default::default()
        });
        let result =
            tokio::time::timeout(Duration::from_secs(10), client.chat(&serde_json::json!({})))
                .await;
        assert!(
            matches!(result, Ok(Err(ProviderError::Transient(_)))),
            "{result:?}"
        );
        assert_eq!(
            server.received_requests().await.unwrap().len(),
            1 + super::http::MAX_RETRIES
        );
    }
}

#[derive(Deserialize)]
struct EmbeddingList {
    data: Vec<EmbeddingItem>,
    #[serde(default)]
    usage: Option<EmbeddingUsage>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    index: usize,
    embedding: Vec<f32>,
}

#[derive(Deserialize)]
struct EmbeddingUsage {
    prompt_tokens: u32,
}

pub use crate::vendor::Embeddings;

impl OpenAiClient {
    /// `POST {base}/embeddings`: one float vector per input, in input order
    /// (upstreams may answer out of order; `index` says which is which).
    pub async fn embeddings(
        &self,
        model: &str,
        inputs: &[String],
    ) -> Result<Vec<Vec<f32>>, ProviderError> {
        let body = serde_json::json!({ "model": model, "input": inputs });
        Ok(self.embed(body, inputs.len()).await?.vectors)
    }

    /// `POST {base}/embeddings` with `body` (`input` of `inputs` items: texts
    /// or token id lists), asking for floats.
    pub async fn embed(
        &self,
        mut body: serde_json::Value,
        inputs: usize,
    ) -> Result<Embeddings, ProviderError> {
        body["encoding_format"] = serde_json::json!("float");
        let mut list = with_retries(|| async {
            let response = self.post_json("embeddings", &body).await?;
            read_json::<EmbeddingList>(response).await
        })
        .await?;
        let prompt_tokens = list.usage.take().map(|u| u.prompt_tokens);
        Ok(Embeddings {
            vectors: in_input_order(list, inputs)?,
            prompt_tokens,
        })
    }
}

fn in_input_order(list: EmbeddingList, inputs: usize) -> Result<Vec<Vec<f32>>, ProviderError> {
    let malformed = || {
        ProviderError::Permanent(format!(
            "the upstream's answer does not hold one embedding per input ({} for {inputs})",
            list.data.len()
        ))
    };
    if list.data.len() != inputs {
        return Err(malformed());
    }
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; inputs];
    for item in &list.data {
        match vectors.get_mut(item.index) {
            Some(slot @ None) if !item.embedding.is_empty() => {
                *slot = Some(item.embedding.clone());
            }
            _ => return Err(malformed()),
        }
    }
    vectors
        .into_iter()
        .map(|v| v.ok_or_else(malformed))
        .collect()
}

#[cfg(test)]
mod embedding_tests {
    use wiremock::matchers::{body_partial_json, method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;

    fn client(server: &MockServer) -> OpenAiClient {
        OpenAiClient::new(&UpstreamSettings {
            base_url: format!("{}/v1", server.uri()),
            api_key: "sk-test".into(),
            timeout_seconds: 5,
            ..Default::default()
        })
    }

    #[tokio::test]
    async fn azure_calls_go_to_the_deployment_with_the_api_version_and_the_api_key_header() {
        use wiremock::matchers::{header, query_param};
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/openai/deployments/my%20gpt/chat/completions"))
            .and(query_param("api-version", "2024-10-21"))
            .and(header("api-key", "azure-key"))
            .respond_with(
                ResponseTemplate::new(200).set_body_json(serde_json::json!({"choices": []})),
            )
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path("/openai/deployments/embedder/embeddings"))
            .and(query_param("api-version", "2025-01-01"))
            .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
                "data": [{"index": 0, "embedding": [1.0]}]
            })))
            .mount(&server)
            .await;
        let settings = |version: Option<&str>| UpstreamSettings {
            base_url: server.uri(),
            api_key: "azure-key".into(),
            timeout_seconds: 5,
            api_version: version.map(str::to_owned),
            ..Default::default()
        };
        let chat = OpenAiClient::azure(&settings(None))
            .chat(&serde_json::json!({"model": "my gpt", "messages": []}))
            .await;
        assert_eq!(chat, Ok(serde_json::json!({"choices": []})));
        let vectors = OpenAiClient::azure(&settings(Some("2025-01-01")))
            .embeddings("embedder", &["a".into()])
            .await;
        assert_eq!(vectors, Ok(vec![vec![1.0]]));
        let request = &server.received_requests().await.unwrap()[0];
        assert!(
            request.headers.get("authorization").is_none(),
            "no bearer key on Azure"
        );
    }

    #[tokio::test]
    async fn embeddings_come_back_in_input_order() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/embeddings"))
            .and(body_partial_json(
                serde_json::json!({"model": "text-embed", "input": ["a", "b"]}),
            ))
            .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
                "object": "list",
                "data": [
                    {"object": "embedding", "index": 1, "embedding": [0.0, 1.0]},
                    {"object": "embedding", "index": 0, "embedding": [1.0, 0.0]}
                ]
            })))
            .mount(&server)
            .await;
        let vectors = client(&server)
            .embeddings("text-embed", &["a".into(), "b".into()])
            .await
            .unwrap();
        assert_eq!(vectors, vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
    }

    #[tokio::test]
    async fn a_short_or_duplicated_answer_and_a_refusal_are_permanent_errors() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(body_partial_json(serde_json::json!({"model": "dup"})))
            .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
                "data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]
            })))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(body_partial_json(serde_json::json!({"model": "nope"})))
            .respond_with(ResponseTemplate::new(400).set_body_json(
                serde_json::json!({"error": {"message": "model nope does not exist"}}),
            ))
            .mount(&server)
            .await;
        let client = client(&server);
        let two = ["a".to_owned(), "b".to_owned()];
        assert_eq!(
            client.embeddings("dup", &two).await,
            Err(ProviderError::Permanent(
                "the upstream's answer does not hold one embedding per input (2 for 2)".into()
            ))
        );
        assert_eq!(
            client.embeddings("nope", &two).await,
            Err(ProviderError::Permanent("model nope does not exist".into()))
        );
    }
}

/// The Responses API spoken natively (`responses = true`): `POST
/// {base}/responses` (Azure: `{endpoint}/openai/v1/responses`, the
/// deployment named by the body's `model`), the body as given.
impl OpenAiClient {
    fn responses_url(&self, id: Option<&str>) -> String {
        let base = match &self.azure {
            None => self.upstream.url("responses"),
            // Azure serves the Responses API on its v1 surface only.
            Some(_) => self.upstream.url("openai/v1/responses"),
        };
        let Some(id) = id else {
            return base;
        };
        let Ok(mut url) = url::Url::parse(&base) else {
            return base;
        };
        if let Ok(mut segments) = url.path_segments_mut() {
            // Percent-encoded: an id is one segment.
            segments.push(id);
        }
        url.into()
    }

    async fn post_responses(&self, body: &serde_json::Value) -> Result<reqwest::Response, Attempt> {
        let url = self.responses_url(None);
        let response = self.upstream.send(|http| http.post(url).json(body)).await?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(status_failure(response).await)
        }
    }

    /// `POST {base}/responses` without streaming: the `response`.
    pub async fn responses(
        &self,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, ProviderError> {
        with_retries(|| async {
            let response = self.post_responses(body).await?;
            response.json::<serde_json::Value>().await.map_err(|err| {
                Attempt::permanent(format!(
                    "the upstream answered an unreadable response: {err}"
                ))
            })
        })
        .await
    }

    /// `POST {base}/responses` with `stream: true`: the typed events.
    pub async fn responses_stream(
        &self,
        body: &serde_json::Value,
    ) -> Result<ChunkStream, ProviderError> {
        let response = with_retries(|| self.post_responses(body)).await?;
        Ok(Box::pin(responses_events(crate::sse::events(
            response.bytes_stream(),
        ))))
    }

    /// `DELETE {base}/responses/{id}`; a 404 is not an error.
    pub async fn delete_response(&self, id: &str) -> Result<(), ProviderError> {
        let url = self.responses_url(Some(id));
        with_retries(|| async {
            let response = self.upstream.send(|http| http.delete(url.clone())).await?;
            if response.status().is_success() || response.status() == 404 {
                Ok(())
            } else {
                Err(status_failure(response).await)
            }
        })
        .await
    }
}

/// Whether a Responses stream event ends the response.
pub fn is_terminal_event(event: &serde_json::Value) -> bool {
    matches!(
        event["type"].as_str(),
        Some("response.completed" | "response.incomplete" | "response.failed")
    )
}

/// A Responses stream's events as JSON, ending after the terminal event;
/// an `error` event, or a stream that ends before a terminal event, is an
/// error that ends it.
fn responses_events(
    events: impl futures_util::Stream<Item = Result<crate::sse::Event, ProviderError>> + Send + 'static,
) -> impl futures_util::Stream<Item = Result<serde_json::Value, ProviderError>> + Send {
    use futures_util::StreamExt;
    let events = Box::pin(events);
    futures_util::stream::unfold((events, false), |(mut events, done)| async move {
        if done {
            return None;
        }
        loop {
            let item = match events.next().await {
                None => Err(ProviderError::Transient(
                    "the upstream stream ended before the response did".into(),
                )),
                Some(Err(err)) => Err(err),
                Some(Ok(event)) if event.data.trim() == "[DONE]" => Err(ProviderError::Transient(
                    "the upstream stream ended before the response did".into(),
                )),
                Some(Ok(event)) => match serde_json::from_str::<serde_json::Value>(&event.data) {
                    Ok(data) if data["type"] == "error" => {
                        let message: String = data["message"]
                            .as_str()
                            .unwrap_or("the upstream stream failed")
                            .chars()
                            .take(200)
                            .collect();
                        Err(ProviderError::Transient(message))
                    }
                    Ok(data) => Ok(data),
                    Err(_) => {
                        tracing::debug!("skipping an unreadable stream event");
                        continue;
                    }
                },
            };
            let done = match &item {
                Ok(data) => is_terminal_event(data),
                Err(_) => true,
            };
            return Some((item, (events, done)));
        }
    })
}

impl crate::vendor::ResponsesUpstream for OpenAiClient {
    fn responses<'a>(
        &'a self,
        body: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<serde_json::Value, ProviderError>> {
        Box::pin(OpenAiClient::responses(self, body))
    }

    fn responses_stream<'a>(
        &'a self,
        body: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        Box::pin(OpenAiClient::responses_stream(self, body))
    }

    fn delete_response<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(OpenAiClient::delete_response(self, id))
    }
}

#[cfg(test)]
mod responses_tests {
    use futures_util::StreamExt;
    use serde_json::json;
    use unigen_core::config::UpstreamSettings;

    use super::*;

    fn settings(base_url: &str) -> UpstreamSettings {
        UpstreamSettings {
            base_url: base_url.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_responses_endpoint_is_under_the_base_url_and_azures_v1_surface() {
        let openai = OpenAiClient::new(&settings("https://api.openai.com/v1/"));
        assert_eq!(
            openai.responses_url(None),
            "https://api.openai.com/v1/responses"
        );
        assert_eq!(
            openai.responses_url(Some("resp_a/b")),
            "https://api.openai.com/v1/responses/resp_a%2Fb"
        );
        let azure = OpenAiClient::azure(&settings("https://r.openai.azure.com"));
        assert_eq!(
            azure.responses_url(None),
            "https://r.openai.azure.com/openai/v1/responses"
        );
    }

    #[tokio::test]
    async fn a_responses_stream_ends_at_its_terminal_event_and_an_error_event_fails_it() {
        let frame = |event: serde_json::Value| {
            Ok::<_, reqwest::Error>(
                format!(
                    "event: {}\ndata: {event}\n\n",
                    event["type"].as_str().unwrap()
                )
                .into_bytes(),
            )
        };
        let parts = vec![
            frame(json!({"type": "response.created", "sequence_number": 0})),
            frame(json!({"type": "response.completed", "sequence_number": 1})),
            frame(json!({"type": "response.created", "sequence_number": 2})),
        ];
        let events: Vec<_> =
            responses_events(crate::sse::events(futures_util::stream::iter(parts)))
                .collect()
                .await;
        let numbers: Vec<u64> = events
            .iter()
            .map(|e| e.as_ref().unwrap()["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(numbers, [0, 1], "nothing after the terminal event");

        let parts = vec![
            frame(json!({"type": "response.created", "sequence_number": 0})),
            frame(
                json!({"type": "error", "code": "server_error", "message": "boom", "sequence_number": 1}),
            ),
        ];
        let events: Vec<_> =
            responses_events(crate::sse::events(futures_util::stream::iter(parts)))
                .collect()
                .await;
        assert_eq!(events.len(), 2);
        assert!(matches!(&events[1], Err(ProviderError::Transient(m)) if m == "boom"));

        let cut = vec![frame(
            json!({"type": "response.created", "sequence_number": 0}),
        )];
        let events: Vec<_> = responses_events(crate::sse::events(futures_util::stream::iter(cut)))
            .collect()
            .await;
        assert!(events[1].is_err(), "a stream cut short is an error");
    }
}
