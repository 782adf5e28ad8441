//! Issue 37's metrics: after a sync image job, a chat (plain and streamed),
//! an embeddings call and a webhook attempt, each binary's `/metrics` has
//! the GenAI, HTTP, job, webhook and provider series with their label sets,
//! no label value looks like an id, and `promtool check metrics` accepts
//! every scrape.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use unigen_tests::{TestApp, TestOptions, json_of};

use crate::webhooks::{receiver, register, requests_of};

const WAIT: Duration = Duration::from_secs(30);

/// A loopback address nothing listens on (bound, then released).
fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("bound address").to_string()
}

/// One sample: its name, labels and value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of a Prometheus text scrape (label values without escapes
/// other than `\"`, which ours never have).
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("`series value`");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (key, value) = pair.split_once("=\"").expect("label=\"value\"");
                    (key.to_owned(), value.trim_end_matches('"').to_owned())
                })
                .collect();
            Sample {
                name: name.to_owned(),
                labels,
                value: value.parse().expect("a numeric value"),
            }
        })
        .collect()
}

/// The value of the one sample named `name` whose labels include `labels`.
fn value(scrape: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

/// The label names every sample of `name` has (`le` and `quantile` aside).
fn label_names(scrape: &[Sample], name: &str) -> Vec<Vec<String>> {
    let mut sets: Vec<Vec<String>> = scrape
        .iter()
        .filter(|s| s.name == name)
        .map(|s| {
            s.labels
                .keys()
                .filter(|k| *k != "le")
                .cloned()
                .collect::<Vec<_>>()
        })
        .collect();
    sets.sort();
    sets.dedup();
    sets
}

/// A label value that identifies one tenant, key, job or request.
fn looks_like_an_id(value: &str) -> bool {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = value.split('-').collect();
    let uuid = parts.len() == 5
        && [8, 4, 4, 4, 12]
            .iter()
            .zip(&parts)
            .all(|(n, part)| hex(part, *n));
    let contains_uuid = value
        .split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        .any(|piece| {
            piece.len() >= 32 && piece.bytes().filter(u8::is_ascii_hexdigit).count() >= 32
        });
    uuid || contains_uuid
        || [
            "job_", "sk_", "sk-", "org_", "req_", "key_", "run_", "evt_", "file_",
        ]
        .iter()
        .any(|prefix| value.starts_with(prefix))
}

fn assert_bounded(binary: &str, scrape: &[Sample], secrets: &[&str]) {
    for sample in scrape {
        for (key, value) in &sample.labels {
            assert!(
                !looks_like_an_id(value) && !secrets.iter().any(|s| value.contains(s)),
                "{binary}: {}{{{key}=\"{value}\"}} carries an id",
                sample.name
            );
        }
    }
}

/// `promtool check metrics` on a scrape: missing promtool fails under CI.
fn promtool_accepts(binary: &str, text: &str) {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(err) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "promtool is missing ({err}): scripts/lib/common.sh ensure_promtool installs it"
            );
            eprintln!("promtool is missing ({err}): not checking {binary}'s scrape");
            return;
        }
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("writing to promtool");
    let output = child.wait_with_output().expect("promtool ran");
    assert!(
        output.status.success(),
        "promtool check metrics rejects {binary}'s scrape:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Scrapes `url` until `ready` holds for its samples.
async fn scrape_until(
    app: &TestApp,
    url: &str,
    what: &str,
    ready: impl Fn(&[Sample]) -> bool,
) -> (String, Vec<Sample>) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(response) = app.client.get(url).send().await {
            let text = response.text().await.unwrap_or_default();
            let parsed = samples(&text);
            if ready(&parsed) {
                return (text, parsed);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {what} at {url}:\n{text}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_binary_serves_bounded_genai_http_job_and_webhook_series_that_promtool_accepts() {
    let (worker_addr, scheduler_addr) = (free_addr(), free_addr());
    let (w, s) = (worker_addr.clone(), scheduler_addr.clone());
    let app = TestApp::spawn_with(TestOptions::default().configure(move |settings| {
        settings.worker.metrics_addr = w;
        settings.scheduler.metrics_addr = s;
    }))
    .await;
    let hooks = receiver(0, 200).await;
    let (_webhook, secret) = register(&app, &hooks, &["generation.completed"]).await;

    let (status, image) = json_of(
        app.post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "a lighthouse at dusk", "size": "512x512"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{image}");
    let (status, chat) = json_of(
        app.post_json(
            "/api/v1/chat/completions",
            &app.key,
            &json!({"model": "local/echo", "messages": [{"role": "user", "content": "hello"}]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{chat}");
    let streamed = app
        .post_json(
            "/api/v1/chat/completions",
            &app.key,
            &json!({"model": "local/echo", "stream": true,
                    "messages": [{"role": "user", "content": "hello stream"}]}),
        )
        .await;
    assert_eq!(streamed.status(), 200);
    let body = streamed.text().await.unwrap();
    assert!(body.contains("[DONE]"), "{body}");
    let (status, embedded) = json_of(
        app.post_json(
            "/api/v1/embeddings",
            &app.key,
            &json!({"model": "local/hash-embed", "input": ["one", "two"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{embedded}");
    requests_of(&hooks, 1).await;

    let secrets = [app.key.as_str(), secret.as_str()];
    let duration = "gen_ai_client_operation_duration_seconds_count";
    let tokens = "gen_ai_client_token_usage_count";

    // The API: chat and embeddings, HTTP and overhead.
    let api_url = app.url("/metrics");
    let (text, api) = scrape_until(&app, &api_url, "chat and embeddings series", |s| {
        value(s, duration, &[("gen_ai_operation_name", "chat")]).is_some_and(|n| n >= 2.0)
            && value(s, duration, &[("gen_ai_operation_name", "embeddings")]).is_some()
    })
    .await;
    let chat = [
        ("gen_ai_operation_name", "chat"),
        ("gen_ai_provider_name", "unigen.local"),
        ("gen_ai_request_model", "local/echo"),
    ];
    assert_eq!(
        value(
            &api,
            duration,
            &[chat.as_slice(), &[("error_type", "")]].concat()
        ),
        Some(2.0),
        "{text}"
    );
    for kind in ["input", "output"] {
        assert_eq!(
            value(
                &api,
                tokens,
                &[chat.as_slice(), &[("gen_ai_token_type", kind)]].concat()
            ),
            Some(2.0),
            "{kind} tokens: {text}"
        );
    }
    assert_eq!(
        value(
            &api,
            "gen_ai_client_time_to_first_chunk_seconds_count",
            &chat
        ),
        Some(1.0),
        "{text}"
    );
    let embeddings = [
        ("gen_ai_operation_name", "embeddings"),
        ("gen_ai_provider_name", "unigen.local"),
        ("gen_ai_request_model", "local/hash-embed"),
    ];
    assert_eq!(value(&api, duration, &embeddings), Some(1.0), "{text}");
    assert_eq!(
        value(
            &api,
            tokens,
            &[embeddings.as_slice(), &[("gen_ai_token_type", "input")]].concat()
        ),
        Some(1.0),
        "{text}"
    );
    let http = "http_server_request_duration_seconds_count";
    for route in [
        "/api/v1/chat/completions",
        "/api/v1/embeddings",
        "/api/v1/images/generations",
    ] {
        assert!(
            value(
                &api,
                http,
                &[
                    ("http_request_method", "POST"),
                    ("http_route", route),
                    ("http_response_status_code", "200")
                ]
            )
            .is_some_and(|n| n >= 1.0),
            "{route}: {text}"
        );
    }
    // Sync requests that waited on a provider or a job; not the stream.
    assert_eq!(
        value(
            &api,
            "unigen_gateway_overhead_seconds_count",
            &[("http_route", "/api/v1/chat/completions")]
        ),
        Some(1.0),
        "{text}"
    );
    for route in ["/api/v1/embeddings", "/api/v1/images/generations"] {
        assert_eq!(
            value(
                &api,
                "unigen_gateway_overhead_seconds_count",
                &[("http_route", route)]
            ),
            Some(1.0),
            "{route}: {text}"
        );
    }
    assert_eq!(
        label_names(&api, "http_server_request_duration_seconds_bucket"),
        vec![vec![
            "http_request_method".to_owned(),
            "http_response_status_code".to_owned(),
            "http_route".to_owned()
        ]]
    );
    assert_eq!(
        label_names(&api, "gen_ai_client_operation_duration_seconds_bucket"),
        vec![vec![
            "error_type".to_owned(),
            "gen_ai_operation_name".to_owned(),
            "gen_ai_provider_name".to_owned(),
            "gen_ai_request_model".to_owned()
        ]]
    );
    assert_eq!(
        value(&api, "unigen_otel_spans_dropped_total", &[]),
        Some(0.0)
    );
    assert_bounded("api", &api, &secrets);
    promtool_accepts("api", &text);

    // The worker: the image job's provider call and the job's series.
    let worker_url = format!("http://{worker_addr}/metrics");
    let image = [
        ("gen_ai_operation_name", "generate_content"),
        ("gen_ai_provider_name", "unigen.local"),
        ("gen_ai_request_model", "local/procedural-v1"),
    ];
    let (text, worker) = scrape_until(&app, &worker_url, "the job's series", |s| {
        value(
            s,
            "unigen_jobs_finished_total",
            &[("tool", "image"), ("status", "completed")],
        )
        .is_some()
    })
    .await;
    assert_eq!(
        value(
            &worker,
            "unigen_jobs_finished_total",
            &[
                ("tool", "image"),
                ("provider", "unigen.local"),
                ("status", "completed")
            ]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &worker,
            duration,
            &[image.as_slice(), &[("error_type", "")]].concat()
        ),
        Some(1.0),
        "{text}"
    );
    for name in [
        "unigen_job_queue_wait_seconds_count",
        "unigen_job_run_seconds_count",
    ] {
        assert_eq!(
            value(&worker, name, &[("tool", "image")]),
            Some(1.0),
            "{name}: {text}"
        );
    }
    assert_eq!(
        value(
            &worker,
            "unigen_provider_health",
            &[("provider", "unigen.local")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_bounded("worker", &worker, &secrets);
    promtool_accepts("worker", &text);

    // The scheduler: the webhook attempt and the backlog's age.
    let scheduler_url = format!("http://{scheduler_addr}/metrics");
    let (text, scheduler) = scrape_until(&app, &scheduler_url, "the webhook attempt", |s| {
        value(
            s,
            "unigen_webhook_attempts_total",
            &[("outcome", "succeeded"), ("result", "success")],
        )
        .is_some()
    })
    .await;
    assert_eq!(
        value(
            &scheduler,
            "unigen_webhook_attempts_total",
            &[("outcome", "succeeded"), ("result", "success")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&scheduler, "unigen_webhook_oldest_pending_age_seconds", &[]),
        Some(0.0),
        "nothing is pending once delivered: {text}"
    );
    assert_bounded("scheduler", &scheduler, &secrets);
    promtool_accepts("scheduler", &text);
}
