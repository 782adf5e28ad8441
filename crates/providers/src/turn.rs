//! The vocabulary of one tool-calling turn in the OpenAI function-calling
//! protocol: the tools offered, the calls the model makes, its answer.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use unigen_core::config::ModelEntry;

use crate::chat::{ChatMessage, MessageContent};

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// A JSON Schema object describing the arguments.
    pub parameters: Value,
}

impl ToolSpec {
    /// The OpenAI `tools[]` entry.
    pub fn to_upstream(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        })
    }
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// A JSON object; `{"_raw": "<text>"}` when the model sent arguments
    /// that are not one.
    pub arguments: Value,
}

impl ToolCall {
    /// The OpenAI `tool_calls[]` entry (`arguments` as a JSON string).
    pub fn to_upstream(&self) -> Value {
        json!({
            "id": self.id,
            "type": "function",
            "function": { "name": self.name, "arguments": self.arguments.to_string() },
        })
    }

    /// Reads an OpenAI `tool_calls[]` entry; `index` names calls without an id.
    pub(crate) fn from_upstream(index: usize, call: &Value) -> Self {
        let id = call["id"]
            .as_str()
            .filter(|id| !id.is_empty())
            .map_or_else(|| format!("call_{index}"), str::to_owned);
        // Some OpenAI-compatible servers send the arguments as an object.
        let arguments = match &call["function"]["arguments"] {
            Value::String(text) => parse_arguments(text),
            Value::Object(object) => Value::Object(object.clone()),
            Value::Null => json!({}),
            other @ (Value::Bool(_) | Value::Number(_) | Value::Array(_)) => {
                json!({ "_raw": other.to_string() })
            }
        };
        Self {
            id,
            // A nameless call still reaches the runner, which reports it
            // to the model as an unknown tool.
            name: call["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            arguments,
        }
    }
}

/// Tool arguments from their JSON text: an object as is, blank as `{}`,
/// anything else as `{"_raw": text}`.
pub fn parse_arguments(text: &str) -> Value {
    if text.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(text) {
        Ok(object @ Value::Object(_)) => object,
        Ok(_) | Err(_) => json!({ "_raw": text }),
    }
}

/// One model turn: the conversation so far and the tools on offer.
#[derive(Debug, Clone, Copy)]
pub struct TurnRequest<'a> {
    pub model: &'a ModelEntry,
    pub messages: &'a [ChatMessage],
    pub tools: &'a [ToolSpec],
    pub temperature: f64,
    pub max_tokens: u32,
}

/// What the model answered: text, tool calls, or both.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    /// As the model reported it: `stop`, `tool_calls`, `length`...
    pub finish_reason: String,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
}

impl Turn {
    /// The assistant message to append to the conversation (with
    /// `tool_calls` in OpenAI wire shape when any).
    pub fn assistant_message(&self) -> ChatMessage {
        let (content, tool_calls) = if self.tool_calls.is_empty() {
            // Without tool calls, OpenAI requires assistant content.
            let text = self.content.clone().unwrap_or_default();
            (Some(MessageContent::Text(text)), None)
        } else {
            (
                self.content.clone().map(MessageContent::Text),
                Some(self.tool_calls.iter().map(ToolCall::to_upstream).collect()),
            )
        };
        ChatMessage {
            role: "assistant".into(),
            content,
            images: None,
            name: None,
            tool_call_id: None,
            tool_calls,
            extra: Default::default(),
        }
    }
}

/// The `tool` message answering `call`: its content is the JSON text of
/// `result`.
pub fn tool_result_message(call: &ToolCall, result: &Value) -> ChatMessage {
    ChatMessage {
        role: "tool".into(),
        content: Some(MessageContent::Text(result.to_string())),
        images: None,
        // OpenAI's tool messages carry no name; the id links them to the call.
        name: None,
        tool_call_id: Some(call.id.clone()),
        tool_calls: None,
        extra: Default::default(),
    }
}
