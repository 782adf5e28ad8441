//! Paths, masks with exact signed-area coverage, the canvas and pens.

use std::f32::consts::{FRAC_PI_2, PI, TAU};

use image::RgbImage;

use super::colour::*;

pub(super) type P = (f32, f32);

/// A set of closed contours in pixel space. Filled contours are stored
/// clockwise and holes anticlockwise so overlapping fills unite and holes cut.
#[derive(Debug, Default, Clone)]
pub(super) struct Path {
    pub(super) segs: Vec<(P, P)>,
}

pub(super) fn signed_area(pts: &[P]) -> f32 {
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
    pub(super) fn new() -> Self {
        Self::default()
    }
    pub(super) fn of(pts: &[P]) -> Self {
        let mut p = Self::new();
        p.add(pts);
        p
    }
    pub(super) fn push_oriented(&mut self, pts: &[P], positive: bool) {
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
    pub(super) fn add(&mut self, pts: &[P]) -> &mut Self {
        self.push_oriented(pts, true);
        self
    }
    /// Adds a hole (cuts any filled contour of this path it overlaps).
    pub(super) fn hole(&mut self, pts: &[P]) -> &mut Self {
        self.push_oriented(pts, false);
        self
    }
    /// A straight stroke with round caps (one contour, so edges stay exact).
    pub(super) fn line(&mut self, a: P, b: P, w: f32) -> &mut Self {
        self.polyline(&[a, b], w, false)
    }
    /// A polyline stroke as one outline: mitred joins, round caps. Closed
    /// polylines become an outer contour with an inner hole.
    pub(super) fn polyline(&mut self, pts: &[P], w: f32, closed: bool) -> &mut Self {
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
    pub(super) fn arc(&mut self, c: P, r: f32, a0: f32, a1: f32, w: f32, caps: bool) -> &mut Self {
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
    pub(super) fn ring(&mut self, c: P, r: f32, w: f32) -> &mut Self {
        self.add(&circle(c, r));
        self.hole(&circle(c, (r - w).max(0.0)));
        self
    }
}

pub(super) fn polar(c: P, r: f32, a: f32) -> P {
    (c.0 + r * a.cos(), c.1 + r * a.sin())
}

/// Points along an arc (endpoints included), dense enough for < 0.1 px error.
pub(super) fn arc_pts(c: P, r: f32, a0: f32, a1: f32) -> Vec<P> {
    let full = (r.max(0.5).sqrt() * 9.0).clamp(16.0, 720.0);
    let n = ((full * (a1 - a0).abs() / TAU).ceil() as usize).max(2);
    (0..=n)
        .map(|i| polar(c, r, a0 + (a1 - a0) * i as f32 / n as f32))
        .collect()
}

pub(super) fn circle(c: P, r: f32) -> Vec<P> {
    let mut pts = arc_pts(c, r, 0.0, TAU);
    pts.pop();
    pts
}

pub(super) fn ellipse(c: P, rx: f32, ry: f32, rot: f32) -> Vec<P> {
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
pub(super) fn ngon(c: P, r: f32, n: usize, rot: f32) -> Vec<P> {
    (0..n)
        .map(|i| polar(c, r, rot + TAU * i as f32 / n as f32))
        .collect()
}

pub(super) fn star(c: P, r_out: f32, r_in: f32, n: usize, rot: f32) -> Vec<P> {
    (0..2 * n)
        .map(|i| {
            let r = if i % 2 == 0 { r_out } else { r_in };
            polar(c, r, rot + PI * i as f32 / n as f32)
        })
        .collect()
}

/// Replaces every corner of a convex-ish polygon by a circular fillet.
pub(super) fn rounded(pts: &[P], rad: f32) -> Vec<P> {
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

pub(super) fn norm(v: P) -> P {
    let l = (v.0 * v.0 + v.1 * v.1).sqrt().max(1e-9);
    (v.0 / l, v.1 / l)
}

/// Rectangle with per-corner radii (top-left, top-right, bottom-right, bottom-left).
pub(super) fn rrect4(a: P, b: P, r: [f32; 4]) -> Vec<P> {
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

pub(super) fn rrect(x0: f32, y0: f32, x1: f32, y1: f32, rad: f32) -> Vec<P> {
    rounded(&[(x0, y0), (x1, y0), (x1, y1), (x0, y1)], rad)
}

/// Appends a flattened cubic Bézier (start point excluded).
pub(super) fn cubic_to(out: &mut Vec<P>, p0: P, p1: P, p2: P, p3: P) {
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

pub(super) fn quad_to(out: &mut Vec<P>, p0: P, p1: P, p2: P) {
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

pub(super) fn dist(a: P, b: P) -> f32 {
    ((a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)).sqrt()
}

/// Coverage of a path over its bounding box (clipped to the canvas).
pub(super) struct Mask {
    pub(super) x0: usize,
    pub(super) y0: usize,
    pub(super) w: usize,
    pub(super) h: usize,
    pub(super) cov: Vec<f32>,
}

impl Mask {
    pub(super) fn at(&self, x: usize, y: usize) -> f32 {
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
pub(super) fn rasterize(path: &Path, cw: u32, ch: u32) -> Option<Mask> {
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

pub(super) fn accumulate(acc: &mut [f32], stride: usize, w: f32, h: usize, p0: P, p1: P) {
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

pub(super) struct Canvas {
    pub(super) img: RgbImage,
}

impl Canvas {
    pub(super) fn clear(&mut self, c: Col) {
        let px = to_u8(c);
        for p in self.img.pixels_mut() {
            p.0 = px;
        }
    }

    pub(super) fn blend_mask(&mut self, m: &Mask, c: Col, alpha: f32) {
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

    pub(super) fn fill(&mut self, path: &Path, c: Col) {
        self.fill_alpha(path, c, 1.0);
    }

    pub(super) fn fill_alpha(&mut self, path: &Path, c: Col, alpha: f32) {
        if let Some(m) = rasterize(path, self.img.width(), self.img.height()) {
            self.blend_mask(&m, c, alpha);
        }
    }

    /// Fills the intersection of two paths (flat "overlap" colours, clipped
    /// decorations).
    pub(super) fn fill_intersection(&mut self, a: &Path, b: &Path, c: Col) {
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

pub(super) fn to_u8(c: Col) -> [u8; 3] {
    c.map(|v| (v * 255.0).round().clamp(0.0, 255.0) as u8)
}

/// Maps emblem-local unit coordinates (centre 0,0, radius 1, y down) to pixels.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pen {
    pub(super) cx: f32,
    pub(super) cy: f32,
    pub(super) s: f32,
}

impl Pen {
    pub(super) fn p(&self, x: f32, y: f32) -> P {
        (self.cx + x * self.s, self.cy + y * self.s)
    }
    pub(super) fn l(&self, v: f32) -> f32 {
        v * self.s
    }
    pub(super) fn pts(&self, unit: &[P]) -> Vec<P> {
        unit.iter().map(|&(x, y)| self.p(x, y)).collect()
    }
    /// A sub-pen centred at unit point (x, y) with unit radius `r`.
    pub(super) fn sub(&self, x: f32, y: f32, r: f32) -> Pen {
        Pen {
            cx: self.cx + x * self.s,
            cy: self.cy + y * self.s,
            s: self.s * r,
        }
    }
}
