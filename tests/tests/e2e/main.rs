//! End-to-end tests: api + worker + scheduler against real PostgreSQL and
//! RabbitMQ. Each test gets its own database and queue prefix.

mod agent_runs;
mod agents;
mod audio_bombs;
mod auth;
mod bad_input;
mod bombs;
mod chat;
mod clients;
mod events;
mod faults;
mod files;
mod fixture;
mod hardening;
mod images;
mod jobs;
mod knowledge;
mod legacy;
mod limits;
mod media;
mod metering;
mod metrics;
mod migrations;
mod openai_compat;
mod openai_media;
mod ops;
mod pipeline;
mod recovery;
mod replicate;
mod replicate_outputs;
mod schemathesis;
mod storage_s3;
mod tenancy;
mod tools;
mod usage;
mod webhooks;
