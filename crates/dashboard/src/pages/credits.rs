//! Credits (`/credits`): the balance, the ledger (keyset pages, newest
//! first, each row linked to its job or request), and the overage
//! settings, editable by owners and admins through the rules of
//! `POST /overage/configure`.

use std::collections::HashMap;

use actix_web::{HttpResponse, web};
use askama::Template;
use unigen_db::billing::usd;
use unigen_db::models::CreditTransaction;
use unigen_db::queries::billing::{OverageChange, OverageSettings};
use unigen_db::{DbError, queries};
use uuid::Uuid;

use super::cursor;
use crate::error::DashError;
use crate::form::Posted;
use crate::layout::Chrome;
use crate::session::SignedIn;
use crate::state::{DashboardState, render, see_other};

const PAGE_SIZE: i64 = 50;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/credits", web::get().to(credits_page))
        .route("/credits/overage", web::post().to(change_overage));
}

struct LedgerRow {
    created: String,
    kind: String,
    amount: i64,
    balance_after: i64,
    description: String,
    /// The job's page when the row belongs to a job of ours; else the
    /// request id as text.
    job: Option<Uuid>,
    request: Option<String>,
}

impl LedgerRow {
    fn of(t: &CreditTransaction, jobs: &[Uuid]) -> Self {
        let request = t
            .metadata
            .get("request_id")
            .or_else(|| t.metadata.get("job_id"))
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let job = request
            .as_deref()
            .and_then(|r| r.parse::<Uuid>().ok())
            .filter(|id| jobs.contains(id));
        Self {
            created: super::datetime(&t.created_at),
            kind: t.kind.clone(),
            amount: t.amount,
            balance_after: t.balance_after,
            description: t.description.clone(),
            request: if job.is_some() { None } else { request },
            job,
        }
    }
}

#[derive(Template)]
#[template(path = "credits.html")]
struct CreditsPage {
    chrome: Chrome,
    plan: String,
    balance: i64,
    included: i64,
    included_remaining: i64,
    purchased: i64,
    reserved: i64,
    period: String,
    overage_available: bool,
    overage_enabled: bool,
    overage_used: i64,
    overage_cost: String,
    soft_limit: String,
    hard_limit: String,
    can_change_overage: bool,
    rows: Vec<LedgerRow>,
    next: Option<String>,
    first: Option<String>,
    saved: bool,
}

async fn credits_page(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, DashError> {
    let before = cursor::decode(query.get("before").map(String::as_str))?;
    let org_id = signed_in.org_id();
    let (account, plan, ledger, jobs) = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        let (account, plan) = queries::billing::current_account(&mut conn, org_id).await?;
        let ledger = queries::billing::ledger_page(&mut conn, org_id, before, PAGE_SIZE).await?;
        // Which rows' requests are jobs of ours (still kept): one query.
        let ids: Vec<Uuid> = ledger
            .iter()
            .filter_map(|t| t.metadata.get("request_id")?.as_str()?.parse().ok())
            .collect();
        let jobs: Vec<Uuid> = queries::jobs::find_many(&mut conn, &ids)
            .await?
            .into_iter()
            .filter(|job| job.org_id == org_id)
            .map(|job| job.id)
            .collect();
        (account, plan, ledger, jobs)
    };
    let base = format!("{}/credits", signed_in.prefix);
    let next = (ledger.len() as i64 == PAGE_SIZE)
        .then(|| ledger.last())
        .flatten()
        .map(|last| format!("{base}?before={}", cursor::encode(last.created_at, last.id)));
    let first = before.map(|_| base.clone());
    let rate = plan.overage_rate_micros.unwrap_or(0);
    render(&CreditsPage {
        chrome: signed_in.chrome("credits", "Credits"),
        plan: plan.name.clone(),
        balance: account.balance(),
        included: account.included_credits,
        included_remaining: account.included_remaining,
        purchased: account.purchased_balance,
        reserved: account.reserved_credits,
        period: format!(
            "{} to {}",
            super::datetime(&account.period_start),
            super::datetime(&account.period_end)
        ),
        overage_available: plan.overage_rate_micros.is_some(),
        overage_enabled: account.overage_enabled,
        overage_used: account.overage_credits,
        overage_cost: format!("${:.2}", usd(account.overage_credits * rate)),
        soft_limit: account.soft_limit.map_or(String::new(), |l| l.to_string()),
        hard_limit: account.hard_limit.map_or(String::new(), |l| l.to_string()),
        can_change_overage: signed_in.role().can_change_overage(),
        rows: ledger.iter().map(|t| LedgerRow::of(t, &jobs)).collect(),
        next,
        first,
        saved: query.get("done").is_some_and(|d| d == "saved"),
    })
}

fn limit(raw: Option<&str>, label: &str) -> Result<Option<i64>, DashError> {
    match raw.map(str::trim).filter(|r| !r.is_empty()) {
        None => Ok(None),
        Some(raw) => raw.parse::<i64>().map(Some).map_err(|_| {
            DashError::BadRequest(format!(
                "{label} must be a whole number of credits, or empty."
            ))
        }),
    }
}

async fn change_overage(
    state: web::Data<DashboardState>,
    posted: Posted,
) -> Result<HttpResponse, DashError> {
    let Posted { signed_in, form } = posted;
    signed_in.require(signed_in.role().can_change_overage())?;
    let org_id = signed_in.org_id();
    let enabled = form.get("enabled") == Some("on");
    let soft = limit(form.get("soft_limit"), "Soft limit")?;
    let hard = limit(form.get("hard_limit"), "Hard limit")?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    // The email is not on this form: kept as it is.
    let email = queries::billing::find_account(&mut conn, org_id)
        .await?
        .and_then(|a| a.notification_email);
    let settings = OverageSettings::new(enabled, soft, hard, email)
        .map_err(|e| DashError::BadRequest(e.message))?;
    match queries::billing::change_overage(&mut conn, org_id, &settings).await? {
        OverageChange::Applied(_) => Ok(see_other(&format!(
            "{}/credits?done=saved",
            signed_in.prefix
        ))),
        OverageChange::NotOnPlan(plan) => Err(DashError::BadRequest(format!(
            "Overage is not available on the {plan} plan."
        ))),
    }
}
