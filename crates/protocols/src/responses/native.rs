//! A Responses request passed through to an upstream that speaks the
//! Responses API natively: nothing is translated; these read what the
//! route needs (the fields it handles, the input items it stores, what the
//! hold counts) and make the two changes it may make to the body.

use serde_json::{Map, Value, json};

use super::ids::Ids;
use super::invalid::Invalid;

/// The fields of a passed-through request the service itself reads.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeRequest {
    pub model: Option<String>,
    pub stream: bool,
    /// `store` (default true): the service keeps the response too.
    pub store: bool,
    pub previous_response_id: Option<String>,
    pub max_output_tokens: Option<u64>,
    pub background: bool,
}

/// Reads the fields the service handles; every other field is the
/// upstream's to read. `null` counts as absent.
pub fn read_native(body: &Map<String, Value>) -> Result<NativeRequest, Invalid> {
    let get = |key: &str| body.get(key).filter(|v| !v.is_null());
    let boolean = |key: &str, default: bool| match get(key) {
        None => Ok(default),
        Some(value) => value
            .as_bool()
            .ok_or_else(|| Invalid::new(key, format!("{key} must be a boolean"))),
    };
    let string = |key: &str| match get(key) {
        None => Ok(None),
        Some(value) => value
            .as_str()
            .map(|s| Some(s.to_owned()))
            .ok_or_else(|| Invalid::new(key, format!("{key} must be a string"))),
    };
    let max_output_tokens = match get("max_output_tokens") {
        None => None,
        Some(value) => Some(value.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
            Invalid::new(
                "max_output_tokens",
                "max_output_tokens must be a positive integer",
            )
        })?),
    };
    let input = get("input");
    if !matches!(input, Some(Value::String(_) | Value::Array(_))) {
        return Err(Invalid::new(
            "input",
            match input {
                None => "input is required",
                Some(_) => "input must be a string or a list of input items",
            },
        ));
    }
    Ok(NativeRequest {
        model: string("model")?,
        stream: boolean("stream", false)?,
        store: boolean("store", true)?,
        previous_response_id: string("previous_response_id")?,
        max_output_tokens,
        background: boolean("background", false)?,
    })
}

/// The request's input as stored items (what `input_items` lists): a
/// string is one user message; listed items are kept as sent, given an
/// `id` when they have none.
pub fn native_input_items(input: &Value, ids: &mut Ids) -> Vec<Value> {
    match input {
        Value::String(text) => vec![json!({
            "id": ids.mint("msg"), "type": "message", "role": "user", "status": "completed",
            "content": [{"type": "input_text", "text": text}],
        })],
        Value::Array(items) => items
            .iter()
            .map(|item| {
                let mut item = item.clone();
                if let Some(fields) = item.as_object_mut()
                    && !fields.get("id").is_some_and(Value::is_string)
                {
                    let prefix = match fields.get("type").and_then(Value::as_str) {
                        Some("function_call") => "fc",
                        Some("function_call_output") => "fco",
                        Some("message") | None => "msg",
                        Some(_) => "item",
                    };
                    fields.insert("id".into(), json!(ids.mint(prefix)));
                }
                item
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Continues a stored conversation the upstream does not hold (a response
/// bridged through chat, or held by another upstream): the conversation
/// goes ahead of the input, and `previous_response_id` is taken out.
pub fn inline_conversation(body: &mut Map<String, Value>, conversation: &[Value], input: &[Value]) {
    body.remove("previous_response_id");
    let mut items = conversation.to_vec();
    items.extend(input.iter().cloned());
    body.insert("input".into(), Value::Array(items));
}

/// What a hold counts of a request: every string of `input`,
/// `instructions`, `tools` and `text` (a JSON schema), and of the
/// continued `conversation`; images (data URLs and image URLs) are counted
/// apart. Returns the text and the number of images.
pub fn hold_text(body: &Map<String, Value>, conversation: &[Value]) -> (String, u32) {
    fn walk(value: &Value, key: &str, text: &mut String, images: &mut u32) {
        match value {
            Value::String(s) if s.starts_with("data:") || key == "image_url" => *images += 1,
            Value::String(s) => {
                text.push_str(s);
                text.push(' ');
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, key, text, images)),
            Value::Object(fields) => {
                for (k, v) in fields {
                    // Item ids and types are not sent to the model as text.
                    if !matches!(k.as_str(), "id" | "type" | "status" | "call_id") {
                        walk(v, k, text, images);
                    }
                }
            }
            _ => {}
        }
    }
    let (mut text, mut images) = (String::new(), 0);
    for key in ["instructions", "input", "tools", "text"] {
        if let Some(value) = body.get(key) {
            walk(value, key, &mut text, &mut images);
        }
    }
    for item in conversation {
        walk(item, "", &mut text, &mut images);
    }
    (text, images)
}

/// `(input_tokens, output_tokens)` of an upstream `response`'s usage.
pub fn usage_tokens(response: &Value) -> (Option<u32>, Option<u32>) {
    let read = |key: &str| {
        response["usage"][key]
            .as_u64()
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    (read("input_tokens"), read("output_tokens"))
}

/// What an event's delta or an output item says (for usage when the
/// upstream reports none): text, refusals, call arguments, reasoning.
pub fn said_in_event(event: &Value) -> &str {
    let kind = event["type"].as_str().unwrap_or_default();
    if kind.ends_with(".delta") {
        event["delta"].as_str().unwrap_or_default()
    } else {
        ""
    }
}

/// The text an output says (for usage when the upstream reports none).
pub fn said_in_output(response: &Value) -> String {
    let mut said = String::new();
    for item in response["output"].as_array().into_iter().flatten() {
        for key in ["arguments", "name"] {
            if let Some(text) = item[key].as_str() {
                said.push_str(text);
            }
        }
        for part in item["content"].as_array().into_iter().flatten() {
            for key in ["text", "refusal"] {
                if let Some(text) = part[key].as_str() {
                    said.push_str(text);
                }
            }
        }
    }
    said
}

/// The service's fields added to an upstream's usage object (credits).
pub fn add_to_usage(response: &mut Value, fields: &Map<String, Value>) {
    if let Some(usage) = response.get_mut("usage").and_then(Value::as_object_mut) {
        for (key, value) in fields {
            usage.insert(key.clone(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn the_fields_the_service_reads_are_checked_and_named() {
        let read = read_native(&object(json!({
            "model": "m", "input": "hi", "stream": true, "store": false,
            "previous_response_id": "resp_1", "max_output_tokens": 70000,
            "tools": [{"type": "web_search"}], "include": ["reasoning.encrypted_content"],
        })))
        .unwrap();
        assert_eq!(
            read,
            NativeRequest {
                model: Some("m".into()),
                stream: true,
                store: false,
                previous_response_id: Some("resp_1".into()),
                max_output_tokens: Some(70000),
                background: false,
            }
        );
        let defaults = read_native(&object(json!({"input": [], "store": null}))).unwrap();
        assert!(defaults.store && !defaults.stream);
        for (body, param) in [
            (json!({"input": "hi", "stream": "yes"}), "stream"),
            (json!({"input": "hi", "store": 1}), "store"),
            (
                json!({"input": "hi", "previous_response_id": 3}),
                "previous_response_id",
            ),
            (
                json!({"input": "hi", "max_output_tokens": 0}),
                "max_output_tokens",
            ),
            (
                json!({"input": "hi", "max_output_tokens": -4}),
                "max_output_tokens",
            ),
            (json!({"input": 4}), "input"),
            (json!({"model": "m"}), "input"),
            (json!({"input": "hi", "model": ["m"]}), "model"),
        ] {
            assert_eq!(read_native(&object(body)).unwrap_err().param, param);
        }
    }

    #[test]
    fn input_items_are_kept_as_sent_and_given_ids() {
        let mut ids = Ids::new("x");
        let items = native_input_items(&json!("Hello"), &mut ids);
        assert_eq!(items[0]["role"], "user");
        assert_eq!(
            items[0]["content"][0],
            json!({"type": "input_text", "text": "Hello"})
        );
        assert_eq!(items[0]["id"], "msg_x0000");
        let sent = json!([
            {"role": "user", "content": "a"},
            {"type": "function_call_output", "call_id": "c", "output": "2"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "item_reference", "id": "msg_9"},
        ]);
        let items = native_input_items(&sent, &mut ids);
        assert_eq!(items[0]["id"], "msg_x0001");
        assert_eq!(items[0]["content"], "a");
        assert_eq!(items[1]["id"], "fco_x0002");
        assert_eq!(items[2], sent[2]);
        assert_eq!(items[3], sent[3]);
    }

    #[test]
    fn a_conversation_not_held_upstream_goes_ahead_of_the_input() {
        let mut body =
            object(json!({"model": "m", "previous_response_id": "resp_1", "input": "again"}));
        let context = [json!({"type": "message", "role": "user", "content": "first"})];
        let input = native_input_items(&json!("again"), &mut Ids::new("y"));
        inline_conversation(&mut body, &context, &input);
        assert!(!body.contains_key("previous_response_id"));
        assert_eq!(body["input"][0], context[0]);
        assert_eq!(body["input"][1]["content"][0]["text"], "again");
    }

    #[test]
    fn the_hold_counts_text_and_images_apart() {
        let body = object(json!({
            "model": "not counted", "instructions": "Be brief.",
            "input": [{"type": "message", "role": "user", "id": "msg_1", "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": "https://example.com/a.png"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}],
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        }));
        let context = [
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Before."}]}),
        ];
        let (text, images) = hold_text(&body, &context);
        assert_eq!(images, 2);
        for said in ["Be brief.", "What is this?", "f", "Before.", "assistant"] {
            assert!(text.contains(said), "{text}");
        }
        for unsaid in ["not counted", "msg_1", "input_text", "base64"] {
            assert!(!text.contains(unsaid), "{text}");
        }
    }

    #[test]
    fn usage_and_what_was_said_are_read_from_the_response() {
        let response = json!({
            "usage": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
            "output": [
                {"type": "message", "content": [{"type": "output_text", "text": "Hi."}]},
                {"type": "function_call", "name": "f", "arguments": "{}"},
            ],
        });
        assert_eq!(usage_tokens(&response), (Some(12), Some(5)));
        assert_eq!(usage_tokens(&json!({})), (None, None));
        assert_eq!(said_in_output(&response), "Hi.{}f");
        assert_eq!(
            said_in_event(&json!({"type": "response.output_text.delta", "delta": "Hel"})),
            "Hel"
        );
        assert_eq!(
            said_in_event(&json!({"type": "response.output_text.done", "text": "Hello"})),
            ""
        );
        let mut response = response;
        add_to_usage(&mut response, &object(json!({"credits_used": 3})));
        assert_eq!(response["usage"]["credits_used"], 3);
        assert_eq!(response["usage"]["input_tokens"], 12);
    }
}
