//! `analyze_image`: a vision-capable chat model answers a question about an
//! image, and the image is measured: width, height, format, dominant
//! colours and mean brightness. The measured facts are true whatever the
//! model is; the offline test models (`local/echo-vision`) do not look at
//! the image at all, so without them an offline answer would say nothing.

use std::collections::HashMap;

use base64::Engine;
use chrono::Utc;
use image::imageops::FilterType;
use serde_json::{Value, json};

use super::args::Args;
use super::kit::{Done, Failure, ToolDeps, ToolScope, blocking, provider_failure};
use unigen_core::config::ModelEntry;
use unigen_core::domain::ModelCategory;
use unigen_core::fetch::{Media, MediaKind, sniff};
use unigen_db::billing::chat_credits;
use unigen_providers::chat::{ChatMessage, MessageContent, count_tokens};
use unigen_providers::llm::{ToolCall, TurnRequest};

pub(super) const MAX_QUESTION_CHARS: usize = 2_000;
const DEFAULT_QUESTION: &str = "Describe this image.";
/// Longest answer, in tokens (and at most the agent's `max_tokens`).
const ANSWER_MAX_TOKENS: u32 = 1_000;
/// Prompt tokens one image may cost upstream (a high-detail tile grid).
const IMAGE_PROMPT_TOKENS: u32 = 1_500;
/// Decoding limits: a small file must not unpack into gigabytes.
const MAX_SIDE: u32 = 16_384;
const MAX_DECODE_BYTES: u64 = 256 * 1024 * 1024;
/// Colours are counted on a sample of at most this side.
const SAMPLE_SIDE: u32 = 128;
/// Dominant colours reported at most, and the least share of the image
/// one must cover.
const MAX_COLOURS: usize = 5;
const MIN_COLOUR_SHARE: f64 = 0.02;

pub(super) async fn analyze_image(
    deps: &ToolDeps,
    args: &Args<'_>,
    scope: &ToolScope<'_>,
) -> Result<Done, Failure> {
    let source = args.required_text("image_url", usize::MAX)?.trim();
    let question = question(args)?;
    let model = vision_model(deps, scope.model)?;
    let Media { bytes, extension } = load(deps, source).await?;
    let (facts, bytes) = blocking("image measurement", move || (measure(&bytes), bytes)).await?;
    let facts = facts.ok_or_else(|| Failure::new("image_url could not be decoded as an image"))?;
    let message = ChatMessage {
        role: "user".into(),
        content: Some(MessageContent::Text(question.to_owned())),
        images: Some(vec![data_uri(extension, &bytes)]),
        name: None,
        tool_call_id: None,
        tool_calls: None,
        extra: Default::default(),
    };
    let turn = deps
        .chat
        .complete(&TurnRequest {
            model,
            messages: std::slice::from_ref(&message),
            tools: &[],
            temperature: scope.temperature,
            max_tokens: answer_max_tokens(scope),
        })
        .await
        .map_err(|err| provider_failure("image analysis", &model.id, &err))?;
    let mut output = json!({
        "answer": turn.content.unwrap_or_default(),
        "model": model.id,
    });
    if let (Value::Object(output), Value::Object(facts)) = (&mut output, facts.to_json()) {
        output.extend(facts);
    }
    Ok(Done {
        output,
        prompt_tokens: turn.prompt_tokens,
        completion_tokens: turn.completion_tokens,
    })
}

fn question<'a>(args: &Args<'a>) -> Result<&'a str, Failure> {
    Ok(args
        .text("question", MAX_QUESTION_CHARS)?
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .unwrap_or(DEFAULT_QUESTION))
}

fn answer_max_tokens(scope: &ToolScope<'_>) -> u32 {
    ANSWER_MAX_TOKENS.min(scope.max_tokens.max(1))
}

/// Token credits of the answer if it is as long as allowed, priced at the
/// agent's model (the run meters tokens at that price).
pub(super) fn worst_case_credits(call: &ToolCall, scope: &ToolScope<'_>) -> i64 {
    let Ok(question) = Args::of(&call.arguments).and_then(|args| question(&args)) else {
        return 0;
    };
    chat_credits(
        count_tokens(question) + IMAGE_PROMPT_TOKENS,
        answer_max_tokens(scope),
        scope.model,
    )
}

/// The image: one of this API's own signed file URLs is read from storage
/// (no HTTP round trip to ourselves, whatever the network policy); any
/// other source goes through the SSRF-guarded fetcher.
async fn load(deps: &ToolDeps, source: &str) -> Result<Media, Failure> {
    let Some(key) = deps.signer.verified_key(source, Utc::now().timestamp()) else {
        return deps
            .fetcher
            .load("image_url", source, MediaKind::Image)
            .await
            .map_err(|err| Failure::new(err.to_string()));
    };
    let bytes = deps
        .store
        .get(&key)
        .await
        .map_err(|err| {
            tracing::warn!(error = %err, key, "analyze_image: reading a stored file failed");
            Failure::new("image_url could not be read; try again later")
        })?
        .ok_or_else(|| Failure::new("image_url refers to a file that no longer exists"))?;
    let extension = sniff(&bytes, MediaKind::Image)
        .ok_or_else(|| Failure::new("image_url is not a JPEG, PNG or WebP image"))?;
    Ok(Media { bytes, extension })
}

/// The agent's model if it sees images, else the catalogue's vision model
/// (its default one first).
fn vision_model<'a>(
    deps: &'a ToolDeps,
    agent_model: &'a ModelEntry,
) -> Result<&'a ModelEntry, Failure> {
    if agent_model.vision {
        return Ok(agent_model);
    }
    let candidates = || {
        deps.catalogue
            .all()
            .iter()
            .filter(|m| m.category == ModelCategory::Chat && m.vision)
    };
    candidates()
        .find(|m| m.default)
        .or_else(|| candidates().next())
        .ok_or_else(|| {
            Failure::new(
                "image analysis needs a vision-capable model; none is configured on this server",
            )
        })
}

fn data_uri(extension: &str, bytes: &[u8]) -> String {
    let mime = match extension {
        "jpg" => "image/jpeg",
        "webp" => "image/webp",
        _ => "image/png",
    };
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    format!("data:{mime};base64,{data}")
}

/// What can be measured on the pixels.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ImageFacts {
    pub width: u32,
    pub height: u32,
    /// `png`, `jpeg` or `webp`.
    pub format: &'static str,
    /// The largest areas of similar colour, largest first.
    pub dominant_colors: Vec<Colour>,
    /// Mean luma (Rec. 601) of the opaque pixels, 0 (black) to 1 (white);
    /// `None` for a fully transparent image.
    pub mean_brightness: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Colour {
    /// `#rrggbb`: the mean colour of the area.
    pub hex: String,
    /// The nearest common colour name.
    pub name: &'static str,
    /// Fraction of the opaque pixels, 0 to 1.
    pub share: f64,
}

impl ImageFacts {
    fn to_json(&self) -> Value {
        json!({
            "width": self.width,
            "height": self.height,
            "format": self.format,
            "dominant_colors": self.dominant_colors.iter().map(|c| json!({
                "hex": c.hex, "name": c.name, "share": c.share,
            })).collect::<Vec<_>>(),
            "mean_brightness": self.mean_brightness,
        })
    }
}

/// Decodes and measures an image; `None` if it does not decode within the
/// limits. Blocking CPU work.
pub(super) fn measure(bytes: &[u8]) -> Option<ImageFacts> {
    let format = match unigen_core::images::guessed_format(bytes)? {
        image::ImageFormat::Png => "png",
        image::ImageFormat::Jpeg => "jpeg",
        image::ImageFormat::WebP => "webp",
        _ => return None,
    };
    let image = unigen_core::images::decode_bounded(bytes, MAX_SIDE, MAX_DECODE_BYTES).ok()?;
    let (width, height) = (image.width(), image.height());
    // Nearest-neighbour sampling keeps the image's true colours; a
    // smoothing filter would invent blends at every edge.
    let sample = if width > SAMPLE_SIDE || height > SAMPLE_SIDE {
        image.resize(SAMPLE_SIDE, SAMPLE_SIDE, FilterType::Nearest)
    } else {
        image
    }
    .to_rgba8();
    // Pixels grouped by colour, 3 bits per channel: (count, sum of r, g, b).
    let mut groups: HashMap<u16, (u64, [u64; 3])> = HashMap::new();
    let mut luma_sum = 0.0;
    let mut opaque = 0u64;
    for pixel in sample.pixels() {
        let [r, g, b, a] = pixel.0;
        if a < 128 {
            continue;
        }
        opaque += 1;
        luma_sum += (0.299 * f64::from(r) + 0.587 * f64::from(g) + 0.114 * f64::from(b)) / 255.0;
        let bucket = (u16::from(r >> 5) << 6) | (u16::from(g >> 5) << 3) | u16::from(b >> 5);
        let group = groups.entry(bucket).or_default();
        group.0 += 1;
        for (sum, channel) in group.1.iter_mut().zip([r, g, b]) {
            *sum += u64::from(channel);
        }
    }
    let mut groups: Vec<(u16, (u64, [u64; 3]))> = groups.into_iter().collect();
    // Ties broken by bucket, so the result does not depend on hashing.
    groups.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(&b.0)));
    let dominant_colors = groups
        .into_iter()
        .map(|(_, (count, sums))| (count, sums.map(|sum| (sum / count) as u8)))
        .filter(|(count, _)| *count as f64 / opaque as f64 >= MIN_COLOUR_SHARE)
        .take(MAX_COLOURS)
        .map(|(count, rgb)| Colour {
            hex: format!("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2]),
            name: colour_name(rgb),
            share: round3(count as f64 / opaque as f64),
        })
        .collect();
    Some(ImageFacts {
        width,
        height,
        format,
        dominant_colors,
        mean_brightness: (opaque > 0).then(|| round3(luma_sum / opaque as f64)),
    })
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// Common colour names and a representative of each.
const NAMED_COLOURS: [(&str, [u8; 3]); 16] = [
    ("black", [0, 0, 0]),
    ("dark gray", [64, 64, 64]),
    ("gray", [128, 128, 128]),
    ("light gray", [192, 192, 192]),
    ("white", [255, 255, 255]),
    ("red", [220, 20, 20]),
    ("dark red", [128, 0, 0]),
    ("orange", [255, 140, 0]),
    ("yellow", [255, 220, 0]),
    ("brown", [140, 80, 30]),
    ("green", [30, 160, 30]),
    ("dark green", [0, 90, 0]),
    ("cyan", [0, 200, 220]),
    ("blue", [20, 60, 220]),
    ("purple", [128, 0, 160]),
    ("pink", [255, 105, 180]),
];

/// The named colour nearest to `rgb` (weighted RGB distance, close to how
/// different colours look).
fn colour_name(rgb: [u8; 3]) -> &'static str {
    let distance = |named: [u8; 3]| {
        let [dr, dg, db] = [0, 1, 2].map(|i| f64::from(rgb[i]) - f64::from(named[i]));
        2.0 * dr * dr + 4.0 * dg * dg + 3.0 * db * db
    };
    NAMED_COLOURS
        .iter()
        .min_by(|a, b| distance(a.1).total_cmp(&distance(b.1)))
        .map_or("gray", |(name, _)| name)
}
