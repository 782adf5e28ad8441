//! A chat answer as a Responses answer: output items, status, usage and the
//! `response` object.

use serde_json::{Map, Value, json};

use super::Ids;

/// An output message holding `content` parts.
pub fn message_item(id: &str, status: &str, content: Vec<Value>) -> Value {
    json!({"id": id, "type": "message", "role": "assistant", "status": status, "content": content})
}

/// An `output_text` part.
pub fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

pub fn refusal_part(refusal: &str) -> Value {
    json!({"type": "refusal", "refusal": refusal})
}

pub fn call_item(id: &str, status: &str, call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": id, "type": "function_call", "status": status, "call_id": call_id, "name": name, "arguments": arguments})
}

/// The items of a chat assistant `message`: one output message (its text
/// and refusal), then one `function_call` per tool call.
pub fn output_items(message: &Value, ids: &mut Ids) -> Vec<Value> {
    let mut items = Vec::new();
    let mut content = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        content.push(text_part(text));
    }
    if let Some(refusal) = message["refusal"].as_str().filter(|t| !t.is_empty()) {
        content.push(refusal_part(refusal));
    }
    let calls = message["tool_calls"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if !content.is_empty() || calls.is_empty() {
        items.push(message_item(&ids.mint("msg"), "completed", content));
    }
    for call in calls {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        items.push(call_item(
            &ids.mint("fc"),
            "completed",
            &text(&call["id"]),
            &text(&call["function"]["name"]),
            &text(&call["function"]["arguments"]),
        ));
    }
    items
}

/// The response's `status` and `incomplete_details` for a chat finish reason.
pub fn status_of(finish_reason: &str) -> (&'static str, Value) {
    match finish_reason {
        "length" => ("incomplete", json!({"reason": "max_output_tokens"})),
        "content_filter" => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    }
}

/// The chat usage object in the Responses shape: `input_tokens`,
/// `output_tokens`, `total_tokens` and their details; the service's own
/// fields (`credits_used`, `quota_multiplier`...) kept.
pub fn usage(chat_usage: &Value) -> Value {
    let count = |key: &str| chat_usage[key].as_u64().unwrap_or(0);
    let (input, output) = (count("prompt_tokens"), count("completion_tokens"));
    let mut usage = Map::new();
    if let Some(fields) = chat_usage.as_object() {
        for (key, value) in fields {
            if !["prompt_tokens", "completion_tokens", "total_tokens"].contains(&key.as_str()) {
                usage.insert(key.clone(), value.clone());
            }
        }
    }
    usage.extend([
        ("input_tokens".to_owned(), json!(input)),
        (
            "input_tokens_details".to_owned(),
            json!({"cached_tokens": 0}),
        ),
        ("output_tokens".to_owned(), json!(output)),
        (
            "output_tokens_details".to_owned(),
            json!({"reasoning_tokens": 0}),
        ),
        ("total_tokens".to_owned(), json!(input + output)),
    ]);
    Value::Object(usage)
}

/// What every `response` object carries besides the request's echo.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    pub id: String,
    /// Unix seconds.
    pub created_at: i64,
    pub model: String,
}

/// The `response` object of a chat answer's first choice, completed at
/// `completed_at` (its items, status and `incomplete_details`).
pub fn answered(
    head: &Head,
    echo: &Map<String, Value>,
    choices: &[Value],
    ids: &mut Ids,
    usage: Value,
    completed_at: i64,
) -> Value {
    let choice = choices.first().cloned().unwrap_or(Value::Null);
    let items = output_items(&choice["message"], ids);
    let (status, incomplete) = status_of(choice["finish_reason"].as_str().unwrap_or("stop"));
    let details = Details {
        incomplete,
        completed_at: Some(completed_at),
        ..Details::default()
    };
    response_object(head, echo, status, &items, usage, details)
}

/// The `response` object.
pub fn response_object(
    head: &Head,
    echo: &Map<String, Value>,
    status: &str,
    output: &[Value],
    usage: Value,
    details: Details,
) -> Value {
    let mut body = echo.clone();
    body.extend([
        ("id".to_owned(), json!(head.id)),
        ("object".to_owned(), json!("response")),
        ("created_at".to_owned(), json!(head.created_at)),
        ("model".to_owned(), json!(head.model)),
        ("status".to_owned(), json!(status)),
        ("output".to_owned(), Value::Array(output.to_vec())),
        ("usage".to_owned(), usage),
        ("error".to_owned(), details.error),
        ("incomplete_details".to_owned(), details.incomplete),
        ("completed_at".to_owned(), json!(details.completed_at)),
    ]);
    Value::Object(body)
}

/// How a response ended: `error` (failed) or `incomplete_details`, and when.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Details {
    pub error: Value,
    pub incomplete: Value,
    pub completed_at: Option<i64>,
}

/// The `error` of a failed response.
pub fn failure(message: &str) -> Value {
    json!({"code": "server_error", "message": message})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_answer_is_one_output_message() {
        let items = output_items(
            &json!({"role": "assistant", "content": "Hi.", "refusal": null}),
            &mut Ids::new("r"),
        );
        assert_eq!(
            items,
            vec![
                json!({"id": "msg_r0000", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "Hi.", "annotations": [], "logprobs": []}]})
            ]
        );
    }

    #[test]
    fn tool_calls_are_function_call_items_after_any_text() {
        let items = output_items(
            &json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": "a", "arguments": "{}"}},
                {"id": "call_1", "type": "function", "function": {"name": "b", "arguments": "{\"x\":1}"}},
            ]}),
            &mut Ids::new("r"),
        );
        assert_eq!(
            items,
            vec![
                call_item("fc_r0000", "completed", "call_0", "a", "{}"),
                call_item("fc_r0001", "completed", "call_1", "b", "{\"x\":1}"),
            ]
        );
        let both = output_items(
            &json!({"content": "Checking.", "refusal": "no", "tool_calls": [
                {"id": "c", "function": {"name": "a", "arguments": "{}"}}]}),
            &mut Ids::new("r"),
        );
        assert_eq!(both.len(), 2);
        assert_eq!(
            both[0]["content"][1],
            json!({"type": "refusal", "refusal": "no"})
        );
        // An empty answer is still one (empty) message.
        assert_eq!(
            output_items(&json!({"content": ""}), &mut Ids::new("r"))[0]["content"],
            json!([])
        );
    }

    #[test]
    fn finish_reasons_give_the_status() {
        assert_eq!(status_of("stop"), ("completed", Value::Null));
        assert_eq!(status_of("tool_calls"), ("completed", Value::Null));
        assert_eq!(status_of("length").0, "incomplete");
        assert_eq!(status_of("length").1["reason"], "max_output_tokens");
        assert_eq!(status_of("content_filter").1["reason"], "content_filter");
    }

    #[test]
    fn usage_is_renamed_and_the_services_fields_kept() {
        let chat = json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15, "credits_used": 3});
        assert_eq!(
            usage(&chat),
            json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                   "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15, "credits_used": 3})
        );
    }

    #[test]
    fn the_response_object_has_every_field_the_sdk_requires() {
        let mut echo = Map::new();
        echo.insert("tools".into(), json!([]));
        echo.insert("tool_choice".into(), json!("auto"));
        echo.insert("parallel_tool_calls".into(), json!(true));
        let head = Head {
            id: "resp_1".into(),
            created_at: 7,
            model: "m".into(),
        };
        let body = response_object(
            &head,
            &echo,
            "completed",
            &[],
            Value::Null,
            Details {
                completed_at: Some(8),
                ..Details::default()
            },
        );
        for key in [
            "id",
            "object",
            "created_at",
            "model",
            "output",
            "parallel_tool_calls",
            "tool_choice",
            "tools",
            "status",
        ] {
            assert!(body.get(key).is_some(), "{key}");
        }
        assert_eq!(body["object"], "response");
        assert_eq!(body["completed_at"], 8);
        assert_eq!(
            failure("boom"),
            json!({"code": "server_error", "message": "boom"})
        );
    }
}
