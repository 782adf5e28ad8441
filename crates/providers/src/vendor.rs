//! What a vendor adapter implements, per capability, and what it is asked
//! to do. Chat and embeddings speak OpenAI's wire format on our side of the
//! trait: an adapter for another vendor translates the request body, the
//! answer and the stream chunks, so the chat endpoint, the agents' turns,
//! metering and the SSE relay are the same for every vendor.

use futures_util::future::BoxFuture;
use serde_json::Value;
use unigen_core::ProviderError;
use unigen_core::config::{ModelEntry, VoiceSettings};
use unigen_core::domain::ModelCategory;
use unigen_core::params::transcription::Transcript;

/// A stream of chat completion chunks in OpenAI's shape
/// (`chat.completion.chunk`); an error ends it.
pub type ChunkStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Value, ProviderError>> + Send>>;

/// Chat completions, in OpenAI's wire format on both sides of the call.
pub trait ChatUpstream: Send + Sync {
    /// A whole `chat.completion` for an OpenAI request body (its `model` is
    /// the upstream's name for the model).
    fn chat<'a>(&'a self, body: &'a Value) -> BoxFuture<'a, Result<Value, ProviderError>>;

    /// The answer as chunks. Failures before the first chunk are retried;
    /// dropping the stream cancels the upstream request.
    fn chat_stream<'a>(
        &'a self,
        body: &'a Value,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>>;
}

/// Anthropic's Messages API spoken natively: the body, the answer and the
/// stream's events exactly as Anthropic defines them (no translation).
/// `headers` (`anthropic-version`, `anthropic-beta`) replace the adapter's.
pub trait MessagesUpstream: Send + Sync {
    /// The whole `message`.
    fn messages<'a>(
        &'a self,
        body: &'a Value,
        headers: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<Value, ProviderError>>;

    /// The stream's events (each event's JSON, `ping` included), ending
    /// after `message_stop`; an `error` event or a stream cut short is an
    /// error, after which it ends. Failures before the first event are
    /// retried.
    fn messages_stream<'a>(
        &'a self,
        body: &'a Value,
        headers: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>>;
}

/// OpenAI's Responses API spoken natively (an `openai` or `azure-openai`
/// upstream with `responses = true`): the body, the `response` and the
/// stream's typed events exactly as OpenAI defines them (no translation).
pub trait ResponsesUpstream: Send + Sync {
    /// The whole `response` (`POST {base}/responses`).
    fn responses<'a>(&'a self, body: &'a Value) -> BoxFuture<'a, Result<Value, ProviderError>>;

    /// The stream's events (each event's JSON), ending after the terminal
    /// `response.completed`, `response.incomplete` or `response.failed`; an
    /// `error` event or a stream cut short is an error, after which it
    /// ends. Failures before the first event are retried.
    fn responses_stream<'a>(
        &'a self,
        body: &'a Value,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>>;

    /// Deletes a response the upstream stored (`DELETE {base}/responses/{id}`);
    /// one it does not know is not an error.
    fn delete_response<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), ProviderError>>;
}

/// Embeddings: `body` is an OpenAI embeddings request of `inputs` inputs.
pub trait EmbeddingUpstream: Send + Sync {
    fn embed(&self, body: Value, inputs: usize)
    -> BoxFuture<'_, Result<Embeddings, ProviderError>>;
}

/// Options of one transcription call.
pub struct TranscribeOptions<'a> {
    pub model: &'a str,
    pub language: Option<&'a str>,
    pub words: bool,
    pub diarization: bool,
    pub translate: bool,
    /// Text guiding the style or vocabulary.
    pub prompt: Option<&'a str>,
    pub temperature: Option<f64>,
}

/// Speech to text: our transcript of `audio` (a file named `filename`).
pub trait TranscriptionUpstream: Send + Sync {
    fn transcribe<'a>(
        &'a self,
        audio: Vec<u8>,
        filename: &'a str,
        options: &'a TranscribeOptions<'a>,
    ) -> BoxFuture<'a, Result<Transcript, ProviderError>>;
}

/// One text-to-speech request.
pub struct SpeechCall<'a> {
    pub model: &'a ModelEntry,
    /// Whose request it is: a cloned voice belongs to one organization.
    pub tenant: &'a str,
    pub text: &'a str,
    pub voice: &'a str,
    pub speed: f64,
    /// Our format name (`mp3`, `opus`, `aac`, `flac`, `wav`, `pcm`).
    pub response_format: &'a str,
    /// A sample to speak like (voice cloning) and its file extension.
    pub reference: Option<(&'a [u8], &'a str)>,
    /// The raw voice ids allowed and the cloned voices' cap and idle time.
    pub voices: &'a VoiceSettings,
    /// Where cloned voices are recorded (Postgres, in the worker). Without
    /// one, a clone is deleted right after the request that made it.
    pub clones: Option<&'a dyn CloneStore>,
}

/// Cloned voices of a vendor that keeps them (ElevenLabs), recorded per
/// (tenant, catalogue model, SHA-256 of the sample). The `take_*` calls
/// remove the records they answer: the caller deletes those voices upstream.
pub trait CloneStore: Send + Sync {
    /// The recorded clone, its last use set to now.
    fn touch<'a>(
        &'a self,
        tenant: &'a str,
        model: &'a str,
        sample_sha256: &'a [u8; 32],
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>>;

    /// Records a clone just made; the voice that stands (another process's
    /// if it recorded one first), `None` when ours could not be recorded.
    fn record<'a>(
        &'a self,
        tenant: &'a str,
        model: &'a str,
        sample_sha256: &'a [u8; 32],
        voice_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>>;

    /// Takes out the tenant's clones beyond its `keep` most recently used.
    fn take_least_recent<'a>(
        &'a self,
        tenant: &'a str,
        keep: u32,
    ) -> BoxFuture<'a, Result<Vec<String>, ProviderError>>;

    /// Takes out at most `limit` clones (any tenant) unused for `idle_seconds`.
    fn take_idle(
        &self,
        idle_seconds: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<String>, ProviderError>>;
}

/// Text to speech: the audio in `response_format`.
pub trait SpeechUpstream: Send + Sync {
    fn speak<'a>(
        &'a self,
        call: &'a SpeechCall<'a>,
    ) -> BoxFuture<'a, Result<Vec<u8>, ProviderError>>;
}

/// One image-generation request.
pub struct ImageCall<'a> {
    /// The vendor's name for the model.
    pub model: &'a str,
    pub prompt: &'a str,
    pub negative_prompt: Option<&'a str>,
    pub n: u32,
    pub width: u32,
    pub height: u32,
    pub seed: u64,
    pub style: &'a str,
}

/// Image generation: the images' bytes as the vendor made them (any
/// format; the worker stores PNGs).
pub trait ImageUpstream: Send + Sync {
    fn generate<'a>(
        &'a self,
        call: &'a ImageCall<'a>,
    ) -> BoxFuture<'a, Result<Vec<Vec<u8>>, ProviderError>>;
}

/// Longest a media request (a prediction, a queued request) may run, and
/// the largest output file downloaded.
pub const MEDIA_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30 * 60);
pub const MEDIA_MAX_OUTPUT: usize = 512 * 1024 * 1024;

/// Image edits, video and music on a vendor that runs a request to its end
/// and answers output files (Replicate's predictions, fal's queue).
pub trait MediaUpstream: Send + Sync {
    /// Runs `input` on `model` (the vendor's name for it) and returns its
    /// first output file. Dropping the future (a cancelled job) cancels the
    /// request upstream.
    fn run_to_file<'a>(
        &'a self,
        model: &'a str,
        input: Value,
    ) -> BoxFuture<'a, Result<Vec<u8>, ProviderError>>;
}

/// Runs `work` in a task of its own, with a token that fires when the
/// returned future is dropped: a cancelled job's request is still cancelled
/// upstream (the task sees the token and cancels it), not abandoned.
pub(crate) async fn detached<T, F, Fut>(work: F) -> Result<T, ProviderError>
where
    F: FnOnce(tokio_util::sync::CancellationToken) -> Fut,
    Fut: Future<Output = Result<T, ProviderError>> + Send + 'static,
    T: Send + 'static,
{
    let cancel = tokio_util::sync::CancellationToken::new();
    let _cancel_on_drop = cancel.clone().drop_guard();
    tokio::spawn(work(cancel))
        .await
        .map_err(|e| ProviderError::Permanent(format!("the upstream request's task failed: {e}")))?
}

/// What a model may be asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    Chat,
    Embeddings,
    ImageGeneration,
    ImageEdit,
    Video,
    Speech,
    Transcription,
    /// Speech in any language to English text (`/audio/translations`).
    Translation,
    Music,
}

impl Capability {
    /// What a catalogue model is used for, from its category and capabilities.
    pub fn needed_by(model: &ModelEntry) -> Vec<Capability> {
        let has = |c: &str| model.capabilities.iter().any(|have| have == c);
        match model.category {
            ModelCategory::Chat => vec![Capability::Chat],
            ModelCategory::Embedding => vec![Capability::Embeddings],
            ModelCategory::Video => vec![Capability::Video],
            ModelCategory::Music => vec![Capability::Music],
            ModelCategory::Image => {
                let mut needed = Vec::new();
                if has("text_to_image") {
                    needed.push(Capability::ImageGeneration);
                }
                if has("image_edit") {
                    needed.push(Capability::ImageEdit);
                }
                needed
            }
            ModelCategory::Audio => {
                let mut needed = Vec::new();
                if has("text_to_speech") {
                    needed.push(Capability::Speech);
                }
                if has("speech_to_text") {
                    needed.push(Capability::Transcription);
                }
                needed
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Capability::Chat => "chat",
            Capability::Embeddings => "embeddings",
            Capability::ImageGeneration => "image generation",
            Capability::ImageEdit => "image edits",
            Capability::Video => "video",
            Capability::Speech => "text-to-speech",
            Capability::Transcription => "speech-to-text",
            Capability::Translation => "translation",
            Capability::Music => "music",
        }
    }
}

/// Vectors in input order, and the input tokens the upstream reported.
pub struct Embeddings {
    pub vectors: Vec<Vec<f32>>,
    pub prompt_tokens: Option<u32>,
}
