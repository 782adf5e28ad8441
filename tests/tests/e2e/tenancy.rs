//! Tenant isolation of stored files: a job's JSON signs, and retention
//! deletes, only the files the server itself recorded for the job's
//! organization, whatever a client writes into free-form fields.

use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, json_of};

fn png_base64() -> String {
    let image = image::RgbImage::from_fn(32, 24, |x, y| image::Rgb([x as u8 * 8, y as u8 * 9, 40]));
    let mut bytes = std::io::Cursor::new(Vec::new());
    image.write_to(&mut bytes, image::ImageFormat::Png).unwrap();
    base64::engine::general_purpose::STANDARD.encode(bytes.into_inner())
}

/// Every `/files/` URL anywhere in `value`.
fn file_urls(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) if s.contains("/files/") => vec![s.clone()],
        Value::Array(items) => items.iter().flat_map(file_urls).collect(),
        Value::Object(map) => map.values().flat_map(file_urls).collect(),
        _ => Vec::new(),
    }
}

async fn edit(app: &TestApp, key: &str, extra: Value) -> String {
    let mut body = json!({"image": png_base64(), "operation": "colorization"});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let (status, body) = json_of(
        app.post_json("/api/v1/images/edits?async=true", key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// Long polls `key`'s job until it finished.
async fn finished_job(app: &TestApp, key: &str, id: &str) -> Value {
    let started = Instant::now();
    loop {
        let (status, job) =
            json_of(app.get(&format!("/api/v1/jobs/{id}?poll=true"), key).await).await;
        assert_eq!(status, 200, "{job}");
        if job["completedAt"].is_string() {
            assert_eq!(job["status"], "completed", "{job}");
            return job;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{job}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_inputs_naming_another_organizations_file_are_never_signed_nor_deleted() {
    let app = TestApp::spawn_with(TestOptions::default().configure(|s| {
        // Only the jobs this test back-dates expire.
        s.jobs.retention_seconds = 3600;
    }))
    .await;
    let victim = edit(&app, &app.key, json!({})).await;
    finished_job(&app, &app.key, &victim).await;
    let victim_keys: Vec<String> = {
        let client = app.db.client().await;
        let row = client
            .query_one(
                "SELECT input_params #>> '{inputs,image,file}', output_data #>> '{images,0,file}' \
                 FROM jobs WHERE id = $1::text::uuid",
                &[&victim],
            )
            .await
            .unwrap();
        vec![row.get(0), row.get(1)]
    };
    let victim_files: Vec<_> = victim_keys
        .iter()
        .map(|key| app.settings.storage.dir.join(key))
        .collect();
    assert!(victim_files.iter().all(|f| f.is_file()), "{victim_files:?}");

    let attacker = app.create_org("Attacker", "pro").await;
    let attacker_key = app.create_key(attacker, &["all"], None).await;
    let model_inputs = json!({
        "file": victim_keys[0],
        "nested": [{"image_file": victim_keys[1]}],
        "path_file": "../../etc/passwd",
        "dir_file": format!("{attacker}/inputs"),
    });
    let id = edit(&app, &attacker_key, json!({"model_inputs": model_inputs})).await;
    let job = finished_job(&app, &attacker_key, &id).await;
    assert_eq!(
        job["inputParams"]["model_inputs"], model_inputs,
        "client JSON is shown as it was sent"
    );
    let urls = file_urls(&job);
    assert!(
        !urls.is_empty(),
        "the attacker's own input is signed: {job}"
    );
    for url in &urls {
        assert!(
            url.contains(&format!("/files/{attacker}/")),
            "only the caller's own files are signed: {url}"
        );
    }

    // Retention deletes the attacker's job without touching the victim's
    // files, and a job whose recorded file cannot be deleted (a directory)
    // does not stop it.
    let stuck = edit(&app, &attacker_key, json!({})).await;
    finished_job(&app, &attacker_key, &stuck).await;
    app.sql(&format!(
        "UPDATE jobs SET input_params = jsonb_set(input_params, '{{inputs,image,file}}', \
         to_jsonb('{attacker}/inputs'::text)) WHERE id = '{stuck}'; \
         UPDATE jobs SET completed_at = now() - interval '2 hours' WHERE id IN ('{stuck}', '{id}')"
    ))
    .await;
    let started = Instant::now();
    for id in [&stuck, &id] {
        while app
            .db
            .scalar_i64(&format!("SELECT count(*) FROM jobs WHERE id = '{id}'"))
            .await
            > 0
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "retention never deleted job {id}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for file in &victim_files {
        assert!(file.is_file(), "{} was deleted", file.display());
    }
    let (status, _) = json_of(app.get(&format!("/api/v1/jobs/{victim}"), &app.key).await).await;
    assert_eq!(status, 200);
}
