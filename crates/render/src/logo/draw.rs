//! Painting a plan: the emblem families and industry motifs.

use std::f32::consts::{FRAC_PI_2, PI, TAU};

use crate::random::Rng;

use super::colour::*;
use super::plan::*;
use super::raster::*;
use super::text::*;

impl Plan {
    pub(super) fn emblem(&self, cv: &mut Canvas, pen: Pen) {
        let mut rng = Rng::from_state(self.rng_seed);
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
    pub(super) fn trim(&self) -> Col {
        let pal = &self.palette;
        if contrast(pal.secondary, pal.primary) >= 2.5 {
            pal.secondary
        } else {
            pal.on_primary
        }
    }

    /// The monogram if there is one, otherwise the industry motif.
    pub(super) fn mark(&self, cv: &mut Canvas, pen: Pen, center: P, half: f32, col: Col) {
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

    pub(super) fn emblem_minimal(&self, cv: &mut Canvas, pen: Pen, _rng: &mut Rng) {
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

    pub(super) fn emblem_geometric(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
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
                        let col = shades[(i * 3 + j * 5 + rng.below_u32(2) as usize) % 4];
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
    pub(super) fn cube(&self, cv: &mut Canvas, pen: Pen, r: f32, cols: [Col; 3], gaps: bool) {
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

    pub(super) fn emblem_tech(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
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
                let base = rng.below_u32(6) as f32 * PI / 3.0;
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
                let start = rng.below_u32(6);
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
    pub(super) fn leaf(base: P, tip: P, width: f32) -> Vec<P> {
        let (dx, dy) = (tip.0 - base.0, tip.1 - base.1);
        let (nx, ny) = (-dy * width, dx * width);
        let at = |t: f32, k: f32| (base.0 + dx * t + nx * k, base.1 + dy * t + ny * k);
        let mut pts = vec![base];
        cubic_to(&mut pts, base, at(0.25, 1.0), at(0.75, 0.75), tip);
        cubic_to(&mut pts, tip, at(0.75, -0.75), at(0.25, -1.0), base);
        pts.pop();
        pts
    }

    pub(super) fn emblem_organic(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
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

    pub(super) fn emblem_vintage(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
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

    pub(super) fn emblem_playful(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
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

    pub(super) fn emblem_corporate(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
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

    pub(super) fn emblem_modern(&self, cv: &mut Canvas, pen: Pen, rng: &mut Rng) {
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
                let start = rng.below_u32(4) as usize;
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
pub(super) fn draw_motif(cv: &mut Canvas, pen: Pen, industry: Industry, col: Col) {
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
