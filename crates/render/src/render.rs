//! Procedural renderer behind the offline `local` image provider.
//!
//! Pictures are stylised landscapes: a graded sky with a sun or moon, clouds,
//! stars or nebulae, layered ridges of mountains, hills, dunes, forests or city
//! skylines, and sometimes a sea that mirrors everything above the horizon.
//! Every choice comes from a small deterministic PRNG keyed by the prompt, the
//! seed and the negative prompt, so one spec always yields byte-identical
//! pixels. Words in the prompt steer the scene ("sunset", "ocean", "forest",
//! "city", "snow", colour names, ...); words in the negative prompt remove the
//! elements they name and push the palette away from the colours they name.
//!
//! The image is painted one row at a time straight into the output buffer with
//! only per-column tables as scratch, so memory stays close to the size of the
//! image itself (48 MiB at 4096x4096) and no trigonometry runs per pixel.

use std::f32::consts::TAU;

use crate::random::{Rng, fnv1a, mix64};
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::{ExtendedColorType, ImageEncoder, RgbImage};

/// Visual style requested by the client. `Vivid` is saturated/high-contrast, `Natural` is muted/soft.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenderStyle {
    Vivid,
    Natural,
}

/// What to draw. All fields influence the picture deterministically.
#[derive(Debug, Clone)]
pub struct RenderSpec<'a> {
    pub prompt: &'a str,
    pub negative_prompt: Option<&'a str>,
    pub seed: u64,
    pub style: RenderStyle,
    pub width: u32,
    pub height: u32,
}

/// Renders an RGB image of exactly spec.width x spec.height. Same spec -> byte-identical pixels.
pub fn render(spec: &RenderSpec<'_>) -> RgbImage {
    let mut img = RgbImage::new(spec.width, spec.height);
    if spec.width == 0 || spec.height == 0 {
        return img;
    }
    let scene = Scene::build(spec);
    scene.paint(&mut img);
    img
}

/// Encodes as PNG bytes.
///
/// Uses fast deflate with the Sub filter: rendered pictures are smooth, so
/// this stays compact (no larger than adaptive filtering on the scenes),
/// and one filter per row instead of trying all five keeps encoding cheap. PNG cannot represent an
/// image with a zero dimension; such an image yields an empty vector.
pub fn encode_png(img: &RgbImage) -> Vec<u8> {
    encode_png_raw(
        img.as_raw(),
        img.width(),
        img.height(),
        ExtendedColorType::Rgb8,
    )
}

/// [`encode_png`] of raw pixels in `color` (every PNG the renderers write).
pub(crate) fn encode_png_raw(
    raw: &[u8],
    width: u32,
    height: u32,
    color: ExtendedColorType,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() / 3 + 1024);
    let encoder = PngEncoder::new_with_quality(&mut out, CompressionType::Fast, FilterType::Sub);
    match encoder.write_image(raw, width, height, color) {
        Ok(()) => out,
        Err(_) => Vec::new(),
    }
}

// ---------------------------------------------------------------------------
// Hashing and randomness
// ---------------------------------------------------------------------------

/// Hash of two integers and a key, as a float in [0, 1).
fn hash01(a: u32, b: u32, key: u64) -> f32 {
    let h = mix64(key ^ (u64::from(a) << 32 | u64::from(b)));
    (h >> 40) as f32 * (1.0 / 16_777_216.0)
}

// ---------------------------------------------------------------------------
// Colour helpers
// ---------------------------------------------------------------------------

type Rgb = [f32; 3];

fn hsl(h: f32, s: f32, l: f32) -> Rgb {
    let h = h.rem_euclid(360.0) / 60.0;
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let x = c * (1.0 - (h % 2.0 - 1.0).abs());
    let m = l - c / 2.0;
    let (r, g, b) = match h as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    [r + m, g + m, b + m]
}

fn mix(a: Rgb, b: Rgb, t: f32) -> Rgb {
    [
        a[0] + (b[0] - a[0]) * t,
        a[1] + (b[1] - a[1]) * t,
        a[2] + (b[2] - a[2]) * t,
    ]
}

fn scale(a: Rgb, k: f32) -> Rgb {
    [a[0] * k, a[1] * k, a[2] * k]
}

fn add_scaled(acc: &mut Rgb, c: Rgb, k: f32) {
    acc[0] += c[0] * k;
    acc[1] += c[1] * k;
    acc[2] += c[2] * k;
}

fn blend(acc: &mut Rgb, c: Rgb, a: f32) {
    *acc = mix(*acc, c, a);
}

fn lerp(a: f32, b: f32, t: f32) -> f32 {
    a + (b - a) * t
}

fn smooth(t: f32) -> f32 {
    let t = t.clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}

/// Signed shortest angular difference `a - b`, in [-180, 180).
fn hue_diff(a: f32, b: f32) -> f32 {
    (a - b + 540.0).rem_euclid(360.0) - 180.0
}

/// Moves hue `from` towards hue `to` along the shorter arc.
fn hue_toward(from: f32, to: f32, t: f32) -> f32 {
    from + hue_diff(to, from) * t
}

/// Like [`hue_toward`], but distant hues pull less: a sunset tinted "blue"
/// should stay a sunset instead of sliding through green.
fn hue_pull(from: f32, to: f32, t: f32) -> f32 {
    let d = hue_diff(to, from);
    from + d * t * (1.0 - d.abs() / 150.0).clamp(0.0, 1.0)
}

/// Style grading, applied to palette colours rather than pixels: the scene is
/// built from linear blends of palette colours, so grading the palette is
/// equivalent and costs nothing per pixel.
fn grade(c: Rgb, style: RenderStyle) -> Rgb {
    let (sat, contrast, warm) = match style {
        RenderStyle::Vivid => (1.22, 1.08, 0.0),
        RenderStyle::Natural => (0.68, 0.88, 0.018),
    };
    let lum = 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
    let f = |v: f32, w: f32| 0.5 + ((lum + (v - lum) * sat) - 0.5) * contrast + w;
    [f(c[0], warm), f(c[1], warm * 0.3), f(c[2], -warm)]
}

/// Grading for additive light (glows, stars, glitter): saturation only.
fn grade_light(c: Rgb, style: RenderStyle) -> Rgb {
    let sat = match style {
        RenderStyle::Vivid => 1.15,
        RenderStyle::Natural => 0.7,
    };
    let lum = 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
    [
        lum + (c[0] - lum) * sat,
        lum + (c[1] - lum) * sat,
        lum + (c[2] - lum) * sat,
    ]
}

// ---------------------------------------------------------------------------
// Prompt analysis
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Time {
    Day,
    Golden,
    Dusk,
    Night,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Land {
    Mountains,
    Hills,
    Dunes,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cue {
    Hue(f32),
    Tod(Time),
    Terrain(Land),
    Water,
    Forest,
    City,
    Snow,
    Space,
    Sun,
    Moon,
    Clouds,
    Stars,
}

fn word_cues(word: &str) -> &'static [Cue] {
    match word {
        "red" | "crimson" | "scarlet" | "ruby" | "blood" | "cherry" => &[Cue::Hue(0.0)],
        "orange" | "amber" | "copper" | "rust" | "tangerine" => &[Cue::Hue(28.0)],
        "yellow" | "gold" | "golden" | "lemon" | "honey" | "sunflower" => &[Cue::Hue(48.0)],
        "lime" | "olive" | "chartreuse" => &[Cue::Hue(80.0)],
        "green" | "emerald" | "jade" | "grass" | "leaf" | "leaves" | "moss" | "spring" => {
            &[Cue::Hue(125.0)]
        }
        "teal" | "turquoise" | "cyan" | "aqua" | "mint" => &[Cue::Hue(175.0)],
        "blue" | "azure" | "sapphire" | "cobalt" | "navy" | "cerulean" => &[Cue::Hue(215.0)],
        "indigo" => &[Cue::Hue(245.0)],
        "purple" | "violet" | "lavender" | "amethyst" | "lilac" | "plum" => &[Cue::Hue(275.0)],
        "magenta" | "fuchsia" => &[Cue::Hue(305.0)],
        "pink" | "rose" | "rosy" | "coral" | "peach" | "blossom" | "sakura" | "flamingo" => {
            &[Cue::Hue(340.0)]
        }
        "fire" | "lava" | "inferno" | "flame" | "flames" | "volcano" | "volcanic" => {
            &[Cue::Hue(10.0)]
        }
        "autumn" | "fall" => &[Cue::Hue(25.0)],
        "sunset" | "sundown" | "sunrise" | "dawn" | "evening" | "sunsets" => {
            &[Cue::Tod(Time::Golden), Cue::Hue(22.0)]
        }
        "dusk" | "twilight" | "gloaming" => &[Cue::Tod(Time::Dusk), Cue::Hue(285.0)],
        "night" | "midnight" | "nighttime" | "nocturnal" | "dark" => &[Cue::Tod(Time::Night)],
        "moon" | "moonlight" | "moonlit" | "lunar" => &[Cue::Tod(Time::Night), Cue::Moon],
        "star" | "starry" | "starlight" | "starlit" | "constellation" => {
            &[Cue::Tod(Time::Night), Cue::Stars]
        }
        "space" | "galaxy" | "cosmos" | "cosmic" | "nebula" | "universe" | "planet"
        | "astronaut" => &[Cue::Tod(Time::Night), Cue::Space, Cue::Stars],
        "day" | "noon" | "sunny" | "morning" | "daylight" | "daytime" | "summer" => {
            &[Cue::Tod(Time::Day)]
        }
        "sun" | "sunshine" | "sunlight" | "sunlit" => &[Cue::Sun],
        "cloud" | "cloudy" | "overcast" | "storm" | "stormy" => &[Cue::Clouds],
        "ocean" | "sea" | "seascape" | "marine" | "nautical" => &[Cue::Water, Cue::Hue(205.0)],
        "beach" | "coast" | "coastal" | "shore" | "lake" | "bay" | "harbor" | "harbour"
        | "island" | "water" | "river" | "wave" | "reflection" | "pond" => &[Cue::Water],
        "tropical" | "lagoon" => &[Cue::Water, Cue::Hue(170.0)],
        "forest" | "wood" | "woods" | "woodland" | "jungle" | "tree" | "pine" | "taiga" | "fir" => {
            &[Cue::Forest, Cue::Hue(130.0)]
        }
        "city" | "skyline" | "town" | "cityscape" | "building" | "urban" | "metropolis"
        | "downtown" | "skyscraper" | "street" => &[Cue::City],
        "cyberpunk" | "neon" | "synthwave" | "vaporwave" => {
            &[Cue::City, Cue::Tod(Time::Night), Cue::Hue(300.0)]
        }
        "mountain" | "peak" | "alps" | "alpine" | "cliff" | "canyon" | "summit" | "ridge"
        | "landscape" => &[Cue::Terrain(Land::Mountains)],
        "hill" | "valley" | "countryside" | "field" | "meadow" | "farm" | "prairie" | "rolling" => {
            &[Cue::Terrain(Land::Hills)]
        }
        "desert" | "dune" | "sand" | "sahara" | "arid" => {
            &[Cue::Terrain(Land::Dunes), Cue::Hue(38.0)]
        }
        "snow" | "snowy" | "winter" | "ice" | "icy" | "frozen" | "arctic" | "glacier" | "frost" => {
            &[Cue::Snow, Cue::Hue(200.0)]
        }
        _ => &[],
    }
}

/// What a piece of text asks for (prompt) or rules out (negative prompt).
#[derive(Debug, Default)]
struct Cues {
    hues: Vec<f32>,
    times: Vec<Time>,
    lands: Vec<Land>,
    water: bool,
    forest: bool,
    city: bool,
    snow: bool,
    space: bool,
    sun: bool,
    moon: bool,
    clouds: bool,
    stars: bool,
}

impl Cues {
    fn of(text: &str) -> Self {
        let mut cues = Self::default();
        for raw in text.split(|c: char| !c.is_alphanumeric()) {
            if raw.is_empty() || raw.len() > 24 {
                continue;
            }
            let word = raw.to_lowercase();
            let mut found = word_cues(&word);
            if found.is_empty()
                && let Some(stem) = word.strip_suffix('s')
            {
                found = word_cues(stem);
            }
            for cue in found {
                cues.apply(*cue);
            }
        }
        cues
    }

    fn apply(&mut self, cue: Cue) {
        match cue {
            Cue::Hue(h) => {
                if self.hues.len() < 4 {
                    self.hues.push(h);
                }
            }
            Cue::Tod(t) => self.times.push(t),
            Cue::Terrain(l) => self.lands.push(l),
            Cue::Water => self.water = true,
            Cue::Forest => self.forest = true,
            Cue::City => self.city = true,
            Cue::Snow => self.snow = true,
            Cue::Space => self.space = true,
            Cue::Sun => self.sun = true,
            Cue::Moon => self.moon = true,
            Cue::Clouds => self.clouds = true,
            Cue::Stars => self.stars = true,
        }
    }
}

/// Pushes `h` at least 50 degrees away from every avoided hue.
fn avoid_hue(mut h: f32, avoided: &[f32]) -> f32 {
    for _ in 0..2 {
        for &a in avoided {
            let d = hue_diff(h, a);
            if d.abs() < 50.0 {
                h = a + if d < 0.0 { -50.0 } else { 50.0 };
            }
        }
    }
    h
}

// ---------------------------------------------------------------------------
// Scene description
// ---------------------------------------------------------------------------

/// Additive radial light: `color * strength / (1 + d^2 / r^2)`.
struct Glow {
    cx: f32,
    cy: f32,
    inv_r2: f32,
    color: Rgb,
    strength: f32,
}

/// Soft ellipse. Clouds blend over the sky (`additive == false`), nebulae add light.
struct Puff {
    cx: f32,
    cy: f32,
    rx: f32,
    ry: f32,
    alpha: f32,
    /// Width of the soft rim, as a fraction of the normalised radius.
    soft: f32,
    light: Rgb,
    shadow: Rgb,
    additive: bool,
}

/// Sun, moon or planet.
struct Orb {
    cx: f32,
    cy: f32,
    r: f32,
    color: Rgb,
    /// Offset of the shadow disc (crescent/planet phase) and its darkness.
    shadow: Option<(f32, f32, f32)>,
    shade: Rgb,
    /// Darker patches: (dx, dy, radius) relative to the centre, in radii.
    spots: Vec<(f32, f32, f32)>,
}

struct Star {
    cx: f32,
    cy: f32,
    r: f32,
    color: Rgb,
}

#[derive(Clone, Copy, Default)]
struct Building {
    id: u32,
    left: f32,
    right: f32,
}

struct City {
    cols: Vec<Building>,
    cell_w: f32,
    cell_h: f32,
    margin: f32,
    lit: f32,
    window: Rgb,
    glass: Rgb,
    key: u64,
}

struct Layer {
    /// Top edge (pixel y) per column.
    ridge: Vec<f32>,
    /// Smooth ground line per column; shading gradients hang from it, so
    /// trees and fine ridge detail do not smear into vertical streaks.
    base: Vec<f32>,
    /// Antialiasing factor per column: 1 / sqrt(1 + slope^2).
    aa: Vec<f32>,
    /// Slope lighting per column, added near the ridge and fading with depth.
    lit: Vec<Rgb>,
    /// Colour at the ridge, and deep below it (misty/shadowed).
    body: Rgb,
    low: Rgb,
    inv_depth: f32,
    inv_lit_depth: f32,
    min_ridge: f32,
    /// Rows at or below this are not drawn (the sea covers them).
    bottom: usize,
    city: Option<City>,
    snow: Option<Snow>,
}

/// Snow caps: everything above a ragged per-column line turns white.
struct Snow {
    line: Vec<f32>,
    color: Vec<Rgb>,
    inv_feather: f32,
}

struct Water {
    horizon: usize,
    color: Rgb,
    highlight: Rgb,
    reflect: f32,
    fresnel: (f32, f32),
    k: f32,
    wobble: f32,
    shift: f32,
    dash_p: f32,
    glitter: Option<(f32, f32, Rgb)>,
    key: u64,
}

struct Scene {
    w: usize,
    h: usize,
    sky: [Rgb; 3],
    sky_mid: f32,
    sky_span: f32,
    glows: Vec<Glow>,
    nebulae: Vec<Puff>,
    stars: Vec<Star>,
    orbs: Vec<Orb>,
    clouds: Vec<Puff>,
    layers: Vec<Layer>,
    water: Option<Water>,
    vignette: f32,
}

/// Per-layer sine octaves: (frequency in cycles per `s` pixels, phase, weight, ridged).
/// The first entry is a slow domain warp that makes peak spacing irregular.
type Octaves = Vec<(f32, f32, f32, bool)>;

fn octaves(rng: &mut Rng, land: Land, f0: f32) -> Octaves {
    let lac = rng.range(1.9, 2.3);
    let (weights, ridged): (&[f32], usize) = match land {
        Land::Mountains => (&[1.0, 0.5, 0.2, 0.09, 0.04, 0.02], 2),
        Land::Hills => (&[1.0, 0.32, 0.1, 0.04], 0),
        Land::Dunes => (&[1.0, 0.25, 0.06], 0),
    };
    let mut f = f0;
    let warp = (
        f0 * rng.range(0.3, 0.45),
        rng.range(0.0, TAU),
        rng.range(0.5, 1.1),
        false,
    );
    std::iter::once(warp)
        .chain(weights.iter().enumerate().map(|(i, &wgt)| {
            let o = (f, rng.range(0.0, TAU), wgt, i < ridged);
            f *= lac * rng.range(0.92, 1.08);
            o
        }))
        .collect()
}

/// Evaluates octaves per column: returns (full profile, low-frequency profile), both in [-1, 1].
fn profile(oct: &Octaves, land: Land, w: usize, s: f32) -> (Vec<f32>, Vec<f32>) {
    let (warp, oct) = (oct[0], &oct[1..]);
    let total: f32 = oct.iter().map(|o| o.2).sum();
    let low_total: f32 = oct.iter().take(2).map(|o| o.2).sum();
    let mut full = Vec::with_capacity(w);
    let mut low = Vec::with_capacity(w);
    for x in 0..w {
        let u = x as f32 / s;
        let mut v = 0.0;
        let mut lo = 0.0;
        let wu = warp.2 * (TAU * warp.0 * u + warp.1).sin();
        for (i, &(f, ph, wgt, ridged)) in oct.iter().enumerate() {
            let th = TAU * f * u + ph + if i < 2 { wu } else { 0.0 };
            let sn = if land == Land::Dunes {
                (th + 0.75 * th.sin()).sin()
            } else {
                th.sin()
            };
            let c = if ridged { 1.0 - 2.0 * sn.abs() } else { sn };
            v += wgt * c;
            if i < 2 {
                lo += wgt * c;
            }
        }
        full.push(v / total);
        low.push(lo / low_total);
    }
    (full, low)
}

/// Raises fir-tree silhouettes from the ridge.
/// Trees only grow where the ground is above `max_foot`.
fn add_trees(ridge: &mut [f32], rng: &mut Rng, height: f32, density: f32, max_foot: f32) {
    let w = ridge.len();
    let ground = ridge.to_vec();
    let half = (height * 0.2).max(1.0);
    let key = rng.next_u64();
    let mut x = -half * rng.unit();
    while x < w as f32 + half {
        let th = height * rng.range(0.55, 1.15);
        let hw = half * rng.range(0.8, 1.2) * (th / height).sqrt();
        let at = |v: f32| ground[(v.max(0.0) as usize).min(w - 1)];
        let foot = at(x);
        let steep = (at(x + hw) - at(x - hw)).abs() > 2.4 * hw;
        if rng.chance(density) && foot < max_foot && !steep {
            let x0 = (x - hw).floor().max(0.0) as usize;
            let x1 = ((x + hw).ceil().max(0.0) as usize).min(w);
            for (i, (r, g)) in ridge[x0.min(x1)..x1]
                .iter_mut()
                .zip(&ground[x0.min(x1)..x1])
                .enumerate()
            {
                let xi = x0 + i;
                let u = ((xi as f32 + 0.5 - x) / hw).abs();
                if u < 1.0 {
                    let fuzz = 0.93 + 0.07 * hash01(xi as u32, 3, key);
                    let top = foot.max(*g - th * 0.3) - th * (1.0 - u).powf(1.35) * fuzz;
                    *r = r.min(top);
                }
            }
        }
        x += hw * rng.range(0.8, 1.7);
    }
}

/// Replaces the ridge with a skyline; returns the window layout.
fn add_city(
    ridge: &mut [f32],
    rng: &mut Rng,
    s: f32,
    size: f32,
    lit: f32,
    window: Rgb,
    glass: Rgb,
) -> City {
    let w = ridge.len();
    let ground = ridge.to_vec();
    let mut cols = vec![Building::default(); w];
    let env_ph = rng.range(0.0, TAU);
    let env_f = rng.range(0.5, 1.2);
    let mut x = -rng.range(0.0, 0.05) * s;
    let mut id = 0u32;
    while x < w as f32 {
        let bw = (s * size * rng.range(0.035, 0.085)).max(3.0);
        let env = 0.55 + 0.45 * (TAU * env_f * x / s + env_ph).sin();
        let mut bh = s * size * rng.range(0.06, 0.22) * (0.5 + env);
        if rng.chance(0.12) {
            bh *= 1.6;
        }
        id += 1;
        let (left, right) = (x, x + bw);
        let x0 = left.round().max(0.0) as usize;
        let x1 = (right.round().max(0.0) as usize).min(w);
        if x0 < x1 {
            let mid = ((x0 + x1) / 2).min(w - 1);
            let top = ground[mid] - bh;
            for (c, r) in cols[x0..x1].iter_mut().zip(&mut ridge[x0..x1]) {
                if top < *r {
                    *r = top;
                    *c = Building { id, left, right };
                }
            }
            if rng.chance(0.22) {
                let aw = (s * 0.003).max(1.0).round() as usize;
                let ax = (mid + 1).saturating_sub(aw / 2 + 1);
                let ah = bh * rng.range(0.15, 0.35);
                for (c, r) in cols[ax..(ax + aw).min(w)]
                    .iter_mut()
                    .zip(&mut ridge[ax..(ax + aw).min(w)])
                {
                    *r = r.min(top - ah);
                    c.id = 0;
                }
            }
        }
        x = right
            + if rng.chance(0.3) {
                bw * rng.range(0.05, 0.4)
            } else {
                0.0
            };
    }
    let cell_w = (s * 0.011 * size).max(3.0);
    City {
        cols,
        cell_w,
        cell_h: cell_w * 1.4,
        margin: cell_w * 0.6,
        lit,
        window,
        glass,
        key: rng.next_u64(),
    }
}

impl City {
    #[inline]
    fn shade(&self, x: usize, xc: f32, depth: f32, c: &mut Rgb) {
        let b = self.cols[x];
        if b.id == 0 || depth < self.margin {
            return;
        }
        let lx = xc - b.left - self.margin;
        if lx < 0.0 || b.right - xc < self.margin {
            return;
        }
        let cx = lx / self.cell_w;
        let cy = (depth - self.margin) / self.cell_h;
        if cx.fract() > 0.55 || cy.fract() > 0.5 {
            return;
        }
        let v = hash01(b.id.wrapping_mul(977) ^ cx as u32, cy as u32, self.key);
        if v < self.lit {
            let k = 0.75 + 0.25 * (v / self.lit.max(1e-6));
            *c = mix(*c, self.window, k);
        } else {
            *c = mix(*c, self.glass, 0.5);
        }
    }
}

impl Layer {
    #[allow(clippy::too_many_arguments)]
    fn new(
        ridge: Vec<f32>,
        base: Vec<f32>,
        body: Rgb,
        low: Rgb,
        light: Rgb,
        sun_dir: f32,
        depth: f32,
        bottom: usize,
        city: Option<City>,
    ) -> Self {
        let w = ridge.len();
        let at = |v: &[f32], i: isize| v[i.clamp(0, w as isize - 1) as usize];
        let aa = (0..w as isize)
            .map(|x| {
                let slope = if city.is_some() {
                    0.0
                } else {
                    (at(&ridge, x + 1) - at(&ridge, x - 1)) * 0.5
                };
                1.0 / (1.0 + slope.min(3.0).powi(2)).sqrt()
            })
            .collect();
        // Faces turned towards the light are brighter; a short box blur keeps
        // the facet edges crisp but free of stair-steps.
        let mut prefix = Vec::with_capacity(w + 1);
        prefix.push(0.0f32);
        for x in 0..w as isize {
            let sl = (at(&base, x + 1) - at(&base, x - 1)) * 0.5;
            let lit = (sl * sun_dir * 2.5).clamp(-1.0, 1.0);
            prefix.push(prefix[x as usize] + lit);
        }
        let rad = ((depth * 0.1) as usize).max(1);
        let lit = (0..w)
            .map(|x| {
                let (a, b) = (x.saturating_sub(rad), (x + rad + 1).min(w));
                let lit = (prefix[b] - prefix[a]) / (b - a) as f32;
                let mut c = scale(body, 1.0 + 0.18 * lit);
                if lit > 0.0 {
                    c = mix(c, light, 0.25 * lit);
                }
                [c[0] - body[0], c[1] - body[1], c[2] - body[2]]
            })
            .collect();
        let min_ridge = ridge.iter().copied().fold(f32::INFINITY, f32::min);
        Self {
            ridge,
            base,
            aa,
            lit,
            body,
            low,
            inv_depth: 1.0 / depth.max(1.0),
            inv_lit_depth: 1.0 / (depth * 0.4).max(1.0),
            min_ridge,
            bottom,
            city,
            snow: None,
        }
    }

    #[inline]
    fn coverage(&self, x: usize, yc: f32) -> f32 {
        ((yc - self.ridge[x]) * self.aa[x] + 0.5).clamp(0.0, 1.0)
    }

    #[inline]
    fn color(&self, x: usize, yc: f32) -> Rgb {
        let d = yc - self.base[x];
        let t = (d * self.inv_depth).clamp(0.0, 1.0);
        let mut c = mix(self.body, self.low, t * (2.0 - t));
        let l = 1.0 - (d * self.inv_lit_depth).clamp(0.0, 1.0);
        add_scaled(&mut c, self.lit[x], l * l);
        if let Some(city) = &self.city {
            city.shade(x, x as f32 + 0.5, yc - self.ridge[x], &mut c);
        }
        if let Some(snow) = &self.snow {
            let a = (snow.line[x] - yc) * snow.inv_feather;
            if a > 0.0 {
                c = mix(c, snow.color[x], smooth(a) * 0.92);
            }
        }
        c
    }
}

struct Palette {
    sky: [Rgb; 3],
    sun: Rgb,
    glow: Rgb,
    glow_strength: f32,
    land_near: Rgb,
    land_far: Rgb,
    cloud_light: Rgb,
    cloud_shadow: Rgb,
    water: Rgb,
    snow: Rgb,
    window: Rgb,
    accents: [Rgb; 2],
}

impl Scene {
    fn build(spec: &RenderSpec<'_>) -> Self {
        let w = spec.width as usize;
        let h = spec.height as usize;
        let (wf, hf) = (w as f32, h as f32);
        let s = wf.min(hf);
        let style = spec.style;
        let g = |c: Rgb| grade(c, style);
        let gl = |c: Rgb| grade_light(c, style);

        let want = Cues::of(spec.prompt);
        let avoid = spec.negative_prompt.map(Cues::of).unwrap_or_default();
        let p_hash = fnv1a(spec.prompt.as_bytes());
        let n_hash = spec
            .negative_prompt
            .map_or(0x006e_6567, |n| fnv1a(n.as_bytes()));
        let style_tag = match style {
            RenderStyle::Vivid => 0x5649_5649,
            RenderStyle::Natural => 0x4e41_5455,
        };
        // Composition follows seed and prompt; the palette also follows the
        // negative prompt and style, which only nudge it.
        let comp_key = mix64(spec.seed ^ mix64(p_hash));
        let pal_key = mix64(comp_key ^ mix64(n_hash ^ style_tag));
        let mut pick = Rng::keyed(comp_key ^ 0x01);
        let mut pal_rng = Rng::keyed(pal_key);

        // --- What is in the picture -------------------------------------
        let mut time = want
            .times
            .iter()
            .copied()
            .find(|t| !avoid.times.contains(t));
        if time.is_none() {
            let weights = [
                (Time::Day, if want.sun { 0.6 } else { 0.4 }),
                (Time::Golden, if want.sun { 0.4 } else { 0.3 }),
                (Time::Dusk, if want.sun { 0.0 } else { 0.12 }),
                (Time::Night, if want.sun { 0.0 } else { 0.18 }),
            ];
            let allowed: Vec<(Time, f32)> = weights
                .into_iter()
                .filter(|(t, wgt)| *wgt > 0.0 && !avoid.times.contains(t))
                .collect();
            let allowed = if allowed.is_empty() {
                vec![(Time::Day, 1.0)]
            } else {
                allowed
            };
            let total: f32 = allowed.iter().map(|a| a.1).sum();
            let mut r = pick.unit() * total;
            time = Some(allowed[allowed.len() - 1].0);
            for (t, wgt) in &allowed {
                if r < *wgt {
                    time = Some(*t);
                    break;
                }
                r -= wgt;
            }
        }
        let time = time.unwrap_or(Time::Day);

        let mut land = want
            .lands
            .iter()
            .copied()
            .find(|l| !avoid.lands.contains(l))
            .unwrap_or_else(|| match pick.unit() {
                r if r < 0.5 => Land::Mountains,
                r if r < 0.88 => Land::Hills,
                _ => Land::Dunes,
            });
        if avoid.lands.contains(&land) {
            land = [Land::Mountains, Land::Hills, Land::Dunes]
                .into_iter()
                .find(|l| !avoid.lands.contains(l))
                .unwrap_or(Land::Hills);
        }
        let water = (want.water || (want.lands.is_empty() && pick.chance(0.3))) && !avoid.water;
        let forest = (want.forest || (land != Land::Dunes && pick.chance(0.25))) && !avoid.forest;
        let city = (want.city || pick.chance(0.07)) && !avoid.city;
        let snow = (want.snow || (land == Land::Mountains && pick.chance(0.2))) && !avoid.snow;
        let space = want.space && !avoid.space;
        let has_sun = matches!(time, Time::Day | Time::Golden)
            && !avoid.sun
            && (want.sun || time == Time::Golden || pick.chance(0.7));
        let has_moon = !avoid.moon
            && match time {
                Time::Night => want.moon || pick.chance(0.8),
                Time::Dusk => want.moon || pick.chance(0.4),
                _ => false,
            };
        let has_stars =
            !avoid.stars && (time == Time::Night || (time == Time::Dusk && pick.chance(0.6)));

        // --- Palette ------------------------------------------------------
        let hash_hue = (p_hash % 360) as f32;
        let (tint, pull) = match want.hues.first() {
            Some(&h) => (h, 1.0),
            None if pal_rng.chance(0.2) => (hash_hue, 0.8),
            None => (hash_hue, 0.3),
        };
        let tint2 = want
            .hues
            .get(1)
            .copied()
            .unwrap_or((tint + pal_rng.range(100.0, 260.0)).rem_euclid(360.0));
        let j = pal_rng.range(-12.0, 12.0) + (n_hash % 7) as f32 - 3.0;
        let ah = |hue: f32| avoid_hue(hue, &avoid.hues);
        let toward = |base: f32, k: f32| ah(hue_pull(base + j, tint, k * pull));
        let land_hue = ah(if want.hues.is_empty() {
            match (land, forest) {
                (Land::Dunes, _) => 34.0 + j,
                (_, true) => 135.0 + j,
                (Land::Hills, _) => hue_toward(110.0 + j, tint, 0.25 * pull),
                (Land::Mountains, _) => hue_toward(215.0 + j, tint, 0.3 * pull),
            }
        } else {
            hue_toward(tint, 215.0, if snow { 0.6 } else { 0.1 })
        });
        let p = match time {
            Time::Day => {
                let sky = [
                    hsl(toward(214.0, 0.15), 0.62, 0.44),
                    hsl(toward(206.0, 0.2), 0.55, 0.64),
                    hsl(toward(196.0, 0.3), 0.45, 0.86),
                ];
                Palette {
                    sky,
                    sun: [1.0, 0.98, 0.9],
                    glow: [1.0, 0.94, 0.78],
                    glow_strength: 0.35,
                    land_near: hsl(land_hue, 0.38, 0.2),
                    land_far: mix(sky[2], hsl(land_hue, 0.3, 0.5), 0.4),
                    cloud_light: [0.99, 0.99, 1.0],
                    cloud_shadow: mix(sky[1], [0.62, 0.65, 0.72], 0.6),
                    water: hsl(toward(205.0, 0.3), 0.55, 0.3),
                    snow: [0.95, 0.97, 1.0],
                    window: [0.75, 0.85, 0.95],
                    accents: [hsl(tint, 0.6, 0.6), hsl(tint2, 0.6, 0.6)],
                }
            }
            Time::Golden => {
                let sky = [
                    hsl(toward(252.0, 0.2), 0.48, 0.26),
                    hsl(toward(338.0, 0.4), 0.62, 0.53),
                    hsl(toward(34.0, 0.45), 0.92, 0.64),
                ];
                let lh = ah(hue_toward(285.0 + j, land_hue, 0.25));
                Palette {
                    sky,
                    sun: hsl(toward(48.0, 0.15), 1.0, 0.84),
                    glow: hsl(toward(32.0, 0.3), 1.0, 0.6),
                    glow_strength: 0.6,
                    land_near: hsl(lh, 0.38, 0.1),
                    land_far: mix(sky[2], sky[1], 0.55),
                    cloud_light: mix(hsl(toward(28.0, 0.3), 0.95, 0.7), sky[1], 0.25),
                    cloud_shadow: mix(sky[0], sky[1], 0.55),
                    water: scale(mix(sky[0], sky[1], 0.35), 0.7),
                    snow: hsl(toward(20.0, 0.3), 0.7, 0.82),
                    window: [1.0, 0.82, 0.5],
                    accents: [hsl(tint, 0.7, 0.6), hsl(tint2, 0.7, 0.6)],
                }
            }
            Time::Dusk => {
                let sky = [
                    hsl(toward(232.0, 0.15), 0.5, 0.15),
                    hsl(toward(262.0, 0.3), 0.36, 0.34),
                    hsl(toward(18.0, 0.45), 0.55, 0.56),
                ];
                let lh = ah(hue_toward(250.0 + j, land_hue, 0.2));
                Palette {
                    sky,
                    sun: [1.0, 0.9, 0.8],
                    glow: sky[2],
                    glow_strength: 0.35,
                    land_near: hsl(lh, 0.35, 0.07),
                    land_far: mix(sky[2], sky[1], 0.6),
                    cloud_light: mix(sky[2], [1.0, 0.8, 0.75], 0.3),
                    cloud_shadow: mix(sky[0], sky[1], 0.5),
                    water: scale(mix(sky[0], sky[1], 0.3), 0.7),
                    snow: [0.7, 0.72, 0.85],
                    window: [1.0, 0.8, 0.45],
                    accents: [hsl(tint, 0.7, 0.5), hsl(tint2, 0.7, 0.5)],
                }
            }
            Time::Night => {
                let sky = [
                    hsl(toward(230.0, 0.1), 0.6, 0.045),
                    hsl(toward(228.0, 0.2), 0.5, 0.11),
                    hsl(toward(218.0, 0.4), 0.42, 0.24),
                ];
                let lh = ah(hue_toward(228.0 + j, land_hue, 0.15));
                Palette {
                    sky,
                    sun: [0.95, 0.95, 0.9],
                    glow: [0.6, 0.7, 0.9],
                    glow_strength: 0.22,
                    land_near: hsl(lh, 0.35, 0.04),
                    land_far: mix(sky[2], hsl(lh, 0.3, 0.12), 0.6),
                    cloud_light: [0.42, 0.45, 0.55],
                    cloud_shadow: sky[1],
                    water: hsl(toward(225.0, 0.1), 0.5, 0.06),
                    snow: [0.55, 0.6, 0.75],
                    window: if want.hues.is_empty() {
                        [1.0, 0.8, 0.45]
                    } else {
                        hsl(tint, 0.9, 0.65)
                    },
                    accents: [hsl(tint, 0.75, 0.5), hsl(tint2, 0.75, 0.5)],
                }
            }
        };

        // --- Geometry -----------------------------------------------------
        let horizon_at = pick.range(0.52, 0.68);
        let horizon = (water && h >= 8).then(|| ((hf * horizon_at) as usize).clamp(1, h - 1));
        let sky_span = horizon.map_or(hf * 0.78, |hy| hy as f32);
        let sun_x = wf * pick.range(0.15, 0.85);
        let sun_dir = if sun_x < wf * 0.5 { -1.0 } else { 1.0 };
        let mut glows = Vec::new();
        let mut orbs = Vec::new();
        let gscale = match style {
            RenderStyle::Vivid => 1.0,
            RenderStyle::Natural => 0.8,
        };
        if has_sun {
            let (cy, r) = match time {
                Time::Golden if water => (
                    sky_span * pick.range(0.8, 0.95),
                    s * pick.range(0.045, 0.075),
                ),
                Time::Golden => (
                    sky_span * pick.range(0.4, 0.75),
                    s * pick.range(0.045, 0.075),
                ),
                _ => (
                    sky_span * pick.range(0.15, 0.45),
                    s * pick.range(0.035, 0.055),
                ),
            };
            glows.push(Glow {
                cx: sun_x,
                cy,
                inv_r2: 1.0 / (s * 0.12).powi(2),
                color: gl(p.glow),
                strength: p.glow_strength * gscale,
            });
            glows.push(Glow {
                cx: sun_x,
                cy,
                inv_r2: 1.0 / (s * 0.03).powi(2),
                color: gl(p.sun),
                strength: 0.5 * gscale,
            });
            orbs.push(Orb {
                cx: sun_x,
                cy,
                r,
                color: g(p.sun),
                shadow: None,
                shade: [0.0; 3],
                spots: Vec::new(),
            });
        } else if time == Time::Dusk {
            glows.push(Glow {
                cx: sun_x,
                cy: sky_span * 1.05,
                inv_r2: 1.0 / (s * 0.35).powi(2),
                color: gl(p.glow),
                strength: p.glow_strength * gscale,
            });
        }
        if has_moon {
            let cx = wf * pick.range(0.12, 0.88);
            let cy = sky_span * pick.range(0.12, 0.45);
            let r = s * pick.range(0.035, 0.06);
            glows.push(Glow {
                cx,
                cy,
                inv_r2: 1.0 / (s * 0.07).powi(2),
                color: gl(p.glow),
                strength: 0.18 * gscale,
            });
            let shadow = if pick.chance(0.45) {
                let a = pick.range(0.0, TAU);
                let d = pick.range(0.35, 0.8);
                Some((a.cos() * d, a.sin() * d, 0.93))
            } else {
                None
            };
            let spots = (0..3 + pick.below_by_multiply(3))
                .map(|_| {
                    (
                        pick.range(-0.55, 0.55),
                        pick.range(-0.55, 0.55),
                        pick.range(0.12, 0.3),
                    )
                })
                .collect();
            orbs.push(Orb {
                cx,
                cy,
                r,
                color: g([0.94, 0.94, 0.88]),
                shadow,
                shade: g(p.sky[0]),
                spots,
            });
        }
        let mut nebulae = Vec::new();
        if space {
            // A planet and a diagonal band of coloured haze.
            let cx = wf * pick.range(0.15, 0.85);
            let cy = sky_span * pick.range(0.2, 0.5);
            let a = pick.range(0.0, TAU);
            orbs.push(Orb {
                cx,
                cy,
                r: s * pick.range(0.08, 0.16),
                color: g(mix(p.accents[1], [0.8, 0.8, 0.8], 0.3)),
                shadow: Some((a.cos() * 0.5, a.sin() * 0.5, 0.9)),
                shade: g(p.sky[0]),
                spots: Vec::new(),
            });
            let (x0, y0) = (pick.range(-0.1, 0.3) * wf, pick.range(0.0, 0.3) * sky_span);
            let (x1, y1) = (pick.range(0.7, 1.1) * wf, pick.range(0.5, 0.9) * sky_span);
            let n = 10 + pick.below_by_multiply(6);
            for i in 0..n {
                let t = (i as f32 + pick.unit()) / n as f32;
                let r = s * pick.range(0.08, 0.2);
                nebulae.push(Puff {
                    cx: lerp(x0, x1, t) + pick.range(-0.05, 0.05) * s,
                    cy: lerp(y0, y1, t) + pick.range(-0.05, 0.05) * s,
                    rx: r * pick.range(1.0, 1.8),
                    ry: r,
                    alpha: pick.range(0.08, 0.2) * gscale,
                    soft: 1.0,
                    light: gl(p.accents[i % 2]),
                    shadow: [0.0; 3],
                    additive: true,
                });
            }
        }

        let mut stars = Vec::new();
        if has_stars {
            let density = if time == Time::Night { 1.0 } else { 0.4 };
            let base = (wf * sky_span / (1024.0 * 1024.0) * 420.0 * density) as usize;
            let n = base.min(40_000);
            let px = (s / 1024.0).max(0.7);
            for _ in 0..n {
                let cy = sky_span * pick.unit().powf(1.3);
                let fade = (1.0 - cy / sky_span).clamp(0.0, 1.0);
                let b = pick.unit().powi(3) * 0.9 + 0.1;
                let tint = match pick.below_by_multiply(4) {
                    0 => [1.0, 0.85, 0.7],
                    1 => [0.75, 0.85, 1.0],
                    _ => [1.0, 1.0, 1.0],
                };
                stars.push(Star {
                    cx: wf * pick.unit(),
                    cy,
                    r: px * (0.7 + 1.3 * b),
                    color: scale(gl(tint), b * fade),
                });
            }
            stars.sort_by(|a, b| a.cy.total_cmp(&b.cy));
        }

        let mut clouds = Vec::new();
        if !avoid.clouds {
            let streaky = matches!(time, Time::Golden | Time::Dusk) && pick.chance(0.65);
            let count = match time {
                Time::Night => pick.below_by_multiply(3),
                _ => 1 + pick.below_by_multiply(4) + if want.clouds { 3 } else { 0 },
            };
            let alpha = if time == Time::Night { 0.45 } else { 0.92 };
            let light = g(p.cloud_light);
            let shadow = g(p.cloud_shadow);
            for _ in 0..count {
                let cx = wf * pick.range(-0.1, 1.1);
                let cy = sky_span * pick.range(0.08, 0.55);
                if streaky {
                    for _ in 0..2 + pick.below_by_multiply(3) {
                        clouds.push(Puff {
                            cx: cx + s * pick.range(-0.2, 0.2),
                            cy: cy + s * pick.range(-0.03, 0.03),
                            rx: s * pick.range(0.12, 0.35),
                            ry: s * pick.range(0.006, 0.018),
                            alpha: pick.range(0.45, 0.85),
                            soft: 1.0,
                            light,
                            shadow: mix(light, shadow, 0.4),
                            additive: false,
                        });
                    }
                } else {
                    let size = s * pick.range(0.035, 0.075) * (1.0 - 0.4 * cy / sky_span);
                    let n = 4 + pick.below_by_multiply(5);
                    for i in 0..n {
                        let rel = (i as f32 + 0.5) / n as f32 * 2.0 - 1.0;
                        let r = size * (1.0 - 0.5 * rel.abs()) * pick.range(0.75, 1.15);
                        let ry = r * 0.9;
                        clouds.push(Puff {
                            cx: cx + rel * size * 1.7 + pick.range(-0.25, 0.25) * size,
                            cy: cy - ry * 0.55,
                            rx: r * 1.3,
                            ry,
                            alpha,
                            soft: 0.45,
                            light,
                            shadow,
                            additive: false,
                        });
                    }
                }
            }
        }

        // --- Land layers --------------------------------------------------
        let haze = p.sky[2];
        let mist = pick.range(0.15, 0.5);
        let light = p.glow;
        let lit_p = match time {
            Time::Day => 0.0,
            Time::Golden => 0.12,
            Time::Dusk => 0.3,
            Time::Night => 0.4,
        };
        let window = gl(p.window);
        let mut layers = Vec::new();
        let make = |ridge: Vec<f32>,
                    ground: &[f32],
                    lo: Vec<f32>,
                    depth_t: f32,
                    bottom: usize,
                    city: Option<City>,
                    snowy: Option<f32>| {
            let body = mix(p.land_far, p.land_near, depth_t.powf(0.8));
            let low = mix(scale(body, 0.85), haze, mist * (1.0 - 0.6 * depth_t));
            let snow_line = snowy.map(|level| {
                ground
                    .iter()
                    .zip(&lo)
                    .map(|(r, l)| level + (r - l) * 0.9)
                    .collect::<Vec<f32>>()
            });
            let mut layer = Layer::new(
                ridge,
                lo,
                g(body),
                g(low),
                g(light),
                sun_dir,
                s * lerp(0.18, 0.35, depth_t),
                bottom,
                city,
            );
            if let Some(line) = snow_line {
                let snow_c = g(p.snow);
                let luma = |c: Rgb| 0.3 * c[0] + 0.6 * c[1] + 0.1 * c[2];
                let body_l = luma(g(body)).max(1e-3);
                layer.snow = Some(Snow {
                    line,
                    color: layer
                        .lit
                        .iter()
                        .map(|l| {
                            let lum = luma(g(body)) + luma(*l);
                            scale(snow_c, (lum / body_l).clamp(0.75, 1.15))
                        })
                        .collect(),
                    inv_feather: 1.0 / (s * 0.004).max(1.0),
                });
            }
            layer
        };
        let land = if city && land == Land::Mountains && !want.lands.contains(&land) {
            Land::Hills
        } else {
            land
        };
        if let Some(hy) = horizon {
            // Distant ranges or islands sitting on the horizon.
            let n = if city { 1 } else { pick.below_by_multiply(3) };
            for i in 0..n {
                let depth_t = if n > 1 {
                    i as f32 / (n - 1) as f32 * 0.5
                } else {
                    0.3
                };
                let amp = s * pick.range(0.05, 0.16) * (1.0 - 0.4 * depth_t);
                let f0 = pick.range(1.0, 2.2);
                let oct = octaves(&mut pick, land, f0);
                let (full, lo) = profile(&oct, land, w, s);
                let (mc, mw) = (wf * pick.range(0.0, 1.0), wf * pick.range(0.25, 0.7));
                let at = |x: usize, v: f32| {
                    let m = smooth((1.0 - (x as f32 - mc).abs() / mw) * 2.0);
                    hy as f32 - amp * m * (0.55 + 0.45 * v)
                };
                let ground: Vec<f32> = full.iter().enumerate().map(|(x, &v)| at(x, v)).collect();
                let lo: Vec<f32> = lo.iter().enumerate().map(|(x, &v)| at(x, v)).collect();
                let mut ridge = ground.clone();
                let cty = city.then(|| {
                    add_city(
                        &mut ridge,
                        &mut pick,
                        s,
                        0.8,
                        lit_p,
                        window,
                        g(mix(p.land_near, haze, 0.3)),
                    )
                });
                layers.push(make(ridge, &ground, lo, depth_t, hy, cty, None));
            }
            // A dark headland in the foreground, sometimes wooded.
            if forest || pick.chance(0.4) {
                let f0 = pick.range(0.8, 1.5);
                let oct = octaves(&mut pick, land, f0);
                let (full, lo) = profile(&oct, land, w, s);
                let left = pick.chance(0.5);
                let reach = wf * pick.range(0.25, 0.5);
                let amp = (hf - hy as f32).min(s * 0.4) + s * pick.range(-0.05, 0.12);
                let at = |x: usize, v: f32| {
                    let e = if left { x as f32 } else { wf - x as f32 };
                    hf + 2.0 - amp * smooth(1.0 - e / reach) * (0.75 + 0.25 * v)
                };
                let ground: Vec<f32> = full.iter().enumerate().map(|(x, &v)| at(x, v)).collect();
                let lo: Vec<f32> = lo.iter().enumerate().map(|(x, &v)| at(x, v)).collect();
                let mut ridge = ground.clone();
                if forest {
                    add_trees(&mut ridge, &mut pick, s * 0.1, 0.9, hf - s * 0.04);
                }
                layers.push(make(ridge, &ground, lo, 1.0, h, None, None));
            }
        } else {
            let n = match land {
                Land::Mountains => 3 + pick.below_by_multiply(4),
                Land::Hills => 3 + pick.below_by_multiply(3),
                Land::Dunes => 3 + pick.below_by_multiply(2),
            };
            let (amp_far, amp_near, f_far, f_near) = match land {
                Land::Mountains => (0.22, 0.15, 0.75, 0.45),
                Land::Hills => (0.12, 0.1, 1.0, 0.55),
                Land::Dunes => (0.09, 0.08, 1.3, 0.8),
            };
            let city_from = if city {
                n - 1 - pick.below_by_multiply(2)
            } else {
                n
            };
            for i in 0..n {
                let t = if n > 1 {
                    i as f32 / (n - 1) as f32
                } else {
                    1.0
                };
                let base = hf * (lerp(0.5, 0.88, t) + pick.range(-0.03, 0.03));
                let amp = s * lerp(amp_far, amp_near, t) * pick.range(0.8, 1.25);
                let f0 = lerp(f_far, f_near, t) * pick.range(0.8, 1.25);
                let oct = octaves(&mut pick, land, f0);
                let (full, lo) = profile(&oct, land, w, s);
                let is_city = i >= city_from;
                let ridge_amp = if is_city { amp * 0.3 } else { amp };
                let ground: Vec<f32> = full
                    .iter()
                    .map(|v| base - ridge_amp * (0.5 + 0.5 * v))
                    .collect();
                let mut ridge = ground.clone();
                let lo_px: Vec<f32> = lo
                    .iter()
                    .map(|v| base - ridge_amp * (0.5 + 0.5 * v))
                    .collect();
                let cty = is_city.then(|| {
                    add_city(
                        &mut ridge,
                        &mut pick,
                        s,
                        lerp(0.6, 1.2, t),
                        lit_p,
                        window,
                        g(mix(p.land_near, haze, 0.25 * (1.0 - t))),
                    )
                });
                let wooded = forest && !is_city && (i + 2 >= n || want.forest) && i > 0;
                if wooded {
                    add_trees(
                        &mut ridge,
                        &mut pick,
                        s * lerp(0.02, 0.07, t),
                        0.85,
                        f32::INFINITY,
                    );
                }
                let snowy = (snow && land == Land::Mountains && !is_city && !wooded)
                    .then(|| base - amp * pick.range(0.55, 0.8));
                layers.push(make(ridge, &ground, lo_px, t, h, cty, snowy));
            }
        }

        let water = horizon.map(|hy| {
            let below = (h - hy).max(1) as f32;
            Water {
                horizon: hy,
                color: g(p.water),
                highlight: gl(mix(p.sky[2], [1.0, 1.0, 1.0], 0.3)),
                reflect: 0.85,
                fresnel: (0.18, 0.45),
                k: ((hy as f32 - 1.0) / below).clamp(0.0, 1.0),
                wobble: s * 0.035,
                shift: s * 0.004,
                dash_p: 0.1,
                glitter: has_sun.then(|| {
                    let sun = &orbs[0];
                    (sun.cx, sun.r, gl(p.sun))
                }),
                key: pick.next_u64(),
            }
        });

        Self {
            w,
            h,
            sky: p.sky.map(g),
            sky_mid: pick.range(0.45, 0.7),
            sky_span,
            glows,
            nebulae,
            stars,
            orbs,
            clouds,
            layers,
            water,
            vignette: match style {
                RenderStyle::Vivid => 0.16,
                RenderStyle::Natural => 0.1,
            },
        }
    }

    fn sky_color(&self, y: f32) -> Rgb {
        let t = (y / self.sky_span).clamp(0.0, 1.0);
        if t < self.sky_mid {
            mix(self.sky[0], self.sky[1], smooth(t / self.sky_mid))
        } else {
            mix(
                self.sky[1],
                self.sky[2],
                smooth((t - self.sky_mid) / (1.0 - self.sky_mid)),
            )
        }
    }

    fn paint(&self, img: &mut RgbImage) {
        let (w, h) = (self.w, self.h);
        let stride = w * 3;
        let buf: &mut [u8] = img;
        let mut row = vec![[0.0f32; 3]; w];
        let mut cover = vec![0u8; w];
        let mut active: Vec<usize> = Vec::with_capacity(self.layers.len());
        let bayer = bayer8();
        let vig = |u: f32| 1.0 - self.vignette * u * u;
        let colv: Vec<f32> = (0..w)
            .map(|x| vig((x as f32 + 0.5) / w as f32 * 2.0 - 1.0))
            .collect();
        let rowv = |y: usize| vig((y as f32 + 0.5) / h as f32 * 2.0 - 1.0);
        let mut star_first = 0usize;
        let max_star_r = self.stars.iter().map(|s| s.r).fold(0.0, f32::max) + 1.0;

        for y in 0..h {
            let yc = y as f32 + 0.5;
            let (done, rest) = buf.split_at_mut(y * stride);
            let out = &mut rest[..stride];

            // Which layers touch this row, and the frontmost one fully covering each pixel.
            active.clear();
            active.extend(
                (0..self.layers.len())
                    .filter(|&i| y < self.layers[i].bottom && yc + 2.0 > self.layers[i].min_ridge),
            );
            cover.fill(0);
            if !active.is_empty() {
                for (x, c) in cover.iter_mut().enumerate() {
                    for &i in active.iter().rev() {
                        if self.layers[i].coverage(x, yc) >= 1.0 {
                            *c = i as u8 + 1;
                            break;
                        }
                    }
                }
            }

            match &self.water {
                Some(wt) if y >= wt.horizon => {
                    self.water_row(wt, y, done, &cover, &colv, &rowv, &mut row);
                }
                _ => {
                    while star_first < self.stars.len()
                        && self.stars[star_first].cy + max_star_r < yc
                    {
                        star_first += 1;
                    }
                    self.sky_row(yc, &cover, star_first, &mut row);
                }
            }

            // Land, back to front, starting at the frontmost opaque layer.
            if !active.is_empty() {
                for (x, (px, &c)) in row.iter_mut().zip(&cover).enumerate() {
                    let start = if c > 0 {
                        let l = &self.layers[c as usize - 1];
                        *px = l.color(x, yc);
                        c as usize
                    } else {
                        0
                    };
                    for &i in &active {
                        if i < start {
                            continue;
                        }
                        let l = &self.layers[i];
                        let a = l.coverage(x, yc);
                        if a > 0.0 {
                            blend(px, l.color(x, yc), a);
                        }
                    }
                }
            }

            // Vignette, ordered dither and quantisation.
            let k = 255.0 * rowv(y);
            let b = &bayer[(y & 7) * 8..][..8];
            for (x, (o, c)) in out.chunks_exact_mut(3).zip(&row).enumerate() {
                let m = k * colv[x];
                let d = b[x & 7];
                o[0] = (c[0] * m + d) as u8;
                o[1] = (c[1] * m + d) as u8;
                o[2] = (c[2] * m + d) as u8;
            }
        }
    }

    fn sky_row(&self, yc: f32, cover: &[u8], star_first: usize, row: &mut [Rgb]) {
        let w = self.w;
        let base = self.sky_color(yc);
        let glows: Vec<(f32, &Glow)> = self
            .glows
            .iter()
            .map(|g| ((yc - g.cy) * (yc - g.cy), g))
            .collect();
        for (x, (px, &c)) in row.iter_mut().zip(cover).enumerate() {
            if c != 0 {
                continue;
            }
            let mut col = base;
            let xc = x as f32 + 0.5;
            for &(dy2, g) in &glows {
                let dx = xc - g.cx;
                let k = g.strength / (1.0 + (dx * dx + dy2) * g.inv_r2);
                add_scaled(&mut col, g.color, k);
            }
            *px = col;
        }

        for n in &self.nebulae {
            puff_row(n, yc, w, cover, row);
        }
        for st in &self.stars[star_first..] {
            let reach = st.r + 0.5;
            if st.cy - reach - 1.0 > yc {
                break;
            }
            let dy = yc - st.cy;
            if dy.abs() >= reach {
                continue;
            }
            let x0 = (st.cx - reach).floor().max(0.0) as usize;
            let x1 = ((st.cx + reach).ceil().max(0.0) as usize).min(w);
            for x in x0..x1.max(x0) {
                if cover[x] != 0 {
                    continue;
                }
                let dx = x as f32 + 0.5 - st.cx;
                let a = 1.0 - (dx * dx + dy * dy) / (reach * reach);
                if a > 0.0 {
                    add_scaled(&mut row[x], st.color, a * a);
                }
            }
        }
        for orb in &self.orbs {
            orb_row(orb, yc, w, cover, row);
        }
        for c in &self.clouds {
            puff_row(c, yc, w, cover, row);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn water_row(
        &self,
        wt: &Water,
        y: usize,
        done: &[u8],
        cover: &[u8],
        colv: &[f32],
        rowv: &dyn Fn(usize) -> f32,
        row: &mut [Rgb],
    ) {
        let (w, h) = (self.w, self.h);
        let hy = wt.horizon;
        let d = (y - hy) as f32 + 0.5;
        let t = (d / (h - hy) as f32).clamp(0.0, 1.0);
        let wob = (hash01(y as u32, 1, wt.key) - 0.5) * 2.0 * wt.wobble * t;
        let my = (hy as f32 - 0.5 - d * wt.k - wob.abs()).clamp(0.0, hy as f32 - 1.0) as usize;
        let sx = (d * 0.9 / (0.15 + t)).sin() * wt.shift * (0.3 + t)
            + (hash01(y as u32, 2, wt.key) - 0.5) * wt.shift * t;
        let src = &done[my * w * 3..][..w * 3];
        let unvig = 1.0 / (255.0 * rowv(my));
        let f = wt.fresnel.0 + wt.fresnel.1 * t;
        let seg_len = (self.w.min(h) as f32 * (0.01 + 0.07 * t)).max(2.0);
        let band = (1.0 + t * h as f32 * 0.004) as usize;
        let yb = (y / band) as u32;
        let glitter = wt.glitter.map(|(gx, r, c)| (gx, r * (0.8 + 2.5 * t), c));
        let mut last_seg = i64::MIN;
        let mut dash = 0.0;
        for (x, (px, &c)) in row.iter_mut().zip(cover).enumerate() {
            if c != 0 {
                continue;
            }
            let xs = (x as f32 + sx).clamp(0.0, w as f32 - 1.0) as usize;
            let k = unvig / colv[xs];
            let s = &src[xs * 3..xs * 3 + 3];
            let refl = [
                f32::from(s[0]) * k,
                f32::from(s[1]) * k,
                f32::from(s[2]) * k,
            ];
            let mut col = mix(scale(refl, wt.reflect), wt.color, f);
            let seg = ((x as f32 + sx * 4.0) / seg_len).floor() as i64;
            if seg != last_seg {
                last_seg = seg;
                dash = hash01(seg as u32, yb, wt.key);
            }
            if dash < wt.dash_p {
                add_scaled(&mut col, wt.highlight, 0.1 * (1.0 - dash / wt.dash_p));
            }
            if let Some((gx, gw, gc)) = glitter {
                let u = ((x as f32 + 0.5 - gx) / gw).abs();
                if u < 1.0 {
                    let p = (1.0 - u) * (1.0 - u) * (1.0 - 0.5 * t);
                    if dash < p * 0.9 {
                        add_scaled(&mut col, gc, 0.55 * p);
                    }
                }
            }
            *px = col;
        }
    }
}

fn puff_row(p: &Puff, yc: f32, w: usize, cover: &[u8], row: &mut [Rgb]) {
    let dy = (yc - p.cy) / p.ry;
    if dy.abs() >= 1.0 {
        return;
    }
    let half = p.rx * (1.0 - dy * dy).sqrt();
    let x0 = (p.cx - half).floor().max(0.0) as usize;
    let x1 = ((p.cx + half).ceil().max(0.0) as usize).min(w);
    if x0 >= x1 {
        return;
    }
    let shade = smooth(dy * 0.6 + 0.45);
    let col = mix(p.light, p.shadow, shade);
    let inv_rx = 1.0 / p.rx;
    let inv_soft = 1.0 / p.soft;
    for (i, (px, &c)) in row[x0..x1].iter_mut().zip(&cover[x0..x1]).enumerate() {
        if c != 0 {
            continue;
        }
        let dx = ((x0 + i) as f32 + 0.5 - p.cx) * inv_rx;
        let a = smooth((1.0 - dx * dx - dy * dy) * inv_soft) * p.alpha;
        if a <= 0.0 {
            continue;
        }
        if p.additive {
            add_scaled(px, col, a);
        } else {
            blend(px, col, a);
        }
    }
}

fn orb_row(o: &Orb, yc: f32, w: usize, cover: &[u8], row: &mut [Rgb]) {
    let reach = o.r + 1.0;
    let dy = yc - o.cy;
    if dy.abs() >= reach {
        return;
    }
    let half = (reach * reach - dy * dy).sqrt();
    let x0 = (o.cx - half).floor().max(0.0) as usize;
    let x1 = ((o.cx + half).ceil().max(0.0) as usize).min(w);
    if x0 >= x1 {
        return;
    }
    let inv_r = 1.0 / o.r;
    for (i, (px, &c)) in row[x0..x1].iter_mut().zip(&cover[x0..x1]).enumerate() {
        if c != 0 {
            continue;
        }
        let dx = (x0 + i) as f32 + 0.5 - o.cx;
        let dist = (dx * dx + dy * dy).sqrt();
        let a = (o.r - dist + 0.5).clamp(0.0, 1.0);
        if a <= 0.0 {
            continue;
        }
        let (u, v) = (dx * inv_r, dy * inv_r);
        let mut col = o.color;
        let mut dark = 0.0;
        for &(sx, sy, sr) in &o.spots {
            let q = ((u - sx) * (u - sx) + (v - sy) * (v - sy)) / (sr * sr);
            if q < 1.0 {
                dark += 0.1 * (1.0 - q);
            }
        }
        if dark > 0.0 {
            col = scale(col, 1.0 - dark.min(0.3));
        }
        if let Some((ox, oy, k)) = o.shadow {
            let sd = (((u - ox) * (u - ox) + (v - oy) * (v - oy)).sqrt() - 1.0) * o.r;
            let sa = (0.5 - sd).clamp(0.0, 1.0) * k;
            col = mix(col, o.shade, sa);
        }
        blend(px, col, a);
    }
}

/// 8x8 ordered-dither thresholds in [0, 1).
fn bayer8() -> [f32; 64] {
    let mut m = [0.0; 64];
    for (i, v) in m.iter_mut().enumerate() {
        let (x, y) = (i & 7, i >> 3);
        let xy = x ^ y;
        let mut r = 0;
        for bit in 0..3 {
            r |= ((xy >> bit) & 1) << (2 * (2 - bit) + 1);
            r |= ((y >> bit) & 1) << (2 * (2 - bit));
        }
        *v = (r as f32 + 0.5) / 64.0;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(prompt: &str, seed: u64, width: u32, height: u32) -> RenderSpec<'_> {
        RenderSpec {
            prompt,
            negative_prompt: None,
            seed,
            style: RenderStyle::Vivid,
            width,
            height,
        }
    }

    fn differing_pixels(a: &RgbImage, b: &RgbImage) -> usize {
        a.pixels().zip(b.pixels()).filter(|(p, q)| p != q).count()
    }

    #[test]
    fn renders_exact_dimensions() {
        for (w, h) in [
            (512, 512),
            (1024, 1792),
            (1792, 1024),
            (64, 64),
            (64, 300),
            (97, 65),
        ] {
            let img = render(&spec("a quiet lake at dawn", 7, w, h));
            assert_eq!(img.dimensions(), (w, h));
        }
    }

    #[test]
    fn tiny_and_empty_sizes_do_not_panic() {
        for (w, h) in [(1, 1), (1, 64), (64, 1), (2, 3), (0, 10), (10, 0)] {
            let img = render(&spec("ocean city forest at night", 3, w, h));
            assert_eq!(img.dimensions(), (w, h));
        }
    }

    #[test]
    fn same_spec_gives_identical_bytes() {
        let mut s = spec("misty mountains, forest, snow", 1234, 320, 200);
        s.negative_prompt = Some("blue");
        let a = render(&s);
        let b = render(&s.clone());
        assert_eq!(a.as_raw(), b.as_raw());
        assert_eq!(encode_png(&a), encode_png(&b));
    }

    #[test]
    fn different_seeds_differ() {
        let a = render(&spec("a red sunset over the ocean", 1, 256, 256));
        let b = render(&spec("a red sunset over the ocean", 2, 256, 256));
        assert!(differing_pixels(&a, &b) > 256 * 256 / 4);
    }

    #[test]
    fn different_prompts_differ() {
        let a = render(&spec("a cat", 5, 256, 256));
        let b = render(&spec("a dog", 5, 256, 256));
        assert!(differing_pixels(&a, &b) > 256 * 256 / 4);
    }

    #[test]
    fn style_and_negative_prompt_change_pixels() {
        let base = spec("green hills under a blue sky", 9, 256, 256);
        let natural = RenderSpec {
            style: RenderStyle::Natural,
            ..base.clone()
        };
        let negative = RenderSpec {
            negative_prompt: Some("green"),
            ..base.clone()
        };
        let a = render(&base);
        assert!(differing_pixels(&a, &render(&natural)) > 1000);
        assert!(differing_pixels(&a, &render(&negative)) > 1000);
    }

    #[test]
    fn negative_prompt_removes_named_colour() {
        let s = RenderSpec {
            negative_prompt: Some("red, orange"),
            ..spec("a red sunset over the ocean", 42, 128, 128)
        };
        let img = render(&s);
        let reddish = img
            .pixels()
            .filter(|p| {
                let [r, g, b] = p.0.map(i32::from);
                r > 150 && r > g + 60 && r > b + 60
            })
            .count();
        let plain = render(&spec("a red sunset over the ocean", 42, 128, 128));
        let plain_reddish = plain
            .pixels()
            .filter(|p| {
                let [r, g, b] = p.0.map(i32::from);
                r > 150 && r > g + 60 && r > b + 60
            })
            .count();
        assert!(reddish < plain_reddish, "{reddish} vs {plain_reddish}");
    }

    #[test]
    fn png_round_trip() {
        let img = render(&spec("snowy forest", 11, 300, 200));
        let png = encode_png(&img);
        assert!(png.starts_with(b"\x89PNG"));
        let decoded = image::load_from_memory(&png).expect("decodes").to_rgb8();
        assert_eq!(decoded.dimensions(), (300, 200));
        assert_eq!(decoded.as_raw(), img.as_raw());
    }

    #[test]
    fn picture_is_not_flat() {
        for (i, prompt) in ["", "a cat", "city at night", "desert dunes", "galaxy"]
            .iter()
            .enumerate()
        {
            let img = render(&spec(prompt, i as u64, 256, 256));
            let mut colours: Vec<[u8; 3]> = img.pixels().map(|p| p.0).collect();
            colours.sort_unstable();
            colours.dedup();
            assert!(colours.len() > 300, "{prompt:?}: {} colours", colours.len());
        }
    }

    #[test]
    fn large_render_and_encode() {
        let img = render(&spec("a red sunset over the ocean", 42, 1024, 1024));
        assert_eq!(img.dimensions(), (1024, 1024));
        let png = encode_png(&img);
        let decoded = image::load_from_memory(&png).expect("decodes");
        assert_eq!((decoded.width(), decoded.height()), (1024, 1024));
    }

    #[test]
    fn bayer_is_a_permutation() {
        let mut v: Vec<u32> = bayer8().iter().map(|t| (t * 64.0) as u32).collect();
        v.sort_unstable();
        assert_eq!(v, (0..64).collect::<Vec<_>>());
    }
}
