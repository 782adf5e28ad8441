//! The per-request slot a handler fills with what it charged.

use std::sync::{Arc, Mutex};

use unigen_db::billing::AccountSnapshot;

/// What the response's credit headers report, filled by the handler; and
/// the per-request concurrency slots being released, which the response
/// waits for (a client that sends its next request once it has the answer
/// must find the slot free, whichever API process serves it).
#[derive(Debug, Clone, Default)]
pub struct ChargeSlot {
    charge: Arc<Mutex<Option<(i64, AccountSnapshot)>>>,
    releases: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl ChargeSlot {
    pub fn record(&self, credits_used: i64, snapshot: AccountSnapshot) {
        *self.charge.lock().expect("charge slot poisoned") = Some((credits_used, snapshot));
    }

    pub(crate) fn take(&self) -> Option<(i64, AccountSnapshot)> {
        self.charge.lock().expect("charge slot poisoned").take()
    }

    pub(crate) fn track_release(&self, release: tokio::task::JoinHandle<()>) {
        self.releases
            .lock()
            .expect("charge slot poisoned")
            .push(release);
    }

    pub(crate) async fn releases_done(&self) {
        let releases = std::mem::take(&mut *self.releases.lock().expect("charge slot poisoned"));
        for release in releases {
            let _ = release.await;
        }
    }
}
