//! The account owner's view of metering: `GET /credits`, `GET /quota`,
//! `GET /overage/status`, `POST /overage/configure`, `GET /account`. All
//! answer the spec's envelope `{success, data, meta}` and need scope `usage`.

use std::collections::HashMap;

use actix_web::{HttpResponse, get, post, web};
use serde::Deserialize;
use serde_json::{Value, json};
use unigen_core::ValidationError;
use unigen_core::domain::{ModelCategory, ModelTier, Scope};
use unigen_db::billing::{Bucket, CREDITS, from_milli, usd};
use unigen_db::models::{BillingAccount, CreditTransaction, Plan};
use unigen_db::queries::billing::{OverageChange, OverageSettings, TransactionFilter};
use unigen_db::{DbError, queries};

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::{Bound, json_body, parse_bound};
use crate::state::AppState;

const TRANSACTION_KINDS: [&str; 4] = ["allocation", "consumption", "purchase", "overage"];
const MAX_PAGE: i64 = 1000;

fn envelope(data: Value, meta: Value) -> HttpResponse {
    HttpResponse::Ok().json(json!({ "success": true, "data": data, "meta": meta }))
}

fn invalid(field: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::Validation(ValidationError::new(field, message))
}

fn parse_count(
    query: &HashMap<String, String>,
    field: &'static str,
    default: i64,
    min: i64,
    max: i64,
) -> Result<i64, ApiError> {
    let Some(raw) = query.get(field) else {
        return Ok(default);
    };
    raw.parse::<i64>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| {
            invalid(
                field,
                format!("{field} must be an integer between {min} and {max}"),
            )
        })
}

/// The account (created with its first allocation on the first look) and
/// the plan. A read takes no lock: it must not queue behind charges.
async fn account_and_plan(
    state: &AppState,
    caller: &Caller,
) -> Result<(BillingAccount, Plan), ApiError> {
    // Balances as of the answers this process sent.
    state.allowances.settled(caller.org_id).await;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    Ok(queries::billing::current_account(&mut conn, caller.org_id).await?)
}

fn period_json(account: &BillingAccount) -> Value {
    json!({ "start": account.period_start, "end": account.period_end })
}

fn balance_json(account: &BillingAccount, plan: &Plan) -> Value {
    let rate = plan.overage_rate_micros.unwrap_or(0);
    json!({
        "total_available": (account.included_remaining + account.purchased_balance - account.reserved_credits).max(0),
        "included_remaining": account.included_remaining,
        "purchased": account.purchased_balance,
        "reserved": account.reserved_credits,
        "overage_used": account.overage_credits,
        "overage_cost": usd(account.overage_credits * rate),
    })
}

fn transaction_json(row: &CreditTransaction) -> Value {
    json!({
        "id": row.id,
        "type": row.kind,
        "amount": row.amount,
        "balance_after": row.balance_after,
        "created_at": row.created_at,
        "description": row.description,
        "metadata": row.metadata,
    })
}

/// Credit balance, the current period, and the ledger (newest first).
#[utoipa::path(
    tag = "billing",
    params(
        ("type" = Option<String>, Query, pattern = "^(allocation|consumption|purchase|overage)$", description = "allocation, consumption, purchase or overage"),
        ("start_date" = Option<String>, Query, format = Date, description = "ISO 8601 date or date-time (inclusive)"),
        ("end_date" = Option<String>, Query, format = Date, description = "ISO 8601 date-time (exclusive) or date (that whole day included)"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 1000, description = "1 to 1000, default 50"),
        ("offset" = Option<i64>, Query, minimum = 0, description = "default 0"),
    ),
    responses(
        (status = 200, description = "The balance, the current period and a page of the ledger", body = crate::openapi::schemas::CreditsEnvelope),
        (status = 400, description = "An invalid parameter; `param` names it", body = ErrorBody),
        (status = 403, description = "API key does not have required scope: usage", body = ErrorBody),
    ),
    security(("bearer" = ["usage"]))
)]
#[get("/credits")]
pub async fn get_credits(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Usage)?;
    state.allowances.settled(caller.org_id).await;
    let kind = match query.get("type") {
        Some(kind) if TRANSACTION_KINDS.contains(&kind.as_str()) => Some(kind.clone()),
        Some(other) => {
            return Err(invalid(
                "type",
                format!(
                    "type must be one of {}, got `{other}`",
                    TRANSACTION_KINDS.join(", ")
                ),
            ));
        }
        None => None,
    };
    let start = query
        .get("start_date")
        .map(|raw| parse_bound("start_date", raw, false).map(Bound::in_utc))
        .transpose()?;
    let end = query
        .get("end_date")
        .map(|raw| parse_bound("end_date", raw, true).map(Bound::in_utc))
        .transpose()?;
    let filter = TransactionFilter {
        kind,
        start,
        end,
        limit: parse_count(&query, "limit", 50, 1, MAX_PAGE)?,
        offset: parse_count(&query, "offset", 0, 0, i64::MAX)?,
    };
    let (account, plan) = account_and_plan(&state, &caller).await?;
    let (rows, total) = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::billing::list_transactions(&mut conn, caller.org_id, &filter).await?
    };
    let data = json!({
        "balance": balance_json(&account, &plan),
        "current_period": {
            "start": account.period_start,
            "end": account.period_end,
            "included_credits": account.included_credits,
            "credits_used": account.included_credits - account.included_remaining,
            "overage_active": account.overage_credits > 0,
        },
        "transactions": rows.iter().map(transaction_json).collect::<Vec<_>>(),
    });
    let meta = json!({ "pagination": {
        "limit": filter.limit,
        "offset": filter.offset,
        "total": total,
        "has_more": filter.offset + (rows.len() as i64) < total,
    }});
    Ok(envelope(data, meta))
}

/// Every quota bucket of the current period: limit, used, reserved (held by
/// requests in flight), remaining, and the tier multipliers that apply.
#[utoipa::path(
    tag = "billing",
    responses(
        (status = 200, description = "The credits and every quota bucket of the period", body = crate::openapi::schemas::QuotaEnvelope),
        (status = 403, description = "API key does not have required scope: usage", body = ErrorBody),
    ),
    security(("bearer" = ["usage"]))
)]
#[get("/quota")]
pub async fn get_quota(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Usage)?;
    let (account, plan) = account_and_plan(&state, &caller).await?;
    let rows = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::billing::quota_rows(&mut conn, caller.org_id, account.period_start).await?
    };
    let buckets: Vec<Value> = Bucket::ALL
        .iter()
        .map(|&bucket| {
            let row = rows.iter().find(|r| r.bucket == bucket.as_str());
            let used = row.map_or(0, |r| r.used_milli);
            let reserved = row.map_or(0, |r| r.reserved_milli);
            let limit = plan.limit(bucket);
            let tiers: serde_json::Map<String, Value> = ModelTier::ALL
                .iter()
                .map(|&tier| (tier.as_str().to_owned(), json!(bucket.multiplier(tier))))
                .collect();
            json!({
                "bucket": bucket.as_str(),
                "limit": limit,
                "used": from_milli(used),
                "reserved": from_milli(reserved),
                "remaining": limit.map(|l| from_milli((l * 1000 - used - reserved).max(0))),
                "unlimited": limit.is_none(),
                "available": limit != Some(0),
                "multipliers": tiers,
            })
        })
        .collect();
    let data = json!({
        "plan": plan.code,
        "period": period_json(&account),
        "credits": {
            "bucket": CREDITS,
            "limit": account.included_credits,
            "used": account.included_credits - account.included_remaining,
            "remaining": account.included_remaining,
            "purchased": account.purchased_balance,
            "reserved": account.reserved_credits,
        },
        "buckets": buckets,
    });
    Ok(envelope(data, json!({})))
}

fn overage_status_json(account: &BillingAccount, plan: &Plan) -> Value {
    let rate = plan.overage_rate_micros.unwrap_or(0);
    json!({
        "enabled": account.overage_enabled,
        "available": plan.overage_rate_micros.is_some(),
        "rate_per_credit": usd(rate),
        "current_usage": {
            "credits": account.overage_credits,
            "cost": usd(account.overage_credits * rate),
            "billing_period": period_json(account),
        },
        "limits": {
            "soft_limit": account.soft_limit,
            "soft_limit_reached": account.soft_limit.is_some_and(|l| account.overage_credits >= l),
            "hard_limit": account.hard_limit,
            "hard_limit_reached": account.hard_limit.is_some_and(|l| account.overage_credits >= l),
        },
        "notifications": {
            "email_alerts": account.notification_email.is_some(),
            "email": account.notification_email,
            "webhook_enabled": true,
            "thresholds": account.notification_thresholds,
            "last_notification": account.last_notification_at,
        },
    })
}

/// Pay-as-you-go overage: settings, this period's overage and the limits.
#[utoipa::path(
    tag = "billing",
    responses(
        (status = 200, description = "The overage settings and this period's overage", body = crate::openapi::schemas::OverageEnvelope),
        (status = 403, description = "API key does not have required scope: usage", body = ErrorBody),
    ),
    security(("bearer" = ["usage"]))
)]
#[get("/overage/status")]
pub async fn get_overage_status(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Usage)?;
    let (account, plan) = account_and_plan(&state, &caller).await?;
    Ok(envelope(overage_status_json(&account, &plan), json!({})))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OverageConfigureRequest {
    #[schema(required = true, nullable = false)]
    pub enabled: Option<bool>,
    /// Overage credits per period at which a notification is sent.
    #[schema(minimum = 1)]
    pub soft_limit: Option<i64>,
    /// Overage credits per period at which consuming requests get 402.
    #[schema(minimum = 1)]
    pub hard_limit: Option<i64>,
    pub notification_email: Option<String>,
}

impl OverageConfigureRequest {
    fn validate(self) -> Result<OverageSettings, ApiError> {
        let enabled = self
            .enabled
            .ok_or_else(|| invalid("enabled", "enabled is required (true or false)"))?;
        Ok(OverageSettings::new(
            enabled,
            self.soft_limit,
            self.hard_limit,
            self.notification_email,
        )?)
    }
}

/// Turns overage on or off and sets its limits; answers the new status.
#[utoipa::path(
    tag = "billing",
    request_body = OverageConfigureRequest,
    responses(
        (status = 200, description = "The overage status after the change", body = crate::openapi::schemas::OverageEnvelope),
        (status = 400, description = "An invalid field; `param` names it", body = ErrorBody),
        (status = 403, description = "`not_available_on_plan`: no overage on the plan (enabling it); or scope `usage` missing", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
    ),
    security(("bearer" = ["usage"]))
)]
#[post("/overage/configure")]
pub async fn configure_overage(
    state: web::Data<AppState>,
    caller: Caller,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Usage)?;
    let settings = json_body::<OverageConfigureRequest>(&body)?.validate()?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let (account, plan) =
        match queries::billing::change_overage(&mut conn, caller.org_id, &settings).await? {
            OverageChange::Applied(applied) => *applied,
            OverageChange::NotOnPlan(plan) => {
                return Err(ApiError::NotOnPlan(format!(
                    "overage is not available on the {plan} plan"
                )));
            }
        };
    Ok(envelope(overage_status_json(&account, &plan), json!({})))
}

/// The spec's account information: account, subscription with features,
/// billing with overage settings.
#[utoipa::path(
    tag = "billing",
    responses(
        (status = 200, description = "The account, its subscription and billing settings", body = crate::openapi::schemas::AccountEnvelope),
        (status = 403, description = "API key does not have required scope: usage", body = ErrorBody),
    ),
    security(("bearer" = ["usage"]))
)]
#[get("/account")]
pub async fn get_account(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Usage)?;
    let (account, plan) = account_and_plan(&state, &caller).await?;
    let org = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::orgs::find(&mut conn, caller.org_id)
            .await?
            .ok_or_else(|| ApiError::internal(anyhow::anyhow!("caller's org is gone")))?
    };
    let available = |bucket: Bucket| plan.limit(bucket) != Some(0);
    let available_models: Vec<&str> = state
        .catalogue
        .all()
        .iter()
        .filter(|m| match m.category {
            ModelCategory::Video => available(Bucket::VideoSeconds),
            ModelCategory::Music => available(Bucket::MusicTracks),
            ModelCategory::Audio => available(Bucket::TtsChars) || available(Bucket::SttSeconds),
            ModelCategory::Image => available(Bucket::ImageGenerations),
            ModelCategory::Chat | ModelCategory::Embedding => available(Bucket::ChatTokens),
        })
        .map(|m| m.id.as_str())
        .collect();
    let features: Vec<&str> = [
        ("chat:completions", available(Bucket::ChatTokens)),
        ("embeddings", true),
        ("images:generations", available(Bucket::ImageGenerations)),
        ("images:edits", available(Bucket::ImageEdits)),
        ("videos:generations", available(Bucket::VideoSeconds)),
        ("audio:speech", available(Bucket::TtsChars)),
        ("audio:transcriptions", available(Bucket::SttSeconds)),
        ("music:generations", available(Bucket::MusicTracks)),
        ("agents", available(Bucket::AgentRuns)),
        ("webhooks", plan.max_webhooks > 0),
        ("jobs", true),
        ("usage", true),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    let data = json!({
        "account": {
            "id": org.id,
            "name": org.name,
            "email": org.email,
            "created_at": org.created_at,
            "status": org.status,
        },
        "subscription": {
            "plan": plan.code,
            "plan_name": plan.name,
            "status": "active",
            "current_period": period_json(&account),
            "features": {
                "included_credits": plan.included_credits,
                "overage_enabled": account.overage_enabled,
                "overage_rate": plan.overage_rate_micros.map(usd),
                "rate_limit": plan.rate_limit_per_minute,
                "concurrent_requests": plan.concurrent_requests,
                "available_models": available_models,
                "api_features": features,
            },
        },
        "billing": {
            "payment_method": Value::Null,
            "next_billing_date": account.period_end,
            "auto_renew": true,
            "overage_settings": {
                "enabled": account.overage_enabled,
                "soft_limit": account.soft_limit,
                "hard_limit": account.hard_limit,
                "notification_thresholds": account.notification_thresholds,
            },
        },
    });
    Ok(envelope(data, json!({})))
}
