//! Hardening findings 3 and 7: client audio is measured before anything
//! decodes it, refused when it runs longer than the cap, and handed to
//! ffmpeg with the demuxer its magic bytes name, so a file that only starts
//! like audio cannot make ffmpeg open other files.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use unigen_tests::{TestApp, TestOptions, json_of};
use uuid::Uuid;

use crate::media::b64;

/// Silence as 8 kbps mono MP3 at 8 kHz: about 1 KB a second, so three hours
/// are ~11 MB, well under the 25 MB upload limit.
fn low_bitrate_mp3(seconds: u32) -> Vec<u8> {
    let out = std::env::temp_dir().join(format!("unigen-bomb-{}.mp3", Uuid::new_v4()));
    let status = std::process::Command::new("ffmpeg")
        .args([
            "-v",
            "error",
            "-f",
            "lavfi",
            "-i",
            "anullsrc=r=8000:cl=mono",
        ])
        .args(["-t", &seconds.to_string()])
        .args(["-c:a", "libmp3lame", "-b:a", "8k", "-f", "mp3", "-y"])
        .arg(&out)
        .status()
        .expect("ffmpeg runs");
    assert!(status.success(), "ffmpeg made the test audio");
    let bytes = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_file(out);
    bytes
}

/// A 5 s tone as MP3, written to `path`.
fn tone_mp3_at(path: &Path) {
    let status = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-f", "lavfi", "-i"])
        .arg("sine=frequency=440:duration=5:sample_rate=8000")
        .args(["-c:a", "libmp3lame", "-f", "mp3", "-y"])
        .arg(path)
        .status()
        .expect("ffmpeg runs");
    assert!(status.success());
}

/// An ID3v2 tag (so the bytes sniff as MP3) followed by an HLS playlist
/// whose one segment is `target`, a local file.
fn playlist_disguised_as_mp3(target: &Path) -> Vec<u8> {
    let mut bytes = b"ID3\x03\x00\x00\x00\x00\x00\x0a".to_vec();
    bytes.extend([0u8; 10]);
    bytes.extend(
        format!(
            "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:5.0,\nfile://{}\n#EXT-X-ENDLIST\n",
            target.display()
        )
        .as_bytes(),
    );
    bytes
}

/// The most resident memory this process has had, in bytes (Linux).
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status");
    kb * 1024
}

/// `(included_remaining, purchased, reserved, overage)` credits and the
/// stt quota's `(used, reserved)`.
async fn charges(app: &TestApp) -> (i64, i64, i64, i64, i64, i64) {
    let client = app.db.client().await;
    let account = client
        .query_one(
            "SELECT included_remaining, purchased_balance, reserved_credits, overage_credits
               FROM billing_accounts WHERE org_id = $1",
            &[&app.org_id],
        )
        .await
        .unwrap();
    let quota = client
        .query_opt(
            "SELECT COALESCE(SUM(used_milli), 0)::bigint, COALESCE(SUM(reserved_milli), 0)::bigint
               FROM quota_usage WHERE org_id = $1",
            &[&app.org_id],
        )
        .await
        .unwrap();
    let (used, reserved) = quota.map_or((0, 0), |r| (r.get(0), r.get(1)));
    (
        account.get(0),
        account.get(1),
        account.get(2),
        account.get(3),
        used,
        reserved,
    )
}

fn assert_refused(status: u16, body: &Value, param: &str, words: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], param, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(words), "{body}");
}

/// Three hours of audio in 11 MB is refused before anything decodes it: a
/// 400 naming `file`, no job, nothing reserved or charged, and no decoded
/// hours in memory (decoding them at 16 kHz would take 690 MB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_bombs_long_transcription_audio_is_a_400_naming_file() {
    let app = TestApp::spawn_with(TestOptions::default().without_worker()).await;
    assert_eq!(app.get("/api/v1/quota", &app.key).await.status(), 200);
    let bomb = low_bitrate_mp3(3 * 3600);
    assert!(bomb.len() < 12 * 1024 * 1024, "{} bytes", bomb.len());
    let encoded = b64(&bomb);
    drop(bomb);
    let before = charges(&app).await;
    let rss_before = peak_rss();
    for path in ["/api/v1/audio/transcriptions", "/api/v1/audio/translations"] {
        let (status, body) = json_of(
            app.post_json(
                &format!("{path}?async=true"),
                &app.key,
                &json!({ "file": encoded }),
            )
            .await,
        )
        .await;
        assert_refused(status, &body, "file", "longer than");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("7200 seconds"),
            "{body}"
        );
    }
    let grown = peak_rss().saturating_sub(rss_before);
    assert!(
        grown < 300 * 1024 * 1024,
        "peak memory grew by {} MB",
        grown / (1024 * 1024)
    );
    assert_eq!(app.count_jobs().await, 0, "no job");
    assert_eq!(charges(&app).await, before, "nothing reserved or charged");
}

/// The cap is a setting: a 2-minute file against a 1-minute cap is refused,
/// and within the cap the job is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_bombs_the_transcription_cap_is_jobs_max_audio_seconds() {
    let app = TestApp::spawn_with(
        TestOptions::default()
            .without_worker()
            .configure(|s| s.jobs.max_audio_seconds = 60.0),
    )
    .await;
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/audio/transcriptions?async=true",
            &app.key,
            &json!({ "file": b64(&low_bitrate_mp3(120)) }),
        )
        .await,
    )
    .await;
    assert_refused(status, &body, "file", "longer than 60 seconds");
    assert_eq!(app.count_jobs().await, 0);
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/audio/transcriptions?async=true",
            &app.key,
            &json!({ "file": b64(&low_bitrate_mp3(50)) }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["estimated_credits"], 1, "{body}");
}

/// Music's `source_audio` is capped at ten minutes at submission; a source
/// within the cap but longer than the track is decoded only as far as the
/// track needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_bombs_long_music_source_audio_is_a_400_naming_source_audio() {
    let app = TestApp::spawn().await;
    let before = peak_rss();
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/music/generations",
            &app.key,
            &json!({
                "prompt": "ambient pad", "duration_seconds": 2, "mode": "audio_to_audio",
                "source_audio": b64(&low_bitrate_mp3(3 * 3600)),
            }),
        )
        .await,
    )
    .await;
    assert_refused(status, &body, "source_audio", "longer than 600 seconds");
    assert_eq!(app.count_jobs().await, 0, "no job");
    let grown = peak_rss().saturating_sub(before);
    assert!(
        grown < 300 * 1024 * 1024,
        "peak memory grew by {} MB",
        grown / (1024 * 1024)
    );

    // Nine minutes is accepted; the 2 s track decodes 2 s of it.
    let (status, created) = json_of(
        app.post_json(
            "/api/v1/music/generations",
            &app.key,
            &json!({
                "prompt": "ambient pad", "duration_seconds": 2, "mode": "audio_to_audio",
                "source_audio": b64(&low_bitrate_mp3(9 * 60)), "output_format": "wav",
            }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 202, "{created}");
    let job = app
        .wait_for_job(created["id"].as_str().unwrap(), Duration::from_secs(120))
        .await;
    assert_eq!(job["status"], "completed", "{job}");
    assert_eq!(job["outputData"]["audio"]["duration_seconds"], 2.0, "{job}");
}

/// A file that sniffs as MP3 (an ID3 tag) but is an HLS playlist naming a
/// local file: ffmpeg is told the file is MP3, so the playlist is never read
/// as one and the local file is never opened. The request is a clean 400
/// naming the field, for transcriptions and for music's source audio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_bombs_a_playlist_disguised_as_mp3_is_not_followed() {
    let app = TestApp::spawn().await;
    let dir = std::env::temp_dir().join(format!("unigen-playlist-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let target = dir.join("secret.mp3");
    tone_mp3_at(&target);
    let disguised = b64(&playlist_disguised_as_mp3(&target));
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/audio/transcriptions?async=true",
            &app.key,
            &json!({ "file": disguised }),
        )
        .await,
    )
    .await;
    assert_refused(status, &body, "file", "could not be read as audio");
    let (status, body) = json_of(
        app.post_json(
            "/api/v1/music/generations",
            &app.key,
            &json!({
                "prompt": "ambient pad", "duration_seconds": 2, "mode": "audio_to_audio",
                "source_audio": disguised,
            }),
        )
        .await,
    )
    .await;
    assert_refused(status, &body, "source_audio", "could not be read as audio");
    assert_eq!(app.count_jobs().await, 0, "no job");
    let _ = std::fs::remove_dir_all(dir);
}
