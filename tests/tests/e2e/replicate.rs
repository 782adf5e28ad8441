//! Models on the `replicate` adapter, against a fake Replicate API speaking
//! its predictions wire format.

use std::time::Duration;

use serde_json::json;
use unigen_core::config::{ModelEntry, UpstreamSettings};
use unigen_tests::{TestApp, TestOptions, json_of};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::media::{assert_close, duration_of, fetch, probe};

fn tiny_mp4() -> Vec<u8> {
    let out = std::env::temp_dir().join(format!("unigen-fake-{}.mp4", uuid::Uuid::new_v4()));
    let status = std::process::Command::new("ffmpeg")
        .args([
            "-v",
            "error",
            "-f",
            "lavfi",
            "-i",
            "testsrc=size=320x240:rate=30",
            "-t",
            "1",
            "-pix_fmt",
            "yuv420p",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let bytes = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_file(out);
    bytes
}

fn video_model() -> ModelEntry {
    serde_json::from_value(json!({
        "id": "acme/motion", "category": "video", "tier": "premium", "adapter": "replicate",
        "upstream": "replicate", "upstream_model": "acme/motion", "owned_by": "acme",
        "capabilities": ["text_to_video"], "credits_per_unit": 3, "max_duration_seconds": 10
    }))
    .unwrap()
}

async fn app_with(server: &MockServer) -> TestApp {
    let url = server.uri();
    TestApp::spawn_with(TestOptions::default().configure(move |s| {
        let settings: UpstreamSettings = serde_json::from_value(
            json!({"base_url": format!("{url}/v1"), "api_key": "r8_secret", "timeout_seconds": 10}),
        )
        .unwrap();
        s.upstreams.insert("replicate".into(), settings);
        s.models.push(video_model());
    }))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_video_model_on_replicate_runs_a_prediction_and_stores_its_output() {
    let server = MockServer::start().await;
    let base = server.uri();
    Mock::given(method("POST"))
        .and(path("/v1/models/acme/motion/predictions"))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({
            "id": "p1", "status": "starting", "urls": {"get": format!("{base}/v1/predictions/p1"), "cancel": format!("{base}/v1/predictions/p1/cancel")}
        })))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/predictions/p1"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"id": "p1", "status": "processing"})),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/predictions/p1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "p1", "status": "succeeded", "output": format!("{base}/delivery/out.mp4")
        })))
        .with_priority(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/delivery/out.mp4"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(tiny_mp4()))
        .mount(&server)
        .await;
    let app = app_with(&server).await;
    let body = json!({"model": "acme/motion", "prompt": "a comet", "duration_seconds": 1});
    let (status, created) = json_of(
        app.post_json("/api/v1/videos/generations", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 202, "{created}");
    let job = app
        .wait_for_job(created["id"].as_str().unwrap(), Duration::from_secs(60))
        .await;
    assert_eq!(job["status"], "completed", "{job}");
    let mp4 = fetch(&app, job["outputData"]["video"]["url"].as_str().unwrap()).await;
    assert_close(duration_of(&probe(&mp4)), 1.0, 0.05, "the upstream's video");
    let create = &server.received_requests().await.unwrap()[0];
    assert_eq!(create.headers["authorization"], "Bearer r8_secret");
    let sent: serde_json::Value = serde_json::from_slice(&create.body).unwrap();
    assert_eq!(
        (
            sent["input"]["prompt"].as_str(),
            sent["input"]["duration"].as_f64()
        ),
        (Some("a comet"), Some(1.0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_job_cancels_its_replicate_prediction() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/models/acme/motion/predictions"))
        .respond_with(
            ResponseTemplate::new(201).set_body_json(json!({"id": "p2", "status": "starting"})),
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/predictions/p2"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"id": "p2", "status": "processing"})),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/predictions/p2/cancel"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"id": "p2", "status": "canceled"})),
        )
        .mount(&server)
        .await;
    let app = app_with(&server).await;
    let body = json!({"model": "acme/motion", "prompt": "forever", "duration_seconds": 2});
    let (_, created) = json_of(
        app.post_json("/api/v1/videos/generations", &app.key, &body)
            .await,
    )
    .await;
    let id = created["id"].as_str().unwrap();
    app.wait_for_status(id, "processing", Duration::from_secs(20))
        .await;
    // Let the prediction be created before cancelling.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while server.received_requests().await.unwrap().is_empty()
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        app.delete(&format!("/api/v1/jobs/{id}"), &app.key)
            .await
            .status(),
        200
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let cancelled = server
            .received_requests()
            .await
            .unwrap()
            .iter()
            .any(|r| r.url.path() == "/v1/predictions/p2/cancel");
        if cancelled {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the prediction was never cancelled upstream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(app.job(id).await["status"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_model_on_replicate_runs_one_prediction_per_image_and_stores_pngs() {
    let server = MockServer::start().await;
    let base = server.uri();
    Mock::given(method("POST"))
        .and(path("/v1/models/acme/painter/predictions"))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({
            "id": "img1", "status": "succeeded", "output": [format!("{base}/delivery/out.jpg")]
        })))
        .mount(&server)
        .await;
    // The model answers a JPEG; the stored output is a PNG of its size.
    let mut jpeg = std::io::Cursor::new(Vec::new());
    image::RgbImage::from_pixel(64, 48, image::Rgb([200, 40, 40]))
        .write_to(&mut jpeg, image::ImageFormat::Jpeg)
        .unwrap();
    Mock::given(method("GET"))
        .and(path("/delivery/out.jpg"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(jpeg.into_inner()))
        .mount(&server)
        .await;
    let url = server.uri();
    let app = TestApp::spawn_with(TestOptions::default().configure(move |s| {
        let settings: UpstreamSettings = serde_json::from_value(
            json!({"base_url": format!("{url}/v1"), "api_key": "r8_secret", "timeout_seconds": 10}),
        )
        .unwrap();
        s.upstreams.insert("replicate".into(), settings);
        s.models.push(
            serde_json::from_value(json!({
                "id": "acme/painter", "category": "image", "tier": "standard", "adapter": "replicate",
                "upstream": "replicate", "upstream_model": "acme/painter", "owned_by": "acme",
                "capabilities": ["text_to_image"], "credits_per_unit": 2
            }))
            .unwrap(),
        );
    }))
    .await;
    let id = app
        .submit_image_async(&json!({"model": "acme/painter", "prompt": "a fox", "n": 2, "seed": 7}))
        .await;
    let job = app.wait_for_job(&id, Duration::from_secs(60)).await;
    assert_eq!(job["status"], "completed", "{job}");
    let images = job["outputData"]["images"].as_array().unwrap();
    assert_eq!(images.len(), 2);
    for image in images {
        let png = fetch(&app, image["url"].as_str().unwrap()).await;
        assert_eq!(image::guess_format(&png).unwrap(), image::ImageFormat::Png);
        let decoded = image::load_from_memory(&png).unwrap();
        assert_eq!((decoded.width(), decoded.height()), (64, 48));
        assert_eq!(
            (image["width"].as_u64(), image["height"].as_u64()),
            (Some(64), Some(48))
        );
    }
    let seeds: Vec<u64> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == "POST")
        .map(|r| {
            serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["input"]["seed"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(
        seeds,
        [7, 8],
        "one prediction per image, each with its own seed"
    );
}
