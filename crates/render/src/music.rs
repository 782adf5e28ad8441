//! Procedural music for the offline `local` provider.
//!
//! There is no model: a small composer reads style words from the prompt
//! (instruments, genre, mood, key, tempo), lets the seed choose the chord
//! progressions, song form and melody, and renders every note with a
//! purpose-built synthesizer (additive piano, Karplus–Strong guitar, filtered
//! detuned saws, an ensemble string section, pads, bass and a synthesized drum
//! kit) followed by a small reverb. Everything is pure and deterministic, so
//! the same spec always yields the same samples.

use crate::random::Rng;
use unigen_core::ProviderError;
use unigen_core::audio::{self, AudioFormat};

/// Output sample rate (mono). `MusicSpec::source` must be at this rate too.
pub const SAMPLE_RATE: u32 = 44_100;
/// Longest track [`generate`] accepts; models configure their own lower caps.
pub const MAX_DURATION_SECONDS: f64 = 600.0;

const SR: f32 = SAMPLE_RATE as f32;
/// Fade at both ends so tracks never start or stop with a click.
const FADE_SECONDS: f32 = 0.05;
/// Final peak level: headroom for lossy encoders, which overshoot slightly.
const TARGET_PEAK: f32 = 0.9;

/// What to compose.
#[derive(Debug, Clone, Copy)]
pub struct MusicSpec<'a> {
    pub prompt: &'a str,
    /// Elements to leave out ("drums", "bass", "piano", "melody", ...).
    pub negative_prompt: Option<&'a str>,
    pub seed: u64,
    pub duration_seconds: f64,
    /// Mp3 or Wav in the API; the other formats work as well.
    pub format: AudioFormat,
    /// audio_to_audio: mono PCM at [`SAMPLE_RATE`] that the track is built around.
    pub source: Option<&'a [f32]>,
}

/// An encoded track.
#[derive(Debug, Clone)]
pub struct Track {
    pub bytes: Vec<u8>,
    /// Exact for WAV; measured from the encoded bytes otherwise.
    pub duration_seconds: f64,
}

/// Exactly round(duration_seconds * SAMPLE_RATE) samples; pure and deterministic.
///
/// Non-finite or non-positive durations give an empty vector; durations are
/// capped at [`MAX_DURATION_SECONDS`] so a bad value cannot exhaust memory.
pub fn compose(spec: &MusicSpec<'_>) -> Vec<f32> {
    let n = sample_count(spec.duration_seconds).min(sample_count(MAX_DURATION_SECONDS));
    if n == 0 {
        return Vec::new();
    }
    let source = spec.source.filter(|s| !s.is_empty());
    let style = Style::from_prompt(spec.prompt, spec.negative_prompt, spec.seed);
    let plan = Plan::new(&style, spec.seed, n, source.is_none());
    let mut out = render(&plan, spec.seed, n);
    if let Some(src) = source {
        blend_source(&mut out, src);
    }
    master(&mut out);
    out
}

/// compose (in spawn_blocking) + encode: wav via encode_wav, others via convert_wav.
///
/// Permanent errors for impossible durations or an empty source.
pub async fn generate(spec: &MusicSpec<'_>) -> Result<Track, ProviderError> {
    let d = spec.duration_seconds;
    if !d.is_finite() || d <= 0.0 || d > MAX_DURATION_SECONDS || sample_count(d) == 0 {
        return Err(ProviderError::Permanent(format!(
            "duration_seconds must be greater than 0 and at most {MAX_DURATION_SECONDS}, got {d}"
        )));
    }
    if spec.source.is_some_and(<[f32]>::is_empty) {
        return Err(ProviderError::Permanent(
            "source audio contains no samples".into(),
        ));
    }
    let prompt = spec.prompt.to_owned();
    let negative = spec.negative_prompt.map(str::to_owned);
    let source = spec.source.map(<[f32]>::to_vec);
    let (seed, format) = (spec.seed, spec.format);
    let (wav, samples) = tokio::task::spawn_blocking(move || {
        let pcm = compose(&MusicSpec {
            prompt: &prompt,
            negative_prompt: negative.as_deref(),
            seed,
            duration_seconds: d,
            format,
            source: source.as_deref(),
        });
        (audio::encode_wav(&pcm, SAMPLE_RATE), pcm.len())
    })
    .await
    .map_err(|e| ProviderError::Permanent(format!("music synthesis crashed: {e}")))?;
    if format == AudioFormat::Wav {
        return Ok(Track {
            bytes: wav,
            duration_seconds: samples as f64 / f64::from(SAMPLE_RATE),
        });
    }
    let bytes = audio::convert_wav(wav, format).await?;
    let duration_seconds = audio::probe_duration(&bytes).await?;
    Ok(Track {
        bytes,
        duration_seconds,
    })
}

fn sample_count(seconds: f64) -> usize {
    if seconds.is_finite() && seconds > 0.0 {
        (seconds * f64::from(SAMPLE_RATE)).round() as usize
    } else {
        0
    }
}

// ---------------------------------------------------------------------------
// Randomness

// ---------------------------------------------------------------------------
// Reading the prompt

/// Instruments that can carry a melody or chords.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Voice {
    Piano,
    Guitar,
    Synth,
    Strings,
    Pad,
}

/// Drum pattern family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Groove {
    Rock,
    Dance,
    Soft,
    Pop,
}

/// Musical decisions taken from the prompt (and, where it is silent, the seed).
#[derive(Debug, Clone)]
struct Style {
    /// Tonic pitch class, 0 = C.
    root: i32,
    minor: bool,
    bpm: f32,
    /// Chord instruments; the first also plays the melody.
    voices: Vec<Voice>,
    melody: bool,
    bass: bool,
    drums: Option<Groove>,
    /// Sparser rhythms and arpeggios instead of driving patterns.
    calm: bool,
    /// 0 (gentle) ..= 1 (driving): note density and accents.
    energy: f32,
}

const PIANO: &[&str] = &["piano", "keys", "rhodes", "keyboard"];
const GUITAR: &[&str] = &["guitar"];
const SYNTH: &[&str] = &[
    "synth", "electro", "edm", "techno", "house", "trance", "retro", "chiptune", "8bit", "arcade",
    "cyber",
];
const STRINGS: &[&str] = &[
    "string",
    "violin",
    "cello",
    "viola",
    "orchestr",
    "cinematic",
    "symphon",
    "epic",
    "classical",
    "film",
];
const PAD: &[&str] = &[
    "ambient",
    "pad",
    "atmospher",
    "drone",
    "dream",
    "ethereal",
    "space",
];
const BASS: &[&str] = &["bass"];
const DRUMS: &[&str] = &[
    "drum",
    "beat",
    "percussion",
    "rock",
    "dance",
    "upbeat",
    "groove",
    "edm",
    "techno",
    "house",
    "hiphop",
    "trap",
    "funk",
    "disco",
    "pop",
    "energetic",
    "punk",
    "metal",
    "lofi",
    "club",
    "party",
    "trance",
];
const MELODY: &[&str] = &["melod", "lead", "tune"];
const ROCK: &[&str] = &["rock", "punk", "metal", "grunge"];
const DANCE: &[&str] = &[
    "dance", "edm", "techno", "house", "disco", "trance", "club", "party",
];
const LAID_BACK: &[&str] = &["lofi", "hiphop", "jazz", "trap", "chill"];
const GUITAR_GENRES: &[&str] = &[
    "rock", "punk", "metal", "grunge", "folk", "country", "acoustic",
];
const CALM: &[&str] = &[
    "calm", "relax", "peace", "chill", "soft", "gentle", "sleep", "medita", "ambient", "lullab",
    "quiet", "serene", "tranquil", "soothing",
];
const SAD: &[&str] = &[
    "sad",
    "melanchol",
    "dark",
    "somber",
    "sombre",
    "gloom",
    "tragic",
    "lonely",
    "mourn",
    "grief",
    "moody",
    "haunting",
    "tense",
    "sorrow",
];
const HAPPY: &[&str] = &[
    "happy",
    "joy",
    "cheer",
    "bright",
    "upbeat",
    "fun",
    "sunny",
    "uplift",
    "playful",
    "festive",
    "triumph",
    "energetic",
    "exciting",
];
const FAST: &[&str] = &[
    "fast",
    "energetic",
    "driving",
    "intense",
    "party",
    "workout",
    "rock",
];
const SLOW: &[&str] = &["slow", "lazy", "ballad"];
const SOLO: &[&str] = &["solo"];

/// Lower-cased words of a prompt; "|" marks a clause break (, . ; :).
fn tokenize(text: &str) -> Vec<String> {
    let text = text
        .to_lowercase()
        .replace("lo-fi", "lofi")
        .replace("lo fi", "lofi")
        .replace("hip-hop", "hiphop")
        .replace("hip hop", "hiphop");
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() || c == '#' {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            tokens.push(std::mem::take(&mut word));
        }
        if matches!(c, ',' | '.' | ';' | ':' | '!' | '?') {
            tokens.push("|".to_owned());
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

/// Splits prompt words into wanted and unwanted: "no drums", "without piano
/// or bass" negate up to three following words within the clause.
fn split_negations(tokens: Vec<String>) -> (Vec<String>, Vec<String>) {
    let (mut pos, mut neg) = (Vec::new(), Vec::new());
    let mut negate = 0;
    for t in tokens {
        if t == "|" {
            negate = 0;
        } else if matches!(t.as_str(), "no" | "without" | "non" | "minus") {
            negate = 3;
        } else if negate > 0 {
            negate -= 1;
            neg.push(t);
        } else {
            pos.push(t);
        }
    }
    (pos, neg)
}

fn has(tokens: &[String], stems: &[&str]) -> bool {
    tokens
        .iter()
        .any(|t| stems.iter().any(|s| t.starts_with(s)))
}

/// Pitch class of a note name like "c", "f#", "bb".
fn note_class(token: &str) -> Option<i32> {
    let mut chars = token.chars();
    let base: i32 = match chars.next()? {
        'c' => 0,
        'd' => 2,
        'e' => 4,
        'f' => 5,
        'g' => 7,
        'a' => 9,
        'b' => 11,
        _ => return None,
    };
    let accidental = match chars.as_str() {
        "" => 0,
        "#" => 1,
        "b" => -1,
        _ => return None,
    };
    Some((base + accidental).rem_euclid(12))
}

/// "in A minor", "f# major", "e flat major", "minor key": (tonic, minor?).
fn parse_key(tokens: &[String]) -> (Option<i32>, Option<bool>) {
    let (mut root, mut minor) = (None, None);
    for (i, t) in tokens.iter().enumerate() {
        let mode = match t.as_str() {
            "major" | "maj" => false,
            "minor" | "min" => true,
            _ => continue,
        };
        minor = Some(mode);
        let (mut j, mut shift) = (i, 0);
        if j > 0 && (tokens[j - 1] == "sharp" || tokens[j - 1] == "flat") {
            shift = if tokens[j - 1] == "sharp" { 1 } else { -1 };
            j -= 1;
        }
        if let Some(pc) = j.checked_sub(1).and_then(|k| note_class(&tokens[k])) {
            root = Some((pc + shift).rem_euclid(12));
        }
    }
    (root, minor)
}

/// "120 bpm" or "120bpm".
fn parse_bpm(tokens: &[String]) -> Option<f32> {
    tokens.iter().enumerate().find_map(|(i, t)| {
        let number = if t == "bpm" {
            tokens.get(i.checked_sub(1)?)?.as_str()
        } else {
            t.strip_suffix("bpm")?
        };
        number.parse::<f32>().ok().filter(|b| b.is_finite())
    })
}

impl Style {
    fn from_prompt(prompt: &str, negative: Option<&str>, seed: u64) -> Self {
        let mut rng = Rng::stream(seed, 1);
        let (pos, mut neg) = split_negations(tokenize(prompt));
        neg.extend(tokenize(negative.unwrap_or("")));
        let want = |stems: &[&str]| has(&pos, stems);
        let unwanted = |stems: &[&str]| has(&neg, stems);

        let calm = want(CALM);
        let sad = want(SAD);
        let happy = want(HAPPY) && !sad;
        let (key_root, key_minor) = parse_key(&pos);
        let minor = key_minor.unwrap_or(if sad {
            true
        } else if happy {
            false
        } else {
            rng.chance(if calm { 0.5 } else { 0.35 })
        });
        let root = key_root.unwrap_or_else(|| rng.below(12) as i32);

        let groove = if want(DANCE) {
            Groove::Dance
        } else if want(ROCK) {
            Groove::Rock
        } else if calm || want(LAID_BACK) {
            Groove::Soft
        } else {
            Groove::Pop
        };
        let mut bpm = match groove {
            Groove::Dance => rng.range(120.0, 128.0),
            Groove::Rock => rng.range(116.0, 136.0),
            _ if want(LAID_BACK) => rng.range(78.0, 90.0),
            _ => rng.range(92.0, 108.0),
        };
        if happy {
            bpm += 16.0;
        }
        if sad {
            bpm -= 22.0;
        }
        if calm {
            bpm -= 20.0;
        }
        if want(FAST) {
            bpm += 14.0;
        }
        if want(SLOW) {
            bpm -= 16.0;
        }
        let bpm = match parse_bpm(&pos) {
            Some(b) => b.clamp(40.0, 220.0),
            None => bpm.clamp(56.0, 176.0),
        };

        // Instruments: those named, else what the genre implies, else the seed's pick.
        let catalog = [
            (Voice::Piano, PIANO),
            (Voice::Guitar, GUITAR),
            (Voice::Synth, SYNTH),
            (Voice::Strings, STRINGS),
            (Voice::Pad, PAD),
        ];
        let mut voices: Vec<Voice> = catalog
            .iter()
            .filter(|(_, stems)| want(stems))
            .map(|(v, _)| *v)
            .collect();
        if !voices.iter().any(|v| *v != Voice::Pad) {
            let mut implied = if want(GUITAR_GENRES) {
                vec![Voice::Guitar]
            } else if calm || want(LAID_BACK) {
                vec![Voice::Piano]
            } else {
                const ENSEMBLES: [&[Voice]; 5] = [
                    &[Voice::Piano],
                    &[Voice::Piano, Voice::Strings],
                    &[Voice::Guitar],
                    &[Voice::Piano, Voice::Pad],
                    &[Voice::Synth],
                ];
                ENSEMBLES[rng.below(ENSEMBLES.len())].to_vec()
            };
            implied.retain(|v| !voices.contains(v));
            // A pad accompanies well but is a poor lead: put the implied lead first.
            implied.extend(voices);
            voices = implied;
        }
        voices.retain(|v| !catalog.iter().any(|(c, stems)| c == v && unwanted(stems)));
        let bass = !unwanted(BASS) && (want(BASS) || !want(SOLO));
        let drums = (want(DRUMS) && !unwanted(DRUMS)).then_some(groove);
        if voices.is_empty() && !bass && drums.is_none() {
            // Everything was excluded; a quiet pad is the least of the evils.
            voices.push(Voice::Pad);
        }
        let melody = !unwanted(MELODY) && !voices.is_empty();

        let mut energy: f32 = 0.5;
        if happy {
            energy += 0.2;
        }
        if want(FAST) || matches!(drums, Some(Groove::Dance | Groove::Rock)) {
            energy += 0.25;
        }
        if calm {
            energy -= 0.3;
        }
        if sad {
            energy -= 0.15;
        }
        Style {
            root,
            minor,
            bpm,
            voices,
            melody,
            bass,
            drums,
            calm,
            energy: energy.clamp(0.0, 1.0),
        }
    }
}

// ---------------------------------------------------------------------------
// Composition: progression, form and melody

const MAJOR_SCALE: [i32; 7] = [0, 2, 4, 5, 7, 9, 11];
const MINOR_SCALE: [i32; 7] = [0, 2, 3, 5, 7, 8, 10];

/// Four-bar progressions as scale degrees (0 = I/i). Major: I–V–vi–IV and
/// relatives; minor: i–VI–III–VII and relatives (degree 4 is played as a
/// major V, the harmonic-minor dominant).
const MAJOR_PROGRESSIONS: [[i32; 4]; 6] = [
    [0, 4, 5, 3],
    [0, 5, 3, 4],
    [5, 3, 0, 4],
    [0, 3, 5, 4],
    [0, 3, 4, 3],
    [0, 2, 3, 4],
];
const MINOR_PROGRESSIONS: [[i32; 4]; 6] = [
    [0, 5, 2, 6],
    [0, 3, 6, 2],
    [0, 5, 3, 4],
    [0, 6, 5, 6],
    [0, 3, 4, 0],
    [5, 6, 0, 4],
];

/// One-bar melody rhythms in eighth notes; negative values are rests.
const RHYTHMS: [&[i8]; 10] = [
    &[2, 2, 2, 2],
    &[1, 1, 2, 2, 2],
    &[3, 1, 2, 2],
    &[2, 1, 1, 4],
    &[2, 2, 1, 1, 2],
    &[1, 1, 1, 1, 2, 2],
    &[3, 1, 3, 1],
    &[-2, 2, 2, 2],
    &[2, 2, -1, 1, 2],
    &[4, 2, 2],
];
const CALM_RHYTHMS: [&[i8]; 5] = [&[4, 4], &[6, 2], &[4, 2, 2], &[2, 2, 4], &[3, 1, 4]];
/// Phrase endings: the last note lands on the chord root and rings.
const CADENCES: [&[i8]; 4] = [&[2, 2, 4], &[4, 4], &[3, 1, 4], &[2, -2, 4]];
/// Melody range in scale steps above the melody tonic.
const MELODY_LOW: i32 = 0;
const MELODY_HIGH: i32 = 11;

/// A note in absolute time. `midi` may be fractional only for tuning effects.
#[derive(Debug, Clone, Copy)]
struct Note {
    start: f32,
    gate: f32,
    midi: f32,
    vel: f32,
}

/// A melody note inside a four-bar phrase.
#[derive(Debug, Clone, Copy)]
struct MotifNote {
    bar: usize,
    /// Eighths from the bar start.
    at: u32,
    len: u32,
    /// Scale step above the melody tonic.
    step: i32,
    vel: f32,
}

#[derive(Debug, Clone, Copy)]
struct Bar {
    /// Chord as a scale degree.
    degree: i32,
    /// Position inside its four-bar phrase.
    in_phrase: usize,
    /// Accompaniment-only opening phrase (long tracks).
    intro: bool,
    fill: bool,
    crash: bool,
}

/// The whole arrangement, ready to render.
struct Plan<'s> {
    style: &'s Style,
    bar_seconds: f32,
    bars: Vec<Bar>,
    melody: Vec<Note>,
}

impl Style {
    fn scale(&self) -> &'static [i32; 7] {
        if self.minor {
            &MINOR_SCALE
        } else {
            &MAJOR_SCALE
        }
    }

    /// Semitones above the tonic of scale step `step`; over a minor key's V
    /// chord the seventh is raised (harmonic minor).
    fn semis(&self, step: i32, chord: i32) -> i32 {
        let d = step.rem_euclid(7);
        let raise = i32::from(self.minor && chord.rem_euclid(7) == 4 && d == 6);
        self.scale()[d as usize] + raise + 12 * step.div_euclid(7)
    }

    /// Pitch classes (relative to the tonic) of the triad on `degree`.
    fn triad(&self, degree: i32) -> [i32; 3] {
        [0, 2, 4].map(|o| self.semis(degree + o, degree).rem_euclid(12))
    }

    /// MIDI note of the melody tonic, kept between F#3 and F4.
    fn melody_tonic(&self) -> i32 {
        60 + self.root - if self.root >= 6 { 12 } else { 0 }
    }

    /// MIDI note of pitch class `pc` (relative to the tonic) in [lo, lo + 12).
    fn place(&self, pc: i32, lo: i32) -> i32 {
        lo + (self.root + pc - lo).rem_euclid(12)
    }
}

/// Melody for `bars` of a phrase over `prog`: chord tones on strong eighths,
/// passing and neighbour tones between, occasional leaps and rests, and a
/// cadence onto the chord root in the last bar. Returns the notes and the
/// last step, so an answering phrase can continue from it.
fn melody_bars(
    style: &Style,
    prog: &[i32; 4],
    bars: std::ops::Range<usize>,
    mut prev: i32,
    rng: &mut Rng,
) -> (Vec<MotifNote>, i32) {
    let mut notes = Vec::new();
    for bar in bars {
        let chord = prog[bar];
        let rhythm = if bar == 3 {
            CADENCES[rng.below(CADENCES.len())]
        } else if style.calm || style.energy < 0.3 {
            CALM_RHYTHMS[rng.below(CALM_RHYTHMS.len())]
        } else {
            RHYTHMS[rng.below(RHYTHMS.len())]
        };
        let mut at = 0u32;
        for (i, &d) in rhythm.iter().enumerate() {
            let len = u32::from(d.unsigned_abs());
            let last = bar == 3 && i + 1 == rhythm.len();
            if d > 0 {
                let step = if last {
                    nearest(prev, (-1..=2).map(|k| chord + 7 * k))
                } else if at.is_multiple_of(2) {
                    chord_tone(prev, chord, rng)
                } else {
                    passing_tone(prev, rng)
                };
                let accent = match at {
                    0 => 1.0,
                    4 => 0.9,
                    a if a % 2 == 0 => 0.82,
                    _ => 0.72,
                };
                notes.push(MotifNote {
                    bar,
                    at,
                    len,
                    step,
                    vel: accent * rng.range(0.88, 1.0),
                });
                prev = step;
            }
            at += len;
        }
    }
    (notes, prev)
}

/// The candidate in the melody range closest to `prev`.
fn nearest(prev: i32, candidates: impl Iterator<Item = i32>) -> i32 {
    candidates
        .filter(|s| (MELODY_LOW..=MELODY_HIGH).contains(s))
        .min_by_key(|s| ((s - prev).abs(), *s))
        .unwrap_or(prev.clamp(MELODY_LOW, MELODY_HIGH))
}

/// A tone of the chord on `chord`, mostly close to `prev`, sometimes a leap.
fn chord_tone(prev: i32, chord: i32, rng: &mut Rng) -> i32 {
    let mut tones: Vec<i32> = (-1..=2)
        .flat_map(|k| [0, 2, 4].map(|o| chord + o + 7 * k))
        .filter(|s| (MELODY_LOW..=MELODY_HIGH).contains(s))
        .collect();
    if rng.chance(0.12) {
        // A leap, but never beyond an octave.
        tones.retain(|s| (s - prev).abs() <= 7);
        if !tones.is_empty() {
            return tones[rng.below(tones.len())];
        }
        return prev;
    }
    tones.sort_by_key(|s| ((s - prev).abs(), *s));
    // Prefer moving: a repeated note only when the dice insist.
    if tones.len() > 1 && tones[0] == prev && rng.chance(0.7) {
        tones.remove(0);
    }
    let pick = match rng.unit() {
        u if u < 0.55 => 0,
        u if u < 0.85 => 1,
        _ => 2,
    };
    tones[pick.min(tones.len() - 1)]
}

/// A scale step next to `prev`, leaning back toward the middle of the range.
fn passing_tone(prev: i32, rng: &mut Rng) -> i32 {
    let centre = (MELODY_LOW + MELODY_HIGH) as f32 / 2.0;
    let up = rng.unit() < 0.5 + (centre - prev as f32) * 0.08;
    (prev + if up { 1 } else { -1 }).clamp(MELODY_LOW, MELODY_HIGH)
}

impl<'s> Plan<'s> {
    /// Form: an accompaniment-only intro when the track is long enough, then
    /// phrases A A' B A' ... where A' answers A with a new cadence.
    fn new(style: &'s Style, seed: u64, samples: usize, melody: bool) -> Self {
        let mut rng = Rng::stream(seed, 2);
        let progs = if style.minor {
            &MINOR_PROGRESSIONS
        } else {
            &MAJOR_PROGRESSIONS
        };
        let a = rng.below(progs.len());
        let b = (a + 1 + rng.below(progs.len() - 1)) % progs.len();
        let (prog_a, prog_b) = (progs[a], progs[b]);

        let bar_seconds = 240.0 / style.bpm;
        let seconds = samples as f32 / SR;
        let n_bars = (seconds / bar_seconds).ceil() as usize + 1;
        let intro_phrases = usize::from(n_bars >= 12);

        let start = 4 + rng.below(3) as i32;
        let (motif_a, end_a) = melody_bars(style, &prog_a, 0..4, start, &mut rng);
        let mut answer: Vec<MotifNote> = motif_a.iter().copied().filter(|n| n.bar < 3).collect();
        let after_bar_2 = answer.last().map_or(end_a, |n| n.step);
        answer.extend(melody_bars(style, &prog_a, 3..4, after_bar_2, &mut rng).0);
        let motif_b = melody_bars(style, &prog_b, 0..4, end_a, &mut rng).0;

        let eighth = bar_seconds / 8.0;
        let tonic = style.melody_tonic();
        let mut bars = Vec::with_capacity(n_bars);
        let mut notes = Vec::new();
        for i in 0..n_bars {
            let phrase = i / 4;
            let in_phrase = i % 4;
            let intro = phrase < intro_phrases;
            let section = if intro {
                0
            } else {
                [0, 1, 2, 1][(phrase - intro_phrases) % 4]
            };
            let (prog, motif) = match section {
                0 => (&prog_a, &motif_a),
                1 => (&prog_a, &answer),
                _ => (&prog_b, &motif_b),
            };
            let degree = prog[in_phrase];
            bars.push(Bar {
                degree,
                in_phrase,
                intro,
                fill: in_phrase == 3 && rng.chance(0.55),
                crash: in_phrase == 0 && phrase > 0 && !intro && rng.chance(0.8),
            });
            if intro || !melody || !style.melody {
                continue;
            }
            let bar_start = i as f32 * bar_seconds;
            for m in motif.iter().filter(|m| m.bar == in_phrase) {
                let legato = if style.energy > 0.75 { 0.75 } else { 0.95 };
                notes.push(Note {
                    start: bar_start + m.at as f32 * eighth,
                    gate: m.len as f32 * eighth * legato,
                    midi: (tonic + style.semis(m.step, degree)) as f32,
                    vel: m.vel,
                });
            }
        }
        Plan {
            style,
            bar_seconds,
            bars,
            melody: notes,
        }
    }
}

// ---------------------------------------------------------------------------
// Arrangement: who plays what, when

/// A dry bus plus a reverb send.
struct Mix {
    dry: Vec<f32>,
    send: Vec<f32>,
}

impl Mix {
    /// Adds `signal` starting at `start` seconds (clipped to the track).
    fn add(&mut self, start: f32, signal: &[f32], gain: f32, send: f32) {
        let offset = (start * SR).round() as isize;
        let skip = usize::try_from(-offset).unwrap_or(0);
        let first = usize::try_from(offset).unwrap_or(0);
        if skip >= signal.len() || first >= self.dry.len() {
            return;
        }
        let signal = &signal[skip..];
        let end = (first + signal.len()).min(self.dry.len());
        for (d, s) in self.dry[first..end].iter_mut().zip(signal) {
            *d += gain * s;
        }
        if send > 0.0 {
            for (d, s) in self.send[first..end].iter_mut().zip(signal) {
                *d += gain * send * s;
            }
        }
    }
}

fn midi_hz(midi: f32) -> f32 {
    440.0 * ((midi - 69.0) / 12.0).exp2()
}

/// Renders one note on `voice`. `lead` selects the melodic variant
/// (brighter synth, quicker pad).
fn play(voice: Voice, note: &Note, lead: bool, rng: &mut Rng) -> Vec<f32> {
    let f = midi_hz(note.midi);
    match voice {
        Voice::Piano => piano(f, note.gate, note.vel),
        Voice::Guitar => pluck(f, note.gate, note.vel, rng),
        Voice::Synth => synth(f, note.gate, note.vel, if lead { 1.0 } else { 0.6 }),
        Voice::Strings => strings(f, note.gate, rng),
        Voice::Pad => pad(f, note.gate, if lead { 0.12 } else { 1.0 }),
    }
}

/// Level and reverb send per voice, so ensembles balance before mastering.
fn voice_mix(voice: Voice, lead: bool) -> (f32, f32) {
    let (gain, send) = match voice {
        Voice::Piano => (0.33, 0.25),
        Voice::Guitar => (2.0, 0.2),
        Voice::Synth => (1.3, 0.25),
        Voice::Strings => (0.65, 0.35),
        Voice::Pad => (0.4, 0.5),
    };
    if lead {
        (gain * 1.25, send)
    } else {
        (gain * 0.6, send)
    }
}

/// Renders the whole plan: melody, accompaniment, bass, drums and reverb.
fn render(plan: &Plan<'_>, seed: u64, samples: usize) -> Vec<f32> {
    let style = plan.style;
    let mut mix = Mix {
        dry: vec![0.0; samples],
        send: vec![0.0; samples],
    };
    let mut rng = Rng::stream(seed, 3);
    let humanize = |rng: &mut Rng, t: f32| (t + rng.range(-0.004, 0.004)).max(0.0);

    if let Some(&lead) = style.voices.first() {
        let (gain, send) = voice_mix(lead, true);
        for note in &plan.melody {
            let n = Note {
                start: humanize(&mut rng, note.start),
                ..*note
            };
            let sig = play(lead, &n, true, &mut rng);
            mix.add(n.start, &sig, gain, send);
        }
    }

    // Accompaniment styles are chosen once per song so the texture is coherent.
    let arpeggiate = style.calm || (style.energy < 0.65 && rng.chance(0.5));
    let bar = plan.bar_seconds;
    let eighth = bar / 8.0;
    for &voice in &style.voices {
        let (gain, send) = voice_mix(voice, false);
        let mut held: Option<i32> = None;
        for (i, b) in plan.bars.iter().enumerate() {
            let t0 = i as f32 * bar;
            let triad = style.triad(b.degree);
            let mut notes: Vec<Note> = Vec::new();
            let mut push = |start: f32, gate: f32, midi: i32, vel: f32| {
                notes.push(Note {
                    start,
                    gate,
                    midi: midi as f32,
                    vel,
                })
            };
            match voice {
                Voice::Piano => {
                    let low = style.place(triad[0], 40);
                    let chord = triad.map(|pc| style.place(pc, 55));
                    if arpeggiate {
                        let seq = [low, chord[0], chord[1], chord[2], chord[0] + 12];
                        for (k, idx) in [0usize, 1, 2, 3, 4, 3, 2, 1].into_iter().enumerate() {
                            let vel = if k == 0 { 0.7 } else { 0.5 };
                            push(t0 + k as f32 * eighth, 3.0 * eighth, seq[idx], vel);
                        }
                    } else if style.energy >= 0.65 {
                        push(t0, bar * 0.9, low, 0.7);
                        for (at, len) in [(0, 3), (3, 1), (4, 3), (7, 1)] {
                            for m in chord {
                                let vel = if at % 4 == 0 { 0.6 } else { 0.45 };
                                push(t0 + at as f32 * eighth, len as f32 * eighth, m, vel);
                            }
                        }
                    } else {
                        push(t0, bar * 0.95, low, 0.65);
                        for at in [0, 4] {
                            for m in chord {
                                push(t0 + at as f32 * eighth, 4.0 * eighth, m, 0.5);
                            }
                        }
                    }
                }
                Voice::Guitar => {
                    let r = style.place(triad[0], 40);
                    let third = (triad[1] - triad[0]).rem_euclid(12);
                    let fifth = (triad[2] - triad[0]).rem_euclid(12);
                    let mut shape = vec![r, r + fifth, r + 12, r + 12 + third, r + 12 + fifth];
                    let rock = style.drums == Some(Groove::Rock);
                    if rock {
                        shape.truncate(3); // power chord, chugged
                    }
                    let strums: &[(u32, bool)] = if rock {
                        &[
                            (0, true),
                            (1, true),
                            (2, true),
                            (3, true),
                            (4, true),
                            (5, true),
                            (6, true),
                            (7, true),
                        ]
                    } else if arpeggiate {
                        &[(0, true), (3, false), (4, true), (6, false)]
                    } else {
                        &[
                            (0, true),
                            (2, true),
                            (3, false),
                            (5, false),
                            (6, true),
                            (7, false),
                        ]
                    };
                    for (k, &(at, down)) in strums.iter().enumerate() {
                        let next = strums.get(k + 1).map_or(8, |s| s.0);
                        let gate = if rock { 0.8 } else { (next - at) as f32 } * eighth;
                        let spread = if arpeggiate { 0.03 } else { 0.012 };
                        for (j, &m) in shape.iter().enumerate() {
                            let order = if down { j } else { shape.len() - 1 - j };
                            let vel = if down { 0.75 } else { 0.55 }
                                * if at % 4 == 0 { 1.0 } else { 0.85 };
                            push(
                                t0 + at as f32 * eighth + order as f32 * spread,
                                gate,
                                m,
                                vel,
                            );
                        }
                    }
                }
                Voice::Synth => {
                    let chord = triad.map(|pc| style.place(pc, 57));
                    let seq = [chord[0], chord[1], chord[2], chord[0] + 12];
                    let steps = if style.drums == Some(Groove::Dance) {
                        16
                    } else {
                        8
                    };
                    let step = bar / steps as f32;
                    for k in 0..steps {
                        let idx = [0, 1, 2, 3, 2, 1][k % 6];
                        let vel = if k % 4 == 0 { 0.8 } else { 0.6 };
                        push(t0 + k as f32 * step, step * 0.7, seq[idx], vel);
                    }
                }
                Voice::Strings | Voice::Pad => {
                    // Sustained chords, tied over bars that repeat the chord.
                    if held == Some(b.degree) {
                        continue;
                    }
                    held = Some(b.degree);
                    let tied = plan.bars[i + 1..]
                        .iter()
                        .take_while(|n| n.degree == b.degree)
                        .count();
                    let gate = bar * (tied + 1) as f32;
                    let lo = if voice == Voice::Pad { 52 } else { 55 };
                    let mut chord: Vec<i32> = triad.iter().map(|&pc| style.place(pc, lo)).collect();
                    chord.push(style.place(triad[0], lo - 12));
                    for m in chord {
                        push(t0, gate, m, 0.6);
                    }
                }
            }
            for n in &mut notes {
                n.start = humanize(&mut rng, n.start);
                let sig = play(voice, n, false, &mut rng);
                mix.add(n.start, &sig, gain, send);
            }
        }
    }

    if style.bass {
        render_bass(plan, &mut mix, &mut rng);
    }
    if let Some(groove) = style.drums {
        render_drums(plan, groove, &mut mix, &mut Rng::stream(seed, 4));
    }

    let Mix { mut dry, send } = mix;
    let wet = reverb(&send);
    for (d, w) in dry.iter_mut().zip(&wet) {
        *d += w;
    }
    dry
}

fn render_bass(plan: &Plan<'_>, mix: &mut Mix, rng: &mut Rng) {
    let style = plan.style;
    let bar = plan.bar_seconds;
    let eighth = bar / 8.0;
    let synthetic = style.voices.first() == Some(&Voice::Synth);
    for (i, b) in plan.bars.iter().enumerate() {
        let t0 = i as f32 * bar;
        let triad = style.triad(b.degree);
        let root = style.place(triad[0], 33);
        let fifth = root + (triad[2] - triad[0]).rem_euclid(12);
        let next_root = plan
            .bars
            .get(i + 1)
            .map_or(root, |n| style.place(style.triad(n.degree)[0], 33));
        // (eighth, length in eighths, note, velocity)
        let pattern: Vec<(u32, u32, i32, f32)> = match style.drums {
            Some(Groove::Rock) => (0..8)
                .map(|k| (k, 1, root, if k % 2 == 0 { 0.9 } else { 0.7 }))
                .collect(),
            Some(Groove::Dance) => (0..4)
                .map(|k| (2 * k + 1, 1, root + 12 * (k as i32 % 2), 0.85))
                .collect(),
            _ if style.calm => vec![(0, 6, root, 0.8), (6, 2, fifth, 0.6)],
            _ => {
                let approach = if next_root > root {
                    next_root - 1
                } else {
                    next_root + 1
                };
                let last = if rng.chance(0.5) { approach } else { fifth };
                vec![
                    (0, 3, root, 0.9),
                    (3, 1, root, 0.6),
                    (4, 2, fifth, 0.8),
                    (6, 2, last, 0.7),
                ]
            }
        };
        for (at, len, midi, vel) in pattern {
            let start = (t0 + at as f32 * eighth + rng.range(-0.003, 0.003)).max(0.0);
            let f = midi_hz(midi as f32);
            let gate = len as f32 * eighth * 0.92;
            let (sig, gain) = if synthetic {
                (synth_bass(f, gate, vel), 1.0)
            } else {
                (bass(f, gate, vel), 0.4)
            };
            mix.add(start, &sig, gain, 0.0);
        }
    }
}

fn render_drums(plan: &Plan<'_>, groove: Groove, mix: &mut Mix, rng: &mut Rng) {
    // 16 sixteenth-note steps per bar.
    let (kicks, snares, hats, open): (&[u32], &[u32], &[u32], &[u32]) = match groove {
        Groove::Rock => (&[0, 6, 8, 10], &[4, 12], &[0, 2, 4, 6, 8, 10, 12, 14], &[]),
        Groove::Dance => (
            &[0, 4, 8, 12],
            &[4, 12],
            &[0, 1, 3, 4, 5, 7, 8, 9, 11, 12, 13, 15],
            &[2, 6, 10, 14],
        ),
        Groove::Soft => (&[0, 7, 10], &[8], &[0, 4, 8, 12], &[]),
        Groove::Pop => (&[0, 7, 8], &[4, 12], &[0, 2, 4, 6, 8, 10, 12, 14], &[]),
    };
    let extra_kick = [3u32, 11, 14][rng.below(3)];
    let sixteenth = plan.bar_seconds / 16.0;
    let soft = if groove == Groove::Soft { 0.6 } else { 1.0 };
    for (i, b) in plan.bars.iter().enumerate() {
        let t0 = i as f32 * plan.bar_seconds;
        let at = |step: u32, rng: &mut Rng| {
            (t0 + step as f32 * sixteenth + rng.range(-0.002, 0.002)).max(0.0)
        };
        let vary = |rng: &mut Rng| rng.range(0.88, 1.0);
        let mut kick_steps = kicks.to_vec();
        if b.in_phrase % 2 == 1 && groove != Groove::Dance {
            kick_steps.push(extra_kick);
        }
        for &s in &kick_steps {
            let t = at(s, rng);
            mix.add(t, &kick(vary(rng)), 0.75, 0.0);
        }
        if !b.intro {
            let mut snare_steps: Vec<(u32, f32)> = snares.iter().map(|&s| (s, 1.0)).collect();
            if b.fill {
                snare_steps.retain(|&(s, _)| s < 12);
                snare_steps.extend([(12, 0.6), (13, 0.7), (14, 0.8), (15, 0.95)]);
            }
            for (s, v) in snare_steps {
                let t = at(s, rng);
                let sig = snare(v * vary(rng), rng);
                mix.add(t, &sig, 0.45 * soft, 0.12);
            }
        }
        for &s in hats {
            let t = at(s, rng);
            let accent = if s % 4 == 0 { 1.0 } else { 0.7 };
            let sig = hat(accent * vary(rng), 0.02, rng);
            mix.add(t, &sig, 0.16 * soft, 0.05);
        }
        for &s in open {
            let t = at(s, rng);
            let sig = hat(vary(rng), 0.12, rng);
            mix.add(t, &sig, 0.12, 0.05);
        }
        if b.crash {
            let sig = hat(1.0, 0.7, rng);
            mix.add(t0, &sig, 0.16 * soft, 0.2);
        }
    }
}

// ---------------------------------------------------------------------------
// Instruments

const TAU64: f64 = std::f64::consts::TAU;

/// Adds exponentially decaying sine partials `(Hz, amplitude, decay time
/// constant in s)` to `out`. Oscillators are complex phasors rotated in f64:
/// one multiply-add per sample instead of a `sin` call, without drift.
fn add_partials(out: &mut [f32], partials: &[(f32, f32, f32)]) {
    let sr = f64::from(SR);
    for &(f, a, tau) in partials {
        if f <= 0.0 || f >= 0.45 * SR {
            continue;
        }
        let (sw, cw) = (TAU64 * f64::from(f) / sr).sin_cos();
        let decay = (-1.0 / (f64::from(tau) * sr)).exp();
        let (mut s, mut c, mut amp) = (0.0f64, 1.0f64, f64::from(a));
        for o in out.iter_mut() {
            *o += (amp * s) as f32;
            let ns = s * cw + c * sw;
            c = c * cw - s * sw;
            s = ns;
            amp *= decay;
            if amp < 1e-5 {
                break;
            }
        }
    }
}

/// Attack ramp (smooth when `smooth`) and a release that starts at `hold`
/// seconds and reaches silence `release` seconds later.
fn envelope(out: &mut [f32], attack: f32, hold: f32, release: f32, smooth: bool) {
    let attack_n = ((attack * SR) as usize).min(out.len());
    for (i, o) in out[..attack_n].iter_mut().enumerate() {
        let x = i as f32 / attack_n as f32;
        *o *= if smooth { x * x * (3.0 - 2.0 * x) } else { x };
    }
    let hold_n = ((hold * SR) as usize).min(out.len());
    let release_n = (release * SR).max(1.0);
    for (i, o) in out[hold_n..].iter_mut().enumerate() {
        let x = (1.0 - i as f32 / release_n).max(0.0);
        *o *= x * x;
    }
}

fn buffer(seconds: f32) -> Vec<f32> {
    vec![0.0; (seconds.max(0.0) * SR) as usize + 1]
}

/// Piano: inharmonic partials that decay faster the higher they are, a
/// slightly detuned second string on the lowest two (the beating of real
/// unisons), a 3 ms hammer attack and a damper release.
fn piano(freq: f32, gate: f32, vel: f32) -> Vec<f32> {
    let tau1 = (3.0 * (261.6 / freq).powf(0.7)).clamp(0.3, 6.0);
    let hold = gate.min(tau1 * 3.0);
    let release = 0.15;
    let mut out = buffer(hold + release);
    let bright = 0.35 + 0.45 * vel;
    let mut parts = Vec::with_capacity(12);
    let mut level = vel;
    for k in 1..=8 {
        let kf = k as f32;
        let f = freq * kf * (1.0 + 0.0004 * kf * kf).sqrt();
        let tau = tau1 / (1.0 + 0.8 * (kf - 1.0));
        parts.push((f, level / kf, tau));
        if k <= 2 {
            parts.push((f * 1.0009, level / kf * 0.5, tau * 0.8));
        }
        level *= bright;
    }
    add_partials(&mut out, &parts);
    envelope(&mut out, 0.003, hold, release, false);
    out
}

/// Guitar: Karplus–Strong. A burst of filtered noise circulates in a delay
/// line of one period through a two-point average (which damps highs over
/// time) and a first-order all-pass that supplies the fractional delay, so
/// the string is in tune. Lifting the finger damps it over 80 ms.
fn pluck(freq: f32, gate: f32, vel: f32, rng: &mut Rng) -> Vec<f32> {
    let hold = gate.min(4.0);
    let mut out = buffer(hold + 0.08);
    let period = SR / freq;
    let mut n = (period - 0.5).floor() as usize;
    let mut frac = period - 0.5 - n as f32;
    if frac < 0.1 && n > 2 {
        n -= 1;
        frac += 1.0;
    }
    let n = n.max(2);
    let coef = (1.0 - frac) / (1.0 + frac);
    // Excitation: noise softened by a one-pole low-pass (harder pick = brighter).
    let tone = 0.25 + 0.6 * vel;
    let mut lp = 0.0;
    let mut line: Vec<f32> = (0..n)
        .map(|_| {
            lp += tone * (rng.noise() - lp);
            lp
        })
        .collect();
    let mean = line.iter().sum::<f32>() / n as f32;
    line.iter_mut().for_each(|x| *x = (*x - mean) * vel);
    let t60 = (2.5 * (196.0 / freq).powf(0.4)).clamp(0.6, 5.0);
    let rho = 10f32.powf(-3.0 / (t60 * freq));
    let (mut pos, mut older, mut ap_x, mut ap_y) = (0usize, 0.0f32, 0.0f32, 0.0f32);
    for o in out.iter_mut() {
        let oldest = line[pos];
        let avg = 0.5 * (oldest + older);
        older = oldest;
        let ap = coef * avg + ap_x - coef * ap_y;
        ap_x = avg;
        ap_y = ap;
        let y = rho * ap;
        line[pos] = y;
        pos = if pos + 1 == n { 0 } else { pos + 1 };
        *o = oldest;
    }
    envelope(&mut out, 0.0005, hold, 0.08, false);
    out
}

/// Band-limited sawtooth step (PolyBLEP): phase in [0, 1), `dt` = f / SR.
fn saw(phase: f32, dt: f32) -> f32 {
    let blep = if phase < dt {
        let t = phase / dt;
        t + t - t * t - 1.0
    } else if phase > 1.0 - dt {
        let t = (phase - 1.0) / dt;
        t * t + t + t + 1.0
    } else {
        0.0
    };
    2.0 * phase - 1.0 - blep
}

/// Zavalishin's trapezoidal state-variable low-pass: stable under fast
/// cutoff changes, which the synth's filter envelope needs.
#[derive(Default)]
struct LowPass {
    ic1: f32,
    ic2: f32,
    a1: f32,
    a2: f32,
    a3: f32,
}

impl LowPass {
    fn set(&mut self, cutoff: f32, resonance: f32) {
        let g = (std::f32::consts::PI * cutoff.clamp(20.0, 0.45 * SR) / SR).tan();
        let k = 2.0 - 2.0 * resonance.clamp(0.0, 0.95);
        self.a1 = 1.0 / (1.0 + g * (g + k));
        self.a2 = g * self.a1;
        self.a3 = g * self.a2;
    }

    fn process(&mut self, x: f32) -> f32 {
        let v3 = x - self.ic2;
        let v1 = self.a1 * self.ic1 + self.a2 * v3;
        let v2 = self.ic2 + self.a2 * self.ic1 + self.a3 * v3;
        self.ic1 = 2.0 * v1 - self.ic1;
        self.ic2 = 2.0 * v2 - self.ic2;
        v2
    }
}

/// Synth: two saws detuned by ±6 cents through a resonant low-pass whose
/// cutoff falls after the attack (the classic "pluck" of analog leads).
fn synth(freq: f32, gate: f32, vel: f32, bright: f32) -> Vec<f32> {
    let release = 0.12;
    let mut out = buffer(gate + release);
    let detune = [0.9965f32, 1.0035];
    let mut phase = [0.0f32, 0.37];
    let mut filter = LowPass::default();
    for (i, o) in out.iter_mut().enumerate() {
        let t = i as f32 / SR;
        if i % 16 == 0 {
            let sweep = (1500.0 + 3500.0 * bright * vel) * (-t / 0.18).exp();
            filter.set(freq * 1.5 + 300.0 + sweep, 0.3);
        }
        let mut x = 0.0;
        for (p, d) in phase.iter_mut().zip(detune) {
            let dt = freq * d / SR;
            x += saw(*p, dt);
            *p += dt;
            if *p >= 1.0 {
                *p -= 1.0;
            }
        }
        let decay = 0.6 + 0.4 * (-t / 0.25).exp();
        *o = filter.process(x * 0.5) * decay * vel;
    }
    envelope(&mut out, 0.005, gate, release, false);
    out
}

/// String section: three detuned saws (an ensemble, not one player) with
/// delayed vibrato, darkened by a low-pass, swelling in over 350 ms.
fn strings(freq: f32, gate: f32, rng: &mut Rng) -> Vec<f32> {
    let release = 0.5;
    let mut out = buffer(gate + release);
    let detune = [0.9954f32, 1.0, 1.004];
    let mut phase = [rng.unit(), rng.unit(), rng.unit()];
    let mut filter = LowPass::default();
    filter.set((freq * 6.0).min(4000.0), 0.1);
    let (sw, cw) = (TAU64 * 5.3 / f64::from(SR)).sin_cos();
    let (mut ls, mut lc) = (0.0f64, 1.0f64);
    for (i, o) in out.iter_mut().enumerate() {
        let t = i as f32 / SR;
        let vibrato = 1.0 + 0.003 * ls as f32 * (t / 0.6).min(1.0);
        let ns = ls * cw + lc * sw;
        lc = lc * cw - ls * sw;
        ls = ns;
        let mut x = 0.0;
        for (p, d) in phase.iter_mut().zip(detune) {
            let dt = freq * d * vibrato / SR;
            x += saw(*p, dt);
            *p += dt;
            if *p >= 1.0 {
                *p -= 1.0;
            }
        }
        *o = filter.process(x / 3.0);
    }
    envelope(
        &mut out,
        (gate * 0.7).clamp(0.03, 0.35),
        gate,
        release,
        true,
    );
    out
}

/// Pad: a cluster of slightly detuned sines plus soft overtones; the beating
/// between them gives slow motion. `attack_scale` shortens the swell for a lead.
fn pad(freq: f32, gate: f32, attack_scale: f32) -> Vec<f32> {
    let release = 1.2 * attack_scale.max(0.25);
    let mut out = buffer(gate + release);
    let forever = f32::INFINITY;
    add_partials(
        &mut out,
        &[
            (freq, 0.45, forever),
            (freq * 1.0035, 0.3, forever),
            (freq * 0.9965, 0.3, forever),
            (freq * 2.0, 0.12, forever),
            (freq * 3.0, 0.04, forever),
        ],
    );
    let attack = (1.2 * attack_scale).min(gate * 0.6).max(0.02);
    envelope(&mut out, attack, gate, release, true);
    out
}

/// Bass: a plucked, round tone (fundamental-heavy partials, fast decay of
/// the upper ones).
fn bass(freq: f32, gate: f32, vel: f32) -> Vec<f32> {
    let mut out = buffer(gate + 0.06);
    add_partials(
        &mut out,
        &[
            (freq, vel, 1.5),
            (freq * 2.0, 0.5 * vel, 0.6),
            (freq * 3.0, 0.25 * vel, 0.3),
            (freq * 4.0, 0.1 * vel, 0.18),
            (freq * 5.0, 0.05 * vel, 0.1),
        ],
    );
    envelope(&mut out, 0.004, gate, 0.06, false);
    out
}

/// Synth bass: a saw with a snappy filter envelope over a sine sub.
fn synth_bass(freq: f32, gate: f32, vel: f32) -> Vec<f32> {
    let mut out = buffer(gate + 0.05);
    let mut filter = LowPass::default();
    let (mut phase, dt) = (0.0f32, freq / SR);
    let (sw, cw) = (TAU64 * f64::from(freq) / f64::from(SR)).sin_cos();
    let (mut s, mut c) = (0.0f64, 1.0f64);
    for (i, o) in out.iter_mut().enumerate() {
        if i % 16 == 0 {
            let t = i as f32 / SR;
            filter.set(150.0 + 1400.0 * (-t / 0.07).exp(), 0.35);
        }
        let x = filter.process(saw(phase, dt));
        phase += dt;
        if phase >= 1.0 {
            phase -= 1.0;
        }
        *o = vel * (0.6 * x + 0.5 * s as f32);
        let ns = s * cw + c * sw;
        c = c * cw - s * sw;
        s = ns;
    }
    envelope(&mut out, 0.003, gate, 0.05, false);
    out
}

/// Kick: a sine whose pitch sweeps from ~170 Hz down to 48 Hz.
fn kick(vel: f32) -> Vec<f32> {
    let mut out = buffer(0.45);
    let mut phase = 0.0f32;
    for (i, o) in out.iter_mut().enumerate() {
        let t = i as f32 / SR;
        let f = 48.0 + 120.0 * (-t / 0.03).exp();
        phase = (phase + f / SR).fract();
        *o = vel * (std::f32::consts::TAU * phase).sin() * (-t / 0.28).exp();
    }
    envelope(&mut out, 0.001, 0.4, 0.05, false);
    out
}

/// Snare: high-passed noise (the wires) over a short two-mode drum tone.
fn snare(vel: f32, rng: &mut Rng) -> Vec<f32> {
    let mut out = buffer(0.28);
    let mut lp = 0.0f32;
    let (sw1, cw1) = (TAU64 * 190.0 / f64::from(SR)).sin_cos();
    let (sw2, cw2) = (TAU64 * 330.0 / f64::from(SR)).sin_cos();
    let (mut s1, mut c1, mut s2, mut c2) = (0.0f64, 1.0f64, 0.0f64, 1.0f64);
    for (i, o) in out.iter_mut().enumerate() {
        let t = i as f32 / SR;
        let n = rng.noise();
        lp += 0.25 * (n - lp);
        let wires = (n - lp) * (-t / 0.075).exp();
        let body = 0.6 * s1 as f32 * (-t / 0.05).exp() + 0.3 * s2 as f32 * (-t / 0.03).exp();
        *o = vel * (0.7 * wires + body);
        let ns = s1 * cw1 + c1 * sw1;
        c1 = c1 * cw1 - s1 * sw1;
        s1 = ns;
        let ns = s2 * cw2 + c2 * sw2;
        c2 = c2 * cw2 - s2 * sw2;
        s2 = ns;
    }
    envelope(&mut out, 0.001, 0.25, 0.03, false);
    out
}

/// Hi-hat / cymbal: noise high-passed twice (only the sizzle above ~6 kHz
/// remains) with an exponential decay of `decay` seconds.
fn hat(vel: f32, decay: f32, rng: &mut Rng) -> Vec<f32> {
    let mut out = buffer(decay * 5.0);
    let (mut lp1, mut lp2) = (0.0f32, 0.0f32);
    for (i, o) in out.iter_mut().enumerate() {
        let t = i as f32 / SR;
        let n = rng.noise();
        lp1 += 0.57 * (n - lp1);
        let h1 = n - lp1;
        lp2 += 0.57 * (h1 - lp2);
        *o = vel * (h1 - lp2) * (-t / decay).exp();
    }
    out
}

// ---------------------------------------------------------------------------
// Effects and mastering

/// A compact Freeverb-style room: four damped parallel combs into two
/// series all-passes, with 15 ms of pre-delay.
fn reverb(input: &[f32]) -> Vec<f32> {
    const COMBS: [usize; 4] = [1116, 1188, 1277, 1356];
    const ALLPASSES: [usize; 2] = [556, 441];
    let predelay = (0.015 * SR) as usize;
    let mut combs: Vec<(Vec<f32>, usize, f32)> =
        COMBS.iter().map(|&n| (vec![0.0; n], 0, 0.0)).collect();
    let mut allpasses: Vec<(Vec<f32>, usize)> =
        ALLPASSES.iter().map(|&n| (vec![0.0; n], 0)).collect();
    let (feedback, damp) = (0.8f32, 0.3f32);
    let mut out = vec![0.0; input.len()];
    for (i, o) in out.iter_mut().enumerate() {
        let x = if i >= predelay {
            input[i - predelay] * 0.12
        } else {
            0.0
        };
        let mut y = 0.0;
        for (buf, pos, store) in &mut combs {
            let v = buf[*pos];
            *store = v * (1.0 - damp) + *store * damp;
            buf[*pos] = x + *store * feedback;
            *pos = if *pos + 1 == buf.len() { 0 } else { *pos + 1 };
            y += v;
        }
        for (buf, pos) in &mut allpasses {
            let v = buf[*pos];
            buf[*pos] = y + v * 0.5;
            *pos = if *pos + 1 == buf.len() { 0 } else { *pos + 1 };
            y = v - y;
        }
        *o = y;
    }
    out
}

fn peak(samples: &[f32]) -> f32 {
    samples.iter().fold(0.0f32, |m, s| m.max(s.abs()))
}

fn rms(samples: &[f32]) -> f32 {
    if samples.is_empty() {
        return 0.0;
    }
    (samples
        .iter()
        .map(|s| f64::from(*s) * f64::from(*s))
        .sum::<f64>()
        / samples.len() as f64)
        .sqrt() as f32
}

/// `source` repeated (with 10 ms crossfades at the seams) or cut to `n` samples.
fn loop_to(source: &[f32], n: usize) -> Vec<f32> {
    let clean = |s: f32| {
        if s.is_finite() {
            s.clamp(-1.0, 1.0)
        } else {
            0.0
        }
    };
    let len = source.len();
    if len >= n {
        return source[..n].iter().map(|&s| clean(s)).collect();
    }
    let xf = (0.01 * SR) as usize;
    let xf = xf.min(len / 4);
    let step = len - xf;
    let mut out = vec![0.0; n];
    let mut offset = 0;
    while offset < n {
        for (i, &s) in source.iter().enumerate() {
            let Some(o) = out.get_mut(offset + i) else {
                break;
            };
            let mut w = 1.0;
            if offset > 0 && i < xf {
                w = i as f32 / xf as f32;
            }
            if xf > 0 && i >= len - xf {
                w *= (len - i) as f32 / xf as f32;
            }
            *o += w * clean(s);
        }
        offset += step;
    }
    out
}

/// audio_to_audio: the looped source, gently low-passed, sits on top while
/// the accompaniment (in the prompt's key and tempo) is ducked under it, at
/// a fixed level ratio so both are audible and the source leads.
fn blend_source(acc: &mut [f32], source: &[f32]) {
    let mut src = loop_to(source, acc.len());
    let (src_rms, acc_rms) = (rms(&src), rms(acc));
    if src_rms < 1e-6 {
        return;
    }
    let gain = 1.4 * acc_rms.max(0.05) / src_rms;
    let mut filter = LowPass::default();
    filter.set(6000.0, 0.0);
    let (mut env, attack, release) = (
        0.0f32,
        1.0 - (-1.0 / (0.01 * SR)).exp(),
        1.0 - (-1.0 / (0.25 * SR)).exp(),
    );
    let env_scale = 1.0 / (src_rms * gain * std::f32::consts::SQRT_2);
    for (a, s) in acc.iter_mut().zip(src.iter_mut()) {
        let x = filter.process(*s * gain);
        let level = (x.abs() * env_scale).min(1.0);
        env += (level - env) * if level > env { attack } else { release };
        *a = x + *a * (1.0 - 0.4 * env);
        *s = x;
    }
}

/// DC removal, gentle saturation, 50 ms fades and normalisation to a 0.9 peak.
fn master(out: &mut [f32]) {
    let coef = 1.0 - std::f32::consts::TAU * 20.0 / SR;
    let (mut x1, mut y1) = (0.0f32, 0.0f32);
    for s in out.iter_mut() {
        let y = *s - x1 + coef * y1;
        x1 = *s;
        y1 = y;
        *s = y;
    }
    let p = peak(out);
    if p < 1e-9 {
        return;
    }
    let drive = 1.5f32;
    let norm = 1.0 / drive.tanh();
    for s in out.iter_mut() {
        *s = (*s / p * drive).tanh() * norm;
    }
    let fade = ((FADE_SECONDS * SR) as usize).min(out.len() / 2);
    let len = out.len();
    for i in 0..fade {
        let w = i as f32 / fade as f32;
        out[i] *= w;
        out[len - 1 - i] *= w;
    }
    let p = peak(out);
    if p > 1e-9 {
        let g = TARGET_PEAK / p;
        for s in out.iter_mut() {
            *s = (*s * g).clamp(-TARGET_PEAK, TARGET_PEAK);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(prompt: &str, seed: u64, seconds: f64) -> MusicSpec<'_> {
        MusicSpec {
            prompt,
            negative_prompt: None,
            seed,
            duration_seconds: seconds,
            format: AudioFormat::Wav,
            source: None,
        }
    }

    /// Share of energy in high frequencies (first difference vs signal).
    fn brightness(x: &[f32]) -> f32 {
        let diff: Vec<f32> = x.windows(3).map(|w| w[2] - 2.0 * w[1] + w[0]).collect();
        rms(&diff) / rms(x)
    }

    /// Pearson correlation of two equally long signals.
    fn correlation(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len()) as f32;
        let (ma, mb) = (a.iter().sum::<f32>() / n, b.iter().sum::<f32>() / n);
        let (mut ab, mut aa, mut bb) = (0.0f32, 0.0f32, 0.0f32);
        for (x, y) in a.iter().zip(b) {
            ab += (x - ma) * (y - mb);
            aa += (x - ma) * (x - ma);
            bb += (y - mb) * (y - mb);
        }
        ab / (aa * bb).sqrt()
    }

    fn sine(freq: f32, seconds: f32) -> Vec<f32> {
        (0..(seconds * SR) as usize)
            .map(|i| 0.5 * (std::f32::consts::TAU * freq * i as f32 / SR).sin())
            .collect()
    }

    #[test]
    fn exact_sample_counts_and_levels() {
        for (seconds, expected) in [(1.0, 44_100), (7.5, 330_750), (0.0, 0), (-3.0, 0)] {
            let pcm = compose(&spec("upbeat pop with piano and drums", 7, seconds));
            assert_eq!(pcm.len(), expected, "{seconds} s");
            if expected == 0 {
                continue;
            }
            let p = peak(&pcm);
            assert!(p <= 1.0 && (p - TARGET_PEAK).abs() < 0.01, "peak {p}");
            assert!(rms(&pcm) > 0.08, "rms {}", rms(&pcm));
            // Fades: the very first and last samples are (near) silent.
            assert!(pcm[0].abs() < 1e-3 && pcm[expected - 1].abs() < 0.02);
        }
        assert!(compose(&spec("piano", 1, f64::NAN)).is_empty());
    }

    #[test]
    fn deterministic_and_seed_sensitive() {
        let a = compose(&spec("happy guitar song", 11, 2.0));
        let b = compose(&spec("happy guitar song", 11, 2.0));
        let c = compose(&spec("happy guitar song", 12, 2.0));
        assert_eq!(a, b);
        assert!(correlation(&a, &c) < 0.9, "seeds 11 and 12 sound alike");
    }

    #[test]
    fn instruments_follow_the_prompt_and_negative_prompt() {
        let piano = compose(&spec("piano", 3, 2.0));
        let drums = compose(&spec("drums", 3, 2.0));
        assert_ne!(piano, drums);
        // Drums add noisy transients: far more high-frequency energy.
        assert!(brightness(&drums) > 2.0 * brightness(&piano));

        let pop = spec("upbeat piano song with drums", 5, 2.0);
        let with = compose(&pop);
        let without = compose(&MusicSpec {
            negative_prompt: Some("drums"),
            ..pop
        });
        assert!(brightness(&with) > 2.0 * brightness(&without));

        let style = Style::from_prompt("piano and strings, no bass", None, 0);
        assert_eq!(style.voices, vec![Voice::Piano, Voice::Strings]);
        assert!(!style.bass && style.drums.is_none());
        let style = Style::from_prompt("piano and strings", Some("piano, melody"), 0);
        assert_eq!(style.voices, vec![Voice::Strings]);
        assert!(!style.melody && style.bass);
        // Everything excluded still leaves something audible.
        let style = Style::from_prompt(
            "music",
            Some("piano guitar synth strings pad bass drums"),
            0,
        );
        assert_eq!(style.voices, vec![Voice::Pad]);
    }

    #[test]
    fn mood_key_and_tempo() {
        let sad = Style::from_prompt("sad piano", None, 9);
        let happy = Style::from_prompt("happy piano", None, 9);
        assert!(sad.minor && !happy.minor);
        assert!(sad.bpm + 20.0 < happy.bpm, "{} vs {}", sad.bpm, happy.bpm);
        let keyed = Style::from_prompt("dark waltz in F# major at 140 bpm", None, 9);
        assert_eq!((keyed.root, keyed.minor, keyed.bpm), (6, false, 140.0));
        let keyed = Style::from_prompt("e flat minor, 90bpm", None, 9);
        assert_eq!((keyed.root, keyed.minor, keyed.bpm), (3, true, 90.0));
        let dance = Style::from_prompt("edm dance track", None, 9);
        assert_eq!(dance.drums, Some(Groove::Dance));
        assert!((118.0..=150.0).contains(&dance.bpm));
    }

    #[test]
    fn melody_stays_in_key_and_moves() {
        for seed in 0..20 {
            let style = Style::from_prompt("piano melody", None, seed);
            let plan = Plan::new(&style, seed, 40 * SAMPLE_RATE as usize, true);
            let tonic = style.melody_tonic();
            assert!(plan.melody.len() > 20);
            let mut distinct = std::collections::BTreeSet::new();
            let mut big_leaps = 0;
            for (note, next) in plan.melody.iter().zip(plan.melody.iter().skip(1)) {
                let rel = (note.midi as i32 - tonic).rem_euclid(12);
                let in_scale = style.scale().contains(&rel) || (style.minor && rel == 11);
                assert!(in_scale, "seed {seed}: {rel} not in key");
                assert!((tonic..=tonic + 19).contains(&(note.midi as i32)));
                // Only phrase boundaries may leap further than an octave.
                big_leaps += usize::from((note.midi - next.midi).abs() > 12.0);
                distinct.insert(note.midi as i32);
            }
            assert!(
                big_leaps * 20 < plan.melody.len(),
                "seed {seed}: {big_leaps} leaps"
            );
            assert!(distinct.len() >= 5, "seed {seed}: melody uses {distinct:?}");
        }
    }

    #[test]
    fn rendered_pitch_content_is_in_key() {
        // Goertzel energy per pitch class over three octaves: a C major piece
        // must put most of it on the seven scale notes (5/12 of a uniform spread
        // would be off-key).
        let pcm = compose(&spec("calm piano in C major", 2, 3.0));
        let mut chroma = [0.0f64; 12];
        for midi in 48..84 {
            let w = std::f64::consts::TAU * f64::from(midi_hz(midi as f32)) / f64::from(SR);
            let (mut s1, mut s2) = (0.0f64, 0.0f64);
            for &x in &pcm {
                let s = f64::from(x) + 2.0 * w.cos() * s1 - s2;
                s2 = s1;
                s1 = s;
            }
            chroma[midi % 12] += s1 * s1 + s2 * s2 - 2.0 * w.cos() * s1 * s2;
        }
        let total: f64 = chroma.iter().sum();
        let in_key: f64 = MAJOR_SCALE.iter().map(|&pc| chroma[pc as usize]).sum();
        assert!(in_key / total > 0.85, "in-key share {}", in_key / total);
    }

    #[test]
    fn audio_to_audio_follows_the_source() {
        let source = sine(440.0, 0.5);
        let base = MusicSpec {
            source: Some(&source),
            ..spec("ambient pad with drums", 4, 1.3)
        };
        let out = compose(&base);
        assert_eq!(out.len(), 57_330);
        let window = 4_410..20_000; // after the fade-in, before the first loop seam
        assert!(correlation(&out[window.clone()], &source[window.clone()]) > 0.6);
        let unrelated = sine(311.0, 0.5);
        assert!(correlation(&out[window.clone()], &unrelated[window]).abs() < 0.2);
        // The accompaniment is audible: the result is not just the source.
        let alone = compose(&MusicSpec {
            prompt: "",
            negative_prompt: Some("piano guitar synth strings pad bass drums"),
            ..base
        });
        assert_ne!(out, alone);
        // Looping: the second half still carries the tone.
        let tail = &out[40_000..57_000];
        let reference = loop_to(&source, 57_330);
        assert!(correlation(tail, &reference[40_000..57_000]) > 0.6);
        assert!(peak(&out) <= 1.0);
    }

    #[test]
    fn loop_to_repeats_and_trims() {
        let src: Vec<f32> = (0..1_000).map(|i| (i as f32 * 0.01).sin()).collect();
        assert_eq!(loop_to(&src, 300), src[..300].to_vec());
        let looped = loop_to(&src, 2_500);
        assert_eq!(looped.len(), 2_500);
        assert_eq!(looped[..500], src[..500]);
        assert!(peak(&looped) <= 1.0 + 1e-6);
        assert_eq!(loop_to(&[f32::NAN, 2.0], 3), vec![0.0, 1.0, 0.0]);
    }

    #[tokio::test]
    async fn wav_round_trip() {
        let track = generate(&spec("guitar and bass", 8, 1.5)).await.unwrap();
        let reader = hound::WavReader::new(std::io::Cursor::new(&track.bytes)).unwrap();
        assert_eq!(reader.spec().sample_rate, SAMPLE_RATE);
        assert_eq!(reader.spec().channels, 1);
        assert_eq!(reader.duration(), 66_150);
        assert_eq!(track.duration_seconds, 1.5);
        assert_eq!(audio::probe_duration(&track.bytes).await.unwrap(), 1.5);
    }

    #[tokio::test]
    async fn mp3_duration_matches_request() {
        let track = generate(&MusicSpec {
            format: AudioFormat::Mp3,
            ..spec("edm synth with drums", 6, 2.5)
        })
        .await
        .unwrap();
        let b = &track.bytes;
        assert!(b.starts_with(b"ID3") || (b[0] == 0xFF && b[1] & 0xE0 == 0xE0));
        let probed = audio::probe_duration(b).await.unwrap();
        assert!((probed - 2.5).abs() < 0.125, "decoded {probed} s");
        assert!((track.duration_seconds - 2.5).abs() < 0.125);
    }

    #[tokio::test]
    async fn generate_rejects_impossible_requests() {
        for seconds in [
            0.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            MAX_DURATION_SECONDS + 1.0,
        ] {
            let err = generate(&spec("piano", 1, seconds)).await.unwrap_err();
            assert!(matches!(err, ProviderError::Permanent(_)), "{seconds}");
        }
        let empty: [f32; 0] = [];
        let err = generate(&MusicSpec {
            source: Some(&empty),
            ..spec("piano", 1, 1.0)
        })
        .await
        .unwrap_err();
        assert!(matches!(err, ProviderError::Permanent(_)));
    }
}
