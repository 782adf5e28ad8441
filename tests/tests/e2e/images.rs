use std::time::Duration;

use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, json_of};

async fn decode_png(app: &TestApp, url: &str) -> image::DynamicImage {
    let response = app.download(url).await;
    assert_eq!(response.status(), 200, "{url}");
    assert_eq!(response.headers()["content-type"], "image/png");
    let bytes = response.bytes().await.unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG magic");
    image::load_from_memory_with_format(&bytes, image::ImageFormat::Png).expect("a decodable PNG")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_generation_answers_with_pngs_of_the_requested_size() {
    let app = TestApp::spawn().await;
    let response = app
        .post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "a lighthouse at dusk", "size": "1792x1024", "n": 2, "style": "natural"}),
        )
        .await;
    let (status, body) = json_of(response).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "local/procedural-v1");
    assert_eq!(body["model_tier"], "fast");
    assert!(body["created"].as_i64().unwrap() > 0);
    assert_eq!(body["usage"]["credits_used"], 2);
    assert_eq!(body["usage"]["generations_used"], 2);
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    let mut images = Vec::new();
    for item in data {
        assert_eq!(
            (item["width"].as_u64(), item["height"].as_u64()),
            (Some(1792), Some(1024))
        );
        assert_eq!(item["revised_prompt"], "a lighthouse at dusk");
        let png = decode_png(&app, item["url"].as_str().unwrap()).await;
        assert_eq!((png.width(), png.height()), (1792, 1024));
        images.push(png.into_rgb8().into_raw());
    }
    assert_ne!(images[0], images[1], "the n images of one request differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upscale_multiplies_the_output_size() {
    let app = TestApp::spawn().await;
    let body = json!({"prompt": "tiny", "size": "512x512", "upscale": "2x"});
    let (status, body) = json_of(
        app.post_json("/api/v1/images/generations", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let png = decode_png(&app, body["data"][0]["url"].as_str().unwrap()).await;
    assert_eq!((png.width(), png.height()), (1024, 1024));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_and_prompt_give_the_same_image_and_other_seeds_differ() {
    let app = TestApp::spawn().await;
    let mut pixels = Vec::new();
    for seed in [7, 7, 8] {
        let body = json!({"prompt": "a forest at night", "size": "512x512", "seed": seed});
        let (status, body) = json_of(
            app.post_json("/api/v1/images/generations", &app.key, &body)
                .await,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        pixels.push(
            decode_png(&app, body["data"][0]["url"].as_str().unwrap())
                .await
                .into_rgb8()
                .into_raw(),
        );
    }
    assert_eq!(pixels[0], pixels[1]);
    assert_ne!(pixels[0], pixels[2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_generation_answers_at_once_and_the_job_completes() {
    let app = TestApp::spawn_with(
        TestOptions::default().configure(|s| s.local_provider.latency_ms = 300),
    )
    .await;
    let response = app
        .post_json(
            "/api/v1/images/generations?async=true",
            &app.key,
            &json!({"prompt": "a red fox", "n": 3}),
        )
        .await;
    let (status, created) = json_of(response).await;
    assert_eq!(status, 202, "{created}");
    assert_eq!(created["status"], "pending");
    assert_eq!(created["model"], "local/procedural-v1");
    assert_eq!(created["estimated_credits"], 3);
    assert!(created["created"].as_i64().unwrap() > 0);
    let id = created["id"].as_str().unwrap();

    let job = app.wait_for_job(id, Duration::from_secs(30)).await;
    assert_eq!(job["status"], "completed", "{job}");
    assert_eq!(job["progress"], 100);
    assert_eq!(job["actualCredits"], 3);
    assert_eq!(job["inputParams"]["prompt"], "a red fox");
    assert!(
        job["inputParams"]["seed"].is_u64(),
        "a random seed is recorded: {job}"
    );
    let images = job["outputData"]["images"].as_array().unwrap();
    assert_eq!(images.len(), 3);
    let png = decode_png(&app, images[2]["url"].as_str().unwrap()).await;
    assert_eq!((png.width(), png.height()), (1024, 1024));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_request_that_outlives_its_wait_limit_answers_202_with_the_job() {
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        s.jobs.sync_wait_seconds = 1;
        s.local_provider.latency_ms = 3_000;
    }))
    .await;
    let (status, job) = json_of(
        app.post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "slow"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 202, "{job}");
    assert!(
        matches!(job["status"].as_str(), Some("pending" | "processing")),
        "{job}"
    );
    let finished = app
        .wait_for_job(job["id"].as_str().unwrap(), Duration::from_secs(30))
        .await;
    assert_eq!(finished["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_provider_fails_the_job_and_the_sync_request_with_the_reason() {
    let app = TestApp::spawn_with(
        TestOptions::default().configure(|s| s.local_provider.failure_rate = 1.0),
    )
    .await;
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "doomed"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["code"], "generation_failed");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("injected failure"),
        "{body}"
    );
    let (_, list) = json_of(app.get("/api/v1/jobs", &app.key).await).await;
    let job = &list["jobs"][0];
    assert_eq!(job["status"], "failed");
    assert_eq!(job["actualCredits"], 0);
    assert!(
        job["errorMessage"]
            .as_str()
            .unwrap()
            .contains("injected failure")
    );
    assert!(job["outputData"].is_null());
}

/// Every invalid field is a 400 naming the field, and creates no job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_image_requests_are_rejected_with_the_field_named_and_change_nothing() {
    let app = TestApp::spawn().await;
    let long = "x".repeat(4001);
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({}), "prompt", "prompt is required"),
        (
            json!({"prompt": "   "}),
            "prompt",
            "prompt must not be empty",
        ),
        (
            json!({"prompt": long}),
            "prompt",
            "prompt must be at most 4000 characters",
        ),
        (
            json!({"prompt": "x", "n": 0}),
            "n",
            "n must be between 1 and 10",
        ),
        (
            json!({"prompt": "x", "n": 11}),
            "n",
            "n must be between 1 and 10",
        ),
        (
            json!({"prompt": "x", "size": "100x100"}),
            "size",
            "size must be one of: 512x512, 1024x1024, 1792x1024, 1024x1792, 1536x1024, 1024x1536",
        ),
        (
            json!({"prompt": "x", "style": "cubist"}),
            "style",
            "style must be one of: vivid, natural",
        ),
        (
            json!({"prompt": "x", "upscale": "3x"}),
            "upscale",
            "upscale must be one of: 2x, 4x",
        ),
        (
            json!({"prompt": "x", "model": "acme/unknown"}),
            "model",
            "model `acme/unknown` is not an available text to image model; GET /api/v1/models lists them",
        ),
    ];
    for (body, field, message) in cases {
        let (status, error) = json_of(
            app.post_json("/api/v1/images/generations", &app.key, &body)
                .await,
        )
        .await;
        assert_eq!(status, 400, "{body} -> {error}");
        assert_eq!(error["error"]["param"], field, "{body}");
        assert_eq!(error["error"]["message"], message, "{body}");
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert_eq!(error["error"]["code"], "invalid_request");
    }
    // Type errors and malformed JSON name the field or say what is wrong.
    for (body, starts) in [
        (
            r#"{"prompt": "x", "seed": -1}"#,
            "seed must be a non-negative integer, got -1",
        ),
        (
            r#"{"prompt": "x", "n": "two"}"#,
            "n must be a non-negative integer, got a string",
        ),
        (r#"{"prompt": 5}"#, "prompt must be a string, got 5"),
        (r#"{"prompt": "x""#, "request body is not valid JSON"),
        ("", "request body must be a JSON object"),
    ] {
        let response = app
            .client
            .post(app.url("/api/v1/images/generations"))
            .bearer_auth(&app.key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let (status, error) = json_of(response).await;
        assert_eq!(status, 400, "{body}");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(starts),
            "{body} -> {error}"
        );
        // A type error names its field in `param`.
        if let Some((field, _)) = starts
            .split_once(" must be ")
            .filter(|(field, _)| !field.contains(' '))
        {
            assert_eq!(error["error"]["param"], field, "{body}");
        }
    }
    let response = app
        .post_json(
            "/api/v1/images/generations?async=maybe",
            &app.key,
            &json!({"prompt": "x"}),
        )
        .await;
    let (status, error) = json_of(response).await;
    assert_eq!(status, 400);
    assert_eq!(
        error["error"]["message"],
        "async must be true or false, got `maybe`"
    );
    assert_eq!(app.count_jobs().await, 0, "no job was created");
}
