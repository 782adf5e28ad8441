//! The scheduler's trace spans (issue 37): each webhook attempt is a CLIENT
//! span of a trace of its own, linked to the trace of the job its event is
//! about. Recovery republishes are PRODUCER spans (`tasks::relay`).

use tracing::Span;
use unigen_core::telemetry::{self, propagation, spans};
use unigen_db::PgPool;
use unigen_db::queries;
use unigen_db::queries::webhooks::ClaimedDelivery;
use uuid::Uuid;

/// The attempt's span, linked to the job's trace when the event names a
/// job that has one (one indexed read, only with tracing on).
pub(crate) async fn webhook_span(pool: &PgPool, delivery: &ClaimedDelivery) -> Span {
    if !telemetry::enabled() {
        return Span::none();
    }
    let job_id = delivery
        .data
        .get("jobId")
        .and_then(|v| v.as_str())
        .and_then(|v| v.parse::<Uuid>().ok());
    let mut link = None;
    if let Some(job_id) = job_id
        && let Ok(mut conn) = pool.get().await
        && let Ok(Some(traceparent)) = queries::jobs::trace_context(&mut conn, job_id).await
    {
        link = propagation::span_context_from(Some(&traceparent));
    }
    spans::webhook_attempt(
        host_of(&delivery.url),
        &delivery.webhook_id.to_string(),
        &delivery.event_id.to_string(),
        i64::from(delivery.attempt),
        link,
    )
}

/// Records the receiver's answer: anything but a 2xx is an error.
pub(crate) fn webhook_done(span: &Span, status_code: Option<u16>, failed: bool) {
    if span.is_disabled() {
        return;
    }
    if let Some(status) = status_code {
        span.record("http.response.status_code", i64::from(status));
    }
    match status_code {
        Some(status) if (200..300).contains(&status) && !failed => {}
        Some(status) => spans::fail(span, &status.to_string()),
        None => spans::fail(span, telemetry::semconv::error_type::OTHER),
    }
}

/// The host of a webhook URL (`server.address`): no path, query or userinfo.
fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if host.starts_with('[') {
        return host.split_once(']').map_or(host, |(v6, _)| &v6[1..]);
    }
    host.split(':').next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn webhook_hosts_lose_everything_but_the_host() {
        use super::host_of;
        assert_eq!(
            host_of("https://hooks.example.com/a?b=c"),
            "hooks.example.com"
        );
        assert_eq!(host_of("http://user:pw@127.0.0.1:8080/x"), "127.0.0.1");
        assert_eq!(host_of("http://[::1]:9/x"), "::1");
    }
}
