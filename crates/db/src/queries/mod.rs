//! All SQL, one module per aggregate.

pub mod agent_runs;
pub mod agents;
pub mod batches;
pub mod billing;
pub mod events;
pub mod files;
pub mod idempotency;
pub mod jobs;
pub mod keys;
pub mod knowledge;
pub mod limits;
pub mod members;
pub mod orgs;
pub mod responses;
pub mod usage;
pub mod voice_clones;
pub mod webhooks;
