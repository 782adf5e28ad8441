//! The layout plan: palette, emblem, lockup and text blocks.

use ab_glyph::FontRef;

use crate::random::{Rng, fnv1a, mix64};

use super::colour::*;
use super::name::*;
use super::raster::*;
use super::spec::*;
use super::text::*;

/// Everything decided before painting.
pub(super) struct Plan {
    pub(super) w: f32,
    pub(super) h: f32,
    pub(super) style: Style,
    pub(super) industry: Industry,
    pub(super) palette: Palette,
    /// Corporate looks and elegant moods get a rule between emblem and name.
    pub(super) divider: bool,
    pub(super) complexity: u32,
    pub(super) family: u32,
    pub(super) brand: Option<String>,
    pub(super) tagline: Option<String>,
    pub(super) monogram: Option<String>,
    pub(super) type_spec: TypeSpec,
    pub(super) mono_face: Face,
    pub(super) horizontal: bool,
    pub(super) two_tone: bool,
    pub(super) rng_seed: u64,
}

/// Whole-word match against a negative prompt.
pub(super) fn mentions(text: &str, words: &[&str]) -> bool {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .any(|w| words.contains(&w))
}

impl Plan {
    pub(super) fn build(spec: &LogoSpec<'_>) -> Self {
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
        let mut rng = Rng::from_state(seed_bits ^ fnv1a(key.as_bytes()).rotate_left(17));
        let mut vrng = Rng::from_state(seed_bits);

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
        let family = vrng.below_u32(4);

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
            rng_seed: rng.next_u64(),
        }
    }

    pub(super) fn paint(&self, cv: &mut Canvas) {
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
    pub(super) fn choose_lines(
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
    pub(super) fn side_by_side<'a>(
        &self,
        options: &'a [Vec<Shaped>],
        tag: Option<&'a Shaped>,
    ) -> Lockup<'a> {
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
    pub(super) fn stacked<'a>(
        &self,
        options: &'a [Vec<Shaped>],
        tag: Option<&'a Shaped>,
    ) -> Lockup<'a> {
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
    pub(super) fn draw_text_block(
        &self,
        cv: &mut Canvas,
        font: &FontRef<'static>,
        block: &TextBlock<'_>,
        origin: P,
        centered: bool,
    ) {
        let (x, top) = origin;
        let pal = &self.palette;
        let mut rng = Rng::from_state(self.rng_seed ^ 0x7465_7874);
        // Playful: letters cycle through the palette colours that read well.
        let readable: Vec<Col> = [pal.primary, pal.secondary, pal.accent, pal.text]
            .into_iter()
            .filter(|c| contrast(*c, pal.bg) >= 3.0)
            .collect();
        let playful = self.style == Style::Playful && readable.len() >= 2;
        let phase = rng.below_u32(3) as usize;
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
pub(super) struct Lockup<'a> {
    pub(super) pen: Pen,
    pub(super) block: TextBlock<'a>,
    /// Top-left of the text block.
    pub(super) origin: P,
    pub(super) centered: bool,
    pub(super) rule: Option<Path>,
}

/// Brand lines plus optional tagline, measured.
pub(super) struct TextBlock<'a> {
    pub(super) lines: &'a [Shaped],
    pub(super) cap: f32,
    pub(super) tag: Option<&'a Shaped>,
    pub(super) tag_cap: Option<f32>,
    pub(super) tag_gap: f32,
    pub(super) width: f32,
    pub(super) height: f32,
}

impl<'a> TextBlock<'a> {
    pub(super) fn new(lines: &'a [Shaped], cap: f32, tag: Option<&'a Shaped>, max_w: f32) -> Self {
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
pub(super) fn line_options(s: &str) -> Vec<Vec<String>> {
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
