//! All SQL, one module per aggregate.

pub mod events;
pub mod jobs;
pub mod keys;
pub mod orgs;
pub mod webhooks;
