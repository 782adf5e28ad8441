//! Adapter for ElevenLabs (`https://api.elevenlabs.io`, the key sent in
//! `xi-api-key`): text to speech, instant voice cloning (and deleting the
//! clone again) and speech to text (Scribe).
//!
//! - `POST /v1/text-to-speech/{voice_id}?output_format=...` with a JSON body
//!   answers the audio bytes.
//! - `POST /v1/voices/add` (multipart: `name`, `files`) answers the new
//!   clone's `voice_id`; `DELETE /v1/voices/{voice_id}` removes it.
//! - `POST /v1/speech-to-text` (multipart: `file`, `model_id`, ...) answers
//!   the text and its tokens (words, spacing, audio events) with their
//!   timing and speaker; our segments are built from the words.
//!
//! Clones: one per (tenant, model, sample), recorded through the call's
//! [`crate::vendor::CloneStore`] (Postgres in the worker) so they outlive a
//! process; a lock per clone key (not one for all) is held while one is
//! looked up, made and recorded. At the tenant's cap
//! (`voices.max_clones_per_org`) the least recently used are deleted
//! upstream first; clones idle past `voices.clone_idle_seconds` are deleted
//! after any speech request; without a store a clone is deleted right after
//! its request. A raw voice id passes only when it is one of the model's
//! `voices` or in `voices.allowed_voice_ids`: a clone's id must never let
//! another tenant speak with it.
//!
//! Voice ids go into the URL as one percent-encoded path segment and only
//! `[A-Za-z0-9_-]{1,64}` is accepted, both from callers and from ElevenLabs.
//! Failures are classified as for every HTTP adapter ([`crate::http`]):
//! 408/429/5xx and connection errors are retried, other 4xx are permanent
//! with ElevenLabs' short message (200 characters at most, any configured
//! key in it blanked out); bodies and keys never reach an error.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use sha2::{Digest, Sha256};
use unigen_core::audio::{self, AudioFormat};

use reqwest::multipart::{Form, Part};
use serde::Deserialize;
use serde_json::{Value, json};
use unigen_core::ProviderError;
use unigen_core::config::UpstreamSettings;
use unigen_core::params::transcription::{Segment, Transcript, Word};

use crate::http::{self, Attempt, connection_failure, with_retries};
use crate::upstream::{Auth, Upstream};
use crate::vendor::{SpeechCall, SpeechUpstream, TranscribeOptions, TranscriptionUpstream};

/// The longest upstream message an error keeps.
const MAX_MESSAGE_CHARS: usize = 200;
/// The longest voice id accepted.
const MAX_VOICE_ID_CHARS: usize = 64;
/// A silence longer than this between two words starts a new segment.
const SEGMENT_PAUSE_SECONDS: f64 = 1.0;
/// Idle clones deleted upstream per speech request, at most.
const IDLE_SWEEP_BATCH: u32 = 8;
/// Keys shorter than this are not searched for in error messages (they
/// would blank out ordinary words; real ElevenLabs keys are much longer).
const MIN_REDACTED_KEY_CHARS: usize = 8;

/// An ElevenLabs upstream; cheap to clone.
#[derive(Clone)]
pub struct ElevenLabsClient {
    upstream: Upstream,
    /// The configured keys, only to blank them out of upstream messages.
    keys: Arc<[String]>,
    /// One lock per clone key, held while that clone is looked up, made and
    /// recorded: two requests with one sample make one voice, and requests
    /// with other samples are not held up. Unused locks drop out.
    clone_locks: Arc<std::sync::Mutex<HashMap<CloneKey, Weak<tokio::sync::Mutex<()>>>>>,
}

/// Tenant, catalogue model, SHA-256 of the sample.
type CloneKey = (String, String, [u8; 32]);

/// One text-to-speech call.
pub struct SpeechRequest<'a> {
    pub voice_id: &'a str,
    pub model_id: &'a str,
    pub text: &'a str,
    /// ElevenLabs' `output_format` (`mp3_44100_128`, `pcm_24000`...); see
    /// [`output_format`].
    pub output_format: &'a str,
    /// `voice_settings.speed`, when set.
    pub speed: Option<f64>,
}

/// One speech-to-text call.
pub struct TranscribeRequest<'a> {
    /// `scribe_v1`...
    pub model_id: &'a str,
    /// An ISO 639-1 or 639-3 code; `None` (or `auto`) lets ElevenLabs detect it.
    pub language: Option<&'a str>,
    /// Ask for speakers; segments then carry them and split where they change.
    pub diarize: bool,
    /// Report the words with their timing (per segment and for the whole).
    pub words: bool,
}

impl SpeechUpstream for ElevenLabsClient {
    fn speak<'a>(
        &'a self,
        call: &'a SpeechCall<'a>,
    ) -> BoxFuture<'a, Result<Vec<u8>, ProviderError>> {
        Box::pin(self.speak_call(call))
    }
}

impl TranscriptionUpstream for ElevenLabsClient {
    /// Scribe: words, speakers; no translation, prompt or temperature.
    fn transcribe<'a>(
        &'a self,
        audio: Vec<u8>,
        filename: &'a str,
        options: &'a TranscribeOptions<'a>,
    ) -> BoxFuture<'a, Result<Transcript, ProviderError>> {
        Box::pin(async move {
            if options.translate {
                return Err(ProviderError::Permanent(
                    "this model transcribes only; it does not translate".into(),
                ));
            }
            let request = TranscribeRequest {
                model_id: options.model,
                language: options.language,
                diarize: options.diarization,
                words: options.words,
            };
            ElevenLabsClient::transcribe(self, audio, filename, &request).await
        })
    }
}

/// ElevenLabs' `output_format` for one of our audio formats. Our `pcm` is
/// raw 24 kHz 16-bit mono. `wav`, `aac` and `flac` have none: the caller
/// converts from `pcm` (see [`SpeechUpstream`]'s implementation).
pub fn output_format(ours: &str) -> Option<&'static str> {
    match ours.to_ascii_lowercase().as_str() {
        "mp3" => Some("mp3_44100_128"),
        "opus" => Some("opus_48000_128"),
        "pcm" => Some("pcm_24000"),
        _ => None,
    }
}

#[derive(Deserialize)]
struct AddedVoice {
    voice_id: String,
    #[serde(default)]
    requires_verification: bool,
}

/// Scribe's answer (single channel).
#[derive(Deserialize)]
struct SpeechToText {
    #[serde(default)]
    text: String,
    #[serde(default)]
    language_code: Option<String>,
    #[serde(default)]
    words: Option<Vec<Token>>,
}

/// One of Scribe's tokens: a word, the spacing between words, or an audio
/// event such as `(laughter)`.
#[derive(Deserialize)]
struct Token {
    #[serde(default)]
    text: String,
    #[serde(default)]
    start: Option<f64>,
    #[serde(default)]
    end: Option<f64>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    speaker_id: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TokenKind {
    Word,
    Spacing,
    AudioEvent,
}

impl Token {
    fn kind(&self) -> TokenKind {
        match self.kind.as_deref() {
            _ if self.text.trim().is_empty() => TokenKind::Spacing,
            None | Some("word") => TokenKind::Word,
            Some("spacing") => TokenKind::Spacing,
            // `audio_event` and any kind added later: text, not a word.
            Some(_) => TokenKind::AudioEvent,
        }
    }
}

impl ElevenLabsClient {
    pub fn new(settings: &UpstreamSettings) -> Self {
        Self {
            upstream: Upstream::new(settings, Auth::Header("xi-api-key"), &[]),
            keys: settings.keys().into(),
            clone_locks: Arc::default(),
        }
    }

    /// The lock of one clone key (made on first use, dropped with its
    /// last holder).
    fn clone_lock(&self, key: CloneKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .clone_locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(lock) = locks.get(&key).and_then(Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, lock| lock.strong_count() > 0);
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(key, Arc::downgrade(&lock));
        lock
    }

    /// The voice cloned from `sample` for the call's tenant and model, and
    /// whether it is to be deleted right after this request. It is
    /// recorded in the call's [`CloneStore`] and reused from there; at the
    /// tenant's cap the least recently used clones are deleted first.
    /// Without a store (or with a cap of 0) the clone lives for this
    /// request only.
    async fn cloned_voice(
        &self,
        call: &SpeechCall<'_>,
        sample: &[u8],
        extension: &str,
    ) -> Result<(String, bool), ProviderError> {
        let (tenant, model) = (call.tenant, call.model.id.as_str());
        let digest: [u8; 32] = Sha256::digest(sample).into();
        let name = format!("unigen-{tenant}-{}", &hex::encode(digest)[..12]);
        let filename = format!("sample.{extension}");
        let cap = call.voices.max_clones_per_org;
        let Some(store) = call.clones.filter(|_| cap > 0) else {
            let id = self.add_voice(&name, sample.to_vec(), &filename).await?;
            return Ok((id, true));
        };
        let lock = self.clone_lock((tenant.to_owned(), model.to_owned(), digest));
        let _held = lock.lock().await;
        if let Some(id) = store.touch(tenant, model, &digest).await? {
            return Ok((id, false));
        }
        // Room for this one: the least recently used past the cap go first.
        self.delete_all(store.take_least_recent(tenant, cap - 1).await?)
            .await;
        let id = self.add_voice(&name, sample.to_vec(), &filename).await?;
        match store.record(tenant, model, &digest, &id).await {
            Ok(Some(standing)) if standing == id => {
                // Another process may have made one meanwhile: the cap holds.
                self.delete_all(store.take_least_recent(tenant, cap).await?)
                    .await;
                Ok((id, false))
            }
            Ok(Some(standing)) => {
                // Another process recorded a clone of this sample first.
                self.delete_all(vec![id]).await;
                Ok((standing, false))
            }
            Ok(None) => Ok((id, true)),
            Err(err) => {
                self.delete_all(vec![id]).await;
                Err(err)
            }
        }
    }

    /// Deletes voices upstream; a failure is logged (the voice leaks).
    async fn delete_all(&self, voice_ids: Vec<String>) {
        for voice_id in voice_ids {
            if let Err(err) = self.delete_voice(&voice_id).await {
                tracing::warn!(%voice_id, error = %err, "a cloned voice could not be deleted upstream");
            }
        }
    }

    /// The voice a request names: a name in the model's `voices` (mapped),
    /// one of the ids they map to, or an id the operator allows
    /// (`voices.allowed_voice_ids`). Any other id is refused: it could be
    /// another tenant's clone.
    fn named_voice(call: &SpeechCall<'_>) -> Result<String, ProviderError> {
        let voices = &call.model.voices;
        if let Some(id) = voices.get(call.voice) {
            return Ok(id.clone());
        }
        let allowed = voices.values().any(|id| id == call.voice)
            || call
                .voices
                .allowed_voice_ids
                .iter()
                .any(|id| id == call.voice);
        if allowed {
            return Ok(call.voice.to_owned());
        }
        let mut names: Vec<&str> = voices.keys().map(String::as_str).collect();
        names.sort_unstable();
        Err(ProviderError::Permanent(format!(
            "voice `{}` is not available on this model; its voices: {}",
            call.voice.chars().take(64).collect::<String>(),
            if names.is_empty() {
                "none (give a reference sample)".to_owned()
            } else {
                names.join(", ")
            }
        )))
    }

    /// A speech request: the model's `voices` name the voice (or an
    /// allowed raw id), or a clone of the reference sample; formats
    /// ElevenLabs does not produce are made from its 24 kHz PCM. Clones
    /// idle too long are deleted after it.
    async fn speak_call(&self, call: &SpeechCall<'_>) -> Result<Vec<u8>, ProviderError> {
        let (voice_id, delete_after) = match call.reference {
            Some((sample, extension)) => self.cloned_voice(call, sample, extension).await?,
            None => (Self::named_voice(call)?, false),
        };
        let spoken = self.speak_as(call, &voice_id).await;
        if delete_after {
            self.delete_all(vec![voice_id]).await;
        }
        if let Some(store) = call.clones {
            match store
                .take_idle(call.voices.clone_idle_seconds, IDLE_SWEEP_BATCH)
                .await
            {
                Ok(idle) => self.delete_all(idle).await,
                Err(err) => tracing::warn!(error = %err, "idle cloned voices not swept"),
            }
        }
        spoken
    }

    /// Speaks the call's text as `voice_id`, in the call's format.
    async fn speak_as(
        &self,
        call: &SpeechCall<'_>,
        voice_id: &str,
    ) -> Result<Vec<u8>, ProviderError> {
        let model_id = call
            .model
            .upstream_model
            .as_deref()
            .unwrap_or(&call.model.id);
        let native = output_format(call.response_format);
        let bytes = self
            .speech(&SpeechRequest {
                voice_id,
                model_id,
                text: call.text,
                output_format: native.unwrap_or("pcm_24000"),
                speed: (call.speed != 1.0).then_some(call.speed),
            })
            .await?;
        if native.is_some() {
            return Ok(bytes);
        }
        let format = AudioFormat::from_name(call.response_format).ok_or_else(|| {
            ProviderError::Permanent(format!("unknown audio format {}", call.response_format))
        })?;
        let samples: Vec<f32> = bytes
            .chunks_exact(2)
            .map(|pair| f32::from(i16::from_le_bytes([pair[0], pair[1]])) / 32768.0)
            .collect();
        audio::convert_wav(audio::encode_wav(&samples, 24_000), format).await
    }

    /// `POST {base}/v1/text-to-speech/{voice_id}?output_format=...`: the
    /// audio bytes in `output_format`.
    pub async fn speech(&self, request: &SpeechRequest<'_>) -> Result<Vec<u8>, ProviderError> {
        let format = request.output_format;
        let valid_format = !format.is_empty()
            && format.len() <= 32
            && format
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid_format {
            return Err(ProviderError::Permanent(format!(
                "`{}` is not an ElevenLabs output format",
                format.chars().take(32).collect::<String>()
            )));
        }
        let mut url = self.voice_url("v1/text-to-speech", request.voice_id)?;
        url.query_pairs_mut().append_pair("output_format", format);
        let mut body = json!({ "text": request.text, "model_id": request.model_id });
        if let Some(speed) = request.speed {
            if !speed.is_finite() {
                return Err(ProviderError::Permanent(
                    "the speech speed must be a finite number".into(),
                ));
            }
            body["voice_settings"] = json!({ "speed": speed });
        }
        let audio = with_retries(|| async {
            let response = self
                .upstream
                .send(|http| http.post(url.clone()).json(&body))
                .await?;
            if !response.status().is_success() {
                return Err(self.failure(response).await);
            }
            response
                .bytes()
                .await
                .map(|b| b.to_vec())
                .map_err(connection_failure)
        })
        .await?;
        if audio.is_empty() {
            return Err(ProviderError::Permanent(
                "ElevenLabs answered no audio".into(),
            ));
        }
        Ok(audio)
    }

    /// `POST {base}/v1/voices/add`: an instant clone from one sample; its
    /// `voice_id`. A clone ElevenLabs says needs verification is returned
    /// all the same (with a warning in the log).
    pub async fn add_voice(
        &self,
        name: &str,
        sample: Vec<u8>,
        filename: &str,
    ) -> Result<String, ProviderError> {
        let name = name.trim();
        if name.is_empty() {
            return Err(ProviderError::Permanent(
                "a cloned voice needs a name".into(),
            ));
        }
        if sample.is_empty() {
            return Err(ProviderError::Permanent("the voice sample is empty".into()));
        }
        let url = self.upstream.url("v1/voices/add");
        let added = with_retries(|| async {
            // A form is not `Clone`: each attempt builds its own.
            let form = Form::new()
                .text("name", name.to_owned())
                .part("files", audio_part(sample.clone(), filename));
            let response = self
                .upstream
                .send(|http| http.post(url.as_str()).multipart(form))
                .await?;
            self.read_json::<AddedVoice>(response).await
        })
        .await?;
        if !valid_voice_id(&added.voice_id) {
            return Err(ProviderError::Permanent(
                "ElevenLabs answered a voice id that is not valid".into(),
            ));
        }
        if added.requires_verification {
            tracing::warn!(
                voice_id = %added.voice_id,
                "ElevenLabs says the cloned voice requires verification"
            );
        }
        Ok(added.voice_id)
    }

    /// `DELETE {base}/v1/voices/{voice_id}`. A voice ElevenLabs no longer
    /// has (404) counts as deleted.
    pub async fn delete_voice(&self, voice_id: &str) -> Result<(), ProviderError> {
        let url = self.voice_url("v1/voices", voice_id)?;
        with_retries(|| async {
            let response = self.upstream.send(|http| http.delete(url.clone())).await?;
            let status = response.status();
            if status.is_success() || status == reqwest::StatusCode::NOT_FOUND {
                Ok(())
            } else {
                Err(self.failure(response).await)
            }
        })
        .await
    }

    /// `POST {base}/v1/speech-to-text` with word timestamps: the text, the
    /// language (an ISO 639-1 code where one exists), the duration (the end
    /// of the last word) and segments built from the words.
    pub async fn transcribe(
        &self,
        audio: Vec<u8>,
        filename: &str,
        request: &TranscribeRequest<'_>,
    ) -> Result<Transcript, ProviderError> {
        if audio.is_empty() {
            return Err(ProviderError::Permanent("the audio is empty".into()));
        }
        let language = request
            .language
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.eq_ignore_ascii_case("auto"));
        let url = self.upstream.url("v1/speech-to-text");
        let answer = with_retries(|| async {
            let mut form = Form::new()
                .part("file", audio_part(audio.clone(), filename))
                .text("model_id", request.model_id.to_owned())
                .text("diarize", request.diarize.to_string())
                // Segments are built from the words: their timing is needed
                // even when the caller does not want them reported.
                .text("timestamps_granularity", "word")
                .text("tag_audio_events", "false");
            if let Some(language) = language {
                form = form.text("language_code", language.to_owned());
            }
            let response = self
                .upstream
                .send(|http| http.post(url.as_str()).multipart(form))
                .await?;
            self.read_json::<SpeechToText>(response).await
        })
        .await?;
        Ok(into_transcript(answer, request, language))
    }

    /// `{base}/{collection}/{voice_id}`, the id checked and percent-encoded
    /// as one path segment.
    fn voice_url(&self, collection: &str, voice_id: &str) -> Result<url::Url, ProviderError> {
        if !valid_voice_id(voice_id) {
            return Err(ProviderError::Permanent(format!(
                "a voice id is 1 to {MAX_VOICE_ID_CHARS} letters, digits, `_` or `-`"
            )));
        }
        let unusable = || ProviderError::Permanent("the ElevenLabs base URL is not usable".into());
        let mut url = url::Url::parse(&self.upstream.url(collection)).map_err(|_| unusable())?;
        url.path_segments_mut()
            .map_err(|()| unusable())?
            .pop_if_empty()
            .push(voice_id);
        Ok(url)
    }

    async fn read_json<T: serde::de::DeserializeOwned>(
        &self,
        response: reqwest::Response,
    ) -> Result<T, Attempt> {
        if !response.status().is_success() {
            return Err(self.failure(response).await);
        }
        response.json::<T>().await.map_err(|err| {
            if err.is_decode() {
                Attempt::permanent("ElevenLabs answered an unreadable response")
            } else {
                connection_failure(err)
            }
        })
    }

    /// A non-success answer, with ElevenLabs' short message as the
    /// explanation and any configured key blanked out of it.
    async fn failure(&self, response: reqwest::Response) -> Attempt {
        let keys = Arc::clone(&self.keys);
        http::status_failure(response, move |body| {
            error_message(body).map(|message| redact(message, &keys))
        })
        .await
    }
}

/// `[A-Za-z0-9_-]{1,64}`.
fn valid_voice_id(id: &str) -> bool {
    (1..=MAX_VOICE_ID_CHARS).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// ElevenLabs' explanation in an error body: `detail.message` (else
/// `detail.status`), a `detail` string, the first validation error's `msg`,
/// or a top-level `message`; cut to [`MAX_MESSAGE_CHARS`].
fn error_message(body: &Value) -> Option<String> {
    let detail = &body["detail"];
    let text = detail["message"]
        .as_str()
        .or_else(|| detail["status"].as_str())
        .or_else(|| detail.as_str())
        .or_else(|| detail[0]["msg"].as_str())
        .or_else(|| body["message"].as_str())?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.chars().take(MAX_MESSAGE_CHARS).collect())
}

fn redact(mut message: String, keys: &[String]) -> String {
    for key in keys {
        if key.len() >= MIN_REDACTED_KEY_CHARS && message.contains(key.as_str()) {
            message = message.replace(key.as_str(), "[redacted]");
        }
    }
    message
}

/// The audio as a multipart file, typed by its extension when known.
fn audio_part(bytes: Vec<u8>, filename: &str) -> Part {
    let filename = if filename.trim().is_empty() {
        "audio"
    } else {
        filename
    };
    let part = Part::bytes(bytes).file_name(filename.to_owned());
    match audio_mime(filename) {
        Some(mime) => part.mime_str(mime).expect("a valid MIME type"),
        None => part,
    }
}

fn audio_mime(filename: &str) -> Option<&'static str> {
    let (_, extension) = filename.rsplit_once('.')?;
    Some(match extension.to_ascii_lowercase().as_str() {
        "mp3" | "mpga" | "mpeg" => "audio/mpeg",
        "wav" | "wave" => "audio/wav",
        "flac" => "audio/flac",
        "ogg" | "oga" => "audio/ogg",
        "opus" => "audio/opus",
        "webm" => "audio/webm",
        "m4a" => "audio/mp4",
        "mp4" => "video/mp4",
        "aac" => "audio/aac",
        _ => return None,
    })
}

/// A segment being built from consecutive tokens.
struct OpenSegment {
    start: f64,
    end: f64,
    text: String,
    speaker: Option<String>,
    words: Vec<Word>,
    /// The last word ended a sentence.
    sentence_ended: bool,
}

impl OpenSegment {
    fn close(self, with_words: bool) -> Segment {
        Segment {
            start: self.start,
            end: self.end,
            text: self.text.trim().to_owned(),
            speaker: self.speaker,
            words: with_words.then_some(self.words),
            decoding: None,
        }
    }
}

/// Our speaker labels (`SPEAKER_00`, as the other adapters answer) for
/// Scribe's `speaker_0`; another form is kept as it is.
fn speaker_label(id: &str) -> String {
    id.strip_prefix("speaker_")
        .and_then(|n| n.parse::<u32>().ok())
        .map_or_else(|| id.to_owned(), |n| format!("SPEAKER_{n:02}"))
}

/// Segments from Scribe's tokens: a new one at each speaker change (when
/// diarizing), after a word ending a sentence, and after a pause of more
/// than [`SEGMENT_PAUSE_SECONDS`]. Spacing and audio events are part of a
/// segment's text but are not words.
fn into_transcript(
    answer: SpeechToText,
    request: &TranscribeRequest<'_>,
    requested_language: Option<&str>,
) -> Transcript {
    let mut segments = Vec::new();
    let mut all_words = Vec::new();
    let mut open: Option<OpenSegment> = None;
    let mut last_end = 0.0_f64;
    for token in answer.words.unwrap_or_default() {
        let kind = token.kind();
        if kind == TokenKind::Spacing {
            if let Some(segment) = open.as_mut() {
                segment.text.push_str(&token.text);
            }
            continue;
        }
        let start = token.start.filter(|s| s.is_finite()).unwrap_or(last_end);
        let end = token
            .end
            .filter(|e| e.is_finite())
            .unwrap_or(start)
            .max(start);
        let speaker = if request.diarize {
            token
                .speaker_id
                .filter(|s| !s.is_empty())
                .map(|s| speaker_label(&s))
        } else {
            None
        };
        let split = open.as_ref().is_some_and(|segment| {
            segment.sentence_ended
                || (speaker.is_some() && speaker != segment.speaker)
                || start - segment.end > SEGMENT_PAUSE_SECONDS
        });
        if split && let Some(segment) = open.take() {
            segments.push(segment.close(request.words));
        }
        let segment = open.get_or_insert_with(|| OpenSegment {
            start,
            end,
            text: String::new(),
            speaker,
            words: Vec::new(),
            sentence_ended: false,
        });
        segment.text.push_str(&token.text);
        segment.end = segment.end.max(end);
        if kind == TokenKind::Word {
            segment.sentence_ended = ends_sentence(&token.text);
            let word = Word {
                word: token.text.trim().to_owned(),
                start,
                end,
            };
            if request.words {
                all_words.push(word.clone());
            }
            segment.words.push(word);
        }
        last_end = last_end.max(end);
    }
    if let Some(segment) = open.take() {
        segments.push(segment.close(request.words));
    }
    let text = answer.text.trim().to_owned();
    let text = if text.is_empty() {
        segments
            .iter()
            .map(|s| s.text.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        text
    };
    if segments.is_empty() && !text.is_empty() {
        // No timing came back: the whole text as one untimed segment.
        segments.push(Segment {
            start: 0.0,
            end: 0.0,
            text: text.clone(),
            speaker: None,
            words: request.words.then(Vec::new),
            decoding: None,
        });
    }
    let language = answer
        .language_code
        .as_deref()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .or(requested_language)
        .map_or_else(|| "en".to_owned(), iso_639_1);
    Transcript {
        text,
        segments,
        language,
        duration: last_end,
        words: request.words.then_some(all_words),
    }
}

/// The word ends with `.`, `?` or `!` (or their CJK and ellipsis forms),
/// closing quotes and brackets aside.
fn ends_sentence(word: &str) -> bool {
    word.trim()
        .trim_end_matches(['"', '\'', '”', '’', '»', ')', ']'])
        .ends_with(['.', '?', '!', '…', '。', '？', '！'])
}

/// ISO 639-3 (and 639-2/B) codes with an ISO 639-1 equivalent.
const ISO_639_3_TO_1: &[(&str, &str)] = &[
    ("afr", "af"),
    ("amh", "am"),
    ("ara", "ar"),
    ("arb", "ar"),
    ("asm", "as"),
    ("aze", "az"),
    ("bak", "ba"),
    ("bel", "be"),
    ("ben", "bn"),
    ("bod", "bo"),
    ("bos", "bs"),
    ("bre", "br"),
    ("bul", "bg"),
    ("cat", "ca"),
    ("ces", "cs"),
    ("chi", "zh"),
    ("cmn", "zh"),
    ("cym", "cy"),
    ("cze", "cs"),
    ("dan", "da"),
    ("deu", "de"),
    ("dut", "nl"),
    ("ell", "el"),
    ("eng", "en"),
    ("est", "et"),
    ("eus", "eu"),
    ("fao", "fo"),
    ("fas", "fa"),
    ("fil", "tl"),
    ("fin", "fi"),
    ("fra", "fr"),
    ("fre", "fr"),
    ("ger", "de"),
    ("gle", "ga"),
    ("glg", "gl"),
    ("gre", "el"),
    ("guj", "gu"),
    ("hat", "ht"),
    ("hau", "ha"),
    ("heb", "he"),
    ("hin", "hi"),
    ("hrv", "hr"),
    ("hun", "hu"),
    ("hye", "hy"),
    ("ibo", "ig"),
    ("ind", "id"),
    ("isl", "is"),
    ("ita", "it"),
    ("jav", "jv"),
    ("jpn", "ja"),
    ("kan", "kn"),
    ("kat", "ka"),
    ("kaz", "kk"),
    ("khm", "km"),
    ("kir", "ky"),
    ("kor", "ko"),
    ("kur", "ku"),
    ("lao", "lo"),
    ("lat", "la"),
    ("lav", "lv"),
    ("lin", "ln"),
    ("lit", "lt"),
    ("ltz", "lb"),
    ("mal", "ml"),
    ("mar", "mr"),
    ("mkd", "mk"),
    ("mlg", "mg"),
    ("mlt", "mt"),
    ("mon", "mn"),
    ("mri", "mi"),
    ("msa", "ms"),
    ("mya", "my"),
    ("nep", "ne"),
    ("nld", "nl"),
    ("nno", "nn"),
    ("nob", "nb"),
    ("nor", "no"),
    ("oci", "oc"),
    ("ori", "or"),
    ("pan", "pa"),
    ("per", "fa"),
    ("pes", "fa"),
    ("pol", "pl"),
    ("por", "pt"),
    ("pus", "ps"),
    ("ron", "ro"),
    ("rum", "ro"),
    ("rus", "ru"),
    ("san", "sa"),
    ("sin", "si"),
    ("slk", "sk"),
    ("slv", "sl"),
    ("sna", "sn"),
    ("snd", "sd"),
    ("som", "so"),
    ("spa", "es"),
    ("sqi", "sq"),
    ("srp", "sr"),
    ("sun", "su"),
    ("swa", "sw"),
    ("swe", "sv"),
    ("tam", "ta"),
    ("tat", "tt"),
    ("tel", "te"),
    ("tgk", "tg"),
    ("tgl", "tl"),
    ("tha", "th"),
    ("tuk", "tk"),
    ("tur", "tr"),
    ("ukr", "uk"),
    ("urd", "ur"),
    ("uzb", "uz"),
    ("vie", "vi"),
    ("xho", "xh"),
    ("yid", "yi"),
    ("yor", "yo"),
    ("zho", "zh"),
    ("zsm", "ms"),
    ("zul", "zu"),
];

/// `fra` -> `fr`; any other code is kept, lowercased.
fn iso_639_1(code: &str) -> String {
    let lower = code.trim().to_ascii_lowercase();
    ISO_639_3_TO_1
        .iter()
        .find(|(three, _)| *three == lower)
        .map_or(lower, |(_, two)| (*two).to_owned())
}

#[cfg(test)]
mod tests;
