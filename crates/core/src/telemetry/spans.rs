//! The trace spans: each built here, with its kind, name and attributes
//! after [`super::semconv`]. They are `tracing` spans of target [`TARGET`]:
//! only the OpenTelemetry layer takes them, so with tracing off they are
//! disabled at the call site (their fields are never even evaluated).
//!
//! The tree of a job: the API's SERVER span; under it the PRODUCER span of
//! the publish; the worker's CONSUMER span, parented on (and linked to) the
//! context the message carries; under it one GenAI CLIENT span per provider
//! attempt and a span per stored output. Webhook attempts and recovery
//! republishes start traces of their own, linked to the job's.

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, Status, TraceContextExt};
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::semconv::{MESSAGING_RABBITMQ, error_type, operation};

/// The target of every trace span.
pub const TARGET: &str = "unigen::otel";

/// An HTTP request the API serves (SERVER); named `{method}` until its
/// route is known ([`http_server_done`]).
pub fn http_server(method: &str, path: &str, parent: Context) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "http request",
        otel.name = method,
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = method,
        url.path = path,
        http.route = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
        unigen.request.id = Empty,
        unigen.org.id = Empty,
        unigen.api_key.id = Empty,
    );
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
    span
}

/// Names the SERVER span `{method} {route}` and records the outcome: a 5xx
/// is an error (a 4xx is the client's, per the HTTP conventions).
pub fn http_server_done(span: &Span, method: &str, route: Option<&str>, status: u16) {
    if span.is_disabled() {
        return;
    }
    if let Some(route) = route {
        span.record("http.route", route);
        span.context()
            .span()
            .update_name(format!("{method} {route}"));
    }
    span.record("http.response.status_code", i64::from(status));
    if status >= 500 {
        span.record("error.type", status.to_string());
        span.set_status(Status::error(""));
    }
}

/// Publishing a message (PRODUCER): `publish {exchange}:{routing key}`.
/// A child of the current span; `link` (a job's earlier context, when this
/// is a recovery republish) is added as a link.
pub fn publish(
    exchange: &str,
    routing_key: &str,
    message_id: &str,
    link: Option<SpanContext>,
) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "publish",
        otel.name = format!("publish {exchange}:{routing_key}"),
        otel.kind = "producer",
        otel.status_code = Empty,
        messaging.system = MESSAGING_RABBITMQ,
        messaging.operation.type = "send",
        messaging.operation.name = "publish",
        messaging.destination.name = exchange,
        messaging.rabbitmq.destination.routing_key = routing_key,
        messaging.message.id = message_id,
        error.type = Empty,
    );
    if let Some(link) = link {
        span.add_link(link);
    }
    span
}

/// Processing a delivered message (CONSUMER): `process {queue}`, parented
/// on the context the message carries and linked to it.
pub fn process(
    queue: &str,
    exchange: &str,
    routing_key: &str,
    message_id: &str,
    creation: Context,
) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "process",
        otel.name = format!("process {queue}"),
        otel.kind = "consumer",
        otel.status_code = Empty,
        messaging.system = MESSAGING_RABBITMQ,
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.destination.name = exchange,
        messaging.destination.subscription.name = queue,
        messaging.rabbitmq.destination.routing_key = routing_key,
        messaging.message.id = message_id,
        unigen.job.id = Empty,
        unigen.job.attempt = Empty,
        error.type = Empty,
    );
    let link = creation.span().span_context().clone();
    if link.is_valid() {
        let _ = span.set_parent(creation);
        span.add_link(link);
    }
    span
}

/// What a GenAI CLIENT span is about.
pub struct GenAiCall<'a> {
    /// [`super::semconv::operation`].
    pub operation: &'a str,
    /// [`super::semconv::provider`].
    pub provider: &'a str,
    pub request_model: &'a str,
    /// [`super::semconv::output_type`]; empty for none (embeddings).
    pub output_type: &'a str,
    /// The upstream's host; `None` for the in-process provider.
    pub server_address: Option<&'a str>,
    pub stream: bool,
}

/// One provider call attempt (CLIENT): `{operation} {model}`. Content
/// (`gen_ai.input.messages`, `gen_ai.output.messages`) only through
/// [`gen_ai_content`], which records nothing without the opt-in.
pub fn gen_ai(call: &GenAiCall<'_>) -> Span {
    tracing::info_span!(
        target: TARGET,
        "gen_ai",
        otel.name = format!("{} {}", call.operation, call.request_model),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = call.operation,
        gen_ai.provider.name = call.provider,
        gen_ai.request.model = call.request_model,
        gen_ai.request.stream = call.stream,
        gen_ai.output.type = (!call.output_type.is_empty()).then_some(call.output_type),
        gen_ai.response.model = Empty,
        gen_ai.response.id = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        server.address = call.server_address,
        unigen.gen_ai.time_to_first_chunk = Empty,
        error.type = Empty,
    )
}

/// The first chunk of a streamed call, `elapsed` after its span started
/// ([`super::semconv::attribute::TIME_TO_FIRST_CHUNK`], in seconds, and a
/// `gen_ai.first_chunk` event).
pub fn gen_ai_first_chunk(span: &Span, elapsed: std::time::Duration) {
    if span.is_disabled() {
        return;
    }
    let seconds = elapsed.as_secs_f64();
    span.record(super::semconv::attribute::TIME_TO_FIRST_CHUNK, seconds);
    tracing::info!(target: TARGET, parent: span, time_to_first_chunk = seconds, "gen_ai.first_chunk");
}

/// An agent run (INTERNAL: the agent runs in-process): `invoke_agent {name}`,
/// the parent of its model calls and of an `execute_tool` span per tool call.
pub fn invoke_agent(name: &str, agent_id: &str, run_id: &str, provider: &str, model: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        otel.name = format!("{} {name}", operation::INVOKE_AGENT),
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = operation::INVOKE_AGENT,
        gen_ai.provider.name = provider,
        gen_ai.agent.name = name,
        gen_ai.agent.id = agent_id,
        gen_ai.request.model = model,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        unigen.agent_run.id = run_id,
        error.type = Empty,
    )
}

/// One tool call of an agent run (INTERNAL): `execute_tool {tool}`. Its
/// arguments and result only through [`execute_tool_content`].
pub fn execute_tool(tool: &str, call_id: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "execute_tool",
        otel.name = format!("{} {tool}", operation::EXECUTE_TOOL),
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = operation::EXECUTE_TOOL,
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call_id,
        gen_ai.tool.type = super::semconv::tool_type::FUNCTION,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        error.type = Empty,
    )
}

/// Records a tool call's arguments and result, only with
/// `telemetry.record_content`.
pub fn execute_tool_content(span: &Span, arguments: Option<&str>, result: Option<&str>) {
    if span.is_disabled() || !super::record_content() {
        return;
    }
    if let Some(arguments) = arguments {
        span.record("gen_ai.tool.call.arguments", arguments);
    }
    if let Some(result) = result {
        span.record("gen_ai.tool.call.result", result);
    }
}

/// Records the response of a GenAI call.
pub fn gen_ai_response(
    span: &Span,
    response_model: Option<&str>,
    response_id: Option<&str>,
    input_tokens: Option<i64>,
    output_tokens: Option<i64>,
) {
    if span.is_disabled() {
        return;
    }
    if let Some(model) = response_model {
        span.record("gen_ai.response.model", model);
    }
    if let Some(id) = response_id {
        span.record("gen_ai.response.id", id);
    }
    if let Some(tokens) = input_tokens {
        span.record("gen_ai.usage.input_tokens", tokens);
    }
    if let Some(tokens) = output_tokens {
        span.record("gen_ai.usage.output_tokens", tokens);
    }
}

/// Records prompt and completion content, only with `telemetry.record_content`.
pub fn gen_ai_content(span: &Span, input: Option<&str>, output: Option<&str>) {
    if span.is_disabled() || !super::record_content() {
        return;
    }
    if let Some(input) = input {
        span.record("gen_ai.input.messages", input);
    }
    if let Some(output) = output {
        span.record("gen_ai.output.messages", output);
    }
}

/// Storing an output file (INTERNAL).
pub fn store_output(name: &str, bytes: usize) -> Span {
    tracing::info_span!(
        target: TARGET,
        "store output",
        otel.status_code = Empty,
        unigen.file.name = name,
        unigen.file.bytes = bytes as i64,
        error.type = Empty,
    )
}

/// One webhook attempt (CLIENT): `POST`, a trace of its own linked to the
/// job's (`link`).
pub fn webhook_attempt(
    server_address: &str,
    webhook_id: &str,
    event_id: &str,
    attempt: i64,
    link: Option<SpanContext>,
) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "webhook attempt",
        otel.name = "POST",
        otel.kind = "client",
        otel.status_code = Empty,
        http.request.method = "POST",
        http.response.status_code = Empty,
        server.address = server_address,
        unigen.webhook.id = webhook_id,
        unigen.event.id = event_id,
        unigen.delivery.attempt = attempt,
        error.type = Empty,
    );
    if let Some(link) = link {
        span.add_link(link);
    }
    span
}

/// Marks `span` failed with this `error.type` (see [`error_type`]).
pub fn fail(span: &Span, kind: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("error.type", kind);
    span.set_status(Status::error(kind.to_owned()));
}

/// `error.type` of a provider failure.
pub fn provider_error_type(err: &crate::ProviderError) -> &'static str {
    match err {
        crate::ProviderError::Transient(_) => error_type::TRANSIENT,
        crate::ProviderError::Permanent(_) => error_type::PERMANENT,
    }
}
