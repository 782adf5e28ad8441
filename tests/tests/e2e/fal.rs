//! Models on the `fal` adapter through API, queue and worker, against a fake
//! of fal's Queue API (`POST {base}/{app}` to submit, status and result
//! under `{base}/{owner}/{app}/requests/{id}`, `PUT .../cancel`, the key in
//! `Authorization: Key <key>`), with outputs downloaded into our storage.

use std::time::Duration;

use serde_json::{Value, json};
use unigen_core::config::{ModelEntry, UpstreamSettings};
use unigen_tests::{TestApp, TestOptions, json_of};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::media::{fetch, png_of};

const KEY: &str = "fal-test-secret";

fn model(id: &str, category: &str, capability: &str, app: &str) -> ModelEntry {
    serde_json::from_value(json!({
        "id": id, "category": category, "tier": "premium", "adapter": "fal", "owned_by": "fal",
        "upstream": "fal", "upstream_model": app, "capabilities": [capability], "credits_per_unit": 3,
        "max_duration_seconds": 10
    }))
    .unwrap()
}

async fn stack(server: &MockServer) -> TestApp {
    let url = server.uri();
    TestApp::spawn_with(TestOptions::default().configure(move |s| {
        s.upstreams.insert(
            "fal".into(),
            UpstreamSettings {
                base_url: url,
                api_key: KEY.into(),
                timeout_seconds: 10,
                ..Default::default()
            },
        );
        s.models.push(model(
            "fal/flux",
            "image",
            "text_to_image",
            "fal-ai/flux/dev",
        ));
        s.models.push(model(
            "fal/motion",
            "video",
            "text_to_video",
            "fal-ai/motion",
        ));
    }))
    .await
}

/// A submit answer naming its links, as fal's queue does.
fn submitted(base: &str, owner_app: &str, id: &str) -> Value {
    json!({
        "request_id": id,
        "status_url": format!("{base}/{owner_app}/requests/{id}/status"),
        "response_url": format!("{base}/{owner_app}/requests/{id}"),
        "cancel_url": format!("{base}/{owner_app}/requests/{id}/cancel"),
        "queue_position": 0
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_model_on_fal_is_submitted_polled_and_its_output_stored() {
    let server = MockServer::start().await;
    let base = server.uri();
    Mock::given(method("POST"))
        .and(path("/fal-ai/flux/dev"))
        .and(header("authorization", format!("Key {KEY}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(submitted(
            &base,
            "fal-ai/flux",
            "0b1c2d3e-0000-4000-8000-000000000001",
        )))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(
            "/fal-ai/flux/requests/0b1c2d3e-0000-4000-8000-000000000001/status",
        ))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"status": "IN_PROGRESS"})))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(
            "/fal-ai/flux/requests/0b1c2d3e-0000-4000-8000-000000000001/status",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"status": "COMPLETED"})))
        .with_priority(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/fal-ai/flux/requests/0b1c2d3e-0000-4000-8000-000000000001"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "images": [{"url": format!("{base}/files/out.png"), "width": 40, "height": 30, "content_type": "image/png"}],
            "seed": 42
        })))
        .mount(&server)
        .await;
    let png = png_of(&image::RgbImage::from_pixel(
        40,
        30,
        image::Rgb([10, 200, 10]),
    ));
    Mock::given(method("GET"))
        .and(path("/files/out.png"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(png.clone(), "image/png"))
        .mount(&server)
        .await;
    let app = stack(&server).await;
    let id = app
        .submit_image_async(
            &json!({"model": "fal/flux", "prompt": "a lime", "size": "1024x1024", "seed": 42}),
        )
        .await;
    let job = app.wait_for_job(&id, Duration::from_secs(60)).await;
    assert_eq!(job["status"], "completed", "{job}");
    let image = &job["outputData"]["images"][0];
    assert_eq!(
        (image["width"].as_u64(), image["height"].as_u64()),
        (Some(40), Some(30))
    );
    assert_eq!(
        fetch(&app, image["url"].as_str().unwrap()).await,
        png,
        "the output as fal made it"
    );
    let submit = &server.received_requests().await.unwrap()[0];
    let sent: Value = serde_json::from_slice(&submit.body).unwrap();
    assert_eq!(
        (
            &sent["prompt"],
            &sent["image_size"],
            &sent["num_images"],
            &sent["seed"]
        ),
        (
            &json!("a lime"),
            &json!({"width": 1024, "height": 1024}),
            &json!(1),
            &json!(42)
        )
    );
    // The key went to the API only, never to the file download.
    let download = server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.url.path() == "/files/out.png")
        .unwrap();
    assert!(download.headers.get("authorization").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_job_cancels_its_fal_request() {
    let server = MockServer::start().await;
    let base = server.uri();
    let id = "0b1c2d3e-0000-4000-8000-000000000002";
    Mock::given(method("POST"))
        .and(path("/fal-ai/motion"))
        .respond_with(ResponseTemplate::new(200).set_body_json(submitted(
            &base,
            "fal-ai/motion",
            id,
        )))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/fal-ai/motion/requests/{id}/status")))
        .respond_with(
            ResponseTemplate::new(202)
                .set_body_json(json!({"status": "IN_QUEUE", "queue_position": 3})),
        )
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path(format!("/fal-ai/motion/requests/{id}/cancel")))
        .respond_with(
            ResponseTemplate::new(202).set_body_json(json!({"status": "CANCELLATION_REQUESTED"})),
        )
        .mount(&server)
        .await;
    let app = stack(&server).await;
    let (status, created) = json_of(
        app.post_json(
            "/api/v1/videos/generations",
            &app.key,
            &json!({"model": "fal/motion", "prompt": "forever", "duration_seconds": 2}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 202, "{created}");
    let job_id = created["id"].as_str().unwrap();
    app.wait_for_status(job_id, "processing", Duration::from_secs(20))
        .await;
    let submitted_to_fal = || async {
        server
            .received_requests()
            .await
            .unwrap()
            .iter()
            .any(|r| r.url.path() == "/fal-ai/motion")
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !submitted_to_fal().await && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        app.delete(&format!("/api/v1/jobs/{job_id}"), &app.key)
            .await
            .status(),
        200
    );
    let cancel_path = format!("/fal-ai/motion/requests/{id}/cancel");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let cancelled = server
            .received_requests()
            .await
            .unwrap()
            .iter()
            .any(|r| r.url.path() == cancel_path);
        if cancelled {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fal request was never cancelled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(app.job(job_id).await["status"], "cancelled");
}
