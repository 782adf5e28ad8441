//! Overview (`/`): the credit balance, the period's included credits used,
//! each quota bucket's use and limit, requests and credits over the last
//! 30 days (from the daily rollups, as the Usage page), jobs by status and
//! the latest jobs. The figures come from the queries the API's
//! `/credits`, `/quota` and `/jobs` answer from.

use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::{Days, Utc};
use unigen_db::billing::{Bucket, from_milli};
use unigen_db::queries::jobs::JobPage;
use unigen_db::queries::usage::{DayRange, RollupGroup, RollupSums};
use unigen_db::{DbError, queries};
use uuid::Uuid;

use super::usage::{DayRow, chart_svg};
use crate::error::DashError;
use crate::layout::Chrome;
use crate::session::SignedIn;
use crate::state::{DashboardState, render};

const CHART_DAYS: u64 = 30;
const LATEST_JOBS: i64 = 10;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(overview));
}

struct BucketLine {
    name: &'static str,
    used: String,
    /// "unlimited", "not on the plan" or the limit.
    limit: String,
    /// Used out of the limit, for a `<meter>` (None when unlimited).
    meter: Option<(f64, f64)>,
}

struct JobLine {
    id: Uuid,
    tool: String,
    status: String,
    model: String,
    created: String,
    credits: i64,
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    chrome: Chrome,
    plan: String,
    balance: i64,
    purchased: i64,
    included: i64,
    included_used: i64,
    period: String,
    buckets: Vec<BucketLine>,
    chart: String,
    totals: RollupSums,
    chart_from: String,
    statuses: Vec<(String, i64)>,
    jobs: Vec<JobLine>,
}

fn number(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

async fn overview(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
) -> Result<HttpResponse, DashError> {
    let org_id = signed_in.org_id();
    let today = Utc::now().date_naive();
    let range = DayRange {
        org_id,
        from: today - Days::new(CHART_DAYS - 1),
        until: today + Days::new(1),
    };
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let (account, plan) = queries::billing::current_account(&mut conn, org_id).await?;
    let quota = queries::billing::quota_rows(&mut conn, org_id, account.period_start).await?;
    let report = queries::usage::rollup_report(&mut conn, &range, RollupGroup::Endpoint).await?;
    let statuses = queries::jobs::count_by_status_for_org(&mut conn, org_id).await?;
    let latest = queries::jobs::page_for_org(
        &mut conn,
        org_id,
        &JobPage {
            tool: None,
            status: None,
            before: None,
            limit: LATEST_JOBS,
        },
    )
    .await?;
    drop(conn);

    let snapshot = queries::billing::snapshot(&account, &plan);
    let buckets = Bucket::ALL
        .iter()
        .map(|&bucket| {
            let used = from_milli(
                quota
                    .iter()
                    .find(|row| row.bucket == bucket.as_str())
                    .map_or(0, |row| row.used_milli),
            );
            let (limit, meter) = match plan.limit(bucket) {
                None => ("unlimited".to_owned(), None),
                Some(0) => ("not on the plan".to_owned(), None),
                Some(limit) => (
                    limit.to_string(),
                    Some((used.min(limit as f64), limit as f64)),
                ),
            };
            BucketLine {
                name: bucket.as_str(),
                used: number(used),
                limit,
                meter,
            }
        })
        .collect();
    let days: Vec<DayRow> = range
        .from
        .iter_days()
        .take_while(|day| *day < range.until)
        .map(|day| DayRow {
            day: day.to_string(),
            sums: report
                .days
                .iter()
                .find(|d| d.day == day)
                .map_or_else(RollupSums::default, |d| d.sums),
        })
        .collect();
    let jobs = latest
        .into_iter()
        .map(|job| JobLine {
            id: job.id,
            tool: job.tool,
            status: job.status,
            model: job.model,
            created: super::datetime(&job.created_at),
            credits: job.actual_credits.unwrap_or(job.estimated_credits),
        })
        .collect();
    render(&OverviewPage {
        chrome: signed_in.chrome("overview", "Overview"),
        plan: plan.name.clone(),
        balance: snapshot.credits_remaining,
        purchased: account.purchased_balance,
        included: account.included_credits,
        included_used: account.included_credits - account.included_remaining,
        period: format!(
            "{} to {}",
            account.period_start.format("%Y-%m-%d"),
            (account.period_end - chrono::Duration::days(1)).format("%Y-%m-%d")
        ),
        buckets,
        chart: chart_svg(&days),
        totals: report.total,
        chart_from: range.from.to_string(),
        statuses,
        jobs,
    })
}
