//! A Messages request, checked and translated into a chat completion
//! request body (OpenAI's shape, what `/chat/completions` takes).
//!
//! | Messages                                   | chat                                        |
//! |--------------------------------------------|---------------------------------------------|
//! | `system` (string or text blocks)           | one `system` message (blocks joined by `\n`) |
//! | `text` block                               | `text` part                                 |
//! | `image` block, `base64` source             | `image_url` part with a `data:` URL         |
//! | `image` block, `url` source                | `image_url` part                            |
//! | assistant `tool_use` block                 | `tool_calls[]` (`input` as JSON text)       |
//! | user `tool_result` block                   | a `tool` message before the user's text     |
//! | assistant `thinking` blocks of past turns  | left out (Anthropic ignores them too)        |
//! | `tools[]` (custom tools)                   | `function` tools                            |
//! | `tool_choice` auto / any / tool / none     | `auto` / `required` / function / `none`     |
//! | `disable_parallel_tool_use: true`          | `parallel_tool_calls: false`                |
//! | `max_tokens`, `temperature`, `top_p`       | the same                                    |
//! | `stop_sequences`                           | `stop`                                      |
//! | `metadata.user_id`                         | `user`                                      |
//!
//! `cache_control` marks are accepted anywhere Anthropic takes them: they
//! ask for prompt caching, which changes no answer; a bridged model has no
//! prompt cache to fill.
//!
//! What chat cannot express is a *bridge refusal*: `top_k`, `thinking`
//! (other than `disabled`), tool types other than custom tools, content
//! blocks other than the above, images inside `tool_result`, more than four
//! stop sequences, and top-level fields this module does not know. They are
//! refused only when the model is bridged; a native Anthropic upstream gets
//! the request as sent.

use serde_json::{Map, Value, json};

/// A field at fault and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// A path in the request (`messages.0.content.1.source`).
    pub field: String,
    pub message: String,
}

impl Invalid {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A checked Messages request.
#[derive(Debug, Clone, PartialEq)]
pub struct MessagesRequest {
    /// As the client named it (resolved through the catalogue by the caller).
    pub model: Option<String>,
    pub stream: bool,
    /// `max_tokens` (absent only in `count_tokens` requests).
    pub max_tokens: Option<u64>,
    /// The chat completion request body (without `model` and `stream`).
    pub chat: Value,
    /// What a model bridged through chat cannot honour, in request order.
    pub bridge_refusals: Vec<Invalid>,
}

/// Top-level fields of a Messages request that the bridge translates.
const KNOWN: [&str; 14] = [
    "model",
    // Automatic prompt caching: a hint that changes no answer.
    "cache_control",
    "messages",
    "max_tokens",
    "system",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "metadata",
    "thinking",
    "tools",
    "tool_choice",
    "stream",
];

/// Anthropic's most stop sequences on chat upstreams (OpenAI takes 4).
const MAX_BRIDGED_STOPS: usize = 4;

/// A `POST /v1/messages` body.
pub fn parse_request(body: &Value) -> Result<MessagesRequest, Invalid> {
    parse(body, true)
}

/// A `POST /v1/messages/count_tokens` body: a Messages request without
/// `max_tokens` (and without `stream`).
pub fn parse_count_tokens(body: &Value) -> Result<MessagesRequest, Invalid> {
    parse(body, false)
}

struct Reader {
    refusals: Vec<Invalid>,
}

impl Reader {
    fn refuse(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.refusals.push(Invalid::new(field, message));
    }
}

fn parse(body: &Value, messages_endpoint: bool) -> Result<MessagesRequest, Invalid> {
    let fields = body
        .as_object()
        .ok_or_else(|| Invalid::new("body", "the request body must be a JSON object"))?;
    let mut reader = Reader {
        refusals: Vec::new(),
    };
    for name in fields.keys() {
        if !KNOWN.contains(&name.as_str()) {
            reader.refuse(
                name.clone(),
                format!("`{name}` is not supported by models served through the chat bridge (only models on an anthropic upstream take it)"),
            );
        }
    }
    let model = match fields.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(model)) => Some(model.clone()),
        Some(_) => return Err(Invalid::new("model", "model must be a string")),
    };
    let max_tokens = match fields.get("max_tokens") {
        None | Some(Value::Null) if messages_endpoint => {
            return Err(Invalid::new("max_tokens", "max_tokens: Field required"));
        }
        None | Some(Value::Null) => None,
        Some(value) => match value.as_u64() {
            Some(n) if n >= 1 => Some(n),
            _ => {
                return Err(Invalid::new(
                    "max_tokens",
                    "max_tokens must be an integer of at least 1",
                ));
            }
        },
    };
    let stream = match fields.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(stream)) => *stream,
        Some(_) => return Err(Invalid::new("stream", "stream must be a boolean")),
    };
    let mut chat = Map::new();
    let mut messages = Vec::new();
    if let Some(system) = fields.get("system").filter(|s| !s.is_null()) {
        let text = system_text(system, &mut reader)?;
        if !text.is_empty() {
            messages.push(json!({"role": "system", "content": text}));
        }
    }
    let turns = fields
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| Invalid::new("messages", "messages: Field required (a list)"))?;
    if turns.is_empty() {
        return Err(Invalid::new(
            "messages",
            "messages: at least one message is required",
        ));
    }
    for (i, turn) in turns.iter().enumerate() {
        translate_turn(i, turn, &mut messages, &mut reader)?;
    }
    chat.insert("messages".into(), Value::Array(messages));
    if let Some(max_tokens) = max_tokens {
        chat.insert("max_tokens".into(), json!(max_tokens));
    }
    for (name, top) in [("temperature", 1.0), ("top_p", 1.0)] {
        match fields.get(name) {
            None | Some(Value::Null) => {}
            Some(value) => match value.as_f64() {
                Some(x) if (0.0..=top).contains(&x) => {
                    chat.insert(name.into(), json!(x));
                }
                _ => {
                    return Err(Invalid::new(
                        name,
                        format!("{name} must be a number between 0 and {top}"),
                    ));
                }
            },
        }
    }
    match fields.get("top_k") {
        None | Some(Value::Null) => {}
        Some(value) if value.as_u64().is_some() => {
            reader.refuse("top_k", "`top_k` is not supported by models served through the chat bridge (only models on an anthropic upstream take it)");
        }
        Some(_) => {
            return Err(Invalid::new(
                "top_k",
                "top_k must be a non-negative integer",
            ));
        }
    }
    if let Some(stops) = fields.get("stop_sequences").filter(|s| !s.is_null()) {
        let stops = stops
            .as_array()
            .filter(|list| {
                list.iter()
                    .all(|s| s.as_str().is_some_and(|s| !s.is_empty()))
            })
            .ok_or_else(|| {
                Invalid::new(
                    "stop_sequences",
                    "stop_sequences must be a list of non-empty strings",
                )
            })?;
        if stops.len() > MAX_BRIDGED_STOPS {
            reader.refuse(
                "stop_sequences",
                format!("models served through the chat bridge take at most {MAX_BRIDGED_STOPS} stop_sequences"),
            );
        }
        if !stops.is_empty() {
            chat.insert("stop".into(), Value::Array(stops.clone()));
        }
    }
    if let Some(metadata) = fields.get("metadata").filter(|m| !m.is_null()) {
        let metadata = metadata
            .as_object()
            .ok_or_else(|| Invalid::new("metadata", "metadata must be an object"))?;
        for (key, value) in metadata {
            match (key.as_str(), value) {
                ("user_id", Value::String(user)) => {
                    chat.insert("user".into(), json!(user));
                }
                ("user_id", Value::Null) => {}
                ("user_id", _) => {
                    return Err(Invalid::new(
                        "metadata.user_id",
                        "metadata.user_id must be a string",
                    ));
                }
                (other, _) => {
                    return Err(Invalid::new(
                        format!("metadata.{other}"),
                        format!(
                            "metadata.{other}: Extra inputs are not permitted (metadata takes user_id)"
                        ),
                    ));
                }
            }
        }
    }
    if let Some(thinking) = fields.get("thinking").filter(|t| !t.is_null()) {
        check_thinking(thinking, max_tokens, &mut reader)?;
    }
    let tools = match fields.get("tools").filter(|t| !t.is_null()) {
        Some(tools) => translate_tools(tools, &mut reader)?,
        None => Vec::new(),
    };
    if let Some(choice) = fields.get("tool_choice").filter(|c| !c.is_null()) {
        translate_tool_choice(choice, &tools, &mut chat)?;
    }
    if !tools.is_empty() {
        chat.insert("tools".into(), Value::Array(tools));
    }
    Ok(MessagesRequest {
        model,
        stream,
        max_tokens,
        chat: Value::Object(chat),
        bridge_refusals: reader.refusals,
    })
}

fn system_text(system: &Value, reader: &mut Reader) -> Result<String, Invalid> {
    match system {
        Value::String(text) => Ok(text.clone()),
        Value::Array(blocks) => {
            let mut texts = Vec::new();
            for (b, block) in blocks.iter().enumerate() {
                let field = format!("system.{b}");
                match block_type(block, &field)? {
                    "text" => texts.push(text_of(block, &field)?.to_owned()),
                    other => reader.refuse(
                        format!("{field}.type"),
                        format!("system blocks of type `{other}` are not supported by models served through the chat bridge"),
                    ),
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err(Invalid::new(
            "system",
            "system must be a string or a list of text blocks",
        )),
    }
}

fn block_type<'a>(block: &'a Value, field: &str) -> Result<&'a str, Invalid> {
    block
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| Invalid::new(format!("{field}.type"), "a content block needs a `type`"))
}

fn text_of<'a>(block: &'a Value, field: &str) -> Result<&'a str, Invalid> {
    block.get("text").and_then(Value::as_str).ok_or_else(|| {
        Invalid::new(
            format!("{field}.text"),
            "a text block needs `text` (a string)",
        )
    })
}

/// The chat messages of one Messages turn, appended to `out`.
fn translate_turn(
    i: usize,
    turn: &Value,
    out: &mut Vec<Value>,
    reader: &mut Reader,
) -> Result<(), Invalid> {
    let field = format!("messages.{i}");
    let role = turn.get("role").and_then(Value::as_str).ok_or_else(|| {
        Invalid::new(
            format!("{field}.role"),
            "role must be `user` or `assistant`",
        )
    })?;
    let content = turn
        .get("content")
        .ok_or_else(|| Invalid::new(format!("{field}.content"), "content: Field required"))?;
    let blocks: Vec<Value> = match content {
        Value::String(text) => vec![json!({"type": "text", "text": text})],
        Value::Array(blocks) => blocks.clone(),
        _ => {
            return Err(Invalid::new(
                format!("{field}.content"),
                "content must be a string or a list of content blocks",
            ));
        }
    };
    match role {
        "user" => user_turn(&field, &blocks, out, reader),
        "assistant" => assistant_turn(&field, &blocks, out, reader),
        _ => Err(Invalid::new(
            format!("{field}.role"),
            "role must be `user` or `assistant`",
        )),
    }
}

fn user_turn(
    field: &str,
    blocks: &[Value],
    out: &mut Vec<Value>,
    reader: &mut Reader,
) -> Result<(), Invalid> {
    let mut parts = Vec::new();
    for (b, block) in blocks.iter().enumerate() {
        let field = format!("{field}.content.{b}");
        match block_type(block, &field)? {
            "text" => parts.push(json!({"type": "text", "text": text_of(block, &field)?})),
            "image" => parts.push(image_part(block, &field)?),
            "tool_result" => out.push(tool_message(block, &field, reader)?),
            other => reader.refuse(
                format!("{field}.type"),
                format!("content blocks of type `{other}` are not supported by models served through the chat bridge"),
            ),
        }
    }
    if parts.is_empty() {
        return Ok(());
    }
    let content = match parts.as_slice() {
        [only] if only["type"] == "text" => only["text"].clone(),
        _ => Value::Array(parts),
    };
    out.push(json!({"role": "user", "content": content}));
    Ok(())
}

fn image_part(block: &Value, field: &str) -> Result<Value, Invalid> {
    let source = block
        .get("source")
        .filter(|s| s.is_object())
        .ok_or_else(|| {
            Invalid::new(format!("{field}.source"), "an image block needs a `source`")
        })?;
    let string = |key: &str| {
        source.get(key).and_then(Value::as_str).ok_or_else(|| {
            Invalid::new(
                format!("{field}.source.{key}"),
                format!("source.{key} is required (a string)"),
            )
        })
    };
    let url = match source.get("type").and_then(Value::as_str) {
        Some("base64") => {
            let media_type = string("media_type")?;
            if !["image/jpeg", "image/png", "image/gif", "image/webp"].contains(&media_type) {
                return Err(Invalid::new(
                    format!("{field}.source.media_type"),
                    "source.media_type must be image/jpeg, image/png, image/gif or image/webp",
                ));
            }
            format!("data:{media_type};base64,{}", string("data")?)
        }
        Some("url") => string("url")?.to_owned(),
        _ => {
            return Err(Invalid::new(
                format!("{field}.source.type"),
                "an image source must be of type `base64` or `url`",
            ));
        }
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

fn tool_message(block: &Value, field: &str, reader: &mut Reader) -> Result<Value, Invalid> {
    let id = block
        .get("tool_use_id")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            Invalid::new(
                format!("{field}.tool_use_id"),
                "a tool_result block needs `tool_use_id`",
            )
        })?;
    let text = match block.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(inner)) => {
            let mut texts = Vec::new();
            for (c, part) in inner.iter().enumerate() {
                let field = format!("{field}.content.{c}");
                match block_type(part, &field)? {
                    "text" => texts.push(text_of(part, &field)?.to_owned()),
                    other => reader.refuse(
                        format!("{field}.type"),
                        format!("a tool_result holding a `{other}` block is not supported by models served through the chat bridge (chat tool results are text)"),
                    ),
                }
            }
            texts.join("\n")
        }
        Some(_) => {
            return Err(Invalid::new(
                format!("{field}.content"),
                "a tool_result's content must be a string or a list of blocks",
            ));
        }
    };
    let text = match block.get("is_error") {
        Some(Value::Bool(true)) => format!("Error: {text}"),
        None | Some(Value::Null | Value::Bool(false)) => text,
        Some(_) => {
            return Err(Invalid::new(
                format!("{field}.is_error"),
                "is_error must be a boolean",
            ));
        }
    };
    Ok(json!({"role": "tool", "tool_call_id": id, "content": text}))
}

fn assistant_turn(
    field: &str,
    blocks: &[Value],
    out: &mut Vec<Value>,
    reader: &mut Reader,
) -> Result<(), Invalid> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for (b, block) in blocks.iter().enumerate() {
        let field = format!("{field}.content.{b}");
        match block_type(block, &field)? {
            "text" => text.push_str(text_of(block, &field)?),
            "tool_use" => {
                let string = |key: &str| {
                    block.get(key).and_then(Value::as_str).ok_or_else(|| {
                        Invalid::new(
                            format!("{field}.{key}"),
                            format!("a tool_use block needs `{key}` (a string)"),
                        )
                    })
                };
                let input = block.get("input").filter(|i| i.is_object()).ok_or_else(|| {
                    Invalid::new(format!("{field}.input"), "tool_use.input must be an object")
                })?;
                calls.push(json!({
                    "id": string("id")?,
                    "type": "function",
                    "function": {"name": string("name")?, "arguments": input.to_string()},
                }));
            }
            // Past turns' thinking: Anthropic leaves it out of the context
            // too.
            "thinking" | "redacted_thinking" => {}
            other => reader.refuse(
                format!("{field}.type"),
                format!("content blocks of type `{other}` are not supported by models served through the chat bridge"),
            ),
        }
    }
    if text.is_empty() && calls.is_empty() {
        return Ok(());
    }
    let mut message = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    out.push(message);
    Ok(())
}

fn check_thinking(
    thinking: &Value,
    max_tokens: Option<u64>,
    reader: &mut Reader,
) -> Result<(), Invalid> {
    match thinking.get("type").and_then(Value::as_str) {
        Some("disabled") => Ok(()),
        Some("enabled") => {
            let budget = thinking
                .get("budget_tokens")
                .and_then(Value::as_u64)
                .ok_or_else(|| {
                    Invalid::new(
                        "thinking.budget_tokens",
                        "thinking.budget_tokens: Field required (an integer)",
                    )
                })?;
            if budget < 1024 {
                return Err(Invalid::new(
                    "thinking.budget_tokens",
                    "thinking.budget_tokens must be at least 1024",
                ));
            }
            if max_tokens.is_some_and(|max| budget >= max) {
                return Err(Invalid::new(
                    "thinking.budget_tokens",
                    "max_tokens must be greater than thinking.budget_tokens",
                ));
            }
            reader.refuse("thinking", "extended thinking is not supported by models served through the chat bridge (only models on an anthropic upstream take it)");
            Ok(())
        }
        Some("adaptive") => {
            reader.refuse("thinking", "extended thinking is not supported by models served through the chat bridge (only models on an anthropic upstream take it)");
            Ok(())
        }
        _ => Err(Invalid::new(
            "thinking.type",
            "thinking.type must be `enabled`, `adaptive` or `disabled`",
        )),
    }
}

/// Custom tools as chat `function` tools.
fn translate_tools(tools: &Value, reader: &mut Reader) -> Result<Vec<Value>, Invalid> {
    let tools = tools
        .as_array()
        .ok_or_else(|| Invalid::new("tools", "tools must be a list"))?;
    let mut out = Vec::new();
    for (t, tool) in tools.iter().enumerate() {
        let field = format!("tools.{t}");
        if !tool.is_object() {
            return Err(Invalid::new(field, "a tool must be an object"));
        }
        match tool.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            Some(other) => {
                reader.refuse(
                    format!("{field}.type"),
                    format!("tools of type `{other}` are not supported by models served through the chat bridge (only models on an anthropic upstream take them)"),
                );
                continue;
            }
        }
        let name = tool
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Invalid::new(format!("{field}.name"), "name: Field required"))?;
        let schema = tool
            .get("input_schema")
            .filter(|s| s.is_object())
            .ok_or_else(|| {
                Invalid::new(
                    format!("{field}.input_schema"),
                    "input_schema: Field required (a JSON schema object)",
                )
            })?;
        let mut function = json!({"name": name, "parameters": schema});
        match tool.get("description") {
            None | Some(Value::Null) => {}
            Some(Value::String(description)) => function["description"] = json!(description),
            Some(_) => {
                return Err(Invalid::new(
                    format!("{field}.description"),
                    "description must be a string",
                ));
            }
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(out)
}

fn translate_tool_choice(
    choice: &Value,
    tools: &[Value],
    chat: &mut Map<String, Value>,
) -> Result<(), Invalid> {
    let kind = choice.get("type").and_then(Value::as_str).ok_or_else(|| {
        Invalid::new(
            "tool_choice.type",
            "tool_choice.type must be `auto`, `any`, `tool` or `none`",
        )
    })?;
    let translated = match kind {
        "auto" => json!("auto"),
        "any" => json!("required"),
        "none" => json!("none"),
        "tool" => {
            let name = choice.get("name").and_then(Value::as_str).ok_or_else(|| {
                Invalid::new(
                    "tool_choice.name",
                    "tool_choice of type `tool` needs `name`",
                )
            })?;
            if !tools.iter().any(|t| t["function"]["name"] == name) {
                return Err(Invalid::new(
                    "tool_choice.name",
                    format!("tool_choice names tool `{name}`, which is not among the tools"),
                ));
            }
            json!({"type": "function", "function": {"name": name}})
        }
        _ => {
            return Err(Invalid::new(
                "tool_choice.type",
                "tool_choice.type must be `auto`, `any`, `tool` or `none`",
            ));
        }
    };
    match choice.get("disable_parallel_tool_use") {
        None | Some(Value::Null | Value::Bool(false)) => {}
        Some(Value::Bool(true)) if kind != "none" && !tools.is_empty() => {
            chat.insert("parallel_tool_calls".into(), json!(false));
        }
        Some(Value::Bool(true)) => {}
        Some(_) => {
            return Err(Invalid::new(
                "tool_choice.disable_parallel_tool_use",
                "disable_parallel_tool_use must be a boolean",
            ));
        }
    }
    if tools.is_empty() {
        // `auto` and `none` without tools say nothing; `any` and `tool`
        // ask for a call no tool can answer.
        return match kind {
            "auto" | "none" => Ok(()),
            _ => Err(Invalid::new(
                "tool_choice",
                format!("tool_choice `{kind}` needs tools"),
            )),
        };
    }
    chat.insert("tool_choice".into(), translated);
    Ok(())
}

#[cfg(test)]
mod tests;
