//! Colours: names, palettes by industry, style and mood, and colour math.

use crate::random::Rng;

use super::spec::*;

/// sRGB colour with channels in [0, 1].
pub(super) type Col = [f32; 3];

pub(super) fn hex(v: u32) -> Col {
    [
        ((v >> 16) & 255) as f32 / 255.0,
        ((v >> 8) & 255) as f32 / 255.0,
        (v & 255) as f32 / 255.0,
    ]
}

pub(super) fn mix(a: Col, b: Col, t: f32) -> Col {
    [
        a[0] + (b[0] - a[0]) * t,
        a[1] + (b[1] - a[1]) * t,
        a[2] + (b[2] - a[2]) * t,
    ]
}

pub(super) fn to_hsl(c: Col) -> (f32, f32, f32) {
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

pub(super) fn from_hsl(h: f32, s: f32, l: f32) -> Col {
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
pub(super) fn hsl_map(c: Col, f: impl Fn(f32, f32, f32) -> (f32, f32, f32)) -> Col {
    let (h, s, l) = to_hsl(c);
    let (h, s, l) = f(h, s, l);
    from_hsl(h, s, l)
}

/// WCAG relative luminance.
pub(super) fn luminance(c: Col) -> f32 {
    let lin = |v: f32| {
        if v <= 0.04045 {
            v / 12.92
        } else {
            ((v + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2])
}

pub(super) fn contrast(a: Col, b: Col) -> f32 {
    let (la, lb) = (luminance(a), luminance(b));
    (la.max(lb) + 0.05) / (la.min(lb) + 0.05)
}

/// Moves `c` darker (on light backgrounds) or lighter (on dark ones) until it
/// reaches `ratio` contrast against `bg`, keeping its hue.
pub(super) fn ensure_contrast(c: Col, bg: Col, ratio: f32) -> Col {
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

pub(super) fn hue_distance(a: f32, b: f32) -> f32 {
    let d = (a - b).rem_euclid(360.0);
    d.min(360.0 - d)
}

/// Colour names understood in colour schemes and negative prompts, chosen
/// as pleasant logo-grade versions of each hue rather than the CSS extremes.
pub(super) const COLOR_NAMES: &[(&str, u32)] = &[
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
pub(super) const BASIC_HUES: &[&str] = &[
    "red", "blue", "green", "pink", "yellow", "orange", "purple", "gray", "grey", "white",
];

pub(super) fn lookup_color(word: &str) -> Option<Col> {
    COLOR_NAMES
        .iter()
        .find(|(n, _)| *n == word)
        .map(|&(_, v)| hex(v))
}

pub(super) fn parse_hex(tok: &str) -> Option<Col> {
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
pub(super) fn parse_colors(text: &str) -> Vec<Col> {
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
pub(super) struct Palette {
    pub(super) bg: Col,
    pub(super) primary: Col,
    pub(super) secondary: Col,
    pub(super) accent: Col,
    /// Brand-name colour: high contrast against `bg`.
    pub(super) text: Col,
    /// Tagline colour: quieter than `text`.
    pub(super) muted: Col,
    /// Monograms and motifs drawn on top of `primary`.
    pub(super) on_primary: Col,
    pub(super) dark: bool,
}

/// Whether any word of `text` starts with one of `keys` ("educat" matches
/// "education"); keys of up to three letters must match a whole word, so
/// "retail" does not count as "ai".
pub(super) fn has_keyword(text: &str, keys: &[&str]) -> bool {
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
pub(super) enum Industry {
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
    pub(super) fn parse(s: &str) -> Self {
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
    pub(super) fn palettes(self) -> &'static [[u32; 3]] {
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
pub(super) enum Style {
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
    pub(super) fn parse(s: &str) -> Self {
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
pub(super) enum Mood {
    Professional,
    Friendly,
    Bold,
    Elegant,
    Playful,
    Neutral,
}

impl Mood {
    pub(super) fn parse(s: Option<&str>) -> Self {
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
pub(super) fn build_palette(
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
            let start = rng.below_u32(options.len() as u32) as usize;
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

pub(super) fn desat(c: Col, k: f32) -> Col {
    hsl_map(c, |h, s, l| (h, s * k, l))
}

pub(super) fn vivid(c: Col) -> Col {
    hsl_map(c, |h, s, l| (h, (s * 1.12).min(1.0), l))
}
