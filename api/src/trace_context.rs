//! Traces of the API (issue 37): the SERVER span of every request, parented
//! on the client's W3C `traceparent` / `tracestate` when it sent them, and a
//! `traceparent` header naming it on every response. Wrapped only when
//! tracing is on.

use actix_web::HttpMessage;
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use tracing::{Instrument, Span};
use unigen_core::telemetry::{propagation, semconv, spans};
use uuid::Uuid;

/// The request's SERVER span, for the extractors that learn who calls.
#[derive(Clone)]
struct ServerSpan(Span);

pub async fn server_span(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let parent =
        propagation::context_from(header(semconv::TRACEPARENT), header(semconv::TRACESTATE));
    let method = req.method().as_str().to_owned();
    let span = spans::http_server(&method, req.path(), parent);
    req.extensions_mut().insert(ServerSpan(span.clone()));
    // (The request is never cloned before routing: the router needs it alone.)
    let mut response = match next.call(req).instrument(span.clone()).await {
        Ok(response) => response.map_into_boxed_body(),
        Err(err) => {
            // A middleware's error, rendered by the server after us: it is
            // recorded, but carries no traceparent (handlers' errors do).
            let status = err.as_response_error().status_code().as_u16();
            spans::http_server_done(&span, &method, None, status);
            return Err(err);
        }
    };
    let route = response.request().match_pattern();
    spans::http_server_done(&span, &method, route.as_deref(), response.status().as_u16());
    if let Some(id) = response
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
    {
        span.record("unigen.request.id", id);
    }
    if let Some(value) = propagation::traceparent_of(&span)
        .and_then(|traceparent| HeaderValue::from_str(&traceparent).ok())
    {
        response
            .headers_mut()
            .insert(HeaderName::from_static(semconv::TRACEPARENT), value);
    }
    Ok(response)
}

/// Records the caller's organization and key ids (never the key) on the
/// request's SERVER span.
pub fn record_caller(request: &actix_web::HttpRequest, org_id: Uuid, key_id: Uuid) {
    if let Some(ServerSpan(span)) = request.extensions().get::<ServerSpan>() {
        span.record("unigen.org.id", org_id.to_string());
        span.record("unigen.api_key.id", key_id.to_string());
    }
}
