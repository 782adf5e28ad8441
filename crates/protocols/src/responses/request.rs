//! A Responses request, read field by field: every field is honoured
//! through the chat bridge, handled by the route (`store`,
//! `previous_response_id`, `stream`, `metadata`), or refused with an
//! [`Invalid`] naming it. Nothing is dropped.

use serde_json::{Map, Value, json};

use super::ids::Ids;
use super::invalid::Invalid;
use super::items::{normalize_input, to_chat_messages};

/// Fields a client may send that this service does not offer (hosted
/// conversations, prompt templates, server-side compaction...).
const NOT_OFFERED: [&str; 10] = [
    "conversation",
    "prompt",
    "context_management",
    "moderation",
    "image",
    "access_programs",
    "prompt_cache_options",
    "prompt_cache_retention",
    "max_tool_calls",
    "top_logprobs",
];
const METADATA_MAX_PAIRS: usize = 16;
const METADATA_MAX_KEY_CHARS: usize = 64;
const METADATA_MAX_VALUE_CHARS: usize = 512;
const REASONING_EFFORTS: [&str; 6] = ["none", "minimal", "low", "medium", "high", "xhigh"];
const VERBOSITIES: [&str; 3] = ["low", "medium", "high"];

/// A checked Responses request.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesRequest {
    pub model: Option<String>,
    /// `input` as given (a string or items); see [`Self::input_items`].
    pub input: Value,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub parallel_tool_calls: Option<bool>,
    pub metadata: Map<String, Value>,
    /// `text.format` as sent (`{type: text}` when absent).
    pub text_format: Value,
    pub verbosity: Option<String>,
    /// The function tools as sent.
    pub tools: Vec<Value>,
    /// `tool_choice` as sent (`auto` when absent).
    pub tool_choice: Value,
    pub store: bool,
    pub previous_response_id: Option<String>,
    pub stream: bool,
    pub background: bool,
    pub user: Option<String>,
    pub safety_identifier: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub service_tier: Option<String>,
    pub reasoning_effort: Option<String>,
}

/// Reads a request body. `null` counts as absent everywhere.
pub fn parse_request(body: &Map<String, Value>) -> Result<ResponsesRequest, Invalid> {
    let mut request = ResponsesRequest {
        model: None,
        input: Value::Null,
        instructions: None,
        max_output_tokens: None,
        temperature: None,
        top_p: None,
        parallel_tool_calls: None,
        metadata: Map::new(),
        text_format: json!({"type": "text"}),
        verbosity: None,
        tools: Vec::new(),
        tool_choice: json!("auto"),
        store: true,
        previous_response_id: None,
        stream: false,
        background: false,
        user: None,
        safety_identifier: None,
        prompt_cache_key: None,
        service_tier: None,
        reasoning_effort: None,
    };
    let mut tool_choice = None;
    for (key, value) in body.iter().filter(|(_, v)| !v.is_null()) {
        let key = key.as_str();
        match key {
            "model" => request.model = Some(string(key, value)?),
            "input" => request.input = value.clone(),
            "instructions" => request.instructions = Some(string(key, value)?),
            "max_output_tokens" => {
                request.max_output_tokens = Some(positive_integer(value).ok_or_else(|| {
                    Invalid::new(key, "max_output_tokens must be a positive integer")
                })?);
            }
            "temperature" => request.temperature = Some(number(key, value)?),
            "top_p" => request.top_p = Some(number(key, value)?),
            "parallel_tool_calls" => request.parallel_tool_calls = Some(boolean(key, value)?),
            "metadata" => request.metadata = metadata(value)?,
            "text" => {
                let (format, verbosity) = text(value)?;
                request.text_format = format;
                request.verbosity = verbosity;
            }
            "tools" => request.tools = tools(value)?,
            "tool_choice" => tool_choice = Some(value),
            "store" => request.store = boolean(key, value)?,
            "previous_response_id" => {
                request.previous_response_id = Some(string(key, value)?);
            }
            "stream" => request.stream = boolean(key, value)?,
            "stream_options" => stream_options(value)?,
            "background" => request.background = boolean(key, value)?,
            "user" => request.user = Some(string(key, value)?),
            "safety_identifier" => request.safety_identifier = Some(string(key, value)?),
            "prompt_cache_key" => request.prompt_cache_key = Some(string(key, value)?),
            "service_tier" => request.service_tier = Some(string(key, value)?),
            "reasoning" => request.reasoning_effort = reasoning(value)?,
            "include" => include(value)?,
            "truncation" => match value.as_str() {
                Some("disabled") => {}
                _ => {
                    return Err(Invalid::new(
                        key,
                        "truncation must be `disabled`: this service does not truncate conversations (`auto`)",
                    ));
                }
            },
            _ if NOT_OFFERED.contains(&key) => {
                return Err(Invalid::new(
                    key,
                    format!("`{key}` is not supported by this service"),
                ));
            }
            _ => {
                return Err(Invalid::new(key, format!("unknown parameter: `{key}`")));
            }
        }
    }
    if request.input.is_null() {
        return Err(Invalid::new("input", "input is required"));
    }
    if let Some(choice) = tool_choice {
        request.tool_choice = check_tool_choice(choice, &request.tools)?;
    }
    Ok(request)
}

fn string(key: &str, value: &Value) -> Result<String, Invalid> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| Invalid::new(key, format!("{key} must be a string")))
}

/// A positive integer; an integral float (`64.0`) is one too.
fn positive_integer(value: &Value) -> Option<u64> {
    let integral = || {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f <= f64::from(u32::MAX))
            .map(|f| f as u64)
    };
    value.as_u64().or_else(integral).filter(|n| *n >= 1)
}

fn number(key: &str, value: &Value) -> Result<f64, Invalid> {
    value
        .as_f64()
        .ok_or_else(|| Invalid::new(key, format!("{key} must be a number")))
}

fn boolean(key: &str, value: &Value) -> Result<bool, Invalid> {
    value
        .as_bool()
        .ok_or_else(|| Invalid::new(key, format!("{key} must be a boolean")))
}

fn metadata(value: &Value) -> Result<Map<String, Value>, Invalid> {
    let invalid = |message: String| Invalid::new("metadata", message);
    let pairs = value
        .as_object()
        .ok_or_else(|| invalid("metadata must be an object of strings".into()))?;
    if pairs.len() > METADATA_MAX_PAIRS {
        return Err(invalid(format!(
            "metadata holds at most {METADATA_MAX_PAIRS} pairs"
        )));
    }
    for (key, value) in pairs {
        if key.chars().count() > METADATA_MAX_KEY_CHARS {
            return Err(invalid(format!(
                "metadata keys are at most {METADATA_MAX_KEY_CHARS} characters"
            )));
        }
        let fits = value
            .as_str()
            .is_some_and(|s| s.chars().count() <= METADATA_MAX_VALUE_CHARS);
        if !fits {
            return Err(invalid(format!(
                "metadata.{key} must be a string of at most {METADATA_MAX_VALUE_CHARS} characters"
            )));
        }
    }
    Ok(pairs.clone())
}

/// Only the keys `known` (nulls aside) of an object at `at`.
fn object<'a>(
    value: &'a Value,
    at: &str,
    known: &[&str],
) -> Result<&'a Map<String, Value>, Invalid> {
    let fields = value
        .as_object()
        .ok_or_else(|| Invalid::new(at, format!("{at} must be an object")))?;
    if let Some((key, _)) = fields
        .iter()
        .find(|(k, v)| !v.is_null() && !known.contains(&k.as_str()))
    {
        return Err(Invalid::new(
            format!("{at}.{key}"),
            format!("{at}.{key} is not supported"),
        ));
    }
    Ok(fields)
}

fn present<'a>(fields: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    fields.get(key).filter(|v| !v.is_null())
}

/// `text`: the output format and the verbosity.
fn text(value: &Value) -> Result<(Value, Option<String>), Invalid> {
    let fields = object(value, "text", &["format", "verbosity"])?;
    let verbosity = match present(fields, "verbosity") {
        None => None,
        Some(v) => match v.as_str() {
            Some(v) if VERBOSITIES.contains(&v) => Some(v.to_owned()),
            _ => {
                return Err(Invalid::new(
                    "text.verbosity",
                    format!("text.verbosity must be one of: {}", VERBOSITIES.join(", ")),
                ));
            }
        },
    };
    let Some(format) = present(fields, "format") else {
        return Ok((json!({"type": "text"}), verbosity));
    };
    let kind = format.get("type").and_then(Value::as_str);
    let format = match kind {
        Some("text") => {
            object(format, "text.format", &["type"])?;
            json!({"type": "text"})
        }
        Some("json_object") => {
            object(format, "text.format", &["type"])?;
            json!({"type": "json_object"})
        }
        Some("json_schema") => {
            let spec = object(
                format,
                "text.format",
                &["type", "name", "schema", "strict", "description"],
            )?;
            if !present(spec, "name").is_some_and(Value::is_string) {
                return Err(Invalid::new(
                    "text.format.name",
                    "text.format.name is required (a string)",
                ));
            }
            if !present(spec, "schema").is_some_and(Value::is_object) {
                return Err(Invalid::new(
                    "text.format.schema",
                    "text.format.schema is required (a JSON schema object)",
                ));
            }
            if present(spec, "strict").is_some_and(|s| !s.is_boolean()) {
                return Err(Invalid::new(
                    "text.format.strict",
                    "text.format.strict must be a boolean",
                ));
            }
            if present(spec, "description").is_some_and(|s| !s.is_string()) {
                return Err(Invalid::new(
                    "text.format.description",
                    "text.format.description must be a string",
                ));
            }
            let mut kept: Map<String, Value> = spec
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            kept.insert("type".into(), json!("json_schema"));
            Value::Object(kept)
        }
        _ => {
            return Err(Invalid::new(
                "text.format.type",
                "text.format.type must be `text`, `json_object` or `json_schema`",
            ));
        }
    };
    Ok((format, verbosity))
}

/// Function tools only: any other tool type is one this service does not offer.
fn tools(value: &Value) -> Result<Vec<Value>, Invalid> {
    let tools = value
        .as_array()
        .ok_or_else(|| Invalid::new("tools", "tools must be a list of tools"))?;
    let mut names: Vec<&str> = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("tools[{i}]");
        match tool.get("type").and_then(Value::as_str) {
            Some("function") => {}
            Some(other) => {
                return Err(Invalid::new(
                    format!("{at}.type"),
                    format!(
                        "{at}: tool type `{other}` is not offered by this service (only `function` tools are)"
                    ),
                ));
            }
            None => {
                return Err(Invalid::new(
                    format!("{at}.type"),
                    format!("{at} must be an object with a `type`"),
                ));
            }
        }
        let fields = object(
            tool,
            &at,
            &[
                "type",
                "name",
                "description",
                "parameters",
                "strict",
                "defer_loading",
            ],
        )?;
        let name = present(fields, "name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let valid = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(Invalid::new(
                format!("{at}.name"),
                format!("{at}.name must be 1 to 64 letters, digits, underscores or dashes"),
            ));
        }
        if names.contains(&name) {
            return Err(Invalid::new(
                format!("{at}.name"),
                format!("{at}.name: function `{name}` is given twice"),
            ));
        }
        names.push(name);
        if present(fields, "parameters").is_some_and(|p| !p.is_object()) {
            return Err(Invalid::new(
                format!("{at}.parameters"),
                format!("{at}.parameters must be a JSON schema object"),
            ));
        }
        if present(fields, "description").is_some_and(|p| !p.is_string()) {
            return Err(Invalid::new(
                format!("{at}.description"),
                format!("{at}.description must be a string"),
            ));
        }
        if present(fields, "strict").is_some_and(|p| !p.is_boolean()) {
            return Err(Invalid::new(
                format!("{at}.strict"),
                format!("{at}.strict must be a boolean"),
            ));
        }
        // Loading a tool's definition later is for hosted tool search.
        if present(fields, "defer_loading").is_some_and(|p| p != &json!(false)) {
            return Err(Invalid::new(
                format!("{at}.defer_loading"),
                format!("{at}.defer_loading is not supported (there is no hosted tool search)"),
            ));
        }
    }
    Ok(tools.clone())
}

fn check_tool_choice(choice: &Value, tools: &[Value]) -> Result<Value, Invalid> {
    let invalid = |message: String| Invalid::new("tool_choice", message);
    match choice {
        Value::String(mode) => match mode.as_str() {
            "auto" | "none" => Ok(choice.clone()),
            "required" if tools.is_empty() => {
                Err(invalid("tool_choice `required` needs tools".into()))
            }
            "required" => Ok(choice.clone()),
            _ => Err(invalid(
                "tool_choice must be `none`, `auto`, `required` or {type: function, name}".into(),
            )),
        },
        Value::Object(fields) => match fields.get("type").and_then(Value::as_str) {
            Some("function") => {
                object(choice, "tool_choice", &["type", "name"])?;
                let name = fields.get("name").and_then(Value::as_str).unwrap_or("");
                if tools.iter().any(|t| t["name"] == name) {
                    Ok(json!({"type": "function", "name": name}))
                } else {
                    Err(invalid(format!(
                        "tool_choice names function `{name}`, which is not among the tools"
                    )))
                }
            }
            Some(other) => Err(invalid(format!(
                "tool_choice of type `{other}` is not supported (only `function` tools are offered)"
            ))),
            None => Err(invalid("tool_choice must have a `type`".into())),
        },
        _ => Err(invalid("tool_choice must be a string or an object".into())),
    }
}

fn stream_options(value: &Value) -> Result<(), Invalid> {
    let fields = object(value, "stream_options", &["include_obfuscation"])?;
    match present(fields, "include_obfuscation") {
        None | Some(Value::Bool(false)) => Ok(()),
        Some(_) => Err(Invalid::new(
            "stream_options.include_obfuscation",
            "stream_options.include_obfuscation is not supported: stream events carry no obfuscation padding",
        )),
    }
}

fn reasoning(value: &Value) -> Result<Option<String>, Invalid> {
    let fields = object(value, "reasoning", &["effort"])?;
    match present(fields, "effort") {
        None => Ok(None),
        Some(effort) => match effort.as_str() {
            Some(e) if REASONING_EFFORTS.contains(&e) => Ok(Some(e.to_owned())),
            _ => Err(Invalid::new(
                "reasoning.effort",
                format!(
                    "reasoning.effort must be one of: {}",
                    REASONING_EFFORTS.join(", ")
                ),
            )),
        },
    }
}

/// `include`: extra output data; none of it exists on a bridged answer.
fn include(value: &Value) -> Result<(), Invalid> {
    let asked = value
        .as_array()
        .ok_or_else(|| Invalid::new("include", "include must be a list"))?;
    match asked.first() {
        None => Ok(()),
        Some(first) => Err(Invalid::new(
            "include",
            format!("include: {first} is not supported by this service"),
        )),
    }
}

impl ResponsesRequest {
    /// `input` as stored items (ids minted by `ids`).
    pub fn input_items(&self, ids: &mut Ids) -> Result<Vec<Value>, Invalid> {
        normalize_input(&self.input, ids)
    }

    /// The chat completion request: `instructions` as the system message,
    /// then `context` (the stored items of the responses continued) and
    /// `input` (this request's items) as messages, and every generation
    /// field the chat request takes.
    pub fn to_chat(&self, context: &[Value], input: &[Value]) -> Value {
        let mut messages = Vec::new();
        if let Some(instructions) = &self.instructions {
            messages.push(json!({"role": "system", "content": instructions}));
        }
        let conversation: Vec<Value> = context.iter().chain(input).cloned().collect();
        messages.extend(to_chat_messages(&conversation));
        let mut chat = Map::new();
        if let Some(model) = &self.model {
            chat.insert("model".into(), json!(model));
        }
        chat.insert("messages".into(), Value::Array(messages));
        let mut put = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                chat.insert(key.into(), value);
            }
        };
        put(
            "max_completion_tokens",
            self.max_output_tokens.map(|n| json!(n)),
        );
        put("temperature", self.temperature.map(|t| json!(t)));
        put("top_p", self.top_p.map(|t| json!(t)));
        put("user", self.user.as_ref().map(|u| json!(u)));
        put(
            "safety_identifier",
            self.safety_identifier.as_ref().map(|u| json!(u)),
        );
        put(
            "prompt_cache_key",
            self.prompt_cache_key.as_ref().map(|u| json!(u)),
        );
        put("service_tier", self.service_tier.as_ref().map(|u| json!(u)));
        put(
            "reasoning_effort",
            self.reasoning_effort.as_ref().map(|u| json!(u)),
        );
        put("verbosity", self.verbosity.as_ref().map(|u| json!(u)));
        if self.stream {
            put("stream", Some(json!(true)));
        }
        if !self.tools.is_empty() {
            let tools = self.tools.iter().map(chat_tool).collect();
            put("tools", Some(Value::Array(tools)));
            put(
                "parallel_tool_calls",
                self.parallel_tool_calls.map(|p| json!(p)),
            );
            put("tool_choice", Some(chat_tool_choice(&self.tool_choice)));
        }
        match self.text_format["type"].as_str() {
            Some("json_object") => put("response_format", Some(json!({"type": "json_object"}))),
            Some("json_schema") => {
                let mut spec = self.text_format.clone();
                if let Some(spec) = spec.as_object_mut() {
                    spec.remove("type");
                }
                put(
                    "response_format",
                    Some(json!({"type": "json_schema", "json_schema": spec})),
                );
            }
            _ => {}
        }
        Value::Object(chat)
    }

    /// The request's fields as the `response` object repeats them.
    pub fn echo(&self) -> Map<String, Value> {
        let mut text = json!({"format": self.text_format});
        if let Some(verbosity) = &self.verbosity {
            text["verbosity"] = json!(verbosity);
        }
        let fields = json!({
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "temperature": self.temperature.unwrap_or(1.0),
            "top_p": self.top_p.unwrap_or(1.0),
            "parallel_tool_calls": self.parallel_tool_calls.unwrap_or(true),
            "metadata": self.metadata,
            "text": text,
            "tools": self.tools,
            "tool_choice": self.tool_choice,
            "store": self.store,
            "previous_response_id": self.previous_response_id,
            "background": self.background,
            "user": self.user,
            "safety_identifier": self.safety_identifier,
            "prompt_cache_key": self.prompt_cache_key,
            "service_tier": self.service_tier.as_deref().unwrap_or("default"),
            "reasoning": {"effort": self.reasoning_effort, "summary": null},
            "truncation": "disabled",
        });
        match fields {
            Value::Object(fields) => fields,
            _ => Map::new(),
        }
    }
}

fn chat_tool(tool: &Value) -> Value {
    let mut function = Map::new();
    for key in ["name", "description", "parameters", "strict"] {
        if let Some(value) = tool.get(key).filter(|v| !v.is_null()) {
            function.insert(key.into(), value.clone());
        }
    }
    json!({"type": "function", "function": function})
}

fn chat_tool_choice(choice: &Value) -> Value {
    match choice.get("name") {
        Some(name) => json!({"type": "function", "function": {"name": name}}),
        None => choice.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Value) -> Result<ResponsesRequest, Invalid> {
        parse_request(body.as_object().unwrap())
    }

    fn chat_of(body: Value) -> Value {
        let request = parse(body).unwrap();
        let mut ids = Ids::new("t");
        let input = request.input_items(&mut ids).unwrap();
        request.to_chat(&[], &input)
    }

    #[test]
    fn a_plain_request_is_a_chat_request_with_instructions_first() {
        let chat = chat_of(json!({
            "model": "local/echo", "input": "hi", "instructions": "Be terse.",
            "max_output_tokens": 64, "temperature": 0.2, "top_p": 0.9, "user": "u1",
            "metadata": {"k": "v"}, "store": false
        }));
        assert_eq!(
            chat,
            json!({
                "model": "local/echo",
                "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}],
                "max_completion_tokens": 64, "temperature": 0.2, "top_p": 0.9, "user": "u1",
            })
        );
    }

    #[test]
    fn a_continued_conversation_comes_after_the_instructions_and_before_the_input() {
        let request = parse(json!({
            "input": [{"type": "function_call_output", "call_id": "call_0", "output": "18 C"}],
            "instructions": "Now.", "previous_response_id": "resp_1"
        }))
        .unwrap();
        let mut ids = Ids::new("t");
        let context = normalize_input(
            &json!([
                {"role": "user", "content": "Paris"},
                {"type": "function_call", "call_id": "call_0", "name": "get_weather", "arguments": "{}"},
            ]),
            &mut ids,
        )
        .unwrap();
        let input = request.input_items(&mut ids).unwrap();
        assert_eq!(
            request.to_chat(&context, &input)["messages"],
            json!([
                {"role": "system", "content": "Now."},
                {"role": "user", "content": "Paris"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_0", "content": "18 C"},
            ])
        );
    }

    #[test]
    fn function_tools_and_tool_choice_become_chat_tools() {
        let chat = chat_of(json!({
            "input": "Paris?", "parallel_tool_calls": false,
            "tools": [{"type": "function", "name": "get_weather", "description": "Weather",
                       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true}],
            "tool_choice": {"type": "function", "name": "get_weather"}
        }));
        assert_eq!(
            chat["tools"],
            json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true}}])
        );
        assert_eq!(
            chat["tool_choice"],
            json!({"type": "function", "function": {"name": "get_weather"}})
        );
        assert_eq!(chat["parallel_tool_calls"], false);
        // Without tools, tool settings have nothing to act on.
        let plain =
            chat_of(json!({"input": "x", "parallel_tool_calls": true, "tool_choice": "auto"}));
        assert!(plain.get("parallel_tool_calls").is_none() && plain.get("tool_choice").is_none());
        let auto = chat_of(json!({"input": "x", "tools": [{"type": "function", "name": "f"}]}));
        assert_eq!(auto["tool_choice"], "auto");
    }

    #[test]
    fn text_formats_become_response_formats_as_parse_sends_them() {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"], "additionalProperties": false});
        let chat = chat_of(json!({"input": "x", "text": {"format": {
            "type": "json_schema", "name": "Person", "schema": schema, "strict": true}}}));
        assert_eq!(
            chat["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "Person", "schema": schema, "strict": true}})
        );
        let chat = chat_of(
            json!({"input": "x", "text": {"format": {"type": "json_object"}, "verbosity": "low"}}),
        );
        assert_eq!(chat["response_format"], json!({"type": "json_object"}));
        assert_eq!(chat["verbosity"], "low");
        let chat = chat_of(json!({"input": "x", "text": {"format": {"type": "text"}}}));
        assert!(chat.get("response_format").is_none());
    }

    #[test]
    fn reasoning_effort_stream_and_forwarded_strings_reach_the_chat_request() {
        let chat = chat_of(json!({
            "input": "x", "stream": true, "reasoning": {"effort": "low"},
            "safety_identifier": "s", "prompt_cache_key": "p", "service_tier": "flex",
            "include": [], "truncation": "disabled", "stream_options": {"include_obfuscation": false}
        }));
        assert_eq!(chat["stream"], true);
        assert_eq!(chat["reasoning_effort"], "low");
        assert_eq!(chat["safety_identifier"], "s");
        assert_eq!(chat["prompt_cache_key"], "p");
        assert_eq!(chat["service_tier"], "flex");
    }

    #[test]
    fn route_fields_are_read_and_defaults_apply() {
        let request = parse(json!({"input": "x", "previous_response_id": "resp_1", "background": false, "metadata": null})).unwrap();
        assert!(request.store && !request.stream && !request.background);
        assert_eq!(request.previous_response_id.as_deref(), Some("resp_1"));
        let echo = request.echo();
        assert_eq!(echo["tool_choice"], "auto");
        assert_eq!(echo["parallel_tool_calls"], true);
        assert_eq!(echo["text"], json!({"format": {"type": "text"}}));
        assert_eq!(echo["metadata"], json!({}));
        assert_eq!(echo["store"], true);
        assert_eq!(echo["previous_response_id"], "resp_1");
    }

    #[test]
    fn what_the_bridge_cannot_honour_is_refused_naming_it() {
        let err = |body: Value| parse(body).unwrap_err();
        assert_eq!(err(json!({})).param, "input");
        for hosted in [
            "file_search",
            "computer_use_preview",
            "web_search_preview",
            "code_interpreter",
            "mcp",
        ] {
            let e = err(json!({"input": "x", "tools": [{"type": hosted}]}));
            assert_eq!(e.param, "tools[0].type");
            assert!(e.message.contains(&format!("`{hosted}`")), "{}", e.message);
        }
        let e = err(json!({"input": "x", "frequency_penalty": 1}));
        assert_eq!(e.param, "frequency_penalty");
        assert!(e.message.contains("unknown parameter"));
        for field in NOT_OFFERED {
            assert_eq!(err(json!({"input": "x", field: 1})).param, field);
        }
        assert_eq!(
            err(json!({"input": "x", "include": ["message.output_text.logprobs"]})).param,
            "include"
        );
        assert_eq!(
            err(json!({"input": "x", "truncation": "auto"})).param,
            "truncation"
        );
        assert_eq!(
            err(json!({"input": "x", "reasoning": {"summary": "auto"}})).param,
            "reasoning.summary"
        );
        assert_eq!(
            err(json!({"input": "x", "reasoning": {"effort": "max"}})).param,
            "reasoning.effort"
        );
        assert_eq!(
            err(json!({"input": "x", "max_output_tokens": 1.5})).param,
            "max_output_tokens"
        );
        assert_eq!(
            parse(json!({"input": "x", "max_output_tokens": 64.0}))
                .unwrap()
                .max_output_tokens,
            Some(64)
        );
        assert_eq!(
            err(json!({"input": "x", "stream_options": {"include_obfuscation": true}})).param,
            "stream_options.include_obfuscation"
        );
        assert_eq!(
            err(json!({"input": "x", "max_output_tokens": 0})).param,
            "max_output_tokens"
        );
        assert_eq!(
            err(json!({"input": "x", "temperature": "hot"})).param,
            "temperature"
        );
        assert_eq!(err(json!({"input": "x", "store": "yes"})).param, "store");
        assert_eq!(
            err(json!({"input": "x", "metadata": {"k": 1}})).param,
            "metadata"
        );
        let many: Map<String, Value> = (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
        assert_eq!(
            err(json!({"input": "x", "metadata": many})).param,
            "metadata"
        );
        assert_eq!(
            err(json!({"input": "x", "text": {"format": {"type": "xml"}}})).param,
            "text.format.type"
        );
        assert_eq!(
            err(json!({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}}))
                .param,
            "text.format.name"
        );
        assert_eq!(
            err(json!({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}))
                .param,
            "text.format.schema"
        );
        assert_eq!(
            err(json!({"input": "x", "text": {"verbosity": "loud"}})).param,
            "text.verbosity"
        );
        assert_eq!(
            err(json!({"input": "x", "text": {"other": 1}})).param,
            "text.other"
        );
        let f = json!([{"type": "function", "name": "f"}]);
        assert_eq!(
            err(json!({"input": "x", "tools": [{"type": "function", "name": "a b"}]})).param,
            "tools[0].name"
        );
        assert_eq!(err(json!({"input": "x", "tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]})).param, "tools[1].name");
        assert_eq!(
            err(
                json!({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": 3}]})
            )
            .param,
            "tools[0].parameters"
        );
        assert_eq!(err(json!({"input": "x", "tools": [{"type": "function", "name": "f", "output_schema": {}}]})).param, "tools[0].output_schema");
        assert_eq!(err(json!({"input": "x", "tools": [{"type": "function", "name": "f", "defer_loading": true}]})).param, "tools[0].defer_loading");
        assert_eq!(
            err(json!({"input": "x", "tools": [{"name": "f"}]})).param,
            "tools[0].type"
        );
        assert!(
            err(
                json!({"input": "x", "tools": f, "tool_choice": {"type": "function", "name": "g"}})
            )
            .message
            .contains("`g`")
        );
        assert!(
            err(json!({"input": "x", "tools": f, "tool_choice": {"type": "file_search"}}))
                .message
                .contains("`file_search`")
        );
        assert_eq!(
            err(json!({"input": "x", "tools": f, "tool_choice": "sometimes"})).param,
            "tool_choice"
        );
        assert_eq!(
            err(json!({"input": "x", "tool_choice": "required"})).param,
            "tool_choice"
        );
    }
}
