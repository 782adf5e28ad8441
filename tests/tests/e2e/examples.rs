//! The runnable programs under `examples/` (Python and TypeScript, with the
//! official OpenAI SDKs), run unchanged against a stack on the built-in
//! `local` models, offline. The book's API pages include these files
//! verbatim (`{{#include}}`), so this is the book's doc test: an example that
//! no longer works fails here.
//!
//! Each program reads OPENAI_BASE_URL and OPENAI_API_KEY, prints what it
//! did, and exits non-zero when something is not as it should be. The
//! Python ones run with the SDK scripts/test installs into .venv
//! (`ensure_sdk_python`), the TypeScript ones compiled by the TypeScript
//! compiler pinned in examples/typescript/package-lock.json (`npm ci` there
//! by `ensure_sdk_js`).

use std::path::Path;

use unigen_tests::TestApp;

use crate::clients::{client_command, root, run_to_success};

/// Runs `script` with `program` against `app`; returns what it printed.
async fn run_example(app: &TestApp, program: &Path, script: &str) -> String {
    run_to_success(client_command(app, program, script), script).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_examples_run_against_the_stack() {
    let app = TestApp::spawn().await;
    let python = root().join(".venv/bin/python");

    let out = run_example(&app, &python, "examples/python/generate_sync.py").await;
    assert!(out.contains("downloaded a PNG of"), "{out}");

    let out = run_example(&app, &python, "examples/python/generate_async.py").await;
    assert!(out.contains("status: completed 100%"), "{out}");
    assert!(out.contains("/files/"), "{out}");

    let out = run_example(&app, &python, "examples/python/job_events.py").await;
    // The first event is the job as it is when the stream opens (pending,
    // or already processing); the last is its completion.
    let last_event = out.lines().rfind(|l| l.contains(" id="));
    assert!(
        last_event.is_some_and(|l| l.ends_with("status=completed progress=100")),
        "{out}"
    );
    assert!(out.contains("video: http://"), "{out}");

    let out = run_example(&app, &python, "examples/python/chat_tools.py").await;
    assert!(out.contains("tool call: get_weather("), "{out}");
    assert!(
        out.contains("answer: ") && out.contains("[get_weather] 18 C and sunny"),
        "{out}"
    );

    let out = run_example(&app, &python, "examples/python/webhook_receiver.py").await;
    assert!(out.contains("verified: generation.completed"), "{out}");
    assert!(!out.contains("rejected:"), "{out}");
    // It deletes its webhook when done.
    let (status, body) = unigen_tests::json_of(app.get("/api/v1/webhooks", &app.key).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["webhooks"], serde_json::json!([]), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_examples_compile_and_run_against_the_stack() {
    let dir = root().join("examples/typescript");
    let tsc = dir.join("node_modules/typescript/bin/tsc");
    assert!(
        tsc.is_file() && dir.join("node_modules/openai").is_dir(),
        "{} is missing: scripts/test (ensure_sdk_js) runs npm ci in examples/typescript",
        tsc.display()
    );
    let compiled = tokio::process::Command::new("node")
        .arg(&tsc)
        .args(["-p", "."])
        .current_dir(&dir)
        .output()
        .await
        .expect("running tsc");
    assert!(
        compiled.status.success(),
        "tsc failed:\n{}{}",
        String::from_utf8_lossy(&compiled.stdout),
        String::from_utf8_lossy(&compiled.stderr)
    );

    let app = TestApp::spawn().await;
    let node = Path::new("node");
    let out = run_example(&app, node, "examples/typescript/dist/generate.js").await;
    assert!(out.contains("sync: http://"), "{out}");
    assert!(out.contains("async: completed 100%"), "{out}");
    assert!(out.contains("events: completed 100%"), "{out}");

    let out = run_example(&app, node, "examples/typescript/dist/chat_tools.js").await;
    assert!(out.contains("tool call: get_weather("), "{out}");
    assert!(out.contains("[get_weather] 18 C and sunny"), "{out}");
}
