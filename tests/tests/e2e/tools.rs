//! Every generation tool through the whole pipeline, outputs checked.

use std::time::Duration;

use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, json_of};

use crate::media::{assert_close, b64, duration_of, fetch, generated_png, probe, spoken};

async fn error_of(app: &TestApp, path: &str, body: &Value) -> (u16, String, String) {
    let (status, body) = json_of(app.post_json(path, &app.key, body).await).await;
    let message = body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let param = body["error"]["param"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (status, param, message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_image_edit_operation_produces_a_real_image_of_the_right_shape() {
    let app = TestApp::spawn().await;
    let (image_url, png) = generated_png(&app, "512x512").await;
    let mut mask = image::GrayImage::new(512, 512);
    for (x, y, pixel) in mask.enumerate_pixels_mut() {
        pixel.0 = [if (200..300).contains(&x) && (200..300).contains(&y) {
            255
        } else {
            0
        }];
    }
    let mut mask_png = Vec::new();
    mask.write_to(
        &mut std::io::Cursor::new(&mut mask_png),
        image::ImageFormat::Png,
    )
    .unwrap();
    let mask = b64(&mask_png);
    let cases = [
        (
            json!({"operation": "inpainting", "prompt": "a pond", "mask": mask}),
            (512, 512),
            "jpg",
        ),
        (
            json!({"operation": "outpainting", "direction": "right", "expand_pixels": 128}),
            (640, 512),
            "jpg",
        ),
        (json!({"operation": "backgroundRemoval"}), (512, 512), "png"),
        (
            json!({"operation": "backgroundReplace", "new_background": "a night sky"}),
            (512, 512),
            "jpg",
        ),
        (
            json!({"operation": "objectRemoval", "mask": mask}),
            (512, 512),
            "jpg",
        ),
        (
            json!({"operation": "superResolution", "scale": 2}),
            (1024, 1024),
            "jpg",
        ),
        (json!({"operation": "faceEnhancement"}), (512, 512), "jpg"),
        (json!({"operation": "colorization"}), (512, 512), "jpg"),
        (
            json!({"operation": "styleTransfer", "prompt": "pencil sketch"}),
            (512, 512),
            "jpg",
        ),
    ];
    for (mut body, (width, height), format) in cases {
        // Alternate URL and base64 inputs.
        body["image"] = if format == "png" {
            json!(image_url)
        } else {
            json!(b64(&png))
        };
        let (status, result) =
            json_of(app.post_json("/api/v1/images/edits", &app.key, &body).await).await;
        assert_eq!(status, 200, "{} -> {result}", body["operation"]);
        assert_eq!(
            (
                result["data"][0]["width"].as_u64(),
                result["data"][0]["height"].as_u64()
            ),
            (Some(width), Some(height))
        );
        assert_eq!(result["usage"]["edits_used"], 1);
        assert_eq!(result["usage"]["quota_multiplier"], 1.0);
        let bytes = fetch(&app, result["data"][0]["url"].as_str().unwrap()).await;
        let decoded = image::load_from_memory(&bytes).unwrap();
        assert_eq!(
            (decoded.width(), decoded.height()),
            (width as u32, height as u32)
        );
        if format == "png" {
            assert!(bytes.starts_with(b"\x89PNG"));
            let rgba = decoded.to_rgba8();
            assert_eq!(
                rgba.get_pixel(0, 0).0[3],
                0,
                "background removal: corner transparent"
            );
        } else {
            assert!(
                bytes.starts_with(&[0xff, 0xd8, 0xff]),
                "{} is a JPEG",
                body["operation"]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_edit_errors_follow_the_spec_and_create_nothing() {
    let app = TestApp::spawn().await;
    let (_, png) = generated_png(&app, "512x512").await;
    let jobs_before = app.count_jobs().await;
    let image = b64(&png);
    let small_mask = {
        let mut out = Vec::new();
        image::GrayImage::new(10, 10)
            .write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
            .unwrap();
        b64(&out)
    };
    let path = "/api/v1/images/edits";
    let cases = [
        (
            json!({"operation": "colorization"}),
            "image",
            "image is required",
        ),
        (
            json!({"image": image, "operation": "sharpen"}),
            "operation",
            "invalid operation: must be one of inpainting, outpainting, backgroundRemoval, backgroundReplace, objectRemoval, superResolution, faceEnhancement, colorization, styleTransfer",
        ),
        (
            json!({"image": image, "operation": "inpainting", "prompt": "x"}),
            "mask",
            "mask is required for inpainting",
        ),
        (
            json!({"image": image, "operation": "objectRemoval"}),
            "mask",
            "mask is required for objectRemoval",
        ),
        (
            json!({"image": image, "operation": "objectRemoval", "mask": small_mask}),
            "mask",
            "mask must have the image's dimensions (512x512), got 10x10",
        ),
        (
            json!({"image": b64(b"hello"), "operation": "colorization"}),
            "image",
            "image is not a JPEG, PNG or WebP image",
        ),
        (
            json!({"image": "ftp://example.com/a.png", "operation": "colorization"}),
            "image",
            "image must be an http(s) URL or base64 data",
        ),
    ];
    for (body, field, message) in cases {
        let (status, param, text) = error_of(&app, path, &body).await;
        assert_eq!(
            (status, param.as_str(), text.as_str()),
            (400, field, message),
            "{body}"
        );
    }
    assert_eq!(app.count_jobs().await, jobs_before);
    let chat_only = app.create_key(app.org_id, &["image"], None).await;
    let response = app
        .post_json(
            path,
            &chat_only,
            &json!({"image": image, "operation": "colorization"}),
        )
        .await;
    let (status, body) = json_of(response).await;
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (
            403,
            Some("API key does not have required scope: image_edit")
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_media_urls_are_refused_by_default_but_our_own_signed_urls_work() {
    let app = TestApp::spawn_with(
        TestOptions::default().configure(|s| s.fetch.allow_private_addresses = false),
    )
    .await;
    let (url, _) = generated_png(&app, "512x512").await;
    // Someone else's loopback URL is refused...
    let foreign = url
        .replace(&app.base_url, "http://127.0.0.1:9")
        .replace("/files/", "/other/");
    let (status, param, message) = error_of(
        &app,
        "/api/v1/images/edits",
        &json!({"image": foreign, "operation": "colorization"}),
    )
    .await;
    assert_eq!((status, param.as_str()), (400, "image"));
    assert_eq!(
        message,
        "image points to a private or loopback address, which is not allowed"
    );
    // ...while this API's own signed output URL is read from storage directly.
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/images/edits",
            &app.key,
            &json!({"image": url, "operation": "colorization"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let tampered = url.replacen("sig=", "sig=0", 1);
    let (status, param, _) = error_of(
        &app,
        "/api/v1/images/edits",
        &json!({"image": tampered, "operation": "colorization"}),
    )
    .await;
    assert_eq!(
        (status, param.as_str()),
        (400, "image"),
        "a tampered link is fetched like any URL, and refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn videos_are_mp4s_of_the_requested_duration_size_and_fps() {
    let app = TestApp::spawn().await;
    let body = json!({"prompt": "waves on a beach", "duration_seconds": 2, "resolution": "720p", "fps": 30, "aspect_ratio": "9:16"});
    let (status, result) = json_of(
        app.post_json("/api/v1/videos/generations?async=false", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(
        (
            result["data"]["width"].as_u64(),
            result["data"]["height"].as_u64()
        ),
        (Some(720), Some(1280))
    );
    assert_eq!(result["usage"]["credits_used"], 4);
    let mp4 = fetch(&app, result["data"]["url"].as_str().unwrap()).await;
    assert_eq!(&mp4[4..8], b"ftyp");
    let facts = probe(&mp4);
    let stream = &facts["streams"][0];
    assert_eq!(stream["codec_name"], "h264");
    assert_eq!(
        (stream["width"].as_u64(), stream["height"].as_u64()),
        (Some(720), Some(1280))
    );
    assert_eq!(stream["r_frame_rate"], "30/1");
    assert_eq!(stream["nb_read_frames"], "60");
    assert_close(duration_of(&facts), 2.0, 0.05, "video duration");

    // Async by default; image_to_video from a generated image at 60 fps.
    let (image_url, _) = generated_png(&app, "512x512").await;
    let body = json!({"prompt": "zoom", "duration_seconds": 1, "fps": 60, "mode": "image_to_video", "source_image": image_url, "aspect_ratio": "1:1"});
    let (status, created) = json_of(
        app.post_json("/api/v1/videos/generations", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 202, "{created}");
    let job = app
        .wait_for_job(created["id"].as_str().unwrap(), Duration::from_secs(120))
        .await;
    assert_eq!(job["status"], "completed", "{job}");
    let facts = probe(&fetch(&app, job["outputData"]["video"]["url"].as_str().unwrap()).await);
    assert_eq!(facts["streams"][0]["r_frame_rate"], "60/1");
    assert_eq!(
        (
            facts["streams"][0]["width"].as_u64(),
            facts["streams"][0]["height"].as_u64()
        ),
        (Some(720), Some(720))
    );

    for (body, field, message) in [
        (
            json!({"duration_seconds": 2}),
            "prompt",
            "prompt is required",
        ),
        (
            json!({"prompt": "x", "duration_seconds": 11}),
            "duration_seconds",
            "duration_seconds must be between 1 and 10",
        ),
        (
            json!({"prompt": "x", "fps": 24}),
            "fps",
            "fps must be 30 or 60",
        ),
        (
            json!({"prompt": "x", "resolution": "8k"}),
            "resolution",
            "resolution must be one of: 720p, 1080p, 4k",
        ),
        (
            json!({"prompt": "x", "mode": "video_to_video"}),
            "source_video",
            "source_video is required for video_to_video",
        ),
    ] {
        let (status, param, text) = error_of(&app, "/api/v1/videos/generations", &body).await;
        assert_eq!(
            (status, param.as_str(), text.as_str()),
            (400, field, message),
            "{body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_comes_back_in_each_format_and_as_raw_audio_on_request() {
    let app = TestApp::spawn().await;
    let text = "The quick brown fox jumps over the lazy dog.";
    let (status, result) = json_of(
        app.post_json(
            "/api/v1/audio/speech",
            &app.key,
            &json!({"input": text, "response_format": "wav"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["character_count"], 44);
    assert_eq!(result["model"], "local/espeak");
    assert_eq!(result["usage"]["chars_used"], 44);
    let wav = fetch(&app, result["audio_url"].as_str().unwrap()).await;
    assert!(wav.starts_with(b"RIFF") && &wav[8..12] == b"WAVE");
    let seconds = result["duration_seconds"].as_f64().unwrap();
    assert!((1.0..8.0).contains(&seconds), "{seconds}");
    assert_close(duration_of(&probe(&wav)), seconds, 0.05, "wav duration");

    for (format, magic) in [("mp3", &b"ID3"[..]), ("opus", &b"OggS"[..])] {
        let bytes = spoken(&app, text, format).await;
        assert!(
            bytes.starts_with(magic) || (format == "mp3" && bytes[0] == 0xff),
            "{format}"
        );
    }
    let aac = spoken(&app, text, "aac").await;
    assert_eq!((aac[0], aac[1] & 0xf0), (0xff, 0xf0), "ADTS sync");

    let raw = app
        .client
        .post(app.url("/api/v1/audio/speech"))
        .bearer_auth(&app.key)
        .header("accept", "application/octet-stream")
        .json(&json!({"input": "hello", "response_format": "mp3"}))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 200);
    assert_eq!(raw.headers()["content-type"], "audio/mpeg");
    assert!(raw.bytes().await.unwrap().len() > 1000);

    for (body, field, message) in [
        (json!({}), "input", "input is required"),
        (json!({"input": ""}), "input", "input must not be empty"),
        (
            json!({"input": "a".repeat(10_001)}),
            "input",
            "input must be at most 10000 characters",
        ),
        (
            json!({"input": "hi", "speed": 4.5}),
            "speed",
            "speed must be between 0.25 and 4",
        ),
        (
            json!({"input": "hi", "response_format": "m4a"}),
            "response_format",
            "response_format must be one of: mp3, wav, opus, aac, flac, pcm",
        ),
    ] {
        let (status, param, text) = error_of(&app, "/api/v1/audio/speech", &body).await;
        assert_eq!(
            (status, param.as_str(), text.as_str()),
            (400, field, message),
            "{body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_round_trips_through_transcription() {
    let app = TestApp::spawn_with(TestOptions::default().with_whisper()).await;
    let sentence = "The quick brown fox jumps over the lazy dog";
    let wav = spoken(&app, sentence, "wav").await;
    let body = json!({"file": b64(&wav), "timestamp_granularities": ["segment", "word"]});
    let (status, result) = json_of(
        app.post_json("/api/v1/audio/transcriptions", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{result}");
    let heard = result["text"].as_str().unwrap().to_lowercase();
    let expected: Vec<&str> = sentence.split(' ').map(|w| w.trim()).collect();
    let recognized = expected
        .iter()
        .filter(|w| heard.contains(&w.to_lowercase()))
        .count();
    assert!(recognized * 2 >= expected.len(), "heard `{heard}`");
    assert_eq!(result["language"], "en");
    assert_eq!(result["model"], "local/whisper-tiny-en");
    assert!(result["duration"].as_f64().unwrap() > 1.0);
    let segment = &result["segments"][0];
    assert!(segment["end"].as_f64() > segment["start"].as_f64());
    assert!(
        segment.get("speaker").is_some(),
        "speaker is present (null without diarization)"
    );
    assert!(
        !result["words"].as_array().unwrap().is_empty(),
        "top-level words"
    );
    assert!(
        !segment["words"].as_array().unwrap().is_empty(),
        "nested words"
    );
    assert_eq!(result["usage"]["quota_multiplier"], 1.0);

    let mp3 = spoken(&app, sentence, "mp3").await;
    for (format, check) in [
        ("srt", "00:00:00,000 --> "),
        ("vtt", "WEBVTT"),
        ("text", ""),
    ] {
        let response = app
            .post_json(
                "/api/v1/audio/transcriptions",
                &app.key,
                &json!({"file": b64(&mp3), "response_format": format}),
            )
            .await;
        assert_eq!(response.status(), 200, "{format}");
        let text = response.text().await.unwrap();
        assert!(text.contains(check), "{format}: {text}");
        assert!(
            text.to_lowercase().contains("fox") || text.to_lowercase().contains("dog"),
            "{format}: {text}"
        );
    }
    let diarized = json!({"file": b64(&wav), "diarization": true});
    let (_, result) = json_of(
        app.post_json("/api/v1/audio/transcriptions", &app.key, &diarized)
            .await,
    )
    .await;
    assert_eq!(result["segments"][0]["speaker"], "SPEAKER_00");

    let (status, param, message) = error_of(
        &app,
        "/api/v1/audio/transcriptions",
        &json!({"language": "en"}),
    )
    .await;
    assert_eq!(
        (status, param.as_str(), message.as_str()),
        (400, "file", "file is required")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn music_has_the_requested_duration_and_format() {
    let app = TestApp::spawn().await;
    let body =
        json!({"prompt": "happy piano melody", "duration_seconds": 3, "output_format": "wav"});
    let (status, result) = json_of(
        app.post_json("/api/v1/music/generations?async=false", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["usage"]["tracks_used"], 1);
    let wav = fetch(&app, result["data"]["audio_url"].as_str().unwrap()).await;
    let reader = hound::WavReader::new(std::io::Cursor::new(&wav)).unwrap();
    let seconds = reader.duration() as f64 / reader.spec().sample_rate as f64;
    assert_close(seconds, 3.0, 0.05, "wav music duration");

    let body = json!({"prompt": "rock drums and bass", "duration_seconds": 4});
    let (status, created) = json_of(
        app.post_json("/api/v1/music/generations", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 202, "async by default: {created}");
    let job = app
        .wait_for_job(created["id"].as_str().unwrap(), Duration::from_secs(60))
        .await;
    assert_eq!(job["status"], "completed", "{job}");
    let mp3 = fetch(&app, job["outputData"]["audio"]["url"].as_str().unwrap()).await;
    assert_close(duration_of(&probe(&mp3)), 4.0, 0.05, "mp3 music duration");

    let source = spoken(&app, "la la la", "wav").await;
    let body = json!({"prompt": "ambient pad", "duration_seconds": 2, "mode": "audio_to_audio", "source_audio": b64(&source), "output_format": "wav"});
    let (status, result) = json_of(
        app.post_json("/api/v1/music/generations?async=false", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{result}");

    for (body, field, message) in [
        (
            json!({"duration_seconds": 3}),
            "prompt",
            "prompt is required",
        ),
        (
            json!({"prompt": "x", "duration_seconds": 48}),
            "duration_seconds",
            "duration_seconds must be at most 47 for model local/synth-v1",
        ),
        (
            json!({"prompt": "x", "mode": "audio_to_audio"}),
            "source_audio",
            "source_audio is required for audio_to_audio",
        ),
    ] {
        let (status, param, text) = error_of(&app, "/api/v1/music/generations", &body).await;
        assert_eq!(
            (status, param.as_str(), text.as_str()),
            (400, field, message),
            "{body}"
        );
    }
    let body = json!({"prompt": "x", "duration_seconds": 55, "model": "local/synth-long"});
    let response = app
        .post_json("/api/v1/music/generations", &app.key, &body)
        .await;
    assert_eq!(response.status(), 202, "a model that allows 60 s");
}

/// `async=true` works for every tool, and each finished job's `outputData`
/// has the spec's shape for its tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_runs_async_and_its_output_data_has_the_spec_shape() {
    let app = TestApp::spawn_with(TestOptions::default().with_whisper()).await;
    let (image_url, _) = generated_png(&app, "512x512").await;
    let wav = spoken(&app, "Testing one two three", "wav").await;
    let requests = [
        (
            "/api/v1/images/generations?async=true",
            json!({"prompt": "a boat", "size": "512x512"}),
        ),
        (
            "/api/v1/images/edits?async=true",
            json!({"image": image_url, "operation": "colorization"}),
        ),
        (
            "/api/v1/videos/generations?async=true",
            json!({"prompt": "rain", "duration_seconds": 1}),
        ),
        (
            "/api/v1/music/generations?async=true",
            json!({"prompt": "jazz", "duration_seconds": 2}),
        ),
        (
            "/api/v1/audio/speech?async=true",
            json!({"input": "hello there"}),
        ),
        (
            "/api/v1/audio/transcriptions?async=true",
            json!({"file": b64(&wav)}),
        ),
    ];
    let mut jobs = Vec::new();
    for (path, body) in requests {
        let (status, created) = json_of(app.post_json(path, &app.key, &body).await).await;
        assert_eq!(status, 202, "{path}: {created}");
        assert_eq!(created["status"], "pending");
        assert!(
            created["estimated_credits"].as_i64().unwrap() >= 1,
            "{created}"
        );
        jobs.push(created["id"].as_str().unwrap().to_owned());
    }
    for id in jobs {
        let job = app.wait_for_job(&id, Duration::from_secs(120)).await;
        assert_eq!(job["status"], "completed", "{job}");
        assert_eq!(job["progress"], 100);
        assert!(job["actualCredits"].as_i64().unwrap() >= 1);
        let output = &job["outputData"];
        match job["tool"].as_str().unwrap() {
            "image" | "image_edit" => {
                let image = &output["images"][0];
                assert!(
                    image["url"].is_string() && image["width"].is_u64() && image["height"].is_u64(),
                    "{job}"
                );
            }
            "video" => assert!(
                output["video"]["url"].is_string() && output["video"]["duration"].is_number(),
                "{job}"
            ),
            "music" => assert!(
                output["audio"]["url"].is_string()
                    && output["audio"]["duration_seconds"].is_number(),
                "{job}"
            ),
            "tts" => assert!(
                output["audio_url"].is_string() && output["duration_seconds"].is_number(),
                "{job}"
            ),
            "stt" => {
                assert!(
                    output["text"].is_string()
                        && output["segments"].is_array()
                        && output["duration"].is_number(),
                    "{job}"
                );
            }
            other => panic!("unexpected tool {other}"),
        }
        // Every URL in the output downloads.
        for url in collect_urls(output) {
            assert_eq!(app.download(&url).await.status(), 200, "{url}");
        }
    }
}

fn collect_urls(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) if s.starts_with("http") => vec![s.clone()],
        Value::Array(items) => items.iter().flat_map(collect_urls).collect(),
        Value::Object(map) => map.values().flat_map(collect_urls).collect(),
        _ => Vec::new(),
    }
}
