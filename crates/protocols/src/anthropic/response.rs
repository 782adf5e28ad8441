//! Chat completion answers as Messages answers, and chat chunk deltas as
//! Anthropic's server-sent events:
//! `message_start`, `ping`, then per content block `content_block_start`,
//! its `content_block_delta`s (`text_delta`, `input_json_delta`,
//! `thinking_delta`) and `content_block_stop`, then `message_delta` (the
//! stop reason and usage) and `message_stop`.
//!
//! An OpenAI-compatible upstream's `reasoning_content` (DeepSeek, vLLM...)
//! becomes a `thinking` block; text a `text` block; each tool call a
//! `tool_use` block whose `input` is the call's JSON arguments.

use serde_json::{Value, json};

use super::error::{ErrorKind, error_body};

/// Anthropic's `stop_reason` for a chat `finish_reason`.
pub fn stop_reason(finish_reason: &str) -> &'static str {
    match finish_reason {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ => "end_turn",
    }
}

/// A tool call's arguments as a `tool_use` input: a JSON object as is,
/// blank as `{}`, anything else as `{"_raw": text}`.
fn tool_input(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::String(text) if text.trim().is_empty() => json!({}),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(object @ Value::Object(_)) => object,
            Ok(_) | Err(_) => json!({"_raw": text}),
        },
        Value::Null => json!({}),
        other @ (Value::Bool(_) | Value::Number(_) | Value::Array(_)) => {
            json!({"_raw": other.to_string()})
        }
    }
}

fn reasoning_of(message: &Value) -> Option<&str> {
    ["reasoning_content", "reasoning"]
        .iter()
        .find_map(|key| message.get(*key).and_then(Value::as_str))
        .filter(|text| !text.is_empty())
}

/// The content blocks of a chat answer's `message`.
fn content_blocks(message: &Value) -> Vec<Value> {
    let mut blocks = Vec::new();
    if let Some(thinking) = reasoning_of(message) {
        blocks.push(json!({"type": "thinking", "thinking": thinking, "signature": ""}));
    }
    let text = match message.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    };
    if !text.is_empty() {
        blocks.push(json!({"type": "text", "text": text}));
    }
    for (i, call) in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map_or_else(|| format!("toolu_{i}"), str::to_owned);
        blocks.push(json!({
            "type": "tool_use",
            "id": id,
            "name": call["function"]["name"].as_str().unwrap_or_default(),
            "input": tool_input(&call["function"]["arguments"]),
        }));
    }
    blocks
}

/// A Messages answer from a chat answer's first choice (`message` and
/// `finish_reason`).
pub fn to_message(
    id: &str,
    model: &str,
    message: &Value,
    finish_reason: &str,
    input_tokens: u32,
    output_tokens: u32,
) -> Value {
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(message),
        "stop_reason": stop_reason(finish_reason),
        "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    })
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The `event:` line: the data's `type`.
    pub name: &'static str,
    pub data: Value,
}

impl Event {
    fn new(name: &'static str, mut data: Value) -> Self {
        data["type"] = json!(name);
        Self { name, data }
    }

    /// `event: <name>\ndata: <json>\n\n`.
    pub fn to_sse(&self) -> String {
        format!("event: {}\ndata: {}\n\n", self.name, self.data)
    }

    /// The `error` event that ends a failed stream.
    pub fn error(kind: ErrorKind, message: &str) -> Self {
        Self {
            name: "error",
            data: error_body(kind, message),
        }
    }
}

/// The content block being streamed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Open {
    Text,
    Thinking,
    /// A tool call: its index among the chat answer's `tool_calls`.
    Tool(u64),
}

/// Chat chunk deltas in, Anthropic events out, in order.
#[derive(Debug)]
pub struct StreamTranslator {
    id: String,
    model: String,
    input_tokens: u32,
    open: Option<Open>,
    /// The index of the open block, or of the next one.
    index: usize,
    finished: bool,
}

impl StreamTranslator {
    /// `input_tokens`: the prompt's count as known at the start (the final
    /// count goes in `message_delta`).
    pub fn new(id: impl Into<String>, model: impl Into<String>, input_tokens: u32) -> Self {
        Self {
            id: id.into(),
            model: model.into(),
            input_tokens,
            open: None,
            index: 0,
            finished: false,
        }
    }

    /// `message_start` and a `ping`.
    pub fn start(&self) -> Vec<Event> {
        vec![
            Event::new(
                "message_start",
                json!({"message": {
                    "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
                }}),
            ),
            Event::new("ping", json!({})),
        ]
    }

    fn close(&mut self, out: &mut Vec<Event>) {
        if self.open.take().is_some() {
            out.push(Event::new(
                "content_block_stop",
                json!({"index": self.index}),
            ));
            self.index += 1;
        }
    }

    fn open(&mut self, kind: Open, block: Value, out: &mut Vec<Event>) {
        self.close(out);
        out.push(Event::new(
            "content_block_start",
            json!({"index": self.index, "content_block": block}),
        ));
        self.open = Some(kind);
    }

    fn delta(&self, delta: Value) -> Event {
        Event::new(
            "content_block_delta",
            json!({"index": self.index, "delta": delta}),
        )
    }

    /// The events of one chat chunk's `delta` (`content`,
    /// `reasoning_content`, `tool_calls`).
    pub fn on_delta(&mut self, delta: &Value) -> Vec<Event> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        if let Some(thinking) = reasoning_of(delta) {
            if self.open != Some(Open::Thinking) {
                self.open(
                    Open::Thinking,
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                    &mut out,
                );
            }
            out.push(self.delta(json!({"type": "thinking_delta", "thinking": thinking})));
        }
        if let Some(text) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            if self.open != Some(Open::Text) {
                self.open(Open::Text, json!({"type": "text", "text": ""}), &mut out);
            }
            out.push(self.delta(json!({"type": "text_delta", "text": text})));
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let position = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            if self.open != Some(Open::Tool(position)) {
                let id = call
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .map_or_else(|| format!("toolu_{position}"), str::to_owned);
                let name = call["function"]["name"].as_str().unwrap_or_default();
                self.open(
                    Open::Tool(position),
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    &mut out,
                );
            }
            let arguments = match &call["function"]["arguments"] {
                Value::String(text) => text.clone(),
                Value::Null => String::new(),
                // Some servers send the arguments as an object.
                other => other.to_string(),
            };
            if !arguments.is_empty() {
                out.push(
                    self.delta(json!({"type": "input_json_delta", "partial_json": arguments})),
                );
            }
        }
        out
    }

    /// The end: the open block closed, `message_delta` with the stop reason
    /// and usage, and `message_stop`.
    pub fn finish(
        &mut self,
        finish_reason: &str,
        input_tokens: u32,
        output_tokens: u32,
    ) -> Vec<Event> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        self.finished = true;
        self.close(&mut out);
        out.push(Event::new(
            "message_delta",
            json!({
                "delta": {"stop_reason": stop_reason(finish_reason), "stop_sequence": null},
                "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
            }),
        ));
        out.push(Event::new("message_stop", json!({})));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reasons_become_stop_reasons() {
        for (finish, stop) in [
            ("stop", "end_turn"),
            ("length", "max_tokens"),
            ("tool_calls", "tool_use"),
            ("function_call", "tool_use"),
            ("content_filter", "refusal"),
            ("anything", "end_turn"),
        ] {
            assert_eq!(stop_reason(finish), stop);
        }
    }

    #[test]
    fn a_text_answer_is_one_text_block_with_usage() {
        let message = json!({"role": "assistant", "content": "Hello."});
        assert_eq!(
            to_message("msg_1", "local/echo", &message, "stop", 12, 3),
            json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "local/echo",
                "content": [{"type": "text", "text": "Hello."}],
                "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 12, "output_tokens": 3}
            })
        );
    }

    #[test]
    fn tool_calls_become_tool_use_blocks_after_reasoning_and_text() {
        let message = json!({
            "role": "assistant", "content": "Let me look.", "reasoning_content": "Paris, then.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"type": "function", "function": {"name": "clock", "arguments": ""}},
                {"id": "call_3", "type": "function", "function": {"name": "bad", "arguments": "[1"}},
                {"id": "call_4", "type": "function", "function": {"name": "obj", "arguments": {"k": 1}}}
            ]
        });
        let answer = to_message("msg_2", "m", &message, "tool_calls", 1, 2);
        assert_eq!(answer["stop_reason"], "tool_use");
        assert_eq!(
            answer["content"],
            json!([
                {"type": "thinking", "thinking": "Paris, then.", "signature": ""},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_1", "name": "clock", "input": {}},
                {"type": "tool_use", "id": "call_3", "name": "bad", "input": {"_raw": "[1"}},
                {"type": "tool_use", "id": "call_4", "name": "obj", "input": {"k": 1}}
            ])
        );
        let empty = to_message("m", "m", &json!({"content": null}), "length", 0, 0);
        assert_eq!(
            (empty["content"].clone(), empty["stop_reason"].clone()),
            (json!([]), json!("max_tokens"))
        );
        let parts =
            json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(
            to_message("m", "m", &parts, "stop", 0, 0)["content"][0]["text"],
            "ab"
        );
    }

    fn names(events: &[Event]) -> Vec<&'static str> {
        events.iter().map(|e| e.name).collect()
    }

    #[test]
    fn a_streamed_text_answer_is_framed_in_anthropics_order() {
        let mut stream = StreamTranslator::new("msg_s", "local/echo", 9);
        let mut events = stream.start();
        events.extend(stream.on_delta(&json!({"role": "assistant", "content": ""})));
        events.extend(stream.on_delta(&json!({"content": "Hel"})));
        events.extend(stream.on_delta(&json!({"content": "lo"})));
        events.extend(stream.on_delta(&json!({})));
        events.extend(stream.finish("stop", 10, 2));
        assert!(stream.finish("stop", 10, 2).is_empty(), "finishes once");
        assert!(stream.on_delta(&json!({"content": "late"})).is_empty());
        assert_eq!(
            names(&events),
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(
            events[0].data,
            json!({"type": "message_start", "message": {
                "id": "msg_s", "type": "message", "role": "assistant", "model": "local/echo",
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 9, "output_tokens": 0}}})
        );
        assert_eq!(
            events[2].data,
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        );
        assert_eq!(
            events[3].data,
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}})
        );
        assert_eq!(
            events[5].data,
            json!({"type": "content_block_stop", "index": 0})
        );
        assert_eq!(
            events[6].data,
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                "usage": {"input_tokens": 10, "output_tokens": 2}})
        );
        assert_eq!(events[7].data, json!({"type": "message_stop"}));
        assert_eq!(
            events[1].to_sse(),
            "event: ping\ndata: {\"type\":\"ping\"}\n\n"
        );
    }

    #[test]
    fn streamed_reasoning_text_and_tool_calls_are_blocks_in_turn() {
        let mut stream = StreamTranslator::new("msg_t", "m", 1);
        let mut events = Vec::new();
        for delta in [
            json!({"reasoning_content": "Think"}),
            json!({"reasoning_content": "ing."}),
            json!({"content": "Looking."}),
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
            json!({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "clock", "arguments": "{}"}}]}),
        ] {
            events.extend(stream.on_delta(&delta));
        }
        events.extend(stream.finish("tool_calls", 1, 7));
        let summary: Vec<(&str, Value)> = events
            .iter()
            .map(|e| {
                let detail = match e.name {
                    "content_block_start" => e.data["content_block"].clone(),
                    "content_block_delta" => e.data["delta"].clone(),
                    "message_delta" => e.data["delta"]["stop_reason"].clone(),
                    _ => e.data["index"].clone(),
                };
                (e.name, detail)
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "content_block_start",
                    json!({"type": "thinking", "thinking": "", "signature": ""})
                ),
                (
                    "content_block_delta",
                    json!({"type": "thinking_delta", "thinking": "Think"})
                ),
                (
                    "content_block_delta",
                    json!({"type": "thinking_delta", "thinking": "ing."})
                ),
                ("content_block_stop", json!(0)),
                ("content_block_start", json!({"type": "text", "text": ""})),
                (
                    "content_block_delta",
                    json!({"type": "text_delta", "text": "Looking."})
                ),
                ("content_block_stop", json!(1)),
                (
                    "content_block_start",
                    json!({"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {}})
                ),
                (
                    "content_block_delta",
                    json!({"type": "input_json_delta", "partial_json": "{\"city\":"})
                ),
                (
                    "content_block_delta",
                    json!({"type": "input_json_delta", "partial_json": "\"Paris\"}"})
                ),
                ("content_block_stop", json!(2)),
                (
                    "content_block_start",
                    json!({"type": "tool_use", "id": "call_b", "name": "clock", "input": {}})
                ),
                (
                    "content_block_delta",
                    json!({"type": "input_json_delta", "partial_json": "{}"})
                ),
                ("content_block_stop", json!(3)),
                ("message_delta", json!("tool_use")),
                ("message_stop", Value::Null),
            ]
        );
        let indexes: Vec<u64> = events
            .iter()
            .filter(|e| e.name == "content_block_delta")
            .map(|e| e.data["index"].as_u64().unwrap())
            .collect();
        assert_eq!(indexes, [0, 0, 1, 2, 2, 3]);
    }

    #[test]
    fn an_empty_answer_has_no_blocks_and_errors_are_events() {
        let mut stream = StreamTranslator::new("msg_e", "m", 1);
        assert_eq!(
            names(&stream.finish("length", 1, 0)),
            ["message_delta", "message_stop"]
        );
        let error = Event::error(ErrorKind::Overloaded, "the model provider failed");
        let sse = error.to_sse();
        let data = sse
            .strip_prefix("event: error\ndata: ")
            .and_then(|rest| rest.strip_suffix("\n\n"))
            .unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(data).unwrap(),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "the model provider failed"}})
        );
    }
}
