//! Metering at the HTTP edge: concurrency slots for consuming requests,
//! allowances for sync calls (chat, embeddings), and the `X-Credits-*` /
//! `X-Overage-*` response headers.

pub mod allowances;
pub mod chat;
mod housekeeping;
pub mod slots;

use std::time::{Duration, Instant};

use actix_web::HttpMessage;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use unigen_db::billing::{AccountSnapshot, Charge, Estimate, RequestMeta};
use unigen_db::models::UsageRecord;
use unigen_db::queries::billing::Amount;
use unigen_db::{DbError, PgPool, queries};
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

pub use crate::charge_slot::ChargeSlot;
pub use allowances::Charged;

/// Reads the account's balances for the headers of a job-backed response
/// (the worker settled it; the API only reports).
pub async fn record_job_charge(state: &AppState, caller: &Caller, credits_used: i64) {
    if let Some(snapshot) = read_balances(state, caller.org_id).await {
        caller.charges.record(credits_used, snapshot);
    }
}

/// The account's balances as they stand, for credit headers; `None` when
/// there is no account or the read failed (logged: the headers are left
/// out, the answer is not failed for them).
pub async fn read_balances(state: &AppState, org_id: Uuid) -> Option<AccountSnapshot> {
    let snapshot = async {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::billing::account_snapshot(&mut conn, org_id).await
    }
    .await;
    match snapshot {
        Ok(snapshot) => snapshot,
        Err(err) => {
            tracing::warn!(error = %err, "reading balances for credit headers failed");
            None
        }
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
                format!("{}", unigen_db::billing::usd(rate)),
            );
        }
    }
    Ok(response)
}

/// How long a per-request concurrency slot outlives a crashed API process.
const SLOT_LEASE: Duration = Duration::from_secs(15 * 60);

/// One of the organization's `concurrent_requests` slots, held for the
/// duration of a consuming request.
///
/// Below `metering.lease_slots_from` the slot is a row taken for this
/// request and freed in the database before the response is sent: with a
/// few slots, one held idle by another API process would refuse a client
/// that is within its plan. From it up, the slot comes from a block this
/// process leases (see [`slots`]): no round trip, free again the moment the
/// request ends, and what a block holds unused is a small share of the limit.
pub enum ConcurrencySlot {
    PerRequest {
        pool: PgPool,
        org_id: Uuid,
        slot: i32,
        holder: Uuid,
        charges: ChargeSlot,
    },
    Leased {
        _guard: slots::SlotGuard,
    },
}

impl ConcurrencySlot {
    pub async fn acquire(state: &AppState, caller: &Caller) -> Result<Self, ApiError> {
        let refused = ApiError::RateLimited {
            message: "Too many concurrent requests for this plan",
            retry_after_seconds: 1,
        };
        if caller.concurrent_requests >= state.slots.lease_from() {
            let slot = state
                .slots
                .acquire(caller.org_id, caller.concurrent_requests)
                .await?
                .ok_or(refused)?;
            return Ok(Self::Leased { _guard: slot });
        }
        let holder = Uuid::now_v7();
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        let slot = queries::limits::acquire_slot(
            &mut conn,
            caller.org_id,
            caller.concurrent_requests,
            holder,
            SLOT_LEASE,
        )
        .await?
        .ok_or(refused)?;
        Ok(Self::PerRequest {
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
        let Self::PerRequest {
            pool,
            org_id,
            slot,
            holder,
            charges,
        } = self
        else {
            return;
        };
        let (pool, org_id, slot, holder) = (pool.clone(), *org_id, *slot, *holder);
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
        charges.track_release(release);
    }
}

/// A sync request's hold on its organization's credits and quota, taken
/// from this process's allowance (see [`allowances`]): settled with what it
/// actually used, or released when the request fails.
pub struct SyncReservation {
    pub id: Uuid,
    hold: allowances::Hold,
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
        let (bucket, milli) = match estimate.bucket {
            Some((bucket, milli)) => (Some(bucket), milli),
            None => (None, 0),
        };
        let need = Amount {
            credits: estimate.credits,
            milli,
        };
        let hold = state
            .allowances
            .admit(caller.org_id, bucket, need)
            .await??;
        Ok(Self {
            id: Uuid::now_v7(),
            hold,
            org_id: caller.org_id,
            key_id: caller.key_id,
            endpoint,
            model: model.to_owned(),
            started: Instant::now(),
        })
    }

    fn record(&self, status: &str, tokens: (i64, i64), tools_used: Vec<String>) -> UsageRecord {
        RequestMeta {
            id: self.id,
            org_id: self.org_id,
            api_key_id: Some(self.key_id),
            endpoint: self.endpoint,
            model: &self.model,
            started: self.started,
        }
        .usage_record(status, tokens, tools_used)
    }

    /// Charges what the request used; the answer waits for the charge's
    /// record (see [`allowances`]).
    pub async fn settle(
        self,
        charge: &Charge,
        multiplier: f64,
        tokens: (i64, i64),
        tools_used: Vec<String>,
    ) -> Result<Charged, DbError> {
        let record = self.record("success", tokens, tools_used);
        self.hold.settle(charge, multiplier, record).await
    }

    /// Gives everything back (the request failed) and records its usage row.
    pub async fn release(self) {
        let record = self.record("failed", (0, 0), Vec::new());
        self.hold.release(record).await;
    }
}
