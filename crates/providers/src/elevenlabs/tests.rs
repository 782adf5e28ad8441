use std::time::Duration;

use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use super::*;
use unigen_core::config::VoiceSettings;

const KEY: &str = "el-test-key-0123456789";

fn client(server: &MockServer) -> ElevenLabsClient {
    ElevenLabsClient::new(&UpstreamSettings {
        base_url: server.uri(),
        api_key: KEY.into(),
        timeout_seconds: 5,
        ..Default::default()
    })
}

/// One part of a multipart body: its name, its file name, its content type
/// and its value.
struct FormField {
    name: String,
    filename: Option<String>,
    content_type: Option<String>,
    value: Vec<u8>,
}

fn quoted(headers: &str, attribute: &str) -> Option<String> {
    let at = headers.find(&format!("{attribute}=\""))? + attribute.len() + 2;
    let len = headers[at..].find('"')?;
    Some(headers[at..at + len].to_owned())
}

fn form_fields(request: &Request) -> Vec<FormField> {
    let content_type = request.headers["content-type"].to_str().unwrap();
    assert!(
        content_type.starts_with("multipart/form-data"),
        "{content_type}"
    );
    let boundary = content_type.split("boundary=").nth(1).unwrap().trim();
    let delimiter = format!("--{boundary}");
    let body = &request.body;
    let mut fields = Vec::new();
    let positions: Vec<usize> = body
        .windows(delimiter.len())
        .enumerate()
        .filter(|(_, w)| *w == delimiter.as_bytes())
        .map(|(i, _)| i)
        .collect();
    for pair in positions.windows(2) {
        // `--boundary\r\n<headers>\r\n\r\n<value>\r\n--boundary`
        let part = &body[pair[0] + delimiter.len() + 2..pair[1] - 2];
        let split = part.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let headers = String::from_utf8_lossy(&part[..split]).into_owned();
        let content_type = headers
            .lines()
            .find_map(|l| {
                l.strip_prefix("content-type: ")
                    .or(l.strip_prefix("Content-Type: "))
            })
            .map(str::to_owned);
        fields.push(FormField {
            name: quoted(&headers, " name").unwrap(),
            filename: quoted(&headers, "filename"),
            content_type,
            value: part[split + 4..].to_vec(),
        });
    }
    fields
}

fn text_field(fields: &[FormField], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|f| f.name == name)
        .map(|f| String::from_utf8(f.value.clone()).unwrap())
}

#[tokio::test]
async fn speech_posts_the_text_to_the_voice_with_the_output_format_and_the_key() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/text-to-speech/Voice_1-abc"))
        .and(query_param("output_format", "pcm_24000"))
        .and(header("xi-api-key", KEY))
        .and(body_json(json!({
            "text": "Hello there.",
            "model_id": "eleven_multilingual_v2",
            "voice_settings": {"speed": 1.1}
        })))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(vec![1u8, 2, 3, 4]))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/text-to-speech/Voice_1-abc"))
        .and(query_param("output_format", "mp3_44100_128"))
        .and(body_json(
            json!({"text": "Hi", "model_id": "eleven_flash_v2_5"}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(b"ID3".to_vec()))
        .mount(&server)
        .await;
    let client = client(&server);
    let audio = client
        .speech(&SpeechRequest {
            voice_id: "Voice_1-abc",
            model_id: "eleven_multilingual_v2",
            text: "Hello there.",
            output_format: "pcm_24000",
            speed: Some(1.1),
        })
        .await;
    assert_eq!(audio, Ok(vec![1, 2, 3, 4]));
    // Without a speed there are no voice settings.
    let audio = client
        .speech(&SpeechRequest {
            voice_id: "Voice_1-abc",
            model_id: "eleven_flash_v2_5",
            text: "Hi",
            output_format: "mp3_44100_128",
            speed: None,
        })
        .await;
    assert_eq!(audio, Ok(b"ID3".to_vec()));
}

#[tokio::test]
async fn invalid_voice_ids_and_output_formats_are_refused_without_a_request() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(vec![1u8]))
        .mount(&server)
        .await;
    let client = client(&server);
    let too_long = "a".repeat(65);
    for voice_id in [
        "",
        "../v1/user",
        "a b",
        "voice/other",
        "voice?x=1",
        "vöice",
        too_long.as_str(),
    ] {
        let result = client
            .speech(&SpeechRequest {
                voice_id,
                model_id: "m",
                text: "t",
                output_format: "mp3_44100_128",
                speed: None,
            })
            .await;
        assert!(
            matches!(&result, Err(ProviderError::Permanent(m)) if m.contains("voice id")),
            "{voice_id}: {result:?}"
        );
        assert!(matches!(
            client.delete_voice(voice_id).await,
            Err(ProviderError::Permanent(_))
        ));
    }
    for format in ["", "mp3&x=1", "MP3"] {
        let result = client
            .speech(&SpeechRequest {
                voice_id: "v",
                model_id: "m",
                text: "t",
                output_format: format,
                speed: None,
            })
            .await;
        assert!(
            matches!(result, Err(ProviderError::Permanent(_))),
            "{format}"
        );
    }
    let nan = client
        .speech(&SpeechRequest {
            voice_id: "v",
            model_id: "m",
            text: "t",
            output_format: "mp3_44100_128",
            speed: Some(f64::NAN),
        })
        .await;
    assert!(matches!(nan, Err(ProviderError::Permanent(_))));
    assert!(server.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn add_voice_uploads_the_sample_as_files_with_the_name_and_returns_the_id() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/voices/add"))
        .and(header("xi-api-key", KEY))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "voice_id": "c38kUX8pkfYO2kHyqfFy", "requires_verification": false
        })))
        .mount(&server)
        .await;
    let id = client(&server)
        .add_voice("unigen clone 42", b"RIFFsample".to_vec(), "sample.wav")
        .await;
    assert_eq!(id, Ok("c38kUX8pkfYO2kHyqfFy".to_owned()));
    let requests = server.received_requests().await.unwrap();
    let fields = form_fields(&requests[0]);
    assert_eq!(
        text_field(&fields, "name").as_deref(),
        Some("unigen clone 42")
    );
    let files: Vec<&FormField> = fields.iter().filter(|f| f.name == "files").collect();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].filename.as_deref(), Some("sample.wav"));
    assert_eq!(files[0].content_type.as_deref(), Some("audio/wav"));
    assert_eq!(files[0].value, b"RIFFsample");
}

#[tokio::test]
async fn a_cloned_voice_id_that_is_not_valid_is_refused() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/voices/add"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"voice_id": "../../v1/user"})),
        )
        .mount(&server)
        .await;
    let client = client(&server);
    let id = client.add_voice("clone", vec![1, 2], "a.mp3").await;
    assert!(matches!(id, Err(ProviderError::Permanent(_))), "{id:?}");
    // Nothing to send: no name, or no sample.
    assert!(client.add_voice("  ", vec![1], "a.mp3").await.is_err());
    assert!(
        client
            .add_voice("clone", Vec::new(), "a.mp3")
            .await
            .is_err()
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn delete_voice_deletes_it_and_a_voice_already_gone_counts_as_deleted() {
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .and(path("/v1/voices/abc_1"))
        .and(header("xi-api-key", KEY))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"status": "ok"})))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/v1/voices/gone"))
        .respond_with(ResponseTemplate::new(404).set_body_json(
            json!({"detail": {"status": "voice_not_found", "message": "A voice with the voice_id gone was not found."}}),
        ))
        .mount(&server)
        .await;
    let client = client(&server);
    assert_eq!(client.delete_voice("abc_1").await, Ok(()));
    assert_eq!(client.delete_voice("gone").await, Ok(()));
}

fn scribe_answer() -> Value {
    json!({
        "language_code": "fra",
        "language_probability": 0.98,
        "text": "Bonjour. Ça va? (laughter) Oui merci",
        "words": [
            {"text": "Bonjour.", "start": 0.0, "end": 0.5, "type": "word", "speaker_id": "speaker_0"},
            {"text": " ", "start": 0.5, "end": 0.6, "type": "spacing", "speaker_id": "speaker_0"},
            {"text": "Ça", "start": 0.6, "end": 0.8, "type": "word", "speaker_id": "speaker_0"},
            {"text": " ", "start": 0.8, "end": 0.85, "type": "spacing", "speaker_id": "speaker_0"},
            {"text": "va?", "start": 0.85, "end": 1.2, "type": "word", "speaker_id": "speaker_0"},
            {"text": " ", "start": 1.2, "end": 1.3, "type": "spacing", "speaker_id": "speaker_0"},
            {"text": "(laughter)", "start": 1.3, "end": 1.6, "type": "audio_event", "speaker_id": "speaker_1"},
            {"text": " ", "start": 1.6, "end": 1.7, "type": "spacing", "speaker_id": "speaker_1"},
            {"text": "Oui", "start": 1.7, "end": 1.9, "type": "word", "speaker_id": "speaker_1"},
            {"text": " ", "start": 1.9, "end": 3.5, "type": "spacing", "speaker_id": "speaker_1"},
            // A pause of 1.6 s, same speaker, no sentence end.
            {"text": "merci", "start": 3.5, "end": 3.9, "type": "word", "speaker_id": "speaker_1"}
        ]
    })
}

#[tokio::test]
async fn transcribe_sends_the_options_and_builds_segments_from_the_words() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/speech-to-text"))
        .and(header("xi-api-key", KEY))
        .respond_with(ResponseTemplate::new(200).set_body_json(scribe_answer()))
        .mount(&server)
        .await;
    let transcript = client(&server)
        .transcribe(
            b"ID3audio".to_vec(),
            "talk.mp3",
            &TranscribeRequest {
                model_id: "scribe_v1",
                language: Some("fr"),
                diarize: true,
                words: true,
            },
        )
        .await
        .unwrap();

    let requests = server.received_requests().await.unwrap();
    let fields = form_fields(&requests[0]);
    assert_eq!(
        text_field(&fields, "model_id").as_deref(),
        Some("scribe_v1")
    );
    assert_eq!(text_field(&fields, "diarize").as_deref(), Some("true"));
    assert_eq!(
        text_field(&fields, "timestamps_granularity").as_deref(),
        Some("word")
    );
    assert_eq!(text_field(&fields, "language_code").as_deref(), Some("fr"));
    assert_eq!(
        text_field(&fields, "tag_audio_events").as_deref(),
        Some("false")
    );
    let file = fields.iter().find(|f| f.name == "file").unwrap();
    assert_eq!(
        (file.filename.as_deref(), file.content_type.as_deref()),
        (Some("talk.mp3"), Some("audio/mpeg"))
    );
    assert_eq!(file.value, b"ID3audio");

    assert_eq!(transcript.language, "fr");
    assert_eq!(transcript.text, "Bonjour. Ça va? (laughter) Oui merci");
    assert_eq!(transcript.duration, 3.9);
    let shape: Vec<(&str, f64, f64, Option<&str>)> = transcript
        .segments
        .iter()
        .map(|s| (s.text.as_str(), s.start, s.end, s.speaker.as_deref()))
        .collect();
    assert_eq!(
        shape,
        vec![
            // A sentence end, then a speaker change, then a pause.
            ("Bonjour.", 0.0, 0.5, Some("SPEAKER_00")),
            ("Ça va?", 0.6, 1.2, Some("SPEAKER_00")),
            ("(laughter) Oui", 1.3, 1.9, Some("SPEAKER_01")),
            ("merci", 3.5, 3.9, Some("SPEAKER_01")),
        ]
    );
    // Spacing and audio events are not words.
    let words: Vec<&str> = transcript.segments[2]
        .words
        .as_ref()
        .unwrap()
        .iter()
        .map(|w| w.word.as_str())
        .collect();
    assert_eq!(words, ["Oui"]);
    let all: Vec<&str> = transcript
        .words
        .as_ref()
        .unwrap()
        .iter()
        .map(|w| w.word.as_str())
        .collect();
    assert_eq!(all, ["Bonjour.", "Ça", "va?", "Oui", "merci"]);
    assert_eq!(
        transcript.segments[1].words.as_ref().unwrap()[1],
        Word {
            word: "va?".into(),
            start: 0.85,
            end: 1.2
        }
    );
    assert!(transcript.segments.iter().all(|s| s.decoding.is_none()));
}

#[tokio::test]
async fn without_a_language_or_diarization_none_is_sent() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/speech-to-text"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "language_code": "eng", "text": "Hi.", "words": []
        })))
        .mount(&server)
        .await;
    let transcript = client(&server)
        .transcribe(
            vec![0u8; 4],
            "",
            &TranscribeRequest {
                model_id: "scribe_v1",
                language: Some("auto"),
                diarize: false,
                words: false,
            },
        )
        .await
        .unwrap();
    let requests = server.received_requests().await.unwrap();
    let fields = form_fields(&requests[0]);
    assert_eq!(text_field(&fields, "language_code"), None);
    assert_eq!(text_field(&fields, "diarize").as_deref(), Some("false"));
    // No timing came back: one untimed segment with the text.
    assert_eq!(transcript.language, "en");
    assert_eq!(transcript.segments.len(), 1);
    assert_eq!(transcript.segments[0].text, "Hi.");
    assert_eq!(transcript.segments[0].words, None);
    assert_eq!(transcript.duration, 0.0);
}

#[test]
fn words_are_left_out_unless_asked_and_speakers_unless_diarized() {
    let answer: SpeechToText = serde_json::from_value(scribe_answer()).unwrap();
    let request = TranscribeRequest {
        model_id: "scribe_v1",
        language: None,
        diarize: false,
        words: false,
    };
    let transcript = into_transcript(answer, &request, None);
    assert_eq!(transcript.words, None);
    assert!(transcript.segments.iter().all(|s| s.words.is_none()));
    assert!(transcript.segments.iter().all(|s| s.speaker.is_none()));
    // No speaker changes: the laughter joins the question it follows.
    let texts: Vec<&str> = transcript
        .segments
        .iter()
        .map(|s| s.text.as_str())
        .collect();
    assert_eq!(texts, ["Bonjour.", "Ça va?", "(laughter) Oui", "merci"]);
    let answer: SpeechToText = serde_json::from_value(json!({
        "language_code": "en", "text": "one two",
        "words": [
            {"text": "one", "start": 0.0, "end": 0.4, "type": "word", "speaker_id": "speaker_0"},
            {"text": " ", "start": 0.4, "end": 0.5, "type": "spacing"},
            {"text": "two", "start": 0.5, "end": 0.9, "type": "word", "speaker_id": "speaker_1"}
        ]
    }))
    .unwrap();
    let transcript = into_transcript(answer, &request, None);
    assert_eq!(transcript.segments.len(), 1);
    assert_eq!(transcript.segments[0].text, "one two");
}

#[test]
fn three_letter_languages_become_iso_639_1_and_others_are_kept() {
    for (three, two) in [
        ("eng", "en"),
        ("fra", "fr"),
        ("deu", "de"),
        ("spa", "es"),
        ("ita", "it"),
        ("por", "pt"),
        ("nld", "nl"),
        ("jpn", "ja"),
        ("zho", "zh"),
        ("cmn", "zh"),
        ("rus", "ru"),
        ("KOR", "ko"),
        ("de", "de"),
        ("yue", "yue"),
        ("fil", "tl"),
    ] {
        assert_eq!(iso_639_1(three), two, "{three}");
    }
    let mut sorted = ISO_639_3_TO_1.to_vec();
    sorted.sort_unstable();
    sorted.dedup_by_key(|(three, _)| *three);
    assert_eq!(sorted.len(), ISO_639_3_TO_1.len(), "no duplicates");
}

#[test]
fn our_formats_map_to_elevenlabs_output_formats() {
    assert_eq!(output_format("mp3"), Some("mp3_44100_128"));
    assert_eq!(output_format("opus"), Some("opus_48000_128"));
    assert_eq!(output_format("pcm"), Some("pcm_24000"));
    for ours in ["wav", "aac", "flac", "ogg"] {
        assert_eq!(output_format(ours), None, "{ours}");
    }
}

#[test]
fn sentence_ends() {
    for word in [
        "end.",
        "why?",
        "no!",
        "so…",
        "终。",
        "\"Stop.\"",
        "(really?)",
    ] {
        assert!(ends_sentence(word), "{word}");
    }
    for word in ["Mr", "well,", "3.5kg", "\"quoted\""] {
        assert!(!ends_sentence(word), "{word}");
    }
}

#[tokio::test]
async fn rejections_are_permanent_with_the_short_message_and_never_the_key() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/text-to-speech/unauthorized"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "detail": {"status": "invalid_api_key", "message": format!("Invalid API key: {KEY}")}
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/text-to-speech/unprocessable"))
        .respond_with(ResponseTemplate::new(422).set_body_json(json!({
            "detail": [{"loc": ["body", "text"], "msg": "field required", "type": "value_error.missing"}]
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/text-to-speech/long"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"detail": "x".repeat(500)})))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/text-to-speech/unexplained"))
        .respond_with(ResponseTemplate::new(403).set_body_string(format!("<html>{KEY}</html>")))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/speech-to-text"))
        .respond_with(ResponseTemplate::new(422).set_body_json(json!({
            "detail": {"status": "invalid_language", "message": "Unsupported language_code"}
        })))
        .mount(&server)
        .await;
    let client = client(&server);
    let speak = |voice_id: &'static str| {
        let client = client.clone();
        async move {
            client
                .speech(&SpeechRequest {
                    voice_id,
                    model_id: "m",
                    text: "t",
                    output_format: "mp3_44100_128",
                    speed: None,
                })
                .await
        }
    };
    // The operator's account, not the tenant's request: a neutral message.
    assert_eq!(
        speak("unauthorized").await,
        Err(ProviderError::Permanent(
            crate::http::ACCOUNT_UNAVAILABLE.into()
        ))
    );
    assert_eq!(
        speak("unprocessable").await,
        Err(ProviderError::Permanent("field required".into()))
    );
    assert_eq!(
        speak("long").await,
        Err(ProviderError::Permanent("x".repeat(200)))
    );
    let unexplained = speak("unexplained").await;
    assert!(
        matches!(&unexplained, Err(ProviderError::Permanent(m)) if m == crate::http::ACCOUNT_UNAVAILABLE),
        "{unexplained:?}"
    );
    let transcript = client
        .transcribe(
            vec![1],
            "a.wav",
            &TranscribeRequest {
                model_id: "scribe_v1",
                language: Some("xx"),
                diarize: false,
                words: false,
            },
        )
        .await;
    assert_eq!(
        transcript,
        Err(ProviderError::Permanent("Unsupported language_code".into()))
    );
    // Permanent failures are not retried.
    assert_eq!(server.received_requests().await.unwrap().len(), 5);
}

#[tokio::test]
async fn a_503_is_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/voices/add"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/voices/add"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"voice_id": "v1"})))
        .mount(&server)
        .await;
    let id = client(&server).add_voice("n", vec![1], "s.mp3").await;
    assert_eq!(id, Ok("v1".to_owned()));
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2);
    // The retry carries the whole form again.
    let fields = form_fields(&requests[1]);
    assert_eq!(
        fields.iter().find(|f| f.name == "files").unwrap().value,
        [1]
    );
}

#[tokio::test]
async fn a_persistent_5xx_on_speech_is_transient_after_the_retries() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .mount(&server)
        .await;
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        client(&server).speech(&SpeechRequest {
            voice_id: "v",
            model_id: "m",
            text: "t",
            output_format: "mp3_44100_128",
            speed: None,
        }),
    )
    .await
    .unwrap();
    assert!(
        matches!(result, Err(ProviderError::Transient(_))),
        "{result:?}"
    );
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        1 + crate::http::MAX_RETRIES
    );
}

/// Tenant, model, sample digest, voice id.
type CloneRow = (String, String, [u8; 32], String);

/// Clones kept in memory, as the worker keeps them in Postgres.
#[derive(Default)]
struct MemoryClones {
    rows: std::sync::Mutex<Vec<CloneRow>>,
}

impl crate::vendor::CloneStore for MemoryClones {
    fn touch<'a>(
        &'a self,
        tenant: &'a str,
        model: &'a str,
        sample_sha256: &'a [u8; 32],
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        let mut rows = self.rows.lock().unwrap();
        let found = rows
            .iter()
            .position(|r| r.0 == tenant && r.1 == model && &r.2 == sample_sha256);
        // Most recently used last.
        let voice = found.map(|at| {
            let row = rows.remove(at);
            let voice = row.3.clone();
            rows.push(row);
            voice
        });
        Box::pin(async move { Ok(voice) })
    }

    fn record<'a>(
        &'a self,
        tenant: &'a str,
        model: &'a str,
        sample_sha256: &'a [u8; 32],
        voice_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        self.rows.lock().unwrap().push((
            tenant.to_owned(),
            model.to_owned(),
            *sample_sha256,
            voice_id.to_owned(),
        ));
        Box::pin(async move { Ok(Some(voice_id.to_owned())) })
    }

    fn take_least_recent<'a>(
        &'a self,
        tenant: &'a str,
        keep: u32,
    ) -> BoxFuture<'a, Result<Vec<String>, ProviderError>> {
        let mut rows = self.rows.lock().unwrap();
        let mine = rows.iter().filter(|r| r.0 == tenant).count();
        let mut excess = mine.saturating_sub(keep as usize);
        let mut taken = Vec::new();
        rows.retain(|r| {
            if excess > 0 && r.0 == tenant {
                excess -= 1;
                taken.push(r.3.clone());
                false
            } else {
                true
            }
        });
        Box::pin(async move { Ok(taken) })
    }

    fn take_idle(
        &self,
        _idle_seconds: u64,
        _limit: u32,
    ) -> BoxFuture<'_, Result<Vec<String>, ProviderError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

fn speech_model() -> unigen_core::config::ModelEntry {
    serde_json::from_value(json!({
        "id": "elevenlabs/tts", "category": "audio", "tier": "standard", "adapter": "elevenlabs",
        "owned_by": "elevenlabs", "upstream": "eleven", "upstream_model": "eleven_multilingual_v2",
        "capabilities": ["text_to_speech"], "credits_per_unit": 2, "voices": {"nova": "voiceNova01"}
    }))
    .unwrap()
}

/// ElevenLabs with a slow `POST /v1/voices/add` answering a new id each time,
/// `DELETE /v1/voices/{id}` and text to speech in MP3.
async fn cloning_upstream() -> MockServer {
    slow_cloning_upstream_for(b"", Duration::ZERO).await
}

/// Clones of a sample containing `slow_sample` (every one when it is empty)
/// take `delay` to answer.
async fn slow_cloning_upstream_for(slow_sample: &'static [u8], delay: Duration) -> MockServer {
    let server = MockServer::start().await;
    let next = std::sync::atomic::AtomicU32::new(0);
    Mock::given(method("POST"))
        .and(path("/v1/voices/add"))
        .respond_with(move |request: &Request| {
            let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            let slow = slow_sample.is_empty()
                || request
                    .body
                    .windows(slow_sample.len())
                    .any(|w| w == slow_sample);
            ResponseTemplate::new(200)
                .set_body_json(
                    json!({"voice_id": format!("clone{n}"), "requires_verification": false}),
                )
                .set_delay(if slow { delay } else { Duration::ZERO })
        })
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(wiremock::matchers::path_regex(
            r"^/v1/voices/[A-Za-z0-9_-]+$",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"status": "ok"})))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(wiremock::matchers::path_regex(
            r"^/v1/text-to-speech/[A-Za-z0-9_-]+$",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_raw(vec![1, 2, 3], "audio/mpeg"))
        .mount(&server)
        .await;
    server
}

fn clone_call<'a>(
    model: &'a unigen_core::config::ModelEntry,
    settings: &'a unigen_core::config::VoiceSettings,
    clones: Option<&'a dyn crate::vendor::CloneStore>,
    sample: &'a [u8],
) -> SpeechCall<'a> {
    SpeechCall {
        model,
        tenant: "org-a",
        text: "hello",
        voice: "nova",
        speed: 1.0,
        response_format: "mp3",
        reference: Some((sample, "wav")),
        voices: settings,
        clones,
    }
}

fn paths_of(requests: &[Request], verb: &str) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.method.as_str() == verb && r.url.path().starts_with("/v1/voices"))
        .map(|r| r.url.path().to_owned())
        .collect()
}

#[tokio::test]
async fn elevenlabs_clones_of_different_samples_are_made_at_once_and_one_sample_once() {
    // Cloning sample a takes the upstream 1.5 s; sample b's clone starts
    // 200 ms later. Behind one global lock held across the upstream call, b
    // would end after a; with a lock per clone key it ends first.
    let server = slow_cloning_upstream_for(b"sample a", Duration::from_millis(1500)).await;
    let client = client(&server);
    let (model, settings, store) = (
        speech_model(),
        VoiceSettings::default(),
        MemoryClones::default(),
    );
    let (a, b) = (b"sample a".to_vec(), b"sample b".to_vec());
    let (call_a, call_b) = (
        clone_call(&model, &settings, Some(&store), &a),
        clone_call(&model, &settings, Some(&store), &b),
    );
    let order = std::sync::Mutex::new(Vec::new());
    let slow = async {
        client.speak(&call_a).await.unwrap();
        order.lock().unwrap().push("a");
    };
    let fast = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        client.speak(&call_b).await.unwrap();
        order.lock().unwrap().push("b");
    };
    futures_util::future::join(slow, fast).await;
    assert_eq!(
        *order.lock().unwrap(),
        ["b", "a"],
        "sample b's clone waited for sample a's"
    );
    // The same sample again: its clone is reused, not made again.
    client.speak(&call_a).await.unwrap();
    let requests = server.received_requests().await.unwrap();
    assert_eq!(paths_of(&requests, "POST").len(), 2, "one clone per sample");
}

#[tokio::test]
async fn elevenlabs_clones_past_the_cap_evict_the_least_recent_and_unkept_ones_are_deleted() {
    let server = cloning_upstream().await;
    let client = client(&server);
    let model = speech_model();
    let settings = VoiceSettings {
        max_clones_per_org: 2,
        ..VoiceSettings::default()
    };
    let store = MemoryClones::default();
    for sample in [&b"one"[..], b"two", b"one", b"three"] {
        client
            .speak(&clone_call(&model, &settings, Some(&store), sample))
            .await
            .unwrap();
    }
    let requests = server.received_requests().await.unwrap();
    assert_eq!(paths_of(&requests, "POST").len(), 3);
    // `two` (clone2) was the least recently used when `three` came.
    assert_eq!(paths_of(&requests, "DELETE"), ["/v1/voices/clone2"]);
    // Nowhere to keep a clone: it is deleted right after its request.
    client
        .speak(&clone_call(&model, &settings, None, b"four"))
        .await
        .unwrap();
    let requests = server.received_requests().await.unwrap();
    assert_eq!(
        paths_of(&requests, "DELETE"),
        ["/v1/voices/clone2", "/v1/voices/clone4"]
    );
}

#[tokio::test]
async fn elevenlabs_raw_voice_ids_pass_only_from_the_catalogue_or_the_allowlist() {
    let server = cloning_upstream().await;
    let client = client(&server);
    let model = speech_model();
    let settings = VoiceSettings {
        allowed_voice_ids: vec!["premadeVoice9".into()],
        ..VoiceSettings::default()
    };
    let call = |voice: &'static str| SpeechCall {
        reference: None,
        voice,
        ..clone_call(&model, &settings, None, b"")
    };
    for voice in ["nova", "voiceNova01", "premadeVoice9"] {
        client.speak(&call(voice)).await.unwrap();
    }
    let err = client.speak(&call("someonesClone1")).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Permanent(m) if m.contains("not available")),
        "{err:?}"
    );
    let requests = server.received_requests().await.unwrap();
    let voices: Vec<&str> = requests
        .iter()
        .map(|r| r.url.path().rsplit('/').next().unwrap())
        .collect();
    assert_eq!(voices, ["voiceNova01", "voiceNova01", "premadeVoice9"]);
}
