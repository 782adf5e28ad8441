//! The `GET /usage` query string, validated; every error names its field.

use std::collections::HashMap;

use unigen_core::ValidationError;
use unigen_db::queries::usage::TimeUnit;
use uuid::Uuid;

pub use crate::routes::params::{Bound, parse_bound};

pub const DEFAULT_LIMIT: i64 = 100;
/// The spec's "Usage page size max 1000".
pub const MAX_LIMIT: i64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Csv,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregation {
    /// A time series in buckets of this width.
    Series(TimeUnit),
    /// Per model: `by_model`, which every answer carries anyway.
    Model,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UsageParams {
    pub start: Option<Bound>,
    /// Exclusive; a bare date means the end of that day.
    pub end: Option<Bound>,
    pub api_key_id: Option<Uuid>,
    pub model: Option<String>,
    pub endpoint: Option<String>,
    pub aggregation: Option<Aggregation>,
    /// Not yet checked against the tz database (that needs PostgreSQL).
    pub timezone: String,
    pub limit: i64,
    pub offset: i64,
    pub format: Format,
}

impl UsageParams {
    pub fn parse(query: &HashMap<String, String>) -> Result<Self, ValidationError> {
        // PostgreSQL text cannot hold NUL: a 400 naming the parameter.
        for name in [
            "model",
            "endpoint",
            "timezone",
            "api_key_id",
            "start_date",
            "end_date",
        ] {
            if query.get(name).is_some_and(|v| v.contains('\0')) {
                return Err(ValidationError::new(
                    name,
                    format!("{name} must not contain NUL characters"),
                ));
            }
        }
        // An empty free-text value (`model=`) is the same as leaving the
        // parameter out; a typed one given empty (`limit=`) is refused.
        for name in [
            "limit",
            "offset",
            "format",
            "aggregation",
            "api_key_id",
            "start_date",
            "end_date",
        ] {
            if query.get(name).is_some_and(|v| v.trim().is_empty()) {
                return Err(ValidationError::new(
                    name,
                    format!("{name} must not be empty (leave it out for the default)"),
                ));
            }
        }
        let get = |name: &str| query.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
        let limit = match get("limit") {
            None => DEFAULT_LIMIT,
            Some(raw) => raw
                .parse::<i64>()
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or_else(|| {
                    ValidationError::new(
                        "limit",
                        format!("limit must be an integer from 1 to {MAX_LIMIT}, got `{raw}`"),
                    )
                })?,
        };
        let offset = match get("offset") {
            None => 0,
            Some(raw) => raw.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                ValidationError::new(
                    "offset",
                    format!("offset must be a non-negative integer, got `{raw}`"),
                )
            })?,
        };
        let format = match get("format") {
            None | Some("json") => Format::Json,
            Some("csv") => Format::Csv,
            Some(other) => {
                return Err(ValidationError::new(
                    "format",
                    format!("format must be json or csv, got `{other}`"),
                ));
            }
        };
        let aggregation = match get("aggregation") {
            None => None,
            Some("model") => Some(Aggregation::Model),
            Some(raw) => Some(Aggregation::Series(raw.parse().map_err(|()| {
                ValidationError::new(
                    "aggregation",
                    format!("aggregation must be hour, day, week, month or model, got `{raw}`"),
                )
            })?)),
        };
        let api_key_id = match get("api_key_id") {
            None => None,
            Some(raw) => Some(raw.parse::<Uuid>().map_err(|_| {
                ValidationError::new(
                    "api_key_id",
                    format!("api_key_id must be an API key id (a UUID), got `{raw}`"),
                )
            })?),
        };
        Ok(UsageParams {
            start: get("start_date")
                .map(|raw| parse_bound("start_date", raw, false))
                .transpose()?,
            end: get("end_date")
                .map(|raw| parse_bound("end_date", raw, true))
                .transpose()?,
            api_key_id,
            model: get("model").map(str::to_owned),
            endpoint: get("endpoint").map(str::to_owned),
            aggregation,
            timezone: get("timezone").unwrap_or("UTC").to_owned(),
            limit,
            offset,
            format,
        })
    }
}

#[cfg(test)]
mod tests {
    use chrono::{NaiveDateTime, TimeZone, Utc};

    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<UsageParams, ValidationError> {
        let query = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        UsageParams::parse(&query)
    }

    fn local(text: &str) -> Bound {
        Bound::Local(NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").unwrap())
    }

    #[test]
    fn defaults_are_utc_json_the_first_hundred_and_no_series() {
        let params = parse(&[]).unwrap();
        assert_eq!(
            (
                params.limit,
                params.offset,
                params.format,
                params.timezone.as_str()
            ),
            (100, 0, Format::Json, "UTC")
        );
        assert_eq!(
            (params.start, params.end, params.aggregation),
            (None, None, None)
        );
    }

    #[test]
    fn a_bare_end_date_includes_that_whole_day() {
        let params = parse(&[("start_date", "2026-02-28"), ("end_date", "2026-02-28")]).unwrap();
        assert_eq!(params.start, Some(local("2026-02-28T00:00:00")));
        assert_eq!(params.end, Some(local("2026-03-01T00:00:00")));
    }

    #[test]
    fn date_times_with_an_offset_are_instants_and_without_one_wall_clock_times() {
        let params = parse(&[
            ("start_date", "2026-03-01T05:30:00+05:30"),
            ("end_date", "2026-03-02T10:15"),
        ])
        .unwrap();
        assert_eq!(
            params.start,
            Some(Bound::Instant(
                Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap()
            ))
        );
        assert_eq!(params.end, Some(local("2026-03-02T10:15:00")));
        // `+` decoded to a space by form encoding still reads as an offset.
        let params = parse(&[("start_date", "2026-03-01T05:30:00 05:30")]).unwrap();
        assert_eq!(
            params.start,
            Some(Bound::Instant(
                Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap()
            ))
        );
    }

    #[test]
    fn every_invalid_value_names_its_field() {
        for (field, value) in [
            ("limit", "1001"),
            ("limit", "0"),
            ("limit", "ten"),
            ("offset", "-1"),
            ("format", "xml"),
            ("aggregation", "minute"),
            ("api_key_id", "key-1"),
            ("start_date", "yesterday"),
            ("end_date", "2026-02-30"),
        ] {
            let err = parse(&[(field, value)]).unwrap_err();
            assert_eq!(err.field, field, "{field}={value}");
            assert!(err.message.contains(value), "{}", err.message);
        }
    }

    #[test]
    fn aggregation_takes_the_four_units_and_model() {
        for (raw, expected) in [
            ("hour", Aggregation::Series(TimeUnit::Hour)),
            ("day", Aggregation::Series(TimeUnit::Day)),
            ("week", Aggregation::Series(TimeUnit::Week)),
            ("month", Aggregation::Series(TimeUnit::Month)),
            ("model", Aggregation::Model),
        ] {
            assert_eq!(
                parse(&[("aggregation", raw)]).unwrap().aggregation,
                Some(expected)
            );
        }
    }
}
