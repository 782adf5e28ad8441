//! The dashboard's usage, jobs, job, webhooks, credits and models pages,
//! driven as a browser would (reqwest with cookies): figures equal to the
//! API's, filters and keyset pages, previews on signed URLs, cancel,
//! webhook re-enable / test / redeliver / replay reaching a local receiver,
//! tenancy (404 pages), CSRF refusals and bad input (400 pages).

use std::time::Duration;

use chrono::{Days, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use unigen_tests::dashboard::element_text;
use unigen_tests::{TestApp, TestOptions, json_of};

use crate::webhooks::{WAIT, receiver, requests_of};

fn location(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// `href="..."` values in a page containing `needle`, HTML-unescaped.
fn links(html: &str, needle: &str) -> Vec<String> {
    html.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|href| href.contains(needle))
        .map(|href| href.replace("&amp;", "&").replace("&#38;", "&"))
        .collect()
}

/// `src="..."` of the first `<tag ` element in a page.
fn src_of(html: &str, tag: &str) -> Option<String> {
    let at = html.find(&format!("<{tag} "))?;
    let rest = &html[at..];
    let src = rest.split("src=\"").nth(1)?.split('"').next()?;
    Some(src.replace("&amp;", "&").replace("&#38;", "&"))
}

/// Job ids linked from a jobs page, in order.
fn job_ids(html: &str) -> Vec<String> {
    links(html, "/dashboard/jobs/")
        .into_iter()
        .filter_map(|href| href.rsplit('/').next().map(str::to_owned))
        .filter(|id| id.len() == 36)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_figures_and_the_csv_equal_get_usage_for_the_same_range() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    app.create_key(app.org_id, &["chat"], None).await;
    let today = Utc::now().date_naive();
    let yesterday = today - Days::new(1);
    // Records written as the settlement writes them (the rollup trigger
    // runs for any insert): two keys, two models, two days, one record
    // without a key, one in the previous period and one long before.
    let at = |day: chrono::NaiveDate, hour: u32| format!("{day} {hour:02}:30:00+00");
    let rows = [
        (
            at(today, 0),
            "k1",
            "local/echo",
            "/v1/chat/completions",
            5,
            30,
            "success",
        ),
        (
            at(today, 0),
            "k1",
            "local/echo",
            "/v1/chat/completions",
            7,
            11,
            "failed",
        ),
        (
            at(today, 0),
            "k2",
            "local/procedural-v1",
            "/v1/images/generations",
            40,
            0,
            "success",
        ),
        (
            at(yesterday, 23),
            "k2",
            "local/echo",
            "/v1/chat/completions",
            3,
            9,
            "success",
        ),
        (
            at(yesterday, 1),
            "none",
            "local/echo",
            "/v1/embeddings",
            1,
            4,
            "success",
        ),
        (
            at(today - Days::new(2), 12),
            "k1",
            "local/echo",
            "/v1/chat/completions",
            100,
            50,
            "success",
        ),
        (
            at(today - Days::new(10), 12),
            "k1",
            "local/echo",
            "/v1/chat/completions",
            1000,
            5,
            "success",
        ),
    ];
    for (created, key, model, endpoint, credits, tokens, status) in rows {
        let key_sql = match key {
            "none" => "NULL".to_owned(),
            // k1: the oldest key of the org; k2: the newest.
            "k1" => format!(
                "(SELECT id FROM api_keys WHERE org_id = '{}' ORDER BY created_at, id LIMIT 1)",
                app.org_id
            ),
            _ => format!(
                "(SELECT id FROM api_keys WHERE org_id = '{}' ORDER BY created_at DESC, id DESC LIMIT 1)",
                app.org_id
            ),
        };
        app.sql(&format!(
            "INSERT INTO usage_records (id, org_id, api_key_id, endpoint, method, model, credits,
                 latency_ms, status, total_tokens, completion_tokens, created_at)
             VALUES (gen_random_uuid(), '{}', {key_sql}, '{endpoint}', 'POST', '{model}', {credits},
                 10, '{status}', {tokens}, {tokens}, '{created}')",
            app.org_id
        ))
        .await;
    }

    let query = format!("start_date={yesterday}&end_date={today}&timezone=UTC");
    let (status, api) = json_of(app.get(&format!("/api/v1/usage?{query}"), &app.key).await).await;
    assert_eq!(status, 200, "{api}");
    let summary = &api["data"]["summary"];
    assert_eq!(summary["total_requests"], 5, "{api}");
    assert_eq!(summary["total_credits"], 56, "{api}");

    let (browser, _) = app.signed_in("viewer").await;
    for group in ["model", "endpoint", "key"] {
        let path = format!("/usage?from={yesterday}&to={today}&group={group}");
        let (status, html) = browser.page(&path).await;
        assert_eq!(status, 200, "{html}");
        assert_eq!(
            element_text(&html, "total-requests").unwrap(),
            "5",
            "{group}"
        );
        assert_eq!(
            element_text(&html, "total-credits").unwrap(),
            "56",
            "{group}"
        );
        assert_eq!(
            element_text(&html, "total-tokens").unwrap(),
            "54",
            "{group}"
        );
        assert!(html.contains("<label for=\"group\">Group by</label>"));
        assert!(html.contains("<svg class=\"chart\""));
        // The previous period (two days before) is the comparison.
        assert!(html.contains("Credits before"), "{html}");

        let csv_link = links(&html, "usage.csv").pop().expect("Export CSV link");
        let response = browser
            .client
            .get(format!("{}{csv_link}", app.base_url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/csv")
        );
        let csv = response.text().await.unwrap();
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let requests_at = header.iter().position(|h| *h == "requests").unwrap();
        let credits_at = header.iter().position(|h| *h == "credits").unwrap();
        let (mut requests, mut credits) = (0i64, 0i64);
        for line in lines {
            let cells: Vec<&str> = line.split(',').collect();
            requests += cells[requests_at].parse::<i64>().unwrap();
            credits += cells[credits_at].parse::<i64>().unwrap();
        }
        assert_eq!((requests, credits), (5, 56), "{group}: {csv}");
    }

    // Per key: the rows equal what GET /usage answers for each key.
    let (_, keys) = json_of(app.get("/api/v1/keys", &app.key).await).await;
    let ids: Vec<String> = keys["data"]
        .as_array()
        .or_else(|| keys["keys"].as_array())
        .map(|list| {
            list.iter()
                .filter_map(|k| k["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(ids.len(), 2, "{keys}");
    let csv = browser
        .client
        .get(browser.url(&format!("/usage.csv?from={yesterday}&to={today}&group=key")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for id in ids {
        let (_, per_key) = json_of(
            app.get(&format!("/api/v1/usage?{query}&api_key_id={id}"), &app.key)
                .await,
        )
        .await;
        let credits: i64 = csv
            .lines()
            .filter(|line| line.contains(&id))
            .map(|line| line.split(',').nth(4).unwrap().parse::<i64>().unwrap())
            .sum();
        assert_eq!(
            credits,
            per_key["data"]["summary"]["total_credits"]
                .as_i64()
                .unwrap(),
            "{id}: {csv}"
        );
    }

    // Bad input is a 400 page with a message, never a 5xx.
    for path in [
        "/usage?from=2026-13-45",
        "/usage?to=yesterday",
        "/usage?from=2026-11-29&to=2026-11-01",
        "/usage?group=<script>",
        "/usage.csv?from=nope",
    ] {
        let (status, html) = browser.page(path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
        assert!(!html.contains("<script>"), "{path}: {html}");
    }
    let (status, html) = browser.page("/usage?from=2026-13-45").await;
    assert_eq!(status, 400);
    assert!(html.contains("From must be a date like"), "{html}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_list_filters_by_tool_and_status_and_pages_by_keyset() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    // 70 image jobs and 5 failed video jobs, one second apart.
    app.sql(&format!(
        "INSERT INTO jobs (id, org_id, api_key_id, tool, status, model, model_tier, input_params,
             estimated_credits, created_at)
         SELECT gen_random_uuid(), '{org}', (SELECT id FROM api_keys WHERE org_id = '{org}' LIMIT 1),
                CASE WHEN g <= 70 THEN 'image' ELSE 'video' END,
                CASE WHEN g <= 70 THEN 'completed' ELSE 'failed' END,
                'local/procedural-v1', 'standard', '{{}}', 4,
                now() - make_interval(secs => g)
           FROM generate_series(1, 75) AS g",
        org = app.org_id
    ))
    .await;
    let (browser, _) = app.signed_in("viewer").await;
    let (status, html) = browser.page("/jobs").await;
    assert_eq!(status, 200);
    assert!(html.contains("<label for=\"tool\">Tool</label>"));
    assert!(html.contains("<label for=\"status\">Status</label>"));
    for column in [
        "Tool",
        "Status",
        "Model",
        "Created",
        "Queue wait",
        "Run time",
        "Credits",
    ] {
        assert!(html.contains(&format!(">{column}</th>")), "{column}");
    }
    let first = job_ids(&html);
    assert_eq!(first.len(), 50);
    let next = links(&html, "before=").pop().expect("a next page link");
    let (_, html) = browser.page(next.trim_start_matches("/dashboard")).await;
    let second = job_ids(&html);
    assert_eq!(second.len(), 25, "{next}");
    assert!(second.iter().all(|id| !first.contains(id)), "pages overlap");
    assert!(links(&html, "before=").is_empty(), "no third page");

    let (_, html) = browser.page("/jobs?tool=video&status=failed").await;
    assert_eq!(job_ids(&html).len(), 5);
    assert!(html.contains("<option value=\"video\" selected>"));
    assert!(html.contains("<option value=\"failed\" selected>"));
    let (_, html) = browser.page("/jobs?tool=image&status=failed").await;
    assert!(job_ids(&html).is_empty());
    // The filters stay in the next page's URL.
    let (_, html) = browser.page("/jobs?tool=image").await;
    let next = links(&html, "before=").pop().unwrap();
    assert!(next.contains("tool=image"), "{next}");

    for path in [
        "/jobs?tool=laser",
        "/jobs?status=done",
        "/jobs?before=garbage",
    ] {
        let (status, _) = browser.page(path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_pages_preview_an_image_and_a_speech_output_on_signed_urls() {
    let app = TestApp::spawn().await;
    let image = app
        .submit_image_async(&json!({"prompt": "a lighthouse"}))
        .await;
    let response = app
        .post_json(
            "/api/v1/audio/speech?async=true",
            &app.key,
            &json!({"input": "hello from the dashboard", "voice": "alloy", "response_format": "wav"}),
        )
        .await;
    assert_eq!(response.status(), 202);
    let speech: Value = response.json().await.unwrap();
    let speech = speech["id"].as_str().unwrap().to_owned();
    for id in [&image, &speech] {
        let job = app.wait_for_job(id, Duration::from_secs(60)).await;
        assert_eq!(job["status"], "completed", "{job}");
    }
    let (browser, _) = app.signed_in("viewer").await;

    let (status, html) = browser.page(&format!("/jobs/{image}")).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("id=\"job-status\""));
    assert!(html.contains(">completed</span>"));
    assert!(!html.contains("Cancel job"), "a viewer sees no cancel");
    let src = src_of(&html, "img").expect("an <img> output");
    assert!(src.contains("sig="), "{src}");
    let file = app.download(&src).await;
    assert_eq!(file.status(), 200);
    assert_eq!(file.headers()["content-type"], "image/png");
    let bytes = file.bytes().await.unwrap();
    let decoded = image::load_from_memory(&bytes).unwrap();
    assert!(decoded.width() > 0);

    let (status, html) = browser.page(&format!("/jobs/{speech}")).await;
    assert_eq!(status, 200);
    assert!(html.contains("<audio controls"), "{html}");
    let src = src_of(&html, "audio").expect("an <audio> output");
    let file = app.download(&src).await;
    assert_eq!(file.status(), 200);
    let kind = file.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(kind.starts_with("audio/"), "{kind}");

    // The live status stream: the current state, then the end (terminal).
    let events = browser.get(&format!("/jobs/{image}/events")).await;
    assert_eq!(events.status(), 200);
    assert!(
        events.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let body = tokio::time::timeout(Duration::from_secs(10), events.text())
        .await
        .expect("a terminal job's stream ends")
        .unwrap();
    assert!(body.contains("\"status\":\"completed\""), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_job_cancels_a_pending_job_for_members_only_and_needs_the_csrf_token() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let id = app
        .submit_image_async(&json!({"prompt": "never rendered"}))
        .await;
    let (viewer, _) = app.signed_in("viewer").await;
    let (_, html) = viewer.page(&format!("/jobs/{id}")).await;
    assert!(!html.contains("Cancel job"));
    let refused = viewer
        .post(&format!("/jobs/{id}/cancel"), &format!("/jobs/{id}"), &[])
        .await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);

    let (member, _) = app.signed_in("member").await;
    let (_, html) = member.page(&format!("/jobs/{id}")).await;
    assert!(html.contains(">Cancel job</button>"), "{html}");
    // Without the token, or with another session's: 403, nothing changes.
    let forged = member.post_raw(&format!("/jobs/{id}/cancel"), &[]).await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let (_, viewer_page) = viewer.page("/jobs").await;
    let other_token = unigen_tests::dashboard::csrf_token(&viewer_page).unwrap();
    let forged = member
        .post_raw(
            &format!("/jobs/{id}/cancel"),
            &[("csrf_token", &other_token)],
        )
        .await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert_eq!(app.job(&id).await["status"], "pending");

    let done = member
        .post(&format!("/jobs/{id}/cancel"), &format!("/jobs/{id}"), &[])
        .await;
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&done), format!("/dashboard/jobs/{id}"));
    assert_eq!(app.job(&id).await["status"], "cancelled");
    // Cancelled: nothing to cancel any more, said on a 400 page.
    let again = member
        .post(&format!("/jobs/{id}/cancel"), "/jobs", &[])
        .await;
    assert_eq!(again.status(), StatusCode::BAD_REQUEST);
    assert!(again.text().await.unwrap().contains("already cancelled"));
}

async fn create_webhook(app: &TestApp, url: &str) -> (String, String) {
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/webhooks",
            &app.key,
            &json!({"name": "receiver", "url": url, "events": ["generation.completed"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    (
        body["id"].as_str().unwrap().to_owned(),
        body["secret"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_webhook_is_re_enabled_then_tested_redelivered_and_replayed_to_a_local_receiver()
{
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let server = receiver(0, 200).await;
    let (id, _) = create_webhook(&app, &format!("{}/hook", server.uri())).await;
    app.sql(&format!(
        "UPDATE webhooks SET enabled = false, consecutive_failures = 10, disabled_at = now(),
                disabled_reason = '10 consecutive failed deliveries' WHERE id = '{id}'"
    ))
    .await;
    let (owner, _) = app.signed_in("owner").await;
    let (status, html) = owner.page("/webhooks").await;
    assert_eq!(status, 200);
    assert!(html.contains(">Disabled</span>"), "{html}");
    assert!(html.contains("10 consecutive failed deliveries"));
    assert!(html.contains(">Re-enable</button>"));

    // A member sees no controls and is refused all the same.
    let (member, _) = app.signed_in("member").await;
    let (_, html) = member.page("/webhooks").await;
    assert!(!html.contains("Re-enable</button>") && !html.contains("Create webhook"));
    let refused = member
        .post(&format!("/webhooks/{id}/enable"), "/webhooks", &[])
        .await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let forged = owner.post_raw(&format!("/webhooks/{id}/enable"), &[]).await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);

    let enabled = owner
        .post(&format!("/webhooks/{id}/enable"), "/webhooks", &[])
        .await;
    assert_eq!(enabled.status(), StatusCode::SEE_OTHER);
    let (_, webhook) = json_of(app.get(&format!("/api/v1/webhooks/{id}"), &app.key).await).await;
    assert_eq!(webhook["enabled"], true);
    assert_eq!(webhook["consecutive_failures"], 0);

    // Send test event: it reaches the receiver.
    let sent = owner
        .post(
            &format!("/webhooks/{id}/test"),
            &format!("/webhooks/{id}"),
            &[],
        )
        .await;
    assert_eq!(sent.status(), StatusCode::SEE_OTHER);
    let first = requests_of(&server, 1).await;
    let event_id = first[0].headers["webhook-id"].to_str().unwrap().to_owned();

    // The webhook's page shows the delivery with its attempt's signed headers.
    let delivery = wait_for_attempts(&app, &id, 1).await;
    let (_, html) = owner.page(&format!("/webhooks/{id}")).await;
    assert!(html.contains("webhook.test"), "{html}");
    assert!(html.contains("webhook-signature"), "{html}");
    assert!(html.contains(&event_id));

    // Redeliver: the same event reaches the receiver again.
    let redelivered = owner
        .post(
            &format!("/webhooks/{id}/deliveries/{delivery}/redeliver"),
            &format!("/webhooks/{id}"),
            &[],
        )
        .await;
    assert_eq!(redelivered.status(), StatusCode::SEE_OTHER);
    let both = requests_of(&server, 2).await;
    assert_eq!(both[1].headers["webhook-id"].to_str().unwrap(), event_id);
    wait_for_attempts(&app, &id, 2).await;

    // Replay failed: first how many, then sent on confirmation.
    app.sql(&format!(
        "UPDATE webhook_deliveries SET status = 'failed', completed_at = now() WHERE id = '{delivery}'"
    ))
    .await;
    let since = (Utc::now() - chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    let asked = owner
        .post(
            &format!("/webhooks/{id}/replay"),
            &format!("/webhooks/{id}"),
            &[("since", &since)],
        )
        .await;
    assert_eq!(asked.status(), 200);
    let html = asked.text().await.unwrap();
    assert_eq!(
        element_text(&html, "replay-count").as_deref(),
        Some("1"),
        "{html}"
    );
    assert_eq!(
        requests_of(&server, 2).await.len(),
        2,
        "nothing sent before confirming"
    );
    let replayed = owner
        .post(
            &format!("/webhooks/{id}/replay"),
            &format!("/webhooks/{id}"),
            &[("since", &since), ("confirm", "yes")],
        )
        .await;
    assert_eq!(replayed.status(), StatusCode::SEE_OTHER);
    let all = requests_of(&server, 3).await;
    assert_eq!(all[2].headers["webhook-id"].to_str().unwrap(), event_id);

    // Bad input: a 400 with a message.
    let bad = owner
        .post(
            &format!("/webhooks/{id}/replay"),
            &format!("/webhooks/{id}"),
            &[("since", "last week")],
        )
        .await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert!(bad.text().await.unwrap().contains("Since must be"));
}

/// The id of the webhook's only delivery once it has `n` attempts recorded.
async fn wait_for_attempts(app: &TestApp, webhook: &str, n: i64) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, body) = json_of(
            app.get(&format!("/api/v1/webhooks/{webhook}/deliveries"), &app.key)
                .await,
        )
        .await;
        if let Some(d) = body["deliveries"].as_array().and_then(|l| l.first())
            && d["attempts"].as_array().map_or(0, Vec::len) as i64 >= n
            && d["status"] != "pending"
        {
            return d["id"].as_str().unwrap().to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no attempt {n}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_organizations_jobs_and_webhooks_are_404_pages_and_other_pages_render() {
    let app =
        TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await;
    let other = app.create_org("other", "pro").await;
    let other_key = app.create_key(other, &["all"], None).await;
    let response = app
        .post_json(
            "/api/v1/images/generations?async=true",
            &other_key,
            &json!({"prompt": "theirs"}),
        )
        .await;
    assert_eq!(response.status(), 202);
    let job: Value = response.json().await.unwrap();
    let job = job["id"].as_str().unwrap().to_owned();
    let (status, hook) = json_of(
        app.post_json(
            "/api/v1/webhooks",
            &other_key,
            &json!({"name": "theirs", "url": "https://example.com/h", "events": ["generation.completed"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{hook}");
    let hook = hook["id"].as_str().unwrap().to_owned();

    let (owner, _) = app.signed_in("owner").await;
    for path in [
        format!("/jobs/{job}"),
        format!("/jobs/{job}/events"),
        format!("/webhooks/{hook}"),
        "/jobs/not-a-uuid".to_owned(),
        "/webhooks/00000000-0000-0000-0000-000000000000".to_owned(),
    ] {
        let (status, html) = owner.page(&path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(html.contains("Not found"), "{path}");
    }
    for (path, form) in [
        (format!("/jobs/{job}/cancel"), vec![]),
        (format!("/webhooks/{hook}/enable"), vec![]),
        (format!("/webhooks/{hook}/test"), vec![]),
    ] {
        let response = owner.post(&path, "/jobs", &form).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
    }
    assert_eq!(
        json_of(app.get(&format!("/api/v1/jobs/{job}"), &other_key).await)
            .await
            .1["status"],
        "pending"
    );

    // The pages without objects of their own render for every role.
    for role in ["viewer", "admin"] {
        let (browser, _) = app.signed_in(role).await;
        for path in ["/usage", "/jobs", "/webhooks", "/credits", "/models"] {
            let (status, html) = browser.page(path).await;
            assert_eq!(status, 200, "{role} {path}: {html}");
            assert!(html.contains("<nav aria-label=\"Main\">"));
        }
        let (_, html) = browser.page("/models").await;
        assert!(html.contains("local/procedural-v1"));
        assert!(html.contains("credits /"));
        let (_, html) = browser.page("/credits").await;
        assert_eq!(
            html.contains("Save overage settings"),
            role == "admin",
            "{role}: overage settings are read-only for a viewer"
        );
    }
}
