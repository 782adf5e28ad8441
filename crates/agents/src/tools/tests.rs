//! The executor against real parts: a temp-dir store, the local chat
//! models, wiremock web servers. The pool, the publisher and the listener
//! hub connect lazily, so a `ToolBox` is built without any service; only
//! `generate_image` needs them (tested end to end by the API's tests).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use image::{ImageFormat, Rgb, RgbImage};
use serde_json::{Value, json};
use uuid::Uuid;
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::kit::text_message;
use super::*;
use unigen_core::config::{FetchSettings, ModelEntry, Settings};
use unigen_core::fetch::Fetcher;
use unigen_core::storage::{FileStore, LocalDiskStore, UrlSigner};
use unigen_db::notify::ListenerHub;
use unigen_jobs::queue::{Publisher, Topology};
use unigen_providers::Catalogue;
use unigen_providers::llm::ChatModels;
use unigen_providers::search::{SearchClient, SearchSettings};

const PUBLIC_BASE_URL: &str = "https://api.unigen.test/v1";

struct Harness {
    tools: ToolBox,
    signer: UrlSigner,
    store: Arc<LocalDiskStore>,
    dir: PathBuf,
    catalogue: Arc<Catalogue>,
    run_id: Uuid,
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A tool box on the default settings; must run inside a tokio runtime.
fn harness(search: Option<SearchClient>, allow_private: bool) -> Harness {
    let settings = Settings::load_with(None, &[]).unwrap();
    let dir = std::env::temp_dir().join(format!("unigen-agent-tools-{}", Uuid::now_v7()));
    let store = Arc::new(LocalDiskStore::new(dir.clone()));
    let signer = UrlSigner::new("test-secret", PUBLIC_BASE_URL, Duration::from_secs(3600));
    let catalogue = Arc::new(Catalogue::new(settings.models.clone()));
    let pool = unigen_db::build_pool(&settings.database).unwrap();
    let publisher = Publisher::new(
        &settings.rabbitmq.url,
        "agent-tools-test",
        Topology::new(&settings.rabbitmq),
        Duration::from_secs(1),
    );
    let (submitter, _flusher) = unigen_jobs::JobSubmitter::new(pool.clone(), Arc::new(publisher));
    let (notifier, _notifier_task) = unigen_db::notify::Notifier::spawn(
        pool.clone(),
        settings.notify.channel.clone(),
        Duration::from_millis(2),
    );
    let tools = ToolBox::new(ToolDeps {
        pool,
        catalogue: catalogue.clone(),
        chat: ChatModels::new(
            &Default::default(),
            &unigen_core::config::LocalProviderSettings {
                latency_ms: 0,
                failure_rate: 0.0,
            },
        ),
        fetcher: Fetcher::new(&FetchSettings {
            max_bytes: 5 * 1024 * 1024,
            timeout_seconds: 5,
            allow_private_addresses: allow_private,
        }),
        search,
        store: store.clone(),
        signer: signer.clone(),
        submitter,
        hub: ListenerHub::default(),
        notifier,
        image_wait: Duration::from_secs(5),
    });
    Harness {
        tools,
        signer,
        store,
        dir,
        catalogue,
        run_id: Uuid::now_v7(),
    }
}

impl Harness {
    fn model(&self, id: &str) -> &ModelEntry {
        self.catalogue.get(id).unwrap()
    }

    fn scope<'a>(&self, model: &'a ModelEntry) -> ToolScope<'a> {
        ToolScope {
            org_id: Uuid::now_v7(),
            api_key_id: Uuid::now_v7(),
            run_id: self.run_id,
            step_number: 3,
            model,
            temperature: 0.7,
            max_tokens: 4000,
        }
    }

    async fn run(&self, name: &str, arguments: Value) -> ToolOutcome {
        let model = self.model("local/echo");
        self.tools
            .execute(&self.scope(model), &call(name, arguments))
            .await
    }

    /// The stored file a signed URL of an outcome names.
    async fn stored(&self, url: &str) -> (String, Vec<u8>) {
        let key = self
            .signer
            .verified_key(url, Utc::now().timestamp())
            .expect("a URL the API accepts");
        let bytes = self
            .store
            .get(&key)
            .await
            .unwrap()
            .expect("the file exists");
        (key, bytes)
    }
}

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: "call_0".into(),
        name: name.into(),
        arguments,
    }
}

fn succeeded(outcome: &ToolOutcome) -> &Value {
    assert!(outcome.succeeded, "{}", outcome.output);
    &outcome.output
}

fn failure(outcome: &ToolOutcome) -> &str {
    assert!(!outcome.succeeded, "{}", outcome.output);
    assert_eq!(outcome.credits, 0);
    assert_eq!(
        outcome.output.as_object().unwrap().len(),
        1,
        "only the error"
    );
    outcome.output["error"].as_str().unwrap()
}

fn all_tool_ids() -> Vec<String> {
    TOOLS.iter().map(|(id, _)| (*id).to_owned()).collect()
}

const JSON_TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// A schema node names valid types, and objects list only properties they
/// define as required.
fn check_schema(schema: &Value, at: &str) {
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().map(|t| t.as_str().unwrap()).collect(),
        other => panic!("{at}: type is {other}"),
    };
    for t in &types {
        assert!(JSON_TYPES.contains(t), "{at}: unknown type {t}");
    }
    if let Some(values) = schema.get("enum") {
        assert!(!values.as_array().unwrap().is_empty(), "{at}: empty enum");
    }
    if types.contains(&"object")
        && let Some(properties) = schema.get("properties")
    {
        let properties = properties.as_object().unwrap();
        for name in schema["required"].as_array().into_iter().flatten() {
            assert!(
                properties.contains_key(name.as_str().unwrap()),
                "{at}: required {name} is not a property"
            );
        }
        for (name, property) in properties {
            check_schema(property, &format!("{at}.{name}"));
        }
    }
    if types.contains(&"array") {
        check_schema(&schema["items"], &format!("{at}[]"));
    }
}

#[test]
fn agents_tools_specs_are_json_schema_objects_with_required_fields() {
    let specs = tool_specs(&all_tool_ids());
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, TOOLS.map(|(id, _)| id), "every tool, in order");
    for spec in &specs {
        let schema = &spec.parameters;
        assert_eq!(schema["type"], "object", "{}", spec.name);
        assert!(!spec.description.is_empty());
        let required = schema["required"].as_array().unwrap();
        assert!(!required.is_empty(), "{} requires something", spec.name);
        assert_eq!(schema["additionalProperties"], false);
        check_schema(schema, &spec.name);
        assert_eq!(spec.to_upstream()["function"]["name"], spec.name);
    }
    assert_eq!(specs::all_parameters().len(), TOOLS.len());
    let some = tool_specs(&[
        "create_document".into(),
        "teleport".into(),
        "web_search".into(),
    ]);
    let names: Vec<&str> = some.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["create_document", "web_search"]);
}

#[tokio::test]
async fn agents_tools_web_fetch_reads_html_as_text_without_scripts_or_styles() {
    let server = MockServer::start().await;
    let page = "<html><head><title>Release notes</title><style>p{color:red}</style>\
                <script>track()</script></head><body><nav>Home | Blog</nav>\
                <h1>Version 2</h1><script>var t = 1;</script><style>h1{}</style>\
                <p>Faster &amp; <a href='/x'>smaller</a>.</p>\
                <ul><li>One</li><li>Two</li></ul></body></html>";
    Mock::given(method("GET"))
        .and(path("/notes"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(page, "text/html; charset=utf-8"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/old"))
        .respond_with(
            ResponseTemplate::new(301).insert_header("location", format!("{}/notes", server.uri())),
        )
        .mount(&server)
        .await;
    let h = harness(None, true);
    let url = format!("{}/old", server.uri());
    let outcome = h.run("web_fetch", json!({ "url": url })).await;
    let output = succeeded(&outcome);
    assert_eq!(
        output,
        &json!({
            "url": url,
            "final_url": format!("{}/notes", server.uri()),
            "title": "Release notes",
            "content": "# Version 2\n\nFaster & smaller.\n\n- One\n- Two",
            "content_type": "text/html",
            "truncated": false,
        })
    );
    assert_eq!((outcome.credits, outcome.prompt_tokens), (3, 0));
}

#[tokio::test]
async fn agents_tools_web_fetch_keeps_plain_text_markdown_and_json_and_decodes_charsets() {
    let server = MockServer::start().await;
    for (route, body, content_type) in [
        (
            "/a.txt",
            "line one\n  line two\n".as_bytes().to_vec(),
            "text/plain",
        ),
        ("/b.md", b"# Title\n\n- item".to_vec(), "text/markdown"),
        ("/c.json", br#"{"ok": true}"#.to_vec(), "application/json"),
        // "café" in Latin-1.
        (
            "/d.txt",
            b"caf\xe9".to_vec(),
            "text/plain; charset=ISO-8859-1",
        ),
    ] {
        Mock::given(method("GET"))
            .and(path(route))
            .respond_with(ResponseTemplate::new(200).set_body_raw(body, content_type))
            .mount(&server)
            .await;
    }
    let h = harness(None, true);
    let fetch = |route: &str| {
        let url = format!("{}{route}", server.uri());
        let h = &h;
        async move { h.run("web_fetch", json!({ "url": url })).await }
    };
    let plain = fetch("/a.txt").await;
    let output = succeeded(&plain);
    assert_eq!(output["content"], "line one\n  line two\n");
    assert_eq!(
        (&output["content_type"], &output["title"]),
        (&json!("text/plain"), &Value::Null)
    );
    let markdown = fetch("/b.md").await;
    assert_eq!(succeeded(&markdown)["content"], "# Title\n\n- item");
    let json_page = fetch("/c.json").await;
    assert_eq!(succeeded(&json_page)["content"], r#"{"ok": true}"#);
    assert_eq!(json_page.output["content_type"], "application/json");
    let latin = fetch("/d.txt").await;
    assert_eq!(succeeded(&latin)["content"], "café");
}

#[tokio::test]
async fn agents_tools_web_fetch_caps_downloads_and_text() {
    let server = MockServer::start().await;
    // Larger than the download cap: read up to the cap only.
    let huge = "0123456789\n".repeat(300_000);
    // Within the download cap, but longer than the text returned.
    let long = "é".repeat(web::PAGE_MAX_CHARS + 10);
    for (route, body) in [("/huge", huge.clone()), ("/long", long)] {
        Mock::given(method("GET"))
            .and(path(route))
            .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/plain"))
            .mount(&server)
            .await;
    }
    let h = harness(None, true);
    for route in ["/huge", "/long"] {
        let outcome = h
            .run(
                "web_fetch",
                json!({"url": format!("{}{route}", server.uri())}),
            )
            .await;
        let output = succeeded(&outcome);
        assert_eq!(output["truncated"], true, "{route}");
        let content = output["content"].as_str().unwrap();
        assert_eq!(content.chars().count(), web::PAGE_MAX_CHARS, "{route}");
    }
    assert!(huge.len() > web::PAGE_MAX_BYTES);
    let page = unigen_core::fetch::Fetcher::new(&FetchSettings {
        max_bytes: 1024,
        timeout_seconds: 5,
        allow_private_addresses: true,
    })
    .load_page(
        "url",
        &format!("{}/huge", server.uri()),
        web::PAGE_MAX_BYTES,
    )
    .await
    .unwrap();
    assert!(page.truncated);
    assert_eq!(
        page.text.len(),
        web::PAGE_MAX_BYTES,
        "read up to the cap, no further"
    );
}

#[tokio::test]
async fn agents_tools_web_fetch_refuses_other_types_and_private_addresses() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/file.pdf"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(b"%PDF-1.7".to_vec(), "application/pdf"),
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/missing"))
        .respond_with(ResponseTemplate::new(404).set_body_string("secret stack trace"))
        .mount(&server)
        .await;
    let open = harness(None, true);
    let pdf = open
        .run(
            "web_fetch",
            json!({"url": format!("{}/file.pdf", server.uri())}),
        )
        .await;
    assert_eq!(
        failure(&pdf),
        "url is application/pdf, which cannot be read as text (HTML, plain text, Markdown or JSON only)"
    );
    let missing = open
        .run(
            "web_fetch",
            json!({"url": format!("{}/missing", server.uri())}),
        )
        .await;
    assert_eq!(
        failure(&missing),
        "url could not be fetched: the server answered 404 Not Found"
    );
    let scheme = open
        .run("web_fetch", json!({"url": "file:///etc/passwd"}))
        .await;
    assert_eq!(failure(&scheme), "url must be an http(s) URL");

    let guarded = harness(None, false);
    for url in [
        format!("{}/file.pdf", server.uri()),
        format!("http://localhost:{}/x", server.address().port()),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let outcome = guarded.run("web_fetch", json!({ "url": url })).await;
        assert_eq!(
            failure(&outcome),
            "url points to a private or loopback address, which is not allowed",
            "{url}"
        );
    }
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2, "the guarded box sent nothing");
}

fn searxng_answer() -> Value {
    json!({
        "query": "rust async",
        "results": [
            {"url": "https://tokio.rs/", "title": "Tokio", "content": "An <b>async</b> runtime."},
            {"url": "https://docs.rs/tokio", "title": "tokio - Rust", "content": "Docs."},
            {"url": "https://async.rs/", "title": "async-std", "content": "Another."}
        ]
    })
}

#[tokio::test]
async fn agents_tools_web_search_returns_results_of_the_backend() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/search"))
        .and(query_param("q", "rust async"))
        .and(query_param("format", "json"))
        .respond_with(ResponseTemplate::new(200).set_body_json(searxng_answer()))
        .mount(&server)
        .await;
    let search = SearchClient::from_settings(&SearchSettings {
        backend: "searxng".into(),
        url: Some(server.uri()),
        ..SearchSettings::default()
    })
    .unwrap();
    let h = harness(search, true);
    let outcome = h
        .run(
            "web_search",
            json!({"query": "  rust async ", "max_results": 2}),
        )
        .await;
    assert_eq!(
        succeeded(&outcome),
        &json!({
            "query": "rust async",
            "results": [
                {"title": "Tokio", "url": "https://tokio.rs/", "snippet": "An async runtime."},
                {"title": "tokio - Rust", "url": "https://docs.rs/tokio", "snippet": "Docs."}
            ]
        })
    );
    assert_eq!(outcome.credits, 5);
    let all = h.run("web_search", json!({"query": "rust async"})).await;
    assert_eq!(succeeded(&all)["results"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn agents_tools_web_search_failures_are_plain_messages() {
    let none = harness(None, true);
    let outcome = none.run("web_search", json!({"query": "rust"})).await;
    assert_eq!(
        failure(&outcome),
        "web search is not configured on this server"
    );

    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(500).set_body_string("internal secret"))
        .mount(&server)
        .await;
    let search = SearchClient::from_settings(&SearchSettings {
        backend: "searxng".into(),
        url: Some(server.uri()),
        ..SearchSettings::default()
    })
    .unwrap();
    let broken = harness(search, true);
    let outcome = broken.run("web_search", json!({"query": "rust"})).await;
    assert_eq!(failure(&outcome), "web search failed; try again later");
}

#[tokio::test]
async fn agents_tools_generate_text_completes_on_the_agent_model_within_its_max_tokens() {
    let h = harness(None, true);
    let outcome = h
        .run(
            "generate_text",
            json!({"prompt": "Write a haiku about rust", "system": "Be terse."}),
        )
        .await;
    assert_eq!(
        succeeded(&outcome),
        &json!({"text": "Write a haiku about rust", "finish_reason": "stop"})
    );
    assert_eq!(outcome.credits, 0, "generate_text is charged as tokens");
    assert!(outcome.prompt_tokens > 5);
    assert_eq!(
        outcome.completion_tokens,
        unigen_providers::chat::count_tokens("Write a haiku about rust")
    );

    let model = h.model("local/echo");
    let mut scope = h.scope(model);
    scope.max_tokens = 2;
    let capped = call(
        "generate_text",
        json!({"prompt": "one two three four five", "max_tokens": 500}),
    );
    let outcome = h.tools.execute(&scope, &capped).await;
    assert_eq!(succeeded(&outcome)["finish_reason"], "length");
    assert_eq!(
        outcome.completion_tokens, 2,
        "capped by the agent's max_tokens"
    );

    // Worst case: the prompt and the capped completion at the model's price.
    let mut pricey = model.clone();
    pricey.credits_per_unit = 1000;
    let scope = ToolScope {
        model: &pricey,
        ..scope
    };
    let prompt_tokens = unigen_providers::chat::count_prompt_tokens(&[text_message(
        "user",
        "one two three four five",
    )]);
    assert_eq!(
        reserve_estimate(&capped, &scope),
        i64::from(prompt_tokens + 2)
    );
}

/// A 64x32 PNG: the left half red, the right half blue.
fn red_blue_png() -> Vec<u8> {
    let image = RgbImage::from_fn(64, 32, |x, _| {
        if x < 32 {
            Rgb([255, 0, 0])
        } else {
            Rgb([0, 0, 255])
        }
    });
    let mut bytes = Vec::new();
    image
        .write_to(&mut std::io::Cursor::new(&mut bytes), ImageFormat::Png)
        .unwrap();
    bytes
}

fn assert_red_blue_facts(output: &Value) {
    assert_eq!(
        (&output["width"], &output["height"], &output["format"]),
        (&json!(64), &json!(32), &json!("png"))
    );
    let colours = output["dominant_colors"].as_array().unwrap();
    assert_eq!(colours.len(), 2, "{output}");
    let named: Vec<(&str, &str, f64)> = colours
        .iter()
        .map(|c| {
            (
                c["hex"].as_str().unwrap(),
                c["name"].as_str().unwrap(),
                c["share"].as_f64().unwrap(),
            )
        })
        .collect();
    assert!(named.contains(&("#ff0000", "red", 0.5)), "{named:?}");
    assert!(named.contains(&("#0000ff", "blue", 0.5)), "{named:?}");
    // Rec. 601 luma of pure red and pure blue, averaged.
    let brightness = output["mean_brightness"].as_f64().unwrap();
    assert!(
        (brightness - (0.299 + 0.114) / 2.0).abs() < 0.001,
        "{brightness}"
    );
}

#[tokio::test]
async fn agents_tools_analyze_image_answers_with_a_vision_model_and_measured_facts() {
    use base64::Engine;
    let h = harness(None, true);
    let png = red_blue_png();
    let data = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&png)
    );
    let outcome = h
        .run(
            "analyze_image",
            json!({"image_url": data, "question": "Which colours are there?"}),
        )
        .await;
    let output = succeeded(&outcome);
    // The offline vision model echoes the question: it does not see.
    assert_eq!(output["answer"], "Which colours are there?");
    assert_eq!(
        output["model"], "local/echo-vision",
        "the agent's model has no vision"
    );
    assert_red_blue_facts(output);
    assert_eq!(outcome.credits, 5);
    assert!(outcome.prompt_tokens > 0 && outcome.completion_tokens > 0);

    // This API's own signed file URL is read from storage.
    let key = format!("agent-runs/{}/1-picture.png", h.run_id);
    h.store.put(&key, png.clone()).await.unwrap();
    let own = h.signer.sign_url(&key, Utc::now().timestamp());
    let outcome = h.run("analyze_image", json!({"image_url": own})).await;
    assert_eq!(succeeded(&outcome)["answer"], "Describe this image.");
    assert_red_blue_facts(&outcome.output);

    // And any other URL through the fetcher.
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/p.png"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(png, "image/png"))
        .mount(&server)
        .await;
    let outcome = h
        .run(
            "analyze_image",
            json!({"image_url": format!("{}/p.png", server.uri())}),
        )
        .await;
    assert_red_blue_facts(succeeded(&outcome));

    let gone = h
        .signer
        .sign_url("agent-runs/x/9-gone.png", Utc::now().timestamp());
    let outcome = h.run("analyze_image", json!({"image_url": gone})).await;
    assert_eq!(
        failure(&outcome),
        "image_url refers to a file that no longer exists"
    );
    let text = base64::engine::general_purpose::STANDARD.encode("not an image");
    let outcome = h.run("analyze_image", json!({"image_url": text})).await;
    assert_eq!(
        failure(&outcome),
        "image_url is not a JPEG, PNG or WebP image"
    );
    // The right magic bytes, but no image behind them.
    let fake = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG\r\n\x1a\nbroken");
    let outcome = h.run("analyze_image", json!({"image_url": fake})).await;
    assert_eq!(
        failure(&outcome),
        "image_url could not be decoded as an image"
    );
}

#[tokio::test]
async fn agents_tools_generate_chart_stores_a_real_png_behind_a_signed_url() {
    let h = harness(None, true);
    let outcome = h
        .run(
            "generate_chart",
            json!({"kind": "bar", "title": "Sales", "labels": ["Q1", "Q2"],
                   "series": [{"name": "2025", "values": [3, 5]}], "width": 400, "height": 300}),
        )
        .await;
    let output = succeeded(&outcome).clone();
    assert_eq!(outcome.credits, 2);
    let (key, bytes) = h.stored(output["url"].as_str().unwrap()).await;
    assert_eq!(key, format!("agent-runs/{}/3-chart.png", h.run_id));
    assert_eq!(
        (&output["format"], &output["mime"]),
        (&json!("png"), &json!("image/png"))
    );
    assert_eq!(output["bytes"], json!(bytes.len()));
    let decoded = image::load_from_memory_with_format(&bytes, ImageFormat::Png).unwrap();
    assert_eq!((decoded.width(), decoded.height()), (400, 300));
    assert_eq!(
        (&output["width"], &output["height"]),
        (&json!(400), &json!(300))
    );
}

#[tokio::test]
async fn agents_tools_create_document_stores_a_real_pdf_and_csv() {
    let h = harness(None, true);
    let outcome = h
        .run(
            "create_document",
            json!({"format": "pdf", "title": "Quarterly Report: Q3/2025",
                   "content": "## Summary\n\nRevenue grew."}),
        )
        .await;
    let output = succeeded(&outcome).clone();
    assert_eq!(outcome.credits, 3);
    assert_eq!(output["filename"], "quarterly-report-q3-2025.pdf");
    assert_eq!(
        (&output["format"], &output["mime"]),
        (&json!("pdf"), &json!("application/pdf"))
    );
    let (key, bytes) = h.stored(output["url"].as_str().unwrap()).await;
    assert_eq!(
        key,
        format!("agent-runs/{}/3-quarterly-report-q3-2025.pdf", h.run_id)
    );
    assert!(bytes.starts_with(b"%PDF-"));
    assert_eq!(output["bytes"], json!(bytes.len()));
    let text = pdf_extract::extract_text_from_mem(&bytes).unwrap();
    assert!(text.contains("Revenue grew."), "{text}");

    let outcome = h
        .run(
            "create_document",
            json!({"format": "csv", "title": "People", "columns": ["name", "note"],
                   "rows": [["Ann", "=cmd()"]]}),
        )
        .await;
    let output = succeeded(&outcome).clone();
    assert_eq!(output["filename"], "people.csv");
    let (_, bytes) = h.stored(output["url"].as_str().unwrap()).await;
    assert_eq!(bytes, b"name,note\r\nAnn,'=cmd()\r\n");
}

#[tokio::test]
async fn agents_tools_argument_errors_name_the_argument() {
    let h = harness(None, true);
    let cases = [
        ("web_fetch", json!({}), "url is required"),
        ("web_fetch", json!({"url": "   "}), "url is required"),
        (
            "web_fetch",
            json!({"url": 42}),
            "url must be a string, got a number",
        ),
        (
            "web_fetch",
            json!({"_raw": "{\"url\": \"https://exa"}),
            "the arguments are not valid JSON; send them as one JSON object",
        ),
        (
            "web_search",
            json!({"query": "q".repeat(501)}),
            "query must be at most 500 characters",
        ),
        (
            "web_search",
            json!({"query": "rust", "max_results": 0}),
            "max_results must be an integer between 1 and 10",
        ),
        (
            "generate_text",
            json!({"system": "x"}),
            "prompt is required",
        ),
        (
            "generate_text",
            json!({"prompt": "x", "max_tokens": 2.5}),
            "max_tokens must be an integer between 1 and 1000000",
        ),
        ("generate_image", json!({}), "prompt is required"),
        (
            "generate_image",
            json!({"prompt": "x", "size": "3x3"}),
            "size must be one of: 512x512, 1024x1024, 1792x1024, 1024x1792, 1536x1024, 1024x1536",
        ),
        (
            "generate_image",
            json!({"prompt": "x", "style": "cubist"}),
            "style must be one of: vivid, natural",
        ),
        (
            "generate_image",
            json!({"prompt": "x", "seed": -1}),
            "seed must be an integer between 0 and 9007199254740991",
        ),
        (
            "generate_image",
            json!({"prompt": "é".repeat(4001)}),
            "prompt must be at most 4000 characters",
        ),
        (
            "analyze_image",
            json!({"question": "what?"}),
            "image_url is required",
        ),
        (
            "analyze_image",
            json!({"image_url": "ftp://example.com/a.png"}),
            "image_url must be an http(s) URL or base64 data",
        ),
        (
            "generate_chart",
            json!({"kind": "bar"}),
            "series is required: a list of {name, values} (or {name, points} for scatter)",
        ),
        (
            "generate_chart",
            json!({"_raw": "oops"}),
            "the arguments are not valid JSON; send them as one JSON object",
        ),
        (
            "create_document",
            json!({"format": "pdf", "content": "c"}),
            "title is required",
        ),
        (
            "teleport",
            json!({}),
            "unknown tool `teleport`; available: web_search, web_fetch, generate_text, \
             generate_image, analyze_image, generate_chart, create_document",
        ),
    ];
    for (tool, arguments, expected) in cases {
        let outcome = h.run(tool, arguments.clone()).await;
        assert_eq!(failure(&outcome), expected, "{tool} {arguments}");
        assert_eq!((outcome.prompt_tokens, outcome.completion_tokens), (0, 0));
    }
}

#[test]
fn agents_tools_reserve_the_price_and_worst_case_tokens() {
    let catalogue = Catalogue::new(Settings::load_with(None, &[]).unwrap().models);
    let model = catalogue.get("local/echo").unwrap();
    let scope = ToolScope {
        org_id: Uuid::nil(),
        api_key_id: Uuid::nil(),
        run_id: Uuid::nil(),
        step_number: 1,
        model,
        temperature: 0.7,
        max_tokens: 4000,
    };
    for (tool, price) in TOOLS {
        let arguments = match tool {
            // Invalid arguments: the call will fail, only its price is held.
            "generate_text" => json!({}),
            "analyze_image" => json!({"_raw": "x"}),
            _ => json!({"anything": 1}),
        };
        assert_eq!(
            reserve_estimate(&call(tool, arguments), &scope),
            price,
            "{tool}"
        );
    }
    assert_eq!(reserve_estimate(&call("teleport", json!({})), &scope), 0);
    // local/echo: 1 credit per 1,000 tokens; 4,000 completion tokens at most.
    let text = reserve_estimate(&call("generate_text", json!({"prompt": "hi"})), &scope);
    assert_eq!(text, 5, "4,000 + a few prompt tokens, rounded up");
    let image = reserve_estimate(&call("analyze_image", json!({"image_url": "x"})), &scope);
    assert_eq!(image, 5 + 3, "the price, then 1,500 + 1,000 + a few tokens");
}

#[test]
fn agents_tools_measure_reads_formats_and_refuses_garbage() {
    let mut jpeg = Vec::new();
    RgbImage::from_pixel(10, 20, Rgb([250, 250, 250]))
        .write_to(&mut std::io::Cursor::new(&mut jpeg), ImageFormat::Jpeg)
        .unwrap();
    let facts = analyze_image::measure(&jpeg).unwrap();
    assert_eq!((facts.width, facts.height, facts.format), (10, 20, "jpeg"));
    assert_eq!(facts.dominant_colors.len(), 1);
    assert_eq!(facts.dominant_colors[0].name, "white");
    assert!(facts.mean_brightness.unwrap() > 0.95);
    assert_eq!(analyze_image::measure(b"\x89PNG\r\n\x1a\nnope"), None);
    assert_eq!(analyze_image::measure(b"GIF89a"), None);
}
