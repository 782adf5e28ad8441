//! The worker's trace spans (issue 37): a CONSUMER span per delivery,
//! parented on the message's context, and a GenAI CLIENT span per provider
//! attempt under it. Disabled, at no cost, with tracing off.

use lapin::message::Delivery;
use tracing::{Instrument, Span};
use unigen_core::ProviderError;
use unigen_core::config::ModelEntry;
use unigen_core::telemetry::metrics::{GenAiLabels, Timed};
use unigen_core::telemetry::{self, semconv, spans};

use crate::WorkerContext;

/// `process {queue}` for a delivery of `queue`'s (a tool's, or `knowledge`).
pub(crate) fn process_span(context: &WorkerContext, queue: &str, delivery: &Delivery) -> Span {
    if !telemetry::enabled() {
        return Span::none();
    }
    let message_id = delivery
        .properties
        .message_id()
        .as_ref()
        .map(|id| id.as_str().to_owned())
        .unwrap_or_default();
    spans::process(
        &context.topology.queue(queue),
        &context.topology.exchange(),
        queue,
        &message_id,
        unigen_jobs::queue::message_context(&delivery.properties),
    )
}

/// A `generate_content` CLIENT span for a media model's call.
pub(crate) fn media_call(model: &ModelEntry, output_type: &str) -> Span {
    if !telemetry::enabled() {
        return Span::none();
    }
    spans::gen_ai(&spans::GenAiCall {
        operation: semconv::operation::GENERATE_CONTENT,
        provider: semconv::provider::for_adapter(&model.adapter),
        request_model: model.upstream_model.as_deref().unwrap_or(&model.id),
        output_type,
        server_address: None,
        stream: false,
    })
}

/// The prompt of a media call, as `gen_ai.input.messages` (only with the
/// content opt-in).
pub(crate) fn record_prompt(span: &Span, prompt: &str) {
    if span.is_disabled() || !telemetry::record_content() {
        return;
    }
    let messages = serde_json::json!([
        {"role": "user", "parts": [{"type": "text", "content": prompt}]}
    ]);
    spans::gen_ai_content(span, Some(&messages.to_string()), None);
}

/// Runs one provider attempt of `model` in `span`, recording its outcome:
/// the response model on success (the in-process provider answers as the
/// requested model), `error.type` on failure; and its duration in
/// `gen_ai_client_operation_duration_seconds` (with tracing on or off).
pub(crate) async fn call<T>(
    span: Span,
    model: &ModelEntry,
    response_model: Option<&str>,
    attempt: impl Future<Output = Result<T, ProviderError>>,
) -> Result<T, ProviderError> {
    let timed = Timed::start(GenAiLabels::new(
        semconv::operation::GENERATE_CONTENT,
        &model.adapter,
        &model.id,
    ));
    let result = attempt.instrument(span.clone()).await;
    match &result {
        Ok(_) => {
            timed.finish("");
            spans::gen_ai_response(&span, response_model, None, None, None);
        }
        Err(err) => {
            timed.finish(spans::provider_error_type(err));
            spans::fail(&span, spans::provider_error_type(err));
        }
    }
    result
}
