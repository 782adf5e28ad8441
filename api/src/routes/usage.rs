//! `GET /api/v1/usage`: the organization's metered requests, summed, grouped
//! and listed (all in SQL), as the spec's envelope or as a CSV download.

mod export;
mod params;
mod view;

use std::collections::HashMap;

use actix_web::http::header;
use actix_web::{HttpResponse, get, web};
use chrono::{DateTime, TimeDelta, Utc};
use diesel_async::AsyncPgConnection;
use unigen_core::ValidationError;
use unigen_core::domain::Scope;
use unigen_db::DbError;
use unigen_db::queries::usage;
use unigen_db::queries::usage::{ReportQuery, UsageFilter};

use self::params::{Aggregation, Bound, Format, UsageParams};
use self::view::{Context, UsageResponse, local_time};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// Usage analytics: summary, current billing period, records and aggregations.
#[utoipa::path(
    tag = "usage",
    params(
        ("start_date" = Option<String>, Query, format = Date, description = "ISO 8601 date or date-time; a date or a date-time without offset is read in `timezone`. Default: start of the current billing period"),
        ("end_date" = Option<String>, Query, format = Date, description = "Exclusive ISO 8601 date-time, or a date (included whole). Default: now"),
        ("api_key_id" = Option<String>, Query, format = Uuid, description = "Only this API key's requests"),
        ("model" = Option<String>, Query, description = "Only this model"),
        ("endpoint" = Option<String>, Query, description = "Only this endpoint, e.g. /v1/chat/completions"),
        ("aggregation" = Option<String>, Query, pattern = "^(hour|day|week|month|model)$", description = "hour, day, week (from Monday) or month adds `aggregations.by_<unit>`; model (by_model is always present)"),
        ("timezone" = Option<String>, Query, description = "IANA time zone name for dates, buckets and timestamps (default UTC)"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 1000, description = "Records per page, 1 to 1000, default 100 (JSON only)"),
        ("offset" = Option<i64>, Query, minimum = 0, description = "Records to skip, default 0 (JSON only)"),
        ("format" = Option<String>, Query, pattern = "^(json|csv)$", description = "json (default) or csv: every record of the range, up to 100,000 rows"),
    ),
    responses(
        (status = 200, description = "The envelope; with format=csv a text/csv attachment (`Content-Disposition: attachment`) of every record in the range", content(
            (UsageResponse = "application/json"),
            (String = "text/csv"),
        ), headers(
            ("X-Total-Count" = i64, description = "format=csv: records in the range"),
            ("X-Row-Count" = i64, description = "format=csv: rows in the file"),
        )),
        (status = 400, description = "A parameter is invalid; `param` names it", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "API key does not have required scope: usage", body = ErrorBody),
    ),
    security(("bearer" = ["usage"]))
)]
#[get("/usage")]
pub async fn get_usage(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Usage)?;
    let params = UsageParams::parse(&query)?;
    // Usage as of the answers this process sent.
    state.allowances.settled(caller.org_id).await;
    let tz = params.timezone.as_str();
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    if !usage::is_known_timezone(&mut conn, tz).await? {
        return Err(ValidationError::new(
            "timezone",
            format!("timezone must be an IANA time zone name such as America/New_York, got `{tz}`"),
        )
        .into());
    }
    let now = Utc::now();
    let current = usage::current_period(&mut conn, caller.org_id, now).await?;
    let end = match params.end {
        Some(bound) => resolve(&mut conn, bound, tz).await?,
        None => now,
    };
    let start = match params.start {
        Some(bound) => resolve(&mut conn, bound, tz).await?,
        // An end before the current period, alone, asks about the past:
        // the (calendar) period it closes is read.
        None if end <= current.start => {
            unigen_db::queries::billing::period_containing(end - TimeDelta::nanoseconds(1)).0
        }
        None => current.start,
    };
    if start >= end {
        return Err(ValidationError::new(
            "end_date",
            format!("end_date must be after start_date ({start} is not before {end})"),
        )
        .into());
    }
    let filter = UsageFilter {
        org_id: caller.org_id,
        start,
        end,
        api_key_id: params.api_key_id,
        model: params.model.clone(),
        endpoint: params.endpoint.clone(),
    };
    if params.format == Format::Csv {
        return csv_response(&mut conn, &filter, tz).await;
    }
    let series = match params.aggregation {
        Some(Aggregation::Series(unit)) => Some(unit),
        Some(Aggregation::Model) | None => None,
    };
    let report = usage::report(
        &mut conn,
        &ReportQuery {
            filter,
            timezone: tz,
            series,
            limit: params.limit,
            offset: params.offset,
        },
    )
    .await?;
    let current_offsets = (
        usage::utc_offset_seconds(&mut conn, current.start, tz).await?,
        usage::utc_offset_seconds(&mut conn, current.end, tz).await?,
    );
    let context = Context {
        timezone: tz,
        series,
        limit: params.limit,
        offset: params.offset,
        current: &current,
        current_offsets,
    };
    Ok(HttpResponse::Ok().json(UsageResponse::new(&report, &context)))
}

async fn resolve(
    conn: &mut AsyncPgConnection,
    bound: Bound,
    timezone: &str,
) -> Result<DateTime<Utc>, ApiError> {
    Ok(match bound {
        Bound::Instant(at) => at,
        Bound::Local(local) => usage::local_to_utc(conn, local, timezone).await?,
    })
}

async fn csv_response(
    conn: &mut AsyncPgConnection,
    filter: &UsageFilter,
    timezone: &str,
) -> Result<HttpResponse, ApiError> {
    let export = export::export(conn, filter, timezone).await?;
    // Named by the local dates covered: the end is exclusive, so its date is
    // the one of the last instant inside the range.
    let last_instant = filter.end - TimeDelta::microseconds(1);
    let first_day = local_time(
        filter.start,
        usage::utc_offset_seconds(conn, filter.start, timezone).await?,
    );
    let last_day = local_time(
        last_instant,
        usage::utc_offset_seconds(conn, last_instant, timezone).await?,
    );
    let filename = format!("usage-{}-{}.csv", &first_day[..10], &last_day[..10]);
    Ok(HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{filename}\""),
        ))
        .insert_header(("X-Total-Count", export.total.to_string()))
        .insert_header(("X-Row-Count", export.rows.to_string()))
        .body(export.body))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_usage_route_is_in_the_openapi_document_with_the_usage_scope() {
        let doc = serde_json::to_value(crate::openapi::document()).unwrap();
        let operation = &doc["paths"]["/api/v1/usage"]["get"];
        assert_eq!(
            operation["security"][0]["bearer"][0], "usage",
            "{operation}"
        );
        let params: Vec<&str> = operation["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        for name in [
            "start_date",
            "end_date",
            "aggregation",
            "timezone",
            "limit",
            "format",
        ] {
            assert!(params.contains(&name), "{name} missing from {params:?}");
        }
        assert!(doc["components"]["schemas"]["UsageResponse"].is_object());
    }
}
