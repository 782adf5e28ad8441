use serde_json::{Value, json};

use super::*;

fn chat_of(body: Value) -> Value {
    let parsed = parse_request(&body).unwrap();
    assert!(
        parsed.bridge_refusals.is_empty(),
        "{:?}",
        parsed.bridge_refusals
    );
    parsed.chat
}

fn error_of(body: Value) -> Invalid {
    parse_request(&body).unwrap_err()
}

fn refusals_of(body: Value) -> Vec<String> {
    parse_request(&body)
        .unwrap()
        .bridge_refusals
        .into_iter()
        .map(|r| r.field)
        .collect()
}

fn base() -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": [{"role": "user", "content": "Hello"}]})
}

fn with(extra: Value) -> Value {
    let mut body = base();
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[test]
fn a_plain_request_becomes_a_chat_request() {
    let parsed = parse_request(&with(json!({"stream": true}))).unwrap();
    assert_eq!(parsed.model.as_deref(), Some("claude-sonnet-4-5"));
    assert!(parsed.stream);
    assert_eq!(parsed.max_tokens, Some(256));
    assert_eq!(
        parsed.chat,
        json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 256})
    );
}

#[test]
fn system_strings_and_blocks_become_one_system_message() {
    let chat = chat_of(with(json!({"system": "Be brief."})));
    assert_eq!(
        chat["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    let chat = chat_of(with(json!({"system": [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Be brief."}
    ]})));
    assert_eq!(
        chat["messages"][0],
        json!({"role": "system", "content": "You are Claude Code.\nBe brief."})
    );
    assert_eq!(chat["messages"][1]["role"], "user");
    let chat = chat_of(with(
        json!({"system": "", "cache_control": {"type": "ephemeral"}}),
    ));
    assert_eq!(chat["messages"].as_array().unwrap().len(), 1);
    assert_eq!(error_of(with(json!({"system": 7}))).field, "system");
    assert_eq!(
        error_of(with(json!({"system": [{"type": "text"}]}))).field,
        "system.0.text"
    );
    assert_eq!(
        refusals_of(with(
            json!({"system": [{"type": "document", "source": {}}]})
        )),
        ["system.0.type"]
    );
}

#[test]
fn text_and_image_blocks_become_content_parts() {
    let chat = chat_of(with(json!({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}, "cache_control": {"type": "ephemeral"}}
    ]}]})));
    assert_eq!(
        chat["messages"][0],
        json!({"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}
        ]})
    );
    let image = |source: Value| {
        with(
            json!({"messages": [{"role": "user", "content": [{"type": "image", "source": source}]}]}),
        )
    };
    assert_eq!(
        error_of(image(
            json!({"type": "base64", "media_type": "image/tiff", "data": "x"})
        ))
        .field,
        "messages.0.content.0.source.media_type"
    );
    assert_eq!(
        error_of(image(json!({"type": "base64", "media_type": "image/png"}))).field,
        "messages.0.content.0.source.data"
    );
    assert_eq!(
        error_of(image(json!({"type": "file", "file_id": "f"}))).field,
        "messages.0.content.0.source.type"
    );
    assert_eq!(
        error_of(with(
            json!({"messages": [{"role": "user", "content": [{"type": "image"}]}]})
        ))
        .field,
        "messages.0.content.0.source"
    );
}

#[test]
fn a_tool_round_trip_becomes_tool_calls_and_tool_messages() {
    let chat = chat_of(with(json!({"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Use the tool.", "signature": "sig"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_2", "name": "clock", "input": {}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "noon"}, {"type": "text", "text": "UTC"}], "is_error": true},
            {"type": "text", "text": "And tomorrow?"}
        ]}
    ]})));
    assert_eq!(
        chat["messages"],
        json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "toolu_2", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C"},
            {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: noon\nUTC"},
            {"role": "user", "content": "And tomorrow?"}
        ])
    );
    let only_calls = chat_of(with(json!({"messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
    ]})));
    assert_eq!(only_calls["messages"][1]["content"], Value::Null);
    assert_eq!(only_calls["messages"][2]["content"], "");
    let bad_input = with(json!({"messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": "x"}]}]}));
    assert_eq!(error_of(bad_input).field, "messages.0.content.0.input");
    let no_id = with(json!({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}));
    assert_eq!(error_of(no_id).field, "messages.0.content.0.tool_use_id");
    let image_result = with(
        json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
        "content": [{"type": "image", "source": {"type": "url", "url": "https://e.com/a.png"}}]}]}]}),
    );
    assert_eq!(
        refusals_of(image_result),
        ["messages.0.content.0.content.0.type"]
    );
}

#[test]
fn tools_and_every_tool_choice_translate() {
    let tools = json!([
        {"name": "get_weather", "description": "Current weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
         "cache_control": {"type": "ephemeral"}},
        {"type": "custom", "name": "clock", "input_schema": {"type": "object"}}
    ]);
    let chat = chat_of(with(json!({"tools": tools})));
    assert_eq!(
        chat["tools"],
        json!([
            {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}}
        ])
    );
    assert!(chat.get("tool_choice").is_none());
    for (choice, expected) in [
        (json!({"type": "auto"}), json!("auto")),
        (json!({"type": "any"}), json!("required")),
        (json!({"type": "none"}), json!("none")),
        (
            json!({"type": "tool", "name": "clock"}),
            json!({"type": "function", "function": {"name": "clock"}}),
        ),
    ] {
        let chat = chat_of(with(json!({"tools": tools, "tool_choice": choice})));
        assert_eq!(chat["tool_choice"], expected);
        assert!(chat.get("parallel_tool_calls").is_none());
    }
    let chat = chat_of(with(
        json!({"tools": tools, "tool_choice": {"type": "any", "disable_parallel_tool_use": true}}),
    ));
    assert_eq!(chat["parallel_tool_calls"], false);
    // Without tools, `auto` and `none` say nothing; `any` and `tool` cannot be met.
    let chat = chat_of(with(json!({"tool_choice": {"type": "auto"}})));
    assert!(chat.get("tool_choice").is_none());
    assert_eq!(
        error_of(with(json!({"tool_choice": {"type": "any"}}))).field,
        "tool_choice"
    );
    assert_eq!(
        error_of(with(
            json!({"tools": tools, "tool_choice": {"type": "tool", "name": "nope"}})
        ))
        .field,
        "tool_choice.name"
    );
    assert_eq!(
        error_of(with(
            json!({"tools": tools, "tool_choice": {"type": "sometimes"}})
        ))
        .field,
        "tool_choice.type"
    );
    assert_eq!(
        error_of(with(json!({"tools": [{"name": "f"}]}))).field,
        "tools.0.input_schema"
    );
    assert_eq!(
        error_of(with(
            json!({"tools": [{"input_schema": {"type": "object"}}]})
        ))
        .field,
        "tools.0.name"
    );
    assert_eq!(
        refusals_of(with(
            json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]})
        )),
        ["tools.0.type"]
    );
}

#[test]
fn generation_fields_translate_and_are_checked() {
    let chat = chat_of(with(json!({
        "temperature": 0.5, "top_p": 0.9, "stop_sequences": ["END", "STOP"],
        "metadata": {"user_id": "user-42"}, "thinking": {"type": "disabled"}
    })));
    assert_eq!(chat["temperature"], 0.5);
    assert_eq!(chat["top_p"], 0.9);
    assert_eq!(chat["stop"], json!(["END", "STOP"]));
    assert_eq!(chat["user"], "user-42");
    assert_eq!(
        error_of(with(json!({"temperature": 1.5}))).field,
        "temperature"
    );
    assert_eq!(error_of(with(json!({"top_p": "x"}))).field, "top_p");
    assert_eq!(error_of(with(json!({"top_k": -1}))).field, "top_k");
    assert_eq!(
        error_of(with(json!({"stop_sequences": [""]}))).field,
        "stop_sequences"
    );
    assert_eq!(
        error_of(with(json!({"metadata": {"session": "x"}}))).field,
        "metadata.session"
    );
    assert_eq!(
        error_of(with(json!({"metadata": {"user_id": 3}}))).field,
        "metadata.user_id"
    );
    assert_eq!(error_of(with(json!({"stream": "yes"}))).field, "stream");
}

#[test]
fn what_only_a_native_upstream_honours_is_listed_never_dropped() {
    let body = with(json!({
        "max_tokens": 4096,
        "top_k": 40,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "stop_sequences": ["a", "b", "c", "d", "e"],
        "service_tier": "auto",
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Read this"},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"}}
        ]}]
    }));
    let parsed = parse_request(&body).unwrap();
    let fields: Vec<&str> = parsed
        .bridge_refusals
        .iter()
        .map(|r| r.field.as_str())
        .collect();
    assert_eq!(
        fields,
        [
            "service_tier",
            "messages.0.content.1.type",
            "top_k",
            "stop_sequences",
            "thinking"
        ]
    );
    assert!(
        parsed.bridge_refusals[0]
            .message
            .contains("`service_tier` is not supported")
    );
    assert!(parsed.bridge_refusals[1].message.contains("`document`"));
    assert_eq!(
        refusals_of(with(json!({"thinking": {"type": "adaptive"}}))),
        ["thinking"]
    );
}

#[test]
fn thinking_is_checked_as_anthropic_checks_it() {
    assert_eq!(
        error_of(with(json!({"thinking": {"type": "enabled"}}))).field,
        "thinking.budget_tokens"
    );
    assert!(
        error_of(with(
            json!({"thinking": {"type": "enabled", "budget_tokens": 100}})
        ))
        .message
        .contains("at least 1024")
    );
    assert!(
        error_of(with(
            json!({"thinking": {"type": "enabled", "budget_tokens": 2048}})
        ))
        .message
        .contains("greater than thinking.budget_tokens")
    );
    assert_eq!(
        error_of(with(json!({"thinking": {"type": "maybe"}}))).field,
        "thinking.type"
    );
}

#[test]
fn required_fields_and_shapes_are_enforced() {
    let mut body = base();
    body.as_object_mut().unwrap().remove("max_tokens");
    assert_eq!(error_of(body.clone()).message, "max_tokens: Field required");
    assert_eq!(parse_count_tokens(&body).unwrap().max_tokens, None);
    assert_eq!(error_of(with(json!({"max_tokens": 0}))).field, "max_tokens");
    assert_eq!(
        error_of(with(json!({"max_tokens": 1.5}))).field,
        "max_tokens"
    );
    assert_eq!(error_of(with(json!({"model": 3}))).field, "model");
    assert_eq!(error_of(with(json!({"messages": []}))).field, "messages");
    assert_eq!(error_of(with(json!({"messages": "hi"}))).field, "messages");
    assert_eq!(
        error_of(with(
            json!({"messages": [{"role": "system", "content": "x"}]})
        ))
        .field,
        "messages.0.role"
    );
    assert_eq!(
        error_of(with(json!({"messages": [{"role": "user"}]}))).field,
        "messages.0.content"
    );
    assert_eq!(
        error_of(with(json!({"messages": [{"role": "user", "content": 5}]}))).field,
        "messages.0.content"
    );
    assert_eq!(
        error_of(with(
            json!({"messages": [{"role": "user", "content": [{"text": "x"}]}]})
        ))
        .field,
        "messages.0.content.0.type"
    );
    assert_eq!(error_of(json!([1])).field, "body");
    assert_eq!(
        Invalid::new("a", "b").to_string(),
        "a: b",
        "displayed as field and message"
    );
}
