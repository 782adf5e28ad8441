//! A chat completion chunk stream as the Responses server-sent events, in
//! order and numbered (`sequence_number` from 0):
//!
//! `response.created`, `response.in_progress`; per output item
//! `response.output_item.added`, then for a message per content part
//! `response.content_part.added`, `response.output_text.delta`... (or
//! `response.refusal.delta`...), `response.output_text.done` (or
//! `response.refusal.done`), `response.content_part.done`; for a function
//! call `response.function_call_arguments.delta`...,
//! `response.function_call_arguments.done`; then
//! `response.output_item.done`; and last `response.completed`,
//! `response.incomplete` or `response.failed`.
//!
//! Only the first choice (`index` 0) is read: a response has one answer.

use serde_json::{Map, Value, json};

use super::Ids;
use super::output::{
    Details, Head, call_item, failure, message_item, refusal_part, response_object, status_of,
    text_part,
};

#[derive(Debug, Clone, Copy, PartialEq)]
enum PartKind {
    Text,
    Refusal,
}

#[derive(Debug)]
enum Open {
    Message {
        index: usize,
        id: String,
        /// The parts so far; the last is open.
        parts: Vec<(PartKind, String)>,
    },
    Call {
        index: usize,
        chat_index: u64,
        id: String,
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// The translation of one stream, fed chunk by chunk.
#[derive(Debug)]
pub struct StreamBridge {
    head: Head,
    echo: Map<String, Value>,
    ids: Ids,
    sequence: u64,
    output: Vec<Value>,
    open: Option<Open>,
    finish_reason: Option<String>,
    done: Option<Value>,
}

impl StreamBridge {
    /// `ids` mints the output items' ids.
    pub fn new(head: Head, echo: Map<String, Value>, ids: Ids) -> Self {
        Self {
            head,
            echo,
            ids,
            sequence: 0,
            output: Vec::new(),
            open: None,
            finish_reason: None,
            done: None,
        }
    }

    fn event(&mut self, kind: &str, fields: Value) -> Value {
        let mut event = json!({"type": kind, "sequence_number": self.sequence});
        if let (Some(event), Value::Object(fields)) = (event.as_object_mut(), fields) {
            event.extend(fields);
        }
        self.sequence += 1;
        event
    }

    fn snapshot(&self, status: &str, usage: Value, details: Details) -> Value {
        response_object(&self.head, &self.echo, status, &self.output, usage, details)
    }

    /// `response.created` and `response.in_progress`.
    pub fn start(&mut self) -> Vec<Value> {
        let response = self.snapshot("in_progress", Value::Null, Details::default());
        vec![
            self.event("response.created", json!({"response": response})),
            self.event("response.in_progress", json!({"response": response})),
        ]
    }

    /// The events of one chat chunk (its first choice's delta; its finish
    /// reason is kept for the end).
    pub fn push(&mut self, chunk: &Value) -> Vec<Value> {
        let mut events = Vec::new();
        let Some(choice) = chunk["choices"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["index"].as_u64().unwrap_or(0) == 0)
        else {
            return events;
        };
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish_reason = Some(reason.to_owned());
        }
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            self.say(PartKind::Text, text, &mut events);
        }
        if let Some(text) = delta["refusal"].as_str().filter(|t| !t.is_empty()) {
            self.say(PartKind::Refusal, text, &mut events);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            self.call(call, &mut events);
        }
        events
    }

    fn say(&mut self, kind: PartKind, text: &str, events: &mut Vec<Value>) {
        if !matches!(self.open, Some(Open::Message { .. })) {
            self.close(events);
            let (index, id) = (self.output.len(), self.ids.mint("msg"));
            let item = message_item(&id, "in_progress", Vec::new());
            self.output.push(item.clone());
            events.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ));
            self.open = Some(Open::Message {
                index,
                id,
                parts: Vec::new(),
            });
        }
        let Some(Open::Message { index, id, parts }) = self.open.take() else {
            return;
        };
        let mut parts = parts;
        if parts.last().map(|(k, _)| *k) != Some(kind) {
            if let Some(last) = parts.last() {
                let done = Self::part_done(index, &id, parts.len() - 1, last);
                events.extend(done.into_iter().map(|(k, f)| self.event(k, f)));
            }
            let part = match kind {
                PartKind::Text => text_part(""),
                PartKind::Refusal => refusal_part(""),
            };
            events.push(self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": parts.len(), "part": part}),
            ));
            parts.push((kind, String::new()));
        }
        let content_index = parts.len() - 1;
        if let Some((_, said)) = parts.last_mut() {
            said.push_str(text);
        }
        let event = match kind {
            PartKind::Text => self.event(
                "response.output_text.delta",
                json!({"item_id": id, "output_index": index, "content_index": content_index, "delta": text, "logprobs": []}),
            ),
            PartKind::Refusal => self.event(
                "response.refusal.delta",
                json!({"item_id": id, "output_index": index, "content_index": content_index, "delta": text}),
            ),
        };
        events.push(event);
        self.open = Some(Open::Message { index, id, parts });
    }

    /// The `*.done` and `content_part.done` fields of a finished part.
    fn part_done(
        index: usize,
        id: &str,
        content_index: usize,
        (kind, said): &(PartKind, String),
    ) -> Vec<(&'static str, Value)> {
        let at = json!({"item_id": id, "output_index": index, "content_index": content_index});
        let with = |extra: Value| {
            let mut fields = at.clone();
            if let (Some(fields), Value::Object(extra)) = (fields.as_object_mut(), extra) {
                fields.extend(extra);
            }
            fields
        };
        match kind {
            PartKind::Text => vec![
                (
                    "response.output_text.done",
                    with(json!({"text": said, "logprobs": []})),
                ),
                (
                    "response.content_part.done",
                    with(json!({"part": text_part(said)})),
                ),
            ],
            PartKind::Refusal => vec![
                ("response.refusal.done", with(json!({"refusal": said}))),
                (
                    "response.content_part.done",
                    with(json!({"part": refusal_part(said)})),
                ),
            ],
        }
    }

    fn call(&mut self, delta: &Value, events: &mut Vec<Value>) {
        let chat_index = delta["index"].as_u64().unwrap_or(0);
        let same =
            matches!(&self.open, Some(Open::Call { chat_index: open, .. }) if *open == chat_index);
        if !same {
            self.close(events);
            let (index, id) = (self.output.len(), self.ids.mint("fc"));
            let call_id = delta["id"].as_str().unwrap_or_default().to_owned();
            let name = delta["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let item = call_item(&id, "in_progress", &call_id, &name, "");
            self.output.push(item.clone());
            events.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ));
            self.open = Some(Open::Call {
                index,
                chat_index,
                id,
                call_id,
                name,
                arguments: String::new(),
            });
        } else if let Some(Open::Call { name, .. }) = &mut self.open
            && let Some(more) = delta["function"]["name"].as_str()
        {
            name.push_str(more);
        }
        let Some(piece) = delta["function"]["arguments"]
            .as_str()
            .filter(|p| !p.is_empty())
        else {
            return;
        };
        let Some(Open::Call {
            index,
            id,
            arguments,
            ..
        }) = &mut self.open
        else {
            return;
        };
        arguments.push_str(piece);
        let fields = json!({"item_id": id, "output_index": index, "delta": piece});
        let event = self.event("response.function_call_arguments.delta", fields);
        events.push(event);
    }

    /// Closes the open item: its last part's or its arguments' `done`
    /// events, then `response.output_item.done`.
    fn close(&mut self, events: &mut Vec<Value>) {
        match self.open.take() {
            None => {}
            Some(Open::Message { index, id, parts }) => {
                if let Some(last) = parts.last() {
                    let done = Self::part_done(index, &id, parts.len() - 1, last);
                    events.extend(done.into_iter().map(|(k, f)| self.event(k, f)));
                }
                let content = parts
                    .iter()
                    .map(|(kind, said)| match kind {
                        PartKind::Text => text_part(said),
                        PartKind::Refusal => refusal_part(said),
                    })
                    .collect();
                let item = message_item(&id, "completed", content);
                self.output[index] = item.clone();
                events.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
            }
            Some(Open::Call {
                index,
                id,
                call_id,
                name,
                arguments,
                ..
            }) => {
                events.push(self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "arguments": arguments}),
                ));
                let item = call_item(&id, "completed", &call_id, &name, &arguments);
                self.output[index] = item.clone();
                events.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
            }
        }
    }

    /// The end of the stream: the open item closed, then
    /// `response.completed` (or `response.incomplete` when the answer was
    /// cut) with the whole response and `usage` (already in the Responses
    /// shape). `completed_at` in Unix seconds.
    pub fn finish(&mut self, usage: Value, completed_at: i64) -> Vec<Value> {
        let mut events = Vec::new();
        self.close(&mut events);
        if self.output.is_empty() {
            // An empty answer is one empty message, as when not streamed.
            let id = self.ids.mint("msg");
            let item = message_item(&id, "completed", Vec::new());
            self.output.push(item.clone());
            events.push(self.event(
                "response.output_item.added",
                json!({"output_index": 0, "item": item}),
            ));
            events.push(self.event(
                "response.output_item.done",
                json!({"output_index": 0, "item": item}),
            ));
        }
        let (status, incomplete) = status_of(self.finish_reason.as_deref().unwrap_or("stop"));
        let details = Details {
            incomplete,
            completed_at: Some(completed_at),
            ..Details::default()
        };
        let response = self.snapshot(status, usage, details);
        self.done = Some(response.clone());
        let kind = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        events.push(self.event(kind, json!({"response": response})));
        events
    }

    /// The upstream failed mid-stream: `response.failed` with what was
    /// said so far (the open item left `in_progress`).
    pub fn fail(&mut self, message: &str, usage: Value) -> Vec<Value> {
        let details = Details {
            error: failure(message),
            ..Details::default()
        };
        let response = self.snapshot("failed", usage, details);
        self.done = Some(response.clone());
        vec![self.event("response.failed", json!({"response": response}))]
    }

    /// The final `response` object, once [`Self::finish`] or
    /// [`Self::fail`] ran.
    pub fn response(&self) -> Option<&Value> {
        self.done.as_ref()
    }

    /// The output items so far.
    pub fn output(&self) -> &[Value] {
        &self.output
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bridge() -> StreamBridge {
        let mut echo = Map::new();
        echo.insert("tools".into(), json!([]));
        StreamBridge::new(
            Head {
                id: "resp_1".into(),
                created_at: 5,
                model: "m".into(),
            },
            echo,
            Ids::new("x"),
        )
    }

    fn chunk(delta: Value, finish: Option<&str>) -> Value {
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    }

    fn kinds(events: &[Value]) -> Vec<&str> {
        events.iter().map(|e| e["type"].as_str().unwrap()).collect()
    }

    fn run(chunks: &[Value]) -> (StreamBridge, Vec<Value>) {
        let mut bridge = bridge();
        let mut events = bridge.start();
        for c in chunks {
            events.extend(bridge.push(c));
        }
        events.extend(bridge.finish(json!({"input_tokens": 1}), 9));
        (bridge, events)
    }

    #[test]
    fn text_streams_as_typed_events_in_order_and_numbered() {
        let (bridge, events) = run(&[
            chunk(json!({"role": "assistant", "content": ""}), None),
            chunk(json!({"content": "Hel"}), None),
            chunk(json!({"content": "lo"}), None),
            chunk(json!({}), Some("stop")),
            json!({"choices": [], "usage": {"prompt_tokens": 1}}),
        ]);
        assert_eq!(
            kinds(&events),
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let numbers: Vec<u64> = events
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(numbers, (0..10).collect::<Vec<_>>());
        assert_eq!(events[0]["response"]["status"], "in_progress");
        assert_eq!(events[2]["item"]["status"], "in_progress");
        assert_eq!(events[4]["item_id"], "msg_x0000");
        assert_eq!(events[4]["delta"], "Hel");
        assert_eq!(events[6]["text"], "Hello");
        assert_eq!(events[7]["part"]["text"], "Hello");
        assert_eq!(events[8]["item"]["content"][0]["text"], "Hello");
        let done = &events[9]["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(done["output"][0]["status"], "completed");
        assert_eq!(done["usage"], json!({"input_tokens": 1}));
        assert_eq!(done["completed_at"], 9);
        assert_eq!(bridge.response(), Some(done));
    }

    #[test]
    fn tool_calls_stream_as_function_call_items() {
        let (bridge, events) = run(&[
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "call_1", "function": {"name": "get_time", "arguments": "{}"}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
        ]);
        assert_eq!(
            kinds(&events)[2..],
            [
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        assert_eq!(events[2]["item"]["call_id"], "call_0");
        assert_eq!(events[2]["item"]["arguments"], "");
        assert_eq!(events[5]["arguments"], "{\"city\":\"Paris\"}");
        assert_eq!(events[6]["item"]["status"], "completed");
        assert_eq!(events[7]["output_index"], 1);
        let output = bridge.output();
        assert_eq!(output[0]["name"], "get_weather");
        assert_eq!(output[1]["arguments"], "{}");
    }

    #[test]
    fn text_then_a_call_closes_the_message_first() {
        let (_, events) = run(&[
            chunk(json!({"content": "Checking."}), None),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}]}),
                Some("tool_calls"),
            ),
        ]);
        let kinds = kinds(&events);
        let text_done = kinds
            .iter()
            .position(|k| *k == "response.output_text.done")
            .unwrap();
        let call_added = kinds
            .iter()
            .rposition(|k| *k == "response.output_item.added")
            .unwrap();
        assert!(text_done < call_added);
        assert_eq!(
            events.last().unwrap()["response"]["output"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn a_refusal_is_its_own_part() {
        let (_, events) = run(&[
            chunk(json!({"content": "Hm."}), None),
            chunk(json!({"refusal": "I can't."}), Some("stop")),
        ]);
        let kinds = kinds(&events);
        assert!(
            kinds.contains(&"response.refusal.delta") && kinds.contains(&"response.refusal.done")
        );
        let item = &events.last().unwrap()["response"]["output"][0];
        assert_eq!(
            item["content"][1],
            json!({"type": "refusal", "refusal": "I can't."})
        );
        let refusal_added = events
            .iter()
            .filter(|e| e["type"] == "response.content_part.added")
            .nth(1)
            .unwrap();
        assert_eq!(refusal_added["content_index"], 1);
    }

    #[test]
    fn a_cut_answer_is_incomplete_and_an_empty_one_is_an_empty_message() {
        let (_, events) = run(&[chunk(json!({"content": "a"}), Some("length"))]);
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.incomplete");
        assert_eq!(
            last["response"]["incomplete_details"]["reason"],
            "max_output_tokens"
        );
        let (_, events) = run(&[chunk(json!({}), Some("stop"))]);
        assert_eq!(
            kinds(&events)[2..],
            [
                "response.output_item.added",
                "response.output_item.done",
                "response.completed"
            ]
        );
    }

    #[test]
    fn a_failure_mid_stream_ends_with_response_failed() {
        let mut bridge = bridge();
        let mut events = bridge.start();
        events.extend(bridge.push(&chunk(json!({"content": "par"}), None)));
        events.extend(bridge.fail("the model provider failed", Value::Null));
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.failed");
        assert_eq!(last["response"]["status"], "failed");
        assert_eq!(last["response"]["error"]["code"], "server_error");
        assert_eq!(last["response"]["output"][0]["status"], "in_progress");
        assert_eq!(last["sequence_number"], 5);
    }

    #[test]
    fn other_choices_and_choiceless_chunks_say_nothing() {
        let mut bridge = bridge();
        assert!(
            bridge
                .push(&json!({"choices": [{"index": 1, "delta": {"content": "x"}}]}))
                .is_empty()
        );
        assert!(bridge.push(&json!({"usage": {}})).is_empty());
    }
}
