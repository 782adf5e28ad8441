//! `[telemetry]` settings: OpenTelemetry traces (README, "Observability").
//!
//! Keys: `enabled` (default false), `endpoint` (an OTLP/HTTP base URL; empty:
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`, else
//! `http://localhost:4318`), `service_name` (empty: `OTEL_SERVICE_NAME`, else
//! the binary's own, `unigen-api`, `unigen-worker` or `unigen-scheduler`),
//! `record_content` (prompts and completions on GenAI spans; default false),
//! `queue_size` (spans held for export before new ones are dropped) and
//! `export_timeout_ms`. Headers (`OTEL_EXPORTER_OTLP_HEADERS`), the sampler
//! (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`) and resource attributes
//! (`OTEL_RESOURCE_ATTRIBUTES`) come from the standard variables.
//!
//! Tracing is on when `enabled` is true or `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (or its traces form) is set, unless `OTEL_SDK_DISABLED=true`.
//!
//! `[log]` ([`LogSettings`]): `format` is `text`, `json` (one JSON object
//! per line, `unigen_core::telemetry::json_log`) or empty (the default):
//! `json` when `UNIGEN_LOG_FORMAT=json`, else text.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct TelemetrySettings {
    pub enabled: bool,
    pub endpoint: String,
    pub service_name: String,
    pub record_content: bool,
    pub queue_size: usize,
    /// Limit of one export of a batch of spans, in milliseconds.
    pub export_timeout_ms: u64,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            enabled: false,
            endpoint: String::new(),
            service_name: String::new(),
            record_content: false,
            queue_size: 2048,
            export_timeout_ms: 10_000,
        }
    }
}

impl TelemetrySettings {
    /// Whether traces are exported (see the module's documentation).
    pub fn tracing_on(&self) -> bool {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return false;
        }
        self.enabled
            || env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
            || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
    }
}

/// `[log]`: how log lines are written (see the module's documentation).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct LogSettings {
    /// `text`, `json`, or empty for the default.
    pub format: String,
}

impl LogSettings {
    /// Whether lines are JSON objects.
    pub fn json(&self) -> bool {
        match self.format.trim() {
            "" => std::env::var("UNIGEN_LOG_FORMAT").is_ok_and(|v| v == "json"),
            format => format.eq_ignore_ascii_case("json"),
        }
    }
}
