use serde_json::json;
use unigen_tests::{TestApp, TestOptions, json_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics_are_served() {
    let app = TestApp::spawn().await;
    let (status, body) = json_of(app.client.get(app.url("/healthz")).send().await.unwrap()).await;
    assert_eq!((status, body), (200, json!({"status": "ok"})));
    let (status, body) = json_of(app.client.get(app.url("/readyz")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(
        body["checks"],
        json!({"postgres": true, "rabbitmq": true, "listener": true})
    );

    let (status, _) = json_of(
        app.post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "measured"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    let metrics = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("unigen_http_http_requests_total{endpoint=\"/api/v1/images/generations\""),
        "{metrics}"
    );
    assert!(metrics.contains("unigen_http_http_requests_duration_seconds_bucket"));
    assert!(
        metrics.contains("unigen_jobs{status=\"completed\",tool=\"image\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("unigen_jobs_submitted_total{tool=\"image\"} 1"));
    assert!(metrics.contains("unigen_listener_connected 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_reports_an_unreachable_broker() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure_api(|s| s.rabbitmq.url = "amqp://guest:guest@127.0.0.1:1/%2f".into()),
    )
    .await;
    let (status, body) = json_of(app.client.get(app.url("/readyz")).send().await.unwrap()).await;
    assert_eq!(status, 503);
    assert_eq!(body["checks"]["rabbitmq"], false);
    assert_eq!(body["checks"]["postgres"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_describes_every_route_and_swagger_ui_works_offline() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let (status, doc) = json_of(
        app.client
            .get(app.url("/api/openapi"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    let paths = doc["paths"].as_object().unwrap();
    for (path, method) in [
        ("/api/v1/images/generations", "post"),
        ("/api/v1/jobs", "get"),
        ("/api/v1/jobs/{id}", "get"),
        ("/api/v1/jobs/{id}", "delete"),
        ("/api/v1/agents", "post"),
        ("/api/v1/agents", "get"),
        ("/api/v1/agents/{id}", "patch"),
        ("/api/v1/agents/{id}/duplicate", "post"),
        ("/api/v1/agents/{id}/run", "post"),
        ("/api/v1/agents/{id}/runs", "get"),
        ("/api/v1/agents/{id}/runs/{run_id}", "get"),
        ("/api/v1/agents/{id}/knowledge", "post"),
        ("/api/v1/agents/{id}/knowledge", "get"),
        ("/api/v1/agents/{id}/knowledge/{file_id}", "delete"),
    ] {
        let operation = &paths[path][method];
        assert!(operation.is_object(), "{method} {path} missing");
        assert!(
            operation["security"].is_array(),
            "{method} {path} has no security"
        );
        assert!(
            operation["responses"]["401"].is_object(),
            "{method} {path} documents 401"
        );
    }
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for schema in [
        "ImageGenerationRequest",
        "ImageGenerationResponse",
        "JobView",
        "ErrorBody",
        "AsyncJobCreated",
        "RunRequest",
        "RunEnvelope",
    ] {
        assert!(schemas.contains_key(schema), "schema {schema} missing");
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );

    let page = app.client.get(app.url("/docs/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("swagger-ui"), "{html}");
    assert!(
        !html.contains("https://"),
        "the UI loads nothing from the internet"
    );
    let bundle = app
        .client
        .get(app.url("/docs/swagger-ui-bundle.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(bundle.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_and_tampered_file_links_answer_json_404s() {
    let app = TestApp::spawn().await;
    let (status, body) = json_of(
        app.client
            .get(app.url("/api/v1/nope"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");

    let (_, generated) = json_of(
        app.post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "signed"}),
        )
        .await,
    )
    .await;
    let url = generated["data"][0]["url"].as_str().unwrap();
    assert_eq!(app.download(url).await.status(), 200);
    let tampered = url.replacen("/0.png", "/1.png", 1);
    assert_eq!(app.download(&tampered).await.status(), 404);
    let unsigned = url.split('?').next().unwrap();
    assert_eq!(app.download(unsigned).await.status(), 404);
    let expired = url.replacen("expires=", "expires=1", 1);
    assert_eq!(app.download(&expired).await.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_are_listed_by_category_for_any_valid_key() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let narrow = app.create_key(app.org_id, &["chat"], None).await;
    let (status, list) = json_of(app.get("/api/v1/models", &narrow).await).await;
    assert_eq!(status, 200);
    assert_eq!(list["object"], "list");
    let models = list["data"].as_array().unwrap();
    let categories: Vec<&str> = models
        .iter()
        .map(|m| m["category"].as_str().unwrap())
        .collect();
    let mut sorted = categories.clone();
    sorted.sort();
    assert_eq!(categories, sorted, "grouped by category");
    let whisper = models
        .iter()
        .find(|m| m["id"] == "local/whisper-tiny-en")
        .unwrap();
    assert_eq!(whisper["object"], "model");
    assert_eq!(whisper["category"], "audio");
    assert_eq!(whisper["capabilities"], json!(["speech_to_text"]));
    assert_eq!(whisper["tier"], "fast");
    assert!(
        models
            .iter()
            .all(|m| m["id"].as_str().unwrap().contains('/'))
    );
    assert_eq!(app.get("/api/v1/models", "sk_bad").await.status(), 401);
}
