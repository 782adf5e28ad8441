//! Agent runs: the streamed loop with every tool, max_iterations, memory,
//! the loop against an OpenAI upstream returning real `tool_calls`, a client
//! that disconnects, metering and plan limits, validation, abandoned runs.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, fake_chat_model, fake_upstream, json_of};
use wiremock::matchers::{body_string_contains, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A test org on `plan` with an all-scopes key.
async fn org_with_key(app: &TestApp, plan: &str) -> (uuid::Uuid, String) {
    let org = app.create_org(&format!("{plan} org"), plan).await;
    let key = app.create_key(org, &["all"], None).await;
    (org, key)
}

async fn create_agent(app: &TestApp, key: &str, body: Value) -> String {
    let (status, created) = json_of(app.post_json("/api/v1/agents", key, &body).await).await;
    assert_eq!(status, 201, "{created}");
    created["agent"]["id"].as_str().unwrap().to_owned()
}

/// Runs the agent and reads the whole stream: `(status, events)`; an error
/// answered before the stream is `(status, [error body])`.
async fn run(app: &TestApp, key: &str, agent: &str, body: Value) -> (u16, Vec<Value>) {
    let response = app
        .post_json(&format!("/api/v1/agents/{agent}/run"), key, &body)
        .await;
    let status = response.status().as_u16();
    if status != 200 {
        let (_, error) = json_of(response).await;
        return (status, vec![error]);
    }
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "a run answers with server-sent events"
    );
    let text = response.text().await.unwrap();
    let events = text
        .split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    (status, events)
}

/// `type` of each event, and of each step as `step:<type>`.
fn shape(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e["type"].as_str().unwrap() {
            "step" => format!("step:{}", e["step"]["type"].as_str().unwrap()),
            other => other.to_owned(),
        })
        .collect()
}

fn steps_of<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == "step" && e["step"]["type"] == kind)
        .map(|e| &e["step"])
        .collect()
}

async fn get_run(app: &TestApp, key: &str, agent: &str, run: &str) -> Value {
    let (status, body) = json_of(
        app.get(&format!("/api/v1/agents/{agent}/runs/{run}"), key)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["run"].clone()
}

/// Credits the ledger charged for request `id` (consumption and overage).
async fn charged(app: &TestApp, id: &str) -> i64 {
    app.db
        .scalar_i64(&format!(
            "SELECT COALESCE(-sum(amount), 0)::bigint FROM credit_transactions \
              WHERE metadata->>'request_id' = '{id}' AND type IN ('consumption', 'overage')"
        ))
        .await
}

async fn agent_runs_used_milli(app: &TestApp, org: uuid::Uuid) -> i64 {
    app.db
        .scalar_i64(&format!(
            "SELECT COALESCE(sum(used_milli), 0)::bigint FROM quota_usage \
              WHERE org_id = '{org}' AND bucket = 'agent_runs'"
        ))
        .await
}

fn png(width: u32, height: u32) -> Vec<u8> {
    crate::media::png_of(&image::RgbImage::from_fn(width, height, |x, _| {
        if x < width / 2 {
            image::Rgb([220, 30, 30])
        } else {
            image::Rgb([30, 30, 220])
        }
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_calls_every_tool_and_streams_each_step_as_it_happens() {
    let web = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/search"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"query": "rust async", "results": [
            {"title": "Tokio", "url": "https://tokio.rs/", "content": "An asynchronous runtime for Rust."}
        ]})))
        .mount(&web)
        .await;
    Mock::given(method("GET"))
        .and(path("/article"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            "<html><head><title>Async Rust</title><style>p{color:red}</style></head>\
             <body><h1>Async Rust</h1><p>Futures are lazy: they do nothing until polled.</p>\
             <script>alert('x')</script></body></html>",
            "text/html; charset=utf-8",
        ))
        .mount(&web)
        .await;
    Mock::given(method("GET"))
        .and(path("/photo.png"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "image/png")
                .set_body_bytes(png(64, 32)),
        )
        .mount(&web)
        .await;
    let searx = web.uri();
    let app = TestApp::spawn_with(TestOptions::default().configure(move |s| {
        s.search.backend = "searxng".into();
        s.search.url = Some(searx);
    }))
    .await;
    // Business: all seven tools on one agent.
    let (org, key) = org_with_key(&app, "business").await;
    let tools = [
        "web_search",
        "web_fetch",
        "generate_text",
        "generate_image",
        "analyze_image",
        "generate_chart",
        "create_document",
    ];
    let agent = create_agent(
        &app,
        &key,
        json!({"name": "Researcher", "system_prompt": "You research and report.", "tools": tools}),
    )
    .await;
    let chart = json!({"kind": "bar", "title": "Sales", "labels": ["Q1", "Q2", "Q3"],
                       "series": [{"name": "2026", "values": [3, 5, 4]}]});
    let document =
        json!({"format": "pdf", "title": "Findings", "content": "# Findings\n\nFutures are lazy."});
    let input = [
        "Research async Rust and report.".to_owned(),
        format!("@tool web_search {}", json!({"query": "rust async"})),
        format!(
            "@tool web_fetch {}",
            json!({"url": format!("{}/article", web.uri())})
        ),
        format!(
            "@tool generate_text {}",
            json!({"prompt": "One line on futures."})
        ),
        format!(
            "@tool generate_image {}",
            json!({"prompt": "a crab holding a clock", "size": "512x512"})
        ),
        format!(
            "@tool analyze_image {}",
            json!({"image_url": format!("{}/photo.png", web.uri()), "question": "What colours?"})
        ),
        format!("@tool generate_chart {chart}"),
        format!("@tool create_document {document}"),
    ]
    .join("\n");

    let (status, events) = run(&app, &key, &agent, json!({"input": input})).await;
    assert_eq!(status, 200, "{events:?}");
    let mut expected = vec!["start".to_owned()];
    for _ in tools {
        expected.push("step:tool_call".into());
        expected.push("step:tool_result".into());
    }
    expected.extend(["step:response".into(), "done".into()]);
    assert_eq!(shape(&events), expected, "{events:#?}");
    let run_id = events[0]["run_id"].as_str().unwrap().to_owned();
    assert!(events.iter().all(|e| e["run_id"] == run_id.as_str()));
    assert!(
        events[0]["session_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    let numbers: Vec<i64> = events
        .iter()
        .filter_map(|e| e["step"]["step_number"].as_i64())
        .collect();
    assert_eq!(numbers, (1..=15).collect::<Vec<_>>());

    let calls = steps_of(&events, "tool_call");
    let results = steps_of(&events, "tool_result");
    for ((call, result), tool) in calls.iter().zip(&results).zip(tools) {
        assert_eq!(
            (call["tool"].as_str(), result["tool"].as_str()),
            (Some(tool), Some(tool))
        );
        assert!(call["tool_input"].is_object(), "{call}");
        assert!(
            result["tool_output"].get("error").is_none(),
            "{tool}: {result}"
        );
    }
    assert_eq!(calls[0]["tool_input"], json!({"query": "rust async"}));
    let output = |i: usize| &results[i]["tool_output"];
    assert_eq!(output(0)["results"][0]["url"], "https://tokio.rs/");
    let page = output(1)["content"].as_str().unwrap();
    assert!(page.contains("Futures are lazy"), "{page}");
    assert!(
        !page.contains("alert") && !page.contains("color:red"),
        "{page}"
    );
    assert!(output(2)["text"].as_str().is_some_and(|t| !t.is_empty()));
    let image_url = output(3)["images"][0]["url"].as_str().unwrap();
    let image = image::load_from_memory(&app.download(image_url).await.bytes().await.unwrap())
        .expect("the generated image is a real image");
    assert_eq!((image.width(), image.height()), (512, 512));
    assert_eq!(
        (output(4)["width"].as_u64(), output(4)["height"].as_u64()),
        (Some(64), Some(32))
    );
    let chart_png = app
        .download(output(5)["url"].as_str().unwrap())
        .await
        .bytes()
        .await
        .unwrap();
    assert!(
        image::load_from_memory(&chart_png).is_ok(),
        "the chart is a real PNG"
    );
    let pdf = app
        .download(output(6)["url"].as_str().unwrap())
        .await
        .bytes()
        .await
        .unwrap();
    assert!(pdf.starts_with(b"%PDF"), "the document is a real PDF");

    // The final answer, the totals, and what the ledger charged agree.
    let done = events.last().unwrap();
    let answer = steps_of(&events, "response")[0]["content"]
        .as_str()
        .unwrap();
    assert_eq!(done["output"], answer);
    assert!(
        answer.starts_with("Research async Rust and report."),
        "{answer}"
    );
    let tool_credits = 5 + 3 + 15 + 5 + 2 + 3;
    let credits = done["credits_used"].as_i64().unwrap();
    assert!(
        credits > 2 + tool_credits,
        "base, tools and tokens: {credits}"
    );
    assert_eq!(charged(&app, &run_id).await, credits);
    assert_eq!(
        agent_runs_used_milli(&app, org).await,
        1000,
        "one agent run"
    );
    let tokens = done["tokens_used"].as_i64().unwrap();
    assert!(tokens > 0);

    let stored = get_run(&app, &key, &agent, &run_id).await;
    assert_eq!(stored["status"], "completed");
    assert_eq!(stored["output"], answer);
    assert_eq!(stored["total_steps"], 15);
    assert_eq!(
        (
            stored["credits_used"].as_i64(),
            stored["tokens_used"].as_i64()
        ),
        (Some(credits), Some(tokens))
    );
    let stored_steps = stored["steps"].as_array().unwrap();
    assert_eq!(stored_steps.len(), 15);
    assert_eq!(stored_steps[1]["step_type"], "tool_result");
    assert_eq!(stored_steps[1]["tool_name"], "web_search");
    assert_eq!(stored_steps[1]["tool_output"], *output(0));

    // The image was a job of the pipeline: it counts one image and no credits
    // of its own (the run charged the tool's 15).
    let job = output(3)["job_id"].as_str().unwrap();
    assert_eq!(
        app.db
            .scalar_i64(&format!(
                "SELECT estimated_credits FROM jobs WHERE id = '{job}'"
            ))
            .await,
        0
    );
    assert_eq!(charged(&app, job).await, 0);

    let (_, agent_view) = json_of(app.get(&format!("/api/v1/agents/{agent}"), &key).await).await;
    assert_eq!(agent_view["agent"]["run_count"], 1);
    let events = app.events().await;
    let started = events
        .iter()
        .find(|(kind, _)| kind == "agent.run.started")
        .unwrap();
    assert_eq!(started.1["runId"], run_id.as_str());
    assert_eq!(started.1["agentName"], "Researcher");
    let completed = events
        .iter()
        .find(|(kind, _)| kind == "agent.run.completed")
        .unwrap();
    assert_eq!(completed.1["output"], answer);
    assert_eq!(
        (
            completed.1["totalSteps"].as_i64(),
            completed.1["unitsUsed"].as_i64()
        ),
        (Some(15), Some(1))
    );
    assert_eq!(completed.1["unitType"], "agent_runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_iterations_stops_a_model_that_keeps_calling_tools() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let agent = create_agent(
        &app,
        &app.key,
        json!({"name": "Looper", "system_prompt": "x", "tools": ["generate_text"], "max_iterations": 3}),
    )
    .await;
    let input = format!("Loop\n@loop generate_text {}", json!({"prompt": "again"}));
    let (status, events) = run(&app, &app.key, &agent, json!({"input": input})).await;
    assert_eq!(status, 200);
    let mut expected = vec!["start".to_owned()];
    for _ in 0..3 {
        expected.push("step:tool_call".into());
        expected.push("step:tool_result".into());
    }
    expected.extend(["step:error".into(), "error".into()]);
    assert_eq!(shape(&events), expected, "{events:#?}");
    let message = "the agent reached its maximum of 3 iterations without a final answer";
    assert_eq!(steps_of(&events, "error")[0]["content"], message);
    assert_eq!(events.last().unwrap()["error"], message);

    let run_id = events[0]["run_id"].as_str().unwrap();
    let stored = get_run(&app, &app.key, &agent, run_id).await;
    assert_eq!(stored["status"], "failed");
    assert_eq!(stored["error_message"], message);
    // A failed run pays for the tokens it consumed, not for the run itself.
    assert_eq!(agent_runs_used_milli(&app, app.org_id).await, 0);
    let credits = stored["credits_used"].as_i64().unwrap();
    assert!(credits >= 1, "tokens were consumed");
    assert_eq!(charged(&app, run_id).await, credits);
    let failed = app.events().await;
    let failed = failed
        .iter()
        .find(|(kind, _)| kind == "agent.run.failed")
        .unwrap();
    assert_eq!(failed.1["errorMessage"], message);
    let (_, listed) = json_of(
        app.get(
            &format!("/api/v1/agents/{agent}/runs?status=failed"),
            &app.key,
        )
        .await,
    )
    .await;
    assert_eq!(listed["runs"][0]["id"], run_id);
    assert!(
        listed["runs"][0].get("steps").is_none(),
        "lists carry no steps"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_runs_on_openai_tool_calls_and_sessions_remember_earlier_exchanges() {
    let upstream = MockServer::start().await;
    // After a tool result: the final answer. Otherwise: a real tool call.
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_string_contains("\"role\":\"tool\""))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": "gpt-upstream",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Here is your chart, Ada."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 300, "completion_tokens": 8, "total_tokens": 308}
        })))
        .with_priority(1)
        .mount(&upstream)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-upstream",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Let me draw it.", "tool_calls": [{
                "id": "call_chart1", "type": "function",
                "function": {"name": "generate_chart", "arguments": "{\"kind\":\"line\",\"labels\":[\"Jan\",\"Feb\"],\"series\":[{\"name\":\"sales\",\"values\":[1,2]}]}"}
            }]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 250, "completion_tokens": 30, "total_tokens": 280}
        })))
        .with_priority(2)
        .mount(&upstream)
        .await;
    let url = upstream.uri();
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
        s.upstreams.insert("acme".into(), fake_upstream(&url));
        s.models
            .push(fake_chat_model("acme/gpt-test", "acme", vec![]));
    }))
    .await;
    let agent = create_agent(
        &app,
        &app.key,
        json!({"name": "Charts", "system_prompt": "You draw charts.", "model": "acme/gpt-test",
               "tools": ["generate_chart"], "memory_enabled": true}),
    )
    .await;

    let first = json!({"input": "My name is Ada. Chart my sales.", "session_id": "s-ada"});
    let (status, events) = run(&app, &app.key, &agent, first).await;
    assert_eq!(status, 200, "{events:?}");
    assert_eq!(
        shape(&events),
        [
            "start",
            "step:thinking",
            "step:tool_call",
            "step:tool_result",
            "step:response",
            "done"
        ],
        "{events:#?}"
    );
    assert_eq!(events[0]["session_id"], "s-ada");
    assert_eq!(
        steps_of(&events, "thinking")[0]["content"],
        "Let me draw it."
    );
    assert_eq!(
        steps_of(&events, "tool_call")[0]["tool_input"]["kind"],
        "line"
    );
    assert!(steps_of(&events, "tool_result")[0]["tool_output"]["url"].is_string());
    let done = events.last().unwrap();
    assert_eq!(done["output"], "Here is your chart, Ada.");
    assert_eq!(done["tokens_used"], 280 + 308);
    // 2 + chart 2 + tokens: 550 prompt at 2/1000 and 38 completion at 6/1000.
    assert_eq!(
        done["credits_used"],
        2 + 2 + (550 * 2 + 38 * 6 + 999) / 1000
    );

    let requests = upstream.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2);
    let second: Value = requests[1].body_json().unwrap();
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_chart1");
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[3]["tool_call_id"], "call_chart1");
    assert_eq!(second["tools"][0]["function"]["name"], "generate_chart");

    // The same session remembers the first exchange; another session does not,
    // but sees the history the client sends.
    let (status, _) = run(
        &app,
        &app.key,
        &agent,
        json!({"input": "What is my name?", "session_id": "s-ada"}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = run(
        &app,
        &app.key,
        &agent,
        json!({"input": "What is my name?", "session_id": "s-other",
               "conversation_history": [{"role": "user", "content": "I am Grace."}, {"role": "assistant", "content": "Hello Grace."}]}),
    )
    .await;
    assert_eq!(status, 200);
    let requests = upstream.received_requests().await.unwrap();
    let texts = |i: usize| -> Vec<(String, String)> {
        let body: Value = requests[i].body_json().unwrap();
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap().to_owned(),
                    m["content"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(
        texts(2)[1..],
        [
            (
                "user".to_owned(),
                "My name is Ada. Chart my sales.".to_owned()
            ),
            (
                "assistant".to_owned(),
                "Here is your chart, Ada.".to_owned()
            ),
            ("user".to_owned(), "What is my name?".to_owned()),
        ]
    );
    assert_eq!(
        texts(4)[1..],
        [
            ("user".to_owned(), "I am Grace.".to_owned()),
            ("assistant".to_owned(), "Hello Grace.".to_owned()),
            ("user".to_owned(), "What is my name?".to_owned()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_stream_finds_the_run_finished() {
    let web = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/slow"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_string("The slow page says hello.")
                .set_delay(Duration::from_millis(1500)),
        )
        .mount(&web)
        .await;
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let agent = create_agent(
        &app,
        &app.key,
        json!({"name": "Reader", "system_prompt": "x", "tools": ["web_fetch"]}),
    )
    .await;
    let input = format!(
        "Read it\n@tool web_fetch {}",
        json!({"url": format!("{}/slow", web.uri())})
    );
    let response = app
        .post_json(
            &format!("/api/v1/agents/{agent}/run"),
            &app.key,
            &json!({"input": input}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let first = stream.next().await.unwrap().unwrap();
    let first: Value = serde_json::from_slice(
        std::str::from_utf8(&first)
            .unwrap()
            .trim()
            .strip_prefix("data: ")
            .unwrap()
            .as_bytes(),
    )
    .unwrap();
    assert_eq!(first["type"], "start");
    let run_id = first["run_id"].as_str().unwrap().to_owned();
    drop(stream); // the client goes away while the page is still loading

    let mut stored = Value::Null;
    for _ in 0..100 {
        stored = get_run(&app, &app.key, &agent, &run_id).await;
        if stored["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(stored["status"], "completed", "{stored}");
    assert!(
        stored["output"]
            .as_str()
            .unwrap()
            .contains("The slow page says hello."),
        "{stored}"
    );
    let kinds: Vec<&str> = stored["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tool_call", "tool_result", "response"]);
    assert_eq!(
        charged(&app, &run_id).await,
        stored["credits_used"].as_i64().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_metered_and_limited_by_the_plan() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    // Free: agents are not on the plan, templates included.
    let (_, free_key) = org_with_key(&app, "free").await;
    let template = "00000000-0000-7000-8000-000000000001";
    let (status, body) = run(&app, &free_key, template, json!({"input": "hi"})).await;
    assert_eq!(status, 403, "{body:?}");
    assert_eq!(
        body[0]["error"]["message"],
        "Agents are not available on the Free plan"
    );

    // The agent_runs bucket: one run, then 402 and nothing written.
    app.sql("UPDATE plans SET agent_runs = 1 WHERE code = 'pro'")
        .await;
    let agent = create_agent(
        &app,
        &app.key,
        json!({"name": "A", "system_prompt": "x", "tools": ["generate_image"]}),
    )
    .await;
    let (status, _) = run(&app, &app.key, &agent, json!({"input": "hello"})).await;
    assert_eq!(status, 200);
    let (status, body) = run(&app, &app.key, &agent, json!({"input": "hello again"})).await;
    assert_eq!(status, 402, "{body:?}");
    assert_eq!(body[0]["error"]["message"], "Quota exceeded for agent_runs");
    assert_eq!(body[0]["error"]["code"], "quota_exceeded");
    assert_eq!(
        app.db.scalar_i64("SELECT count(*) FROM agent_runs").await,
        1
    );

    // Credits that run out mid-run: the tool is not called and the run fails,
    // charged only for the tokens it used.
    app.sql("UPDATE plans SET agent_runs = 100 WHERE code = 'pro'")
        .await;
    app.sql(&format!(
        "UPDATE billing_accounts SET included_remaining = 10, purchased_balance = 0 WHERE org_id = '{}'",
        app.org_id
    ))
    .await;
    let input = format!(
        "Draw\n@tool generate_image {}",
        json!({"prompt": "a fox", "size": "512x512"})
    );
    let (status, events) = run(&app, &app.key, &agent, json!({"input": input})).await;
    assert_eq!(status, 200);
    assert_eq!(
        shape(&events),
        ["start", "step:tool_call", "step:error", "error"],
        "{events:#?}"
    );
    assert_eq!(
        events.last().unwrap()["error"],
        "Quota exceeded for credits"
    );
    assert_eq!(app.count_jobs().await, 0, "the image was never submitted");
    let run_id = events[0]["run_id"].as_str().unwrap();
    let stored = get_run(&app, &app.key, &agent, run_id).await;
    assert_eq!(stored["status"], "failed");
    assert_eq!(
        charged(&app, run_id).await,
        stored["credits_used"].as_i64().unwrap()
    );
    assert!(
        stored["credits_used"].as_i64().unwrap() <= 2,
        "tokens only: {stored}"
    );
    assert_eq!(
        app.db.scalar_i64("SELECT count(*) FROM reservations").await,
        0,
        "nothing stays reserved"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_run_requests_are_refused_with_the_field_named_and_change_nothing() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let agent = create_agent(&app, &app.key, json!({"name": "A", "system_prompt": "x"})).await;
    let cases = [
        (json!({}), "input", "input is required"),
        (
            json!({"input": "x".repeat(10_001)}),
            "input",
            "input must be at most 10000 characters",
        ),
        (
            json!({"input": "hi", "attachments": [{"type": "image", "url": "not a url"}]}),
            "attachments",
            "attachments[0].url must be an http(s) URL",
        ),
    ];
    for (body, field, message) in cases {
        let (status, error) = run(&app, &app.key, &agent, body).await;
        assert_eq!(status, 400);
        assert_eq!(error[0]["error"]["message"], message);
        assert_eq!(error[0]["error"]["param"], field);
    }
    let (status, error) = run(&app, &app.key, &agent, json!({"input": 5})).await;
    assert_eq!(status, 400, "{error:?}");

    let (_, other_key) = org_with_key(&app, "pro").await;
    let (status, _) = run(&app, &other_key, &agent, json!({"input": "hi"})).await;
    assert_eq!(status, 404, "another organization's agent");
    let (status, _) = run(
        &app,
        &app.key,
        "00000000-0000-7000-8000-0000000000ff",
        json!({"input": "hi"}),
    )
    .await;
    assert_eq!(status, 404);
    let chat_only = app.create_key(app.org_id, &["chat"], None).await;
    let (status, error) = run(&app, &chat_only, &agent, json!({"input": "hi"})).await;
    assert_eq!(status, 403);
    assert_eq!(
        error[0]["error"]["message"],
        "API key does not have required scope: agents"
    );

    for (query, message) in [
        (
            "status=done",
            "status must be one of running, completed, failed, got `done`",
        ),
        ("limit=0", "limit must be an integer from 1 to 100, got `0`"),
    ] {
        let (status, error) = json_of(
            app.get(&format!("/api/v1/agents/{agent}/runs?{query}"), &app.key)
                .await,
        )
        .await;
        assert_eq!(
            (status, error["error"]["message"].as_str()),
            (400, Some(message))
        );
    }
    let (status, _) = json_of(
        app.get(
            &format!("/api/v1/agents/{agent}/runs/00000000-0000-7000-8000-0000000000aa"),
            &app.key,
        )
        .await,
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(
        app.db.scalar_i64("SELECT count(*) FROM agent_runs").await,
        0
    );
    assert_eq!(
        app.db.scalar_i64("SELECT count(*) FROM reservations").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_fails_a_run_whose_api_process_stopped() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    let agent = create_agent(
        &app,
        &app.key,
        json!({"name": "Orphan", "system_prompt": "x"}),
    )
    .await;
    app.sql(&format!(
        "INSERT INTO agent_runs (id, org_id, agent_id, session_id, input, created_at) \
         VALUES ('00000000-0000-7000-8000-00000000ab01', '{}', '{agent}', 's', 'lost', now() - interval '2 hours')",
        app.org_id
    ))
    .await;
    let mut stored = Value::Null;
    for _ in 0..100 {
        stored = get_run(
            &app,
            &app.key,
            &agent,
            "00000000-0000-7000-8000-00000000ab01",
        )
        .await;
        if stored["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(stored["status"], "failed", "{stored}");
    assert!(
        stored["error_message"]
            .as_str()
            .unwrap()
            .contains("interrupted")
    );
    let events = app.events().await;
    let failed = events
        .iter()
        .find(|(kind, _)| kind == "agent.run.failed")
        .unwrap();
    assert_eq!(failed.1["agentName"], "Orphan");
}

/// Uploads a knowledge file and waits until the worker has processed it.
async fn knowledge_file(app: &TestApp, agent: &str, name: &str, text: &str) -> String {
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(text.as_bytes().to_vec()).file_name(name.to_owned()),
    );
    let response = app
        .client
        .post(app.url(&format!("/api/v1/agents/{agent}/knowledge")))
        .bearer_auth(&app.key)
        .multipart(form)
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(response).await;
    assert_eq!(status, 201, "{body}");
    let id = body["file"]["id"].as_str().unwrap().to_owned();
    for _ in 0..300 {
        let status = app
            .db
            .scalar_i64(&format!(
                "SELECT CASE status WHEN 'completed' THEN 1 WHEN 'failed' THEN 2 ELSE 0 END::bigint \
                   FROM knowledge_files WHERE id = '{id}'"
            ))
            .await;
        if status != 0 {
            assert_eq!(status, 1, "{name} was processed");
            return id;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{name} was never processed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cites_the_agents_knowledge_and_deleting_the_agent_removes_its_files() {
    let app = TestApp::spawn().await;
    let agent = create_agent(
        &app,
        &app.key,
        json!({"name": "Support", "system_prompt": "Answer from the knowledge base.", "tools": ["generate_chart"]}),
    )
    .await;
    let refunds = knowledge_file(
        &app,
        &agent,
        "refund-policy.txt",
        "Refunds are accepted within 30 days of purchase with the original receipt.",
    )
    .await;
    knowledge_file(
        &app,
        &agent,
        "shipping.md",
        "# Shipping\n\nOrders ship from Lisbon within two business days.",
    )
    .await;
    let chart = json!({"kind": "pie", "labels": ["kept", "refunded"], "series": [{"name": "orders", "values": [9, 1]}]});
    let input = format!("Are refunds accepted within 30 days?\n@tool generate_chart {chart}");
    let (status, events) = run(&app, &app.key, &agent, json!({"input": input})).await;
    assert_eq!(status, 200);
    assert_eq!(
        shape(&events),
        [
            "start",
            "step:thinking",
            "step:tool_call",
            "step:tool_result",
            "step:response",
            "done"
        ],
        "{events:#?}"
    );
    let consulted = steps_of(&events, "thinking")[0]["content"]
        .as_str()
        .unwrap();
    assert!(
        consulted.starts_with("Consulted the knowledge base: [K1] refund-policy.txt (part 1)"),
        "the most relevant file comes first: {consulted}"
    );
    let chart_url = steps_of(&events, "tool_result")[0]["tool_output"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(app.download(&chart_url).await.status(), 200);

    let response = app
        .delete(&format!("/api/v1/agents/{agent}"), &app.key)
        .await;
    assert_eq!(response.status(), 204);
    assert_eq!(
        app.download(&chart_url).await.status(),
        404,
        "the run's files go with the agent"
    );
    let stored = app
        .settings
        .storage
        .dir
        .join(format!("knowledge/{}/{refunds}", app.org_id));
    assert!(
        !stored.exists(),
        "the knowledge file's bytes go with the agent"
    );
    for table in [
        "agent_runs",
        "agent_run_steps",
        "knowledge_files",
        "knowledge_chunks",
    ] {
        assert_eq!(
            app.db
                .scalar_i64(&format!("SELECT count(*) FROM {table}"))
                .await,
            0,
            "{table}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_runs_and_their_files_are_deleted_after_the_retention_time() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.agents.run_retention_seconds = 2),
    )
    .await;
    let agent = create_agent(
        &app,
        &app.key,
        json!({"name": "Charter", "system_prompt": "x", "tools": ["generate_chart"]}),
    )
    .await;
    let chart =
        json!({"kind": "line", "labels": ["a", "b"], "series": [{"name": "s", "values": [1, 2]}]});
    let (status, events) = run(
        &app,
        &app.key,
        &agent,
        json!({"input": format!("Draw\n@tool generate_chart {chart}")}),
    )
    .await;
    assert_eq!(status, 200);
    let run_id = events[0]["run_id"].as_str().unwrap().to_owned();
    let chart_url = steps_of(&events, "tool_result")[0]["tool_output"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(app.download(&chart_url).await.status(), 200);
    // A run still going is never deleted, however old.
    app.sql(&format!(
        "INSERT INTO agent_runs (id, org_id, agent_id, session_id, input) \
         VALUES ('00000000-0000-7000-8000-00000000ab02', '{}', '{agent}', 's', 'ongoing')",
        app.org_id
    ))
    .await;

    let mut status = 200;
    for _ in 0..100 {
        let response = app
            .get(&format!("/api/v1/agents/{agent}/runs/{run_id}"), &app.key)
            .await;
        status = response.status().as_u16();
        if status == 404 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 404, "the finished run is gone");
    assert_eq!(
        app.download(&chart_url).await.status(),
        404,
        "with its files"
    );
    assert_eq!(
        app.db
            .scalar_i64(&format!(
                "SELECT count(*) FROM agent_run_steps WHERE run_id = '{run_id}'"
            ))
            .await,
        0
    );
    assert_eq!(
        app.db.scalar_i64("SELECT count(*) FROM agent_runs").await,
        1,
        "the running one stays"
    );
}
