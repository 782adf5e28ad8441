//! Chat completions and embeddings in the OpenAI wire format: requests,
//! validation, and token counting (cl100k BPE, embedded in the binary).

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use unigen_core::ValidationError;
use unigen_core::validate::number_in;

pub const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];
pub const MAX_IMAGES_PER_MESSAGE: usize = 4;
pub const MAX_STOP_SEQUENCES: usize = 4;
pub const MAX_TOKENS_LIMIT: u32 = 32_768;

/// Message content: a string, or OpenAI content parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ImageUrl {
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    #[serde(default)]
    pub content: Option<MessageContent>,
    /// Image URIs for vision-capable models, up to 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub tool_calls: Option<Vec<serde_json::Value>>,
}

impl ChatMessage {
    /// The text of the message (text parts joined).
    pub fn text(&self) -> String {
        match &self.content {
            Some(MessageContent::Text(text)) => text.clone(),
            Some(MessageContent::Parts(parts)) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    ContentPart::ImageUrl { .. } => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
            None => String::new(),
        }
    }

    fn image_count(&self) -> usize {
        let parts = match &self.content {
            Some(MessageContent::Parts(parts)) => parts
                .iter()
                .filter(|p| matches!(p, ContentPart::ImageUrl { .. }))
                .count(),
            _ => 0,
        };
        parts + self.images.as_ref().map_or(0, Vec::len)
    }

    /// The message as OpenAI content parts: `images` become `image_url` parts.
    pub fn to_upstream(&self) -> serde_json::Value {
        let mut message = serde_json::json!({ "role": self.role });
        let images = self.images.clone().unwrap_or_default();
        if images.is_empty() {
            message["content"] =
                serde_json::to_value(&self.content).unwrap_or(serde_json::Value::Null);
        } else {
            let mut parts = vec![serde_json::json!({"type": "text", "text": self.text()})];
            parts.extend(
                images
                    .iter()
                    .map(|url| serde_json::json!({"type": "image_url", "image_url": {"url": url}})),
            );
            message["content"] = serde_json::Value::Array(parts);
        }
        for (key, value) in [("name", &self.name), ("tool_call_id", &self.tool_call_id)] {
            if let Some(value) = value {
                message[key] = serde_json::json!(value);
            }
        }
        if let Some(calls) = &self.tool_calls {
            message["tool_calls"] = serde_json::json!(calls);
        }
        message
    }
}

/// `stop`: a string or an array of strings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// Body of `POST /chat/completions`. Unknown fields are ignored.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct ChatCompletionRequest {
    pub messages: Option<Vec<ChatMessage>>,
    pub model: Option<String>,
    /// 0 to 2, default 0.7.
    pub temperature: Option<f64>,
    /// Default 2048.
    pub max_tokens: Option<u32>,
    /// Newer OpenAI clients send this instead of `max_tokens`.
    pub max_completion_tokens: Option<u32>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub web_search: Option<bool>,
    /// 0 to 1, default 1.
    pub top_p: Option<f64>,
    /// -2 to 2, default 0.
    pub frequency_penalty: Option<f64>,
    /// -2 to 2, default 0.
    pub presence_penalty: Option<f64>,
    pub stop: Option<Stop>,
    pub user: Option<String>,
}

/// Validated chat parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatParams {
    pub messages: Vec<ChatMessage>,
    pub temperature: f64,
    pub max_tokens: u32,
    /// The client chose `max_tokens` (else metering may lower the default
    /// to what the token quota has left).
    pub max_tokens_explicit: bool,
    pub top_p: f64,
    pub frequency_penalty: f64,
    pub presence_penalty: f64,
    pub stop: Vec<String>,
    pub user: Option<String>,
    pub stream: bool,
    pub include_usage: bool,
    pub web_search: bool,
}

impl ChatCompletionRequest {
    /// `vision`: whether the resolved model reads images.
    pub fn validate(
        &self,
        stream_query: bool,
        vision: bool,
    ) -> Result<ChatParams, ValidationError> {
        let messages = self
            .messages
            .clone()
            .ok_or_else(|| ValidationError::new("messages", "messages is required"))?;
        if messages.is_empty() {
            return Err(ValidationError::new(
                "messages",
                "messages must contain at least one message",
            ));
        }
        for (i, message) in messages.iter().enumerate() {
            if !ROLES.contains(&message.role.as_str()) {
                return Err(ValidationError::new(
                    "messages",
                    format!("messages[{i}].role must be one of: {}", ROLES.join(", ")),
                ));
            }
            let has_calls = message.tool_calls.as_ref().is_some_and(|c| !c.is_empty());
            if message.content.is_none() && !(message.role == "assistant" && has_calls) {
                return Err(ValidationError::new(
                    "messages",
                    format!("messages[{i}].content is required"),
                ));
            }
            let images = message.image_count();
            if images > MAX_IMAGES_PER_MESSAGE {
                return Err(ValidationError::new(
                    "messages",
                    format!(
                        "messages[{i}] has {images} images; at most {MAX_IMAGES_PER_MESSAGE} are allowed"
                    ),
                ));
            }
            if images > 0 && !vision {
                return Err(ValidationError::new(
                    "messages",
                    "images are only accepted by vision-capable models",
                ));
            }
        }
        let requested = self.max_completion_tokens.or(self.max_tokens);
        let max_tokens = requested.unwrap_or(2048);
        if !(1..=MAX_TOKENS_LIMIT).contains(&max_tokens) {
            return Err(ValidationError::new(
                "max_tokens",
                format!("max_tokens must be between 1 and {MAX_TOKENS_LIMIT}"),
            ));
        }
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(list)) => list.clone(),
        };
        if stop.len() > MAX_STOP_SEQUENCES || stop.iter().any(String::is_empty) {
            return Err(ValidationError::new(
                "stop",
                format!(
                    "stop must be a non-empty string or up to {MAX_STOP_SEQUENCES} non-empty strings"
                ),
            ));
        }
        Ok(ChatParams {
            messages,
            temperature: number_in("temperature", self.temperature, 0.0, 2.0, 0.7)?,
            max_tokens,
            max_tokens_explicit: requested.is_some(),
            top_p: number_in("top_p", self.top_p, 0.0, 1.0, 1.0)?,
            frequency_penalty: number_in(
                "frequency_penalty",
                self.frequency_penalty,
                -2.0,
                2.0,
                0.0,
            )?,
            presence_penalty: number_in("presence_penalty", self.presence_penalty, -2.0, 2.0, 0.0)?,
            stop,
            user: self.user.clone(),
            stream: self.stream.unwrap_or(false) || stream_query,
            include_usage: self
                .stream_options
                .as_ref()
                .is_some_and(|o| o.include_usage),
            web_search: self.web_search.unwrap_or(false),
        })
    }
}

impl ChatParams {
    /// The text of the last user message: what the echo model answers and
    /// what web search looks up.
    pub fn last_user_text(&self) -> String {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(ChatMessage::text)
            .unwrap_or_default()
    }
}

/// `input` of `POST /embeddings`: a string or an array of strings.
#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum EmbeddingInput {
    One(String),
    Many(Vec<String>),
}

/// Body of `POST /embeddings`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct EmbeddingRequest {
    pub input: Option<EmbeddingInput>,
    pub model: Option<String>,
    /// Length of each vector (the model's default when absent).
    pub dimensions: Option<u32>,
    /// `float` (default) or `base64` (little-endian f32, as the OpenAI SDKs request).
    pub encoding_format: Option<String>,
    pub user: Option<String>,
}

pub const MAX_EMBEDDING_INPUTS: usize = 2048;
pub const MAX_EMBEDDING_DIMENSIONS: u32 = 3072;

impl EmbeddingRequest {
    /// The inputs, the requested dimensions, and whether to answer base64.
    pub fn validate(&self) -> Result<(Vec<String>, Option<u32>, bool), ValidationError> {
        let inputs = match self
            .input
            .clone()
            .ok_or_else(|| ValidationError::new("input", "input is required"))?
        {
            EmbeddingInput::One(text) => vec![text],
            EmbeddingInput::Many(list) => list,
        };
        if inputs.is_empty() || inputs.len() > MAX_EMBEDDING_INPUTS {
            return Err(ValidationError::new(
                "input",
                format!("input must hold 1 to {MAX_EMBEDDING_INPUTS} strings"),
            ));
        }
        if inputs.iter().any(|s| s.is_empty()) {
            return Err(ValidationError::new(
                "input",
                "input strings must not be empty",
            ));
        }
        if let Some(d) = self.dimensions
            && !(1..=MAX_EMBEDDING_DIMENSIONS).contains(&d)
        {
            return Err(ValidationError::new(
                "dimensions",
                format!("dimensions must be between 1 and {MAX_EMBEDDING_DIMENSIONS}"),
            ));
        }
        let base64 = match self.encoding_format.as_deref() {
            None | Some("float") => false,
            Some("base64") => true,
            Some(_) => {
                return Err(ValidationError::new(
                    "encoding_format",
                    "encoding_format must be `float` or `base64`",
                ));
            }
        };
        Ok((inputs, self.dimensions, base64))
    }
}

fn bpe() -> &'static tiktoken_rs::CoreBPE {
    static BPE: OnceLock<tiktoken_rs::CoreBPE> = OnceLock::new();
    BPE.get_or_init(|| tiktoken_rs::cl100k_base().expect("the embedded cl100k table loads"))
}

/// Tokens of `text` (cl100k), for usage when an upstream reports none.
pub fn count_tokens(text: &str) -> u32 {
    bpe().encode_ordinary(text).len() as u32
}

/// The text split into its tokens' strings (for streaming token by token).
pub fn token_pieces(text: &str) -> Vec<String> {
    let bpe = bpe();
    let tokens = bpe.encode_ordinary(text);
    let mut pieces = Vec::with_capacity(tokens.len());
    let mut pending = Vec::new();
    for token in tokens {
        pending.push(token);
        // A token can end mid-character; emit only whole UTF-8 text.
        if let Ok(piece) = bpe.decode(&pending) {
            pieces.push(piece);
            pending.clear();
        }
    }
    pieces
}

/// Prompt tokens the way OpenAI counts chat messages (about 3 per message
/// of framing, plus 3 priming the reply).
pub fn count_prompt_tokens(messages: &[ChatMessage]) -> u32 {
    messages
        .iter()
        .map(|m| 3 + count_tokens(&m.role) + count_tokens(&m.text()))
        .sum::<u32>()
        + 3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: serde_json::Value) -> ChatCompletionRequest {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn chat_fields_are_validated_with_the_spec_ranges() {
        let ok = request(serde_json::json!({"messages": [{"role": "user", "content": "hi"}]}));
        let params = ok.validate(false, false).unwrap();
        assert_eq!(
            (params.temperature, params.max_tokens, params.top_p),
            (0.7, 2048, 1.0)
        );
        let err = |json| request(json).validate(false, false).unwrap_err();
        assert_eq!(err(serde_json::json!({})).message, "messages is required");
        assert_eq!(err(serde_json::json!({"messages": []})).field, "messages");
        assert_eq!(
            err(serde_json::json!({"messages": [{"role": "bot", "content": "x"}]})).message,
            "messages[0].role must be one of: system, user, assistant, tool"
        );
        let base = |extra: serde_json::Value| {
            let mut json = serde_json::json!({"messages": [{"role": "user", "content": "hi"}]});
            json.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            request(json).validate(false, false)
        };
        assert_eq!(
            base(serde_json::json!({"temperature": 2.5}))
                .unwrap_err()
                .message,
            "temperature must be between 0 and 2"
        );
        assert_eq!(
            base(serde_json::json!({"top_p": -0.1})).unwrap_err().field,
            "top_p"
        );
        assert_eq!(
            base(serde_json::json!({"presence_penalty": 3}))
                .unwrap_err()
                .field,
            "presence_penalty"
        );
        assert_eq!(
            base(serde_json::json!({"frequency_penalty": -2.5}))
                .unwrap_err()
                .field,
            "frequency_penalty"
        );
        assert_eq!(
            base(serde_json::json!({"stop": ["a", "b", "c", "d", "e"]}))
                .unwrap_err()
                .field,
            "stop"
        );
        assert_eq!(
            base(serde_json::json!({"stop": "END"})).unwrap().stop,
            vec!["END".to_owned()]
        );
        assert_eq!(
            base(serde_json::json!({"max_tokens": 0}))
                .unwrap_err()
                .field,
            "max_tokens"
        );
        let images = serde_json::json!({"messages": [{"role": "user", "content": "see", "images": ["https://e.com/a.png"]}]});
        assert_eq!(
            request(images.clone())
                .validate(false, false)
                .unwrap_err()
                .message,
            "images are only accepted by vision-capable models"
        );
        assert!(request(images).validate(false, true).is_ok());
        let five = serde_json::json!({"messages": [{"role": "user", "content": "x", "images": ["a", "b", "c", "d", "e"]}]});
        assert!(
            request(five)
                .validate(false, true)
                .unwrap_err()
                .message
                .contains("at most 4")
        );
        assert!(!base(serde_json::json!({})).unwrap().stream);
        assert!(
            request(serde_json::json!({"messages": [{"role": "user", "content": "x"}]}))
                .validate(true, false)
                .unwrap()
                .stream
        );
    }

    #[test]
    fn tokens_are_counted_with_a_real_tokenizer_and_pieces_rebuild_the_text() {
        assert_eq!(count_tokens("hello world"), 2);
        let text = "Grüße — naïve café! 🚀 tokens";
        assert_eq!(token_pieces(text).concat(), text);
    }

    #[test]
    fn embedding_inputs_are_validated() {
        let req: EmbeddingRequest =
            serde_json::from_value(serde_json::json!({"input": ["a", "b"], "dimensions": 64}))
                .unwrap();
        assert_eq!(
            req.validate().unwrap(),
            (vec!["a".to_owned(), "b".to_owned()], Some(64), false)
        );
        let req: EmbeddingRequest =
            serde_json::from_value(serde_json::json!({"input": ""})).unwrap();
        assert_eq!(req.validate().unwrap_err().field, "input");
        assert_eq!(
            EmbeddingRequest::default().validate().unwrap_err().message,
            "input is required"
        );
        let req: EmbeddingRequest =
            serde_json::from_value(serde_json::json!({"input": "a", "dimensions": 0})).unwrap();
        assert_eq!(req.validate().unwrap_err().field, "dimensions");
    }
}
