//! Metering SQL: billing accounts and periods, quota buckets, reservations,
//! the credit ledger and usage records. Every function that changes balances
//! first locks the organization's `billing_accounts` row, so one
//! organization's charges are serialized (and never deadlock: the account is
//! always the first lock taken) while organizations never wait on each other.

use chrono::{DateTime, Datelike, Months, TimeZone, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::billing::{
    AccountSnapshot, Bucket, BucketReport, CREDITS, Charge, Estimate, LOW_PERCENT, Refusal,
    Settled, from_milli,
};
use crate::db::DbError;
use crate::db::models::{
    BillingAccount, CreditTransaction, Event, Plan, QuotaUsage, Reservation, UsageRecord,
};
use crate::db::queries;
use crate::db::schema::{
    billing_accounts, credit_transactions, organizations, plans, quota_usage, reservations,
    usage_records,
};
use crate::events;

/// The calendar month (UTC) that contains `at`: billing periods are months.
pub fn period_containing(at: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    let start = Utc
        .with_ymd_and_hms(at.year(), at.month(), 1, 0, 0, 0)
        .single()
        .expect("the first of a month at midnight UTC exists");
    (start, start + Months::new(1))
}

pub async fn plan_of_org(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<Plan, DbError> {
    Ok(organizations::table
        .inner_join(plans::table)
        .filter(organizations::id.eq(org_id))
        .select(Plan::as_select())
        .first(conn)
        .await?)
}

/// The account without locking it (`None` before the first charge).
pub async fn find_account(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
) -> Result<Option<BillingAccount>, DbError> {
    Ok(billing_accounts::table
        .find(org_id)
        .select(BillingAccount::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Locks the organization's account for this transaction, creating it (with
/// the period's `allocation`) on first use and rolling the period over when
/// it has ended. Call inside a transaction.
pub async fn lock_account(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
) -> Result<(BillingAccount, Plan), DbError> {
    // Two statements in the common case. (Joining the plan into the locking
    // SELECT would lock the plan's row too: every organization on the plan
    // would then wait on each other.)
    let plan = plan_of_org(conn, org_id).await?;
    let found: Option<BillingAccount> = billing_accounts::table
        .find(org_id)
        .for_update()
        .select(BillingAccount::as_select())
        .first(conn)
        .await
        .optional()?;
    let now = Utc::now();
    let (start, end) = period_containing(now);
    let mut account = match found {
        Some(account) => account,
        None => create_account(conn, &plan, start, end, org_id).await?,
    };
    if account.period_end <= now {
        account = roll_over(conn, account, &plan, start, end).await?;
    }
    Ok((account, plan))
}

/// The first look at an organization's billing: its account and the
/// period's `allocation` (a concurrent first look waits, then finds it).
async fn create_account(
    conn: &mut AsyncPgConnection,
    plan: &Plan,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    org_id: Uuid,
) -> Result<BillingAccount, DbError> {
    let created = diesel::insert_into(billing_accounts::table)
        .values((
            billing_accounts::org_id.eq(org_id),
            billing_accounts::period_start.eq(start),
            billing_accounts::period_end.eq(end),
            billing_accounts::included_credits.eq(plan.included_credits),
            billing_accounts::included_remaining.eq(plan.included_credits),
        ))
        .on_conflict_do_nothing()
        .execute(conn)
        .await?;
    let account: BillingAccount = billing_accounts::table
        .find(org_id)
        .for_update()
        .select(BillingAccount::as_select())
        .first(conn)
        .await?;
    if created == 1 {
        insert_transaction(
            conn,
            &account,
            "allocation",
            plan.included_credits,
            &format!("{} plan: included credits", plan.name),
            json!({ "plan": plan.code, "period": period_label(start) }),
        )
        .await?;
    }
    Ok(account)
}

fn period_label(start: DateTime<Utc>) -> String {
    start.format("%Y-%m").to_string()
}

/// Starts the period `[start, end)`: included credits are re-allocated (the
/// unused ones expire, the overage of the closed period is billed in money),
/// purchased credits stay, notification flags reset. One `allocation`
/// transaction brings the balance to `included + purchased`.
async fn roll_over(
    conn: &mut AsyncPgConnection,
    account: BillingAccount,
    plan: &Plan,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Result<BillingAccount, DbError> {
    let before = account.balance();
    let rolled: BillingAccount = diesel::update(billing_accounts::table.find(account.org_id))
        .set((
            billing_accounts::period_start.eq(start),
            billing_accounts::period_end.eq(end),
            billing_accounts::included_credits.eq(plan.included_credits),
            billing_accounts::included_remaining.eq(plan.included_credits),
            billing_accounts::overage_credits.eq(0),
            billing_accounts::soft_limit_notified.eq(false),
            billing_accounts::credits_low_notified.eq(false),
            billing_accounts::credits_depleted_notified.eq(false),
        ))
        .returning(BillingAccount::as_returning())
        .get_result(conn)
        .await?;
    insert_transaction(
        conn,
        &rolled,
        "allocation",
        rolled.balance() - before,
        &format!(
            "{} plan: included credits for {}",
            plan.name,
            period_label(start)
        ),
        json!({
            "plan": plan.code,
            "period": period_label(start),
            "expired_included": account.included_remaining,
            "overage_billed": account.overage_credits,
        }),
    )
    .await?;
    Ok(rolled)
}

/// Accounts whose period has ended, locked for the scheduler's rollover.
pub async fn lock_due_for_rollover(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> Result<Vec<Uuid>, DbError> {
    Ok(billing_accounts::table
        .filter(billing_accounts::period_end.le(diesel::dsl::now))
        .order(billing_accounts::period_end.asc())
        .limit(limit)
        .for_update()
        .skip_locked()
        .select(billing_accounts::org_id)
        .load(conn)
        .await?)
}

async fn insert_transaction(
    conn: &mut AsyncPgConnection,
    account: &BillingAccount,
    kind: &str,
    amount: i64,
    description: &str,
    metadata: Value,
) -> Result<(), DbError> {
    let row = CreditTransaction {
        id: Uuid::now_v7(),
        org_id: account.org_id,
        kind: kind.to_owned(),
        amount,
        balance_after: account.balance(),
        description: description.to_owned(),
        metadata,
        created_at: Utc::now(),
    };
    diesel::insert_into(credit_transactions::table)
        .values(&row)
        .execute(conn)
        .await?;
    Ok(())
}

/// The bucket row of a period (created empty on first use), locked through
/// the account lock the caller holds.
async fn quota_row(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    period_start: DateTime<Utc>,
    bucket: Bucket,
) -> Result<QuotaUsage, DbError> {
    let key = (org_id, period_start, bucket.as_str());
    if let Some(row) = quota_usage::table
        .find(key)
        .select(QuotaUsage::as_select())
        .first(conn)
        .await
        .optional()?
    {
        return Ok(row);
    }
    diesel::insert_into(quota_usage::table)
        .values((
            quota_usage::org_id.eq(org_id),
            quota_usage::period_start.eq(period_start),
            quota_usage::bucket.eq(bucket.as_str()),
        ))
        .on_conflict_do_nothing()
        .execute(conn)
        .await?;
    Ok(quota_usage::table
        .find(key)
        .select(QuotaUsage::as_select())
        .first(conn)
        .await?)
}

/// Every bucket of the current period (absent rows are empty buckets).
pub async fn quota_rows(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    period_start: DateTime<Utc>,
) -> Result<Vec<QuotaUsage>, DbError> {
    Ok(quota_usage::table
        .filter(quota_usage::org_id.eq(org_id))
        .filter(quota_usage::period_start.eq(period_start))
        .select(QuotaUsage::as_select())
        .load(conn)
        .await?)
}

/// Credits not yet spoken for: the balance minus what reservations hold.
fn credits_available(account: &BillingAccount) -> i64 {
    account.included_remaining + account.purchased_balance - account.reserved_credits
}

/// Holds `estimate` for request `id` (a job id, or a sync request's id with
/// `expires_at`). `Ok(Err(refusal))` changes nothing. Call inside a
/// transaction: a refusal should roll back whatever else it wrote.
pub async fn reserve(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    estimate: &Estimate,
    expires_at: Option<DateTime<Utc>>,
) -> Result<Result<(), Refusal>, DbError> {
    let (account, plan) = lock_account(conn, org_id).await?;
    let mut bucket_row_exists = false;
    if let Some((bucket, milli)) = estimate.bucket
        && let Some(limit) = bucket.limit(&plan)
    {
        let row = quota_row(conn, org_id, account.period_start, bucket).await?;
        bucket_row_exists = true;
        let remaining = limit * 1000 - row.used_milli - row.reserved_milli;
        if limit == 0 || milli > remaining {
            return Ok(Err(Refusal::Quota {
                bucket: bucket.as_str().to_owned(),
                remaining: from_milli(remaining.max(0)),
            }));
        }
    }
    let available = credits_available(&account);
    if estimate.credits > available {
        let overage_allowed = account.overage_enabled && plan.overage_rate_micros.is_some();
        if !overage_allowed {
            return Ok(Err(Refusal::Quota {
                bucket: CREDITS.to_owned(),
                remaining: available.max(0) as f64,
            }));
        }
        // In-flight reservations beyond the balance count as overage too.
        let overage_needed = estimate.credits - available;
        if let Some(hard_limit) = account.hard_limit
            && account.overage_credits + overage_needed > hard_limit
        {
            return Ok(Err(Refusal::HardLimit { hard_limit }));
        }
    }
    diesel::update(billing_accounts::table.find(org_id))
        .set(
            billing_accounts::reserved_credits
                .eq(billing_accounts::reserved_credits + estimate.credits),
        )
        .execute(conn)
        .await?;
    let (bucket, bucket_milli) = match estimate.bucket {
        Some((bucket, milli)) => {
            if !bucket_row_exists {
                quota_row(conn, org_id, account.period_start, bucket).await?;
            }
            diesel::update(quota_usage::table.find((
                org_id,
                account.period_start,
                bucket.as_str(),
            )))
            .set(quota_usage::reserved_milli.eq(quota_usage::reserved_milli + milli))
            .execute(conn)
            .await?;
            (Some(bucket.as_str().to_owned()), milli)
        }
        None => (None, 0),
    };
    diesel::insert_into(reservations::table)
        .values(&Reservation {
            id,
            org_id,
            credits: estimate.credits,
            bucket,
            bucket_milli,
            period_start: account.period_start,
            expires_at,
            created_at: Utc::now(),
        })
        .execute(conn)
        .await?;
    Ok(Ok(()))
}

/// Removes a reservation and gives back what it held. `None`: already
/// settled or released.
async fn take_reservation(
    conn: &mut AsyncPgConnection,
    id: Uuid,
) -> Result<Option<(Reservation, BillingAccount, Plan)>, DbError> {
    let org_id: Option<Uuid> = reservations::table
        .find(id)
        .select(reservations::org_id)
        .first(conn)
        .await
        .optional()?;
    let Some(org_id) = org_id else {
        return Ok(None);
    };
    let (_, plan) = lock_account(conn, org_id).await?;
    // Deleted under the account lock: a racing settle/release finds nothing.
    let Some(reservation) = diesel::delete(reservations::table.find(id))
        .returning(Reservation::as_returning())
        .get_result(conn)
        .await
        .optional()?
    else {
        return Ok(None);
    };
    let account = diesel::update(billing_accounts::table.find(org_id))
        .set(
            billing_accounts::reserved_credits
                .eq(billing_accounts::reserved_credits - reservation.credits),
        )
        .returning(BillingAccount::as_returning())
        .get_result(conn)
        .await?;
    if let Some(bucket) = &reservation.bucket {
        diesel::update(quota_usage::table.find((
            org_id,
            reservation.period_start,
            bucket.as_str(),
        )))
        .set(quota_usage::reserved_milli.eq(quota_usage::reserved_milli - reservation.bucket_milli))
        .execute(conn)
        .await?;
    }
    Ok(Some((reservation, account, plan)))
}

/// Releases a reservation without charging (failure, cancel, expiry) and
/// records the request's usage row, if given, with zero credits.
pub async fn release(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    usage: Option<UsageRecord>,
) -> Result<bool, DbError> {
    let released = take_reservation(conn, id).await?.is_some();
    if let Some(mut usage) = usage {
        usage.credits = 0;
        insert_usage(conn, &usage).await?;
    }
    Ok(released)
}

/// Sync requests whose API process died before settling.
pub async fn expired_reservations(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> Result<Vec<Uuid>, DbError> {
    Ok(reservations::table
        .filter(reservations::expires_at.le(diesel::dsl::now))
        .order(reservations::expires_at.asc())
        .limit(limit)
        .select(reservations::id)
        .load(conn)
        .await?)
}

pub async fn insert_usage(
    conn: &mut AsyncPgConnection,
    usage: &UsageRecord,
) -> Result<(), DbError> {
    diesel::insert_into(usage_records::table)
        .values(usage)
        .on_conflict_do_nothing()
        .execute(conn)
        .await?;
    Ok(())
}

/// Charges `charge` against reservation `id`: credits draw on the included
/// ones first, then purchased, then overage; the bucket is charged in the
/// reservation's period. Writes the ledger rows, the usage record and the
/// billing events. `None`: the reservation was already settled or released.
pub async fn settle(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    charge: &Charge,
    multiplier: f64,
    usage: &UsageRecord,
) -> Result<Option<Settled>, DbError> {
    let Some((reservation, account, plan)) = take_reservation(conn, id).await? else {
        return Ok(None);
    };
    let org_id = account.org_id;
    let credits = charge.credits.max(0);
    let from_included = credits.min(account.included_remaining);
    let from_purchased = (credits - from_included).min(account.purchased_balance);
    let overage = credits - from_included - from_purchased;
    let account: BillingAccount = diesel::update(billing_accounts::table.find(org_id))
        .set((
            billing_accounts::included_remaining
                .eq(billing_accounts::included_remaining - from_included),
            billing_accounts::purchased_balance
                .eq(billing_accounts::purchased_balance - from_purchased),
            billing_accounts::overage_credits.eq(billing_accounts::overage_credits + overage),
        ))
        .returning(BillingAccount::as_returning())
        .get_result(conn)
        .await?;
    let consumed = from_included + from_purchased;
    let endpoint_metadata = json!({
        "request_id": usage.id,
        "model": usage.model,
        "endpoint": usage.endpoint,
    });
    if consumed > 0 {
        // balance_after of each row: the consumption row precedes the overage row.
        let mut at_consumption = account.clone();
        at_consumption.overage_credits -= overage;
        let mut metadata = endpoint_metadata.clone();
        metadata["included"] = json!(from_included);
        metadata["purchased"] = json!(from_purchased);
        insert_transaction(
            conn,
            &at_consumption,
            "consumption",
            -consumed,
            &format!("{} {}", usage.endpoint, usage.model),
            metadata,
        )
        .await?;
    }
    if overage > 0 {
        let rate = plan.overage_rate_micros.unwrap_or(0);
        let mut metadata = endpoint_metadata;
        metadata["rate"] = json!(crate::billing::usd(rate));
        metadata["cost"] = json!(crate::billing::usd(rate * overage));
        metadata["billing_status"] = json!("pending");
        insert_transaction(
            conn,
            &account,
            "overage",
            -overage,
            &format!("Overage: {} {}", usage.endpoint, usage.model),
            metadata,
        )
        .await?;
    }
    let mut events_recorded = false;
    let bucket = match reservation
        .bucket
        .as_deref()
        .and_then(|b| b.parse::<Bucket>().ok())
    {
        Some(bucket) => {
            let row: QuotaUsage = diesel::update(quota_usage::table.find((
                org_id,
                reservation.period_start,
                bucket.as_str(),
            )))
            .set(quota_usage::used_milli.eq(quota_usage::used_milli + charge.bucket_milli.max(0)))
            .returning(QuotaUsage::as_returning())
            .get_result(conn)
            .await?;
            let remaining = bucket
                .limit(&plan)
                .map(|limit| (limit * 1000 - row.used_milli - row.reserved_milli).max(0));
            events_recorded |= notify_bucket(conn, &row, bucket, bucket.limit(&plan)).await?;
            Some(BucketReport {
                bucket,
                used_milli: charge.bucket_milli.max(0),
                remaining_milli: remaining,
                multiplier,
            })
        }
        None => None,
    };
    insert_usage(
        conn,
        &UsageRecord {
            credits,
            ..usage.clone()
        },
    )
    .await?;
    events_recorded |= notify_credits(conn, &account, &plan).await?;
    Ok(Some(Settled {
        credits,
        from_included,
        from_purchased,
        overage,
        bucket,
        account: snapshot(&account, &plan),
        events_recorded,
    }))
}

pub fn snapshot(account: &BillingAccount, plan: &Plan) -> AccountSnapshot {
    AccountSnapshot {
        credits_remaining: credits_available(account).max(0),
        overage_enabled: account.overage_enabled,
        overage_credits: account.overage_credits,
        overage_rate_micros: plan.overage_rate_micros,
    }
}

/// `credits.low` once per period when a bucket falls below 10% of its
/// limit, `credits.depleted` once when it is used up.
async fn notify_bucket(
    conn: &mut AsyncPgConnection,
    row: &QuotaUsage,
    bucket: Bucket,
    limit: Option<i64>,
) -> Result<bool, DbError> {
    let Some(limit) = limit.filter(|l| *l > 0) else {
        return Ok(false);
    };
    let remaining_milli = (limit * 1000 - row.used_milli).max(0);
    let key = quota_usage::table.find((row.org_id, row.period_start, bucket.as_str()));
    if remaining_milli == 0 && !row.depleted_notified {
        diesel::update(key)
            .set((
                quota_usage::depleted_notified.eq(true),
                quota_usage::low_notified.eq(true),
            ))
            .execute(conn)
            .await?;
        let event = events::credits_depleted(row.org_id, bucket.as_str(), limit);
        queries::events::insert(conn, &event).await?;
        return Ok(true);
    } else if remaining_milli * 100 < limit * 1000 * LOW_PERCENT && !row.low_notified {
        diesel::update(key)
            .set(quota_usage::low_notified.eq(true))
            .execute(conn)
            .await?;
        let event = events::credits_low(
            row.org_id,
            bucket.as_str(),
            from_milli(remaining_milli),
            limit,
            row.used_milli,
        );
        queries::events::insert(conn, &event).await?;
        return Ok(true);
    }
    Ok(false)
}

/// The same notifications for the credit balance, plus the overage soft
/// limit (notify only; usage continues).
async fn notify_credits(
    conn: &mut AsyncPgConnection,
    account: &BillingAccount,
    plan: &Plan,
) -> Result<bool, DbError> {
    let org_id = account.org_id;
    let key = billing_accounts::table.find(org_id);
    let remaining = (account.included_remaining + account.purchased_balance).max(0);
    let allotted = account.included_credits + account.purchased_balance;
    let mut recorded: Vec<Event> = Vec::new();
    if remaining == 0 && allotted > 0 && !account.credits_depleted_notified {
        diesel::update(key)
            .set((
                billing_accounts::credits_depleted_notified.eq(true),
                billing_accounts::credits_low_notified.eq(true),
            ))
            .execute(conn)
            .await?;
        recorded.push(events::credits_depleted(org_id, CREDITS, allotted));
    } else if allotted > 0
        && remaining * 100 < allotted * LOW_PERCENT
        && !account.credits_low_notified
    {
        diesel::update(key)
            .set(billing_accounts::credits_low_notified.eq(true))
            .execute(conn)
            .await?;
        recorded.push(events::credits_low(
            org_id,
            CREDITS,
            remaining as f64,
            allotted,
            (allotted - remaining) * 1000,
        ));
    }
    if let Some(soft_limit) = account.soft_limit
        && account.overage_credits >= soft_limit
        && !account.soft_limit_notified
    {
        diesel::update(key)
            .set((
                billing_accounts::soft_limit_notified.eq(true),
                billing_accounts::last_notification_at.eq(diesel::dsl::now),
            ))
            .execute(conn)
            .await?;
        let rate = plan.overage_rate_micros.unwrap_or(0);
        recorded.push(events::overage_soft_limit(
            org_id,
            account.overage_credits,
            soft_limit,
            crate::billing::usd(rate * account.overage_credits),
        ));
    }
    for event in &recorded {
        queries::events::insert(conn, event).await?;
    }
    Ok(!recorded.is_empty())
}

/// Adds purchased credits (a `purchase` transaction).
pub async fn purchase(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    credits: i64,
    note: &str,
) -> Result<BillingAccount, DbError> {
    lock_account(conn, org_id).await?;
    let account: BillingAccount = diesel::update(billing_accounts::table.find(org_id))
        .set((
            billing_accounts::purchased_balance.eq(billing_accounts::purchased_balance + credits),
            billing_accounts::credits_low_notified.eq(false),
            billing_accounts::credits_depleted_notified.eq(false),
        ))
        .returning(BillingAccount::as_returning())
        .get_result(conn)
        .await?;
    insert_transaction(
        conn,
        &account,
        "purchase",
        credits,
        note,
        json!({ "credits": credits }),
    )
    .await?;
    Ok(account)
}

/// The overage settings of `POST /overage/configure`.
#[derive(Debug, Clone)]
pub struct OverageSettings {
    pub enabled: bool,
    pub soft_limit: Option<i64>,
    pub hard_limit: Option<i64>,
    pub notification_email: Option<String>,
}

pub async fn configure_overage(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    settings: &OverageSettings,
) -> Result<BillingAccount, DbError> {
    lock_account(conn, org_id).await?;
    Ok(diesel::update(billing_accounts::table.find(org_id))
        .set((
            billing_accounts::overage_enabled.eq(settings.enabled),
            billing_accounts::soft_limit.eq(settings.soft_limit),
            billing_accounts::hard_limit.eq(settings.hard_limit),
            billing_accounts::notification_email.eq(settings.notification_email.as_deref()),
            // A new soft limit may notify again.
            billing_accounts::soft_limit_notified.eq(false),
        ))
        .returning(BillingAccount::as_returning())
        .get_result(conn)
        .await?)
}

/// A page of the ledger, newest first, with the total matching.
pub struct TransactionFilter {
    pub kind: Option<String>,
    pub start: Option<DateTime<Utc>>,
    pub end: Option<DateTime<Utc>>,
    pub limit: i64,
    pub offset: i64,
}

pub async fn list_transactions(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    filter: &TransactionFilter,
) -> Result<(Vec<CreditTransaction>, i64), DbError> {
    let query = || {
        let mut query = credit_transactions::table
            .filter(credit_transactions::org_id.eq(org_id))
            .into_boxed();
        if let Some(kind) = &filter.kind {
            query = query.filter(credit_transactions::kind.eq(kind.clone()));
        }
        if let Some(start) = filter.start {
            query = query.filter(credit_transactions::created_at.ge(start));
        }
        if let Some(end) = filter.end {
            query = query.filter(credit_transactions::created_at.lt(end));
        }
        query
    };
    let total: i64 = query().count().get_result(conn).await?;
    let rows = query()
        .order((
            credit_transactions::created_at.desc(),
            credit_transactions::id.desc(),
        ))
        .limit(filter.limit)
        .offset(filter.offset)
        .select(CreditTransaction::as_select())
        .load(conn)
        .await?;
    Ok((rows, total))
}

/// Sum of the ledger, for the invariant check.
pub async fn ledger_sum(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<i64, DbError> {
    #[derive(QueryableByName)]
    struct Sum {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        sum: i64,
    }
    let row: Sum = diesel::sql_query(
        "SELECT COALESCE(SUM(amount), 0)::BIGINT AS sum FROM credit_transactions WHERE org_id = $1",
    )
    .bind::<diesel::sql_types::Uuid, _>(org_id)
    .get_result(conn)
    .await?;
    Ok(row.sum)
}

/// Moves the organization to `plan_code`. Bucket limits follow at once; the
/// period's included credits become the new plan's allowance minus what the
/// period already used (an `allocation` of the difference, which may be
/// negative on a downgrade). Records `subscription.updated`.
pub async fn change_plan(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    plan_code: &str,
) -> Result<BillingAccount, DbError> {
    let (account, _) = lock_account(conn, org_id).await?;
    diesel::update(organizations::table.find(org_id))
        .set(organizations::plan_code.eq(plan_code))
        .execute(conn)
        .await?;
    let plan = plan_of_org(conn, org_id).await?;
    let used = account.included_credits - account.included_remaining;
    let remaining = (plan.included_credits - used).max(0);
    let updated: BillingAccount = diesel::update(billing_accounts::table.find(org_id))
        .set((
            billing_accounts::included_credits.eq(plan.included_credits),
            billing_accounts::included_remaining.eq(remaining),
            // Overage only where the new plan has it.
            billing_accounts::overage_enabled
                .eq(account.overage_enabled && plan.overage_rate_micros.is_some()),
        ))
        .returning(BillingAccount::as_returning())
        .get_result(conn)
        .await?;
    insert_transaction(
        conn,
        &updated,
        "allocation",
        updated.balance() - account.balance(),
        &format!("Plan changed to {}", plan.name),
        json!({ "plan": plan.code, "period": period_label(updated.period_start) }),
    )
    .await?;
    queries::events::insert(
        conn,
        &events::subscription(org_id, &plan, events::SUBSCRIPTION_UPDATED),
    )
    .await?;
    Ok(updated)
}
