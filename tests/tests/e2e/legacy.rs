//! The legacy image and logo interface: envelopes, sizes, errors.

use std::time::Duration;

use serde_json::json;
use unigen_tests::{TestApp, json_of};

use crate::media::fetch;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_generation_answers_the_envelope_with_images_of_the_named_size() {
    let app = TestApp::spawn().await;
    let body = json!({"prompt": "a fox in snow", "model": "flux-dev", "size": "landscape_16_9", "n": 2, "seed": 9, "style": "anime"});
    let (status, envelope) = json_of(
        app.post_json("/api/v1/ai-image/generate", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{envelope}");
    assert_eq!(envelope["success"], true);
    assert!(envelope["error"].is_null());
    assert_eq!(envelope["data"]["model"], "flux-dev");
    assert_eq!(envelope["data"]["resolved_model"], "local/procedural-v1");
    assert_eq!(envelope["meta"]["credits_used"], 2);
    let images = envelope["data"]["images"].as_array().unwrap();
    assert_eq!(images.len(), 2);
    assert_eq!(
        (images[1]["seed"].as_u64(), images[0]["width"].as_u64()),
        (Some(10), Some(1024))
    );
    let png =
        image::load_from_memory(&fetch(&app, images[0]["url"].as_str().unwrap()).await).unwrap();
    assert_eq!((png.width(), png.height()), (1024, 576));

    // The largest seed: the next image's seed wraps around as the renderer's
    // does (it was an overflow panic on the API's worker thread).
    let body =
        json!({"prompt": "x", "model": "flux-schnell", "size": "square", "n": 2, "seed": u64::MAX});
    let (status, envelope) = json_of(
        app.post_json("/api/v1/ai-image/generate", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{envelope}");
    let seeds: Vec<_> = envelope["data"]["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|image| image["seed"].as_u64())
        .collect();
    assert_eq!(seeds, [Some(u64::MAX), Some(0)]);

    let (status, accepted) = json_of(
        app.post_json(
            "/api/v1/ai-image/generate?async=true",
            &app.key,
            &json!({"prompt": "x", "model": "sdxl"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 202);
    assert_eq!(accepted["success"], true);
    let job = app
        .wait_for_job(
            accepted["data"]["job_id"].as_str().unwrap(),
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(job["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_logos_are_rendered_as_logos() {
    let app = TestApp::spawn().await;
    let body = json!({"prompt": "Acme Rockets, reusable launch vehicles", "model": "flux-pro", "style": "tech",
                      "industry": "technology", "color_scheme": "navy and orange", "size": "square_hd", "complexity": 4});
    let (status, envelope) = json_of(
        app.post_json("/api/v1/ai-image/logo", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{envelope}");
    let url = envelope["data"]["images"][0]["url"].as_str().unwrap();
    let logo = image::load_from_memory(&fetch(&app, url).await)
        .unwrap()
        .into_rgb8();
    assert_eq!(logo.dimensions(), (1024, 1024));
    // Not a landscape: few distinct colours, a plain background at the corners.
    assert_eq!(logo.get_pixel(2, 2), logo.get_pixel(1021, 1021));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_errors_come_in_the_envelope_with_the_field_named() {
    let app = TestApp::spawn().await;
    let cases = [
        (
            "/api/v1/ai-image/generate",
            json!({"model": "flux-dev"}),
            "prompt",
            "prompt is required",
        ),
        (
            "/api/v1/ai-image/generate",
            json!({"prompt": "x"}),
            "model",
            "model is required",
        ),
        (
            "/api/v1/ai-image/generate",
            json!({"prompt": "x", "model": "flux-dev", "n": 5}),
            "n",
            "n must be between 1 and 4",
        ),
        (
            "/api/v1/ai-image/generate",
            json!({"prompt": "x", "model": "flux-dev", "guidance_scale": 30}),
            "guidance_scale",
            "guidance_scale must be between 1 and 20",
        ),
        (
            "/api/v1/ai-image/logo",
            json!({"prompt": "x", "model": "flux-dev", "industry": "food"}),
            "style",
            "style is required",
        ),
        (
            "/api/v1/ai-image/logo",
            json!({"prompt": "x", "model": "flux-dev", "style": "tech", "industry": "food", "complexity": 9}),
            "complexity",
            "complexity must be between 1 and 5",
        ),
    ];
    for (path, body, field, message) in cases {
        let (status, envelope) = json_of(app.post_json(path, &app.key, &body).await).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(envelope["success"], false);
        assert!(envelope["data"].is_null());
        assert_eq!(envelope["error"]["field"], field, "{body}");
        assert_eq!(envelope["error"]["message"], message, "{body}");
        assert_eq!(envelope["error"]["code"], "invalid_request");
    }
    let (status, envelope) = json_of(
        app.post_json(
            "/api/v1/ai-image/generate",
            "sk_nope",
            &json!({"prompt": "x", "model": "sdxl"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(envelope["error"]["message"], "invalid or missing API key");
    assert_eq!(envelope["success"], false);
    assert_eq!(app.count_jobs().await, 0);
}
