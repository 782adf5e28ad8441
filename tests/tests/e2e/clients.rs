//! The client matrix: standard OpenAI clients run unchanged (only their base
//! URL and key differ) against the API: the official OpenAI Python SDK, the
//! official OpenAI JS SDK and langchain-openai, at the versions pinned in
//! tests/sdk/ (installed by scripts/test: `ensure_sdk_python`,
//! `ensure_sdk_js`).
//!
//! Each test starts the stack with a fake OpenAI-compatible upstream
//! (tests/sdk/fake_upstream.py, a child process that records what it gets
//! and what it answers) behind the catalogue models `fake/gpt` and
//! `fake/embed`, then runs the client's script, which asserts both sides of
//! every upstream call (what the upstream received, what the client
//! received) and the same flows offline against the built-in models and
//! their OpenAI aliases. The scripts print each failed step with the bodies
//! involved; `CLIENT_CHECKS=flow,flow` runs only those flows.
//!
//! Nothing may reach the internet: the scripts run with an unreachable
//! proxy (loopback excepted) and tiktoken reads cl100k_base from
//! `.venv/tiktoken-cache` (placed there from the tiktoken-rs crate).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use unigen_core::domain::ModelCategory;
use unigen_tests::{TestApp, TestOptions, fake_chat_model, fake_upstream};

const CHAT_MODEL: &str = "fake/gpt";
const EMBED_MODEL: &str = "fake/embed";
/// What `fake_chat_model` names the model upstream.
const UPSTREAM_CHAT_MODEL: &str = "gpt-upstream";
const UPSTREAM_EMBED_MODEL: &str = "embed-upstream";
/// The key `fake_upstream` gives the upstream entry.
const UPSTREAM_API_KEY: &str = "sk-upstream-secret";

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// tests/sdk/fake_upstream.py on a free loopback port, killed on drop.
pub(crate) struct FakeUpstream {
    pub(crate) url: String,
    _child: tokio::process::Child,
}

impl FakeUpstream {
    pub(crate) async fn start() -> FakeUpstream {
        let mut child = tokio::process::Command::new(root().join(".venv/bin/python"))
            .arg(root().join("tests/sdk/fake_upstream.py"))
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("starting tests/sdk/fake_upstream.py with .venv/bin/python (scripts/test sets up .venv)");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        // It prints its address once it accepts connections.
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the fake upstream did not start within 30 s")
            .expect("reading the fake upstream's stdout")
            .expect("the fake upstream exited before listening");
        let url = line
            .rsplit(' ')
            .next()
            .filter(|url| url.starts_with("http://127.0.0.1:"))
            .unwrap_or_else(|| panic!("unexpected first line from the fake upstream: {line}"))
            .to_owned();
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        FakeUpstream { url, _child: child }
    }
}

/// The stack with the fake upstream behind `fake/gpt` and `fake/embed`.
async fn stack(whisper: bool) -> (TestApp, FakeUpstream) {
    let upstream = FakeUpstream::start().await;
    let url = upstream.url.clone();
    let mut options = TestOptions::default().configure(move |s| {
        s.upstreams.insert("fake".into(), fake_upstream(&url));
        s.models.push(fake_chat_model(CHAT_MODEL, "fake", vec![]));
        // Built from the chat entry so new catalogue fields keep their defaults.
        let mut embed = fake_chat_model(EMBED_MODEL, "fake", vec![]);
        embed.category = ModelCategory::Embedding;
        embed.capabilities = vec!["embeddings".into()];
        embed.credits_per_unit = 1;
        embed.completion_credits_per_unit = None;
        embed.upstream_model = Some(UPSTREAM_EMBED_MODEL.into());
        s.models.push(embed);
    });
    if whisper {
        options = options.with_whisper();
    }
    (TestApp::spawn_with(options).await, upstream)
}

/// Runs one client's script against the stack; fails with its whole output.
async fn run_client(app: &TestApp, upstream: &FakeUpstream, program: &Path, script: &str) {
    let mut command = client_command(app, program, script);
    command
        .env("FAKE_UPSTREAM_URL", &upstream.url)
        .env("FAKE_CHAT_MODEL", CHAT_MODEL)
        .env("FAKE_EMBED_MODEL", EMBED_MODEL)
        .env("UPSTREAM_CHAT_MODEL", UPSTREAM_CHAT_MODEL)
        .env("UPSTREAM_EMBED_MODEL", UPSTREAM_EMBED_MODEL)
        .env("UPSTREAM_API_KEY", UPSTREAM_API_KEY);
    run_to_success(command, script).await;
}

/// A client script (`script`, from the repository root) run by `program`
/// against `app` with its base URL and key, and nothing reaching beyond
/// loopback.
pub(crate) fn client_command(
    app: &TestApp,
    program: &Path,
    script: &str,
) -> tokio::process::Command {
    let root = root();
    let tiktoken_cache = root.join(".venv/tiktoken-cache");
    assert!(
        tiktoken_cache.is_dir(),
        "{} is missing: scripts/test (ensure_sdk_python) puts tiktoken's cl100k_base there",
        tiktoken_cache.display()
    );
    let mut command = tokio::process::Command::new(program);
    command
        .arg(root.join(script))
        .current_dir(root.join("tests/sdk"))
        .env("OPENAI_BASE_URL", app.url("/api/v1"))
        .env("OPENAI_API_KEY", &app.key)
        .env("TIKTOKEN_CACHE_DIR", &tiktoken_cache)
        // Nothing leaves the machine: any attempt goes to a closed port.
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("HTTP_PROXY", "http://127.0.0.1:9")
        .env("https_proxy", "http://127.0.0.1:9")
        .env("http_proxy", "http://127.0.0.1:9")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .env("LANGSMITH_TRACING", "false")
        .env("LANGCHAIN_TRACING_V2", "false")
        .env("PYTHONUNBUFFERED", "1")
        .env_remove("OPENAI_ORG_ID")
        .env_remove("OPENAI_PROJECT_ID")
        .kill_on_drop(true);
    if let Ok(only) = std::env::var("CLIENT_CHECKS") {
        command.env("CLIENT_CHECKS", only);
    }
    command
}

/// Runs a client script to its end; fails with its whole output unless it
/// exited 0 with no failed step. Returns what it printed.
pub(crate) async fn run_to_success(mut command: tokio::process::Command, script: &str) -> String {
    let output = tokio::time::timeout(Duration::from_secs(300), command.output())
        .await
        .unwrap_or_else(|_| panic!("{script} did not finish within 300 s"))
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let failed: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("FAILED: "))
        .collect();
    assert!(
        output.status.success() && failed.is_empty(),
        "{script} failed ({}); failed steps:\n{}\n\nfull output:\n{stdout}\n{stderr}",
        output.status,
        failed.join("\n")
    );
    stdout.into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_works_unchanged() {
    let (app, upstream) = stack(true).await;
    run_client(
        &app,
        &upstream,
        &root().join(".venv/bin/python"),
        "tests/sdk/python/openai_check.py",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_js_sdk_works_unchanged() {
    let modules = root().join("tests/sdk/js/node_modules/openai");
    assert!(
        modules.is_dir(),
        "{} is missing: scripts/test (ensure_sdk_js) runs npm ci in tests/sdk/js",
        modules.display()
    );
    let (app, upstream) = stack(true).await;
    run_client(
        &app,
        &upstream,
        Path::new("node"),
        "tests/sdk/js/openai_check.mjs",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langchain_openai_works_unchanged() {
    let (app, upstream) = stack(false).await;
    run_client(
        &app,
        &upstream,
        &root().join(".venv/bin/python"),
        "tests/sdk/langchain/langchain_check.py",
    )
    .await;
}
