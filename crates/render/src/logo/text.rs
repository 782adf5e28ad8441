//! Typefaces, shaping and setting text on the canvas.

use ab_glyph::{Font, FontRef, GlyphId, OutlineCurve};
use unigen_core::fonts::{CONDENSED_BOLD, MONO_BOLD, SANS_BOLD, SERIF_BOLD};

use super::colour::*;
use super::raster::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Face {
    Sans,
    Serif,
    Mono,
    Condensed,
}

impl Face {
    pub(super) fn font(self) -> FontRef<'static> {
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
pub(super) enum Case {
    Upper,
    Lower,
    Title,
}

/// How a line of text is set.
#[derive(Debug, Clone, Copy)]
pub(super) struct TypeSpec {
    pub(super) face: Face,
    /// Extra letter spacing in em.
    pub(super) tracking: f32,
    /// Horizontal shear (oblique faux-italic for "script").
    pub(super) skew: f32,
}

/// Taglines: small, widely tracked capitals.
pub(super) const TAGLINE: TypeSpec = TypeSpec {
    face: Face::Sans,
    tracking: 0.22,
    skew: 0.0,
};

pub(super) fn font_has(font: &FontRef<'static>, c: char) -> bool {
    font.glyph_id(c).0 != 0
}

/// A laid-out line in font units (y up).
pub(super) struct Shaped {
    pub(super) glyphs: Vec<(GlyphId, f32, usize)>, // glyph, pen x, word index
    pub(super) ink_min: f32,
    pub(super) ink_max: f32,
    pub(super) ink_bottom: f32,
    pub(super) cap: f32,
}

pub(super) fn shape(font: &FontRef<'static>, text: &str, ts: TypeSpec) -> Shaped {
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
    pub(super) fn width_at(&self, cap_px: f32) -> f32 {
        (self.ink_max - self.ink_min) * cap_px / self.cap
    }
    /// Depth below the baseline in pixels (descenders).
    pub(super) fn depth_at(&self, cap_px: f32) -> f32 {
        -self.ink_bottom * cap_px / self.cap
    }
    /// Largest cap height that fits the box.
    pub(super) fn fit(&self, max_w: f32, max_cap: f32) -> f32 {
        let per_cap = (self.ink_max - self.ink_min) / self.cap;
        max_cap.min(max_w / per_cap.max(1e-3)).max(0.0)
    }
}

/// Glyph outline as a pixel-space path: `left` is where the ink starts.
pub(super) fn glyph_path(
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
pub(super) type GlyphPaint<'a> = &'a dyn Fn(usize, usize) -> (Col, f32);

/// Draws a shaped line; `at` is (x where the ink starts, baseline y).
pub(super) fn draw_line(
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
pub(super) fn draw_centered_text(
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
