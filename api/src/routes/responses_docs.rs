//! OpenAPI schemas of the Responses API routes (documentation only: the
//! handlers read and write JSON through `unigen_protocols::responses`).

#![allow(dead_code)]

use std::collections::HashMap;

use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};

/// `tool_choice`: a mode (`none`, `auto`, `required`) or an object.
fn tool_choice() -> Schema {
    OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::String))
        .item(ObjectBuilder::new().schema_type(Type::Object))
        .build()
        .into()
}

fn tool_choice_or_null() -> Schema {
    OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::String))
        .item(ObjectBuilder::new().schema_type(Type::Object))
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .build()
        .into()
}

/// `input`: a string (one user message), or a list of input items.
#[derive(ToSchema)]
#[serde(untagged)]
pub enum ResponseInput {
    Text(String),
    /// Messages (`{role, content}`: `user`, `system`, `developer` with
    /// `input_text` / `input_image` parts or a string; `assistant` with
    /// `output_text` / `refusal` parts or a string), `function_call` and
    /// `function_call_output` items.
    #[schema(value_type = Vec<Object>)]
    Items(Vec<Value>),
}

/// Body of `POST /responses` (OpenAI's Responses API). A field the service
/// cannot honour is a 400 naming it, never dropped: hosted tool types
/// (`file_search`, `web_search_preview`, `computer_use_preview`...),
/// `conversation`, `prompt`, `include` values, `truncation: auto`;
/// `background` with `stream`, without `store`, or for a model served by a
/// native Responses upstream.
#[derive(ToSchema)]
pub struct ResponseCreateRequest {
    /// A chat model of the catalogue (id or alias); the default chat model when absent.
    pub model: Option<String>,
    pub input: ResponseInput,
    /// A system message ahead of the conversation (not carried to responses that continue this one).
    pub instructions: Option<String>,
    #[schema(minimum = 1, maximum = 32768)]
    pub max_output_tokens: Option<u32>,
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f64>,
    #[schema(minimum = 0, maximum = 1)]
    pub top_p: Option<f64>,
    pub parallel_tool_calls: Option<bool>,
    /// Up to 16 string pairs (keys up to 64 characters, values up to 512), stored and returned with the response.
    pub metadata: Option<HashMap<String, String>>,
    /// `{format: {type: text} | {type: json_object} | {type: json_schema, name, schema, strict}, verbosity}`.
    #[schema(value_type = Option<Object>)]
    pub text: Option<Value>,
    /// Function tools: `{type: function, name, description, parameters, strict}`.
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// `none`, `auto`, `required` or `{type: function, name}`.
    #[schema(schema_with = tool_choice_or_null)]
    pub tool_choice: Option<Value>,
    /// Store the response (default true) for `GET`, `input_items` and `previous_response_id`.
    pub store: Option<bool>,
    /// Continue the conversation of a stored response of the organization.
    pub previous_response_id: Option<String>,
    /// Stream typed server-sent events.
    pub stream: Option<bool>,
    /// Run the response as a job of the `responses` tool (listed by `GET /jobs`): answered at once `queued`, then polled with `GET /responses/{id}` (`in_progress`, `completed`, `failed`, `cancelled`) and cancelled with `POST /responses/{id}/cancel`. Not with `stream`; requires `store`.
    pub background: Option<bool>,
    pub user: Option<String>,
    pub safety_identifier: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub service_tier: Option<String>,
    /// `{effort}`, forwarded as the chat request's `reasoning_effort`.
    #[schema(value_type = Option<Object>)]
    pub reasoning: Option<Value>,
    /// Only the empty list.
    pub include: Option<Vec<String>>,
    /// Only `disabled`.
    pub truncation: Option<String>,
    /// Only `{include_obfuscation: false}`.
    #[schema(value_type = Option<Object>)]
    pub stream_options: Option<Value>,
}

#[derive(ToSchema)]
pub struct ResponseUsage {
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub total_tokens: u32,
    #[schema(value_type = Object)]
    pub input_tokens_details: Value,
    #[schema(value_type = Object)]
    pub output_tokens_details: Value,
    /// Credits charged, as for chat completions.
    pub credits_used: i64,
}

/// A `response` object, in OpenAI's shape.
#[derive(ToSchema)]
pub struct ResponseObject {
    #[schema(example = "resp_0193c1d2e3f47a8b9c0d1e2f3a4b5c6d")]
    pub id: String,
    /// `response`.
    pub object: String,
    pub created_at: i64,
    pub completed_at: Option<i64>,
    /// `completed`, `incomplete` or `failed`.
    pub status: String,
    /// The catalogue id of the model that answered.
    pub model: String,
    /// Output items: `message` (with `output_text` / `refusal` parts) and `function_call`.
    #[schema(value_type = Vec<Object>)]
    pub output: Vec<Value>,
    pub usage: Option<ResponseUsage>,
    #[schema(value_type = Option<Object>)]
    pub error: Option<Value>,
    #[schema(value_type = Option<Object>)]
    pub incomplete_details: Option<Value>,
    pub instructions: Option<String>,
    pub previous_response_id: Option<String>,
    pub store: bool,
    pub parallel_tool_calls: bool,
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Value>,
    /// `none`, `auto`, `required` or `{type: function, name}`.
    #[schema(schema_with = tool_choice)]
    pub tool_choice: Value,
    #[schema(value_type = Object)]
    pub text: Value,
    pub metadata: HashMap<String, String>,
}

#[derive(ToSchema)]
pub struct ResponseDeleted {
    pub id: String,
    /// `response.deleted`.
    pub object: String,
    pub deleted: bool,
}

/// A page of a response's input items.
#[derive(ToSchema)]
pub struct ResponseItemList {
    /// `list`.
    pub object: String,
    #[schema(value_type = Vec<Object>)]
    pub data: Vec<Value>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}
