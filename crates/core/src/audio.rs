//! Audio plumbing shared by the local speech and music providers.
//!
//! PCM is produced in Rust and packed into WAV with `hound`; every other
//! container/codec is delegated to the `ffmpeg` binary (and `ffprobe` for
//! durations), so no codec libraries are linked into the service. External
//! programs get their arguments as a list (never a shell), run with a timeout,
//! are killed if the caller gives up, and write to uniquely named temporary
//! files that are always removed.
//!
//! Media from clients (and from upstreams) is handled as hostile. ffmpeg is
//! told which demuxer to use, the one its magic bytes name ([`demuxer_for`]),
//! so it never guesses a playlist or concat script out of content that only
//! starts like audio, and may open only local files and pipes
//! (`-protocol_whitelist file,pipe`). Its length is measured by demuxing,
//! never by decoding ([`measure_duration`]), and decoding writes at most as
//! many samples as the caller asked for ([`decode_to_pcm`]).

use std::ffi::{OsStr, OsString};
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::ProviderError;
use crate::fetch::{MediaKind, sniff};

/// Longest an ffmpeg/ffprobe run may take before it is killed.
const FFMPEG_TIMEOUT: Duration = Duration::from_secs(60);

/// Sample rate used when durations have to be measured by decoding.
const PROBE_DECODE_RATE: u32 = 16_000;

/// The protocols ffmpeg may open for untrusted media: the input file and
/// pipes. Nothing a file names (`http:`, `tcp:`, `concat:`...) is reachable.
pub const PROTOCOL_WHITELIST: &str = "file,pipe";

/// The most of ffmpeg's error output kept for messages.
const STDERR_KEEP: usize = 16 * 1024;

/// Raw PCM output: OpenAI's `pcm` is 24 kHz, 16-bit signed little-endian, mono.
pub const PCM_SAMPLE_RATE: u32 = 24_000;

/// Output encodings the local provider can deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AudioFormat {
    Mp3,
    Wav,
    Opus,
    Aac,
    Flac,
    /// Headerless samples (see [`PCM_SAMPLE_RATE`]).
    Pcm,
}

impl AudioFormat {
    /// The format a request's `response_format` names (`mp3`, `wav`...).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "mp3" => AudioFormat::Mp3,
            "wav" => AudioFormat::Wav,
            "opus" => AudioFormat::Opus,
            "aac" => AudioFormat::Aac,
            "flac" => AudioFormat::Flac,
            "pcm" => AudioFormat::Pcm,
            _ => return None,
        })
    }

    /// File extension (without dot). Opus is in an Ogg container, AAC in ADTS.
    pub fn extension(self) -> &'static str {
        match self {
            AudioFormat::Mp3 => "mp3",
            AudioFormat::Wav => "wav",
            AudioFormat::Opus => "opus",
            AudioFormat::Aac => "aac",
            AudioFormat::Flac => "flac",
            AudioFormat::Pcm => "pcm",
        }
    }

    /// MIME type of the encoded bytes.
    pub fn content_type(self) -> &'static str {
        match self {
            AudioFormat::Mp3 => "audio/mpeg",
            AudioFormat::Wav => "audio/wav",
            AudioFormat::Opus => "audio/ogg",
            AudioFormat::Aac => "audio/aac",
            AudioFormat::Flac => "audio/flac",
            AudioFormat::Pcm => "audio/pcm",
        }
    }

    /// ffmpeg output arguments (codec, bitrate, muxer) for this format.
    fn ffmpeg_output_args(self) -> &'static [&'static str] {
        match self {
            AudioFormat::Mp3 => &["-c:a", "libmp3lame", "-b:a", "128k", "-f", "mp3"],
            AudioFormat::Wav => &["-c:a", "pcm_s16le", "-f", "wav"],
            AudioFormat::Opus => &["-c:a", "libopus", "-b:a", "64k", "-f", "ogg"],
            AudioFormat::Aac => &["-c:a", "aac", "-b:a", "128k", "-f", "adts"],
            AudioFormat::Flac => &["-c:a", "flac", "-f", "flac"],
            AudioFormat::Pcm => &["-ar", "24000", "-c:a", "pcm_s16le", "-f", "s16le"],
        }
    }
}

/// The ffmpeg demuxer for media of `kind`, named from its magic bytes (the
/// formats [`crate::fetch::sniff`] accepts), or `None` for anything else.
///
/// ADTS AAC shares MP3's frame sync; its layer bits (00, reserved in MP3)
/// tell them apart.
pub fn demuxer_for(bytes: &[u8], kind: MediaKind) -> Option<&'static str> {
    if kind == MediaKind::Audio && bytes.len() > 2 && bytes[0] == 0xff && bytes[1] & 0xf6 == 0xf0 {
        return Some("aac");
    }
    Some(match sniff(bytes, kind)? {
        "wav" => "wav",
        "flac" => "flac",
        "ogg" => "ogg",
        "mp3" => "mp3",
        "m4a" | "mp4" | "mov" => "mov",
        "webm" => "matroska",
        _ => return None,
    })
}

/// The input options for untrusted media in `demuxer`'s format: only local
/// files and pipes may be opened, and the format is not guessed. They go
/// right before `-i`.
pub fn untrusted_input_options(demuxer: &str) -> [&str; 4] {
    ["-protocol_whitelist", PROTOCOL_WHITELIST, "-f", demuxer]
}

/// `[-protocol_whitelist file,pipe -f <demuxer> -i <input>]`.
fn untrusted_input(demuxer: &str, input: &OsStr) -> Vec<OsString> {
    let mut args: Vec<OsString> = untrusted_input_options(demuxer)
        .iter()
        .map(OsString::from)
        .collect();
    args.push("-i".into());
    args.push(input.to_owned());
    args
}

/// The demuxer for audio bytes, or a Permanent error saying they are not a
/// format we read.
fn audio_demuxer(bytes: &[u8]) -> Result<&'static str, ProviderError> {
    if bytes.is_empty() {
        return Err(ProviderError::Permanent("audio input is empty".into()));
    }
    demuxer_for(bytes, MediaKind::Audio).ok_or_else(|| {
        ProviderError::Permanent(
            "audio input is not MP3, WAV, M4A, FLAC, OGG, WebM or AAC audio".into(),
        )
    })
}

/// Mono f32 samples in [-1, 1] at `sample_rate` -> WAV bytes (16-bit PCM) via hound.
///
/// Out-of-range samples are clamped rather than wrapped, so a slightly hot
/// signal distorts mildly instead of producing full-scale clicks.
pub fn encode_wav(samples: &[f32], sample_rate: u32) -> Vec<u8> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut out = Cursor::new(Vec::with_capacity(44 + samples.len() * 2));
    {
        // Writing into memory cannot hit I/O errors; hound only fails past 4 GiB.
        let mut writer = hound::WavWriter::new(&mut out, spec).expect("in-memory WAV header");
        let mut w16 = writer.get_i16_writer(samples.len() as u32);
        for &s in samples {
            let v = if s.is_finite() {
                s.clamp(-1.0, 1.0)
            } else {
                0.0
            };
            w16.write_sample((v * 32767.0).round() as i16);
        }
        w16.flush().expect("in-memory WAV data");
        writer.finalize().expect("in-memory WAV finalize");
    }
    out.into_inner()
}

/// Converts WAV bytes to `format` with ffmpeg (stdin -> seekable temp file, 60 s timeout); Wav returns the input.
///
/// The output goes to a temporary file rather than a pipe so that ffmpeg can
/// seek back and finish headers: MP3 gets its Xing/LAME frame (encoder delay
/// and padding, so decoders report the true duration) and FLAC its
/// STREAMINFO sample count.
pub async fn convert_wav(wav: Vec<u8>, format: AudioFormat) -> Result<Vec<u8>, ProviderError> {
    if format == AudioFormat::Wav {
        return Ok(wav);
    }
    transcode_wav(wav, format, None).await
}

/// Like [`convert_wav`] but always runs ffmpeg, optionally through an audio
/// filter graph (e.g. `atempo=1.5`); used when WAV output needs processing.
pub async fn transcode_wav(
    wav: Vec<u8>,
    format: AudioFormat,
    filter: Option<&str>,
) -> Result<Vec<u8>, ProviderError> {
    let out = TempFile::new(format.extension())?;
    let mut args: Vec<OsString> = [
        "-hide_banner",
        "-loglevel",
        "error",
        "-protocol_whitelist",
        "pipe",
        "-f",
        "wav",
        "-i",
        "pipe:0",
        "-vn",
        "-map_metadata",
        "-1",
        "-ac",
        "1",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    if let Some(filter) = filter {
        args.push("-af".into());
        args.push(filter.into());
    }
    args.extend(format.ffmpeg_output_args().iter().map(OsString::from));
    args.push("-y".into());
    args.push(out.path().as_os_str().to_owned());
    run_tool("ffmpeg", &args, Some(wav), FFMPEG_TIMEOUT).await?;
    let bytes = tokio::fs::read(out.path())
        .await
        .map_err(|e| ProviderError::Permanent(format!("ffmpeg output unreadable: {e}")))?;
    if bytes.is_empty() {
        return Err(ProviderError::Permanent(format!(
            "ffmpeg produced no {} output",
            format.extension()
        )));
    }
    Ok(bytes)
}

/// Decodes audio (MP3, WAV, M4A, FLAC, OGG, WebM, AAC) to mono f32 at
/// `sample_rate`: at most the first `max_seconds` of it.
///
/// ffmpeg stops at `-t max_seconds`, and its output is read only that far
/// (it is killed past it, whatever timestamps the file claims), so hours of
/// compressed audio never become gigabytes of samples. The input is staged in
/// a temporary file because some containers (MP4/M4A with the index at the
/// end) cannot be demuxed from a pipe.
pub async fn decode_to_pcm(
    bytes: Vec<u8>,
    sample_rate: u32,
    max_seconds: f64,
) -> Result<Vec<f32>, ProviderError> {
    if sample_rate == 0 {
        return Err(ProviderError::Permanent(
            "sample rate must be positive".into(),
        ));
    }
    if !max_seconds.is_finite() || max_seconds <= 0.0 {
        return Err(ProviderError::Permanent(
            "the decoding limit must be a positive number of seconds".into(),
        ));
    }
    let demuxer = audio_demuxer(&bytes)?;
    let input = TempFile::new("bin")?;
    input.write(&bytes).await?;
    drop(bytes);
    let max_samples = (max_seconds * f64::from(sample_rate)).ceil() as u64;
    let args = decode_args(demuxer, input.path(), sample_rate, Some(max_seconds));
    let out = run_streaming("ffmpeg", &args, FFMPEG_TIMEOUT, Keep::Head(max_samples * 4)).await?;
    let samples: Vec<f32> = out
        .head
        .chunks_exact(4)
        .map(|c| {
            let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            if v.is_finite() {
                v.clamp(-1.0, 1.0)
            } else {
                0.0
            }
        })
        .collect();
    if samples.is_empty() {
        return Err(ProviderError::Permanent(
            "audio input contains no decodable samples".into(),
        ));
    }
    Ok(samples)
}

/// Duration in seconds of audio in `format`: raw PCM has no header to probe,
/// so its length tells; every other format is probed.
pub async fn duration_in(bytes: &[u8], format: AudioFormat) -> Result<f64, ProviderError> {
    if format == AudioFormat::Pcm {
        if bytes.len() < 2 {
            return Err(ProviderError::Permanent("audio input is empty".into()));
        }
        return Ok((bytes.len() / 2) as f64 / f64::from(PCM_SAMPLE_RATE));
    }
    probe_duration(bytes).await
}

/// A WAV's duration from its header, when the header is honest: a streamed
/// WAV (size fields left at 0x7fffffff) claims more data than exists.
fn wav_duration(bytes: &[u8]) -> Option<f64> {
    let reader = hound::WavReader::new(Cursor::new(bytes)).ok()?;
    let spec = reader.spec();
    let frames = u64::from(reader.duration());
    let data_bytes = frames * u64::from(spec.channels) * u64::from(spec.bits_per_sample / 8);
    (spec.sample_rate > 0 && data_bytes <= bytes.len() as u64)
        .then(|| frames as f64 / f64::from(spec.sample_rate))
}

/// Exact duration in seconds of audio bytes (ffprobe; else by decoding), for
/// the audio we produce and upstreams return.
///
/// WAV is measured from its header directly. ffprobe's container duration is
/// trusted except for MP3 (it ignores the LAME gapless trim and reports
/// encoder delay and padding as audio) and raw ADTS AAC (only estimated from
/// the bitrate); those, and any probe failure, are measured by decoding,
/// counting the samples as they stream by (nothing is kept). For client
/// audio, whose length is not known to be sane, use [`measure_duration`].
pub async fn probe_duration(bytes: &[u8]) -> Result<f64, ProviderError> {
    let demuxer = audio_demuxer(bytes)?;
    if let Some(seconds) = wav_duration(bytes) {
        return Ok(seconds);
    }
    let input = TempFile::new("bin")?;
    input.write(bytes).await?;
    if let Ok(out) = run_streaming(
        "ffprobe",
        &ffprobe_args(demuxer, input.path()),
        FFMPEG_TIMEOUT,
        Keep::Tail(64 * 1024),
    )
    .await
    {
        let text = String::from_utf8_lossy(&out.head);
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_owned()))
        };
        let estimated = field("format_name=").is_none_or(|f| f == "aac" || f == "mp3");
        if !estimated
            && let Some(d) = field("duration=").and_then(|d| d.parse::<f64>().ok())
            && d.is_finite()
            && d > 0.0
        {
            return Ok(d);
        }
    }
    let args = decode_args(demuxer, input.path(), PROBE_DECODE_RATE, None);
    let out = run_streaming("ffmpeg", &args, FFMPEG_TIMEOUT, Keep::Tail(0)).await?;
    let frames = out.total / 4;
    if frames == 0 {
        return Err(ProviderError::Permanent(
            "audio input contains no decodable samples".into(),
        ));
    }
    Ok(frames as f64 / f64::from(PROBE_DECODE_RATE))
}

/// How long client audio lasts, in seconds, measured without decoding it:
/// its audio packets are demuxed (copied to ffmpeg's null muxer) and their
/// timestamps read, up to a little past `limit_seconds`. A result above
/// `limit_seconds` means "longer than the limit" (the measure stops there).
///
/// Cheap and bounded whatever the file holds: demuxing 25 MB takes well
/// under a second, memory stays flat, and ffmpeg is killed after
/// [`MEASURE_TIMEOUT`]. MP3 measures a frame or two long (encoder delay
/// and padding count). A WAV with an honest header is measured from it.
///
/// Errors: Permanent when the bytes are not audio we read (the demuxer named
/// by their magic bytes fails, or finds no audio stream); Transient when
/// ffmpeg ran out of time or could not be run.
pub async fn measure_duration(bytes: &[u8], limit_seconds: f64) -> Result<f64, ProviderError> {
    let demuxer = audio_demuxer(bytes)?;
    if let Some(seconds) = wav_duration(bytes) {
        return Ok(seconds);
    }
    let input = TempFile::new("bin")?;
    input.write(bytes).await?;
    let args = measure_args(demuxer, input.path(), limit_seconds);
    let out = match run_streaming("ffmpeg", &args, MEASURE_TIMEOUT, Keep::Tail(64 * 1024)).await {
        Err(ProviderError::Permanent(reason)) => {
            // ffmpeg's words name temporary paths: they stay in the log.
            tracing::debug!(demuxer, %reason, "client audio does not demux");
            return Err(ProviderError::Permanent(format!(
                "audio input is not valid {} audio",
                format_name(demuxer)
            )));
        }
        other => other?,
    };
    let text = String::from_utf8_lossy(&out.head);
    let last = |key: &str| {
        text.lines()
            .filter_map(|l| l.strip_prefix(key))
            .filter_map(|v| v.trim().parse::<i64>().ok())
            .next_back()
    };
    match last("out_time_us=").or_else(|| last("out_time_ms=")) {
        Some(us) if us > 0 => Ok(us as f64 / 1e6),
        _ => Err(ProviderError::Permanent(
            "audio input contains no audio".into(),
        )),
    }
}

/// How a demuxer's format is called in messages.
fn format_name(demuxer: &str) -> &str {
    match demuxer {
        "mp3" => "MP3",
        "wav" => "WAV",
        "flac" => "FLAC",
        "ogg" => "Ogg",
        "aac" => "AAC",
        "mov" => "MP4/M4A",
        "matroska" => "WebM",
        other => other,
    }
}

/// Longest [`measure_duration`] lets ffmpeg demux.
pub const MEASURE_TIMEOUT: Duration = Duration::from_secs(30);

/// ffmpeg arguments that demux `path`'s first audio stream to the null
/// muxer (no decoding), stopping a second past `limit_seconds`, and report
/// progress (`out_time_us=`) on stdout.
fn measure_args(demuxer: &str, path: &Path, limit_seconds: f64) -> Vec<OsString> {
    let stop = if limit_seconds.is_finite() && limit_seconds > 0.0 {
        limit_seconds + 1.0
    } else {
        1.0
    };
    let mut args: Vec<OsString> = ["-hide_banner", "-nostdin", "-loglevel", "error", "-nostats"]
        .iter()
        .map(OsString::from)
        .collect();
    args.extend(untrusted_input(demuxer, path.as_os_str()));
    let stop = format!("{stop:.3}");
    args.extend(
        [
            "-map",
            "0:a:0",
            "-c",
            "copy",
            "-t",
            &stop,
            "-f",
            "null",
            "-progress",
            "pipe:1",
            "-",
        ]
        .iter()
        .map(OsString::from),
    );
    args
}

/// ffprobe arguments for the container's format name and duration.
fn ffprobe_args(demuxer: &str, path: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "-v",
        "error",
        "-show_entries",
        "format=format_name,duration",
        "-of",
        "default=noprint_wrappers=1",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    args.extend(untrusted_input(demuxer, path.as_os_str()));
    args
}

/// ffmpeg arguments that decode `path` to raw mono little-endian f32 on
/// stdout, the first `max_seconds` of it when given.
fn decode_args(
    demuxer: &str,
    path: &Path,
    sample_rate: u32,
    max_seconds: Option<f64>,
) -> Vec<OsString> {
    let rate = sample_rate.to_string();
    let mut args: Vec<OsString> = ["-hide_banner", "-loglevel", "error", "-nostdin"]
        .iter()
        .map(OsString::from)
        .collect();
    args.extend(untrusted_input(demuxer, path.as_os_str()));
    args.extend(["-vn", "-ac", "1", "-ar", &rate].iter().map(OsString::from));
    if let Some(max) = max_seconds {
        args.push("-t".into());
        args.push(format!("{max:.6}").into());
    }
    args.extend(
        ["-c:a", "pcm_f32le", "-f", "f32le", "pipe:1"]
            .iter()
            .map(OsString::from),
    );
    args
}

/// Parses 16-bit PCM WAV bytes leniently: size fields are ignored and the data
/// chunk runs to the end of the buffer, as `espeak-ng --stdout` leaves them at
/// 0x7fffffff. Multi-channel input is down-mixed. Returns (samples, rate).
pub fn read_pcm16_wav_lenient(bytes: &[u8]) -> Result<(Vec<f32>, u32), ProviderError> {
    let bad = |what: &str| ProviderError::Permanent(format!("malformed WAV: {what}"));
    if bytes.len() < 12 || &bytes[0..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return Err(bad("missing RIFF/WAVE header"));
    }
    let mut pos = 12;
    let mut format: Option<(u16, u16, u32, u16)> = None;
    while pos + 8 <= bytes.len() {
        let id = &bytes[pos..pos + 4];
        let size = u32::from_le_bytes([
            bytes[pos + 4],
            bytes[pos + 5],
            bytes[pos + 6],
            bytes[pos + 7],
        ]) as usize;
        let body = pos + 8;
        if id == b"fmt " {
            if size < 16 || body + 16 > bytes.len() {
                return Err(bad("short fmt chunk"));
            }
            let f = &bytes[body..body + 16];
            format = Some((
                u16::from_le_bytes([f[0], f[1]]),
                u16::from_le_bytes([f[2], f[3]]),
                u32::from_le_bytes([f[4], f[5], f[6], f[7]]),
                u16::from_le_bytes([f[14], f[15]]),
            ));
        } else if id == b"data" {
            let (tag, channels, rate, bits) = format.ok_or_else(|| bad("data before fmt"))?;
            if tag != 1 || bits != 16 || channels == 0 || rate == 0 {
                return Err(bad("not 16-bit PCM"));
            }
            let end = body.saturating_add(size).min(bytes.len());
            let ch = usize::from(channels);
            let samples = bytes[body..end]
                .chunks_exact(2 * ch)
                .map(|frame| {
                    let sum: f32 = frame
                        .chunks_exact(2)
                        .map(|s| f32::from(i16::from_le_bytes([s[0], s[1]])))
                        .sum();
                    sum / (32768.0 * ch as f32)
                })
                .collect();
            return Ok((samples, rate));
        }
        pos = body.saturating_add(size).saturating_add(size & 1);
    }
    Err(bad("no data chunk"))
}

/// Rewrites the RIFF and data sizes of a streamed 16-bit PCM mono WAV (as
/// `espeak-ng --stdout` writes it, sizes 0x7fffffff) to match the bytes
/// present, in place and without touching samples. Returns the WAV and the
/// byte offset where samples start; other layouts are re-encoded.
pub fn repair_streamed_wav(mut bytes: Vec<u8>) -> Result<(Vec<u8>, usize), ProviderError> {
    let is_canonical = bytes.len() >= 44
        && &bytes[0..4] == b"RIFF"
        && &bytes[8..16] == b"WAVEfmt "
        && bytes[16..20] == 16u32.to_le_bytes()
        && bytes[20..22] == 1u16.to_le_bytes()
        && bytes[22..24] == 1u16.to_le_bytes()
        && bytes[34..36] == 16u16.to_le_bytes()
        && &bytes[36..40] == b"data";
    if !is_canonical {
        let (samples, rate) = read_pcm16_wav_lenient(&bytes)?;
        return Ok((encode_wav(&samples, rate), 44));
    }
    let data_len = (bytes.len() - 44) & !1;
    bytes.truncate(44 + data_len);
    bytes[4..8].copy_from_slice(&((36 + data_len) as u32).to_le_bytes());
    bytes[40..44].copy_from_slice(&(data_len as u32).to_le_bytes());
    Ok((bytes, 44))
}

/// Runs `program` with `args`, optionally feeding `stdin`, and returns its
/// stdout. Non-zero exit, a missing binary or the timeout become Permanent
/// errors naming the program with an excerpt of its stderr.
pub async fn run_tool(
    program: &str,
    args: &[OsString],
    stdin: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<Vec<u8>, ProviderError> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| spawn_error(program, &e))?;
    // Feed stdin concurrently with draining stdout/stderr so neither pipe can
    // fill up and deadlock. A tool closing stdin early is not our error; its
    // exit status tells.
    let writer = match (stdin, child.stdin.take()) {
        (Some(data), Some(mut pipe)) => Some(tokio::spawn(async move {
            let _ = pipe.write_all(&data).await;
            let _ = pipe.shutdown().await;
        })),
        _ => None,
    };
    let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => {
            return Err(ProviderError::Permanent(format!("{program} failed: {e}")));
        }
        Err(_) => {
            // Dropping the wait future dropped the child: kill_on_drop ends it.
            if let Some(w) = writer {
                w.abort();
            }
            return Err(ProviderError::Permanent(format!(
                "{program} timed out after {} s",
                timeout.as_secs()
            )));
        }
    };
    if let Some(w) = writer {
        let _ = w.await;
    }
    if !output.status.success() {
        return Err(ProviderError::Permanent(format!(
            "{program} failed ({}): {}",
            output.status,
            stderr_excerpt(&output.stderr)
        )));
    }
    Ok(output.stdout)
}

fn spawn_error(program: &str, e: &std::io::Error) -> ProviderError {
    if e.kind() == std::io::ErrorKind::NotFound {
        ProviderError::Permanent(format!("{program} is not installed"))
    } else {
        ProviderError::Permanent(format!("{program} could not be started: {e}"))
    }
}

/// How [`run_streaming`] keeps a program's stdout.
#[derive(Debug, Clone, Copy)]
enum Keep {
    /// The first this many bytes; then the program is stopped.
    Head(u64),
    /// The last this many bytes (0: only count them), reading to the end.
    Tail(usize),
}

/// What [`run_streaming`] read from a program's stdout.
struct Streamed {
    /// The bytes kept (see [`Keep`]).
    head: Vec<u8>,
    /// Every byte that came, kept or not.
    total: u64,
}

/// Runs `program` with `args` (stdin closed) and reads its stdout as it
/// comes, keeping only what `keep` says, so memory stays bounded however
/// much the program writes. Its stderr is drained concurrently and only its
/// tail kept. With [`Keep::Head`] the program is killed once the head is
/// full, and that is success. Errors: a missing binary or a non-zero exit
/// are Permanent (quoting stderr); running past `timeout` is Transient
/// (only a starved machine gets there with bounded inputs).
async fn run_streaming(
    program: &str,
    args: &[OsString],
    timeout: Duration,
    keep: Keep,
) -> Result<Streamed, ProviderError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| spawn_error(program, &e))?;
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let errors = tokio::spawn(async move { read_tail(&mut stderr, STDERR_KEEP).await });
    let mut kept = Vec::new();
    let mut total = 0u64;
    let run = async {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = stdout.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            total += n as u64;
            match keep {
                Keep::Head(limit) => {
                    let room = limit.saturating_sub(kept.len() as u64);
                    let take = n.min(usize::try_from(room).unwrap_or(usize::MAX));
                    kept.extend_from_slice(&chunk[..take]);
                    if kept.len() as u64 >= limit {
                        return Ok(None);
                    }
                }
                Keep::Tail(limit) => {
                    kept.extend_from_slice(&chunk[..n]);
                    if kept.len() > 2 * limit {
                        kept.drain(..kept.len() - limit);
                    }
                }
            }
        }
        child.wait().await.map(Some)
    };
    let outcome = tokio::time::timeout(timeout, run).await;
    match outcome {
        Err(_) => {
            // Dropping `child` at return kills the program (kill_on_drop).
            errors.abort();
            Err(ProviderError::Transient(format!(
                "{program} timed out after {} s",
                timeout.as_secs()
            )))
        }
        Ok(Err(e)) => {
            errors.abort();
            Err(ProviderError::Permanent(format!("{program} failed: {e}")))
        }
        Ok(Ok(None)) => {
            // The head is full: the rest is not wanted.
            let _ = child.start_kill();
            let _ = child.wait().await;
            errors.abort();
            Ok(Streamed { head: kept, total })
        }
        Ok(Ok(Some(status))) if status.success() => {
            errors.abort();
            if let Keep::Tail(limit) = keep
                && kept.len() > limit
            {
                kept.drain(..kept.len() - limit);
            }
            Ok(Streamed { head: kept, total })
        }
        Ok(Ok(Some(status))) => {
            let stderr = errors.await.unwrap_or_default();
            Err(ProviderError::Permanent(format!(
                "{program} failed ({status}): {}",
                stderr_excerpt(&stderr)
            )))
        }
    }
}

/// Reads `reader` to its end, keeping its last `keep` bytes.
async fn read_tail(reader: &mut (impl AsyncRead + Unpin), keep: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = reader.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&chunk[..n]);
        if kept.len() > 2 * keep {
            kept.drain(..kept.len() - keep);
        }
    }
    if kept.len() > keep {
        kept.drain(..kept.len() - keep);
    }
    kept
}

/// The last few hundred characters of a tool's stderr, on one line.
fn stderr_excerpt(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    const MAX: usize = 300;
    if text.chars().count() <= MAX {
        return if text.is_empty() {
            "no error output".into()
        } else {
            text
        };
    }
    let tail: String = text
        .chars()
        .rev()
        .take(MAX)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("...{tail}")
}

/// A uniquely named file under the system temp dir, removed on drop.
pub struct TempFile {
    path: PathBuf,
}

impl TempFile {
    /// Reserves a fresh empty file (created exclusively, so names never collide).
    pub fn new(extension: &str) -> Result<Self, ProviderError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        for _ in 0..8 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!(
                "unigen-audio-{}-{n}-{nanos}.{extension}",
                std::process::id()
            ));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(_) => return Ok(Self { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(ProviderError::Transient(format!(
                        "cannot create temporary audio file: {e}"
                    )));
                }
            }
        }
        Err(ProviderError::Transient(
            "cannot create a unique temporary audio file".into(),
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub async fn write(&self, bytes: &[u8]) -> Result<(), ProviderError> {
        tokio::fs::write(&self.path, bytes).await.map_err(|e| {
            ProviderError::Transient(format!("cannot write temporary audio file: {e}"))
        })
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(freq: f32, seconds: f32, rate: u32) -> Vec<f32> {
        let n = (seconds * rate as f32) as usize;
        (0..n)
            .map(|i| 0.5 * (std::f32::consts::TAU * freq * i as f32 / rate as f32).sin())
            .collect()
    }

    #[test]
    fn wav_round_trips_through_hound() {
        let samples = tone(440.0, 0.25, 22_050);
        let wav = encode_wav(&samples, 22_050);
        let mut reader = hound::WavReader::new(Cursor::new(&wav)).unwrap();
        assert_eq!(reader.spec().sample_rate, 22_050);
        assert_eq!(reader.spec().channels, 1);
        assert_eq!(reader.duration() as usize, samples.len());
        let back: Vec<i16> = reader.samples::<i16>().map(Result::unwrap).collect();
        for (a, b) in samples.iter().zip(&back) {
            assert!((a - f32::from(*b) / 32767.0).abs() < 1e-4);
        }
        let (lenient, rate) = read_pcm16_wav_lenient(&wav).unwrap();
        assert_eq!(rate, 22_050);
        assert_eq!(lenient.len(), samples.len());
    }

    #[test]
    fn encode_wav_clamps() {
        let wav = encode_wav(&[2.0, -2.0, f32::NAN], 8_000);
        let mut reader = hound::WavReader::new(Cursor::new(&wav)).unwrap();
        let back: Vec<i16> = reader.samples::<i16>().map(Result::unwrap).collect();
        assert_eq!(back, vec![32767, -32767, 0]);
    }

    #[test]
    fn lenient_reader_accepts_streamed_sizes() {
        let mut wav = encode_wav(&tone(300.0, 0.1, 8_000), 8_000);
        wav[4..8].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
        wav[40..44].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
        let (samples, _) = read_pcm16_wav_lenient(&wav).unwrap();
        assert_eq!(samples.len(), 800);
        let (fixed, offset) = repair_streamed_wav(wav).unwrap();
        assert_eq!(offset, 44);
        let reader = hound::WavReader::new(Cursor::new(&fixed)).unwrap();
        assert_eq!(reader.duration(), 800);
        assert!(read_pcm16_wav_lenient(b"not a wav file at all").is_err());
    }

    #[tokio::test]
    async fn converts_to_each_format_with_right_magic_and_duration() {
        let wav = encode_wav(&tone(440.0, 1.0, 24_000), 24_000);
        for format in [
            AudioFormat::Mp3,
            AudioFormat::Opus,
            AudioFormat::Aac,
            AudioFormat::Flac,
        ] {
            let out = convert_wav(wav.clone(), format).await.unwrap();
            match format {
                AudioFormat::Mp3 => assert!(
                    out.starts_with(b"ID3") || (out[0] == 0xFF && out[1] & 0xE0 == 0xE0),
                    "mp3 magic"
                ),
                AudioFormat::Opus => assert!(out.starts_with(b"OggS")),
                AudioFormat::Aac => assert!(out[0] == 0xFF && out[1] & 0xF6 == 0xF0),
                AudioFormat::Flac => assert!(out.starts_with(b"fLaC")),
                AudioFormat::Wav | AudioFormat::Pcm => unreachable!(),
            }
            let d = probe_duration(&out).await.unwrap();
            // ADTS cannot signal the encoder's 1024-sample priming, so AAC
            // decodes up to two frames (~85 ms at 24 kHz) long.
            let tolerance = if format == AudioFormat::Aac {
                0.09
            } else {
                0.03
            };
            assert!((d - 1.0).abs() < tolerance, "{format:?} duration {d}");
        }
        assert_eq!(
            convert_wav(wav.clone(), AudioFormat::Wav).await.unwrap(),
            wav
        );
    }

    #[tokio::test]
    async fn decodes_to_pcm_at_requested_rate() {
        let wav = encode_wav(&tone(440.0, 0.5, 22_050), 22_050);
        let mp3 = convert_wav(wav, AudioFormat::Mp3).await.unwrap();
        let pcm = decode_to_pcm(mp3.clone(), 16_000, 60.0).await.unwrap();
        assert!(
            (pcm.len() as i64 - 8_000).abs() < 400,
            "{} samples",
            pcm.len()
        );
        // A 440 Hz tone has ~8.8 zero crossings per 10 ms; noise would have many more.
        let crossings = pcm[2000..6000]
            .windows(2)
            .filter(|w| (w[0] < 0.0) != (w[1] < 0.0))
            .count();
        assert!((200..240).contains(&crossings), "{crossings} crossings");
        // Bounded output: only the first 0.1 s is decoded.
        let head = decode_to_pcm(mp3, 16_000, 0.1).await.unwrap();
        assert_eq!(head.len(), 1_600);
    }

    /// `seconds` of silence as 8 kbps mono MP3 at 8 kHz (~1 KB a second).
    fn low_bitrate_mp3(seconds: u32) -> Vec<u8> {
        let out = TempFile::new("mp3").unwrap();
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
            .arg(out.path())
            .status()
            .expect("ffmpeg runs");
        assert!(status.success());
        std::fs::read(out.path()).unwrap()
    }

    /// Hardening finding 3: three hours of audio in 11 MB. Measuring it
    /// demuxes (no samples) and stops past the limit; decoding it yields only
    /// what was asked for.
    #[tokio::test]
    async fn long_low_bitrate_audio_is_measured_and_decoded_within_bounds() {
        let bomb = low_bitrate_mp3(3 * 3600);
        assert!(bomb.len() < 12 * 1024 * 1024);
        let measured = measure_duration(&bomb, 7200.0).await.unwrap();
        assert!((7200.0..7202.0).contains(&measured), "{measured}");
        let whole = measure_duration(&bomb, 4.0 * 3600.0).await.unwrap();
        assert!((whole - 3.0 * 3600.0).abs() < 1.0, "{whole}");
        let pcm = decode_to_pcm(bomb, 8_000, 2.0).await.unwrap();
        assert_eq!(pcm.len(), 16_000);
    }

    #[tokio::test]
    async fn measure_duration_reads_each_format_without_decoding() {
        let wav = encode_wav(&tone(440.0, 1.0, 24_000), 24_000);
        assert_eq!(measure_duration(&wav, 60.0).await.unwrap(), 1.0);
        for format in [
            AudioFormat::Mp3,
            AudioFormat::Opus,
            AudioFormat::Aac,
            AudioFormat::Flac,
        ] {
            let out = convert_wav(wav.clone(), format).await.unwrap();
            let d = measure_duration(&out, 60.0).await.unwrap();
            assert!((d - 1.0).abs() < 0.1, "{format:?} measured {d}");
        }
        for garbage in [
            &b""[..],
            b"definitely not audio",
            b"ID3\x03\0\0\0\0\0\0junk",
        ] {
            let err = measure_duration(garbage, 60.0).await.unwrap_err();
            assert!(matches!(err, ProviderError::Permanent(_)), "{err:?}");
        }
    }

    #[test]
    fn demuxers_follow_the_magic_bytes() {
        let cases: [(&[u8], MediaKind, Option<&str>); 11] = [
            (b"RIFF\0\0\0\0WAVEfmt ", MediaKind::Audio, Some("wav")),
            (b"fLaC\0\0\0\x22", MediaKind::Audio, Some("flac")),
            (b"OggS\0\x02\0\0", MediaKind::Audio, Some("ogg")),
            (b"ID3\x04\0\0\0\0", MediaKind::Audio, Some("mp3")),
            (&[0xff, 0xfb, 0x90, 0x64], MediaKind::Audio, Some("mp3")),
            (&[0xff, 0xf1, 0x50, 0x80], MediaKind::Audio, Some("aac")),
            (b"\0\0\0\x20ftypM4A \0\0", MediaKind::Audio, Some("mov")),
            (b"\x1a\x45\xdf\xa3rest", MediaKind::Audio, Some("matroska")),
            (b"\0\0\0\x14ftypqt  \0\0", MediaKind::Video, Some("mov")),
            (b"\x1a\x45\xdf\xa3rest", MediaKind::Video, Some("matroska")),
            (
                b"#EXTM3U\n#EXTINF:1,\nfile:///etc/passwd\n",
                MediaKind::Audio,
                None,
            ),
        ];
        for (bytes, kind, demuxer) in cases {
            assert_eq!(demuxer_for(bytes, kind), demuxer, "{bytes:?}");
        }
    }

    /// Hardening finding 7: every command line that reads client audio
    /// names the demuxer and allows only files and pipes, before `-i`.
    #[test]
    fn untrusted_command_lines_force_the_demuxer_and_the_protocols() {
        let path = Path::new("/tmp/input.bin");
        for args in [
            measure_args("mp3", path, 7200.0),
            ffprobe_args("mp3", path),
            decode_args("mp3", path, 16_000, None),
            decode_args("mp3", path, 44_100, Some(30.0)),
        ] {
            let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
            let input = args.iter().position(|a| *a == "-i").expect("-i");
            assert_eq!(
                args[input - 4..=input + 1],
                [
                    "-protocol_whitelist",
                    "file,pipe",
                    "-f",
                    "mp3",
                    "-i",
                    "/tmp/input.bin"
                ],
                "{args:?}"
            );
            assert_eq!(args.iter().filter(|a| **a == "-i").count(), 1);
        }
        let decode = decode_args("ogg", path, 44_100, Some(30.0));
        let decode: Vec<&str> = decode.iter().map(|a| a.to_str().unwrap()).collect();
        let t = decode.iter().position(|a| *a == "-t").expect("-t");
        assert_eq!(decode[t + 1], "30.000000");
        let measure = measure_args("ogg", path, 600.0);
        let measure: Vec<&str> = measure.iter().map(|a| a.to_str().unwrap()).collect();
        let t = measure.iter().position(|a| *a == "-t").expect("-t");
        assert_eq!(measure[t + 1], "601.000");
        assert!(
            measure.windows(2).any(|w| w == ["-c", "copy"]),
            "no decoding"
        );
    }

    /// Hardening finding 7: bytes that sniff as MP3 (an ID3 tag) but hold an
    /// HLS playlist or an ffconcat script naming a local file. Left to
    /// guess, ffmpeg reads the named file; told the format, it refuses.
    #[tokio::test]
    async fn a_playlist_behind_an_id3_tag_is_not_followed() {
        let target = TempFile::new("mp3").unwrap();
        let wav = encode_wav(&tone(440.0, 5.0, 8_000), 8_000);
        target
            .write(&convert_wav(wav, AudioFormat::Mp3).await.unwrap())
            .await
            .unwrap();
        let name = target.path().file_name().unwrap().to_str().unwrap();
        let id3 = |body: String| {
            let mut bytes = b"ID3\x03\0\0\0\0\0\x0a".to_vec();
            bytes.extend([0u8; 10]);
            bytes.extend(body.into_bytes());
            bytes
        };
        let hls = id3(format!(
            "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:5.0,\nfile://{}\n#EXT-X-ENDLIST\n",
            target.path().display()
        ));
        // Relative to the staged copy, which sits in the same directory.
        let concat = id3(format!("ffconcat version 1.0\nfile {name}\n"));
        for disguised in [hls, concat] {
            assert_eq!(demuxer_for(&disguised, MediaKind::Audio), Some("mp3"));
            let decoded = decode_to_pcm(disguised.clone(), 8_000, 60.0).await;
            assert!(
                decoded.is_err(),
                "decoded {:?} samples",
                decoded.map(|s| s.len())
            );
            let measured = measure_duration(&disguised, 60.0).await;
            assert!(
                matches!(measured, Err(ProviderError::Permanent(_))),
                "{measured:?}"
            );
            let probed = probe_duration(&disguised).await;
            assert!(probed.is_err(), "{probed:?}");
        }
    }

    #[tokio::test]
    async fn probe_measures_wav_and_rejects_garbage() {
        let wav = encode_wav(&vec![0.1; 12_000], 8_000);
        assert!((probe_duration(&wav).await.unwrap() - 1.5).abs() < 1e-9);
        let err = probe_duration(b"definitely not audio").await.unwrap_err();
        assert!(matches!(err, ProviderError::Permanent(_)));
        assert!(
            decode_to_pcm(b"garbage".to_vec(), 16_000, 1.0)
                .await
                .is_err()
        );
    }

    #[test]
    fn formats_have_expected_names() {
        assert_eq!(AudioFormat::Opus.extension(), "opus");
        assert_eq!(AudioFormat::Opus.content_type(), "audio/ogg");
        assert_eq!(AudioFormat::Aac.content_type(), "audio/aac");
        assert_eq!(AudioFormat::Mp3.content_type(), "audio/mpeg");
        for name in ["mp3", "wav", "opus", "aac", "flac", "pcm"] {
            assert_eq!(AudioFormat::from_name(name).unwrap().extension(), name);
        }
        assert_eq!(AudioFormat::from_name("m4a"), None);
    }

    #[tokio::test]
    async fn pcm_is_headerless_24khz_16_bit_mono() {
        // A 22.05 kHz input is resampled: one second is 24,000 samples.
        let wav = encode_wav(&tone(440.0, 1.0, 22_050), 22_050);
        let pcm = convert_wav(wav, AudioFormat::Pcm).await.unwrap();
        assert!(!pcm.starts_with(b"RIFF"));
        assert!(
            (pcm.len() as i64 - 48_000).abs() <= 64,
            "{} bytes",
            pcm.len()
        );
        let d = duration_in(&pcm, AudioFormat::Pcm).await.unwrap();
        assert!((d - 1.0).abs() < 0.01, "{d}");
        // Read as s16le, the tone keeps its 880 zero crossings a second.
        let samples: Vec<i16> = pcm
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]))
            .collect();
        let crossings = samples[2400..21_600]
            .windows(2)
            .filter(|w| (w[0] < 0) != (w[1] < 0))
            .count();
        assert!((690..720).contains(&crossings), "{crossings} crossings");
        assert!(duration_in(b"", AudioFormat::Pcm).await.is_err());
    }
}
