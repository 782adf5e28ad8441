//! The one fallback loop: a model's `upstream`, then each of its
//! `fallback_upstreams` in order ([`crate::Providers::in_order`]); any
//! failure moves on to the next.
//!
//! [`in_order_traced`] puts each attempt in a GenAI CLIENT span of its own
//! (issue 37), so fallbacks are visible (an upstream's own retries are
//! events of its span). With tracing off no span is built.

use std::time::Instant;

use futures_util::Stream;
use tracing::{Instrument, Span};
use unigen_core::ProviderError;
use unigen_core::config::ModelEntry;
use unigen_core::telemetry::{self, semconv, spans};

use crate::registry::{ChunkStream, Providers};

/// The first answer of `call` on `clients` (the model's upstreams, in
/// order). `Err(None)` when there is none; otherwise the last failure.
pub async fn in_order<C, T, F, Fut>(
    model: &ModelEntry,
    clients: Vec<(String, C)>,
    call: F,
) -> Result<T, Option<ProviderError>>
where
    F: Fn(C) -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    attempts(model, clients, None, call, |_, value| value).await
}

/// What the GenAI CLIENT span of each attempt says.
pub struct Traced<'a> {
    /// [`semconv::operation`].
    pub operation: &'static str,
    /// [`semconv::output_type`]; empty for none.
    pub output_type: &'static str,
    pub stream: bool,
    /// For `server.address`.
    pub providers: &'a Providers,
}

/// One attempt's span and when it started.
pub struct Attempt {
    pub span: Span,
    pub started: Instant,
}

/// [`in_order`] with each attempt in a GenAI CLIENT span: a failure is
/// recorded on it; `done` records an answer on it (and, for a stream, keeps
/// it: see [`traced_stream`]). The span ends when `done` lets it go.
pub async fn in_order_traced<C, T, F, Fut>(
    model: &ModelEntry,
    clients: Vec<(String, C)>,
    traced: &Traced<'_>,
    call: F,
    done: impl Fn(Attempt, T) -> T,
) -> Result<T, Option<ProviderError>>
where
    F: Fn(C) -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    attempts(model, clients, Some(traced), call, done).await
}

async fn attempts<C, T, F, Fut>(
    model: &ModelEntry,
    clients: Vec<(String, C)>,
    traced: Option<&Traced<'_>>,
    call: F,
    done: impl Fn(Attempt, T) -> T,
) -> Result<T, Option<ProviderError>>
where
    F: Fn(C) -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    let mut last = None;
    for (name, client) in clients {
        let span = match traced {
            Some(traced) if telemetry::enabled() => attempt_span(model, &name, traced),
            _ => Span::none(),
        };
        let started = Instant::now();
        match call(client).instrument(span.clone()).await {
            Ok(value) => return Ok(done(Attempt { span, started }, value)),
            Err(err) => {
                spans::fail(&span, spans::provider_error_type(&err));
                tracing::warn!(model = %model.id, upstream = %name, error = %err, "upstream failed; trying the next");
                last = Some(err);
            }
        }
    }
    Err(last)
}

fn attempt_span(model: &ModelEntry, upstream: &str, traced: &Traced<'_>) -> Span {
    let address = traced.providers.server_address(upstream);
    gen_ai_span(
        model,
        traced.operation,
        traced.output_type,
        traced.stream,
        address.as_deref(),
    )
}

/// A GenAI CLIENT span for a call on `model` (`None` when tracing is off).
pub fn gen_ai_span(
    model: &ModelEntry,
    operation: &str,
    output_type: &str,
    stream: bool,
    server_address: Option<&str>,
) -> Span {
    if !telemetry::enabled() {
        return Span::none();
    }
    spans::gen_ai(&spans::GenAiCall {
        operation,
        provider: semconv::provider::for_adapter(&model.adapter),
        request_model: model.upstream_model.as_deref().unwrap_or(&model.id),
        output_type,
        server_address,
        stream,
    })
}

/// Records a `chat.completion`'s id, model and usage on its span.
pub fn record_completion(span: &Span, answer: &serde_json::Value) {
    if span.is_disabled() {
        return;
    }
    let tokens = |key: &str| answer["usage"][key].as_i64();
    spans::gen_ai_response(
        span,
        answer["model"].as_str(),
        answer["id"].as_str(),
        tokens("prompt_tokens"),
        tokens("completion_tokens"),
    );
}

/// A chunk stream that keeps its attempt's span until it ends or is
/// dropped, recording the time to the first chunk, the response's id and
/// model, the usage chunk, and a failure mid-stream.
pub fn traced_stream(attempt: Attempt, stream: ChunkStream) -> ChunkStream {
    if attempt.span.is_disabled() {
        return stream;
    }
    Box::pin(TracedStream {
        inner: stream,
        attempt,
        first: true,
    })
}

struct TracedStream {
    inner: ChunkStream,
    attempt: Attempt,
    first: bool,
}

impl Stream for TracedStream {
    type Item = Result<serde_json::Value, ProviderError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let this = &mut *self;
        let polled = {
            let _entered = this.attempt.span.enter();
            this.inner.as_mut().poll_next(cx)
        };
        let span = &this.attempt.span;
        match &polled {
            std::task::Poll::Ready(Some(Ok(chunk))) => {
                if this.first {
                    this.first = false;
                    spans::gen_ai_first_chunk(span, this.attempt.started.elapsed());
                    spans::gen_ai_response(
                        span,
                        chunk["model"].as_str(),
                        chunk["id"].as_str(),
                        None,
                        None,
                    );
                }
                if chunk["usage"].is_object() {
                    record_completion(span, chunk);
                }
            }
            std::task::Poll::Ready(Some(Err(err))) => {
                spans::fail(span, spans::provider_error_type(err));
            }
            _ => {}
        }
        polled
    }
}
