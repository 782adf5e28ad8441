//! The media endpoints as the official OpenAI SDKs call them (issue "OpenAI
//! drop-in"): `response_format=b64_json` images, multipart image edits,
//! transcriptions and translations (the SDKs' `multipart/form-data`, arrays
//! as `name[]`), verbose_json, and flac/pcm speech.

use std::time::Duration;

use base64::Engine;
use image::GenericImageView;
use reqwest::multipart::{Form, Part};
use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, json_of};

use crate::media::{duration_of, fetch, generated_png, probe, spoken};

const SENTENCE: &str = "The quick brown fox jumps over the lazy dog";

fn file(bytes: Vec<u8>, name: &str, mime: &str) -> Part {
    Part::bytes(bytes)
        .file_name(name.to_owned())
        .mime_str(mime)
        .expect("a valid MIME type")
}

async fn post_form(app: &TestApp, path: &str, form: Form) -> reqwest::Response {
    app.client
        .post(app.url(path))
        .bearer_auth(&app.key)
        .multipart(form)
        .send()
        .await
        .expect("POST multipart")
}

fn decoded(b64: &Value) -> image::DynamicImage {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.as_str().expect("b64_json is a string"))
        .expect("b64_json is base64");
    image::load_from_memory(&bytes).expect("b64_json is an image")
}

fn assert_invalid(status: u16, body: &Value, param: &str, message: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], param, "{body}");
    let text = body["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains(message), "`{text}` lacks `{message}`");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_media_images_answer_b64_json_when_asked() {
    let app = TestApp::spawn().await;
    let body = json!({"prompt": "a lighthouse", "size": "512x512", "n": 2, "seed": 3,
                      "response_format": "b64_json"});
    let (status, answer) = json_of(
        app.post_json("/api/v1/images/generations", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let data = answer["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    for item in data {
        assert!(item.get("url").is_none(), "no url with b64_json: {item}");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(item["b64_json"].as_str().unwrap())
            .unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
        assert_eq!(
            image::load_from_memory(&bytes).unwrap().dimensions(),
            (512, 512)
        );
        assert_eq!(
            (item["width"].as_u64(), item["height"].as_u64()),
            (Some(512), Some(512))
        );
    }

    // `url` (the default) answers URLs only.
    let body = json!({"prompt": "a lighthouse", "size": "512x512", "response_format": "url"});
    let (status, answer) = json_of(
        app.post_json("/api/v1/images/generations", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["data"][0]["url"].is_string() && answer["data"][0].get("b64_json").is_none());

    // Async: the job keeps URLs whatever the format asked.
    let body = json!({"prompt": "a boat", "size": "512x512", "response_format": "b64_json"});
    let id = app.submit_image_async(&body).await;
    let job = app.wait_for_job(&id, Duration::from_secs(60)).await;
    assert_eq!(job["status"], "completed", "{job}");
    assert!(job["outputData"]["images"][0]["url"].is_string(), "{job}");

    let jobs_before = app.count_jobs().await;
    let (status, answer) = json_of(
        app.post_json(
            "/api/v1/images/generations",
            &app.key,
            &json!({"prompt": "x", "response_format": "base64"}),
        )
        .await,
    )
    .await;
    assert_invalid(status, &answer, "response_format", "url, b64_json");
    assert_eq!(app.count_jobs().await, jobs_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_media_multipart_image_edits_work_as_the_sdk_sends_them() {
    let app = TestApp::spawn().await;
    let (image_url, png) = generated_png(&app, "512x512").await;

    // images.edit(image=open(...), prompt=..., n=1, size=..., response_format="b64_json")
    let form = Form::new()
        .part("image", file(png.clone(), "house.png", "image/png"))
        .text("prompt", "film noir")
        .text("n", "1")
        .text("size", "512x512")
        .text("response_format", "b64_json");
    let (status, answer) = json_of(post_form(&app, "/api/v1/images/edits", form).await).await;
    assert_eq!(status, 200, "{answer}");
    let item = &answer["data"][0];
    assert!(item.get("url").is_none(), "{item}");
    assert_eq!(decoded(&item["b64_json"]).dimensions(), (512, 512));
    assert_eq!(
        (item["width"].as_u64(), item["height"].as_u64()),
        (Some(512), Some(512))
    );

    // Several images as `image[]` (the first is edited) and an OpenAI mask:
    // its transparent square is what gets repainted.
    let mask = image::RgbaImage::from_fn(512, 512, |x, y| {
        let hole = (192..320).contains(&x) && (192..320).contains(&y);
        image::Rgba([0, 0, 0, if hole { 0 } else { 255 }])
    });
    let mut mask_png = Vec::new();
    image::DynamicImage::ImageRgba8(mask)
        .write_to(
            &mut std::io::Cursor::new(&mut mask_png),
            image::ImageFormat::Png,
        )
        .unwrap();
    let form = Form::new()
        .part("image[]", file(png.clone(), "a.png", "image/png"))
        .part("image[]", file(png.clone(), "b.png", "image/png"))
        .part("mask", file(mask_png, "mask.png", "image/png"))
        .text("prompt", "a bright yellow door")
        .text("response_format", "b64_json");
    let (status, answer) = json_of(post_form(&app, "/api/v1/images/edits", form).await).await;
    assert_eq!(status, 200, "{answer}");
    let edited = decoded(&answer["data"][0]["b64_json"]).to_rgb8();
    let original = image::load_from_memory(&png).unwrap().to_rgb8();
    let mean_change = |x0: u32, y0: u32| {
        let mut sum = 0u64;
        for y in y0..y0 + 64 {
            for x in x0..x0 + 64 {
                let (a, b) = (edited.get_pixel(x, y), original.get_pixel(x, y));
                sum += (0..3).map(|c| u64::from(a[c].abs_diff(b[c]))).sum::<u64>();
            }
        }
        sum as f64 / (64.0 * 64.0 * 3.0)
    };
    let inside = mean_change(224, 224);
    let outside = mean_change(16, 16);
    assert!(
        inside > outside + 5.0,
        "the transparent area changed ({inside:.1}) more than the rest ({outside:.1})"
    );

    // A URL given as text stands for the file; the JSON body still works.
    let form = Form::new()
        .text("image", image_url.clone())
        .text("operation", "colorization");
    let (status, answer) = json_of(post_form(&app, "/api/v1/images/edits", form).await).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["data"][0]["url"].is_string(), "{answer}");
    let body =
        json!({"image": image_url, "operation": "superResolution", "response_format": "b64_json"});
    let (status, answer) =
        json_of(app.post_json("/api/v1/images/edits", &app.key, &body).await).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        decoded(&answer["data"][0]["b64_json"]).dimensions(),
        (1024, 1024)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_media_bad_multipart_edits_are_clear_400s() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker().configure_api(|s| {
        s.fetch.max_bytes = 64 * 1024;
        s.http.max_body_bytes = 256 * 1024;
    }))
    .await;
    let mut small = Vec::new();
    image::DynamicImage::new_rgb8(64, 64)
        .write_to(
            &mut std::io::Cursor::new(&mut small),
            image::ImageFormat::Png,
        )
        .unwrap();
    let send = |form: Form| post_form(&app, "/api/v1/images/edits", form);

    let (status, body) = json_of(send(Form::new().text("prompt", "noir")).await).await;
    assert_invalid(status, &body, "image", "image is required");

    let text_file = file(b"hello, not an image".to_vec(), "notes.txt", "text/plain");
    let form = Form::new().part("image", text_file).text("prompt", "noir");
    let (status, body) = json_of(send(form).await).await;
    assert_invalid(
        status,
        &body,
        "image",
        "image is not a JPEG, PNG or WebP image",
    );

    // Over fetch.max_bytes: the same limit (and message) as a URL's.
    let mut big = small.clone();
    big.resize(100 * 1024, 0);
    let form = Form::new()
        .part("image", file(big, "big.png", "image/png"))
        .text("prompt", "noir");
    let (status, body) = json_of(send(form).await).await;
    assert_invalid(status, &body, "image", "image is larger than 64 KB");

    let form = Form::new()
        .part("image", file(small.clone(), "a.png", "image/png"))
        .part("mask", file(b"GIF89a....".to_vec(), "m.gif", "image/gif"))
        .text("prompt", "noir");
    let (status, body) = json_of(send(form).await).await;
    assert_invalid(
        status,
        &body,
        "mask",
        "mask is not a JPEG, PNG or WebP image",
    );

    let form = Form::new()
        .part("picture", file(small.clone(), "a.png", "image/png"))
        .text("prompt", "noir");
    let (status, body) = json_of(send(form).await).await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`picture`") && message.contains("`image`"),
        "{message}"
    );

    let form = Form::new()
        .part("image", file(small.clone(), "a.png", "image/png"))
        .text("prompt", "noir")
        .text("response_format", "jpeg");
    let (status, body) = json_of(send(form).await).await;
    assert_invalid(status, &body, "response_format", "url, b64_json");

    let form = Form::new()
        .part("image", file(small.clone(), "a.png", "image/png"))
        .text("prompt", "noir")
        .text("n", "two");
    let (status, body) = json_of(send(form).await).await;
    assert_invalid(status, &body, "n", "n must be an integer");

    // Over http.max_body_bytes: 413, as for a JSON body.
    let form = Form::new()
        .part(
            "image",
            file(vec![0u8; 300 * 1024], "huge.png", "image/png"),
        )
        .text("prompt", "noir");
    let response = app
        .client
        .post(app.url("/api/v1/images/edits"))
        .bearer_auth(&app.key)
        .multipart(form)
        .send()
        .await
        .expect("the 413 answer (refused on the declared length)");
    let (status, body) = json_of(response).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "payload_too_large");
    // A multipart body without its boundary.
    let response = app
        .client
        .post(app.url("/api/v1/images/edits"))
        .bearer_auth(&app.key)
        .header("content-type", "multipart/form-data")
        .body("--x\r\n")
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(response).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("boundary"),
        "{body}"
    );
    assert_eq!(app.count_jobs().await, 0, "refused requests create no job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_media_multipart_transcription_answers_verbose_json() {
    let app = TestApp::spawn_with(TestOptions::default().with_whisper()).await;
    let wav = spoken(&app, SENTENCE, "wav").await;

    // audio.transcriptions.create(file=..., model=..., response_format="verbose_json",
    //     timestamp_granularities=["word", "segment"], language="en", temperature=0, prompt=...)
    let form = Form::new()
        .part("file", file(wav.clone(), "speech.wav", "audio/wav"))
        .text("model", "local/whisper-tiny-en")
        .text("response_format", "verbose_json")
        .text("timestamp_granularities[]", "word")
        .text("timestamp_granularities[]", "segment")
        .text("language", "en")
        .text("temperature", "0.0")
        .text("prompt", "A sentence about a fox.");
    let (status, body) = json_of(post_form(&app, "/api/v1/audio/transcriptions", form).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["task"], "transcribe");
    assert_eq!(body["language"], "english");
    assert!(body["duration"].as_f64().unwrap() > 1.0, "{body}");
    let text = body["text"].as_str().unwrap().to_lowercase();
    assert!(text.contains("fox") || text.contains("dog"), "{text}");
    let segment = &body["segments"][0];
    assert_eq!(segment["id"], 0, "{segment}");
    assert!(segment["seek"].is_i64(), "{segment}");
    for key in [
        "start",
        "end",
        "temperature",
        "avg_logprob",
        "compression_ratio",
        "no_speech_prob",
    ] {
        assert!(segment[key].is_number(), "{key} in {segment}");
    }
    assert!(segment["text"].is_string());
    let tokens = segment["tokens"].as_array().unwrap();
    assert!(
        !tokens.is_empty() && tokens.iter().all(Value::is_i64),
        "{segment}"
    );
    let words = body["words"].as_array().unwrap();
    assert!(!words.is_empty(), "{body}");
    assert!(
        words[0]["word"].is_string()
            && words[0]["start"].is_number()
            && words[0]["end"].is_number()
    );
    assert_eq!(body["usage"]["type"], "duration", "{body}");

    // `json` keeps this API's shape (its `text` is all OpenAI's json has).
    let form = Form::new().part("file", file(wav.clone(), "speech.wav", "audio/wav"));
    let (status, body) = json_of(post_form(&app, "/api/v1/audio/transcriptions", form).await).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["text"].is_string());
    assert_eq!(body["language"], "en");
    assert!(body["usage"]["credits_used"].is_number(), "{body}");
    assert!(body["segments"][0].get("decoding").is_none(), "{body}");
    assert!(body["segments"][0].get("speaker").is_some(), "{body}");

    let form = Form::new()
        .part("file", file(wav.clone(), "speech.wav", "audio/wav"))
        .text("response_format", "text");
    let response = post_form(&app, "/api/v1/audio/transcriptions", form).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap().to_lowercase();
    assert!(text.contains("fox") || text.contains("dog"), "{text}");

    // Bad parts name their field.
    let form = Form::new().text("model", "local/whisper-tiny-en");
    let (status, body) = json_of(post_form(&app, "/api/v1/audio/transcriptions", form).await).await;
    assert_invalid(status, &body, "file", "file is required");
    let form = Form::new().part("file", file(b"plain text".to_vec(), "a.txt", "text/plain"));
    let (status, body) = json_of(post_form(&app, "/api/v1/audio/transcriptions", form).await).await;
    assert_invalid(status, &body, "file", "file is not MP3, WAV");
    let form = Form::new()
        .part("file", file(wav.clone(), "speech.wav", "audio/wav"))
        .text("temperature", "hot");
    let (status, body) = json_of(post_form(&app, "/api/v1/audio/transcriptions", form).await).await;
    assert_invalid(status, &body, "temperature", "temperature must be a number");
    let form = Form::new()
        .part("file", file(wav, "speech.wav", "audio/wav"))
        .text("timestamp_granularities[]", "char");
    let (status, body) = json_of(post_form(&app, "/api/v1/audio/transcriptions", form).await).await;
    assert_invalid(status, &body, "timestamp_granularities", "segment, word");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_media_translations_answer_english_text() {
    let app = TestApp::spawn_with(TestOptions::default().with_whisper()).await;
    let mp3 = spoken(&app, SENTENCE, "mp3").await;

    // audio.translations.create(file=..., model=..., response_format="verbose_json")
    let form = Form::new()
        .part("file", file(mp3.clone(), "speech.mp3", "audio/mpeg"))
        .text("model", "local/whisper-tiny-en")
        .text("response_format", "verbose_json")
        .text("temperature", "0");
    let (status, body) = json_of(post_form(&app, "/api/v1/audio/translations", form).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["task"], &body["language"]),
        (&json!("translate"), &json!("english"))
    );
    let text = body["text"].as_str().unwrap().to_lowercase();
    assert!(text.contains("fox") || text.contains("dog"), "{text}");
    assert!(body["segments"][0]["tokens"].is_array(), "{body}");

    // The default `json`, and `text`; the job is an stt job that translates.
    let form = Form::new().part("file", file(mp3.clone(), "speech.mp3", "audio/mpeg"));
    let (status, body) = json_of(post_form(&app, "/api/v1/audio/translations", form).await).await;
    assert_eq!(status, 200, "{body}");
    let text = body["text"].as_str().unwrap().to_lowercase();
    assert!(text.contains("fox") || text.contains("dog"), "{body}");
    let (_, jobs) = json_of(app.get("/api/v1/jobs?tool=stt&limit=1", &app.key).await).await;
    assert_eq!(
        jobs["jobs"][0]["inputParams"]["translation"], true,
        "{jobs}"
    );
    let form = Form::new()
        .part("file", file(mp3.clone(), "speech.mp3", "audio/mpeg"))
        .text("response_format", "srt");
    let response = post_form(&app, "/api/v1/audio/translations", form).await;
    assert_eq!(response.status(), 200);
    assert!(response.text().await.unwrap().contains(" --> "));

    // A JSON body (the audio as base64) works too, and the scope is stt.
    let body = json!({"file": crate::media::b64(&mp3), "response_format": "text"});
    let response = app
        .post_json("/api/v1/audio/translations", &app.key, &body)
        .await;
    assert_eq!(response.status(), 200);
    let tts_only = app.create_key(app.org_id, &["tts"], None).await;
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/audio/translations",
            &tts_only,
            &json!({"file": "x"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let form = Form::new()
        .part("file", file(mp3, "speech.mp3", "audio/mpeg"))
        .text("response_format", "docx");
    let (status, body) = json_of(post_form(&app, "/api/v1/audio/translations", form).await).await;
    assert_invalid(status, &body, "response_format", "verbose_json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_media_speech_in_flac_and_pcm_is_real_audio() {
    let app = TestApp::spawn().await;
    // audio.speech.create(..., response_format=...): the SDKs ask for octet-stream.
    let speak = |format: &'static str| {
        app.client
            .post(app.url("/api/v1/audio/speech"))
            .bearer_auth(&app.key)
            .header("accept", "application/octet-stream")
            .json(&json!({"model": "local/espeak", "input": SENTENCE, "voice": "alloy", "response_format": format}))
            .send()
    };
    let response = speak("flac").await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "audio/flac");
    let flac = response.bytes().await.unwrap().to_vec();
    assert!(flac.starts_with(b"fLaC"));
    let probed = probe(&flac);
    assert_eq!(probed["streams"][0]["codec_name"], "flac", "{probed}");
    let flac_seconds = duration_of(&probed);
    assert!(flac_seconds > 1.0, "{probed}");

    let response = speak("pcm").await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "audio/pcm");
    let pcm = response.bytes().await.unwrap().to_vec();
    assert!(
        !pcm.starts_with(b"RIFF") && pcm.len() % 2 == 0,
        "headerless 16-bit samples"
    );
    // 24 kHz, 2 bytes a sample, mono: the same speech lasts as long as the FLAC.
    let pcm_seconds = pcm.len() as f64 / 48_000.0;
    assert!(
        (pcm_seconds - flac_seconds).abs() < 0.05,
        "pcm {pcm_seconds} s vs flac {flac_seconds} s"
    );
    let samples: Vec<i16> = pcm
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    assert!(
        samples.iter().any(|s| s.unsigned_abs() > 1000),
        "not silence"
    );

    // The JSON answer reports the same duration and links the same bytes.
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/audio/speech",
            &app.key,
            &json!({"input": SENTENCE, "voice": "alloy", "response_format": "pcm"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let stored = fetch(&app, body["audio_url"].as_str().unwrap()).await;
    let reported = body["duration_seconds"].as_f64().unwrap();
    assert!(
        (stored.len() as f64 / 48_000.0 - reported).abs() < 1e-6,
        "{body}"
    );

    let (status, body) = json_of(
        app.post_json(
            "/api/v1/audio/speech",
            &app.key,
            &json!({"input": "hi", "response_format": "m4a"}),
        )
        .await,
    )
    .await;
    assert_invalid(status, &body, "response_format", "flac, pcm");
}
