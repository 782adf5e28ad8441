//! W3C trace context (`traceparent`, `tracestate`) in and out of carriers:
//! HTTP headers, AMQP message headers, and the job row's `trace_context`.

use std::collections::HashMap;

use opentelemetry::Context;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::semconv::{TRACEPARENT, TRACESTATE};

/// The W3C headers naming `span` (`traceparent`, and `tracestate` when it
/// has one); none when the span is not traced (tracing off).
pub fn headers_of(span: &tracing::Span) -> Vec<(&'static str, String)> {
    if span.is_disabled() {
        return Vec::new();
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return Vec::new();
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    [TRACEPARENT, TRACESTATE]
        .into_iter()
        .filter_map(|name| {
            carrier
                .remove(name)
                .filter(|v| !v.is_empty())
                .map(|v| (name, v))
        })
        .collect()
}

/// The `traceparent` naming `span`, if it is traced.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    headers_of(span)
        .into_iter()
        .find(|(name, _)| *name == TRACEPARENT)
        .map(|(_, value)| value)
}

/// The remote context these headers name (an empty context when they name
/// none, or are malformed).
pub fn context_from(traceparent: Option<&str>, tracestate: Option<&str>) -> Context {
    let Some(traceparent) = traceparent else {
        return Context::new();
    };
    let mut carrier = HashMap::with_capacity(2);
    carrier.insert(TRACEPARENT.to_owned(), traceparent.to_owned());
    if let Some(state) = tracestate {
        carrier.insert(TRACESTATE.to_owned(), state.to_owned());
    }
    TraceContextPropagator::new().extract(&carrier)
}

/// The span a stored `traceparent` names, to link to; `None` when absent
/// or malformed.
pub fn span_context_from(traceparent: Option<&str>) -> Option<SpanContext> {
    let cx = context_from(traceparent, None);
    let span_context = cx.span().span_context().clone();
    span_context.is_valid().then_some(span_context)
}

/// The trace id (32 hex digits) of a valid `traceparent`.
pub fn trace_id(traceparent: &str) -> Option<String> {
    span_context_from(Some(traceparent)).map(|sc| sc.trace_id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_reads_back_its_trace_id_and_junk_reads_as_none() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            trace_id(tp).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert!(span_context_from(Some(tp)).unwrap().is_remote());
        assert_eq!(trace_id("00-zz-yy-01"), None);
        assert_eq!(
            trace_id("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            None
        );
        assert!(span_context_from(None).is_none());
    }

    #[test]
    fn an_untraced_span_has_no_headers() {
        assert!(headers_of(&tracing::Span::none()).is_empty());
    }
}
