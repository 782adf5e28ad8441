//! The built-in chat models answering OpenAI's chat protocol offline, so SDK
//! code with tools and structured outputs runs with no upstream:
//!
//! - With `tools` (and `tool_choice` not `none`), while no `tool` message
//!   follows the latest user message: one call (`call_0`) of the function
//!   `tool_choice` names, else of the first function, with arguments valid
//!   for its parameters' schema ([`instance`]: strings are the user's text);
//!   no content, finish reason `tool_calls`.
//! - Once results follow: the user's text, then `[<tool name>] <content>`
//!   per result.
//! - `response_format` `json_schema`: JSON valid for the schema;
//!   `json_object`: the user's text when it is a JSON object, else
//!   `{"text": <the user's text>}`.
//! - Otherwise the echo model: the latest user message.
//!
//! Stop sequences and `max_tokens` cut text answers as a model would; `n`
//! repeats the choice. These are test models, not language models.

use serde_json::{Value, json};

use super::chat::{cut, with_results};
use super::schema_instance::instance;
use crate::chat::{
    ChatParams, ResponseFormat, ToolChoice, count_prompt_tokens, count_tokens, token_pieces,
};

/// One choice: the message, how it streams, and its tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalChoice {
    /// The assistant message in OpenAI's shape.
    pub message: Value,
    pub finish_reason: &'static str,
    /// The stream deltas after the role chunk.
    pub deltas: Vec<Value>,
    pub completion_tokens: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LocalAnswer {
    pub choices: Vec<LocalChoice>,
    pub prompt_tokens: u32,
    /// Of every choice.
    pub completion_tokens: u32,
}

/// The test model's answer to `params`.
pub fn answer(params: &ChatParams) -> LocalAnswer {
    let choice = match called_function(params) {
        Some((name, schema)) => tool_call(name, schema, params),
        None => text(params),
    };
    let n = params.n.max(1);
    LocalAnswer {
        completion_tokens: choice.completion_tokens * n,
        choices: vec![choice; n as usize],
        prompt_tokens: count_prompt_tokens(&params.messages),
    }
}

/// The function to call now, and its parameters' schema, if any.
fn called_function(params: &ChatParams) -> Option<(&str, Value)> {
    if params.tool_choice == ToolChoice::None {
        return None;
    }
    let latest_user = params.messages.iter().rposition(|m| m.role == "user");
    let since = &params.messages[latest_user.map_or(0, |i| i + 1)..];
    if since
        .iter()
        .any(|m| m.role == "tool" || m.role == "function")
    {
        return None;
    }
    let functions = params
        .tools
        .iter()
        .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"));
    let tool = match &params.tool_choice {
        ToolChoice::Function(name) => functions
            .clone()
            .find(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(name)),
        _ => functions.clone().next(),
    }?;
    let name = tool.pointer("/function/name").and_then(Value::as_str)?;
    let schema = tool
        .pointer("/function/parameters")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    Some((name, schema))
}

fn tool_call(name: &str, schema: Value, params: &ChatParams) -> LocalChoice {
    let arguments = instance(&schema, &params.last_user_text()).to_string();
    let id = "call_0";
    let mut deltas = vec![json!({"tool_calls": [{
        "index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}
    }]})];
    deltas.extend(
        token_pieces(&arguments)
            .into_iter()
            .map(|piece| json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})),
    );
    LocalChoice {
        message: json!({
            "role": "assistant", "content": null, "refusal": null,
            "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}],
        }),
        finish_reason: "tool_calls",
        deltas,
        completion_tokens: count_tokens(name) + count_tokens(&arguments),
    }
}

fn text(params: &ChatParams) -> LocalChoice {
    let user = params.last_user_text();
    let text = match &params.response_format {
        ResponseFormat::JsonSchema(schema) => instance(schema, &user).to_string(),
        ResponseFormat::JsonObject => match serde_json::from_str::<Value>(&user) {
            Ok(object @ Value::Object(_)) => object.to_string(),
            _ => json!({ "text": user }).to_string(),
        },
        ResponseFormat::Text => {
            let latest_user = params.messages.iter().rposition(|m| m.role == "user");
            with_results(user, &params.messages[latest_user.map_or(0, |i| i + 1)..])
        }
    };
    let said = cut(text, params);
    LocalChoice {
        message: json!({"role": "assistant", "content": said.text, "refusal": null}),
        finish_reason: said.finish_reason,
        deltas: said
            .pieces
            .iter()
            .map(|piece| json!({ "content": piece }))
            .collect(),
        completion_tokens: said.completion_tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ChatCompletionRequest;

    fn params(body: Value) -> ChatParams {
        serde_json::from_value::<ChatCompletionRequest>(body)
            .unwrap()
            .validate(false, false)
            .unwrap()
    }

    fn weather_tools() -> Value {
        json!([
            {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
            {"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                "required": ["city", "unit"], "additionalProperties": false}}}
        ])
    }

    #[test]
    fn tools_get_one_call_with_schema_valid_arguments_then_the_results_are_answered() {
        let asked = params(json!({
            "messages": [{"role": "user", "content": "Paris"}], "tools": weather_tools(),
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}
        }));
        let reply = answer(&asked);
        let choice = &reply.choices[0];
        assert_eq!(choice.finish_reason, "tool_calls");
        assert_eq!(choice.message["content"], Value::Null);
        let call = &choice.message["tool_calls"][0];
        assert_eq!(
            (call["id"].as_str(), call["function"]["name"].as_str()),
            (Some("call_0"), Some("get_weather"))
        );
        let arguments: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(arguments, json!({"city": "Paris", "unit": "c"}));
        // Streamed, the argument pieces rebuild the arguments.
        let streamed: String = choice.deltas[1..]
            .iter()
            .map(|d| {
                d["tool_calls"][0]["function"]["arguments"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(streamed, call["function"]["arguments"].as_str().unwrap());

        let answered = params(json!({
            "messages": [
                {"role": "user", "content": "Paris"},
                {"role": "assistant", "content": null, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_0", "content": "18 C"}
            ],
            "tools": weather_tools()
        }));
        let reply = answer(&answered);
        assert_eq!(
            reply.choices[0].message["content"],
            "Paris\n[get_weather] 18 C"
        );
        assert_eq!(reply.choices[0].finish_reason, "stop");
        // `auto` calls the first function; `none` calls nothing.
        let auto = answer(&params(
            json!({"messages": [{"role": "user", "content": "x"}], "tools": weather_tools()}),
        ));
        assert_eq!(
            auto.choices[0].message["tool_calls"][0]["function"]["name"],
            "get_time"
        );
        let none = answer(&params(
            json!({"messages": [{"role": "user", "content": "x"}], "tools": weather_tools(), "tool_choice": "none"}),
        ));
        assert_eq!(none.choices[0].message["content"], "x");
    }

    #[test]
    fn structured_outputs_are_json_of_the_schema_and_n_repeats_the_choice() {
        let reply = answer(&params(json!({
            "messages": [{"role": "user", "content": "Ada"}], "n": 3,
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema": {
                "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name", "age"], "additionalProperties": false}}}
        })));
        assert_eq!(reply.choices.len(), 3);
        assert_eq!(
            reply.completion_tokens,
            reply.choices[0].completion_tokens * 3
        );
        let content: Value =
            serde_json::from_str(reply.choices[2].message["content"].as_str().unwrap()).unwrap();
        assert_eq!(content, json!({"name": "Ada", "age": 1}));
        let object = answer(&params(
            json!({"messages": [{"role": "user", "content": "{\"a\": 1}"}], "response_format": {"type": "json_object"}}),
        ));
        assert_eq!(object.choices[0].message["content"], "{\"a\":1}");
        let wrapped = answer(&params(
            json!({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}}),
        ));
        assert_eq!(wrapped.choices[0].message["content"], "{\"text\":\"hi\"}");
    }
}
