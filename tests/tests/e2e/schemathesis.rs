//! The OpenAPI fuzzing run: schemathesis (pinned in
//! tests/schemathesis/requirements.txt, installed by scripts/test:
//! `ensure_schemathesis`) drives every operation of the served document
//! against a whole stack, in its four phases (examples, coverage, fuzzing,
//! stateful), with every check but `max_response_time`
//! (tests/schemathesis/run). It passes with no server error, no response
//! outside the document and no valid request refused or invalid one taken.
//!
//! Deterministic and bounded (tests/schemathesis/schemathesis.toml): the
//! same requests every run, 10 per operation and phase. Nothing leaves the
//! machine: tests/schemathesis/hooks.py points every URL at a closed
//! loopback port, and the run has an unreachable proxy.

use std::path::{Path, PathBuf};
use std::time::Duration;

use unigen_tests::{TestApp, TestOptions};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_conforms_to_the_served_document() {
    let root = root();
    let schemathesis = root.join(".venv-schemathesis/bin/schemathesis");
    assert!(
        schemathesis.is_file(),
        "{} is missing: scripts/test (ensure_schemathesis) installs it",
        schemathesis.display()
    );
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        // Loopback URLs (hooks.py) are fetched and refused fast, not
        // waited on.
        s.fetch.timeout_seconds = 2;
    }))
    .await;
    // Limits out of the way: a valid request must be served, and a 402 or a
    // 429 would stand for "refused" (the limits have tests of their own).
    app.sql(
        "UPDATE plans SET included_credits = 1000000000, rate_limit_per_minute = 1000000,
             concurrent_requests = 100000, chat_tokens = NULL, image_generations = NULL,
             video_seconds = NULL, stt_seconds = NULL, tts_chars = NULL, image_edits = NULL,
             music_tracks = NULL, agent_runs = NULL, max_agents = 100000,
             tools_per_agent = 100, max_iterations = 1000,
             knowledge_files_per_agent = 100000, max_webhooks = 100000",
    )
    .await;
    let output = tokio::time::timeout(
        Duration::from_secs(900),
        tokio::process::Command::new(root.join("tests/schemathesis/run"))
            .arg(&app.base_url)
            .arg(&app.key)
            // Extra options for a narrower local run, e.g.
            // SCHEMATHESIS_ARGS="--include-tag responses".
            .args(
                std::env::var("SCHEMATHESIS_ARGS")
                    .unwrap_or_default()
                    .split_whitespace(),
            )
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("schemathesis did not finish within 900 s")
    .expect("running tests/schemathesis/run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "schemathesis found failures ({}):\n{stdout}\n{stderr}",
        output.status
    );
    println!("{stdout}");
}
