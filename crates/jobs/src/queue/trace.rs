//! The trace context a message carries in its AMQP headers (`traceparent`,
//! `tracestate`), written by [`super::Publisher`].

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};
use unigen_core::telemetry::{Context, propagation, semconv};

/// The context of the span that published the message (empty when it
/// carries none).
pub fn message_context(properties: &BasicProperties) -> Context {
    let Some(headers) = properties.headers() else {
        return Context::new();
    };
    propagation::context_from(
        header(headers, semconv::TRACEPARENT),
        header(headers, semconv::TRACESTATE),
    )
}

fn header<'a>(headers: &'a FieldTable, name: &str) -> Option<&'a str> {
    headers
        .inner()
        .iter()
        .find(|(key, _)| key.as_str() == name)
        .and_then(|(_, value)| match value {
            AMQPValue::LongString(value) => std::str::from_utf8(value.as_bytes()).ok(),
            AMQPValue::ShortString(value) => Some(value.as_str()),
            _ => None,
        })
}
