//! How a generation request wants its answer and how long its job may run:
//! `?async`, `Prefer` (RFC 7240: `respond-async`, `wait=N`) and
//! `Cancel-After`, read once per request into a [`Timing`].
//!
//! Precedence: an explicit `?async` decides alone (`Prefer` is then ignored
//! and no `Preference-Applied` is sent); otherwise `Prefer: wait=N`, then
//! `Prefer: respond-async`, then the endpoint's default.

use std::collections::HashMap;
use std::time::Duration;

use actix_web::HttpRequest;
use actix_web::http::header::HeaderMap;
use unigen_core::ValidationError;

use super::params::query_bool;
use crate::error::ApiError;

/// Longest `Prefer: wait` honoured; a larger one is taken as this.
pub const MAX_PREFER_WAIT_SECONDS: u64 = 60;

/// Longest `Cancel-After` accepted.
pub const MAX_CANCEL_AFTER_SECONDS: u64 = 24 * 60 * 60;

pub const CANCEL_AFTER: &str = "Cancel-After";

/// The OpenAPI description of the `Prefer` header of generation routes.
pub const PREFER_DOC: &str = "RFC 7240 preferences. `wait=N` (N from 1 to 60; a larger N is \
    taken as 60; 0 or a malformed value is ignored): hold the request up to N seconds, then answer \
    with the finished result (200), or with the async creation body (202) if the job is not \
    finished. `respond-async`: as `async=true`. With `respond-async, wait=N`, `wait` applies. An \
    explicit `async` query parameter wins over `Prefer`, which is then ignored. Applied \
    preferences are named in `Preference-Applied`.";

/// The OpenAPI description of the `Cancel-After` header of generation routes.
pub const CANCEL_AFTER_DOC: &str = "A deadline for the job, counted from its creation: seconds \
    (`90`) or a duration of hours, minutes and seconds (`1m30s`, `2h`, `1h30m`, `45s`), above 0 \
    and at most 24 hours. A job not finished by then is `cancelled`: nothing charged, the \
    reservation released, the provider call aborted, a `generation.failed` event with the reason; \
    a sync request then answers 408 `deadline_exceeded`. The job JSON shows it as `cancelAfter`. \
    Malformed or over 24 hours: 400 with `param` `Cancel-After`, nothing created.";

/// How the request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// At once, 202 with the job (`?async=true`, or the endpoint's default).
    Async,
    /// At once, 202 with the job: `Prefer: respond-async`.
    RespondAsync,
    /// `Prefer: wait=N`: the finished result within N seconds, else 202
    /// with the job as `async=true` answers it.
    Wait(u64),
    /// The finished result within the server's sync wait limit.
    Sync,
}

impl Delivery {
    /// Reads `?async` and the `Prefer` headers; `default_async` is the
    /// endpoint's default. A malformed `async` is a 400; a malformed
    /// preference is ignored, as RFC 7240 asks.
    pub fn read(
        headers: &HeaderMap,
        query: &HashMap<String, String>,
        default_async: bool,
    ) -> Result<Self, ApiError> {
        if query.contains_key("async") {
            return Ok(if query_bool(query, "async", default_async)? {
                Delivery::Async
            } else {
                Delivery::Sync
            });
        }
        let preferences = Preferences::parse(
            headers
                .get_all("Prefer")
                .filter_map(|value| value.to_str().ok()),
        );
        Ok(if let Some(seconds) = preferences.wait {
            Delivery::Wait(seconds)
        } else if preferences.respond_async {
            Delivery::RespondAsync
        } else if default_async {
            Delivery::Async
        } else {
            Delivery::Sync
        })
    }

    /// The `Preference-Applied` header's value, when a preference was.
    pub fn preference_applied(self) -> Option<String> {
        match self {
            Delivery::RespondAsync => Some("respond-async".to_owned()),
            Delivery::Wait(seconds) => Some(format!("wait={seconds}")),
            Delivery::Async | Delivery::Sync => None,
        }
    }
}

/// The preferences this API acts on, from every `Prefer` header.
#[derive(Debug, Default, PartialEq, Eq)]
struct Preferences {
    respond_async: bool,
    /// Seconds, 1 to [`MAX_PREFER_WAIT_SECONDS`].
    wait: Option<u64>,
}

impl Preferences {
    /// RFC 7240 §2: comma-separated preferences over any number of headers,
    /// each `token [= word]` with `;`-parameters (ignored here); names are
    /// case-insensitive, values tokens or quoted strings. Only the first
    /// occurrence of a preference counts (§2); an unusable value makes it
    /// ignored.
    fn parse<'a>(headers: impl Iterator<Item = &'a str>) -> Self {
        let mut seen_wait = false;
        let mut seen_respond_async = false;
        let mut preferences = Preferences::default();
        for header in headers {
            for preference in split_unquoted(header, ',') {
                let Some(name_value) = split_unquoted(preference, ';').into_iter().next() else {
                    continue;
                };
                let (name, value) = match split_unquoted(name_value, '=').as_slice() {
                    [name] => (name.trim(), None),
                    [name, value] => (name.trim(), Some(unquote(value.trim()))),
                    _ => continue,
                };
                if name.eq_ignore_ascii_case("wait") && !seen_wait {
                    seen_wait = true;
                    preferences.wait = value.as_deref().and_then(wait_seconds);
                } else if name.eq_ignore_ascii_case("respond-async") && !seen_respond_async {
                    seen_respond_async = true;
                    preferences.respond_async = true;
                }
            }
        }
        preferences
    }
}

/// `wait`'s value: delta-seconds (digits only). 0 or not digits: `None`;
/// above the maximum (however many digits): the maximum.
fn wait_seconds(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match value.parse::<u64>() {
        Ok(0) => None,
        Ok(seconds) => Some(seconds.min(MAX_PREFER_WAIT_SECONDS)),
        // More digits than a u64 holds: far above the maximum.
        Err(_) => Some(MAX_PREFER_WAIT_SECONDS),
    }
}

/// Splits on `separator` outside double-quoted strings (a quoted value may
/// hold commas, semicolons and `\"`).
fn split_unquoted(text: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == separator && !quoted {
            parts.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&text[start..]);
    parts
}

/// A quoted-string's content (escapes resolved), or a token as it is.
fn unquote(value: &str) -> String {
    match value
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    {
        Some(inner) => {
            let mut out = String::with_capacity(inner.len());
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                out.push(if c == '\\' {
                    chars.next().unwrap_or('\\')
                } else {
                    c
                });
            }
            out
        }
        None => value.to_owned(),
    }
}

/// The `Cancel-After` header: `None` without one, else its duration; a
/// malformed value, several values, zero or more than 24 hours is a 400
/// naming the header.
pub fn cancel_after(headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
    let mut values = headers.get_all(CANCEL_AFTER);
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let invalid = |got: &str| {
        ApiError::Validation(ValidationError::new(
            CANCEL_AFTER,
            format!(
                "Cancel-After must be a number of seconds (`90`) or a duration of hours, minutes \
                 and seconds (`1h30m`, `1m30s`, `45s`), above 0 and at most 24 hours; got `{got}`"
            ),
        ))
    };
    if values.next().is_some() {
        return Err(ApiError::Validation(ValidationError::new(
            CANCEL_AFTER,
            "Cancel-After must be given once",
        )));
    }
    let text = value.to_str().map_err(|_| invalid("(not text)"))?;
    match parse_duration(text.trim()) {
        Some(seconds) if (1..=MAX_CANCEL_AFTER_SECONDS).contains(&seconds) => {
            Ok(Some(Duration::from_secs(seconds)))
        }
        _ => Err(invalid(text)),
    }
}

/// Seconds of `90`, or of `2h`, `1h30m`, `1m30s`, `45s` (components in the
/// order h, m, s, each at most once, letters in either case). `None` when
/// malformed; saturates rather than overflows (then it is over the maximum).
fn parse_duration(text: &str) -> Option<u64> {
    if text.is_empty() {
        return None;
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return Some(text.parse::<u64>().unwrap_or(u64::MAX));
    }
    let mut total: u64 = 0;
    let mut rest = text;
    // Units still allowed, in order: each component's unit must come later
    // than the one before.
    let mut units: &[(char, u64)] = &[('h', 3600), ('m', 60), ('s', 1)];
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let amount = rest[..digits].parse::<u64>().unwrap_or(u64::MAX);
        let unit = rest[digits..].chars().next()?.to_ascii_lowercase();
        let at = units.iter().position(|(u, _)| *u == unit)?;
        total = total.saturating_add(amount.saturating_mul(units[at].1));
        units = &units[at + 1..];
        rest = &rest[digits + 1..];
    }
    Some(total)
}

/// What a generation request asked about its answer and its job's deadline.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub delivery: Delivery,
    /// From `Cancel-After`: unfinished this long after submission, the job
    /// is cancelled.
    pub cancel_after: Option<Duration>,
}

impl Timing {
    /// Reads `?async`, `Prefer` and `Cancel-After` (400s for a malformed
    /// `async` or `Cancel-After`); `default_async` is the endpoint's default.
    pub fn read(
        http: &HttpRequest,
        query: &HashMap<String, String>,
        default_async: bool,
    ) -> Result<Self, ApiError> {
        Ok(Self {
            delivery: Delivery::read(http.headers(), query, default_async)?,
            cancel_after: cancel_after(http.headers())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use actix_web::http::header::{HeaderName, HeaderValue};

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn delivery(prefer: &[&str], query: &[(&str, &str)], default_async: bool) -> Delivery {
        let pairs: Vec<(&str, &str)> = prefer.iter().map(|v| ("Prefer", *v)).collect();
        let query: HashMap<String, String> = query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Delivery::read(&headers(&pairs), &query, default_async).unwrap()
    }

    #[test]
    fn prefer_wait_is_parsed_per_rfc_7240() {
        assert_eq!(delivery(&["wait=5"], &[], false), Delivery::Wait(5));
        assert_eq!(delivery(&["WAIT = 7"], &[], false), Delivery::Wait(7));
        assert_eq!(delivery(&["wait=\"9\""], &[], false), Delivery::Wait(9));
        assert_eq!(
            delivery(&["handling=lenient, wait=3;foo=\"a,b\""], &[], false),
            Delivery::Wait(3)
        );
        assert_eq!(
            delivery(&["return=minimal", "wait=4"], &[], false),
            Delivery::Wait(4)
        );
        assert_eq!(delivery(&["wait=100"], &[], false), Delivery::Wait(60));
        assert_eq!(
            delivery(&["wait=99999999999999999999999"], &[], false),
            Delivery::Wait(60)
        );
        // Only the first occurrence counts.
        assert_eq!(delivery(&["wait=2, wait=8"], &[], false), Delivery::Wait(2));
    }

    #[test]
    fn a_zero_or_malformed_wait_is_ignored() {
        for prefer in ["wait=0", "wait=abc", "wait=-3", "wait=1.5", "wait", "wait="] {
            assert_eq!(delivery(&[prefer], &[], false), Delivery::Sync, "{prefer}");
            assert_eq!(delivery(&[prefer], &[], true), Delivery::Async, "{prefer}");
        }
        // A quoted comma does not split preferences.
        assert_eq!(delivery(&["foo=\"x, wait=5\""], &[], false), Delivery::Sync);
    }

    #[test]
    fn respond_async_and_the_async_parameter() {
        assert_eq!(
            delivery(&["Respond-Async"], &[], false),
            Delivery::RespondAsync
        );
        // RFC 7240's own example: asynchronous if it takes longer than N.
        assert_eq!(
            delivery(&["respond-async, wait=10"], &[], false),
            Delivery::Wait(10)
        );
        // An explicit `async` wins over `Prefer`.
        assert_eq!(
            delivery(&["respond-async"], &[("async", "false")], false),
            Delivery::Sync
        );
        assert_eq!(
            delivery(&["wait=5"], &[("async", "true")], false),
            Delivery::Async
        );
        // Prefer over the endpoint's default.
        assert_eq!(delivery(&["wait=5"], &[], true), Delivery::Wait(5));
        assert_eq!(Delivery::Wait(5).preference_applied().unwrap(), "wait=5");
        assert_eq!(
            Delivery::RespondAsync.preference_applied().unwrap(),
            "respond-async"
        );
        assert!(Delivery::Async.preference_applied().is_none());
    }

    #[test]
    fn cancel_after_accepts_seconds_and_durations() {
        let parse = |v: &str| cancel_after(&headers(&[(CANCEL_AFTER, v)]));
        for (value, seconds) in [
            ("90", 90),
            ("1m30s", 90),
            ("2h", 7200),
            ("1h30m", 5400),
            ("45s", 45),
            (" 10M ", 600),
            ("24h", 86_400),
            ("86400", 86_400),
        ] {
            assert_eq!(
                parse(value).unwrap(),
                Some(Duration::from_secs(seconds)),
                "{value}"
            );
        }
        assert_eq!(cancel_after(&HeaderMap::new()).unwrap(), None);
    }

    #[test]
    fn cancel_after_refuses_malformed_zero_and_over_a_day() {
        for value in [
            "",
            "0",
            "0s",
            "86401",
            "24h1s",
            "25h",
            "1.5",
            "-5",
            "1d",
            "30s1m",
            "1h1h",
            "m",
            "1m 30s",
            "soon",
            "99999999999999999999999",
        ] {
            let err = cancel_after(&headers(&[(CANCEL_AFTER, value)])).unwrap_err();
            match err {
                ApiError::Validation(v) => assert_eq!(v.field, CANCEL_AFTER, "{value}"),
                other => panic!("{value}: {other:?}"),
            }
        }
        let twice = headers(&[(CANCEL_AFTER, "5"), (CANCEL_AFTER, "6")]);
        assert!(cancel_after(&twice).is_err());
    }
}
