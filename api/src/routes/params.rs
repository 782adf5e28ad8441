//! Parsing of bodies and query strings with errors that name the field.

use std::collections::HashMap;

use chrono::{DateTime, Days, NaiveDate, NaiveDateTime, NaiveTime, Utc};
use serde::de::DeserializeOwned;
use unigen_core::ValidationError;

use crate::error::ApiError;

/// JSON body -> `T`. A type error names the field in `param` (its path:
/// `n`, `messages[0].content`) and says in plain words what it must be.
pub fn json_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    // serde does not check the UTF-8 of the strings it skips (unknown
    // fields); JSON text is UTF-8 (RFC 8259), so the whole body must be.
    if let Err(err) = std::str::from_utf8(body) {
        return Err(ApiError::BadRequest(format!(
            "request body is not valid JSON: invalid UTF-8 at byte {}",
            err.valid_up_to()
        )));
    }
    if nesting_depth(body) > MAX_NESTING {
        return Err(ApiError::BadRequest(format!(
            "request body is not valid JSON: nested deeper than {MAX_NESTING} levels"
        )));
    }
    // serde reads a struct from an array too (by position): a body that is
    // JSON but not an object is refused up front.
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    let other_json = |b: &u8| b.is_ascii_alphanumeric() || b"[\"-".contains(b);
    if first.is_none_or(other_json) {
        return Err(ApiError::BadRequest(
            "request body must be a JSON object".into(),
        ));
    }
    let mut ignored = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed = deserialize_noting_ignored(&mut de, &mut ignored);
    // JSON Schema's `integer` includes `2.0`, and so does what many clients
    // send (Python's `json.dumps(2.0)`): an integral float where an integer
    // is expected is read as that integer.
    let parsed = match parsed {
        Err(err)
            if err
                .inner()
                .to_string()
                .starts_with("invalid type: floating point") =>
        {
            match integral_floats_as_integers(body) {
                Some(rewritten) => {
                    ignored.clear();
                    let mut de = serde_json::Deserializer::from_slice(&rewritten);
                    deserialize_noting_ignored(&mut de, &mut ignored)
                }
                None => Err(err),
            }
        }
        parsed => parsed,
    };
    // PostgreSQL text cannot hold NUL: refused here, naming the field, for
    // every JSON body (it would otherwise be a 500 wherever it is stored).
    // Fields the endpoint does not read are skipped: nothing keeps them.
    if parsed.is_ok()
        && body.windows(6).any(|w| w.eq_ignore_ascii_case(b"\\u0000"))
        && let Some(path) = nul_path(body, &ignored)
    {
        let param = if path.is_empty() {
            ".".to_owned()
        } else {
            path
        };
        return Err(ApiError::InvalidField {
            message: format!("{param} must not contain NUL characters (\\u0000)"),
            param,
        });
    }
    parsed.map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::BadRequest(format!("request body is not valid JSON: {inner}"))
        } else if path == "." {
            ApiError::BadRequest("request body must be a JSON object".into())
        } else {
            ApiError::InvalidField {
                message: type_error_message(&path, &inner.to_string()),
                param: path,
            }
        }
    })
}

/// The body with every number written as a float with no fractional part
/// (`2.0`, `1e3`) written as that integer instead, when an f64 holds it
/// exactly; `None` when there is none. It rewrites the text token by token
/// (strings skipped), so it costs one copy of the body, not a parsed tree.
fn integral_floats_as_integers(body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len());
    let (mut in_string, mut escaped, mut changed) = (false, false, false);
    let mut at = 0;
    while at < body.len() {
        let byte = body[at];
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            out.push(byte);
            at += 1;
            continue;
        }
        if byte == b'-' || byte.is_ascii_digit() {
            let end = body[at..]
                .iter()
                .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                .map_or(body.len(), |n| at + n);
            let token = &body[at..end];
            let float = token
                .iter()
                .any(|b| matches!(b, b'.' | b'e' | b'E'))
                .then(|| std::str::from_utf8(token).ok()?.parse::<f64>().ok())
                .flatten()
                .filter(|float| is_exact_integer(*float));
            match float {
                Some(float) => {
                    // Within +/-2^53 the conversions are exact.
                    let integer = if float >= 0.0 {
                        (float as u64).to_string()
                    } else {
                        (float as i64).to_string()
                    };
                    out.extend_from_slice(integer.as_bytes());
                    changed = true;
                }
                None => out.extend_from_slice(token),
            }
            at = end;
            continue;
        }
        in_string = byte == b'"';
        out.push(byte);
        at += 1;
    }
    changed.then_some(out)
}

/// A float with no fractional part that an f64 holds exactly (|x| <= 2^53).
fn is_exact_integer(float: f64) -> bool {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    float.is_finite() && float.fract() == 0.0 && float.abs() <= EXACT
}

/// Deepest nesting of objects and arrays a body may have (serde's own limit
/// for the fields it reads; it skips unknown fields without one).
const MAX_NESTING: usize = 128;

/// How deep objects and arrays nest in `body` (strings skipped).
fn nesting_depth(body: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &byte in body {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// One step of a path into a JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// `T` from `de`, with the paths of the fields `T` does not read added to
/// `ignored`.
fn deserialize_noting_ignored<'de, D, T>(
    de: D,
    ignored: &mut Vec<Vec<Step>>,
) -> Result<T, serde_path_to_error::Error<D::Error>>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    let mut note = |path: serde_ignored::Path<'_>| ignored.push(steps(&path));
    serde_path_to_error::deserialize(serde_ignored::Deserializer::new(de, &mut note))
}

fn steps(path: &serde_ignored::Path<'_>) -> Vec<Step> {
    use serde_ignored::Path;
    match path {
        Path::Root => Vec::new(),
        Path::Seq { parent, index } => {
            let mut steps = steps(parent);
            steps.push(Step::Index(*index));
            steps
        }
        Path::Map { parent, key } => {
            let mut steps = steps(parent);
            steps.push(Step::Key(key.clone()));
            steps
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => steps(parent),
    }
}

/// The path (`messages[0].content`) of the first string or key holding a
/// NUL character, outside the `ignored` subtrees. It streams through the
/// text: its memory is the path, not a parsed tree of the body.
fn nul_path(body: &[u8], ignored: &[Vec<Step>]) -> Option<String> {
    use serde::de::DeserializeSeed;
    let mut at = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    NulSearch {
        at: &mut at,
        ignored,
    }
    .deserialize(&mut de)
    .ok()
    .flatten()
}

/// One value's search for a NUL (see [`nul_path`]): the path found, if any.
struct NulSearch<'a> {
    at: &'a mut Vec<Step>,
    ignored: &'a [Vec<Step>],
}

impl NulSearch<'_> {
    fn is_ignored(&self) -> bool {
        self.ignored.iter().any(|path| path == self.at)
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for NulSearch<'_> {
    type Value = Option<String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Option<String>, D::Error> {
        if self.is_ignored() {
            <serde::de::IgnoredAny as serde::Deserialize>::deserialize(de)?;
            return Ok(None);
        }
        de.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for NulSearch<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_str<E>(self, text: &str) -> Result<Option<String>, E> {
        Ok(text.contains('\0').then(|| display(self.at)))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> Result<Option<String>, A::Error> {
        let mut found = None;
        let mut index = 0;
        loop {
            if found.is_some() {
                // The rest is read through, unsearched.
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                return Ok(found);
            }
            self.at.push(Step::Index(index));
            let item = seq.next_element_seed(NulSearch {
                at: &mut *self.at,
                ignored: self.ignored,
            });
            self.at.pop();
            match item? {
                Some(item) => found = item,
                None => return Ok(None),
            }
            index += 1;
        }
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<Option<String>, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if found.is_some() {
                map.next_value::<serde::de::IgnoredAny>()?;
                continue;
            }
            self.at.push(Step::Key(key));
            let value = if self.is_ignored() {
                map.next_value::<serde::de::IgnoredAny>().map(|_| None)
            } else if matches!(self.at.last(), Some(Step::Key(key)) if key.contains('\0')) {
                map.next_value::<serde::de::IgnoredAny>()
                    .map(|_| Some(display(self.at)))
            } else {
                map.next_value_seed(NulSearch {
                    at: &mut *self.at,
                    ignored: self.ignored,
                })
            };
            self.at.pop();
            found = value?;
        }
        Ok(found)
    }
}

/// `messages[0].content`
fn display(path: &[Step]) -> String {
    let mut text = String::new();
    for step in path {
        match step {
            Step::Key(key) if text.is_empty() => text.push_str(key),
            Step::Key(key) => {
                text.push('.');
                text.push_str(key);
            }
            Step::Index(index) => text.push_str(&format!("[{index}]")),
        }
    }
    text
}

/// serde's `invalid type: string "2", expected u32 at line 1 column 9` as
/// `n must be a non-negative integer, got a string`.
fn type_error_message(path: &str, serde_message: &str) -> String {
    let message = serde_message
        .rsplit_once(" at line ")
        .map_or(serde_message, |(message, _)| message);
    if let Some(enum_name) =
        message.strip_prefix("data did not match any variant of untagged enum ")
    {
        let shapes = match enum_name {
            "EmbeddingInput" => {
                "a string, an array of strings, an array of token ids or an array of token id arrays"
            }
            "MessageContent" => "a string or an array of content parts",
            "Stop" => "a string or an array of strings",
            _ => "of another type",
        };
        return format!("{path} must be {shapes}");
    }
    if let Some(field) = message.strip_prefix("missing field ") {
        return format!("{path}: {} is required", field.trim_matches('`'));
    }
    let detail = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .or_else(|| message.strip_prefix("invalid length "));
    let Some((got, expected)) = detail.and_then(|d| d.split_once(", expected ")) else {
        return format!("{path}: {message}");
    };
    format!(
        "{path} must be {}, got {}",
        expected_words(expected),
        got_words(got)
    )
}

fn expected_words(expected: &str) -> &str {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a non-negative integer",
        "i8" | "i16" | "i32" | "i64" | "isize" => "an integer",
        "f32" | "f64" => "a number",
        "a boolean" => "true or false",
        "a sequence" => "an array",
        "a map" => "an object",
        "a string" | "a borrowed string" => "a string",
        other if other.starts_with("struct ") => "an object",
        other => other,
    }
}

fn got_words(got: &str) -> String {
    let kind = got.split_whitespace().next().unwrap_or(got);
    match kind {
        "string" => "a string".into(),
        "integer" | "floating" => got
            .split('`')
            .nth(1)
            .map_or_else(|| "a number".into(), |n| n.to_owned()),
        "boolean" => "true or false".into(),
        "sequence" => "an array".into(),
        "map" => "an object".into(),
        "null" | "unit" => "null".into(),
        _ => got.to_owned(),
    }
}

/// Query boolean: `true`/`false`/`1`/`0`, absent = `default`.
pub fn query_bool(
    query: &HashMap<String, String>,
    name: &str,
    default: bool,
) -> Result<bool, ApiError> {
    match query.get(name).map(String::as_str) {
        None => Ok(default),
        Some("true" | "1") => Ok(true),
        Some("false" | "0") => Ok(false),
        Some(other) => Err(ApiError::BadRequest(format!(
            "{name} must be true or false, got `{other}`"
        ))),
    }
}

/// Query page size `limit`: an integer from 1 to `max`, absent = `default`.
pub fn query_limit(
    query: &HashMap<String, String>,
    default: i64,
    max: i64,
) -> Result<i64, ApiError> {
    match query.get("limit") {
        None => Ok(default),
        Some(raw) => raw
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "limit must be an integer from 1 to {max}, got `{raw}`"
                ))
            }),
    }
}

/// A range bound as written: an instant (it carried an offset), or a wall
/// clock time to read in the request's time zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    Instant(DateTime<Utc>),
    Local(NaiveDateTime),
}

impl Bound {
    /// The instant, reading a wall-clock time in UTC (for ranges without a
    /// `timezone` parameter).
    pub fn in_utc(self) -> DateTime<Utc> {
        match self {
            Bound::Instant(at) => at,
            Bound::Local(local) => local.and_utc(),
        }
    }
}

/// ISO 8601: a date-time with an offset (`2026-03-01T12:00:00Z`,
/// `...+05:30`), a local date-time (`2026-03-01T12:00:00`) or a date
/// (`2026-03-01`: its midnight, or for an end the next midnight, so the end
/// date is included).
pub fn parse_bound(field: &'static str, raw: &str, is_end: bool) -> Result<Bound, ValidationError> {
    // An unencoded `+` of an offset arrives as a space (form encoding).
    let repaired;
    // Checked: a client's non-ASCII text may put byte len-6 inside a character.
    let raw = match raw
        .len()
        .checked_sub(6)
        .and_then(|i| raw.split_at_checked(i))
    {
        Some((head, tail)) if tail.starts_with(' ') && head.contains('T') => {
            repaired = format!("{head}+{}", &tail[1..]);
            repaired.as_str()
        }
        _ => raw,
    };
    if let Ok(at) = DateTime::parse_from_rfc3339(raw) {
        return Ok(Bound::Instant(at.with_timezone(&Utc)));
    }
    for pattern in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M"] {
        if let Ok(local) = NaiveDateTime::parse_from_str(raw, pattern) {
            return Ok(Bound::Local(local));
        }
    }
    if let Ok(date) = NaiveDate::parse_from_str(raw, "%Y-%m-%d") {
        let day = if is_end {
            date.checked_add_days(Days::new(1))
        } else {
            Some(date)
        };
        if let Some(day) = day {
            return Ok(Bound::Local(day.and_time(NaiveTime::MIN)));
        }
    }
    Err(ValidationError::new(
        field,
        format!(
            "{field} must be an ISO 8601 date (2026-03-01) or date-time \
             (2026-03-01T12:00:00Z), got `{raw}`"
        ),
    ))
}

/// An unknown resource of this kind (another organization's looks the same).
pub fn not_found(kind: &str, raw_id: &str) -> ApiError {
    ApiError::NotFound(format!("{kind} {raw_id} not found"))
}

/// A resource id from the path; an unparseable one is simply unknown (404).
pub fn path_id(kind: &str, raw: &str) -> Result<uuid::Uuid, ApiError> {
    raw.parse().map_err(|_| not_found(kind, raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Body {
        #[allow(dead_code)]
        n: Option<u32>,
    }

    #[test]
    fn type_errors_name_the_field_and_syntax_errors_say_json() {
        let err = json_body::<Body>(br#"{"n": "three"}"#).unwrap_err();
        assert!(
            matches!(&err, ApiError::InvalidField { param, .. } if param == "n"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "n must be a non-negative integer, got a string"
        );
        let err = json_body::<Body>(br#"{"n": -1}"#).unwrap_err();
        assert_eq!(err.to_string(), "n must be a non-negative integer, got -1");
        #[derive(Debug, serde::Deserialize)]
        struct Text {
            #[allow(dead_code)]
            messages: Vec<serde_json::Value>,
        }
        let err = json_body::<Text>(br#"{"messages": [{"content": "a\u0000b"}]}"#).unwrap_err();
        assert!(
            matches!(&err, ApiError::InvalidField { param, .. } if param == "messages[0].content"),
            "{err:?}"
        );
        assert!(json_body::<Text>(br#"{"messages": [{"content": "a\\u0000b"}]}"#).is_ok());
        let err = json_body::<Body>(b"{\"other\": \"\xff\"}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "request body is not valid JSON: invalid UTF-8 at byte 11"
        );
        let deep = format!("{{\"other\": {}{}}}", "[".repeat(200), "]".repeat(200));
        let err = json_body::<Body>(deep.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("nested deeper than 128"), "{err}");
        assert_eq!(nesting_depth(br#"{"a": "[[[{{{", "b": [{"c": "\"]"}]}"#), 3);
        let err = json_body::<Body>(br#"[1]"#).unwrap_err();
        assert_eq!(err.to_string(), "request body must be a JSON object");
        let err = json_body::<unigen_providers::chat::EmbeddingRequest>(br#"{"input": [1.5]}"#)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "input must be a string, an array of strings, an array of token ids or an array of token id arrays"
        );
        let err = json_body::<Body>(b"{not json").unwrap_err().to_string();
        assert!(err.starts_with("request body is not valid JSON"), "{err}");
        assert!(json_body::<Body>(b"").is_err());
    }

    #[test]
    fn nul_characters_in_fields_the_endpoint_does_not_read_are_ignored() {
        #[derive(Debug, serde::Deserialize)]
        struct Named {
            #[allow(dead_code)]
            name: String,
            #[allow(dead_code)]
            extra: Option<serde_json::Value>,
        }
        // Unknown fields are not kept: a NUL there harms nothing.
        assert!(json_body::<Named>(br#"{"name": "a", "other\u0000": {"b": "\u0000"}}"#).is_ok());
        // A read field, or anything inside a kept JSON value, is refused.
        let err = json_body::<Named>(br#"{"name": "a\u0000"}"#).unwrap_err();
        assert!(
            matches!(&err, ApiError::InvalidField { param, .. } if param == "name"),
            "{err:?}"
        );
        let err = json_body::<Named>(br#"{"name": "a", "extra": [{"k\u0000": 1}]}"#).unwrap_err();
        assert!(
            matches!(&err, ApiError::InvalidField { param, .. } if param == "extra[0].k\u{0}"),
            "{err:?}"
        );
    }

    #[test]
    fn integral_floats_are_read_where_integers_are_expected() {
        #[derive(Debug, serde::Deserialize)]
        struct Sized {
            n: u32,
            seed: Option<i64>,
            scale: f64,
        }
        let body: Sized = json_body(br#"{"n": 2.0, "seed": -3e0, "scale": 1.0}"#).unwrap();
        assert_eq!((body.n, body.seed, body.scale), (2, Some(-3), 1.0));
        let err = json_body::<Sized>(br#"{"n": 2.5, "scale": 1}"#).unwrap_err();
        assert!(
            matches!(&err, ApiError::InvalidField { param, .. } if param == "n"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "n must be a non-negative integer, got 2.5");
        let err = json_body::<Sized>(br#"{"n": 1e300, "scale": 1}"#).unwrap_err();
        assert!(
            matches!(&err, ApiError::InvalidField { param, .. } if param == "n"),
            "{err:?}"
        );
        let err = json_body::<Sized>(br#"{"n": -1.0, "scale": 1}"#).unwrap_err();
        assert_eq!(err.to_string(), "n must be a non-negative integer, got -1");
    }

    #[test]
    fn integral_floats_are_rewritten_in_the_text_and_strings_left_alone() {
        let out = integral_floats_as_integers(
            br#"{"s": "x\"2.0", "n": [2.0, -3e0, 2.5, 1e300, 7, -0.0]}"#,
        )
        .unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"s": "x\"2.0", "n": [2, -3, 2.5, 1e300, 7, 0]}"#
        );
        assert!(integral_floats_as_integers(br#"{"n": 7, "s": "2.0"}"#).is_none());
    }

    #[test]
    fn a_bound_with_multibyte_characters_is_refused_not_a_panic() {
        for raw in ["a\u{20ac}\u{20ac}b", "2026-03-01T00:0\u{e9}\u{e9}\u{e9}"] {
            let err = parse_bound("start_date", raw, false).unwrap_err();
            assert_eq!(err.field, "start_date");
        }
    }

    #[test]
    fn query_booleans() {
        let q: HashMap<String, String> = [("async".to_owned(), "1".to_owned())].into();
        assert!(query_bool(&q, "async", false).unwrap());
        assert!(!query_bool(&q, "poll", false).unwrap());
        let q: HashMap<String, String> = [("async".to_owned(), "yes".to_owned())].into();
        assert!(query_bool(&q, "async", false).is_err());
    }
}
