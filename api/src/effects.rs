//! What a request created, told by its handler to the `Idempotency-Key`
//! middleware (`crate::idempotency`), which keeps the answer accordingly.

use std::sync::{Arc, Mutex};

use actix_web::web::Bytes;
use unigen_db::queries::idempotency::ClaimToken;
use uuid::Uuid;

/// What a request created, told by its handler. Inert (records nothing,
/// builds nothing) unless the request carries an `Idempotency-Key`.
#[derive(Debug, Clone, Default)]
pub struct Effects(Option<Arc<Mutex<EffectsInner>>>, Option<Arc<ClaimToken>>);

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
    /// Effects that are kept: the idempotency middleware's, for the
    /// request holding `claim`.
    pub(crate) fn recording(claim: ClaimToken) -> Self {
        Self(Some(Arc::default()), Some(Arc::new(claim)))
    }

    /// The `Idempotency-Key` claim (key, claim id) this request holds: a
    /// job it submits is written on it in the job's own statement.
    pub fn claim(&self) -> Option<(String, Uuid)> {
        self.1
            .as_deref()
            .map(|claim| (claim.key.clone(), claim.claim_id))
    }

    /// A job was submitted; `accepted` builds its async creation body.
    pub fn job_submitted(&self, accepted: impl FnOnce() -> Option<Bytes>) {
        self.record(|effects| effects.job = accepted());
    }

    pub fn run_started(&self, run_id: Uuid) {
        self.record(|effects| effects.run = Some(run_id));
    }

    /// Keeps `body` as the replayed answer instead of the response's own
    /// (a new key's answer without its value, which is never stored).
    pub fn replay_with(&self, body: impl FnOnce() -> Option<Bytes>) {
        self.record(|effects| effects.replay_body = body());
    }

    fn record(&self, change: impl FnOnce(&mut EffectsInner)) {
        if let Some(effects) = &self.0 {
            change(&mut effects.lock().expect("idempotency effects poisoned"));
        }
    }

    pub(crate) fn take(&self) -> EffectsInner {
        let mut taken = EffectsInner::default();
        self.record(|effects| taken = std::mem::take(effects));
        taken
    }
}
