//! Chat completions and embeddings in the OpenAI wire format: requests,
//! validation, and token counting (cl100k BPE, embedded in the binary).
//!
//! A chat request keeps every field it does not interpret (`extra`) and the
//! fields it validates as the client sent them (`ChatParams::forward`), so an
//! OpenAI-compatible upstream receives the request unchanged: no default the
//! client did not send is imposed on it.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use unigen_core::ValidationError;
use unigen_core::validate::number_in;

/// `function` is the role of legacy `functions` results; `developer` is what
/// current SDKs send for system prompts.
pub const ROLES: [&str; 6] = [
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];
pub const MAX_IMAGES_PER_MESSAGE: usize = 4;
pub const MAX_STOP_SEQUENCES: usize = 4;
pub const MAX_TOKENS_LIMIT: u32 = 32_768;
/// Most choices one request may ask for (`n`): each is metered.
pub const MAX_CHOICES: u32 = 16;
/// OpenAI's limit on the tools of one request.
pub const MAX_TOOLS: usize = 128;

/// Message content: a string, or OpenAI content parts (`text`, `image_url`,
/// and any other part type, which is passed through).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    #[schema(value_type = Vec<Object>)]
    Parts(Vec<Value>),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant`, `tool` or `function`.
    #[schema(pattern = "^(system|developer|user|assistant|tool|function)$")]
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
    pub tool_calls: Option<Vec<Value>>,
    /// Other message fields (`refusal`, `function_call`, `audio`...), passed
    /// through to upstreams.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

fn part_type(part: &Value) -> Option<&str> {
    part.get("type").and_then(Value::as_str)
}

impl ChatMessage {
    /// A message of `role` holding `text`.
    pub fn with_text(role: &str, text: impl Into<String>) -> Self {
        Self {
            role: role.to_owned(),
            content: Some(MessageContent::Text(text.into())),
            ..Self::default()
        }
    }

    /// The text of the message (text parts joined).
    pub fn text(&self) -> String {
        match &self.content {
            Some(MessageContent::Text(text)) => text.clone(),
            Some(MessageContent::Parts(parts)) => parts
                .iter()
                .filter(|p| part_type(p) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            None => String::new(),
        }
    }

    fn image_count(&self) -> usize {
        let parts = match &self.content {
            Some(MessageContent::Parts(parts)) => parts
                .iter()
                .filter(|p| part_type(p) == Some("image_url"))
                .count(),
            _ => 0,
        };
        parts + self.images.as_ref().map_or(0, Vec::len)
    }

    /// The message as OpenAI sends it: `images` become `image_url` parts;
    /// `developer_as_system` renames the `developer` role for upstreams
    /// that do not know it.
    pub fn to_upstream(&self, developer_as_system: bool) -> Value {
        let mut message = Value::Object(self.extra.clone());
        message["role"] = json!(if developer_as_system && self.role == "developer" {
            "system"
        } else {
            self.role.as_str()
        });
        let images = self.images.clone().unwrap_or_default();
        if images.is_empty() {
            message["content"] = serde_json::to_value(&self.content).unwrap_or(Value::Null);
        } else {
            let mut parts = match &self.content {
                Some(MessageContent::Parts(parts)) => parts.clone(),
                _ => vec![json!({"type": "text", "text": self.text()})],
            };
            parts.extend(
                images
                    .iter()
                    .map(|url| json!({"type": "image_url", "image_url": {"url": url}})),
            );
            message["content"] = Value::Array(parts);
        }
        for (key, value) in [("name", &self.name), ("tool_call_id", &self.tool_call_id)] {
            if let Some(value) = value {
                message[key] = json!(value);
            }
        }
        if let Some(calls) = &self.tool_calls {
            message["tool_calls"] = json!(calls);
        }
        message
    }

    /// Content parts are objects with a `type`; `text` and `image_url`
    /// parts carry what their type needs.
    fn check_parts(&self, index: usize) -> Result<(), ValidationError> {
        let Some(MessageContent::Parts(parts)) = &self.content else {
            return Ok(());
        };
        for (p, part) in parts.iter().enumerate() {
            let valid = match part_type(part) {
                Some("text") => part.get("text").is_some_and(Value::is_string),
                Some("image_url") => part.pointer("/image_url/url").is_some_and(Value::is_string),
                Some(_) => true,
                None => false,
            };
            if !valid {
                return Err(ValidationError::new(
                    "messages",
                    format!(
                        "messages[{index}].content[{p}] must be an object with a `type`; a text part needs `text`, an image_url part `image_url.url`"
                    ),
                ));
            }
        }
        Ok(())
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
    /// Other stream options, passed through.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

/// Body of `POST /chat/completions`. Fields not listed here (`logprobs`,
/// `seed`, `logit_bias`, `metadata`, `store`, `parallel_tool_calls`,
/// `reasoning_effort`, `service_tier`, legacy `functions`...) are forwarded
/// unchanged to OpenAI-compatible upstreams.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChatCompletionRequest {
    /// At least one message.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = true, nullable = false, min_items = 1)]
    pub messages: Option<Vec<ChatMessage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// 0 to 2; the built-in models use 0.7 when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// 1 to 32768; metering assumes 2048 when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Newer OpenAI clients send this instead of `max_tokens`; forwarded as such.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub web_search: Option<bool>,
    /// 0 to 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// -2 to 2.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// -2 to 2.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Choices to generate, 1 to 16 (default 1); each is metered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    /// Functions the model may call (`[{type: function, function: {name, description, parameters}}]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// `none`, `auto`, `required` or `{type: function, function: {name}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Value>,
    /// `{type: text}`, `{type: json_object}` or `{type: json_schema, json_schema: {name, schema, strict}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub response_format: Option<Value>,
    /// Every other field: forwarded unchanged.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

/// What the model is asked to call (`tool_choice`).
#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    Auto,
    None,
    Required,
    /// This function, by name.
    Function(String),
}

/// The shape asked of the answer (`response_format`).
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    Text,
    JsonObject,
    /// The JSON schema the answer must satisfy (`{}` when none was given).
    JsonSchema(Value),
}

/// Validated chat parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatParams {
    pub messages: Vec<ChatMessage>,
    pub temperature: f64,
    /// The client's `max_completion_tokens` or `max_tokens`, else 2048: the
    /// most metering reserves per choice.
    pub max_tokens: u32,
    /// The client chose `max_tokens` (else metering may lower the default
    /// to what the token quota has left).
    pub max_tokens_explicit: bool,
    /// Metering lowered `max_tokens` to what the quota has left: the
    /// upstream must be told.
    pub max_tokens_capped: bool,
    pub top_p: f64,
    pub frequency_penalty: f64,
    pub presence_penalty: f64,
    pub stop: Vec<String>,
    pub user: Option<String>,
    pub stream: bool,
    pub include_usage: bool,
    pub web_search: bool,
    /// Choices to generate.
    pub n: u32,
    pub tools: Vec<Value>,
    pub tool_choice: ToolChoice,
    pub response_format: ResponseFormat,
    /// The request as the client sent it, but for `model`, `messages`,
    /// `stream`, `stream_options` and `web_search`: what an upstream gets.
    pub forward: Map<String, Value>,
    /// The client's `stream_options` but for `include_usage`.
    pub stream_options_extra: Map<String, Value>,
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
            let has_calls = message.tool_calls.as_ref().is_some_and(|c| !c.is_empty())
                || message
                    .extra
                    .get("function_call")
                    .is_some_and(Value::is_object);
            if message.content.is_none() && !(message.role == "assistant" && has_calls) {
                return Err(ValidationError::new(
                    "messages",
                    format!("messages[{i}].content is required"),
                ));
            }
            message.check_parts(i)?;
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
            let field = if self.max_completion_tokens.is_some() {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            return Err(ValidationError::new(
                field,
                format!("{field} must be between 1 and {MAX_TOKENS_LIMIT}"),
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
        let n = self.n.unwrap_or(1);
        if !(1..=MAX_CHOICES).contains(&n) {
            return Err(ValidationError::new(
                "n",
                format!("n must be between 1 and {MAX_CHOICES}"),
            ));
        }
        let tools = self.tools.clone().unwrap_or_default();
        check_tools(&tools)?;
        let tool_choice = parse_tool_choice(self.tool_choice.as_ref(), &tools)?;
        let response_format = parse_response_format(self.response_format.as_ref())?;
        let stream_options = self.stream_options.clone().unwrap_or_default();
        Ok(ChatParams {
            messages,
            temperature: number_in("temperature", self.temperature, 0.0, 2.0, 0.7)?,
            max_tokens,
            max_tokens_explicit: requested.is_some(),
            max_tokens_capped: false,
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
            include_usage: stream_options.include_usage,
            web_search: self.web_search.unwrap_or(false),
            n,
            tools,
            tool_choice,
            response_format,
            forward: self.forwarded(),
            stream_options_extra: stream_options.extra,
        })
    }

    /// The fields an upstream receives as the client sent them.
    fn forwarded(&self) -> Map<String, Value> {
        let mut fields = match serde_json::to_value(self) {
            Ok(Value::Object(fields)) => fields,
            _ => Map::new(),
        };
        for ours in [
            "model",
            "messages",
            "stream",
            "stream_options",
            "web_search",
        ] {
            fields.remove(ours);
        }
        fields
    }
}

/// A function name as OpenAI accepts it.
fn valid_function_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn check_tools(tools: &[Value]) -> Result<(), ValidationError> {
    if tools.len() > MAX_TOOLS {
        return Err(ValidationError::new(
            "tools",
            format!("tools must hold at most {MAX_TOOLS} tools"),
        ));
    }
    for (i, tool) in tools.iter().enumerate() {
        let invalid = |why: &str| ValidationError::new("tools", format!("tools[{i}] {why}"));
        match tool.get("type").and_then(Value::as_str) {
            Some("function") => {
                let name = tool.pointer("/function/name").and_then(Value::as_str);
                if !name.is_some_and(valid_function_name) {
                    return Err(invalid(
                        "needs function.name: 1 to 64 letters, digits, underscores or dashes",
                    ));
                }
                if tool
                    .pointer("/function/parameters")
                    .is_some_and(|p| !p.is_object())
                {
                    return Err(invalid("function.parameters must be a JSON schema object"));
                }
            }
            Some(_) => {}
            None => return Err(invalid("must be an object with a `type`")),
        }
    }
    Ok(())
}

fn tool_names(tools: &[Value]) -> impl Iterator<Item = &str> {
    tools
        .iter()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
}

fn parse_tool_choice(
    choice: Option<&Value>,
    tools: &[Value],
) -> Result<ToolChoice, ValidationError> {
    let invalid = |message: String| ValidationError::new("tool_choice", message);
    if choice.is_some() && tools.is_empty() {
        return Err(invalid(
            "tool_choice is only allowed when tools are specified".into(),
        ));
    }
    match choice {
        None => Ok(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            _ => Err(invalid(
                "tool_choice must be `none`, `auto`, `required` or {type: function, function: {name}}"
                    .into(),
            )),
        },
        Some(object @ Value::Object(_)) => match object.get("type").and_then(Value::as_str) {
            Some("function") => {
                let name = object
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if tool_names(tools).any(|t| t == name) {
                    Ok(ToolChoice::Function(name.to_owned()))
                } else {
                    Err(invalid(format!(
                        "tool_choice names function `{name}`, which is not among the tools"
                    )))
                }
            }
            // Newer choice kinds (`allowed_tools`, `custom`) go to upstreams as sent.
            Some(_) => Ok(ToolChoice::Auto),
            None => Err(invalid("tool_choice must have a `type`".into())),
        },
        Some(_) => Err(invalid(
            "tool_choice must be a string or an object".into(),
        )),
    }
}

fn parse_response_format(format: Option<&Value>) -> Result<ResponseFormat, ValidationError> {
    let invalid = |message: &str| ValidationError::new("response_format", message);
    let Some(format) = format else {
        return Ok(ResponseFormat::Text);
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(ResponseFormat::Text),
        Some("json_object") => Ok(ResponseFormat::JsonObject),
        Some("json_schema") => {
            let spec = format
                .get("json_schema")
                .filter(|s| s.is_object())
                .ok_or_else(|| {
                    invalid("response_format.json_schema is required for type json_schema")
                })?;
            if !spec.get("name").is_some_and(Value::is_string) {
                return Err(invalid("response_format.json_schema.name is required"));
            }
            match spec.get("schema") {
                None => Ok(ResponseFormat::JsonSchema(json!({}))),
                Some(schema) if schema.is_object() => {
                    Ok(ResponseFormat::JsonSchema(schema.clone()))
                }
                Some(_) => Err(invalid(
                    "response_format.json_schema.schema must be an object",
                )),
            }
        }
        _ => Err(invalid(
            "response_format.type must be `text`, `json_object` or `json_schema`",
        )),
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

/// `input` of `POST /embeddings`: a string, an array of strings, an array
/// of token ids, or an array of such arrays (what LangChain sends).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum EmbeddingInput {
    One(String),
    Many(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

/// Validated embedding inputs: texts, or cl100k token ids.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbeddingInputs {
    Texts(Vec<String>),
    Tokens(Vec<Vec<u32>>),
}

impl EmbeddingInputs {
    pub fn len(&self) -> usize {
        match self {
            Self::Texts(texts) => texts.len(),
            Self::Tokens(lists) => lists.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Input tokens, for metering (cl100k for texts).
    pub fn token_count(&self) -> u32 {
        match self {
            Self::Texts(texts) => texts.iter().map(|t| count_tokens(t)).sum(),
            Self::Tokens(lists) => lists.iter().map(|l| l.len() as u32).sum(),
        }
    }

    /// The inputs as text (token ids decoded with cl100k).
    pub fn texts(&self) -> Vec<String> {
        match self {
            Self::Texts(texts) => texts.clone(),
            Self::Tokens(lists) => lists
                .iter()
                .map(|ids| {
                    let bytes = bpe().decode_bytes(ids).unwrap_or_default();
                    String::from_utf8_lossy(&bytes).into_owned()
                })
                .collect(),
        }
    }
}

/// Body of `POST /embeddings`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct EmbeddingRequest {
    #[schema(required = true, nullable = false)]
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
/// Longest input in tokens (OpenAI's limit for its embedding models).
pub const MAX_EMBEDDING_INPUT_TOKENS: usize = 8192;

/// Validated embedding parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingParams {
    pub inputs: EmbeddingInputs,
    /// `input` as the client sent it (what an upstream receives).
    pub sent: EmbeddingInput,
    pub dimensions: Option<u32>,
    /// Answer vectors as base64 little-endian f32.
    pub base64: bool,
    pub user: Option<String>,
}

impl EmbeddingRequest {
    pub fn validate(&self) -> Result<EmbeddingParams, ValidationError> {
        let invalid = |message: String| ValidationError::new("input", message);
        let sent = self
            .input
            .clone()
            .ok_or_else(|| ValidationError::new("input", "input is required"))?;
        let inputs = match sent.clone() {
            EmbeddingInput::One(text) => EmbeddingInputs::Texts(vec![text]),
            EmbeddingInput::Many(list) => EmbeddingInputs::Texts(list),
            EmbeddingInput::Tokens(ids) => EmbeddingInputs::Tokens(vec![ids]),
            EmbeddingInput::TokenLists(lists) => EmbeddingInputs::Tokens(lists),
        };
        if inputs.is_empty() || inputs.len() > MAX_EMBEDDING_INPUTS {
            return Err(invalid(format!(
                "input must hold 1 to {MAX_EMBEDDING_INPUTS} inputs"
            )));
        }
        match &inputs {
            EmbeddingInputs::Texts(texts) => {
                if texts.iter().any(|s| s.is_empty()) {
                    return Err(invalid("input strings must not be empty".into()));
                }
            }
            EmbeddingInputs::Tokens(lists) => {
                if lists
                    .iter()
                    .any(|ids| ids.is_empty() || ids.len() > MAX_EMBEDDING_INPUT_TOKENS)
                {
                    return Err(invalid(format!(
                        "each token array must hold 1 to {MAX_EMBEDDING_INPUT_TOKENS} token ids"
                    )));
                }
                if let Some(id) = lists
                    .iter()
                    .flatten()
                    .find(|id| bpe().decode_bytes(&[**id]).is_err())
                {
                    return Err(invalid(format!(
                        "input holds token id {id}, which is not a cl100k_base token"
                    )));
                }
            }
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
        Ok(EmbeddingParams {
            inputs,
            sent,
            dimensions: self.dimensions,
            base64,
            user: self.user.clone(),
        })
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

/// Tokens one image is reckoned at when holding credits for a request:
/// about the most a single image costs at the major vendors (Anthropic's
/// ~1,600 for a 1.15-megapixel image; OpenAI's high detail at most 1,445).
pub const IMAGE_TOKEN_ALLOWANCE: u32 = 1_600;

/// The prompt tokens a chat request may cost upstream, for its hold:
/// [`count_prompt_tokens`] of the messages' text, plus everything else that
/// is sent: an [`IMAGE_TOKEN_ALLOWANCE`] per image, the messages' other
/// parts and fields (tool calls, audio, files...) as JSON, and every
/// forwarded field as JSON (`tools` with their descriptions and parameter
/// schemas, `response_format`'s JSON schema, `tool_choice`, legacy
/// `functions`...). An upper estimate: usage beyond the hold is never
/// charged.
pub fn count_request_tokens(params: &ChatParams) -> u32 {
    let mut tokens = count_prompt_tokens(&params.messages);
    for message in &params.messages {
        let images = u32::try_from(message.image_count()).unwrap_or(u32::MAX);
        tokens = tokens.saturating_add(images.saturating_mul(IMAGE_TOKEN_ALLOWANCE));
        if let Some(MessageContent::Parts(parts)) = &message.content {
            for part in parts {
                if !matches!(part_type(part), Some("text" | "image_url")) {
                    tokens = tokens.saturating_add(json_tokens(part));
                }
            }
        }
        if let Some(calls) = &message.tool_calls {
            tokens = tokens.saturating_add(json_tokens(calls));
        }
        if !message.extra.is_empty() {
            tokens = tokens.saturating_add(json_tokens(&message.extra));
        }
    }
    if !params.forward.is_empty() {
        tokens = tokens.saturating_add(json_tokens(&params.forward));
    }
    tokens
}

/// Tokens of `value`'s JSON text.
fn json_tokens<T: serde::Serialize + ?Sized>(value: &T) -> u32 {
    count_tokens(&serde_json::to_string(value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: serde_json::Value) -> ChatCompletionRequest {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn the_hold_s_estimate_counts_tools_schemas_tool_calls_and_images() {
        let params = |body: serde_json::Value| request(body).validate(false, true).unwrap();
        let hi = serde_json::json!([{"role": "user", "content": "hi"}]);
        let text_only = params(serde_json::json!({"messages": hi}));
        let base = count_request_tokens(&text_only);
        assert!(base >= count_prompt_tokens(&text_only.messages));
        let words = |n: usize| "word ".repeat(n);
        let with_tool = params(
            serde_json::json!({"messages": hi, "max_tokens": 1, "tools": [
            {"type": "function", "function": {"name": "f", "description": words(5_000)}}]}),
        );
        assert!(count_request_tokens(&with_tool) >= base + 5_000);
        let with_schema = params(serde_json::json!({"messages": hi, "response_format":
            {"type": "json_schema", "json_schema": {"name": "s",
             "schema": {"type": "object", "description": words(2_000)}}}}));
        assert!(count_request_tokens(&with_schema) >= base + 2_000);
        let with_images = params(
            serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "hi"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/b.png"}}]}]}),
        );
        assert!(count_request_tokens(&with_images) >= base + 2 * IMAGE_TOKEN_ALLOWANCE);
        let with_calls = params(serde_json::json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
             "function": {"name": "f", "arguments": words(1_000)}}]},
            {"role": "tool", "tool_call_id": "c", "content": "done"}]}));
        assert!(count_request_tokens(&with_calls) >= base + 1_000);
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
            "messages[0].role must be one of: system, developer, user, assistant, tool, function"
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
            EmbeddingParams {
                inputs: EmbeddingInputs::Texts(vec!["a".to_owned(), "b".to_owned()]),
                sent: EmbeddingInput::Many(vec!["a".to_owned(), "b".to_owned()]),
                dimensions: Some(64),
                base64: false,
                user: None,
            }
        );
        // Token ids, as LangChain sends them, one list or several.
        let ids = count_tokens("hello world");
        assert_eq!(ids, 2);
        for input in [json!([9906, 1917]), json!([[9906, 1917], [9906]])] {
            let req: EmbeddingRequest = serde_json::from_value(json!({ "input": input })).unwrap();
            let params = req.validate().unwrap();
            assert!(matches!(params.inputs, EmbeddingInputs::Tokens(_)));
            assert_eq!(params.inputs.texts()[0], "Hello world");
        }
        let req: EmbeddingRequest =
            serde_json::from_value(json!({"input": [[4_000_000_000u32]]})).unwrap();
        assert!(req.validate().unwrap_err().message.contains("4000000000"));
        let req: EmbeddingRequest = serde_json::from_value(json!({"input": [[]]})).unwrap();
        assert_eq!(req.validate().unwrap_err().field, "input");
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

    #[test]
    fn fields_the_client_did_not_send_are_not_forwarded_and_the_rest_are_as_sent() {
        let params = request(json!({
            "model": "m", "messages": [{"role": "developer", "content": "Be terse."}, {"role": "user", "content": "hi"}],
            "stream": true, "stream_options": {"include_usage": true}, "web_search": false,
            "max_completion_tokens": 64, "seed": 7, "logprobs": true, "top_logprobs": 2,
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": false, "response_format": {"type": "json_object"}, "n": 2,
            "metadata": {"k": "v"}, "reasoning_effort": "low"
        }))
        .validate(false, false)
        .unwrap();
        let forward = Value::Object(params.forward.clone());
        assert_eq!(
            forward,
            json!({
                "max_completion_tokens": 64, "seed": 7, "logprobs": true, "top_logprobs": 2,
                "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                "parallel_tool_calls": false, "response_format": {"type": "json_object"}, "n": 2,
                "metadata": {"k": "v"}, "reasoning_effort": "low"
            })
        );
        assert_eq!(
            params.tool_choice,
            ToolChoice::Function("get_weather".into())
        );
        assert_eq!(params.response_format, ResponseFormat::JsonObject);
        assert_eq!((params.n, params.max_tokens), (2, 64));
        assert!(params.forward.get("temperature").is_none());
        assert_eq!(
            params.messages[0].to_upstream(true)["role"],
            "system",
            "developer becomes system for models that need it"
        );
        assert_eq!(params.messages[0].to_upstream(false)["role"], "developer");
    }

    #[test]
    fn tools_tool_choice_response_format_and_n_are_checked() {
        let err = |extra: Value| {
            let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            request(body).validate(false, false).unwrap_err()
        };
        let tool = json!([{"type": "function", "function": {"name": "f"}}]);
        assert_eq!(err(json!({"n": 0})).field, "n");
        assert_eq!(
            err(json!({"tools": [{"type": "function", "function": {"name": "a b"}}]})).field,
            "tools"
        );
        assert_eq!(
            err(json!({"tools": [{"function": {"name": "f"}}]})).field,
            "tools"
        );
        assert_eq!(
            err(json!({"tool_choice": "auto"})).message,
            "tool_choice is only allowed when tools are specified"
        );
        assert_eq!(
            err(json!({"tools": tool, "tool_choice": "sometimes"})).field,
            "tool_choice"
        );
        assert!(
            err(json!({"tools": tool, "tool_choice": {"type": "function", "function": {"name": "g"}}}))
                .message
                .contains("`g`")
        );
        assert_eq!(
            err(json!({"response_format": {"type": "xml"}})).field,
            "response_format"
        );
        assert_eq!(
            err(json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}))
                .message,
            "response_format.json_schema.name is required"
        );
        assert_eq!(
            err(json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]})).field,
            "messages"
        );
        // Unknown content part types pass through.
        let audio = json!({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]});
        assert!(request(audio).validate(false, false).is_ok());
    }
}
