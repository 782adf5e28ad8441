//! Webhooks: the event kinds a webhook can subscribe to, validation of what a
//! client registers, the signed request (envelope, the spec's `x-service-*`
//! headers and the Standard Webhooks `webhook-*` ones), the retry schedule,
//! and the HTTP client that makes one delivery attempt.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::SecondsFormat;
use hmac::{Hmac, KeyInit, Mac};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use serde_json::{Map, Value, json};
use sha2::Sha256;

use unigen_core::ValidationError;
use unigen_core::fetch::{GuardedResolver, is_public};
use unigen_db::models::Event;

/// Every kind of the spec's event table, in its order (plus the overage
/// soft-limit notice).
pub const EVENT_KINDS: &[&str] = &[
    "agent.run.started",
    "agent.run.completed",
    "agent.run.failed",
    "generation.started",
    "generation.completed",
    "generation.failed",
    "chat.message.created",
    "chat.conversation.created",
    "subscription.created",
    "subscription.updated",
    "subscription.cancelled",
    "credits.low",
    "credits.depleted",
    // Ours: the overage soft limit "only notifies"; this is that notice.
    "overage.soft_limit_reached",
    "team.member.added",
    "team.member.removed",
    "team.member.role_changed",
    // The end of an OpenAI-style batch (`crate::batches::ended_event`).
    "batch.completed",
    "batch.failed",
    "batch.expired",
    "batch.cancelled",
];

pub use unigen_db::events::TEST_EVENT;

pub const SIGNATURE_HEADER: &str = "x-service-signature";
pub const TIMESTAMP_HEADER: &str = "x-service-timestamp";
pub const EVENT_ID_HEADER: &str = "x-service-event-id";
pub const EVENT_TYPE_HEADER: &str = "x-service-event-type";
/// Standard Webhooks (https://www.standardwebhooks.com): the event id, unix
/// seconds, and `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.
pub const STANDARD_ID_HEADER: &str = "webhook-id";
pub const STANDARD_TIMESTAMP_HEADER: &str = "webhook-timestamp";
pub const STANDARD_SIGNATURE_HEADER: &str = "webhook-signature";
const SECRET_PREFIX: &str = "whsec_";

pub const NAME_MAX_CHARS: usize = 100;
const URL_MAX_CHARS: usize = 2048;
const MAX_CUSTOM_HEADERS: usize = 20;
const HEADER_VALUE_MAX_CHARS: usize = 1000;
/// Read at most this much of a receiver's answer (it is never stored).
const RESPONSE_READ_CAP: usize = 4096;
/// Headers the service sets itself, or that would break the request.
const RESERVED_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
    "connection",
    STANDARD_ID_HEADER,
    STANDARD_TIMESTAMP_HEADER,
    STANDARD_SIGNATURE_HEADER,
];

pub use unigen_core::config::WebhookSettings;

/// A fresh signing secret in the Standard Webhooks form: `whsec_` and the
/// standard (padded) base64 of 32 random bytes.
pub fn generate_secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("the operating system's random source failed: {e}"))?;
    Ok(format!("{SECRET_PREFIX}{}", BASE64.encode(bytes)))
}

/// The key of `webhook-signature`: the base64 decoding of the secret's part
/// after `whsec_`, as Standard Webhooks libraries read it. Secrets issued
/// before Standard Webhooks (`whsec_` + 64 hex) decode too (hex digits are
/// base64 characters and 64 is a multiple of 4), to 48 bytes, so the
/// libraries verify them unchanged. Anything else (never issued) is used as
/// its raw bytes.
fn standard_key(secret: &str) -> Vec<u8> {
    secret
        .strip_prefix(SECRET_PREFIX)
        .and_then(|encoded| BASE64.decode(encoded).ok())
        .filter(|key| !key.is_empty())
        .unwrap_or_else(|| secret.as_bytes().to_vec())
}

/// `webhook-signature`: `v1,` and the base64 HMAC-SHA256 of
/// `{id}.{timestamp}.{body}` keyed with [`standard_key`].
pub fn sign_standard(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(&standard_key(secret)).expect("HMAC accepts any key length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

/// The wait a 429 or 503 answer asks for in `Retry-After`: delay seconds or
/// an HTTP date (IMF-fixdate, `Wed, 21 Oct 2026 07:28:00 GMT`) after `now`.
/// A date in the past asks for no wait; anything unreadable is ignored.
pub fn retry_after(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    Some(
        (at.with_timezone(&chrono::Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

/// Lowercase hex HMAC-SHA256 of `<timestamp>:<body>` keyed with `secret`.
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b":");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The request body: the envelope `{id, type, timestamp, data, orgId}`.
pub fn envelope(event: &Event) -> Vec<u8> {
    let envelope = json!({
        "id": event.id,
        "type": event.kind,
        "timestamp": event.created_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        "data": event.data,
        "orgId": event.org_id,
    });
    serde_json::to_vec(&envelope).expect("a JSON value serializes")
}

/// `name`: required, at most 100 characters.
pub fn validate_name(name: Option<&str>) -> Result<String, ValidationError> {
    unigen_core::validate::required_text("name", name, NAME_MAX_CHARS).map(|n| n.trim().to_owned())
}

/// `url`: absolute https (http only with `allow_private`), no credentials, and
/// no private, loopback or link-local address literal unless `allow_private`.
/// Host names are checked when delivering, as their addresses can change.
pub fn validate_url(raw: Option<&str>, allow_private: bool) -> Result<String, ValidationError> {
    let bad = |message: &str| ValidationError::new("url", message);
    let raw = raw.map(str::trim).filter(|r| !r.is_empty());
    let raw = raw.ok_or_else(|| bad("url is required"))?;
    if raw.chars().count() > URL_MAX_CHARS {
        return Err(bad("url must be at most 2048 characters"));
    }
    let url = url::Url::parse(raw).map_err(|_| bad("url must be an absolute https URL"))?;
    if url.host().is_none() {
        return Err(bad("url must name a host"));
    }
    let private = is_private_target(&url);
    match url.scheme() {
        "https" => {}
        // The switch relaxes private and loopback targets only: a public
        // receiver still needs https.
        "http" if allow_private && private => {}
        _ => return Err(bad("url must use https")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad(
            "url must not carry credentials; send them in custom headers",
        ));
    }
    if private && !allow_private {
        return Err(bad(
            "url points to a private or loopback address, which is not allowed",
        ));
    }
    Ok(url.to_string())
}

/// A private, loopback or link-local address literal, or `localhost`.
fn is_private_target(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => !is_public(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => !is_public(IpAddr::V6(ip)),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
        None => true,
    }
}

/// `events`: a non-empty list of the spec's kinds; duplicates collapse.
pub fn validate_events(events: Option<&[String]>) -> Result<Vec<String>, ValidationError> {
    let events = events.ok_or_else(|| ValidationError::new("events", "events is required"))?;
    if events.is_empty() {
        return Err(ValidationError::new(
            "events",
            "events must name at least one event kind",
        ));
    }
    let mut kinds: Vec<String> = Vec::with_capacity(events.len());
    for kind in events {
        if !EVENT_KINDS.contains(&kind.as_str()) {
            return Err(ValidationError::new(
                "events",
                format!(
                    "events: `{kind}` is not an event kind; kinds: {}",
                    EVENT_KINDS.join(", ")
                ),
            ));
        }
        if !kinds.contains(kind) {
            kinds.push(kind.clone());
        }
    }
    Ok(kinds)
}

/// `headers`: an object of string values, at most 20, with valid names that
/// are not reserved (`content-type`, `host`, ... and every `x-service-*`).
/// Names are stored lowercase.
pub fn validate_headers(headers: Option<&Value>) -> Result<Value, ValidationError> {
    let bad = |message: String| ValidationError::new("headers", message);
    let Some(headers) = headers.filter(|h| !h.is_null()) else {
        return Ok(Value::Object(Map::new()));
    };
    let object = headers
        .as_object()
        .ok_or_else(|| bad("headers must be an object of header names to string values".into()))?;
    if object.len() > MAX_CUSTOM_HEADERS {
        return Err(bad(format!(
            "headers: at most {MAX_CUSTOM_HEADERS} custom headers"
        )));
    }
    let mut clean = Map::new();
    for (name, value) in object {
        let lower = name.to_ascii_lowercase();
        if HeaderName::from_bytes(lower.as_bytes()).is_err() {
            return Err(bad(format!("headers: `{name}` is not a valid header name")));
        }
        if RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("x-service-") {
            return Err(bad(format!(
                "headers: `{name}` is reserved and set by the service"
            )));
        }
        let text = value
            .as_str()
            .ok_or_else(|| bad(format!("headers: `{name}` must be a string")))?;
        if text.chars().count() > HEADER_VALUE_MAX_CHARS || HeaderValue::from_str(text).is_err() {
            return Err(bad(format!(
                "headers: `{name}` must be visible ASCII of at most {HEADER_VALUE_MAX_CHARS} characters"
            )));
        }
        clean.insert(lower, Value::String(text.to_owned()));
    }
    Ok(Value::Object(clean))
}

pub use unigen_db::queries::webhooks::{AttemptOutcome, RESPONSE_BODY_KEPT};

/// What a receiver answered.
struct Answer {
    status: u16,
    /// Its `Retry-After` on a 429 or 503.
    retry_after: Option<Duration>,
    /// The first [`RESPONSE_BODY_KEPT`] bytes of its body (lossy UTF-8).
    body: String,
}

/// What an attempt sends: the webhook's target and secret, the event.
pub struct SignedRequest<'a> {
    pub url: &'a str,
    pub secret: &'a str,
    pub custom_headers: &'a Value,
    pub event: &'a Event,
}

/// Sends delivery attempts: no redirects followed, a timeout per attempt,
/// and no private targets unless allowed (checked for every attempt: DNS can
/// change after the webhook was registered).
#[derive(Clone)]
pub struct DeliveryClient {
    client: reqwest::Client,
    allow_private: bool,
    timeout: Duration,
}

impl DeliveryClient {
    pub fn new(settings: &WebhookSettings) -> Self {
        let allow_private = settings.allow_private_addresses;
        let timeout = settings.timeout();
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver::new(allow_private)))
            .user_agent(concat!("unigen-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("the webhook HTTP client configuration is valid");
        Self {
            client,
            allow_private,
            timeout,
        }
    }

    /// One attempt, signed with the current time. Never fails: every problem
    /// is an outcome to record, with the headers sent and the first
    /// [`RESPONSE_BODY_KEPT`] bytes of the answer.
    pub async fn attempt(&self, request: &SignedRequest<'_>) -> AttemptOutcome {
        let started = Instant::now();
        let mut sent = HeaderMap::new();
        let result = self.send(request, &mut sent).await;
        let duration = started.elapsed();
        let request_headers = Value::Object(
            sent.iter()
                .map(|(name, value)| {
                    let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
                    (name.as_str().to_owned(), Value::String(text))
                })
                .collect(),
        );
        match result {
            Ok(answer) => AttemptOutcome {
                status_code: Some(answer.status),
                error: None,
                duration,
                retry_after: answer.retry_after,
                request_headers,
                response_body: Some(answer.body),
            },
            Err(error) => AttemptOutcome {
                status_code: None,
                error: Some(error),
                duration,
                retry_after: None,
                request_headers,
                response_body: None,
            },
        }
    }

    /// The receiver's answer; `sent` receives the request's headers once
    /// they are built (left empty when the URL is refused first).
    async fn send(
        &self,
        request: &SignedRequest<'_>,
        sent: &mut HeaderMap,
    ) -> Result<Answer, String> {
        let url = reqwest::Url::parse(request.url).map_err(|_| "invalid URL".to_owned())?;
        // Address literals are refused here; names by the resolver, which
        // sees every address they resolve to.
        let literal_private = match url.host() {
            Some(url::Host::Ipv4(ip)) => !is_public(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => !is_public(IpAddr::V6(ip)),
            Some(url::Host::Domain(_)) => false,
            None => true,
        };
        if literal_private && !self.allow_private {
            return Err("the URL points to a private or loopback address".into());
        }
        // Checked again here: a webhook stored before the rule tightened.
        if url.scheme() != "https" && !is_private_target(&url) {
            return Err("a public webhook URL must use https".into());
        }
        let body = envelope(request.event);
        let timestamp = chrono::Utc::now().timestamp();
        let mut headers = HeaderMap::new();
        if let Some(custom) = request.custom_headers.as_object() {
            for (name, value) in custom {
                // Validated at registration; anything odd is skipped, not fatal.
                if let (Ok(name), Some(Ok(value))) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    value.as_str().map(HeaderValue::from_str),
                ) {
                    headers.insert(name, value);
                }
            }
        }
        // The event id, not the attempt's: receivers dedupe on it across
        // retries, redeliveries and replays.
        let event_id = request.event.id.to_string();
        let ours = [
            ("content-type", "application/json".to_owned()),
            (SIGNATURE_HEADER, sign(request.secret, timestamp, &body)),
            (TIMESTAMP_HEADER, timestamp.to_string()),
            (EVENT_ID_HEADER, event_id.clone()),
            (EVENT_TYPE_HEADER, request.event.kind.clone()),
            (
                STANDARD_SIGNATURE_HEADER,
                sign_standard(request.secret, &event_id, timestamp, &body),
            ),
            (STANDARD_TIMESTAMP_HEADER, timestamp.to_string()),
            (STANDARD_ID_HEADER, event_id),
        ];
        for (name, value) in ours {
            let value = HeaderValue::from_str(&value).map_err(|_| "unencodable header")?;
            headers.insert(HeaderName::from_static(name), value);
        }
        sent.clone_from(&headers);
        let mut response = self
            .client
            .post(url)
            .headers(headers)
            .body(body)
            .send()
            .await
            .map_err(|e| self.describe(&e))?;
        let status = response.status().as_u16();
        let retry_after = match status {
            429 | 503 => response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry_after(v, chrono::Utc::now())),
            _ => None,
        };
        // Drain a little of the answer so the connection can be reused (the
        // rest is dropped unread); its first bytes are kept for the record.
        let mut kept: Vec<u8> = Vec::new();
        let mut read = 0;
        while read < RESPONSE_READ_CAP {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    read += chunk.len();
                    let room = RESPONSE_BODY_KEPT.saturating_sub(kept.len());
                    kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                Ok(None) | Err(_) => break,
            }
        }
        Ok(Answer {
            status,
            retry_after,
            body: String::from_utf8_lossy(&kept).into_owned(),
        })
    }

    /// The transport result of an attempt, a bounded label:
    /// `success` (2xx), `http_error` (another status), `timeout`,
    /// `connect_error`, `blocked` (the URL was refused before sending: a
    /// private address, plain http to a public host, an invalid URL) or
    /// `other`. Read from what [`Self::attempt`] wrote.
    pub fn result_label(outcome: &AttemptOutcome) -> &'static str {
        match (outcome.status_code, outcome.error.as_deref()) {
            (Some(status), _) if (200..300).contains(&status) => "success",
            (Some(_), _) => "http_error",
            (None, Some(error)) if error.starts_with("timed out") => "timeout",
            (None, Some("connection failed")) => "connect_error",
            (
                None,
                Some(
                    "the host resolves to no public address"
                    | "the URL points to a private or loopback address"
                    | "a public webhook URL must use https"
                    | "invalid URL",
                ),
            ) => "blocked",
            _ => "other",
        }
    }

    fn describe(&self, err: &reqwest::Error) -> String {
        if err.is_timeout() {
            format!("timed out after {} ms", self.timeout.as_millis())
        } else if err.is_connect() {
            let text = format!("{err:?}");
            if text.contains("no public address") {
                "the host resolves to no public address".into()
            } else {
                "connection failed".into()
            }
        } else {
            "the request failed".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use uuid::Uuid;

    use super::*;

    #[test]
    fn signature_matches_a_known_hmac_sha256_vector() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // sign() prefixes the timestamp and a colon; checked against Python's
        // hmac.new(b"whsec_test", b"1700000000:{}", hashlib.sha256).hexdigest().
        assert_eq!(
            sign("whsec_test", 1_700_000_000, b"{}"),
            "4c66a6c4541145f408c4fb5ed22cb20e87804b51dc918b303d8326738e0b5d02"
        );
    }

    #[test]
    fn the_envelope_has_the_spec_fields_only() {
        let event = Event {
            id: Uuid::nil(),
            org_id: Uuid::max(),
            kind: "generation.started".into(),
            data: json!({"jobId": "j"}),
            created_at: Utc.with_ymd_and_hms(2026, 11, 22, 8, 0, 0).unwrap(),
        };
        let body: Value = serde_json::from_slice(&envelope(&event)).unwrap();
        assert_eq!(
            body,
            json!({
                "id": Uuid::nil(),
                "type": "generation.started",
                "timestamp": "2026-11-22T08:00:00.000Z",
                "data": {"jobId": "j"},
                "orgId": Uuid::max(),
            })
        );
    }

    #[test]
    fn the_default_schedule_is_the_spec_s_and_ends_after_five_attempts() {
        let settings = WebhookSettings::default();
        let delays: Vec<_> = (1..=5).map(|n| settings.retry_delay(n)).collect();
        assert_eq!(
            delays,
            [
                Some(Duration::from_secs(30)),
                Some(Duration::from_secs(120)),
                Some(Duration::from_secs(600)),
                Some(Duration::from_secs(3600)),
                None
            ]
        );
        assert_eq!(settings.max_attempts(), 5);
        assert_eq!(settings.retry_delay(0), None);
    }

    #[test]
    fn urls_must_be_https_and_public_unless_allowed() {
        assert_eq!(
            validate_url(Some("https://hooks.example.com/in"), false).unwrap(),
            "https://hooks.example.com/in"
        );
        for (raw, message) in [
            ("http://hooks.example.com/in", "https"),
            ("ftp://hooks.example.com/in", "https"),
            ("https://127.0.0.1/in", "private"),
            ("https://10.1.2.3/in", "private"),
            ("https://[::1]/in", "private"),
            ("https://localhost:8443/in", "private"),
            ("https://user:pw@hooks.example.com/in", "credentials"),
            ("not a url", "absolute"),
        ] {
            let err = validate_url(Some(raw), false).unwrap_err();
            assert_eq!(err.field, "url");
            assert!(err.message.contains(message), "{raw}: {}", err.message);
        }
        assert!(validate_url(Some("http://127.0.0.1:9/in"), true).is_ok());
        assert!(validate_url(Some("http://localhost:9/in"), true).is_ok());
        // The switch relaxes private targets only: public ones need https.
        for raw in ["http://hooks.example.com/in", "http://93.184.216.34/in"] {
            let err = validate_url(Some(raw), true).unwrap_err();
            assert!(err.message.contains("https"), "{raw}: {}", err.message);
        }
        assert!(validate_url(None, true).is_err());
    }

    #[test]
    fn events_must_be_known_kinds() {
        let ok = validate_events(Some(&[
            "generation.completed".to_owned(),
            "generation.completed".to_owned(),
            "credits.low".to_owned(),
        ]))
        .unwrap();
        assert_eq!(ok, ["generation.completed", "credits.low"]);
        let err = validate_events(Some(&["generation.done".to_owned()])).unwrap_err();
        assert_eq!(err.field, "events");
        assert!(err.message.contains("generation.done"));
        assert!(validate_events(Some(&[])).is_err());
        assert!(validate_events(Some(&[TEST_EVENT.to_owned()])).is_err());
    }

    #[test]
    fn reserved_and_malformed_headers_are_refused() {
        let ok = validate_headers(Some(&json!({"Authorization": "Bearer x"}))).unwrap();
        assert_eq!(ok, json!({"authorization": "Bearer x"}));
        for headers in [
            json!({"X-Service-Signature": "forged"}),
            json!({"Webhook-Signature": "v1,forged"}),
            json!({"webhook-id": "other"}),
            json!({"content-type": "text/plain"}),
            json!({"bad name": "x"}),
            json!({"x-n": 5}),
            json!({"x-n": "line\nbreak"}),
            json!(["not", "an", "object"]),
        ] {
            let err = validate_headers(Some(&headers)).unwrap_err();
            assert_eq!(err.field, "headers", "{headers}");
        }
        assert_eq!(validate_headers(None).unwrap(), json!({}));
    }

    #[test]
    fn secrets_are_whsec_and_the_base64_of_32_random_bytes() {
        let (a, b) = (generate_secret().unwrap(), generate_secret().unwrap());
        assert_ne!(a, b);
        let key = BASE64.decode(a.strip_prefix("whsec_").unwrap()).unwrap();
        assert_eq!(key.len(), 32);
        assert_eq!(standard_key(&a), key);
    }

    #[test]
    fn standard_signature_matches_the_spec_s_example() {
        // The example of the Standard Webhooks specification and of its
        // reference libraries' tests.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            sign_standard(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn old_hex_secrets_sign_with_their_base64_decoding() {
        let old = format!("whsec_{}", "ab".repeat(32));
        let key = standard_key(&old);
        assert_eq!(key.len(), 48);
        assert_eq!(key, BASE64.decode("ab".repeat(32)).unwrap());
        // Never issued, but not fatal: the raw bytes.
        assert_eq!(standard_key("not-whsec"), b"not-whsec");
        assert_eq!(standard_key("whsec_!!"), b"whsec_!!");
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = Utc.with_ymd_and_hms(2026, 10, 21, 7, 28, 0).unwrap();
        assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(
            retry_after("Wed, 21 Oct 2026 07:30:30 GMT", now),
            Some(Duration::from_secs(150))
        );
        assert_eq!(
            retry_after("Wed, 21 Oct 2026 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-5", now), None);
    }
}
