//! Usage (`/usage`) and its CSV (`/usage.csv`): requests, credits and
//! tokens per UTC day over `From`..`To` (both included), grouped by model,
//! endpoint or key, with the change against the period of the same length
//! before. Everything is read from the daily rollups (`usage_daily`) in one
//! statement, so the page costs the same at a million requests as at ten;
//! the rollups are exact, so the figures equal `GET /api/v1/usage` for the
//! same range (`start_date=From&end_date=To`, UTC).

use std::collections::HashMap;

use actix_web::http::header;
use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::{Days, NaiveDate, Utc};
use unigen_db::DbError;
use unigen_db::queries;
use unigen_db::queries::usage::{self, DayRange, RollupGroup, RollupReport, RollupSums};
use uuid::Uuid;

use crate::error::DashError;
use crate::layout::Chrome;
use crate::session::SignedIn;
use crate::state::{DashboardState, render};

/// Longest range a page shows.
const MAX_DAYS: u64 = 366;
/// The range shown without `from`/`to`: the last 30 days, today included.
const DEFAULT_DAYS: u64 = 30;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/usage", web::get().to(usage_page))
        .route("/usage.csv", web::get().to(usage_csv));
}

/// The page's filter, read from the URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageQuery {
    pub from: NaiveDate,
    /// Included.
    pub to: NaiveDate,
    pub group: RollupGroup,
}

impl UsageQuery {
    /// `from`, `to` (YYYY-MM-DD, UTC days, both included) and `group`
    /// (model, endpoint or key); bad values are a 400 with a message.
    pub fn parse(query: &HashMap<String, String>, today: NaiveDate) -> Result<Self, DashError> {
        let date = |name: &str, label: &str| -> Result<Option<NaiveDate>, DashError> {
            match query.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(raw) => NaiveDate::parse_from_str(raw, "%Y-%m-%d")
                    .map(Some)
                    .map_err(|_| {
                        DashError::BadRequest(format!(
                            "{label} must be a date like 2026-11-29 (year-month-day)."
                        ))
                    }),
            }
        };
        let to = date("to", "To")?.unwrap_or(today);
        let from = match date("from", "From")? {
            Some(from) => from,
            None => to
                .checked_sub_days(Days::new(DEFAULT_DAYS - 1))
                .unwrap_or(NaiveDate::MIN),
        };
        if from > to {
            return Err(DashError::BadRequest(
                "From must be on or before To.".into(),
            ));
        }
        if (to - from).num_days() >= MAX_DAYS as i64 {
            return Err(DashError::BadRequest(format!(
                "The range can cover at most {MAX_DAYS} days."
            )));
        }
        let group = match query
            .get("group")
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
        {
            None => RollupGroup::Model,
            Some(raw) => raw.parse().map_err(|()| {
                DashError::BadRequest("Group by must be model, endpoint or key.".into())
            })?,
        };
        // The day after `to` must exist (the range's exclusive end).
        to.checked_add_days(Days::new(1)).ok_or_else(|| {
            DashError::BadRequest("To must be a date like 2026-11-29 (year-month-day).".into())
        })?;
        Ok(Self { from, to, group })
    }

    pub fn range(&self, org_id: Uuid) -> DayRange {
        DayRange {
            org_id,
            from: self.from,
            until: self.to + Days::new(1),
        }
    }

    /// The URL query of this filter.
    pub fn query_string(&self) -> String {
        format!(
            "from={}&to={}&group={}",
            self.from,
            self.to,
            self.group.as_str()
        )
    }
}

/// A row of the day table (the overview's chart uses it too).
pub(crate) struct DayRow {
    pub(crate) day: String,
    pub(crate) sums: RollupSums,
}

/// A row of the rankings.
struct GroupRow {
    name: String,
    detail: String,
    sums: RollupSums,
    previous: RollupSums,
    change: String,
}

#[derive(Template)]
#[template(path = "usage.html")]
struct UsagePage {
    chrome: Chrome,
    from: String,
    to: String,
    group: &'static str,
    group_label: &'static str,
    csv_url: String,
    total: RollupSums,
    previous_total: RollupSums,
    previous_label: String,
    total_change: String,
    days: Vec<DayRow>,
    groups: Vec<GroupRow>,
    chart: String,
}

/// Names of the organization's keys (`name (prefix…)`), for the key grouping.
async fn key_names(
    state: &DashboardState,
    org_id: Uuid,
) -> Result<HashMap<String, (String, String)>, DashError> {
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let keys = queries::keys::list_for_org(&mut conn, org_id).await?;
    Ok(keys
        .into_iter()
        .map(|k| (k.id.to_string(), (k.name, k.key_prefix)))
        .collect())
}

async fn read(
    state: &DashboardState,
    org_id: Uuid,
    filter: &UsageQuery,
) -> Result<RollupReport, DashError> {
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    Ok(usage::rollup_report(&mut conn, &filter.range(org_id), filter.group).await?)
}

async fn usage_page(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, DashError> {
    let filter = UsageQuery::parse(&query, Utc::now().date_naive())?;
    let org_id = signed_in.org_id();
    let report = read(&state, org_id, &filter).await?;
    let names = match filter.group {
        RollupGroup::Key => key_names(&state, org_id).await?,
        RollupGroup::Model | RollupGroup::Endpoint => HashMap::new(),
    };
    let previous = filter.range(org_id).previous();
    let days = every_day(&filter, &report);
    let groups = report
        .groups
        .iter()
        .map(|g| {
            let (name, detail) = group_name(filter.group, g.key.as_deref(), &names);
            GroupRow {
                name,
                detail,
                sums: g.current,
                previous: g.previous,
                change: change(g.current.credits, g.previous.credits),
            }
        })
        .collect();
    let chart = chart_svg(&days);
    render(&UsagePage {
        chrome: signed_in.chrome("usage", "Usage"),
        from: filter.from.to_string(),
        to: filter.to.to_string(),
        group: filter.group.as_str(),
        group_label: group_label(filter.group),
        csv_url: format!("{}/usage.csv?{}", signed_in.prefix, filter.query_string()),
        total: report.total,
        previous_total: report.previous_total,
        previous_label: format!("{} to {}", previous.from, previous.until - Days::new(1)),
        total_change: change(report.total.credits, report.previous_total.credits),
        days,
        groups,
        chart,
    })
}

fn group_label(group: RollupGroup) -> &'static str {
    match group {
        RollupGroup::Model => "Model",
        RollupGroup::Endpoint => "Endpoint",
        RollupGroup::Key => "API key",
    }
}

/// The shown name of a group, and a detail (a key's id).
fn group_name(
    group: RollupGroup,
    key: Option<&str>,
    names: &HashMap<String, (String, String)>,
) -> (String, String) {
    match (group, key) {
        (RollupGroup::Key, None) => ("(no key)".into(), String::new()),
        (RollupGroup::Key, Some(id)) => match names.get(id) {
            Some((name, prefix)) => (format!("{name} ({prefix}…)"), id.to_owned()),
            None => ("(deleted key)".into(), id.to_owned()),
        },
        (RollupGroup::Model | RollupGroup::Endpoint, key) => {
            (key.unwrap_or("").to_owned(), String::new())
        }
    }
}

/// Every day of the range, days without requests as zeros.
fn every_day(filter: &UsageQuery, report: &RollupReport) -> Vec<DayRow> {
    let by_day: HashMap<NaiveDate, RollupSums> =
        report.days.iter().map(|d| (d.day, d.sums)).collect();
    filter
        .from
        .iter_days()
        .take_while(|day| *day <= filter.to)
        .map(|day| DayRow {
            day: day.to_string(),
            sums: by_day.get(&day).copied().unwrap_or_default(),
        })
        .collect()
}

/// The change from `previous` to `current`, as a signed percentage.
fn change(current: i64, previous: i64) -> String {
    if previous == 0 {
        return if current == 0 {
            "—".into()
        } else {
            "new".into()
        };
    }
    let percent = (current - previous) as f64 * 100.0 / previous as f64;
    format!("{percent:+.1}%")
}

/// One figure of a day's sums.
type Metric = fn(&RollupSums) -> i64;

/// Three bar charts (requests, credits, tokens per day) as inline SVG. Only
/// numbers and dates go in: nothing a user typed.
pub(crate) fn chart_svg(days: &[DayRow]) -> String {
    const WIDTH: f64 = 720.0;
    const PANEL: f64 = 90.0;
    const GAP: f64 = 28.0;
    let metrics: [(&str, Metric); 3] = [
        ("Requests", |s| s.requests),
        ("Credits", |s| s.credits),
        ("Tokens", |s| s.tokens),
    ];
    let height = (PANEL + GAP) * metrics.len() as f64;
    let n = days.len().max(1) as f64;
    let slot = WIDTH / n;
    let bar = (slot * 0.8).max(1.0);
    let mut svg = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" \
         aria-labelledby=\"chart-title\" preserveAspectRatio=\"none\">\
         <title id=\"chart-title\">Requests, credits and tokens per day (the table below has the same numbers)</title>"
    );
    for (i, (label, value)) in metrics.iter().enumerate() {
        let top = i as f64 * (PANEL + GAP) + GAP - 8.0;
        let max = days
            .iter()
            .map(|d| value(&d.sums))
            .max()
            .unwrap_or(0)
            .max(1);
        svg.push_str(&format!(
            "<text class=\"chart-label\" x=\"0\" y=\"{:.1}\">{label} (max {max})</text>",
            top - 6.0
        ));
        svg.push_str(&format!(
            "<line class=\"chart-axis\" x1=\"0\" x2=\"{WIDTH}\" y1=\"{:.1}\" y2=\"{:.1}\"/>",
            top + PANEL,
            top + PANEL
        ));
        for (j, day) in days.iter().enumerate() {
            let v = value(&day.sums);
            if v == 0 {
                continue;
            }
            let h = (v as f64 / max as f64 * PANEL).max(1.0);
            svg.push_str(&format!(
                "<rect class=\"bar bar-{}\" x=\"{:.2}\" y=\"{:.2}\" width=\"{bar:.2}\" height=\"{h:.2}\">\
                 <title>{}: {v} {}</title></rect>",
                i,
                j as f64 * slot + (slot - bar) / 2.0,
                top + PANEL - h,
                day.day,
                label.to_lowercase()
            ));
        }
    }
    svg.push_str("</svg>");
    svg
}

async fn usage_csv(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, DashError> {
    let filter = UsageQuery::parse(&query, Utc::now().date_naive())?;
    let org_id = signed_in.org_id();
    let cells = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        usage::rollup_cells(&mut conn, &filter.range(org_id), filter.group).await?
    };
    let names = match filter.group {
        RollupGroup::Key => key_names(&state, org_id).await?,
        RollupGroup::Model | RollupGroup::Endpoint => HashMap::new(),
    };
    let mut out = csv::Writer::from_writer(Vec::new());
    let group = filter.group.as_str();
    let header_row: Vec<&str> = match filter.group {
        RollupGroup::Key => vec![
            "date",
            "api_key_id",
            "api_key_name",
            "requests",
            "credits",
            "tokens",
        ],
        RollupGroup::Model | RollupGroup::Endpoint => {
            vec!["date", group, "requests", "credits", "tokens"]
        }
    };
    out.write_record(&header_row).map_err(DashError::internal)?;
    for cell in &cells {
        let numbers = [
            cell.sums.requests.to_string(),
            cell.sums.credits.to_string(),
            cell.sums.tokens.to_string(),
        ];
        let mut row = vec![cell.day.to_string(), cell.key.clone().unwrap_or_default()];
        if filter.group == RollupGroup::Key {
            let name = cell
                .key
                .as_deref()
                .and_then(|id| names.get(id))
                .map(|(name, _)| name.clone())
                .unwrap_or_default();
            row.push(csv_safe(&name));
        }
        row.extend(numbers);
        out.write_record(&row).map_err(DashError::internal)?;
    }
    let body = out.into_inner().map_err(DashError::internal)?;
    let filename = format!("usage-{}-{}-by-{group}.csv", filter.from, filter.to);
    Ok(HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{filename}\""),
        ))
        .body(body))
}

/// A cell a spreadsheet would read as a formula gets a leading apostrophe.
fn csv_safe(text: &str) -> String {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{text}")
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_filter_defaults_to_the_last_thirty_days_and_refuses_bad_dates_with_a_message() {
        let today = NaiveDate::from_ymd_opt(2026, 11, 29).unwrap();
        let q = UsageQuery::parse(&query(&[]), today).unwrap();
        assert_eq!(q.from, NaiveDate::from_ymd_opt(2026, 10, 31).unwrap());
        assert_eq!(q.to, today);
        assert_eq!(q.group, RollupGroup::Model);
        for bad in [
            vec![("from", "2026-13-01")],
            vec![("to", "yesterday")],
            vec![("from", "2026-11-30"), ("to", "2026-11-29")],
            vec![("from", "2020-01-01"), ("to", "2026-11-29")],
            vec![("group", "colour")],
        ] {
            match UsageQuery::parse(&query(&bad), today) {
                Err(DashError::BadRequest(message)) => assert!(!message.is_empty()),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let q = UsageQuery::parse(
            &query(&[
                ("from", "2026-11-01"),
                ("to", "2026-11-03"),
                ("group", "key"),
            ]),
            today,
        )
        .unwrap();
        assert_eq!(
            q.range(Uuid::nil()).until,
            NaiveDate::from_ymd_opt(2026, 11, 4).unwrap()
        );
        assert_eq!(q.query_string(), "from=2026-11-01&to=2026-11-03&group=key");
    }

    #[test]
    fn changes_read_as_signed_percentages() {
        assert_eq!(change(150, 100), "+50.0%");
        assert_eq!(change(50, 100), "-50.0%");
        assert_eq!(change(5, 0), "new");
        assert_eq!(change(0, 0), "—");
        assert_eq!(csv_safe("=cmd()"), "'=cmd()");
    }
}
