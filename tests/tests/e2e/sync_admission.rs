//! Sync chat settles within admission (issue 34, finding 4): the hold
//! counts everything sent upstream (tools, schemas, images), and a
//! settlement never charges past what admission allowed, even when the
//! upstream reports more usage than the hold covered.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use unigen_db::billing::{Bucket, Charge};
use unigen_db::models::UsageRecord;
use unigen_db::queries::billing::{self, Amount, ShareItem};
use unigen_tests::{TestApp, TestOptions, json_of};
use uuid::Uuid;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// An OpenAI-compatible upstream whose answers report this usage.
async fn upstream_reporting(prompt_tokens: u64, completion_tokens: u64) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-upstream", "object": "chat.completion", "created": 1,
            "model": "gpt-upstream",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}
        })))
        .mount(&server)
        .await;
    server
}

/// A stack whose model `acme/metered` (2 credits per 1,000 prompt tokens,
/// 6 per 1,000 completion tokens) is served by `server`.
async fn app_with(server: &MockServer) -> TestApp {
    let url = server.uri();
    TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
        s.upstreams
            .insert("metered".into(), unigen_tests::fake_upstream(&url));
        s.models.push(unigen_tests::fake_chat_model(
            "acme/metered",
            "metered",
            Vec::new(),
        ));
    }))
    .await
}

/// `(included + purchased, overage_credits, overage ledger rows)`.
async fn account(app: &TestApp) -> (i64, i64, i64) {
    let row = app
        .db
        .client()
        .await
        .query_one(
            "SELECT included_remaining + purchased_balance, overage_credits, \
                    (SELECT count(*) FROM credit_transactions t \
                      WHERE t.org_id = a.org_id AND t.type = 'overage') \
               FROM billing_accounts a WHERE org_id = $1",
            &[&app.org_id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// The account with `credits` included credits left, overage off: at its
/// hard limit, nothing past the balance may be charged.
async fn with_balance(app: &TestApp, credits: i64) -> DateTime<Utc> {
    let (status, body) = json_of(app.get("/api/v1/quota", &app.key).await).await;
    assert_eq!(status, 200, "{body}");
    app.sql(&format!(
        "UPDATE billing_accounts SET included_remaining = {credits}, purchased_balance = 0, \
                overage_enabled = false, hard_limit = NULL WHERE org_id = '{}'; \
         UPDATE plans SET chat_tokens = 100000000 WHERE code = 'pro'",
        app.org_id
    ))
    .await;
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

/// The chat tokens bucket's use this period, in thousandths.
async fn used_milli(app: &TestApp) -> i64 {
    app.db
        .scalar_i64(&format!(
            "SELECT coalesce(sum(used_milli), 0)::int8 FROM quota_usage \
             WHERE org_id = '{}' AND bucket = 'chat_tokens'",
            app.org_id
        ))
        .await
}

async fn chat(app: &TestApp, body: Value) -> (u16, Value) {
    json_of(
        app.post_json("/api/v1/chat/completions", &app.key, &body)
            .await,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_hard_limit_with_overage_off_usage_past_the_hold_is_never_charged() {
    // The upstream says a tiny request used a million prompt tokens
    // (2,000 credits): far more than its hold, and than the balance.
    let server = upstream_reporting(1_000_000, 10).await;
    let app = app_with(&server).await;
    let period_start = with_balance(&app, 5).await;
    let (status, body) = chat(
        &app,
        json!({"model": "acme/metered", "max_tokens": 10,
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let used = body["usage"]["credits_used"].as_i64().unwrap();
    assert!((0..=5).contains(&used), "charged {used}: {body}");
    let (balance, overage, overage_rows) = account(&app).await;
    assert_eq!((balance, overage, overage_rows), (5 - used, 0, 0));

    // A settlement handed more than the request held (as a recorded charge
    // of a dead process is settled by the scheduler) charges the hold, no
    // more: no overage with overage off, the bucket no further than held.
    let id = Uuid::now_v7();
    let item = ShareItem {
        allowance_id: Uuid::now_v7(),
        period_start,
        bucket: Some(Bucket::ChatTokens),
        hold: Amount {
            credits: 2,
            milli: 20_000,
        },
        charge: Charge {
            credits: 2_000,
            bucket_milli: 1_000_000_000,
        },
        multiplier: 1.0,
        usage: UsageRecord {
            id,
            org_id: app.org_id,
            api_key_id: None,
            endpoint: "/v1/chat/completions".to_owned(),
            method: "POST".to_owned(),
            model: "acme/metered".to_owned(),
            credits: 0,
            latency_ms: 12,
            status: "success".to_owned(),
            tools_used: vec![],
            prompt_tokens: 1_000_000,
            completion_tokens: 10,
            total_tokens: 1_000_010,
            created_at: Utc::now(),
        },
    };
    let milli_before = used_milli(&app).await;
    let mut conn = app.db.connect().await;
    let settled = billing::settle_shares(&mut conn, &[&item]).await.unwrap();
    let charged = settled[0].as_ref().expect("settled");
    assert_eq!(charged.credits, 2, "{charged:?}");
    let (balance_after, overage, overage_rows) = account(&app).await;
    assert_eq!(
        (balance_after, overage, overage_rows),
        (balance - 2, 0, 0),
        "no overage with overage off"
    );
    assert_eq!(used_milli(&app).await - milli_before, 20_000);
    assert_eq!(
        app.db
            .scalar_i64(&format!(
                "SELECT credits FROM usage_records WHERE id = '{id}'"
            ))
            .await,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_1_with_a_huge_tool_description_holds_for_the_tools() {
    // About 100,000 tokens of tool description, which the upstream counts.
    let server = upstream_reporting(100_000, 1).await;
    let app = app_with(&server).await;
    let description = "word ".repeat(100_000);
    let request = json!({
        "model": "acme/metered", "max_tokens": 1,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {
            "name": "lookup", "description": description,
            "parameters": {"type": "object", "properties": {}}}}]
    });
    // 100,000 prompt tokens are 200 credits: a balance of 50 does not
    // admit the request (the hold counts the tools, not only the text).
    with_balance(&app, 50).await;
    let (status, body) = chat(&app, request.clone()).await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
    assert!(
        server.received_requests().await.unwrap().is_empty(),
        "nothing was sent upstream"
    );
    let (balance, overage, _) = account(&app).await;
    assert_eq!((balance, overage), (50, 0));

    // With enough credits it is admitted and charged what the upstream
    // counted: ceil((100,000 x 2 + 1 x 6) / 1,000) = 201.
    with_balance(&app, 1_000).await;
    let (status, body) = chat(&app, request).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["prompt_tokens"], 100_000, "{body}");
    assert_eq!(body["usage"]["credits_used"], 201, "{body}");
    let (balance, overage, _) = account(&app).await;
    assert_eq!((balance, overage), (1_000 - 201, 0));
}
