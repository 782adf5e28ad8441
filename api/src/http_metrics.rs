//! `http_server_request_duration_seconds` (the OpenTelemetry HTTP server
//! metric, with its buckets) and `unigen_gateway_overhead_seconds` for
//! every request (issue 37). Labels are the route template, never the raw
//! path (`other` when no route matched), the method (`_OTHER` for one the
//! HTTP conventions do not list) and the status code.
//!
//! The overhead is the request's time minus the time it waited on
//! providers ([`unigen_core::telemetry::metrics::measure`]): observed for
//! requests that called a provider (chat, embeddings, Messages, Responses)
//! or waited for a job (a sync job: minus the wait for the worker, so it is
//! what the API itself spent submitting, waking and answering). Streamed
//! answers (`text/event-stream`) are left out: their provider time runs
//! on after the handler returns.

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web;
use unigen_core::telemetry::metrics;

use crate::metrics::UNMATCHED;
use crate::state::AppState;

pub async fn record(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let method = method_label(req.method());
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let (response, upstream) = metrics::measure(next.call(req)).await;
    let elapsed = started.elapsed();
    let (route, status, streamed) = match &response {
        Ok(response) => (
            response.request().match_pattern(),
            response.status().as_u16(),
            response
                .headers()
                .get(actix_web::http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream")),
        ),
        Err(err) => (None, err.as_response_error().status_code().as_u16(), false),
    };
    let route = route.as_deref().unwrap_or(UNMATCHED);
    if let Some(state) = state {
        state.metrics.http_request(method, route, status, elapsed);
    }
    if let Some(upstream) = upstream
        && !streamed
    {
        metrics::gateway_overhead(route, elapsed, upstream);
    }
    response
}

/// `http.request.method`: the known methods, else `_OTHER`.
fn method_label(method: &actix_web::http::Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        "CONNECT" => "CONNECT",
        "TRACE" => "TRACE",
        _ => "_OTHER",
    }
}
