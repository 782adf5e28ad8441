//! Input items: what a client may send in `input`, checked and put in their
//! stored shape (every item with an `id` and a `status`, as
//! `GET /responses/{id}/input_items` lists them), and a conversation of
//! stored items (inputs and outputs of the responses it continues) as chat
//! messages.
//!
//! Taken: messages (`user`, `system`, `developer` with `input_text` and
//! `input_image` parts or a string; `assistant` with `output_text` /
//! `refusal` parts or a string), `function_call` and
//! `function_call_output`. Anything else is refused, naming it.

use serde_json::{Map, Value, json};

use super::ids::Ids;
use super::invalid::Invalid;

const INPUT_ROLES: [&str; 4] = ["user", "system", "developer", "assistant"];
const IMAGE_DETAILS: [&str; 3] = ["auto", "low", "high"];

/// `input` (a string or a list of items) as stored items, ids minted for
/// those the client gave none.
pub fn normalize_input(input: &Value, ids: &mut Ids) -> Result<Vec<Value>, Invalid> {
    match input {
        Value::String(text) => Ok(vec![message(
            ids.mint("msg"),
            "user",
            vec![json!({"type": "input_text", "text": text})],
        )]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| normalize_item(item, i, ids))
            .collect(),
        _ => Err(Invalid::new(
            "input",
            "input must be a string or a list of input items",
        )),
    }
}

fn message(id: String, role: &str, content: Vec<Value>) -> Value {
    json!({"id": id, "type": "message", "role": role, "status": "completed", "content": content})
}

/// Reads an item's fields: each must be known; `null` counts as absent.
struct Fields<'a> {
    item: &'a Map<String, Value>,
    at: String,
}

impl<'a> Fields<'a> {
    fn new(item: &'a Value, at: String, kind: &str, known: &[&str]) -> Result<Fields<'a>, Invalid> {
        let Some(fields) = item.as_object() else {
            return Err(Invalid::new(at.clone(), format!("{at} must be an object")));
        };
        if let Some((unknown, _)) = fields
            .iter()
            .find(|(k, v)| !v.is_null() && !known.contains(&k.as_str()))
        {
            return Err(Invalid::new(
                format!("{at}.{unknown}"),
                format!("{at}.{unknown}: `{unknown}` is not supported on {kind} items"),
            ));
        }
        Ok(Fields { item: fields, at })
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.item.get(key).filter(|v| !v.is_null())
    }

    fn string(&self, key: &str) -> Result<Option<&'a str>, Invalid> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.invalid(key, "must be a string")),
        }
    }

    fn required_string(&self, key: &str) -> Result<&'a str, Invalid> {
        self.string(key)?
            .ok_or_else(|| self.invalid(key, "is required"))
    }

    fn invalid(&self, key: &str, why: &str) -> Invalid {
        let param = format!("{}.{key}", self.at);
        Invalid::new(param.clone(), format!("{param} {why}"))
    }
}

fn normalize_item(item: &Value, i: usize, ids: &mut Ids) -> Result<Value, Invalid> {
    let at = format!("input[{i}]");
    let kind = match item.get("type") {
        None | Some(Value::Null) => "message",
        Some(Value::String(kind)) => kind.as_str(),
        Some(_) => {
            return Err(Invalid::new(
                format!("{at}.type"),
                format!("{at}.type must be a string"),
            ));
        }
    };
    match kind {
        "message" => normalize_message(item, at, ids),
        "function_call" => {
            let fields = Fields::new(
                item,
                at,
                kind,
                &["type", "id", "call_id", "name", "arguments", "status"],
            )?;
            let id = match fields.string("id")? {
                Some(id) => id.to_owned(),
                None => ids.mint("fc"),
            };
            Ok(json!({
                "id": id, "type": "function_call", "status": "completed",
                "call_id": fields.required_string("call_id")?,
                "name": fields.required_string("name")?,
                "arguments": fields.required_string("arguments")?,
            }))
        }
        "function_call_output" => {
            let fields = Fields::new(
                item,
                at,
                kind,
                &["type", "id", "call_id", "output", "status"],
            )?;
            let id = match fields.string("id")? {
                Some(id) => id.to_owned(),
                None => ids.mint("fco"),
            };
            let output = match fields.get("output") {
                Some(Value::String(text)) => json!(text),
                Some(Value::Array(parts)) => {
                    let at = format!("{}.output", fields.at);
                    let parts = parts
                        .iter()
                        .enumerate()
                        .map(|(p, part)| text_part(part, &format!("{at}[{p}]")))
                        .collect::<Result<Vec<_>, _>>()?;
                    Value::Array(parts)
                }
                Some(_) => {
                    return Err(
                        fields.invalid("output", "must be a string or a list of input_text parts")
                    );
                }
                None => return Err(fields.invalid("output", "is required")),
            };
            Ok(json!({
                "id": id, "type": "function_call_output", "status": "completed",
                "call_id": fields.required_string("call_id")?, "output": output,
            }))
        }
        other => Err(Invalid::new(
            format!("{at}.type"),
            format!(
                "{at}: input items of type `{other}` are not supported (messages, function_call and function_call_output are)"
            ),
        )),
    }
}

fn normalize_message(item: &Value, at: String, ids: &mut Ids) -> Result<Value, Invalid> {
    let fields = Fields::new(
        item,
        at,
        "message",
        &["type", "id", "role", "content", "status", "phase"],
    )?;
    let role = fields.required_string("role")?;
    if !INPUT_ROLES.contains(&role) {
        return Err(fields.invalid(
            "role",
            &format!("must be one of: {}", INPUT_ROLES.join(", ")),
        ));
    }
    if let Some(phase) = fields.string("phase")?
        && role != "assistant"
    {
        return Err(fields.invalid(
            "phase",
            &format!("(`{phase}`) is only taken on assistant messages"),
        ));
    }
    let assistant = role == "assistant";
    let content_at = format!("{}.content", fields.at);
    let content = match fields.get("content") {
        Some(Value::String(text)) if assistant => {
            vec![json!({"type": "output_text", "text": text, "annotations": []})]
        }
        Some(Value::String(text)) => vec![json!({"type": "input_text", "text": text})],
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(p, part)| {
                let at = format!("{content_at}[{p}]");
                if assistant {
                    assistant_part(part, &at)
                } else {
                    input_part(part, &at)
                }
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => {
            return Err(fields.invalid("content", "must be a string or a list of content parts"));
        }
        None => return Err(fields.invalid("content", "is required")),
    };
    let id = match fields.string("id")? {
        Some(id) => id.to_owned(),
        None => ids.mint("msg"),
    };
    let mut stored = message(id, role, content);
    if let Some(phase) = fields.string("phase")? {
        stored["phase"] = json!(phase);
    }
    Ok(stored)
}

fn part_fields<'a>(part: &'a Value, at: &str, known: &[&str]) -> Result<Fields<'a>, Invalid> {
    let kind = part.get("type").and_then(Value::as_str).unwrap_or("?");
    Fields::new(part, at.to_owned(), &format!("`{kind}` content"), known)
}

/// An `input_text` part (tool outputs take only text).
fn text_part(part: &Value, at: &str) -> Result<Value, Invalid> {
    match part.get("type").and_then(Value::as_str) {
        Some("input_text") => {
            let fields = part_fields(part, at, &["type", "text"])?;
            Ok(json!({"type": "input_text", "text": fields.required_string("text")?}))
        }
        other => Err(unsupported_part(at, other, "input_text")),
    }
}

fn unsupported_part(at: &str, kind: Option<&str>, taken: &str) -> Invalid {
    match kind {
        Some(kind) => Invalid::new(
            format!("{at}.type"),
            format!(
                "{at}: content parts of type `{kind}` are not supported here (it takes {taken})"
            ),
        ),
        None => Invalid::new(
            format!("{at}.type"),
            format!("{at} must be an object with a `type`"),
        ),
    }
}

fn input_part(part: &Value, at: &str) -> Result<Value, Invalid> {
    match part.get("type").and_then(Value::as_str) {
        Some("input_text") => text_part(part, at),
        Some("input_image") => {
            let fields = part_fields(part, at, &["type", "image_url", "detail", "file_id"])?;
            if fields.get("file_id").is_some() {
                return Err(fields.invalid(
                    "file_id",
                    "is not supported: this service has no file store for inputs; send the image as image_url (a URL or a data: URI)",
                ));
            }
            let url = fields.required_string("image_url")?;
            let detail = fields.string("detail")?.unwrap_or("auto");
            if !IMAGE_DETAILS.contains(&detail) {
                return Err(fields.invalid(
                    "detail",
                    &format!("must be one of: {}", IMAGE_DETAILS.join(", ")),
                ));
            }
            Ok(json!({"type": "input_image", "image_url": url, "detail": detail}))
        }
        other => Err(unsupported_part(at, other, "input_text and input_image")),
    }
}

fn assistant_part(part: &Value, at: &str) -> Result<Value, Invalid> {
    match part.get("type").and_then(Value::as_str) {
        // What an SDK sends back of an earlier answer: annotations and
        // logprobs are the answer's, not the model's input.
        Some("output_text" | "input_text") => {
            let fields = part_fields(part, at, &["type", "text", "annotations", "logprobs"])?;
            Ok(
                json!({"type": "output_text", "text": fields.required_string("text")?, "annotations": []}),
            )
        }
        Some("refusal") => {
            let fields = part_fields(part, at, &["type", "refusal"])?;
            Ok(json!({"type": "refusal", "refusal": fields.required_string("refusal")?}))
        }
        other => Err(unsupported_part(at, other, "output_text and refusal")),
    }
}

/// A conversation of stored items as chat messages: consecutive
/// `function_call` items become one assistant message with `tool_calls`
/// (joined to the assistant message just before them), each
/// `function_call_output` a `tool` message.
pub fn to_chat_messages(items: &[Value]) -> Vec<Value> {
    let mut messages: Vec<Value> = Vec::new();
    for item in items {
        match item["type"].as_str() {
            Some("function_call") => {
                let call = json!({
                    "id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]},
                });
                match messages.last_mut() {
                    Some(last) if last["role"] == "assistant" => {
                        if let Some(calls) = last["tool_calls"].as_array_mut() {
                            calls.push(call);
                        } else {
                            last["tool_calls"] = json!([call]);
                        }
                    }
                    _ => messages
                        .push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                }
            }
            Some("function_call_output") => {
                let content = match &item["output"] {
                    Value::Array(parts) => Value::Array(
                        parts
                            .iter()
                            .map(|p| json!({"type": "text", "text": p["text"]}))
                            .collect(),
                    ),
                    other => other.clone(),
                };
                messages.push(
                    json!({"role": "tool", "tool_call_id": item["call_id"], "content": content}),
                );
            }
            _ => messages.push(message_to_chat(item)),
        }
    }
    messages
}

fn message_to_chat(item: &Value) -> Value {
    let role = item["role"].as_str().unwrap_or("user");
    let parts = item["content"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if role == "assistant" {
        let text: String = parts
            .iter()
            .filter(|p| p["type"] == "output_text")
            .filter_map(|p| p["text"].as_str())
            .collect();
        let refusal: String = parts
            .iter()
            .filter(|p| p["type"] == "refusal")
            .filter_map(|p| p["refusal"].as_str())
            .collect();
        let mut message = json!({"role": "assistant", "content": text});
        if !refusal.is_empty() {
            message["refusal"] = json!(refusal);
        }
        return message;
    }
    let content = match parts {
        [only] if only["type"] == "input_text" => only["text"].clone(),
        _ => Value::Array(
            parts
                .iter()
                .map(|p| match p["type"].as_str() {
                    Some("input_image") => json!({
                        "type": "image_url",
                        "image_url": {"url": p["image_url"], "detail": p["detail"]},
                    }),
                    _ => json!({"type": "text", "text": p["text"]}),
                })
                .collect(),
        ),
    };
    json!({"role": role, "content": content})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalized(input: Value) -> Result<Vec<Value>, Invalid> {
        normalize_input(&input, &mut Ids::new("b"))
    }

    #[test]
    fn a_string_input_is_one_user_message() {
        assert_eq!(
            normalized(json!("hello")).unwrap(),
            vec![json!({
                "id": "msg_b0000", "type": "message", "role": "user", "status": "completed",
                "content": [{"type": "input_text", "text": "hello"}],
            })]
        );
    }

    #[test]
    fn messages_take_text_and_image_parts_and_keep_given_ids() {
        let items = normalized(json!([
            {"role": "developer", "content": "Be terse."},
            {"type": "message", "id": "msg_given", "role": "user", "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
                {"type": "input_image", "image_url": "https://e.com/a.png"},
            ]},
            {"role": "assistant", "content": "A cat.", "phase": "final_answer"},
        ]))
        .unwrap();
        assert_eq!(items[0]["id"], "msg_b0000");
        assert_eq!(
            items[0]["content"],
            json!([{"type": "input_text", "text": "Be terse."}])
        );
        assert_eq!(items[1]["id"], "msg_given");
        assert_eq!(items[1]["content"][1]["detail"], "low");
        assert_eq!(
            items[1]["content"][2]["detail"], "auto",
            "detail defaults to auto"
        );
        assert_eq!(
            items[2]["content"],
            json!([{"type": "output_text", "text": "A cat.", "annotations": []}])
        );
        assert_eq!(items[2]["phase"], "final_answer");
        assert_eq!(items[2]["id"], "msg_b0001");
    }

    #[test]
    fn function_calls_and_their_outputs_are_items() {
        let items = normalized(json!([
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_0", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
            {"type": "function_call_output", "call_id": "call_0", "output": "18 C"},
            {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "a"}]},
        ]))
        .unwrap();
        assert_eq!(items[1]["id"], "fc_1");
        assert_eq!(items[2]["id"], "fco_b0001");
        assert_eq!(items[2]["output"], "18 C");
        assert_eq!(items[3]["output"][0]["text"], "a");
    }

    #[test]
    fn what_the_bridge_cannot_take_is_refused_naming_it() {
        let err = |input: Value| normalized(input).unwrap_err();
        assert_eq!(err(json!(3)).param, "input");
        let e = err(json!([{"type": "file_search_call", "id": "x"}]));
        assert_eq!(e.param, "input[0].type");
        assert!(e.message.contains("`file_search_call`"), "{}", e.message);
        let e = err(json!([{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]));
        assert_eq!(e.param, "input[0].content[0].type");
        assert!(e.message.contains("`input_file`"));
        let e = err(
            json!([{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]),
        );
        assert_eq!(e.param, "input[0].content[0].file_id");
        let e = err(
            json!([{"role": "user", "content": [{"type": "input_image", "image_url": "u", "detail": "huge"}]}]),
        );
        assert_eq!(e.param, "input[0].content[0].detail");
        assert_eq!(
            err(json!([{"role": "tool", "content": "x"}])).param,
            "input[0].role"
        );
        assert_eq!(err(json!([{"role": "user"}])).param, "input[0].content");
        assert_eq!(err(json!([{"content": "x"}])).param, "input[0].role");
        let e = err(json!([{"role": "user", "content": "x", "cache": true}]));
        assert_eq!(e.param, "input[0].cache");
        assert_eq!(
            err(json!([{"type": "function_call", "call_id": "c", "name": "f"}])).param,
            "input[0].arguments"
        );
        assert_eq!(
            err(json!([{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "image_url": "u"}]}])).param,
            "input[0].output[0].type"
        );
        assert_eq!(
            err(json!([{"role": "user", "content": [{"type": "output_text", "text": "x"}]}])).param,
            "input[0].content[0].type"
        );
        assert_eq!(
            err(json!([{"role": "user", "content": "x", "phase": "commentary"}])).param,
            "input[0].phase"
        );
        // null counts as absent
        assert!(
            normalized(json!([{"role": "user", "content": "x", "id": null, "status": null}]))
                .is_ok()
        );
    }

    #[test]
    fn a_conversation_becomes_chat_messages_with_tool_calls_joined() {
        let items = normalized(json!([
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "https://e.com/a.png"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
            {"type": "function_call", "call_id": "c1", "name": "a", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "b", "arguments": "{\"x\":1}"},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
            {"type": "function_call", "call_id": "c3", "name": "a", "arguments": "{}"},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
        ]))
        .unwrap();
        assert_eq!(
            to_chat_messages(&items),
            vec![
                json!({"role": "system", "content": "sys"}),
                json!({"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "https://e.com/a.png", "detail": "auto"}},
                ]}),
                json!({"role": "assistant", "content": "Let me check.", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{\"x\":1}"}},
                ]}),
                json!({"role": "tool", "tool_call_id": "c1", "content": "one"}),
                json!({"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "two"}]}),
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c3", "type": "function", "function": {"name": "a", "arguments": "{}"}},
                ]}),
                json!({"role": "assistant", "content": "", "refusal": "no"}),
            ]
        );
    }
}
