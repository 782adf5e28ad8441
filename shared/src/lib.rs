//! Code shared by the unigen binaries (api, worker, scheduler): domain types,
//! database access, queue topology, notifications, storage, providers, config.

pub mod agents;
pub mod artifacts;
pub mod batch;
pub mod batched;
pub mod billing;
pub mod chat;
pub mod config;
pub mod db;
pub mod domain;
pub mod events;
pub mod fetch;
mod fonts;
pub mod jobs;
pub mod knowledge;
pub mod llm;
pub mod metrics;
pub mod notify;
pub mod providers;
pub mod queue;
pub mod search;
pub mod storage;
pub mod telemetry;
pub mod webhooks;
