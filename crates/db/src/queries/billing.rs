//! Metering SQL: billing accounts and periods, quota buckets, reservations,
//! the credit ledger and usage records. Every change of balances first locks
//! the organization's `billing_accounts` row, so one organization's charges
//! are serialized (and never deadlock: the account is the first billing lock
//! taken) while organizations never wait on each other. The hot path
//! (reserve, settle, release) runs as the server-side functions of migration
//! `2026-11-22-090000_billing_functions`, one round trip each, so the lock is
//! held for microseconds rather than across a dozen network round trips.

use chrono::{DateTime, Datelike, Months, TimeZone, Utc};
use diesel::prelude::*;
use diesel::sql_types::{
    Array, BigInt, Bool, Double, Jsonb, Nullable, Text, Timestamptz, Uuid as SqlUuid,
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::billing::{
    AccountSnapshot, Bucket, BucketReport, CREDITS, Charge, Estimate, Refusal, Settled,
};
use crate::prepared::PrepareOnce;

use crate::models::{BillingAccount, CreditTransaction, Plan, QuotaUsage, UsageRecord};
use crate::schema::{
    billing_accounts, credit_transactions, organizations, plans, quota_usage, reservations,
};
use crate::{DbError, events, queries};

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

/// The account with the organization's plan, unlocked, in one round trip
/// (`None` before the first charge).
async fn find_account_and_plan(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
) -> Result<Option<(BillingAccount, Plan)>, DbError> {
    Ok(billing_accounts::table
        .inner_join(organizations::table.inner_join(plans::table))
        .filter(billing_accounts::org_id.eq(org_id))
        .select((BillingAccount::as_select(), Plan::as_select()))
        .first(conn)
        .await
        .optional()?)
}

/// The balances a response's credit headers report (`None` before the
/// account's first charge).
pub async fn account_snapshot(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
) -> Result<Option<AccountSnapshot>, DbError> {
    Ok(find_account_and_plan(conn, org_id)
        .await?
        .map(|(account, plan)| snapshot(&account, &plan)))
}

/// The account and plan as they stand, for reading: no lock unless the
/// account must first be created or its period rolled over (then through
/// [`lock_account`] in a transaction of its own).
pub async fn current_account(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
) -> Result<(BillingAccount, Plan), DbError> {
    match find_account_and_plan(conn, org_id).await? {
        Some((account, plan)) if account.period_end > Utc::now() => Ok((account, plan)),
        _ => {
            use diesel_async::AsyncConnection;
            conn.transaction::<_, DbError, _>(async |conn| lock_account(conn, org_id).await)
                .await
        }
    }
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

#[derive(QueryableByName)]
pub(crate) struct Reserved {
    #[diesel(sql_type = Text)]
    pub(crate) outcome: String,
    #[diesel(sql_type = Double)]
    remaining: f64,
    #[diesel(sql_type = Nullable<BigInt>)]
    hard_limit: Option<i64>,
}

/// Holds `estimate` for request `id` (a job id, or a sync request's id with
/// `expires_at`). `Ok(Err(refusal))` changes nothing. One statement
/// (`unigen_reserve`, see its migration) unless the account must first be
/// created or rolled over; inside a transaction, the hold commits with it.
pub async fn reserve(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    estimate: &Estimate,
    expires_at: Option<DateTime<Utc>>,
) -> Result<Result<(), Refusal>, DbError> {
    let (bucket, milli) = match estimate.bucket {
        Some((bucket, milli)) => (Some(bucket.as_str()), milli),
        None => (None, 0),
    };
    let call = async |conn: &mut AsyncPgConnection| -> Result<Reserved, DbError> {
        Ok(diesel::sql_query(
            "SELECT outcome, remaining, hard_limit FROM unigen_reserve($1, $2, $3, $4, $5, $6)",
        )
        .bind::<SqlUuid, _>(org_id)
        .bind::<SqlUuid, _>(id)
        .bind::<BigInt, _>(estimate.credits)
        .bind::<Nullable<Text>, _>(bucket)
        .bind::<BigInt, _>(milli)
        .bind::<Nullable<Timestamptz>, _>(expires_at)
        .prepared()
        .get_result(conn)
        .await?)
    };
    let mut reserved = call(conn).await?;
    if reserved.outcome == "setup" {
        setup_account(conn, org_id).await?;
        reserved = call(conn).await?;
    }
    reservation_outcome(reserved, bucket)
}

/// `unigen_reserve`'s answer: held, refused, or an outcome it never gives.
pub(crate) fn reservation_outcome(
    reserved: Reserved,
    bucket: Option<&str>,
) -> Result<Result<(), Refusal>, DbError> {
    Ok(match reserved.outcome.as_str() {
        "ok" => Ok(()),
        "quota" => Err(Refusal::Quota {
            bucket: bucket.unwrap_or(CREDITS).to_owned(),
            remaining: reserved.remaining,
        }),
        "credits" => Err(Refusal::Quota {
            bucket: CREDITS.to_owned(),
            remaining: reserved.remaining,
        }),
        "hard_limit" => Err(Refusal::HardLimit {
            hard_limit: reserved.hard_limit.unwrap_or(0),
        }),
        other => {
            return Err(DbError::Query(diesel::result::Error::DeserializationError(
                format!("unigen_reserve answered `{other}`").into(),
            )));
        }
    })
}

/// The positions of `items` in organization order. Batches lock accounts in
/// that one order, so two batches never wait on each other's locks.
pub(crate) fn organization_order<T>(items: &[T], org: impl Fn(&T) -> Uuid) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| org(&items[i]));
    order
}

/// Puts answers that came in `order` (1-based `ord` per answer) back in
/// the items' own order.
pub(crate) fn in_item_order<O>(order: &[usize], answers: Vec<(i64, O)>) -> Vec<O> {
    let mut slots: Vec<Option<O>> = (0..order.len()).map(|_| None).collect();
    for (ord, answer) in answers {
        slots[order[(ord - 1) as usize]] = Some(answer);
    }
    slots
        .into_iter()
        .map(|slot| slot.expect("one answer per item"))
        .collect()
}

/// Grows open reservation `id` by `credits` under the rules of [`reserve`]
/// (an agent run reserves each turn and tool call before it happens).
/// `Ok(Err(refusal))` changes nothing; a reservation that is gone (settled,
/// released or expired) is refused as if the credits had run out.
pub async fn reserve_more(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    credits: i64,
) -> Result<Result<(), Refusal>, DbError> {
    let reserved: Reserved =
        diesel::sql_query("SELECT outcome, remaining, hard_limit FROM unigen_reserve_more($1, $2)")
            .bind::<SqlUuid, _>(id)
            .bind::<BigInt, _>(credits)
            .prepared()
            .get_result(conn)
            .await?;
    Ok(match reserved.outcome.as_str() {
        "ok" => Ok(()),
        "credits" | "missing" => Err(Refusal::Quota {
            bucket: CREDITS.to_owned(),
            remaining: reserved.remaining,
        }),
        "hard_limit" => Err(Refusal::HardLimit {
            hard_limit: reserved.hard_limit.unwrap_or(0),
        }),
        other => {
            return Err(DbError::Query(diesel::result::Error::DeserializationError(
                format!("unigen_reserve_more answered `{other}`").into(),
            )));
        }
    })
}

/// Credits and bucket units (thousandths) together: what an allowance
/// holds, or what a request needs from one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amount {
    pub credits: i64,
    pub milli: i64,
}

impl Amount {
    pub fn fits_in(self, other: Amount) -> bool {
        self.credits <= other.credits && self.milli <= other.milli
    }
}

impl std::ops::Add for Amount {
    type Output = Amount;
    fn add(self, other: Amount) -> Amount {
        Amount {
            credits: self.credits + other.credits,
            milli: self.milli + other.milli,
        }
    }
}

impl std::ops::Sub for Amount {
    type Output = Amount;
    fn sub(self, other: Amount) -> Amount {
        Amount {
            credits: self.credits - other.credits,
            milli: self.milli - other.milli,
        }
    }
}

/// A resize of an API process's allowance (see migration
/// `2026-11-25-000200_allowances`): it will hold `keep + need + extra`,
/// `extra` cut to an eighth of what would be left.
pub struct AllowanceGrowth {
    pub id: Uuid,
    pub org_id: Uuid,
    pub bucket: Option<Bucket>,
    /// What requests admitted from it still hold.
    pub keep: Amount,
    /// What the request being admitted needs (refused if it does not fit).
    pub need: Amount,
    /// What the process would like beyond that.
    pub extra: Amount,
    pub expires_at: DateTime<Utc>,
}

/// What [`grow_allowance`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Grown {
    /// The allowance now holds this much in the period `[start, end)`.
    Held {
        held: Amount,
        period_start: DateTime<Utc>,
        period_end: DateTime<Utc>,
    },
    /// The allowance belongs to an ended period: start another.
    Stale,
    /// The request does not fit, even with the allowance's free part.
    Refused(Refusal),
}

#[derive(QueryableByName)]
struct GrownRow {
    #[diesel(embed)]
    reserved: Reserved,
    #[diesel(sql_type = Nullable<BigInt>)]
    held_credits: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    held_milli: Option<i64>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    held_period_start: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    held_period_end: Option<DateTime<Utc>>,
}

/// Resizes an allowance for a request that needs more than its free part
/// (`unigen_allowance_grow`, one statement unless the account must first be
/// created or rolled over).
pub async fn grow_allowance(
    conn: &mut AsyncPgConnection,
    growth: &AllowanceGrowth,
) -> Result<Grown, DbError> {
    let bucket = growth.bucket.map(|b| b.as_str());
    let call = async |conn: &mut AsyncPgConnection| -> Result<GrownRow, DbError> {
        Ok(diesel::sql_query(
            "SELECT outcome, remaining, hard_limit, held_credits, held_milli, held_period_start,
                    held_period_end
               FROM unigen_allowance_grow($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind::<SqlUuid, _>(growth.id)
        .bind::<SqlUuid, _>(growth.org_id)
        .bind::<Nullable<Text>, _>(bucket)
        .bind::<BigInt, _>(growth.keep.credits)
        .bind::<BigInt, _>(growth.keep.milli)
        .bind::<BigInt, _>(growth.need.credits)
        .bind::<BigInt, _>(growth.need.milli)
        .bind::<BigInt, _>(growth.extra.credits)
        .bind::<BigInt, _>(growth.extra.milli)
        .bind::<Timestamptz, _>(growth.expires_at)
        .prepared()
        .get_result(conn)
        .await?)
    };
    let mut row = call(conn).await?;
    if row.reserved.outcome == "setup" {
        setup_account(conn, growth.org_id).await?;
        row = call(conn).await?;
    }
    match row.reserved.outcome.as_str() {
        "ok" => match (
            row.held_credits,
            row.held_milli,
            row.held_period_start,
            row.held_period_end,
        ) {
            (Some(credits), Some(milli), Some(period_start), Some(period_end)) => Ok(Grown::Held {
                held: Amount { credits, milli },
                period_start,
                period_end,
            }),
            _ => Err(unexpected_answer(
                "unigen_allowance_grow answered ok without the hold".into(),
            )),
        },
        "stale" => Ok(Grown::Stale),
        _ => match reservation_outcome(row.reserved, bucket)? {
            Err(refusal) => Ok(Grown::Refused(refusal)),
            Ok(()) => Err(unexpected_answer(
                "unigen_allowance_grow answered an unknown outcome".into(),
            )),
        },
    }
}

/// Gives back what an allowance holds beyond `keep`; with nothing kept its
/// row goes (`unigen_allowance_shrink`).
pub async fn shrink_allowance(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    keep: Amount,
) -> Result<(), DbError> {
    diesel::sql_query("SELECT unigen_allowance_shrink($1, $2, $3)")
        .bind::<SqlUuid, _>(id)
        .bind::<BigInt, _>(keep.credits)
        .bind::<BigInt, _>(keep.milli)
        .prepared()
        .execute(conn)
        .await?;
    Ok(())
}

/// Moves the expiry of live reservations (an API process's allowances) on;
/// answers the ids that still exist (a missing one expired and was
/// released).
pub async fn renew_reservations(
    conn: &mut AsyncPgConnection,
    ids: &[Uuid],
    expires_at: DateTime<Utc>,
) -> Result<Vec<Uuid>, DbError> {
    Ok(
        diesel::update(reservations::table.filter(reservations::id.eq_any(ids)))
            .set(reservations::expires_at.eq(expires_at))
            .returning(reservations::id)
            .get_results(conn)
            .await?,
    )
}

/// One request admitted from an allowance, for [`settle_shares`]: charged
/// `charge` (nothing when its usage record is not a success), out of the
/// `hold` it took from allowance `allowance_id`.
pub struct ShareItem {
    pub allowance_id: Uuid,
    pub period_start: DateTime<Utc>,
    pub bucket: Option<Bucket>,
    pub hold: Amount,
    pub charge: Charge,
    pub multiplier: f64,
    /// Its `id` is the request's; its `org_id` orders the batch.
    pub usage: UsageRecord,
}

/// Settles requests admitted from allowances in one statement: each
/// organization's account is locked and updated once, the ledger rows and
/// usage records inserted in one go (`unigen_settle_shares`). Answers in the
/// items' order. `Err`: the statement failed and changed nothing; an item's
/// own error (setting up its account afterwards) is that item's.
pub async fn settle_shares<T: std::borrow::Borrow<ShareItem>>(
    conn: &mut AsyncPgConnection,
    items: &[T],
) -> Result<Vec<Result<Settled, DbError>>, DbError> {
    let items: Vec<&ShareItem> = items.iter().map(|item| item.borrow()).collect();
    let mut answers: Vec<Option<Result<Settled, DbError>>> =
        (0..items.len()).map(|_| None).collect();
    let mut setup: Vec<usize> = Vec::new();
    for (index, row) in settle_shares_once(conn, &items)
        .await?
        .into_iter()
        .enumerate()
    {
        if row.outcome == "setup" {
            setup.push(index);
        } else {
            answers[index] = Some(share_settled(row, items[index]));
        }
    }
    // A new account or period: set it up, then settle those items again.
    let mut orgs: Vec<Uuid> = setup.iter().map(|&i| items[i].usage.org_id).collect();
    orgs.sort_unstable();
    orgs.dedup();
    for org in orgs {
        let indexes: Vec<usize> = setup
            .iter()
            .copied()
            .filter(|&i| items[i].usage.org_id == org)
            .collect();
        let subset: Vec<&ShareItem> = indexes.iter().map(|&i| items[i]).collect();
        let retried = match setup_account(conn, org).await {
            Ok(()) => settle_shares_once(conn, &subset).await,
            Err(err) => Err(err),
        };
        match retried {
            Ok(rows) => {
                for (&i, row) in indexes.iter().zip(rows) {
                    answers[i] = Some(share_settled(row, items[i]));
                }
            }
            Err(err) => {
                let message = err.to_string();
                for &i in &indexes {
                    answers[i] = Some(Err(unexpected_answer(message.clone())));
                }
            }
        }
    }
    Ok(answers
        .into_iter()
        .map(|answer| answer.unwrap_or_else(|| Err(unexpected_answer("no answer".into()))))
        .collect())
}

// One argument per recorded column, as the SQL function takes them.
#[allow(clippy::too_many_arguments)]
mod record_charges_sql {
    use diesel::sql_types::*;

    diesel::define_sql_function! {
    /// `unigen_record_charges` (migrations/functions.sql).
    fn unigen_record_charges(
        flush: Bool,
        request: Array<Uuid>,
        allowance: Array<Uuid>,
        org: Array<Uuid>,
        period: Array<Timestamptz>,
        bucket: Array<Nullable<Text>>,
        hold_credits: Array<BigInt>,
        hold_milli: Array<BigInt>,
        credits: Array<BigInt>,
        milli: Array<BigInt>,
        multiplier: Array<Double>,
        key: Array<Nullable<Uuid>>,
        endpoint: Array<Text>,
        method: Array<Text>,
        model: Array<Text>,
        latency: Array<BigInt>,
        status: Array<Text>,
        tools: Array<Jsonb>,
        prompt: Array<BigInt>,
        completion: Array<BigInt>,
    ) -> Integer;
    }
}
use record_charges_sql::unigen_record_charges;

/// Writes sync requests' charges to `recorded_charges`, to be settled by
/// [`settle_recorded`] off the answer's path: once this returns, a charge
/// survives a crash of the API process. With `flush` false the commit does
/// not wait for the WAL flush, and a crash of PostgreSQL itself may lose the
/// last 3 x `wal_writer_delay` of them (docs/spec-decisions.md, "Sync
/// settlement durability"). A request already recorded is left as it is, so
/// a write that failed ambiguously can be retried. The statement is built
/// by diesel, so each connection prepares it once (raw `sql_query` text is
/// parsed on every call).
pub async fn record_charges<T: std::borrow::Borrow<ShareItem>>(
    conn: &mut AsyncPgConnection,
    items: &[T],
    flush: bool,
) -> Result<(), DbError> {
    let items: Vec<&ShareItem> = items.iter().map(|item| item.borrow()).collect();
    let column = |f: &dyn Fn(&ShareItem) -> i64| items.iter().map(|i| f(i)).collect::<Vec<_>>();
    let texts = |f: &dyn Fn(&ShareItem) -> &str| items.iter().map(|i| f(i)).collect::<Vec<&str>>();
    diesel::select(unigen_record_charges(
        flush,
        items.iter().map(|i| i.usage.id).collect::<Vec<_>>(),
        items.iter().map(|i| i.allowance_id).collect::<Vec<_>>(),
        items.iter().map(|i| i.usage.org_id).collect::<Vec<_>>(),
        items.iter().map(|i| i.period_start).collect::<Vec<_>>(),
        items
            .iter()
            .map(|i| i.bucket.map(|b| b.as_str()))
            .collect::<Vec<_>>(),
        column(&|i| i.hold.credits),
        column(&|i| i.hold.milli),
        column(&|i| i.charge.credits),
        column(&|i| i.charge.bucket_milli),
        items.iter().map(|i| i.multiplier).collect::<Vec<_>>(),
        items.iter().map(|i| i.usage.api_key_id).collect::<Vec<_>>(),
        texts(&|i| &i.usage.endpoint),
        texts(&|i| &i.usage.method),
        texts(&|i| &i.usage.model),
        column(&|i| i.usage.latency_ms),
        texts(&|i| &i.usage.status),
        items
            .iter()
            .map(|i| json!(i.usage.tools_used))
            .collect::<Vec<_>>(),
        column(&|i| i.usage.prompt_tokens),
        column(&|i| i.usage.completion_tokens),
    ))
    .get_result::<i32>(conn)
    .await?;
    Ok(())
}

#[derive(QueryableByName)]
struct RecordedCharge {
    #[diesel(sql_type = SqlUuid)]
    request_id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    allowance_id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    org_id: Uuid,
    #[diesel(sql_type = Timestamptz)]
    period_start: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Text>)]
    bucket: Option<String>,
    #[diesel(sql_type = BigInt)]
    hold_credits: i64,
    #[diesel(sql_type = BigInt)]
    hold_milli: i64,
    #[diesel(sql_type = BigInt)]
    credits: i64,
    #[diesel(sql_type = BigInt)]
    bucket_milli: i64,
    #[diesel(sql_type = Double)]
    multiplier: f64,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    api_key_id: Option<Uuid>,
    #[diesel(sql_type = Text)]
    endpoint: String,
    #[diesel(sql_type = Text)]
    method: String,
    #[diesel(sql_type = Text)]
    model: String,
    #[diesel(sql_type = BigInt)]
    latency_ms: i64,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Jsonb)]
    tools_used: Value,
    #[diesel(sql_type = BigInt)]
    prompt_tokens: i64,
    #[diesel(sql_type = BigInt)]
    completion_tokens: i64,
    #[diesel(sql_type = Timestamptz)]
    recorded_at: DateTime<Utc>,
}

impl RecordedCharge {
    fn into_item(self) -> Result<ShareItem, DbError> {
        let bucket = match self.bucket.as_deref() {
            None => None,
            Some(name) => Some(name.parse::<Bucket>().map_err(|_| {
                unexpected_answer(format!("recorded charge with unknown bucket `{name}`"))
            })?),
        };
        let tools_used = serde_json::from_value(self.tools_used)
            .map_err(|err| unexpected_answer(format!("recorded charge's tools: {err}")))?;
        Ok(ShareItem {
            allowance_id: self.allowance_id,
            period_start: self.period_start,
            bucket,
            hold: Amount {
                credits: self.hold_credits,
                milli: self.hold_milli,
            },
            charge: Charge {
                credits: self.credits,
                bucket_milli: self.bucket_milli,
            },
            multiplier: self.multiplier,
            usage: UsageRecord {
                id: self.request_id,
                org_id: self.org_id,
                api_key_id: self.api_key_id,
                endpoint: self.endpoint,
                method: self.method,
                model: self.model,
                credits: 0,
                latency_ms: self.latency_ms,
                status: self.status,
                tools_used,
                prompt_tokens: self.prompt_tokens,
                completion_tokens: self.completion_tokens,
                total_tokens: self.prompt_tokens + self.completion_tokens,
                created_at: self.recorded_at,
            },
        })
    }
}

/// Settles recorded charges ([`record_charges`]) in one transaction that
/// also deletes their rows: each is settled exactly once, whichever process
/// runs it (its API process, or the scheduler for one that died). Answers
/// in `ids`' order; `None`: that id is not recorded (settled already, or
/// never written). `Err`: nothing was settled.
pub async fn settle_recorded(
    conn: &mut AsyncPgConnection,
    ids: &[Uuid],
) -> Result<Vec<Option<Settled>>, DbError> {
    use diesel_async::AsyncConnection;
    conn.transaction::<_, DbError, _>(async |conn| {
        // Rows locked in id order: two settlers never deadlock.
        let rows: Vec<RecordedCharge> = diesel::sql_query(
            "DELETE FROM recorded_charges WHERE request_id IN
                 (SELECT request_id FROM recorded_charges WHERE request_id = ANY($1)
                   ORDER BY request_id FOR UPDATE)
             RETURNING request_id, allowance_id, org_id, period_start, bucket, hold_credits,
                       hold_milli, credits, bucket_milli, multiplier, api_key_id, endpoint,
                       method, model, latency_ms, status, tools_used, prompt_tokens,
                       completion_tokens, recorded_at",
        )
        .bind::<Array<SqlUuid>, _>(ids)
        .prepared()
        .load(conn)
        .await?;
        // Settled in `ids`' order: each answer's balances are those after
        // the charges before it.
        let position: std::collections::HashMap<Uuid, usize> =
            ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let mut items = rows
            .into_iter()
            .map(RecordedCharge::into_item)
            .collect::<Result<Vec<_>, _>>()?;
        items.sort_by_key(|item| position.get(&item.usage.id).copied());
        let answers = settle_shares(conn, &items).await?;
        let mut settled: std::collections::HashMap<Uuid, Settled> =
            std::collections::HashMap::with_capacity(items.len());
        for (item, answer) in items.iter().zip(answers) {
            // One item failing fails them all: its row must stay recorded.
            settled.insert(item.usage.id, answer?);
        }
        Ok(ids.iter().map(|id| settled.remove(id)).collect())
    })
    .await
}

/// Recorded charges older than `before`: their API process died (or cannot
/// reach the database) before settling them.
pub async fn orphaned_charges(
    conn: &mut AsyncPgConnection,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<Uuid>, DbError> {
    #[derive(QueryableByName)]
    struct Id {
        #[diesel(sql_type = SqlUuid)]
        request_id: Uuid,
    }
    let rows: Vec<Id> = diesel::sql_query(
        "SELECT request_id FROM recorded_charges WHERE recorded_at < $1
          ORDER BY recorded_at LIMIT $2",
    )
    .bind::<Timestamptz, _>(before)
    .bind::<BigInt, _>(limit)
    .prepared()
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|row| row.request_id).collect())
}

fn share_settled(row: SettledRow, item: &ShareItem) -> Result<Settled, DbError> {
    let outcome = row.outcome.clone();
    // What `unigen_settle_shares` charged: never past the hold.
    let charged = Charge {
        credits: item.charge.credits.min(item.hold.credits.max(0)),
        bucket_milli: item.charge.bucket_milli.min(item.hold.milli.max(0)),
    };
    settled_from(row, &charged, item.multiplier)
        .ok_or_else(|| unexpected_answer(format!("unigen_settle_shares answered `{outcome}`")))
}

/// A database answer the code does not expect (an outcome no function gives).
fn unexpected_answer(message: String) -> DbError {
    DbError::Query(diesel::result::Error::DeserializationError(message.into()))
}

/// One call of `unigen_settle_shares`: a row per item, in the items' order.
/// It commits synchronously, and the answers waiting for it wait for the
/// WAL flush too (docs/spec-decisions.md, "Sync settlement durability").
async fn settle_shares_once(
    conn: &mut AsyncPgConnection,
    items: &[&ShareItem],
) -> Result<Vec<SettledRow>, DbError> {
    let column = |f: &dyn Fn(&ShareItem) -> i64| items.iter().map(|i| f(i)).collect::<Vec<_>>();
    let texts = |f: &dyn Fn(&ShareItem) -> &str| items.iter().map(|i| f(i)).collect::<Vec<&str>>();
    let rows: Vec<NumberedSettledRow> = diesel::sql_query(
        "SELECT ord, outcome, from_included, from_purchased, overage, bucket, remaining_milli,
                credits_remaining, overage_enabled, overage_credits, overage_rate_micros,
                events_recorded
           FROM unigen_settle_shares($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
                                     $15, $16, $17, $18)",
    )
    .bind::<Array<SqlUuid>, _>(items.iter().map(|i| i.allowance_id).collect::<Vec<_>>())
    .bind::<Array<SqlUuid>, _>(items.iter().map(|i| i.usage.org_id).collect::<Vec<_>>())
    .bind::<Array<Timestamptz>, _>(items.iter().map(|i| i.period_start).collect::<Vec<_>>())
    .bind::<Array<Nullable<Text>>, _>(
        items
            .iter()
            .map(|i| i.bucket.map(|b| b.as_str()))
            .collect::<Vec<_>>(),
    )
    .bind::<Array<BigInt>, _>(column(&|i| i.hold.credits))
    .bind::<Array<BigInt>, _>(column(&|i| i.hold.milli))
    .bind::<Array<BigInt>, _>(column(&|i| i.charge.credits))
    .bind::<Array<BigInt>, _>(column(&|i| i.charge.bucket_milli))
    .bind::<Array<SqlUuid>, _>(items.iter().map(|i| i.usage.id).collect::<Vec<_>>())
    .bind::<Array<Nullable<SqlUuid>>, _>(
        items.iter().map(|i| i.usage.api_key_id).collect::<Vec<_>>(),
    )
    .bind::<Array<Text>, _>(texts(&|i| &i.usage.endpoint))
    .bind::<Array<Text>, _>(texts(&|i| &i.usage.method))
    .bind::<Array<Text>, _>(texts(&|i| &i.usage.model))
    .bind::<Array<BigInt>, _>(column(&|i| i.usage.latency_ms))
    .bind::<Array<Text>, _>(texts(&|i| &i.usage.status))
    .bind::<Array<Jsonb>, _>(
        items
            .iter()
            .map(|i| json!(i.usage.tools_used))
            .collect::<Vec<_>>(),
    )
    .bind::<Array<BigInt>, _>(column(&|i| i.usage.prompt_tokens))
    .bind::<Array<BigInt>, _>(column(&|i| i.usage.completion_tokens))
    .prepared()
    .load(conn)
    .await?;
    if rows.len() != items.len() {
        return Err(unexpected_answer(format!(
            "unigen_settle_shares answered {} rows for {} items",
            rows.len(),
            items.len()
        )));
    }
    // Rows come in item order (`ORDER BY ord`).
    Ok(rows.into_iter().map(|numbered| numbered.row).collect())
}

/// Creates the account or rolls its period over (the functions answer
/// `setup` for both), in a transaction of its own unless one is open.
pub async fn setup_account(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<(), DbError> {
    use diesel_async::AsyncConnection;
    conn.transaction::<_, DbError, _>(async |conn| lock_account(conn, org_id).await.map(|_| ()))
        .await
}

/// Releases a reservation without charging (failure, cancel, expiry) and
/// records the request's usage row, if given, with zero credits.
pub async fn release(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    usage: Option<UsageRecord>,
) -> Result<bool, DbError> {
    #[derive(QueryableByName)]
    struct Released {
        #[diesel(sql_type = Bool)]
        released: bool,
    }
    let usage = usage.as_ref();
    let row: Released = diesel::sql_query(
        "SELECT released FROM unigen_release($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<Nullable<SqlUuid>, _>(usage.map(|u| u.org_id))
    .bind::<Nullable<SqlUuid>, _>(usage.and_then(|u| u.api_key_id))
    .bind::<Nullable<Text>, _>(usage.map(|u| u.endpoint.as_str()))
    .bind::<Nullable<Text>, _>(usage.map(|u| u.method.as_str()))
    .bind::<Nullable<Text>, _>(usage.map(|u| u.model.as_str()))
    .bind::<Nullable<BigInt>, _>(usage.map(|u| u.latency_ms))
    .bind::<Nullable<Text>, _>(usage.map(|u| u.status.as_str()))
    .bind::<Nullable<Array<Text>>, _>(usage.map(|u| &u.tools_used))
    .bind::<Nullable<BigInt>, _>(usage.map(|u| u.prompt_tokens))
    .bind::<Nullable<BigInt>, _>(usage.map(|u| u.completion_tokens))
    .prepared()
    .get_result(conn)
    .await?;
    Ok(row.released)
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

#[derive(QueryableByName)]
struct SettledRow {
    #[diesel(sql_type = Text)]
    outcome: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    from_included: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    from_purchased: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    overage: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    bucket: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    remaining_milli: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    credits_remaining: Option<i64>,
    #[diesel(sql_type = Nullable<Bool>)]
    overage_enabled: Option<bool>,
    #[diesel(sql_type = Nullable<BigInt>)]
    overage_credits: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    overage_rate_micros: Option<i64>,
    #[diesel(sql_type = Bool)]
    events_recorded: bool,
}

/// Charges `charge` against reservation `id`: credits draw on the included
/// ones first, then purchased, then overage; the bucket is charged in the
/// reservation's period. Writes the ledger rows, the usage record and the
/// billing events (`unigen_settle`, see its migration). `None`: the
/// reservation was already settled or released.
pub async fn settle(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    charge: &Charge,
    multiplier: f64,
    usage: &UsageRecord,
) -> Result<Option<Settled>, DbError> {
    let call = async |conn: &mut AsyncPgConnection| -> Result<SettledRow, DbError> {
        Ok(diesel::sql_query(
            "SELECT outcome, from_included, from_purchased, overage, bucket, remaining_milli,
                    credits_remaining, overage_enabled, overage_credits, overage_rate_micros,
                    events_recorded
               FROM unigen_settle($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind::<SqlUuid, _>(id)
        .bind::<BigInt, _>(charge.credits)
        .bind::<BigInt, _>(charge.bucket_milli)
        .bind::<Nullable<SqlUuid>, _>(usage.api_key_id)
        .bind::<Text, _>(&usage.endpoint)
        .bind::<Text, _>(&usage.method)
        .bind::<Text, _>(&usage.model)
        .bind::<BigInt, _>(usage.latency_ms)
        .bind::<Array<Text>, _>(&usage.tools_used)
        .bind::<BigInt, _>(usage.prompt_tokens)
        .bind::<BigInt, _>(usage.completion_tokens)
        .prepared()
        .get_result(conn)
        .await?)
    };
    let mut row = call(conn).await?;
    if row.outcome == "setup" {
        let org_id: Uuid = reservations::table
            .find(id)
            .select(reservations::org_id)
            .first(conn)
            .await?;
        setup_account(conn, org_id).await?;
        row = call(conn).await?;
    }
    Ok(settled_from(row, charge, multiplier))
}

/// One reservation's settlement (a finished job's), for [`settle_many`].
pub struct SettleItem {
    pub id: Uuid,
    pub charge: Charge,
    pub multiplier: f64,
    /// Its `org_id` orders the batch.
    pub usage: UsageRecord,
}

#[derive(QueryableByName)]
struct NumberedSettledRow {
    #[diesel(sql_type = BigInt)]
    ord: i64,
    #[diesel(embed)]
    row: SettledRow,
}

/// Settles many reservations in one statement (`unigen_settle_many`), so
/// one commit and one short hold of each account's lock serve them all;
/// each item is settled exactly as [`settle`] would; answers in the items'
/// order. `Err`: the statement failed and changed nothing; an item's own
/// error (setting up its account afterwards) is that item's.
pub async fn settle_many(
    conn: &mut AsyncPgConnection,
    items: &[SettleItem],
) -> Result<Vec<Result<Option<Settled>, DbError>>, DbError> {
    let order = organization_order(items, |i| i.usage.org_id);
    let items: Vec<&SettleItem> = order.iter().map(|&i| &items[i]).collect();
    let tools: Vec<Value> = items.iter().map(|i| json!(i.usage.tools_used)).collect();
    let rows: Vec<NumberedSettledRow> = diesel::sql_query(
        "SELECT ord, outcome, from_included, from_purchased, overage, bucket, remaining_milli,
                credits_remaining, overage_enabled, overage_credits, overage_rate_micros,
                events_recorded
           FROM unigen_settle_many($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind::<Array<SqlUuid>, _>(items.iter().map(|i| i.id).collect::<Vec<_>>())
    .bind::<Array<BigInt>, _>(items.iter().map(|i| i.charge.credits).collect::<Vec<_>>())
    .bind::<Array<BigInt>, _>(
        items
            .iter()
            .map(|i| i.charge.bucket_milli)
            .collect::<Vec<_>>(),
    )
    .bind::<Array<Nullable<SqlUuid>>, _>(
        items.iter().map(|i| i.usage.api_key_id).collect::<Vec<_>>(),
    )
    .bind::<Array<Text>, _>(
        items
            .iter()
            .map(|i| i.usage.endpoint.as_str())
            .collect::<Vec<_>>(),
    )
    .bind::<Array<Text>, _>(
        items
            .iter()
            .map(|i| i.usage.method.as_str())
            .collect::<Vec<_>>(),
    )
    .bind::<Array<Text>, _>(
        items
            .iter()
            .map(|i| i.usage.model.as_str())
            .collect::<Vec<_>>(),
    )
    .bind::<Array<BigInt>, _>(items.iter().map(|i| i.usage.latency_ms).collect::<Vec<_>>())
    .bind::<Array<Jsonb>, _>(tools)
    .bind::<Array<BigInt>, _>(
        items
            .iter()
            .map(|i| i.usage.prompt_tokens)
            .collect::<Vec<_>>(),
    )
    .bind::<Array<BigInt>, _>(
        items
            .iter()
            .map(|i| i.usage.completion_tokens)
            .collect::<Vec<_>>(),
    )
    .prepared()
    .load(conn)
    .await?;
    let mut settled = Vec::with_capacity(items.len());
    for (item, numbered) in items.iter().zip(rows) {
        let outcome = if numbered.row.outcome == "setup" {
            // A new period or a new account: the single path sets it up.
            settle(conn, item.id, &item.charge, item.multiplier, &item.usage).await
        } else {
            Ok(settled_from(numbered.row, &item.charge, item.multiplier))
        };
        settled.push((numbered.ord, outcome));
    }
    Ok(in_item_order(&order, settled))
}

/// The answer of `unigen_settle` as a [`Settled`]; `None` unless `ok`.
fn settled_from(row: SettledRow, charge: &Charge, multiplier: f64) -> Option<Settled> {
    if row.outcome != "ok" {
        return None;
    }
    let credits = charge.credits.max(0);
    Some(Settled {
        credits,
        from_included: row.from_included.unwrap_or(0),
        from_purchased: row.from_purchased.unwrap_or(0),
        overage: row.overage.unwrap_or(0),
        bucket: row
            .bucket
            .as_deref()
            .and_then(|b| b.parse::<Bucket>().ok())
            .map(|bucket| BucketReport {
                bucket,
                used_milli: charge.bucket_milli.max(0),
                remaining_milli: row.remaining_milli,
                multiplier,
            }),
        account: AccountSnapshot {
            credits_remaining: row.credits_remaining.unwrap_or(0),
            overage_enabled: row.overage_enabled.unwrap_or(false),
            overage_credits: row.overage_credits.unwrap_or(0),
            overage_rate_micros: row.overage_rate_micros,
        },
        events_recorded: row.events_recorded,
    })
}

pub fn snapshot(account: &BillingAccount, plan: &Plan) -> AccountSnapshot {
    AccountSnapshot {
        credits_remaining: (account.included_remaining + account.purchased_balance
            - account.reserved_credits)
            .max(0),
        overage_enabled: account.overage_enabled,
        overage_credits: account.overage_credits,
        overage_rate_micros: plan.overage_rate_micros,
    }
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

impl OverageSettings {
    /// The rules of `POST /overage/configure` (and of the dashboard's form):
    /// limits positive, the soft limit not above the hard one, an email
    /// address or nothing.
    pub fn new(
        enabled: bool,
        soft_limit: Option<i64>,
        hard_limit: Option<i64>,
        notification_email: Option<String>,
    ) -> Result<Self, unigen_core::ValidationError> {
        use unigen_core::ValidationError;
        if soft_limit.is_some_and(|l| l <= 0) {
            return Err(ValidationError::new(
                "soft_limit",
                "soft_limit must be a positive integer",
            ));
        }
        if hard_limit.is_some_and(|l| l <= 0) {
            return Err(ValidationError::new(
                "hard_limit",
                "hard_limit must be a positive integer",
            ));
        }
        if let (Some(soft), Some(hard)) = (soft_limit, hard_limit)
            && soft > hard
        {
            return Err(ValidationError::new(
                "soft_limit",
                "soft_limit must not be above hard_limit",
            ));
        }
        let email = match notification_email.map(|e| e.trim().to_owned()) {
            Some(email) if email.is_empty() => None,
            Some(email) => {
                let valid = email.len() <= 254
                    && email.split_once('@').is_some_and(|(local, domain)| {
                        !local.is_empty() && domain.contains('.') && !domain.starts_with('.')
                    })
                    && !email.contains(char::is_whitespace);
                if !valid {
                    return Err(ValidationError::new(
                        "notification_email",
                        "notification_email must be an email address",
                    ));
                }
                Some(email)
            }
            None => None,
        };
        Ok(OverageSettings {
            enabled,
            soft_limit,
            hard_limit,
            notification_email: email,
        })
    }
}

/// Why overage settings were not applied.
#[derive(Debug)]
pub enum OverageChange {
    Applied(Box<(BillingAccount, Plan)>),
    /// Enabling overage on a plan without it; the plan's name.
    NotOnPlan(String),
}

/// Applies `settings` unless they enable overage on a plan without it: the
/// whole of `POST /overage/configure` after parsing.
pub async fn change_overage(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    settings: &OverageSettings,
) -> Result<OverageChange, DbError> {
    use diesel_async::AsyncConnection;
    let plan = plan_of_org(conn, org_id).await?;
    if settings.enabled && plan.overage_rate_micros.is_none() {
        return Ok(OverageChange::NotOnPlan(plan.name));
    }
    let account = conn
        .transaction::<_, DbError, _>(async |conn| configure_overage(conn, org_id, settings).await)
        .await?;
    Ok(OverageChange::Applied(Box::new((account, plan))))
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

/// A keyset page of the ledger, newest first: the rows older than `before`
/// (the previous page's last `(created_at, id)`), read through
/// `credit_transactions_org_idx` whatever the depth.
pub async fn ledger_page(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    before: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<CreditTransaction>, DbError> {
    let mut query = credit_transactions::table
        .filter(credit_transactions::org_id.eq(org_id))
        .order((
            credit_transactions::created_at.desc(),
            credit_transactions::id.desc(),
        ))
        .limit(limit)
        .select(CreditTransaction::as_select())
        .into_boxed();
    if let Some((at, id)) = before {
        query = query.filter(
            credit_transactions::created_at
                .lt(at)
                .or(credit_transactions::created_at
                    .eq(at)
                    .and(credit_transactions::id.lt(id))),
        );
    }
    Ok(query.load(conn).await?)
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
    .prepared()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_run_in_organization_order_and_answer_in_item_order() {
        let orgs = [Uuid::from_u128(3), Uuid::from_u128(1), Uuid::from_u128(2)];
        let order = organization_order(&orgs, |o| *o);
        assert_eq!(order, vec![1, 2, 0]);
        // Answers come back numbered in run order: org 1, 2, 3.
        let answers = in_item_order(&order, vec![(2, "two"), (1, "one"), (3, "three")]);
        assert_eq!(answers, vec!["three", "one", "two"]);
    }
}
