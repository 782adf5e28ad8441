//! Text-to-speech for the offline `local` provider, backed by `espeak-ng`.
//!
//! The six OpenAI voice presets map onto distinct espeak-ng voice variants and
//! pitches. Any other voice string is accepted: if it names an installed
//! espeak-ng language/variant (e.g. `en-gb+f2`, `de`, `Alex`) it is used as
//! is, otherwise it is hashed onto one of the presets, so the same string
//! always sounds the same. Text reaches espeak-ng on stdin only, never as an
//! argument, so it cannot be mistaken for an option.
//!
//! espeak-ng's rate is clamped to the 80..=450 words per minute it accepts;
//! whatever part of the requested speed it cannot deliver is applied
//! afterwards with ffmpeg's `atempo`, which changes tempo without pitch.

use std::collections::HashMap;
use std::ffi::OsString;
use std::time::Duration;

use tokio::sync::OnceCell;

use unigen_core::ProviderError;
use unigen_core::audio::{self, AudioFormat};

/// OpenAI-compatible voice names; each maps to its own espeak-ng voice.
pub const PRESET_VOICES: [&str; 6] = ["alloy", "echo", "fable", "onyx", "nova", "shimmer"];

/// espeak-ng voice and pitch (0..=99, 50 is neutral) for each preset, in
/// [`PRESET_VOICES`] order. Variants and pitches are spread out so that
/// presets differ audibly in register and timbre.
const PRESET_ESPEAK: [(&str, u8); 6] = [
    ("en-us+m3", 50), // alloy: neutral male
    ("en-us+m1", 40), // echo: lower, rounder male
    ("en-gb+m4", 56), // fable: British male
    ("en-us+m7", 28), // onyx: deep male
    ("en-us+f3", 62), // nova: bright female
    ("en-us+f4", 72), // shimmer: high, light female
];

/// espeak-ng's default rate (words per minute) corresponding to speed 1.0.
const BASE_WPM: f32 = 175.0;
/// Rate range espeak-ng accepts with `-s`.
const MIN_WPM: f32 = 80.0;
const MAX_WPM: f32 = 450.0;
/// Longest text accepted, in characters.
pub const MAX_TEXT_CHARS: usize = 10_000;
/// espeak-ng renders 10,000 characters in well under a second; this only
/// guards against a hung process.
const ESPEAK_TIMEOUT: Duration = Duration::from_secs(120);

/// What to say and how.
#[derive(Debug, Clone, Copy)]
pub struct SpeechSpec<'a> {
    pub text: &'a str,
    /// A preset from [`PRESET_VOICES`], an espeak-ng voice, or any string.
    pub voice: &'a str,
    /// Playback speed factor, 0.25..=4.0 (1.0 is normal).
    pub speed: f32,
    pub format: AudioFormat,
}

/// Encoded speech (mono, 22.05 kHz before any codec resampling).
#[derive(Debug, Clone)]
pub struct Speech {
    pub bytes: Vec<u8>,
    /// Measured from the encoded bytes.
    pub duration_seconds: f64,
}

/// Synthesizes `spec.text` and encodes it in `spec.format`.
///
/// Errors are Permanent for bad input (empty or over-long text, speed out of
/// range) and when espeak-ng/ffmpeg are missing or fail.
pub async fn synthesize(spec: &SpeechSpec<'_>) -> Result<Speech, ProviderError> {
    if !spec.speed.is_finite() || !(0.25..=4.0).contains(&spec.speed) {
        return Err(ProviderError::Permanent(format!(
            "speed must be between 0.25 and 4.0, got {}",
            spec.speed
        )));
    }
    let text = sanitize_text(spec.text);
    if text.trim().is_empty() {
        return Err(ProviderError::Permanent("text to speak is empty".into()));
    }
    let chars = text.chars().count();
    if chars > MAX_TEXT_CHARS {
        return Err(ProviderError::Permanent(format!(
            "text is {chars} characters; at most {MAX_TEXT_CHARS} are supported"
        )));
    }

    let voice = resolve_voice(spec.voice, voice_catalog().await);
    let (wpm, tempo) = speed_plan(spec.speed);
    let raw = match run_espeak(&voice, wpm, &text).await {
        Ok(raw) => raw,
        // An installed-but-broken custom voice should not fail the request:
        // fall back to the preset the string hashes to.
        Err(e) if voice.custom => {
            tracing::warn!(voice = spec.voice, error = %e, "espeak-ng voice failed; using preset");
            run_espeak(&hashed_preset(spec.voice), wpm, &text).await?
        }
        Err(e) => return Err(e),
    };

    let (wav, data_start) = audio::repair_streamed_wav(raw)?;
    let speakable = wav[data_start..]
        .chunks_exact(2)
        .any(|s| i16::from_le_bytes([s[0], s[1]]).unsigned_abs() > 32);
    // Text with nothing to pronounce ("...", symbols espeak-ng skips) is a
    // valid request: it is spoken as a short silence, not refused.
    let wav = if speakable {
        wav
    } else {
        audio::encode_wav(&[0.0; SILENCE_SAMPLES], SILENCE_RATE)
    };

    let filter = tempo.map(atempo_chain);
    let bytes = match (spec.format, filter) {
        (AudioFormat::Wav, None) => wav,
        (format, filter) => audio::transcode_wav(wav, format, filter.as_deref()).await?,
    };
    let duration_seconds = audio::duration_in(&bytes, spec.format).await?;
    Ok(Speech {
        bytes,
        duration_seconds,
    })
}

/// An espeak-ng `-v` value plus pitch; `custom` marks voices the caller named
/// directly (eligible for fallback if espeak-ng rejects them).
#[derive(Debug, Clone, PartialEq, Eq)]
struct EspeakVoice {
    name: String,
    pitch: u8,
    custom: bool,
}

/// Installed espeak-ng languages and variants, keyed by lowercase name and
/// mapping to the spelling espeak-ng expects (variant files are case-sensitive).
#[derive(Debug, Default)]
struct VoiceCatalog {
    languages: HashMap<String, String>,
    variants: HashMap<String, String>,
}

/// Lists installed voices once per process; an empty catalog (espeak-ng
/// missing) just means every custom voice maps onto a preset.
async fn voice_catalog() -> &'static VoiceCatalog {
    static CATALOG: OnceCell<VoiceCatalog> = OnceCell::const_new();
    CATALOG
        .get_or_init(|| async {
            let list = |arg: &'static str| async move {
                audio::run_tool(
                    "espeak-ng",
                    &[OsString::from(arg)],
                    None,
                    Duration::from_secs(10),
                )
                .await
                .map(|out| String::from_utf8_lossy(&out).into_owned())
                .unwrap_or_default()
            };
            parse_catalog(&list("--voices").await, &list("--voices=variant").await)
        })
        .await
}

/// Parses `espeak-ng --voices` and `--voices=variant` listings. Columns:
/// priority, language, age/gender, name, file, other languages. MBROLA voices
/// (files under `mb/`) are skipped: they need an external synthesizer that
/// is usually absent.
fn parse_catalog(voices: &str, variants: &str) -> VoiceCatalog {
    let mut catalog = VoiceCatalog::default();
    for line in voices.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 5 || cols[4].starts_with("mb/") {
            continue;
        }
        catalog
            .languages
            .insert(cols[1].to_ascii_lowercase(), cols[1].to_owned());
    }
    for line in variants.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if let Some(file) = cols.get(4).and_then(|f| f.strip_prefix("!v/")) {
            catalog
                .variants
                .insert(file.to_ascii_lowercase(), file.to_owned());
        }
    }
    catalog
}

/// Maps a requested voice to an espeak-ng voice: presets by name
/// (case-insensitive), then installed `language[+variant]` or bare variant
/// names, then a deterministic hash onto a preset.
fn resolve_voice(requested: &str, catalog: &VoiceCatalog) -> EspeakVoice {
    let key = requested.trim().to_ascii_lowercase();
    if let Some(i) = PRESET_VOICES.iter().position(|p| *p == key) {
        return preset(i);
    }
    let plausible = !key.is_empty()
        && key.len() <= 64
        && !key.starts_with(['-', '+'])
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '+'));
    if plausible {
        let custom = |name: String| EspeakVoice {
            name,
            pitch: 50,
            custom: true,
        };
        match key.split_once('+') {
            Some((lang, variant)) => {
                if let (Some(l), Some(v)) =
                    (catalog.languages.get(lang), catalog.variants.get(variant))
                {
                    return custom(format!("{l}+{v}"));
                }
            }
            None => {
                if let Some(l) = catalog.languages.get(&key) {
                    return custom(l.clone());
                }
                if let Some(v) = catalog.variants.get(&key) {
                    return custom(format!("en-us+{v}"));
                }
            }
        }
    }
    hashed_preset(requested)
}

fn preset(index: usize) -> EspeakVoice {
    let (name, pitch) = PRESET_ESPEAK[index];
    EspeakVoice {
        name: name.to_owned(),
        pitch,
        custom: false,
    }
}

/// The preset an arbitrary voice string stands for (FNV-1a, stable across builds).
fn hashed_preset(requested: &str) -> EspeakVoice {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in requested.trim().to_ascii_lowercase().bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    preset((h % PRESET_ESPEAK.len() as u64) as usize)
}

/// espeak-ng words-per-minute for `speed`, plus the residual tempo factor
/// ffmpeg must apply when the rate had to be clamped.
fn speed_plan(speed: f32) -> (u32, Option<f32>) {
    let wanted = BASE_WPM * speed;
    let wpm = wanted.round().clamp(MIN_WPM, MAX_WPM);
    let residual = wanted / wpm;
    let tempo = ((residual - 1.0).abs() > 0.005).then_some(residual);
    (wpm as u32, tempo)
}

/// ffmpeg filter for a tempo factor; `atempo` takes 0.5..=2.0 per instance,
/// so larger changes are chained.
fn atempo_chain(mut factor: f32) -> String {
    let mut parts = Vec::new();
    while factor > 2.0 {
        parts.push("atempo=2".to_owned());
        factor /= 2.0;
    }
    while factor < 0.5 {
        parts.push("atempo=0.5".to_owned());
        factor /= 0.5;
    }
    parts.push(format!("atempo={factor:.6}"));
    parts.join(",")
}

/// Replaces control characters (other than line breaks and tabs) with spaces:
/// they carry no speech and could confuse espeak-ng's input parser.
fn sanitize_text(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// Half a second of silence at espeak-ng's own sample rate.
const SILENCE_RATE: u32 = 22_050;
const SILENCE_SAMPLES: usize = SILENCE_RATE as usize / 2;

/// Runs espeak-ng with the text on stdin and returns the WAV it writes to stdout.
async fn run_espeak(voice: &EspeakVoice, wpm: u32, text: &str) -> Result<Vec<u8>, ProviderError> {
    let args: Vec<OsString> = [
        "-v",
        &voice.name,
        "-s",
        &wpm.to_string(),
        "-p",
        &voice.pitch.to_string(),
        "--stdin",
        "--stdout",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    let mut input = text.as_bytes().to_vec();
    input.push(b'\n');
    let out = audio::run_tool("espeak-ng", &args, Some(input), ESPEAK_TIMEOUT).await?;
    if out.len() <= 44 {
        return Err(ProviderError::Permanent(format!(
            "espeak-ng produced no audio for voice {}",
            voice.name
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOX: &str = "The quick brown fox jumps over the lazy dog";

    async fn say(text: &str, voice: &str, speed: f32, format: AudioFormat) -> Speech {
        synthesize(&SpeechSpec {
            text,
            voice,
            speed,
            format,
        })
        .await
        .unwrap()
    }

    fn samples(wav: &[u8]) -> Vec<f32> {
        let mut reader = hound::WavReader::new(std::io::Cursor::new(wav)).unwrap();
        reader
            .samples::<i16>()
            .map(|s| f32::from(s.unwrap()) / 32768.0)
            .collect()
    }

    /// Median fundamental (Hz) over loud frames, by autocorrelation.
    fn median_pitch(x: &[f32], rate: f32) -> f32 {
        let (min_lag, max_lag) = ((rate / 400.0) as usize, (rate / 60.0) as usize);
        let mut pitches = Vec::new();
        for frame in x.chunks_exact(1024) {
            let energy: f32 = frame.iter().map(|v| v * v).sum();
            if energy / 1024.0 < 1e-3 {
                continue;
            }
            let corr =
                |lag: usize| -> f32 { (0..1024 - lag).map(|i| frame[i] * frame[i + lag]).sum() };
            let (best, value) = (min_lag..=max_lag)
                .map(|l| (l, corr(l)))
                .fold((0, f32::MIN), |a, b| if b.1 > a.1 { b } else { a });
            if value > 0.3 * energy {
                pitches.push(rate / best as f32);
            }
        }
        pitches.sort_by(f32::total_cmp);
        pitches[pitches.len() / 2]
    }

    #[tokio::test]
    async fn wav_is_riff_with_plausible_duration() {
        let s = say(FOX, "alloy", 1.0, AudioFormat::Wav).await;
        assert_eq!(&s.bytes[0..4], b"RIFF");
        assert_eq!(&s.bytes[8..12], b"WAVE");
        assert!(
            (1.0..6.0).contains(&s.duration_seconds),
            "{}",
            s.duration_seconds
        );
        let rate = hound::WavReader::new(std::io::Cursor::new(&s.bytes))
            .unwrap()
            .spec()
            .sample_rate;
        assert!(rate == 22_050 || rate == 24_000);
        let x = samples(&s.bytes);
        assert!((x.len() as f64 / f64::from(rate) - s.duration_seconds).abs() < 1e-6);
    }

    #[tokio::test]
    async fn text_without_sound_is_half_a_second_of_silence() {
        for format in [AudioFormat::Wav, AudioFormat::Mp3] {
            let s = say("...", "alloy", 1.0, format).await;
            assert!(
                (0.45..0.6).contains(&s.duration_seconds),
                "{format:?}: {}",
                s.duration_seconds
            );
        }
        let s = say("...", "nova", 1.0, AudioFormat::Wav).await;
        assert!(samples(&s.bytes).iter().all(|x| *x == 0.0));
    }

    #[tokio::test]
    async fn speed_changes_duration_proportionally() {
        let normal = say(FOX, "echo", 1.0, AudioFormat::Wav)
            .await
            .duration_seconds;
        let double = say(FOX, "echo", 2.0, AudioFormat::Wav)
            .await
            .duration_seconds;
        let quad = say(FOX, "echo", 4.0, AudioFormat::Wav)
            .await
            .duration_seconds;
        let quarter = say(FOX, "echo", 0.25, AudioFormat::Wav)
            .await
            .duration_seconds;
        assert!(
            (0.35..0.65).contains(&(double / normal)),
            "{double} vs {normal}"
        );
        // Beyond espeak-ng's own range the rest comes from atempo.
        assert!(
            (0.17..0.33).contains(&(quad / normal)),
            "{quad} vs {normal}"
        );
        assert!(
            (3.0..5.0).contains(&(quarter / normal)),
            "{quarter} vs {normal}"
        );
    }

    #[tokio::test]
    async fn compressed_formats_have_right_magic() {
        let mp3 = say(FOX, "nova", 1.0, AudioFormat::Mp3).await;
        assert!(
            mp3.bytes.starts_with(b"ID3") || (mp3.bytes[0] == 0xFF && mp3.bytes[1] & 0xE0 == 0xE0)
        );
        let opus = say(FOX, "nova", 1.0, AudioFormat::Opus).await;
        assert!(opus.bytes.starts_with(b"OggS"));
        let aac = say(FOX, "nova", 1.5, AudioFormat::Aac).await;
        assert!(aac.bytes[0] == 0xFF && aac.bytes[1] & 0xF0 == 0xF0);
        let flac = say(FOX, "nova", 1.0, AudioFormat::Flac).await;
        assert!(flac.bytes.starts_with(b"fLaC"));
        // Raw 24 kHz s16le: the length is the duration.
        let pcm = say(FOX, "nova", 1.0, AudioFormat::Pcm).await;
        assert!(!pcm.bytes.starts_with(b"RIFF") && pcm.bytes.len() % 2 == 0);
        assert!((pcm.duration_seconds - pcm.bytes.len() as f64 / 48_000.0).abs() < 1e-9);
        // Same speech, so the measured durations agree across codecs.
        for d in [
            opus.duration_seconds,
            flac.duration_seconds,
            pcm.duration_seconds,
        ] {
            assert!(
                (d - mp3.duration_seconds).abs() < 0.1,
                "{d} vs {}",
                mp3.duration_seconds
            );
        }
        assert!(aac.duration_seconds < mp3.duration_seconds * 0.85);
    }

    #[tokio::test]
    async fn presets_sound_different() {
        let mut outputs = Vec::new();
        for voice in PRESET_VOICES {
            outputs.push(say(FOX, voice, 1.0, AudioFormat::Wav).await.bytes);
        }
        for i in 0..outputs.len() {
            for j in i + 1..outputs.len() {
                assert_ne!(
                    outputs[i], outputs[j],
                    "{} = {}",
                    PRESET_VOICES[i], PRESET_VOICES[j]
                );
            }
        }
        let onyx = median_pitch(&samples(&outputs[3]), 22_050.0);
        let shimmer = median_pitch(&samples(&outputs[5]), 22_050.0);
        assert!(
            shimmer > onyx * 1.4,
            "shimmer {shimmer} Hz vs onyx {onyx} Hz"
        );
    }

    #[tokio::test]
    async fn any_voice_string_is_accepted_and_deterministic() {
        let a = say(FOX, "Captain Custom #7", 1.0, AudioFormat::Wav).await;
        let b = say(FOX, "Captain Custom #7", 1.0, AudioFormat::Wav).await;
        assert_eq!(a.bytes, b.bytes);
        let named = say(FOX, "en-gb+f2", 1.0, AudioFormat::Wav).await;
        assert!(named.duration_seconds > 1.0);
        // Text that looks like an option is spoken, not parsed.
        let dashed = say("--version -h", "alloy", 1.0, AudioFormat::Wav).await;
        assert!(dashed.duration_seconds > 0.5);
    }

    #[tokio::test]
    async fn resolves_voices_against_the_catalog() {
        let catalog = voice_catalog().await;
        assert_eq!(resolve_voice("NOVA", catalog), preset(4));
        assert_eq!(resolve_voice("en-gb+f2", catalog).name, "en-gb+f2");
        assert_eq!(resolve_voice("alex", catalog).name, "en-us+Alex");
        assert_eq!(resolve_voice("de", catalog).name, "de");
        for odd in [
            "--help",
            "en-us+nosuchvariant",
            "../../etc/passwd",
            "",
            "xx-yy",
        ] {
            let v = resolve_voice(odd, catalog);
            assert!(
                !v.custom && PRESET_ESPEAK.iter().any(|(n, _)| *n == v.name),
                "{odd}"
            );
            assert_eq!(v, hashed_preset(odd));
        }
    }

    #[tokio::test]
    async fn long_text_and_bad_input() {
        let sentence = "This is a fairly ordinary sentence for testing. ";
        let text = sentence.repeat(MAX_TEXT_CHARS / sentence.len());
        assert!(text.len() > 9_900);
        let long = say(&text, "fable", 2.0, AudioFormat::Wav).await;
        assert!(long.duration_seconds > 60.0, "{}", long.duration_seconds);
        let spec = |text, speed| SpeechSpec {
            text,
            voice: "alloy",
            speed,
            format: AudioFormat::Wav,
        };
        for bad in [
            spec("  ", 1.0),
            spec(FOX, 0.1),
            spec(FOX, f32::NAN),
            spec(&"a".repeat(MAX_TEXT_CHARS + 1), 1.0),
        ] {
            assert!(matches!(
                synthesize(&bad).await,
                Err(ProviderError::Permanent(_))
            ));
        }
    }

    #[test]
    fn speed_plan_clamps_and_chains() {
        assert_eq!(speed_plan(1.0), (175, None));
        assert_eq!(speed_plan(2.0), (350, None));
        let (wpm, tempo) = speed_plan(4.0);
        assert_eq!(wpm, 450);
        assert!((tempo.unwrap() - 700.0 / 450.0).abs() < 1e-4);
        let (wpm, tempo) = speed_plan(0.25);
        assert_eq!(wpm, 80);
        assert!((tempo.unwrap() - 43.75 / 80.0).abs() < 1e-4);
        assert_eq!(atempo_chain(5.0), "atempo=2,atempo=2,atempo=1.250000");
        assert_eq!(atempo_chain(0.2), "atempo=0.5,atempo=0.5,atempo=0.800000");
    }
}
