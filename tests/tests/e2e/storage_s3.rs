//! Object storage: outputs kept in an S3-compatible bucket (a real `s3s-fs`
//! server, each test with its own bucket) are listed there, served by
//! `/files` with `ETag` and byte ranges or through presigned URLs, and
//! deleted by retention; the local backend serves ranges and tags too.

use std::time::{Duration, Instant};

use serde_json::json;
use unigen_core::storage::{UrlSigner, build_store};
use unigen_tests::{S3Server, TestApp, TestOptions};

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header: {response:?}"))
        .to_str()
        .unwrap()
}

/// A stack whose files go to `bucket` on `server`.
async fn s3_app(
    server: &S3Server,
    bucket: &str,
    configure: impl FnOnce(&mut unigen_core::config::Settings) + Send + 'static,
) -> TestApp {
    let s3 = server.settings(bucket);
    TestApp::spawn_with(TestOptions::default().configure(move |s| {
        s.storage.backend = "s3".into();
        s.storage.s3 = s3;
        configure(s);
    }))
    .await
}

/// Runs an image job and returns (job id, the output's storage key, its URL).
async fn image_output(app: &TestApp) -> (String, String, String) {
    let id = app
        .submit_image_async(&json!({"prompt": "a lighthouse", "size": "512x512"}))
        .await;
    let job = app.wait_for_job(&id, Duration::from_secs(60)).await;
    assert_eq!(job["status"], "completed", "{job}");
    let url = job["outputData"]["images"][0]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("no output URL: {job}"))
        .to_owned();
    let key = url
        .split_once("/files/")
        .and_then(|(_, rest)| rest.split_once('?'))
        .map(|(key, _)| key.to_owned())
        .unwrap();
    (id, key, url)
}

async fn get_with(app: &TestApp, url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = app.client.get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("GET")
}

/// Full body with an ETag, one range (bounded, open, suffix), 416 past the
/// end, 304 for the same tag, 200 again for `If-Range` with another tag.
async fn assert_served_with_ranges_and_tags(app: &TestApp, url: &str, bytes: &[u8]) {
    let size = bytes.len();
    assert!(size > 100, "a file worth ranging over: {size} bytes");

    let full = get_with(app, url, &[]).await;
    assert_eq!(full.status(), 200);
    assert_eq!(header(&full, "accept-ranges"), "bytes");
    assert_eq!(header(&full, "x-content-type-options"), "nosniff");
    assert!(header(&full, "content-security-policy").contains("sandbox"));
    assert!(header(&full, "content-disposition").starts_with("inline; filename="));
    assert_eq!(header(&full, "content-length"), size.to_string());
    let e_tag = header(&full, "etag").to_owned();
    assert!(
        e_tag.len() > 2 && e_tag.starts_with('"') && e_tag.ends_with('"'),
        "{e_tag}"
    );
    assert_eq!(full.bytes().await.unwrap(), bytes);

    let cases = [
        ("bytes=10-99", 10..100),
        (&format!("bytes={}-", size - 7) as &str, size - 7..size),
        ("bytes=-16", size - 16..size),
        (&format!("bytes=5-{}", size + 1000) as &str, 5..size),
    ];
    for (range, expected) in cases {
        let part = get_with(app, url, &[("range", range)]).await;
        assert_eq!(part.status(), 206, "{range}");
        assert_eq!(
            header(&part, "content-range"),
            format!("bytes {}-{}/{size}", expected.start, expected.end - 1),
            "{range}"
        );
        assert_eq!(header(&part, "etag"), e_tag);
        assert_eq!(
            header(&part, "content-length"),
            expected.len().to_string(),
            "{range}"
        );
        assert_eq!(part.bytes().await.unwrap(), &bytes[expected], "{range}");
    }

    let past = get_with(app, url, &[("range", &format!("bytes={size}-"))]).await;
    assert_eq!(past.status(), 416);
    assert_eq!(header(&past, "content-range"), format!("bytes */{size}"));

    let same = get_with(app, url, &[("if-none-match", &e_tag)]).await;
    assert_eq!(same.status(), 304);
    assert_eq!(header(&same, "etag"), e_tag);
    assert!(same.bytes().await.unwrap().is_empty());
    let other = get_with(app, url, &[("if-none-match", "\"not-it\"")]).await;
    assert_eq!(other.status(), 200);

    let stale = get_with(app, url, &[("range", "bytes=0-9"), ("if-range", "\"old\"")]).await;
    assert_eq!(
        stale.status(),
        200,
        "If-Range with another tag: the whole file"
    );
    assert_eq!(stale.bytes().await.unwrap(), bytes);
    let several = get_with(app, url, &[("range", "bytes=0-1,5-6")]).await;
    assert_eq!(several.status(), 200, "several ranges: the whole file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_outputs_are_in_the_bucket_and_served_with_ranges_and_etags() {
    let Some(server) = S3Server::start().await else {
        return;
    };
    let bucket = server.create_bucket().await;
    let app = s3_app(&server, &bucket, |_| {}).await;
    let (id, key, url) = image_output(&app).await;

    let listed = server.list(&bucket).await;
    assert!(listed.contains(&key), "{key} not in {listed:?}");
    assert!(key.starts_with(&format!("{}/{id}/", app.org_id)), "{key}");
    assert!(
        !app.settings.storage.dir.exists(),
        "nothing on local disk: {}",
        app.settings.storage.dir.display()
    );
    let stored = server.get(&bucket, &key).await;
    assert!(stored.starts_with(b"\x89PNG"), "a PNG in the bucket");
    assert_served_with_ranges_and_tags(&app, &url, &stored).await;

    let forged = url.replace("sig=", "sig=00");
    assert_eq!(get_with(&app, &forged, &[]).await.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_files_redirect_to_presigned_urls_when_configured() {
    let Some(server) = S3Server::start().await else {
        return;
    };
    let bucket = server.create_bucket().await;
    let app = s3_app(&server, &bucket, |s| {
        s.storage.s3.presign_seconds = Some(120)
    })
    .await;
    let (_, key, url) = image_output(&app).await;

    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = client.get(&url).send().await.unwrap();
    assert!(
        matches!(response.status().as_u16(), 302 | 307),
        "{}",
        response.status()
    );
    let location = header(&response, "location").to_owned();
    assert!(
        location.starts_with(&format!("{}/{bucket}/{key}?", server.endpoint)),
        "{location}"
    );
    assert!(location.contains("X-Amz-Signature="), "{location}");
    let downloaded = client.get(&location).send().await.unwrap();
    assert_eq!(downloaded.status(), 200, "s3s serves the presigned URL");
    let bytes = downloaded.bytes().await.unwrap();
    assert_eq!(bytes, server.get(&bucket, &key).await);
    let ranged = client
        .get(&location)
        .header("range", "bytes=0-7")
        .send()
        .await
        .unwrap();
    assert_eq!(
        ranged.status(),
        206,
        "seeking works on the bucket's URL too"
    );
    assert_eq!(ranged.bytes().await.unwrap(), &bytes[..8]);

    let tampered = location.replace(&key, &format!("{key}x"));
    assert_eq!(client.get(&tampered).send().await.unwrap().status(), 403);
    let forged = url.replace("sig=", "sig=00");
    assert_eq!(client.get(&forged).send().await.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_outputs_from_the_bucket() {
    let Some(server) = S3Server::start().await else {
        return;
    };
    let bucket = server.create_bucket().await;
    let app = s3_app(&server, &bucket, |s| s.jobs.retention_seconds = 3).await;
    let (id, key, url) = image_output(&app).await;
    assert!(server.list(&bucket).await.contains(&key));
    // Another organization's file in the same bucket stays.
    let foreign = format!("{}/kept/0.png", uuid::Uuid::new_v4());
    build_store(&app.settings.storage)
        .expect("the test store")
        .put(&foreign, b"not this job's".to_vec())
        .await
        .unwrap();

    let started = Instant::now();
    while app
        .get(&format!("/api/v1/jobs/{id}"), &app.key)
        .await
        .status()
        != 404
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the job was never deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let listed = server.list(&bucket).await;
    assert_eq!(listed, [foreign], "only the job's objects are gone");
    assert_eq!(get_with(&app, &url, &[]).await.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_files_are_served_with_ranges_and_etags() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    assert_eq!(app.settings.storage.backend, "local");
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 251) as u8).collect();
    let key = "t/clip.mp4";
    build_store(&app.settings.storage)
        .expect("the test store")
        .put(key, bytes.clone())
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(app.settings.storage.dir.join(key)).unwrap(),
        bytes,
        "the on-disk layout is <dir>/<key>"
    );
    let url = UrlSigner::new(
        &app.settings.storage.url_secret,
        &app.base_url,
        Duration::from_secs(600),
    )
    .sign_url(key, chrono::Utc::now().timestamp());
    assert_served_with_ranges_and_tags(&app, &url, &bytes).await;
    let tag = header(&get_with(&app, &url, &[]).await, "etag").to_owned();
    assert_eq!(
        header(&get_with(&app, &url, &[]).await, "etag"),
        tag,
        "stable while the file is"
    );
}
