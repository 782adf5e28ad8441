//! OpenAI's Batch API input and output files, as pure functions:
//!
//! - [`LineSplitter`]: the bytes of a JSONL file, fed in chunks as they are
//!   read, cut into lines (each bounded by [`MAX_LINE_BYTES`]).
//! - [`Validator`]: each line checked as OpenAI checks it (`custom_id`
//!   present and unique, `method` `POST`, `url` the batch's `endpoint`,
//!   `body` an object, at most [`MAX_LINES`] requests); the first bad line
//!   is named (`line 7: ...`).
//! - [`output_line`] / [`error_line`]: the lines of the output and error
//!   files, in OpenAI's format.
//!
//! No I/O: the caller reads the file and writes the results.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

/// The most requests one batch may hold.
pub const MAX_LINES: usize = 50_000;
/// The longest line (one request) of an input file.
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;
/// The longest `custom_id`.
pub const MAX_CUSTOM_ID_CHARS: usize = 512;
/// The endpoints a batch may run.
pub const ENDPOINTS: &[&str] = &["/v1/chat/completions", "/v1/embeddings", "/v1/responses"];
/// The only completion window offered.
pub const COMPLETION_WINDOW: &str = "24h";

/// The first bad line of an input file (1-based), and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for LineError {}

/// One request of a batch, as validated.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchLine {
    /// 1-based line number in the input file.
    pub line: usize,
    pub custom_id: String,
    pub body: Map<String, Value>,
}

/// Cuts a byte stream into lines (without their `\n` or `\r\n`), whatever
/// the chunk boundaries; a line longer than [`MAX_LINE_BYTES`] is an error
/// naming it, so a file without newlines is never held whole.
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: Vec<u8>,
    /// Lines handed out so far.
    lines: usize,
}

impl LineSplitter {
    pub fn new() -> Self {
        Self::default()
    }

    /// The complete lines `chunk` ends, each with its 1-based number.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<(usize, Vec<u8>)>, LineError> {
        let mut out = Vec::new();
        let mut rest = chunk;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&rest[..at]);
            rest = &rest[at + 1..];
            let line = self.take()?;
            out.push(line);
        }
        self.partial.extend_from_slice(rest);
        if self.partial.len() > MAX_LINE_BYTES {
            return Err(self.too_long());
        }
        Ok(out)
    }

    /// The last line, when the file does not end with a newline.
    pub fn finish(&mut self) -> Result<Option<(usize, Vec<u8>)>, LineError> {
        if self.partial.is_empty() {
            return Ok(None);
        }
        self.take().map(Some)
    }

    fn take(&mut self) -> Result<(usize, Vec<u8>), LineError> {
        if self.partial.len() > MAX_LINE_BYTES {
            return Err(self.too_long());
        }
        self.lines += 1;
        let mut line = std::mem::take(&mut self.partial);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Ok((self.lines, line))
    }

    fn too_long(&self) -> LineError {
        LineError {
            line: self.lines + 1,
            message: format!("the line is longer than {MAX_LINE_BYTES} bytes"),
        }
    }
}

/// Checks an input file's lines in order for a batch on `endpoint`.
#[derive(Debug)]
pub struct Validator {
    endpoint: String,
    seen: HashSet<String>,
}

impl Validator {
    pub fn new(endpoint: &str) -> Self {
        Self {
            endpoint: endpoint.to_owned(),
            seen: HashSet::new(),
        }
    }

    /// Requests accepted so far.
    pub fn count(&self) -> usize {
        self.seen.len()
    }

    /// Line `line` of the file: `Ok(None)` for a blank line (skipped).
    pub fn check(&mut self, line: usize, raw: &[u8]) -> Result<Option<BatchLine>, LineError> {
        let bad = |message: String| LineError { line, message };
        if raw.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        if self.seen.len() >= MAX_LINES {
            return Err(bad(format!("a batch holds at most {MAX_LINES} requests")));
        }
        let value: Value =
            serde_json::from_slice(raw).map_err(|e| bad(format!("not valid JSON ({e})")))?;
        let Value::Object(mut object) = value else {
            return Err(bad("a request must be a JSON object".to_owned()));
        };
        let custom_id = match object.remove("custom_id") {
            Some(Value::String(id)) if !id.is_empty() => id,
            Some(Value::String(_)) | None | Some(Value::Null) => {
                return Err(bad("`custom_id` is missing".to_owned()));
            }
            Some(_) => return Err(bad("`custom_id` must be a string".to_owned())),
        };
        if custom_id.chars().count() > MAX_CUSTOM_ID_CHARS {
            return Err(bad(format!(
                "`custom_id` is longer than {MAX_CUSTOM_ID_CHARS} characters"
            )));
        }
        match object.remove("method") {
            Some(Value::String(method)) if method == "POST" => {}
            Some(other) => {
                return Err(bad(format!("`method` must be \"POST\", not {other}")));
            }
            None => return Err(bad("`method` is missing (it must be \"POST\")".to_owned())),
        }
        match object.remove("url") {
            Some(Value::String(url)) if url == self.endpoint => {}
            Some(other) => {
                return Err(bad(format!(
                    "`url` must be the batch's endpoint \"{}\", not {other}",
                    self.endpoint
                )));
            }
            None => {
                return Err(bad(format!(
                    "`url` is missing (it must be the batch's endpoint \"{}\")",
                    self.endpoint
                )));
            }
        }
        let body = match object.remove("body") {
            Some(Value::Object(body)) => body,
            Some(_) => return Err(bad("`body` must be a JSON object".to_owned())),
            None => return Err(bad("`body` is missing".to_owned())),
        };
        if let Some(field) = object.keys().next() {
            return Err(bad(format!(
                "unknown field `{field}` (a request has `custom_id`, `method`, `url` and `body`)"
            )));
        }
        if matches!(body.get("stream"), Some(Value::Bool(true))) {
            return Err(bad("`body.stream` cannot be true in a batch".to_owned()));
        }
        if self.endpoint == "/v1/responses"
            && matches!(body.get("background"), Some(Value::Bool(true)))
        {
            return Err(bad("`body.background` cannot be true in a batch".to_owned()));
        }
        if self.seen.contains(&custom_id) {
            return Err(bad(format!(
                "`custom_id` \"{custom_id}\" is used by an earlier line; each must be unique"
            )));
        }
        self.seen.insert(custom_id.clone());
        Ok(Some(BatchLine {
            line,
            custom_id,
            body,
        }))
    }

    /// After the last line: a file without a request is refused.
    pub fn finish(&self, lines: usize) -> Result<usize, LineError> {
        if self.seen.is_empty() {
            return Err(LineError {
                line: lines.max(1),
                message: "the file holds no request".to_owned(),
            });
        }
        Ok(self.seen.len())
    }
}

/// An output line: the request's answer (any status), OpenAI's format.
pub fn output_line(
    id: &str,
    custom_id: &str,
    status_code: u16,
    request_id: &str,
    body: &Value,
) -> String {
    let mut line = json!({
        "id": id,
        "custom_id": custom_id,
        "response": {
            "status_code": status_code,
            "request_id": request_id,
            "body": body,
        },
        "error": null,
    })
    .to_string();
    line.push('\n');
    line
}

/// An error-file line for a request that never got an answer (`code`:
/// `batch_expired`, `batch_cancelled`).
pub fn error_line(id: &str, custom_id: &str, code: &str, message: &str) -> String {
    let mut line = json!({
        "id": id,
        "custom_id": custom_id,
        "response": null,
        "error": { "code": code, "message": message },
    })
    .to_string();
    line.push('\n');
    line
}

/// An error answer's body in OpenAI's shape.
pub fn error_body(message: &str, kind: &str, code: &str, param: Option<&str>) -> Value {
    json!({
        "error": {
            "message": message,
            "type": kind,
            "param": param,
            "code": code,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: &str = "/v1/chat/completions";

    fn line(custom_id: &str) -> String {
        json!({
            "custom_id": custom_id,
            "method": "POST",
            "url": CHAT,
            "body": {"model": "local/echo", "messages": [{"role": "user", "content": "hi"}]},
        })
        .to_string()
    }

    fn check(raw: &str) -> Result<Option<BatchLine>, LineError> {
        Validator::new(CHAT).check(3, raw.as_bytes())
    }

    #[test]
    fn a_well_formed_line_is_accepted_with_its_custom_id_and_body() {
        let accepted = check(&line("req-1")).unwrap().unwrap();
        assert_eq!(accepted.line, 3);
        assert_eq!(accepted.custom_id, "req-1");
        assert_eq!(accepted.body["model"], "local/echo");
    }

    #[test]
    fn blank_lines_are_skipped() {
        assert_eq!(check("   ").unwrap(), None);
        assert_eq!(check("").unwrap(), None);
    }

    #[test]
    fn invalid_json_names_the_line() {
        let err = check("{not json").unwrap_err();
        assert_eq!(err.line, 3);
        assert!(
            err.to_string().starts_with("line 3: not valid JSON"),
            "{err}"
        );
    }

    #[test]
    fn a_line_that_is_not_an_object_is_refused() {
        assert!(check("[1,2]").unwrap_err().message.contains("JSON object"));
    }

    #[test]
    fn a_missing_or_non_string_custom_id_is_refused() {
        let missing = json!({"method": "POST", "url": CHAT, "body": {}}).to_string();
        assert!(
            check(&missing)
                .unwrap_err()
                .message
                .contains("`custom_id` is missing")
        );
        let empty = json!({"custom_id": "", "method": "POST", "url": CHAT, "body": {}}).to_string();
        assert!(
            check(&empty)
                .unwrap_err()
                .message
                .contains("`custom_id` is missing")
        );
        let number = json!({"custom_id": 7, "method": "POST", "url": CHAT, "body": {}}).to_string();
        assert!(
            check(&number)
                .unwrap_err()
                .message
                .contains("must be a string")
        );
        let long = json!({"custom_id": "x".repeat(MAX_CUSTOM_ID_CHARS + 1), "method": "POST", "url": CHAT, "body": {}}).to_string();
        assert!(check(&long).unwrap_err().message.contains("longer than"));
    }

    #[test]
    fn a_duplicate_custom_id_names_the_second_line() {
        let mut validator = Validator::new(CHAT);
        validator.check(1, line("a").as_bytes()).unwrap();
        validator.check(2, line("b").as_bytes()).unwrap();
        let err = validator.check(3, line("a").as_bytes()).unwrap_err();
        assert_eq!(err.line, 3);
        assert!(
            err.message.contains("\"a\" is used by an earlier line"),
            "{err}"
        );
        assert_eq!(validator.count(), 2);
    }

    #[test]
    fn the_method_must_be_post() {
        let get = json!({"custom_id": "a", "method": "GET", "url": CHAT, "body": {}}).to_string();
        assert!(
            check(&get)
                .unwrap_err()
                .message
                .contains("`method` must be \"POST\"")
        );
        let none = json!({"custom_id": "a", "url": CHAT, "body": {}}).to_string();
        assert!(
            check(&none)
                .unwrap_err()
                .message
                .contains("`method` is missing")
        );
    }

    #[test]
    fn the_url_must_be_the_batch_endpoint() {
        let other =
            json!({"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {}})
                .to_string();
        let err = check(&other).unwrap_err();
        assert!(err.message.contains("\"/v1/chat/completions\""), "{err}");
        assert!(err.message.contains("/v1/embeddings"), "{err}");
        let none = json!({"custom_id": "a", "method": "POST", "body": {}}).to_string();
        assert!(
            check(&none)
                .unwrap_err()
                .message
                .contains("`url` is missing")
        );
    }

    #[test]
    fn the_body_must_be_an_object_and_not_streamed() {
        let string =
            json!({"custom_id": "a", "method": "POST", "url": CHAT, "body": "hi"}).to_string();
        assert!(
            check(&string)
                .unwrap_err()
                .message
                .contains("`body` must be a JSON object")
        );
        let none = json!({"custom_id": "a", "method": "POST", "url": CHAT}).to_string();
        assert!(
            check(&none)
                .unwrap_err()
                .message
                .contains("`body` is missing")
        );
        let stream =
            json!({"custom_id": "a", "method": "POST", "url": CHAT, "body": {"stream": true}})
                .to_string();
        assert!(check(&stream).unwrap_err().message.contains("stream"));
    }

    #[test]
    fn background_responses_are_refused_in_a_batch() {
        let raw = json!({"custom_id": "a", "method": "POST", "url": "/v1/responses", "body": {"background": true}}).to_string();
        let err = Validator::new("/v1/responses")
            .check(1, raw.as_bytes())
            .unwrap_err();
        assert!(err.message.contains("background"));
    }

    #[test]
    fn unknown_top_level_fields_are_refused_not_dropped() {
        let raw =
            json!({"custom_id": "a", "method": "POST", "url": CHAT, "body": {}, "priority": 1})
                .to_string();
        assert!(
            check(&raw)
                .unwrap_err()
                .message
                .contains("unknown field `priority`")
        );
    }

    #[test]
    fn more_than_the_maximum_of_lines_is_refused_at_the_first_extra_line() {
        let mut validator = Validator::new(CHAT);
        for n in 1..=MAX_LINES {
            validator.check(n, line(&n.to_string()).as_bytes()).unwrap();
        }
        let err = validator
            .check(MAX_LINES + 1, line("extra").as_bytes())
            .unwrap_err();
        assert_eq!(err.line, MAX_LINES + 1);
        assert!(err.message.contains("at most 50000"), "{err}");
        assert_eq!(validator.finish(MAX_LINES).unwrap(), MAX_LINES);
    }

    #[test]
    fn an_empty_file_is_refused() {
        let validator = Validator::new(CHAT);
        assert!(
            validator
                .finish(0)
                .unwrap_err()
                .message
                .contains("no request")
        );
    }

    #[test]
    fn the_splitter_cuts_lines_across_chunk_boundaries() {
        let mut splitter = LineSplitter::new();
        let mut lines = splitter.feed(b"ab").unwrap();
        lines.extend(splitter.feed(b"c\r\nde\nf").unwrap());
        lines.extend(splitter.finish().unwrap());
        assert_eq!(
            lines,
            vec![
                (1, b"abc".to_vec()),
                (2, b"de".to_vec()),
                (3, b"f".to_vec())
            ]
        );
        assert_eq!(LineSplitter::new().finish().unwrap(), None);
    }

    #[test]
    fn the_splitter_refuses_an_overlong_line_without_holding_it() {
        let mut splitter = LineSplitter::new();
        splitter.feed(b"ok\n").unwrap();
        let chunk = vec![b'x'; MAX_LINE_BYTES + 1];
        let err = splitter.feed(&chunk).unwrap_err();
        assert_eq!(err.line, 2);
    }

    #[test]
    fn output_lines_are_in_openai_format() {
        let out = output_line("batch_req_1", "a", 200, "req_1", &json!({"ok": true}));
        assert!(out.ends_with('\n'));
        let value: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            value,
            json!({"id": "batch_req_1", "custom_id": "a", "response": {"status_code": 200, "request_id": "req_1", "body": {"ok": true}}, "error": null})
        );
        let err: Value =
            serde_json::from_str(&error_line("batch_req_2", "b", "batch_expired", "late")).unwrap();
        assert_eq!(err["response"], Value::Null);
        assert_eq!(
            err["error"],
            json!({"code": "batch_expired", "message": "late"})
        );
        assert_eq!(
            error_body(
                "m",
                "invalid_request_error",
                "invalid_request",
                Some("model")
            )["error"]["param"],
            "model"
        );
    }
}
