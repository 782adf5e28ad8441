//! Procedural logo renderer behind the legacy `/ai-image/logo` endpoint.
//!
//! A logo here is a flat geometric emblem plus the brand name set in one of
//! the bundled DejaVu faces, centred on a plain light (or, for bold and tech
//! looks, dark) background. The brand name and an optional tagline come from
//! the prompt; the style picks the emblem family (badge, shield, leaf,
//! circuit, ...), the industry picks the palette and a small motif, and the
//! seed picks among layout and shape variants. Every choice comes from a
//! splitmix64 stream keyed by the spec, so one spec always yields the same
//! pixels.
//!
//! All shapes, glyphs included, are polygons rasterised with exact
//! signed-area coverage (the accumulation method of font-rs), so edges are
//! anti-aliased without supersampling and a 1024x1024 logo takes a few
//! milliseconds.

use std::f32::consts::{FRAC_PI_2, PI, TAU};

use ab_glyph::{Font, FontRef, GlyphId, OutlineCurve};
use image::RgbImage;

use unigen_core::fonts::CONDENSED_BOLD;

use unigen_core::fonts::MONO_BOLD;

use unigen_core::fonts::SANS_BOLD;

use unigen_core::fonts::SERIF_BOLD;

/// What to draw. Free-text fields are matched loosely (case-insensitive
/// keywords); unknown values fall back to sensible defaults.
#[derive(Debug, Clone)]
pub struct LogoSpec<'a> {
    /// E.g. "Acme Rockets, reusable launch vehicles": the brand name is the
    /// part before the first comma/colon/dash (or the first capitalised
    /// words); a short descriptive rest becomes the tagline.
    pub prompt: &'a str,
    /// minimal | modern | vintage | playful | corporate | tech | organic | geometric
    pub style: &'a str,
    /// technology | healthcare | finance | education | retail | food | travel | entertainment
    pub industry: &'a str,
    /// Free text such as "navy and gold" or "#0a7cff, white".
    pub color_scheme: Option<&'a str>,
    /// sans-serif | serif | script | display | monospace
    pub typography: Option<&'a str>,
    /// professional | friendly | bold | elegant | playful
    pub mood: Option<&'a str>,
    /// 1..=5: how many elements and details the emblem has.
    pub complexity: u8,
    /// "no text" gives an emblem-only logo; colour words steer the palette away.
    pub negative_prompt: Option<&'a str>,
    pub seed: u64,
    pub width: u32,
    pub height: u32,
}

/// RGB image of exactly width x height; deterministic for the same spec.
pub fn render(spec: &LogoSpec<'_>) -> image::RgbImage {
    let mut canvas = Canvas {
        img: RgbImage::new(spec.width, spec.height),
    };
    if spec.width == 0 || spec.height == 0 {
        return canvas.img;
    }
    let plan = Plan::build(spec);
    canvas.clear(plan.palette.bg);
    plan.paint(&mut canvas);
    canvas.img
}

// ---------------------------------------------------------------------------
// Randomness
// ---------------------------------------------------------------------------

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The splitmix64 finaliser: a strong, cheap 64-bit mixer.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// splitmix64 stream: tiny, fast and good enough for layout decisions.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    fn range(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit()
    }
    fn below(&mut self, n: u32) -> u32 {
        (self.next() % u64::from(n.max(1))) as u32
    }
    fn chance(&mut self, p: f32) -> bool {
        self.unit() < p
    }
}

// ---------------------------------------------------------------------------
// Colour
// ---------------------------------------------------------------------------

/// sRGB colour with channels in [0, 1].
type Col = [f32; 3];

fn hex(v: u32) -> Col {
    [
        ((v >> 16) & 255) as f32 / 255.0,
        ((v >> 8) & 255) as f32 / 255.0,
        (v & 255) as f32 / 255.0,
    ]
}

fn mix(a: Col, b: Col, t: f32) -> Col {
    [
        a[0] + (b[0] - a[0]) * t,
        a[1] + (b[1] - a[1]) * t,
        a[2] + (b[2] - a[2]) * t,
    ]
}

fn to_hsl(c: Col) -> (f32, f32, f32) {
    let max = c[0].max(c[1]).max(c[2]);
    let min = c[0].min(c[1]).min(c[2]);
    let l = (max + min) / 2.0;
    let d = max - min;
    if d < 1e-6 {
        return (0.0, 0.0, l);
    }
    let s = d / (1.0 - (2.0 * l - 1.0).abs()).max(1e-6);
    let h = if max == c[0] {
        ((c[1] - c[2]) / d).rem_euclid(6.0)
    } else if max == c[1] {
        (c[2] - c[0]) / d + 2.0
    } else {
        (c[0] - c[1]) / d + 4.0
    };
    (h * 60.0, s.min(1.0), l)
}

fn from_hsl(h: f32, s: f32, l: f32) -> Col {
    let s = s.clamp(0.0, 1.0);
    let l = l.clamp(0.0, 1.0);
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let hp = h.rem_euclid(360.0) / 60.0;
    let x = c * (1.0 - (hp.rem_euclid(2.0) - 1.0).abs());
    let (r, g, b) = match hp as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    [r + m, g + m, b + m]
}

/// Rebuilds a colour with its HSL components transformed.
fn hsl_map(c: Col, f: impl Fn(f32, f32, f32) -> (f32, f32, f32)) -> Col {
    let (h, s, l) = to_hsl(c);
    let (h, s, l) = f(h, s, l);
    from_hsl(h, s, l)
}

/// WCAG relative luminance.
fn luminance(c: Col) -> f32 {
    let lin = |v: f32| {
        if v <= 0.04045 {
            v / 12.92
        } else {
            ((v + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2])
}

fn contrast(a: Col, b: Col) -> f32 {
    let (la, lb) = (luminance(a), luminance(b));
    (la.max(lb) + 0.05) / (la.min(lb) + 0.05)
}

/// Moves `c` darker (on light backgrounds) or lighter (on dark ones) until it
/// reaches `ratio` contrast against `bg`, keeping its hue.
fn ensure_contrast(c: Col, bg: Col, ratio: f32) -> Col {
    let dark_bg = luminance(bg) < 0.3;
    let (h, s, mut l) = to_hsl(c);
    let mut out = c;
    for _ in 0..40 {
        if contrast(out, bg) >= ratio {
            break;
        }
        l = if dark_bg { l + 0.025 } else { l - 0.025 }.clamp(0.0, 1.0);
        out = from_hsl(h, s, l);
    }
    out
}

fn hue_distance(a: f32, b: f32) -> f32 {
    let d = (a - b).rem_euclid(360.0);
    d.min(360.0 - d)
}

/// Colour names understood in colour schemes and negative prompts, chosen
/// as pleasant logo-grade versions of each hue rather than the CSS extremes.
const COLOR_NAMES: &[(&str, u32)] = &[
    ("red", 0xD62828),
    ("crimson", 0xB91C3C),
    ("scarlet", 0xE0301E),
    ("maroon", 0x7B1E2B),
    ("burgundy", 0x7A1E3A),
    ("wine", 0x722F37),
    ("pink", 0xEC5F9A),
    ("rose", 0xE11D48),
    ("magenta", 0xC026D3),
    ("fuchsia", 0xD946EF),
    ("purple", 0x7E3AF2),
    ("violet", 0x8B5CF6),
    ("lavender", 0xA996E0),
    ("lilac", 0xB69ADB),
    ("indigo", 0x4338CA),
    ("navy", 0x1B2A4E),
    ("blue", 0x1F6FEB),
    ("royal", 0x2D4FD6),
    ("sky", 0x38BDF8),
    ("azure", 0x0EA5E9),
    ("cyan", 0x06B6D4),
    ("aqua", 0x22D3EE),
    ("turquoise", 0x14B8A6),
    ("teal", 0x0F766E),
    ("mint", 0x4FBF94),
    ("green", 0x2F9E44),
    ("emerald", 0x059669),
    ("lime", 0x84CC16),
    ("olive", 0x6B7A2A),
    ("forest", 0x1F5F3A),
    ("sage", 0x7E9C72),
    ("yellow", 0xF5C211),
    ("gold", 0xC9A227),
    ("golden", 0xC9A227),
    ("amber", 0xF59E0B),
    ("mustard", 0xD4A017),
    ("orange", 0xF76707),
    ("coral", 0xFF6B5B),
    ("peach", 0xFFA77A),
    ("salmon", 0xF47C6C),
    ("brown", 0x7C4A2D),
    ("chocolate", 0x5C3317),
    ("coffee", 0x6F4E37),
    ("tan", 0xC8A27A),
    ("beige", 0xE8DCC4),
    ("cream", 0xF6F0E1),
    ("ivory", 0xFAF8EF),
    ("white", 0xFFFFFF),
    ("black", 0x121212),
    ("charcoal", 0x2B2D33),
    ("gray", 0x6B7280),
    ("grey", 0x6B7280),
    ("silver", 0xA8B0BA),
    ("slate", 0x475569),
    ("copper", 0xB87333),
    ("bronze", 0xA97142),
];

/// Basic hue words that may follow a more specific name ("navy blue",
/// "forest green") without naming a second colour.
const BASIC_HUES: &[&str] = &[
    "red", "blue", "green", "pink", "yellow", "orange", "purple", "gray", "grey", "white",
];

fn lookup_color(word: &str) -> Option<Col> {
    COLOR_NAMES
        .iter()
        .find(|(n, _)| *n == word)
        .map(|&(_, v)| hex(v))
}

fn parse_hex(tok: &str) -> Option<Col> {
    let h = tok.strip_prefix('#')?;
    let h: String = h.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
    match h.len() {
        6 => u32::from_str_radix(&h, 16).ok().map(hex),
        3 => {
            let v = u32::from_str_radix(&h, 16).ok()?;
            let (r, g, b) = ((v >> 8) & 15, (v >> 4) & 15, v & 15);
            Some(hex((r * 17) << 16 | (g * 17) << 8 | (b * 17)))
        }
        _ => None,
    }
}

/// Colours named in free text, in order of appearance. Understands `#rgb` /
/// `#rrggbb`, the name table, compounds like "navy blue" and the modifiers
/// dark/deep, light/pale/pastel and bright/vivid.
fn parse_colors(text: &str) -> Vec<Col> {
    let lower = text.to_lowercase();
    let tokens: Vec<&str> = lower
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '#'))
        .filter(|t| !t.is_empty())
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let tok = tokens[i];
        if let Some(c) = parse_hex(tok) {
            out.push(c);
            i += 1;
            continue;
        }
        let modifier = match tok {
            "dark" | "deep" => Some(-0.14),
            "light" | "pale" | "pastel" | "soft" => Some(0.16),
            "bright" | "vivid" | "neon" => Some(0.0),
            _ => None,
        };
        let (word_idx, delta) = match modifier {
            Some(d) if i + 1 < tokens.len() && lookup_color(tokens[i + 1]).is_some() => (i + 1, d),
            _ => (i, f32::NAN),
        };
        if let Some(mut c) = lookup_color(tokens[word_idx]) {
            if !delta.is_nan() {
                let vivid = delta == 0.0;
                c = hsl_map(c, |h, s, l| {
                    if vivid {
                        (h, (s * 1.2).min(1.0), l)
                    } else {
                        (h, s, (l + delta).clamp(0.06, 0.94))
                    }
                });
            }
            out.push(c);
            i = word_idx + 1;
            // "navy blue": the basic hue only restates the specific name.
            if i < tokens.len() && BASIC_HUES.contains(&tokens[i]) && tokens[word_idx] != tokens[i]
            {
                i += 1;
            }
            continue;
        }
        i += 1;
    }
    out
}

/// The roles every emblem and wordmark draws from.
#[derive(Debug, Clone, Copy)]
struct Palette {
    bg: Col,
    primary: Col,
    secondary: Col,
    accent: Col,
    /// Brand-name colour: high contrast against `bg`.
    text: Col,
    /// Tagline colour: quieter than `text`.
    muted: Col,
    /// Monograms and motifs drawn on top of `primary`.
    on_primary: Col,
    dark: bool,
}

/// Whether any word of `text` starts with one of `keys` ("educat" matches
/// "education"); keys of up to three letters must match a whole word, so
/// "retail" does not count as "ai".
fn has_keyword(text: &str, keys: &[&str]) -> bool {
    let lower = text.to_lowercase();
    lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .any(|w| {
            keys.iter().any(|k| {
                if k.len() <= 3 {
                    w == *k
                } else {
                    w.starts_with(k)
                }
            })
        })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Industry {
    Technology,
    Healthcare,
    Finance,
    Education,
    Retail,
    Food,
    Travel,
    Entertainment,
    Other,
}

impl Industry {
    fn parse(s: &str) -> Self {
        let has = |keys: &[&str]| has_keyword(s, keys);
        if has(&[
            "tech", "software", "saas", "comput", "digital", "ai", "data", "it",
        ]) {
            Self::Technology
        } else if has(&[
            "health", "medic", "clinic", "pharma", "care", "dental", "wellness", "hospital",
        ]) {
            Self::Healthcare
        } else if has(&[
            "financ", "bank", "invest", "capital", "insur", "account", "fintech", "money",
        ]) {
            Self::Finance
        } else if has(&[
            "educat",
            "school",
            "learn",
            "academ",
            "universit",
            "tutor",
            "edtech",
        ]) {
            Self::Education
        } else if has(&[
            "retail",
            "shop",
            "store",
            "fashion",
            "ecommerce",
            "boutique",
            "apparel",
        ]) {
            Self::Retail
        } else if has(&[
            "food",
            "restaurant",
            "cafe",
            "coffee",
            "bakery",
            "drink",
            "kitchen",
            "beverage",
        ]) {
            Self::Food
        } else if has(&[
            "travel",
            "tour",
            "hotel",
            "airline",
            "trip",
            "hospitality",
            "aviation",
        ]) {
            Self::Travel
        } else if has(&[
            "entertain",
            "music",
            "game",
            "gaming",
            "film",
            "media",
            "movie",
            "event",
        ]) {
            Self::Entertainment
        } else {
            Self::Other
        }
    }

    /// Three primary/secondary/accent palettes per industry.
    fn palettes(self) -> &'static [[u32; 3]] {
        match self {
            Self::Technology => &[
                [0x2563EB, 0x06B6D4, 0x7C3AED],
                [0x0F62FE, 0x00B89F, 0x1B1F3B],
                [0x6D28D9, 0xEC4899, 0x22D3EE],
            ],
            Self::Healthcare => &[
                [0x0F9D8A, 0x38BDF8, 0x0B4F6C],
                [0x2A7DE1, 0x6CC24A, 0x1B3A5C],
                [0x14B8A6, 0x0EA5E9, 0xF97316],
            ],
            Self::Finance => &[
                [0x14315E, 0xC9A227, 0x2E6FBA],
                [0x0B6E4F, 0xC9A227, 0x123C2E],
                [0x1E3A8A, 0x10B981, 0x0F172A],
            ],
            Self::Education => &[
                [0x1D4E89, 0xF29E1F, 0x2FA37A],
                [0x7A1F2B, 0xE0A526, 0x2D3E50],
                [0x4338CA, 0xF59E0B, 0xEF4444],
            ],
            Self::Retail => &[
                [0xE0407A, 0xFF8A3D, 0x5B2A86],
                [0x1F2937, 0xF43F5E, 0xFBBF24],
                [0x0D9488, 0xF97316, 0x1F2937],
            ],
            Self::Food => &[
                [0xD9480F, 0x2B8A3E, 0xF2B705],
                [0xC92A2A, 0xF08C00, 0x5C940D],
                [0x2B8A3E, 0x8CBF3F, 0xE8890C],
            ],
            Self::Travel => &[
                [0x0077B6, 0xF4A261, 0x2A9D8F],
                [0x1C7ED6, 0xFAB005, 0x0B7285],
                [0xE76F51, 0x264653, 0x2A9D8F],
            ],
            Self::Entertainment => &[
                [0x7048E8, 0xE64980, 0xFAB005],
                [0xD6336C, 0x5F3DC4, 0x20C997],
                [0xF03E3E, 0x1C1C28, 0xFFC933],
            ],
            Self::Other => &[
                [0x3B5BDB, 0x12B886, 0xF59F00],
                [0x1F2937, 0xE8590C, 0x94A3B8],
                [0x9C36B5, 0x1098AD, 0xF76707],
            ],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Minimal,
    Modern,
    Vintage,
    Playful,
    Corporate,
    Tech,
    Organic,
    Geometric,
}

impl Style {
    fn parse(s: &str) -> Self {
        let has = |keys: &[&str]| has_keyword(s, keys);
        if has(&["minimal", "simple", "clean"]) {
            Self::Minimal
        } else if has(&["vintage", "retro", "classic", "badge", "heritage"]) {
            Self::Vintage
        } else if has(&["playful", "fun", "cartoon", "whimsical"]) {
            Self::Playful
        } else if has(&["corporate", "business", "professional"]) {
            Self::Corporate
        } else if has(&["tech", "futur", "cyber", "digital"]) {
            Self::Tech
        } else if has(&["organic", "natur", "eco", "hand"]) {
            Self::Organic
        } else if has(&["geometric", "abstract", "polygon"]) {
            Self::Geometric
        } else {
            Self::Modern
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mood {
    Professional,
    Friendly,
    Bold,
    Elegant,
    Playful,
    Neutral,
}

impl Mood {
    fn parse(s: Option<&str>) -> Self {
        let has = |keys: &[&str]| has_keyword(s.unwrap_or(""), keys);
        if has(&["profession", "serious", "trust", "formal"]) {
            Self::Professional
        } else if has(&["friend", "warm", "approachab", "welcom"]) {
            Self::Friendly
        } else if has(&["bold", "strong", "energ", "power"]) {
            Self::Bold
        } else if has(&["elegan", "luxur", "premium", "refined", "sophistic"]) {
            Self::Elegant
        } else if has(&["play", "fun", "cheer", "whimsic"]) {
            Self::Playful
        } else {
            Self::Neutral
        }
    }
}

/// Builds the palette: explicit colours from the scheme first, otherwise an
/// industry palette nudged by mood and style, steering clear of hues the
/// negative prompt names.
fn build_palette(
    spec: &LogoSpec<'_>,
    style: Style,
    industry: Industry,
    mood: Mood,
    rng: &mut Rng,
) -> Palette {
    let scheme = spec.color_scheme.unwrap_or("");
    let scheme_lower = scheme.to_lowercase();
    // Without a scheme, colour words in the prompt ("Green Leaf Cafe") steer it.
    let user = if scheme.trim().is_empty() {
        parse_colors(spec.prompt)
    } else {
        parse_colors(scheme)
    };
    let avoid = spec.negative_prompt.map(parse_colors).unwrap_or_default();
    let avoid_hues: Vec<f32> = avoid
        .iter()
        .filter(|c| to_hsl(**c).1 > 0.2)
        .map(|c| to_hsl(*c).0)
        .collect();
    let avoid_white = avoid.iter().any(|c| luminance(*c) > 0.9);
    let avoid_black = avoid.iter().any(|c| luminance(*c) < 0.02);

    // Split the user's colours into chromatic roles and background hints.
    let is_light_neutral = |c: Col| luminance(c) > 0.72 && to_hsl(c).1 < 0.6;
    let is_dark_neutral = |c: Col| to_hsl(c).1 < 0.2 && luminance(c) < 0.06;
    let chroma: Vec<Col> = user
        .iter()
        .copied()
        .filter(|c| !is_light_neutral(*c) && !is_dark_neutral(*c))
        .collect();
    let light_hint = user.iter().copied().find(|c| is_light_neutral(*c));
    let dark_hint = user.iter().copied().find(|c| is_dark_neutral(*c));

    let mut dark = match (light_hint, dark_hint) {
        _ if scheme_lower.contains("dark background") => true,
        _ if scheme_lower.contains("light background") => false,
        (Some(_), None) => false,
        (None, Some(_)) if !chroma.is_empty() => true,
        _ => mood == Mood::Bold || style == Style::Tech,
    };
    if avoid_black || (dark_hint.is_some() && chroma.is_empty() && light_hint.is_some()) {
        dark = false;
    }

    let (mut primary, mut secondary, mut accent) = match chroma.len() {
        0 if dark_hint.is_some() && !dark => {
            // "black and white": a monochrome logo.
            let k = dark_hint.unwrap_or(hex(0x121212));
            (k, mix(k, hex(0xFFFFFF), 0.35), mix(k, hex(0xFFFFFF), 0.55))
        }
        0 => {
            let options = industry.palettes();
            let start = rng.below(options.len() as u32) as usize;
            let ok = |c: Col| {
                let (h, s, _) = to_hsl(c);
                s < 0.2 || avoid_hues.iter().all(|&a| hue_distance(h, a) > 50.0)
            };
            // Roles come from the seeded palette; a colour with an avoided hue
            // is replaced by an unused acceptable colour from the industry's
            // other palettes, or failing that rotated as far from them as possible.
            let mut pool: Vec<Col> = (0..options.len())
                .flat_map(|k| options[(start + k) % options.len()])
                .map(hex)
                .filter(|c| ok(*c))
                .collect();
            let mut cols = options[start].map(hex);
            for c in &mut cols {
                if ok(*c) {
                    pool.retain(|p| p != c);
                } else if !pool.is_empty() {
                    *c = pool.remove(0);
                } else {
                    let spread = |h: f32| {
                        avoid_hues
                            .iter()
                            .map(|&a| hue_distance(h, a))
                            .fold(180.0, f32::min)
                    };
                    let (h0, _, _) = to_hsl(*c);
                    let best = (1..12)
                        .map(|k| h0 + 30.0 * k as f32)
                        .fold(h0, |b, h| if spread(h) > spread(b) + 1.0 { h } else { b });
                    *c = hsl_map(*c, |_, s, l| (best, s, l));
                }
            }
            let [p, s, a] = cols;
            let (p, s, a) = match mood {
                Mood::Professional => (desat(p, 0.88), desat(s, 0.85), desat(a, 0.85)),
                Mood::Friendly | Mood::Playful => (vivid(p), vivid(s), vivid(a)),
                Mood::Bold => (vivid(p), vivid(s), a),
                Mood::Elegant => (desat(p, 0.7), hex(0xB8964B), desat(a, 0.6)),
                Mood::Neutral => (p, s, a),
            };
            (p, s, a)
        }
        1 => {
            // One colour: a monochrome family around it.
            let p = chroma[0];
            let s = hsl_map(p, |h, s, l| (h, s, (l + 0.18).min(0.8)));
            let a = hsl_map(p, |h, s, l| (h, s, (l - 0.16).max(0.15)));
            (p, s, a)
        }
        2 => {
            let a = hsl_map(chroma[0], |h, s, l| (h, s, (l + 0.2).min(0.82)));
            (chroma[0], chroma[1], a)
        }
        _ => (chroma[0], chroma[1], chroma[2]),
    };
    if style == Style::Vintage && chroma.is_empty() {
        primary = hsl_map(primary, |h, s, l| (h, s * 0.7, l.min(0.42)));
        secondary = desat(secondary, 0.7);
        accent = desat(accent, 0.7);
    }

    let bg = if dark {
        match dark_hint {
            Some(k) => k,
            None => hsl_map(primary, |h, s, _| (h, (s * 0.35).min(0.3), 0.085)),
        }
    } else {
        match light_hint {
            Some(w) if !avoid_white || luminance(w) < 0.95 => w,
            _ if avoid_white => hsl_map(primary, |h, _, _| (h, 0.35, 0.95)),
            _ => match style {
                Style::Vintage => hex(0xF5EEDF),
                Style::Organic => hex(0xFBF9F3),
                _ => hex(0xFFFFFF),
            },
        }
    };

    // Shapes must stand out from the background; a slightly lower bar for
    // secondary colours keeps pale accents usable as highlights.
    primary = ensure_contrast(primary, bg, 2.6);
    let minor = if dark { 2.4 } else { 1.6 };
    secondary = ensure_contrast(secondary, bg, minor);
    accent = ensure_contrast(accent, bg, minor);

    let text = if dark {
        hsl_map(primary, |h, _, _| (h, 0.25, 0.96))
    } else if contrast(primary, bg) >= 7.0 && !avoid_black {
        primary
    } else {
        let (h, s, _) = to_hsl(primary);
        let t = from_hsl(h, s.min(0.4), 0.16);
        ensure_contrast(t, bg, 8.0)
    };
    let muted = mix(text, bg, if dark { 0.35 } else { 0.42 });
    let white = hex(0xFFFFFF);
    let ink = hsl_map(primary, |h, s, _| (h, s.min(0.5), 0.12));
    let on_primary = if contrast(white, primary) >= contrast(ink, primary) * 0.8 {
        if dark {
            mix(white, primary, 0.04)
        } else {
            white
        }
    } else {
        ink
    };
    Palette {
        bg,
        primary,
        secondary,
        accent,
        text,
        muted,
        on_primary,
        dark,
    }
}

fn desat(c: Col, k: f32) -> Col {
    hsl_map(c, |h, s, l| (h, s * k, l))
}

fn vivid(c: Col) -> Col {
    hsl_map(c, |h, s, l| (h, (s * 1.12).min(1.0), l))
}

// ---------------------------------------------------------------------------
// Geometry and rasterisation
// ---------------------------------------------------------------------------

type P = (f32, f32);

/// A set of closed contours in pixel space. Filled contours are stored
/// clockwise and holes anticlockwise so overlapping fills unite and holes cut.
#[derive(Debug, Default, Clone)]
struct Path {
    segs: Vec<(P, P)>,
}

fn signed_area(pts: &[P]) -> f32 {
    let n = pts.len();
    (0..n)
        .map(|i| {
            let (a, b) = (pts[i], pts[(i + 1) % n]);
            a.0 * b.1 - b.0 * a.1
        })
        .sum::<f32>()
        / 2.0
}

impl Path {
    fn new() -> Self {
        Self::default()
    }
    fn of(pts: &[P]) -> Self {
        let mut p = Self::new();
        p.add(pts);
        p
    }
    fn push_oriented(&mut self, pts: &[P], positive: bool) {
        if pts.len() < 3 {
            return;
        }
        let rev = (signed_area(pts) >= 0.0) != positive;
        let n = pts.len();
        for i in 0..n {
            let (a, b) = (pts[i], pts[(i + 1) % n]);
            self.segs.push(if rev { (b, a) } else { (a, b) });
        }
    }
    /// Adds a filled contour.
    fn add(&mut self, pts: &[P]) -> &mut Self {
        self.push_oriented(pts, true);
        self
    }
    /// Adds a hole (cuts any filled contour of this path it overlaps).
    fn hole(&mut self, pts: &[P]) -> &mut Self {
        self.push_oriented(pts, false);
        self
    }
    /// A straight stroke with round caps (one contour, so edges stay exact).
    fn line(&mut self, a: P, b: P, w: f32) -> &mut Self {
        self.polyline(&[a, b], w, false)
    }
    /// A polyline stroke as one outline: mitred joins, round caps. Closed
    /// polylines become an outer contour with an inner hole.
    fn polyline(&mut self, pts: &[P], w: f32, closed: bool) -> &mut Self {
        let mut v: Vec<P> = Vec::with_capacity(pts.len());
        for &p in pts {
            if v.last().is_none_or(|&q| dist(p, q) > 1e-3) {
                v.push(p);
            }
        }
        let n = v.len();
        let hw = w / 2.0;
        if n < 2 {
            if let Some(&p) = v.first() {
                self.add(&circle(p, hw));
            }
            return self;
        }
        let normal = |i: usize, j: usize| {
            let (dx, dy) = norm((v[j].0 - v[i].0, v[j].1 - v[i].1));
            (-dy, dx)
        };
        // Offset direction at vertex i, scaled so the stroke keeps its width.
        let offset = |i: usize| -> P {
            let prev = if i > 0 {
                Some(normal(i - 1, i))
            } else if closed {
                Some(normal(n - 1, 0))
            } else {
                None
            };
            let next = if i + 1 < n {
                Some(normal(i, i + 1))
            } else if closed {
                Some(normal(n - 1, 0))
            } else {
                None
            };
            match (prev, next) {
                (Some(a), Some(b)) => {
                    let m = norm((a.0 + b.0, a.1 + b.1));
                    let cos = (m.0 * b.0 + m.1 * b.1).max(0.5);
                    (m.0 * hw / cos, m.1 * hw / cos)
                }
                (Some(a), None) | (None, Some(a)) => (a.0 * hw, a.1 * hw),
                (None, None) => (0.0, 0.0),
            }
        };
        let offs: Vec<P> = (0..n).map(offset).collect();
        let left: Vec<P> = (0..n)
            .map(|i| (v[i].0 + offs[i].0, v[i].1 + offs[i].1))
            .collect();
        let right: Vec<P> = (0..n)
            .map(|i| (v[i].0 - offs[i].0, v[i].1 - offs[i].1))
            .collect();
        if closed {
            self.add(&left);
            self.hole(&right);
            return self;
        }
        let mut outline = left;
        let end_dir = normal(n - 2, n - 1);
        let a_end = end_dir.1.atan2(end_dir.0);
        let cap_end = arc_pts(v[n - 1], hw, a_end, a_end - PI);
        outline.extend(&cap_end[1..cap_end.len() - 1]);
        outline.extend(right.iter().rev());
        let start_dir = normal(0, 1);
        let a_start = start_dir.1.atan2(start_dir.0);
        let cap_start = arc_pts(v[0], hw, a_start + PI, a_start);
        outline.extend(&cap_start[1..cap_start.len() - 1]);
        self.add(&outline);
        self
    }
    /// A circular arc stroke of width `w`, optionally with round caps.
    fn arc(&mut self, c: P, r: f32, a0: f32, a1: f32, w: f32, caps: bool) -> &mut Self {
        let hw = w / 2.0;
        let mut pts = arc_pts(c, r + hw, a0, a1);
        let dir = if a1 >= a0 { 1.0 } else { -1.0 };
        if caps {
            let cap = arc_pts(polar(c, r, a1), hw, a1, a1 + dir * PI);
            pts.extend(&cap[1..cap.len() - 1]);
        }
        pts.extend(arc_pts(c, (r - hw).max(0.0), a1, a0));
        if caps {
            let cap = arc_pts(polar(c, r, a0), hw, a0 + dir * PI, a0 + dir * TAU);
            pts.extend(&cap[1..cap.len() - 1]);
        }
        self.add(&pts);
        self
    }
    /// A ring between radii `r - w` and `r`.
    fn ring(&mut self, c: P, r: f32, w: f32) -> &mut Self {
        self.add(&circle(c, r));
        self.hole(&circle(c, (r - w).max(0.0)));
        self
    }
}

fn polar(c: P, r: f32, a: f32) -> P {
    (c.0 + r * a.cos(), c.1 + r * a.sin())
}

/// Points along an arc (endpoints included), dense enough for < 0.1 px error.
fn arc_pts(c: P, r: f32, a0: f32, a1: f32) -> Vec<P> {
    let full = (r.max(0.5).sqrt() * 9.0).clamp(16.0, 720.0);
    let n = ((full * (a1 - a0).abs() / TAU).ceil() as usize).max(2);
    (0..=n)
        .map(|i| polar(c, r, a0 + (a1 - a0) * i as f32 / n as f32))
        .collect()
}

fn circle(c: P, r: f32) -> Vec<P> {
    let mut pts = arc_pts(c, r, 0.0, TAU);
    pts.pop();
    pts
}

fn ellipse(c: P, rx: f32, ry: f32, rot: f32) -> Vec<P> {
    let n = (rx.max(ry).max(0.5).sqrt() * 9.0).clamp(16.0, 720.0) as usize;
    let (s, co) = rot.sin_cos();
    (0..n)
        .map(|i| {
            let t = TAU * i as f32 / n as f32;
            let (x, y) = (rx * t.cos(), ry * t.sin());
            (c.0 + x * co - y * s, c.1 + x * s + y * co)
        })
        .collect()
}

/// Regular polygon with `n` vertices; `rot` = angle of the first vertex.
fn ngon(c: P, r: f32, n: usize, rot: f32) -> Vec<P> {
    (0..n)
        .map(|i| polar(c, r, rot + TAU * i as f32 / n as f32))
        .collect()
}

fn star(c: P, r_out: f32, r_in: f32, n: usize, rot: f32) -> Vec<P> {
    (0..2 * n)
        .map(|i| {
            let r = if i % 2 == 0 { r_out } else { r_in };
            polar(c, r, rot + PI * i as f32 / n as f32)
        })
        .collect()
}

/// Replaces every corner of a convex-ish polygon by a circular fillet.
fn rounded(pts: &[P], rad: f32) -> Vec<P> {
    let n = pts.len();
    let mut out = Vec::new();
    for i in 0..n {
        let p = pts[i];
        let a = pts[(i + n - 1) % n];
        let b = pts[(i + 1) % n];
        let (ux, uy) = norm((a.0 - p.0, a.1 - p.1));
        let (vx, vy) = norm((b.0 - p.0, b.1 - p.1));
        let cos = (ux * vx + uy * vy).clamp(-0.9999, 0.9999);
        let half = cos.acos() / 2.0;
        let la = ((a.0 - p.0).powi(2) + (a.1 - p.1).powi(2)).sqrt();
        let lb = ((b.0 - p.0).powi(2) + (b.1 - p.1).powi(2)).sqrt();
        let d = (rad / half.tan()).min(la * 0.5).min(lb * 0.5);
        let r = d * half.tan();
        if r < 0.05 {
            out.push(p);
            continue;
        }
        let (bx, by) = norm((ux + vx, uy + vy));
        let dist = r / half.sin();
        let c = (p.0 + bx * dist, p.1 + by * dist);
        let t1 = (p.0 + ux * d, p.1 + uy * d);
        let t2 = (p.0 + vx * d, p.1 + vy * d);
        let a0 = (t1.1 - c.1).atan2(t1.0 - c.0);
        let mut a1 = (t2.1 - c.1).atan2(t2.0 - c.0);
        while a1 - a0 > PI {
            a1 -= TAU;
        }
        while a0 - a1 > PI {
            a1 += TAU;
        }
        out.extend(arc_pts(c, r, a0, a1));
    }
    out
}

fn norm(v: P) -> P {
    let l = (v.0 * v.0 + v.1 * v.1).sqrt().max(1e-9);
    (v.0 / l, v.1 / l)
}

/// Rectangle with per-corner radii (top-left, top-right, bottom-right, bottom-left).
fn rrect4(a: P, b: P, r: [f32; 4]) -> Vec<P> {
    let half = ((b.0 - a.0).abs().min((b.1 - a.1).abs())) / 2.0;
    let corners = [
        ((a.0, a.1), (1.0, 1.0), PI),
        ((b.0, a.1), (-1.0, 1.0), -FRAC_PI_2),
        ((b.0, b.1), (-1.0, -1.0), 0.0),
        ((a.0, b.1), (1.0, -1.0), FRAC_PI_2),
    ];
    let mut pts = Vec::new();
    for (i, &(p, (dx, dy), a0)) in corners.iter().enumerate() {
        let rad = r[i].min(half * 2.0).max(0.0);
        if rad < 0.05 {
            pts.push(p);
        } else {
            let c = (p.0 + dx * rad, p.1 + dy * rad);
            pts.extend(arc_pts(c, rad, a0, a0 + FRAC_PI_2));
        }
    }
    pts
}

fn rrect(x0: f32, y0: f32, x1: f32, y1: f32, rad: f32) -> Vec<P> {
    rounded(&[(x0, y0), (x1, y0), (x1, y1), (x0, y1)], rad)
}

/// Appends a flattened cubic Bézier (start point excluded).
fn cubic_to(out: &mut Vec<P>, p0: P, p1: P, p2: P, p3: P) {
    let len = dist(p0, p1) + dist(p1, p2) + dist(p2, p3);
    let n = ((len / 3.0).ceil() as usize).clamp(4, 96);
    for i in 1..=n {
        let t = i as f32 / n as f32;
        let u = 1.0 - t;
        let (a, b, c, d) = (u * u * u, 3.0 * u * u * t, 3.0 * u * t * t, t * t * t);
        out.push((
            a * p0.0 + b * p1.0 + c * p2.0 + d * p3.0,
            a * p0.1 + b * p1.1 + c * p2.1 + d * p3.1,
        ));
    }
}

fn quad_to(out: &mut Vec<P>, p0: P, p1: P, p2: P) {
    let len = dist(p0, p1) + dist(p1, p2);
    let n = ((len / 3.0).ceil() as usize).clamp(2, 64);
    for i in 1..=n {
        let t = i as f32 / n as f32;
        let u = 1.0 - t;
        out.push((
            u * u * p0.0 + 2.0 * u * t * p1.0 + t * t * p2.0,
            u * u * p0.1 + 2.0 * u * t * p1.1 + t * t * p2.1,
        ));
    }
}

fn dist(a: P, b: P) -> f32 {
    ((a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)).sqrt()
}

/// Coverage of a path over its bounding box (clipped to the canvas).
struct Mask {
    x0: usize,
    y0: usize,
    w: usize,
    h: usize,
    cov: Vec<f32>,
}

impl Mask {
    fn at(&self, x: usize, y: usize) -> f32 {
        if x < self.x0 || y < self.y0 || x >= self.x0 + self.w || y >= self.y0 + self.h {
            0.0
        } else {
            self.cov[(y - self.y0) * self.w + (x - self.x0)]
        }
    }
}

/// Exact area coverage by signed-area accumulation: each edge deposits the
/// area it sweeps into the cells it crosses; a running sum along each row
/// then yields the covered fraction of every pixel.
fn rasterize(path: &Path, cw: u32, ch: u32) -> Option<Mask> {
    let (mut minx, mut miny, mut maxx, mut maxy) = (f32::MAX, f32::MAX, f32::MIN, f32::MIN);
    for &(a, b) in &path.segs {
        minx = minx.min(a.0).min(b.0);
        maxx = maxx.max(a.0).max(b.0);
        miny = miny.min(a.1).min(b.1);
        maxy = maxy.max(a.1).max(b.1);
    }
    if path.segs.is_empty() || !minx.is_finite() || !maxx.is_finite() {
        return None;
    }
    let x0 = minx.floor().max(0.0) as usize;
    let y0 = miny.floor().max(0.0) as usize;
    let x1 = (maxx.ceil().max(0.0) as usize + 1).min(cw as usize);
    let y1 = (maxy.ceil().max(0.0) as usize + 1).min(ch as usize);
    if x1 <= x0 || y1 <= y0 {
        return None;
    }
    let (w, h) = (x1 - x0, y1 - y0);
    let stride = w + 2;
    let mut acc = vec![0f32; stride * h];
    let (ox, oy) = (x0 as f32, y0 as f32);
    for &(a, b) in &path.segs {
        accumulate(
            &mut acc,
            stride,
            w as f32,
            h,
            (a.0 - ox, a.1 - oy),
            (b.0 - ox, b.1 - oy),
        );
    }
    let mut cov = vec![0f32; w * h];
    for y in 0..h {
        let mut sum = 0.0;
        for x in 0..w {
            sum += acc[y * stride + x];
            cov[y * w + x] = sum.abs().min(1.0);
        }
    }
    Some(Mask { x0, y0, w, h, cov })
}

fn accumulate(acc: &mut [f32], stride: usize, w: f32, h: usize, p0: P, p1: P) {
    if (p0.1 - p1.1).abs() < 1e-9 {
        return;
    }
    let (dir, a, b) = if p0.1 < p1.1 {
        (1.0, p0, p1)
    } else {
        (-1.0, p1, p0)
    };
    let dxdy = (b.0 - a.0) / (b.1 - a.1);
    let mut x = a.0;
    let ystart = if a.1 < 0.0 {
        x -= a.1 * dxdy;
        0
    } else {
        a.1 as usize
    };
    let yend = (b.1.ceil().max(0.0) as usize).min(h);
    for y in ystart..yend {
        let yf = y as f32;
        let dy = (yf + 1.0).min(b.1) - yf.max(a.1);
        let xnext = x + dxdy * dy;
        let d = dy * dir;
        // Clamping only matters where a shape leaves the canvas sideways.
        let (x0, x1) = if x < xnext { (x, xnext) } else { (xnext, x) };
        let (x0, x1) = (x0.clamp(0.0, w), x1.clamp(0.0, w));
        let row = y * stride;
        let x0floor = x0.floor();
        let x0i = x0floor as usize;
        let x1ceil = x1.ceil();
        let x1i = x1ceil as usize;
        if x1i <= x0i + 1 {
            let xmf = 0.5 * (x0 + x1) - x0floor;
            acc[row + x0i] += d - d * xmf;
            acc[row + x0i + 1] += d * xmf;
        } else {
            let s = 1.0 / (x1 - x0);
            let x0f = x0 - x0floor;
            let a0 = 0.5 * s * (1.0 - x0f) * (1.0 - x0f);
            let x1f = x1 - x1ceil + 1.0;
            let am = 0.5 * s * x1f * x1f;
            acc[row + x0i] += d * a0;
            if x1i == x0i + 2 {
                acc[row + x0i + 1] += d * (1.0 - a0 - am);
            } else {
                let a1 = s * (1.5 - x0f);
                acc[row + x0i + 1] += d * (a1 - a0);
                for v in &mut acc[row + x0i + 2..row + x1i - 1] {
                    *v += d * s;
                }
                let a2 = a1 + (x1i - x0i - 3) as f32 * s;
                acc[row + x1i - 1] += d * (1.0 - a2 - am);
            }
            acc[row + x1i] += d * am;
        }
        x = xnext;
    }
}

struct Canvas {
    img: RgbImage,
}

impl Canvas {
    fn clear(&mut self, c: Col) {
        let px = to_u8(c);
        for p in self.img.pixels_mut() {
            p.0 = px;
        }
    }

    fn blend_mask(&mut self, m: &Mask, c: Col, alpha: f32) {
        let target = [c[0] * 255.0, c[1] * 255.0, c[2] * 255.0];
        let width = self.img.width() as usize;
        let buf: &mut [u8] = &mut self.img;
        for y in 0..m.h {
            let row = &m.cov[y * m.w..(y + 1) * m.w];
            let base = ((m.y0 + y) * width + m.x0) * 3;
            for (x, &cv) in row.iter().enumerate() {
                let a = cv * alpha;
                if a <= 0.001 {
                    continue;
                }
                let i = base + x * 3;
                for k in 0..3 {
                    let v = f32::from(buf[i + k]);
                    buf[i + k] = (v + (target[k] - v) * a).round().clamp(0.0, 255.0) as u8;
                }
            }
        }
    }

    fn fill(&mut self, path: &Path, c: Col) {
        self.fill_alpha(path, c, 1.0);
    }

    fn fill_alpha(&mut self, path: &Path, c: Col, alpha: f32) {
        if let Some(m) = rasterize(path, self.img.width(), self.img.height()) {
            self.blend_mask(&m, c, alpha);
        }
    }

    /// Fills the intersection of two paths (flat "overlap" colours, clipped
    /// decorations).
    fn fill_intersection(&mut self, a: &Path, b: &Path, c: Col) {
        let (w, h) = (self.img.width(), self.img.height());
        let (Some(ma), Some(mb)) = (rasterize(a, w, h), rasterize(b, w, h)) else {
            return;
        };
        let mut m = ma;
        for y in 0..m.h {
            for x in 0..m.w {
                let other = mb.at(m.x0 + x, m.y0 + y);
                let v = &mut m.cov[y * m.w + x];
                *v = v.min(other);
            }
        }
        self.blend_mask(&m, c, 1.0);
    }
}

fn to_u8(c: Col) -> [u8; 3] {
    c.map(|v| (v * 255.0).round().clamp(0.0, 255.0) as u8)
}

/// Maps emblem-local unit coordinates (centre 0,0, radius 1, y down) to pixels.
#[derive(Debug, Clone, Copy)]
struct Pen {
    cx: f32,
    cy: f32,
    s: f32,
}

impl Pen {
    fn p(&self, x: f32, y: f32) -> P {
        (self.cx + x * self.s, self.cy + y * self.s)
    }
    fn l(&self, v: f32) -> f32 {
        v * self.s
    }
    fn pts(&self, unit: &[P]) -> Vec<P> {
        unit.iter().map(|&(x, y)| self.p(x, y)).collect()
    }
    /// A sub-pen centred at unit point (x, y) with unit radius `r`.
    fn sub(&self, x: f32, y: f32, r: f32) -> Pen {
        Pen {
            cx: self.cx + x * self.s,
            cy: self.cy + y * self.s,
            s: self.s * r,
        }
    }
}

// ---------------------------------------------------------------------------
// Typography
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Face {
    Sans,
    Serif,
    Mono,
    Condensed,
}

impl Face {
    fn font(self) -> FontRef<'static> {
        let bytes = match self {
            Self::Sans => SANS_BOLD,
            Self::Serif => SERIF_BOLD,
            Self::Mono => MONO_BOLD,
            Self::Condensed => CONDENSED_BOLD,
        };
        FontRef::try_from_slice(bytes).expect("bundled DejaVu font parses")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Upper,
    Lower,
    Title,
}

/// How a line of text is set.
#[derive(Debug, Clone, Copy)]
struct TypeSpec {
    face: Face,
    /// Extra letter spacing in em.
    tracking: f32,
    /// Horizontal shear (oblique faux-italic for "script").
    skew: f32,
}

/// Taglines: small, widely tracked capitals.
const TAGLINE: TypeSpec = TypeSpec {
    face: Face::Sans,
    tracking: 0.22,
    skew: 0.0,
};

fn font_has(font: &FontRef<'static>, c: char) -> bool {
    font.glyph_id(c).0 != 0
}

/// A laid-out line in font units (y up).
struct Shaped {
    glyphs: Vec<(GlyphId, f32, usize)>, // glyph, pen x, word index
    ink_min: f32,
    ink_max: f32,
    ink_bottom: f32,
    cap: f32,
}

fn shape(font: &FontRef<'static>, text: &str, ts: TypeSpec) -> Shaped {
    let upem = font.units_per_em().unwrap_or(2048.0);
    let cap = font
        .outline(font.glyph_id('H'))
        .map(|o| o.bounds.min.y.max(o.bounds.max.y))
        .unwrap_or(upem * 0.73);
    let mut glyphs = Vec::new();
    let (mut x, mut ink_min, mut ink_max, mut ink_bottom) = (0.0f32, f32::MAX, f32::MIN, 0.0f32);
    let mut prev: Option<GlyphId> = None;
    let mut word = 0;
    for ch in text.chars() {
        if ch.is_whitespace() {
            word += 1;
        }
        let gid = font.glyph_id(ch);
        if gid.0 == 0 && !ch.is_whitespace() {
            continue; // not in the face (callers filter these out beforehand)
        }
        if let Some(p) = prev {
            x += font.kern_unscaled(p, gid);
        }
        if let Some(o) = font.outline(gid) {
            let (lo, hi) = (
                o.bounds.min.y.min(o.bounds.max.y),
                o.bounds.min.y.max(o.bounds.max.y),
            );
            let sk = ts.skew * if ts.skew > 0.0 { hi } else { lo };
            ink_min = ink_min.min(x + o.bounds.min.x + ts.skew.min(0.0) * hi);
            ink_max = ink_max.max(x + o.bounds.max.x + sk.max(0.0));
            ink_bottom = ink_bottom.min(lo);
        }
        glyphs.push((gid, x, word));
        x += font.h_advance_unscaled(gid) + ts.tracking * upem;
        prev = Some(gid);
    }
    if ink_min > ink_max {
        (ink_min, ink_max) = (0.0, x.max(1.0));
    }
    Shaped {
        glyphs,
        ink_min,
        ink_max,
        ink_bottom,
        cap,
    }
}

impl Shaped {
    /// Ink width in pixels when set with the given cap height.
    fn width_at(&self, cap_px: f32) -> f32 {
        (self.ink_max - self.ink_min) * cap_px / self.cap
    }
    /// Depth below the baseline in pixels (descenders).
    fn depth_at(&self, cap_px: f32) -> f32 {
        -self.ink_bottom * cap_px / self.cap
    }
    /// Largest cap height that fits the box.
    fn fit(&self, max_w: f32, max_cap: f32) -> f32 {
        let per_cap = (self.ink_max - self.ink_min) / self.cap;
        max_cap.min(max_w / per_cap.max(1e-3)).max(0.0)
    }
}

/// Glyph outline as a pixel-space path: `left` is where the ink starts.
fn glyph_path(
    font: &FontRef<'static>,
    gid: GlyphId,
    pen_x: f32,
    left: f32,
    baseline: f32,
    scale: f32,
    skew: f32,
) -> Path {
    let mut path = Path::new();
    let Some(outline) = font.outline(gid) else {
        return path;
    };
    let map = |p: ab_glyph::Point| -> P {
        (
            left + (pen_x + p.x + skew * p.y) * scale,
            baseline - p.y * scale,
        )
    };
    let mut pts = Vec::new();
    for curve in &outline.curves {
        pts.clear();
        let start = match curve {
            OutlineCurve::Line(a, b) => {
                pts.push(map(*b));
                map(*a)
            }
            OutlineCurve::Quad(a, b, c) => {
                quad_to(&mut pts, map(*a), map(*b), map(*c));
                map(*a)
            }
            OutlineCurve::Cubic(a, b, c, d) => {
                cubic_to(&mut pts, map(*a), map(*b), map(*c), map(*d));
                map(*a)
            }
        };
        let mut prev = start;
        for &p in &pts {
            path.segs.push((prev, p));
            prev = p;
        }
    }
    path
}

/// Per-glyph colour and vertical offset (playful bounce, two-tone names).
type GlyphPaint<'a> = &'a dyn Fn(usize, usize) -> (Col, f32);

/// Draws a shaped line; `at` is (x where the ink starts, baseline y).
fn draw_line(
    cv: &mut Canvas,
    font: &FontRef<'static>,
    sh: &Shaped,
    ts: TypeSpec,
    at: P,
    cap_px: f32,
    paint: GlyphPaint<'_>,
) {
    let (x, baseline) = at;
    let scale = cap_px / sh.cap;
    let left = x - sh.ink_min * scale;
    for (i, &(gid, pen_x, word)) in sh.glyphs.iter().enumerate() {
        let (col, dy) = paint(i, word);
        let path = glyph_path(
            font,
            gid,
            pen_x,
            left,
            baseline + dy * cap_px,
            scale,
            ts.skew,
        );
        cv.fill(&path, col);
    }
}

/// Sets `text` centred in a box (unit coordinates of `pen`) at the largest
/// size that fits; used for monograms inside emblems.
fn draw_centered_text(
    cv: &mut Canvas,
    pen: Pen,
    text: &str,
    face: Face,
    center: P,
    (half_w, half_h): (f32, f32),
    col: Col,
) {
    let font = face.font();
    let ts = TypeSpec {
        face,
        tracking: -0.02,
        skew: 0.0,
    };
    let sh = shape(&font, text, ts);
    let cap = sh.fit(pen.l(2.0 * half_w), pen.l(2.0 * half_h));
    let (cx, cy) = pen.p(center.0, center.1);
    let x = cx - sh.width_at(cap) / 2.0;
    draw_line(cv, &font, &sh, ts, (x, cy + cap / 2.0), cap, &|_, _| {
        (col, 0.0)
    });
}

// ---------------------------------------------------------------------------
// Brand name
// ---------------------------------------------------------------------------

/// Words that describe the request rather than name the brand.
const FILLER: &[&str] = &[
    "a",
    "an",
    "the",
    "logo",
    "logos",
    "for",
    "of",
    "with",
    "and",
    "in",
    "on",
    "to",
    "design",
    "create",
    "make",
    "generate",
    "draw",
    "icon",
    "emblem",
    "brand",
    "branding",
    "company",
    "business",
    "simple",
    "minimal",
    "minimalist",
    "modern",
    "clean",
    "new",
    "my",
    "our",
    "professional",
    "vintage",
    "playful",
    "corporate",
    "tech",
    "organic",
    "geometric",
    "style",
    "styled",
    "please",
    "called",
    "named",
    "that",
    "is",
    "which",
];

const MAX_BRAND_CHARS: usize = 24;

fn is_filler(w: &str) -> bool {
    let w = w
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase();
    FILLER.contains(&w.as_str())
}

/// Cuts at the first comma, colon, semicolon, pipe, full stop or spaced/long dash.
fn split_head(p: &str) -> (&str, &str) {
    let mut cut = p.len();
    let mut rest_at = p.len();
    for (i, ch) in p.char_indices() {
        let spaced_hyphen = ch == '-' && p[..i].ends_with(' ') && p[i + 1..].starts_with(' ');
        let period = ch == '.' && p[i + 1..].chars().next().is_none_or(char::is_whitespace);
        if matches!(ch, ',' | ':' | ';' | '|' | '–' | '—') || spaced_hyphen || period {
            cut = i;
            rest_at = i + ch.len_utf8();
            break;
        }
    }
    (&p[..cut], &p[rest_at..])
}

fn clip_words(s: &str, max_words: usize) -> String {
    let mut out = String::new();
    for w in s.split_whitespace().take(max_words) {
        let cand = if out.is_empty() {
            w.to_string()
        } else {
            format!("{out} {w}")
        };
        if cand.chars().count() > MAX_BRAND_CHARS {
            if out.is_empty() {
                out = w.chars().take(MAX_BRAND_CHARS).collect();
            }
            break;
        }
        out = cand;
    }
    out.trim_matches(|c: char| !c.is_alphanumeric() && c != '&' && c != '!' && c != '?')
        .to_string()
}

fn strip_leading_filler(s: &str) -> &str {
    let mut rest = s.trim();
    loop {
        let Some(first) = rest.split_whitespace().next() else {
            return rest;
        };
        // Keep "The" when it starts a capitalised name ("The Daily Grind").
        let lower = first.to_lowercase();
        let the_in_name = lower == "the"
            && first.starts_with('T')
            && rest
                .split_whitespace()
                .nth(1)
                .is_some_and(|w| w.chars().next().is_some_and(char::is_uppercase));
        if !is_filler(first) || the_in_name {
            return rest;
        }
        rest = rest[first.len()..].trim_start();
    }
}

fn quoted(p: &str) -> Option<&str> {
    for (open, close) in [('"', '"'), ('“', '”'), ('\'', '\''), ('«', '»')] {
        if let Some(a) = p.find(open) {
            let start = a + open.len_utf8();
            if let Some(b) = p[start..].find(close) {
                let inner = p[start..start + b].trim();
                if !inner.is_empty() && inner.chars().count() <= 40 {
                    return Some(inner);
                }
            }
        }
    }
    None
}

/// The brand name and, when the rest of the prompt reads like a short
/// description, a tagline.
fn brand_and_tagline(prompt: &str) -> (String, Option<String>) {
    let p = prompt.trim();
    if let Some(q) = quoted(p) {
        return (clip_words(q, 4), None);
    }
    let lower = p.to_lowercase();
    for kw in ["called ", "named "] {
        if let Some(i) = lower.find(kw) {
            let after = &p[i + kw.len()..];
            let (head, _) = split_head(after);
            let name = clip_words(head, 3);
            if !name.is_empty() {
                return (name, None);
            }
        }
    }
    let (head, rest) = split_head(p);
    let head = strip_leading_filler(head);
    let words = head.split_whitespace().count();
    if words > 0 && words <= 4 && head.chars().count() <= MAX_BRAND_CHARS {
        return (clip_words(head, 4), tagline(rest));
    }
    // First run of 1-3 capitalised words.
    let mut run: Vec<&str> = Vec::new();
    for w in p.split_whitespace() {
        let clean = w.trim_matches(|c: char| !c.is_alphanumeric());
        let cap = clean.chars().next().is_some_and(char::is_uppercase);
        if cap && (!is_filler(clean) || !run.is_empty()) && clean.len() > 1 {
            run.push(clean);
            if run.len() == 3 || w.ends_with([',', ':', ';', '.']) {
                break;
            }
        } else if !run.is_empty() {
            break;
        }
    }
    if !run.is_empty() {
        return (clip_words(&run.join(" "), 3), None);
    }
    // Lower-case description: its first content word or two, title-cased.
    let take = if head.split_whitespace().count() <= 6 {
        2
    } else {
        1
    };
    let content: Vec<&str> = head
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty() && !is_filler(w))
        .take(take)
        .collect();
    let name = apply_case(&clip_words(&content.join(" "), 3), Case::Title);
    if name.is_empty() {
        ("Brand".to_string(), None)
    } else {
        (name, None)
    }
}

/// A short descriptive phrase; instructions about the logo itself are not a tagline.
fn tagline(rest: &str) -> Option<String> {
    let t = rest
        .trim()
        .trim_matches(|c: char| !c.is_alphanumeric() && c != '&');
    let t = split_head(t).0.trim();
    let lower = t.to_lowercase();
    const DESIGN_WORDS: &[&str] = &[
        "logo",
        "style",
        "color",
        "colour",
        "font",
        "icon",
        "background",
        "minimal",
        "design",
        "palette",
        "vector",
        "flat",
        "gradient",
        "typography",
        "emblem",
        "mascot",
        "text",
        "shade",
        "tone",
        "render",
        "image",
        "picture",
        "looking",
        "vibe",
    ];
    let words = t.split_whitespace().count();
    if t.is_empty()
        || words > 5
        || t.chars().count() > 36
        || DESIGN_WORDS.iter().any(|w| lower.contains(w))
        || !parse_colors(t).is_empty()
    {
        return None;
    }
    Some(t.to_uppercase())
}

fn apply_case(s: &str, case: Case) -> String {
    match case {
        Case::Upper => s.to_uppercase(),
        Case::Lower => s.to_lowercase(),
        Case::Title => {
            if s.chars().any(char::is_uppercase) {
                s.to_string()
            } else {
                s.split(' ')
                    .map(|w| {
                        let mut c = w.chars();
                        match c.next() {
                            Some(f) => f.to_uppercase().chain(c).collect(),
                            None => String::new(),
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        }
    }
}

/// Up to `max` initials from the brand's significant words.
fn monogram(brand: &str, max: usize) -> String {
    let words: Vec<&str> = brand
        .split_whitespace()
        .filter(|w| !matches!(w.to_lowercase().as_str(), "the" | "of" | "and" | "&" | "a"))
        .collect();
    let words = if words.is_empty() {
        brand.split_whitespace().collect()
    } else {
        words
    };
    let m: String = words
        .iter()
        .filter_map(|w| w.chars().find(|c| c.is_alphanumeric()))
        .take(max)
        .flat_map(char::to_uppercase)
        .collect();
    if m.is_empty() { "B".into() } else { m }
}

// ---------------------------------------------------------------------------
// Plan
// ---------------------------------------------------------------------------

/// Everything decided before painting.
struct Plan {
    w: f32,
    h: f32,
    style: Style,
    industry: Industry,
    palette: Palette,
    /// Corporate looks and elegant moods get a rule between emblem and name.
    divider: bool,
    complexity: u32,
    family: u32,
    brand: Option<String>,
    tagline: Option<String>,
    monogram: Option<String>,
    type_spec: TypeSpec,
    mono_face: Face,
    horizontal: bool,
    two_tone: bool,
    rng_seed: u64,
}

/// Whole-word match against a negative prompt.
fn mentions(text: &str, words: &[&str]) -> bool {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .any(|w| words.contains(&w))
}

impl Plan {
    fn build(spec: &LogoSpec<'_>) -> Self {
        let style = Style::parse(spec.style);
        let industry = Industry::parse(spec.industry);
        let mood = Mood::parse(spec.mood);
        let key = format!(
            "{}\u{1}{}\u{1}{}\u{1}{:?}\u{1}{:?}\u{1}{:?}\u{1}{}",
            spec.prompt,
            spec.style,
            spec.industry,
            spec.color_scheme,
            spec.typography,
            spec.mood,
            spec.complexity
        );
        // The seed dominates variant choice; the rest of the spec decorrelates
        // streams of different prompts with the same seed.
        let seed_bits = mix64(spec.seed ^ 0x6c6f_676f);
        let mut rng = Rng(seed_bits ^ fnv1a(key.as_bytes()).rotate_left(17));
        let mut vrng = Rng(seed_bits);

        let neg = spec.negative_prompt.unwrap_or("");
        let no_text = mentions(
            neg,
            &[
                "text",
                "texts",
                "letters",
                "lettering",
                "words",
                "typography",
                "name",
                "wordmark",
                "font",
                "fonts",
                "writing",
                "typeface",
                "letter",
            ],
        );
        let no_tagline = no_text || mentions(neg, &["tagline", "slogan", "subtitle", "caption"]);
        let no_monogram = no_text || mentions(neg, &["monogram", "initials", "initial"]);

        let (brand, tagline) = brand_and_tagline(spec.prompt);
        let palette = build_palette(spec, style, industry, mood, &mut rng);
        let complexity = u32::from(spec.complexity.clamp(1, 5));
        let family = vrng.below(4);

        let typo = spec.typography.unwrap_or("").to_lowercase();
        let (mut face, mut tracking, mut skew): (Face, f32, f32) = match style {
            Style::Minimal => (Face::Sans, -0.01, 0.0),
            Style::Modern => (Face::Sans, 0.0, 0.0),
            Style::Vintage => (Face::Serif, 0.08, 0.0),
            Style::Playful => (Face::Sans, 0.0, 0.0),
            Style::Corporate if industry == Industry::Finance => (Face::Serif, 0.06, 0.0),
            Style::Corporate => (Face::Sans, 0.06, 0.0),
            Style::Tech if vrng.chance(0.5) => (Face::Mono, 0.02, 0.0),
            Style::Tech => (Face::Condensed, 0.12, 0.0),
            Style::Organic if vrng.chance(0.5) => (Face::Serif, 0.01, 0.0),
            Style::Organic => (Face::Sans, 0.0, 0.0),
            Style::Geometric => (Face::Condensed, 0.14, 0.0),
        };
        let mut case = match style {
            Style::Minimal => Case::Lower,
            Style::Vintage | Style::Corporate | Style::Tech | Style::Geometric => Case::Upper,
            Style::Modern if vrng.chance(0.4) => Case::Lower,
            _ => Case::Title,
        };
        if typo.contains("mono") || typo.contains("code") {
            (face, tracking) = (Face::Mono, 0.02);
        } else if typo.contains("sans") {
            face = Face::Sans;
        } else if typo.contains("serif") {
            face = Face::Serif;
        } else if typo.contains("script") || typo.contains("hand") || typo.contains("cursive") {
            (face, tracking, skew, case) = (Face::Serif, 0.0, 0.22, Case::Title);
        } else if typo.contains("display") || typo.contains("condensed") {
            (face, tracking, case) = (Face::Condensed, 0.1, Case::Upper);
        }
        if case != Case::Upper {
            tracking = tracking.min(0.02);
        }
        let type_spec = TypeSpec {
            face,
            tracking,
            skew,
        };
        let mono_face = if face == Face::Mono { Face::Sans } else { face };

        let mono_letters = match style {
            Style::Minimal | Style::Playful => 1,
            _ => 2,
        };
        // Only characters the chosen faces can draw; a name with none of
        // them (e.g. CJK) gives an emblem-only logo rather than empty boxes.
        let (name_font, mono_font) = (face.font(), mono_face.font());
        let brand: String = brand
            .chars()
            .filter(|&c| {
                c == ' '
                    || (font_has(&name_font, c) && font_has(&mono_font, c))
                    || (!c.is_alphanumeric() && font_has(&name_font, c))
            })
            .collect::<String>()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let no_text = no_text || !brand.chars().any(char::is_alphanumeric);
        let no_monogram = no_monogram || no_text;
        let monogram = (!no_monogram).then(|| monogram(&brand, mono_letters));
        let brand_text = apply_case(&brand, case);
        let tag_font = TAGLINE.face.font();
        let tagline = tagline
            .map(|t| {
                t.chars()
                    .filter(|&c| c == ' ' || font_has(&tag_font, c))
                    .collect::<String>()
            })
            .filter(|t| t.chars().any(char::is_alphanumeric));

        let (w, h) = (spec.width as f32, spec.height as f32);
        let aspect = w / h;
        let horizontal = if aspect >= 1.6 {
            true
        } else if aspect >= 1.2 {
            vrng.chance(0.5)
        } else if aspect >= 0.95 {
            vrng.chance(0.3)
        } else {
            false
        };
        let two_tone = matches!(style, Style::Modern | Style::Tech | Style::Geometric)
            && brand.split_whitespace().count() > 1
            && vrng.chance(0.5);

        Plan {
            w,
            h,
            style,
            industry,
            palette,
            divider: style == Style::Corporate || mood == Mood::Elegant,
            complexity,
            family,
            brand: (!no_text).then_some(brand_text),
            tagline: if no_tagline || no_text { None } else { tagline },
            monogram,
            type_spec,
            mono_face,
            horizontal,
            two_tone,
            rng_seed: rng.next(),
        }
    }

    fn paint(&self, cv: &mut Canvas) {
        let (w, h) = (self.w, self.h);
        let m = 0.09 * w.min(h);
        let (aw, ah) = (w - 2.0 * m, h - 2.0 * m);
        let Some(brand) = &self.brand else {
            let d = aw.min(ah) * 0.8;
            let pen = Pen {
                cx: w / 2.0,
                cy: h / 2.0,
                s: d / 2.0,
            };
            self.emblem(cv, pen);
            return;
        };
        let font = self.type_spec.face.font();
        let options: Vec<Vec<Shaped>> = line_options(brand)
            .iter()
            .map(|ls| ls.iter().map(|l| shape(&font, l, self.type_spec)).collect())
            .collect();
        let tag_font = TAGLINE.face.font();
        let tag = self.tagline.as_ref().map(|t| shape(&tag_font, t, TAGLINE));
        let aspect = w / h;
        let lockup = if aspect >= 1.6 {
            self.side_by_side(&options, tag.as_ref())
        } else if aspect < 0.95 || !self.horizontal {
            self.stacked(&options, tag.as_ref())
        } else {
            // The seed asked for a horizontal lockup: take it unless it would
            // shrink the logo into a thin strip (long names on square canvases).
            let side = self.side_by_side(&options, tag.as_ref());
            let stack = self.stacked(&options, tag.as_ref());
            if side.block.cap >= stack.block.cap * 0.85 && side.pen.s >= stack.pen.s * 0.7 {
                side
            } else {
                stack
            }
        };
        self.emblem(cv, lockup.pen);
        if let Some(rule) = &lockup.rule {
            cv.fill(rule, self.palette.muted);
        }
        self.draw_text_block(cv, &font, &lockup.block, lockup.origin, lockup.centered);
    }

    /// Picks how many lines to set the name in: every option is fitted, and a
    /// taller stack must buy a clearly larger size.
    fn choose_lines(
        options: &[Vec<Shaped>],
        max_w: f32,
        max_cap: impl Fn(usize) -> f32,
        allow: impl Fn(usize, f32) -> bool,
    ) -> (usize, f32) {
        let mut best = (0usize, 0.0f32);
        for (i, opt) in options.iter().enumerate() {
            let cap = opt
                .iter()
                .map(|l| l.fit(max_w, max_cap(opt.len())))
                .fold(f32::MAX, f32::min);
            if i == 0 || (cap > best.1 * 1.35 && allow(opt.len(), best.1)) {
                best = (i, cap);
            }
        }
        best
    }

    /// Emblem on the left, name (and tagline) left-aligned to its right.
    fn side_by_side<'a>(&self, options: &'a [Vec<Shaped>], tag: Option<&'a Shaped>) -> Lockup<'a> {
        let (w, h) = (self.w, self.h);
        let m = 0.09 * w.min(h);
        let (aw, ah) = (w - 2.0 * m, h - 2.0 * m);
        let aspect = w / h;
        let d_max = ah * 0.72;
        let mut d = d_max.min(aw * 0.32);
        let mut pass = 0;
        loop {
            let gap = d * 0.2;
            let text_w = aw - d - gap;
            let (i, cap) = Self::choose_lines(
                options,
                text_w,
                |n| if n == 1 { d * 0.34 } else { d * 0.28 },
                |n, cap1| n == 2 && (aspect < 1.6 || cap1 < d * 0.22),
            );
            let block = TextBlock::new(&options[i], cap, tag, text_w);
            let total = d + gap + block.width;
            // A short name leaves room: grow the whole lockup once to use it.
            if pass == 0 && total < aw * 0.95 && d < d_max {
                d = (d * aw / total).min(d_max);
                pass += 1;
                continue;
            }
            let left = (w - total) / 2.0;
            let rule = self.divider.then(|| {
                let x = left + d + gap / 2.0;
                let half = (block.height * 0.6).max(d * 0.3);
                let lw = (d * 0.012).max(1.0);
                Path::of(&[
                    (x - lw / 2.0, h / 2.0 - half),
                    (x + lw / 2.0, h / 2.0 - half),
                    (x + lw / 2.0, h / 2.0 + half),
                    (x - lw / 2.0, h / 2.0 + half),
                ])
            });
            let origin = (left + d + gap, h / 2.0 - block.height / 2.0);
            return Lockup {
                pen: Pen {
                    cx: left + d / 2.0,
                    cy: h / 2.0,
                    s: d / 2.0,
                },
                block,
                origin,
                centered: false,
                rule,
            };
        }
    }

    /// Emblem above the centred name (and tagline).
    fn stacked<'a>(&self, options: &'a [Vec<Shaped>], tag: Option<&'a Shaped>) -> Lockup<'a> {
        let (w, h) = (self.w, self.h);
        let m = 0.09 * w.min(h);
        let (aw, ah) = (w - 2.0 * m, h - 2.0 * m);
        let text_w = aw * 0.92;
        let tall = w / h < 0.9;
        let (i, cap) = Self::choose_lines(
            options,
            text_w,
            |n| ah * [0.12, 0.1, 0.085][n.clamp(1, 3) - 1],
            |n, cap1| (n == 2 && (tall || cap1 < ah * 0.075)) || (n == 3 && tall),
        );
        let block = TextBlock::new(&options[i], cap, tag, text_w);
        let gap = (cap * 0.9).max(ah * 0.06);
        let wide_share = if h > w * 1.2 { 0.72 } else { 0.62 };
        let d = (aw * wide_share)
            .min(ah - block.height - gap)
            .min(ah * 0.56)
            .max(ah * 0.2)
            .min(aw);
        let top = (h - (d + gap + block.height)) / 2.0;
        let origin = (w / 2.0 - block.width / 2.0, top + d + gap);
        Lockup {
            pen: Pen {
                cx: w / 2.0,
                cy: top + d / 2.0,
                s: d / 2.0,
            },
            block,
            origin,
            centered: true,
            rule: None,
        }
    }

    /// Sets the name lines and tagline from `origin` (left or block-left x, top y).
    fn draw_text_block(
        &self,
        cv: &mut Canvas,
        font: &FontRef<'static>,
        block: &TextBlock<'_>,
        origin: P,
        centered: bool,
    ) {
        let (x, top) = origin;
        let pal = &self.palette;
        let mut rng = Rng(self.rng_seed ^ 0x7465_7874);
        // Playful: letters cycle through the palette colours that read well.
        let readable: Vec<Col> = [pal.primary, pal.secondary, pal.accent, pal.text]
            .into_iter()
            .filter(|c| contrast(*c, pal.bg) >= 3.0)
            .collect();
        let playful = self.style == Style::Playful && readable.len() >= 2;
        let phase = rng.below(3) as usize;
        let word_col = if contrast(pal.primary, pal.bg) >= 3.0 {
            pal.primary
        } else {
            pal.accent
        };
        let mut baseline = top;
        let n = block.lines.len();
        for (li, sh) in block.lines.iter().enumerate() {
            baseline += block.cap;
            let lw = sh.width_at(block.cap);
            let lx = if centered {
                x + (block.width - lw) / 2.0
            } else {
                x
            };
            let two_tone = self.two_tone;
            let text = pal.text;
            let paint = |i: usize, word: usize| -> (Col, f32) {
                if playful {
                    let c = readable[(i + phase) % readable.len()];
                    let dy = if i.is_multiple_of(2) { -0.03 } else { 0.03 };
                    (c, dy)
                } else if two_tone && (word + li) % 2 == 1 {
                    (word_col, 0.0)
                } else {
                    (text, 0.0)
                }
            };
            draw_line(
                cv,
                font,
                sh,
                self.type_spec,
                (lx, baseline),
                block.cap,
                &paint,
            );
            if li + 1 < n {
                baseline += block.cap * 0.42;
            }
        }
        if let (Some(tsh), Some(tcap)) = (block.tag, block.tag_cap) {
            let tw = tsh.width_at(tcap);
            baseline += block.tag_gap + tcap;
            let tx = if centered {
                x + (block.width - tw) / 2.0
            } else {
                x
            };
            let tag_font = TAGLINE.face.font();
            draw_line(
                cv,
                &tag_font,
                tsh,
                TAGLINE,
                (tx, baseline),
                tcap,
                &|_, _| (pal.muted, 0.0),
            );
            if self.style == Style::Vintage && centered {
                // Short rules either side of the tagline.
                let len = tcap * 2.2;
                let y = baseline - tcap / 2.0;
                let lw = (tcap * 0.14).max(1.0);
                let mut p = Path::new();
                p.line((tx - tcap * 0.8 - len, y), (tx - tcap * 0.8, y), lw);
                p.line(
                    (tx + tw + tcap * 0.8, y),
                    (tx + tw + tcap * 0.8 + len, y),
                    lw,
                );
                cv.fill(&p, pal.primary);
            }
        }
    }
}

/// Where the emblem, the text block and an optional divider rule go.
struct Lockup<'a> {
    pen: Pen,
    block: TextBlock<'a>,
    /// Top-left of the text block.
    origin: P,
    centered: bool,
    rule: Option<Path>,
}

/// Brand lines plus optional tagline, measured.
struct TextBlock<'a> {
    lines: &'a [Shaped],
    cap: f32,
    tag: Option<&'a Shaped>,
    tag_cap: Option<f32>,
    tag_gap: f32,
    width: f32,
    height: f32,
}

impl<'a> TextBlock<'a> {
    fn new(lines: &'a [Shaped], cap: f32, tag: Option<&'a Shaped>, max_w: f32) -> Self {
        let width = lines.iter().map(|l| l.width_at(cap)).fold(0.0, f32::max);
        let n = lines.len() as f32;
        let depth = lines.last().map_or(0.0, |l| l.depth_at(cap));
        let mut height = cap * n + cap * 0.42 * (n - 1.0);
        let (mut tag_cap, mut tag_gap) = (None, 0.0);
        if let Some(t) = tag {
            let tc = t.fit(max_w.min(width.max(max_w * 0.6)), cap * 0.3);
            if tc >= 6.0 {
                tag_cap = Some(tc);
                tag_gap = depth.max(cap * 0.12) + cap * 0.38;
                height += tag_gap + tc;
            }
        }
        let tag_w = match (tag, tag_cap) {
            (Some(t), Some(tc)) => t.width_at(tc),
            _ => 0.0,
        };
        if tag_cap.is_none() {
            height += depth * 0.5;
        }
        TextBlock {
            lines,
            cap,
            tag: tag.filter(|_| tag_cap.is_some()),
            tag_cap,
            tag_gap,
            width: width.max(tag_w),
            height,
        }
    }
}

/// Ways to set the name: one line, the most balanced two-line split and,
/// for three or more words, the most balanced three-line split.
fn line_options(s: &str) -> Vec<Vec<String>> {
    let words: Vec<&str> = s.split_whitespace().collect();
    let mut out = vec![vec![s.to_string()]];
    let n = words.len();
    let longest = |parts: &[String]| parts.iter().map(|p| p.chars().count()).max().unwrap_or(0);
    if n >= 2 {
        let best = (1..n)
            .map(|k| vec![words[..k].join(" "), words[k..].join(" ")])
            .min_by_key(|p| longest(p));
        out.extend(best);
    }
    if n >= 3 {
        let best = (1..n - 1)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .map(|(a, b)| {
                vec![
                    words[..a].join(" "),
                    words[a..b].join(" "),
                    words[b..].join(" "),
                ]
            })
            .min_by_key(|p| longest(p));
        out.extend(best);
    }
    out
}

// ---------------------------------------------------------------------------
// Emblems
// ---------------------------------------------------------------------------

impl Plan {
    fn emblem(&self, cv: &mut Canvas, pen: Pen) {
        let mut rng = Rng(self.rng_seed);
        match self.style {
            Style::Minimal => self.emblem_minimal(cv, pen, &mut rng),
            Style::Geometric => self.emblem_geometric(cv, pen, &mut rng),
            Style::Tech => self.emblem_tech(cv, pen, &mut rng),
            Style::Organic => self.emblem_organic(cv, pen, &mut rng),
            Style::Vintage => self.emblem_vintage(cv, pen, &mut rng),
            Style::Playful => self.emblem_playful(cv, pen, &mut rng),
            Style::Corporate => self.emblem_corporate(cv, pen, &mut rng),
            Style::Modern => self.emblem_modern(cv, pen, &mut rng),
        }
    }

    /// Thin decorative lines on top of `primary`: the secondary colour when it
    /// stands out there ("navy and gold"), otherwise the monogram colour.
    fn trim(&self) -> Col {
        let pal = &self.palette;
        if contrast(pal.secondary, pal.primary) >= 2.5 {
            pal.secondary
        } else {
            pal.on_primary
        }
    }

    /// The monogram if there is one, otherwise the industry motif.
    fn mark(&self, cv: &mut Canvas, pen: Pen, center: P, half: f32, col: Col) {
        match &self.monogram {
            Some(m) => {
                let hw = half * if m.chars().count() > 1 { 1.0 } else { 0.8 };
                draw_centered_text(cv, pen, m, self.mono_face, center, (hw, half * 0.72), col);
            }
            None => draw_motif(
                cv,
                pen.sub(center.0, center.1, half * 0.85),
                self.industry,
                col,
            ),
        }
    }

    fn emblem_minimal(&self, cv: &mut Canvas, pen: Pen, _rng: &mut Rng) {
        let pal = &self.palette;
        let c = self.complexity;
        let r = if c >= 3 { 0.84 } else { 1.0 };
        match self.family {
            0 | 3 => {
                cv.fill(&Path::of(&circle(pen.p(0.0, 0.0), pen.l(r))), pal.primary);
                self.mark(cv, pen, (0.0, 0.0), r * 0.62, pal.on_primary);
            }
            1 => {
                let s = r * 0.86;
                cv.fill(
                    &Path::of(&pen.pts(&rrect(-s, -s, s, s, s * 0.34))),
                    pal.primary,
                );
                self.mark(cv, pen, (0.0, 0.0), s * 0.66, pal.on_primary);
            }
            _ => {
                let mut p = Path::new();
                p.ring(pen.p(0.0, 0.0), pen.l(r), pen.l(r * 0.16));
                cv.fill(&p, pal.primary);
                self.mark(cv, pen, (0.0, 0.0), r * 0.5, pal.primary);
            }
        }
        if c >= 2 {
            // Accent dot cut into the top-right edge.
            let at = polar((0.0, 0.0), r * 0.78, -PI / 4.0);
            cv.fill(
                &Path::of(&circle(pen.p(at.0, at.1), pen.l(r * 0.27))),
                pal.bg,
            );
            cv.fill(
                &Path::of(&circle(pen.p(at.0, at.1), pen.l(r * 0.18))),
                pal.accent,
            );
        }
        if c >= 3 && self.family != 1 {
            let mut p = Path::new();
            p.arc(
                pen.p(0.0, 0.0),
                pen.l(0.96),
                PI * 0.05,
                PI * 0.95,
                pen.l(0.05),
                true,
            );
            cv.fill(&p, pal.secondary);
        }
        if c >= 4 {
            let at = polar((0.0, 0.0), r * 0.78, PI * 0.75);
            cv.fill(
                &Path::of(&circle(pen.p(at.0, at.1), pen.l(r * 0.08))),
                pal.secondary,
            );
        }
    }

    fn emblem_geometric(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
        let pal = &self.palette;
        let c = self.complexity;
        let o = pen.p(0.0, 0.0);
        match self.family {
            0 => {
                // Nested hexagon outlines around a solid core.
                let rot = if rng.chance(0.5) { 0.0 } else { PI / 6.0 };
                let k = c + 1;
                let step = 0.72 / k as f32;
                let wline = step * 0.55;
                let cols = [pal.primary, pal.secondary, pal.accent];
                for i in 0..k {
                    let r = 1.0 - i as f32 * step;
                    let mut p = Path::new();
                    p.add(&rounded(&ngon(o, pen.l(r), 6, rot), pen.l(0.06)));
                    p.hole(&rounded(&ngon(o, pen.l(r - wline), 6, rot), pen.l(0.04)));
                    cv.fill(&p, cols[i as usize % 2]);
                }
                let core = 1.0 - k as f32 * step;
                cv.fill(
                    &Path::of(&rounded(&ngon(o, pen.l(core), 6, rot), pen.l(0.04))),
                    cols[2],
                );
                if c >= 4 {
                    draw_motif(cv, pen.sub(0.0, 0.0, core * 0.55), self.industry, pal.bg);
                }
            }
            1 => {
                // Isometric cube: three shaded rhombi with crisp gaps.
                let top = hsl_map(pal.primary, |h, s, l| (h, s, (l + 0.16).min(0.85)));
                let left = pal.primary;
                let right = hsl_map(pal.primary, |h, s, l| (h, s, l * 0.62));
                self.cube(cv, pen, 1.0, [top, left, right], c >= 2);
                if c >= 4 {
                    let inner = [
                        pal.secondary,
                        hsl_map(pal.secondary, |h, s, l| (h, s, l * 0.7)),
                        pal.accent,
                    ];
                    self.cube(cv, pen.sub(0.0, 0.0, 0.42), 1.0, inner, true);
                }
            }
            2 => {
                // Faceted triangle subdivided into n x n facets.
                let n = (c + 1).min(4) as usize;
                let (a, b, cc) = ((0.0, -0.95), (-0.98, 0.75), (0.98, 0.75));
                let lerp = |p: P, q: P, t: f32| (p.0 + (q.0 - p.0) * t, p.1 + (q.1 - p.1) * t);
                let at = |i: usize, j: usize| {
                    // Row i from the apex, position j in the row.
                    let row_l = lerp(a, b, i as f32 / n as f32);
                    let row_r = lerp(a, cc, i as f32 / n as f32);
                    if i == 0 {
                        a
                    } else {
                        lerp(row_l, row_r, j as f32 / i as f32)
                    }
                };
                let shades = [
                    pal.primary,
                    hsl_map(pal.primary, |h, s, l| (h, s, (l + 0.14).min(0.85))),
                    pal.secondary,
                    hsl_map(pal.primary, |h, s, l| (h, s, l * 0.72)),
                ];
                let gap = pen.l(0.035 * 3.0 / n as f32);
                for i in 0..n {
                    for j in 0..=i {
                        let up = [at(i, j), at(i + 1, j), at(i + 1, j + 1)];
                        let col = shades[(i * 3 + j * 5 + rng.below(2) as usize) % 4];
                        let p = Path::of(&pen.pts(&up));
                        cv.fill(&p, col);
                        if j < i {
                            let down = [at(i, j), at(i, j + 1), at(i + 1, j + 1)];
                            let col = shades[(i + j * 3 + 1) % 4];
                            cv.fill(&Path::of(&pen.pts(&down)), col);
                        }
                    }
                }
                // Crisp facet gaps along the grid lines.
                let mut g = Path::new();
                for i in 1..n {
                    g.line(
                        pen.p(at(i, 0).0, at(i, 0).1),
                        pen.p(at(i, i).0, at(i, i).1),
                        gap,
                    );
                }
                for j in 1..n {
                    let (p0, p1) = (at(j, 0), at(n, n - j));
                    g.line(pen.p(p0.0, p0.1), pen.p(p1.0, p1.1), gap);
                    let (q0, q1) = (at(j, j), at(n, j));
                    g.line(pen.p(q0.0, q0.1), pen.p(q1.0, q1.1), gap);
                }
                cv.fill(&g, pal.bg);
            }
            _ => {
                // Nested diamonds alternating filled and outlined.
                let k = c + 1;
                let cols = [pal.primary, pal.secondary];
                for i in 0..k {
                    let r = 1.0 - i as f32 * (0.8 / k as f32);
                    let pts = rounded(&ngon(o, pen.l(r), 4, -FRAC_PI_2), pen.l(0.05));
                    let mut p = Path::new();
                    p.add(&pts);
                    if i + 1 < k {
                        let inner = r - 0.4 / k as f32;
                        p.hole(&rounded(&ngon(o, pen.l(inner), 4, -FRAC_PI_2), pen.l(0.04)));
                    }
                    cv.fill(
                        &p,
                        if i + 1 == k {
                            pal.accent
                        } else {
                            cols[i as usize % 2]
                        },
                    );
                }
            }
        }
    }

    /// Isometric cube made of three rhombi, optionally separated by gaps.
    fn cube(&self, cv: &mut Canvas, pen: Pen, r: f32, cols: [Col; 3], gaps: bool) {
        let v: Vec<P> = (0..6)
            .map(|i| polar((0.0, 0.0), r, -FRAC_PI_2 + i as f32 * PI / 3.0))
            .collect();
        let c = (0.0, 0.0);
        let faces = [
            [v[0], v[1], c, v[5]], // top
            [v[5], c, v[3], v[4]], // left
            [c, v[1], v[2], v[3]], // right
        ];
        for (f, col) in faces.iter().zip(cols) {
            cv.fill(&Path::of(&rounded(&pen.pts(f), pen.l(0.03))), col);
        }
        if gaps {
            let mut g = Path::new();
            for &e in &[v[1], v[3], v[5]] {
                g.line(pen.p(0.0, 0.0), pen.p(e.0, e.1), pen.l(0.05));
            }
            cv.fill(&g, self.palette.bg);
        }
    }

    fn emblem_tech(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
        let pal = &self.palette;
        let c = self.complexity;
        match self.family {
            0 | 3 => {
                // Hexagon frame with a pinwheel of circuit traces.
                let o = pen.p(0.0, 0.0);
                let mut frame = Path::new();
                frame.add(&rounded(&ngon(o, pen.l(1.0), 6, -FRAC_PI_2), pen.l(0.1)));
                frame.hole(&rounded(&ngon(o, pen.l(0.9), 6, -FRAC_PI_2), pen.l(0.08)));
                cv.fill(&frame, pal.primary);
                let k = (c + 2) as usize;
                let wtr = pen.l(0.065);
                let turn = if rng.chance(0.5) { 1.0 } else { -1.0 };
                let base = rng.below(6) as f32 * PI / 3.0;
                let mut traces = Path::new();
                let mut ends = Vec::new();
                for i in 0..k {
                    let a = base + TAU * i as f32 / k as f32;
                    let p0 = polar((0.0, 0.0), 0.22, a);
                    let p1 = polar((0.0, 0.0), 0.42, a);
                    let p2 = polar(p1, 0.24, a + turn * PI / 4.0);
                    traces.polyline(
                        &[pen.p(p0.0, p0.1), pen.p(p1.0, p1.1), pen.p(p2.0, p2.1)],
                        wtr,
                        false,
                    );
                    ends.push(p2);
                }
                cv.fill(&traces, pal.primary);
                for (i, e) in ends.iter().enumerate() {
                    let col = if i % 2 == 0 {
                        pal.secondary
                    } else {
                        pal.accent
                    };
                    let mut n = Path::new();
                    n.ring(pen.p(e.0, e.1), pen.l(0.1), pen.l(0.055));
                    cv.fill(&Path::of(&circle(pen.p(e.0, e.1), pen.l(0.1))), pal.bg);
                    cv.fill(&n, col);
                }
                cv.fill(
                    &Path::of(&circle(pen.p(0.0, 0.0), pen.l(0.2))),
                    pal.secondary,
                );
                cv.fill(&Path::of(&circle(pen.p(0.0, 0.0), pen.l(0.09))), pal.bg);
            }
            1 => {
                // Honeycomb cluster.
                let n = (c + 2).min(7) as usize;
                let hr = 0.36;
                let d = hr * 3f32.sqrt() * 1.06;
                let mut cells: Vec<P> = vec![(0.0, 0.0)];
                let start = rng.below(6);
                for i in 0..6 {
                    let a = -FRAC_PI_2 + PI / 6.0 + (i + start) as f32 * PI / 3.0;
                    cells.push(polar((0.0, 0.0), d, a));
                }
                let cols = [pal.primary, pal.secondary, pal.accent];
                for (i, &cc) in cells.iter().take(n).enumerate() {
                    let pts = rounded(
                        &ngon(pen.p(cc.0, cc.1), pen.l(hr), 6, -FRAC_PI_2),
                        pen.l(0.06),
                    );
                    if i % 3 == 2 {
                        let mut p = Path::new();
                        p.add(&pts);
                        p.hole(&rounded(
                            &ngon(pen.p(cc.0, cc.1), pen.l(hr * 0.62), 6, -FRAC_PI_2),
                            pen.l(0.04),
                        ));
                        cv.fill(&p, cols[i % 3]);
                    } else {
                        cv.fill(&Path::of(&pts), cols[i % 3]);
                    }
                }
                if c >= 4 {
                    let on = if contrast(pal.bg, pal.primary) >= 2.0 {
                        pal.bg
                    } else {
                        pal.on_primary
                    };
                    draw_motif(cv, pen.sub(0.0, 0.0, hr * 0.5), self.industry, on);
                } else if c == 3 {
                    cv.fill(&Path::of(&circle(pen.p(0.0, 0.0), pen.l(0.1))), pal.bg);
                }
            }
            _ => {
                // Microchip with pins around a monogram.
                let s = 0.62;
                let pins = (c / 2 + 2) as usize;
                let mut p = Path::new();
                for i in 0..pins {
                    let t = -s * 0.7 + 1.4 * s * (i as f32 + 0.5) / pins as f32;
                    let (a, b) = (s + 0.08, 0.95);
                    p.line(pen.p(t, -a), pen.p(t, -b), pen.l(0.08));
                    p.line(pen.p(t, a), pen.p(t, b), pen.l(0.08));
                    p.line(pen.p(-a, t), pen.p(-b, t), pen.l(0.08));
                    p.line(pen.p(a, t), pen.p(b, t), pen.l(0.08));
                }
                cv.fill(&p, pal.secondary);
                cv.fill(&Path::of(&pen.pts(&rrect(-s, -s, s, s, 0.14))), pal.primary);
                if c >= 3 {
                    let mut dot = Path::new();
                    dot.add(&circle(pen.p(-s + 0.14, -s + 0.14), pen.l(0.05)));
                    cv.fill(&dot, pal.on_primary);
                }
                self.mark(cv, pen, (0.0, 0.0), s * 0.62, pal.on_primary);
            }
        }
    }

    /// Leaf outline from base to tip (pixels): two cubic arcs.
    fn leaf(base: P, tip: P, width: f32) -> Vec<P> {
        let (dx, dy) = (tip.0 - base.0, tip.1 - base.1);
        let (nx, ny) = (-dy * width, dx * width);
        let at = |t: f32, k: f32| (base.0 + dx * t + nx * k, base.1 + dy * t + ny * k);
        let mut pts = vec![base];
        cubic_to(&mut pts, base, at(0.25, 1.0), at(0.75, 0.75), tip);
        cubic_to(&mut pts, tip, at(0.75, -0.75), at(0.25, -1.0), base);
        pts.pop();
        pts
    }

    fn emblem_organic(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
        let pal = &self.palette;
        let c = self.complexity;
        let leaf = |b: P, t: P, w: f32| Self::leaf(pen.p(b.0, b.1), pen.p(t.0, t.1), w);
        match self.family {
            0 | 3 => {
                // A leaf with midrib and veins, maybe a companion leaf.
                let tilt = rng.range(0.35, 0.6) * if self.family == 0 { 1.0 } else { -1.0 };
                let base = polar((0.0, 0.0), 0.95, FRAC_PI_2 + tilt);
                let tip = polar((0.0, 0.0), 0.95, -FRAC_PI_2 + tilt);
                if c >= 3 {
                    let b2 = (base.0 * 0.9, base.1);
                    let t2 = polar(b2, 1.25, -FRAC_PI_2 + tilt - 1.0 * tilt.signum());
                    cv.fill(&Path::of(&leaf(b2, t2, 0.34)), pal.secondary);
                }
                cv.fill(&Path::of(&leaf(base, tip, 0.36)), pal.primary);
                let mut veins = Path::new();
                let lerp = |t: f32| (base.0 + (tip.0 - base.0) * t, base.1 + (tip.1 - base.1) * t);
                let (m0, m1) = (lerp(0.0), lerp(0.82));
                veins.line(pen.p(m0.0, m0.1), pen.p(m1.0, m1.1), pen.l(0.05));
                let along = norm((tip.0 - base.0, tip.1 - base.1));
                let pairs = c.saturating_sub(1).min(3);
                for i in 0..pairs {
                    let t = 0.3 + 0.17 * i as f32;
                    let p = lerp(t);
                    for side in [-1.0f32, 1.0] {
                        let dir = (
                            along.0 * 0.7 + side * -along.1 * 0.7,
                            along.1 * 0.7 + side * along.0 * 0.7,
                        );
                        let len = 0.38 * (1.0 - 0.5 * (t - 0.3));
                        let q = (p.0 + dir.0 * len, p.1 + dir.1 * len);
                        veins.line(pen.p(p.0, p.1), pen.p(q.0, q.1), pen.l(0.035));
                    }
                }
                cv.fill(&veins, pal.bg);
                // Stem.
                let mut stem = Path::new();
                let s1 = (base.0 - along.0 * 0.12, base.1 - along.1 * 0.12);
                stem.line(pen.p(base.0, base.1), pen.p(s1.0, s1.1), pen.l(0.07));
                cv.fill(&stem, pal.primary);
            }
            1 => {
                // Rosette of translucent petals.
                let n = (c + 4) as usize;
                let rot = rng.range(0.0, TAU);
                let cols = [pal.primary, pal.secondary];
                for i in 0..n {
                    let a = rot + TAU * i as f32 / n as f32;
                    let tip = polar((0.0, 0.0), 1.0, a);
                    let petal = leaf((0.0, 0.0), tip, 0.24 + 0.6 / n as f32);
                    cv.fill_alpha(&Path::of(&petal), cols[i % 2], 0.82);
                }
                cv.fill(&Path::of(&circle(pen.p(0.0, 0.0), pen.l(0.22))), pal.bg);
                cv.fill(&Path::of(&circle(pen.p(0.0, 0.0), pen.l(0.15))), pal.accent);
            }
            _ => {
                // Sprout in a soft disc.
                let disc = hsl_map(pal.primary, |h, s, _| {
                    (h, s * 0.5, if pal.dark { 0.2 } else { 0.92 })
                });
                cv.fill(&Path::of(&circle(pen.p(0.0, 0.0), pen.l(1.0))), disc);
                let mut stem = Path::new();
                let mut pts = vec![pen.p(0.0, 0.7)];
                cubic_to(
                    &mut pts,
                    pen.p(0.0, 0.7),
                    pen.p(0.05, 0.35),
                    pen.p(-0.05, 0.1),
                    pen.p(0.0, -0.25),
                );
                stem.polyline(&pts, pen.l(0.08), false);
                cv.fill(&stem, pal.primary);
                cv.fill(
                    &Path::of(&leaf((0.0, 0.05), (-0.62, -0.42), 0.38)),
                    pal.primary,
                );
                cv.fill(
                    &Path::of(&leaf((0.0, -0.1), (0.6, -0.62), 0.38)),
                    pal.secondary,
                );
                if c >= 3 {
                    cv.fill(
                        &Path::of(&leaf((0.0, -0.2), (0.0, -0.78), 0.32)),
                        pal.accent,
                    );
                }
                if c >= 2 {
                    let mut ground = Path::new();
                    ground.arc(
                        pen.p(0.0, 1.55),
                        pen.l(0.9),
                        -PI * 0.72,
                        -PI * 0.28,
                        pen.l(0.07),
                        true,
                    );
                    cv.fill(&ground, pal.primary);
                }
            }
        }
    }

    fn emblem_vintage(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
        let pal = &self.palette;
        let c = self.complexity;
        let o = pen.p(0.0, 0.0);
        // Outer body: circle, seal or octagon.
        let body = match self.family {
            1 => rounded(&star(o, pen.l(1.0), pen.l(0.93), 24, 0.0), pen.l(0.02)),
            2 => rounded(&ngon(o, pen.l(1.0), 8, PI / 8.0), pen.l(0.08)),
            _ => circle(o, pen.l(1.0)),
        };
        cv.fill(&Path::of(&body), pal.primary);
        let mut thin = Path::new();
        thin.ring(o, pen.l(0.88), pen.l(0.025));
        cv.fill(&thin, pal.bg);
        cv.fill(&Path::of(&circle(o, pen.l(0.66))), pal.bg);
        let mut inner = Path::new();
        inner.ring(o, pen.l(0.6), pen.l(0.022));
        cv.fill(&inner, pal.primary);
        // Stars in the band.
        let stars: &[f32] = match c {
            1 => &[],
            2 => &[0.0, PI],
            3 => &[0.0, PI, FRAC_PI_2],
            4 => &[0.0, PI, FRAC_PI_2 - 0.35, FRAC_PI_2, FRAC_PI_2 + 0.35],
            _ => &[
                0.0,
                PI,
                FRAC_PI_2 - 0.35,
                FRAC_PI_2,
                FRAC_PI_2 + 0.35,
                -FRAC_PI_2 - 0.3,
                -FRAC_PI_2,
                -FRAC_PI_2 + 0.3,
            ],
        };
        for &a in stars {
            let p = polar((0.0, 0.0), 0.765, a);
            let sr = if (a - FRAC_PI_2).abs() < 0.01 || (a + FRAC_PI_2).abs() < 0.01 {
                0.085
            } else {
                0.07
            };
            cv.fill(
                &Path::of(&star(
                    pen.p(p.0, p.1),
                    pen.l(sr),
                    pen.l(sr * 0.42),
                    5,
                    -FRAC_PI_2,
                )),
                pal.bg,
            );
        }
        if c >= 4 {
            // Beaded dots in the remaining band arcs.
            let mut dots = Path::new();
            for i in 0..36 {
                let a = TAU * i as f32 / 36.0;
                let near = stars
                    .iter()
                    .any(|&s| hue_distance(a.to_degrees(), s.to_degrees()) < 14.0);
                if !near {
                    dots.add(&circle(
                        pen.p(0.765 * a.cos(), 0.765 * a.sin()),
                        pen.l(0.022),
                    ));
                }
            }
            cv.fill(&dots, pal.bg);
        }
        let centre_motif = self.monogram.is_none() || (c >= 3 && rng.chance(0.5));
        if centre_motif {
            draw_motif(cv, pen.sub(0.0, 0.0, 0.34), self.industry, pal.primary);
        } else {
            self.mark(cv, pen, (0.0, 0.0), 0.42, pal.primary);
        }
    }

    fn emblem_playful(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
        let pal = &self.palette;
        let c = self.complexity;
        let cols = [pal.primary, pal.secondary, pal.accent];
        match self.family {
            0 | 3 => {
                // Overlapping bubbles with highlights.
                let n = (c + 1).clamp(2, 5) as usize;
                let rot = rng.range(0.0, TAU);
                let mut bubbles = Vec::new();
                for i in 0..n {
                    let a = rot + TAU * i as f32 / n as f32;
                    let r = 0.5 - 0.04 * n as f32 + rng.range(-0.05, 0.08);
                    let off = 0.9 - r;
                    let cc = polar((0.0, 0.0), off * 0.85, a);
                    bubbles.push((cc, r, cols[i % 3]));
                }
                for &(cc, r, col) in &bubbles {
                    cv.fill_alpha(&Path::of(&circle(pen.p(cc.0, cc.1), pen.l(r))), col, 0.9);
                    let hl = (cc.0 - r * 0.38, cc.1 - r * 0.38);
                    let e = ellipse(
                        pen.p(hl.0, hl.1),
                        pen.l(r * 0.2),
                        pen.l(r * 0.12),
                        -PI / 4.0,
                    );
                    cv.fill_alpha(&Path::of(&e), hex(0xFFFFFF), 0.55);
                }
            }
            1 => {
                // Wobbly blob with a shadow and a monogram.
                let ph = rng.range(0.0, TAU);
                let lobes = 3 + (c % 3) as usize;
                let blob = |cx: f32, cy: f32, r: f32| -> Vec<P> {
                    let n = 180;
                    (0..n)
                        .map(|i| {
                            let t = TAU * i as f32 / n as f32;
                            let rr = r
                                * (1.0
                                    + 0.07 * (lobes as f32 * t + ph).sin()
                                    + 0.03 * (2.0 * t - ph).sin());
                            pen.p(cx + rr * t.cos(), cy + rr * t.sin())
                        })
                        .collect()
                };
                cv.fill(&Path::of(&blob(0.08, 0.08, 0.86)), pal.secondary);
                cv.fill(&Path::of(&blob(-0.04, -0.04, 0.86)), pal.primary);
                self.mark(cv, pen, (-0.04, -0.02), 0.5, pal.on_primary);
            }
            _ => {
                // A friendly face.
                cv.fill(
                    &Path::of(&rounded(
                        &pen.pts(&ngon((0.0, 0.0), 1.0, 4, PI / 4.0)),
                        pen.l(0.45),
                    )),
                    pal.primary,
                );
                let eye = if c >= 3 { 0.11 } else { 0.09 };
                for x in [-0.3f32, 0.3] {
                    cv.fill(
                        &Path::of(&ellipse(
                            pen.p(x, -0.15),
                            pen.l(eye),
                            pen.l(eye * 1.35),
                            0.0,
                        )),
                        pal.on_primary,
                    );
                }
                let mut smile = Path::new();
                smile.arc(
                    pen.p(0.0, 0.02),
                    pen.l(0.36),
                    PI * 0.2,
                    PI * 0.8,
                    pen.l(0.09),
                    true,
                );
                cv.fill(&smile, pal.on_primary);
                if c >= 2 {
                    for x in [-0.52f32, 0.52] {
                        cv.fill_alpha(
                            &Path::of(&ellipse(pen.p(x, 0.16), pen.l(0.1), pen.l(0.06), 0.0)),
                            pal.secondary,
                            0.85,
                        );
                    }
                }
                if c >= 4 {
                    cv.fill(
                        &Path::of(&star(
                            pen.p(0.72, -0.72),
                            pen.l(0.2),
                            pen.l(0.09),
                            5,
                            -FRAC_PI_2,
                        )),
                        pal.accent,
                    );
                }
            }
        }
    }

    fn emblem_corporate(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
        let pal = &self.palette;
        let c = self.complexity;
        match self.family {
            0 | 3 => {
                // Shield.
                let shield = |s: f32| -> Vec<P> {
                    let q = |x: f32, y: f32| pen.p(x * s, y * s);
                    let mut pts = vec![q(-0.82, -0.9), q(0.82, -0.9), q(0.82, 0.05)];
                    cubic_to(
                        &mut pts,
                        q(0.82, 0.05),
                        q(0.8, 0.55),
                        q(0.4, 0.78),
                        q(0.0, 0.98),
                    );
                    cubic_to(
                        &mut pts,
                        q(0.0, 0.98),
                        q(-0.4, 0.78),
                        q(-0.8, 0.55),
                        q(-0.82, 0.05),
                    );
                    pts.pop();
                    pts
                };
                let outer = shield(1.0);
                cv.fill(&Path::of(&outer), pal.primary);
                if c >= 2 {
                    let mut p = Path::new();
                    p.add(&shield(0.86));
                    p.hole(&shield(0.8));
                    cv.fill(&p, self.trim());
                }
                if c >= 4 {
                    let band = Path::of(&pen.pts(&[
                        (-1.0, -1.0),
                        (1.0, -1.0),
                        (1.0, -0.52),
                        (-1.0, -0.52),
                    ]));
                    cv.fill_intersection(&Path::of(&shield(0.74)), &band, pal.secondary);
                }
                let cy = if c >= 4 { 0.12 } else { 0.0 };
                self.mark(cv, pen, (0.0, cy), 0.46, pal.on_primary);
            }
            1 => {
                // Rounded square with a clipped diagonal accent.
                let sq = Path::of(&pen.pts(&rrect(-0.9, -0.9, 0.9, 0.9, 0.22)));
                cv.fill(&sq, pal.primary);
                if c >= 2 {
                    let k = rng.range(0.1, 0.35);
                    let tri = Path::of(&pen.pts(&[(1.0, k), (1.0, 1.0), (k, 1.0)]));
                    cv.fill_intersection(&sq, &tri, pal.secondary);
                }
                if c >= 4 {
                    let mut bar = Path::new();
                    bar.line(pen.p(-0.5, 0.62), pen.p(0.1, 0.62), pen.l(0.07));
                    cv.fill(&bar, pal.on_primary);
                }
                self.mark(cv, pen, (0.0, -0.04), 0.52, pal.on_primary);
            }
            _ => {
                // Disc with an orbiting swoosh.
                cv.fill(
                    &Path::of(&circle(pen.p(0.0, 0.0), pen.l(0.78))),
                    pal.primary,
                );
                let mut sw = Path::new();
                let a0 = rng.range(-0.2, 0.3);
                sw.arc(
                    pen.p(0.0, 0.0),
                    pen.l(0.91),
                    PI * 0.55 + a0,
                    PI * 1.55 + a0,
                    pen.l(0.09),
                    true,
                );
                cv.fill(&sw, pal.secondary);
                if c >= 3 {
                    let p = polar((0.0, 0.0), 0.91, PI * 1.75 + a0);
                    cv.fill(&Path::of(&circle(pen.p(p.0, p.1), pen.l(0.07))), pal.accent);
                }
                self.mark(cv, pen, (0.0, 0.0), 0.46, pal.on_primary);
            }
        }
    }

    fn emblem_modern(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
        let pal = &self.palette;
        let c = self.complexity;
        match self.family {
            0 | 3 => {
                // Overlapping circles with flat overlap colours.
                let three = c >= 3;
                let (r, centres): (f32, Vec<P>) = if three {
                    (0.55, vec![(0.0, -0.34), (-0.38, 0.3), (0.38, 0.3)])
                } else {
                    (0.62, vec![(-0.36, 0.0), (0.36, 0.0)])
                };
                let cols = [pal.primary, pal.secondary, pal.accent];
                let paths: Vec<Path> = centres
                    .iter()
                    .map(|&cc| Path::of(&circle(pen.p(cc.0, cc.1), pen.l(r))))
                    .collect();
                for (p, col) in paths.iter().zip(cols) {
                    cv.fill(p, col);
                }
                // Overlaps take a deeper shade of the darker colour involved.
                let deeper = |a: Col, b: Col| {
                    let d = if luminance(a) < luminance(b) { a } else { b };
                    hsl_map(d, |h, s, l| (h, s, l * 0.72))
                };
                cv.fill_intersection(&paths[0], &paths[1], deeper(cols[0], cols[1]));
                if three {
                    cv.fill_intersection(&paths[1], &paths[2], deeper(cols[1], cols[2]));
                    cv.fill_intersection(&paths[0], &paths[2], deeper(cols[0], cols[2]));
                }
                if c >= 4 {
                    cv.fill(
                        &Path::of(&circle(
                            pen.p(0.0, if three { 0.09 } else { 0.0 }),
                            pen.l(0.09),
                        )),
                        pal.bg,
                    );
                }
            }
            1 => {
                // Concentric arcs with round caps around a dot.
                let k = (c / 2 + 2) as usize;
                let cols = [pal.primary, pal.secondary, pal.accent];
                let w = 0.5 / k as f32;
                let rot = rng.range(0.0, TAU);
                for i in 0..k {
                    let r = 1.0 - w * 0.5 - i as f32 * w * 1.55;
                    let span = PI * (1.5 - 0.22 * i as f32);
                    let a0 = rot + i as f32 * 1.3;
                    let mut p = Path::new();
                    p.arc(pen.p(0.0, 0.0), pen.l(r), a0, a0 + span, pen.l(w), true);
                    cv.fill(&p, cols[i % 3]);
                }
                let inner = 1.0 - w * 0.5 - k as f32 * w * 1.55;
                cv.fill(
                    &Path::of(&circle(pen.p(0.0, 0.0), pen.l(inner.max(0.12)))),
                    pal.primary,
                );
            }
            _ => {
                // Four leaf-shaped tiles pointing at (or spinning around) the centre.
                let g = 0.07;
                let cols = [
                    pal.primary,
                    pal.secondary,
                    pal.accent,
                    hsl_map(pal.primary, |h, s, l| (h, s, (l + 0.18).min(0.85))),
                ];
                let spin = rng.chance(0.5);
                let start = rng.below(4) as usize;
                let tiles = if c <= 2 { 3 } else { 4 };
                for k in 0..4 {
                    let (sx, sy) = ([-1.0f32, 1.0, 1.0, -1.0][k], [-1.0f32, -1.0, 1.0, 1.0][k]);
                    let (x0, x1) = if sx < 0.0 { (-0.92, -g) } else { (g, 0.92) };
                    let (y0, y1) = if sy < 0.0 { (-0.92, -g) } else { (g, 0.92) };
                    // Corner order: top-left, top-right, bottom-right, bottom-left.
                    let outer = [(-1.0, -1.0), (1.0, -1.0), (1.0, 1.0), (-1.0, 1.0)]
                        .iter()
                        .position(|&(cx, cy)| cx == sx && cy == sy)
                        .unwrap_or(0);
                    let big = if spin { (outer + 1) % 4 } else { outer };
                    let mut radii = [0.06f32; 4];
                    radii[big] = 0.78;
                    radii[(big + 2) % 4] = 0.78;
                    let slot = (k + start) % 4;
                    if slot >= tiles {
                        let (cx, cy) = ((x0 + x1) / 2.0, (y0 + y1) / 2.0);
                        cv.fill(&Path::of(&circle(pen.p(cx, cy), pen.l(0.2))), pal.accent);
                        continue;
                    }
                    let pts = rrect4(pen.p(x0, y0), pen.p(x1, y1), radii.map(|r| pen.l(r)));
                    cv.fill(&Path::of(&pts), cols[slot]);
                }
                if c >= 5 {
                    cv.fill(&Path::of(&circle(pen.p(0.0, 0.0), pen.l(0.16))), pal.bg);
                    cv.fill(&Path::of(&circle(pen.p(0.0, 0.0), pen.l(0.09))), pal.text);
                }
            }
        }
    }
}

/// Industry pictogram in a [-1, 1] box, single colour.
fn draw_motif(cv: &mut Canvas, pen: Pen, industry: Industry, col: Col) {
    let mut p = Path::new();
    match industry {
        Industry::Healthcare => {
            p.add(&pen.pts(&rrect(-0.3, -0.9, 0.3, 0.9, 0.12)));
            p.add(&pen.pts(&rrect(-0.9, -0.3, 0.9, 0.3, 0.12)));
        }
        Industry::Finance => {
            for (i, hgt) in [0.7f32, 1.15, 1.65].iter().enumerate() {
                let x = -0.85 + i as f32 * 0.6;
                p.add(&pen.pts(&rrect(x, 0.85 - hgt, x + 0.44, 0.85, 0.06)));
            }
        }
        Industry::Food => {
            let mut bowl = arc_pts(pen.p(0.0, 0.05), pen.l(0.9), 0.0, PI);
            bowl.push(pen.p(-0.9, 0.05));
            p.add(&bowl);
            p.add(&pen.pts(&rrect(-1.0, -0.05, 1.0, 0.1, 0.05)));
            for x in [-0.35f32, 0.0, 0.35] {
                let mut s = vec![pen.p(x, -0.2)];
                cubic_to(
                    &mut s,
                    pen.p(x, -0.2),
                    pen.p(x + 0.15, -0.4),
                    pen.p(x - 0.15, -0.6),
                    pen.p(x, -0.85),
                );
                p.polyline(&s, pen.l(0.1), false);
            }
        }
        Industry::Travel => {
            p.add(&star(
                pen.p(0.0, 0.0),
                pen.l(1.0),
                pen.l(0.2),
                4,
                -FRAC_PI_2,
            ));
            p.add(&star(
                pen.p(0.0, 0.0),
                pen.l(0.58),
                pen.l(0.16),
                4,
                -FRAC_PI_2 + PI / 4.0,
            ));
        }
        Industry::Education => {
            for side in [-1.0f32, 1.0] {
                let mut page = vec![pen.p(0.06 * side, -0.45)];
                cubic_to(
                    &mut page,
                    pen.p(0.06 * side, -0.45),
                    pen.p(0.3 * side, -0.62),
                    pen.p(0.7 * side, -0.62),
                    pen.p(0.95 * side, -0.5),
                );
                page.push(pen.p(0.95 * side, 0.62));
                cubic_to(
                    &mut page,
                    pen.p(0.95 * side, 0.62),
                    pen.p(0.7 * side, 0.5),
                    pen.p(0.3 * side, 0.5),
                    pen.p(0.06 * side, 0.7),
                );
                p.add(&page);
            }
        }
        Industry::Entertainment => {
            let tri = [(-0.55, -0.85), (0.85, 0.0), (-0.55, 0.85)];
            p.add(&rounded(&pen.pts(&tri), pen.l(0.18)));
        }
        Industry::Retail => {
            p.add(&pen.pts(&rrect(-0.75, -0.3, 0.75, 0.95, 0.12)));
            p.arc(pen.p(0.0, -0.3), pen.l(0.36), PI, TAU, pen.l(0.13), true);
        }
        Industry::Technology => {
            let w = pen.l(0.17);
            p.polyline(
                &[pen.p(-0.4, -0.55), pen.p(-0.92, 0.0), pen.p(-0.4, 0.55)],
                w,
                false,
            );
            p.polyline(
                &[pen.p(0.4, -0.55), pen.p(0.92, 0.0), pen.p(0.4, 0.55)],
                w,
                false,
            );
            p.line(pen.p(0.14, -0.7), pen.p(-0.14, 0.7), pen.l(0.14));
        }
        Industry::Other => {
            p.add(&star(
                pen.p(0.0, 0.0),
                pen.l(1.0),
                pen.l(0.3),
                4,
                -FRAC_PI_2,
            ));
        }
    }
    cv.fill(&p, col);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec<'a>(
        prompt: &'a str,
        style: &'a str,
        industry: &'a str,
        w: u32,
        h: u32,
    ) -> LogoSpec<'a> {
        LogoSpec {
            prompt,
            style,
            industry,
            color_scheme: None,
            typography: None,
            mood: None,
            complexity: 3,
            negative_prompt: None,
            seed: 7,
            width: w,
            height: h,
        }
    }

    const STYLES: [&str; 8] = [
        "minimal",
        "modern",
        "vintage",
        "playful",
        "corporate",
        "tech",
        "organic",
        "geometric",
    ];

    fn count(
        img: &RgbImage,
        region: (u32, u32, u32, u32),
        pred: impl Fn([u8; 3]) -> bool,
    ) -> usize {
        let (x0, y0, x1, y1) = region;
        (y0..y1)
            .flat_map(|y| (x0..x1).map(move |x| (x, y)))
            .filter(|&(x, y)| pred(img.get_pixel(x, y).0))
            .count()
    }

    fn near(a: [u8; 3], b: [u8; 3], tol: i32) -> bool {
        (0..3).all(|k| (i32::from(a[k]) - i32::from(b[k])).abs() <= tol)
    }

    #[test]
    fn exact_dimensions_for_all_endpoint_sizes() {
        for (w, h) in [
            (256, 256),
            (512, 512),
            (1024, 1024),
            (1024, 768),
            (1024, 576),
            (768, 1024),
            (576, 1024),
        ] {
            let img = render(&spec(
                "Acme Rockets, reusable launch vehicles",
                "tech",
                "technology",
                w,
                h,
            ));
            assert_eq!(img.dimensions(), (w, h));
        }
        assert_eq!(
            render(&spec("Acme", "modern", "retail", 0, 64)).dimensions(),
            (0, 64)
        );
        assert_eq!(
            render(&spec("Acme", "modern", "retail", 3, 2)).dimensions(),
            (3, 2)
        );
    }

    #[test]
    fn deterministic_and_seed_sensitive() {
        let s = spec("Summit Capital", "corporate", "finance", 192, 192);
        let a = render(&s);
        assert_eq!(a, render(&s));
        let differing = (1..4)
            .filter(|&seed| render(&LogoSpec { seed, ..s.clone() }) != a)
            .count();
        assert_eq!(differing, 3, "every other seed gives a different logo");
    }

    #[test]
    fn styles_differ() {
        let imgs: Vec<RgbImage> = STYLES
            .iter()
            .map(|st| render(&spec("Acme Rockets", st, "technology", 160, 160)))
            .collect();
        for i in 0..imgs.len() {
            for j in i + 1..imgs.len() {
                assert_ne!(imgs[i], imgs[j], "{} vs {}", STYLES[i], STYLES[j]);
            }
        }
    }

    #[test]
    fn emblem_fills_the_centre_and_margins_stay_clear() {
        for (k, st) in STYLES.iter().enumerate() {
            for (w, h) in [(160, 160), (240, 135), (135, 240)] {
                let s = LogoSpec {
                    seed: k as u64,
                    ..spec("Green Leaf Cafe, fresh and local", st, "food", w, h)
                };
                let img = render(&s);
                let bg = img.get_pixel(0, 0).0;
                let inked = |p: [u8; 3]| !near(p, bg, 6);
                // Some of the mark sits in the central band of the picture.
                let centre = (w / 4, h / 4, w * 3 / 4, h * 3 / 4);
                let area = ((w / 2) * (h / 2)) as usize;
                assert!(
                    count(&img, centre, inked) * 20 > area,
                    "{st} {w}x{h}: centre nearly empty"
                );
                // Nothing touches the outer 3 % of the canvas.
                let m = (w.min(h) * 3 / 100).max(2);
                let border = count(&img, (0, 0, w, h), |_| true)
                    - count(&img, (m, m, w - m, h - m), |_| true);
                let border_ink =
                    count(&img, (0, 0, w, h), inked) - count(&img, (m, m, w - m, h - m), inked);
                assert!(border > 0);
                assert_eq!(border_ink, 0, "{st} {w}x{h}: ink in the margin");
            }
        }
    }

    #[test]
    fn no_text_negative_prompt_removes_lettering() {
        // Portrait forces the stacked layout: the name sits in the lower part.
        let with = spec("Green Leaf Cafe", "organic", "food", 192, 256);
        let without = LogoSpec {
            negative_prompt: Some("no text, no letters"),
            ..with.clone()
        };
        let text = to_u8(Plan::build(&with).palette.text);
        let lower = (0, 256 * 62 / 100, 192, 256);
        let is_text = |p: [u8; 3]| near(p, text, 40);
        let a = count(&render(&with), lower, is_text);
        let b = count(&render(&without), lower, is_text);
        assert!(a > 300, "name should be drawn ({a} text pixels)");
        assert!(
            b * 10 < a,
            "no-text logo still has {b} text pixels (vs {a})"
        );
        assert!(Plan::build(&without).brand.is_none());
    }

    #[test]
    fn red_scheme_gives_red_pixels() {
        let is_red = |p: [u8; 3]| p[0] > 150 && p[1] < 80 && p[2] < 80;
        for seed in 0..4 {
            let s = LogoSpec {
                color_scheme: Some("red"),
                seed,
                ..spec("Redline Motors", "minimal", "technology", 128, 160)
            };
            let all = (0, 0, 128, 160);
            let red = count(&render(&s), all, is_red);
            assert!(red > 128 * 160 / 40, "seed {seed}: only {red} red pixels");
            // The technology palette alone has no such red.
            let plain = render(&LogoSpec {
                color_scheme: None,
                ..s.clone()
            });
            assert_eq!(count(&plain, all, is_red), 0);
        }
    }

    #[test]
    fn negative_colours_are_avoided() {
        for seed in 0..6 {
            let s = LogoSpec {
                seed,
                negative_prompt: Some("no red, no orange"),
                ..spec("Crust", "modern", "food", 64, 64)
            };
            let pal = Plan::build(&s).palette;
            for c in [pal.primary, pal.secondary, pal.accent] {
                let (h, sat, _) = to_hsl(c);
                assert!(
                    sat < 0.2 || (hue_distance(h, 0.0) > 40.0 && hue_distance(h, 24.0) > 40.0),
                    "seed {seed}: hue {h}"
                );
            }
        }
    }

    #[test]
    fn colour_scheme_parsing() {
        assert_eq!(
            parse_colors("navy and gold"),
            vec![hex(0x1B2A4E), hex(0xC9A227)]
        );
        assert_eq!(
            parse_colors("#0a7cff, white"),
            vec![hex(0x0A7CFF), hex(0xFFFFFF)]
        );
        assert_eq!(
            parse_colors("Navy blue with #fff"),
            vec![hex(0x1B2A4E), hex(0xFFFFFF)]
        );
        assert_eq!(parse_colors("no colours here"), Vec::<Col>::new());
        let dark_green = parse_colors("dark green")[0];
        assert!(to_hsl(dark_green).2 < to_hsl(hex(0x2F9E44)).2);
        // "#0a7cff, white": blue marks on a white background.
        let s = LogoSpec {
            color_scheme: Some("#0a7cff, white"),
            ..spec("Bluewave", "tech", "technology", 64, 64)
        };
        let pal = Plan::build(&s).palette;
        assert_eq!(to_u8(pal.bg), [255, 255, 255]);
        assert_eq!(to_u8(pal.primary), [0x0A, 0x7C, 0xFF]);
    }

    #[test]
    fn rasterizer_coverage_matches_area() {
        // Coverage sums to the polygon's exact area, edges included.
        let pts = circle((50.3, 40.7), 20.0);
        let m = rasterize(&Path::of(&pts), 100, 100).expect("inside canvas");
        let area: f32 = m.cov.iter().sum();
        assert!((area - signed_area(&pts).abs()).abs() < 0.05, "area {area}");
        assert!((area - PI * 400.0).abs() < 0.01 * PI * 400.0);
        // A ring's hole really is empty and its band solid.
        let mut r = Path::new();
        r.ring((50.0, 50.0), 30.0, 10.0);
        let m = rasterize(&r, 100, 100).expect("inside canvas");
        assert_eq!(m.at(50, 50), 0.0);
        assert!((m.at(50, 24) - 1.0).abs() < 1e-3);
        let expect = signed_area(&circle((50.0, 50.0), 30.0)).abs()
            - signed_area(&circle((50.0, 50.0), 20.0)).abs();
        let area: f32 = m.cov.iter().sum();
        assert!((area - expect).abs() < 0.1, "ring area {area} vs {expect}");
        // Shapes hanging off the canvas are clipped, not wrapped.
        let m = rasterize(&Path::of(&circle((0.0, 0.0), 10.0)), 100, 100).expect("overlaps");
        let area: f32 = m.cov.iter().sum();
        assert!((area - PI * 25.0).abs() < 1.5, "quarter disc {area}");
    }

    #[test]
    fn brand_extraction() {
        let b = |p: &str| brand_and_tagline(p).0;
        assert_eq!(b("Acme Rockets, reusable launch vehicles"), "Acme Rockets");
        assert_eq!(b("Summit Capital: wealth management"), "Summit Capital");
        assert_eq!(b("Green Leaf Cafe - organic coffee"), "Green Leaf Cafe");
        assert_eq!(b("Green Leaf Cafe — organic coffee"), "Green Leaf Cafe");
        assert_eq!(b("Coca-Cola"), "Coca-Cola");
        assert_eq!(b("A logo for a bakery called Sweet Crumbs"), "Sweet Crumbs");
        assert_eq!(b("logo for \"Blue Owl\" bookstore"), "Blue Owl");
        assert_eq!(
            b("minimalist emblem for Northwind Traders with a wind motif"),
            "Northwind Traders"
        );
        assert_eq!(b("The Daily Grind"), "The Daily Grind");
        assert_eq!(
            b("a bakery that sells fresh bread every morning in the city"),
            "Bakery"
        );
        assert_eq!(b("modern logo for coffee shop"), "coffee shop");
        assert_eq!(apply_case("coffee shop", Case::Title), "Coffee Shop");
        assert_eq!(b("   "), "Brand");
        let long = b("Supercalifragilisticexpialidocious Enterprises Worldwide");
        assert!(
            !long.is_empty() && long.chars().count() <= MAX_BRAND_CHARS,
            "{long}"
        );
        assert!(
            b("International Business Machines Corporation Worldwide")
                .chars()
                .count()
                <= MAX_BRAND_CHARS
        );
        assert_eq!(
            brand_and_tagline("Acme Rockets, reusable launch vehicles")
                .1
                .as_deref(),
            Some("REUSABLE LAUNCH VEHICLES")
        );
        assert_eq!(brand_and_tagline("Acme, minimalist blue logo").1, None);
        assert_eq!(monogram("Acme Rockets", 2), "AR");
        assert_eq!(monogram("the daily grind", 2), "DG");
        assert_eq!(monogram("Acme Rockets", 1), "A");
    }

    #[test]
    fn unusual_names_and_extreme_canvases() {
        // A name the bundled faces cannot draw: emblem only, no empty boxes.
        let cjk = spec("株式会社テスト", "corporate", "finance", 96, 96);
        assert!(Plan::build(&cjk).brand.is_none());
        assert_eq!(render(&cjk).dimensions(), (96, 96));
        let mixed = spec("Café Olé 🚀, crêpes", "playful", "food", 96, 96);
        assert_eq!(Plan::build(&mixed).brand.as_deref(), Some("Café Olé"));
        // Very wide and very tall canvases keep everything inside.
        for (w, h) in [(400, 48), (48, 400)] {
            for st in STYLES {
                let img = render(&spec("Northwind Traders", st, "retail", w, h));
                let bg = img.get_pixel(0, 0).0;
                let inked = |p: [u8; 3]| !near(p, bg, 6);
                let rows = |y0, y1| count(&img, (0, y0, w, y1), inked);
                let cols = |x0, x1| count(&img, (x0, 0, x1, h), inked);
                assert_eq!(
                    rows(0, 1) + rows(h - 1, h) + cols(0, 1) + cols(w - 1, w),
                    0,
                    "{st} {w}x{h}"
                );
                assert!(
                    count(&img, (0, 0, w, h), inked) > 0,
                    "{st} {w}x{h} is blank"
                );
            }
        }
    }

    #[test]
    fn industry_keywords_match_words() {
        assert_eq!(Industry::parse("retail"), Industry::Retail);
        assert_eq!(Industry::parse("AI"), Industry::Technology);
        assert_eq!(Industry::parse("airline travel"), Industry::Travel);
        assert_eq!(Industry::parse("Healthcare"), Industry::Healthcare);
        assert_eq!(Industry::parse("something else"), Industry::Other);
    }
}
