//! HTML to readable text for `web_fetch`: what a person reads on the page,
//! not its markup. The document is parsed by html5ever (through `scraper`),
//! exactly as a browser would, then walked once: scripts, styles, the head,
//! navigation, footers, form controls and hidden elements are dropped;
//! headings become `#` lines, list items `-` or `1.` lines, table cells are
//! joined by ` | `, links keep their text, `<pre>` keeps its layout, and
//! other whitespace collapses as it does on screen.

use ego_tree::iter::Edge;
use scraper::node::Element;
use scraper::{ElementRef, Html, Node};

/// A page as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Readable {
    /// The `<title>`, else the first `<h1>`; `None` when neither has text.
    pub title: Option<String>,
    pub text: String,
}

/// Elements whose content is not the page's prose.
const SKIPPED: [&str; 20] = [
    "head", "script", "style", "noscript", "template", "nav", "footer", "svg", "iframe", "object",
    "embed", "canvas", "select", "button", "input", "textarea", "audio", "video", "map", "link",
];

/// Blocks set apart by a blank line.
const PARAGRAPHS: [&str; 17] = [
    "p",
    "blockquote",
    "figure",
    "section",
    "article",
    "main",
    "header",
    "aside",
    "address",
    "details",
    "fieldset",
    "form",
    "table",
    "dl",
    "hgroup",
    "center",
    "body",
];

/// Blocks that start a new line.
const LINES: [&str; 10] = [
    "div",
    "dt",
    "dd",
    "caption",
    "figcaption",
    "summary",
    "legend",
    "option",
    "thead",
    "tbody",
];

/// The readable text of an HTML document.
pub(super) fn readable(html: &str) -> Readable {
    let document = Html::parse_document(html);
    let mut writer = Writer::default();
    // Depth inside a dropped element: everything under it is ignored.
    let mut skipping = 0usize;
    for edge in document.tree.root().traverse() {
        match edge {
            Edge::Open(node) => match node.value() {
                Node::Element(element) => {
                    if skipping > 0 || is_dropped(element) {
                        skipping += 1;
                    } else {
                        writer.open(element);
                    }
                }
                Node::Text(text) if skipping == 0 => writer.text(text),
                _ => {}
            },
            Edge::Close(node) => {
                if let Node::Element(element) = node.value() {
                    if skipping > 0 {
                        skipping -= 1;
                    } else {
                        writer.close(element.name());
                    }
                }
            }
        }
    }
    Readable {
        title: first_text(&document, "title").or_else(|| first_text(&document, "h1")),
        text: writer.finish(),
    }
}

fn is_dropped(element: &Element) -> bool {
    SKIPPED.contains(&element.name())
        || element.attr("hidden").is_some()
        || element
            .attr("aria-hidden")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The whitespace-collapsed text of the first `name` element, if any.
fn first_text(document: &Html, name: &str) -> Option<String> {
    document
        .tree
        .nodes()
        .filter(|node| {
            node.value()
                .as_element()
                .is_some_and(|element| element.name() == name)
        })
        .filter_map(ElementRef::wrap)
        .map(|element| {
            element
                .text()
                .flat_map(str::split_whitespace)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .find(|text| !text.is_empty())
}

fn heading_level(name: &str) -> Option<usize> {
    match name {
        "h1" => Some(1),
        "h2" => Some(2),
        "h3" => Some(3),
        "h4" => Some(4),
        "h5" => Some(5),
        "h6" => Some(6),
        _ => None,
    }
}

/// Writes text as the walk meets it; breaks between blocks are owed and
/// paid only when more text follows, so empty blocks leave no blank lines.
#[derive(Default)]
struct Writer {
    out: String,
    /// Line breaks owed before the next text: 1 (new line) or 2 (blank line).
    breaks: usize,
    /// A space is owed before the next word on the same line.
    space: bool,
    /// Written at the start of the next line of text: a heading's `#`s or
    /// a list item's marker.
    marker: Option<String>,
    /// ` | ` is owed before the next text: a new cell of the same row.
    cell_separator: bool,
    row_has_cell: bool,
    /// Depth of `<pre>` elements.
    pre: usize,
    /// Open lists: `None` unordered, `Some(next number)` ordered.
    lists: Vec<Option<u64>>,
}

impl Writer {
    fn open(&mut self, element: &Element) {
        let name = element.name();
        if let Some(level) = heading_level(name) {
            self.block(2);
            self.marker = Some(format!("{} ", "#".repeat(level)));
            return;
        }
        match name {
            "br" => self.line_break(),
            "hr" => self.block(2),
            "ul" | "ol" => {
                self.block(if self.lists.is_empty() { 2 } else { 1 });
                self.lists.push((name == "ol").then(|| {
                    element
                        .attr("start")
                        .and_then(|s| s.trim().parse().ok())
                        .unwrap_or(1)
                }));
            }
            "li" => {
                self.block(1);
                let indent = "  ".repeat(self.lists.len().saturating_sub(1));
                let marker = match self.lists.last_mut() {
                    Some(Some(next)) => {
                        let marker = format!("{next}. ");
                        *next += 1;
                        marker
                    }
                    Some(None) | None => "- ".to_owned(),
                };
                self.marker = Some(indent + &marker);
            }
            "tr" => {
                self.block(1);
                self.row_has_cell = false;
            }
            "td" | "th" => {
                self.cell_separator = self.row_has_cell;
                self.row_has_cell = true;
            }
            "pre" => {
                self.block(2);
                self.pre += 1;
            }
            _ if PARAGRAPHS.contains(&name) => self.block(2),
            _ if LINES.contains(&name) => self.block(1),
            _ => {}
        }
    }

    fn close(&mut self, name: &str) {
        if heading_level(name).is_some() {
            self.marker = None;
            self.block(2);
            return;
        }
        match name {
            "ul" | "ol" => {
                self.lists.pop();
                self.block(if self.lists.is_empty() { 2 } else { 1 });
            }
            "li" | "tr" => {
                self.marker = None;
                self.block(1);
            }
            "pre" => {
                self.pre = self.pre.saturating_sub(1);
                self.block(2);
            }
            _ if PARAGRAPHS.contains(&name) => self.block(2),
            _ if LINES.contains(&name) => self.block(1),
            _ => {}
        }
    }

    fn block(&mut self, breaks: usize) {
        self.breaks = self.breaks.max(breaks);
    }

    fn line_break(&mut self) {
        if self.pre > 0 {
            self.out.push('\n');
        } else {
            self.breaks = (self.breaks + 1).min(2);
        }
    }

    fn text(&mut self, text: &str) {
        if self.pre > 0 {
            if !text.is_empty() {
                self.start_text();
                self.out.push_str(&text.replace("\r\n", "\n"));
            }
            return;
        }
        if text.starts_with(char::is_whitespace) {
            self.space = true;
        }
        let mut words = text.split_whitespace().peekable();
        while let Some(word) = words.next() {
            self.start_text();
            self.out.push_str(word);
            self.space = words.peek().is_some();
        }
        if text.ends_with(char::is_whitespace) {
            self.space = true;
        }
    }

    /// Pays what is owed before text: breaks, then a marker at the start of
    /// a line, else a cell separator or a space.
    fn start_text(&mut self) {
        if self.out.is_empty() {
            self.breaks = 0;
        }
        if self.breaks > 0 {
            for _ in 0..self.breaks {
                self.out.push('\n');
            }
            self.breaks = 0;
        }
        if self.out.is_empty() || self.out.ends_with('\n') {
            if let Some(marker) = self.marker.take() {
                self.out.push_str(&marker);
            }
        } else if self.cell_separator {
            self.out.push_str(" | ");
        } else if self.space {
            self.out.push(' ');
        }
        self.space = false;
        self.cell_separator = false;
    }

    /// Lines without trailing spaces and at most one blank line in a row.
    fn finish(self) -> String {
        let mut text = String::with_capacity(self.out.len());
        let mut blank = false;
        for line in self.out.lines().map(str::trim_end) {
            if line.is_empty() {
                if blank || text.is_empty() {
                    continue;
                }
                blank = true;
            } else {
                blank = false;
            }
            text.push_str(line);
            text.push('\n');
        }
        text.trim_end().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_tools_html_keeps_prose_headings_lists_and_tables_without_noise() {
        let page = r#"<!DOCTYPE html>
<html><head><title> Rust &amp; Tokio
  guide </title><style>body { color: red }</style>
<script>var secret = "tracking";</script></head>
<body>
<nav><a href="/">Home</a> <a href="/about">About</a></nav>
<header><h1>Getting   started</h1></header>
<main>
  <p>Tokio is an <b>asynchronous</b> runtime for
     <a href="https://rust-lang.org">Rust</a>.</p>
  <div hidden>invisible</div><span aria-hidden="true">decorative</span>
  <script>document.write("injected");</script><style>.x { color: blue }</style>
  <h2>Steps</h2>
  <ol start="3"><li>Install</li><li>Write <code>main</code>
    <ul><li>nested item</li></ul></li></ol>
  <table><tr><th>Crate</th><th>Version</th></tr><tr><td>tokio</td><td>1.54</td></tr></table>
  <pre>fn main() {
    println!("hi");
}</pre>
  <p>Line one<br>line two</p>
  <noscript>Enable JavaScript</noscript>
  <form><label>Email</label><input value="x"><button>Send</button></form>
</main>
<footer>Copyright 2025</footer>
</body></html>"#;
        let readable = readable(page);
        assert_eq!(readable.title.as_deref(), Some("Rust & Tokio guide"));
        assert_eq!(
            readable.text,
            "# Getting started\n\n\
             Tokio is an asynchronous runtime for Rust.\n\n\
             ## Steps\n\n\
             3. Install\n\
             4. Write main\n  - nested item\n\n\
             Crate | Version\ntokio | 1.54\n\n\
             fn main() {\n    println!(\"hi\");\n}\n\n\
             Line one\nline two\n\n\
             Email"
        );
    }

    #[test]
    fn agents_tools_html_title_falls_back_to_the_first_heading() {
        let readable = readable("<body><h1> </h1><h1>Main <i>topic</i></h1><p>x</p></body>");
        assert_eq!(readable.title.as_deref(), Some("Main topic"));
        assert_eq!(readable.text, "# Main topic\n\nx");
        let bare = super::readable("just text, no markup");
        assert_eq!(
            (bare.title, bare.text.as_str()),
            (None, "just text, no markup")
        );
    }

    #[test]
    fn agents_tools_html_survives_deep_nesting_and_broken_markup() {
        let deep = format!("{}deep{}", "<div>".repeat(20_000), "</div>".repeat(20_000));
        assert_eq!(readable(&deep).text, "deep");
        let broken = readable("<p>open <b>bold <i>both</p><p>next &lt;tag&gt; &#x1F600;");
        assert_eq!(broken.text, "open bold both\n\nnext <tag> 😀");
    }
}
