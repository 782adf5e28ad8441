//! Documentation-only shapes of Anthropic's Messages API as the
//! `/messages` routes speak it (see `crate::routes::messages`).
#![allow(dead_code)]

use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

fn constant(value: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some([value]))
        .build()
}

fn message_type() -> Object {
    constant("message")
}

fn assistant_role() -> Object {
    constant("assistant")
}

fn error_type() -> Object {
    constant("error")
}

/// A Messages request (Anthropic's shape).
#[derive(ToSchema)]
pub struct MessagesRequest {
    /// A chat model's catalogue id or alias (e.g. `local/echo`); the
    /// default chat model when absent.
    pub model: Option<String>,
    /// Required by `/messages` (not by `/messages/count_tokens`).
    #[schema(minimum = 1)]
    pub max_tokens: Option<u64>,
    /// `{role: user|assistant, content: string | blocks}`; blocks of type
    /// `text`, `image` (`base64` or `url` source), `tool_use`, `tool_result`
    /// (`thinking` blocks of past turns are accepted and left out).
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<Value>,
    /// A string or a list of text blocks.
    #[schema(value_type = Option<Object>)]
    pub system: Option<Value>,
    pub stop_sequences: Option<Vec<String>>,
    /// 0 to 1.
    pub temperature: Option<f64>,
    /// 0 to 1.
    pub top_p: Option<f64>,
    /// Models on an anthropic upstream only.
    pub top_k: Option<u64>,
    /// `{user_id}`: the chat request's `user`.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// `{type: disabled}`; `enabled` and `adaptive` on anthropic upstreams only.
    #[schema(value_type = Option<Object>)]
    pub thinking: Option<Value>,
    /// Custom tools: `{name, description, input_schema}`.
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// `{type: auto|any|tool|none, name, disable_parallel_tool_use}`.
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Value>,
    pub stream: Option<bool>,
}

#[derive(ToSchema)]
pub struct AnthropicUsage {
    pub input_tokens: u32,
    pub output_tokens: u32,
}

/// A Messages answer.
#[derive(ToSchema)]
pub struct AnthropicMessage {
    #[schema(example = "msg_0193c1d2e3f4")]
    pub id: String,
    #[serde(rename = "type")]
    #[schema(schema_with = message_type)]
    pub kind: String,
    #[schema(schema_with = assistant_role)]
    pub role: String,
    /// The catalogue id of the model that answered.
    pub model: String,
    /// `text`, `tool_use` (`id`, `name`, `input`) and `thinking` blocks.
    #[schema(value_type = Vec<Object>)]
    pub content: Vec<Value>,
    /// `end_turn`, `max_tokens`, `tool_use` or `refusal`.
    pub stop_reason: String,
    pub stop_sequence: Option<String>,
    pub usage: AnthropicUsage,
}

#[derive(ToSchema)]
pub struct AnthropicErrorDetail {
    /// `invalid_request_error`, `authentication_error`, `billing_error`,
    /// `permission_error`, `not_found_error`, `rate_limit_error`,
    /// `api_error` or `overloaded_error`.
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
}

/// An error in Anthropic's shape.
#[derive(ToSchema)]
pub struct AnthropicErrorBody {
    #[serde(rename = "type")]
    #[schema(schema_with = error_type)]
    pub kind: String,
    pub error: AnthropicErrorDetail,
}

/// `/messages/count_tokens`'s answer.
#[derive(ToSchema)]
pub struct AnthropicTokenCount {
    pub input_tokens: u32,
}
