//! Honest offline test models for chat and embeddings, documented as such:
//! they exercise the whole API (validation, streaming, usage, errors) without
//! an upstream, and are not language models.
//!
//! - `echo`: answers with the last user message, token by token; stop
//!   sequences and `max_tokens` apply as with a real model.
//! - `directive_turn`: the same models when tools are on offer (agents): a
//!   deterministic tool-calling protocol, so agent runs can be driven and
//!   tested without an upstream:
//!   * Directives are lines of the latest `user` message that start (at
//!     column 0, nothing before) with the word `@tool` or `@loop`, then
//!     whitespace, the tool name (up to the next whitespace), and optionally
//!     JSON arguments (the rest of the line). No arguments is `{}`; text
//!     that is not a JSON object is `{"_raw": "<text>"}`, as for upstream
//!     models. A trailing `\r` is ignored. A directive line without a name is
//!     ordinary text. The name is
//!     not checked against the tools on offer, so unknown tools can be tested.
//!   * On each turn, k is the number of `tool` messages after that user
//!     message. If a `@loop` directive is among the first k+1 directives, the
//!     first such one is called; else, if there is a directive k+1, it is. A call turn holds exactly ONE call with id `call_<k>`, no
//!     content, and finish reason `tool_calls`. So `@tool` directives run
//!     once each, in order, and a `@loop` runs on every turn from its turn on
//!     (directives after it are never reached).
//!   * Otherwise (all answered, or none) the answer is the user message
//!     without its directive lines, trimmed, followed by one line per `tool`
//!     message after it, in order: `[<tool name>] <its content>` (content cut
//!     to 500 characters, then `…`), the name being that of the assistant
//!     call with the same id (else the message's `name`, else `tool`). Empty parts are left out; `max_tokens` cuts
//!     the answer (finish reason `length`, else `stop`).
//!   * Tokens are counted as for `echo` (cl100k); temperature is ignored.
//! - embeddings: signed feature hashing of words and character trigrams,
//!   L2-normalised, so texts sharing words and spellings are closer.

use serde_json::Value;

use crate::chat::{ChatMessage, ChatParams, count_prompt_tokens, count_tokens, token_pieces};

use crate::turn::{ToolCall, Turn, parse_arguments};

/// A finished completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub text: String,
    /// Pieces as streamed (each one token or more).
    pub pieces: Vec<String>,
    /// `stop` or `length`.
    pub finish_reason: &'static str,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
}

/// The echo model's reply to `params`.
pub fn echo(params: &ChatParams) -> Completion {
    cut(params.last_user_text(), params)
}

/// `text` as a model would say it under `params`: cut at the first stop
/// sequence, and at `max_tokens` (finish reason `length`).
pub fn cut(mut text: String, params: &ChatParams) -> Completion {
    let mut finish_reason = "stop";
    if let Some(cut) = params
        .stop
        .iter()
        .filter_map(|s| text.find(s.as_str()))
        .min()
    {
        text.truncate(cut);
    }
    let mut pieces = token_pieces(&text);
    if pieces.len() > params.max_tokens as usize {
        pieces.truncate(params.max_tokens as usize);
        finish_reason = "length";
        text = pieces.concat();
    }
    Completion {
        completion_tokens: pieces.len() as u32,
        prompt_tokens: count_prompt_tokens(&params.messages),
        text,
        pieces,
        finish_reason,
    }
}

/// Longest tool result (characters) the directive model quotes.
pub const QUOTED_RESULT_CHARS: usize = 500;

/// One directive line of a user message.
#[derive(Debug, Clone, PartialEq)]
struct Directive {
    name: String,
    arguments: Value,
    /// `@loop`: called on every turn once reached.
    repeat: bool,
}

/// The directive model's turn on `messages` (see the module docs).
pub fn directive_turn(messages: &[ChatMessage], max_tokens: u32) -> Turn {
    let prompt_tokens = count_prompt_tokens(messages);
    let latest_user = messages.iter().rposition(|m| m.role == "user");
    let text = latest_user.map_or_else(String::new, |i| messages[i].text());
    let since = &messages[latest_user.map_or(0, |i| i + 1)..];
    let (directives, plain) = parse_directives(&text);
    let answered = since.iter().filter(|m| m.role == "tool").count();
    let next = directives
        .iter()
        .take(answered + 1)
        .find(|d| d.repeat)
        .or_else(|| directives.get(answered));
    if let Some(directive) = next {
        let call = ToolCall {
            id: format!("call_{answered}"),
            name: directive.name.clone(),
            arguments: directive.arguments.clone(),
        };
        return Turn {
            content: None,
            completion_tokens: count_tokens(&call.name) + count_tokens(&call.arguments.to_string()),
            tool_calls: vec![call],
            finish_reason: "tool_calls".into(),
            prompt_tokens,
        };
    }
    let mut text = with_results(plain, since);
    let mut pieces = token_pieces(&text);
    let mut finish_reason = "stop";
    if pieces.len() > max_tokens as usize {
        pieces.truncate(max_tokens as usize);
        finish_reason = "length";
        text = pieces.concat();
    }
    Turn {
        content: Some(text),
        tool_calls: Vec::new(),
        finish_reason: finish_reason.into(),
        prompt_tokens,
        completion_tokens: pieces.len() as u32,
    }
}

/// `plain` followed by one `[<tool name>] <content>` line per `tool`
/// message of `since` (the messages after the latest user message).
pub(crate) fn with_results(plain: String, since: &[ChatMessage]) -> String {
    let mut lines: Vec<String> = Vec::new();
    if !plain.is_empty() {
        lines.push(plain);
    }
    lines.extend(
        since
            .iter()
            .filter(|m| m.role == "tool")
            .map(|m| format!("[{}] {}", called_tool(since, m), quoted(&m.text()))),
    );
    lines.join("\n")
}

/// The directives of `text`, in order, and the text without their lines.
fn parse_directives(text: &str) -> (Vec<Directive>, String) {
    let mut directives = Vec::new();
    let mut kept = Vec::new();
    for line in text.split('\n') {
        match parse_directive(line.strip_suffix('\r').unwrap_or(line)) {
            Some(directive) => directives.push(directive),
            None => kept.push(line),
        }
    }
    (directives, kept.join("\n").trim().to_owned())
}

fn parse_directive(line: &str) -> Option<Directive> {
    let (keyword, rest) = line.split_once(char::is_whitespace)?;
    let repeat = match keyword {
        "@tool" => false,
        "@loop" => true,
        _ => return None,
    };
    let rest = rest.trim_start();
    let (name, arguments) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    if name.is_empty() {
        return None;
    }
    Some(Directive {
        name: name.to_owned(),
        arguments: parse_arguments(arguments.trim()),
        repeat,
    })
}

/// The name of the call a `tool` message answers, found by id among the
/// assistant calls of the same exchange.
fn called_tool(exchange: &[ChatMessage], result: &ChatMessage) -> String {
    let id = result.tool_call_id.as_deref();
    exchange
        .iter()
        .filter_map(|m| m.tool_calls.as_ref())
        .flatten()
        .find(|call| id.is_some() && call["id"].as_str() == id)
        .and_then(|call| call["function"]["name"].as_str())
        .map(str::to_owned)
        .or_else(|| result.name.clone())
        .unwrap_or_else(|| "tool".to_owned())
}

fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED_RESULT_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

pub const DEFAULT_EMBEDDING_DIMENSIONS: u32 = 256;

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A deterministic unit vector of `dimensions` for `text`.
pub fn embed(text: &str, dimensions: u32) -> Vec<f32> {
    let dims = dimensions.max(1) as usize;
    let mut vector = vec![0f32; dims];
    let mut add = |feature: &[u8], weight: f32| {
        let hash = fnv1a(feature);
        let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
        vector[(hash % dims as u64) as usize] += sign * weight;
    };
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    for word in &words {
        add(word.as_bytes(), 1.0);
        let padded: Vec<char> = format!(" {word} ").chars().collect();
        for gram in padded.windows(3) {
            add(gram.iter().collect::<String>().as_bytes(), 0.5);
        }
    }
    if words.is_empty() {
        add(lower.as_bytes(), 1.0);
    }
    let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|v| *v /= norm);
    }
    vector
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ChatCompletionRequest;

    fn params(json: serde_json::Value) -> ChatParams {
        serde_json::from_value::<ChatCompletionRequest>(json)
            .unwrap()
            .validate(false, false)
            .unwrap()
    }

    #[test]
    fn echo_answers_the_last_user_message_and_honours_stop_and_max_tokens() {
        let reply = echo(&params(serde_json::json!({"messages": [
            {"role": "system", "content": "be brief"}, {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"}, {"role": "user", "content": "Hello there, world"}]})));
        assert_eq!(
            (reply.text.as_str(), reply.finish_reason),
            ("Hello there, world", "stop")
        );
        assert_eq!(reply.pieces.concat(), reply.text);
        assert_eq!(reply.completion_tokens as usize, reply.pieces.len());
        assert!(reply.prompt_tokens > 10);
        let stopped = echo(&params(
            serde_json::json!({"messages": [{"role": "user", "content": "one two END three"}], "stop": ["END"]}),
        ));
        assert_eq!(stopped.text, "one two ");
        let short = echo(&params(
            serde_json::json!({"messages": [{"role": "user", "content": "a b c d e f g"}], "max_tokens": 3}),
        ));
        assert_eq!(
            (short.completion_tokens, short.finish_reason),
            (3, "length")
        );
    }

    mod directives {
        use serde_json::{Value, json};

        use super::super::*;
        use crate::turn::tool_result_message;

        fn user(text: &str) -> ChatMessage {
            ChatMessage::with_text("user", text)
        }

        /// Runs turns as an agent loop would, answering each call with
        /// `result(call)`, until an answer or `max_turns`.
        fn drive(
            messages: &mut Vec<ChatMessage>,
            max_turns: usize,
            result: impl Fn(&ToolCall) -> Value,
        ) -> (Vec<ToolCall>, Turn) {
            let mut calls = Vec::new();
            for _ in 0..max_turns {
                let turn = directive_turn(messages, 1000);
                if turn.tool_calls.is_empty() {
                    return (calls, turn);
                }
                messages.push(turn.assistant_message());
                for call in &turn.tool_calls {
                    messages.push(tool_result_message(call, &result(call)));
                    calls.push(call.clone());
                }
            }
            let last = directive_turn(messages, 1000);
            (calls, last)
        }

        #[test]
        fn one_directive_is_called_then_its_result_is_quoted_in_the_answer() {
            let mut messages = vec![user("Find news\n@tool web_search {\"query\": \"rust\"}\n")];
            let first = directive_turn(&messages, 1000);
            assert_eq!(
                first.tool_calls,
                vec![ToolCall {
                    id: "call_0".into(),
                    name: "web_search".into(),
                    arguments: json!({"query": "rust"}),
                }]
            );
            assert_eq!(
                (first.content.as_deref(), first.finish_reason.as_str()),
                (None, "tool_calls")
            );
            assert!(first.completion_tokens > 0 && first.prompt_tokens > 0);
            let (calls, answer) = drive(&mut messages, 5, |_| json!({"hits": ["a", "b"]}));
            assert_eq!(calls.len(), 1);
            assert_eq!(
                answer.content.as_deref(),
                Some("Find news\n[web_search] {\"hits\":[\"a\",\"b\"]}")
            );
            assert_eq!(answer.finish_reason, "stop");
            assert_eq!(
                answer.completion_tokens,
                count_tokens(answer.content.as_deref().unwrap())
            );
        }

        #[test]
        fn two_directives_are_called_in_order_one_per_turn() {
            let mut messages = vec![user(
                "@tool web_search {\"query\": \"a\"}\nSummarise.\n@tool web_fetch {\"url\": \"https://e.com\"}",
            )];
            let (calls, answer) = drive(&mut messages, 5, |call| json!({"tool": call.name}));
            let seen: Vec<(&str, &str)> = calls
                .iter()
                .map(|c| (c.id.as_str(), c.name.as_str()))
                .collect();
            assert_eq!(
                seen,
                vec![("call_0", "web_search"), ("call_1", "web_fetch")]
            );
            assert_eq!(calls[1].arguments, json!({"url": "https://e.com"}));
            assert_eq!(
                answer.content.as_deref(),
                Some(
                    "Summarise.\n[web_search] {\"tool\":\"web_search\"}\n[web_fetch] {\"tool\":\"web_fetch\"}"
                )
            );
        }

        #[test]
        fn a_loop_directive_calls_its_tool_on_every_turn() {
            let mut messages = vec![user(
                "@tool web_search {}\n@loop generate_chart {\"n\": 1}\n@tool never {}",
            )];
            let (calls, last) = drive(&mut messages, 12, |_| json!("ok"));
            assert_eq!(calls.len(), 12);
            assert_eq!(calls[0].name, "web_search");
            assert!(calls[1..].iter().all(|c| c.name == "generate_chart"));
            assert_eq!(calls[11].id, "call_11");
            assert_eq!(last.tool_calls[0].name, "generate_chart", "still calling");
        }

        #[test]
        fn arguments_that_are_not_a_json_object_are_passed_raw() {
            let turn = directive_turn(&[user("@tool web_fetch {\"url\": oops")], 100);
            assert_eq!(
                turn.tool_calls[0].arguments,
                json!({"_raw": "{\"url\": oops"})
            );
            let turn = directive_turn(&[user("@tool\tweb_search")], 100);
            assert_eq!(
                turn.tool_calls[0].arguments,
                json!({}),
                "no arguments is an empty object"
            );
            let turn = directive_turn(&[user("@tool web_search [1, 2]")], 100);
            assert_eq!(turn.tool_calls[0].arguments, json!({"_raw": "[1, 2]"}));
        }

        #[test]
        fn without_directives_the_model_answers_the_user_message() {
            for text in [
                "  just chatting  ",
                "see @tool x {} mid-line",
                " @tool indented {}",
                "@tool",
                "@toolbox x {}",
            ] {
                let turn = directive_turn(&[user(text)], 100);
                assert!(turn.tool_calls.is_empty(), "{text}");
                assert_eq!(turn.content.as_deref(), Some(text.trim()));
                assert_eq!(turn.finish_reason, "stop");
            }
            let short = directive_turn(&[user("a b c d e f g")], 3);
            assert_eq!(
                (short.completion_tokens, short.finish_reason.as_str()),
                (3, "length")
            );
            assert_eq!(directive_turn(&[], 10).content.as_deref(), Some(""));
        }

        #[test]
        fn only_the_latest_user_message_directs_and_long_results_are_cut() {
            let mut messages = vec![user("@tool web_search {}")];
            drive(&mut messages, 5, |_| json!("old"));
            messages.push(user("Again\n@tool web_fetch {}"));
            let (calls, answer) = drive(&mut messages, 5, |_| json!("x".repeat(600)));
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0].id, "call_0");
            let content = answer.content.unwrap();
            let quoted = content.strip_prefix("Again\n[web_fetch] ").unwrap();
            assert_eq!(quoted.chars().count(), QUOTED_RESULT_CHARS + 1);
            assert!(quoted.ends_with("xx…"));
        }
    }

    #[test]
    fn embeddings_are_unit_vectors_and_similar_texts_are_closer() {
        let cos = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let cat = embed("The cat sat on the mat", 256);
        let cats = embed("A cat sitting on a mat", 256);
        let stocks = embed("Quarterly earnings beat market expectations", 256);
        assert!((cos(&cat, &cat) - 1.0).abs() < 1e-5);
        assert!(
            cos(&cat, &cats) > cos(&cat, &stocks) + 0.2,
            "{} vs {}",
            cos(&cat, &cats),
            cos(&cat, &stocks)
        );
        assert_eq!(embed("same", 64), embed("same", 64));
        assert_eq!(embed("x", 17).len(), 17);
        assert!((embed("?!", 8).iter().map(|v| v * v).sum::<f32>() - 1.0).abs() < 1e-5);
    }
}
