//! End-to-end tests: api + worker + scheduler against real PostgreSQL and
//! RabbitMQ. Each test gets its own database and queue prefix.

mod agent_runs;
mod agents;
mod anthropic_messages;
mod audio_bombs;
mod auth;
mod bad_input;
mod batches;
mod body_memory;
mod bombs;
mod chat;
mod clients;
mod concurrency;
mod dashboard;
mod dashboard_browser;
mod dashboard_pages;
mod deadlines;
mod elevenlabs;
mod events;
mod examples;
mod fal;
mod faults;
mod files;
mod fixture;
mod hardening;
mod hardening_second;
mod idempotency;
mod images;
mod job_events;
mod jobs;
mod json_logs;
mod keys;
mod knowledge;
mod legacy;
mod limits;
mod media;
mod metering;
mod metrics;
mod metrics_scrape;
mod migrations;
mod native_providers;
mod openai_compat;
mod openai_media;
mod ops;
mod pipeline;
mod recovery;
mod replicate;
mod replicate_outputs;
mod responses_api;
mod schemathesis;
mod soak;
mod storage_s3;
mod sync_admission;
mod sync_charges;
mod tenancy;
mod tools;
mod tracing_spans;
mod usage;
mod webhook_fairness;
mod webhook_tools;
mod webhooks;

/// Counts the heap's current size and peak, for the body-memory tests. It
/// adds two atomic operations per allocation to the system allocator.
#[global_allocator]
static PEAK: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;
