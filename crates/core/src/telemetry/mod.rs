//! Process plumbing shared by the binaries: logging, OpenTelemetry traces and
//! shutdown signals.
//!
//! Logging: `RUST_LOG` filters (default `info`); `[log] format = "json"`
//! (or `UNIGEN_LOG_FORMAT=json`) switches to JSON lines ([`json_log`]).
//!
//! Traces (`[telemetry]`, [`crate::config::TelemetrySettings`]): when on,
//! the spans built by [`spans`] (target [`spans::TARGET`]) become
//! OpenTelemetry spans, batched and exported over OTLP/HTTP by a background
//! thread: a request never waits for the collector; a full queue or a failed
//! export drops spans, counted by [`spans_dropped`] and
//! `unigen_otel_spans_dropped_total` ([`metrics`]). The SDK's batch processor
//! counts its own queue-full drops but exposes no hook for them, so the
//! queue is bounded by us, in front of it ([`Bounded`]): a span finding
//! `queue_size` spans waiting or being exported is dropped and counted
//! there, and the SDK's queue (of the same size) never overflows. Off (the default), those
//! spans are disabled at their call sites: no span is built, no header
//! injected, nothing exported. Logs are unchanged either way: the trace spans
//! never reach the log output.

pub mod json_log;
pub mod metrics;
pub mod propagation;
pub mod semconv;
pub mod spans;

pub use opentelemetry::Context;
pub use opentelemetry::trace::SpanContext;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};
use tracing_subscriber::filter::{FilterExt, Targets, filter_fn};
pub use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogSettings, TelemetrySettings};

static TRACING: AtomicBool = AtomicBool::new(false);
static RECORD_CONTENT: AtomicBool = AtomicBool::new(false);
static SPANS_DROPPED: AtomicU64 = AtomicU64::new(0);

/// Whether this process exports traces (set once by [`init`]).
pub fn enabled() -> bool {
    TRACING.load(Ordering::Relaxed)
}

/// Whether prompts and completions may be recorded on GenAI spans
/// (`telemetry.record_content`, off by default).
pub fn record_content() -> bool {
    RECORD_CONTENT.load(Ordering::Relaxed)
}

/// Spans whose export failed (a dead or refusing collector), since start.
pub fn spans_dropped() -> u64 {
    SPANS_DROPPED.load(Ordering::Relaxed)
}

/// Keeps the tracer provider: dropping it flushes what is queued (bounded
/// by the export timeout) and stops the export thread.
#[must_use = "dropping it stops trace export"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports what is queued now (tests read their spans after it).
    pub fn flush(&self) {
        if let Some(provider) = &self.provider {
            let _ = provider.force_flush();
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown();
        }
    }
}

/// [`init_logging`] with the default log format.
pub fn init(binary: &str, settings: &TelemetrySettings) -> Telemetry {
    init_logging(binary, settings, &LogSettings::default())
}

/// Logging as `log` says, and traces when `settings` turn them on (an
/// exporter that cannot be built is reported and tracing stays off: it never
/// stops a binary).
pub fn init_logging(binary: &str, settings: &TelemetrySettings, log: &LogSettings) -> Telemetry {
    let provider = if settings.tracing_on() {
        match otlp_provider(binary, settings) {
            Ok(provider) => Some(provider),
            Err(err) => {
                eprintln!("telemetry: traces stay off: {err}");
                None
            }
        }
    } else {
        None
    };
    install(
        binary,
        settings,
        log,
        provider,
        BoxMakeWriter::new(std::io::stderr),
    )
}

/// [`init`] with `exporter` receiving each span as it ends (no batching):
/// tests pass an in-memory exporter or a loopback OTLP one.
pub fn init_with_exporter<E: SpanExporter + 'static>(
    binary: &str,
    settings: &TelemetrySettings,
    exporter: E,
) -> Telemetry {
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(Counted {
            inner: exporter,
            in_flight: None,
        })
        .with_resource(resource(binary, settings))
        .build();
    install(
        binary,
        settings,
        &LogSettings::default(),
        Some(provider),
        BoxMakeWriter::new(std::io::stderr),
    )
}

/// [`init_with_exporter`] with JSON log lines written to `writer`: tests
/// read what a process logs.
pub fn init_with_exporter_logging_to<E: SpanExporter + 'static>(
    binary: &str,
    settings: &TelemetrySettings,
    exporter: E,
    writer: BoxMakeWriter,
) -> Telemetry {
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(Counted {
            inner: exporter,
            in_flight: None,
        })
        .with_resource(resource(binary, settings))
        .build();
    let json = LogSettings {
        format: "json".into(),
    };
    install(binary, settings, &json, Some(provider), writer)
}

fn otlp_provider(
    binary: &str,
    settings: &TelemetrySettings,
) -> Result<SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
    use opentelemetry_otlp::WithExportConfig;
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_timeout(Duration::from_millis(settings.export_timeout_ms.max(1)));
    let endpoint = settings.endpoint.trim().trim_end_matches('/');
    if !endpoint.is_empty() {
        builder = builder.with_endpoint(format!("{endpoint}/v1/traces"));
    }
    let exporter = builder.build()?;
    let queue_size = settings.queue_size.max(64);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let processor = BatchSpanProcessor::builder(Counted {
        inner: exporter,
        in_flight: Some(in_flight.clone()),
    })
    .with_batch_config(
        BatchConfigBuilder::default()
            .with_max_queue_size(queue_size)
            .build(),
    )
    .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(Bounded {
            inner: processor,
            in_flight,
            limit: queue_size,
        })
        .with_resource(resource(binary, settings))
        .build())
}

/// `service.name`: the setting, else `OTEL_SERVICE_NAME`, else the binary's;
/// `OTEL_RESOURCE_ATTRIBUTES` adds the rest.
fn resource(binary: &str, settings: &TelemetrySettings) -> Resource {
    let builder = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    let from_env = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty());
    if !settings.service_name.is_empty() {
        builder
            .with_service_name(settings.service_name.clone())
            .build()
    } else if from_env {
        builder.build()
    } else {
        builder.with_service_name(binary.to_owned()).build()
    }
}

fn install(
    binary: &str,
    settings: &TelemetrySettings,
    log: &LogSettings,
    provider: Option<SdkTracerProvider>,
    writer: BoxMakeWriter,
) -> Telemetry {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,lapin=warn,actix_server=warn"));
    // Trace spans never reach the log lines.
    let logged = filter.and(filter_fn(|meta| meta.target() != spans::TARGET));
    let fmt = if log.json() {
        tracing_subscriber::fmt::layer()
            .fmt_fields(json_log::span_fields())
            .event_format(json_log::JsonLines)
            .with_writer(writer)
            .with_filter(logged)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_target(false)
            .with_writer(writer)
            .with_filter(logged)
            .boxed()
    };
    let otel = provider.as_ref().map(|provider| {
        let tracer = provider.tracer("unigen");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_level(false)
            .with_target(false)
            // Trace spans, and our warnings and errors as their events.
            .with_filter(
                Targets::new()
                    .with_target(spans::TARGET, tracing::Level::TRACE)
                    .with_target("unigen", tracing::Level::WARN),
            )
    });
    let installed = tracing_subscriber::registry()
        .with(otel)
        .with(fmt)
        .try_init()
        .is_ok();
    if installed {
        if let Some(provider) = &provider {
            opentelemetry::global::set_tracer_provider(provider.clone());
            TRACING.store(true, Ordering::Relaxed);
            RECORD_CONTENT.store(settings.record_content, Ordering::Relaxed);
        }
        tracing::info!(
            binary,
            version = env!("CARGO_PKG_VERSION"),
            traces = provider.is_some(),
            "starting"
        );
    }
    Telemetry {
        provider: if installed { provider } else { None },
    }
}

fn count_dropped(spans: u64) {
    SPANS_DROPPED.fetch_add(spans, Ordering::Relaxed);
    metrics::spans_dropped(spans);
}

/// An exporter that counts the spans of a failed export as dropped, and
/// (behind [`Bounded`]) releases the queue places of what it exported.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    in_flight: Option<Arc<AtomicUsize>>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        if let Some(in_flight) = &self.in_flight {
            in_flight.fetch_sub(spans, Ordering::Relaxed);
        }
        if result.is_err() {
            count_dropped(spans as u64);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The export queue's bound, in front of the SDK's batch processor: a span
/// ending while `limit` spans wait for or are in export is dropped and
/// counted (the SDK counts its own drops but reports them only in a log
/// line at shutdown).
#[derive(Debug)]
struct Bounded<P> {
    inner: P,
    in_flight: Arc<AtomicUsize>,
    limit: usize,
}

impl<P: SpanProcessor> SpanProcessor for Bounded<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.in_flight.fetch_add(1, Ordering::Relaxed) >= self.limit {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            count_dropped(1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// SIGTERM or Ctrl-C starts a graceful shutdown.
pub async fn shutdown_on_signal(shutdown: tokio_util::sync::CancellationToken) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutdown requested");
    shutdown.cancel();
}
