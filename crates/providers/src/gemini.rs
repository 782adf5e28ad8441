//! Adapter for Google's Gemini API (`adapter = "gemini"`): the native
//! Generative Language API (v1beta) behind our OpenAI wire format.
//!
//! Chat requests become `generateContent` requests (system prompts go into
//! `systemInstruction`, tool calls and their results into `functionCall` and
//! `functionResponse` parts), and the answers and stream chunks come back as
//! `chat.completion` and `chat.completion.chunk` objects. Embeddings use
//! `embedContent` for one input and `batchEmbedContents` for several, in
//! batches of at most 100 (Gemini's limit).
//!
//! Failures are classified as for every HTTP adapter ([`crate::http`]): only
//! Gemini's short `error.message` (200 characters at most) reaches an error.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt, TryStreamExt};
use serde_json::{Map, Value, json};
use unigen_core::ProviderError;
use unigen_core::config::UpstreamSettings;

use crate::http::{self, Attempt, connection_failure, with_retries};
use crate::upstream::{Auth, Upstream};
use crate::vendor::{ChatUpstream, ChunkStream, EmbeddingUpstream, Embeddings};

const API_VERSION: &str = "v1beta";
/// Gemini refuses a `batchEmbedContents` request of more.
const MAX_EMBEDDING_BATCH: usize = 100;
/// Embedding batches of one request in flight at once.
const EMBEDDING_BATCHES_IN_FLIGHT: usize = 4;
/// The longest upstream message an error keeps.
const MAX_MESSAGE_CHARS: usize = 200;
/// Google's documented stand-in signature for a function call Gemini did
/// not sign itself (a client that dropped the signature, history from
/// another model): Gemini 3 refuses a step whose first call is unsigned.
const UNSIGNED_CALL: &str = "skip_thought_signature_validator";

/// A Gemini upstream (`https://generativelanguage.googleapis.com`), the key
/// sent in `x-goog-api-key`.
pub struct GeminiClient {
    upstream: Upstream,
}

impl GeminiClient {
    pub fn new(settings: &UpstreamSettings) -> Self {
        Self {
            upstream: Upstream::new(settings, Auth::Header("x-goog-api-key"), &[]),
        }
    }

    /// `{base}/v1beta/{models|tunedModels}/{id}:{method}`, the id
    /// percent-encoded. A `base_url` that already names the API version is
    /// used as it is.
    fn endpoint(&self, model: &str, method: &str) -> String {
        let (collection, id) = model_resource(model);
        let id = url::form_urlencoded::byte_serialize(id.as_bytes())
            .collect::<String>()
            // The form encoding writes spaces as `+`; a path needs `%20`.
            .replace('+', "%20");
        let base = self.upstream.base_url();
        let version = if base.ends_with("/v1beta") || base.ends_with("/v1") {
            String::new()
        } else {
            format!("{API_VERSION}/")
        };
        self.upstream
            .url(&format!("{version}{collection}/{id}:{method}"))
    }

    async fn post(&self, url: &str, body: &Value) -> Result<reqwest::Response, Attempt> {
        self.upstream.send(|http| http.post(url).json(body)).await
    }

    /// `POST …:generateContent`: a whole `chat.completion`.
    async fn generate(&self, body: &Value) -> Result<Value, ProviderError> {
        let model = requested_model(body)?;
        let request = generate_request(body)?;
        let url = self.endpoint(model, "generateContent");
        let answer = with_retries(|| async {
            let response = self.post(&url, &request).await?;
            read_json(response).await
        })
        .await?;
        completion(&answer, model)
    }

    /// `POST …:streamGenerateContent?alt=sse`. Failures before the first
    /// byte are retried; once streaming, an error ends the stream. Dropping
    /// the stream closes the upstream connection.
    async fn generate_stream(&self, body: &Value) -> Result<ChunkStream, ProviderError> {
        let model = requested_model(body)?;
        let request = generate_request(body)?;
        let url = format!("{}?alt=sse", self.endpoint(model, "streamGenerateContent"));
        let response = with_retries(|| async {
            let response = self.post(&url, &request).await?;
            if response.status().is_success() {
                Ok(response)
            } else {
                Err(status_failure(response).await)
            }
        })
        .await?;
        Ok(chunk_stream(
            crate::sse::events(response.bytes_stream()),
            ChunkTranslator::new(model),
        ))
    }

    /// One vector per input, in input order.
    async fn embed_inputs(&self, body: Value, inputs: usize) -> Result<Embeddings, ProviderError> {
        let model = requested_model(&body)?;
        let texts = embedding_texts(&body["input"])?;
        let dimensions = body["dimensions"].as_u64();
        let vectors = if let [text] = texts.as_slice() {
            let request = embed_request(text, dimensions);
            let url = self.endpoint(model, "embedContent");
            let answer = with_retries(|| async {
                let response = self.post(&url, &request).await?;
                read_json(response).await
            })
            .await?;
            vec![vector(&answer["embedding"])]
        } else {
            let url = self.endpoint(model, "batchEmbedContents");
            let (collection, id) = model_resource(model);
            let name = format!("{collection}/{id}");
            let requests: Vec<(Value, usize)> = texts
                .chunks(MAX_EMBEDDING_BATCH)
                .map(|batch| {
                    let requests: Vec<Value> = batch
                        .iter()
                        .map(|text| {
                            let mut request = embed_request(text, dimensions);
                            request["model"] = json!(name);
                            request
                        })
                        .collect();
                    (json!({ "requests": requests }), batch.len())
                })
                .collect();
            // Collected, not a lazy `map`: the future stays `Send` (a closure
            // over borrowed items trips rustc's higher-ranked lifetime check).
            let batches: Vec<_> = requests
                .iter()
                .map(|(request, size)| self.embed_batch(&url, request, *size))
                .collect();
            futures_util::stream::iter(batches)
                .buffered(EMBEDDING_BATCHES_IN_FLIGHT)
                .try_collect::<Vec<_>>()
                .await?
                .into_iter()
                .flatten()
                .collect()
        };
        if vectors.len() != inputs || vectors.iter().any(Vec::is_empty) {
            return Err(not_one_per_input(vectors.len(), inputs));
        }
        Ok(Embeddings {
            vectors,
            prompt_tokens: None,
        })
    }

    /// `POST …:batchEmbedContents` with one batch of `size` inputs.
    async fn embed_batch(
        &self,
        url: &str,
        request: &Value,
        size: usize,
    ) -> Result<Vec<Vec<f32>>, ProviderError> {
        let answer = with_retries(|| async {
            let response = self.post(url, request).await?;
            read_json(response).await
        })
        .await?;
        let vectors: Vec<Vec<f32>> = answer["embeddings"]
            .as_array()
            .map(|items| items.iter().map(vector).collect())
            .unwrap_or_default();
        // A short batch would shift every later vector onto the wrong input.
        if vectors.len() == size {
            Ok(vectors)
        } else {
            Err(not_one_per_input(vectors.len(), size))
        }
    }
}

impl ChatUpstream for GeminiClient {
    fn chat<'a>(&'a self, body: &'a Value) -> BoxFuture<'a, Result<Value, ProviderError>> {
        Box::pin(self.generate(body))
    }

    fn chat_stream<'a>(
        &'a self,
        body: &'a Value,
    ) -> BoxFuture<'a, Result<ChunkStream, ProviderError>> {
        Box::pin(self.generate_stream(body))
    }
}

impl EmbeddingUpstream for GeminiClient {
    fn embed(
        &self,
        body: Value,
        inputs: usize,
    ) -> BoxFuture<'_, Result<Embeddings, ProviderError>> {
        Box::pin(self.embed_inputs(body, inputs))
    }
}

fn permanent(message: impl Into<String>) -> ProviderError {
    ProviderError::Permanent(message.into())
}

fn requested_model(body: &Value) -> Result<&str, ProviderError> {
    body["model"]
        .as_str()
        .filter(|model| !model.is_empty())
        .ok_or_else(|| permanent("the request names no model"))
}

/// The collection and id of a model name: `gemini-2.0-flash` and
/// `models/gemini-2.0-flash` are `models`, `tunedModels/x` a tuned model.
fn model_resource(model: &str) -> (&str, &str) {
    model
        .split_once('/')
        .filter(|(collection, _)| matches!(*collection, "models" | "tunedModels"))
        .unwrap_or(("models", model))
}

// ---------------------------------------------------------------------------
// OpenAI chat request → Gemini `generateContent` request
// ---------------------------------------------------------------------------

/// The `generateContent` request for an OpenAI chat request. Fields Gemini
/// has no counterpart for (`user`, `logprobs`, `stream_options`...) are
/// dropped.
fn generate_request(body: &Value) -> Result<Value, ProviderError> {
    let messages = body["messages"]
        .as_array()
        .ok_or_else(|| permanent("the request has no `messages`"))?;
    let (system, contents) = conversation(messages)?;
    let mut request = Map::new();
    if !system.is_empty() {
        request.insert(
            "systemInstruction".into(),
            json!({ "parts": [{ "text": system.join("\n\n") }] }),
        );
    }
    request.insert("contents".into(), Value::Array(contents));
    let declarations = function_declarations(&body["tools"])?;
    if !declarations.is_empty() {
        request.insert(
            "tools".into(),
            json!([{ "functionDeclarations": declarations }]),
        );
        if let Some(config) = function_calling_config(&body["tool_choice"]) {
            request.insert(
                "toolConfig".into(),
                json!({ "functionCallingConfig": config }),
            );
        }
    }
    let config = generation_config(body);
    if !config.is_empty() {
        request.insert("generationConfig".into(), Value::Object(config));
    }
    Ok(Value::Object(request))
}

/// The system instruction's texts and the turns (`contents`) of `messages`;
/// consecutive turns of one role are merged, as Gemini expects turns to
/// alternate.
fn conversation(messages: &[Value]) -> Result<(Vec<String>, Vec<Value>), ProviderError> {
    let mut system = Vec::new();
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    // OpenAI ties a tool result to its call by id, Gemini by function name.
    let mut call_names: HashMap<&str, &str> = HashMap::new();
    for (index, message) in messages.iter().enumerate() {
        let (role, parts) = match message["role"].as_str().unwrap_or_default() {
            "system" | "developer" => {
                let text = plain_text(&message["content"]);
                if !text.is_empty() {
                    system.push(text);
                }
                continue;
            }
            "user" => ("user", user_parts(&message["content"], index)?),
            "assistant" => ("model", model_parts(message, &mut call_names)),
            "tool" => {
                let id = message["tool_call_id"].as_str().unwrap_or_default();
                let name = call_names
                    .get(id)
                    .copied()
                    .or_else(|| message["name"].as_str())
                    .ok_or_else(|| {
                        permanent(format!(
                            "messages[{index}] answers tool call `{id}`, which no earlier assistant message made"
                        ))
                    })?;
                ("user", vec![function_response(name, &message["content"])])
            }
            // The legacy `functions` protocol names the function itself.
            "function" => {
                let name = message["name"].as_str().ok_or_else(|| {
                    permanent(format!(
                        "messages[{index}] is a function result without `name`"
                    ))
                })?;
                ("user", vec![function_response(name, &message["content"])])
            }
            other => {
                return Err(permanent(format!(
                    "messages[{index}] has the role `{other}`, which this provider does not take"
                )));
            }
        };
        if parts.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last_role, last_parts)) if *last_role == role => last_parts.extend(parts),
            _ => turns.push((role, parts)),
        }
    }
    let contents = turns
        .into_iter()
        .map(|(role, parts)| json!({ "role": role, "parts": parts }))
        .collect();
    Ok((system, contents))
}

/// The text of message content: a string, or its text parts joined.
fn plain_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|part| part["type"] == "text")
            .filter_map(|part| part["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A text part; none for empty text, which Gemini refuses.
fn text_part(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({ "text": text }))
}

fn user_parts(content: &Value, index: usize) -> Result<Vec<Value>, ProviderError> {
    match content {
        Value::Null => Ok(Vec::new()),
        Value::String(text) => Ok(text_part(text).into_iter().collect()),
        Value::Array(parts) => {
            let mut translated = Vec::with_capacity(parts.len());
            for part in parts {
                translated.extend(content_part(part, index)?);
            }
            Ok(translated)
        }
        _ => Err(permanent(format!(
            "messages[{index}].content must be a string or an array of parts"
        ))),
    }
}

/// One OpenAI content part of a user message.
fn content_part(part: &Value, index: usize) -> Result<Option<Value>, ProviderError> {
    match part["type"].as_str().unwrap_or_default() {
        "text" => Ok(text_part(part["text"].as_str().unwrap_or_default())),
        "image_url" => {
            let url = part["image_url"]["url"]
                .as_str()
                .or_else(|| part["image_url"].as_str())
                .unwrap_or_default();
            media_part(url, index).map(Some)
        }
        "input_audio" => {
            let audio = &part["input_audio"];
            let data = audio["data"].as_str().ok_or_else(|| {
                permanent(format!(
                    "messages[{index}] has an input_audio part without `data`"
                ))
            })?;
            let format = audio["format"].as_str().unwrap_or("wav");
            Ok(Some(inline_data(&format!("audio/{format}"), data)))
        }
        "file" => match part["file"]["file_data"].as_str() {
            Some(url) if url.starts_with("data:") => media_part(url, index).map(Some),
            _ => Err(permanent(format!(
                "messages[{index}] has a file part without inline `file_data`; this provider takes file contents only"
            ))),
        },
        other => Err(permanent(format!(
            "messages[{index}] has a `{other}` content part, which this provider does not take"
        ))),
    }
}

fn inline_data(mime_type: &str, data: &str) -> Value {
    json!({ "inlineData": { "mimeType": mime_type, "data": data } })
}

/// A `data:` URL as inline data, an http(s) URL as a file reference.
fn media_part(url: &str, index: usize) -> Result<Value, ProviderError> {
    if let Some(rest) = url.strip_prefix("data:") {
        let base64 = rest
            .split_once(',')
            .and_then(|(header, data)| Some((header.strip_suffix(";base64")?, data)));
        let Some((header, data)) = base64 else {
            return Err(permanent(format!(
                "messages[{index}] has a data URL that is not base64-encoded"
            )));
        };
        // `image/png;name=x` keeps only its type.
        let mime_type = header
            .split(';')
            .next()
            .filter(|mime| !mime.is_empty())
            .unwrap_or("application/octet-stream");
        return Ok(inline_data(mime_type, data));
    }
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    if matches!(scheme.as_deref(), Some("http" | "https")) {
        return Ok(json!({ "fileData": { "mimeType": mime_from_extension(url), "fileUri": url } }));
    }
    Err(permanent(format!(
        "messages[{index}] has an image that is neither a data URL nor an http(s) URL"
    )))
}

/// The media type a URL's file extension names; JPEG when it names none
/// Gemini takes.
fn mime_from_extension(url: &str) -> &'static str {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let file = path.rsplit('/').next().unwrap_or_default();
    let extension = file
        .rsplit_once('.')
        .map(|(_, extension)| extension.to_ascii_lowercase());
    match extension.as_deref() {
        Some("png") => "image/png",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("heic") => "image/heic",
        Some("heif") => "image/heif",
        Some("pdf") => "application/pdf",
        _ => "image/jpeg",
    }
}

/// An assistant message as a model turn: its text, then its tool calls.
fn model_parts<'a>(message: &'a Value, call_names: &mut HashMap<&'a str, &'a str>) -> Vec<Value> {
    let mut parts: Vec<Value> = text_part(&plain_text(&message["content"]))
        .into_iter()
        .collect();
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let name = call["function"]["name"].as_str().unwrap_or_default();
        if let Some(id) = call["id"].as_str() {
            call_names.insert(id, name);
        }
        // Where Gemini's OpenAI-compatible endpoint puts the signature, so a
        // client that echoes its tool calls back keeps it.
        let signature = call
            .pointer("/extra_content/google/thought_signature")
            .and_then(Value::as_str);
        parts.push(function_call_part(
            name,
            &call["function"]["arguments"],
            signature,
        ));
    }
    if let Some(call) = message.get("function_call").filter(|call| call.is_object()) {
        let name = call["name"].as_str().unwrap_or_default();
        parts.push(function_call_part(name, &call["arguments"], None));
    }
    if let Some(first_call) = parts
        .iter_mut()
        .find(|part| part.get("functionCall").is_some())
        && first_call.get("thoughtSignature").is_none()
    {
        first_call["thoughtSignature"] = json!(UNSIGNED_CALL);
    }
    parts
}

/// `arguments` (a JSON string) as the call's `args` object: `{}` when empty
/// or not an object, as Gemini takes objects only.
fn function_call_part(name: &str, arguments: &Value, signature: Option<&str>) -> Value {
    let args = match arguments {
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(object @ Value::Object(_)) => object,
            _ => json!({}),
        },
        Value::Object(_) => arguments.clone(),
        _ => json!({}),
    };
    let mut part = json!({ "functionCall": { "name": name, "args": args } });
    if let Some(signature) = signature {
        part["thoughtSignature"] = json!(signature);
    }
    part
}

/// A tool result: a JSON object as it is, anything else as `{"content": text}`
/// (Gemini's `response` must be an object).
fn function_response(name: &str, content: &Value) -> Value {
    let response = if content.is_object() {
        content.clone()
    } else {
        let text = plain_text(content);
        match serde_json::from_str::<Value>(&text) {
            Ok(object @ Value::Object(_)) => object,
            _ => json!({ "content": text }),
        }
    };
    json!({ "functionResponse": { "name": name, "response": response } })
}

/// OpenAI `tools` as Gemini function declarations. The parameters are JSON
/// Schema, which `parametersJsonSchema` takes as it is (`parameters` takes
/// an OpenAPI subset that refuses e.g. `additionalProperties`).
fn function_declarations(tools: &Value) -> Result<Vec<Value>, ProviderError> {
    let Some(tools) = tools.as_array() else {
        return Ok(Vec::new());
    };
    tools
        .iter()
        .enumerate()
        .map(|(index, tool)| {
            let kind = tool["type"].as_str().unwrap_or("function");
            if kind != "function" {
                return Err(permanent(format!(
                    "tools[{index}] is a `{kind}` tool; this provider takes function tools only"
                )));
            }
            let function = &tool["function"];
            let name = function["name"]
                .as_str()
                .ok_or_else(|| permanent(format!("tools[{index}] has no function name")))?;
            let mut declaration = json!({ "name": name });
            if let Some(description) = function["description"].as_str() {
                declaration["description"] = json!(description);
            }
            if function["parameters"].is_object() {
                declaration["parametersJsonSchema"] = function["parameters"].clone();
            }
            Ok(declaration)
        })
        .collect()
}

fn function_calling_config(tool_choice: &Value) -> Option<Value> {
    match tool_choice {
        Value::String(choice) => {
            let mode = match choice.as_str() {
                "auto" => "AUTO",
                "none" => "NONE",
                "required" => "ANY",
                _ => return None,
            };
            Some(json!({ "mode": mode }))
        }
        Value::Object(_) => {
            let name = tool_choice["function"]["name"].as_str()?;
            Some(json!({ "mode": "ANY", "allowedFunctionNames": [name] }))
        }
        _ => None,
    }
}

fn generation_config(body: &Value) -> Map<String, Value> {
    let mut config = Map::new();
    let number = |key: &str| body.get(key).filter(|value| value.is_number()).cloned();
    for (openai, gemini) in [
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("seed", "seed"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ] {
        if let Some(value) = number(openai) {
            config.insert(gemini.into(), value);
        }
    }
    if let Some(max) = number("max_completion_tokens").or_else(|| number("max_tokens")) {
        config.insert("maxOutputTokens".into(), max);
    }
    let stops: Vec<&str> = match &body["stop"] {
        Value::String(stop) => vec![stop.as_str()],
        Value::Array(stops) => stops.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !stops.is_empty() {
        config.insert("stopSequences".into(), json!(stops));
    }
    if let Some(n) = body["n"].as_u64().filter(|n| *n > 1) {
        config.insert("candidateCount".into(), json!(n));
    }
    let format = &body["response_format"];
    match format["type"].as_str() {
        Some("json_object") => {
            config.insert("responseMimeType".into(), json!("application/json"));
        }
        Some("json_schema") => {
            config.insert("responseMimeType".into(), json!("application/json"));
            let schema = &format["json_schema"]["schema"];
            if schema.is_object() {
                // JSON Schema as it is; `responseSchema` takes an OpenAPI subset.
                config.insert("responseJsonSchema".into(), schema.clone());
            }
        }
        _ => {}
    }
    config
}

// ---------------------------------------------------------------------------
// Gemini answers → OpenAI `chat.completion` and `chat.completion.chunk`
// ---------------------------------------------------------------------------

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// 24 random hex digits, for the ids Gemini does not give.
fn random_hex() -> String {
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: ids unique within the process will do.
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos()) as u64;
        bytes[..8].copy_from_slice(&nanos.to_le_bytes());
        bytes[8..].copy_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    }
    bytes
        .iter()
        .fold(String::with_capacity(24), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

fn response_id(answer: &Value) -> String {
    answer["responseId"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map_or_else(|| format!("chatcmpl-{}", random_hex()), str::to_owned)
}

fn finish_reason(reason: &str, has_tool_calls: bool) -> &'static str {
    if has_tool_calls {
        return "tool_calls";
    }
    match reason {
        "MAX_TOKENS" => "length",
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            "content_filter"
        }
        _ => "stop",
    }
}

/// What a candidate's parts say, in order: text and function calls
/// (thoughts are not part of the answer).
enum Piece {
    Text(String),
    /// An OpenAI `tool_calls[]` entry without its `index`.
    Call(Value),
}

fn pieces(parts: &Value) -> Vec<Piece> {
    let mut pieces = Vec::new();
    for part in parts.as_array().into_iter().flatten() {
        if part["thought"] == true {
            continue;
        }
        if part["functionCall"].is_object() {
            pieces.push(Piece::Call(tool_call(part)));
        } else if let Some(text) = part["text"].as_str().filter(|text| !text.is_empty()) {
            match pieces.last_mut() {
                Some(Piece::Text(previous)) => previous.push_str(text),
                _ => pieces.push(Piece::Text(text.to_owned())),
            }
        }
    }
    pieces
}

fn tool_call(part: &Value) -> Value {
    let call = &part["functionCall"];
    let arguments = if call["args"].is_object() {
        call["args"].to_string()
    } else {
        "{}".to_owned()
    };
    let mut tool_call = json!({
        "id": format!("call_{}", random_hex()),
        "type": "function",
        "function": { "name": call["name"].as_str().unwrap_or_default(), "arguments": arguments },
    });
    if let Some(signature) = part["thoughtSignature"].as_str() {
        tool_call["extra_content"] = json!({ "google": { "thought_signature": signature } });
    }
    tool_call
}

/// OpenAI `usage` from Gemini's `usageMetadata`; thinking counts as output.
fn usage(metadata: &Value) -> Option<Value> {
    if !metadata.is_object() {
        return None;
    }
    let count = |key: &str| metadata[key].as_u64().unwrap_or(0);
    let prompt = count("promptTokenCount");
    let thoughts = count("thoughtsTokenCount");
    let completion = count("candidatesTokenCount") + thoughts;
    let mut usage = json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    });
    if thoughts > 0 {
        usage["completion_tokens_details"] = json!({ "reasoning_tokens": thoughts });
    }
    if let Some(cached) = metadata["cachedContentTokenCount"].as_u64() {
        usage["prompt_tokens_details"] = json!({ "cached_tokens": cached });
    }
    Some(usage)
}

fn prompt_blocked(answer: &Value) -> bool {
    answer.pointer("/promptFeedback/blockReason").is_some()
}

/// A `generateContent` answer as a `chat.completion`.
fn completion(answer: &Value, requested_model: &str) -> Result<Value, ProviderError> {
    let candidates = answer["candidates"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let choices: Vec<Value> = if candidates.is_empty() {
        if !prompt_blocked(answer) {
            return Err(permanent("the upstream answered no candidates"));
        }
        vec![json!({
            "index": 0,
            "message": { "role": "assistant", "content": null },
            "logprobs": null,
            "finish_reason": "content_filter",
        })]
    } else {
        candidates.iter().enumerate().map(choice).collect()
    };
    let mut completion = json!({
        "id": response_id(answer),
        "object": "chat.completion",
        "created": unix_now(),
        "model": answer["modelVersion"].as_str().unwrap_or(requested_model),
        "choices": choices,
    });
    if let Some(usage) = usage(&answer["usageMetadata"]) {
        completion["usage"] = usage;
    }
    Ok(completion)
}

fn choice((position, candidate): (usize, &Value)) -> Value {
    let mut text: Option<String> = None;
    let mut calls = Vec::new();
    for piece in pieces(&candidate["content"]["parts"]) {
        match piece {
            Piece::Text(more) => text.get_or_insert_with(String::new).push_str(&more),
            Piece::Call(call) => calls.push(call),
        }
    }
    let reason = candidate["finishReason"].as_str().unwrap_or_default();
    let finish_reason = finish_reason(reason, !calls.is_empty());
    let mut message = json!({ "role": "assistant", "content": text });
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "index": candidate["index"].as_u64().unwrap_or(position as u64),
        "message": message,
        "logprobs": null,
        "finish_reason": finish_reason,
    })
}

/// Turns the responses of a Gemini stream into OpenAI chunks, keeping what
/// OpenAI's chunks carry across the stream (one id, call ordinals).
struct ChunkTranslator {
    /// Set from the first response.
    id: Option<String>,
    created: u64,
    model: String,
    /// Candidates whose role chunk was sent, with the calls each made.
    calls_by_candidate: HashMap<u64, usize>,
    finished: HashSet<u64>,
    usage: Option<Value>,
}

impl ChunkTranslator {
    fn new(model: &str) -> Self {
        Self {
            id: None,
            created: unix_now(),
            model: model.to_owned(),
            calls_by_candidate: HashMap::new(),
            finished: HashSet::new(),
            usage: None,
        }
    }

    fn chunk(&self, index: u64, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": index,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
        })
    }

    /// The role chunk, the first time a candidate speaks.
    fn start(&mut self, index: u64, chunks: &mut Vec<Value>) {
        if let Entry::Vacant(calls) = self.calls_by_candidate.entry(index) {
            calls.insert(0);
            chunks.push(self.chunk(index, json!({ "role": "assistant", "content": "" }), None));
        }
    }

    fn finish(&mut self, index: u64, reason: &'static str, chunks: &mut Vec<Value>) {
        if self.finished.insert(index) {
            chunks.push(self.chunk(index, json!({}), Some(reason)));
        }
    }

    /// The chunks of one streamed `GenerateContentResponse`.
    fn translate(&mut self, response: &Value) -> Vec<Value> {
        if self.id.is_none() {
            self.id = Some(response_id(response));
            if let Some(version) = response["modelVersion"].as_str() {
                self.model = version.to_owned();
            }
        }
        if let Some(usage) = usage(&response["usageMetadata"]) {
            self.usage = Some(usage);
        }
        let mut chunks = Vec::new();
        let candidates = response["candidates"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if candidates.is_empty() && prompt_blocked(response) {
            self.start(0, &mut chunks);
            self.finish(0, "content_filter", &mut chunks);
            return chunks;
        }
        for (position, candidate) in candidates.iter().enumerate() {
            let index = candidate["index"].as_u64().unwrap_or(position as u64);
            self.start(index, &mut chunks);
            for piece in pieces(&candidate["content"]["parts"]) {
                let delta = match piece {
                    Piece::Text(text) => json!({ "content": text }),
                    Piece::Call(mut call) => {
                        let ordinal = self.calls_by_candidate.entry(index).or_insert(0);
                        call["index"] = json!(*ordinal);
                        *ordinal += 1;
                        json!({ "tool_calls": [call] })
                    }
                };
                chunks.push(self.chunk(index, delta, None));
            }
            if let Some(reason) = candidate["finishReason"].as_str().filter(|r| !r.is_empty()) {
                let has_calls = self.calls_by_candidate.get(&index).is_some_and(|n| *n > 0);
                self.finish(index, finish_reason(reason, has_calls), &mut chunks);
            }
        }
        chunks
    }

    /// After the last response: the usage chunk, if Gemini reported usage.
    /// A stream that ends before every candidate finished was cut off.
    fn end(&self) -> Result<Option<Value>, ProviderError> {
        let all_finished = !self.calls_by_candidate.is_empty()
            && self
                .calls_by_candidate
                .keys()
                .all(|index| self.finished.contains(index));
        if !all_finished {
            return Err(ProviderError::Transient(
                "the upstream stream ended before the answer was finished".into(),
            ));
        }
        Ok(self.usage.clone().map(|usage| {
            json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage,
            })
        }))
    }
}

/// The error an SSE payload reports (`{"error": {...}}`), if it is one.
fn stream_error(payload: &Value) -> Option<ProviderError> {
    let error = payload.get("error").filter(|error| error.is_object())?;
    let message = short_message(payload).unwrap_or_else(|| "no reason given".into());
    let transient = matches!(error["code"].as_u64(), Some(408 | 429 | 500..=599))
        || matches!(
            error["status"].as_str(),
            Some("UNAVAILABLE" | "INTERNAL" | "RESOURCE_EXHAUSTED" | "DEADLINE_EXCEEDED")
        );
    Some(if transient {
        ProviderError::Transient(format!("the upstream failed mid-stream: {message}"))
    } else {
        ProviderError::Permanent(message)
    })
}

/// The OpenAI chunks of a Gemini SSE stream, then the usage chunk; an error
/// (a broken connection, an error payload, a cut-off answer) ends it.
fn chunk_stream<S>(events: S, translator: ChunkTranslator) -> ChunkStream
where
    S: Stream<Item = Result<crate::sse::Event, ProviderError>> + Send + 'static,
{
    struct State<S> {
        events: std::pin::Pin<Box<S>>,
        translator: ChunkTranslator,
        pending: VecDeque<Value>,
        done: bool,
    }
    let state = State {
        events: Box::pin(events),
        translator,
        pending: VecDeque::new(),
        done: false,
    };
    Box::pin(futures_util::stream::unfold(
        state,
        |mut state| async move {
            loop {
                if let Some(chunk) = state.pending.pop_front() {
                    return Some((Ok(chunk), state));
                }
                if state.done {
                    return None;
                }
                match state.events.next().await {
                    Some(Ok(event)) => {
                        let data = event.data.trim();
                        if data.is_empty() {
                            continue;
                        }
                        let Ok(payload) = serde_json::from_str::<Value>(data) else {
                            tracing::debug!("skipping an unreadable Gemini stream event");
                            continue;
                        };
                        if let Some(error) = stream_error(&payload) {
                            state.done = true;
                            return Some((Err(error), state));
                        }
                        let chunks = state.translator.translate(&payload);
                        state.pending.extend(chunks);
                    }
                    Some(Err(error)) => {
                        state.done = true;
                        return Some((Err(error), state));
                    }
                    None => {
                        state.done = true;
                        match state.translator.end() {
                            Ok(usage) => state.pending.extend(usage),
                            Err(error) => return Some((Err(error), state)),
                        }
                    }
                }
            }
        },
    ))
}

// ---------------------------------------------------------------------------
// Embeddings
// ---------------------------------------------------------------------------

/// The texts of an OpenAI embeddings `input` (a string or strings).
fn embedding_texts(input: &Value) -> Result<Vec<&str>, ProviderError> {
    match input {
        Value::String(text) => Ok(vec![text.as_str()]),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|item| match item {
                Value::String(text) => Ok(text.as_str()),
                Value::Number(_) | Value::Array(_) => Err(permanent(
                    "this provider takes text input only, not token ids",
                )),
                _ => Err(permanent("every embeddings input must be a string")),
            })
            .collect(),
        _ => Err(permanent(
            "`input` must be a string or a non-empty array of strings",
        )),
    }
}

fn embed_request(text: &str, dimensions: Option<u64>) -> Value {
    let mut request = json!({ "content": { "parts": [{ "text": text }] } });
    if let Some(dimensions) = dimensions {
        request["outputDimensionality"] = json!(dimensions);
    }
    request
}

/// A `ContentEmbedding`'s values; empty when it holds none or not numbers.
fn vector(embedding: &Value) -> Vec<f32> {
    let values = embedding["values"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    // Narrowing to f32 is how every embedding is kept.
    let numbers: Option<Vec<f32>> = values
        .iter()
        .map(|v| v.as_f64().map(|v| v as f32))
        .collect();
    numbers.unwrap_or_default()
}

fn not_one_per_input(got: usize, inputs: usize) -> ProviderError {
    permanent(format!(
        "the upstream's answer does not hold one embedding per input ({got} for {inputs})"
    ))
}

// ---------------------------------------------------------------------------
// HTTP answers
// ---------------------------------------------------------------------------

async fn read_json(response: reqwest::Response) -> Result<Value, Attempt> {
    if !response.status().is_success() {
        return Err(status_failure(response).await);
    }
    response.json::<Value>().await.map_err(|err| {
        if err.is_decode() {
            Attempt::permanent("the upstream answered an unreadable response")
        } else {
            // The body broke off while being read.
            connection_failure(err)
        }
    })
}

/// Gemini's `error.message`, cut short.
fn short_message(body: &Value) -> Option<String> {
    body["error"]["message"]
        .as_str()
        .map(str::trim)
        .filter(|message| !message.is_empty())
        .map(|message| message.chars().take(MAX_MESSAGE_CHARS).collect())
}

/// A non-success answer, with Gemini's `error.message` as the explanation.
async fn status_failure(response: reqwest::Response) -> Attempt {
    http::status_failure(response, short_message).await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::StreamExt;
    use wiremock::matchers::{body_partial_json, header, method, path, query_param};
    use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

    use super::*;

    const KEY: &str = "gk-test";

    fn client(server: &MockServer) -> GeminiClient {
        GeminiClient::new(&UpstreamSettings {
            base_url: server.uri(),
            api_key: KEY.into(),
            timeout_seconds: 5,
            ..Default::default()
        })
    }

    async fn received_bodies(server: &MockServer) -> Vec<Value> {
        server
            .received_requests()
            .await
            .unwrap()
            .iter()
            .map(|request| serde_json::from_slice(&request.body).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn a_tool_calling_conversation_is_translated_both_ways() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1beta/models/gemini-2.0-flash:generateContent"))
            .and(header("x-goog-api-key", KEY))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "candidates": [{
                    "content": {"role": "model", "parts": [
                        {"functionCall": {"name": "get_weather", "args": {"city": "Paris", "day": "tomorrow"}},
                         "thoughtSignature": "sig-2"}
                    ]},
                    "finishReason": "STOP",
                    "index": 0
                }],
                "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 12,
                                  "thoughtsTokenCount": 8, "totalTokenCount": 60},
                "modelVersion": "gemini-2.0-flash-001",
                "responseId": "resp-1"
            })))
            .expect(1)
            .mount(&server)
            .await;
        let request = json!({
            "model": "gemini-2.0-flash",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
                {"role": "user", "content": [
                    {"type": "text", "text": "Weather in Paris, and the time?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
                ]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_abc", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
                     "extra_content": {"google": {"thought_signature": "sig-1"}}},
                    {"id": "call_def", "type": "function", "function": {"name": "get_time", "arguments": ""}}
                ]},
                {"role": "tool", "tool_call_id": "call_def", "content": "12:00"},
                {"role": "tool", "tool_call_id": "call_abc", "content": "{\"temp_c\":21}"}
            ],
            "tools": [
                {"type": "function", "function": {
                    "name": "get_weather", "description": "Current weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                   "required": ["city"], "additionalProperties": false}}},
                {"type": "function", "function": {"name": "get_time"}}
            ],
            "tool_choice": "required",
            "temperature": 0.2, "top_p": 0.9, "max_completion_tokens": 256, "max_tokens": 999,
            "stop": "END", "n": 1, "seed": 7, "presence_penalty": 0.5, "frequency_penalty": 0.25,
            "stream_options": {"include_usage": true}, "user": "u-1", "parallel_tool_calls": true
        });

        let answer = client(&server).chat(&request).await.unwrap();

        let sent = received_bodies(&server).await;
        assert_eq!(
            sent[0],
            json!({
                "systemInstruction": {"parts": [{"text": "You are terse.\n\nUse metric units."}]},
                "contents": [
                    {"role": "user", "parts": [
                        {"text": "Weather in Paris, and the time?"},
                        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}
                    ]},
                    {"role": "model", "parts": [
                        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                         "thoughtSignature": "sig-1"},
                        {"functionCall": {"name": "get_time", "args": {}}}
                    ]},
                    {"role": "user", "parts": [
                        {"functionResponse": {"name": "get_time", "response": {"content": "12:00"}}},
                        {"functionResponse": {"name": "get_weather", "response": {"temp_c": 21}}}
                    ]}
                ],
                "tools": [{"functionDeclarations": [
                    {"name": "get_weather", "description": "Current weather",
                     "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}},
                                              "required": ["city"], "additionalProperties": false}},
                    {"name": "get_time"}
                ]}],
                "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
                "generationConfig": {
                    "temperature": 0.2, "topP": 0.9, "maxOutputTokens": 256, "stopSequences": ["END"],
                    "seed": 7, "presencePenalty": 0.5, "frequencyPenalty": 0.25
                }
            })
        );

        assert_eq!(answer["id"], "resp-1");
        assert_eq!(answer["object"], "chat.completion");
        assert_eq!(answer["model"], "gemini-2.0-flash-001");
        assert!(answer["created"].as_u64().unwrap() > 1_700_000_000);
        let choice = &answer["choices"][0];
        assert_eq!(choice["index"], 0);
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["logprobs"], Value::Null);
        assert_eq!(choice["message"]["role"], "assistant");
        assert_eq!(choice["message"]["content"], Value::Null);
        let call = &choice["message"]["tool_calls"][0];
        assert!(call["id"].as_str().unwrap().starts_with("call_"), "{call}");
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "get_weather");
        let arguments = call["function"]["arguments"].as_str().unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(arguments).unwrap(),
            json!({"city": "Paris", "day": "tomorrow"})
        );
        assert_eq!(
            call["extra_content"]["google"]["thought_signature"],
            "sig-2"
        );
        assert_eq!(
            answer["usage"],
            json!({"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60,
                   "completion_tokens_details": {"reasoning_tokens": 8}})
        );
    }

    #[test]
    fn request_details_are_translated() {
        let request = generate_request(&json!({
            "model": "gemini-2.0-flash",
            "messages": [
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.WEBP?size=large"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/photo"}},
                    {"type": "text", "text": ""}
                ]},
                {"role": "user", "content": "Which is nicer?"},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "not json"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "[1, 2]"}]},
                {"role": "user", "content": "Thanks"}
            ],
            "tools": [{"type": "function", "function": {"name": "look"}}],
            "tool_choice": {"type": "function", "function": {"name": "look"}},
            "stop": ["a", "b"],
            "n": 3,
            "max_tokens": 99,
            "response_format": {"type": "json_object"}
        }))
        .unwrap();
        assert_eq!(
            request["contents"],
            json!([
                {"role": "user", "parts": [
                    {"fileData": {"mimeType": "image/webp", "fileUri": "https://example.com/cat.WEBP?size=large"}},
                    {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/photo"}},
                    {"text": "Which is nicer?"}
                ]},
                // An unsigned call gets Google's stand-in signature.
                {"role": "model", "parts": [
                    {"text": "Let me look."},
                    {"functionCall": {"name": "look", "args": {}}, "thoughtSignature": UNSIGNED_CALL}
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "look", "response": {"content": "[1, 2]"}}},
                    {"text": "Thanks"}
                ]}
            ])
        );
        assert_eq!(
            request["toolConfig"],
            json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["look"]}})
        );
        assert_eq!(
            request["generationConfig"],
            json!({"stopSequences": ["a", "b"], "candidateCount": 3, "maxOutputTokens": 99,
                   "responseMimeType": "application/json"})
        );
        assert!(request.get("systemInstruction").is_none());
    }

    #[test]
    fn requests_this_provider_cannot_take_are_refused() {
        let refused = |body: Value| match generate_request(&body) {
            Err(ProviderError::Permanent(message)) => message,
            other => panic!("{other:?}"),
        };
        let message = refused(json!({"messages": [
            {"role": "tool", "tool_call_id": "nope", "content": "x"}
        ]}));
        assert!(message.contains("`nope`"), "{message}");
        let message = refused(json!({"messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png,abc"}}]}
        ]}));
        assert!(message.contains("base64"), "{message}");
        let message = refused(json!({"messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}]}
        ]}));
        assert!(message.contains("http(s)"), "{message}");
        let message = refused(json!({"messages": [], "tools": [{"type": "web_search"}]}));
        assert!(message.contains("function tools only"), "{message}");
        let message = refused(json!({"messages": [{"role": "narrator", "content": "x"}]}));
        assert!(message.contains("narrator"), "{message}");
    }

    #[test]
    fn model_names_are_encoded_into_the_path() {
        let client = GeminiClient::new(&UpstreamSettings {
            base_url: "https://generativelanguage.googleapis.com/".into(),
            ..Default::default()
        });
        assert_eq!(
            client.endpoint("gemini-2.0-flash", "generateContent"),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:generateContent"
        );
        assert_eq!(
            client.endpoint("models/my model?x", "embedContent"),
            "https://generativelanguage.googleapis.com/v1beta/models/my%20model%3Fx:embedContent"
        );
        assert_eq!(
            client.endpoint("tunedModels/mine", "generateContent"),
            "https://generativelanguage.googleapis.com/v1beta/tunedModels/mine:generateContent"
        );
        let versioned = GeminiClient::new(&UpstreamSettings {
            base_url: "http://proxy/v1beta".into(),
            ..Default::default()
        });
        assert_eq!(
            versioned.endpoint("a/b", "generateContent"),
            "http://proxy/v1beta/models/a%2Fb:generateContent"
        );
    }

    fn sse(payloads: &[Value]) -> String {
        payloads
            .iter()
            .map(|payload| format!("data: {payload}\r\n\r\n"))
            .collect()
    }

    async fn collect(stream: ChunkStream) -> Vec<Result<Value, ProviderError>> {
        tokio::time::timeout(Duration::from_secs(10), stream.collect())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_stream_becomes_openai_chunks() {
        let server = MockServer::start().await;
        let body = sse(&[
            json!({"candidates": [{"content": {"role": "model", "parts": [
                       {"text": "Planning...", "thought": true}, {"text": "Let me "}]}, "index": 0}],
                   "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 2, "totalTokenCount": 12},
                   "modelVersion": "gemini-2.0-flash-001", "responseId": "r-9"}),
            json!({"candidates": [{"content": {"role": "model", "parts": [
                       {"text": "check"}, {"text": "."},
                       {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]}, "index": 0}],
                   "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 8, "totalTokenCount": 18},
                   "modelVersion": "gemini-2.0-flash-001", "responseId": "r-9"}),
            json!({"candidates": [{"content": {"role": "model", "parts": [
                       {"functionCall": {"name": "get_time", "args": {}}}]},
                   "finishReason": "STOP", "index": 0}],
                   "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 9, "totalTokenCount": 19},
                   "modelVersion": "gemini-2.0-flash-001", "responseId": "r-9"}),
        ]);
        Mock::given(method("POST"))
            .and(path(
                "/v1beta/models/gemini-2.0-flash:streamGenerateContent",
            ))
            .and(query_param("alt", "sse"))
            .and(header("x-goog-api-key", KEY))
            .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
            .expect(1)
            .mount(&server)
            .await;
        let request = json!({"model": "gemini-2.0-flash", "stream": true,
                             "messages": [{"role": "user", "content": "Weather?"}]});

        let stream = client(&server).chat_stream(&request).await.unwrap();
        let chunks: Vec<Value> = collect(stream)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();

        assert_eq!(
            received_bodies(&server).await[0],
            json!({"contents": [{"role": "user", "parts": [{"text": "Weather?"}]}]})
        );
        for chunk in &chunks {
            assert_eq!(chunk["id"], "r-9");
            assert_eq!(chunk["object"], "chat.completion.chunk");
            assert_eq!(chunk["model"], "gemini-2.0-flash-001");
        }
        let deltas: Vec<(Value, Value)> = chunks[..chunks.len() - 1]
            .iter()
            .map(|chunk| {
                let choice = &chunk["choices"][0];
                assert_eq!(choice["index"], 0);
                assert_eq!(choice["logprobs"], Value::Null);
                (choice["delta"].clone(), choice["finish_reason"].clone())
            })
            .collect();
        assert_eq!(deltas.len(), 6, "{deltas:?}");
        assert_eq!(
            deltas[0],
            (json!({"role": "assistant", "content": ""}), Value::Null)
        );
        assert_eq!(deltas[1], (json!({"content": "Let me "}), Value::Null));
        assert_eq!(deltas[2], (json!({"content": "check."}), Value::Null));
        for (delta, ordinal, name, arguments) in [
            (&deltas[3].0, 0, "get_weather", "{\"city\":\"Paris\"}"),
            (&deltas[4].0, 1, "get_time", "{}"),
        ] {
            let call = &delta["tool_calls"][0];
            assert_eq!(call["index"], ordinal);
            assert!(call["id"].as_str().unwrap().starts_with("call_"));
            assert_eq!(call["type"], "function");
            assert_eq!(
                call["function"],
                json!({"name": name, "arguments": arguments})
            );
        }
        assert_eq!(deltas[5], (json!({}), json!("tool_calls")));
        let usage = chunks.last().unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(
            usage["usage"],
            json!({"prompt_tokens": 10, "completion_tokens": 9, "total_tokens": 19})
        );
    }

    #[tokio::test]
    async fn an_error_event_or_a_cut_off_answer_ends_the_stream_with_an_error() {
        let server = MockServer::start().await;
        let text = json!({"candidates": [{"content": {"parts": [{"text": "Hi"}]}, "index": 0}]});
        Mock::given(body_partial_json(json!({"contents": [{"parts": [{"text": "fail"}]}]})))
            .respond_with(ResponseTemplate::new(200).set_body_raw(
                sse(&[
                    text.clone(),
                    json!({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}),
                    text.clone(),
                ]),
                "text/event-stream",
            ))
            .mount(&server)
            .await;
        Mock::given(body_partial_json(
            json!({"contents": [{"parts": [{"text": "cut"}]}]}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse(&[text]), "text/event-stream"))
        .mount(&server)
        .await;
        let client = client(&server);
        for (prompt, expected) in [
            (
                "fail",
                ProviderError::Transient(
                    "the upstream failed mid-stream: The model is overloaded.".into(),
                ),
            ),
            (
                "cut",
                ProviderError::Transient(
                    "the upstream stream ended before the answer was finished".into(),
                ),
            ),
        ] {
            let request = json!({"model": "m", "messages": [{"role": "user", "content": prompt}]});
            let items = collect(client.chat_stream(&request).await.unwrap()).await;
            assert_eq!(items.len(), 3, "{items:?}");
            assert_eq!(
                items[1].as_ref().unwrap()["choices"][0]["delta"]["content"],
                "Hi"
            );
            assert_eq!(items[2], Err(expected));
        }
    }

    #[tokio::test]
    async fn a_json_schema_answer_cut_at_max_tokens_finishes_with_length() {
        let server = MockServer::start().await;
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}},
                            "required": ["name"], "additionalProperties": false});
        Mock::given(method("POST"))
            .and(body_partial_json(json!({"generationConfig": {
                "responseMimeType": "application/json", "responseJsonSchema": schema, "maxOutputTokens": 5
            }})))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "candidates": [{"content": {"role": "model", "parts": [{"text": "{\"na"}]},
                                "finishReason": "MAX_TOKENS"}],
                "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 5, "totalTokenCount": 12}
            })))
            .expect(1)
            .mount(&server)
            .await;
        let request = json!({
            "model": "gemini-2.0-flash", "max_tokens": 5,
            "messages": [{"role": "user", "content": "A name, as JSON"}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "person", "strict": true, "schema": schema}}
        });

        let answer = client(&server).chat(&request).await.unwrap();

        assert!(answer["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert_eq!(answer["model"], "gemini-2.0-flash");
        assert_eq!(answer["choices"][0]["message"]["content"], "{\"na");
        assert!(answer["choices"][0]["message"].get("tool_calls").is_none());
        assert_eq!(answer["choices"][0]["finish_reason"], "length");
        assert_eq!(answer["usage"]["total_tokens"], 12);
    }

    #[tokio::test]
    async fn a_blocked_prompt_is_a_content_filter_stop() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "promptFeedback": {"blockReason": "SAFETY"},
                "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3}
            })))
            .mount(&server)
            .await;
        let request = json!({"model": "m", "messages": [{"role": "user", "content": "..."}]});
        let answer = client(&server).chat(&request).await.unwrap();
        assert_eq!(
            answer["choices"],
            json!([{"index": 0, "message": {"role": "assistant", "content": null},
                    "logprobs": null, "finish_reason": "content_filter"}])
        );
        assert_eq!(answer["usage"]["completion_tokens"], 0);
    }

    #[tokio::test]
    async fn a_400_is_permanent_with_geminis_message_and_a_503_is_retried() {
        let server = MockServer::start().await;
        let long = "x".repeat(500);
        Mock::given(body_partial_json(
            json!({"contents": [{"parts": [{"text": "bad"}]}]}),
        ))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"error": {
            "code": 400, "status": "INVALID_ARGUMENT",
            "message": format!("Invalid JSON payload received. {long}")
        }})))
        .mount(&server)
        .await;
        Mock::given(body_partial_json(
            json!({"contents": [{"parts": [{"text": "busy"}]}]}),
        ))
        .respond_with(ResponseTemplate::new(503).set_body_json(json!({"error": {
            "code": 503, "status": "UNAVAILABLE", "message": "The model is overloaded."
        }})))
        .up_to_n_times(1)
        .mount(&server)
        .await;
        Mock::given(body_partial_json(
            json!({"contents": [{"parts": [{"text": "busy"}]}]}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "candidates": [{"content": {"parts": [{"text": "Done."}]}, "finishReason": "STOP"}]
        })))
        .mount(&server)
        .await;
        let client = client(&server);
        let ask =
            |text: &str| json!({"model": "m", "messages": [{"role": "user", "content": text}]});

        match client.chat(&ask("bad")).await {
            Err(ProviderError::Permanent(message)) => {
                assert!(
                    message.starts_with("Invalid JSON payload received. xxx"),
                    "{message}"
                );
                assert_eq!(message.chars().count(), MAX_MESSAGE_CHARS);
                assert!(!message.contains(KEY));
            }
            other => panic!("{other:?}"),
        }
        let answer = client.chat(&ask("busy")).await.unwrap();
        assert_eq!(answer["choices"][0]["message"]["content"], "Done.");
        assert_eq!(answer["choices"][0]["finish_reason"], "stop");
        // The 400 was asked once, the 503 twice.
        assert_eq!(server.received_requests().await.unwrap().len(), 3);
    }

    #[tokio::test]
    async fn several_inputs_are_embedded_in_one_batch_in_input_order() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(
                "/v1beta/models/gemini-embedding-001:batchEmbedContents",
            ))
            .and(header("x-goog-api-key", KEY))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "embeddings": [{"values": [1.0, 0.0]}, {"values": [0.0, 1.0]}]
            })))
            .expect(1)
            .mount(&server)
            .await;
        let body = json!({"model": "gemini-embedding-001", "input": ["a", "b"], "dimensions": 2,
                          "user": "u-1", "encoding_format": "float"});

        let answer = client(&server).embed(body, 2).await.unwrap();

        assert_eq!(answer.vectors, vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
        assert_eq!(answer.prompt_tokens, None);
        assert_eq!(
            received_bodies(&server).await[0],
            json!({"requests": [
                {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "a"}]},
                 "outputDimensionality": 2},
                {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "b"}]},
                 "outputDimensionality": 2}
            ]})
        );
    }

    #[tokio::test]
    async fn one_input_uses_embed_content() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1beta/models/gemini-embedding-001:embedContent"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({"embedding": {"values": [0.5, 0.25, 0.125]}})),
            )
            .expect(1)
            .mount(&server)
            .await;
        let body = json!({"model": "gemini-embedding-001", "input": ["hello"]});

        let answer = client(&server).embed(body, 1).await.unwrap();

        assert_eq!(answer.vectors, vec![vec![0.5, 0.25, 0.125]]);
        assert_eq!(
            received_bodies(&server).await[0],
            json!({"content": {"parts": [{"text": "hello"}]}})
        );
    }

    /// Answers each text `"<n>"` with the vector `[n]`.
    struct EchoNumbers;

    impl Respond for EchoNumbers {
        fn respond(&self, request: &Request) -> ResponseTemplate {
            let body: Value = serde_json::from_slice(&request.body).unwrap();
            let embeddings: Vec<Value> = body["requests"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    let n: f32 = r["content"]["parts"][0]["text"]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    json!({"values": [n]})
                })
                .collect();
            ResponseTemplate::new(200).set_body_json(json!({"embeddings": embeddings}))
        }
    }

    #[tokio::test]
    async fn many_inputs_go_in_batches_of_100_and_come_back_in_order() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(EchoNumbers)
            .expect(3)
            .mount(&server)
            .await;
        let texts: Vec<String> = (0..250).map(|n| n.to_string()).collect();

        let answer = client(&server)
            .embed(json!({"model": "e", "input": texts}), 250)
            .await
            .unwrap();

        let expected: Vec<Vec<f32>> = (0..250).map(|n| vec![n as f32]).collect();
        assert_eq!(answer.vectors, expected);
        let mut sizes: Vec<usize> = received_bodies(&server)
            .await
            .iter()
            .map(|body| body["requests"].as_array().unwrap().len())
            .collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [50, 100, 100]);
    }

    #[tokio::test]
    async fn token_ids_and_short_or_empty_answers_are_refused() {
        let server = MockServer::start().await;
        Mock::given(body_partial_json(
            json!({"requests": [{"content": {"parts": [{"text": "short"}]}}]}),
        ))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"embeddings": [{"values": [1.0]}]})),
        )
        .mount(&server)
        .await;
        Mock::given(path("/v1beta/models/e:embedContent"))
            .respond_with(
                ResponseTemplate::new(200).set_body_json(json!({"embedding": {"values": []}})),
            )
            .mount(&server)
            .await;
        let client = client(&server);

        for input in [json!([[1, 2, 3]]), json!([1, 2, 3]), json!(["a", [4, 5]])] {
            let inputs = input.as_array().unwrap().len();
            assert_eq!(
                client
                    .embed(json!({"model": "e", "input": input}), inputs)
                    .await
                    .err(),
                Some(ProviderError::Permanent(
                    "this provider takes text input only, not token ids".into()
                ))
            );
        }
        assert_eq!(
            client
                .embed(json!({"model": "e", "input": ["short", "b"]}), 2)
                .await
                .err(),
            Some(ProviderError::Permanent(
                "the upstream's answer does not hold one embedding per input (1 for 2)".into()
            ))
        );
        assert_eq!(
            client
                .embed(json!({"model": "e", "input": ["a"]}), 1)
                .await
                .err(),
            Some(ProviderError::Permanent(
                "the upstream's answer does not hold one embedding per input (1 for 1)".into()
            ))
        );
        // Only the two answered requests reached the upstream.
        assert_eq!(server.received_requests().await.unwrap().len(), 2);
    }
}
