//! `/files/...`: how stored outputs are served (nothing in them may run on
//! the API's origin), and the key their links are signed with.

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use unigen_core::config::{DEFAULT_URL_SECRET, Settings};
use unigen_core::storage::{UrlSigner, build_store};
use unigen_tests::{TestApp, TestOptions, json_of};

/// Stores `bytes` under `key` and returns a signed link to it.
async fn stored(app: &TestApp, key: &str, bytes: &[u8]) -> String {
    build_store(&app.settings.storage)
        .expect("the test store")
        .put(key, bytes.to_vec())
        .await
        .unwrap();
    UrlSigner::new(
        &app.settings.storage.url_secret,
        &app.base_url,
        Duration::from_secs(600),
    )
    .sign_url(key, chrono::Utc::now().timestamp())
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_served_with_nosniff_a_sandboxing_policy_and_a_disposition() {
    let app = TestApp::spawn().await;
    // (key, content type, disposition, sandboxed)
    let cases = [
        (
            "t/pic.png",
            "image/png",
            "inline; filename=\"pic.png\"",
            true,
        ),
        (
            "t/clip.mp4",
            "video/mp4",
            "inline; filename=\"clip.mp4\"",
            true,
        ),
        (
            "t/song.mp3",
            "audio/mpeg",
            "inline; filename=\"song.mp3\"",
            true,
        ),
        (
            "t/report.pdf",
            "application/pdf",
            "inline; filename=\"report.pdf\"",
            false,
        ),
        (
            "t/page.html",
            "text/html",
            "attachment; filename=\"page.html\"",
            true,
        ),
        (
            "t/logo.svg",
            "image/svg+xml",
            "attachment; filename=\"logo.svg\"",
            true,
        ),
        (
            "t/notes.txt",
            "text/plain",
            "attachment; filename=\"notes.txt\"",
            true,
        ),
        (
            "t/x/report-2.docx",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "attachment; filename=\"report-2.docx\"",
            true,
        ),
    ];
    for (key, content_type, disposition, sandboxed) in cases {
        let url = stored(&app, key, b"<script>alert(1)</script>").await;
        let response = app.download(&url).await;
        assert_eq!(response.status(), 200, "{key}");
        assert_eq!(header(&response, "content-type"), content_type, "{key}");
        assert_eq!(header(&response, "x-content-type-options"), "nosniff");
        assert_eq!(
            header(&response, "content-disposition"),
            disposition,
            "{key}"
        );
        let policy = header(&response, "content-security-policy");
        assert!(policy.starts_with("default-src 'none'"), "{key}: {policy}");
        assert!(!policy.contains("script-src"), "{key}: {policy}");
        assert_eq!(
            policy.split(';').any(|d| d.trim() == "sandbox"),
            sandboxed,
            "{key}: {policy}"
        );
        if content_type.starts_with("image/png")
            || content_type.starts_with("video/")
            || content_type.starts_with("audio/")
        {
            // The media document shows the file itself.
            assert!(
                policy.contains("img-src 'self'") && policy.contains("media-src 'self'"),
                "{policy}"
            );
        }
    }

    // A generated image's link, as clients get it.
    let (status, generated) = json_of(
        app.post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "served"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{generated}");
    let response = app
        .download(generated["data"][0]["url"].as_str().unwrap())
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "content-type"), "image/png");
    assert_eq!(header(&response, "x-content-type-options"), "nosniff");
    assert!(header(&response, "content-disposition").starts_with("inline; filename=\""));
}

/// Settings as the binaries load them, with the built-in URL secret.
fn default_secret_settings(dev_mode: bool) -> Settings {
    Settings::load_with(
        None,
        &[
            ("storage.url_secret", DEFAULT_URL_SECRET.into()),
            ("dev_mode", dev_mode.into()),
            ("http.port", 0.into()),
        ],
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_and_the_worker_refuse_the_default_url_secret_outside_dev_mode() {
    let refused = unigen_api::spawn(default_secret_settings(false), CancellationToken::new())
        .await
        .err()
        .expect("the API must not start with the default secret");
    let message = format!("{refused:#}");
    assert!(message.contains("storage.url_secret"), "{message}");
    assert!(message.contains("UNIGEN__STORAGE__URL_SECRET"), "{message}");
    assert!(message.contains("UNIGEN__DEV_MODE=true"), "{message}");

    let refused = unigen_worker::run(default_secret_settings(false), CancellationToken::new())
        .await
        .expect_err("the worker must not start with the default secret");
    assert!(
        format!("{refused:#}").contains("storage.url_secret"),
        "{refused:#}"
    );

    // In dev mode the whole stack starts with it and its links work.
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        s.storage.url_secret = DEFAULT_URL_SECRET.into();
        s.dev_mode = true;
    }))
    .await;
    assert_eq!(app.settings.storage.url_secret, DEFAULT_URL_SECRET);
    let (status, generated) = json_of(
        app.post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "dev"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{generated}");
    let url = generated["data"][0]["url"].as_str().unwrap();
    assert_eq!(app.download(url).await.status(), 200);
}
