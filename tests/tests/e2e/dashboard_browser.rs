//! The dashboard in a real browser: Debian's headless Chromium, driven over
//! the DevTools protocol by tests/browser/dashboard.mjs (playwright-core,
//! axe-core). This test starts the stack, makes what the script needs (team
//! members, an image and a speech job, a disabled webhook with a delivery,
//! another organization's job) and runs it. With UNIGEN_SCREENSHOTS set to a
//! folder the script also saves every page there, light and dark.

use std::process::Stdio;
use std::time::Duration;

use chrono::{Days, Utc};
use serde_json::{Value, json};
use unigen_tests::dashboard::PASSWORD;
use unigen_tests::{TestApp, json_of};

use crate::clients::root;
use crate::webhooks::{create_webhook, receiver, requests_of};

/// Submits an async job and waits for it to complete; its id.
async fn completed_job(app: &TestApp, key: &str, path: &str, body: Value) -> String {
    let (status, job) = json_of(app.post_json(path, key, &body).await).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().expect("a job id").to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (status, done) =
            json_of(app.get(&format!("/api/v1/jobs/{id}?poll=true"), key).await).await;
        assert_eq!(status, 200, "{done}");
        match done["status"].as_str() {
            Some("completed") => return id,
            Some("pending" | "processing") => {}
            _ => panic!("job {id} did not complete: {done}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "job {id}: {done}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_works_in_a_real_browser_for_each_role_with_no_accessibility_violations() {
    let modules = root().join("tests/browser/node_modules/playwright-core");
    assert!(
        modules.is_dir(),
        "{} is missing: scripts/test (ensure_browser) runs npm ci in tests/browser",
        modules.display()
    );
    let app = TestApp::spawn().await;

    // A receiver for the webhook; the webhook sees the jobs' completions.
    let server = receiver(0, 200).await;
    let (status, hook) = create_webhook(
        &app,
        &app.key,
        json!({"name": "browser receiver", "url": format!("{}/hook", server.uri()),
               "events": ["generation.completed"]}),
    )
    .await;
    assert_eq!(status, 201, "{hook}");
    let webhook = hook["id"].as_str().unwrap().to_owned();

    let image = completed_job(
        &app,
        &app.key,
        "/api/v1/images/generations?async=true",
        json!({"prompt": "a lighthouse at dusk", "size": "512x512"}),
    )
    .await;
    let speech = completed_job(
        &app,
        &app.key,
        "/api/v1/audio/speech?async=true",
        json!({"input": "hello from the dashboard", "voice": "alloy", "response_format": "wav"}),
    )
    .await;
    requests_of(&server, 2).await;
    // Then disabled by failures, as the scheduler would have left it.
    app.sql(&format!(
        "UPDATE webhooks SET enabled = false, consecutive_failures = 10, disabled_at = now(),
                disabled_reason = '10 consecutive failed deliveries' WHERE id = '{webhook}'"
    ))
    .await;

    let other_org = app.create_org("elsewhere", "free").await;
    let other_key = app.create_key(other_org, &["all"], None).await;
    let foreign = completed_job(
        &app,
        &other_key,
        "/api/v1/images/generations?async=true",
        json!({"prompt": "not yours", "size": "512x512"}),
    )
    .await;

    let owner = app.add_member(app.org_id, "owner").await;
    let viewer = app.add_member(app.org_id, "viewer").await;
    let locked = app.add_member(app.org_id, "member").await;
    let today = Utc::now().date_naive();
    let config = json!({
        "base": app.base_url,
        "apiKey": app.key,
        "owner": {"email": owner, "password": PASSWORD},
        "viewer": {"email": viewer, "password": PASSWORD},
        "locked": {"email": locked, "password": PASSWORD},
        "imageJob": image,
        "speechJob": speech,
        "foreignJob": foreign,
        "webhook": {"id": webhook, "name": "browser receiver"},
        "usage": {"from": (today - Days::new(1)).to_string(), "to": today.to_string()},
    });

    let mut command = tokio::process::Command::new("node");
    command
        .arg(root().join("tests/browser/dashboard.mjs"))
        .current_dir(root().join("tests/browser"))
        .env("UNIGEN_BROWSER", config.to_string())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(240), command.output())
        .await
        .expect("the browser checks finish within 4 minutes")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "browser checks failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("dashboard browser checks passed"),
        "{stdout}"
    );

    // The redelivery the browser asked for reached the receiver.
    requests_of(&server, 3).await;
}
