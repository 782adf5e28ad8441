//! The one fallback loop: a model's `upstream`, then each of its
//! `fallback_upstreams` in order ([`crate::Providers::in_order`]); any
//! failure moves on to the next.
//!
//! [`in_order_traced`] puts each attempt in a GenAI CLIENT span of its own
//! (issue 37), so fallbacks are visible (an upstream's own retries are
//! events of its span). With tracing off no span is built.
//!
//! Each traced attempt is also measured (`gen_ai_client_*` series of
//! [`unigen_core::telemetry::metrics`]), with tracing on or off: its
//! duration (a stream's until it ends), its tokens and a stream's time to
//! first chunk.

use std::time::Instant;

use futures_util::Stream;
use tracing::{Instrument, Span};
use unigen_core::ProviderError;
use unigen_core::config::ModelEntry;
use unigen_core::telemetry::metrics::{GenAiLabels, Timed};
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

/// One attempt's span, when it started, and its metrics' labels (`None`
/// for an untraced loop).
pub struct Attempt {
    pub span: Span,
    pub started: Instant,
    pub metrics: Option<GenAiLabels>,
    /// A stream's timer, which its [`traced_stream`] finishes.
    stream_timer: Option<Timed>,
}

impl Attempt {
    /// Records the tokens an answer used (its metrics; the span's are
    /// recorded with the response).
    pub fn tokens(&self, input: Option<u64>, output: Option<u64>) {
        if let Some(labels) = &self.metrics {
            labels.tokens(input, output);
        }
    }
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
        let timed = traced.map(|traced| {
            Timed::start(GenAiLabels::new(
                traced.operation,
                &model.adapter,
                &model.id,
            ))
        });
        let started = Instant::now();
        match call(client).instrument(span.clone()).await {
            Ok(value) => {
                let metrics = timed.as_ref().map(|timed| timed.labels().clone());
                // A stream's attempt is timed until the stream ends
                // ([`traced_stream`]).
                let stream_timer = match timed {
                    Some(timed) if traced.is_some_and(|traced| traced.stream) => Some(timed),
                    Some(timed) => {
                        timed.finish("");
                        None
                    }
                    None => None,
                };
                let attempt = Attempt {
                    span,
                    started,
                    metrics,
                    stream_timer,
                };
                return Ok(done(attempt, value));
            }
            Err(err) => {
                if let Some(timed) = timed {
                    timed.finish(spans::provider_error_type(&err));
                }
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
/// model, the usage chunk, and a failure mid-stream; and the attempt's
/// metrics (its duration ends with the stream). Chat completion chunks and
/// Anthropic's Messages events (`message_start`, `message_delta`) alike.
pub fn traced_stream(attempt: Attempt, stream: ChunkStream) -> ChunkStream {
    if attempt.span.is_disabled() && attempt.stream_timer.is_none() {
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

impl TracedStream {
    fn first_chunk(&self, chunk: &serde_json::Value) {
        let elapsed = self.attempt.started.elapsed();
        if let Some(labels) = &self.attempt.metrics {
            labels.first_chunk(elapsed);
        }
        let span = &self.attempt.span;
        spans::gen_ai_first_chunk(span, elapsed);
        // Anthropic's `message_start` carries the message.
        let message = if chunk["message"].is_object() {
            &chunk["message"]
        } else {
            chunk
        };
        spans::gen_ai_response(
            span,
            message["model"].as_str(),
            message["id"].as_str(),
            None,
            None,
        );
    }

    fn usage(&self, chunk: &serde_json::Value) {
        let span = &self.attempt.span;
        match chunk["type"].as_str() {
            Some("message_start") => {
                let input = chunk["message"]["usage"]["input_tokens"].as_i64();
                self.attempt.tokens(input.map(|n| n as u64), None);
                spans::gen_ai_response(span, None, None, input, None);
            }
            Some("message_delta") => {
                let output = chunk["usage"]["output_tokens"].as_i64();
                self.attempt.tokens(None, output.map(|n| n as u64));
                spans::gen_ai_response(span, None, None, None, output);
            }
            _ if chunk["usage"].is_object() => {
                let tokens = |key: &str| chunk["usage"][key].as_u64();
                self.attempt
                    .tokens(tokens("prompt_tokens"), tokens("completion_tokens"));
                record_completion(span, chunk);
            }
            _ => {}
        }
    }
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
        match &polled {
            std::task::Poll::Ready(Some(Ok(chunk))) => {
                if this.first {
                    this.first = false;
                    this.first_chunk(chunk);
                }
                this.usage(chunk);
            }
            std::task::Poll::Ready(Some(Err(err))) => {
                spans::fail(&this.attempt.span, spans::provider_error_type(err));
                if let Some(timer) = this.attempt.stream_timer.take() {
                    timer.finish(spans::provider_error_type(err));
                }
            }
            std::task::Poll::Ready(None) => {
                if let Some(timer) = this.attempt.stream_timer.take() {
                    timer.finish("");
                }
            }
            std::task::Poll::Pending => {}
        }
        polled
    }
}
