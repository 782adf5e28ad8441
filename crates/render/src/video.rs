//! Offline video generator behind the `local` provider.
//!
//! Text-to-video and image-to-video render frames in Rust and pipe them as raw
//! RGB into `ffmpeg` (libx264, yuv420p, `+faststart`). One still picture is
//! prepared per request, at 1.25x the frame size so there is room to move:
//! the procedural renderer draws it from the prompt, or the source image is
//! scaled to cover it. Every frame is then a cheap bilinear crop of that still
//! along a slow Ken Burns path (pan and zoom), with a soft glow that drifts and
//! pulses over the brightest spot, so consecutive frames really differ. Frames
//! are streamed through a small bounded queue, so memory stays at a few frames
//! plus the still, whatever the duration.
//!
//! Video-to-video hands the source file to `ffmpeg`, which loops or trims it to
//! the requested number of frames, resamples it to the frame rate, scales it
//! to cover the frame and crops, and applies a colour grade chosen from the
//! words of the prompt ("warm", "cold", "noir", "vintage", ...).
//!
//! With `looping`, the camera path is periodic in the frame count (and a
//! restyled video cross-fades its tail into its head), so frame N would equal
//! frame 0 and playback wraps without a jump.
//!
//! MP4 with `+faststart` needs a seekable output, so `ffmpeg` writes a unique
//! temporary file that is read back and always deleted. Everything is
//! deterministic for the same spec: no clock or OS randomness feeds the
//! pictures, and x264 gives identical bitstreams for identical input.

use std::f64::consts::{PI, TAU};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use image::imageops::FilterType;
use image::{DynamicImage, RgbImage};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use super::render::{self, RenderSpec, RenderStyle};
use crate::random::{Rng, fnv1a};
use unigen_core::ProviderError;
use unigen_core::audio;
use unigen_core::fetch::MediaKind;

/// What the video is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VideoMode {
    TextToVideo,
    ImageToVideo,
    VideoToVideo,
}

/// One request. `width`/`height` come from [`dimensions`]; `fps` is 30 or 60
/// and `duration_seconds` 1 to 10 in the API, but any even size up to 8192,
/// 1..=120 fps and up to 60 s work here (tests use tiny clips).
#[derive(Debug, Clone)]
pub struct VideoSpec<'a> {
    pub prompt: &'a str,
    pub negative_prompt: Option<&'a str>,
    pub seed: u64,
    pub duration_seconds: f64,
    pub fps: u32,
    pub width: u32,
    pub height: u32,
    pub mode: VideoMode,
    /// Required for `ImageToVideo`.
    pub source_image: Option<&'a DynamicImage>,
    /// Required for `VideoToVideo`: the source file's bytes, in any container
    /// ffmpeg reads (MP4, MOV, WebM, ...).
    pub source_video: Option<&'a [u8]>,
    /// The last frame leads seamlessly back to the first.
    pub looping: bool,
}

/// An encoded MP4 (H.264, yuv420p, moov atom first).
#[derive(Clone)]
pub struct Video {
    pub bytes: Vec<u8>,
    pub duration_seconds: f64,
    pub width: u32,
    pub height: u32,
    pub fps: u32,
}

/// Hand-written so logging a result does not dump megabytes of MP4.
impl std::fmt::Debug for Video {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Video")
            .field("bytes", &format_args!("<{} bytes>", self.bytes.len()))
            .field("duration_seconds", &self.duration_seconds)
            .field("width", &self.width)
            .field("height", &self.height)
            .field("fps", &self.fps)
            .finish()
    }
}

/// Output size for a resolution name ("720p", "1080p", "4k") and aspect ratio
/// ("16:9", "9:16", "1:1", "4:3", "3:4"): the short side is 720 / 1080 / 2160,
/// the long side follows the ratio, both rounded to even numbers
/// (16:9 720p -> 1280x720; 9:16 1080p -> 1080x1920; 1:1 4k -> 2160x2160;
/// 4:3 720p -> 960x720). Other `W:H` ratios up to 4:1 are accepted too;
/// anything else is `None`.
pub fn dimensions(resolution: &str, aspect_ratio: &str) -> Option<(u32, u32)> {
    let short: u64 = match resolution.trim().to_ascii_lowercase().as_str() {
        "720p" => 720,
        "1080p" => 1080,
        "4k" | "2160p" => 2160,
        _ => return None,
    };
    let (w, h) = aspect_ratio.trim().split_once(':')?;
    let (w, h): (u64, u64) = (w.trim().parse().ok()?, h.trim().parse().ok()?);
    if w == 0 || h == 0 || w.max(h) > 4 * w.min(h) || w.max(h) > 1000 {
        return None;
    }
    // Long side = short * long/short, rounded to the nearest even number.
    let long = |num: u64, den: u64| ((short * num + den) / (2 * den) * 2) as u32;
    let short = short as u32;
    Some(if w >= h {
        (long(w, h), short)
    } else {
        (short, long(h, w))
    })
}

/// Encodings that may run at once in this process: one per core.
static ENCODING_TURNS: std::sync::LazyLock<tokio::sync::Semaphore> =
    std::sync::LazyLock::new(|| {
        tokio::sync::Semaphore::new(std::thread::available_parallelism().map_or(2, |n| n.get()))
    });

/// Renders and encodes. `progress` is called with 0..=100 as frames are
/// produced (at most every 5%), and with 100 once the MP4 is complete.
///
/// Errors: bad parameters, a missing or undecodable source, or a failing
/// `ffmpeg` are `Permanent`; running out of time (a starved machine) is
/// `Transient`.
pub async fn generate(
    spec: &VideoSpec<'_>,
    progress: &(dyn Fn(u8) + Send + Sync),
) -> Result<Video, ProviderError> {
    let frames = check_spec(spec)?;
    progress(0);
    // One encoding per core at a time: the time limit assumes the encoding
    // has a core; past that, videos sharing the cores all starved past it.
    let _turn = ENCODING_TURNS
        .acquire()
        .await
        .expect("the encoding semaphore is never closed");
    let started = std::time::Instant::now();
    let limit = time_limit(spec.width, spec.height, frames);
    let work = async {
        match spec.mode {
            VideoMode::TextToVideo | VideoMode::ImageToVideo => {
                encode_animation(spec, frames, progress).await
            }
            VideoMode::VideoToVideo => restyle_video(spec, frames, progress).await,
        }
    };
    // Dropping the work future on timeout kills ffmpeg (kill_on_drop) and
    // deletes the temporary files (TempFile guards).
    let bytes = tokio::time::timeout(limit, work).await.map_err(|_| {
        ProviderError::Transient(format!(
            "video encoding did not finish within {} s",
            limit.as_secs()
        ))
    })??;
    tracing::debug!(
        mode = ?spec.mode,
        width = spec.width,
        height = spec.height,
        frames,
        bytes = bytes.len(),
        duration_ms = started.elapsed().as_millis() as u64,
        "local video encoded"
    );
    progress(100);
    Ok(Video {
        bytes,
        duration_seconds: f64::from(frames) / f64::from(spec.fps),
        width: spec.width,
        height: spec.height,
        fps: spec.fps,
    })
}

/// Validates the spec and returns the frame count, round(duration x fps).
fn check_spec(spec: &VideoSpec<'_>) -> Result<u32, ProviderError> {
    let bad = |m: String| Err(ProviderError::Permanent(m));
    let (w, h) = (spec.width, spec.height);
    if !(16..=8192).contains(&w) || !(16..=8192).contains(&h) || w % 2 != 0 || h % 2 != 0 {
        return bad(format!(
            "video size {w}x{h} is invalid: width and height must be even numbers from 16 to 8192"
        ));
    }
    if !(1..=120).contains(&spec.fps) {
        return bad(format!("video fps {} is invalid: use 1 to 120", spec.fps));
    }
    let d = spec.duration_seconds;
    if !d.is_finite() || d <= 0.0 || d > 60.0 {
        return bad(format!(
            "video duration {d} s is invalid: use more than 0 and at most 60 seconds"
        ));
    }
    let frames = (d * f64::from(spec.fps)).round();
    if frames < 1.0 {
        return bad(format!(
            "video duration {d} s is shorter than one frame at {} fps",
            spec.fps
        ));
    }
    match spec.mode {
        VideoMode::ImageToVideo => match spec.source_image {
            None => bad("image_to_video needs a source image".into()),
            Some(img) if img.width() == 0 || img.height() == 0 => {
                bad("source image is empty (zero width or height)".into())
            }
            Some(_) => Ok(frames as u32),
        },
        VideoMode::VideoToVideo if spec.source_video.is_none_or(<[u8]>::is_empty) => {
            bad("video_to_video needs a source video".into())
        }
        _ => Ok(frames as u32),
    }
}

/// Generous wall-clock budget: 30 s plus 3x the time at 25 M output pixels
/// per second, a rate this 2-core machine beats (60-75 M/s) even while
/// shared with builds, so only a wedged or starved ffmpeg hits it.
/// 720p30 x 5 s gets 47 s; 1080p60 x 10 s and 4k30 x 5 s get 180 s.
fn time_limit(width: u32, height: u32, frames: u32) -> Duration {
    let pixels = f64::from(width) * f64::from(height) * f64::from(frames);
    Duration::from_secs(30 + (3.0 * pixels / 25.0e6).ceil() as u64)
}

// ---------------------------------------------------------------------------
// Text-to-video and image-to-video: frames rendered here, encoded by ffmpeg
// ---------------------------------------------------------------------------

/// Owned copy of what the frame producer thread needs (the spec borrows).
struct AnimationInput {
    prompt: String,
    negative_prompt: Option<String>,
    seed: u64,
    width: u32,
    height: u32,
    frames: u32,
    fps: u32,
    looping: bool,
    source: Option<DynamicImage>,
}

/// Renders frames on a blocking thread and streams them into ffmpeg's stdin.
/// Buffers cycle back to the producer, so at most four frames exist at once.
async fn encode_animation(
    spec: &VideoSpec<'_>,
    frames: u32,
    progress: &(dyn Fn(u8) + Send + Sync),
) -> Result<Vec<u8>, ProviderError> {
    let input = AnimationInput {
        prompt: spec.prompt.to_owned(),
        negative_prompt: spec.negative_prompt.map(str::to_owned),
        seed: spec.seed,
        width: spec.width,
        height: spec.height,
        frames,
        fps: spec.fps,
        looping: spec.looping,
        source: match spec.mode {
            VideoMode::ImageToVideo => spec.source_image.cloned(),
            _ => None,
        },
    };
    let output = TempFile::new("mp4");
    let mut args = words(
        "-hide_banner -loglevel error -nostats -protocol_whitelist pipe -f rawvideo -pix_fmt rgb24",
    );
    args.extend([
        "-s".to_owned(),
        format!("{}x{}", spec.width, spec.height),
        "-framerate".to_owned(),
        spec.fps.to_string(),
    ]);
    // Tagged bt709 below, so convert with the bt709 matrix too.
    args.extend(words(
        "-i pipe:0 -an -vf scale=out_color_matrix=bt709:out_range=tv,format=yuv420p",
    ));
    args.extend(encoder_args(spec.width, spec.height, frames, &output));
    let mut child = spawn_ffmpeg(&args, true, false)?;
    let stderr = collect_stderr(&mut child);
    let mut stdin = child.stdin.take().expect("stdin is piped");

    let (frame_tx, mut frame_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(2);
    let (spare_tx, spare_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    tokio::task::spawn_blocking(move || {
        let animation = Animation::new(&input);
        let len = input.width as usize * input.height as usize * 3;
        let mut scratch = Scratch::default();
        for index in 0..input.frames {
            let mut buf = spare_rx.try_recv().unwrap_or_else(|_| vec![0; len]);
            animation.frame_into(index, &mut buf, &mut scratch);
            if frame_tx.blocking_send(buf).is_err() {
                return; // the consumer gave up (error, timeout or cancellation)
            }
        }
    });

    let mut written = 0u32;
    let mut reported = 0u8;
    let mut pipe_error = None;
    while let Some(frame) = frame_rx.recv().await {
        if let Err(e) = stdin.write_all(&frame).await {
            pipe_error = Some(e); // ffmpeg died: its status and stderr say why
            break;
        }
        let _ = spare_tx.send(frame);
        written += 1;
        let pct = (u64::from(written) * 99 / u64::from(frames)) as u8;
        if pct >= reported.saturating_add(5) {
            reported = pct;
            progress(pct);
        }
    }
    drop(frame_rx);
    drop(stdin); // end of input: ffmpeg flushes and finalises the MP4
    let status = child.wait().await;
    let status = finish_status(status, stderr.await)?;
    if let Some(e) = pipe_error {
        return Err(ProviderError::Permanent(format!(
            "ffmpeg stopped reading frames: {e}"
        )));
    }
    if written != frames {
        return Err(ProviderError::Permanent(format!(
            "video renderer stopped after {written} of {frames} frames (ffmpeg {status})"
        )));
    }
    read_output(&output).await
}

/// Shared x264/MP4 output options. 4k-class sizes shorten the lookahead: with
/// the default of 10, x264 holds ~0.8 GB at 4k; with 5 about 0.55 GB, for
/// barely larger files (superfast would be 3-4x larger for ~15% less CPU).
fn encoder_args(width: u32, height: u32, frames: u32, output: &TempFile) -> Vec<String> {
    let mut args = words(
        "-c:v libx264 -preset veryfast -crf 23 -threads 2 -pix_fmt yuv420p \
         -colorspace bt709 -color_primaries bt709 -color_trc bt709 -color_range tv \
         -movflags +faststart -map_metadata -1 -f mp4 -y",
    );
    if u64::from(width) * u64::from(height) > 1920 * 1088 * 3 / 2 {
        args.extend(words("-x264-params rc-lookahead=5:sync-lookahead=0"));
    }
    args.extend([
        "-frames:v".to_owned(),
        frames.to_string(),
        output.path_str(),
    ]);
    args
}

/// Splits a fixed option string into arguments (never used for paths, which
/// may contain spaces).
fn words(options: &str) -> Vec<String> {
    options.split_whitespace().map(str::to_owned).collect()
}

/// Per-thread scratch tables, reused across frames.
#[derive(Default)]
struct Scratch {
    columns: Vec<(usize, u32)>,
    glow_x: Vec<u32>,
}

/// The still being filmed plus the camera path and glow, all fixed per request.
struct Animation {
    base: RgbImage,
    width: u32,
    height: u32,
    frames: u32,
    motion: Motion,
    glow: Glow,
}

/// Camera path in normalised terms: `zoom` is the window size as a fraction of
/// the largest frame-shaped window that fits the still (1.0 = all of it), and
/// `pan` places the window within the slack left around it (0..1 each axis).
struct Motion {
    looping: bool,
    zoom: (f64, f64),
    pan_from: (f64, f64),
    pan_to: (f64, f64),
    loop_zoom_amp: f64,
    loop_pan_amp: (f64, f64),
    loop_phase: f64,
}

/// A soft light that sits on the still's brightest spot, drifting and pulsing.
struct Glow {
    center: (f64, f64),
    drift: (f64, f64),
    sigma: f64,
    color: [u8; 3],
    pulses: f64,
    phase: f64,
    strength: f64,
}

/// Scale of the still relative to the frame: room for the pan and zoom.
const OVERSCAN: f64 = 1.25;

impl Animation {
    /// Prepares the still (the expensive part, done once) and the paths.
    fn new(input: &AnimationInput) -> Self {
        let (w, h) = (input.width, input.height);
        let (bw, bh) = (
            (f64::from(w) * OVERSCAN).ceil() as u32,
            (f64::from(h) * OVERSCAN).ceil() as u32,
        );
        let base = match &input.source {
            // Cover the still (crop the overflow), as the frame covers it.
            Some(img) => img.resize_to_fill(bw, bh, FilterType::Triangle).to_rgb8(),
            None => render::render(&RenderSpec {
                prompt: &input.prompt,
                negative_prompt: input.negative_prompt.as_deref(),
                seed: input.seed,
                style: RenderStyle::Vivid,
                width: bw,
                height: bh,
            }),
        };
        let mut rng = Rng::from_state(
            input.seed
                ^ fnv1a(input.prompt.as_bytes())
                ^ input
                    .negative_prompt
                    .as_ref()
                    .map_or(0, |n| fnv1a(n.as_bytes()).rotate_left(17)),
        );
        let seconds = f64::from(input.frames) / f64::from(input.fps);
        let motion = Motion::new(&mut rng, seconds, input.looping);
        let glow = Glow::new(&base, &mut rng, seconds, input.source.is_some());
        Self {
            base,
            width: w,
            height: h,
            frames: input.frames,
            motion,
            glow,
        }
    }

    /// Frame `index` as packed RGB into `out` (width x height x 3 bytes).
    fn frame_into(&self, index: u32, out: &mut [u8], scratch: &mut Scratch) {
        let (bw, bh) = (f64::from(self.base.width()), f64::from(self.base.height()));
        let (w, h) = (f64::from(self.width), f64::from(self.height));
        let theta = TAU * f64::from(index) / f64::from(self.frames);
        let (zoom, (pu, pv)) = self.motion.at(index, self.frames, theta);
        // Base pixels per output pixel, and the window's top-left corner.
        let scale = (bw / w).min(bh / h) * zoom;
        let left = pu * (bw - w * scale).max(0.0);
        let top = pv * (bh - h * scale).max(0.0);
        resample(
            &self.base,
            left,
            top,
            scale,
            self.width,
            self.height,
            out,
            &mut scratch.columns,
        );
        let (gx, gy) = self.glow.position(theta);
        self.glow.apply(
            ((gx - left) / scale, (gy - top) / scale),
            self.glow.sigma / scale,
            self.glow.intensity(theta),
            self.width,
            self.height,
            out,
            &mut scratch.glow_x,
        );
    }
}

impl Motion {
    fn new(rng: &mut Rng, seconds: f64, looping: bool) -> Self {
        // Longer clips travel further, but never faster than a slow drift.
        let zoom_amount = (0.05 + 0.03 * seconds).min(0.18);
        let zoom = if rng.unit_f64() < 0.5 {
            (0.98, 0.98 - zoom_amount)
        } else {
            (0.98 - zoom_amount, 0.98)
        };
        let travel = (0.3 + 0.1 * seconds).min(0.8);
        let mut axis = |amount: f64| {
            let from = 0.1 + 0.8 * rng.unit_f64();
            let dir = if rng.unit_f64() < 0.5 { -1.0 } else { 1.0 };
            let mut to = from + dir * amount;
            if !(0.0..=1.0).contains(&to) {
                to = from - dir * amount;
            }
            (from, to.clamp(0.0, 1.0))
        };
        let (u0, u1) = axis(travel);
        let (v0, v1) = axis(travel * 0.6);
        Self {
            looping,
            zoom,
            pan_from: (u0, v0),
            pan_to: (u1, v1),
            loop_zoom_amp: (0.02 + 0.015 * seconds).min(0.08),
            loop_pan_amp: (
                (0.15 + 0.05 * seconds).min(0.4) * if rng.unit_f64() < 0.5 { -1.0 } else { 1.0 },
                (0.1 + 0.03 * seconds).min(0.3),
            ),
            loop_phase: rng.unit_f64() * TAU,
        }
    }

    /// Zoom and pan for a frame. A loop follows a closed ellipse in
    /// `theta` (2 pi per clip); otherwise the camera eases from start to end.
    fn at(&self, index: u32, frames: u32, theta: f64) -> (f64, (f64, f64)) {
        if self.looping {
            let zoom = 0.9 + self.loop_zoom_amp * (theta + self.loop_phase).cos();
            let u = 0.5 + self.loop_pan_amp.0 * theta.cos();
            let v = 0.5 + self.loop_pan_amp.1 * theta.sin();
            (zoom, (u, v))
        } else {
            let t = f64::from(index) / f64::from(frames.saturating_sub(1).max(1));
            let e = 0.5 - 0.5 * (PI * t).cos();
            let lerp = |a: f64, b: f64| a + (b - a) * e;
            (
                lerp(self.zoom.0, self.zoom.1),
                (
                    lerp(self.pan_from.0, self.pan_to.0),
                    lerp(self.pan_from.1, self.pan_to.1),
                ),
            )
        }
    }
}

impl Glow {
    /// Finds the brightest region of the still on a coarse grid (the sun or
    /// moon in rendered scenes) and anchors the glow there.
    fn new(base: &RgbImage, rng: &mut Rng, seconds: f64, photo: bool) -> Self {
        let (bw, bh) = (base.width(), base.height());
        let cells = 32u32;
        let (cw, ch) = (bw.div_ceil(cells).max(1), bh.div_ceil(cells).max(1));
        let mut best = (0u64, 0u32, 0u32, [0u64; 3]);
        for gy in 0..bh.div_ceil(ch) {
            for gx in 0..bw.div_ceil(cw) {
                let mut sum = [0u64; 3];
                let mut n = 0u64;
                // Every 4th pixel each way is plenty to find the bright spot.
                for y in (gy * ch..((gy + 1) * ch).min(bh)).step_by(4) {
                    for x in (gx * cw..((gx + 1) * cw).min(bw)).step_by(4) {
                        let p = base.get_pixel(x, y).0;
                        for c in 0..3 {
                            sum[c] += u64::from(p[c]);
                        }
                        n += 1;
                    }
                }
                let n = n.max(1);
                let luma = (2 * sum[0] + 5 * sum[1] + sum[2]) / n;
                if luma > best.0 {
                    best = (luma, gx, gy, sum.map(|s| s / n));
                }
            }
        }
        let (_, gx, gy, avg) = best;
        let color = avg.map(|c| (c + (255 - c.min(255)) * 3 / 5).min(255) as u8);
        let short = f64::from(bw.min(bh));
        Self {
            center: (
                (f64::from(gx) + 0.5) * f64::from(cw),
                (f64::from(gy) + 0.5) * f64::from(ch),
            ),
            drift: (0.03 * f64::from(bw), 0.015 * f64::from(bh)),
            sigma: 0.12 * short,
            color,
            pulses: (seconds / 2.5).round().max(1.0),
            phase: rng.unit_f64() * TAU,
            strength: if photo { 0.6 } else { 1.0 },
        }
    }

    fn position(&self, theta: f64) -> (f64, f64) {
        (
            self.center.0 + self.drift.0 * (theta + self.phase).sin(),
            self.center.1 + self.drift.1 * (theta + self.phase).cos(),
        )
    }

    /// Between 12% and 30% blend at the centre, pulsing a whole number of
    /// times per clip so loops stay seamless.
    fn intensity(&self, theta: f64) -> f64 {
        self.strength * (0.12 + 0.18 * (0.5 + 0.5 * (theta * self.pulses + self.phase).sin()))
    }

    /// Lightens pixels toward the glow colour with a separable Gaussian
    /// weight, touching only the rows and columns within 3 sigma.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        center: (f64, f64),
        sigma: f64,
        intensity: f64,
        width: u32,
        height: u32,
        out: &mut [u8],
        weights: &mut Vec<u32>,
    ) {
        let reach = 3.0 * sigma;
        let span = |c: f64, n: u32| {
            let lo = (c - reach).floor().max(0.0);
            let hi = (c + reach).ceil().min(f64::from(n));
            (lo as usize, hi.max(lo) as usize)
        };
        let (x0, x1) = span(center.0, width);
        let (y0, y1) = span(center.1, height);
        if x0 >= x1 || y0 >= y1 {
            return;
        }
        let gauss = |d: f64| (-(d * d) / (2.0 * sigma * sigma)).exp();
        weights.clear();
        weights.extend((x0..x1).map(|x| (256.0 * gauss(x as f64 + 0.5 - center.0)).round() as u32));
        let stride = width as usize * 3;
        for y in y0..y1 {
            let wy = (256.0 * intensity * gauss(y as f64 + 0.5 - center.1)).round() as u32;
            if wy == 0 {
                continue;
            }
            let row = &mut out[y * stride + x0 * 3..y * stride + x1 * 3];
            for (px, &wx) in row.chunks_exact_mut(3).zip(weights.iter()) {
                let a = wx * wy; // 0..=65536
                for (p, &g) in px.iter_mut().zip(self.color.iter()) {
                    if g > *p {
                        *p += ((u32::from(g - *p) * a) >> 16) as u8;
                    }
                }
            }
        }
    }
}

/// Bilinear crop-and-scale of `base`: output pixel (x, y) samples the base at
/// (left + (x + 0.5) * scale - 0.5, top + ...). Column taps are tabulated once
/// per frame and all arithmetic is 8-bit fixed point.
#[allow(clippy::too_many_arguments)]
fn resample(
    base: &RgbImage,
    left: f64,
    top: f64,
    scale: f64,
    width: u32,
    height: u32,
    out: &mut [u8],
    columns: &mut Vec<(usize, u32)>,
) {
    let (bw, bh) = (base.width() as usize, base.height() as usize);
    let tap = |pos: f64, n: usize| -> (usize, u32) {
        let pos = pos.clamp(0.0, (n - 1) as f64);
        let i = (pos.floor() as usize).min(n.saturating_sub(2));
        let frac = ((pos - i as f64) * 256.0).round() as u32;
        (i, frac.min(256))
    };
    columns.clear();
    columns.extend((0..width as usize).map(|x| {
        let (i, f) = tap(left + (x as f64 + 0.5) * scale - 0.5, bw);
        (i * 3, f)
    }));
    let raw = base.as_raw();
    let stride = bw * 3;
    let rows = out
        .chunks_exact_mut(width as usize * 3)
        .take(height as usize);
    for (y, row) in rows.enumerate() {
        let (iy, wy) = tap(top + (y as f64 + 0.5) * scale - 0.5, bh);
        let wy0 = 256 - wy;
        let r0 = &raw[iy * stride..(iy + 1) * stride];
        let r1 = &raw[(iy + 1).min(bh - 1) * stride..][..stride];
        for (px, &(o, wx)) in row.chunks_exact_mut(3).zip(columns.iter()) {
            let wx0 = 256 - wx;
            let a: &[u8; 6] = r0[o..o + 6].try_into().expect("bilinear taps");
            let b: &[u8; 6] = r1[o..o + 6].try_into().expect("bilinear taps");
            for c in 0..3 {
                let top = u32::from(a[c]) * wx0 + u32::from(a[c + 3]) * wx;
                let bottom = u32::from(b[c]) * wx0 + u32::from(b[c + 3]) * wx;
                px[c] = ((top * wy0 + bottom * wy + 32768) >> 16) as u8;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Video-to-video: ffmpeg re-times, reframes and grades the source
// ---------------------------------------------------------------------------

async fn restyle_video(
    spec: &VideoSpec<'_>,
    frames: u32,
    progress: &(dyn Fn(u8) + Send + Sync),
) -> Result<Vec<u8>, ProviderError> {
    let source = spec.source_video.unwrap_or_default();
    let demuxer = source_demuxer(source)?;
    let input = TempFile::new("src");
    tokio::fs::write(&input.0, source)
        .await
        .map_err(|e| ProviderError::Transient(format!("cannot write temporary video file: {e}")))?;
    check_decodable(demuxer, &input).await?;

    let (w, h, fps) = (spec.width, spec.height, spec.fps);
    let mut chain = vec![
        format!("fps={fps}"),
        format!("scale={w}:{h}:force_original_aspect_ratio=increase"),
        format!("crop={w}:{h}"),
        "setsar=1".to_owned(),
    ];
    chain.extend(style_filters(spec.prompt, spec.negative_prompt, spec.seed));
    let finish = "scale=out_color_matrix=bt709:out_range=tv,format=yuv420p";
    let fade = if spec.looping {
        loop_fade_frames(w, h, fps, frames)
    } else {
        0
    };
    let graph = if fade > 0 {
        // Output frame t shows source frame t + fade; the last `fade` frames
        // blend into source frames 0..fade, so the end flows into frame 0.
        let end = frames + fade;
        format!(
            "[0:v]{},split[a][b];[a]trim=start_frame={fade}:end_frame={end},setpts=PTS-STARTPTS[main];\
             [b]trim=end_frame={fade},setpts=PTS-STARTPTS[head];\
             [main][head]xfade=transition=fade:duration={d}:offset={o},{finish}[out]",
            chain.join(","),
            d = f64::from(fade) / f64::from(fps),
            o = f64::from(frames - fade) / f64::from(fps),
        )
    } else {
        format!("[0:v]{},{finish}[out]", chain.join(","))
    };
    let output = TempFile::new("mp4");
    let mut args =
        words("-hide_banner -loglevel error -nostdin -nostats -progress pipe:1 -stream_loop -1");
    args.extend(source_input(demuxer, &input));
    args.extend(["-filter_complex".into(), graph]);
    args.extend([
        "-map".into(),
        "[out]".into(),
        "-an".into(),
        "-sn".into(),
        "-dn".into(),
    ]);
    args.extend(encoder_args(w, h, frames, &output));
    let mut child = spawn_ffmpeg(&args, false, true)?;
    let stderr = collect_stderr(&mut child);
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut lines = BufReader::new(stdout).lines();
    let mut reported = 0u8;
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(n) = line
            .strip_prefix("frame=")
            .and_then(|n| n.trim().parse::<u64>().ok())
        {
            let pct = (n.min(u64::from(frames)) * 99 / u64::from(frames)) as u8;
            if pct >= reported.saturating_add(5) {
                reported = pct;
                progress(pct);
            }
        }
    }
    let status = child.wait().await;
    finish_status(status, stderr.await)?;
    read_output(&output).await
}

/// Cross-fade length for looping restyles: up to half a second, at most a
/// quarter of the clip, and at most ~100 MB of buffered yuv420p frames.
fn loop_fade_frames(width: u32, height: u32, fps: u32, frames: u32) -> u32 {
    let frame_bytes = u64::from(width) * u64::from(height) * 3 / 2;
    let by_memory = (100_000_000 / frame_bytes.max(1)) as u32;
    (fps / 2).min(frames / 4).min(by_memory)
}

/// The ffmpeg demuxer of the source video, from its magic bytes: ffmpeg is
/// never left to guess (a guessed playlist or concat script would open other
/// files).
fn source_demuxer(source: &[u8]) -> Result<&'static str, ProviderError> {
    audio::demuxer_for(source, MediaKind::Video).ok_or_else(|| {
        ProviderError::Permanent(
            "source video could not be decoded: it is not an MP4, MOV or WebM file".into(),
        )
    })
}

/// `-protocol_whitelist file,pipe -f <demuxer> -i <input>`: the source is
/// read as the format its bytes named, and may open no other file or URL.
fn source_input(demuxer: &str, input: &TempFile) -> Vec<String> {
    let mut args: Vec<String> = audio::untrusted_input_options(demuxer)
        .iter()
        .map(|&a| a.to_owned())
        .collect();
    args.extend(["-i".to_owned(), input.path_str()]);
    args
}

/// Decodes the first video frame (shrunk to 16x16 grey) to prove the source
/// is a video ffmpeg can read, so bad uploads get a clear Permanent error
/// instead of an obscure one from the full filter graph.
async fn check_decodable(demuxer: &str, input: &TempFile) -> Result<(), ProviderError> {
    let mut args = words("-hide_banner -loglevel error -nostdin");
    args.extend(source_input(demuxer, input));
    args.extend(words(
        "-map 0:v:0 -frames:v 1 -vf scale=16:16 -pix_fmt gray -f rawvideo pipe:1",
    ));
    let mut child = spawn_ffmpeg(&args, false, true)?;
    let stderr = collect_stderr(&mut child);
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut pixels = Vec::new();
    let _ = stdout.read_to_end(&mut pixels).await;
    let status = child.wait().await;
    let messages = stderr.await.unwrap_or_default();
    let ok = matches!(&status, Ok(s) if s.success()) && pixels.len() == 256;
    if ok {
        Ok(())
    } else {
        Err(ProviderError::Permanent(format!(
            "source video could not be decoded: {}",
            excerpt(&messages).unwrap_or("no video frames found")
        )))
    }
}

/// ffmpeg filters for the colour grade named by the prompt. Words in the
/// negative prompt veto a grade; with no recognised word the grade is a hue
/// rotation keyed by prompt and seed, so the change is always visible.
/// All grades work on YUV directly (lookup tables, `eq`, `hue`): the RGB
/// filters (`colorbalance`, `curves`, `colorchannelmixer`) cost 5-25x more,
/// up to 45 ms per 1080p frame.
fn style_filters(prompt: &str, negative: Option<&str>, seed: u64) -> Vec<String> {
    let tokens = |text: &str| -> Vec<String> {
        text.to_lowercase()
            .replace("b&w", "monochrome")
            .replace("black and white", "monochrome")
            .replace("black & white", "monochrome")
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let wanted = tokens(prompt);
    let vetoed = tokens(negative.unwrap_or(""));
    // Position of the first wanted, non-vetoed keyword of a grade.
    let find = |keys: &[&str]| -> Option<usize> {
        if vetoed.iter().any(|w| keys.contains(&w.as_str())) {
            return None;
        }
        wanted.iter().position(|w| keys.contains(&w.as_str()))
    };
    let mono = find(&[
        "noir",
        "monochrome",
        "grayscale",
        "greyscale",
        "bw",
        "monochromatic",
    ]);
    let sepia = find(&["sepia"]);
    let vintage = find(&["vintage", "retro", "old", "film", "analog", "nostalgic"]);
    let warm = find(&[
        "warm", "warmer", "sunset", "golden", "sunny", "summer", "autumn", "fire",
    ]);
    let cold = find(&[
        "cold",
        "cool",
        "colder",
        "icy",
        "ice",
        "winter",
        "frozen",
        "moonlight",
    ]);
    let vivid = find(&[
        "vivid",
        "vibrant",
        "saturated",
        "colorful",
        "colourful",
        "neon",
    ]);
    let muted = find(&["muted", "faded", "pastel", "washed", "desaturated"]);
    let dark = find(&["dark", "night", "moody", "gloomy", "dim"]);
    let bright = find(&["bright", "light", "airy", "overexposed"]);
    let trippy = find(&["psychedelic", "trippy", "rainbow", "kaleidoscope"]);
    let invert = find(&["invert", "inverted", "negative", "xray"]);

    let mut filters = Vec::new();
    if invert.is_some() {
        filters.push("negate".to_owned());
    }
    // Faded blacks and a yellowed cast first, so a later black-and-white
    // or sepia stays colourless.
    if vintage.is_some() {
        filters.push("lutyuv=y=val*0.82+28:u=val-8:v=val+10,eq=saturation=0.7".into());
    }
    if sepia.is_some() {
        filters.push("hue=s=0,lutyuv=u=110:v=145".into());
    } else if mono.is_some() {
        filters.push("hue=s=0".into());
        filters.push("eq=contrast=1.35:brightness=-0.03".into());
    } else {
        let first = |a: Option<usize>, b: Option<usize>| match (a, b) {
            (Some(x), Some(y)) => Some(x <= y),
            (Some(_), None) => Some(true),
            (None, Some(_)) => Some(false),
            (None, None) => None,
        };
        match first(warm, cold) {
            Some(true) => filters.push("lutyuv=u=val-12:v=val+14".into()),
            Some(false) => filters.push("lutyuv=u=val+16:v=val-10".into()),
            None => {}
        }
        match first(vivid, muted) {
            Some(true) => filters.push("eq=saturation=1.6:contrast=1.1".into()),
            Some(false) => filters.push("eq=saturation=0.5:contrast=0.9:brightness=0.04".into()),
            None => {}
        }
        if trippy.is_some() {
            filters.push("hue=H=2*PI*t/3:s=1.3".into());
        }
    }
    if vintage.is_some() {
        filters.push("vignette=angle=PI/5".into());
    }
    match (dark, bright) {
        (Some(_), None) => filters.push("eq=brightness=-0.08:gamma=0.85".into()),
        (None, Some(_)) => filters.push("eq=brightness=0.06:gamma=1.15".into()),
        _ => {}
    }
    if filters.is_empty() {
        let mut rng = Rng::from_state(seed ^ fnv1a(prompt.as_bytes()));
        let degrees = 40.0 + 80.0 * rng.unit_f64();
        let sign = if rng.unit_f64() < 0.5 { -1.0 } else { 1.0 };
        filters.push(format!("hue=h={:.0}:s=1.25", sign * degrees));
    }
    filters
}

// ---------------------------------------------------------------------------
// Process and file plumbing
// ---------------------------------------------------------------------------

/// A uniquely named file under the temp directory, deleted on drop (also when
/// the generation is cancelled or times out).
struct TempFile(PathBuf);

impl TempFile {
    fn new(extension: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "unigen-video-{}-{}-{nanos}.{extension}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        Self(std::env::temp_dir().join(name))
    }

    fn path_str(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn spawn_ffmpeg(args: &[String], stdin: bool, stdout: bool) -> Result<Child, ProviderError> {
    let pipe = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
    Command::new("ffmpeg")
        .args(args)
        .stdin(pipe(stdin))
        .stdout(pipe(stdout))
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            ProviderError::Permanent(if e.kind() == std::io::ErrorKind::NotFound {
                "ffmpeg is not installed (needed for video generation)".to_owned()
            } else {
                format!("cannot start ffmpeg: {e}")
            })
        })
}

/// Drains stderr concurrently (a full pipe would stall ffmpeg), keeping the
/// last 16 KiB for error messages.
fn collect_stderr(child: &mut Child) -> tokio::task::JoinHandle<String> {
    let stderr = child.stderr.take();
    tokio::spawn(async move {
        let Some(mut stderr) = stderr else {
            return String::new();
        };
        read_tail(&mut stderr, 16 * 1024).await
    })
}

async fn read_tail(reader: &mut (impl AsyncRead + Unpin), keep: usize) -> String {
    let mut kept = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = reader.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&chunk[..n]);
        if kept.len() > 2 * keep {
            kept.drain(..kept.len() - keep);
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// Turns ffmpeg's exit into a result, quoting its stderr on failure.
fn finish_status(
    status: std::io::Result<ExitStatus>,
    stderr: Result<String, tokio::task::JoinError>,
) -> Result<ExitStatus, ProviderError> {
    let stderr = stderr.unwrap_or_default();
    match status {
        Ok(s) if s.success() => Ok(s),
        Ok(s) => Err(ProviderError::Permanent(format!(
            "ffmpeg failed ({s}): {}",
            excerpt(&stderr).unwrap_or("no error output")
        ))),
        Err(e) => Err(ProviderError::Permanent(format!(
            "ffmpeg could not be awaited: {e}"
        ))),
    }
}

/// The last few non-empty lines of ffmpeg's output, at most ~400 characters.
fn excerpt(stderr: &str) -> Option<&str> {
    let trimmed = stderr.trim();
    if trimmed.is_empty() {
        return None;
    }
    let mut start = trimmed.len().saturating_sub(400);
    while !trimmed.is_char_boundary(start) {
        start += 1;
    }
    Some(&trimmed[start..])
}

async fn read_output(output: &TempFile) -> Result<Vec<u8>, ProviderError> {
    let bytes = tokio::fs::read(&output.0)
        .await
        .map_err(|e| ProviderError::Permanent(format!("ffmpeg wrote no video: {e}")))?;
    if bytes.len() < 8 || &bytes[4..8] != b"ftyp" {
        return Err(ProviderError::Permanent(
            "ffmpeg wrote an invalid MP4".into(),
        ));
    }
    Ok(bytes)
}

// ---------------------------------------------------------------------------
// Deterministic randomness
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use super::*;

    fn text_spec(prompt: &str, width: u32, height: u32, fps: u32, secs: f64) -> VideoSpec<'_> {
        VideoSpec {
            prompt,
            negative_prompt: None,
            seed: 42,
            duration_seconds: secs,
            fps,
            width,
            height,
            mode: VideoMode::TextToVideo,
            source_image: None,
            source_video: None,
            looping: false,
        }
    }

    async fn make(spec: &VideoSpec<'_>) -> Video {
        generate(spec, &|_| {}).await.expect("video generated")
    }

    /// ffprobe's view of the first video stream (frames counted by decoding).
    fn probe(bytes: &[u8]) -> HashMap<String, String> {
        let file = TempFile::new("mp4");
        std::fs::write(&file.0, bytes).unwrap();
        let out = std::process::Command::new("ffprobe")
            .args(words(
                "-v error -count_frames -select_streams v:0 -show_entries \
                 stream=codec_name,pix_fmt,width,height,r_frame_rate,nb_read_frames:format=duration \
                 -of default=noprint_wrappers=1",
            ))
            .arg(&file.0)
            .output()
            .expect("ffprobe runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// Checks everything the API promises about an encoded clip.
    fn assert_clip(video: &Video, width: u32, height: u32, fps: u32, secs: f64) {
        let p = probe(&video.bytes);
        assert_eq!(p["codec_name"], "h264");
        assert_eq!(p["pix_fmt"], "yuv420p");
        assert_eq!(p["width"], width.to_string());
        assert_eq!(p["height"], height.to_string());
        assert_eq!(p["r_frame_rate"], format!("{fps}/1"));
        let frames = (secs * f64::from(fps)).round();
        assert_eq!(p["nb_read_frames"], format!("{frames}"));
        let duration: f64 = p["duration"].parse().unwrap();
        assert!(
            (duration - secs).abs() <= 0.05 * secs,
            "duration {duration} vs {secs}"
        );
        assert_eq!((video.width, video.height, video.fps), (width, height, fps));
        assert!((video.duration_seconds - secs).abs() < 1e-9);
        // MP4 magic, and +faststart: the index (moov) precedes the media data.
        assert_eq!(&video.bytes[4..8], b"ftyp");
        let boxes = top_level_boxes(&video.bytes);
        let at = |name: &[u8; 4]| boxes.iter().position(|b| b == name).expect("box present");
        assert!(at(b"moov") < at(b"mdat"), "boxes {boxes:?}");
    }

    fn top_level_boxes(bytes: &[u8]) -> Vec<[u8; 4]> {
        let mut boxes = Vec::new();
        let mut at = 0usize;
        while at + 8 <= bytes.len() {
            let size = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            boxes.push(bytes[at + 4..at + 8].try_into().unwrap());
            if size < 8 {
                break;
            }
            at += size;
        }
        boxes
    }

    /// Frame `index` decoded by ffmpeg as packed RGB.
    fn decode_frame(bytes: &[u8], index: u32) -> Vec<u8> {
        let file = TempFile::new("mp4");
        std::fs::write(&file.0, bytes).unwrap();
        let out = std::process::Command::new("ffmpeg")
            .args(words("-v error -i"))
            .arg(&file.0)
            .args(["-vf".to_owned(), format!("select=eq(n\\,{index})")])
            .args(words("-frames:v 1 -f rawvideo -pix_fmt rgb24 pipe:1"))
            .output()
            .expect("ffmpeg runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    fn mean_abs_diff(a: &[u8], b: &[u8]) -> f64 {
        assert_eq!(a.len(), b.len());
        let sum: u64 = a
            .iter()
            .zip(b)
            .map(|(x, y)| u64::from(x.abs_diff(*y)))
            .sum();
        sum as f64 / a.len() as f64
    }

    /// Mean of max(r,g,b) - min(r,g,b): 0 for a grey picture.
    fn mean_chroma(rgb: &[u8]) -> f64 {
        let sum: u64 = rgb
            .chunks_exact(3)
            .map(|p| u64::from(p.iter().max().unwrap() - p.iter().min().unwrap()))
            .sum();
        sum as f64 / (rgb.len() / 3) as f64
    }

    fn animation_for(spec: &VideoSpec<'_>) -> Animation {
        Animation::new(&AnimationInput {
            prompt: spec.prompt.to_owned(),
            negative_prompt: spec.negative_prompt.map(str::to_owned),
            seed: spec.seed,
            width: spec.width,
            height: spec.height,
            frames: check_spec(spec).unwrap(),
            fps: spec.fps,
            looping: spec.looping,
            source: spec.source_image.cloned(),
        })
    }

    fn frame(animation: &Animation, index: u32) -> Vec<u8> {
        let mut out = vec![0; animation.width as usize * animation.height as usize * 3];
        animation.frame_into(index, &mut out, &mut Scratch::default());
        out
    }

    #[test]
    fn dimensions_follow_resolution_and_aspect_ratio() {
        for (res, ratio, want) in [
            ("720p", "16:9", (1280, 720)),
            ("1080p", "9:16", (1080, 1920)),
            ("4k", "1:1", (2160, 2160)),
            ("720p", "4:3", (960, 720)),
            ("1080p", "3:4", (1080, 1440)),
            ("4k", "16:9", (3840, 2160)),
            ("1080p", "16:9", (1920, 1080)),
            ("720p", "21:9", (1680, 720)),
        ] {
            assert_eq!(dimensions(res, ratio), Some(want), "{res} {ratio}");
        }
        for (res, ratio) in [
            ("8k", "16:9"),
            ("720p", "16x9"),
            ("720p", "0:1"),
            ("1080p", "9:1"),
        ] {
            assert_eq!(dimensions(res, ratio), None, "{res} {ratio}");
        }
    }

    #[tokio::test]
    async fn text_to_video_is_an_exact_faststart_h264_mp4() {
        let spec = text_spec("a red sunset over the ocean", 320, 180, 30, 1.0);
        let seen = Mutex::new(Vec::new());
        let record = |p: u8| seen.lock().unwrap().push(p);
        fn assert_send<T: Send>(future: T) -> T {
            future // the worker spawns generation on a multi-threaded runtime
        }
        let video = assert_send(generate(&spec, &record)).await.unwrap();
        assert_clip(&video, 320, 180, 30, 1.0);
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.first(), Some(&0));
        assert_eq!(seen.last(), Some(&100));
        assert!(
            seen.len() >= 5 && seen.windows(2).all(|w| w[0] <= w[1]),
            "{seen:?}"
        );
    }

    #[tokio::test]
    async fn output_is_deterministic_and_matches_the_rendered_frames() {
        let spec = text_spec("snowy forest mountains at dusk", 160, 90, 30, 0.5);
        let (a, b) = (make(&spec).await, make(&spec).await);
        assert_clip(&a, 160, 90, 30, 0.5);
        assert!(
            a.bytes == b.bytes,
            "same spec must give identical MP4 bytes"
        );

        let animation = animation_for(&spec);
        let rendered = frame(&animation, 0);
        assert_eq!(rendered, frame(&animation_for(&spec), 0));
        let decoded = decode_frame(&a.bytes, 0);
        // Only x264 and 4:2:0 chroma loss stand between the two.
        let diff = mean_abs_diff(&rendered, &decoded);
        assert!(diff < 6.0, "decoded frame 0 differs from render by {diff}");
        // The camera moves: the last frame is a different view.
        let last = frame(&animation, 14);
        assert!(mean_abs_diff(&rendered, &last) > 1.0);

        let other = VideoSpec {
            seed: 43,
            ..spec.clone()
        };
        assert_ne!(frame(&animation_for(&other), 0), rendered);
    }

    #[test]
    fn looping_camera_returns_to_its_start() {
        let spec = VideoSpec {
            looping: true,
            ..text_spec("city skyline at night over the lake", 96, 54, 30, 2.0)
        };
        let animation = animation_for(&spec);
        let first = frame(&animation, 0);
        // Frame 60 would follow frame 59: it must be frame 0 again.
        let wrapped = frame(&animation, 60);
        assert!(mean_abs_diff(&first, &wrapped) < 0.05);
        assert!(
            mean_abs_diff(&first, &frame(&animation, 59))
                < mean_abs_diff(&first, &frame(&animation, 30))
        );
        assert!(mean_abs_diff(&first, &frame(&animation, 30)) > 1.0);
    }

    #[tokio::test]
    async fn image_to_video_films_the_source_image() {
        // Left half red, right half blue.
        let img = DynamicImage::ImageRgb8(RgbImage::from_fn(64, 48, |x, _| {
            if x < 32 {
                image::Rgb([210, 30, 30])
            } else {
                image::Rgb([30, 30, 210])
            }
        }));
        let spec = VideoSpec {
            mode: VideoMode::ImageToVideo,
            source_image: Some(&img),
            ..text_spec("a photo", 192, 108, 60, 0.5)
        };
        let video = make(&spec).await;
        assert_clip(&video, 192, 108, 60, 0.5);
        let rgb = decode_frame(&video.bytes, 0);
        let px = |x: usize, y: usize| &rgb[(y * 192 + x) * 3..][..3];
        assert!(
            px(2, 54)[0] > 150 && px(2, 54)[2] < 80,
            "left is red: {:?}",
            px(2, 54)
        );
        assert!(
            px(189, 54)[2] > 150 && px(189, 54)[0] < 80,
            "right is blue: {:?}",
            px(189, 54)
        );
    }

    #[tokio::test]
    async fn video_to_video_retimes_reframes_and_grades() {
        let source = make(&text_spec("a red sunset over the ocean", 160, 90, 30, 1.0)).await;
        assert!(mean_chroma(&decode_frame(&source.bytes, 0)) > 30.0);

        // Longer (loops the source), faster, square, black and white.
        let spec = VideoSpec {
            mode: VideoMode::VideoToVideo,
            source_video: Some(&source.bytes),
            ..text_spec("film noir detective", 96, 96, 60, 1.5)
        };
        let video = make(&spec).await;
        assert_clip(&video, 96, 96, 60, 1.5);
        let chroma = mean_chroma(&decode_frame(&video.bytes, 80));
        assert!(chroma < 4.0, "noir output still has colour: {chroma}");

        // Shorter (trims), looping: the tail cross-fades into the head.
        let spec = VideoSpec {
            looping: true,
            fps: 24,
            duration_seconds: 0.5,
            prompt: "warm",
            ..spec
        };
        let video = make(&spec).await;
        assert_clip(&video, 96, 96, 24, 0.5);
    }

    #[tokio::test]
    async fn bad_requests_are_permanent_errors() {
        let garbage = b"definitely not a video file".repeat(10);
        let spec = VideoSpec {
            mode: VideoMode::VideoToVideo,
            source_video: Some(&garbage),
            ..text_spec("x", 64, 64, 30, 1.0)
        };
        match generate(&spec, &|_| {}).await {
            Err(ProviderError::Permanent(m)) => assert!(m.contains("could not be decoded"), "{m}"),
            other => panic!("expected a permanent error, got {other:?}"),
        }
        let missing = [
            VideoSpec {
                source_video: None,
                ..spec.clone()
            },
            VideoSpec {
                mode: VideoMode::ImageToVideo,
                ..spec.clone()
            },
            VideoSpec {
                width: 63,
                ..text_spec("x", 64, 64, 30, 1.0)
            },
            VideoSpec {
                duration_seconds: 0.0,
                ..text_spec("x", 64, 64, 30, 1.0)
            },
            VideoSpec {
                fps: 0,
                ..text_spec("x", 64, 64, 30, 1.0)
            },
        ];
        for spec in missing {
            assert!(matches!(
                generate(&spec, &|_| {}).await,
                Err(ProviderError::Permanent(_))
            ));
        }
    }

    /// Hardening finding 7: the source is read with the demuxer its magic
    /// bytes name, and may open only files and pipes; frames we render
    /// come in on a pipe alone.
    #[tokio::test]
    async fn source_videos_are_read_as_their_sniffed_format_only() {
        let input = TempFile::new("src");
        let path = input.path_str();
        assert_eq!(
            source_input("matroska", &input),
            [
                "-protocol_whitelist",
                "file,pipe",
                "-f",
                "matroska",
                "-i",
                path.as_str()
            ]
        );
        assert_eq!(source_demuxer(b"\0\0\0\x18ftypisom\0\0\0\0"), Ok("mov"));
        assert_eq!(source_demuxer(b"\0\0\0\x14ftypqt  \0\0\0\0"), Ok("mov"));
        assert_eq!(
            source_demuxer(b"\x1a\x45\xdf\xa3\x9f\x42\x86"),
            Ok("matroska")
        );
        let playlist = b"#EXTM3U\n#EXTINF:1,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n";
        assert!(source_demuxer(playlist).is_err());
        let spec = VideoSpec {
            mode: VideoMode::VideoToVideo,
            source_video: Some(playlist),
            ..text_spec("x", 64, 64, 30, 1.0)
        };
        match generate(&spec, &|_| {}).await {
            Err(ProviderError::Permanent(m)) => assert!(m.contains("could not be decoded"), "{m}"),
            other => panic!("expected a permanent error, got {other:?}"),
        }

        // A WebM source is read by the matroska demuxer.
        let webm = TempFile::new("webm");
        let status = std::process::Command::new("ffmpeg")
            .args([
                "-v",
                "error",
                "-f",
                "lavfi",
                "-i",
                "testsrc=size=96x64:rate=10",
            ])
            .args(["-t", "1", "-c:v", "libvpx", "-f", "webm", "-y"])
            .arg(&webm.0)
            .status()
            .expect("ffmpeg runs");
        assert!(status.success());
        let source = std::fs::read(&webm.0).unwrap();
        let video = make(&VideoSpec {
            mode: VideoMode::VideoToVideo,
            source_video: Some(&source),
            ..text_spec("cold", 64, 64, 10, 0.5)
        })
        .await;
        assert_clip(&video, 64, 64, 10, 0.5);
    }

    #[test]
    fn grades_follow_prompt_words() {
        assert!(style_filters("Film NOIR street", None, 1).contains(&"hue=s=0".to_owned()));
        assert!(style_filters("black and white", None, 1).contains(&"hue=s=0".to_owned()));
        let warm = style_filters("a warm evening", None, 1);
        assert_eq!(warm, ["lutyuv=u=val-12:v=val+14"]);
        assert_eq!(
            style_filters("cold then warm", None, 1),
            ["lutyuv=u=val+16:v=val-10"]
        );
        let vintage = style_filters("a vintage noir", None, 1);
        assert!(
            vintage[0].starts_with("lutyuv=y=") && vintage[1] == "hue=s=0",
            "{vintage:?}"
        );
        // A vetoed word falls back to the seeded hue shift, which is stable.
        let vetoed = style_filters("warm", Some("warm"), 9);
        assert!(vetoed[0].starts_with("hue=h="), "{vetoed:?}");
        assert_eq!(vetoed, style_filters("warm", Some("warm"), 9));
    }

    #[test]
    fn loop_fade_is_bounded() {
        assert_eq!(loop_fade_frames(1280, 720, 30, 150), 15);
        assert_eq!(loop_fade_frames(3840, 2160, 60, 600), 8);
        assert_eq!(loop_fade_frames(96, 96, 24, 12), 3);
        assert_eq!(loop_fade_frames(96, 96, 30, 3), 0);
    }
}
