//! `generate_chart`: bar, line, pie and scatter charts as PNG or SVG.
//!
//! Drawn with plotters through its `ab_glyph` text path, with the bundled
//! DejaVu font registered as `sans-serif` (the `ttf` feature would need
//! fontconfig). SVG output names the family `sans-serif`, so viewers use
//! their own sans font; layout was measured with DejaVu.

use std::ops::Range;
use std::sync::OnceLock;

use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::{ExtendedColorType, ImageEncoder};
use plotters::backend::{BitMapBackend, RGBPixel, SVGBackend};
use plotters::chart::ChartBuilder;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{
    BoldPoints, KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter,
};
use plotters::coord::types::RangedCoordf64;
use plotters::drawing::{DrawingArea, DrawingAreaErrorKind, IntoDrawingArea};
use plotters::element::{Circle, EmptyElement, PathElement, Polygon, Rectangle, Text};
use plotters::prelude::{DrawingBackend, LineSeries};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{Color, FontStyle, IntoFont, RGBColor, ShapeStyle, TextStyle, WHITE};
use serde::Deserialize;
use serde_json::Value;

use crate::args::{self, Object};
use unigen_core::fonts::{CONDENSED_BOLD, SANS_BOLD};

use crate::common::{ArtifactError, Rendered, format_number, guard, single_line};

pub const DEFAULT_CHART_WIDTH: u32 = 800;
pub const DEFAULT_CHART_HEIGHT: u32 = 500;
const MIN_SIDE: u32 = 200;
const MAX_SIDE: u32 = 2000;
const MAX_SERIES: usize = 10;
const MAX_POINTS: usize = 1000;
/// More slices than this are unreadable; the model is told to group the rest.
const MAX_PIE_SLICES: usize = 20;
const MAX_TITLE_CHARS: usize = 200;
const MAX_NAME_CHARS: usize = 100;
/// Keeps `max - min` finite and axis labels readable.
const MAX_MAGNITUDE: f64 = 1e15;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChartKind {
    Bar,
    Line,
    Pie,
    Scatter,
}

impl ChartKind {
    fn name(self) -> &'static str {
        match self {
            Self::Bar => "bar",
            Self::Line => "line",
            Self::Pie => "pie",
            Self::Scatter => "scatter",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChartFormat {
    #[default]
    Png,
    Svg,
}

impl ChartFormat {
    pub fn extension(self) -> &'static str {
        match self {
            Self::Png => "png",
            Self::Svg => "svg",
        }
    }

    pub fn mime(self) -> &'static str {
        match self {
            Self::Png => "image/png",
            Self::Svg => "image/svg+xml",
        }
    }
}

/// One data series: `values` (one per label) for bar, line and pie charts,
/// `points` (`[x, y]` pairs) for scatter charts.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Series {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub values: Vec<f64>,
    #[serde(default)]
    pub points: Vec<[f64; 2]>,
}

/// A chart to draw. Build it with [`parse_chart_spec`]; [`render_chart`]
/// validates again, so a hand-built spec cannot bypass the limits.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ChartSpec {
    pub kind: ChartKind,
    #[serde(default)]
    pub title: Option<String>,
    /// Categories along the x axis (bar, line), slice names (pie), or one
    /// label per point of a single scatter series.
    #[serde(default)]
    pub labels: Vec<String>,
    pub series: Vec<Series>,
    #[serde(default)]
    pub x_label: Option<String>,
    #[serde(default)]
    pub y_label: Option<String>,
    #[serde(default)]
    pub format: ChartFormat,
    #[serde(default = "default_width")]
    pub width: u32,
    #[serde(default = "default_height")]
    pub height: u32,
}

fn default_width() -> u32 {
    DEFAULT_CHART_WIDTH
}

fn default_height() -> u32 {
    DEFAULT_CHART_HEIGHT
}

/// Reads and validates `generate_chart` arguments.
pub fn parse_chart_spec(args: &Value) -> Result<ChartSpec, ArtifactError> {
    let obj = args::object(args, "chart arguments")?;
    let labels = args::array(obj, "labels", "labels")?
        .iter()
        .enumerate()
        .map(|(i, label)| match label {
            Value::String(s) => Ok(s.clone()),
            // Years and other numeric categories arrive as numbers.
            Value::Number(n) => Ok(n.to_string()),
            other => Err(ArtifactError::invalid(format!(
                "labels[{i}] must be a string, got {}",
                args::kind(other)
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let series = match obj.get("series") {
        None | Some(Value::Null) => {
            return Err(ArtifactError::invalid(
                "series is required: a list of {name, values} (or {name, points} for scatter)",
            ));
        }
        Some(_) => args::array(obj, "series", "series")?
            .iter()
            .enumerate()
            .map(|(i, item)| parse_series(i, item))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let spec = ChartSpec {
        kind: args::required(obj, "kind", "kind")?,
        title: args::optional(obj, "title", "title")?,
        labels,
        series,
        x_label: args::optional(obj, "x_label", "x_label")?,
        y_label: args::optional(obj, "y_label", "y_label")?,
        format: args::optional(obj, "format", "format")?.unwrap_or_default(),
        width: args::optional(obj, "width", "width")?.unwrap_or(DEFAULT_CHART_WIDTH),
        height: args::optional(obj, "height", "height")?.unwrap_or(DEFAULT_CHART_HEIGHT),
    };
    spec.validate()?;
    Ok(spec)
}

fn parse_series(i: usize, item: &Value) -> Result<Series, ArtifactError> {
    let path = format!("series[{i}]");
    let obj: &Object = args::object(item, &path)?;
    let values = args::array(obj, "values", &format!("{path}.values"))?
        .iter()
        .enumerate()
        .map(|(j, v)| args::number(v, &format!("{path}.values[{j}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let points = args::array(obj, "points", &format!("{path}.points"))?
        .iter()
        .enumerate()
        .map(|(j, p)| {
            let point_path = format!("{path}.points[{j}]");
            match p.as_array().map(Vec::as_slice) {
                Some([x, y]) => Ok([
                    args::number(x, &format!("{point_path}[0]"))?,
                    args::number(y, &format!("{point_path}[1]"))?,
                ]),
                _ => Err(ArtifactError::invalid(format!(
                    "{point_path} must be an [x, y] pair of numbers"
                ))),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Series {
        name: args::optional(obj, "name", &format!("{path}.name"))?.unwrap_or_default(),
        values,
        points,
    })
}

impl ChartSpec {
    /// Checks every limit; messages name the field.
    pub fn validate(&self) -> Result<(), ArtifactError> {
        for (value, field) in [(self.width, "width"), (self.height, "height")] {
            if !(MIN_SIDE..=MAX_SIDE).contains(&value) {
                return Err(ArtifactError::invalid(format!(
                    "{field} must be between {MIN_SIDE} and {MAX_SIDE} pixels, got {value}"
                )));
            }
        }
        if let Some(title) = &self.title {
            args::check_length(title, MAX_TITLE_CHARS, "title")?;
        }
        for (text, field) in [(&self.x_label, "x_label"), (&self.y_label, "y_label")] {
            if let Some(text) = text {
                args::check_length(text, MAX_NAME_CHARS, field)?;
            }
        }
        for (i, label) in self.labels.iter().enumerate() {
            args::check_length(label, MAX_NAME_CHARS, &format!("labels[{i}]"))?;
        }
        if self.series.is_empty() {
            return Err(ArtifactError::invalid(
                "series must contain at least one series",
            ));
        }
        if self.series.len() > MAX_SERIES {
            return Err(ArtifactError::invalid(format!(
                "series has {} entries; at most {MAX_SERIES} series are allowed",
                self.series.len()
            )));
        }
        for (i, series) in self.series.iter().enumerate() {
            args::check_length(&series.name, MAX_NAME_CHARS, &format!("series[{i}].name"))?;
            for (j, v) in series.values.iter().enumerate() {
                check_number(*v, &format!("series[{i}].values[{j}]"))?;
            }
            for (j, p) in series.points.iter().enumerate() {
                check_number(p[0], &format!("series[{i}].points[{j}][0]"))?;
                check_number(p[1], &format!("series[{i}].points[{j}][1]"))?;
            }
        }
        match self.kind {
            ChartKind::Bar | ChartKind::Line => self.validate_categories(MAX_POINTS),
            ChartKind::Pie => self.validate_pie(),
            ChartKind::Scatter => self.validate_scatter(),
        }
    }

    fn validate_categories(&self, max_labels: usize) -> Result<(), ArtifactError> {
        let kind = self.kind.name();
        if self.labels.is_empty() {
            return Err(ArtifactError::invalid(format!(
                "labels is required for a {kind} chart: one category name per value"
            )));
        }
        if self.labels.len() > max_labels {
            return Err(ArtifactError::invalid(format!(
                "labels has {} entries; a {kind} chart takes at most {max_labels}",
                self.labels.len()
            )));
        }
        for (i, series) in self.series.iter().enumerate() {
            if !series.points.is_empty() {
                return Err(ArtifactError::invalid(format!(
                    "series[{i}].points is only for scatter charts; a {kind} chart takes values"
                )));
            }
            if series.values.len() != self.labels.len() {
                return Err(ArtifactError::invalid(format!(
                    "series[{i}].values has {} values for {} labels",
                    series.values.len(),
                    self.labels.len()
                )));
            }
        }
        Ok(())
    }

    fn validate_pie(&self) -> Result<(), ArtifactError> {
        if self.series.len() != 1 {
            return Err(ArtifactError::invalid(format!(
                "series has {} entries; a pie chart takes exactly one series",
                self.series.len()
            )));
        }
        if self.labels.len() > MAX_PIE_SLICES {
            return Err(ArtifactError::invalid(format!(
                "labels has {} entries; a pie chart takes at most {MAX_PIE_SLICES} slices \
                 (group the smallest into \"Other\")",
                self.labels.len()
            )));
        }
        self.validate_categories(MAX_PIE_SLICES)?;
        let values = &self.series[0].values;
        if let Some(j) = values.iter().position(|v| *v < 0.0) {
            return Err(ArtifactError::invalid(format!(
                "series[0].values[{j}] is {}; pie chart values must be zero or positive",
                values[j]
            )));
        }
        if values.iter().sum::<f64>() <= 0.0 {
            return Err(ArtifactError::invalid(
                "series[0].values are all zero; a pie chart needs at least one positive value",
            ));
        }
        Ok(())
    }

    fn validate_scatter(&self) -> Result<(), ArtifactError> {
        for (i, series) in self.series.iter().enumerate() {
            if !series.values.is_empty() {
                return Err(ArtifactError::invalid(format!(
                    "series[{i}].values: a scatter chart takes points as [x, y] pairs, not values"
                )));
            }
            if series.points.is_empty() {
                return Err(ArtifactError::invalid(format!(
                    "series[{i}].points is required for a scatter chart: a list of [x, y] pairs"
                )));
            }
            if series.points.len() > MAX_POINTS {
                return Err(ArtifactError::invalid(format!(
                    "series[{i}].points has {} points; at most {MAX_POINTS} are allowed",
                    series.points.len()
                )));
            }
        }
        if !self.labels.is_empty()
            && (self.series.len() != 1 || self.labels.len() != self.series[0].points.len())
        {
            return Err(ArtifactError::invalid(format!(
                "labels: on a scatter chart labels name the points of a single series, one per \
                 point; got {} labels for {} series with {} points",
                self.labels.len(),
                self.series.len(),
                self.series.iter().map(|s| s.points.len()).sum::<usize>()
            )));
        }
        Ok(())
    }
}

fn check_number(value: f64, path: &str) -> Result<(), ArtifactError> {
    if !value.is_finite() {
        return Err(ArtifactError::invalid(format!(
            "{path} must be a finite number"
        )));
    }
    if value.abs() > MAX_MAGNITUDE {
        return Err(ArtifactError::invalid(format!(
            "{path} is {value}; values must be within ±1e15"
        )));
    }
    Ok(())
}

/// Draws the chart. Blocking CPU work: call it from `spawn_blocking`.
pub fn render_chart(spec: &ChartSpec) -> Result<Rendered, ArtifactError> {
    spec.validate()?;
    register_fonts()?;
    guard("chart", || {
        let bytes = match spec.format {
            ChartFormat::Png => render_png(spec)?,
            ChartFormat::Svg => render_svg(spec)?,
        };
        Ok(Rendered {
            bytes,
            extension: spec.format.extension(),
            mime: spec.format.mime(),
            width: spec.width,
            height: spec.height,
        })
    })
}

/// plotters looks fonts up by family name in a process-wide table; ours must
/// be in it before the first text is measured.
fn register_fonts() -> Result<(), ArtifactError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        // Condensed for axis text so more category labels fit; the wider cut
        // for titles (plotters falls back to Normal for any other style).
        plotters::style::register_font("sans-serif", FontStyle::Normal, CONDENSED_BOLD).is_ok()
            && plotters::style::register_font("sans-serif", FontStyle::Bold, SANS_BOLD).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(ArtifactError::Render(
            "the bundled chart font did not load".into(),
        ))
    }
}

fn render_error(e: impl std::fmt::Display) -> ArtifactError {
    ArtifactError::Render(e.to_string())
}

fn render_png(spec: &ChartSpec) -> Result<Vec<u8>, ArtifactError> {
    let (w, h) = (spec.width, spec.height);
    let mut pixels = vec![0u8; w as usize * h as usize * 3];
    {
        let backend = BitMapBackend::<RGBPixel>::with_buffer_and_format(&mut pixels, (w, h))
            .map_err(render_error)?;
        let root = backend.into_drawing_area();
        draw(&root, spec).map_err(render_error)?;
        root.present().map_err(render_error)?;
    }
    let mut png = Vec::with_capacity(pixels.len() / 8);
    PngEncoder::new_with_quality(&mut png, CompressionType::Default, FilterType::Adaptive)
        .write_image(&pixels, w, h, ExtendedColorType::Rgb8)
        .map_err(render_error)?;
    Ok(png)
}

fn render_svg(spec: &ChartSpec) -> Result<Vec<u8>, ArtifactError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (spec.width, spec.height)).into_drawing_area();
        draw(&root, spec).map_err(render_error)?;
        root.present().map_err(render_error)?;
    }
    Ok(svg.into_bytes())
}

type DrawResult<T, DB> = Result<T, DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;
type Area<DB> = DrawingArea<DB, Shift>;

/// Tableau 10, then ten further distinct colours for pies with more slices.
const PALETTE: [RGBColor; 20] = [
    RGBColor(0x4E, 0x79, 0xA7),
    RGBColor(0xF2, 0x8E, 0x2B),
    RGBColor(0xE1, 0x57, 0x59),
    RGBColor(0x76, 0xB7, 0xB2),
    RGBColor(0x59, 0xA1, 0x4F),
    RGBColor(0xED, 0xC9, 0x48),
    RGBColor(0xB0, 0x7A, 0xA1),
    RGBColor(0xFF, 0x9D, 0xA7),
    RGBColor(0x9C, 0x75, 0x5F),
    RGBColor(0xBA, 0xB0, 0xAC),
    RGBColor(0xA0, 0xCB, 0xE8),
    RGBColor(0xFF, 0xBE, 0x7D),
    RGBColor(0x8C, 0xD1, 0x7D),
    RGBColor(0xB6, 0x99, 0x2D),
    RGBColor(0x49, 0x98, 0x94),
    RGBColor(0xD3, 0x72, 0x95),
    RGBColor(0x79, 0x70, 0x6E),
    RGBColor(0xD4, 0xA6, 0xC8),
    RGBColor(0xD7, 0xB5, 0xA6),
    RGBColor(0x86, 0xBC, 0xB6),
];
const TEXT: RGBColor = RGBColor(0x33, 0x33, 0x33);
const MUTED: RGBColor = RGBColor(0x55, 0x55, 0x55);
const GRID: RGBColor = RGBColor(0xE3, 0xE3, 0xE3);
const AXIS: RGBColor = RGBColor(0x88, 0x88, 0x88);

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Sizes that scale with the picture, so a 2000px chart is not all margins.
struct Look {
    scale: f64,
}

impl Look {
    fn new(spec: &ChartSpec) -> Self {
        let short_side = f64::from(spec.width.min(spec.height));
        Self {
            scale: (short_side / 500.0).clamp(0.55, 3.0),
        }
    }

    fn px(&self, base: f64) -> f64 {
        base * self.scale
    }

    fn ipx(&self, base: f64) -> i32 {
        self.px(base).round() as i32
    }

    fn title(&self) -> TextStyle<'static> {
        ("sans-serif", self.px(22.0))
            .into_font()
            .style(FontStyle::Bold)
            .color(&TEXT)
    }

    fn text(&self) -> TextStyle<'static> {
        ("sans-serif", self.px(14.0)).into_font().color(&TEXT)
    }

    fn tick(&self) -> TextStyle<'static> {
        ("sans-serif", self.px(13.0)).into_font().color(&MUTED)
    }

    fn axis_title(&self) -> TextStyle<'static> {
        ("sans-serif", self.px(15.0))
            .into_font()
            .style(FontStyle::Bold)
            .color(&TEXT)
    }
}

fn draw<DB: DrawingBackend>(root: &Area<DB>, spec: &ChartSpec) -> DrawResult<(), DB> {
    root.fill(&WHITE)?;
    let look = Look::new(spec);
    let m = look.ipx(14.0);
    let area = root.margin(m, m, m, m);
    let area = match &spec.title {
        Some(title) if !single_line(title).is_empty() => draw_title(&area, title, &look)?,
        Some(_) | None => area,
    };
    match spec.kind {
        ChartKind::Bar | ChartKind::Line => {
            let area = draw_legend(&area, spec, &look)?;
            draw_category_chart(&area, spec, &look)
        }
        ChartKind::Scatter => {
            let area = draw_legend(&area, spec, &look)?;
            draw_scatter(&area, spec, &look)
        }
        ChartKind::Pie => draw_pie(&area, spec, &look),
    }
}

fn text_width<DB: DrawingBackend>(
    area: &Area<DB>,
    text: &str,
    style: &TextStyle,
) -> DrawResult<i32, DB> {
    if text.is_empty() {
        return Ok(0);
    }
    Ok(area.estimate_text_size(text, style)?.0 as i32)
}

/// The text on one line, shortened with an ellipsis to fit `max_width`.
fn fit<DB: DrawingBackend>(
    area: &Area<DB>,
    text: &str,
    style: &TextStyle,
    max_width: i32,
) -> DrawResult<String, DB> {
    let text = single_line(text);
    if text_width(area, &text, style)? <= max_width {
        return Ok(text);
    }
    let chars: Vec<char> = text.chars().collect();
    let shortened = |n: usize| {
        let mut s: String = chars[..n].iter().collect();
        s.truncate(s.trim_end().len());
        s.push('…');
        s
    };
    // Binary search for the longest prefix that fits with its ellipsis.
    let (mut lo, mut hi) = (0, chars.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if text_width(area, &shortened(mid), style)? <= max_width {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(shortened(lo))
}

/// Greedy word wrap into at most `max_lines`, the last one shortened.
fn wrap<DB: DrawingBackend>(
    area: &Area<DB>,
    text: &str,
    style: &TextStyle,
    max_width: i32,
    max_lines: usize,
) -> DrawResult<Vec<String>, DB> {
    let text = single_line(text);
    let words: Vec<&str> = text.split(' ').filter(|w| !w.is_empty()).collect();
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for (i, word) in words.iter().enumerate() {
        let candidate = if current.is_empty() {
            (*word).to_string()
        } else {
            format!("{current} {word}")
        };
        if current.is_empty() || text_width(area, &candidate, style)? <= max_width {
            current = candidate;
            continue;
        }
        let full = std::mem::take(&mut current);
        lines.push(fit(area, &full, style, max_width)?);
        if lines.len() + 1 >= max_lines {
            // The rest goes on the last line, shortened if it must be.
            let rest = words[i..].join(" ");
            lines.push(fit(area, &rest, style, max_width)?);
            return Ok(lines);
        }
        current = (*word).to_string();
    }
    if !current.is_empty() {
        lines.push(fit(area, &current, style, max_width)?);
    }
    Ok(lines)
}

/// Draws the title (up to two lines) and returns the area below it.
fn draw_title<DB: DrawingBackend>(
    area: &Area<DB>,
    title: &str,
    look: &Look,
) -> DrawResult<Area<DB>, DB> {
    let (w, _) = area.dim_in_pixel();
    let style = look.title().pos(Pos::new(HPos::Center, VPos::Top));
    let lines = wrap(area, title, &style, w as i32, 2)?;
    let line_height = look.ipx(28.0);
    for (i, line) in lines.iter().enumerate() {
        area.draw_text(line, &style, (w as i32 / 2, i as i32 * line_height))?;
    }
    let used = lines.len() as i32 * line_height + look.ipx(6.0);
    Ok(area.split_vertically(used).1)
}

fn series_name(spec: &ChartSpec, i: usize) -> String {
    let name = single_line(&spec.series[i].name);
    if name.is_empty() {
        format!("Series {}", i + 1)
    } else {
        name
    }
}

/// A legend entry: colour, (shortened) name and drawn width.
type LegendItem = (RGBColor, String, i32);

/// Draws a centred legend (rows of entries) above the plot and returns the
/// area below it. A lone unnamed series needs no legend.
fn draw_legend<DB: DrawingBackend>(
    area: &Area<DB>,
    spec: &ChartSpec,
    look: &Look,
) -> DrawResult<Area<DB>, DB> {
    if spec.series.len() == 1 && single_line(&spec.series[0].name).is_empty() {
        return Ok(area.clone());
    }
    let (w, h) = area.dim_in_pixel();
    let w = w as i32;
    let style = look.text().pos(Pos::new(HPos::Left, VPos::Center));
    let swatch = look.ipx(12.0);
    let gap = look.ipx(6.0);
    let spacing = look.ipx(20.0);
    let row_height = look.ipx(22.0);
    let n = spec.series.len() as i32;
    // Names are shortened further when long ones would stack the legend
    // into more than a quarter of the picture's height.
    let max_rows = ((f64::from(h) * 0.25) as i32 / row_height.max(1)).max(1);
    let mut items: Vec<LegendItem> = Vec::new();
    let mut rows = Vec::new();
    for columns in [2, (n + max_rows - 1) / max_rows] {
        let columns = columns.max(2);
        let max_label = (w - spacing * (columns - 1)) / columns - swatch - gap;
        items.clear();
        for i in 0..spec.series.len() {
            let label = fit(area, &series_name(spec, i), &style, max_label)?;
            let width = swatch + gap + text_width(area, &label, &style)?;
            items.push((color(i), label, width));
        }
        rows = pack_rows(&items, w, spacing);
        if rows.len() as i32 <= max_rows {
            break;
        }
    }
    for (r, row) in rows.iter().enumerate() {
        let total: i32 =
            row.iter().map(|i| items[*i].2).sum::<i32>() + spacing * (row.len() as i32 - 1);
        let mut x = (w - total) / 2;
        let y = r as i32 * row_height + row_height / 2;
        for i in row {
            let (c, label, width) = &items[*i];
            area.draw(&Rectangle::new(
                [(x, y - swatch / 2), (x + swatch, y + swatch / 2)],
                c.filled(),
            ))?;
            area.draw_text(label, &style, (x + swatch + gap, y))?;
            x += width + spacing;
        }
    }
    let used = rows.len() as i32 * row_height + look.ipx(8.0);
    Ok(area.split_vertically(used).1)
}

/// Packs legend entries, in order, into rows no wider than `width`.
fn pack_rows(items: &[LegendItem], width: i32, spacing: i32) -> Vec<Vec<usize>> {
    let mut rows: Vec<Vec<usize>> = Vec::new();
    let mut row_width = 0;
    for (i, (_, _, item_width)) in items.iter().enumerate() {
        match rows.last_mut() {
            Some(row) if row_width + spacing + item_width <= width => {
                row.push(i);
                row_width += spacing + item_width;
            }
            Some(_) | None => {
                rows.push(vec![i]);
                row_width = *item_width;
            }
        }
    }
    rows
}

/// The value range to show, padded; bars always include zero.
fn padded_range(min: f64, max: f64, include_zero: bool) -> Range<f64> {
    let (mut lo, mut hi) = if include_zero {
        (min.min(0.0), max.max(0.0))
    } else {
        (min, max)
    };
    if hi - lo <= f64::EPSILON * lo.abs().max(hi.abs()).max(1.0) {
        // A flat series still needs a visible range around it.
        let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        if include_zero && lo == 0.0 {
            return 0.0..1.0;
        }
        lo -= d;
        hi += d;
    }
    let pad = (hi - lo) * 0.06;
    // Bars grow from zero: no gap between the axis and the bars' base.
    if !(include_zero && lo == 0.0) {
        lo -= pad;
    }
    if !(include_zero && hi == 0.0) {
        hi += pad;
    }
    lo..hi
}

fn min_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

/// Width of the widest tick label plotters will draw for a numeric axis.
fn numeric_tick_width<DB: DrawingBackend>(
    area: &Area<DB>,
    range: &Range<f64>,
    ticks: usize,
    style: &TextStyle,
) -> DrawResult<i32, DB> {
    let axis = RangedCoordf64::from(range.clone());
    let mut widest = 0;
    for v in axis.key_points(BoldPoints(ticks)) {
        widest = widest.max(text_width(area, &format_number(v), style)?);
    }
    Ok(widest)
}

/// Category x axis: one slot per label, ticks at slot centres, every
/// `step`-th label shown when they would not all fit.
struct CategoryAxis {
    labels: Vec<String>,
    step: usize,
}

impl Ranged for CategoryAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let n = self.labels.len().max(1) as f64;
        let t = (value + 0.5) / n;
        limit.0 + (f64::from(limit.1 - limit.0) * t).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Light (minor) grid lines make no sense between categories.
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        let max = hint.max_num_points().max(1);
        let mut step = self.step.max(1);
        while self.labels.len().div_ceil(step) > max {
            step += 1;
        }
        (0..self.labels.len())
            .step_by(step)
            .map(|i| i as f64)
            .collect()
    }

    fn range(&self) -> Range<f64> {
        -0.5..self.labels.len() as f64 - 0.5
    }
}

impl ValueFormatter<f64> for CategoryAxis {
    fn format_ext(&self, value: &f64) -> String {
        let index = value.round();
        if (value - index).abs() > 1e-9 || index < 0.0 {
            return String::new();
        }
        self.labels.get(index as usize).cloned().unwrap_or_default()
    }
}

/// The smallest "round" label step at least `min`, so shown labels fall on
/// days 1, 11, 21... rather than 1, 19, 37...
fn nice_step(min: usize) -> usize {
    const STEPS: [usize; 12] = [1, 2, 3, 4, 5, 6, 7, 10, 12, 15, 20, 25];
    if let Some(step) = STEPS.iter().find(|s| **s >= min) {
        return *step;
    }
    let mut base = 50;
    loop {
        for step in [base, base * 2] {
            if step >= min {
                return step;
            }
        }
        base *= 10;
    }
}

/// Room for y tick labels and the rotated y axis title.
fn y_label_area<DB: DrawingBackend>(
    area: &Area<DB>,
    spec: &ChartSpec,
    range: &Range<f64>,
    y_ticks: usize,
    look: &Look,
) -> DrawResult<i32, DB> {
    let widest = numeric_tick_width(area, range, y_ticks, &look.tick())?;
    let title = if has_text(&spec.y_label) {
        look.ipx(24.0)
    } else {
        0
    };
    Ok(widest + look.ipx(14.0) + title)
}

fn x_label_area(spec: &ChartSpec, look: &Look) -> i32 {
    let title = if has_text(&spec.x_label) {
        look.ipx(24.0)
    } else {
        0
    };
    look.ipx(28.0) + title
}

fn has_text(text: &Option<String>) -> bool {
    text.as_deref().is_some_and(|t| !single_line(t).is_empty())
}

fn axis_title(text: &Option<String>) -> String {
    text.as_deref().map(single_line).unwrap_or_default()
}

fn draw_category_chart<DB: DrawingBackend>(
    area: &Area<DB>,
    spec: &ChartSpec,
    look: &Look,
) -> DrawResult<(), DB> {
    let is_bar = spec.kind == ChartKind::Bar;
    let n = spec.labels.len();
    let (min, max) = min_max(spec.series.iter().flat_map(|s| s.values.iter().copied()));
    let y_range = padded_range(min, max, is_bar);
    let (w, h) = area.dim_in_pixel();
    let y_ticks = ((f64::from(h) / look.px(45.0)) as usize).clamp(3, 10);
    let y_area = y_label_area(area, spec, &y_range, y_ticks, look)?;
    let right_margin = look.ipx(16.0);
    let plot_width = (w as i32 - y_area - right_margin).max(1);

    // Show every label if they fit in their slots, shortened if the slots are
    // still reasonably wide; otherwise show every step-th label.
    let tick = look.tick();
    let slot = f64::from(plot_width) / n as f64;
    let label_gap = look.px(10.0);
    let room = (slot - label_gap) as i32;
    let (labels, step) = if room >= look.ipx(60.0) {
        let mut labels = Vec::with_capacity(n);
        for label in &spec.labels {
            labels.push(fit(area, label, &tick, room)?);
        }
        (labels, 1)
    } else {
        let max_width = (f64::from(plot_width) * 0.3).min(look.px(140.0)) as i32;
        let mut labels = Vec::with_capacity(n);
        let mut widest = 0;
        for label in &spec.labels {
            let fitted = fit(area, label, &tick, max_width)?;
            widest = widest.max(text_width(area, &fitted, &tick)?);
            labels.push(fitted);
        }
        let step = ((f64::from(widest) + look.px(24.0)) / slot).ceil().max(1.0) as usize;
        (labels, nice_step(step))
    };
    let x_axis = CategoryAxis { labels, step };

    let mut chart = ChartBuilder::on(area)
        .margin_right(right_margin)
        .margin_top(look.ipx(6.0))
        .x_label_area_size(x_label_area(spec, look))
        .y_label_area_size(y_area)
        .build_cartesian_2d(x_axis, y_range.clone())?;
    let y_formatter = |v: &f64| format_number(*v);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_max_light_lines(0)
        .x_labels(n)
        .y_labels(y_ticks)
        .y_label_formatter(&y_formatter)
        .bold_line_style(GRID)
        .axis_style(AXIS)
        .label_style(look.tick())
        .axis_desc_style(look.axis_title())
        .x_desc(axis_title(&spec.x_label))
        .y_desc(axis_title(&spec.y_label))
        .draw()?;

    let stroke = look.px(2.5).max(1.0) as u32;
    if is_bar {
        let group = 0.8;
        let width = group / spec.series.len() as f64;
        for (s, series) in spec.series.iter().enumerate() {
            let c = color(s);
            chart.draw_series(series.values.iter().enumerate().map(|(i, v)| {
                let x0 = i as f64 - group / 2.0 + s as f64 * width;
                Rectangle::new(
                    [(x0 + width * 0.06, 0.0), (x0 + width * 0.94, *v)],
                    c.filled(),
                )
            }))?;
        }
        if y_range.start < 0.0 {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(-0.5, 0.0), (n as f64 - 0.5, 0.0)],
                ShapeStyle::from(AXIS).stroke_width(1),
            )))?;
        }
        draw_bar_values(&chart, spec, width, look)?;
    } else {
        for (s, series) in spec.series.iter().enumerate() {
            let c = color(s);
            let points: Vec<(f64, f64)> = series
                .values
                .iter()
                .enumerate()
                .map(|(i, v)| (i as f64, *v))
                .collect();
            chart.draw_series(LineSeries::new(
                points.iter().copied(),
                c.stroke_width(stroke),
            ))?;
            // Markers show where the data is; on dense lines they are noise.
            if n <= 60 {
                let r = look.ipx(3.5).max(2);
                chart.draw_series(points.iter().map(|p| Circle::new(*p, r, c.filled())))?;
            }
        }
    }
    Ok(())
}

/// Writes each bar's value above it when every label fits its bar.
fn draw_bar_values<DB: DrawingBackend>(
    chart: &plotters::chart::ChartContext<
        '_,
        DB,
        plotters::coord::cartesian::Cartesian2d<CategoryAxis, RangedCoordf64>,
    >,
    spec: &ChartSpec,
    bar_width: f64,
    look: &Look,
) -> DrawResult<(), DB> {
    let bars: usize = spec.series.iter().map(|s| s.values.len()).sum();
    if bars > 40 {
        return Ok(());
    }
    let area = chart.plotting_area();
    let (plot_w, _) = area.dim_in_pixel();
    let bar_px = f64::from(plot_w) / spec.labels.len() as f64 * bar_width * 0.88;
    let style = ("sans-serif", look.px(11.5)).into_font().color(&MUTED);
    let screen = area.use_screen_coord();
    let mut labels = Vec::with_capacity(bars);
    for series in &spec.series {
        for v in &series.values {
            let text = format_number(*v);
            if f64::from(text_width(&screen, &text, &style)?) > bar_px {
                return Ok(());
            }
            labels.push(text);
        }
    }
    let group = 0.8;
    let offset = look.ipx(3.0);
    let mut labels = labels.into_iter();
    for (s, series) in spec.series.iter().enumerate() {
        for (i, v) in series.values.iter().enumerate() {
            let Some(text) = labels.next() else {
                return Ok(());
            };
            let x = i as f64 - group / 2.0 + (s as f64 + 0.5) * bar_width;
            let (anchor, dy) = if *v < 0.0 {
                (VPos::Top, offset)
            } else {
                (VPos::Bottom, -offset)
            };
            let label_style = style.pos(Pos::new(HPos::Center, anchor));
            area.draw(&(EmptyElement::at((x, *v)) + Text::new(text, (0, dy), label_style)))?;
        }
    }
    Ok(())
}

fn draw_scatter<DB: DrawingBackend>(
    area: &Area<DB>,
    spec: &ChartSpec,
    look: &Look,
) -> DrawResult<(), DB> {
    let points = || spec.series.iter().flat_map(|s| s.points.iter());
    let (x_min, x_max) = min_max(points().map(|p| p[0]));
    let (y_min, y_max) = min_max(points().map(|p| p[1]));
    let x_range = padded_range(x_min, x_max, false);
    let y_range = padded_range(y_min, y_max, false);
    let (w, h) = area.dim_in_pixel();
    let y_ticks = ((f64::from(h) / look.px(45.0)) as usize).clamp(3, 10);
    let y_area = y_label_area(area, spec, &y_range, y_ticks, look)?;
    let right_margin = look.ipx(16.0);
    let plot_width = (w as i32 - y_area - right_margin).max(1);
    let tick = look.tick();
    let x_tick_width = numeric_tick_width(area, &x_range, 10, &tick)?;
    let x_ticks = (plot_width / (x_tick_width + look.ipx(24.0)).max(1)).clamp(2, 10) as usize;

    let mut chart = ChartBuilder::on(area)
        .margin_right(right_margin)
        .margin_top(look.ipx(6.0))
        .x_label_area_size(x_label_area(spec, look))
        .y_label_area_size(y_area)
        .build_cartesian_2d(x_range, y_range)?;
    let formatter = |v: &f64| format_number(*v);
    chart
        .configure_mesh()
        .max_light_lines(0)
        .x_labels(x_ticks)
        .y_labels(y_ticks)
        .x_label_formatter(&formatter)
        .y_label_formatter(&formatter)
        .bold_line_style(GRID)
        .axis_style(AXIS)
        .label_style(tick)
        .axis_desc_style(look.axis_title())
        .x_desc(axis_title(&spec.x_label))
        .y_desc(axis_title(&spec.y_label))
        .draw()?;

    let total: usize = spec.series.iter().map(|s| s.points.len()).sum();
    let r = if total > 300 {
        look.ipx(2.5)
    } else {
        look.ipx(4.5)
    }
    .max(2);
    for (s, series) in spec.series.iter().enumerate() {
        let c = color(s).mix(0.85);
        chart.draw_series(
            series
                .points
                .iter()
                .map(|p| Circle::new((p[0], p[1]), r, c.filled())),
        )?;
    }
    if !spec.labels.is_empty() {
        let style = look.tick().pos(Pos::new(HPos::Left, VPos::Center));
        let screen = chart.plotting_area().use_screen_coord();
        let max_width = look.ipx(140.0);
        for (label, p) in spec.labels.iter().zip(&spec.series[0].points) {
            let text = fit(&screen, label, &style, max_width)?;
            chart.plotting_area().draw(
                &(EmptyElement::at((p[0], p[1]))
                    + Text::new(text, (r + look.ipx(3.0), 0), style.clone())),
            )?;
        }
    }
    Ok(())
}

fn draw_pie<DB: DrawingBackend>(
    area: &Area<DB>,
    spec: &ChartSpec,
    look: &Look,
) -> DrawResult<(), DB> {
    let values = &spec.series[0].values;
    let total: f64 = values.iter().sum();
    let (w, h) = area.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);

    // Legend on the right: swatch, label, value and share; the font shrinks
    // when many slices must fit a short picture.
    let rows = values.len() as i32;
    let natural_row = look.px(24.0);
    let row_height = natural_row.min(f64::from(h) / f64::from(rows.max(1)));
    let font_px = (row_height / natural_row * look.px(14.0)).max(7.0);
    let style = ("sans-serif", font_px)
        .into_font()
        .color(&TEXT)
        .pos(Pos::new(HPos::Left, VPos::Center));
    let swatch = (font_px * 0.85) as i32;
    let gap = look.ipx(8.0);
    let mut entries = Vec::with_capacity(values.len());
    let mut legend_width = 0;
    for (label, v) in spec.labels.iter().zip(values) {
        let share = v / total * 100.0;
        let entry = format!(
            "{} — {} ({share:.1}%)",
            single_line(label),
            format_number(*v)
        );
        let entry = fit(area, &entry, &style, (w as f64 * 0.45) as i32)?;
        legend_width = legend_width.max(text_width(area, &entry, &style)?);
        entries.push(entry);
    }
    legend_width += swatch + gap;
    let pie_width = (w - legend_width - look.ipx(24.0)).max(h.min(w) / 3);
    let radius = f64::from(pie_width.min(h)) / 2.0 * 0.92;
    let center = (pie_width / 2, h / 2);

    // Wedges clockwise from twelve o'clock, each a polygon along its arc.
    let mut angle = -std::f64::consts::FRAC_PI_2;
    let mut boundaries = Vec::with_capacity(values.len());
    let mut shares = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        let sweep = v / total * std::f64::consts::TAU;
        if sweep <= 0.0 {
            continue;
        }
        let steps = (sweep.to_degrees() / 2.0).ceil().max(1.0) as usize;
        let mut points = Vec::with_capacity(steps + 2);
        points.push(center);
        for k in 0..=steps {
            let a = angle + sweep * k as f64 / steps as f64;
            points.push(polar(center, radius, a));
        }
        area.draw(&Polygon::new(points, color(i).filled()))?;
        boundaries.push(angle);
        shares.push((i, angle + sweep / 2.0, v / total));
        angle += sweep;
    }
    // White separators between wedges keep neighbouring colours apart.
    if boundaries.len() > 1 {
        let separator = ShapeStyle::from(WHITE).stroke_width(look.px(2.0).max(1.0) as u32);
        for a in boundaries {
            area.draw(&PathElement::new(
                vec![center, polar(center, radius, a)],
                separator,
            ))?;
        }
    }
    let inside = ("sans-serif", look.px(13.0)).into_font();
    for (i, mid, share) in shares {
        if share < 0.04 {
            continue;
        }
        let c = color(i);
        let luminance = 0.299 * f64::from(c.0) + 0.587 * f64::from(c.1) + 0.114 * f64::from(c.2);
        let ink = if luminance > 150.0 { TEXT } else { WHITE };
        let text_style = inside
            .clone()
            .color(&ink)
            .pos(Pos::new(HPos::Center, VPos::Center));
        area.draw_text(
            &format!("{:.0}%", share * 100.0),
            &text_style,
            polar(center, radius * 0.66, mid),
        )?;
    }

    let legend_x = w - legend_width;
    let top = (f64::from(h) - row_height * f64::from(rows)) / 2.0;
    for (i, entry) in entries.iter().enumerate() {
        let y = (top + row_height * (i as f64 + 0.5)) as i32;
        area.draw(&Rectangle::new(
            [
                (legend_x, y - swatch / 2),
                (legend_x + swatch, y + swatch / 2),
            ],
            color(i).filled(),
        ))?;
        area.draw_text(entry, &style, (legend_x + swatch + gap, y))?;
    }
    Ok(())
}

fn polar(center: (i32, i32), radius: f64, angle: f64) -> (i32, i32) {
    let (sin, cos) = angle.sin_cos();
    (
        center.0 + (radius * cos).round() as i32,
        center.1 + (radius * sin).round() as i32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn invalid(args: Value) -> String {
        match parse_chart_spec(&args) {
            Err(ArtifactError::Invalid(message)) => message,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    fn sales_bar() -> Value {
        json!({
            "kind": "bar",
            "title": "Quarterly revenue by region",
            "labels": ["Q1", "Q2", "Q3", "Q4"],
            "series": [
                {"name": "North", "values": [120, 135.5, 150, 170]},
                {"name": "South", "values": [80, 95, 70, 110]}
            ],
            "x_label": "Quarter",
            "y_label": "Revenue (k€)",
            "width": 640,
            "height": 400
        })
    }

    #[test]
    fn artifacts_bar_chart_png_decodes_at_the_requested_size_and_is_not_flat() {
        let spec = parse_chart_spec(&sales_bar()).unwrap();
        let rendered = render_chart(&spec).unwrap();
        assert_eq!((rendered.extension, rendered.mime), ("png", "image/png"));
        assert_eq!((rendered.width, rendered.height), (640, 400));
        let img = image::load_from_memory(&rendered.bytes).unwrap().to_rgb8();
        assert_eq!(img.dimensions(), (640, 400));
        let distinct: std::collections::HashSet<[u8; 3]> = img.pixels().map(|p| p.0).collect();
        assert!(distinct.len() > 20, "only {} colours", distinct.len());
        // The first series' colour is really drawn (the bars).
        assert!(img.pixels().any(|p| p.0 == [0x4E, 0x79, 0xA7]));
    }

    #[test]
    fn artifacts_line_chart_svg_is_well_formed_and_contains_the_title() {
        let args = json!({
            "kind": "line",
            "title": "Users & <sessions> over \"time\"",
            "labels": ["Jan", "Feb", "Mar", "Apr", "May"],
            "series": [{"name": "Users", "values": [1, 3, 2, 5, 4]},
                       {"name": "Sessions", "values": [2, 4, 3, 7, 6]}],
            "format": "svg"
        });
        let rendered = render_chart(&parse_chart_spec(&args).unwrap()).unwrap();
        assert_eq!(
            (rendered.extension, rendered.mime),
            ("svg", "image/svg+xml")
        );
        assert_eq!((rendered.width, rendered.height), (800, 500));
        let svg = String::from_utf8(rendered.bytes).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert!(svg.contains("Users &amp; &lt;sessions&gt; over &quot;time&quot;"));
        let mut reader = quick_xml::Reader::from_str(&svg);
        let mut depth = 0_i32;
        loop {
            match reader.read_event().unwrap() {
                quick_xml::events::Event::Start(_) => depth += 1,
                quick_xml::events::Event::End(_) => depth -= 1,
                quick_xml::events::Event::Eof => break,
                _ => {}
            }
        }
        assert_eq!(depth, 0);
    }

    #[test]
    fn artifacts_pie_and_scatter_render_in_both_formats() {
        let pie = json!({
            "kind": "pie", "title": "Market share",
            "labels": ["Alpha", "Beta", "Gamma", "Delta", "Tiny"],
            "series": [{"values": [45, 25, 15, 14, 1]}]
        });
        let scatter = json!({
            "kind": "scatter", "title": "Height vs weight",
            "labels": ["Ann", "Bob", "Cy"],
            "series": [{"name": "People", "points": [[160, 55], [180, 80.5], [172, 70]]}],
            "x_label": "cm", "y_label": "kg"
        });
        for args in [pie, scatter] {
            for format in ["png", "svg"] {
                let mut args = args.clone();
                args["format"] = json!(format);
                let rendered = render_chart(&parse_chart_spec(&args).unwrap()).unwrap();
                assert!(rendered.bytes.len() > 1000, "{format}");
            }
        }
    }

    #[test]
    fn artifacts_edge_cases_render_without_panicking() {
        let long_label =
            "a very long category name that cannot possibly fit ".repeat(2)[..99].to_string();
        let many: Vec<String> = (0..1000).map(|i| format!("item {i}")).collect();
        let cases = [
            json!({"kind": "bar", "labels": ["only"], "series": [{"values": [0]}], "width": 200, "height": 200}),
            json!({"kind": "bar", "labels": ["a", "b"], "series": [{"values": [-5, -1e15]}]}),
            json!({"kind": "line", "labels": ["x"], "series": [{"values": [7]}]}),
            json!({"kind": "line", "labels": many, "series": [{"values": vec![1.5; 1000]}],
                   "title": "t".repeat(200), "width": 2000, "height": 2000}),
            json!({"kind": "bar", "labels": [long_label.trim(), "b\u{7}\n", ""],
                   "series": (0..10).map(|i| json!({"name": "n".repeat(100), "values": [i, 2, 3]})).collect::<Vec<_>>()}),
            json!({"kind": "scatter", "series": [{"points": [[1, 1]]}], "format": "svg"}),
            json!({"kind": "pie", "labels": (0..20).map(|i| i.to_string()).collect::<Vec<_>>(),
                   "series": [{"values": (0..20).map(|i| if i == 0 { 1.0 } else { 0.0 }).collect::<Vec<_>>()}],
                   "height": 200}),
        ];
        for args in cases {
            let spec = parse_chart_spec(&args).unwrap();
            render_chart(&spec).unwrap();
        }
    }

    #[test]
    fn artifacts_pie_with_a_negative_value_is_refused_naming_the_field() {
        let message = invalid(json!({
            "kind": "pie", "labels": ["a", "b"], "series": [{"values": [3, -1]}]
        }));
        assert!(message.contains("series[0].values[1]"), "{message}");
        assert!(message.contains("zero or positive"), "{message}");
        let message = invalid(json!({
            "kind": "pie", "labels": ["a"], "series": [{"values": [1]}, {"values": [2]}]
        }));
        assert!(message.contains("exactly one series"), "{message}");
        let message = invalid(json!({"kind": "pie", "labels": ["a"], "series": [{"values": [0]}]}));
        assert!(message.contains("all zero"), "{message}");
    }

    #[test]
    fn artifacts_category_label_steps_are_round_numbers() {
        let steps: Vec<usize> = [0, 1, 8, 13, 18, 26, 51, 101, 700].map(nice_step).to_vec();
        assert_eq!(steps, [1, 1, 10, 15, 20, 50, 100, 500, 1000]);
    }

    #[test]
    fn artifacts_mismatched_lengths_are_refused() {
        let message = invalid(json!({
            "kind": "bar", "labels": ["a", "b", "c", "d"],
            "series": [{"values": [1, 2, 3, 4]}, {"values": [1, 2, 3]}]
        }));
        assert_eq!(message, "series[1].values has 3 values for 4 labels");
        let message = invalid(json!({
            "kind": "scatter", "labels": ["a"], "series": [{"points": [[1, 2], [3, 4]]}]
        }));
        assert!(message.starts_with("labels:"), "{message}");
    }

    #[test]
    fn artifacts_bad_chart_arguments_name_the_field() {
        let cases = [
            (
                json!({"labels": ["a"], "series": [{"values": [1]}]}),
                "kind is required",
            ),
            (
                json!({"kind": "area", "labels": ["a"], "series": [{"values": [1]}]}),
                "kind: unknown variant `area`",
            ),
            (
                json!({"kind": "bar", "labels": ["a"]}),
                "series is required",
            ),
            (
                json!({"kind": "bar", "labels": ["a"], "series": []}),
                "at least one series",
            ),
            (
                json!({"kind": "bar", "series": [{"values": [1]}]}),
                "labels is required",
            ),
            (
                json!({"kind": "bar", "labels": ["a", "b"], "series": [{"values": [1, null]}]}),
                "series[0].values[1] must be a number, got null",
            ),
            (
                json!({"kind": "bar", "labels": ["a"], "series": [{"values": ["1"]}]}),
                "series[0].values[0] must be a number, got a string",
            ),
            (
                json!({"kind": "bar", "labels": [true], "series": [{"values": [1]}]}),
                "labels[0] must be a string",
            ),
            (
                json!({"kind": "bar", "labels": ["a"], "series": [{"values": [1e16]}]}),
                "series[0].values[0] is",
            ),
            (
                json!({"kind": "bar", "labels": ["a"], "series": [{"values": [1]}], "width": 5000}),
                "width must be between 200 and 2000 pixels, got 5000",
            ),
            (
                json!({"kind": "bar", "labels": ["a"], "series": [{"values": [1]}], "height": -3}),
                "height:",
            ),
            (
                json!({"kind": "bar", "labels": ["a"], "series": [{"values": [1]}], "format": "gif"}),
                "format: unknown variant",
            ),
            (
                json!({"kind": "bar", "labels": ["a"], "series": [{"values": [1]}], "title": "x".repeat(201)}),
                "title is 201 characters long; at most 200",
            ),
            (
                json!({"kind": "bar", "labels": ["a"], "series": [{"values": [1], "points": [[1, 2]]}]}),
                "series[0].points is only for scatter",
            ),
            (
                json!({"kind": "scatter", "series": [{"values": [1]}]}),
                "series[0].values: a scatter chart",
            ),
            (
                json!({"kind": "scatter", "series": [{"points": [[1, 2, 3]]}]}),
                "series[0].points[0] must be an [x, y] pair",
            ),
            (
                json!({"kind": "line", "labels": ["a"], "series": vec![json!({"values": [1]}); 11]}),
                "at most 10 series",
            ),
            (
                json!({"kind": "line", "labels": vec!["a"; 1001], "series": [{"values": vec![1; 1001]}]}),
                "at most 1000",
            ),
            (
                json!({"kind": "scatter", "series": [{"points": vec![[1, 2]; 1001]}]}),
                "at most 1000",
            ),
            (
                json!({"kind": "pie", "labels": vec!["a"; 21], "series": [{"values": vec![1; 21]}]}),
                "at most 20 slices",
            ),
            (
                json!("bar"),
                "chart arguments must be an object, got a string",
            ),
            (
                json!({"kind": "bar", "labels": ["a"], "series": [7]}),
                "series[0] must be an object",
            ),
        ];
        for (args, expected) in cases {
            let message = invalid(args);
            assert!(message.contains(expected), "{message:?} lacks {expected:?}");
        }
    }

    #[test]
    fn artifacts_chart_parse_fills_defaults_and_accepts_numeric_labels() {
        let spec = parse_chart_spec(&json!({
            "kind": "line", "labels": [2023, 2024], "series": [{"values": [1, 2]}], "title": null
        }))
        .unwrap();
        assert_eq!(spec.labels, ["2023", "2024"]);
        assert_eq!(
            (spec.width, spec.height, spec.format),
            (800, 500, ChartFormat::Png)
        );
        assert_eq!(spec.title, None);
        // The serde derive, for callers rehydrating stored arguments, agrees.
        let derived: ChartSpec = serde_json::from_value(json!({
            "kind": "line", "labels": ["2023", "2024"], "series": [{"values": [1, 2]}]
        }))
        .unwrap();
        assert_eq!(derived, spec);
    }

    #[test]
    fn artifacts_render_rejects_an_invalid_hand_built_spec() {
        let spec = ChartSpec {
            kind: ChartKind::Pie,
            title: None,
            labels: vec!["a".into()],
            series: vec![Series {
                name: String::new(),
                values: vec![f64::NAN],
                points: vec![],
            }],
            x_label: None,
            y_label: None,
            format: ChartFormat::Png,
            width: 800,
            height: 500,
        };
        assert!(matches!(
            render_chart(&spec),
            Err(ArtifactError::Invalid(_))
        ));
    }
}
