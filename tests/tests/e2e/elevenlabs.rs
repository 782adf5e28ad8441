//! Speech models on the `elevenlabs` adapter through API, queue and worker,
//! against a fake of ElevenLabs' documented API: text to speech
//! (`POST /v1/text-to-speech/{voice_id}?output_format=...`, key in
//! `xi-api-key`), instant voice cloning (`POST /v1/voices/add`, multipart
//! `name` and `files`) and speech to text (`POST /v1/speech-to-text`,
//! multipart, words with timings and speakers).

use base64::Engine;
use serde_json::{Value, json};
use unigen_core::config::{ModelEntry, UpstreamSettings};
use unigen_tests::{TestApp, TestOptions, json_of};
use wiremock::matchers::{header, method, path, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::media::{assert_close, duration_of, fetch, probe, tone_wav};

const KEY: &str = "xi-test-secret";

/// One second of a tone as MP3 (what ElevenLabs answers for mp3_44100_128).
fn tone_mp3() -> Vec<u8> {
    let out = std::env::temp_dir().join(format!("unigen-eleven-{}.mp3", uuid::Uuid::new_v4()));
    let status = std::process::Command::new("ffmpeg")
        .args([
            "-v",
            "error",
            "-f",
            "lavfi",
            "-i",
            "sine=frequency=440:duration=1:sample_rate=44100",
        ])
        .args(["-c:a", "libmp3lame", "-f", "mp3", "-y"])
        .arg(&out)
        .status()
        .expect("ffmpeg runs");
    assert!(status.success());
    let bytes = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_file(out);
    bytes
}

/// Text to speech: MP3 for mp3_44100_128, one second of raw 24 kHz 16-bit
/// PCM for pcm_24000, 422 for anything else.
struct FakeSpeech {
    mp3: Vec<u8>,
}

impl Respond for FakeSpeech {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        if body["text"].as_str().is_none_or(str::is_empty) || body["model_id"].as_str().is_none() {
            return ResponseTemplate::new(422)
                .set_body_json(json!({"detail": [{"msg": "text and model_id are required"}]}));
        }
        let format = request
            .url
            .query_pairs()
            .find(|(k, _)| k == "output_format")
            .map(|(_, v)| v.into_owned());
        match format.as_deref() {
            Some("mp3_44100_128") => ResponseTemplate::new(200).set_body_raw(self.mp3.clone(), "audio/mpeg"),
            Some("pcm_24000") => {
                let pcm: Vec<u8> = (0..24_000u32)
                    .flat_map(|i| (((f64::from(i) / 24_000.0 * 440.0 * std::f64::consts::TAU).sin() * 8000.0) as i16).to_le_bytes())
                    .collect();
                ResponseTemplate::new(200).set_body_raw(pcm, "audio/pcm")
            }
            _ => ResponseTemplate::new(422).set_body_json(json!({"detail": {"status": "invalid_output_format", "message": "unsupported output_format"}})),
        }
    }
}

fn model(id: &str, capability: &str, upstream_model: &str) -> ModelEntry {
    serde_json::from_value(json!({
        "id": id, "category": "audio", "tier": "standard", "adapter": "elevenlabs", "owned_by": "elevenlabs",
        "upstream": "eleven", "upstream_model": upstream_model, "capabilities": [capability], "credits_per_unit": 2,
        "voices": {"nova": "voiceNova01"}
    }))
    .unwrap()
}

async fn fake_elevenlabs() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path_regex(r"^/v1/text-to-speech/[A-Za-z0-9_-]+$"))
        .and(header("xi-api-key", KEY))
        .respond_with(FakeSpeech { mp3: tone_mp3() })
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/voices/add"))
        .and(header("xi-api-key", KEY))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(
                json!({"voice_id": "clonedVoice01", "requires_verification": false}),
            ),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/speech-to-text"))
        .and(header("xi-api-key", KEY))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "language_code": "eng", "language_probability": 0.98, "text": "Hello there. Hi!",
            "words": [
                {"text": "Hello", "start": 0.0, "end": 0.4, "type": "word", "speaker_id": "speaker_0"},
                {"text": " ", "start": 0.4, "end": 0.5, "type": "spacing", "speaker_id": "speaker_0"},
                {"text": "there.", "start": 0.5, "end": 0.9, "type": "word", "speaker_id": "speaker_0"},
                {"text": " ", "start": 0.9, "end": 1.0, "type": "spacing", "speaker_id": "speaker_0"},
                {"text": "Hi!", "start": 1.0, "end": 1.3, "type": "word", "speaker_id": "speaker_1"}
            ]
        })))
        .mount(&server)
        .await;
    server
}

async fn stack(server: &MockServer) -> TestApp {
    let url = server.uri();
    TestApp::spawn_with(TestOptions::default().configure(move |s| {
        s.upstreams.insert(
            "eleven".into(),
            UpstreamSettings {
                base_url: url,
                api_key: KEY.into(),
                timeout_seconds: 10,
                ..Default::default()
            },
        );
        s.models.push(model(
            "elevenlabs/tts",
            "text_to_speech",
            "eleven_multilingual_v2",
        ));
        s.models
            .push(model("elevenlabs/scribe", "speech_to_text", "scribe_v1"));
    }))
    .await
}

fn requests_to<'a>(requests: &'a [Request], at: &str) -> Vec<&'a Request> {
    requests
        .iter()
        .filter(|r| r.url.path().starts_with(at))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_on_elevenlabs_maps_voices_clones_a_sample_once_and_converts_formats() {
    let server = fake_elevenlabs().await;
    let app = stack(&server).await;
    let speak = |body: Value| {
        let app = &app;
        async move {
            let (status, answer) =
                json_of(app.post_json("/api/v1/audio/speech", &app.key, &body).await).await;
            assert_eq!(status, 200, "{answer}");
            fetch(app, answer["audio_url"].as_str().unwrap()).await
        }
    };
    // An OpenAI voice name, mapped by the model's `voices`; MP3 as ElevenLabs made it.
    let mp3 =
        speak(json!({"model": "elevenlabs/tts", "input": "Hello there", "voice": "nova"})).await;
    assert_close(duration_of(&probe(&mp3)), 1.0, 0.1, "ElevenLabs' MP3");
    // A sample to clone, twice: one voice is created and reused. WAV is made
    // from ElevenLabs' PCM.
    let sample = format!(
        "data:audio/wav;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(tone_wav(1.0))
    );
    for _ in 0..2 {
        let wav = speak(
            json!({"model": "elevenlabs/tts", "input": "Cloned", "response_format": "wav",
            "reference_audio": sample, "reference_text": "a tone"}),
        )
        .await;
        assert_eq!(&wav[..4], b"RIFF");
        assert_close(duration_of(&probe(&wav)), 1.0, 0.05, "WAV from 24 kHz PCM");
    }
    let requests = server.received_requests().await.unwrap();
    let tts = requests_to(&requests, "/v1/text-to-speech/");
    let voices: Vec<&str> = tts
        .iter()
        .map(|r| r.url.path().rsplit('/').next().unwrap())
        .collect();
    assert_eq!(voices, ["voiceNova01", "clonedVoice01", "clonedVoice01"]);
    let formats: Vec<String> = tts
        .iter()
        .map(|r| {
            r.url
                .query_pairs()
                .find(|(k, _)| k == "output_format")
                .unwrap()
                .1
                .into_owned()
        })
        .collect();
    assert_eq!(formats, ["mp3_44100_128", "pcm_24000", "pcm_24000"]);
    let sent: Value = serde_json::from_slice(&tts[0].body).unwrap();
    assert_eq!(
        (sent["text"].as_str(), sent["model_id"].as_str()),
        (Some("Hello there"), Some("eleven_multilingual_v2"))
    );
    let clones = requests_to(&requests, "/v1/voices/add");
    assert_eq!(clones.len(), 1, "one clone per organization and sample");
    let form = String::from_utf8_lossy(&clones[0].body);
    assert!(
        form.contains("name=\"name\"") && form.contains("name=\"files\""),
        "{form}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcription_on_elevenlabs_has_segments_words_and_speakers() {
    let server = fake_elevenlabs().await;
    let app = stack(&server).await;
    let file = format!(
        "data:audio/wav;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(tone_wav(1.5))
    );
    let body = json!({"model": "elevenlabs/scribe", "file": file, "response_format": "json",
        "diarization": true, "timestamp_granularities": ["word", "segment"], "language": "en"});
    let (status, transcript) = json_of(
        app.post_json("/api/v1/audio/transcriptions", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(status, 200, "{transcript}");
    assert_eq!(transcript["text"], "Hello there. Hi!");
    assert_eq!(transcript["language"], "en", "{transcript}");
    let segments = transcript["segments"].as_array().unwrap();
    let texts: Vec<&str> = segments
        .iter()
        .map(|s| s["text"].as_str().unwrap().trim())
        .collect();
    assert_eq!(texts, ["Hello there.", "Hi!"]);
    let words: Vec<&str> = transcript["words"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["word"].as_str().unwrap())
        .collect();
    assert_eq!(words, ["Hello", "there.", "Hi!"]);
    let speakers: Vec<&str> = segments
        .iter()
        .map(|s| s["speaker"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(speakers, ["SPEAKER_00", "SPEAKER_01"], "{transcript}");
    let request = &server.received_requests().await.unwrap()[0];
    let form = String::from_utf8_lossy(&request.body);
    for field in [
        "model_id",
        "diarize",
        "timestamps_granularity",
        "language_code",
        "file",
    ] {
        assert!(
            form.contains(&format!("name=\"{field}\"")),
            "{field} missing from {form}"
        );
    }
    assert!(form.contains("scribe_v1"), "{form}");

    // Scribe does not translate: refused before anything is stored or sent.
    let body = json!({"model": "elevenlabs/scribe", "file": file});
    let (status, error) = json_of(
        app.post_json("/api/v1/audio/translations", &app.key, &body)
            .await,
    )
    .await;
    assert_eq!(
        (status, error["error"]["param"].as_str()),
        (400, Some("model")),
        "{error}"
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

/// ElevenLabs keeping its voices as the real one does: `POST /v1/voices/add`
/// answers a new `voice_id` per clone, `DELETE /v1/voices/{voice_id}`
/// answers `{"status": "ok"}` (404 `voice_not_found` for a voice it does not
/// have), and text to speech with a voice it does not have is a 404.
#[derive(Clone, Default)]
struct Voices {
    live: std::sync::Arc<std::sync::Mutex<(u32, std::collections::BTreeSet<String>)>>,
}

fn voice_not_found(voice_id: &str) -> ResponseTemplate {
    ResponseTemplate::new(404).set_body_json(json!({"detail": {"status": "voice_not_found",
        "message": format!("A voice with voice_id {voice_id} was not found.")}}))
}

struct AddVoice(Voices);
impl Respond for AddVoice {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let form = String::from_utf8_lossy(&request.body);
        if !form.contains("name=\"name\"") || !form.contains("name=\"files\"") {
            return ResponseTemplate::new(422)
                .set_body_json(json!({"detail": [{"msg": "name and files are required"}]}));
        }
        let mut live = self.0.live.lock().unwrap();
        live.0 += 1;
        let id = format!("clonedVoice{:02}", live.0);
        live.1.insert(id.clone());
        ResponseTemplate::new(200)
            .set_body_json(json!({"voice_id": id, "requires_verification": false}))
    }
}

struct DeleteVoice(Voices);
impl Respond for DeleteVoice {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let id = request.url.path().rsplit('/').next().unwrap_or_default();
        if self.0.live.lock().unwrap().1.remove(id) {
            ResponseTemplate::new(200).set_body_json(json!({"status": "ok"}))
        } else {
            voice_not_found(id)
        }
    }
}

struct LiveSpeech(Voices, FakeSpeech);
impl Respond for LiveSpeech {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let id = request.url.path().rsplit('/').next().unwrap_or_default();
        let premade = ["voiceNova01", "premadeVoice9"].contains(&id);
        if premade || self.0.live.lock().unwrap().1.contains(id) {
            self.1.respond(request)
        } else {
            voice_not_found(id)
        }
    }
}

async fn elevenlabs_with_voices() -> (MockServer, Voices) {
    let server = MockServer::start().await;
    let voices = Voices::default();
    Mock::given(method("POST"))
        .and(path_regex(r"^/v1/text-to-speech/[A-Za-z0-9_-]+$"))
        .and(header("xi-api-key", KEY))
        .respond_with(LiveSpeech(voices.clone(), FakeSpeech { mp3: tone_mp3() }))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/voices/add"))
        .and(header("xi-api-key", KEY))
        .respond_with(AddVoice(voices.clone()))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path_regex(r"^/v1/voices/[A-Za-z0-9_-]+$"))
        .and(header("xi-api-key", KEY))
        .respond_with(DeleteVoice(voices.clone()))
        .mount(&server)
        .await;
    (server, voices)
}

fn live_voices(voices: &Voices) -> Vec<String> {
    voices.live.lock().unwrap().1.iter().cloned().collect()
}

fn sample_of(seconds: f64) -> String {
    format!(
        "data:audio/wav;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(tone_wav(seconds))
    )
}

async fn speak_as(app: &TestApp, key: &str, body: Value) -> (u16, Value) {
    json_of(app.post_json("/api/v1/audio/speech", key, &body).await).await
}

fn clone_request(sample: &str) -> Value {
    json!({"model": "elevenlabs/tts", "input": "Cloned", "reference_audio": sample,
        "reference_text": "a tone"})
}

fn paths(requests: &[Request], verb: &str, at: &str) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.method.as_str() == verb && r.url.path().starts_with(at))
        .map(|r| r.url.path().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elevenlabs_clones_are_recorded_and_reused_by_a_restarted_worker() {
    let (server, voices) = elevenlabs_with_voices().await;
    let url = server.uri();
    let mut app =
        TestApp::spawn_with(TestOptions::default().without_worker().configure(move |s| {
            s.upstreams.insert(
                "eleven".into(),
                UpstreamSettings {
                    base_url: url,
                    api_key: KEY.into(),
                    timeout_seconds: 10,
                    ..Default::default()
                },
            );
            s.models.push(model(
                "elevenlabs/tts",
                "text_to_speech",
                "eleven_multilingual_v2",
            ));
        }))
        .await;
    let sample = sample_of(1.0);
    let first = app.spawn_worker(|_| {});
    let (status, answer) = speak_as(&app, &app.key, clone_request(&sample)).await;
    assert_eq!(status, 200, "{answer}");
    // The worker restarts: a new process, nothing in memory.
    first.cancel();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let _second = app.spawn_worker(|_| {});
    let (status, answer) = speak_as(&app, &app.key, clone_request(&sample)).await;
    assert_eq!(status, 200, "{answer}");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(
        paths(&requests, "POST", "/v1/voices/add").len(),
        1,
        "the clone outlives the worker that made it"
    );
    assert_eq!(live_voices(&voices), ["clonedVoice01"]);
    assert_eq!(
        paths(&requests, "POST", "/v1/text-to-speech/"),
        [
            "/v1/text-to-speech/clonedVoice01",
            "/v1/text-to-speech/clonedVoice01"
        ]
    );
    let recorded = app
        .db
        .scalar_i64(&format!(
            "SELECT count(*) FROM voice_clones WHERE org_id = '{}' AND voice_id = 'clonedVoice01'",
            app.org_id
        ))
        .await;
    assert_eq!(recorded, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elevenlabs_clones_are_capped_per_org_least_recent_and_idle_ones_deleted_upstream() {
    let (server, voices) = elevenlabs_with_voices().await;
    let url = server.uri();
    let app = TestApp::spawn_with(TestOptions::default().configure(move |s| {
        s.upstreams.insert(
            "eleven".into(),
            UpstreamSettings {
                base_url: url,
                api_key: KEY.into(),
                timeout_seconds: 10,
                ..Default::default()
            },
        );
        s.models.push(model(
            "elevenlabs/tts",
            "text_to_speech",
            "eleven_multilingual_v2",
        ));
        s.voices.max_clones_per_org = 2;
    }))
    .await;
    let (one, two, three) = (sample_of(1.0), sample_of(1.5), sample_of(2.0));
    for sample in [&one, &two, &one, &three] {
        let (status, answer) = speak_as(&app, &app.key, clone_request(sample)).await;
        assert_eq!(status, 200, "{answer}");
    }
    // `two` was the least recently used when `three` needed room.
    let requests = server.received_requests().await.unwrap();
    assert_eq!(paths(&requests, "POST", "/v1/voices/add").len(), 3);
    assert_eq!(
        paths(&requests, "DELETE", "/v1/voices/"),
        ["/v1/voices/clonedVoice02"]
    );
    assert_eq!(live_voices(&voices), ["clonedVoice01", "clonedVoice03"]);
    let kept = format!(
        "SELECT count(*) FROM voice_clones WHERE org_id = '{}'",
        app.org_id
    );
    assert_eq!(app.db.scalar_i64(&kept).await, 2);

    // A clone idle longer than `clone_idle_seconds` is deleted by the next
    // speech request, whatever voice it uses.
    app.sql(
        "UPDATE voice_clones SET last_used_at = now() - interval '2 days' \
         WHERE voice_id = 'clonedVoice01'",
    )
    .await;
    let (status, answer) = speak_as(
        &app,
        &app.key,
        json!({"model": "elevenlabs/tts", "input": "Plain", "voice": "nova"}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(live_voices(&voices), ["clonedVoice03"]);
    assert_eq!(app.db.scalar_i64(&kept).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elevenlabs_raw_voice_ids_pass_only_from_the_operator_allowlist() {
    let (server, _voices) = elevenlabs_with_voices().await;
    let url = server.uri();
    let app = TestApp::spawn_with(TestOptions::default().configure(move |s| {
        s.upstreams.insert(
            "eleven".into(),
            UpstreamSettings {
                base_url: url,
                api_key: KEY.into(),
                timeout_seconds: 10,
                ..Default::default()
            },
        );
        s.models.push(model(
            "elevenlabs/tts",
            "text_to_speech",
            "eleven_multilingual_v2",
        ));
        s.voices.allowed_voice_ids = vec!["premadeVoice9".into()];
    }))
    .await;
    // The first organization clones a voice.
    let (status, answer) = speak_as(&app, &app.key, clone_request(&sample_of(1.0))).await;
    assert_eq!(status, 200, "{answer}");
    // Another organization names that clone's id: refused, nothing sent.
    let other = app.create_org("Other org", "pro").await;
    let other_key = app.create_key(other, &["all"], None).await;
    let speak =
        |voice: &str| json!({"model": "elevenlabs/tts", "input": "Whose voice", "voice": voice});
    let (status, answer) = speak_as(&app, &other_key, speak("clonedVoice01")).await;
    assert_ne!(status, 200, "another tenant's clone was used: {answer}");
    // The catalogue's names and ids, and the operator's allowlist, pass.
    for voice in ["nova", "voiceNova01", "premadeVoice9"] {
        let (status, answer) = speak_as(&app, &other_key, speak(voice)).await;
        assert_eq!(status, 200, "{voice}: {answer}");
    }
    let requests = server.received_requests().await.unwrap();
    assert_eq!(
        paths(&requests, "POST", "/v1/text-to-speech/"),
        [
            "/v1/text-to-speech/clonedVoice01",
            "/v1/text-to-speech/voiceNova01",
            "/v1/text-to-speech/voiceNova01",
            "/v1/text-to-speech/premadeVoice9"
        ]
    );
}
