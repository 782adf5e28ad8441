//! Metering: quota buckets, reservations, tier multipliers, overage and the
//! credit ledger, through the API with real jobs.

use std::time::Duration;

use base64::Engine;
use futures_util::future::join_all;
use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, json_of};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);

/// Creates the org's billing account (as any first look does).
async fn touch_account(app: &TestApp, key: &str) {
    let response = app.get("/api/v1/quota", key).await;
    assert_eq!(response.status(), 200);
}

/// Marks `units` of a bucket as used in the current period.
async fn fill_bucket(app: &TestApp, org: Uuid, bucket: &str, units: i64) {
    app.sql(&format!(
        "INSERT INTO quota_usage (org_id, period_start, bucket, used_milli)
         SELECT org_id, period_start, '{bucket}', {milli} FROM billing_accounts WHERE org_id = '{org}'
         ON CONFLICT (org_id, period_start, bucket) DO UPDATE SET used_milli = EXCLUDED.used_milli",
        milli = units * 1000
    ))
    .await;
}

/// `(used_milli, reserved_milli)` of a bucket in the current period.
async fn bucket_state(app: &TestApp, org: Uuid, bucket: &str) -> (i64, i64) {
    let row = app
        .db
        .client()
        .await
        .query_opt(
            "SELECT q.used_milli, q.reserved_milli FROM quota_usage q
               JOIN billing_accounts a ON a.org_id = q.org_id AND a.period_start = q.period_start
              WHERE q.org_id = $1 AND q.bucket = $2",
            &[&org, &bucket],
        )
        .await
        .unwrap();
    row.map_or((0, 0), |r| (r.get(0), r.get(1)))
}

/// `(included_remaining, purchased, reserved, overage)` of the account.
async fn credits_state(app: &TestApp, org: Uuid) -> (i64, i64, i64, i64) {
    let row = app
        .db
        .client()
        .await
        .query_one(
            "SELECT included_remaining, purchased_balance, reserved_credits, overage_credits
               FROM billing_accounts WHERE org_id = $1",
            &[&org],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

async fn scalar(app: &TestApp, sql: &str) -> i64 {
    app.db.scalar_i64(sql).await
}

/// Waits until the API processes have given back the blocks of credits
/// they held for sync requests (`metering.idle_ms` after the last one).
async fn allowances_given_back(app: &TestApp, org: Uuid) {
    let sql = format!(
        "SELECT count(*) FROM reservations WHERE org_id = '{org}' AND expires_at IS NOT NULL"
    );
    app.db
        .wait_for_scalar(
            &sql,
            0,
            Duration::from_secs(10),
            "blocks of credits still held",
        )
        .await;
}

fn png_data_uri() -> String {
    let image = image::RgbImage::from_fn(32, 32, |x, y| image::Rgb([x as u8 * 8, y as u8 * 8, 90]));
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(crate::media::png_of(&image))
    )
}

fn wav_base64(seconds: f64) -> String {
    base64::engine::general_purpose::STANDARD.encode(crate::media::tone_wav(seconds))
}

/// A request for each bucket that needs `needs` units, and the fill that
/// leaves fewer than that.
fn bucket_cases() -> Vec<(&'static str, &'static str, Value, i64, f64)> {
    vec![
        (
            "image_generations",
            "/api/v1/images/generations",
            json!({"prompt": "a lighthouse", "n": 2}),
            499,
            1.0,
        ),
        (
            "image_edits",
            "/api/v1/images/edits",
            json!({"image": png_data_uri(), "operation": "colorization"}),
            75,
            0.0,
        ),
        (
            "video_seconds",
            "/api/v1/videos/generations",
            json!({"prompt": "waves", "duration_seconds": 3}),
            118,
            2.0,
        ),
        (
            "music_tracks",
            "/api/v1/music/generations",
            json!({"prompt": "calm piano", "duration_seconds": 2}),
            20,
            0.0,
        ),
        (
            "tts_chars",
            "/api/v1/audio/speech",
            json!({"input": "twenty characters!!!", "voice": "alloy"}),
            199_990,
            10.0,
        ),
        (
            "stt_seconds",
            "/api/v1/audio/transcriptions",
            json!({"file": wav_base64(3.0)}),
            3_599,
            1.0,
        ),
    ]
}

#[tokio::test]
async fn every_bucket_refuses_what_does_not_fit_with_402_and_charges_nothing() {
    let app = TestApp::spawn().await;
    touch_account(&app, &app.key).await;
    let credits_before = credits_state(&app, app.org_id).await;
    for (bucket, path, body, fill, remaining) in bucket_cases() {
        fill_bucket(&app, app.org_id, bucket, fill).await;
        let (status, body) = json_of(app.post_json(path, &app.key, &body).await).await;
        assert_eq!(status, 402, "{bucket}: {body}");
        assert_eq!(
            body["error"]["message"],
            format!("Quota exceeded for {bucket}"),
            "{bucket}"
        );
        assert_eq!(body["error"]["code"], "quota_exceeded");
        assert_eq!(body["error"]["remaining"], remaining, "{bucket}: {body}");
        assert_eq!(
            bucket_state(&app, app.org_id, bucket).await,
            (fill * 1000, 0),
            "{bucket}: nothing reserved or used"
        );
    }
    // Chat: an explicit max_tokens that does not fit.
    fill_bucket(&app, app.org_id, "chat_tokens", 2_000_000 - 5).await;
    let chat = json!({"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 50});
    let (status, body) = json_of(
        app.post_json("/api/v1/chat/completions", &app.key, &chat)
            .await,
    )
    .await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["message"], "Quota exceeded for chat_tokens");

    assert_eq!(app.count_jobs().await, 0, "no job was created");
    assert_eq!(scalar(&app, "SELECT count(*) FROM reservations").await, 0);
    assert_eq!(
        scalar(
            &app,
            "SELECT count(*) FROM credit_transactions WHERE type <> 'allocation'"
        )
        .await,
        0
    );
    assert_eq!(credits_state(&app, app.org_id).await, credits_before);
}

#[tokio::test]
async fn the_free_plan_has_no_speech_music_or_edit_quota() {
    let app = TestApp::spawn().await;
    let org = app.create_org("Free org", "free").await;
    let key = app.create_key(org, &["all"], None).await;
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/audio/speech",
            &key,
            &json!({"input": "hello", "voice": "alloy"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["message"], "Quota exceeded for tts_chars");
    assert_eq!(body["error"]["remaining"], 0.0);
}

#[tokio::test]
async fn a_cancelled_job_releases_its_reservation_and_consumes_nothing() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let id = app
        .submit_image_async(&json!({"prompt": "a boat", "n": 3}))
        .await;
    assert_eq!(
        bucket_state(&app, app.org_id, "image_generations").await,
        (0, 3000)
    );
    let (included, _, reserved, _) = credits_state(&app, app.org_id).await;
    assert_eq!(reserved, 3, "3 images at 1 credit are held");
    let quota = json_of(app.get("/api/v1/quota", &app.key).await).await.1;
    let images = quota["data"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["bucket"] == "image_generations")
        .unwrap()
        .clone();
    assert_eq!(images["reserved"], 3.0);
    assert_eq!(images["remaining"], 497.0);

    let response = app.delete(&format!("/api/v1/jobs/{id}"), &app.key).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        bucket_state(&app, app.org_id, "image_generations").await,
        (0, 0)
    );
    assert_eq!(credits_state(&app, app.org_id).await, (included, 0, 0, 0));
    let job = app.job(&id).await;
    assert_eq!(job["actualCredits"], Value::Null);
    let status: String = app
        .db
        .client()
        .await
        .query_one(
            "SELECT status FROM usage_records WHERE id = $1",
            &[&Uuid::parse_str(&id).unwrap()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "cancelled");
}

#[tokio::test]
async fn a_failed_job_releases_its_reservation_and_consumes_nothing() {
    let app = TestApp::spawn_with(
        TestOptions::default().configure(|s| s.local_provider.failure_rate = 1.0),
    )
    .await;
    let id = app.submit_image_async(&json!({"prompt": "a boat"})).await;
    let job = app.wait_for_job(&id, WAIT).await;
    assert_eq!(job["status"], "failed");
    assert_eq!(
        bucket_state(&app, app.org_id, "image_generations").await,
        (0, 0)
    );
    let (included, _, reserved, _) = credits_state(&app, app.org_id).await;
    assert_eq!((included, reserved), (2000, 0));
    assert_eq!(
        scalar(
            &app,
            "SELECT count(*) FROM credit_transactions WHERE type = 'consumption'"
        )
        .await,
        0
    );
    assert_eq!(
        scalar(
            &app,
            "SELECT count(*) FROM usage_records WHERE status = 'failed' AND credits = 0"
        )
        .await,
        1
    );
}

/// Finds a bucket's entry in `GET /quota`.
async fn quota_of(app: &TestApp, key: &str, bucket: &str) -> Value {
    let quota = json_of(app.get("/api/v1/quota", key).await).await.1;
    quota["data"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["bucket"] == bucket)
        .unwrap()
        .clone()
}

#[tokio::test]
async fn completed_jobs_charge_their_bucket_times_the_tier_multiplier() {
    let app = TestApp::spawn().await;
    // Music on a standard-tier model: 1 track x 1.25.
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/music/generations?async=false",
            &app.key,
            &json!({"prompt": "calm piano", "duration_seconds": 2, "model": "local/synth-long"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let usage = &body["usage"];
    assert_eq!(usage["tracks_used"], 1, "{usage}");
    assert_eq!(usage["quota_multiplier"], 1.25);
    assert_eq!(usage["tracks_remaining"], 18, "20 - 1.25, rounded down");
    assert_eq!(usage["credits_used"], 8);
    assert_eq!(
        bucket_state(&app, app.org_id, "music_tracks").await,
        (1250, 0)
    );
    assert_eq!(quota_of(&app, &app.key, "music_tracks").await["used"], 1.25);

    // An edit on a premium model: 1 edit x 1.5.
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/images/edits",
            &app.key,
            &json!({"image": png_data_uri(), "operation": "colorization", "model": "local/classic-edit-pro"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["edits_used"], 1);
    assert_eq!(body["usage"]["quota_multiplier"], 1.5);
    assert_eq!(body["usage"]["edits_remaining"], 73);
    assert_eq!(
        bucket_state(&app, app.org_id, "image_edits").await,
        (1500, 0)
    );

    // Speech on a fast model: characters x 1.
    let text = "Metering counts every character.";
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/audio/speech",
            &app.key,
            &json!({"input": text, "voice": "alloy"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["chars_used"], text.len());
    assert_eq!(body["usage"]["quota_multiplier"], 1.0);
    assert_eq!(
        body["usage"]["chars_remaining"],
        200_000 - text.len() as i64
    );

    // Image generations: no multiplier; the sync answer carries headers.
    let response = app
        .post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "a lighthouse", "n": 2, "size": "512x512"}),
        )
        .await;
    assert_eq!(response.headers()["x-credits-used"], "2");
    assert!(response.headers().get("x-overage-active").is_none());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["usage"]["generations_used"], 2);
    assert_eq!(body["usage"]["generations_remaining"], 498);

    // The ledger and the usage records agree with what was answered.
    let consumed = scalar(
        &app,
        "SELECT -COALESCE(SUM(amount), 0)::BIGINT FROM credit_transactions WHERE type = 'consumption'",
    )
    .await;
    let recorded = scalar(
        &app,
        "SELECT COALESCE(SUM(credits), 0)::BIGINT FROM usage_records",
    )
    .await;
    assert_eq!(consumed, recorded);
    assert_eq!(consumed, 8 + 4 + 1 + 2);

    // A bare end_date includes that whole day.
    let today = chrono::Utc::now().format("%Y-%m-%d");
    let page = json_of(
        app.get(
            &format!("/api/v1/credits?type=consumption&start_date={today}&end_date={today}"),
            &app.key,
        )
        .await,
    )
    .await
    .1;
    assert_eq!(page["meta"]["pagination"]["total"], 4, "{page}");
}

#[tokio::test]
async fn concurrent_requests_never_overdraw_a_nearly_empty_bucket() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    app.sql("UPDATE plans SET concurrent_requests = 200, rate_limit_per_minute = 100000")
        .await;
    touch_account(&app, &app.key).await;
    fill_bucket(&app, app.org_id, "image_generations", 495).await;
    let bodies: Vec<Value> = (0..40)
        .map(|i| json!({"prompt": format!("request {i}")}))
        .collect();
    let requests = bodies
        .iter()
        .map(|body| app.post_json("/api/v1/images/generations?async=true", &app.key, body));
    let statuses: Vec<u16> = join_all(requests)
        .await
        .into_iter()
        .map(|r| r.status().as_u16())
        .collect();
    let accepted = statuses.iter().filter(|&&s| s == 202).count();
    let refused = statuses.iter().filter(|&&s| s == 402).count();
    assert_eq!((accepted, refused), (5, 35), "{statuses:?}");
    assert_eq!(
        bucket_state(&app, app.org_id, "image_generations").await,
        (495_000, 5_000),
        "used + reserved never exceeds the limit"
    );
    assert_eq!(app.count_jobs().await, 5);
}

#[tokio::test]
async fn chat_without_max_tokens_is_capped_to_the_quota_left_and_reports_the_estimate() {
    let app = TestApp::spawn().await;
    touch_account(&app, &app.key).await;
    let chat = |content: &str| json!({"messages": [{"role": "user", "content": content}]});
    let (status, body) = json_of(
        app.post_json("/api/v1/chat/completions", &app.key, &chat("one two three"))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let total = body["usage"]["total_tokens"].as_i64().unwrap();
    assert_eq!(
        body["usage"]["tokens_remaining_estimate"],
        2_000_000 - total,
        "{body}"
    );
    assert_eq!(body["usage"]["quota_multiplier"], 1.0);

    // Leave 30 tokens: a long question is answered within them. A block of
    // tokens the API process still holds (returned after 1 s idle) would
    // admit requests from memory: wait until it has gone back.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while bucket_state(&app, app.org_id, "chat_tokens").await.1 != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the block never went back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (used, _) = bucket_state(&app, app.org_id, "chat_tokens").await;
    fill_bucket(&app, app.org_id, "chat_tokens", 2_000_000 - 30).await;
    let long = "word ".repeat(60);
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/chat/completions",
            &app.key,
            &chat(&format!("say {long}")),
        )
        .await,
    )
    .await;
    assert_eq!(status, 402, "the prompt alone does not fit: {body}");
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/chat/completions",
            &app.key,
            &chat(&"word ".repeat(20)),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
    let (after, reserved) = bucket_state(&app, app.org_id, "chat_tokens").await;
    assert!(after <= 2_000_000_000, "never beyond the limit: {after}");
    assert_eq!(reserved, 0);
    assert!(after > (2_000_000 - 30) * 1000 && used > 0);
}

#[tokio::test]
async fn overage_continues_past_included_credits_until_the_hard_limit() {
    let app = TestApp::spawn().await;
    // A plan with 3 included credits for this test's org.
    app.sql("UPDATE plans SET included_credits = 3 WHERE code = 'pro'")
        .await;
    touch_account(&app, &app.key).await;
    let image = json!({"prompt": "a kite", "size": "512x512", "model": "local/procedural-hd"});
    // 2 credits per image: the first fits, the second does not without overage.
    let response = app
        .post_json("/api/v1/images/generations", &app.key, &image)
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-credits-remaining"], "1");
    let (status, body) = json_of(
        app.post_json("/api/v1/images/generations", &app.key, &image)
            .await,
    )
    .await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["message"], "Quota exceeded for credits");
    assert_eq!(body["error"]["remaining"], 1.0);

    let configure = json!({"enabled": true, "soft_limit": 2, "hard_limit": 5, "notification_email": "ops@example.com"});
    let (status, body) = json_of(
        app.post_json("/api/v1/overage/configure", &app.key, &configure)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["enabled"], true);

    // 1 included + 1 overage.
    let response = app
        .post_json("/api/v1/images/generations", &app.key, &image)
        .await;
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["x-overage-active"], "true");
    assert_eq!(headers["x-overage-credits"], "1");
    assert_eq!(headers["x-overage-rate"], "0.01");
    assert_eq!(headers["x-overage-cost"], "0.01");
    assert_eq!(headers["x-credits-remaining"], "0");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["usage"]["credits_breakdown"]["overage"], 1);

    // 2 more overage: 3 in all, past the soft limit (notified once).
    let response = app
        .post_json("/api/v1/images/generations", &app.key, &image)
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-overage-credits"], "3");
    // Another 2 would make 5 = the hard limit: allowed; then 7 > 5: refused.
    let response = app
        .post_json("/api/v1/images/generations", &app.key, &image)
        .await;
    assert_eq!(response.status(), 200);
    let (status, body) = json_of(
        app.post_json("/api/v1/images/generations", &app.key, &image)
            .await,
    )
    .await;
    assert_eq!(status, 402, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Overage hard limit reached"),
        "{body}"
    );

    let status = json_of(app.get("/api/v1/overage/status", &app.key).await)
        .await
        .1;
    let limits = &status["data"]["limits"];
    assert_eq!(limits["soft_limit_reached"], true);
    assert_eq!(limits["hard_limit_reached"], true);
    assert_eq!(status["data"]["current_usage"]["credits"], 5);
    assert_eq!(status["data"]["current_usage"]["cost"], 0.05);

    let soft: Vec<Value> = app
        .events()
        .await
        .into_iter()
        .filter(|(kind, _)| kind == "overage.soft_limit_reached")
        .map(|(_, data)| data)
        .collect();
    assert_eq!(soft.len(), 1, "notified once: {soft:?}");
    assert_eq!(soft[0]["softLimit"], 2);
    let depleted = app
        .events()
        .await
        .into_iter()
        .filter(|(kind, data)| kind == "credits.depleted" && data["bucketType"] == "credits")
        .count();
    assert_eq!(depleted, 1);

    let overage_rows = app
        .db
        .client()
        .await
        .query(
            "SELECT amount, metadata FROM credit_transactions WHERE type = 'overage' ORDER BY created_at",
            &[],
        )
        .await
        .unwrap();
    let amounts: Vec<i64> = overage_rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(amounts, vec![-1, -2, -2]);
    let metadata: Value = overage_rows[0].get(1);
    assert_eq!(metadata["rate"], 0.01);
    assert_eq!(metadata["billing_status"], "pending");
    assert_ledger_balances(&app, app.org_id).await;
}

#[tokio::test]
async fn a_bucket_below_ten_percent_sends_credits_low_once() {
    let app = TestApp::spawn().await;
    touch_account(&app, &app.key).await;
    fill_bucket(&app, app.org_id, "image_generations", 448).await;
    for _ in 0..3 {
        let response = app
            .post_json(
                "/api/v1/images/generations",
                &app.key,
                &json!({"prompt": "a star", "size": "512x512"}),
            )
            .await;
        assert_eq!(response.status(), 200);
    }
    let low: Vec<Value> = app
        .events()
        .await
        .into_iter()
        .filter(|(kind, _)| kind == "credits.low")
        .map(|(_, data)| data)
        .collect();
    assert_eq!(low.len(), 1, "{low:?}");
    assert_eq!(low[0]["bucketType"], "image_generations");
    assert_eq!(low[0]["remaining"], 49.0);
    assert_eq!(low[0]["limit"], 500);
    assert_eq!(low[0]["percentUsed"], 90.2);
}

async fn assert_ledger_balances(app: &TestApp, org: Uuid) {
    let (included, purchased, _, overage) = credits_state(app, org).await;
    let sum = scalar(
        app,
        &format!(
            "SELECT COALESCE(SUM(amount), 0)::BIGINT FROM credit_transactions WHERE org_id = '{org}'"
        ),
    )
    .await;
    assert_eq!(
        sum,
        included + purchased - overage,
        "ledger sum vs balances"
    );
    // Each row's balance_after continues the previous one.
    let rows = app
        .db
        .client()
        .await
        .query(
            "SELECT amount, balance_after FROM credit_transactions WHERE org_id = $1 ORDER BY created_at, id",
            &[&org],
        )
        .await
        .unwrap();
    let mut running = 0;
    for row in rows {
        let (amount, after): (i64, i64) = (row.get(0), row.get(1));
        running += amount;
        assert_eq!(after, running, "balance_after runs with the amounts");
    }
}

#[tokio::test]
async fn the_ledger_balances_after_a_random_workload() {
    let app = TestApp::spawn().await;
    app.sql("UPDATE plans SET included_credits = 40, concurrent_requests = 100, rate_limit_per_minute = 100000 WHERE code = 'pro'")
        .await;
    touch_account(&app, &app.key).await;
    let configure = json!({"enabled": true});
    assert_eq!(
        app.post_json("/api/v1/overage/configure", &app.key, &configure)
            .await
            .status(),
        200
    );
    // A small deterministic generator: the same workload every run.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut jobs = Vec::new();
    for step in 0..40 {
        match next() % 5 {
            0 => {
                let n = 1 + next() % 3;
                let response = app
                    .post_json(
                        "/api/v1/images/generations",
                        &app.key,
                        &json!({"prompt": format!("step {step}"), "n": n, "size": "512x512"}),
                    )
                    .await;
                assert_eq!(response.status(), 200);
            }
            1 => {
                let id = app
                    .submit_image_async(&json!({"prompt": format!("async {step}")}))
                    .await;
                if next() % 2 == 0 {
                    // Cancelling races the worker: either outcome is consistent.
                    app.delete(&format!("/api/v1/jobs/{id}"), &app.key).await;
                }
                jobs.push(id);
            }
            2 => {
                let response = app
                    .post_json(
                        "/api/v1/chat/completions",
                        &app.key,
                        &json!({"messages": [{"role": "user", "content": "x ".repeat(1 + (next() % 400) as usize)}]}),
                    )
                    .await;
                assert_eq!(response.status(), 200);
            }
            3 => {
                let response = app
                    .post_json(
                        "/api/v1/embeddings",
                        &app.key,
                        &json!({"input": "y ".repeat(1 + (next() % 900) as usize)}),
                    )
                    .await;
                assert_eq!(response.status(), 200);
            }
            _ => {
                let mut conn = app.db.connect().await;
                use diesel_async::AsyncConnection;
                let credits = 1 + (next() % 7) as i64;
                conn.transaction::<_, unigen_db::DbError, _>(async |conn| {
                    unigen_db::queries::billing::purchase(conn, app.org_id, credits, "top-up").await
                })
                .await
                .unwrap();
            }
        }
    }
    for id in &jobs {
        app.wait_for_job(id, WAIT).await;
    }
    allowances_given_back(&app, app.org_id).await;
    assert_ledger_balances(&app, app.org_id).await;
    let (_, _, reserved, _) = credits_state(&app, app.org_id).await;
    assert_eq!(reserved, 0, "nothing left held");
    let charged = scalar(
        &app,
        "SELECT -COALESCE(SUM(amount), 0)::BIGINT FROM credit_transactions WHERE type IN ('consumption', 'overage')",
    )
    .await;
    let recorded = scalar(
        &app,
        "SELECT COALESCE(SUM(credits), 0)::BIGINT FROM usage_records",
    )
    .await;
    assert_eq!(charged, recorded, "every charge has its usage record");
    let completed_credits = scalar(
        &app,
        "SELECT COALESCE(SUM(actual_credits), 0)::BIGINT FROM jobs WHERE status = 'completed'",
    )
    .await;
    let job_records = scalar(
        &app,
        "SELECT COALESCE(SUM(credits), 0)::BIGINT FROM usage_records WHERE endpoint = '/v1/images/generations'",
    )
    .await;
    assert_eq!(completed_credits, job_records);
}

/// Concurrent chat completions of two organizations are settled in batches
/// (many per statement): every one is charged exactly once, each
/// organization for its own, with nothing left reserved and the ledger
/// adding up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_chat_completions_of_two_organizations_settle_exactly() {
    const PER_ORG: usize = 60;
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    app.sql("UPDATE plans SET concurrent_requests = 500, rate_limit_per_minute = 100000")
        .await;
    let other_org = app.create_org("Second", "pro").await;
    let other_key = app.create_key(other_org, &["all"], None).await;
    touch_account(&app, &app.key).await;
    touch_account(&app, &other_key).await;
    let before = [
        credits_state(&app, app.org_id).await,
        credits_state(&app, other_org).await,
    ];

    let (client, other) = (&app, &other_key);
    let requests = (0..PER_ORG * 2).map(|i| {
        let key = if i % 2 == 0 { &client.key } else { other };
        let body =
            json!({"messages": [{"role": "user", "content": format!("request number {i}")}]});
        async move {
            json_of(
                client
                    .post_json("/api/v1/chat/completions", key, &body)
                    .await,
            )
            .await
        }
    });
    let answers = join_all(requests).await;
    let mut charged = [0i64; 2];
    for (i, (status, body)) in answers.iter().enumerate() {
        assert_eq!(*status, 200, "request {i}: {body}");
        let credits = body["usage"]["credits_used"].as_i64().unwrap();
        assert!(credits > 0, "{body}");
        charged[i % 2] += credits;
    }

    for (index, org) in [app.org_id, other_org].into_iter().enumerate() {
        allowances_given_back(&app, org).await;
        let (included, purchased, reserved, _) = credits_state(&app, org).await;
        let (included_before, purchased_before, _, _) = before[index];
        assert_eq!(
            (included_before + purchased_before) - (included + purchased),
            charged[index],
            "organization {index} paid what its answers said"
        );
        assert_eq!(reserved, 0, "nothing left reserved");
        let records = scalar(
            &app,
            &format!(
                "SELECT count(*) FROM usage_records WHERE org_id = '{org}' AND endpoint = '/v1/chat/completions' AND status = 'success'"
            ),
        )
        .await;
        assert_eq!(records, PER_ORG as i64, "one usage record per completion");
        assert_ledger_balances(&app, org).await;
    }
    let open = scalar(&app, "SELECT count(*) FROM reservations").await;
    assert_eq!(open, 0, "every reservation settled");
}

/// Sync requests are admitted from blocks of credits each API process holds
/// (allowances, one reservation row each): a burst over two processes
/// against an account with little left is charged exactly what the answers
/// say, never runs into overage it has not enabled, and every block goes
/// back once the processes are idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_over_two_api_processes_never_overdraws_and_the_blocks_go_back() {
    let mut app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.metering.idle_ms = 300),
    )
    .await;
    app.sql("UPDATE plans SET included_credits = 25, concurrent_requests = 500, rate_limit_per_minute = 100000 WHERE code = 'pro'")
        .await;
    touch_account(&app, &app.key).await;
    let other_api = app.spawn_extra_api().await;
    let body =
        json!({"messages": [{"role": "user", "content": "count to three"}], "max_tokens": 16});
    let requests = (0..120).map(|i| {
        let base = if i % 2 == 0 {
            &app.base_url
        } else {
            &other_api
        };
        let request = app
            .client
            .post(format!("{base}/api/v1/chat/completions"))
            .bearer_auth(&app.key)
            .json(&body)
            .send();
        async move { json_of(request.await.expect("POST")).await }
    });
    let answers = join_all(requests).await;
    let mut charged = 0;
    let mut refused = 0;
    for (status, body) in &answers {
        match status {
            200 => charged += body["usage"]["credits_used"].as_i64().unwrap(),
            402 => {
                assert_eq!(
                    body["error"]["message"], "Quota exceeded for credits",
                    "{body}"
                );
                refused += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert!(
        charged > 0 && refused > 0,
        "charged {charged}, refused {refused}"
    );

    allowances_given_back(&app, app.org_id).await;
    let (included, purchased, reserved, overage) = credits_state(&app, app.org_id).await;
    assert_eq!(25 - included, charged, "paid what the answers said");
    assert!(included >= 0, "never below zero: {included}");
    assert_eq!((purchased, reserved, overage), (0, 0, 0));
    assert_ledger_balances(&app, app.org_id).await;
    let records = scalar(
        &app,
        "SELECT count(*) FROM usage_records WHERE endpoint = '/v1/chat/completions' AND status = 'success'",
    )
    .await;
    assert_eq!(records as usize, answers.len() - refused);
    assert_eq!(scalar(&app, "SELECT count(*) FROM reservations").await, 0);
}

/// Async jobs of two organizations submitted and finished together (they
/// share submission and completion transactions): every one completes, is
/// charged exactly once by its own organization, and records one
/// `generation.completed` event; the ledgers add up and nothing stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_submitted_and_finished_together_are_each_charged_once() {
    const PER_ORG: usize = 30;
    let mut app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    app.sql("UPDATE plans SET concurrent_requests = 500, rate_limit_per_minute = 100000")
        .await;
    let other_org = app.create_org("Second", "pro").await;
    let other_key = app.create_key(other_org, &["all"], None).await;
    touch_account(&app, &app.key).await;
    touch_account(&app, &other_key).await;
    // Submitted before any worker runs, then finished by one with room for
    // all of them at once.
    let (client, other) = (&app, &other_key);
    let submissions = (0..PER_ORG * 2).map(|i| {
        let key = if i % 2 == 0 { &client.key } else { other };
        let body = json!({"prompt": format!("together {i}"), "size": "512x512"});
        async move {
            json_of(
                client
                    .post_json("/api/v1/images/generations?async=true", key, &body)
                    .await,
            )
            .await
        }
    });
    let ids: Vec<String> = join_all(submissions)
        .await
        .into_iter()
        .map(|(status, body)| {
            assert_eq!(status, 202, "{body}");
            body["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(ids.len(), PER_ORG * 2);
    app.spawn_worker(|s| s.worker.concurrency = 32);
    app.db
        .wait_for_scalar(
            "SELECT count(*) FROM jobs WHERE status <> 'completed'",
            0,
            WAIT,
            "jobs never completed",
        )
        .await;
    for org in [app.org_id, other_org] {
        let (_, _, reserved, _) = credits_state(&app, org).await;
        assert_eq!(reserved, 0, "nothing left held");
        assert_ledger_balances(&app, org).await;
        let charged = scalar(
            &app,
            &format!("SELECT -COALESCE(SUM(amount), 0)::BIGINT FROM credit_transactions WHERE org_id = '{org}' AND type = 'consumption'"),
        )
        .await;
        let completed = scalar(
            &app,
            &format!("SELECT COALESCE(SUM(actual_credits), 0)::BIGINT FROM jobs WHERE org_id = '{org}' AND status = 'completed'"),
        )
        .await;
        assert_eq!(
            charged, completed,
            "each job charged once, to its own organization"
        );
        let events = scalar(
            &app,
            &format!("SELECT count(*) FROM events WHERE org_id = '{org}' AND type = 'generation.completed'"),
        )
        .await;
        assert_eq!(events, PER_ORG as i64);
    }
    assert_eq!(scalar(&app, "SELECT count(*) FROM reservations").await, 0);
}

/// Hardening finding 4: a job's measured use (a transcription longer than
/// its probe said) is never charged beyond what admission reserved, which
/// is all the quota, balance, overage and hard-limit checks let through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlement_never_charges_more_than_was_reserved() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    touch_account(&app, &app.key).await;
    let client = app.db.client().await;
    let credits_before: i64 = client
        .query_one(
            "SELECT included_remaining + purchased_balance FROM billing_accounts WHERE org_id = $1",
            &[&app.org_id],
        )
        .await
        .unwrap()
        .get(0);
    let id = Uuid::now_v7();
    let row = client
        .query_one(
            "SELECT outcome FROM unigen_reserve($1, $2, 3, 'stt_minutes', 3000, now() + interval '1 hour')",
            &[&app.org_id, &id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "ok");
    // Settled with 40 times the reservation: 120 credits, 120 minutes.
    let row = client
        .query_one(
            "SELECT outcome, from_included + from_purchased + overage
               FROM unigen_settle($1, 120, 120000, NULL, '/v1/audio/transcriptions', 'POST', 'local/whisper-tiny-en', 5, '{}', 0, 0)",
            &[&id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "ok");
    assert_eq!(
        row.get::<_, i64>(1),
        3,
        "charged what was reserved, not more"
    );
    let credits_after: i64 = client
        .query_one(
            "SELECT included_remaining + purchased_balance FROM billing_accounts WHERE org_id = $1",
            &[&app.org_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(credits_before - credits_after, 3);
    assert_eq!(
        bucket_state(&app, app.org_id, "stt_minutes").await,
        (3000, 0)
    );
}

/// Holds reserved together (`unigen_reserve_many`, as job submissions that
/// arrive together are) are each decided as if reserved alone after the
/// batch's earlier ones: the earlier holds count against the credits and
/// the bucket, refused ones change nothing, and the account, the bucket and
/// the reservations add up to what was admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_reserved_together_are_decided_one_after_another() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let other_org = app.create_org("Second", "pro").await;
    let other_key = app.create_key(other_org, &["all"], None).await;
    touch_account(&app, &app.key).await;
    touch_account(&app, &other_key).await;
    // 2 images left in the bucket; 2,000 included credits, no overage.
    fill_bucket(&app, app.org_id, "image_generations", 498).await;
    // The two organizations interleaved: the function takes them in
    // organization order itself, each one's items in their own order.
    let (a, b) = (app.org_id, other_org);
    let (orgs, ids): (Vec<Uuid>, Vec<Uuid>) = [b, a, a, b, a, a, a, a]
        .into_iter()
        .map(|org| (org, Uuid::now_v7()))
        .unzip();
    let (credits, buckets, millis): (Vec<i64>, Vec<Option<&str>>, Vec<i64>) = orgs
        .iter()
        .scan(0, |seen, org| {
            *seen += usize::from(*org == app.org_id);
            Some(if *org != app.org_id {
                (1_500, None, 0)
            } else if *seen <= 3 {
                // Three images: the third finds the bucket full.
                (10, Some("image_generations"), 1_000)
            } else {
                // Then 900 credits each: the third finds 180 left.
                (900, None, 0)
            })
        })
        .fold(
            (vec![], vec![], vec![]),
            |(mut c, mut b, mut m), (x, y, z)| {
                c.push(x);
                b.push(y);
                m.push(z);
                (c, b, m)
            },
        );
    let expires: Vec<Option<chrono::DateTime<chrono::Utc>>> = vec![None; orgs.len()];
    let client = app.db.client().await;
    let rows = client
        .query(
            "SELECT ord, outcome FROM unigen_reserve_many($1, $2, $3, $4, $5, $6) ORDER BY ord",
            &[&orgs, &ids, &credits, &buckets, &millis, &expires],
        )
        .await
        .unwrap();
    let outcomes: Vec<(Uuid, i64, String)> = rows
        .iter()
        .map(|row| {
            let ord: i64 = row.get(0);
            let i = usize::try_from(ord - 1).unwrap();
            (orgs[i], credits[i], row.get(1))
        })
        .collect();
    let mine: Vec<&str> = outcomes
        .iter()
        .filter(|(org, ..)| *org == app.org_id)
        .map(|(_, _, outcome)| outcome.as_str())
        .collect();
    assert_eq!(mine, ["ok", "ok", "quota", "ok", "ok", "credits"]);
    let theirs: Vec<&str> = outcomes
        .iter()
        .filter(|(org, ..)| *org == other_org)
        .map(|(_, _, outcome)| outcome.as_str())
        .collect();
    assert_eq!(theirs, ["ok", "credits"]);
    assert_eq!(
        bucket_state(&app, app.org_id, "image_generations").await,
        (498_000, 2_000)
    );
    assert_eq!(credits_state(&app, app.org_id).await.2, 10 + 10 + 900 + 900);
    assert_eq!(credits_state(&app, other_org).await.2, 1_500);
    assert_eq!(scalar(&app, "SELECT count(*) FROM reservations").await, 5);
}

/// Finished jobs are settled together (`unigen_settle_many`, one lock and
/// one update of each account per batch) exactly as `unigen_settle` settles
/// them one at a time: the same split between included, purchased and
/// overage credits, the same clamping to what was reserved, the same
/// bucket, ledger and usage rows, and 'gone' for a reservation that is not
/// there. Three organizations start alike; the first is settled one item at
/// a time, the other two in one interleaved batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlements_together_match_settlements_one_at_a_time() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let mut orgs = vec![app.org_id];
    for name in ["Second", "Third"] {
        let org = app.create_org(name, "pro").await;
        let key = app.create_key(org, &["all"], None).await;
        touch_account(&app, &key).await;
        orgs.push(org);
    }
    touch_account(&app, &app.key).await;
    // 30 included and 10 purchased credits, overage on: the batch runs
    // through all three.
    app.sql(
        "UPDATE billing_accounts SET included_remaining = 30, purchased_balance = 10,
                overage_enabled = true, soft_limit = NULL, hard_limit = NULL",
    )
    .await;
    // 3 of the 500 images left: the batch takes the bucket below 10%, then
    // to nothing.
    for &org in &orgs {
        fill_bucket(&app, org, "image_generations", 497).await;
    }
    // (reserved credits, bucket, reserved milli, charged credits, charged milli)
    let plan: [(i64, Option<&str>, i64, i64, i64); 4] = [
        (10, Some("image_generations"), 1_000, 10, 1_000),
        // Charged more than reserved: clamped to the reservation.
        (15, None, 0, 40, 0),
        // Crosses from included into purchased, then into overage.
        (25, Some("image_generations"), 2_000, 25, 2_000),
        (5, None, 0, 5, 0),
    ];
    let client = app.db.client().await;
    let mut ids: Vec<Vec<Uuid>> = vec![];
    for org in &orgs {
        let mut mine = vec![];
        for (credits, bucket, milli, ..) in plan {
            let id = Uuid::now_v7();
            let row = client
                .query_one(
                    "SELECT outcome FROM unigen_reserve($1, $2, $3, $4, $5, NULL)",
                    &[org, &id, &credits, &bucket, &milli],
                )
                .await
                .unwrap();
            assert_eq!(row.get::<_, String>(0), "ok");
            mine.push(id);
        }
        // Never reserved: 'gone'.
        mine.push(Uuid::now_v7());
        ids.push(mine);
    }
    let charge = |i: usize| {
        plan.get(i)
            .map_or((1, 0), |&(_, _, _, credits, milli)| (credits, milli))
    };
    type Answer = (
        String,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<String>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
    );
    let answer = |row: &tokio_postgres::Row, at: usize| -> Answer {
        (
            row.get(at),
            row.get(at + 1),
            row.get(at + 2),
            row.get(at + 3),
            row.get(at + 4),
            row.get(at + 5),
            row.get(at + 6),
            row.get(at + 7),
        )
    };
    const COLUMNS: &str = "outcome, from_included, from_purchased, overage, bucket, remaining_milli, credits_remaining, overage_credits";
    let mut alone = vec![];
    for (i, id) in ids[0].iter().enumerate() {
        let (credits, milli) = charge(i);
        let row = client
            .query_one(
                &format!(
                    "SELECT {COLUMNS} FROM unigen_settle($1, $2, $3, NULL, '/v1/images/generations', 'POST', 'local/m', 5, '{{}}', 0, 0)"
                ),
                &[id, &credits, &milli],
            )
            .await
            .unwrap();
        alone.push(answer(&row, 0));
    }
    // The second and third organizations' items interleaved, third first.
    let mut batch: Vec<(usize, usize)> = vec![];
    for i in 0..ids[1].len() {
        batch.push((2, i));
        batch.push((1, i));
    }
    let batch_ids: Vec<Uuid> = batch.iter().map(|&(o, i)| ids[o][i]).collect();
    let credits: Vec<i64> = batch.iter().map(|&(_, i)| charge(i).0).collect();
    let millis: Vec<i64> = batch.iter().map(|&(_, i)| charge(i).1).collect();
    let n = batch.len();
    let keys: Vec<Option<Uuid>> = vec![None; n];
    let endpoints = vec!["/v1/images/generations"; n];
    let methods = vec!["POST"; n];
    let models = vec!["local/m"; n];
    let latencies = vec![5_i64; n];
    let tools = vec![serde_json::json!([]); n];
    let zeros = vec![0_i64; n];
    let rows = client
        .query(
            &format!(
                "SELECT ord, {COLUMNS} FROM unigen_settle_many($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ORDER BY ord"
            ),
            &[
                &batch_ids, &credits, &millis, &keys, &endpoints, &methods, &models, &latencies,
                &tools, &zeros, &zeros,
            ],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), n);
    for (row, &(org, i)) in rows.iter().zip(&batch) {
        assert_eq!(
            answer(row, 1),
            alone[i],
            "organization {org}, item {i}: settled together as alone"
        );
    }
    assert_eq!(
        alone[1].1.unwrap() + alone[1].2.unwrap() + alone[1].3.unwrap(),
        15,
        "clamped"
    );
    assert_eq!(
        (alone[2].1, alone[2].2, alone[2].3),
        (Some(5), Some(10), Some(10)),
        "into overage"
    );
    assert_eq!(alone[4].0, "gone");
    for &org in &orgs[1..] {
        assert_eq!(
            credits_state(&app, org).await,
            credits_state(&app, orgs[0]).await
        );
        assert_eq!(
            bucket_state(&app, org, "image_generations").await,
            bucket_state(&app, orgs[0], "image_generations").await
        );
    }
    assert_eq!(credits_state(&app, orgs[0]).await, (0, 0, 0, 15));
    assert_eq!(
        bucket_state(&app, orgs[0], "image_generations").await,
        (500_000, 0)
    );
    let ledger = async |org: Uuid| -> Vec<(String, i64, i64)> {
        client
            .query(
                "SELECT type, amount, balance_after FROM credit_transactions
                  WHERE org_id = $1 AND type IN ('consumption', 'overage') ORDER BY created_at, type",
                &[&org],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    };
    let usage = async |org: Uuid| -> Vec<(Uuid, i64, String)> {
        client
            .query(
                "SELECT id, credits, status FROM usage_records WHERE org_id = $1 ORDER BY id",
                &[&org],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    };
    let ledger_alone = ledger(orgs[0]).await;
    assert_eq!(ledger_alone.len(), 5, "{ledger_alone:?}");
    let charged = |rows: Vec<(Uuid, i64, String)>| -> Vec<(i64, String)> {
        rows.into_iter().map(|(_, c, s)| (c, s)).collect()
    };
    let usage_alone = charged(usage(orgs[0]).await);
    assert_eq!(usage_alone.len(), 4);
    // The billing events come out the same: each threshold as it was
    // crossed, low and then depleted, for the credits and for the bucket.
    let events = async |org: Uuid| -> Vec<(String, Value)> {
        client
            .query(
                "SELECT type, data FROM events
                  WHERE org_id = $1 AND type IN ('credits.low', 'credits.depleted', 'overage.soft_limit_reached')
                  ORDER BY type, data::text",
                &[&org],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    };
    let events_alone = events(orgs[0]).await;
    let kinds: Vec<(&str, &str)> = events_alone
        .iter()
        .map(|(kind, data)| (kind.as_str(), data["bucketType"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        kinds,
        [
            ("credits.depleted", "credits"),
            ("credits.depleted", "image_generations"),
            ("credits.low", "credits"),
            ("credits.low", "image_generations"),
        ],
        "{events_alone:?}"
    );
    for &org in &orgs[1..] {
        assert_eq!(ledger(org).await, ledger_alone);
        assert_eq!(charged(usage(org).await), usage_alone);
        assert_eq!(events(org).await, events_alone);
    }
    assert_eq!(scalar(&app, "SELECT count(*) FROM reservations").await, 0);
}
