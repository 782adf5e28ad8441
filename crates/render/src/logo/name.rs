//! The brand name and tagline read from the prompt.

use super::colour::*;
use super::text::*;

/// Words that describe the request rather than name the brand.
pub(super) const FILLER: &[&str] = &[
    "a",
    "an",
    "the",
    "logo",
    "logos",
    "for",
    "of",
    "with",
    "and",
    "in",
    "on",
    "to",
    "design",
    "create",
    "make",
    "generate",
    "draw",
    "icon",
    "emblem",
    "brand",
    "branding",
    "company",
    "business",
    "simple",
    "minimal",
    "minimalist",
    "modern",
    "clean",
    "new",
    "my",
    "our",
    "professional",
    "vintage",
    "playful",
    "corporate",
    "tech",
    "organic",
    "geometric",
    "style",
    "styled",
    "please",
    "called",
    "named",
    "that",
    "is",
    "which",
];

pub(super) const MAX_BRAND_CHARS: usize = 24;

pub(super) fn is_filler(w: &str) -> bool {
    let w = w
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase();
    FILLER.contains(&w.as_str())
}

/// Cuts at the first comma, colon, semicolon, pipe, full stop or spaced/long dash.
pub(super) fn split_head(p: &str) -> (&str, &str) {
    let mut cut = p.len();
    let mut rest_at = p.len();
    for (i, ch) in p.char_indices() {
        let spaced_hyphen = ch == '-' && p[..i].ends_with(' ') && p[i + 1..].starts_with(' ');
        let period = ch == '.' && p[i + 1..].chars().next().is_none_or(char::is_whitespace);
        if matches!(ch, ',' | ':' | ';' | '|' | '–' | '—') || spaced_hyphen || period {
            cut = i;
            rest_at = i + ch.len_utf8();
            break;
        }
    }
    (&p[..cut], &p[rest_at..])
}

pub(super) fn clip_words(s: &str, max_words: usize) -> String {
    let mut out = String::new();
    for w in s.split_whitespace().take(max_words) {
        let cand = if out.is_empty() {
            w.to_string()
        } else {
            format!("{out} {w}")
        };
        if cand.chars().count() > MAX_BRAND_CHARS {
            if out.is_empty() {
                out = w.chars().take(MAX_BRAND_CHARS).collect();
            }
            break;
        }
        out = cand;
    }
    out.trim_matches(|c: char| !c.is_alphanumeric() && c != '&' && c != '!' && c != '?')
        .to_string()
}

pub(super) fn strip_leading_filler(s: &str) -> &str {
    let mut rest = s.trim();
    loop {
        let Some(first) = rest.split_whitespace().next() else {
            return rest;
        };
        // Keep "The" when it starts a capitalised name ("The Daily Grind").
        let lower = first.to_lowercase();
        let the_in_name = lower == "the"
            && first.starts_with('T')
            && rest
                .split_whitespace()
                .nth(1)
                .is_some_and(|w| w.chars().next().is_some_and(char::is_uppercase));
        if !is_filler(first) || the_in_name {
            return rest;
        }
        rest = rest[first.len()..].trim_start();
    }
}

pub(super) fn quoted(p: &str) -> Option<&str> {
    for (open, close) in [('"', '"'), ('“', '”'), ('\'', '\''), ('«', '»')] {
        if let Some(a) = p.find(open) {
            let start = a + open.len_utf8();
            if let Some(b) = p[start..].find(close) {
                let inner = p[start..start + b].trim();
                if !inner.is_empty() && inner.chars().count() <= 40 {
                    return Some(inner);
                }
            }
        }
    }
    None
}

/// The brand name and, when the rest of the prompt reads like a short
/// description, a tagline.
pub(super) fn brand_and_tagline(prompt: &str) -> (String, Option<String>) {
    let p = prompt.trim();
    if let Some(q) = quoted(p) {
        return (clip_words(q, 4), None);
    }
    let lower = p.to_lowercase();
    for kw in ["called ", "named "] {
        if let Some(i) = lower.find(kw) {
            let after = &p[i + kw.len()..];
            let (head, _) = split_head(after);
            let name = clip_words(head, 3);
            if !name.is_empty() {
                return (name, None);
            }
        }
    }
    let (head, rest) = split_head(p);
    let head = strip_leading_filler(head);
    let words = head.split_whitespace().count();
    if words > 0 && words <= 4 && head.chars().count() <= MAX_BRAND_CHARS {
        return (clip_words(head, 4), tagline(rest));
    }
    // First run of 1-3 capitalised words.
    let mut run: Vec<&str> = Vec::new();
    for w in p.split_whitespace() {
        let clean = w.trim_matches(|c: char| !c.is_alphanumeric());
        let cap = clean.chars().next().is_some_and(char::is_uppercase);
        if cap && (!is_filler(clean) || !run.is_empty()) && clean.len() > 1 {
            run.push(clean);
            if run.len() == 3 || w.ends_with([',', ':', ';', '.']) {
                break;
            }
        } else if !run.is_empty() {
            break;
        }
    }
    if !run.is_empty() {
        return (clip_words(&run.join(" "), 3), None);
    }
    // Lower-case description: its first content word or two, title-cased.
    let take = if head.split_whitespace().count() <= 6 {
        2
    } else {
        1
    };
    let content: Vec<&str> = head
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty() && !is_filler(w))
        .take(take)
        .collect();
    let name = apply_case(&clip_words(&content.join(" "), 3), Case::Title);
    if name.is_empty() {
        ("Brand".to_string(), None)
    } else {
        (name, None)
    }
}

/// A short descriptive phrase; instructions about the logo itself are not a tagline.
pub(super) fn tagline(rest: &str) -> Option<String> {
    let t = rest
        .trim()
        .trim_matches(|c: char| !c.is_alphanumeric() && c != '&');
    let t = split_head(t).0.trim();
    let lower = t.to_lowercase();
    const DESIGN_WORDS: &[&str] = &[
        "logo",
        "style",
        "color",
        "colour",
        "font",
        "icon",
        "background",
        "minimal",
        "design",
        "palette",
        "vector",
        "flat",
        "gradient",
        "typography",
        "emblem",
        "mascot",
        "text",
        "shade",
        "tone",
        "render",
        "image",
        "picture",
        "looking",
        "vibe",
    ];
    let words = t.split_whitespace().count();
    if t.is_empty()
        || words > 5
        || t.chars().count() > 36
        || DESIGN_WORDS.iter().any(|w| lower.contains(w))
        || !parse_colors(t).is_empty()
    {
        return None;
    }
    Some(t.to_uppercase())
}

pub(super) fn apply_case(s: &str, case: Case) -> String {
    match case {
        Case::Upper => s.to_uppercase(),
        Case::Lower => s.to_lowercase(),
        Case::Title => {
            if s.chars().any(char::is_uppercase) {
                s.to_string()
            } else {
                s.split(' ')
                    .map(|w| {
                        let mut c = w.chars();
                        match c.next() {
                            Some(f) => f.to_uppercase().chain(c).collect(),
                            None => String::new(),
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        }
    }
}

/// Up to `max` initials from the brand's significant words.
pub(super) fn monogram(brand: &str, max: usize) -> String {
    let words: Vec<&str> = brand
        .split_whitespace()
        .filter(|w| !matches!(w.to_lowercase().as_str(), "the" | "of" | "and" | "&" | "a"))
        .collect();
    let words = if words.is_empty() {
        brand.split_whitespace().collect()
    } else {
        words
    };
    let m: String = words
        .iter()
        .filter_map(|w| w.chars().find(|c| c.is_alphanumeric()))
        .take(max)
        .flat_map(char::to_uppercase)
        .collect();
    if m.is_empty() { "B".into() } else { m }
}
