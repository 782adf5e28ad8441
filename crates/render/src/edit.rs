//! Classical image edits behind the offline `local` provider.
//!
//! Nine operations done with plain image processing, no learned models:
//! holes are filled by a coarse-to-fine membrane (Laplace) fill plus detail
//! mirrored in from the hole's edges; outpainting grows the canvas the same
//! way; mattes come from a border colour model, a minimum-barrier flood from
//! the frame and a centre prior; super resolution is Lanczos3 plus an unsharp
//! mask; face enhancement is a guided filter with local contrast; colorization
//! maps luminance quantiles to the chroma of a palette picture; styles are
//! Kuwahara, pencil dodge, watercolour washes, pixelation, cel shading or a
//! palette transfer. Where an edit needs new content from text (a replacement
//! background, an outpainted border, a palette) it borrows the procedural
//! landscape renderer. Same inputs and seed give the same pixels.
//!
//! Loops index several parallel per-pixel arrays at once, so they use plain
//! index ranges.
#![allow(clippy::needless_range_loop)]

use std::cmp::Ordering;

use image::codecs::jpeg::JpegEncoder;
use image::{DynamicImage, ExtendedColorType, GrayImage, ImageEncoder, RgbImage, RgbaImage};

use super::render::{RenderSpec, RenderStyle, render};
use crate::random::mix64;
use unigen_core::ProviderError;

/// The edit to perform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditOperation {
    Inpainting,
    Outpainting,
    BackgroundRemoval,
    BackgroundReplace,
    ObjectRemoval,
    SuperResolution,
    FaceEnhancement,
    Colorization,
    StyleTransfer,
}

/// Side(s) of the canvas that outpainting grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Left,
    Right,
    Top,
    Bottom,
    All,
}

/// What to do; fields an operation does not use are ignored.
#[derive(Debug, Clone)]
pub struct EditSpec<'a> {
    pub operation: EditOperation,
    /// Required (validated by the caller) for inpainting and style transfer.
    pub prompt: Option<&'a str>,
    /// 0..=1: how strongly the edit applies (blend with the original).
    pub strength: f32,
    pub seed: u64,
    /// Outpainting.
    pub direction: Direction,
    /// Outpainting; the caller caps it at 2048.
    pub expand_pixels: u32,
    /// Background replacement (text description).
    pub new_background: Option<&'a str>,
    /// Super resolution: 2 or 4.
    pub scale: u32,
}

/// Largest outpainting growth accepted (the caller caps at 2048 already).
const MAX_EXPAND: u32 = 2048;
/// Largest super resolution output, in pixels (8192 x 8192).
const MAX_OUTPUT_PIXELS: u64 = 8192 * 8192;

/// Applies the edit. `mask` (same size as image; white = edit, black = keep)
/// is required for Inpainting and ObjectRemoval; other operations ignore it.
/// Returns RGBA8 for BackgroundRemoval (transparent background), RGB8
/// otherwise.
///
/// `strength` blends the result with the original wherever the sizes match.
/// Outpainting and super resolution change the size, so there it scales the
/// prompt's influence and the sharpening instead; background removal always
/// returns a full cut-out (a half-transparent background is of no use).
pub fn apply(
    spec: &EditSpec<'_>,
    image: &DynamicImage,
    mask: Option<&GrayImage>,
) -> Result<DynamicImage, ProviderError> {
    let (w, h) = (image.width(), image.height());
    if w == 0 || h == 0 {
        return Err(ProviderError::Permanent(
            "image has no pixels (zero width or height)".into(),
        ));
    }
    let strength = if spec.strength.is_finite() {
        spec.strength.clamp(0.0, 1.0)
    } else {
        0.95
    };
    let prompt = spec.prompt.map(str::trim).filter(|p| !p.is_empty());
    let rgb = image.to_rgb8();
    let seed = spec.seed;
    let out = match spec.operation {
        EditOperation::Inpainting | EditOperation::ObjectRemoval => {
            let mask = checked_mask(spec.operation, mask, w, h)?;
            let content = if spec.operation == EditOperation::Inpainting {
                prompt
            } else {
                None
            };
            inpaint(&rgb, mask, content, seed)
        }
        EditOperation::Outpainting => {
            if spec.expand_pixels == 0 || spec.expand_pixels > MAX_EXPAND {
                return Err(ProviderError::Permanent(format!(
                    "expand_pixels must be between 1 and {MAX_EXPAND}, got {}",
                    spec.expand_pixels
                )));
            }
            let out = outpaint(
                &rgb,
                spec.direction,
                spec.expand_pixels as usize,
                prompt,
                seed,
                strength,
            );
            return Ok(DynamicImage::ImageRgb8(out));
        }
        EditOperation::SuperResolution => {
            let out = super_resolve(&rgb, spec.scale, strength)?;
            return Ok(DynamicImage::ImageRgb8(out));
        }
        EditOperation::BackgroundRemoval => {
            return Ok(DynamicImage::ImageRgba8(remove_background(&rgb)));
        }
        EditOperation::BackgroundReplace => {
            let text = spec
                .new_background
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .or(prompt)
                .unwrap_or(DEFAULT_BACKGROUND);
            replace_background(&rgb, text, seed)
        }
        EditOperation::FaceEnhancement => enhance_face(&rgb),
        EditOperation::Colorization => colorize(&rgb, prompt, seed),
        EditOperation::StyleTransfer => stylize(&rgb, prompt.unwrap_or(""), seed),
    };
    Ok(DynamicImage::ImageRgb8(blend_with(&rgb, out, strength)))
}

/// True when the operation's output carries transparency (caller encodes PNG
/// then, JPEG otherwise).
pub fn has_transparency(op: EditOperation) -> bool {
    op == EditOperation::BackgroundRemoval
}

/// PNG bytes (RGBA or RGB as given; other layouts are converted to one of
/// them). Fast deflate: edit results are large and encode time matters more
/// than the last few percent of size. Empty on an encoder failure, which only
/// a zero-sized image can cause.
pub fn encode_png(img: &DynamicImage) -> Vec<u8> {
    let (raw, color) = match img {
        DynamicImage::ImageRgb8(i) => (i.as_raw().clone(), ExtendedColorType::Rgb8),
        DynamicImage::ImageRgba8(i) => (i.as_raw().clone(), ExtendedColorType::Rgba8),
        other if other.color().has_alpha() => {
            (other.to_rgba8().into_raw(), ExtendedColorType::Rgba8)
        }
        other => (other.to_rgb8().into_raw(), ExtendedColorType::Rgb8),
    };
    crate::render::encode_png_raw(&raw, img.width(), img.height(), color)
}

/// JPEG bytes, quality 90 (converts to RGB first, dropping any alpha). Empty
/// on an encoder failure, which only a zero-sized image can cause.
pub fn encode_jpeg(img: &DynamicImage) -> Vec<u8> {
    let rgb = img.to_rgb8();
    let mut out = Vec::with_capacity(rgb.as_raw().len() / 8 + 1024);
    let encoder = JpegEncoder::new_with_quality(&mut out, 90);
    match encoder.write_image(
        rgb.as_raw(),
        rgb.width(),
        rgb.height(),
        ExtendedColorType::Rgb8,
    ) {
        Ok(()) => out,
        Err(_) => Vec::new(),
    }
}

fn checked_mask(
    op: EditOperation,
    mask: Option<&GrayImage>,
    w: u32,
    h: u32,
) -> Result<&GrayImage, ProviderError> {
    let name = if op == EditOperation::Inpainting {
        "inpainting"
    } else {
        "object removal"
    };
    match mask {
        None => Err(ProviderError::Permanent(format!(
            "mask must be supplied for {name}, with the same dimensions as the image ({w}x{h})"
        ))),
        Some(m) if m.dimensions() != (w, h) => Err(ProviderError::Permanent(format!(
            "mask must be the same dimensions as the image ({w}x{h}), got {}x{}",
            m.width(),
            m.height()
        ))),
        Some(m) => Ok(m),
    }
}

/// `orig + (edited - orig) * strength`, rounded; pixels the edit left alone
/// stay bit-identical.
fn blend_with(orig: &RgbImage, mut edited: RgbImage, strength: f32) -> RgbImage {
    if strength >= 1.0 || edited.dimensions() != orig.dimensions() {
        return edited;
    }
    let raw: &mut [u8] = &mut edited;
    for (e, &o) in raw.iter_mut().zip(orig.as_raw()) {
        let (ev, ov) = (f32::from(*e), f32::from(o));
        *e = to_u8(ov + (ev - ov) * strength);
    }
    edited
}

// ---------------------------------------------------------------------------
// Shared helpers: float buffers, blurs, sampling, hashing
// ---------------------------------------------------------------------------

type Rgbf = [f32; 3];

fn to_f32(img: &RgbImage) -> Vec<Rgbf> {
    img.as_raw()
        .chunks_exact(3)
        .map(|p| [f32::from(p[0]), f32::from(p[1]), f32::from(p[2])])
        .collect()
}

fn to_u8(v: f32) -> u8 {
    v.round().clamp(0.0, 255.0) as u8
}

fn from_f32(px: &[Rgbf], w: usize, h: usize) -> RgbImage {
    let raw: Vec<u8> = px.iter().flat_map(|p| p.map(to_u8)).collect();
    RgbImage::from_raw(w as u32, h as u32, raw).expect("buffer matches dimensions")
}

fn luma(p: Rgbf) -> f32 {
    0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]
}

fn mix(a: Rgbf, b: Rgbf, t: f32) -> Rgbf {
    [
        a[0] + (b[0] - a[0]) * t,
        a[1] + (b[1] - a[1]) * t,
        a[2] + (b[2] - a[2]) * t,
    ]
}

fn dist(a: Rgbf, b: Rgbf) -> f32 {
    let (d0, d1, d2) = (a[0] - b[0], a[1] - b[1], a[2] - b[2]);
    (d0 * d0 + d1 * d1 + d2 * d2).sqrt()
}

fn smoothstep(e0: f32, e1: f32, x: f32) -> f32 {
    let t = ((x - e0) / (e1 - e0)).clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}

/// Rec.601 YCbCr (chroma centred on 0).
fn to_ycc(p: Rgbf) -> Rgbf {
    let y = luma(p);
    [y, 0.564 * (p[2] - y), 0.713 * (p[0] - y)]
}

fn from_ycc(c: Rgbf) -> Rgbf {
    let [y, cb, cr] = c;
    [
        y + 1.402 * cr,
        y - 0.344_136 * cb - 0.714_136 * cr,
        y + 1.772 * cb,
    ]
}

/// Hash of a lattice point and a key, in [0, 1).
fn hash01(x: i64, y: i64, key: u64) -> f32 {
    let h = mix64(key ^ mix64((x as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (y as u64)));
    (h >> 40) as f32 * (1.0 / 16_777_216.0)
}

/// Smooth value noise in [0, 1) with unit lattice spacing.
fn value_noise(x: f32, y: f32, key: u64) -> f32 {
    let (xf, yf) = (x.floor(), y.floor());
    let (xi, yi) = (xf as i64, yf as i64);
    let (tx, ty) = (x - xf, y - yf);
    let (sx, sy) = (tx * tx * (3.0 - 2.0 * tx), ty * ty * (3.0 - 2.0 * ty));
    let a = hash01(xi, yi, key);
    let b = hash01(xi + 1, yi, key);
    let c = hash01(xi, yi + 1, key);
    let d = hash01(xi + 1, yi + 1, key);
    let top = a + (b - a) * sx;
    let bottom = c + (d - c) * sx;
    top + (bottom - top) * sy
}

/// Three octaves of value noise, in [0, 1).
fn fbm(x: f32, y: f32, key: u64) -> f32 {
    0.55 * value_noise(x, y, key)
        + 0.3 * value_noise(x * 2.1, y * 2.1, key ^ 1)
        + 0.15 * value_noise(x * 4.3, y * 4.3, key ^ 2)
}

/// Seed for a derived random stream, so different uses of one seed differ.
fn sub_seed(seed: u64, salt: u64) -> u64 {
    mix64(seed ^ salt.wrapping_mul(0xd6e8_feb8_6659_fd93))
}

/// Box blur of radius `r` (window 2r+1, shrunk at the borders so edges are
/// not darkened). Running sums: O(pixels) whatever the radius.
fn box_blur<const N: usize>(src: &[[f32; N]], w: usize, h: usize, r: usize) -> Vec<[f32; N]> {
    if r == 0 || src.is_empty() {
        return src.to_vec();
    }
    let mut tmp = vec![[0f32; N]; w * h];
    for y in 0..h {
        let row = &src[y * w..(y + 1) * w];
        let out = &mut tmp[y * w..(y + 1) * w];
        let mut acc = [0f64; N];
        let (mut lo, mut hi) = (0usize, 0usize);
        for x in 0..w {
            let want_hi = (x + r + 1).min(w);
            while hi < want_hi {
                for c in 0..N {
                    acc[c] += f64::from(row[hi][c]);
                }
                hi += 1;
            }
            let want_lo = x.saturating_sub(r);
            while lo < want_lo {
                for c in 0..N {
                    acc[c] -= f64::from(row[lo][c]);
                }
                lo += 1;
            }
            let inv = 1.0 / (hi - lo) as f64;
            for c in 0..N {
                out[x][c] = (acc[c] * inv) as f32;
            }
        }
    }
    let mut dst = vec![[0f32; N]; w * h];
    let mut acc = vec![[0f64; N]; w];
    let (mut lo, mut hi) = (0usize, 0usize);
    for y in 0..h {
        let want_hi = (y + r + 1).min(h);
        while hi < want_hi {
            for (a, p) in acc.iter_mut().zip(&tmp[hi * w..(hi + 1) * w]) {
                for c in 0..N {
                    a[c] += f64::from(p[c]);
                }
            }
            hi += 1;
        }
        let want_lo = y.saturating_sub(r);
        while lo < want_lo {
            for (a, p) in acc.iter_mut().zip(&tmp[lo * w..(lo + 1) * w]) {
                for c in 0..N {
                    a[c] -= f64::from(p[c]);
                }
            }
            lo += 1;
        }
        let inv = 1.0 / (hi - lo) as f64;
        for (d, a) in dst[y * w..(y + 1) * w].iter_mut().zip(&acc) {
            for c in 0..N {
                d[c] = (a[c] * inv) as f32;
            }
        }
    }
    dst
}

/// Gaussian blur approximated by three box passes of matching variance.
fn gauss<const N: usize>(src: &[[f32; N]], w: usize, h: usize, sigma: f32) -> Vec<[f32; N]> {
    // Three boxes of radius r have variance r(r+1).
    let r = ((sigma * sigma + 0.25).sqrt() - 0.5).round().max(0.0) as usize;
    if r == 0 {
        return src.to_vec();
    }
    let a = box_blur(src, w, h, r);
    let b = box_blur(&a, w, h, r);
    box_blur(&b, w, h, r)
}

/// Bilinear sample at continuous pixel coordinates (pixel centres at
/// integers), clamped to the buffer.
fn sample<const N: usize>(src: &[[f32; N]], w: usize, h: usize, x: f32, y: f32) -> [f32; N] {
    let x = x.clamp(0.0, (w - 1) as f32);
    let y = y.clamp(0.0, (h - 1) as f32);
    let (x0, y0) = (x as usize, y as usize);
    let (x1, y1) = ((x0 + 1).min(w - 1), (y0 + 1).min(h - 1));
    let (fx, fy) = (x - x0 as f32, y - y0 as f32);
    let (a, b) = (&src[y0 * w + x0], &src[y0 * w + x1]);
    let (c, d) = (&src[y1 * w + x0], &src[y1 * w + x1]);
    let mut out = [0f32; N];
    for k in 0..N {
        let top = a[k] + (b[k] - a[k]) * fx;
        let bottom = c[k] + (d[k] - c[k]) * fx;
        out[k] = top + (bottom - top) * fy;
    }
    out
}

/// Resamples a buffer to another size bilinearly.
fn resize_bilinear(src: &[Rgbf], sw: usize, sh: usize, w: usize, h: usize) -> Vec<Rgbf> {
    let (kx, ky) = (sw as f32 / w as f32, sh as f32 / h as f32);
    let mut out = Vec::with_capacity(w * h);
    for y in 0..h {
        let sy = (y as f32 + 0.5) * ky - 0.5;
        for x in 0..w {
            out.push(sample(src, sw, sh, (x as f32 + 0.5) * kx - 0.5, sy));
        }
    }
    out
}

/// A render of `prompt` at w x h. Large sizes are rendered at about one
/// megapixel and scaled up: the callers only use it softly blended in.
fn render_f32(prompt: &str, seed: u64, w: usize, h: usize) -> Vec<Rgbf> {
    const MAX_PIXELS: usize = 1 << 20;
    let (mut rw, mut rh) = (w, h);
    while rw * rh > MAX_PIXELS {
        rw = rw.div_ceil(2);
        rh = rh.div_ceil(2);
    }
    let img = render(&RenderSpec {
        prompt,
        negative_prompt: None,
        seed,
        style: RenderStyle::Vivid,
        width: rw as u32,
        height: rh as u32,
    });
    let px = to_f32(&img);
    if (rw, rh) == (w, h) {
        px
    } else {
        resize_bilinear(&px, rw, rh, w, h)
    }
}

/// Per-channel mean and standard deviation (at least 1).
fn stats<'a>(px: impl Iterator<Item = &'a Rgbf>) -> (Rgbf, Rgbf) {
    let mut sum = [0f64; 3];
    let mut sq = [0f64; 3];
    let mut n = 0f64;
    for p in px {
        for c in 0..3 {
            sum[c] += f64::from(p[c]);
            sq[c] += f64::from(p[c]) * f64::from(p[c]);
        }
        n += 1.0;
    }
    if n == 0.0 {
        return ([128.0; 3], [1.0; 3]);
    }
    let mut mean = [0f32; 3];
    let mut sd = [0f32; 3];
    for c in 0..3 {
        let m = sum[c] / n;
        mean[c] = m as f32;
        sd[c] = ((sq[c] / n - m * m).max(0.0).sqrt() as f32).max(1.0);
    }
    (mean, sd)
}

/// Moves `p` from the `from` statistics toward the `to` statistics by `k`
/// (Reinhard-style transfer).
fn transfer(p: Rgbf, from: &(Rgbf, Rgbf), to: &(Rgbf, Rgbf), k: f32) -> Rgbf {
    let mut out = p;
    for c in 0..3 {
        let moved = (p[c] - from.0[c]) / from.1[c] * to.1[c] + to.0[c];
        out[c] = p[c] + (moved - p[c]) * k;
    }
    out
}

/// Approximate Euclidean distance (chamfer 1/sqrt 2) from every `inside`
/// pixel to the nearest pixel that is not inside; 0 for pixels outside.
/// The image border does not count as an edge; with no outside pixel at all
/// every distance is `f32::MAX`.
fn chamfer(inside: &[bool], w: usize, h: usize) -> Vec<f32> {
    const D1: f32 = 1.0;
    const D2: f32 = std::f32::consts::SQRT_2;
    let big = f32::MAX / 4.0;
    let mut d: Vec<f32> = inside.iter().map(|&i| if i { big } else { 0.0 }).collect();
    for y in 0..h {
        for x in 0..w {
            let i = y * w + x;
            if d[i] == 0.0 {
                continue;
            }
            let mut v = d[i];
            if x > 0 {
                v = v.min(d[i - 1] + D1);
            }
            if y > 0 {
                v = v.min(d[i - w] + D1);
                if x > 0 {
                    v = v.min(d[i - w - 1] + D2);
                }
                if x + 1 < w {
                    v = v.min(d[i - w + 1] + D2);
                }
            }
            d[i] = v;
        }
    }
    for y in (0..h).rev() {
        for x in (0..w).rev() {
            let i = y * w + x;
            if d[i] == 0.0 {
                continue;
            }
            let mut v = d[i];
            if x + 1 < w {
                v = v.min(d[i + 1] + D1);
            }
            if y + 1 < h {
                v = v.min(d[i + w] + D1);
                if x + 1 < w {
                    v = v.min(d[i + w + 1] + D2);
                }
                if x > 0 {
                    v = v.min(d[i + w - 1] + D2);
                }
            }
            d[i] = v;
        }
    }
    for v in &mut d {
        if *v >= big {
            *v = f32::MAX;
        }
    }
    d
}

/// Fills the pixels where `known` is false with a membrane (harmonic)
/// interpolation of the known pixels bordering them: the smoothest surface
/// through the hole's boundary. `coupling(u, v)` gives the horizontal and
/// vertical neighbour weights at a position (0..1 across the buffer): making
/// one direction stronger carries structure along it (inpainting favours
/// horizontal because natural pictures are layered: horizons, shores, ridges;
/// outpainting favours the direction away from the image). Solved coarse to fine: each level starts from the next coarser one
/// (built from the boundary pixels only, so far-away known areas do not tint
/// the fill) and is relaxed with a few Gauss-Seidel sweeps, so even huge holes
/// cost O(pixels). With nothing known the buffer becomes mid grey.
fn membrane_fill(
    vals: &mut [Rgbf],
    known: &[bool],
    w: usize,
    h: usize,
    coupling: &dyn Fn(f32, f32) -> (f32, f32),
) {
    const SWEEPS: usize = 8;
    let unknown: Vec<usize> = (0..w * h).filter(|&i| !known[i]).collect();
    if unknown.is_empty() {
        return;
    }
    if unknown.len() == w * h {
        vals.fill([128.0; 3]);
        return;
    }
    // Known pixels with an unknown 4-neighbour: the boundary values.
    let boundary = |i: usize| {
        let (x, y) = (i % w, i / w);
        known[i]
            && ((x > 0 && !known[i - 1])
                || (x + 1 < w && !known[i + 1])
                || (y > 0 && !known[i - w])
                || (y + 1 < h && !known[i + w]))
    };
    if w * h <= 4 {
        let (mean, _) = stats((0..w * h).filter(|&i| known[i]).map(|i| &vals[i]));
        for &i in &unknown {
            vals[i] = mean;
        }
        return;
    }
    let (cw, ch) = (w.div_ceil(2), h.div_ceil(2));
    let mut cv = vec![[0f32; 3]; cw * ch];
    let mut ck = vec![false; cw * ch];
    for cy in 0..ch {
        for cx in 0..cw {
            let mut sum = [0f32; 3];
            let mut n = 0f32;
            for y in 2 * cy..(2 * cy + 2).min(h) {
                for x in 2 * cx..(2 * cx + 2).min(w) {
                    let i = y * w + x;
                    if boundary(i) {
                        for c in 0..3 {
                            sum[c] += vals[i][c];
                        }
                        n += 1.0;
                    }
                }
            }
            if n > 0.0 {
                cv[cy * cw + cx] = sum.map(|s| s / n);
                ck[cy * cw + cx] = true;
            }
        }
    }
    membrane_fill(&mut cv, &ck, cw, ch, coupling);
    let weights: Vec<(f32, f32)> = unknown
        .iter()
        .map(|&i| {
            let u = ((i % w) as f32 + 0.5) / w as f32;
            let v = ((i / w) as f32 + 0.5) / h as f32;
            coupling(u, v)
        })
        .collect();
    for &i in &unknown {
        let (x, y) = ((i % w) as f32, (i / w) as f32);
        vals[i] = sample(&cv, cw, ch, (x + 0.5) * 0.5 - 0.5, (y + 0.5) * 0.5 - 0.5);
    }
    for _ in 0..SWEEPS {
        for (&i, &(wx, wy)) in unknown.iter().zip(&weights) {
            let (x, y) = (i % w, i / w);
            let mut sum = [0f32; 3];
            let mut n = 0f32;
            let mut add = |j: usize, wt: f32| {
                for c in 0..3 {
                    sum[c] += wt * vals[j][c];
                }
                n += wt;
            };
            if x > 0 {
                add(i - 1, wx);
            }
            if x + 1 < w {
                add(i + 1, wx);
            }
            if y > 0 {
                add(i - w, wy);
            }
            if y + 1 < h {
                add(i + w, wy);
            }
            vals[i] = sum.map(|s| s / n);
        }
    }
}

// ---------------------------------------------------------------------------
// Inpainting and object removal
// ---------------------------------------------------------------------------

/// Pixels this far outside the mask are refilled too and blended back, so an
/// object's anti-aliased halo disappears with it.
const MASK_BAND: f32 = 2.0;

fn inpaint(img: &RgbImage, mask: &GrayImage, prompt: Option<&str>, seed: u64) -> RgbImage {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let n = w * h;
    let m = mask.as_raw();
    let hole0: Vec<bool> = m.iter().map(|&v| v >= 128).collect();
    if !m.iter().any(|&v| v > 0) {
        return img.clone();
    }
    let src = to_f32(img);
    let outside: Vec<bool> = hole0.iter().map(|&b| !b).collect();
    let dist_out = chamfer(&outside, w, h);
    let hole: Vec<bool> = (0..n)
        .map(|i| hole0[i] || dist_out[i] <= MASK_BAND + 0.01)
        .collect();
    let mut filled = fill_hole(&src, &hole, w, h);

    if let Some(prompt) = prompt
        && hole0.iter().any(|&b| b)
    {
        blend_prompt_content(&mut filled, &src, &hole0, &dist_out, prompt, seed, w, h);
    }

    let mut out = src.clone();
    for i in 0..n {
        let weight = if hole0[i] {
            1.0
        } else {
            let band = if dist_out[i] <= MASK_BAND + 0.01 {
                1.0 - dist_out[i] / (MASK_BAND + 1.0)
            } else {
                0.0
            };
            band.max(f32::from(m[i]) / 255.0)
        };
        if weight > 0.0 {
            out[i] = mix(src[i], filled[i], weight);
        }
    }
    // Rounding the float copy of untouched pixels gives back the same bytes.
    from_f32(&out, w, h)
}

/// Paints a render of the prompt into the hole: colour-matched halfway to the
/// hole's surroundings and faded in from the hole's edge, over the plain fill.
#[allow(clippy::too_many_arguments)]
fn blend_prompt_content(
    filled: &mut [Rgbf],
    src: &[Rgbf],
    hole0: &[bool],
    dist_out: &[f32],
    prompt: &str,
    seed: u64,
    w: usize,
    h: usize,
) {
    let (mut x0, mut y0, mut x1, mut y1) = (w, h, 0, 0);
    for y in 0..h {
        for x in 0..w {
            if hole0[y * w + x] {
                x0 = x0.min(x);
                x1 = x1.max(x);
                y0 = y0.min(y);
                y1 = y1.max(y);
            }
        }
    }
    let (bw, bh) = (x1 - x0 + 1, y1 - y0 + 1);
    let content = render_f32(prompt, seed, bw, bh);
    let ring = stats(
        (0..w * h)
            .filter(|&i| dist_out[i] > MASK_BAND + 0.01 && dist_out[i] <= MASK_BAND + 12.0)
            .map(|i| &src[i]),
    );
    let own = stats(content.iter());
    let dist_in = chamfer(hole0, w, h);
    // Fade in over most of the hole's depth: the content shows fully only at
    // its heart and melts into the fill toward the edges, with no frame.
    let depth = (0..w * h)
        .filter(|&i| hole0[i] && dist_in[i] < f32::MAX)
        .map(|i| dist_in[i])
        .fold(0.0f32, f32::max);
    let feather = if depth > 0.0 {
        (depth * 0.85).max(2.0)
    } else {
        (bw.min(bh) as f32 / 2.0).max(2.0)
    };
    for y in y0..=y1 {
        for x in x0..=x1 {
            let i = y * w + x;
            if !hole0[i] {
                continue;
            }
            let c = transfer(content[(y - y0) * bw + (x - x0)], &own, &ring, 0.5);
            let d = if dist_in[i] == f32::MAX {
                feather
            } else {
                dist_in[i]
            };
            let alpha = 0.85 * smoothstep(0.0, feather, d);
            filled[i] = mix(filled[i], c, alpha);
        }
    }
}

/// Fills `hole` from its surroundings: a membrane fill of the low-passed known
/// pixels carries the colours in, then high-frequency detail mirrored across
/// the nearest hole edges (left, right, up, down; nearer edges weigh more)
/// restores texture and carries lines such as horizons through the hole
/// (sideways sources weigh more, as in the membrane).
fn fill_hole(src: &[Rgbf], hole: &[bool], w: usize, h: usize) -> Vec<Rgbf> {
    let n = w * h;
    // Low-pass of the known pixels only (normalised convolution), so the hole's
    // content does not bleed into the colours carried in.
    let weighted: Vec<[f32; 4]> = (0..n)
        .map(|i| {
            if hole[i] {
                [0.0; 4]
            } else {
                [src[i][0], src[i][1], src[i][2], 1.0]
            }
        })
        .collect();
    let wb = gauss(&weighted, w, h, 2.0);
    let mut low: Vec<Rgbf> = src.to_vec();
    for i in 0..n {
        if !hole[i] && wb[i][3] > 1e-4 {
            let k = 1.0 / wb[i][3];
            low[i] = [wb[i][0] * k, wb[i][1] * k, wb[i][2] * k];
        }
    }
    let detail_at = |j: usize| -> Rgbf {
        [
            src[j][0] - low[j][0],
            src[j][1] - low[j][1],
            src[j][2] - low[j][2],
        ]
    };
    let known: Vec<bool> = hole.iter().map(|&b| !b).collect();
    let mut out = low.clone();
    membrane_fill(&mut out, &known, w, h, &|_, _| (1.0, 0.3));

    // Distances to the nearest known pixel in the four directions (0 = none).
    let mut left = vec![0u32; n];
    let mut right = vec![0u32; n];
    let mut up = vec![0u32; n];
    let mut down = vec![0u32; n];
    for y in 0..h {
        let mut last: Option<usize> = None;
        for x in 0..w {
            let i = y * w + x;
            if known[i] {
                last = Some(x);
            } else if let Some(l) = last {
                left[i] = (x - l) as u32;
            }
        }
        last = None;
        for x in (0..w).rev() {
            let i = y * w + x;
            if known[i] {
                last = Some(x);
            } else if let Some(r) = last {
                right[i] = (r - x) as u32;
            }
        }
    }
    let mut last_row: Vec<Option<usize>> = vec![None; w];
    for y in 0..h {
        for x in 0..w {
            let i = y * w + x;
            if known[i] {
                last_row[x] = Some(y);
            } else if let Some(u) = last_row[x] {
                up[i] = (y - u) as u32;
            }
        }
    }
    last_row.fill(None);
    for y in (0..h).rev() {
        for x in 0..w {
            let i = y * w + x;
            if known[i] {
                last_row[x] = Some(y);
            } else if let Some(d) = last_row[x] {
                down[i] = (d - y) as u32;
            }
        }
    }

    for i in 0..n {
        if known[i] {
            out[i] = src[i];
            continue;
        }
        let (x, y) = (i % w, i / w);
        let mut acc = [0f32; 3];
        let mut wsum2 = 0f32;
        let mut add = |d: u32, bias: f32, source: Option<usize>| {
            if d == 0 {
                return;
            }
            if let Some(j) = source.filter(|&j| known[j]) {
                let wt = bias / (d as f32 * d as f32);
                let det = detail_at(j);
                for c in 0..3 {
                    acc[c] += wt * det[c];
                }
                wsum2 += wt * wt;
            }
        };
        // Mirror across the edge between the hole and its nearest known pixel.
        let d = left[i] as usize;
        add(
            left[i],
            3.0,
            (d > 0 && x + 1 >= 2 * d).then(|| y * w + x + 1 - 2 * d),
        );
        let d = right[i] as usize;
        add(
            right[i],
            3.0,
            (d > 0 && x + 2 * d - 1 < w).then(|| y * w + x + 2 * d - 1),
        );
        let d = up[i] as usize;
        add(
            up[i],
            1.0,
            (d > 0 && y + 1 >= 2 * d).then(|| (y + 1 - 2 * d) * w + x),
        );
        let d = down[i] as usize;
        add(
            down[i],
            1.0,
            (d > 0 && y + 2 * d - 1 < h).then(|| (y + 2 * d - 1) * w + x),
        );
        if wsum2 > 0.0 {
            let k = 1.0 / wsum2.sqrt();
            for c in 0..3 {
                out[i][c] += acc[c] * k;
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Outpainting
// ---------------------------------------------------------------------------

/// Reflects an index into 0..n (periodic mirror: ... 1 0 | 0 1 .. n-1 | n-1 ...).
fn reflect(i: isize, n: usize) -> usize {
    let n = n as isize;
    let m = i.rem_euclid(2 * n);
    (if m < n { m } else { 2 * n - 1 - m }) as usize
}

/// Grows the canvas. The new area is the membrane continuation of the
/// low-passed image (edge colours stretched outward, ever blurrier), plus the
/// image's own detail mirrored across the edge and fading with distance, and
/// with a prompt, a colour-matched render of it taking over farther out. At
/// the join that sum equals the edge pixels, so there is no seam.
fn outpaint(
    img: &RgbImage,
    dir: Direction,
    e: usize,
    prompt: Option<&str>,
    seed: u64,
    strength: f32,
) -> RgbImage {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let (l, r, t, b) = match dir {
        Direction::Left => (e, 0, 0, 0),
        Direction::Right => (0, e, 0, 0),
        Direction::Top => (0, 0, e, 0),
        Direction::Bottom => (0, 0, 0, e),
        Direction::All => (e, e, e, e),
    };
    let (cw, ch) = (w + l + r, h + t + b);
    let src = to_f32(img);
    let low = gauss(&src, w, h, 3.0);

    // The membrane is solved on a grid of at most about a megapixel.
    let mut f = 1usize;
    while cw.div_ceil(f) * ch.div_ceil(f) > 1 << 20 {
        f *= 2;
    }
    let (gw, gh) = (cw.div_ceil(f), ch.div_ceil(f));
    let mut grid = vec![[0f32; 3]; gw * gh];
    let mut gknown = vec![false; gw * gh];
    for gy in 0..gh {
        for gx in 0..gw {
            let (xa, xb) = (gx * f, ((gx + 1) * f).min(cw));
            let (ya, yb) = (gy * f, ((gy + 1) * f).min(ch));
            if xa < l || xb > l + w || ya < t || yb > t + h {
                continue;
            }
            let mut sum = [0f32; 3];
            for y in ya..yb {
                for x in xa..xb {
                    let p = low[(y - t) * w + (x - l)];
                    for c in 0..3 {
                        sum[c] += p[c];
                    }
                }
            }
            let k = 1.0 / ((xb - xa) * (yb - ya)) as f32;
            grid[gy * gw + gx] = sum.map(|s| s * k);
            gknown[gy * gw + gx] = true;
        }
    }
    // Couple along the direction away from the image: side strips stretch
    // the edge columns sideways, top and bottom strips the edge rows.
    let (rx0, rx1) = (l as f32 / cw as f32, (l + w) as f32 / cw as f32);
    let (ry0, ry1) = (t as f32 / ch as f32, (t + h) as f32 / ch as f32);
    let (cwf, chf) = (cw as f32, ch as f32);
    let away = move |u: f32, v: f32| {
        let dx = (rx0 - u).max(u - rx1).max(0.0) * cwf;
        let dy = (ry0 - v).max(v - ry1).max(0.0) * chf;
        if dx + dy <= 0.0 {
            return (1.0, 1.0);
        }
        let side = dx / (dx + dy);
        (0.06 + 0.94 * side, 1.0 - 0.94 * side)
    };
    membrane_fill(&mut grid, &gknown, gw, gh, &away);

    let scene = prompt.map(|p| {
        let mut px = render_f32(p, seed, gw, gh);
        let own = stats(px.iter());
        let target = stats(src.iter());
        for v in &mut px {
            *v = transfer(*v, &own, &target, 0.5);
        }
        px
    });

    let ef = e as f32;
    let ramp = (2 * f + 6) as f32;
    // Detail amplitude and prompt weight by distance from the image, tabulated.
    let max_d = ((l.max(r) * l.max(r) + t.max(b) * t.max(b)) as f32).sqrt() as usize + 2;
    let amp: Vec<f32> = (0..=max_d)
        .map(|d| (-(d as f32) / (0.45 * ef + 8.0)).exp())
        .collect();
    let beta: Vec<f32> = (0..=max_d)
        .map(|d| 0.75 * strength * smoothstep(0.0, 0.9 * ef, d as f32))
        .collect();

    let mut out = RgbImage::new(cw as u32, ch as u32);
    for y in 0..ch {
        let iy = y as isize - t as isize;
        let dy = if iy < 0 {
            -iy
        } else if iy >= h as isize {
            iy - h as isize + 1
        } else {
            0
        };
        let ey = iy.clamp(0, h as isize - 1) as usize;
        let sy = reflect(iy, h);
        let gyf = (y as f32 + 0.5) / f as f32 - 0.5;
        for x in 0..cw {
            let ix = x as isize - l as isize;
            if dy == 0 && ix >= 0 && ix < w as isize {
                let p = img.get_pixel(ix as u32, iy as u32);
                out.put_pixel(x as u32, y as u32, *p);
                continue;
            }
            let dx = if ix < 0 {
                -ix
            } else if ix >= w as isize {
                ix - w as isize + 1
            } else {
                0
            };
            let d = ((dx * dx + dy * dy) as f32).sqrt();
            let di = (d as usize).min(max_d);
            let ex = ix.clamp(0, w as isize - 1) as usize;
            let edge = low[ey * w + ex];
            let coarse = sample(&grid, gw, gh, (x as f32 + 0.5) / f as f32 - 0.5, gyf);
            let base = mix(edge, coarse, smoothstep(0.0, ramp, d));
            let s = sy * w + reflect(ix, w);
            let a = amp[di];
            let mut v = [
                base[0] + a * (src[s][0] - low[s][0]),
                base[1] + a * (src[s][1] - low[s][1]),
                base[2] + a * (src[s][2] - low[s][2]),
            ];
            if let Some(scene) = &scene {
                let sc = sample(scene, gw, gh, (x as f32 + 0.5) / f as f32 - 0.5, gyf);
                v = mix(v, sc, beta[di]);
            }
            out.put_pixel(x as u32, y as u32, image::Rgb(v.map(to_u8)));
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Background removal and replacement
// ---------------------------------------------------------------------------

const DEFAULT_BACKGROUND: &str = "a soft sunny landscape with a clear blue sky";

/// Foreground opacity (0..1) and an estimate of the background behind every
/// pixel.
struct Matte {
    alpha: Vec<f32>,
    plate: Vec<Rgbf>,
}

/// Estimates the foreground matte.
///
/// The background is modelled from the frame: a plate diffused inward from a
/// border ring (follows gradients) and a handful of k-means colours of the
/// ring (follows repeated colours). Each pixel's distance to that model is a
/// barrier; the minimum-barrier cost of reaching the pixel from the frame
/// (a bucket-queue flood fill) separates the background connected to the
/// frame from enclosed foreground. A centre prior tilts the threshold toward
/// keeping the middle, thresholds adapt to the ring's noise, and a smooth
/// ramp gives soft edges.
fn matte(src: &[Rgbf], w: usize, h: usize) -> Matte {
    let n = w * h;
    let smooth = box_blur(src, w, h, 1);
    let ring = (w.min(h) / 48).max(2).min(w.min(h).div_ceil(2));
    let in_ring = |x: usize, y: usize| x < ring || y < ring || x + ring >= w || y + ring >= h;
    let known: Vec<bool> = (0..n).map(|i| in_ring(i % w, i / w)).collect();
    let mut plate = smooth.clone();
    membrane_fill(&mut plate, &known, w, h, &|_, _| (1.0, 1.0));

    let ring_idx: Vec<usize> = (0..n).filter(|&i| known[i]).collect();
    let stride = ring_idx.len().div_ceil(4096).max(1);
    let samples: Vec<Rgbf> = ring_idx
        .iter()
        .step_by(stride)
        .map(|&i| smooth[i])
        .collect();
    let centroids = kmeans(&samples, 6, 8);

    let barrier: Vec<u8> = (0..n)
        .map(|i| {
            let p = smooth[i];
            let to_plate = dist(p, plate[i]);
            let to_cluster = centroids
                .iter()
                .map(|&c| dist(p, c))
                .fold(f32::MAX, f32::min);
            to_u8(to_plate.min(1.3 * to_cluster))
        })
        .collect();
    let cost = min_barrier(&barrier, w, h);

    let noise =
        ring_idx.iter().map(|&i| f32::from(barrier[i])).sum::<f32>() / ring_idx.len().max(1) as f32;
    let centre = |i: usize| {
        let nx = ((i % w) as f32 + 0.5) / w as f32 * 2.0 - 1.0;
        let ny = ((i / w) as f32 + 0.5) / h as f32 * 2.0 - 1.0;
        (1.0 - nx * nx) * (1.0 - ny * ny)
    };
    let eff: Vec<f32> = (0..n)
        .map(|i| f32::from(cost[i]) * (0.75 + 0.6 * centre(i)))
        .collect();
    let mut lo = (noise * 2.5 + 10.0).clamp(14.0, 70.0);
    let fg_share = |lo: f32| eff.iter().filter(|&&v| v > lo).count() as f32 / n as f32;
    if fg_share(lo) < 0.03 {
        // Nothing stands out from the frame: keep the most distinct quarter of
        // the centre rather than returning an empty cut-out.
        let mut central: Vec<f32> = (0..n)
            .filter(|&i| centre(i) > 0.5)
            .map(|i| eff[i])
            .collect();
        central.sort_by(|a, b| a.partial_cmp(b).unwrap_or(Ordering::Equal));
        if let Some(&q) = central.get(central.len() * 3 / 4) {
            lo = (q - 4.0).max(1.0);
        }
    }
    let hi = lo + (lo * 0.8).max(14.0);
    let raw: Vec<[f32; 1]> = eff.iter().map(|&v| [smoothstep(lo, hi, v)]).collect();
    // A light blur then re-steepening removes specks and rounds jagged edges.
    let alpha = box_blur(&raw, w, h, 1)
        .into_iter()
        .map(|[a]| smoothstep(0.1, 0.9, a))
        .collect();
    Matte { alpha, plate }
}

/// Lloyd's k-means with a deterministic start (luminance quantiles).
fn kmeans(samples: &[Rgbf], k: usize, iterations: usize) -> Vec<Rgbf> {
    if samples.is_empty() {
        return vec![[128.0; 3]];
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| luma(*a).partial_cmp(&luma(*b)).unwrap_or(Ordering::Equal));
    let k = k.min(sorted.len());
    let mut cents: Vec<Rgbf> = (0..k)
        .map(|j| sorted[(2 * j + 1) * sorted.len() / (2 * k)])
        .collect();
    for _ in 0..iterations {
        let mut sum = vec![[0f32; 3]; k];
        let mut cnt = vec![0f32; k];
        for &p in samples {
            let mut best = 0;
            let mut bd = f32::MAX;
            for (j, &c) in cents.iter().enumerate() {
                let d = dist(p, c);
                if d < bd {
                    bd = d;
                    best = j;
                }
            }
            for c in 0..3 {
                sum[best][c] += p[c];
            }
            cnt[best] += 1.0;
        }
        for j in 0..k {
            if cnt[j] > 0.0 {
                cents[j] = sum[j].map(|s| s / cnt[j]);
            }
        }
    }
    cents
}

/// For every pixel, the smallest possible maximum barrier along a 4-connected
/// path from the image frame (a bucket-queue Dijkstra: costs are bytes).
fn min_barrier(barrier: &[u8], w: usize, h: usize) -> Vec<u8> {
    let n = w * h;
    let mut best = vec![u8::MAX; n];
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); 256];
    let mut seed_px = |i: usize, best: &mut [u8]| {
        if barrier[i] < best[i] || best[i] == u8::MAX {
            best[i] = barrier[i];
            buckets[barrier[i] as usize].push(i as u32);
        }
    };
    for x in 0..w {
        seed_px(x, &mut best);
        seed_px((h - 1) * w + x, &mut best);
    }
    for y in 0..h {
        seed_px(y * w, &mut best);
        seed_px(y * w + w - 1, &mut best);
    }
    for level in 0..256 {
        while let Some(i) = buckets[level].pop() {
            let i = i as usize;
            if best[i] as usize != level {
                continue;
            }
            let (x, y) = (i % w, i / w);
            let mut visit = |j: usize| {
                let c = barrier[j].max(level as u8);
                if c < best[j] {
                    best[j] = c;
                    buckets[c as usize].push(j as u32);
                }
            };
            if x > 0 {
                visit(i - 1);
            }
            if x + 1 < w {
                visit(i + 1);
            }
            if y > 0 {
                visit(i - w);
            }
            if y + 1 < h {
                visit(i + w);
            }
        }
    }
    best
}

/// The foreground colour of a partly transparent pixel, with the background's
/// share taken out (so edges do not keep a fringe of the old background).
fn decontaminate(p: Rgbf, plate: Rgbf, alpha: f32) -> Rgbf {
    if alpha >= 0.999 {
        return p;
    }
    let a = alpha.max(0.2);
    let est = [
        plate[0] + (p[0] - plate[0]) / a,
        plate[1] + (p[1] - plate[1]) / a,
        plate[2] + (p[2] - plate[2]) / a,
    ]
    .map(|v| v.clamp(0.0, 255.0));
    mix(p, est, 0.8)
}

fn remove_background(img: &RgbImage) -> RgbaImage {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let src = to_f32(img);
    let m = matte(&src, w, h);
    let mut raw = Vec::with_capacity(w * h * 4);
    for i in 0..w * h {
        let a = m.alpha[i];
        let f = decontaminate(src[i], m.plate[i], a);
        raw.extend(f.map(to_u8));
        raw.push(to_u8(a * 255.0));
    }
    RgbaImage::from_raw(w as u32, h as u32, raw).expect("buffer matches dimensions")
}

fn replace_background(img: &RgbImage, text: &str, seed: u64) -> RgbImage {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let src = to_f32(img);
    let m = matte(&src, w, h);
    let backdrop = render_f32(text, seed, w, h);
    let out: Vec<Rgbf> = (0..w * h)
        .map(|i| {
            let a = m.alpha[i];
            mix(backdrop[i], decontaminate(src[i], m.plate[i], a), a)
        })
        .collect();
    from_f32(&out, w, h)
}

// ---------------------------------------------------------------------------
// Super resolution
// ---------------------------------------------------------------------------

fn super_resolve(img: &RgbImage, scale: u32, strength: f32) -> Result<RgbImage, ProviderError> {
    if scale != 2 && scale != 4 {
        return Err(ProviderError::Permanent(format!(
            "scale must be 2 or 4, got {scale}"
        )));
    }
    let (w, h) = (
        u64::from(img.width()) * u64::from(scale),
        u64::from(img.height()) * u64::from(scale),
    );
    if w * h > MAX_OUTPUT_PIXELS {
        return Err(ProviderError::Permanent(format!(
            "super resolution output {w}x{h} exceeds the {MAX_OUTPUT_PIXELS}-pixel limit"
        )));
    }
    let mut up = image::imageops::resize(
        img,
        w as u32,
        h as u32,
        image::imageops::FilterType::Lanczos3,
    );
    unsharp_u8(&mut up, (scale / 2) as usize, 0.7 * strength, 2);
    Ok(up)
}

/// In-place unsharp mask on 8-bit RGB: `v + amount * (v - box_blur(v, r))`,
/// ignoring differences up to `threshold` so flat areas do not turn grainy.
/// Integer running sums keep a 4096x4096 pass cheap in time and memory.
fn unsharp_u8(img: &mut RgbImage, r: usize, amount: f32, threshold: u8) {
    if r == 0 || amount <= 0.0 {
        return;
    }
    let (w, h) = (img.width() as usize, img.height() as usize);
    let stride = w * 3;
    let raw: &mut [u8] = img.as_mut();
    // Horizontal box into a temporary.
    let mut tmp = vec![0u8; raw.len()];
    for y in 0..h {
        let row = &raw[y * stride..(y + 1) * stride];
        let out = &mut tmp[y * stride..(y + 1) * stride];
        for c in 0..3 {
            let mut acc = 0u32;
            let (mut lo, mut hi) = (0usize, 0usize);
            for x in 0..w {
                while hi < (x + r + 1).min(w) {
                    acc += u32::from(row[hi * 3 + c]);
                    hi += 1;
                }
                while lo < x.saturating_sub(r) {
                    acc -= u32::from(row[lo * 3 + c]);
                    lo += 1;
                }
                let n = (hi - lo) as u32;
                out[x * 3 + c] = ((acc + n / 2) / n) as u8;
            }
        }
    }
    // Vertical box with a row of column sums; each output row only depends on
    // `tmp`, so the image can be updated in place.
    let k = (amount * 256.0) as i32;
    let thr = i32::from(threshold);
    let mut acc = vec![0u32; stride];
    let (mut lo, mut hi) = (0usize, 0usize);
    for y in 0..h {
        while hi < (y + r + 1).min(h) {
            for (a, &v) in acc.iter_mut().zip(&tmp[hi * stride..(hi + 1) * stride]) {
                *a += u32::from(v);
            }
            hi += 1;
        }
        while lo < y.saturating_sub(r) {
            for (a, &v) in acc.iter_mut().zip(&tmp[lo * stride..(lo + 1) * stride]) {
                *a -= u32::from(v);
            }
            lo += 1;
        }
        let n = (hi - lo) as u32;
        for (p, &a) in raw[y * stride..(y + 1) * stride].iter_mut().zip(&acc) {
            let blurred = ((a + n / 2) / n) as i32;
            let v = i32::from(*p);
            let diff = v - blurred;
            if diff.abs() > thr {
                *p = (v + ((diff * k) >> 8)).clamp(0, 255) as u8;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Face enhancement
// ---------------------------------------------------------------------------

/// Edge-preserving smoothing of each channel guided by luminance (He et al.'s
/// guided filter, box-filter form). `eps` is in (0..255)^2 units: variations
/// below sqrt(eps) are smoothed, stronger edges kept.
fn guided_filter(src: &[Rgbf], w: usize, h: usize, r: usize, eps: f32) -> Vec<Rgbf> {
    let n = w * h;
    let packed: Vec<[f32; 8]> = src
        .iter()
        .map(|&p| {
            let i = luma(p);
            [i, i * i, p[0], p[1], p[2], i * p[0], i * p[1], i * p[2]]
        })
        .collect();
    let m = box_blur(&packed, w, h, r);
    let coeffs: Vec<[f32; 6]> = m
        .iter()
        .map(|v| {
            let var = (v[1] - v[0] * v[0]).max(0.0);
            let mut ab = [0f32; 6];
            for c in 0..3 {
                let cov = v[5 + c] - v[0] * v[2 + c];
                let a = cov / (var + eps);
                ab[c] = a;
                ab[3 + c] = v[2 + c] - a * v[0];
            }
            ab
        })
        .collect();
    let mc = box_blur(&coeffs, w, h, r);
    (0..n)
        .map(|k| {
            let i = packed[k][0];
            [
                mc[k][0] * i + mc[k][3],
                mc[k][1] * i + mc[k][4],
                mc[k][2] * i + mc[k][5],
            ]
        })
        .collect()
}

/// Smooths skin-like texture and noise while keeping edges (guided filter,
/// a fifth of the fine texture kept so it does not look plastic), lifts local
/// contrast, then sharpens the edges the filter kept.
fn enhance_face(img: &RgbImage) -> RgbImage {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let src = to_f32(img);
    let r = (w.min(h) / 100).clamp(2, 12);
    let smooth = guided_filter(&src, w, h, r, 20.0 * 20.0);
    let base: Vec<Rgbf> = src
        .iter()
        .zip(&smooth)
        .map(|(&o, &s)| mix(s, o, 0.2))
        .collect();
    let wide = gauss(&base, w, h, (w.min(h) as f32 / 40.0).max(2.0));
    // Sharpen what survived the smoothing (edges), not the removed noise.
    let fine = gauss(&smooth, w, h, 1.0);
    let out: Vec<Rgbf> = (0..w * h)
        .map(|i| {
            let mut v = base[i];
            for c in 0..3 {
                v[c] += 0.22 * (base[i][c] - wide[i][c]) + 0.6 * (smooth[i][c] - fine[i][c]);
            }
            // A touch of vibrance: portraits read better slightly livelier.
            let y = luma(v);
            mix([y; 3], v, 1.08)
        })
        .collect();
    from_f32(&out, w, h)
}

// ---------------------------------------------------------------------------
// Colorization
// ---------------------------------------------------------------------------

const DEFAULT_PALETTE: &str = "a sunny valley with a blue sky, green meadows and warm earth";

/// Colours a picture from its luminance alone. A palette picture (a render of
/// the prompt, or of a natural default scene) is split into horizontal bands;
/// in each band its chroma is tabulated by luminance quantile. Every input
/// pixel takes the chroma of its own quantile within its band, so relative
/// brightness picks the colour and position matters (sky tones at the top).
/// The input's luminance is kept.
fn colorize(img: &RgbImage, prompt: Option<&str>, seed: u64) -> RgbImage {
    const BANDS: usize = 5;
    const BINS: usize = 12;
    const MIN_CHROMA: f32 = 14.0;
    let (w, h) = (img.width() as usize, img.height() as usize);
    let src = to_f32(img);
    let lum: Vec<f32> = src.iter().map(|&p| luma(p)).collect();

    let pw = 96usize;
    let ph = ((96.0 * h as f32 / w as f32).round() as usize).clamp(24, 192);
    let palette = render_f32(prompt.unwrap_or(DEFAULT_PALETTE), seed, pw, ph);
    let mut table = [[[0f32; 2]; BINS]; BANDS];
    for (band, row) in table.iter_mut().enumerate() {
        let (ya, yb) = (
            band * ph / BANDS,
            ((band + 1) * ph / BANDS).max(band * ph / BANDS + 1),
        );
        let mut px: Vec<Rgbf> = (ya..yb.min(ph))
            .flat_map(|y| (0..pw).map(move |x| y * pw + x))
            .map(|i| to_ycc(palette[i]))
            .collect();
        px.sort_by(|a, b| a[0].partial_cmp(&b[0]).unwrap_or(Ordering::Equal));
        for (k, cell) in row.iter_mut().enumerate() {
            let (a, b) = (
                k * px.len() / BINS,
                ((k + 1) * px.len() / BINS).max(k * px.len() / BINS + 1),
            );
            let slice = &px[a.min(px.len() - 1)..b.min(px.len())];
            let cnt = slice.len().max(1) as f32;
            let cb = slice.iter().map(|p| p[1]).sum::<f32>() / cnt;
            let cr = slice.iter().map(|p| p[2]).sum::<f32>() / cnt;
            // Warm low down, cool high up when the palette is too grey to say.
            let mut c = [cb * 1.35, cr * 1.35];
            let mag = (c[0] * c[0] + c[1] * c[1]).sqrt();
            if mag < MIN_CHROMA {
                let cool = 1.0 - band as f32 / (BANDS - 1) as f32;
                let dir = [
                    0.7 * cool - 0.5 * (1.0 - cool),
                    -0.4 * cool + 0.6 * (1.0 - cool),
                ];
                let dm = (dir[0] * dir[0] + dir[1] * dir[1]).sqrt().max(1e-3);
                let want = MIN_CHROMA - mag;
                c = [c[0] + dir[0] / dm * want, c[1] + dir[1] / dm * want];
            }
            *cell = c;
        }
    }

    // The input's luminance distribution per band, as cumulative shares.
    let mut cdf = vec![[0f32; 256]; BANDS];
    for (band, cdf) in cdf.iter_mut().enumerate() {
        let (ya, yb) = (
            band * h / BANDS,
            ((band + 1) * h / BANDS).max(band * h / BANDS + 1),
        );
        let mut hist = [0u32; 256];
        for y in ya..yb.min(h) {
            for x in 0..w {
                hist[to_u8(lum[y * w + x]) as usize] += 1;
            }
        }
        let total = hist.iter().sum::<u32>().max(1) as f32;
        let mut run = 0u32;
        for (v, &c) in hist.iter().enumerate() {
            // Mid-rank of the value's own count.
            cdf[v] = (run as f32 + c as f32 * 0.5) / total;
            run += c;
        }
    }
    let lookup = |band: usize, l: u8| -> [f32; 2] {
        let pos = (cdf[band][l as usize] * BINS as f32 - 0.5).clamp(0.0, (BINS - 1) as f32);
        let k0 = pos as usize;
        let k1 = (k0 + 1).min(BINS - 1);
        let t = pos - k0 as f32;
        let (a, b) = (table[band][k0], table[band][k1]);
        [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t]
    };
    let mut chroma = vec![[0f32; 2]; w * h];
    for y in 0..h {
        let pos = ((y as f32 + 0.5) / h as f32 * BANDS as f32 - 0.5).clamp(0.0, (BANDS - 1) as f32);
        let b0 = pos as usize;
        let b1 = (b0 + 1).min(BANDS - 1);
        let t = pos - b0 as f32;
        for x in 0..w {
            let l = to_u8(lum[y * w + x]);
            let (c0, c1) = (lookup(b0, l), lookup(b1, l));
            chroma[y * w + x] = [c0[0] + (c1[0] - c0[0]) * t, c0[1] + (c1[1] - c0[1]) * t];
        }
    }
    let chroma = box_blur(&chroma, w, h, 2);
    let out: Vec<Rgbf> = (0..w * h)
        .map(|i| {
            let l = lum[i];
            // Less chroma toward black and white, where it would clip.
            let room = (l.min(255.0 - l) / 48.0).clamp(0.2, 1.0);
            from_ycc([l, chroma[i][0] * room, chroma[i][1] * room])
        })
        .collect();
    from_f32(&out, w, h)
}

// ---------------------------------------------------------------------------
// Style transfer
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Sketch,
    Watercolor,
    Pixel,
    Comic,
    Oil,
    Palette,
}

/// The stylisation the prompt asks for, by keyword (first match wins, most
/// specific first: "watercolor painting" is a watercolour).
fn style_of(prompt: &str) -> Style {
    let p = prompt.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| p.contains(w));
    if has(&[
        "sketch", "pencil", "charcoal", "drawing", "line art", "graphite",
    ]) {
        Style::Sketch
    } else if has(&["watercolor", "watercolour", "aquarelle", "gouache"]) {
        Style::Watercolor
    } else if has(&["pixel", "8-bit", "8 bit", "16-bit", "retro game", "sprite"]) {
        Style::Pixel
    } else if has(&[
        "comic", "cartoon", "anime", "manga", "cel", "pop art", "toon",
    ]) {
        Style::Comic
    } else if has(&[
        "oil",
        "painting",
        "painted",
        "impression",
        "impasto",
        "van gogh",
        "monet",
    ]) {
        Style::Oil
    } else {
        Style::Palette
    }
}

fn stylize(img: &RgbImage, prompt: &str, seed: u64) -> RgbImage {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let src = to_f32(img);
    let out = match style_of(prompt) {
        Style::Sketch => sketch(&src, w, h, seed),
        Style::Watercolor => watercolor(&src, w, h, seed),
        Style::Pixel => pixelate(&src, w, h),
        Style::Comic => comic(&src, w, h),
        Style::Oil => oil(&src, w, h, seed),
        Style::Palette => palette_transfer(&src, w, h, prompt, seed),
    };
    from_f32(&out, w, h)
}

/// Kuwahara filter: each pixel takes the mean colour of whichever of its four
/// overlapping quadrant windows is flattest, which flattens texture into
/// brush-like patches while keeping edges. Integral images make it O(pixels).
fn kuwahara(src: &[Rgbf], w: usize, h: usize, r: usize) -> Vec<Rgbf> {
    let (iw, ih) = (w + 1, h + 1);
    let mut integ = vec![[0f64; 5]; iw * ih];
    for y in 0..h {
        let mut row = [0f64; 5];
        for x in 0..w {
            let p = src[y * w + x];
            let l = f64::from(luma(p));
            let v = [f64::from(p[0]), f64::from(p[1]), f64::from(p[2]), l, l * l];
            for c in 0..5 {
                row[c] += v[c];
            }
            let above = integ[y * iw + x + 1];
            let cell = &mut integ[(y + 1) * iw + x + 1];
            for c in 0..5 {
                cell[c] = above[c] + row[c];
            }
        }
    }
    let rect = |x0: usize, y0: usize, x1: usize, y1: usize| -> ([f64; 5], f64) {
        // Inclusive pixel bounds.
        let (a, b) = (integ[y0 * iw + x0], integ[y0 * iw + x1 + 1]);
        let (c, d) = (integ[(y1 + 1) * iw + x0], integ[(y1 + 1) * iw + x1 + 1]);
        let mut s = [0f64; 5];
        for k in 0..5 {
            s[k] = d[k] - b[k] - c[k] + a[k];
        }
        (s, ((x1 - x0 + 1) * (y1 - y0 + 1)) as f64)
    };
    let mut out = vec![[0f32; 3]; w * h];
    for y in 0..h {
        let (ya, yb) = (y.saturating_sub(r), (y + r).min(h - 1));
        for x in 0..w {
            let (xa, xb) = (x.saturating_sub(r), (x + r).min(w - 1));
            let mut best = f64::MAX;
            let mut colour = src[y * w + x];
            for (x0, y0, x1, y1) in [
                (xa, ya, x, y),
                (x, ya, xb, y),
                (xa, y, x, yb),
                (x, y, xb, yb),
            ] {
                let (s, n) = rect(x0, y0, x1, y1);
                let mean_l = s[3] / n;
                let var = s[4] / n - mean_l * mean_l;
                if var < best {
                    best = var;
                    colour = [(s[0] / n) as f32, (s[1] / n) as f32, (s[2] / n) as f32];
                }
            }
            out[y * w + x] = colour;
        }
    }
    out
}

/// Oil paint: Kuwahara patches, a little extra saturation, and brush strokes:
/// streaky noise laid along the picture's edges (doubled-angle smoothing of
/// the luminance gradient keeps the direction field continuous; flat areas
/// get a slowly wandering direction), on a faint canvas weave.
fn oil(src: &[Rgbf], w: usize, h: usize, seed: u64) -> Vec<Rgbf> {
    let r = (w.min(h) / 90).clamp(3, 10);
    let painted = kuwahara(src, w, h, r);
    let lum: Vec<[f32; 1]> = painted.iter().map(|&p| [luma(p)]).collect();
    let lum = gauss(&lum, w, h, r as f32);
    let key = sub_seed(seed, 17);
    // Edge tangents as doubled-angle vectors weighted by gradient strength.
    let tangents: Vec<[f32; 2]> = (0..w * h)
        .map(|i| {
            let (x, y) = (i % w, i / w);
            let gx = lum[y * w + (x + 1).min(w - 1)][0] - lum[y * w + x.saturating_sub(1)][0];
            let gy = lum[(y + 1).min(h - 1) * w + x][0] - lum[y.saturating_sub(1) * w + x][0];
            let (tx, ty) = (-gy, gx);
            [tx * tx - ty * ty, 2.0 * tx * ty]
        })
        .collect();
    let tangents = gauss(&tangents, w, h, 2.0 * r as f32);
    let (len, width) = (5.0 * r as f32, 0.7 * r as f32);
    let drift = (w.max(h) as f32 / 1.5).max(8.0);
    painted
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let (xf, yf) = ((i % w) as f32, (i / w) as f32);
            let wander = std::f32::consts::TAU * fbm(xf / drift, yf / drift, key ^ 3);
            let [c2, s2] = tangents[i];
            let c2 = c2 + 4.0 * wander.cos();
            let s2 = s2 + 4.0 * wander.sin();
            let angle = 0.5 * s2.atan2(c2);
            let (ca, sa) = (angle.cos(), angle.sin());
            let along = xf * ca + yf * sa;
            let across = -xf * sa + yf * ca;
            let stroke = value_noise(along / len, across / width, key) - 0.5;
            let weave = 2.5 * ((xf * 1.9).sin() * (yf * 1.9).sin());
            let y = luma(p);
            mix([y; 3], p, 1.2).map(|v| v * (1.0 + 0.16 * stroke) + weave)
        })
        .collect()
}

/// Pencil sketch: colour dodge of the luminance by its blurred negative turns
/// flat areas white and leaves dark strokes along edges; darker tones get
/// diagonal hatching, on a faintly grained warm paper.
fn sketch(src: &[Rgbf], w: usize, h: usize, seed: u64) -> Vec<Rgbf> {
    let lum: Vec<[f32; 1]> = src.iter().map(|&p| [luma(p)]).collect();
    let inv: Vec<[f32; 1]> = lum.iter().map(|&[l]| [255.0 - l]).collect();
    let blurred = gauss(&inv, w, h, (w.min(h) as f32 / 120.0).max(2.0));
    let key = sub_seed(seed, 11);
    let spacing = (w.min(h) / 160).max(4);
    (0..w * h)
        .map(|i| {
            let l = lum[i][0];
            let dodge = (l * 255.0 / (255.0 - blurred[i][0] + 1.0)).min(255.0);
            // Deepen the strokes: the dodge alone is pale.
            let mut v = 255.0 * (dodge / 255.0).powf(2.2);
            let (x, y) = (i % w, i / w);
            let darkness = 1.0 - l / 255.0;
            if darkness > 0.45 && (x + y).is_multiple_of(spacing) {
                v -= 70.0 * (darkness - 0.45);
            }
            if darkness > 0.7 && (x + h - y).is_multiple_of(spacing) {
                v -= 60.0 * (darkness - 0.7);
            }
            v += (hash01(x as i64, y as i64, key) - 0.5) * 8.0;
            let v = v.clamp(0.0, 255.0);
            [v * 0.995 + 1.0, v * 0.985 + 1.5, v * 0.955 + 2.0]
        })
        .collect()
}

/// Watercolour: soft edge-aware washes, colour flattened into a few levels,
/// pigment pooling darker along the wash edges, lighter overall, on paper.
fn watercolor(src: &[Rgbf], w: usize, h: usize, seed: u64) -> Vec<Rgbf> {
    let r = (w.min(h) / 120).clamp(2, 8);
    let soft = guided_filter(src, w, h, r, 30.0 * 30.0);
    let soft = gauss(&soft, w, h, 1.5);
    const STEP: f32 = 255.0 / 6.0;
    let washes: Vec<Rgbf> = soft
        .iter()
        .map(|&p| mix(p, p.map(|v| (v / STEP).round() * STEP), 0.7))
        .collect();
    let wl: Vec<f32> = washes.iter().map(|&p| luma(p)).collect();
    let key = sub_seed(seed, 13);
    let grain = (w.min(h) as f32 / 24.0).max(4.0);
    (0..w * h)
        .map(|i| {
            let (x, y) = (i % w, i / w);
            let gx = wl[y * w + (x + 1).min(w - 1)] - wl[y * w + x.saturating_sub(1)];
            let gy = wl[(y + 1).min(h - 1) * w + x] - wl[y.saturating_sub(1) * w + x];
            let edge = ((gx * gx + gy * gy).sqrt() / 60.0).min(1.0);
            let paper = 0.9 + 0.1 * fbm(x as f32 / grain, y as f32 / grain, key);
            let speck = (hash01(x as i64, y as i64, key ^ 5) - 0.5) * 6.0;
            let lit = mix(washes[i], [255.0; 3], 0.15);
            lit.map(|v| v * (1.0 - 0.25 * edge) * paper + speck)
        })
        .collect()
}

/// Pixel art: block averages on a coarse grid, colours snapped to six levels
/// per channel and slightly saturated.
fn pixelate(src: &[Rgbf], w: usize, h: usize) -> Vec<Rgbf> {
    let block = (w.min(h) / 48).max(3);
    const STEP: f32 = 255.0 / 5.0;
    let mut out = vec![[0f32; 3]; w * h];
    for by in (0..h).step_by(block) {
        for bx in (0..w).step_by(block) {
            let (xe, ye) = ((bx + block).min(w), (by + block).min(h));
            let (mean, _) = stats(
                (by..ye)
                    .flat_map(|y| (bx..xe).map(move |x| y * w + x))
                    .map(|i| &src[i]),
            );
            let y = luma(mean);
            let c = mix([y; 3], mean, 1.2).map(|v| (v.clamp(0.0, 255.0) / STEP).round() * STEP);
            for y in by..ye {
                out[y * w + bx..y * w + xe].fill(c);
            }
        }
    }
    out
}

/// Comic / cel shading: edge-preserving smoothing, luminance cut into four
/// flat tones (hue kept), boosted colour, and bold dark outlines where the
/// smoothed luminance changes sharply.
fn comic(src: &[Rgbf], w: usize, h: usize) -> Vec<Rgbf> {
    let r = (w.min(h) / 100).clamp(2, 8);
    let smooth = guided_filter(src, w, h, r, 25.0 * 25.0);
    let lum: Vec<f32> = smooth.iter().map(|&p| luma(p)).collect();
    let thick = w.min(h) >= 512;
    let mut edge = vec![false; w * h];
    for y in 0..h {
        for x in 0..w {
            let at = |xx: usize, yy: usize| lum[yy * w + xx];
            let (xl, xr) = (x.saturating_sub(1), (x + 1).min(w - 1));
            let (yu, yd) = (y.saturating_sub(1), (y + 1).min(h - 1));
            let gx = at(xr, yu) + 2.0 * at(xr, y) + at(xr, yd)
                - at(xl, yu)
                - 2.0 * at(xl, y)
                - at(xl, yd);
            let gy = at(xl, yd) + 2.0 * at(x, yd) + at(xr, yd)
                - at(xl, yu)
                - 2.0 * at(x, yu)
                - at(xr, yu);
            edge[y * w + x] = (gx * gx + gy * gy).sqrt() > 110.0;
        }
    }
    if thick {
        let grown = chamfer(&edge.iter().map(|&e| !e).collect::<Vec<_>>(), w, h);
        for i in 0..w * h {
            edge[i] = grown[i] <= 1.0;
        }
    }
    const TONES: f32 = 4.0;
    (0..w * h)
        .map(|i| {
            if edge[i] {
                return [18.0, 14.0, 22.0];
            }
            let p = smooth[i];
            let l = lum[i].max(1.0);
            let q = ((l / 255.0 * TONES).floor().min(TONES - 1.0) + 0.5) / TONES * 255.0;
            let flat = p.map(|v| v * q / l);
            let y = luma(flat);
            mix([y; 3], flat, 1.35)
        })
        .collect()
}

/// Any other style: the colours of a render of the prompt, moved onto the
/// image by matching the YCbCr mean and spread (chroma fully, luminance
/// halfway so the picture's lighting survives).
fn palette_transfer(src: &[Rgbf], w: usize, h: usize, prompt: &str, seed: u64) -> Vec<Rgbf> {
    let pw = 128usize;
    let ph = ((128.0 * h as f32 / w as f32).round() as usize).clamp(32, 256);
    let text = if prompt.is_empty() {
        DEFAULT_PALETTE
    } else {
        prompt
    };
    let reference: Vec<Rgbf> = render_f32(text, seed, pw, ph)
        .into_iter()
        .map(to_ycc)
        .collect();
    let ycc: Vec<Rgbf> = src.iter().map(|&p| to_ycc(p)).collect();
    let from = stats(ycc.iter());
    let to = stats(reference.iter());
    ycc.iter()
        .map(|&p| {
            let mut q = [0f32; 3];
            for c in 0..3 {
                let moved = (p[c] - from.0[c]) / from.1[c] * to.1[c] + to.0[c];
                let k = if c == 0 { 0.5 } else { 1.0 };
                q[c] = p[c] + (moved - p[c]) * k;
            }
            from_ycc(q)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{Luma, Rgb};

    const W: u32 = 128;
    const H: u32 = 96;

    fn spec(operation: EditOperation) -> EditSpec<'static> {
        EditSpec {
            operation,
            prompt: None,
            strength: 1.0,
            seed: 7,
            direction: Direction::All,
            expand_pixels: 32,
            new_background: None,
            scale: 2,
        }
    }

    fn scene() -> RgbImage {
        render(&RenderSpec {
            prompt: "mountains at sunset over a lake with a pine forest",
            negative_prompt: None,
            seed: 3,
            style: RenderStyle::Vivid,
            width: W,
            height: H,
        })
    }

    fn rect_mask(x0: u32, y0: u32, x1: u32, y1: u32) -> GrayImage {
        GrayImage::from_fn(W, H, |x, y| {
            Luma([if (x0..x1).contains(&x) && (y0..y1).contains(&y) {
                255
            } else {
                0
            }])
        })
    }

    /// A red disc (with a little texture) on a blue background, uniform or a
    /// diagonal gradient.
    fn disc(gradient: bool) -> RgbImage {
        RgbImage::from_fn(W, H, |x, y| {
            let (dx, dy) = (x as f32 - 64.0, y as f32 - 48.0);
            if (dx * dx + dy * dy).sqrt() < 28.0 {
                Rgb([215, 50 + ((x * 7 + y * 3) % 16) as u8, 40])
            } else if gradient {
                Rgb([30 + (y * 60 / H) as u8, 110 + (x * 60 / W) as u8, 200])
            } else {
                Rgb([40, 130, 210])
            }
        })
    }

    fn rgb(out: &DynamicImage) -> &RgbImage {
        out.as_rgb8().expect("RGB8 output")
    }

    fn mean_abs_diff(a: &[u8], b: &[u8]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(&x, &y)| (f32::from(x) - f32::from(y)).abs())
            .sum::<f32>()
            / a.len() as f32
    }

    fn saturation(img: &RgbImage) -> f32 {
        img.pixels()
            .map(|p| f32::from(*p.0.iter().max().unwrap()) - f32::from(*p.0.iter().min().unwrap()))
            .sum::<f32>()
            / (img.width() * img.height()) as f32
    }

    #[test]
    fn inpainting_changes_the_masked_region_only_and_is_deterministic() {
        let img = DynamicImage::ImageRgb8(scene());
        let mask = rect_mask(40, 30, 88, 66);
        let s = EditSpec {
            prompt: Some("a red hot air balloon"),
            ..spec(EditOperation::Inpainting)
        };
        let out = apply(&s, &img, Some(&mask)).unwrap();
        let o = rgb(&out);
        assert_eq!(o.dimensions(), (W, H));
        let src = img.as_rgb8().unwrap();
        let mut inside = (Vec::new(), Vec::new());
        for (x, y, p) in o.enumerate_pixels() {
            let gap_x = 40u32.saturating_sub(x).max(x.saturating_sub(87));
            let gap_y = 30u32.saturating_sub(y).max(y.saturating_sub(65));
            if gap_x.max(gap_y) > 3 {
                assert_eq!(p, src.get_pixel(x, y), "unmasked pixel ({x},{y}) changed");
            } else if gap_x == 0 && gap_y == 0 {
                inside.0.extend_from_slice(&p.0);
                inside.1.extend_from_slice(&src.get_pixel(x, y).0);
            }
        }
        assert!(
            mean_abs_diff(&inside.0, &inside.1) > 5.0,
            "masked region barely changed"
        );
        let again = apply(&s, &img, Some(&mask)).unwrap();
        assert_eq!(again, out);
        let other = apply(
            &EditSpec {
                seed: 8,
                ..s.clone()
            },
            &img,
            Some(&mask),
        )
        .unwrap();
        assert_ne!(other, out, "the seed should change the painted content");
    }

    #[test]
    fn object_removal_fills_the_object_with_surrounding_background() {
        let background =
            RgbImage::from_fn(W, H, |x, y| Rgb([60 + x as u8, 100 + (y / 2) as u8, 170]));
        let mut img = background.clone();
        for y in 30..60 {
            for x in 50..80 {
                img.put_pixel(x, y, Rgb([230, 20, 20]));
            }
        }
        let mask = rect_mask(48, 28, 82, 62);
        let out = apply(
            &spec(EditOperation::ObjectRemoval),
            &DynamicImage::ImageRgb8(img.clone()),
            Some(&mask),
        )
        .unwrap();
        let o = rgb(&out);
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for y in 28..62 {
            for x in 48..82 {
                got.extend_from_slice(&o.get_pixel(x, y).0);
                want.extend_from_slice(&background.get_pixel(x, y).0);
                assert!(
                    o.get_pixel(x, y)[0] < 160,
                    "object still visible at ({x},{y})"
                );
            }
        }
        assert!(
            mean_abs_diff(&got, &want) < 6.0,
            "fill far from the background"
        );
        assert_eq!(o.get_pixel(5, 5), img.get_pixel(5, 5));
        assert_eq!(o.get_pixel(120, 90), img.get_pixel(120, 90));
    }

    #[test]
    fn mask_is_required_and_must_match_the_image() {
        let img = DynamicImage::ImageRgb8(scene());
        for op in [EditOperation::Inpainting, EditOperation::ObjectRemoval] {
            let s = EditSpec {
                prompt: Some("x"),
                ..spec(op)
            };
            match apply(&s, &img, None) {
                Err(ProviderError::Permanent(m)) => {
                    assert!(m.starts_with("mask must be"), "{m}");
                    assert!(m.contains("same dimensions as the image (128x96)"), "{m}");
                }
                other => panic!("expected a permanent error, got {other:?}"),
            }
            let small = GrayImage::new(64, 64);
            match apply(&s, &img, Some(&small)) {
                Err(ProviderError::Permanent(m)) => {
                    assert!(
                        m.contains("same dimensions as the image (128x96)") && m.contains("64x64"),
                        "{m}"
                    );
                }
                other => panic!("expected a permanent error, got {other:?}"),
            }
        }
        // Other operations ignore the mask entirely.
        let small = GrayImage::new(3, 3);
        assert!(apply(&spec(EditOperation::FaceEnhancement), &img, Some(&small)).is_ok());
    }

    #[test]
    fn outpainting_grows_the_canvas_keeps_the_original_and_joins_smoothly() {
        let src = scene();
        let img = DynamicImage::ImageRgb8(src.clone());
        let e = 40u32;
        for (dir, (ox, oy), (cw, ch)) in [
            (Direction::Left, (e, 0), (W + e, H)),
            (Direction::Right, (0, 0), (W + e, H)),
            (Direction::Top, (0, e), (W, H + e)),
            (Direction::Bottom, (0, 0), (W, H + e)),
            (Direction::All, (e, e), (W + 2 * e, H + 2 * e)),
        ] {
            let s = EditSpec {
                direction: dir,
                expand_pixels: e,
                prompt: Some("snowy peaks"),
                ..spec(EditOperation::Outpainting)
            };
            let out = apply(&s, &img, None).unwrap();
            let o = rgb(&out);
            assert_eq!(o.dimensions(), (cw, ch), "{dir:?}");
            for (x, y, p) in src.enumerate_pixels() {
                assert_eq!(
                    o.get_pixel(x + ox, y + oy),
                    p,
                    "{dir:?}: original pixel moved or changed"
                );
            }
            // The step across the join is no bigger than steps inside the image.
            let step = |a: (u32, u32), b: (u32, u32)| {
                let (p, q) = (o.get_pixel(a.0, a.1), o.get_pixel(b.0, b.1));
                (0..3)
                    .map(|c| (f32::from(p[c]) - f32::from(q[c])).abs())
                    .sum::<f32>()
            };
            let (mut join, mut inner, mut n) = (0.0, 0.0, 0.0);
            if matches!(dir, Direction::Right | Direction::All) {
                for y in oy..oy + H {
                    let x = ox + W - 1;
                    join += step((x, y), (x + 1, y));
                    inner += step((x - 1, y), (x, y));
                    n += 1.0;
                }
            }
            if matches!(dir, Direction::Top | Direction::All) {
                for x in ox..ox + W {
                    join += step((x, oy), (x, oy - 1));
                    inner += step((x, oy + 1), (x, oy));
                    n += 1.0;
                }
            }
            if n > 0.0 {
                assert!(
                    join / n <= 2.0 * inner / n + 6.0,
                    "{dir:?}: seam {} vs {}",
                    join / n,
                    inner / n
                );
            }
            assert_eq!(
                apply(&s, &img, None).unwrap(),
                out,
                "{dir:?}: not deterministic"
            );
        }
        let zero = EditSpec {
            expand_pixels: 0,
            ..spec(EditOperation::Outpainting)
        };
        assert!(matches!(
            apply(&zero, &img, None),
            Err(ProviderError::Permanent(_))
        ));
    }

    #[test]
    fn background_removal_makes_the_background_transparent() {
        for gradient in [false, true] {
            let out = apply(
                &spec(EditOperation::BackgroundRemoval),
                &DynamicImage::ImageRgb8(disc(gradient)),
                None,
            )
            .unwrap();
            let o = out.as_rgba8().expect("RGBA8 output");
            assert_eq!(o.dimensions(), (W, H));
            for (x, y) in [
                (0, 0),
                (W - 1, 0),
                (0, H - 1),
                (W - 1, H - 1),
                (10, 48),
                (118, 48),
            ] {
                assert_eq!(
                    o.get_pixel(x, y)[3],
                    0,
                    "gradient={gradient}: ({x},{y}) not transparent"
                );
            }
            assert_eq!(
                o.get_pixel(64, 48)[3],
                255,
                "gradient={gradient}: centre not opaque"
            );
            let opaque = o.pixels().filter(|p| p[3] >= 128).count() as f32;
            let disc_area = std::f32::consts::PI * 28.0 * 28.0;
            assert!(
                (opaque / disc_area - 1.0).abs() < 0.2,
                "gradient={gradient}: {opaque} opaque px"
            );
            assert!(
                o.pixels().any(|p| p[3] > 0 && p[3] < 255),
                "edges should be soft"
            );
        }
        assert!(has_transparency(EditOperation::BackgroundRemoval));
        assert!(!has_transparency(EditOperation::BackgroundReplace));
        assert!(!has_transparency(EditOperation::Inpainting));
    }

    #[test]
    fn background_replace_puts_the_subject_over_a_render_of_the_description() {
        let img = DynamicImage::ImageRgb8(disc(true));
        let s = EditSpec {
            new_background: Some("a tropical beach at noon"),
            ..spec(EditOperation::BackgroundReplace)
        };
        let out = apply(&s, &img, None).unwrap();
        let o = rgb(&out);
        assert_eq!(o.dimensions(), (W, H));
        let backdrop = from_f32(
            &render_f32("a tropical beach at noon", 7, W as usize, H as usize),
            W as usize,
            H as usize,
        );
        for (x, y) in [(0, 0), (W - 1, 0), (0, H - 1), (W - 1, H - 1)] {
            assert_eq!(
                o.get_pixel(x, y),
                backdrop.get_pixel(x, y),
                "corner ({x},{y})"
            );
        }
        let c = o.get_pixel(64, 48);
        assert!(c[0] > 190 && c[2] < 70, "subject lost: {c:?}");
        let other = apply(
            &EditSpec {
                new_background: Some("a dark city at night"),
                ..s.clone()
            },
            &img,
            None,
        )
        .unwrap();
        assert_ne!(rgb(&other).get_pixel(0, 0), o.get_pixel(0, 0));
    }

    #[test]
    fn super_resolution_scales_exactly_and_keeps_the_content() {
        let small =
            image::imageops::resize(&scene(), 40, 30, image::imageops::FilterType::Triangle);
        let img = DynamicImage::ImageRgb8(small.clone());
        for scale in [2u32, 4] {
            let out = apply(
                &EditSpec {
                    scale,
                    ..spec(EditOperation::SuperResolution)
                },
                &img,
                None,
            )
            .unwrap();
            let o = rgb(&out);
            assert_eq!(o.dimensions(), (40 * scale, 30 * scale));
            let back = image::imageops::resize(o, 40, 30, image::imageops::FilterType::Triangle);
            assert!(
                mean_abs_diff(back.as_raw(), small.as_raw()) < 6.0,
                "x{scale} drifted"
            );
            // Sharper than plain resampling: more total variation.
            let plain = image::imageops::resize(
                &small,
                40 * scale,
                30 * scale,
                image::imageops::FilterType::Lanczos3,
            );
            let tv = |im: &RgbImage| {
                im.as_raw()
                    .windows(4)
                    .map(|w| (i32::from(w[3]) - i32::from(w[0])).abs())
                    .sum::<i32>()
            };
            assert!(tv(o) > tv(&plain), "x{scale}: unsharp mask had no effect");
        }
        for scale in [0u32, 1, 3, 8] {
            match apply(
                &EditSpec {
                    scale,
                    ..spec(EditOperation::SuperResolution)
                },
                &img,
                None,
            ) {
                Err(ProviderError::Permanent(m)) => {
                    assert!(m.contains("scale must be 2 or 4"), "{m}")
                }
                other => panic!("scale {scale}: expected a permanent error, got {other:?}"),
            }
        }
    }

    #[test]
    fn face_enhancement_smooths_noise_but_keeps_edges() {
        let img = RgbImage::from_fn(W, H, |x, y| {
            let base: [f32; 3] = if x < W / 2 {
                [90.0, 70.0, 60.0]
            } else {
                [210.0, 170.0, 150.0]
            };
            let n = (hash01(i64::from(x), i64::from(y), 99) - 0.5) * 40.0;
            Rgb(base.map(|v| to_u8(v + n)))
        });
        let out = apply(
            &spec(EditOperation::FaceEnhancement),
            &DynamicImage::ImageRgb8(img.clone()),
            None,
        )
        .unwrap();
        let o = rgb(&out);
        assert_eq!(o.dimensions(), (W, H));
        let patch_stats = |im: &RgbImage, x0: u32| {
            let v: Vec<f32> = (20..76)
                .flat_map(|y| (x0..x0 + 30).map(move |x| (x, y)))
                .map(|(x, y)| f32::from(im.get_pixel(x, y)[1]))
                .collect();
            let m = v.iter().sum::<f32>() / v.len() as f32;
            (
                m,
                (v.iter().map(|a| (a - m) * (a - m)).sum::<f32>() / v.len() as f32).sqrt(),
            )
        };
        let ((lm0, ls0), (rm0, _)) = (patch_stats(&img, 10), patch_stats(&img, 88));
        let ((lm1, ls1), (rm1, _)) = (patch_stats(o, 10), patch_stats(o, 88));
        assert!(ls1 < ls0 * 0.7, "noise not reduced: {ls0} -> {ls1}");
        assert!(rm1 - lm1 > 0.9 * (rm0 - lm0), "edge contrast lost");
        // The edge itself stays a sharp step.
        assert!(f32::from(o.get_pixel(66, 48)[1]) - f32::from(o.get_pixel(61, 48)[1]) > 60.0);
    }

    #[test]
    fn colorization_gives_a_grayscale_picture_colour_and_keeps_its_luminance() {
        let gray = DynamicImage::ImageRgb8(scene()).to_luma8();
        let img = DynamicImage::ImageLuma8(gray.clone());
        let out = apply(&spec(EditOperation::Colorization), &img, None).unwrap();
        let o = rgb(&out);
        assert_eq!(o.dimensions(), (W, H));
        assert!(saturation(o) > 15.0, "saturation {}", saturation(o));
        let lum: Vec<u8> = o
            .pixels()
            .map(|p| to_u8(luma([p[0], p[1], p[2]].map(f32::from))))
            .collect();
        assert!(
            mean_abs_diff(&lum, gray.as_raw()) < 6.0,
            "luminance not preserved"
        );
        let desert = apply(
            &EditSpec {
                prompt: Some("a red desert canyon"),
                ..spec(EditOperation::Colorization)
            },
            &img,
            None,
        )
        .unwrap();
        assert!(
            mean_abs_diff(rgb(&desert).as_raw(), o.as_raw()) > 3.0,
            "prompt had no effect"
        );
        assert_eq!(
            apply(&spec(EditOperation::Colorization), &img, None).unwrap(),
            out
        );
    }

    #[test]
    fn style_transfer_stylises_by_keyword() {
        assert_eq!(style_of("Pencil sketch of a cat"), Style::Sketch);
        assert_eq!(style_of("a watercolor painting"), Style::Watercolor);
        assert_eq!(style_of("8-bit pixel art"), Style::Pixel);
        assert_eq!(style_of("comic book"), Style::Comic);
        assert_eq!(style_of("oil painting, impasto"), Style::Oil);
        assert_eq!(style_of("a green misty forest"), Style::Palette);
        let src = scene();
        let img = DynamicImage::ImageRgb8(src.clone());
        let run = |prompt: &'static str| {
            let out = apply(
                &EditSpec {
                    prompt: Some(prompt),
                    ..spec(EditOperation::StyleTransfer)
                },
                &img,
                None,
            )
            .unwrap();
            let o = rgb(&out).clone();
            assert_eq!(o.dimensions(), (W, H), "{prompt}");
            assert!(
                mean_abs_diff(o.as_raw(), src.as_raw()) > 4.0,
                "{prompt}: barely changed"
            );
            assert_eq!(
                apply(
                    &EditSpec {
                        prompt: Some(prompt),
                        ..spec(EditOperation::StyleTransfer)
                    },
                    &img,
                    None
                )
                .unwrap(),
                out,
                "{prompt}: not deterministic"
            );
            o
        };
        let sketch = run("pencil sketch");
        let lum = sketch
            .pixels()
            .map(|p| luma([p[0], p[1], p[2]].map(f32::from)))
            .sum::<f32>()
            / (W * H) as f32;
        assert!(
            lum > 170.0 && saturation(&sketch) < 12.0,
            "sketch should be grey strokes on white"
        );
        let pixel = run("pixel art");
        let block = pixel.get_pixel(0, 0);
        assert!(
            (0..3).all(|y| (0..3).all(|x| pixel.get_pixel(x, y) == block)),
            "pixel blocks"
        );
        let comic = run("comic");
        assert!(
            comic.pixels().any(|p| p.0 == [18, 14, 22]),
            "comic outlines"
        );
        let oil = run("oil painting");
        assert!(
            mean_abs_diff(oil.as_raw(), src.as_raw()) < 30.0,
            "oil should keep the picture"
        );
        run("watercolor");
        let palette = run("a green misty forest at dawn");
        let reference = render_f32("a green misty forest at dawn", 7, 128, 96);
        let (target, _) = stats(reference.iter());
        let (before, _) = stats(to_f32(&src).iter());
        let (after, _) = stats(to_f32(&palette).iter());
        assert!(
            dist(after, target) < dist(before, target),
            "palette should move toward the render"
        );
    }

    #[test]
    fn strength_blends_with_the_original() {
        let src = scene();
        let img = DynamicImage::ImageRgb8(src.clone());
        let s = EditSpec {
            prompt: Some("comic"),
            ..spec(EditOperation::StyleTransfer)
        };
        let none = apply(
            &EditSpec {
                strength: 0.0,
                ..s.clone()
            },
            &img,
            None,
        )
        .unwrap();
        assert_eq!(rgb(&none), &src);
        let full = apply(&s, &img, None).unwrap();
        let half = apply(
            &EditSpec {
                strength: 0.5,
                ..s.clone()
            },
            &img,
            None,
        )
        .unwrap();
        let d_full = mean_abs_diff(rgb(&full).as_raw(), src.as_raw());
        let d_half = mean_abs_diff(rgb(&half).as_raw(), src.as_raw());
        assert!((d_half / d_full - 0.5).abs() < 0.05, "{d_half} vs {d_full}");
    }

    #[test]
    fn empty_images_are_rejected() {
        let img = DynamicImage::new_rgb8(0, 10);
        assert!(matches!(
            apply(&spec(EditOperation::Colorization), &img, None),
            Err(ProviderError::Permanent(_))
        ));
    }

    #[test]
    fn encoders_produce_decodable_png_and_jpeg() {
        let rgba = apply(
            &spec(EditOperation::BackgroundRemoval),
            &DynamicImage::ImageRgb8(disc(false)),
            None,
        )
        .unwrap();
        let png = encode_png(&rgba);
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let back = image::load_from_memory(&png).unwrap();
        assert_eq!(back.color(), image::ColorType::Rgba8);
        assert_eq!(back, rgba);
        let jpeg = encode_jpeg(&rgba);
        assert_eq!(&jpeg[..3], &[0xFF, 0xD8, 0xFF]);
        let back = image::load_from_memory(&jpeg).unwrap();
        assert_eq!(
            (back.width(), back.height(), back.color()),
            (W, H, image::ColorType::Rgb8)
        );
        let rgb_png = encode_png(&DynamicImage::ImageRgb8(scene()));
        assert_eq!(
            image::load_from_memory(&rgb_png).unwrap().color(),
            image::ColorType::Rgb8
        );
    }

    #[test]
    fn membrane_fill_interpolates_between_boundaries() {
        // Left column 0, right column 200: the fill is (about) a horizontal ramp.
        let (w, h) = (11usize, 5usize);
        let mut vals = vec![[0f32; 3]; w * h];
        let mut known = vec![false; w * h];
        for y in 0..h {
            known[y * w] = true;
            known[y * w + w - 1] = true;
            vals[y * w + w - 1] = [200.0; 3];
        }
        membrane_fill(&mut vals, &known, w, h, &|_, _| (1.0, 1.0));
        for y in 0..h {
            for x in 0..w {
                let want = 20.0 * x as f32;
                assert!(
                    (vals[y * w + x][0] - want).abs() < 10.0,
                    "({x},{y}) = {:?}",
                    vals[y * w + x]
                );
            }
        }
        let inside: Vec<bool> = (0..25)
            .map(|i| (1..4).contains(&(i % 5)) && (1..4).contains(&(i / 5)))
            .collect();
        let d = chamfer(&inside, 5, 5);
        assert_eq!((d[0], d[6], d[12]), (0.0, 1.0, 2.0));
    }
}
