//! The lowest layer: domain types, every settings struct, the errors the
//! layers share, request parameters and their validation, SSRF-safe client
//! media fetching, file storage, batching helpers, audio tools, telemetry and
//! the embedded fonts. Depends on none of our crates.

pub mod audio;
pub mod batch;
pub mod batched;
pub mod config;
pub mod domain;
mod errors;
pub mod fetch;
pub mod fonts;
pub mod images;
pub mod params;
pub mod password;
pub mod storage;
pub mod telemetry;
pub mod validate;

pub use errors::ProviderError;
pub use validate::ValidationError;
