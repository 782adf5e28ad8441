//! `log.format = "json"`: one JSON object per line, with the event's fields,
//! the fields of the log spans it is in, flattened (`request_id` from the
//! API's request span, `job_id` from the worker's job span, ...), and the
//! OpenTelemetry `trace_id` / `span_id` of the trace span it happened in
//! (only with tracing on: there is no trace otherwise).
//!
//! What a line carries is what the code logs: keys, secrets, signed URLs'
//! signatures and prompts are never logged (tests/tests/e2e/json_logs.rs).

use std::fmt;

use opentelemetry::trace::TraceContextExt;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The event format of JSON lines (with [`JsonFields`] as the field format).
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            Value::String(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        );
        line.insert(
            "level".into(),
            Value::String(event.metadata().level().to_string()),
        );
        // The spans' fields, outermost first, so an inner span's wins.
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<N>>() else {
                    continue;
                };
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(fields) {
                    line.extend(fields);
                }
            }
        }
        let otel = opentelemetry::Context::current();
        let span = otel.span();
        let context = span.span_context();
        if context.is_valid() {
            line.insert(
                "trace_id".into(),
                Value::String(context.trace_id().to_string()),
            );
            line.insert(
                "span_id".into(),
                Value::String(context.span_id().to_string()),
            );
        }
        let mut visitor = Fields(&mut line);
        event.record(&mut visitor);
        let text = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// The field format of the spans in JSON lines.
pub fn span_fields() -> JsonFields {
    JsonFields::new()
}

struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().into(), Value::String(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), Value::String(format!("{value:?}")));
    }
}
