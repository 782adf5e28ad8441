//! Helpers to check media files for what they claim.

use base64::Engine;
use serde_json::Value;
use unigen_tests::TestApp;

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub async fn fetch(app: &TestApp, url: &str) -> Vec<u8> {
    let response = app.download(url).await;
    assert_eq!(response.status(), 200, "{url}");
    response.bytes().await.unwrap().to_vec()
}

/// `ffprobe` facts about the first stream of `bytes`.
pub fn probe(bytes: &[u8]) -> Value {
    let path = std::env::temp_dir().join(format!("unigen-probe-{}", uuid::Uuid::new_v4()));
    std::fs::write(&path, bytes).unwrap();
    let output = std::process::Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-print_format",
            "json",
            "-show_format",
            "-show_streams",
            "-count_frames",
        ])
        .arg(&path)
        .output()
        .expect("ffprobe runs");
    let _ = std::fs::remove_file(&path);
    assert!(
        output.status.success(),
        "ffprobe: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

pub fn duration_of(probe: &Value) -> f64 {
    probe["format"]["duration"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

pub fn assert_close(actual: f64, expected: f64, tolerance: f64, what: &str) {
    assert!(
        (actual - expected).abs() <= expected * tolerance,
        "{what}: {actual} vs {expected}"
    );
}

/// A real PNG made by the API itself: `POST /images/generations`.
pub async fn generated_png(app: &TestApp, size: &str) -> (String, Vec<u8>) {
    let body =
        serde_json::json!({"prompt": "a red house in a green field", "size": size, "seed": 5});
    let response = app
        .post_json("/api/v1/images/generations", &app.key, &body)
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let url = body["data"][0]["url"].as_str().unwrap().to_owned();
    let bytes = fetch(app, &url).await;
    (url, bytes)
}

/// Speech for `text` made by the API: `POST /audio/speech` in `format`.
pub async fn spoken(app: &TestApp, text: &str, format: &str) -> Vec<u8> {
    let body = serde_json::json!({"input": text, "response_format": format, "voice": "alloy"});
    let response = app.post_json("/api/v1/audio/speech", &app.key, &body).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    fetch(app, body["audio_url"].as_str().unwrap()).await
}

/// `image` as a PNG file.
pub fn png_of(image: &image::RgbImage) -> Vec<u8> {
    let mut bytes = Vec::new();
    image
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .unwrap();
    bytes
}

/// `seconds` of a 440 Hz tone as 16-bit 16 kHz mono WAV.
pub fn tone_wav(seconds: f64) -> Vec<u8> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut bytes = std::io::Cursor::new(Vec::new());
    let mut writer = hound::WavWriter::new(&mut bytes, spec).unwrap();
    for i in 0..(seconds * 16_000.0) as u32 {
        let t = f64::from(i) / 16_000.0;
        writer
            .write_sample(((t * 440.0 * std::f64::consts::TAU).sin() * 8000.0) as i16)
            .unwrap();
    }
    writer.finalize().unwrap();
    bytes.into_inner()
}
