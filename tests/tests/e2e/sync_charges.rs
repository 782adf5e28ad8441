//! Sync charges (chat, embeddings) are recorded before the answer and
//! settled after it: the answers' balances, reads that follow them, and the
//! scheduler settling what a dead API process left recorded, exactly once.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use unigen_db::billing::{Bucket, Charge};
use unigen_db::models::UsageRecord;
use unigen_db::queries::billing::{self, Amount, ShareItem};
use unigen_tests::{TestApp, TestOptions, json_of};
use uuid::Uuid;

async fn quota(app: &TestApp) -> Value {
    let (status, body) = json_of(app.get("/api/v1/quota", &app.key).await).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The `chat_tokens` bucket's `field` (`used`, `remaining`), in tokens.
fn chat_tokens(quota: &Value, field: &str) -> i64 {
    let bucket = quota["data"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["bucket"] == "chat_tokens")
        .cloned()
        .unwrap();
    bucket[field].as_f64().unwrap() as i64
}

fn header(response: &reqwest::Response, name: &str) -> i64 {
    response.headers()[name].to_str().unwrap().parse().unwrap()
}

/// One request after another on a block that stays (no give-back between
/// them): from the second on, answers are sent before their settlement and
/// report balances projected from the previous one. Every figure must match
/// what the settlements then wrote, and reads wait for them.
#[tokio::test]
async fn answers_before_their_settlement_report_what_it_then_writes() {
    let app = TestApp::spawn_with(TestOptions {
        configure: Box::new(|s| s.metering.idle_ms = 60_000),
        ..TestOptions::default().without_worker()
    })
    .await;
    let start = quota(&app).await;
    let mut credits_left = start["data"]["credits"]["remaining"].as_i64().unwrap();
    let mut tokens_left = chat_tokens(&start, "remaining");
    let mut credits_spent = 0;
    let mut tokens_spent = 0;
    for i in 0..8 {
        let (path, body) = if i % 3 == 2 {
            ("/api/v1/embeddings", json!({"input": format!("text {i}")}))
        } else {
            (
                "/api/v1/chat/completions",
                json!({"messages": [{"role": "user", "content": format!("question {i}")}]}),
            )
        };
        let response = app.post_json(path, &app.key, &body).await;
        assert_eq!(response.status(), 200, "{path}");
        let used = header(&response, "x-credits-used");
        let remaining = header(&response, "x-credits-remaining");
        let body: Value = response.json().await.unwrap();
        assert!(used > 0, "{body}");
        assert_eq!(body["usage"]["credits_used"], used, "{body}");
        credits_spent += used;
        assert_eq!(
            remaining,
            credits_left - used,
            "request {i}: the balance after this charge: {body}"
        );
        credits_left = remaining;
        if path.ends_with("completions") {
            let total = body["usage"]["total_tokens"].as_i64().unwrap();
            tokens_spent += total;
            assert_eq!(
                body["usage"]["tokens_remaining_estimate"],
                tokens_left - total,
                "request {i}: {body}"
            );
            tokens_left -= total;
        }
    }

    // The reads wait for this process's settlements: no poll needed.
    let after = quota(&app).await;
    assert_eq!(chat_tokens(&after, "used"), tokens_spent, "{after}");
    let credits = &after["data"]["credits"];
    assert_eq!(
        credits["used"].as_i64().unwrap() - start["data"]["credits"]["used"].as_i64().unwrap(),
        credits_spent,
        "{after}"
    );
    let (status, usage) = json_of(app.get("/api/v1/usage", &app.key).await).await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["data"]["summary"]["total_requests"], 8, "{usage}");
    assert_eq!(usage["data"]["summary"]["total_credits"], credits_spent);
    assert_eq!(
        app.db
            .scalar_i64("SELECT count(*) FROM recorded_charges")
            .await,
        0
    );
}

/// The current billing period's start (the account exists).
async fn period_start(app: &TestApp) -> DateTime<Utc> {
    let _ = quota(app).await;
    app.db
        .client()
        .await
        .query_one(
            "SELECT period_start FROM billing_accounts WHERE org_id = $1",
            &[&app.org_id],
        )
        .await
        .unwrap()
        .get(0)
}

fn recorded(org_id: Uuid, period_start: DateTime<Utc>, credits: i64) -> ShareItem {
    ShareItem {
        // A block its process held; gone (released) by now.
        allowance_id: Uuid::now_v7(),
        period_start,
        bucket: Some(Bucket::ChatTokens),
        hold: Amount {
            credits,
            milli: 10_000,
        },
        charge: Charge {
            credits,
            bucket_milli: 7_000,
        },
        multiplier: 1.0,
        usage: UsageRecord {
            id: Uuid::now_v7(),
            org_id,
            api_key_id: None,
            endpoint: "/v1/chat/completions".to_owned(),
            method: "POST".to_owned(),
            model: "local/echo".to_owned(),
            credits: 0,
            latency_ms: 12,
            status: "success".to_owned(),
            tools_used: vec![],
            prompt_tokens: 3,
            completion_tokens: 4,
            total_tokens: 7,
            created_at: Utc::now(),
        },
    }
}

/// Several settlers racing for the same recorded charge: one settles it.
#[tokio::test]
async fn a_recorded_charge_is_settled_once_whoever_races_for_it() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let item = recorded(app.org_id, period_start(&app).await, 5);
    let id = item.usage.id;
    let mut conn = app.db.connect().await;
    billing::record_charges(&mut conn, &[&item], true)
        .await
        .unwrap();
    // Written twice (a retried write): still one record.
    billing::record_charges(&mut conn, &[&item], false)
        .await
        .unwrap();
    let racers = (0..4).map(|_| {
        let db = &app.db;
        async move {
            let mut conn = db.connect().await;
            billing::settle_recorded(&mut conn, &[id, Uuid::now_v7()])
                .await
                .unwrap()
        }
    });
    let answers = futures_util::future::join_all(racers).await;
    let settled: Vec<_> = answers.iter().filter_map(|a| a[0].as_ref()).collect();
    assert_eq!(settled.len(), 1, "{answers:?}");
    assert_eq!(settled[0].credits, 5);
    assert!(answers.iter().all(|a| a[1].is_none()), "never recorded");
    let count = |sql: String| {
        let db = &app.db;
        async move { db.scalar_i64(&sql).await }
    };
    assert_eq!(
        count(format!(
            "SELECT count(*) FROM usage_records WHERE id = '{id}' AND credits = 5"
        ))
        .await,
        1
    );
    assert_eq!(
        count(format!(
            "SELECT count(*) FROM credit_transactions WHERE metadata->>'request_id' = '{id}'"
        ))
        .await,
        1
    );
    assert_eq!(
        count("SELECT count(*) FROM recorded_charges".to_owned()).await,
        0
    );
}

/// An API process that recorded charges and died before settling them:
/// the scheduler settles them once they are older than the metering lease,
/// and the process's blocks, expired, are released.
#[tokio::test]
async fn the_scheduler_settles_what_a_dead_api_process_recorded() {
    let app = TestApp::spawn_with(TestOptions {
        configure: Box::new(|s| s.metering.lease_seconds = 3),
        ..TestOptions::default().without_worker()
    })
    .await;
    let period = period_start(&app).await;
    let before = quota(&app).await;
    let items = [
        recorded(app.org_id, period, 4),
        recorded(app.org_id, period, 6),
    ];
    let mut conn = app.db.connect().await;
    billing::record_charges(&mut conn, &items, false)
        .await
        .unwrap();
    // Recorded a minute ago: longer than any live process takes.
    app.sql("UPDATE recorded_charges SET recorded_at = now() - interval '1 minute'")
        .await;
    app.db
        .wait_for_scalar(
            "SELECT count(*) FROM recorded_charges",
            0,
            Duration::from_secs(20),
            "the scheduler never settled the recorded charges",
        )
        .await;
    for item in &items {
        let id = item.usage.id;
        assert_eq!(
            app.db
                .scalar_i64(&format!(
                    "SELECT count(*) FROM usage_records WHERE id = '{id}' AND credits = {}",
                    item.charge.credits
                ))
                .await,
            1
        );
    }
    let after = quota(&app).await;
    let used = |q: &Value| q["data"]["credits"]["used"].as_i64().unwrap();
    assert_eq!(used(&after) - used(&before), 10, "{after}");
    assert_eq!(
        chat_tokens(&after, "used") - chat_tokens(&before, "used"),
        14,
        "{after}"
    );
}
