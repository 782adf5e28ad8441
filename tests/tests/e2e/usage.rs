//! `GET /api/v1/usage` over known usage records: aggregation by every unit
//! in UTC and in zones with DST and half-hour offsets, filters, pagination,
//! isolation between organizations, the scope, validation and CSV.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Client;
use unigen_core::domain::hash_key;
use unigen_tests::{TestApp, TestOptions, json_of};
use uuid::Uuid;

const CHAT: &str = "/v1/chat/completions";
const IMAGES: &str = "/v1/images/generations";
const LEGACY: &str = "/api/v1/ai-image/generate";
const ECHO: &str = "local/echo";
const PROCEDURAL: &str = "local/procedural-v1";

/// A usage record to insert; `key_b` picks the second key.
#[derive(Clone, Copy)]
struct Row {
    at: &'static str,
    key_b: bool,
    endpoint: &'static str,
    model: &'static str,
    credits: i64,
    latency_ms: i64,
    status: &'static str,
    tools: &'static [&'static str],
    tokens: (i64, i64, i64),
}

const fn row(at: &'static str, endpoint: &'static str, model: &'static str, credits: i64) -> Row {
    Row {
        at,
        key_b: false,
        endpoint,
        model,
        credits,
        latency_ms: 100,
        status: "success",
        tools: &[],
        tokens: (0, 0, 0),
    }
}

/// Eight records, oldest first. In New York, r5 (02:30Z on 1 March) is
/// still 28 February, and DST starts on 8 March at 07:00Z between r6 and r7.
/// In Kolkata (+05:30) r4 is already 1 March and r2/r3 share an hour.
const ROWS: [Row; 8] = [
    Row {
        tokens: (10, 20, 30),
        tools: &["web_search", "code_interpreter"],
        ..row("2026-01-15T10:00:00Z", CHAT, ECHO, 3)
    },
    Row {
        latency_ms: 200,
        tokens: (5, 5, 10),
        ..row("2026-01-15T10:45:00Z", CHAT, ECHO, 5)
    },
    Row {
        latency_ms: 1000,
        status: "failed",
        ..row("2026-01-15T11:05:00Z", IMAGES, PROCEDURAL, 2)
    },
    Row {
        latency_ms: 300,
        tokens: (1, 2, 3),
        ..row("2026-02-28T23:30:00Z", CHAT, ECHO, 7)
    },
    Row {
        latency_ms: 900,
        ..row("2026-03-01T02:30:00Z", IMAGES, PROCEDURAL, 4)
    },
    Row {
        key_b: true,
        latency_ms: 50,
        status: "cancelled",
        tokens: (4, 0, 4),
        ..row("2026-03-08T06:30:00Z", CHAT, ECHO, 1)
    },
    Row {
        key_b: true,
        latency_ms: 700,
        ..row("2026-03-08T07:30:00Z", LEGACY, PROCEDURAL, 6)
    },
    Row {
        key_b: true,
        latency_ms: 150,
        tokens: (100, 50, 150),
        ..row("2026-03-09T12:00:00Z", CHAT, ECHO, 8)
    },
];

/// The whole data set, as dates in the requested zone (the end date included).
const RANGE: &str = "start_date=2026-01-01&end_date=2026-03-31";

struct Fixture {
    app: TestApp,
    key_a: Uuid,
    key_b: Uuid,
    /// Ids of `ROWS`, in the same order.
    ids: Vec<Uuid>,
}

async fn key_id(client: &Client, key: &str) -> Uuid {
    client
        .query_one(
            "SELECT id FROM api_keys WHERE key_hash = $1",
            &[&&hash_key(key)[..]],
        )
        .await
        .expect("the key's row")
        .get(0)
}

async fn insert(client: &Client, org: Uuid, key: Option<Uuid>, row: &Row) -> Uuid {
    let at = DateTime::parse_from_rfc3339(row.at).expect("an RFC 3339 time");
    insert_at(client, org, key, row, at.into()).await
}

/// `row` recorded at `at` instead of `row.at`.
async fn insert_at(
    client: &Client,
    org: Uuid,
    key: Option<Uuid>,
    row: &Row,
    at: DateTime<Utc>,
) -> Uuid {
    let id = Uuid::now_v7();
    let tools: Vec<&str> = row.tools.to_vec();
    client
        .execute(
            "INSERT INTO usage_records (id, org_id, api_key_id, endpoint, method, model, credits,
                 latency_ms, status, tools_used, prompt_tokens, completion_tokens, total_tokens,
                 created_at)
             VALUES ($1, $2, $3, $4, 'POST', $5, $6, $7, $8, $9, $10, $11, $12, $13)",
            &[
                &id,
                &org,
                &key,
                &row.endpoint,
                &row.model,
                &row.credits,
                &row.latency_ms,
                &row.status,
                &tools,
                &row.tokens.0,
                &row.tokens.1,
                &row.tokens.2,
                &at,
            ],
        )
        .await
        .expect("inserting a usage record");
    id
}

async fn fixture() -> Fixture {
    let app = TestApp::spawn_with(
        TestOptions {
            scheduler: false,
            ..TestOptions::default()
        }
        .without_worker(),
    )
    .await;
    let client = app.db.client().await;
    let key_a = key_id(&client, &app.key).await;
    let second = app.create_key(app.org_id, &["usage"], None).await;
    let key_b = key_id(&client, &second).await;
    let mut ids = Vec::new();
    for row in &ROWS {
        let key = if row.key_b { key_b } else { key_a };
        ids.push(insert(&client, app.org_id, Some(key), row).await);
    }
    Fixture {
        app,
        key_a,
        key_b,
        ids,
    }
}

async fn usage(app: &TestApp, key: &str, query: &str) -> Value {
    let (status, body) = json_of(app.get(&format!("/api/v1/usage?{query}"), key).await).await;
    assert_eq!(status, 200, "{query}: {body}");
    assert_eq!(body["success"], true);
    body
}

/// `(start, requests, credits, tokens)` of the series `aggregations.by_<unit>`.
fn series(body: &Value, unit: &str) -> Vec<(String, i64, i64, i64)> {
    body["data"]["aggregations"][format!("by_{unit}")]
        .as_array()
        .unwrap_or_else(|| panic!("by_{unit} missing: {body}"))
        .iter()
        .map(|e| {
            (
                e["start"].as_str().unwrap().to_owned(),
                e["requests"].as_i64().unwrap(),
                e["credits"].as_i64().unwrap(),
                e["tokens"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn expected(points: &[(&str, i64, i64, i64)]) -> Vec<(String, i64, i64, i64)> {
    points
        .iter()
        .map(|&(start, requests, credits, tokens)| (start.to_owned(), requests, credits, tokens))
        .collect()
}

/// `{key: (requests, credits)}` of `aggregations.<name>`, sorted by key.
fn groups(body: &Value, name: &str) -> Vec<(String, i64, i64)> {
    body["data"]["aggregations"][name]
        .as_object()
        .unwrap_or_else(|| panic!("{name} missing: {body}"))
        .iter()
        .map(|(key, e)| {
            (
                key.clone(),
                e["requests"].as_i64().unwrap(),
                e["credits"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn owned(entries: &[(&str, i64, i64)]) -> Vec<(String, i64, i64)> {
    entries
        .iter()
        .map(|&(key, requests, credits)| (key.to_owned(), requests, credits))
        .collect()
}

fn request_ids(body: &Value) -> Vec<String> {
    body["data"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["request_id"].as_str().unwrap().to_owned())
        .collect()
}

async fn error_of(app: &TestApp, key: &str, query: &str) -> (u16, Value) {
    let (status, body) = json_of(app.get(&format!("/api/v1/usage?{query}"), key).await).await;
    (status, body["error"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_summed_grouped_and_bucketed_by_hour_day_week_and_month_in_utc() {
    let f = fixture().await;
    let body = usage(&f.app, &f.app.key, &format!("{RANGE}&aggregation=hour")).await;
    let summary = &body["data"]["summary"];
    assert_eq!(summary["total_requests"], 8);
    assert_eq!(summary["total_credits"], 36);
    assert_eq!(summary["success_rate"], 0.75, "6 of 8 succeeded");
    assert_eq!(summary["average_latency"], 425.0);
    assert_eq!(summary["period"]["start"], "2026-01-01T00:00:00Z");
    assert_eq!(summary["period"]["end"], "2026-04-01T00:00:00Z");
    assert_eq!(
        groups(&body, "by_model"),
        owned(&[(ECHO, 5, 24), (PROCEDURAL, 3, 12)])
    );
    assert_eq!(
        groups(&body, "by_endpoint"),
        owned(&[(LEGACY, 1, 6), (CHAT, 5, 24), (IMAGES, 2, 6)])
    );
    assert_eq!(
        series(&body, "hour"),
        expected(&[
            ("2026-01-15T10:00:00Z", 2, 8, 40),
            ("2026-01-15T11:00:00Z", 1, 2, 0),
            ("2026-02-28T23:00:00Z", 1, 7, 3),
            ("2026-03-01T02:00:00Z", 1, 4, 0),
            ("2026-03-08T06:00:00Z", 1, 1, 4),
            ("2026-03-08T07:00:00Z", 1, 6, 0),
            ("2026-03-09T12:00:00Z", 1, 8, 150),
        ])
    );
    assert!(
        body["data"]["aggregations"].get("by_day").is_none(),
        "only the requested series"
    );
    let day = usage(&f.app, &f.app.key, &format!("{RANGE}&aggregation=day")).await;
    assert_eq!(
        series(&day, "day"),
        expected(&[
            ("2026-01-15T00:00:00Z", 3, 10, 40),
            ("2026-02-28T00:00:00Z", 1, 7, 3),
            ("2026-03-01T00:00:00Z", 1, 4, 0),
            ("2026-03-08T00:00:00Z", 2, 7, 4),
            ("2026-03-09T00:00:00Z", 1, 8, 150),
        ])
    );
    // Weeks start on Monday: 1 March 2026 is a Sunday, 9 March a Monday.
    let week = usage(&f.app, &f.app.key, &format!("{RANGE}&aggregation=week")).await;
    assert_eq!(
        series(&week, "week"),
        expected(&[
            ("2026-01-12T00:00:00Z", 3, 10, 40),
            ("2026-02-23T00:00:00Z", 2, 11, 3),
            ("2026-03-02T00:00:00Z", 2, 7, 4),
            ("2026-03-09T00:00:00Z", 1, 8, 150),
        ])
    );
    let month = usage(&f.app, &f.app.key, &format!("{RANGE}&aggregation=month")).await;
    assert_eq!(
        series(&month, "month"),
        expected(&[
            ("2026-01-01T00:00:00Z", 3, 10, 40),
            ("2026-02-01T00:00:00Z", 1, 7, 3),
            ("2026-03-01T00:00:00Z", 4, 19, 154),
        ])
    );
    let by_model = usage(&f.app, &f.app.key, &format!("{RANGE}&aggregation=model")).await;
    assert_eq!(
        groups(&by_model, "by_model"),
        owned(&[(ECHO, 5, 24), (PROCEDURAL, 3, 12)])
    );
    for unit in ["hour", "day", "week", "month"] {
        assert!(
            by_model["data"]["aggregations"]
                .get(format!("by_{unit}"))
                .is_none()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_follow_the_wall_clock_of_new_york_across_dst() {
    let f = fixture().await;
    let query = |unit: &str| format!("{RANGE}&timezone=America/New_York&aggregation={unit}");
    let day = usage(&f.app, &f.app.key, &query("day")).await;
    // 2026-03-01T02:30Z is 21:30 on 28 February in New York; from 8 March
    // the zone is on EDT (-04:00).
    assert_eq!(
        series(&day, "day"),
        expected(&[
            ("2026-01-15T00:00:00-05:00", 3, 10, 40),
            ("2026-02-28T00:00:00-05:00", 2, 11, 3),
            ("2026-03-08T00:00:00-05:00", 2, 7, 4),
            ("2026-03-09T00:00:00-04:00", 1, 8, 150),
        ])
    );
    let summary = &day["data"]["summary"];
    assert_eq!(summary["period"]["start"], "2026-01-01T00:00:00-05:00");
    assert_eq!(summary["period"]["end"], "2026-04-01T00:00:00-04:00");
    assert_eq!(summary["period"]["timezone"], "America/New_York");
    let hour = usage(&f.app, &f.app.key, &query("hour")).await;
    assert_eq!(
        series(&hour, "hour"),
        expected(&[
            ("2026-01-15T05:00:00-05:00", 2, 8, 40),
            ("2026-01-15T06:00:00-05:00", 1, 2, 0),
            ("2026-02-28T18:00:00-05:00", 1, 7, 3),
            ("2026-02-28T21:00:00-05:00", 1, 4, 0),
            ("2026-03-08T01:00:00-05:00", 1, 1, 4),
            ("2026-03-08T03:00:00-04:00", 1, 6, 0),
            ("2026-03-09T08:00:00-04:00", 1, 8, 150),
        ])
    );
    let week = usage(&f.app, &f.app.key, &query("week")).await;
    assert_eq!(
        series(&week, "week"),
        expected(&[
            ("2026-01-12T00:00:00-05:00", 3, 10, 40),
            ("2026-02-23T00:00:00-05:00", 2, 11, 3),
            ("2026-03-02T00:00:00-05:00", 2, 7, 4),
            ("2026-03-09T00:00:00-04:00", 1, 8, 150),
        ])
    );
    let month = usage(&f.app, &f.app.key, &query("month")).await;
    assert_eq!(
        series(&month, "month"),
        expected(&[
            ("2026-01-01T00:00:00-05:00", 3, 10, 40),
            ("2026-02-01T00:00:00-05:00", 2, 11, 3),
            ("2026-03-01T00:00:00-05:00", 3, 15, 154),
        ])
    );
    // Timestamps of records are shown on the same wall clock.
    let details = &day["data"]["details"];
    assert_eq!(details[3]["timestamp"], "2026-02-28T21:30:00-05:00");
    assert_eq!(details[1]["timestamp"], "2026-03-08T03:30:00-04:00");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_follow_the_half_hour_offset_of_kolkata() {
    let f = fixture().await;
    let query = |unit: &str| format!("{RANGE}&timezone=Asia/Kolkata&aggregation={unit}");
    let hour = usage(&f.app, &f.app.key, &query("hour")).await;
    // 10:45Z and 11:05Z are 16:15 and 16:35 in Kolkata: one hour there.
    assert_eq!(
        series(&hour, "hour"),
        expected(&[
            ("2026-01-15T15:00:00+05:30", 1, 3, 30),
            ("2026-01-15T16:00:00+05:30", 2, 7, 10),
            ("2026-03-01T05:00:00+05:30", 1, 7, 3),
            ("2026-03-01T08:00:00+05:30", 1, 4, 0),
            ("2026-03-08T12:00:00+05:30", 1, 1, 4),
            ("2026-03-08T13:00:00+05:30", 1, 6, 0),
            ("2026-03-09T17:00:00+05:30", 1, 8, 150),
        ])
    );
    let day = usage(&f.app, &f.app.key, &query("day")).await;
    assert_eq!(
        series(&day, "day"),
        expected(&[
            ("2026-01-15T00:00:00+05:30", 3, 10, 40),
            ("2026-03-01T00:00:00+05:30", 2, 11, 3),
            ("2026-03-08T00:00:00+05:30", 2, 7, 4),
            ("2026-03-09T00:00:00+05:30", 1, 8, 150),
        ])
    );
    let week = usage(&f.app, &f.app.key, &query("week")).await;
    assert_eq!(
        series(&week, "week"),
        expected(&[
            ("2026-01-12T00:00:00+05:30", 3, 10, 40),
            ("2026-02-23T00:00:00+05:30", 2, 11, 3),
            ("2026-03-02T00:00:00+05:30", 2, 7, 4),
            ("2026-03-09T00:00:00+05:30", 1, 8, 150),
        ])
    );
    // 23:30Z on 28 February is already March in Kolkata: no February bucket.
    let month = usage(&f.app, &f.app.key, &query("month")).await;
    assert_eq!(
        series(&month, "month"),
        expected(&[
            ("2026-01-01T00:00:00+05:30", 3, 10, 40),
            ("2026-03-01T00:00:00+05:30", 5, 26, 157),
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dates_are_read_in_the_requested_zone_and_date_times_with_offsets_as_instants() {
    let f = fixture().await;
    let feb_28 = "start_date=2026-02-28&end_date=2026-02-28";
    let utc = usage(&f.app, &f.app.key, feb_28).await;
    assert_eq!(request_ids(&utc), [f.ids[3].to_string()]);
    let new_york = usage(
        &f.app,
        &f.app.key,
        &format!("{feb_28}&timezone=America/New_York"),
    )
    .await;
    assert_eq!(
        request_ids(&new_york),
        [f.ids[4].to_string(), f.ids[3].to_string()]
    );
    // An explicit offset wins over the zone; the end is exclusive.
    let instants = usage(
        &f.app,
        &f.app.key,
        "start_date=2026-03-01T04:00:00%2B05:30&end_date=2026-03-01T02:30:00Z&timezone=America/New_York",
    )
    .await;
    assert_eq!(request_ids(&instants), [f.ids[3].to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_by_model_endpoint_and_api_key_narrow_every_figure() {
    let f = fixture().await;
    let by_model = usage(&f.app, &f.app.key, &format!("{RANGE}&model={PROCEDURAL}")).await;
    assert_eq!(by_model["data"]["summary"]["total_requests"], 3);
    assert_eq!(by_model["data"]["summary"]["total_credits"], 12);
    assert_eq!(by_model["data"]["summary"]["success_rate"], 0.6667);
    assert_eq!(
        groups(&by_model, "by_endpoint"),
        owned(&[(LEGACY, 1, 6), (IMAGES, 2, 6)])
    );
    assert_eq!(
        request_ids(&by_model),
        [6, 4, 2].map(|i| f.ids[i].to_string())
    );

    let by_endpoint = usage(
        &f.app,
        &f.app.key,
        &format!("{RANGE}&endpoint={CHAT}&aggregation=month"),
    )
    .await;
    assert_eq!(
        series(&by_endpoint, "month"),
        expected(&[
            ("2026-01-01T00:00:00Z", 2, 8, 40),
            ("2026-02-01T00:00:00Z", 1, 7, 3),
            ("2026-03-01T00:00:00Z", 2, 9, 154),
        ])
    );
    assert_eq!(groups(&by_endpoint, "by_model"), owned(&[(ECHO, 5, 24)]));

    let key_b = usage(
        &f.app,
        &f.app.key,
        &format!("{RANGE}&api_key_id={}", f.key_b),
    )
    .await;
    assert_eq!(request_ids(&key_b), [7, 6, 5].map(|i| f.ids[i].to_string()));
    assert_eq!(key_b["data"]["summary"]["total_credits"], 15);
    let details = key_b["data"]["details"].as_array().unwrap();
    assert!(
        details
            .iter()
            .all(|d| d["api_key_id"] == f.key_b.to_string())
    );

    let combined = usage(
        &f.app,
        &f.app.key,
        &format!(
            "{RANGE}&api_key_id={}&model={ECHO}&endpoint={CHAT}",
            f.key_a
        ),
    )
    .await;
    assert_eq!(
        request_ids(&combined),
        [3, 1, 0].map(|i| f.ids[i].to_string())
    );
    assert_eq!(combined["data"]["summary"]["total_credits"], 15);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_are_newest_first_with_the_total_and_whether_more_follow() {
    let f = fixture().await;
    let first = usage(&f.app, &f.app.key, &format!("{RANGE}&limit=3")).await;
    assert_eq!(request_ids(&first), [7, 6, 5].map(|i| f.ids[i].to_string()));
    assert_eq!(
        first["meta"]["pagination"],
        serde_json::json!({"limit": 3, "offset": 0, "total": 8, "has_more": true})
    );
    let last = usage(&f.app, &f.app.key, &format!("{RANGE}&limit=3&offset=6")).await;
    assert_eq!(request_ids(&last), [1, 0].map(|i| f.ids[i].to_string()));
    assert_eq!(
        last["meta"]["pagination"],
        serde_json::json!({"limit": 3, "offset": 6, "total": 8, "has_more": false})
    );
    // Totals cover the whole range, not the page.
    assert_eq!(last["data"]["summary"]["total_credits"], 36);
    let oldest = &last["data"]["details"][1];
    assert_eq!(
        oldest,
        &serde_json::json!({
            "timestamp": "2026-01-15T10:00:00Z",
            "request_id": f.ids[0].to_string(),
            "api_key_id": f.key_a.to_string(),
            "endpoint": CHAT,
            "method": "POST",
            "model": ECHO,
            "credits": 3,
            "latency": 100,
            "status": "success",
            "metadata": {
                "tools_used": ["web_search", "code_interpreter"],
                "tokens": {"prompt": 10, "completion": 20, "total": 30}
            }
        })
    );
    let beyond = usage(&f.app, &f.app.key, &format!("{RANGE}&offset=8")).await;
    assert!(request_ids(&beyond).is_empty());
    assert_eq!(beyond["meta"]["pagination"]["has_more"], false);
    let default = usage(&f.app, &f.app.key, RANGE).await;
    assert_eq!(default["meta"]["pagination"]["limit"], 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_parameters_are_400_naming_the_field() {
    let f = fixture().await;
    for (query, param) in [
        ("limit=1001", "limit"),
        ("limit=0", "limit"),
        ("offset=-1", "offset"),
        ("timezone=Mars/Olympus_Mons", "timezone"),
        ("timezone=posix/Europe/Paris", "timezone"),
        ("aggregation=minute", "aggregation"),
        ("format=xml", "format"),
        ("api_key_id=not-a-uuid", "api_key_id"),
        ("start_date=last-week", "start_date"),
        ("start_date=2026-03-02&end_date=2026-03-01", "end_date"),
        // Byte len-6 falls inside a character: a 400, never a panic.
        ("start_date=a%E2%82%AC%E2%82%ACb", "start_date"),
        ("end_date=a%E2%82%AC%E2%82%ACb", "end_date"),
        // A typed parameter given empty is not the same as leaving it out.
        ("limit=", "limit"),
        ("offset=", "offset"),
        ("format=", "format"),
        ("aggregation=", "aggregation"),
        ("api_key_id=", "api_key_id"),
        ("start_date=", "start_date"),
        ("end_date=", "end_date"),
    ] {
        let (status, error) = error_of(&f.app, &f.app.key, query).await;
        assert_eq!(status, 400, "{query}: {error}");
        assert_eq!(error["param"], param, "{query}: {error}");
        assert_eq!(error["type"], "invalid_request_error");
    }
    // The largest page is fine.
    usage(&f.app, &f.app.key, "limit=1000").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_organizations_records_are_never_visible() {
    let f = fixture().await;
    let client = f.app.db.client().await;
    let other_org = f.app.create_org("Other org", "pro").await;
    let other_key = f.app.create_key(other_org, &["usage"], None).await;
    let other_key_id = key_id(&client, &other_key).await;
    let foreign = Row {
        credits: 1000,
        ..ROWS[4]
    };
    let foreign_id = insert(&client, other_org, Some(other_key_id), &foreign).await;

    let mine = usage(&f.app, &f.app.key, RANGE).await;
    assert_eq!(mine["data"]["summary"]["total_requests"], 8);
    assert_eq!(mine["data"]["summary"]["total_credits"], 36);
    assert!(!request_ids(&mine).contains(&foreign_id.to_string()));
    // Even filtering by the other organization's key finds nothing.
    let probing = usage(
        &f.app,
        &f.app.key,
        &format!("{RANGE}&api_key_id={other_key_id}"),
    )
    .await;
    assert_eq!(probing["data"]["summary"]["total_requests"], 0);
    assert_eq!(
        probing["data"]["aggregations"]["by_model"],
        serde_json::json!({})
    );

    let theirs = usage(&f.app, &other_key, &format!("{RANGE}&aggregation=day")).await;
    assert_eq!(request_ids(&theirs), [foreign_id.to_string()]);
    assert_eq!(theirs["data"]["summary"]["total_credits"], 1000);
    assert_eq!(
        series(&theirs, "day"),
        expected(&[("2026-03-01T00:00:00Z", 1, 1000, 0)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_scope_is_required() {
    let f = fixture().await;
    let image_only = f
        .app
        .create_key(f.app.org_id, &["image", "jobs"], None)
        .await;
    let (status, error) = error_of(&f.app, &image_only, RANGE).await;
    assert_eq!(status, 403);
    assert_eq!(
        error["message"],
        "API key does not have required scope: usage"
    );
    let (status, _) = error_of(&f.app, &image_only, &format!("{RANGE}&format=csv")).await;
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_export_has_a_header_and_one_row_per_filtered_record() {
    let f = fixture().await;
    let response = f
        .app
        .get(
            &format!("/api/v1/usage?{RANGE}&format=csv&timezone=America/New_York&model={ECHO}"),
            &f.app.key,
        )
        .await;
    assert_eq!(response.status(), 200);
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(header("content-type"), "text/csv; charset=utf-8");
    assert_eq!(
        header("content-disposition"),
        "attachment; filename=\"usage-2026-01-01-2026-03-31.csv\""
    );
    assert_eq!(header("x-total-count"), "5");
    assert_eq!(
        header("x-row-count"),
        "5",
        "under the cap every record is a row"
    );
    let text = response.text().await.unwrap();
    // The list of tools holds a comma, so the writer had to quote it.
    assert!(text.contains("\"web_search,code_interpreter\""), "{text}");

    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers = reader.headers().unwrap().clone();
    assert_eq!(
        headers.iter().collect::<Vec<_>>(),
        [
            "timestamp",
            "request_id",
            "api_key_id",
            "endpoint",
            "method",
            "model",
            "credits",
            "latency_ms",
            "status",
            "tools_used",
            "prompt_tokens",
            "completion_tokens",
            "total_tokens"
        ]
    );
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let ids: Vec<&str> = records.iter().map(|r| &r[1]).collect();
    assert_eq!(ids, [7, 5, 3, 1, 0].map(|i| f.ids[i].to_string()));
    let oldest = &records[4];
    assert_eq!(&oldest[0], "2026-01-15T05:00:00-05:00");
    assert_eq!(&oldest[9], "web_search,code_interpreter");
    assert_eq!((&oldest[6], &oldest[12]), ("3", "30"));
    assert!(records.iter().all(|r| &r[5] == ECHO));
    // limit and offset page the JSON only: the file has every record.
    let everything = f
        .app
        .get(
            &format!("/api/v1/usage?{RANGE}&format=csv&limit=1"),
            &f.app.key,
        )
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(
        csv::Reader::from_reader(everything.as_bytes())
            .records()
            .count(),
        8
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_usage_reports_the_billing_period_and_defaults_the_range_to_it() {
    let f = fixture().await;
    let client = f.app.db.client().await;
    let period_start: DateTime<Utc> = client
        .query_one(
            "SELECT date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let ten_credits = row("", CHAT, ECHO, 10);
    let before_period = period_start - chrono::TimeDelta::seconds(1);
    insert_at(
        &client,
        f.app.org_id,
        Some(f.key_a),
        &ten_credits,
        before_period,
    )
    .await;
    let current_id = insert_at(
        &client,
        f.app.org_id,
        Some(f.key_a),
        &ten_credits,
        period_start,
    )
    .await;

    // No billing account yet: the plan's included credits, no overage.
    let body = usage(&f.app, &f.app.key, "").await;
    assert_eq!(request_ids(&body), [current_id.to_string()]);
    // An end before the current period, alone, reads the period it closes
    // (not an empty range refused).
    let past_end = period_start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let past = usage(
        &f.app,
        &f.app.key,
        &format!("end_date={}", past_end.replace('+', "%2B")),
    )
    .await;
    assert_eq!(past["data"]["summary"]["total_requests"], 1, "{past}");
    let previous_start = (period_start - chrono::Months::new(1))
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    assert_eq!(
        past["data"]["summary"]["period"]["start"], previous_start,
        "{past}"
    );
    // Free text given empty is left out, as before.
    assert_eq!(
        request_ids(&usage(&f.app, &f.app.key, "model=&endpoint=").await),
        [current_id.to_string()]
    );
    let expected_start = period_start.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    assert_eq!(body["data"]["summary"]["period"]["start"], expected_start);
    let current = &body["data"]["current_usage"];
    assert_eq!(
        (
            &current["requests"],
            &current["credits_used"],
            &current["credits_included"],
            &current["credits_overage"],
            &current["overage_cost"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(10),
            &serde_json::json!(2000),
            &serde_json::json!(0),
            &serde_json::json!(0.0)
        )
    );
    assert_eq!(current["period"]["start"], expected_start);

    // With an account: its included credits and overage, at the Pro rate
    // of $0.01 a credit; the filters do not change it.
    client
        .execute(
            "INSERT INTO billing_accounts (org_id, period_start, period_end, included_credits,
                 included_remaining, overage_credits, overage_enabled)
             VALUES ($1, $2::timestamptz, $2::timestamptz + interval '1 month', 1500, 0, 250, true)",
            &[&f.app.org_id, &period_start],
        )
        .await
        .unwrap();
    let body = usage(&f.app, &f.app.key, &format!("model={PROCEDURAL}")).await;
    assert_eq!(body["data"]["summary"]["total_requests"], 0);
    let current = &body["data"]["current_usage"];
    assert_eq!(
        (
            &current["requests"],
            &current["credits_used"],
            &current["credits_included"],
            &current["credits_overage"],
            &current["overage_cost"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(10),
            &serde_json::json!(1500),
            &serde_json::json!(250),
            &serde_json::json!(2.5)
        )
    );
}
