//! All SQL, one module per aggregate.

pub mod agents;
pub mod billing;
pub mod events;
pub mod jobs;
pub mod keys;
pub mod limits;
pub mod orgs;
pub mod usage;
pub mod webhooks;
