//! The official OpenAI Python SDK (installed into .venv by scripts/test from
//! tests/sdk/requirements.txt) runs against the API unchanged.

use unigen_tests::TestApp;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_sdk_works_unchanged() {
    let app = TestApp::spawn().await;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = tokio::process::Command::new(root.join(".venv/bin/python"))
        .arg(root.join("tests/sdk/openai_sdk_check.py"))
        .env("OPENAI_BASE_URL", app.url("/api/v1"))
        .env("OPENAI_API_KEY", &app.key)
        .output()
        .await
        .expect("running .venv/bin/python (scripts/test sets up .venv)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "SDK check failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("all SDK checks passed"), "{stdout}");
}
