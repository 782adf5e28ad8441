//! The `GET /usage` JSON envelope, built from a report. Times are shown in
//! the request's time zone as ISO 8601 with the offset in force then.

use std::collections::BTreeMap;

use chrono::{DateTime, FixedOffset, Offset, SecondsFormat, Utc};
use serde::Serialize;
use unigen_db::billing::usd;
use unigen_db::queries::usage::{
    CurrentPeriod, LocalRecord, SeriesPoint, TimeUnit, Totals, UsageReport,
};

/// `at` on the wall clock `offset_seconds` east of UTC (`Z` for UTC itself).
pub fn local_time(at: DateTime<Utc>, offset_seconds: i32) -> String {
    let offset = FixedOffset::east_opt(offset_seconds).unwrap_or_else(|| Utc.fix());
    at.with_timezone(&offset)
        .to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UsageResponse {
    pub success: bool,
    pub data: UsageData,
    pub meta: UsageMeta,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UsageData {
    pub summary: Summary,
    pub current_usage: CurrentUsage,
    /// The requested page of records, newest first.
    pub details: Vec<Detail>,
    pub aggregations: Aggregations,
}

/// The whole filtered range (not only the page).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Summary {
    pub total_requests: i64,
    pub total_credits: i64,
    /// Share of requests with status `success`, from 0 to 1 (0 without requests).
    #[schema(minimum = 0, maximum = 1, example = 0.975)]
    pub success_rate: f64,
    /// Mean latency in milliseconds (0 without requests).
    pub average_latency: f64,
    pub period: Period,
}

/// `[start, end)`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Period {
    #[schema(example = "2026-03-01T00:00:00-05:00")]
    pub start: String,
    pub end: String,
    #[schema(example = "America/New_York")]
    pub timezone: String,
}

/// The current billing period of the organization, whatever the filters.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CurrentUsage {
    pub requests: i64,
    pub credits_used: i64,
    pub credits_included: i64,
    /// Credits consumed beyond the included and purchased ones this period.
    pub credits_overage: i64,
    /// USD, at the plan's overage rate.
    pub overage_cost: f64,
    pub period: Period,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Detail {
    #[schema(example = "2026-02-28T21:30:00-05:00")]
    pub timestamp: String,
    /// The request's id (a job's id for jobs).
    pub request_id: String,
    pub api_key_id: Option<String>,
    #[schema(example = "/v1/chat/completions")]
    pub endpoint: String,
    pub method: String,
    pub model: String,
    pub credits: i64,
    /// Milliseconds.
    pub latency: i64,
    #[schema(example = "success")]
    pub status: String,
    pub metadata: DetailMetadata,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DetailMetadata {
    pub tools_used: Vec<String>,
    pub tokens: Tokens,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Tokens {
    pub prompt: i64,
    pub completion: i64,
    pub total: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GroupEntry {
    pub requests: i64,
    pub credits: i64,
    pub tokens: i64,
}

impl From<&Totals> for GroupEntry {
    fn from(totals: &Totals) -> Self {
        GroupEntry {
            requests: totals.requests,
            credits: totals.credits,
            tokens: totals.tokens,
        }
    }
}

/// One bucket of a time series; empty buckets are left out.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SeriesEntry {
    /// The bucket's start on the requested zone's wall clock.
    #[schema(example = "2026-02-28T00:00:00-05:00")]
    pub start: String,
    pub requests: i64,
    pub credits: i64,
    pub tokens: i64,
}

/// `by_model` and `by_endpoint` are objects keyed by model id and endpoint
/// path; the series named after `aggregation` is present when it was asked.
#[derive(Debug, Default, Serialize, utoipa::ToSchema)]
pub struct Aggregations {
    pub by_model: BTreeMap<String, GroupEntry>,
    pub by_endpoint: BTreeMap<String, GroupEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_hour: Option<Vec<SeriesEntry>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_day: Option<Vec<SeriesEntry>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_week: Option<Vec<SeriesEntry>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_month: Option<Vec<SeriesEntry>>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UsageMeta {
    pub pagination: Pagination,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Pagination {
    pub limit: i64,
    pub offset: i64,
    /// Records in the filtered range.
    pub total: i64,
    pub has_more: bool,
}

/// What the response needs besides the report.
pub struct Context<'a> {
    pub timezone: &'a str,
    pub series: Option<TimeUnit>,
    pub limit: i64,
    pub offset: i64,
    pub current: &'a CurrentPeriod,
    /// The zone's offsets at the current period's bounds.
    pub current_offsets: (i32, i32),
}

impl From<&LocalRecord> for Detail {
    fn from(local: &LocalRecord) -> Self {
        let r = &local.record;
        Detail {
            timestamp: local_time(r.created_at, local.utc_offset_seconds),
            request_id: r.id.to_string(),
            api_key_id: r.api_key_id.map(|id| id.to_string()),
            endpoint: r.endpoint.clone(),
            method: r.method.clone(),
            model: r.model.clone(),
            credits: r.credits,
            latency: r.latency_ms,
            status: r.status.clone(),
            metadata: DetailMetadata {
                tools_used: r.tools_used.clone(),
                tokens: Tokens {
                    prompt: r.prompt_tokens,
                    completion: r.completion_tokens,
                    total: r.total_tokens,
                },
            },
        }
    }
}

fn series_entries(points: &[SeriesPoint]) -> Vec<SeriesEntry> {
    points
        .iter()
        .map(|p| SeriesEntry {
            start: local_time(p.start, p.utc_offset_seconds),
            requests: p.requests,
            credits: p.credits,
            tokens: p.tokens,
        })
        .collect()
}

/// Rounded to `decimals` places, for numbers meant to be read.
fn round(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (value * scale).round() / scale
}

impl UsageResponse {
    pub fn new(report: &UsageReport, ctx: &Context<'_>) -> Self {
        let overall = &report.totals.overall;
        let success_rate = if overall.requests == 0 {
            0.0
        } else {
            round(overall.successes as f64 / overall.requests as f64, 4)
        };
        let filter_period = Period {
            start: local_time(report.start, report.start_offset_seconds),
            end: local_time(report.end, report.end_offset_seconds),
            timezone: ctx.timezone.to_owned(),
        };
        let current = ctx.current;
        let mut aggregations = Aggregations {
            by_model: group_entries(&report.totals.by_model),
            by_endpoint: group_entries(&report.totals.by_endpoint),
            ..Aggregations::default()
        };
        if let (Some(unit), Some(points)) = (ctx.series, &report.series) {
            let entries = Some(series_entries(points));
            match unit {
                TimeUnit::Hour => aggregations.by_hour = entries,
                TimeUnit::Day => aggregations.by_day = entries,
                TimeUnit::Week => aggregations.by_week = entries,
                TimeUnit::Month => aggregations.by_month = entries,
            }
        }
        let shown = report.records.len() as i64;
        UsageResponse {
            success: true,
            data: UsageData {
                summary: Summary {
                    total_requests: overall.requests,
                    total_credits: overall.credits,
                    success_rate,
                    average_latency: round(overall.average_latency_ms, 2),
                    period: filter_period,
                },
                current_usage: CurrentUsage {
                    requests: current.requests,
                    credits_used: current.credits_used,
                    credits_included: current.credits_included,
                    credits_overage: current.credits_overage,
                    overage_cost: usd(
                        current.credits_overage * current.overage_rate_micros.unwrap_or(0)
                    ),
                    period: Period {
                        start: local_time(current.start, ctx.current_offsets.0),
                        end: local_time(current.end, ctx.current_offsets.1),
                        timezone: ctx.timezone.to_owned(),
                    },
                },
                details: report.records.iter().map(Detail::from).collect(),
                aggregations,
            },
            meta: UsageMeta {
                pagination: Pagination {
                    limit: ctx.limit,
                    offset: ctx.offset,
                    total: overall.requests,
                    has_more: ctx.offset + shown < overall.requests,
                },
            },
        }
    }
}

fn group_entries(groups: &[(String, Totals)]) -> BTreeMap<String, GroupEntry> {
    groups
        .iter()
        .map(|(key, totals)| (key.clone(), GroupEntry::from(totals)))
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn local_times_carry_the_offset_in_force_and_utc_shows_z() {
        let at = Utc.with_ymd_and_hms(2026, 3, 1, 2, 30, 0).unwrap();
        assert_eq!(local_time(at, -5 * 3600), "2026-02-28T21:30:00-05:00");
        assert_eq!(local_time(at, 19_800), "2026-03-01T08:00:00+05:30");
        assert_eq!(local_time(at, 0), "2026-03-01T02:30:00Z");
    }
}
