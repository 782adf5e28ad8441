//! Metering at the HTTP edge: concurrency slots for consuming requests,
//! reservations of sync calls (chat, embeddings), and the `X-Credits-*` /
//! `X-Overage-*` response headers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::HttpMessage;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use chrono::Utc;
use unigen_shared::billing::{AccountSnapshot, Charge, Estimate, Settled};
use unigen_shared::db::models::UsageRecord;
use unigen_shared::db::queries::billing::{ReserveItem, SettleItem};
use unigen_shared::db::{DbError, PgPool, queries};
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// How long a sync request may hold its reservation and its concurrency
/// slot before they count as abandoned (a crashed API process).
const SYNC_LEASE: Duration = Duration::from_secs(15 * 60);

/// What the response's credit headers report, filled by the handler; and
/// the concurrency slots the request is releasing, which the response
/// waits for (a client that sends its next request once it has the answer
/// must find the slot free).
#[derive(Debug, Clone, Default)]
pub struct ChargeSlot {
    charge: Arc<Mutex<Option<(i64, AccountSnapshot)>>>,
    releases: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl ChargeSlot {
    pub fn record(&self, credits_used: i64, snapshot: AccountSnapshot) {
        *self.charge.lock().expect("charge slot poisoned") = Some((credits_used, snapshot));
    }

    fn take(&self) -> Option<(i64, AccountSnapshot)> {
        self.charge.lock().expect("charge slot poisoned").take()
    }

    fn track_release(&self, release: tokio::task::JoinHandle<()>) {
        self.releases
            .lock()
            .expect("charge slot poisoned")
            .push(release);
    }

    async fn releases_done(&self) {
        let releases = std::mem::take(&mut *self.releases.lock().expect("charge slot poisoned"));
        for release in releases {
            let _ = release.await;
        }
    }
}

/// Reads the account's balances for the headers of a job-backed response
/// (the worker settled it; the API only reports).
pub async fn record_job_charge(state: &AppState, caller: &Caller, credits_used: i64) {
    let snapshot = async {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        let plan = queries::billing::plan_of_org(&mut conn, caller.org_id).await?;
        let account = queries::billing::find_account(&mut conn, caller.org_id).await?;
        Ok::<_, DbError>(account.map(|a| queries::billing::snapshot(&a, &plan)))
    }
    .await;
    match snapshot {
        Ok(Some(snapshot)) => caller.charges.record(credits_used, snapshot),
        Ok(None) => {}
        Err(err) => tracing::warn!(error = %err, "reading balances for credit headers failed"),
    }
}

/// Middleware: adds the credit headers a handler recorded. `X-Credits-Used`
/// and `X-Credits-Remaining` on every charged response; the `X-Overage-*`
/// set while the period is in overage.
pub async fn credit_headers(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let slot = ChargeSlot::default();
    req.extensions_mut().insert(slot.clone());
    let mut response = next.call(req).await?;
    // The handler has returned: its concurrency slot is being released.
    slot.releases_done().await;
    if let Some((used, snapshot)) = slot.take() {
        let headers = response.headers_mut();
        let mut set = |name: &'static str, value: String| {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        };
        set("x-credits-used", used.to_string());
        set(
            "x-credits-remaining",
            snapshot.credits_remaining.to_string(),
        );
        if snapshot.overage_active() {
            let rate = snapshot.overage_rate_micros.unwrap_or(0);
            set("x-overage-active", "true".to_owned());
            set("x-overage-credits", snapshot.overage_credits.to_string());
            set(
                "x-overage-cost",
                format!("{:.2}", snapshot.overage_cost_usd()),
            );
            set(
                "x-overage-rate",
                format!("{}", unigen_shared::billing::usd(rate)),
            );
        }
    }
    Ok(response)
}

/// One of the organization's `concurrent_requests` slots, held for the
/// duration of a consuming request and freed when dropped (before the
/// response is sent, see [`credit_headers`]).
pub struct ConcurrencySlot {
    pool: PgPool,
    org_id: Uuid,
    slot: i32,
    holder: Uuid,
    charges: ChargeSlot,
}

impl ConcurrencySlot {
    pub async fn acquire(state: &AppState, caller: &Caller) -> Result<Self, ApiError> {
        let holder = Uuid::now_v7();
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        let slot = queries::limits::acquire_slot(
            &mut conn,
            caller.org_id,
            caller.concurrent_requests,
            holder,
            SYNC_LEASE,
        )
        .await?
        .ok_or(ApiError::RateLimited {
            message: "Too many concurrent requests for this plan",
            retry_after_seconds: 1,
        })?;
        Ok(Self {
            pool: state.pool.clone(),
            org_id: caller.org_id,
            slot,
            holder,
            charges: caller.charges.clone(),
        })
    }
}

impl Drop for ConcurrencySlot {
    fn drop(&mut self) {
        let (pool, org_id, slot, holder) = (self.pool.clone(), self.org_id, self.slot, self.holder);
        // Drop cannot wait: the release runs as a task that the middleware
        // awaits before sending the response (a streamed response is past
        // the middleware; its slot is freed in the background). A failure
        // only leaves the slot to expire.
        let release = tokio::spawn(async move {
            let result = async {
                let mut conn = pool.get().await.map_err(DbError::from)?;
                queries::limits::release_slot(&mut conn, org_id, slot, holder).await
            }
            .await;
            if let Err(err) = result {
                tracing::warn!(error = %err, "releasing a concurrency slot failed; it expires");
            }
        });
        self.charges.track_release(release);
    }
}

/// A sync request's reservation: settled with what it actually used, or
/// released when the request fails. An abandoned one expires (scheduler).
pub struct SyncReservation {
    pub id: Uuid,
    notifier: unigen_shared::notify::Notifier,
    billing: crate::billing_batches::BillingBatches,
    org_id: Uuid,
    key_id: Uuid,
    endpoint: &'static str,
    model: String,
    started: Instant,
}

impl SyncReservation {
    pub async fn reserve(
        state: &AppState,
        caller: &Caller,
        endpoint: &'static str,
        model: &str,
        estimate: &Estimate,
    ) -> Result<Self, ApiError> {
        let id = Uuid::now_v7();
        let expires_at = Utc::now() + SYNC_LEASE;
        // One statement, atomic on its own, shared with the requests that
        // reserve at the same moment.
        state
            .billing
            .reserve(ReserveItem {
                org_id: caller.org_id,
                id,
                estimate: estimate.clone(),
                expires_at: Some(expires_at),
            })
            .await??;
        Ok(Self {
            id,
            notifier: state.notifier.clone(),
            billing: state.billing.clone(),
            org_id: caller.org_id,
            key_id: caller.key_id,
            endpoint,
            model: model.to_owned(),
            started: Instant::now(),
        })
    }

    fn record(&self, status: &str, tokens: (i64, i64), tools_used: Vec<String>) -> UsageRecord {
        UsageRecord {
            id: self.id,
            org_id: self.org_id,
            api_key_id: Some(self.key_id),
            endpoint: self.endpoint.to_owned(),
            method: "POST".to_owned(),
            model: self.model.clone(),
            credits: 0,
            latency_ms: self.started.elapsed().as_millis() as i64,
            status: status.to_owned(),
            tools_used,
            prompt_tokens: tokens.0,
            completion_tokens: tokens.1,
            total_tokens: tokens.0 + tokens.1,
            created_at: Utc::now(),
        }
    }

    /// Charges what the request used. `None`: the reservation had expired
    /// and was released meanwhile (nothing is charged twice).
    pub async fn settle(
        self,
        charge: &Charge,
        multiplier: f64,
        tokens: (i64, i64),
        tools_used: Vec<String>,
    ) -> Result<Option<Settled>, DbError> {
        let record = self.record("success", tokens, tools_used);
        let settled = self
            .billing
            .settle(SettleItem {
                id: self.id,
                charge: charge.clone(),
                multiplier,
                usage: record,
            })
            .await?;
        if settled.as_ref().is_some_and(|s| s.events_recorded) {
            self.notifier.events_recorded();
        }
        Ok(settled)
    }

    /// Gives everything back (the request failed).
    pub async fn release(self, pool: &PgPool) {
        let record = self.record("failed", (0, 0), Vec::new());
        let result = async {
            let mut conn = pool.get().await?;
            queries::billing::release(&mut conn, self.id, Some(record)).await
        }
        .await;
        if let Err(err) = result {
            tracing::warn!(error = %err, reservation = %self.id, "releasing a reservation failed; it expires");
        }
    }
}
