//! Job submission (reservation, row and publish in one step), the queue
//! topology and publisher, the webhook delivery client and the metrics every
//! process serves.
//!
//! Handlers parse a request into a tool's `*Params`
//! (`unigen_core::params`), then call [`JobSubmitter::submit`].

pub mod batches;
pub mod metrics;
pub mod queue;
mod submit;
pub mod webhooks;

pub use submit::{
    JobSubmitter, NewJobRequest, SubmitError, cancel, cancel_one_past_deadline,
    cancel_past_deadline,
};
