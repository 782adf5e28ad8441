//! Headers OpenAI's clients read on every response: `x-request-id` (the
//! client's own when it sent a usable one; every log line of the request
//! carries it), `openai-processing-ms`, and the key's request rate as
//! `x-ratelimit-{limit,remaining,reset}-requests`.

use std::time::{Duration, Instant};

use actix_web::HttpMessage;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use tracing::Instrument;

use crate::rate_limit::RateStatus;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Longest client request id kept (a longer one is replaced).
const MAX_REQUEST_ID: usize = 200;

pub async fn response_headers(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let request_id = req
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|id| usable_request_id(id))
        .map_or_else(
            || format!("req_{}", uuid::Uuid::now_v7().simple()),
            str::to_owned,
        );
    let span = tracing::info_span!("request", request_id = %request_id);
    let mut response = next.call(req).instrument(span).await?;
    let rate = response.request().extensions().get::<RateStatus>().copied();
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    };
    set("x-request-id", request_id);
    set(
        "openai-processing-ms",
        started.elapsed().as_millis().to_string(),
    );
    if let Some(rate) = rate {
        set("x-ratelimit-limit-requests", rate.limit.to_string());
        set("x-ratelimit-remaining-requests", rate.remaining.to_string());
        set("x-ratelimit-reset-requests", duration_text(rate.reset));
    }
    Ok(response)
}

/// Printable ASCII without spaces, not too long: safe to log and echo.
fn usable_request_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_REQUEST_ID && id.bytes().all(|b| b.is_ascii_graphic())
}

/// OpenAI's duration text: `1s`, `6m0s`, `250ms`.
fn duration_text(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let seconds = duration.as_secs_f64();
    let minutes = (seconds / 60.0).floor() as u64;
    let rest = seconds - (minutes * 60) as f64;
    let rest = format!("{rest:.3}");
    let rest = rest.trim_end_matches('0').trim_end_matches('.');
    if minutes == 0 {
        format!("{rest}s")
    } else {
        format!("{minutes}m{rest}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_openai_writes_them() {
        assert_eq!(duration_text(Duration::from_millis(250)), "250ms");
        assert_eq!(duration_text(Duration::from_millis(1500)), "1.5s");
        assert_eq!(duration_text(Duration::from_secs(360)), "6m0s");
        assert_eq!(duration_text(Duration::from_millis(61_020)), "1m1.02s");
        assert_eq!(duration_text(Duration::ZERO), "0ms");
    }

    #[test]
    fn only_printable_short_request_ids_are_kept() {
        assert!(usable_request_id("req_abc-123"));
        assert!(!usable_request_id("has space"));
        assert!(!usable_request_id(""));
        assert!(!usable_request_id(&"x".repeat(201)));
        assert!(!usable_request_id("caf\u{e9}"));
    }
}
