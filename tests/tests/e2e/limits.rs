//! Limits and the account owner's view of metering: the per-key rate limit
//! across two API processes, concurrency slots, `GET /credits`, `GET /quota`,
//! the overage settings, `GET /account`, the scheduler's period rollover and
//! its release of expired sync reservations, and operator plan changes.

use std::collections::BTreeSet;
use std::time::Duration;

use diesel_async::AsyncConnection;
use futures_util::StreamExt;
use serde_json::{Value, json};
use unigen_db::{DbError, queries};
use unigen_tests::{TestApp, TestOptions, json_of};
use uuid::Uuid;

/// How long the scheduler (ticking every 100 ms in tests) may take.
const SCHEDULER_TIMEOUT: Duration = Duration::from_secs(30);

/// The org's balances: `(ledger sum, included_remaining, purchased,
/// overage, reserved)`.
async fn balances(app: &TestApp, org: Uuid) -> (i64, i64, i64, i64, i64) {
    let row = app
        .db
        .client()
        .await
        .query_one(
            "SELECT (SELECT COALESCE(SUM(amount), 0)::BIGINT FROM credit_transactions WHERE org_id = $1),
                    included_remaining, purchased_balance, overage_credits, reserved_credits
               FROM billing_accounts WHERE org_id = $1",
            &[&org],
        )
        .await
        .expect("the org's billing account");
    (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4))
}

/// The ledger invariant of the metering migration.
async fn assert_ledger_invariant(app: &TestApp, org: Uuid) {
    let (sum, included, purchased, overage, _) = balances(app, org).await;
    assert_eq!(
        sum,
        included + purchased - overage,
        "sum of the ledger = included_remaining + purchased_balance - overage_credits \
         (included {included}, purchased {purchased}, overage {overage})"
    );
}

/// Every ledger row of the key's org, newest first: each `balance_after`
/// is the one before plus the row's amount, from zero; the newest is the
/// account's balance.
async fn assert_ledger_chain(app: &TestApp, key: &str, org: Uuid) {
    let (status, body) = get_json(app, "/api/v1/credits?limit=1000", key).await;
    assert_eq!(status, 200, "{body}");
    let rows = body["data"]["transactions"].as_array().unwrap();
    let mut balance = 0;
    for row in rows.iter().rev() {
        balance += row["amount"].as_i64().unwrap();
        assert_eq!(row["balance_after"], balance, "{row} in {body}");
    }
    let (sum, included, purchased, overage, _) = balances(app, org).await;
    assert_eq!(balance, sum);
    assert_eq!(balance, included + purchased - overage);
}

async fn sync_image(app: &TestApp, key: &str, n: u32) -> (u16, Value) {
    json_of(
        app.post_json(
            "/api/v1/images/generations",
            key,
            &json!({"prompt": "metered", "size": "512x512", "n": n}),
        )
        .await,
    )
    .await
}

async fn get_json(app: &TestApp, path: &str, key: &str) -> (u16, Value) {
    json_of(app.get(path, key).await).await
}

async fn post(app: &TestApp, path: &str, key: &str, body: &Value) -> (u16, Value) {
    json_of(app.post_json(path, key, body).await).await
}

fn assert_validation(status: u16, body: &Value, param: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request", "{body}");
    assert_eq!(body["error"]["param"], param, "{body}");
}

/// Polls `sql` (one bigint) until it returns `want`.
async fn wait_for_scalar(app: &TestApp, sql: &str, want: i64, what: &str) {
    app.db
        .wait_for_scalar(sql, want, SCHEDULER_TIMEOUT, what)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_holds_across_two_api_processes_and_is_per_organization() {
    const PER_MINUTE: usize = 4;
    let mut app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    app.sql(&format!(
        "UPDATE plans SET rate_limit_per_minute = {PER_MINUTE} WHERE code = 'pro'"
    ))
    .await;
    let other_api = app.spawn_extra_api().await;
    let bases = [app.base_url.clone(), other_api];
    let key = app.create_key(app.org_id, &["all"], None).await;
    let send = |i: usize, key: String| {
        let url = format!("{}/api/v1/models", bases[i % 2]);
        let client = app.client.clone();
        async move {
            client
                .get(url)
                .bearer_auth(key)
                .send()
                .await
                .expect("GET /models")
        }
    };

    // A burst of the plan's rate, alternating between the processes, passes.
    for i in 0..PER_MINUTE {
        let response = send(i, key.clone()).await;
        assert_eq!(response.status(), 200, "request {i} within the rate");
    }
    // The next one is refused by either process: the state is shared.
    for i in PER_MINUTE..PER_MINUTE + 2 {
        let response = send(i, key.clone()).await;
        assert_eq!(response.status(), 429, "request {i} over the rate");
        let retry_after: u64 = response
            .headers()
            .get("retry-after")
            .expect("a Retry-After header")
            .to_str()
            .unwrap()
            .parse()
            .expect("Retry-After in seconds");
        // One emission interval (60 s / rate) at most.
        assert!(
            (1..=60 / PER_MINUTE as u64).contains(&retry_after),
            "Retry-After {retry_after}"
        );
        let body: Value = response.json().await.expect("JSON error");
        assert_eq!(body["error"]["code"], "rate_limited", "{body}");
        assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }

    // Another key of the same organization shares its budget (issue 34,
    // finding 3: minting keys does not multiply the rate)...
    let same_org = app.create_key(app.org_id, &["all"], None).await;
    assert_eq!(
        send(0, same_org).await.status(),
        429,
        "the organization's rate"
    );
    // ...while another organization has a budget of its own.
    let other_org = app.create_org("Other", "pro").await;
    let second = app.create_key(other_org, &["all"], None).await;
    for i in 0..PER_MINUTE {
        let response = send(i, second.clone()).await;
        assert_eq!(response.status(), 200, "second key, request {i}");
    }
    let refused = send(0, second.clone()).await;
    assert_eq!(refused.status(), 429, "second organization over its rate");

    // Retry-After is accurate: once it has passed, one more request is
    // admitted (one emission interval's worth), and the next is refused.
    let retry_after: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    assert_eq!(
        send(1, second.clone()).await.status(),
        200,
        "after Retry-After"
    );
    assert_eq!(send(0, second).await.status(), 429, "one interval only");
}

/// Concurrent bursts on new organizations' keys, split over two processes: exactly the
/// rate is admitted, every other request is a 429 (never a 500, never one
/// too many).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_concurrent_burst_admits_exactly_the_rate_and_refuses_the_rest() {
    const PER_MINUTE: usize = 2;
    const BURST: usize = 8;
    let mut app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    app.sql(&format!(
        "UPDATE plans SET rate_limit_per_minute = {PER_MINUTE} WHERE code = 'pro'"
    ))
    .await;
    let other_api = app.spawn_extra_api().await;
    for round in 0..8 {
        let org = app.create_org(&format!("Round {round}"), "pro").await;
        let key = app.create_key(org, &["all"], None).await;
        let requests: Vec<_> = (0..BURST)
            .map(|i| {
                let base = if i % 2 == 0 {
                    &app.base_url
                } else {
                    &other_api
                };
                tokio::spawn(
                    app.client
                        .get(format!("{base}/api/v1/models"))
                        .bearer_auth(&key)
                        .send(),
                )
            })
            .collect();
        let mut statuses = Vec::new();
        for request in requests {
            let response = request.await.expect("request task").expect("GET /models");
            statuses.push(response.status().as_u16());
        }
        statuses.sort();
        let mut expected = vec![200; PER_MINUTE];
        expected.resize(BURST, 429);
        assert_eq!(statuses, expected, "round {round}");
    }
}

/// A high rate is taken in blocks (a tenth of a second's worth per round
/// trip): two processes together still never admit more than the plan's
/// burst, and what they do not admit is a 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_tokens_taken_in_blocks_never_admit_more_than_the_plan() {
    const PER_MINUTE: usize = 1_800; // blocks of 3 tokens
    const REQUESTS: usize = 2_000;
    let mut app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    app.sql(&format!(
        "UPDATE plans SET rate_limit_per_minute = {PER_MINUTE} WHERE code = 'pro'"
    ))
    .await;
    let other_api = app.spawn_extra_api().await;
    let key = app.create_key(app.org_id, &["all"], None).await;
    let bases = [app.base_url.clone(), other_api];
    let statuses: Vec<u16> = futures_util::stream::iter(0..REQUESTS)
        .map(|i| {
            let request = app
                .client
                .get(format!("{}/api/v1/models", bases[i % 2]))
                .bearer_auth(&key);
            async move { request.send().await.expect("GET /models").status().as_u16() }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let admitted = statuses.iter().filter(|&&s| s == 200).count();
    let refused = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!(admitted + refused, REQUESTS, "only 200s and 429s");
    // The burst plus what the rate refilled while the test ran (one token
    // per 33 ms); tokens of a block unused within a second are lost, never
    // granted twice.
    assert!(admitted <= PER_MINUTE + 200, "admitted {admitted}");
    assert!(admitted >= PER_MINUTE - 60, "admitted {admitted}");
    assert!(refused > 0, "the burst was exhausted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_beyond_the_plan_are_refused_and_the_slot_is_freed() {
    let mut app = TestApp::spawn_with(
        TestOptions::default().configure(|s| s.local_provider.latency_ms = 1_500),
    )
    .await;
    app.sql("UPDATE plans SET concurrent_requests = 1 WHERE code = 'pro'")
        .await;
    let (a, b) = tokio::join!(sync_image(&app, &app.key, 1), sync_image(&app, &app.key, 1));
    let mut statuses = [a.0, b.0];
    statuses.sort();
    assert_eq!(
        statuses,
        [200, 429],
        "one passes, one is refused: {a:?} {b:?}"
    );
    let refused = if a.0 == 429 { &a.1 } else { &b.1 };
    assert_eq!(refused["error"]["code"], "rate_limited", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("concurrent requests"),
        "{refused}"
    );
    // Only one job was submitted: the refused request charged nothing.
    assert_eq!(app.count_jobs().await, 1);

    // The slot was freed before the response was sent.
    assert_eq!(app.db.scalar_i64(HELD_SLOTS).await, 0, "no slot is held");
    let (status, body) = sync_image(&app, &app.key, 1).await;
    assert_eq!(status, 200, "a request after both finished: {body}");

    // Two slots, six simultaneous requests over two API processes: two pass.
    app.sql("UPDATE plans SET concurrent_requests = 2 WHERE code = 'pro'")
        .await;
    let other_api = app.spawn_extra_api().await;
    let jobs_before = app.count_jobs().await;
    let requests: Vec<_> = (0..6)
        .map(|i| {
            let base = if i % 2 == 0 {
                &app.base_url
            } else {
                &other_api
            };
            tokio::spawn(
                app.client
                    .post(format!("{base}/api/v1/images/generations"))
                    .bearer_auth(&app.key)
                    .json(&json!({"prompt": "crowd", "size": "512x512"}))
                    .send(),
            )
        })
        .collect();
    let mut statuses = Vec::new();
    for request in requests {
        let response = request.await.expect("request task").expect("POST");
        statuses.push(response.status().as_u16());
    }
    statuses.sort();
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429]);
    assert_eq!(app.count_jobs().await, jobs_before + 2);
    assert_eq!(app.db.scalar_i64(HELD_SLOTS).await, 0, "all slots freed");
}

const HELD_SLOTS: &str = "SELECT count(*) FROM concurrency_slots WHERE holder IS NOT NULL";

/// Plans with many concurrent requests (`metering.lease_slots_from` and up)
/// are served from blocks of slots each API process leases: over two
/// processes no more than the limit run at once, refusals are 429s, and
/// the blocks go back once the processes are idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leased_slot_blocks_never_exceed_the_limit_over_two_processes_and_go_back() {
    const LIMIT: usize = 32;
    let mut app = TestApp::spawn_with(TestOptions::default().without_worker().configure(|s| {
        s.local_provider.latency_ms = 1_500;
        s.metering.idle_ms = 300;
        s.metering.lease_slots_from = 32;
    }))
    .await;
    app.sql(&format!(
        "UPDATE plans SET concurrent_requests = {LIMIT}, rate_limit_per_minute = 100000 WHERE code = 'pro'"
    ))
    .await;
    let other_api = app.spawn_extra_api().await;
    // Slow embeddings (the local provider's latency), more than the limit,
    // arriving over both processes.
    let requests: Vec<_> = (0..LIMIT + 16)
        .map(|i| {
            let base = if i % 2 == 0 {
                &app.base_url
            } else {
                &other_api
            };
            tokio::spawn(
                app.client
                    .post(format!("{base}/api/v1/embeddings"))
                    .bearer_auth(&app.key)
                    .json(&json!({"input": format!("text {i}")}))
                    .send(),
            )
        })
        .collect();
    let mut admitted = 0;
    let mut refused = 0;
    for request in requests {
        let response = request.await.expect("request task").expect("POST");
        match response.status().as_u16() {
            200 => admitted += 1,
            429 => refused += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    // Each process may hold a few leased slots it is not using (at most an
    // eighth of the limit per block), which the other cannot take.
    assert!(admitted <= LIMIT, "admitted {admitted} of {LIMIT}");
    assert!(admitted >= LIMIT - LIMIT / 4, "admitted only {admitted}");
    assert_eq!(admitted + refused, LIMIT + 16);
    wait_for_scalar(&app, HELD_SLOTS, 0, "idle blocks are given back").await;
    // And with every slot free again, the next request passes.
    let response = app
        .post_json("/api/v1/embeddings", &app.key, &json!({"input": "after"}))
        .await;
    assert_eq!(response.status(), 200);
}

/// The slot is released before the response goes out, not after: a row lock
/// taken by the test holds the release back, and with it the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_is_sent_only_once_its_concurrency_slot_is_released() {
    let app = TestApp::spawn_with(
        TestOptions::default().configure(|s| s.local_provider.latency_ms = 3_000),
    )
    .await;
    let mut request = tokio::spawn(
        app.client
            .post(app.url("/api/v1/images/generations"))
            .bearer_auth(&app.key)
            .json(&json!({"prompt": "held", "size": "512x512"}))
            .send(),
    );
    wait_for_scalar(&app, HELD_SLOTS, 1, "the request holds a slot").await;
    let locker = app.db.client().await;
    locker.batch_execute("BEGIN").await.expect("BEGIN");
    let locked = locker
        .query(
            "SELECT 1 FROM concurrency_slots WHERE holder IS NOT NULL FOR UPDATE",
            &[],
        )
        .await
        .expect("locking the held slot");
    assert_eq!(locked.len(), 1, "the slot is still held by the request");
    // The job finishes meanwhile; the release waits for the lock.
    let early = tokio::time::timeout(Duration::from_secs(6), &mut request).await;
    assert!(
        early.is_err(),
        "the response was sent while its slot was still held: {early:?}"
    );
    locker.batch_execute("COMMIT").await.expect("unlocking");
    let response = request.await.expect("the request task").expect("POST");
    assert_eq!(response.status(), 200);
    assert_eq!(
        app.db.scalar_i64(HELD_SLOTS).await,
        0,
        "freed before the answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credits_list_the_ledger_with_filters_paging_and_validation() {
    let app = TestApp::spawn().await;
    let mut remaining = 2000;
    for n in [1, 2, 3] {
        let response = app
            .post_json(
                "/api/v1/images/generations",
                &app.key,
                &json!({"prompt": "metered", "size": "512x512", "n": n}),
            )
            .await;
        assert_eq!(response.status(), 200);
        // What each request cost, in its headers.
        remaining -= n;
        let header = |name: &str| {
            response.headers()[name]
                .to_str()
                .unwrap()
                .parse::<i64>()
                .unwrap()
        };
        assert_eq!(header("x-credits-used"), n);
        assert_eq!(header("x-credits-remaining"), remaining);
        assert!(response.headers().get("x-overage-active").is_none());
    }
    {
        let mut conn = app.db.connect().await;
        conn.transaction::<_, DbError, _>(async |conn| {
            queries::billing::purchase(conn, app.org_id, 40, "top-up").await
        })
        .await
        .expect("a purchase");
    }

    let (status, body) = get_json(&app, "/api/v1/credits", &app.key).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true);
    let data = &body["data"];
    let balance = &data["balance"];
    // 2000 included, 1 + 2 + 3 credits of procedural-v1 images.
    assert_eq!(balance["included_remaining"], 1994, "{body}");
    assert_eq!(balance["purchased"], 40, "{body}");
    assert_eq!(balance["total_available"], 2034, "{body}");
    assert_eq!(balance["overage_used"], 0, "{body}");
    let period = &data["current_period"];
    assert_eq!(period["included_credits"], 2000);
    assert_eq!(period["credits_used"], 6);
    assert_eq!(period["overage_active"], false);
    assert!(period["start"].is_string() && period["end"].is_string());
    let transactions = data["transactions"].as_array().unwrap();
    let kinds: Vec<&str> = transactions
        .iter()
        .map(|t| t["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "purchase",
            "consumption",
            "consumption",
            "consumption",
            "allocation"
        ],
        "newest first: {body}"
    );
    let pagination = &body["meta"]["pagination"];
    assert_eq!(
        pagination,
        &json!({"limit": 50, "offset": 0, "total": 5, "has_more": false})
    );
    // Each row's balance_after is the previous balance plus its amount,
    // and the newest one is the account's balance.
    for pair in transactions.windows(2) {
        let (newer, older) = (&pair[0], &pair[1]);
        assert_eq!(
            newer["balance_after"].as_i64().unwrap(),
            older["balance_after"].as_i64().unwrap() + newer["amount"].as_i64().unwrap(),
            "{newer} after {older}"
        );
    }
    assert_eq!(transactions[0]["balance_after"], 2034);
    assert_eq!(transactions[4]["amount"], 2000);
    assert_eq!(transactions[4]["metadata"]["plan"], "pro");
    assert!(transactions[4]["metadata"]["period"].is_string());

    // Consumption rows name their request (the job), model and endpoint.
    let (_, jobs) = get_json(&app, "/api/v1/jobs", &app.key).await;
    let job_ids: BTreeSet<String> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(job_ids.len(), 3, "{jobs}");
    let mut charged_ids = BTreeSet::new();
    let mut amounts = Vec::new();
    for row in transactions.iter().filter(|t| t["type"] == "consumption") {
        let metadata = &row["metadata"];
        charged_ids.insert(metadata["request_id"].as_str().unwrap().to_owned());
        assert_eq!(metadata["model"], "local/procedural-v1", "{row}");
        assert!(
            metadata["endpoint"]
                .as_str()
                .unwrap()
                .ends_with("/images/generations"),
            "{row}"
        );
        assert!(row["id"].is_string() && row["created_at"].is_string());
        assert!(row["description"].is_string());
        amounts.push(row["amount"].as_i64().unwrap());
    }
    assert_eq!(charged_ids, job_ids, "one consumption per job");
    amounts.sort();
    assert_eq!(amounts, [-3, -2, -1], "negative, as charged");
    assert_ledger_invariant(&app, app.org_id).await;
    assert_ledger_chain(&app, &app.key, app.org_id).await;

    // The type filter.
    let (status, filtered) = get_json(&app, "/api/v1/credits?type=consumption", &app.key).await;
    assert_eq!(status, 200, "{filtered}");
    let rows = filtered["data"]["transactions"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|t| t["type"] == "consumption"));
    assert_eq!(filtered["meta"]["pagination"]["total"], 3);
    let (_, purchases) = get_json(&app, "/api/v1/credits?type=purchase", &app.key).await;
    let rows = purchases["data"]["transactions"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["amount"], 40);
    let (_, none) = get_json(&app, "/api/v1/credits?type=overage", &app.key).await;
    assert_eq!(none["data"]["transactions"], json!([]));
    assert_eq!(none["meta"]["pagination"]["total"], 0);

    // Paging: two pages of two and one of one make up the whole list.
    let mut paged = Vec::new();
    for (offset, has_more, len) in [(0, true, 2), (2, true, 2), (4, false, 1)] {
        let (status, page) = get_json(
            &app,
            &format!("/api/v1/credits?limit=2&offset={offset}"),
            &app.key,
        )
        .await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(
            page["meta"]["pagination"],
            json!({"limit": 2, "offset": offset, "total": 5, "has_more": has_more})
        );
        let rows = page["data"]["transactions"].as_array().unwrap();
        assert_eq!(rows.len(), len, "{page}");
        paged.extend(rows.iter().map(|t| t["id"].clone()));
    }
    let all: Vec<Value> = transactions.iter().map(|t| t["id"].clone()).collect();
    assert_eq!(paged, all);

    // Date range: everything is from today.
    let (_, future) = get_json(&app, "/api/v1/credits?start_date=2999-01-01", &app.key).await;
    assert_eq!(future["meta"]["pagination"]["total"], 0, "{future}");

    // Validation.
    for (query, param) in [
        ("type=foo", "type"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("offset=-1", "offset"),
        ("start_date=yesterday", "start_date"),
        // Byte len-6 falls inside a character: a 400, never a panic.
        ("start_date=a%E2%82%AC%E2%82%ACb", "start_date"),
        ("end_date=a%E2%82%AC%E2%82%ACb", "end_date"),
    ] {
        let (status, body) = get_json(&app, &format!("/api/v1/credits?{query}"), &app.key).await;
        assert_validation(status, &body, param);
    }

    // Scope `usage` is required.
    let image_only = app.create_key(app.org_id, &["image"], None).await;
    let (status, body) = get_json(&app, "/api/v1/credits", &image_only).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden");
    let usage_only = app.create_key(app.org_id, &["usage"], None).await;
    let (status, _) = get_json(&app, "/api/v1/credits", &usage_only).await;
    assert_eq!(status, 200);
}

fn bucket<'a>(quota: &'a Value, name: &str) -> &'a Value {
    quota["data"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["bucket"] == name)
        .unwrap_or_else(|| panic!("bucket {name} in {quota}"))
}

const BUCKETS: [&str; 8] = [
    "chat_tokens",
    "image_generations",
    "video_seconds",
    "stt_seconds",
    "tts_chars",
    "image_edits",
    "music_tracks",
    "agent_runs",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_lists_every_bucket_with_its_multipliers_and_free_has_none_for_media() {
    let app = TestApp::spawn().await;
    let (status, body) = sync_image(&app, &app.key, 2).await;
    assert_eq!(status, 200, "{body}");

    let (status, quota) = get_json(&app, "/api/v1/quota", &app.key).await;
    assert_eq!(status, 200, "{quota}");
    assert_eq!(quota["success"], true);
    assert_eq!(quota["data"]["plan"], "pro");
    assert!(quota["data"]["period"]["start"].is_string());
    let names: BTreeSet<&str> = quota["data"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["bucket"].as_str().unwrap())
        .collect();
    assert_eq!(names, BUCKETS.into_iter().collect());
    // The Pro column of the plan table (and the project's plan decisions).
    for (name, limit) in [
        ("chat_tokens", 2_000_000),
        ("image_generations", 500),
        ("video_seconds", 120),
        ("stt_seconds", 3_600),
        ("tts_chars", 200_000),
        ("image_edits", 75),
        ("music_tracks", 20),
        ("agent_runs", 100),
    ] {
        let b = bucket(&quota, name);
        assert_eq!(b["limit"], limit, "{b}");
        assert_eq!(b["available"], true, "{b}");
        assert_eq!(b["unlimited"], false, "{b}");
        for field in ["used", "reserved", "remaining"] {
            assert!(b[field].is_number(), "{field} of {b}");
        }
        let m = &b["multipliers"];
        let tiered = ["stt_seconds", "tts_chars", "image_edits", "music_tracks"];
        let expected = if tiered.contains(&name) {
            json!({"fast": 1.0, "standard": 1.25, "premium": 1.5})
        } else if name == "chat_tokens" {
            json!({"fast": 1.0, "standard": 1.5, "premium": 2.0})
        } else {
            json!({"fast": 1.0, "standard": 1.0, "premium": 1.0})
        };
        assert_eq!(m, &expected, "{name}");
    }
    let images = bucket(&quota, "image_generations");
    assert_eq!(images["used"].as_f64(), Some(2.0), "{images}");
    assert_eq!(images["reserved"].as_f64(), Some(0.0), "{images}");
    assert_eq!(images["remaining"].as_f64(), Some(498.0), "{images}");
    let tts = bucket(&quota, "tts_chars");
    assert_eq!(tts["used"].as_f64(), Some(0.0));
    assert_eq!(tts["remaining"].as_f64(), Some(200_000.0));
    let credits = &quota["data"]["credits"];
    assert_eq!(credits["limit"], 2000);
    assert_eq!(credits["used"], 2);
    assert_eq!(credits["remaining"], 1998);

    // Free: no stt, tts, edits, music or agents.
    let free = app.create_org("Free org", "free").await;
    let free_key = app.create_key(free, &["all"], None).await;
    let (status, quota) = get_json(&app, "/api/v1/quota", &free_key).await;
    assert_eq!(status, 200, "{quota}");
    assert_eq!(quota["data"]["plan"], "free");
    for name in [
        "stt_seconds",
        "tts_chars",
        "image_edits",
        "music_tracks",
        "agent_runs",
    ] {
        let b = bucket(&quota, name);
        assert_eq!(b["available"], false, "{b}");
        assert_eq!(b["limit"], 0, "{b}");
        assert_eq!(b["remaining"].as_f64(), Some(0.0), "{b}");
    }
    for name in ["chat_tokens", "image_generations"] {
        assert_eq!(bucket(&quota, name)["available"], true);
    }
    assert_eq!(bucket(&quota, "image_generations")["limit"], 25);
    assert_eq!(
        bucket(&quota, "image_generations")["used"].as_f64(),
        Some(0.0)
    );
    assert_eq!(quota["data"]["credits"]["limit"], 100);

    // Scope `usage`.
    let chat_only = app.create_key(app.org_id, &["chat"], None).await;
    let (status, _) = get_json(&app, "/api/v1/quota", &chat_only).await;
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overage_configuration_is_validated_forbidden_on_free_and_reflected_in_the_status() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let configure = "/api/v1/overage/configure";
    let cases = [
        (json!({}), "enabled"),
        (json!({"soft_limit": 10}), "enabled"),
        (
            json!({"enabled": true, "soft_limit": 500, "hard_limit": 100}),
            "soft_limit",
        ),
        (json!({"enabled": true, "soft_limit": -5}), "soft_limit"),
        (json!({"enabled": true, "hard_limit": 0}), "hard_limit"),
        (
            json!({"enabled": true, "notification_email": "not-an-email"}),
            "notification_email",
        ),
        (
            json!({"enabled": true, "notification_email": "a b@example.com"}),
            "notification_email",
        ),
    ];
    for (body, param) in &cases {
        let (status, error) = post(&app, configure, &app.key, body).await;
        assert_validation(status, &error, param);
    }
    let (status, error) = post(&app, configure, &app.key, &json!({"enabled": "yes"})).await;
    assert_eq!(status, 400, "{error}");
    let (status, error) = post(
        &app,
        configure,
        &app.key,
        &json!({"enabled": true, "surprise": 1}),
    )
    .await;
    assert_eq!(status, 400, "unknown fields are refused: {error}");

    // Nothing of the refused requests was applied.
    let (status, before) = get_json(&app, "/api/v1/overage/status", &app.key).await;
    assert_eq!(status, 200, "{before}");
    assert_eq!(before["success"], true);
    assert_eq!(before["data"]["enabled"], false, "{before}");
    assert_eq!(before["data"]["limits"]["soft_limit"], Value::Null);

    // Free has no overage.
    let free = app.create_org("Free org", "free").await;
    let free_key = app.create_key(free, &["all"], None).await;
    let (status, error) = post(&app, configure, &free_key, &json!({"enabled": true})).await;
    assert_eq!(status, 403, "{error}");
    assert_eq!(error["error"]["code"], "not_available_on_plan");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("overage"),
        "{error}"
    );
    let (_, free_status) = get_json(&app, "/api/v1/overage/status", &free_key).await;
    assert_eq!(free_status["data"]["enabled"], false, "{free_status}");

    // Pro: enabled, with limits and an email.
    let (status, configured) = post(
        &app,
        configure,
        &app.key,
        &json!({"enabled": true, "soft_limit": 100, "hard_limit": 500,
                "notification_email": " ops@example.com "}),
    )
    .await;
    assert_eq!(status, 200, "{configured}");
    assert_eq!(configured["data"]["enabled"], true);
    let (status, after) = get_json(&app, "/api/v1/overage/status", &app.key).await;
    assert_eq!(status, 200);
    let data = &after["data"];
    assert_eq!(data["enabled"], true, "{after}");
    assert_eq!(data["rate_per_credit"].as_f64(), Some(0.01), "{after}");
    assert_eq!(
        data["limits"],
        json!({"soft_limit": 100, "soft_limit_reached": false,
               "hard_limit": 500, "hard_limit_reached": false})
    );
    assert_eq!(data["current_usage"]["credits"], 0);
    assert!(data["current_usage"]["billing_period"]["start"].is_string());
    assert_eq!(data["notifications"]["email_alerts"], true);
    assert_eq!(data["notifications"]["email"], "ops@example.com");
    assert_eq!(data["notifications"]["webhook_enabled"], true);
    assert_eq!(data["notifications"]["thresholds"], json!([50, 80, 100]));
    assert_eq!(configured["data"], after["data"]);

    // Disabling clears the limits that were not sent.
    let (status, off) = post(&app, configure, &app.key, &json!({"enabled": false})).await;
    assert_eq!(status, 200, "{off}");
    let (_, after) = get_json(&app, "/api/v1/overage/status", &app.key).await;
    assert_eq!(after["data"]["enabled"], false);
    assert_eq!(after["data"]["limits"]["hard_limit"], Value::Null);

    // Scope `usage`.
    let image_only = app.create_key(app.org_id, &["image"], None).await;
    let (status, _) = post(&app, configure, &image_only, &json!({"enabled": true})).await;
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_information_has_the_spec_fields_and_the_plans_features() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let (status, body) = get_json(&app, "/api/v1/account", &app.key).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true);
    let data = &body["data"];
    let account = &data["account"];
    assert_eq!(account["id"], app.org_id.to_string());
    assert_eq!(account["name"], "Test org");
    assert_eq!(account["status"], "active");
    assert!(account["created_at"].is_string());
    assert!(account.get("email").is_some(), "{account}");
    let subscription = &data["subscription"];
    assert_eq!(subscription["plan"], "pro");
    assert_eq!(subscription["status"], "active");
    let period = &subscription["current_period"];
    assert!(period["start"].is_string() && period["end"].is_string());
    let features = &subscription["features"];
    assert_eq!(features["included_credits"], 2000);
    assert_eq!(features["overage_enabled"], false);
    assert_eq!(features["overage_rate"].as_f64(), Some(0.01));
    assert_eq!(features["rate_limit"], 300);
    assert_eq!(features["concurrent_requests"], 10);
    let models: BTreeSet<&str> = features["available_models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert!(models.contains("local/procedural-v1"), "{models:?}");
    let api_features: BTreeSet<&str> = features["api_features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    for feature in [
        "chat:completions",
        "images:generations",
        "images:edits",
        "audio:speech",
        "audio:transcriptions",
        "music:generations",
        "videos:generations",
        "agents",
        "webhooks",
    ] {
        assert!(
            api_features.contains(feature),
            "{feature} in {api_features:?}"
        );
    }
    let billing = &data["billing"];
    assert_eq!(billing["next_billing_date"], period["end"]);
    assert_eq!(billing["auto_renew"], true);
    assert!(billing.get("payment_method").is_some());
    assert_eq!(
        billing["overage_settings"],
        json!({"enabled": false, "soft_limit": null, "hard_limit": null,
               "notification_thresholds": [50, 80, 100]})
    );

    // Overage settings show up in the account.
    let (status, _) = post(
        &app,
        "/api/v1/overage/configure",
        &app.key,
        &json!({"enabled": true, "soft_limit": 10, "hard_limit": 20}),
    )
    .await;
    assert_eq!(status, 200);
    let (_, body) = get_json(&app, "/api/v1/account", &app.key).await;
    assert_eq!(
        body["data"]["billing"]["overage_settings"],
        json!({"enabled": true, "soft_limit": 10, "hard_limit": 20,
               "notification_thresholds": [50, 80, 100]})
    );
    assert_eq!(
        body["data"]["subscription"]["features"]["overage_enabled"],
        true
    );

    // Free: its limits, and neither media nor agents nor webhooks.
    let free = app.create_org("Free org", "free").await;
    let free_key = app.create_key(free, &["all"], None).await;
    let (status, body) = get_json(&app, "/api/v1/account", &free_key).await;
    assert_eq!(status, 200, "{body}");
    let features = &body["data"]["subscription"]["features"];
    assert_eq!(body["data"]["subscription"]["plan"], "free");
    assert_eq!(features["rate_limit"], 20);
    assert_eq!(features["concurrent_requests"], 2);
    assert_eq!(features["included_credits"], 100);
    assert_eq!(features["overage_rate"], Value::Null);
    let api_features: BTreeSet<&str> = features["api_features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(api_features.contains("chat:completions"));
    assert!(api_features.contains("images:generations"));
    for feature in [
        "audio:speech",
        "audio:transcriptions",
        "music:generations",
        "images:edits",
        "agents",
        "webhooks",
    ] {
        assert!(!api_features.contains(feature), "{feature} on free");
    }
    let free_models = features["available_models"].as_array().unwrap();
    assert!(
        free_models.len() < models.len(),
        "free lists fewer models: {free_models:?}"
    );

    // Scope `usage`.
    let image_only = app.create_key(app.org_id, &["image"], None).await;
    let (status, _) = get_json(&app, "/api/v1/account", &image_only).await;
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_rolls_an_ended_period_over_keeping_purchased_credits() {
    let app = TestApp::spawn().await;
    // A small allowance, so the period ends in overage.
    app.sql("UPDATE plans SET included_credits = 2 WHERE code = 'pro'")
        .await;
    let (status, body) = post(
        &app,
        "/api/v1/overage/configure",
        &app.key,
        &json!({"enabled": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // 5 credits: 2 included, 3 overage.
    let (status, body) = sync_image(&app, &app.key, 5).await;
    assert_eq!(status, 200, "{body}");
    // Purchased afterwards, so nothing draws on them.
    {
        let mut conn = app.db.connect().await;
        conn.transaction::<_, DbError, _>(async |conn| {
            queries::billing::purchase(conn, app.org_id, 30, "top-up").await
        })
        .await
        .expect("a purchase");
    }
    let (_, included, purchased, overage, _) = balances(&app, app.org_id).await;
    assert_eq!((included, purchased, overage), (0, 30, 3));
    assert_ledger_invariant(&app, app.org_id).await;
    let (_, quota) = get_json(&app, "/api/v1/quota", &app.key).await;
    assert_eq!(
        bucket(&quota, "image_generations")["used"].as_f64(),
        Some(5.0)
    );
    let old_start = quota["data"]["period"]["start"]
        .as_str()
        .unwrap()
        .to_owned();

    // The period ended a second ago; its bucket rows belong to it.
    app.sql(&format!(
        "UPDATE billing_accounts
            SET period_start = period_start - interval '1 month',
                period_end = now() - interval '1 second'
          WHERE org_id = '{org}';
         UPDATE quota_usage SET period_start = period_start - interval '1 month'
          WHERE org_id = '{org}';",
        org = app.org_id
    ))
    .await;
    // No API call until the scheduler has rolled it (an API call would too).
    wait_for_scalar(
        &app,
        &format!(
            "SELECT count(*) FROM billing_accounts
              WHERE org_id = '{}' AND period_end > now()",
            app.org_id
        ),
        1,
        "the scheduler rolls the period over",
    )
    .await;

    let (_, included, purchased, overage, reserved) = balances(&app, app.org_id).await;
    assert_eq!(
        (included, purchased, overage, reserved),
        (2, 30, 0, 0),
        "included credits reset, purchased kept, overage billed"
    );
    assert_ledger_invariant(&app, app.org_id).await;
    let (status, credits) = get_json(&app, "/api/v1/credits?type=allocation", &app.key).await;
    assert_eq!(status, 200, "{credits}");
    let allocations = credits["data"]["transactions"].as_array().unwrap();
    assert_eq!(
        allocations.len(),
        2,
        "the first and the rollover: {credits}"
    );
    let rollover = &allocations[0];
    // From 0 + 30 - 3 to 2 + 30 - 0.
    assert_eq!(rollover["amount"], 5, "{rollover}");
    assert_eq!(rollover["balance_after"], 32, "{rollover}");
    let metadata = &rollover["metadata"];
    assert_eq!(metadata["expired_included"], 0, "{metadata}");
    assert_eq!(metadata["overage_billed"], 3, "{metadata}");
    assert_eq!(metadata["plan"], "pro");
    let period = credits["data"]["current_period"].clone();
    assert_eq!(period["included_credits"], 2);
    assert_eq!(period["credits_used"], 0);
    assert_eq!(period["overage_active"], false);
    assert_eq!(
        metadata["period"].as_str().unwrap(),
        &period["start"].as_str().unwrap()[..7],
        "the allocation names the new period"
    );
    assert_eq!(credits["data"]["balance"]["purchased"], 30);

    // The new period's buckets start empty.
    let (_, quota) = get_json(&app, "/api/v1/quota", &app.key).await;
    let new_start = quota["data"]["period"]["start"].as_str().unwrap();
    assert!(
        new_start >= old_start.as_str(),
        "{new_start} vs {old_start}"
    );
    let images = bucket(&quota, "image_generations");
    assert_eq!(images["used"].as_f64(), Some(0.0), "{images}");
    assert_eq!(images["remaining"].as_f64(), Some(500.0), "{images}");

    // Unused included credits expire at the next rollover.
    app.sql(&format!(
        "UPDATE billing_accounts
            SET period_start = period_start - interval '1 month',
                period_end = now() - interval '1 second'
          WHERE org_id = '{org}';",
        org = app.org_id
    ))
    .await;
    wait_for_scalar(
        &app,
        &format!(
            "SELECT count(*) FROM credit_transactions
              WHERE org_id = '{}' AND type = 'allocation'",
            app.org_id
        ),
        3,
        "the second rollover",
    )
    .await;
    let expired = app
        .db
        .scalar_i64(&format!(
            "SELECT (metadata->>'expired_included')::BIGINT FROM credit_transactions
              WHERE org_id = '{}' AND type = 'allocation'
              ORDER BY created_at DESC, id DESC LIMIT 1",
            app.org_id
        ))
        .await;
    assert_eq!(expired, 2, "the unused included credits expired");
    let (_, included, purchased, _, _) = balances(&app, app.org_id).await;
    assert_eq!((included, purchased), (2, 30));
    assert_ledger_invariant(&app, app.org_id).await;
    assert_ledger_chain(&app, &app.key, app.org_id).await;
}

async fn speech(app: &TestApp, key: &str) -> (u16, Value) {
    post(
        app,
        "/api/v1/audio/speech",
        key,
        &json!({"input": "Hello there", "voice": "alloy"}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_change_applies_at_once_records_the_event_and_keeps_the_ledger() {
    let app = TestApp::spawn().await;
    let free = app.create_org("Free org", "free").await;
    let key = app.create_key(free, &["all"], None).await;
    let (status, body) = speech(&app, &key).await;
    assert_eq!(status, 402, "free has no text-to-speech: {body}");
    assert_eq!(body["error"]["code"], "quota_exceeded");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tts_chars"),
        "{body}"
    );
    // Some free usage first: 3 of the 100 included credits.
    let (status, body) = sync_image(&app, &key, 3).await;
    assert_eq!(status, 200, "{body}");

    let account = {
        let mut conn = app.db.connect().await;
        conn.transaction::<_, DbError, _>(async |conn| {
            queries::billing::change_plan(conn, free, "pro").await
        })
        .await
        .expect("changing the plan")
    };
    assert_eq!(account.included_credits, 2000);
    assert_eq!(account.included_remaining, 1997, "the period's use counts");

    let (status, body) = speech(&app, &key).await;
    assert_eq!(status, 200, "pro has text-to-speech: {body}");
    let (_, account_info) = get_json(&app, "/api/v1/account", &key).await;
    assert_eq!(account_info["data"]["subscription"]["plan"], "pro");
    assert_eq!(
        account_info["data"]["subscription"]["features"]["rate_limit"],
        300
    );

    let events = app.events().await;
    let updated: Vec<&Value> = events
        .iter()
        .filter(|(kind, _)| kind == "subscription.updated")
        .map(|(_, data)| data)
        .collect();
    assert_eq!(updated.len(), 1, "{events:?}");
    assert_eq!(updated[0]["planCode"], "pro");
    assert_eq!(updated[0]["subscriptionId"], free.to_string());

    let (_, allocations) = get_json(&app, "/api/v1/credits?type=allocation", &key).await;
    let rows = allocations["data"]["transactions"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{allocations}");
    assert_eq!(rows[0]["amount"], 1900, "{allocations}");
    assert_eq!(rows[0]["metadata"]["plan"], "pro");
    assert_ledger_invariant(&app, free).await;

    // And back down: the allowance shrinks, never below zero.
    {
        let mut conn = app.db.connect().await;
        conn.transaction::<_, DbError, _>(async |conn| {
            queries::billing::change_plan(conn, free, "free").await
        })
        .await
        .expect("changing the plan back");
    }
    let (status, _) = speech(&app, &key).await;
    assert_eq!(status, 402, "free again");
    assert_ledger_invariant(&app, free).await;
    assert_ledger_chain(&app, &key, free).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_releases_expired_sync_reservations_only() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    // Creates the account.
    let (status, quota) = get_json(&app, "/api/v1/quota", &app.key).await;
    assert_eq!(status, 200, "{quota}");
    let (sum_before, ..) = balances(&app, app.org_id).await;
    let org = app.org_id;
    let (expired, live) = (Uuid::now_v7(), Uuid::now_v7());
    app.sql(&format!(
        "INSERT INTO quota_usage (org_id, period_start, bucket)
         SELECT org_id, period_start, 'chat_tokens' FROM billing_accounts WHERE org_id = '{org}';
         INSERT INTO reservations (id, org_id, credits, bucket, bucket_milli, period_start, expires_at)
         SELECT '{expired}', org_id, 7, 'chat_tokens', 5000, period_start, now() - interval '1 minute'
           FROM billing_accounts WHERE org_id = '{org}';
         INSERT INTO reservations (id, org_id, credits, bucket, bucket_milli, period_start, expires_at)
         SELECT '{live}', org_id, 4, 'chat_tokens', 2000, period_start, now() + interval '1 hour'
           FROM billing_accounts WHERE org_id = '{org}';
         UPDATE billing_accounts SET reserved_credits = reserved_credits + 11 WHERE org_id = '{org}';
         UPDATE quota_usage SET reserved_milli = reserved_milli + 7000
          WHERE org_id = '{org}' AND bucket = 'chat_tokens';"
    ))
    .await;
    let (_, quota) = get_json(&app, "/api/v1/quota", &app.key).await;
    assert_eq!(quota["data"]["credits"]["reserved"], 11, "{quota}");

    wait_for_scalar(
        &app,
        &format!("SELECT count(*) FROM reservations WHERE id = '{expired}'"),
        0,
        "the expired reservation is released",
    )
    .await;
    let (sum_after, _, _, _, reserved) = balances(&app, org).await;
    assert_eq!(reserved, 4, "only the live reservation holds credits");
    assert_eq!(sum_after, sum_before, "a release charges nothing");
    assert_eq!(
        app.db
            .scalar_i64(&format!(
                "SELECT count(*) FROM reservations WHERE id = '{live}'"
            ))
            .await,
        1,
        "the live reservation stays"
    );
    let (_, quota) = get_json(&app, "/api/v1/quota", &app.key).await;
    let chat = bucket(&quota, "chat_tokens");
    assert_eq!(chat["reserved"].as_f64(), Some(2.0), "{chat}");
    assert_eq!(chat["used"].as_f64(), Some(0.0), "{chat}");
    assert_eq!(quota["data"]["credits"]["reserved"], 4);
    assert_ledger_invariant(&app, org).await;
}
