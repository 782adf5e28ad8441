//! What a request created, told by its handler to the `Idempotency-Key`
//! middleware (`crate::idempotency`), which keeps the answer accordingly.

use std::sync::{Arc, Mutex};

use actix_web::web::Bytes;
use uuid::Uuid;

/// What a request created, told by its handler.
#[derive(Debug, Clone, Default)]
pub struct Effects(Arc<Mutex<EffectsInner>>);

#[derive(Debug, Default)]
pub(crate) struct EffectsInner {
    /// A job was submitted: its async creation body (202), the answer kept
    /// when the full response cannot be (the client went away mid-wait).
    pub(crate) job: Option<Bytes>,
    /// An agent run started: replays stream it from its stored steps.
    pub(crate) run: Option<Uuid>,
    /// What to keep instead of the response body.
    pub(crate) replay_body: Option<Bytes>,
}

impl Effects {
    pub fn job_submitted(&self, accepted_body: Bytes) {
        self.lock().job = Some(accepted_body);
    }

    pub fn run_started(&self, run_id: Uuid) {
        self.lock().run = Some(run_id);
    }

    /// Keeps `body` as the replayed answer instead of the response's own
    /// (a new key's answer without its value, which is never stored).
    pub fn replay_with(&self, body: Bytes) {
        self.lock().replay_body = Some(body);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EffectsInner> {
        self.0.lock().expect("idempotency effects poisoned")
    }

    pub(crate) fn take(&self) -> EffectsInner {
        std::mem::take(&mut *self.lock())
    }
}
