//! Usage analytics over `usage_records` (`GET /usage`): totals, groupings and
//! time series are aggregated by PostgreSQL, and every query is scoped to one
//! organization. The SQL texts are fixed; user input only ever travels as
//! bind parameters. Time zones are IANA names checked against the server's
//! own tz database, the one `AT TIME ZONE` uses.

use std::collections::HashSet;
use std::str::FromStr;

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::query_builder::{BoxedSqlQuery, SqlQuery};
use diesel::sql_types::{BigInt, Double, Integer, Nullable, Text, Timestamp, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use tokio::sync::OnceCell;
use uuid::Uuid;

use crate::DbError;
use crate::models::UsageRecord;
use crate::prepared::PrepareOnce;
use crate::queries::billing;
use crate::schema::usage_records;

/// Width of a time-series bucket; weeks start on Monday (ISO 8601).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Hour,
    Day,
    Week,
    Month,
}

impl TimeUnit {
    /// The `date_trunc` field name.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeUnit::Hour => "hour",
            TimeUnit::Day => "day",
            TimeUnit::Week => "week",
            TimeUnit::Month => "month",
        }
    }
}

impl FromStr for TimeUnit {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "hour" => Ok(TimeUnit::Hour),
            "day" => Ok(TimeUnit::Day),
            "week" => Ok(TimeUnit::Week),
            "month" => Ok(TimeUnit::Month),
            _ => Err(()),
        }
    }
}

/// Which records a query covers: one organization, `[start, end)`, and the
/// optional exact-match filters.
#[derive(Debug, Clone)]
pub struct UsageFilter {
    pub org_id: Uuid,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub api_key_id: Option<Uuid>,
    pub model: Option<String>,
    pub endpoint: Option<String>,
}

/// The `FROM ... WHERE` shared by every filtered query: binds `$1..$6`.
const FILTERED: &str = "
    FROM usage_records
    WHERE org_id = $1 AND created_at >= $2 AND created_at < $3
      AND ($4::uuid IS NULL OR api_key_id = $4)
      AND ($5::text IS NULL OR model = $5)
      AND ($6::text IS NULL OR endpoint = $6)";

/// Offset from UTC, in seconds, of the wall clock of time zone `$tz` at
/// instant `ts` (both SQL expressions).
fn utc_offset_sql(ts: &str, tz: &str) -> String {
    format!("EXTRACT(EPOCH FROM ({ts} AT TIME ZONE {tz}) - ({ts} AT TIME ZONE 'UTC'))::int")
}

fn filtered_query(sql: String, filter: &UsageFilter) -> BoxedSqlQuery<'static, Pg, SqlQuery> {
    diesel::sql_query(sql)
        .into_boxed()
        .bind::<diesel::sql_types::Uuid, _>(filter.org_id)
        .bind::<Timestamptz, _>(filter.start)
        .bind::<Timestamptz, _>(filter.end)
        .bind::<Nullable<diesel::sql_types::Uuid>, _>(filter.api_key_id)
        .bind::<Nullable<Text>, _>(filter.model.clone())
        .bind::<Nullable<Text>, _>(filter.endpoint.clone())
}

/// Counters of a set of records.
#[derive(Debug, Clone, Default, PartialEq, QueryableByName)]
pub struct Totals {
    #[diesel(sql_type = BigInt)]
    pub requests: i64,
    #[diesel(sql_type = BigInt)]
    pub credits: i64,
    #[diesel(sql_type = BigInt)]
    pub successes: i64,
    /// Mean `latency_ms`; 0 without records.
    #[diesel(sql_type = Double)]
    pub average_latency_ms: f64,
    #[diesel(sql_type = BigInt)]
    pub tokens: i64,
}

const TOTALS_COLUMNS: &str = "
    count(*) AS requests,
    COALESCE(sum(credits), 0)::bigint AS credits,
    count(*) FILTER (WHERE status = 'success') AS successes,
    COALESCE(avg(latency_ms), 0)::float8 AS average_latency_ms,
    COALESCE(sum(total_tokens), 0)::bigint AS tokens";

/// Everything matching, and the same split by model and by endpoint.
#[derive(Debug, Clone, Default)]
pub struct UsageTotals {
    pub overall: Totals,
    /// Sorted by model.
    pub by_model: Vec<(String, Totals)>,
    /// Sorted by endpoint.
    pub by_endpoint: Vec<(String, Totals)>,
}

#[derive(QueryableByName)]
struct GroupedTotals {
    /// `GROUPING(model, endpoint)`: 1 = per model, 2 = per endpoint, 3 = all.
    #[diesel(sql_type = Integer)]
    grouping: i32,
    #[diesel(sql_type = Nullable<Text>)]
    key: Option<String>,
    #[diesel(embed)]
    totals: Totals,
}

/// One scan for the overall totals and both groupings (`GROUPING SETS`).
pub async fn totals(
    conn: &mut AsyncPgConnection,
    filter: &UsageFilter,
) -> Result<UsageTotals, DbError> {
    let sql = format!(
        "SELECT GROUPING(model, endpoint) AS grouping,
                CASE GROUPING(model, endpoint) WHEN 1 THEN model WHEN 2 THEN endpoint END AS key,
                {TOTALS_COLUMNS}
         {FILTERED}
         GROUP BY GROUPING SETS ((), (model), (endpoint))
         ORDER BY 1, 2"
    );
    let rows: Vec<GroupedTotals> = filtered_query(sql, filter).load(conn).await?;
    let mut out = UsageTotals::default();
    for row in rows {
        match (row.grouping, row.key) {
            (1, Some(model)) => out.by_model.push((model, row.totals)),
            (2, Some(endpoint)) => out.by_endpoint.push((endpoint, row.totals)),
            // The empty grouping set yields its row even when nothing matches.
            _ => out.overall = row.totals,
        }
    }
    Ok(out)
}

/// Totals without the groupings.
pub async fn summarize(
    conn: &mut AsyncPgConnection,
    filter: &UsageFilter,
) -> Result<Totals, DbError> {
    let sql = format!("SELECT {TOTALS_COLUMNS} {FILTERED}");
    Ok(filtered_query(sql, filter).get_result(conn).await?)
}

/// One non-empty bucket of a time series.
#[derive(Debug, Clone, PartialEq, QueryableByName)]
pub struct SeriesPoint {
    /// The bucket's first instant: local midnight (or hour) in the zone.
    #[diesel(sql_type = Timestamptz)]
    pub start: DateTime<Utc>,
    /// The zone's offset at `start`, to render it as local time.
    #[diesel(sql_type = Integer)]
    pub utc_offset_seconds: i32,
    #[diesel(sql_type = BigInt)]
    pub requests: i64,
    #[diesel(sql_type = BigInt)]
    pub credits: i64,
    #[diesel(sql_type = BigInt)]
    pub tokens: i64,
}

/// Records bucketed by `date_trunc(unit)` of their wall-clock time in
/// `timezone` (a name [`is_known_timezone`] accepted), oldest bucket first.
/// Empty buckets are not returned.
pub async fn time_series(
    conn: &mut AsyncPgConnection,
    filter: &UsageFilter,
    unit: TimeUnit,
    timezone: &str,
) -> Result<Vec<SeriesPoint>, DbError> {
    let offset = utc_offset_sql("(bucket AT TIME ZONE $8)", "$8");
    let sql = format!(
        "SELECT bucket AT TIME ZONE $8 AS start, {offset} AS utc_offset_seconds,
                requests, credits, tokens
         FROM (SELECT date_trunc($7, created_at AT TIME ZONE $8) AS bucket,
                      count(*) AS requests,
                      COALESCE(sum(credits), 0)::bigint AS credits,
                      COALESCE(sum(total_tokens), 0)::bigint AS tokens
               {FILTERED}
               GROUP BY 1) AS buckets
         ORDER BY bucket"
    );
    Ok(filtered_query(sql, filter)
        .bind::<Text, _>(unit.as_str())
        .bind::<Text, _>(timezone.to_owned())
        .load(conn)
        .await?)
}

/// A usage record and its zone's offset at `created_at`.
#[derive(Debug, Clone)]
pub struct LocalRecord {
    pub record: UsageRecord,
    pub utc_offset_seconds: i32,
}

#[derive(QueryableByName)]
#[diesel(table_name = usage_records)]
struct LocalRecordRow {
    id: Uuid,
    org_id: Uuid,
    api_key_id: Option<Uuid>,
    endpoint: String,
    method: String,
    model: String,
    credits: i64,
    latency_ms: i64,
    status: String,
    tools_used: Vec<String>,
    prompt_tokens: i64,
    completion_tokens: i64,
    total_tokens: i64,
    created_at: DateTime<Utc>,
    #[diesel(sql_type = Integer)]
    utc_offset_seconds: i32,
}

impl From<LocalRecordRow> for LocalRecord {
    fn from(row: LocalRecordRow) -> Self {
        LocalRecord {
            record: UsageRecord {
                id: row.id,
                org_id: row.org_id,
                api_key_id: row.api_key_id,
                endpoint: row.endpoint,
                method: row.method,
                model: row.model,
                credits: row.credits,
                latency_ms: row.latency_ms,
                status: row.status,
                tools_used: row.tools_used,
                prompt_tokens: row.prompt_tokens,
                completion_tokens: row.completion_tokens,
                total_tokens: row.total_tokens,
                created_at: row.created_at,
            },
            utc_offset_seconds: row.utc_offset_seconds,
        }
    }
}

/// Record columns plus the offset in the zone bound as `$7`.
fn record_columns() -> String {
    format!(
        "id, org_id, api_key_id, endpoint, method, model, credits, latency_ms, status,
         tools_used, prompt_tokens, completion_tokens, total_tokens, created_at,
         {} AS utc_offset_seconds",
        utc_offset_sql("created_at", "$7")
    )
}

/// A page of records, newest first (ties broken by id, so pages are stable).
pub async fn records_page(
    conn: &mut AsyncPgConnection,
    filter: &UsageFilter,
    timezone: &str,
    limit: i64,
    offset: i64,
) -> Result<Vec<LocalRecord>, DbError> {
    let sql = format!(
        "SELECT {} {FILTERED} ORDER BY created_at DESC, id DESC LIMIT $8 OFFSET $9",
        record_columns()
    );
    let rows: Vec<LocalRecordRow> = filtered_query(sql, filter)
        .bind::<Text, _>(timezone.to_owned())
        .bind::<BigInt, _>(limit)
        .bind::<BigInt, _>(offset)
        .load(conn)
        .await?;
    Ok(rows.into_iter().map(LocalRecord::from).collect())
}

/// Up to `limit` records older than `after` (the last record of the previous
/// batch, by `(created_at, id)`), newest first: keyset pagination for exports,
/// whose cost does not grow with the depth.
pub async fn records_after(
    conn: &mut AsyncPgConnection,
    filter: &UsageFilter,
    timezone: &str,
    after: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<LocalRecord>, DbError> {
    let sql = format!(
        "SELECT {} {FILTERED}
           AND ($8::timestamptz IS NULL OR (created_at, id) < ($8, $9::uuid))
         ORDER BY created_at DESC, id DESC LIMIT $10",
        record_columns()
    );
    let rows: Vec<LocalRecordRow> = filtered_query(sql, filter)
        .bind::<Text, _>(timezone.to_owned())
        .bind::<Nullable<Timestamptz>, _>(after.map(|(at, _)| at))
        .bind::<Nullable<diesel::sql_types::Uuid>, _>(after.map(|(_, id)| id))
        .bind::<BigInt, _>(limit)
        .load(conn)
        .await?;
    Ok(rows.into_iter().map(LocalRecord::from).collect())
}

/// What one `GET /usage` page shows of a range.
#[derive(Debug, Clone)]
pub struct ReportQuery<'a> {
    pub filter: UsageFilter,
    /// A name [`is_known_timezone`] accepted.
    pub timezone: &'a str,
    /// The time series' bucket width, when one is wanted.
    pub series: Option<TimeUnit>,
    pub limit: i64,
    pub offset: i64,
}

#[derive(Debug, Clone)]
pub struct UsageReport {
    /// The range covered, `[start, end)`.
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub totals: UsageTotals,
    pub series: Option<Vec<SeriesPoint>>,
    /// The requested page, newest first.
    pub records: Vec<LocalRecord>,
    /// The zone's offsets at the range's bounds, to render them.
    pub start_offset_seconds: i32,
    pub end_offset_seconds: i32,
}

/// Totals, series and the page read from one snapshot (a read-only
/// repeatable-read transaction), so `total` and the page always agree even
/// while requests are being recorded.
pub async fn report(
    conn: &mut AsyncPgConnection,
    query: &ReportQuery<'_>,
) -> Result<UsageReport, DbError> {
    conn.build_transaction()
        .read_only()
        .repeatable_read()
        .run(async |conn| {
            let filter = &query.filter;
            let totals = totals(conn, filter).await?;
            let series = match query.series {
                Some(unit) => Some(time_series(conn, filter, unit, query.timezone).await?),
                None => None,
            };
            let records =
                records_page(conn, filter, query.timezone, query.limit, query.offset).await?;
            Ok(UsageReport {
                start: filter.start,
                end: filter.end,
                totals,
                series,
                records,
                start_offset_seconds: utc_offset_seconds(conn, filter.start, query.timezone)
                    .await?,
                end_offset_seconds: utc_offset_seconds(conn, filter.end, query.timezone).await?,
            })
        })
        .await
}

/// The organization's current billing period and its credit counters.
#[derive(Debug, Clone, PartialEq)]
pub struct CurrentPeriod {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub requests: i64,
    pub credits_used: i64,
    pub credits_included: i64,
    pub credits_overage: i64,
    /// USD per credit in millionths; `None` when the plan has no overage.
    pub overage_rate_micros: Option<i64>,
}

/// The period containing `now`. An organization without a billing account
/// (nothing consumed yet), or whose account still shows a period that has
/// ended (rollover pending), is in the calendar month of `now` with its
/// plan's included credits and no overage.
pub async fn current_period(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    now: DateTime<Utc>,
) -> Result<CurrentPeriod, DbError> {
    let plan = billing::plan_of_org(conn, org_id).await?;
    let account = billing::find_account(conn, org_id)
        .await?
        .filter(|account| account.period_start <= now && now < account.period_end);
    let (start, end, credits_included, credits_overage) = match account {
        Some(a) => (
            a.period_start,
            a.period_end,
            a.included_credits,
            a.overage_credits,
        ),
        None => {
            let (start, end) = billing::period_containing(now);
            (start, end, plan.included_credits, 0)
        }
    };
    let in_period = summarize(
        conn,
        &UsageFilter {
            org_id,
            start,
            end,
            api_key_id: None,
            model: None,
            endpoint: None,
        },
    )
    .await?;
    Ok(CurrentPeriod {
        start,
        end,
        requests: in_period.requests,
        credits_used: in_period.credits,
        credits_included,
        credits_overage,
        overage_rate_micros: plan.overage_rate_micros,
    })
}

/// IANA zone names of the server's tz database, read once per process:
/// `pg_timezone_names` scans the tz files (tens of milliseconds a call).
static KNOWN_TIMEZONES: OnceCell<HashSet<String>> = OnceCell::const_new();

/// Whether `name` is an IANA zone name (e.g. `America/New_York`, `UTC`).
/// Debian's tz tree also lists `posix/...`, `right/...`, `posixrules` and
/// `localtime` aliases: they are no IANA names and are refused.
pub async fn is_known_timezone(conn: &mut AsyncPgConnection, name: &str) -> Result<bool, DbError> {
    #[derive(QueryableByName)]
    struct ZoneName {
        #[diesel(sql_type = Text)]
        name: String,
    }
    let names = KNOWN_TIMEZONES
        .get_or_try_init(|| async move {
            let rows: Vec<ZoneName> = diesel::sql_query(
                "SELECT name FROM pg_timezone_names
                 WHERE name NOT LIKE 'posix/%' AND name NOT LIKE 'right/%'
                   AND name NOT IN ('posixrules', 'localtime')",
            )
            .prepared()
            .load(conn)
            .await?;
            Ok::<_, DbError>(rows.into_iter().map(|row| row.name).collect())
        })
        .await?;
    Ok(names.contains(name))
}

/// The instant at which the wall clock of `timezone` shows `local`. A time
/// skipped by a DST change is read with the offset from before the change,
/// a repeated one as its first occurrence (PostgreSQL's rules).
pub async fn local_to_utc(
    conn: &mut AsyncPgConnection,
    local: NaiveDateTime,
    timezone: &str,
) -> Result<DateTime<Utc>, DbError> {
    #[derive(QueryableByName)]
    struct Instant {
        #[diesel(sql_type = Timestamptz)]
        at: DateTime<Utc>,
    }
    let row: Instant = diesel::sql_query("SELECT ($1::timestamp AT TIME ZONE $2) AS at")
        .bind::<Timestamp, _>(local)
        .bind::<Text, _>(timezone)
        .prepared()
        .get_result(conn)
        .await?;
    Ok(row.at)
}

/// The UTC offset of `timezone` at `at`, in seconds (east positive).
pub async fn utc_offset_seconds(
    conn: &mut AsyncPgConnection,
    at: DateTime<Utc>,
    timezone: &str,
) -> Result<i32, DbError> {
    #[derive(QueryableByName)]
    struct Offset {
        #[diesel(sql_type = Integer)]
        seconds: i32,
    }
    let sql = format!(
        "SELECT {} AS seconds",
        utc_offset_sql("$1::timestamptz", "$2")
    );
    let row: Offset = diesel::sql_query(sql)
        .bind::<Timestamptz, _>(at)
        .bind::<Text, _>(timezone)
        .get_result(conn)
        .await?;
    Ok(row.seconds)
}

// ---------------------------------------------------------------------------
// Daily rollups (`usage_daily`): exact sums of the usage records per
// organization, UTC day, model, endpoint and key, maintained by the
// statement that inserts the records (the `usage_records_rollup` trigger,
// migrations/functions.sql). Aggregate pages read these: their cost grows
// with days x groups, not with requests.

/// What a rollup report groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollupGroup {
    Model,
    Endpoint,
    Key,
}

impl RollupGroup {
    pub fn as_str(self) -> &'static str {
        match self {
            RollupGroup::Model => "model",
            RollupGroup::Endpoint => "endpoint",
            RollupGroup::Key => "key",
        }
    }

    /// The grouped column as text (`NULL` for requests without a key).
    fn column(self) -> &'static str {
        match self {
            RollupGroup::Model => "model",
            RollupGroup::Endpoint => "endpoint",
            RollupGroup::Key => "api_key_id::text",
        }
    }
}

impl FromStr for RollupGroup {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "model" => Ok(RollupGroup::Model),
            "endpoint" => Ok(RollupGroup::Endpoint),
            "key" => Ok(RollupGroup::Key),
            _ => Err(()),
        }
    }
}

/// Whole UTC days `[from, until)` of one organization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayRange {
    pub org_id: Uuid,
    pub from: chrono::NaiveDate,
    /// Exclusive.
    pub until: chrono::NaiveDate,
}

impl DayRange {
    /// The range's first instant (midnight UTC of `from`).
    pub fn start(&self) -> DateTime<Utc> {
        self.from.and_time(chrono::NaiveTime::MIN).and_utc()
    }

    /// The instant just after the range (midnight UTC of `until`).
    pub fn end(&self) -> DateTime<Utc> {
        self.until.and_time(chrono::NaiveTime::MIN).and_utc()
    }

    /// The range of the same length just before this one.
    pub fn previous(&self) -> DayRange {
        let length = self.until - self.from;
        DayRange {
            org_id: self.org_id,
            from: self.from - length,
            until: self.from,
        }
    }
}

/// Sums over a set of rollup rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, QueryableByName)]
pub struct RollupSums {
    #[diesel(sql_type = BigInt)]
    pub requests: i64,
    #[diesel(sql_type = BigInt)]
    pub successes: i64,
    #[diesel(sql_type = BigInt)]
    pub credits: i64,
    #[diesel(sql_type = BigInt)]
    pub tokens: i64,
}

/// One group of a [`RollupReport`], with the previous period's sums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupRow {
    /// The model, endpoint or key id (`None`: requests without a key).
    pub key: Option<String>,
    pub current: RollupSums,
    pub previous: RollupSums,
}

/// One day of a [`RollupReport`] (days without requests are absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupDay {
    pub day: chrono::NaiveDate,
    pub sums: RollupSums,
}

/// What the usage page shows of a range: the total, each day, each group
/// (with the same sums over the previous period of the same length), read
/// in one statement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RollupReport {
    pub total: RollupSums,
    pub previous_total: RollupSums,
    /// Oldest first.
    pub days: Vec<RollupDay>,
    /// By credits used in the range, then requests, most first.
    pub groups: Vec<RollupRow>,
}

#[derive(QueryableByName)]
struct RollupReportRow {
    /// `GROUPING(day, k)`: 0 = day and group (CSV), 1 = per day, 2 = per group, 3 = all.
    #[diesel(sql_type = Integer)]
    grouping: i32,
    #[diesel(sql_type = Nullable<diesel::sql_types::Date>)]
    day: Option<chrono::NaiveDate>,
    #[diesel(sql_type = Nullable<Text>)]
    k: Option<String>,
    #[diesel(embed)]
    current: RollupSums,
    #[diesel(sql_type = BigInt)]
    prev_requests: i64,
    #[diesel(sql_type = BigInt)]
    prev_successes: i64,
    #[diesel(sql_type = BigInt)]
    prev_credits: i64,
    #[diesel(sql_type = BigInt)]
    prev_tokens: i64,
}

impl RollupReportRow {
    fn previous(&self) -> RollupSums {
        RollupSums {
            requests: self.prev_requests,
            successes: self.prev_successes,
            credits: self.prev_credits,
            tokens: self.prev_tokens,
        }
    }
}

/// The rollup rows of `[previous.from, range.until)` grouped by the sets
/// given, the current range's sums apart from the previous period's.
fn rollup_sql(group: RollupGroup, sets: &str) -> String {
    let k = group.column();
    format!(
        "SELECT GROUPING(day, k) AS grouping, day, k,
                COALESCE(sum(requests) FILTER (WHERE cur), 0)::bigint AS requests,
                COALESCE(sum(successes) FILTER (WHERE cur), 0)::bigint AS successes,
                COALESCE(sum(credits) FILTER (WHERE cur), 0)::bigint AS credits,
                COALESCE(sum(total_tokens) FILTER (WHERE cur), 0)::bigint AS tokens,
                COALESCE(sum(requests) FILTER (WHERE NOT cur), 0)::bigint AS prev_requests,
                COALESCE(sum(successes) FILTER (WHERE NOT cur), 0)::bigint AS prev_successes,
                COALESCE(sum(credits) FILTER (WHERE NOT cur), 0)::bigint AS prev_credits,
                COALESCE(sum(total_tokens) FILTER (WHERE NOT cur), 0)::bigint AS prev_tokens
         FROM (SELECT day, {k} AS k, day >= $3 AS cur, requests, successes, credits, total_tokens
                 FROM usage_daily
                WHERE org_id = $1 AND day >= $2 AND day < $4) AS r
         GROUP BY GROUPING SETS ({sets})"
    )
}

fn rollup_query(
    sql: String,
    range: &DayRange,
    previous_from: chrono::NaiveDate,
) -> BoxedSqlQuery<'static, Pg, SqlQuery> {
    diesel::sql_query(sql)
        .into_boxed()
        .bind::<diesel::sql_types::Uuid, _>(range.org_id)
        .bind::<diesel::sql_types::Date, _>(previous_from)
        .bind::<diesel::sql_types::Date, _>(range.from)
        .bind::<diesel::sql_types::Date, _>(range.until)
}

/// The usage page's figures for `range`, grouped by `group`: one statement
/// over the rollups of the range and of the period before it.
pub async fn rollup_report(
    conn: &mut AsyncPgConnection,
    range: &DayRange,
    group: RollupGroup,
) -> Result<RollupReport, DbError> {
    let sql = rollup_sql(group, "(day), (k), ()");
    let rows: Vec<RollupReportRow> = rollup_query(sql, range, range.previous().from)
        .load(conn)
        .await?;
    let mut report = RollupReport::default();
    for row in rows {
        match row.grouping {
            1 => {
                // Days of the previous period only feed the comparison.
                if let Some(day) = row.day.filter(|day| *day >= range.from) {
                    report.days.push(RollupDay {
                        day,
                        sums: row.current,
                    });
                }
            }
            2 => report.groups.push(RollupRow {
                key: row.k.clone(),
                previous: row.previous(),
                current: row.current,
            }),
            _ => {
                report.previous_total = row.previous();
                report.total = row.current;
            }
        }
    }
    report.days.sort_by_key(|d| d.day);
    report.groups.sort_by(|a, b| {
        (b.current.credits, b.current.requests, b.previous.credits)
            .cmp(&(a.current.credits, a.current.requests, a.previous.credits))
            .then_with(|| a.key.cmp(&b.key))
    });
    // A group seen only in the previous period has no row of its own.
    report
        .groups
        .retain(|g| g.current.requests > 0 || g.previous.requests > 0);
    Ok(report)
}

/// One day and group of a range, for the CSV export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupCell {
    pub day: chrono::NaiveDate,
    pub key: Option<String>,
    pub sums: RollupSums,
}

/// Every (day, group) of `range` with requests, by day then group: the rows
/// sum to the range's total.
pub async fn rollup_cells(
    conn: &mut AsyncPgConnection,
    range: &DayRange,
    group: RollupGroup,
) -> Result<Vec<RollupCell>, DbError> {
    let sql = format!(
        "{} ORDER BY day, k NULLS FIRST",
        rollup_sql(group, "(day, k)")
    );
    let rows: Vec<RollupReportRow> = rollup_query(sql, range, range.from).load(conn).await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            Some(RollupCell {
                day: row.day?,
                key: row.k,
                sums: row.current,
            })
        })
        .collect())
}
