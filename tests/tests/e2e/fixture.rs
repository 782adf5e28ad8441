//! The `fixture` adapter: `bench/noop` (one model per job tool in
//! bench/unigen-bench.toml) renders the first job of each output shape and
//! answers every later one with the same stored files.

use std::time::Duration;

use serde_json::{Value, json};
use unigen_core::config::{ModelEntry, Settings};
use unigen_tests::{TestApp, TestOptions, json_of};

use crate::media::{assert_close, b64, duration_of, fetch, png_of, probe, tone_wav};

/// What the worker's fixture transcript says (worker/src/tools/fixture.rs).
const TRANSCRIPT: &str = "This is the fixture transcript.";

/// The fixture models of the benchmark catalogue, loaded (and so validated)
/// from the file the benchmarks use.
fn bench_noop_models() -> Vec<ModelEntry> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/unigen-bench.toml");
    let settings = Settings::load_with(Some(path), &[]).expect("the benchmark catalogue loads");
    let models: Vec<ModelEntry> = settings
        .models
        .into_iter()
        .filter(|m| m.adapter == "fixture")
        .collect();
    assert_eq!(models.len(), 6, "one per job tool");
    models
}

fn with_bench_noop(latency_ms: u64) -> TestOptions {
    let models = bench_noop_models();
    TestOptions::default().configure(move |s| {
        s.models.extend(models);
        s.local_provider.latency_ms = latency_ms;
    })
}

async fn submit(app: &TestApp, path: &str, body: &Value) -> String {
    let mut body = body.clone();
    body["model"] = json!("bench/noop");
    let (status, created) = json_of(
        app.post_json(&format!("{path}?async=true"), &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 202, "{path}: {created}");
    created["id"].as_str().unwrap().to_owned()
}

async fn completed(app: &TestApp, id: &str) -> Value {
    let job = app.wait_for_job(id, Duration::from_secs(120)).await;
    assert_eq!(job["status"], "completed", "{job}");
    job
}

/// The signed URLs of an output, and the stored keys they name.
fn files(output: &Value) -> Vec<(String, String)> {
    match output {
        Value::String(url) if url.starts_with("http") => {
            let key = url
                .split_once("/files/")
                .and_then(|(_, rest)| rest.split('?').next())
                .unwrap()
                .to_owned();
            vec![(url.clone(), key)]
        }
        Value::Array(items) => items.iter().flat_map(files).collect(),
        Value::Object(map) => map.values().flat_map(files).collect(),
        _ => Vec::new(),
    }
}

fn keys(job: &Value) -> Vec<String> {
    files(&job["outputData"])
        .into_iter()
        .map(|(_, k)| k)
        .collect()
}

fn run_ms(job: &Value) -> i64 {
    let at =
        |field: &str| chrono::DateTime::parse_from_rfc3339(job[field].as_str().unwrap()).unwrap();
    (at("completedAt") - at("startedAt")).num_milliseconds()
}

/// Downloads the job's file and checks it is what its output claims: an
/// image of `size` (when given, else the claimed one), a video or audio
/// track as long as claimed.
async fn check_file(app: &TestApp, job: &Value, size: Option<(u32, u32)>) {
    let output = &job["outputData"];
    let [(url, _)] = files(output).try_into().expect("one file");
    let bytes = fetch(app, &url).await;
    match job["tool"].as_str().unwrap() {
        "image" | "image_edit" => {
            let image = &output["images"][0];
            let claimed = (
                image["width"].as_u64().unwrap() as u32,
                image["height"].as_u64().unwrap() as u32,
            );
            let decoded = image::load_from_memory(&bytes).expect("a real image");
            assert_eq!((decoded.width(), decoded.height()), claimed, "{job}");
            if let Some(size) = size {
                assert_eq!(claimed, size, "{job}");
            }
        }
        "video" => {
            let facts = probe(&bytes);
            let stream = &facts["streams"][0];
            assert_eq!(stream["codec_name"], "h264");
            let video = &output["video"];
            assert_eq!(
                (stream["width"].as_u64(), stream["height"].as_u64()),
                (video["width"].as_u64(), video["height"].as_u64()),
                "{job}"
            );
            if let Some((width, height)) = size {
                assert_eq!(
                    (video["width"].as_u64(), video["height"].as_u64()),
                    (Some(u64::from(width)), Some(u64::from(height)))
                );
            }
            assert_close(
                duration_of(&facts),
                video["duration"].as_f64().unwrap(),
                0.1,
                "video duration",
            );
        }
        "music" => assert_close(
            duration_of(&probe(&bytes)),
            output["audio"]["duration_seconds"].as_f64().unwrap(),
            0.1,
            "music duration",
        ),
        "tts" => assert_close(
            duration_of(&probe(&bytes)),
            output["duration_seconds"].as_f64().unwrap(),
            0.1,
            "speech duration",
        ),
        other => panic!("unexpected tool {other}"),
    }
}

fn png(width: u32, height: u32) -> Vec<u8> {
    png_of(&image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([(x * 3) as u8, (y * 5) as u8, 90])
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_job_tool_renders_the_first_job_of_a_shape_and_reuses_its_files_after() {
    let app = TestApp::spawn_with(with_bench_noop(100)).await;
    let input = b64(&png(64, 48));
    // Per tool: a request, another of the same shape (other content), one
    // of another shape, and the image sizes expected (first, other).
    let cases = [
        (
            "/api/v1/images/generations",
            "bench/noop-image",
            json!({"prompt": "a boat", "size": "512x512"}),
            json!({"prompt": "a house", "size": "512x512", "seed": 3}),
            json!({"prompt": "a boat", "size": "1024x1024"}),
            [Some((512, 512)), Some((1024, 1024))],
        ),
        (
            "/api/v1/images/edits",
            "bench/noop-edit",
            json!({"image": input, "operation": "colorization"}),
            json!({"image": input, "operation": "colorization", "seed": 9}),
            json!({"image": input, "operation": "superResolution", "scale": 2}),
            [Some((64, 48)), Some((128, 96))],
        ),
        (
            "/api/v1/videos/generations",
            "bench/noop-video",
            json!({"prompt": "rain", "duration_seconds": 1}),
            json!({"prompt": "snow", "duration_seconds": 1}),
            json!({"prompt": "rain", "duration_seconds": 1, "aspect_ratio": "1:1"}),
            [Some((1280, 720)), Some((720, 720))],
        ),
        (
            "/api/v1/music/generations",
            "bench/noop-music",
            json!({"prompt": "jazz", "duration_seconds": 1}),
            json!({"prompt": "rock", "duration_seconds": 1}),
            json!({"prompt": "jazz", "duration_seconds": 2}),
            [None, None],
        ),
        (
            "/api/v1/audio/speech",
            "bench/noop-tts",
            json!({"input": "hello there"}),
            json!({"input": "hello world"}),
            json!({"input": "a rather longer sentence to speak"}),
            [None, None],
        ),
    ];
    for (path, model, body, same_shape, other_shape, [size, other_size]) in cases {
        // The second is submitted while the first runs: it waits for the
        // first's output instead of rendering its own.
        let first = submit(&app, path, &body).await;
        let second = submit(&app, path, &same_shape).await;
        let (first, second) = (
            completed(&app, &first).await,
            completed(&app, &second).await,
        );
        assert_eq!(
            first["model"], model,
            "`bench/noop` names one model per kind"
        );
        // Whichever of the two ran first rendered; the other reused its files.
        let first_keys = keys(&first);
        assert!(!first_keys.is_empty(), "{first}");
        assert_eq!(
            keys(&second),
            first_keys,
            "reused, not rendered again: {second}"
        );
        let owned_by = |job: &Value| {
            let prefix = format!("{}/{}/", app.org_id, job["id"].as_str().unwrap());
            first_keys.iter().all(|k| k.starts_with(&prefix))
        };
        assert!(owned_by(&first) || owned_by(&second), "{first}");
        assert_eq!(first["actualCredits"], second["actualCredits"]);
        assert!(first["actualCredits"].as_i64().unwrap() >= 1, "{first}");
        assert!(
            run_ms(&second) >= 100,
            "reuse waits the provider latency: {second}"
        );
        check_file(&app, &first, size).await;
        check_file(&app, &second, size).await;

        let other = completed(&app, &submit(&app, path, &other_shape).await).await;
        let other_keys = keys(&other);
        let own = format!("{}/{}/", app.org_id, other["id"].as_str().unwrap());
        assert!(
            other_keys.iter().all(|k| k.starts_with(&own)),
            "its own output: {other}"
        );
        check_file(&app, &other, other_size).await;
        match path {
            "/api/v1/music/generations" => {
                let seconds = |job: &Value| job["outputData"]["audio"]["duration_seconds"].as_f64();
                assert_close(seconds(&first).unwrap(), 1.0, 0.05, "first track");
                assert_close(seconds(&other).unwrap(), 2.0, 0.05, "other track");
            }
            "/api/v1/audio/speech" => {
                assert_eq!(first["outputData"]["character_count"], 11);
                assert_eq!(other["outputData"]["character_count"], 33);
            }
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_to_text_answers_a_constant_transcript_as_long_as_the_audio() {
    let app = TestApp::spawn_with(with_bench_noop(200)).await;
    let wav = b64(&tone_wav(2.5));
    let body = json!({
        "file": wav, "timestamp_granularities": ["segment", "word"], "diarization": true,
    });
    let first = submit(&app, "/api/v1/audio/transcriptions", &body).await;
    let second = submit(&app, "/api/v1/audio/transcriptions", &json!({"file": wav})).await;
    let (first, second) = (
        completed(&app, &first).await,
        completed(&app, &second).await,
    );
    assert_eq!(first["model"], "bench/noop-stt");
    for job in [&first, &second] {
        let output = &job["outputData"];
        assert_eq!(output["text"], TRANSCRIPT, "{job}");
        assert_eq!(output["language"], "en");
        assert_close(output["duration"].as_f64().unwrap(), 2.5, 0.01, "duration");
        assert_eq!(output["segments"][0]["text"], TRANSCRIPT);
        assert_eq!(job["actualCredits"], 1, "one started minute: {job}");
        assert!(run_ms(job) >= 200, "waits the provider latency: {job}");
    }
    let words = first["outputData"]["words"].as_array().unwrap();
    assert_eq!(words.len(), 5);
    assert_eq!(first["outputData"]["segments"][0]["speaker"], "SPEAKER_00");
    assert!(second["outputData"]["words"].is_null());

    // Sync, as text: the API renders the stored transcript as usual.
    let response = app
        .client
        .post(app.url("/api/v1/audio/transcriptions"))
        .bearer_auth(&app.key)
        .json(&json!({"file": wav, "model": "bench/noop", "response_format": "text"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap().trim(), TRANSCRIPT);
}
