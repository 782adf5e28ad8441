//! Traces (issue 37), captured by an in-memory span exporter installed
//! before the stack starts (nextest runs each test in its own process, so
//! each test sees its own spans only): a sync image request is one trace from
//! the API's SERVER span through RabbitMQ to the worker's GenAI CLIENT span
//! and the stored file; the webhook attempt is a trace of its own linked to
//! it; a client's `traceparent` parents the API span; content is recorded
//! only with the opt-in.

use std::time::Duration;

use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use serde_json::json;
use unigen_core::config::TelemetrySettings;
use unigen_core::telemetry::{self, Telemetry};
use unigen_tests::{TestApp, json_of};

use crate::webhooks::{eventually, receiver, register, requests_of};

/// Installs tracing with an in-memory exporter (before the stack starts).
fn traced(settings: TelemetrySettings) -> (InMemorySpanExporter, Telemetry) {
    let exporter = InMemorySpanExporter::default();
    let guard = telemetry::init_with_exporter("unigen-tests", &settings, exporter.clone());
    assert!(
        telemetry::enabled(),
        "another subscriber was installed first: run under nextest (one process per test)"
    );
    (exporter, guard)
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

fn required(span: &SpanData, key: &str) -> String {
    attr(span, key).unwrap_or_else(|| {
        panic!(
            "span `{}` lacks {key}: {:?}",
            span.name,
            span.attributes
                .iter()
                .map(|kv| kv.key.as_str())
                .collect::<Vec<_>>()
        )
    })
}

fn one<'a>(spans: &'a [SpanData], what: &str, test: impl Fn(&SpanData) -> bool) -> &'a SpanData {
    let found: Vec<&SpanData> = spans.iter().filter(|s| test(s)).collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {what} span, found {}: {:#?}",
        found.len(),
        spans
            .iter()
            .map(|s| (&s.name, s.span_kind.clone()))
            .collect::<Vec<_>>()
    );
    found[0]
}

/// Whether `ancestor` is `span`'s parent, grandparent, ... in the spans seen.
fn descends_from(spans: &[SpanData], span: &SpanData, ancestor: &SpanData) -> bool {
    let mut parent = span.parent_span_id;
    while parent != SpanId::INVALID {
        if parent == ancestor.span_context.span_id() {
            return true;
        }
        match spans.iter().find(|s| s.span_context.span_id() == parent) {
            Some(next) => parent = next.parent_span_id,
            None => return false,
        }
    }
    false
}

fn trace_id_of(traceparent: &str) -> TraceId {
    TraceId::from_hex(traceparent.split('-').nth(1).expect("a traceparent")).expect("hex")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_image_request_is_one_trace_from_the_api_through_rabbitmq_to_the_stored_file() {
    let (exporter, _telemetry) = traced(TelemetrySettings::default());
    let app = TestApp::spawn().await;
    let hooks = receiver(0, 200).await;
    register(&app, &hooks, &["generation.completed"]).await;

    let response = app
        .post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "a lighthouse at dusk", "size": "512x512"}),
        )
        .await;
    let traceparent = response
        .headers()
        .get("traceparent")
        .expect("every response carries traceparent")
        .to_str()
        .unwrap()
        .to_owned();
    let (status, _) = json_of(response).await;
    assert_eq!(status, 200);
    let delivered = requests_of(&hooks, 1).await;
    let envelope: serde_json::Value = serde_json::from_slice(&delivered[0].body).unwrap();
    let job_id = envelope["data"]["jobId"].as_str().unwrap().to_owned();
    let job = app.job(&job_id).await;

    // The webhook attempt's span ends once the attempt is recorded.
    let spans = eventually("the webhook attempt's span", || async {
        let spans = exporter.get_finished_spans().unwrap();
        spans
            .iter()
            .any(|s| s.span_kind == SpanKind::Client && attr(s, "unigen.webhook.id").is_some())
            .then_some(spans)
    })
    .await;

    // The API's SERVER span, named after its route, with the caller's ids.
    let server = one(&spans, "SERVER", |s| {
        s.span_kind == SpanKind::Server && s.name == "POST /api/v1/images/generations"
    });
    let trace = server.span_context.trace_id();
    assert_eq!(
        trace_id_of(&traceparent),
        trace,
        "the response names the trace"
    );
    assert!(
        traceparent.contains(&server.span_context.span_id().to_string()),
        "the response's traceparent names the SERVER span"
    );
    assert_eq!(required(server, "http.request.method"), "POST");
    assert_eq!(required(server, "http.route"), "/api/v1/images/generations");
    assert_eq!(required(server, "http.response.status_code"), "200");
    assert_eq!(required(server, "unigen.org.id"), app.org_id.to_string());
    required(server, "unigen.api_key.id");
    assert!(required(server, "unigen.request.id").starts_with("req_"));
    assert_eq!(
        job["traceId"],
        trace.to_string(),
        "the job JSON carries traceId"
    );

    // PRODUCER: publish {exchange}:{routing key}, under the SERVER span.
    let exchange = format!("{}unigen.jobs", app.settings.rabbitmq.prefix);
    let producer = one(&spans, "PRODUCER", |s| {
        s.span_kind == SpanKind::Producer && s.span_context.trace_id() == trace
    });
    assert_eq!(producer.name, format!("publish {exchange}:image"));
    assert_eq!(producer.parent_span_id, server.span_context.span_id());
    assert_eq!(required(producer, "messaging.system"), "rabbitmq");
    assert_eq!(required(producer, "messaging.destination.name"), exchange);
    assert_eq!(
        required(producer, "messaging.rabbitmq.destination.routing_key"),
        "image"
    );
    assert_eq!(required(producer, "messaging.message.id"), job_id);

    // CONSUMER: process {queue}, parented on the message's context, linked to it.
    let queue = format!("{}jobs.image", app.settings.rabbitmq.prefix);
    let consumer = one(&spans, "CONSUMER", |s| {
        s.span_kind == SpanKind::Consumer && s.span_context.trace_id() == trace
    });
    assert_eq!(consumer.name, format!("process {queue}"));
    assert_eq!(consumer.parent_span_id, producer.span_context.span_id());
    assert!(consumer.parent_span_is_remote, "the parent came over AMQP");
    assert!(
        consumer
            .links
            .iter()
            .any(|link| link.span_context.span_id() == producer.span_context.span_id()),
        "the CONSUMER span links the creation context"
    );
    assert_eq!(required(consumer, "unigen.job.id"), job_id);
    assert_eq!(required(consumer, "unigen.job.attempt"), "1");
    assert_eq!(required(consumer, "messaging.system"), "rabbitmq");

    // GenAI CLIENT: {operation} {model}, under the CONSUMER span.
    let gen_ai = one(&spans, "GenAI CLIENT", |s| {
        s.span_kind == SpanKind::Client && s.span_context.trace_id() == trace
    });
    assert_eq!(gen_ai.name, "generate_content local/procedural-v1");
    assert!(descends_from(&spans, gen_ai, consumer));
    assert_eq!(
        required(gen_ai, "gen_ai.operation.name"),
        "generate_content"
    );
    assert_eq!(required(gen_ai, "gen_ai.provider.name"), "unigen.local");
    assert_eq!(
        required(gen_ai, "gen_ai.request.model"),
        "local/procedural-v1"
    );
    assert_eq!(
        required(gen_ai, "gen_ai.response.model"),
        "local/procedural-v1"
    );
    assert_eq!(required(gen_ai, "gen_ai.output.type"), "image");
    assert_eq!(required(gen_ai, "gen_ai.request.stream"), "false");
    assert!(attr(gen_ai, "error.type").is_none());

    // Storing the output, after the provider call, in the same job.
    let stored = one(&spans, "storage", |s| {
        s.name == "store output" && s.span_context.trace_id() == trace
    });
    assert!(descends_from(&spans, stored, consumer));
    assert!(stored.start_time >= gen_ai.end_time);
    assert_eq!(required(stored, "unigen.file.name"), "0.png");

    // No content without the opt-in, and never the key.
    for span in &spans {
        for kv in &span.attributes {
            assert!(
                !kv.key.as_str().starts_with("gen_ai.input")
                    && !kv.key.as_str().starts_with("gen_ai.output.messages"),
                "content attribute {} without the opt-in",
                kv.key
            );
            assert!(
                !kv.value.as_str().contains(&app.key),
                "the key on span {}",
                span.name
            );
            assert!(
                !kv.value.as_str().contains("lighthouse"),
                "prompt text on {}",
                span.name
            );
        }
    }

    // The webhook attempt: a CLIENT span of its own trace, linked to the job's.
    let webhook = one(&spans, "webhook CLIENT", |s| {
        s.span_kind == SpanKind::Client && attr(s, "unigen.webhook.id").is_some()
    });
    assert_eq!(webhook.name, "POST");
    assert_ne!(webhook.span_context.trace_id(), trace);
    assert!(
        webhook
            .links
            .iter()
            .any(|link| link.span_context.trace_id() == trace
                && link.span_context.span_id() == producer.span_context.span_id()),
        "the webhook attempt links the job's trace"
    );
    assert_eq!(required(webhook, "http.response.status_code"), "200");
    assert_eq!(required(webhook, "server.address"), "127.0.0.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_traceparent_is_the_parent_of_the_api_span() {
    let (exporter, _telemetry) = traced(TelemetrySettings::default());
    let app = TestApp::spawn().await;
    let (trace, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let response = app
        .client
        .get(app.url("/api/v1/jobs"))
        .bearer_auth(&app.key)
        .header("traceparent", format!("00-{trace}-{parent}-01"))
        .header("tracestate", "vendor=opaque")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answered = response.headers()["traceparent"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(trace_id_of(&answered).to_string(), trace);
    assert!(
        !answered.contains(parent),
        "the response names the API span"
    );
    let spans = eventually("the SERVER span", || async {
        let spans = exporter.get_finished_spans().unwrap();
        spans
            .iter()
            .any(|s| s.span_kind == SpanKind::Server && s.name == "GET /api/v1/jobs")
            .then_some(spans)
    })
    .await;
    let server = one(&spans, "SERVER", |s| {
        s.span_kind == SpanKind::Server && s.name == "GET /api/v1/jobs"
    });
    assert_eq!(server.span_context.trace_id().to_string(), trace);
    assert_eq!(server.parent_span_id.to_string(), parent);
    assert!(server.parent_span_is_remote);
    assert_eq!(
        server.span_context.trace_state().header(),
        "vendor=opaque",
        "tracestate is kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_are_recorded_only_with_the_content_opt_in() {
    let (exporter, _telemetry) = traced(TelemetrySettings {
        record_content: true,
        ..TelemetrySettings::default()
    });
    let app = TestApp::spawn().await;
    let id = app
        .submit_image_async(&json!({"prompt": "a lighthouse at dusk", "size": "512x512"}))
        .await;
    let job = app.wait_for_job(&id, Duration::from_secs(60)).await;
    assert_eq!(job["status"], "completed", "{job}");
    let spans = eventually("the GenAI span", || async {
        let spans = exporter.get_finished_spans().unwrap();
        spans
            .iter()
            .any(|s| s.name.starts_with("generate_content "))
            .then_some(spans)
    })
    .await;
    let gen_ai = one(&spans, "GenAI CLIENT", |s| {
        s.name.starts_with("generate_content ")
    });
    let messages: serde_json::Value =
        serde_json::from_str(&required(gen_ai, "gen_ai.input.messages")).unwrap();
    assert_eq!(
        messages[0]["parts"][0]["content"], "a lighthouse at dusk",
        "{messages}"
    );
    assert_eq!(
        job["traceId"],
        gen_ai.span_context.trace_id().to_string(),
        "an async job's traceId names the trace of its request"
    );
}

/// One exported span: its service and what the checks read.
struct Exported {
    service: String,
    name: String,
    kind: i32,
    trace_id: Vec<u8>,
    links: Vec<Vec<u8>>,
}

/// Every span of every OTLP/HTTP request the receiver got.
async fn exported(receiver: &wiremock::MockServer) -> Vec<Exported> {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use prost::Message;
    let mut spans = Vec::new();
    for request in receiver.received_requests().await.unwrap_or_default() {
        assert_eq!(request.url.path(), "/v1/traces");
        assert_eq!(request.headers["content-type"], "application/x-protobuf");
        let batch =
            ExportTraceServiceRequest::decode(request.body.as_slice()).expect("OTLP protobuf");
        for resource in batch.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                .map(|v| match v {
                    Value::StringValue(s) => s.clone(),
                    other => format!("{other:?}"),
                })
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    spans.push(Exported {
                        service: service.clone(),
                        name: span.name,
                        kind: span.kind,
                        trace_id: span.trace_id,
                        links: span.links.into_iter().map(|l| l.trace_id).collect(),
                    });
                }
            }
        }
    }
    spans
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_otlp_receiver_gets_one_trace_from_the_api_request_to_the_worker_s_provider_span() {
    use opentelemetry_proto::tonic::trace::v1::span::SpanKind as Kind;
    const STACK: &str = env!("CARGO_BIN_EXE_unigen-stack");
    let collector = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(200))
        .mount(&collector)
        .await;
    let settings = TelemetrySettings {
        enabled: true,
        endpoint: collector.uri(),
        ..TelemetrySettings::default()
    };
    // The production path: batched OTLP/HTTP export from each binary.
    let api_telemetry = telemetry::init("unigen-api", &settings);
    assert!(telemetry::enabled());
    let for_components = settings.clone();
    let app = TestApp::spawn_with(
        unigen_tests::TestOptions::default()
            .without_worker()
            .without_scheduler()
            .configure(move |s| s.telemetry = for_components),
    )
    .await;
    let mut worker = app.spawn_process(STACK, "worker", |_| {});
    let mut scheduler = app.spawn_process(STACK, "scheduler", |_| {});
    let hooks = receiver(0, 200).await;
    register(&app, &hooks, &["generation.completed"]).await;
    let response = app
        .post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "a lighthouse at dusk", "size": "512x512"}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let trace = trace_id_of(response.headers()["traceparent"].to_str().unwrap());
    requests_of(&hooks, 1).await;
    // A stopping binary flushes what it holds.
    worker.terminate(Duration::from_secs(20)).await;
    scheduler.terminate(Duration::from_secs(20)).await;
    api_telemetry.flush();

    let spans = exported(&collector).await;
    let trace = trace.to_bytes().to_vec();
    let find = |service: &str, kind: Kind, name: &dyn Fn(&str) -> bool| {
        spans
            .iter()
            .find(|s| s.service == service && s.kind == kind as i32 && name(&s.name))
    };
    let server = find("unigen-api", Kind::Server, &|n| {
        n == "POST /api/v1/images/generations"
    })
    .expect("the API's SERVER span");
    assert_eq!(server.trace_id, trace);
    let producer = find("unigen-api", Kind::Producer, &|n| n.starts_with("publish "))
        .expect("the API's PRODUCER span");
    assert_eq!(producer.trace_id, trace);
    let consumer = find("unigen-worker", Kind::Consumer, &|n| {
        n.starts_with("process ")
    })
    .expect("the worker's CONSUMER span");
    assert_eq!(consumer.trace_id, trace, "one trace id across RabbitMQ");
    let provider = find("unigen-worker", Kind::Client, &|n| {
        n == "generate_content local/procedural-v1"
    })
    .expect("the worker's provider span");
    assert_eq!(
        provider.trace_id, trace,
        "one trace id to the provider span"
    );
    let webhook = find("unigen-scheduler", Kind::Client, &|n| n == "POST")
        .expect("the scheduler's webhook attempt");
    assert!(webhook.links.contains(&trace), "linked to the job's trace");
}

/// No content attribute on any span, nor `text` in any value.
fn assert_no_content(spans: &[SpanData], text: &str) {
    for span in spans {
        for kv in &span.attributes {
            let key = kv.key.as_str();
            assert!(
                !key.starts_with("gen_ai.input")
                    && !key.starts_with("gen_ai.output.messages")
                    && !key.starts_with("gen_ai.tool.call.arguments")
                    && !key.starts_with("gen_ai.tool.call.result"),
                "content attribute {key} on {} without the opt-in",
                span.name
            );
            assert!(
                !kv.value.as_str().contains(text),
                "content on {}: {key}",
                span.name
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_chat_is_a_server_span_with_a_gen_ai_client_span_per_upstream_attempt() {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let (exporter, _telemetry) = traced(TelemetrySettings::default());
    // The model's upstream is down (retried, then given up on); its
    // fallback streams.
    let dead = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503).insert_header("retry-after", "0"))
        .mount(&dead)
        .await;
    let live = MockServer::start().await;
    let chunk = |extra: serde_json::Value| {
        let mut chunk = json!({"id": "chatcmpl-up", "object": "chat.completion.chunk",
            "created": 1, "model": "gpt-upstream-0125"});
        chunk
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        format!("data: {chunk}\n\n")
    };
    let mut sse = String::new();
    sse += &chunk(
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Sunny"}, "finish_reason": null}]}),
    );
    sse += &chunk(
        json!({"choices": [{"index": 0, "delta": {"content": " skies."}, "finish_reason": "stop"}]}),
    );
    sse += &chunk(
        json!({"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29}}),
    );
    sse += "data: [DONE]\n\n";
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "text/event-stream")
                .set_body_string(sse),
        )
        .mount(&live)
        .await;
    let (dead_url, live_url) = (dead.uri(), live.uri());
    let app = TestApp::spawn_with(
        unigen_tests::TestOptions::default()
            .without_worker()
            .configure(move |s| {
                s.upstreams
                    .insert("dead".into(), unigen_tests::fake_upstream(&dead_url));
                s.upstreams
                    .insert("live".into(), unigen_tests::fake_upstream(&live_url));
                s.models.push(unigen_tests::fake_chat_model(
                    "acme/gpt",
                    "dead",
                    vec!["live".into()],
                ));
            }),
    )
    .await;

    let response = app
        .post_json(
            "/api/v1/chat/completions",
            &app.key,
            &json!({"model": "acme/gpt", "stream": true,
                    "messages": [{"role": "user", "content": "Weather in Paris?"}]}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let traceparent = response.headers()["traceparent"]
        .to_str()
        .unwrap()
        .to_owned();
    let body = response.text().await.unwrap();
    assert!(
        body.contains("Sunny") && body.ends_with("data: [DONE]\n\n"),
        "{body}"
    );

    // The streaming attempt's span ends with the stream.
    let spans = eventually("both attempts' spans", || async {
        let spans = exporter.get_finished_spans().unwrap();
        (spans
            .iter()
            .filter(|s| s.span_kind == SpanKind::Client)
            .count()
            >= 2
            && spans.iter().any(|s| s.span_kind == SpanKind::Server))
        .then_some(spans)
    })
    .await;
    let server = one(&spans, "SERVER", |s| {
        s.span_kind == SpanKind::Server && s.name == "POST /api/v1/chat/completions"
    });
    assert_eq!(server.span_context.trace_id(), trace_id_of(&traceparent));
    let mut attempts: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.span_kind == SpanKind::Client)
        .collect();
    assert_eq!(attempts.len(), 2, "one CLIENT span per upstream attempt");
    attempts.sort_by_key(|s| s.start_time);
    let (failed, served) = (attempts[0], attempts[1]);
    for attempt in [failed, served] {
        assert_eq!(attempt.name, "chat gpt-upstream");
        assert!(
            descends_from(&spans, attempt, server),
            "under the SERVER span"
        );
        assert_eq!(required(attempt, "gen_ai.operation.name"), "chat");
        assert_eq!(required(attempt, "gen_ai.provider.name"), "openai");
        assert_eq!(required(attempt, "gen_ai.request.model"), "gpt-upstream");
        assert_eq!(required(attempt, "gen_ai.request.stream"), "true");
        assert_eq!(required(attempt, "gen_ai.output.type"), "text");
        assert_eq!(required(attempt, "server.address"), "127.0.0.1");
    }
    // The failed attempt, its retries as events, then the fallback that answered.
    assert_eq!(required(failed, "error.type"), "transient");
    assert_eq!(
        failed
            .events
            .iter()
            .filter(|event| event.name == "retry")
            .count(),
        3,
        "each retry is an event of the attempt's span"
    );
    assert!(failed.end_time <= served.start_time);
    assert!(attr(served, "error.type").is_none());
    assert_eq!(
        required(served, "gen_ai.response.model"),
        "gpt-upstream-0125"
    );
    assert_eq!(required(served, "gen_ai.response.id"), "chatcmpl-up");
    assert_eq!(required(served, "gen_ai.usage.input_tokens"), "20");
    assert_eq!(required(served, "gen_ai.usage.output_tokens"), "9");
    let first_chunk: f64 = required(served, "unigen.gen_ai.time_to_first_chunk")
        .parse()
        .expect("seconds");
    let lasted = served
        .end_time
        .duration_since(served.start_time)
        .unwrap()
        .as_secs_f64();
    assert!(
        (0.0..=lasted).contains(&first_chunk),
        "first chunk after {first_chunk} s of {lasted} s"
    );
    assert!(
        served
            .events
            .iter()
            .any(|event| event.name == "gen_ai.first_chunk"),
        "the first chunk is an event too"
    );
    assert!(attr(failed, "unigen.gen_ai.time_to_first_chunk").is_none());

    // No prompt or completion without the opt-in, and never the key.
    assert_no_content(&spans, "Weather in Paris");
    assert_no_content(&spans, "Sunny");
    assert_no_content(&spans, &app.key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_run_is_an_invoke_agent_span_with_an_execute_tool_span_per_tool_call() {
    let (exporter, _telemetry) = traced(TelemetrySettings::default());
    let app = TestApp::spawn_with(unigen_tests::TestOptions::default().without_worker()).await;
    let (status, created) = json_of(
        app.post_json(
            "/api/v1/agents",
            &app.key,
            &json!({"name": "Charter", "system_prompt": "Draw what is asked.", "tools": ["generate_chart"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let agent = created["agent"]["id"].as_str().unwrap().to_owned();
    let chart = json!({"kind": "line", "labels": ["Jan", "Feb"],
                       "series": [{"name": "lighthouses", "values": [1, 2]}]});
    let response = app
        .post_json(
            &format!("/api/v1/agents/{agent}/run"),
            &app.key,
            &json!({"input": format!("Draw the lighthouses\n@tool generate_chart {chart}")}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    assert!(body.contains("\"done\""), "the run completed: {body}");

    let spans = eventually("the invoke_agent span", || async {
        let spans = exporter.get_finished_spans().unwrap();
        spans
            .iter()
            .any(|s| s.name == "invoke_agent Charter")
            .then_some(spans)
    })
    .await;
    let server = one(&spans, "SERVER", |s| {
        s.span_kind == SpanKind::Server && s.name.starts_with("POST /api/v1/agents/")
    });
    let invoke = one(&spans, "invoke_agent", |s| s.name == "invoke_agent Charter");
    assert_eq!(
        invoke.span_kind,
        SpanKind::Internal,
        "the agent runs in-process"
    );
    assert!(
        descends_from(&spans, invoke, server),
        "under the request's span"
    );
    assert_eq!(required(invoke, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(required(invoke, "gen_ai.agent.name"), "Charter");
    assert_eq!(required(invoke, "gen_ai.agent.id"), agent);
    assert_eq!(required(invoke, "gen_ai.provider.name"), "unigen.local");
    required(invoke, "gen_ai.request.model");
    required(invoke, "unigen.agent_run.id");
    assert!(
        required(invoke, "gen_ai.usage.input_tokens")
            .parse::<i64>()
            .unwrap()
            > 0
    );
    assert!(attr(invoke, "error.type").is_none());

    // One execute_tool span per tool call, inside the run.
    let tool = one(&spans, "execute_tool", |s| {
        s.name.starts_with("execute_tool ")
    });
    assert_eq!(tool.name, "execute_tool generate_chart");
    assert!(descends_from(&spans, tool, invoke));
    assert_eq!(required(tool, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(required(tool, "gen_ai.tool.name"), "generate_chart");
    assert_eq!(required(tool, "gen_ai.tool.type"), "function");
    assert!(!required(tool, "gen_ai.tool.call.id").is_empty());
    assert!(attr(tool, "error.type").is_none());

    // The model's turns: a chat CLIENT span each, before and after the tool.
    let mut turns: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.span_kind == SpanKind::Client && s.name.starts_with("chat "))
        .collect();
    turns.sort_by_key(|s| s.start_time);
    assert_eq!(turns.len(), 2, "the tool call's turn and the answer's");
    for turn in &turns {
        assert!(descends_from(&spans, turn, invoke));
        assert_eq!(required(turn, "gen_ai.operation.name"), "chat");
        assert_eq!(required(turn, "gen_ai.provider.name"), "unigen.local");
    }
    assert!(turns[0].end_time <= tool.start_time && tool.end_time <= turns[1].start_time);

    // Neither the input, nor the tool's arguments and result, without the opt-in.
    assert_no_content(&spans, "lighthouses");
    assert_no_content(&spans, &app.key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_s_arguments_and_result_are_recorded_only_with_the_content_opt_in() {
    let (exporter, _telemetry) = traced(TelemetrySettings {
        record_content: true,
        ..TelemetrySettings::default()
    });
    let app = TestApp::spawn_with(unigen_tests::TestOptions::default().without_worker()).await;
    let (status, created) = json_of(
        app.post_json(
            "/api/v1/agents",
            &app.key,
            &json!({"name": "Charter", "system_prompt": "x", "tools": ["generate_chart"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let agent = created["agent"]["id"].as_str().unwrap().to_owned();
    let chart = json!({"kind": "line", "labels": ["a", "b"],
                       "series": [{"name": "lighthouses", "values": [1, 2]}]});
    let response = app
        .post_json(
            &format!("/api/v1/agents/{agent}/run"),
            &app.key,
            &json!({"input": format!("Draw\n@tool generate_chart {chart}")}),
        )
        .await;
    assert_eq!(response.status(), 200);
    response.text().await.unwrap();
    let spans = eventually("the execute_tool span", || async {
        let spans = exporter.get_finished_spans().unwrap();
        spans
            .iter()
            .any(|s| s.name == "execute_tool generate_chart")
            .then_some(spans)
    })
    .await;
    let tool = one(&spans, "execute_tool", |s| {
        s.name == "execute_tool generate_chart"
    });
    let arguments: serde_json::Value =
        serde_json::from_str(&required(tool, "gen_ai.tool.call.arguments")).unwrap();
    assert_eq!(arguments["series"][0]["name"], "lighthouses");
    let result: serde_json::Value =
        serde_json::from_str(&required(tool, "gen_ai.tool.call.result")).unwrap();
    assert!(result["url"].is_string(), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_knowledge_file_is_processed_in_a_consumer_span_under_its_upload_s_trace() {
    let (exporter, _telemetry) = traced(TelemetrySettings::default());
    let app = TestApp::spawn().await;
    let (status, agent) = json_of(
        app.post_json(
            "/api/v1/agents",
            &app.key,
            &json!({"name": "librarian", "system_prompt": "Answer from the knowledge base."}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    let agent = agent["agent"]["id"].as_str().unwrap().to_owned();
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(b"Lighthouses guide ships at night.".to_vec())
            .file_name("notes.txt"),
    );
    let (status, file) = json_of(
        app.client
            .post(app.url(&format!("/api/v1/agents/{agent}/knowledge")))
            .bearer_auth(&app.key)
            .multipart(form)
            .send()
            .await
            .expect("POST knowledge"),
    )
    .await;
    assert_eq!(status, 201, "{file}");

    let consumer_name = format!("process {}jobs.knowledge", app.settings.rabbitmq.prefix);
    let spans = eventually("the knowledge file's consumer span", || async {
        let spans = exporter.get_finished_spans().unwrap();
        spans
            .iter()
            .any(|s| s.span_kind == SpanKind::Consumer && s.name.ends_with(".knowledge"))
            .then_some(spans)
    })
    .await;
    let consumer = one(&spans, "knowledge CONSUMER", |s| {
        s.span_kind == SpanKind::Consumer && s.name.ends_with(".knowledge")
    });
    assert_eq!(consumer.name, consumer_name);
    assert_eq!(required(consumer, "messaging.system"), "rabbitmq");
    assert_eq!(
        required(consumer, "messaging.rabbitmq.destination.routing_key"),
        "knowledge"
    );
    let producer = one(&spans, "knowledge PRODUCER", |s| {
        s.span_kind == SpanKind::Producer && s.name.ends_with(":knowledge")
    });
    let server = one(&spans, "upload SERVER", |s| {
        s.span_kind == SpanKind::Server && s.name == "POST /api/v1/agents/{id}/knowledge"
    });
    assert!(descends_from(&spans, producer, server), "{producer:#?}");
    assert!(descends_from(&spans, consumer, producer), "{consumer:#?}");
    assert!(
        consumer
            .links
            .iter()
            .any(|l| l.span_context.span_id() == producer.span_context.span_id()),
        "the consumer links the message's creation context"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_messages_api_s_upstream_calls_are_gen_ai_client_spans_plain_and_streamed() {
    let (exporter, _telemetry) = traced(TelemetrySettings::default());
    let fake = crate::anthropic_messages::fake_anthropic().await;
    let app = crate::anthropic_messages::stack(&fake).await;
    for stream in [false, true] {
        let response = app
            .client
            .post(app.url("/v1/messages"))
            .header("x-api-key", &app.key)
            .header("anthropic-version", "2023-06-01")
            .json(&json!({
                "model": crate::anthropic_messages::CLAUDE, "max_tokens": 64, "stream": stream,
                "messages": [{"role": "user", "content": "Hello there"}],
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let _ = response.text().await.unwrap();
    }
    let spans = eventually("both Messages calls' spans", || async {
        let spans = exporter.get_finished_spans().unwrap();
        (spans
            .iter()
            .filter(|s| s.span_kind == SpanKind::Server && s.name == "POST /v1/messages")
            .count()
            == 2)
            .then_some(spans)
    })
    .await;
    for stream in ["false", "true"] {
        let client = one(&spans, "Messages CLIENT", |s| {
            s.span_kind == SpanKind::Client
                && attr(s, "gen_ai.request.stream").as_deref() == Some(stream)
        });
        assert_eq!(client.name, "chat claude-sonnet-4-5-20250929");
        assert_eq!(required(client, "gen_ai.operation.name"), "chat");
        assert_eq!(required(client, "gen_ai.provider.name"), "anthropic");
        assert_eq!(required(client, "server.address"), "127.0.0.1");
        assert!(required(client, "gen_ai.response.id").starts_with("msg_"));
        assert!(
            required(client, "gen_ai.usage.input_tokens")
                .parse::<i64>()
                .unwrap()
                > 0
        );
        assert!(
            required(client, "gen_ai.usage.output_tokens")
                .parse::<i64>()
                .unwrap()
                > 0
        );
        let server = spans
            .iter()
            .find(|s| s.span_kind == SpanKind::Server && descends_from(&spans, client, s))
            .expect("under its request's SERVER span");
        assert_eq!(server.name, "POST /v1/messages");
        assert!(
            attr(client, "gen_ai.input.messages").is_none(),
            "no content"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_music_job_s_provider_call_is_a_generate_content_span_with_its_output_type() {
    let (exporter, _telemetry) = traced(TelemetrySettings::default());
    let app = TestApp::spawn().await;
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/music/generations",
            &app.key,
            &json!({"prompt": "ambient pad", "duration_seconds": 2}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 202, "music is asynchronous: {body}");
    // The CONSUMER span ends after the job's GenAI span.
    let spans = eventually("the music job's spans", || async {
        let spans = exporter.get_finished_spans().unwrap();
        spans
            .iter()
            .any(|s| s.span_kind == SpanKind::Consumer && s.name.ends_with("jobs.music"))
            .then_some(spans)
    })
    .await;
    let client = one(&spans, "music CLIENT", |s| {
        attr(s, "gen_ai.output.type").as_deref() == Some("audio")
    });
    assert_eq!(client.span_kind, SpanKind::Client);
    assert_eq!(
        required(client, "gen_ai.operation.name"),
        "generate_content"
    );
    let model = required(client, "gen_ai.request.model");
    assert_eq!(client.name, format!("generate_content {model}"));
    assert_eq!(required(client, "gen_ai.provider.name"), "unigen.local");
    let consumer = one(&spans, "music CONSUMER", |s| {
        s.span_kind == SpanKind::Consumer && s.name.ends_with("jobs.music")
    });
    assert!(descends_from(&spans, client, consumer), "{client:#?}");
    assert!(
        attr(client, "gen_ai.input.messages").is_none(),
        "no content"
    );
}
