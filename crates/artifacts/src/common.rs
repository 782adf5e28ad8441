//! What every artifact shares: the rendered file, the error type, the
//! panic guard and text helpers.

/// A rendered file, ready to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub bytes: Vec<u8>,
    /// File extension without the dot: `png`, `svg`, `pdf`, `md`, `csv`.
    pub extension: &'static str,
    pub mime: &'static str,
    /// Pixel size for charts; 0 for documents.
    pub width: u32,
    pub height: u32,
}

/// Why an artifact could not be produced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    /// The model's arguments are wrong; the message names the field and is
    /// meant to be shown to the model so it can correct its call.
    #[error("{0}")]
    Invalid(String),
    /// The arguments were valid but a renderer failed (a bug, not the
    /// model's fault): log it, tell the model only that rendering failed.
    #[error("rendering failed: {0}")]
    Render(String),
}

impl ArtifactError {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }
}

/// Runs a renderer, turning a panic inside a third-party library into an
/// error: the input is model-supplied, and a tool call must never take the
/// worker down with it.
pub(crate) fn guard<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, ArtifactError>,
) -> Result<T, ArtifactError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(_) => Err(ArtifactError::Render(format!(
            "the {what} renderer panicked"
        ))),
    }
}

/// Text as it should be drawn: control characters (which would also make an
/// SVG ill-formed) become spaces, runs of whitespace collapse, ends trimmed.
pub(crate) fn single_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Formats a number compactly for axes, legends and tables: at most six
/// significant digits, no float noise (`0.30000000000000004` -> `0.3`), and
/// k/M/B suffixes for large magnitudes.
pub(crate) fn format_number(value: f64) -> String {
    let magnitude = value.abs();
    let (scaled, suffix) = if magnitude >= 1e12 {
        (value / 1e12, "T")
    } else if magnitude >= 1e9 {
        (value / 1e9, "B")
    } else if magnitude >= 1e6 {
        (value / 1e6, "M")
    } else if magnitude >= 1e4 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    if scaled != 0.0 && scaled.abs() < 1e-4 {
        return format!("{value:.2e}");
    }
    let digits = 6_i32 - (scaled.abs().max(1.0).log10().floor() as i32 + 1);
    let text = format!("{scaled:.*}", digits.clamp(0, 6) as usize);
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text.as_str()
    };
    // "-0" reads as a bug on an axis.
    let text = if text == "-0" { "0" } else { text };
    format!("{text}{suffix}")
}
