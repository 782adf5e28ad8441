//! PDF layout and writing: A4 pages of real (selectable, extractable) text.
//!
//! Layout runs first and produces positioned drawing operations per page
//! (so the footer can say "page i / n"); krilla then writes them, embedding
//! subsets of the bundled DejaVu fonts. Text is measured with ab_glyph from
//! the same font files krilla embeds.

use ab_glyph::{Font as _, FontRef};
use krilla::color::rgb;
use krilla::geom::{PathBuilder, Point, Rect};
use krilla::metadata::Metadata;
use krilla::num::NormalizedF32;
use krilla::page::PageSettings;
use krilla::paint::{Fill, Stroke};
use krilla::surface::Surface;
use krilla::text::{Font, TextDirection};
use krilla::{Data, Document};

use crate::spec::{Cell, DocumentSpec};
use unigen_core::fonts::{CONDENSED_BOLD, MONO_BOLD, SANS_BOLD};

use crate::common::{ArtifactError, single_line};

// A4 in points, with 2 cm margins.
const PAGE_WIDTH: f32 = 595.28;
const PAGE_HEIGHT: f32 = 841.89;
const MARGIN: f32 = 56.7;
const CONTENT_WIDTH: f32 = PAGE_WIDTH - 2.0 * MARGIN;
const CONTENT_BOTTOM: f32 = PAGE_HEIGHT - MARGIN;

const INK: Rgb = (0x22, 0x22, 0x22);
const HEADING: Rgb = (0x1F, 0x3A, 0x5F);
const GREY: Rgb = (0x66, 0x66, 0x66);
const RULE: Rgb = (0xCC, 0xCC, 0xCC);
const SHADE: Rgb = (0xF0, 0xF0, 0xF0);

const BODY_SIZE: f32 = 10.5;
const BODY_LEADING: f32 = 15.0;
/// Table cells longer than this many lines are cut with an ellipsis, so no
/// row can be taller than a page.
const MAX_CELL_LINES: usize = 8;

type Rgb = (u8, u8, u8);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Face {
    /// Titles and headings.
    Sans,
    /// Body text and tables: narrower, so lines hold more words.
    Condensed,
    Mono,
}

/// A positioned drawing operation; `y` grows downwards from the page top,
/// text `y` is the baseline.
#[derive(Debug, Clone, PartialEq)]
enum Op {
    Text {
        x: f32,
        y: f32,
        face: Face,
        size: f32,
        color: Rgb,
        text: String,
    },
    Rect {
        x: f32,
        y: f32,
        w: f32,
        h: f32,
        color: Rgb,
    },
    Line {
        from: (f32, f32),
        to: (f32, f32),
        width: f32,
        color: Rgb,
    },
}

/// Glyph metrics for line breaking.
struct Metrics {
    sans: FontRef<'static>,
    condensed: FontRef<'static>,
    mono: FontRef<'static>,
}

impl Metrics {
    fn load() -> Result<Self, ArtifactError> {
        let load = |bytes: &'static [u8]| {
            FontRef::try_from_slice(bytes)
                .map_err(|e| ArtifactError::Render(format!("bundled font: {e}")))
        };
        Ok(Self {
            sans: load(SANS_BOLD)?,
            condensed: load(CONDENSED_BOLD)?,
            mono: load(MONO_BOLD)?,
        })
    }

    fn font(&self, face: Face) -> &FontRef<'static> {
        match face {
            Face::Sans => &self.sans,
            Face::Condensed => &self.condensed,
            Face::Mono => &self.mono,
        }
    }

    /// Advance width in points, without kerning (which only narrows DejaVu
    /// text, so lines never overflow).
    fn width(&self, face: Face, size: f32, text: &str) -> f32 {
        let font = self.font(face);
        let units = font.units_per_em().unwrap_or(2048.0);
        let advance: f32 = text
            .chars()
            .map(|c| font.h_advance_unscaled(font.glyph_id(c)))
            .sum();
        advance / units * size
    }

    /// Greedy word wrap; a word wider than the line is split between
    /// characters. At most `max_lines`, the last one cut with an ellipsis.
    /// Widths are summed as the line grows (not re-measured), so long cells
    /// stay linear.
    fn wrap(&self, face: Face, size: f32, text: &str, width: f32, max_lines: usize) -> Vec<String> {
        let space = self.width(face, size, " ");
        let mut lines = Vec::new();
        let mut current = String::new();
        let mut current_width = 0.0;
        let text = single_line(text);
        for word in text.split(' ').filter(|w| !w.is_empty()) {
            if lines.len() > max_lines {
                break;
            }
            let word_width = self.width(face, size, word);
            if !current.is_empty() && current_width + space + word_width <= width {
                current.push(' ');
                current.push_str(word);
                current_width += space + word_width;
                continue;
            }
            if !current.is_empty() {
                lines.push(std::mem::take(&mut current));
            }
            current_width = 0.0;
            for c in word.chars() {
                let char_width = self.width(face, size, c.encode_utf8(&mut [0; 4]));
                if !current.is_empty() && current_width + char_width > width {
                    lines.push(std::mem::take(&mut current));
                    current_width = 0.0;
                }
                current.push(c);
                current_width += char_width;
            }
        }
        if !current.is_empty() {
            lines.push(current);
        }
        if lines.len() > max_lines {
            lines.truncate(max_lines);
            if let Some(last) = lines.last_mut() {
                while !last.is_empty() && self.width(face, size, &format!("{last}…")) > width {
                    last.pop();
                }
                last.push('…');
            }
        }
        lines
    }
}

/// Pages of operations, with a cursor on the current page.
struct Layout<'a> {
    metrics: &'a Metrics,
    pages: Vec<Vec<Op>>,
    y: f32,
}

impl<'a> Layout<'a> {
    fn new(metrics: &'a Metrics) -> Self {
        Self {
            metrics,
            pages: vec![Vec::new()],
            y: MARGIN,
        }
    }

    fn push(&mut self, op: Op) {
        if let Some(page) = self.pages.last_mut() {
            page.push(op);
        }
    }

    fn at_page_top(&self) -> bool {
        self.y <= MARGIN
    }

    fn new_page(&mut self) {
        self.pages.push(Vec::new());
        self.y = MARGIN;
    }

    /// Starts a new page unless `height` more points fit on this one.
    fn ensure(&mut self, height: f32) -> bool {
        if self.y + height > CONTENT_BOTTOM && !self.at_page_top() {
            self.new_page();
            return true;
        }
        false
    }

    /// Vertical space, dropped at the top of a page.
    fn space(&mut self, points: f32) {
        if !self.at_page_top() {
            self.y = (self.y + points).min(CONTENT_BOTTOM);
        }
    }

    fn text(&mut self, x: f32, baseline: f32, face: Face, size: f32, color: Rgb, text: String) {
        if !text.is_empty() {
            self.push(Op::Text {
                x,
                y: baseline,
                face,
                size,
                color,
                text,
            });
        }
    }

    /// Wrapped text in a column from `x` to the right margin.
    fn lines(&mut self, x: f32, face: Face, size: f32, leading: f32, color: Rgb, text: &str) {
        let width = MARGIN + CONTENT_WIDTH - x;
        for line in self.metrics.wrap(face, size, text, width, usize::MAX) {
            self.ensure(leading);
            let baseline = self.y + baseline_offset(size, leading);
            self.text(x, baseline, face, size, color, line);
            self.y += leading;
        }
    }

    fn rule(&mut self, width: f32, color: Rgb) {
        let y = self.y;
        self.push(Op::Line {
            from: (MARGIN, y),
            to: (MARGIN + CONTENT_WIDTH, y),
            width,
            color,
        });
    }

    fn title(&mut self, title: &str) {
        self.lines(MARGIN, Face::Sans, 20.0, 26.0, HEADING, title);
        self.y += 4.0;
        self.rule(1.2, HEADING);
        self.y += 16.0;
    }

    fn heading(&mut self, level: usize, text: &str) {
        let (size, before) = match level {
            1 => (16.0, 14.0),
            2 => (13.5, 12.0),
            _ => (11.5, 10.0),
        };
        let leading = size * 1.35;
        self.space(before);
        // Keep the heading with the first lines of what follows it.
        self.ensure(leading + 2.0 * BODY_LEADING);
        self.lines(MARGIN, Face::Sans, size, leading, HEADING, text);
        self.y += 4.0;
    }

    fn paragraph(&mut self, text: &str) {
        self.lines(MARGIN, Face::Condensed, BODY_SIZE, BODY_LEADING, INK, text);
        self.space(8.0);
    }

    fn item(&mut self, depth: usize, marker: &str, text: &str) {
        let indent = MARGIN + 6.0 + depth.min(4) as f32 * 16.0;
        let text_x = indent + 16.0;
        self.ensure(BODY_LEADING);
        let baseline = self.y + baseline_offset(BODY_SIZE, BODY_LEADING);
        self.text(
            indent,
            baseline,
            Face::Condensed,
            BODY_SIZE,
            INK,
            marker.to_string(),
        );
        self.lines(text_x, Face::Condensed, BODY_SIZE, BODY_LEADING, INK, text);
        self.space(3.0);
    }

    fn quote(&mut self, text: &str) {
        let top = self.y;
        let page = self.pages.len();
        self.lines(
            MARGIN + 14.0,
            Face::Condensed,
            BODY_SIZE,
            BODY_LEADING,
            GREY,
            text,
        );
        // The bar marks the quote on the page where it ends.
        let from = if self.pages.len() == page {
            top
        } else {
            MARGIN
        };
        let bottom = self.y;
        self.push(Op::Line {
            from: (MARGIN + 4.0, from + 2.0),
            to: (MARGIN + 4.0, bottom - 2.0),
            width: 2.5,
            color: RULE,
        });
        self.space(8.0);
    }

    fn code(&mut self, lines: &[String]) {
        let (size, leading) = (9.0, 12.5);
        for line in lines {
            // Code keeps its indentation; only tabs are expanded.
            let line = line.replace('\t', "    ");
            let wrapped = if line.trim().is_empty() {
                vec![String::new()]
            } else {
                wrap_code(self.metrics, size, &line, CONTENT_WIDTH - 12.0)
            };
            for part in wrapped {
                self.ensure(leading);
                self.push(Op::Rect {
                    x: MARGIN,
                    y: self.y,
                    w: CONTENT_WIDTH,
                    h: leading,
                    color: SHADE,
                });
                let baseline = self.y + baseline_offset(size, leading);
                self.text(MARGIN + 6.0, baseline, Face::Mono, size, INK, part);
                self.y += leading;
            }
        }
        self.space(8.0);
    }

    fn table(&mut self, header: &[String], rows: &[Vec<Cell>]) {
        let grid = Grid::new(self.metrics, header, rows);
        self.space(4.0);
        self.header_row(header, &grid);
        for row in rows {
            let texts: Vec<&str> = row.iter().map(|c| c.text.as_str()).collect();
            let lines = grid.lines(self.metrics, Face::Condensed, &texts);
            if self.ensure(grid.row_height(&lines)) {
                // Each page of a long table starts with its header.
                self.header_row(header, &grid);
            }
            self.draw_row(&grid, Face::Condensed, &lines);
        }
        self.space(10.0);
    }

    fn header_row(&mut self, header: &[String], grid: &Grid) {
        let texts: Vec<&str> = header.iter().map(String::as_str).collect();
        let lines = grid.lines(self.metrics, Face::Sans, &texts);
        let height = grid.row_height(&lines);
        self.ensure(height);
        self.push(Op::Rect {
            x: MARGIN,
            y: self.y,
            w: grid.total_width(),
            h: height,
            color: SHADE,
        });
        self.draw_row(grid, Face::Sans, &lines);
    }

    fn draw_row(&mut self, grid: &Grid, face: Face, lines: &[Vec<String>]) {
        let height = grid.row_height(lines);
        let mut x = MARGIN;
        for ((cell_lines, w), right) in lines.iter().zip(&grid.widths).zip(&grid.right_aligned) {
            for (k, line) in cell_lines.iter().enumerate() {
                let baseline = self.y
                    + grid.pad
                    + k as f32 * grid.leading
                    + baseline_offset(grid.size, grid.leading);
                let line_x = if *right {
                    x + w - grid.pad - self.metrics.width(face, grid.size, line)
                } else {
                    x + grid.pad
                };
                self.text(line_x, baseline, face, grid.size, INK, line.clone());
            }
            x += w;
        }
        self.y += height;
        let y = self.y;
        let header = face == Face::Sans;
        self.push(Op::Line {
            from: (MARGIN, y),
            to: (MARGIN + grid.total_width(), y),
            width: if header { 0.9 } else { 0.4 },
            color: if header { GREY } else { RULE },
        });
    }

    /// Adds "page i / n" to every page once layout is done.
    fn finish(mut self) -> Vec<Vec<Op>> {
        let count = self.pages.len();
        let size = 8.5;
        for (i, page) in self.pages.iter_mut().enumerate() {
            let label = format!("{} / {count}", i + 1);
            let width = self.metrics.width(Face::Condensed, size, &label);
            page.push(Op::Text {
                x: (PAGE_WIDTH - width) / 2.0,
                y: PAGE_HEIGHT - MARGIN / 2.0,
                face: Face::Condensed,
                size,
                color: GREY,
                text: label,
            });
        }
        self.pages
    }
}

/// Where the baseline sits below a line box's top: DejaVu's ascent is
/// about 0.93 em and its descent 0.24 em; the rest is split evenly.
fn baseline_offset(size: f32, leading: f32) -> f32 {
    (leading - 1.17 * size) / 2.0 + 0.93 * size
}

/// Code is split at the character where it overflows, spaces included.
fn wrap_code(metrics: &Metrics, size: f32, line: &str, width: f32) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    for c in line.chars().map(|c| if c.is_control() { ' ' } else { c }) {
        current.push(c);
        if metrics.width(Face::Mono, size, &current) > width && current.chars().count() > 1 {
            current.pop();
            parts.push(std::mem::replace(&mut current, c.to_string()));
        }
    }
    parts.push(current);
    parts
}

/// A table's geometry: type size by column count, column widths and which
/// columns hold numbers (right-aligned, header included).
struct Grid {
    widths: Vec<f32>,
    right_aligned: Vec<bool>,
    size: f32,
    leading: f32,
    pad: f32,
}

impl Grid {
    fn new(metrics: &Metrics, header: &[String], rows: &[Vec<Cell>]) -> Self {
        let size = match header.len() {
            0..=6 => 9.0,
            7..=10 => 8.0,
            _ => 7.0,
        };
        let pad = 3.5;
        let right_aligned = (0..header.len())
            .map(|i| {
                let mut cells = rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .filter(|c| !c.text.is_empty());
                let mut any = false;
                let all = cells.all(|c| {
                    any = true;
                    c.numeric
                });
                any && all
            })
            .collect();
        Self {
            widths: column_widths(metrics, size, header, rows, pad),
            right_aligned,
            size,
            leading: size * 1.3,
            pad,
        }
    }

    fn total_width(&self) -> f32 {
        self.widths.iter().sum()
    }

    fn lines(&self, metrics: &Metrics, face: Face, texts: &[&str]) -> Vec<Vec<String>> {
        texts
            .iter()
            .zip(&self.widths)
            .map(|(text, w)| {
                metrics.wrap(face, self.size, text, w - 2.0 * self.pad, MAX_CELL_LINES)
            })
            .collect()
    }

    fn row_height(&self, lines: &[Vec<String>]) -> f32 {
        let most = lines.iter().map(Vec::len).max().unwrap_or(1).max(1);
        most as f32 * self.leading + 2.0 * self.pad
    }
}

/// Column widths in proportion to each column's widest text (sampled), with
/// a floor so no column collapses: shrunk to the content width when too
/// wide, and widened at most by half when narrow (a two-column table should
/// not span the page).
fn column_widths(
    metrics: &Metrics,
    size: f32,
    header: &[String],
    rows: &[Vec<Cell>],
    pad: f32,
) -> Vec<f32> {
    let cap = CONTENT_WIDTH * 0.6;
    let mut natural: Vec<f32> = header
        .iter()
        .map(|h| metrics.width(Face::Sans, size, &single_line(h)).min(cap))
        .collect();
    for row in rows.iter().take(200) {
        for (n, cell) in natural.iter_mut().zip(row) {
            *n = n.max(
                metrics
                    .width(Face::Condensed, size, &single_line(&cell.text))
                    .min(cap),
            );
        }
    }
    let floor = (CONTENT_WIDTH / header.len().max(1) as f32 * 0.25).clamp(3.0 * size, 60.0);
    let wanted: Vec<f32> = natural
        .iter()
        .map(|n| (n + 2.0 * pad + 1.0).max(floor))
        .collect();
    let total: f32 = wanted.iter().sum::<f32>().max(1.0);
    let scale = (CONTENT_WIDTH / total).min(1.5);
    wanted.iter().map(|w| w * scale).collect()
}

/// A block of the Markdown-ish content.
#[derive(Debug, Clone, PartialEq)]
enum Block {
    Heading(usize, String),
    Paragraph(String),
    Item {
        depth: usize,
        marker: String,
        text: String,
    },
    Quote(String),
    Code(Vec<String>),
    Table(Vec<Vec<String>>),
    Rule,
}

fn parse_blocks(content: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut paragraph: Vec<&str> = Vec::new();
    let mut code: Option<Vec<String>> = None;
    let mut table: Vec<Vec<String>> = Vec::new();
    for raw in content.lines() {
        let trimmed = raw.trim();
        if let Some(lines) = code.as_mut() {
            if trimmed.starts_with("```") {
                blocks.push(Block::Code(std::mem::take(lines)));
                code = None;
            } else {
                lines.push(raw.trim_end().to_string());
            }
            continue;
        }
        if trimmed.starts_with('|') {
            flush_paragraph(&mut blocks, &mut paragraph);
            let cells = table_cells(trimmed);
            // The |---|:---:| line under a Markdown table header.
            let separator = cells
                .iter()
                .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':' | ' ')));
            if !separator {
                table.push(cells);
            }
            continue;
        }
        flush_table(&mut blocks, &mut table);
        if trimmed.is_empty() {
            flush_paragraph(&mut blocks, &mut paragraph);
            continue;
        }
        if trimmed.starts_with("```") {
            flush_paragraph(&mut blocks, &mut paragraph);
            code = Some(Vec::new());
            continue;
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            flush_paragraph(&mut blocks, &mut paragraph);
            blocks.push(Block::Heading(hashes, inline(&trimmed[hashes..])));
            continue;
        }
        if is_rule(trimmed) {
            flush_paragraph(&mut blocks, &mut paragraph);
            blocks.push(Block::Rule);
            continue;
        }
        if let Some((marker, text)) = list_marker(trimmed) {
            flush_paragraph(&mut blocks, &mut paragraph);
            let indent = raw.len() - raw.trim_start().len();
            blocks.push(Block::Item {
                depth: indent / 2,
                marker,
                text: inline(text),
            });
            continue;
        }
        if let Some(text) = trimmed.strip_prefix('>') {
            flush_paragraph(&mut blocks, &mut paragraph);
            match blocks.last_mut() {
                Some(Block::Quote(previous)) => {
                    previous.push(' ');
                    previous.push_str(&inline(text));
                }
                _ => blocks.push(Block::Quote(inline(text))),
            }
            continue;
        }
        // A line straight after a list item continues it (Markdown's lazy
        // continuation).
        if paragraph.is_empty()
            && let Some(Block::Item { text, .. }) = blocks.last_mut()
        {
            text.push(' ');
            text.push_str(&inline(trimmed));
            continue;
        }
        paragraph.push(trimmed);
    }
    // An unclosed fence runs to the end, as in Markdown.
    if let Some(lines) = code {
        blocks.push(Block::Code(lines));
    }
    flush_table(&mut blocks, &mut table);
    flush_paragraph(&mut blocks, &mut paragraph);
    blocks
}

fn flush_paragraph(blocks: &mut Vec<Block>, paragraph: &mut Vec<&str>) {
    if !paragraph.is_empty() {
        blocks.push(Block::Paragraph(inline(&paragraph.join(" "))));
        paragraph.clear();
    }
}

fn flush_table(blocks: &mut Vec<Block>, table: &mut Vec<Vec<String>>) {
    if !table.is_empty() {
        blocks.push(Block::Table(std::mem::take(table)));
    }
}

/// `---`, `***`, `___` (spaces allowed between).
fn is_rule(line: &str) -> bool {
    let Some(first) = line.chars().next() else {
        return false;
    };
    matches!(first, '-' | '*' | '_')
        && line.chars().filter(|c| *c == first).count() >= 3
        && line.chars().all(|c| c == first || c == ' ')
}

/// `- x`, `* x`, `+ x` become bullets; `1. x` and `1) x` keep their number.
fn list_marker(line: &str) -> Option<(String, &str)> {
    for bullet in ["- ", "* ", "+ "] {
        if let Some(text) = line.strip_prefix(bullet) {
            return Some(("•".to_string(), text));
        }
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if (1..=9).contains(&digits) {
        let rest = &line[digits..];
        if let Some(text) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return Some((format!("{}.", &line[..digits]), text));
        }
    }
    None
}

/// Splits `| a | b \| c |` into cells, honouring escaped pipes.
fn table_cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                push_char(&mut cells, '|');
            }
            '|' => cells.push(String::new()),
            c => push_char(&mut cells, c),
        }
    }
    cells.iter().map(|c| inline(c.trim())).collect()
}

fn push_char(cells: &mut [String], c: char) {
    if let Some(cell) = cells.last_mut() {
        cell.push(c);
    }
}

/// Inline Markdown the PDF cannot show as such: `**`/`__` emphasis and
/// backticks are dropped, `[text](url)` becomes `text (url)`, images their alt
/// text.
fn inline(text: &str) -> String {
    let text = text.replace("**", "").replace("__", "").replace('`', "");
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        let Some(link) = parse_link(&rest[open..]) else {
            out.push_str(&rest[..=open]);
            rest = &rest[open + 1..];
            continue;
        };
        let (label, url, consumed) = link;
        let image = rest[..open].ends_with('!');
        out.push_str(if image {
            &rest[..open - 1]
        } else {
            &rest[..open]
        });
        if image || url.is_empty() || label == url {
            out.push_str(label);
        } else {
            out.push_str(&format!("{label} ({url})"));
        }
        rest = &rest[open + consumed..];
    }
    out.push_str(rest);
    single_line(&out)
}

/// `[label](url)` at the start of `text`: label, url and bytes consumed.
fn parse_link(text: &str) -> Option<(&str, &str, usize)> {
    let close = text.find(']')?;
    let after = text[close + 1..].strip_prefix('(')?;
    let end = after.find(')')?;
    Some((&text[1..close], after[..end].trim(), close + 2 + end + 1))
}

/// Lays the document out and writes the PDF.
pub(super) fn render(spec: &DocumentSpec) -> Result<Vec<u8>, ArtifactError> {
    let metrics = Metrics::load()?;
    let pages = layout(spec, &metrics);
    write(spec, &pages)
}

fn layout(spec: &DocumentSpec, metrics: &Metrics) -> Vec<Vec<Op>> {
    let mut layout = Layout::new(metrics);
    layout.title(&spec.title);
    for block in parse_blocks(spec.content.as_deref().unwrap_or_default()) {
        match block {
            Block::Heading(level, text) => layout.heading(level, &text),
            Block::Paragraph(text) => layout.paragraph(&text),
            Block::Item {
                depth,
                marker,
                text,
            } => layout.item(depth, &marker, &text),
            Block::Quote(text) => layout.quote(&text),
            Block::Code(lines) => layout.code(&lines),
            Block::Table(rows) => {
                let Some((header, rows)) = rows.split_first() else {
                    continue;
                };
                let width = header.len();
                let rows: Vec<Vec<Cell>> = rows
                    .iter()
                    .map(|row| {
                        let mut row = row.clone();
                        // Ragged Markdown rows are padded or cut to the header.
                        row.resize(width, String::new());
                        row.into_iter()
                            .map(|text| Cell {
                                numeric: text.parse::<f64>().is_ok(),
                                text,
                            })
                            .collect()
                    })
                    .collect();
                layout.table(header, &rows);
            }
            Block::Rule => {
                layout.space(4.0);
                layout.rule(0.6, RULE);
                layout.space(10.0);
            }
        }
    }
    if let Some((header, rows)) = spec.table() {
        layout.table(&header, &rows);
    }
    layout.finish()
}

fn write(spec: &DocumentSpec, pages: &[Vec<Op>]) -> Result<Vec<u8>, ArtifactError> {
    let font = |bytes: &'static [u8]| {
        Font::new(Data::from(bytes), 0)
            .ok_or_else(|| ArtifactError::Render("bundled font rejected by krilla".into()))
    };
    let (sans, condensed, mono) = (font(SANS_BOLD)?, font(CONDENSED_BOLD)?, font(MONO_BOLD)?);
    let settings = PageSettings::from_wh(PAGE_WIDTH, PAGE_HEIGHT)
        .ok_or_else(|| ArtifactError::Render("invalid page size".into()))?;
    let mut document = Document::new();
    document.set_metadata(
        Metadata::new()
            .title(single_line(&spec.title))
            .creator("unigen".to_string()),
    );
    for ops in pages {
        let mut page = document.start_page_with(settings.clone());
        let mut surface = page.surface();
        for op in ops {
            match op {
                Op::Text {
                    x,
                    y,
                    face,
                    size,
                    color,
                    text,
                } => {
                    let font = match face {
                        Face::Sans => &sans,
                        Face::Condensed => &condensed,
                        Face::Mono => &mono,
                    };
                    surface.set_stroke(None);
                    surface.set_fill(Some(fill(*color)));
                    surface.draw_text(
                        Point::from_xy(*x, *y),
                        font.clone(),
                        *size,
                        text,
                        false,
                        TextDirection::Auto,
                    );
                }
                Op::Rect { x, y, w, h, color } => {
                    if let Some(rect) = Rect::from_xywh(*x, *y, *w, *h) {
                        let mut path = PathBuilder::new();
                        path.push_rect(rect);
                        surface.set_stroke(None);
                        surface.set_fill(Some(fill(*color)));
                        draw_path(&mut surface, path);
                    }
                }
                Op::Line {
                    from,
                    to,
                    width,
                    color,
                } => {
                    let mut path = PathBuilder::new();
                    path.move_to(from.0, from.1);
                    path.line_to(to.0, to.1);
                    surface.set_fill(None);
                    surface.set_stroke(Some(Stroke {
                        paint: rgb::Color::new(color.0, color.1, color.2).into(),
                        width: *width,
                        ..Default::default()
                    }));
                    draw_path(&mut surface, path);
                }
            }
        }
        surface.finish();
        page.finish();
    }
    document
        .finish()
        .map_err(|e| ArtifactError::Render(format!("pdf: {e:?}")))
}

fn fill(color: Rgb) -> Fill {
    Fill {
        paint: rgb::Color::new(color.0, color.1, color.2).into(),
        opacity: NormalizedF32::ONE,
        rule: Default::default(),
    }
}

fn draw_path(surface: &mut Surface<'_>, path: PathBuilder) {
    // A degenerate path (zero-length line) has nothing to draw.
    if let Some(path) = path.finish() {
        surface.draw_path(&path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifacts_content_is_split_into_blocks() {
        let blocks = parse_blocks(
            "# Title\nsome **bold**\ntext\n\n- one\n  continued\n  * two\n3. three\n\n\
             > quoted\n> more\n***\n```\n  let x = 1;\n```\n| a | b \\| c |\n|---|:-:|\n| 1 | 2 |\nafter",
        );
        assert_eq!(
            blocks,
            vec![
                Block::Heading(1, "Title".into()),
                Block::Paragraph("some bold text".into()),
                Block::Item {
                    depth: 0,
                    marker: "•".into(),
                    text: "one continued".into()
                },
                Block::Item {
                    depth: 1,
                    marker: "•".into(),
                    text: "two".into()
                },
                Block::Item {
                    depth: 0,
                    marker: "3.".into(),
                    text: "three".into()
                },
                Block::Quote("quoted more".into()),
                Block::Rule,
                Block::Code(vec!["  let x = 1;".into()]),
                Block::Table(vec![
                    vec!["a".into(), "b | c".into()],
                    vec!["1".into(), "2".into()]
                ]),
                Block::Paragraph("after".into()),
            ]
        );
    }

    #[test]
    fn artifacts_inline_markdown_is_flattened() {
        assert_eq!(
            inline("see [docs](https://x.io) and ![logo](l.png) [x]"),
            "see docs (https://x.io) and logo [x]"
        );
        assert_eq!(inline("**a** `b` __c__"), "a b c");
        assert_eq!(inline("[unclosed"), "[unclosed");
    }

    #[test]
    fn artifacts_wrapping_respects_the_width_and_line_limit() {
        let metrics = Metrics::load().unwrap();
        let text = "word ".repeat(200) + &"x".repeat(300);
        let lines = metrics.wrap(Face::Condensed, 10.0, &text, 200.0, usize::MAX);
        assert!(lines.len() > 10);
        assert!(
            lines
                .iter()
                .all(|l| metrics.width(Face::Condensed, 10.0, l) <= 200.0)
        );
        let cut = metrics.wrap(Face::Condensed, 10.0, &text, 200.0, 3);
        assert_eq!(cut.len(), 3);
        assert!(cut[2].ends_with('…'));
    }
}
