//! Cutting text into chunks of bounded size (cl100k tokens) for embedding.
//!
//! The text is broken down only as far as needed: a paragraph that fits is
//! one unit, a longer one is split into sentences, a too-long sentence into
//! lines, then words, and only a word longer than a chunk is cut between
//! tokens. Units are then packed greedily into chunks, each chunk starting
//! with the last words of the one before (the overlap), so a passage cut at
//! a boundary is still found whole in one of the two.

use unigen_providers::chat::{count_tokens, token_pieces};

/// One character can take up to 4 cl100k tokens: below this, a chunk could
/// not hold every character.
const MIN_MAX_TOKENS: u32 = 4;

/// A piece of a knowledge file's text, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Position in the file, from 0.
    pub index: usize,
    pub text: String,
    /// `count_tokens(&text)`, never above the `max_tokens` asked for.
    pub token_count: u32,
}

/// Splits `text` into chunks of at most `max_tokens` tokens (cl100k, as
/// [`count_tokens`] counts them), preferring paragraph, then sentence, then
/// line, then word boundaries; only a single word longer than a chunk is cut
/// inside. Each chunk after the first starts with up to `overlap_tokens`
/// tokens of whole words from the end of the previous one; to leave room for
/// it, a paragraph or sentence is kept whole only if it fits in
/// `max_tokens - overlap_tokens - 1`.
///
/// Whitespace is normalised first: runs of spaces and tabs become one space,
/// line breaks stay, runs of blank lines become one paragraph break. Empty or
/// blank input gives no chunks. `max_tokens` below 4 counts as 4, and the
/// overlap is at most half of `max_tokens`, so every chunk carries new text.
pub fn chunk_text(text: &str, max_tokens: u32, overlap_tokens: u32) -> Vec<Chunk> {
    let max_tokens = max_tokens.max(MIN_MAX_TOKENS);
    let overlap_tokens = overlap_tokens.min(max_tokens / 2);
    // Units leave room for a full overlap and its separator, so every chunk
    // after the first can start with one.
    let unit_max = if overlap_tokens == 0 {
        max_tokens
    } else {
        max_tokens - overlap_tokens - 1
    };
    let normalized = normalize_whitespace(text);
    let mut units = Vec::new();
    for (i, paragraph) in normalized.split(PARAGRAPH_BREAK).enumerate() {
        let sep = if i == 0 { "" } else { PARAGRAPH_BREAK };
        push_units(paragraph, Level::Paragraph, sep, unit_max, &mut units);
    }
    pack(&units, max_tokens, overlap_tokens)
}

const PARAGRAPH_BREAK: &str = "\n\n";

/// Lines with their spaces and tabs collapsed, blank lines collapsed into
/// single paragraph breaks, no leading or trailing whitespace.
fn normalize_whitespace(text: &str) -> String {
    let text = text.replace("\r\n", "\n");
    let mut out = String::with_capacity(text.len());
    let mut blank_before = false;
    for line in text.split([
        '\n', '\r', '\u{b}', '\u{c}', '\u{85}', '\u{2028}', '\u{2029}',
    ]) {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else {
            blank_before = !out.is_empty();
            continue;
        };
        if !out.is_empty() {
            out.push_str(if blank_before { PARAGRAPH_BREAK } else { "\n" });
        }
        blank_before = false;
        out.push_str(first);
        for word in words {
            out.push(' ');
            out.push_str(word);
        }
    }
    out
}

/// A run of text that goes into a chunk whole, with the separator that
/// joins it to the unit before it.
#[derive(Debug, Clone, Copy)]
struct Unit<'a> {
    sep: &'static str,
    text: &'a str,
    tokens: u32,
}

/// What a piece of text is; each level splits into the next finer one.
#[derive(Debug, Clone, Copy)]
enum Level {
    Paragraph,
    Sentence,
    Line,
    Word,
}

impl Level {
    /// The pieces one level finer, each with the separator before it.
    fn split(self, text: &str) -> Vec<(&'static str, &str)> {
        match self {
            Level::Paragraph => split_sentences(text),
            Level::Sentence => text.split('\n').map(|line| ("\n", line)).collect(),
            Level::Line => text.split(' ').map(|word| (" ", word)).collect(),
            Level::Word => vec![("", text)],
        }
    }

    fn finer(self) -> Option<Level> {
        match self {
            Level::Paragraph => Some(Level::Sentence),
            Level::Sentence => Some(Level::Line),
            Level::Line => Some(Level::Word),
            Level::Word => None,
        }
    }
}

/// Appends `text` as one unit if it fits in `max` tokens, else its pieces at
/// the first finer level that actually splits it.
fn push_units<'a>(
    text: &'a str,
    mut level: Level,
    sep: &'static str,
    max: u32,
    out: &mut Vec<Unit<'a>>,
) {
    if text.is_empty() {
        return;
    }
    let tokens = count_tokens(text);
    if tokens <= max {
        out.push(Unit { sep, text, tokens });
        return;
    }
    while let Some(finer) = level.finer() {
        let pieces = level.split(text);
        if pieces.len() > 1 {
            for (i, (piece_sep, piece)) in pieces.into_iter().enumerate() {
                let piece_sep = if i == 0 { sep } else { piece_sep };
                push_units(piece, finer, piece_sep, max, out);
            }
            return;
        }
        level = finer;
    }
    push_token_groups(text, sep, max, out);
}

/// Sentence ends: terminal punctuation (with any closing quotes or brackets)
/// followed by whitespace and not by a lower-case letter ("e.g. this" goes
/// on), or a CJK full stop, which needs no space after it.
fn split_sentences(text: &str) -> Vec<(&'static str, &str)> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut sep_before: &'static str = "";
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if !is_terminator(c) {
            continue;
        }
        let mut end = i + c.len_utf8();
        while let Some(&(j, next)) = chars.peek() {
            if !(is_terminator(next) || is_closer(next)) {
                break;
            }
            end = j + next.len_utf8();
            chars.next();
        }
        let (sep, next_start) = match chars.peek() {
            Some(&(j, ' ')) => (" ", j + 1),
            Some(&(j, '\n')) => ("\n", j + 1),
            Some(_) if is_cjk_terminator(c) => ("", end),
            _ => continue,
        };
        let continues_sentence = text[next_start..]
            .chars()
            .next()
            .is_some_and(char::is_lowercase);
        if continues_sentence {
            continue;
        }
        pieces.push((sep_before, &text[start..end]));
        sep_before = sep;
        start = next_start;
    }
    if start < text.len() {
        pieces.push((sep_before, &text[start..]));
    }
    pieces
}

fn is_terminator(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…') || is_cjk_terminator(c)
}

fn is_cjk_terminator(c: char) -> bool {
    matches!(c, '。' | '！' | '？')
}

fn is_closer(c: char) -> bool {
    matches!(c, '"' | '\'' | ')' | ']' | '”' | '’' | '»' | '」' | '』')
}

/// A word longer than a chunk, cut between tokens into pieces of at most `max`.
fn push_token_groups<'a>(text: &'a str, sep: &'static str, max: u32, out: &mut Vec<Unit<'a>>) {
    let mut group_start = 0;
    let mut group_tokens = 0;
    let mut offset = 0;
    let mut sep = sep;
    for piece in token_pieces(text) {
        let piece_tokens = count_tokens(&piece).max(1);
        if group_tokens + piece_tokens > max && offset > group_start {
            push_bounded(&text[group_start..offset], sep, max, out);
            sep = "";
            group_start = offset;
            group_tokens = 0;
        }
        group_tokens += piece_tokens;
        offset += piece.len();
    }
    // The pieces spell the text out exactly; `min` only guards the slice.
    push_bounded(&text[group_start..offset.min(text.len())], sep, max, out);
}

/// Pushes `text` whole when its exact count fits, else halves it at a
/// character boundary: a token-aligned substring can tokenise differently on
/// its own.
fn push_bounded<'a>(text: &'a str, sep: &'static str, max: u32, out: &mut Vec<Unit<'a>>) {
    if text.is_empty() {
        return;
    }
    let tokens = count_tokens(text);
    let mut chars = text.char_indices();
    let middle = chars.nth(text.chars().count() / 2).map(|(i, _)| i);
    match middle {
        Some(middle) if tokens > max && middle > 0 => {
            push_bounded(&text[..middle], sep, max, out);
            push_bounded(&text[middle..], "", max, out);
        }
        _ => out.push(Unit { sep, text, tokens }),
    }
}

/// Tokens a separator is assumed to add: a line break is its own token, a
/// space usually merges into the next word's token.
fn sep_tokens(sep: &str) -> u32 {
    u32::from(sep.contains('\n'))
}

/// Greedy packing: as many units as fit after the overlap, checked with an
/// exact count (token counts of parts only approximate the whole's).
fn pack(units: &[Unit<'_>], max: u32, overlap_budget: u32) -> Vec<Chunk> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut next = 0;
    while next < units.len() {
        let overlap = match chunks.last() {
            Some(previous) => overlap_tail(&previous.text, overlap_budget),
            None => ("", 0),
        };
        let (mut overlap, mut end) = fill(units, next, overlap, max);
        let mut text = join(overlap, &units[next..end]);
        let mut token_count = count_tokens(&text);
        while token_count > max {
            if end - next > 1 {
                end -= 1;
            } else if !overlap.is_empty() {
                overlap = "";
            } else {
                // Unreachable: each unit was counted to fit when it was made.
                break;
            }
            text = join(overlap, &units[next..end]);
            token_count = count_tokens(&text);
        }
        chunks.push(Chunk {
            index: chunks.len(),
            text,
            token_count,
        });
        next = end;
    }
    chunks
}

/// How far from `start` units fit after the overlap by estimate (at least
/// one unit), and the overlap itself, dropped when it and the first unit
/// do not fit together.
fn fill<'o>(
    units: &[Unit<'_>],
    start: usize,
    overlap: (&'o str, u32),
    max: u32,
) -> (&'o str, usize) {
    let first = &units[start];
    let (overlap, mut estimate) = if overlap.1 + sep_tokens(first.sep) + first.tokens > max {
        ("", 0)
    } else {
        overlap
    };
    let mut end = start;
    while let Some(unit) = units.get(end) {
        let sep_cost = if end == start && overlap.is_empty() {
            0
        } else {
            sep_tokens(unit.sep)
        };
        if end > start && estimate + sep_cost + unit.tokens > max {
            break;
        }
        estimate += sep_cost + unit.tokens;
        end += 1;
    }
    (overlap, end)
}

fn join(overlap: &str, units: &[Unit<'_>]) -> String {
    let mut text = String::from(overlap);
    for unit in units {
        if !text.is_empty() {
            text.push_str(unit.sep);
        }
        text.push_str(unit.text);
    }
    text
}

/// The longest run of whole words at the end of `text` within `budget`
/// tokens, with its exact count.
fn overlap_tail(text: &str, budget: u32) -> (&str, u32) {
    if budget == 0 {
        return ("", 0);
    }
    let mut start = text.len();
    let mut estimate = 0;
    let mut rest = text.trim_end();
    while !rest.is_empty() {
        let word_start = rest
            .char_indices()
            .rev()
            .find(|(_, c)| c.is_whitespace())
            .map_or(0, |(i, c)| i + c.len_utf8());
        let cost = count_tokens(&rest[word_start..]);
        if estimate + cost > budget {
            break;
        }
        estimate += cost;
        start = word_start;
        rest = rest[..word_start].trim_end();
    }
    let mut tail = &text[start..];
    loop {
        let tokens = count_tokens(tail);
        if tokens <= budget {
            return (tail, tokens);
        }
        // Drop the first word: counted alone, the words underestimated the run.
        tail = match tail.find(char::is_whitespace) {
            Some(space) => tail[space..].trim_start(),
            None => "",
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words_of(text: &str) -> Vec<String> {
        text.split_whitespace()
            .map(|word| word.trim_end_matches('.').to_owned())
            .collect()
    }

    /// `count` distinct words in sentences of 12 and paragraphs of 5 sentences.
    fn numbered_text(count: usize) -> String {
        let mut text = String::new();
        for i in 0..count {
            if i > 0 {
                text.push_str(if i % 60 == 0 { "\n\n" } else { " " });
            }
            text.push_str(&format!("w{i}"));
            if i % 12 == 11 {
                text.push('.');
            }
        }
        text
    }

    fn assert_within(chunks: &[Chunk], max: u32) {
        for (i, chunk) in chunks.iter().enumerate() {
            assert_eq!(chunk.index, i);
            assert!(!chunk.text.trim().is_empty(), "chunk {i} is empty");
            assert_eq!(chunk.token_count, count_tokens(&chunk.text));
            assert!(
                chunk.token_count <= max,
                "chunk {i} has {} tokens",
                chunk.token_count
            );
        }
    }

    #[test]
    fn knowledge_chunks_of_a_long_text_cover_every_word_once_past_the_overlap() {
        let text = numbered_text(5000);
        let (max, overlap) = (200, 30);
        let chunks = chunk_text(&text, max, overlap);
        assert!(chunks.len() > 10, "{} chunks", chunks.len());
        assert_within(&chunks, max);

        let mut covered: Vec<String> = words_of(&chunks[0].text);
        for pair in chunks.windows(2) {
            let previous = words_of(&pair[0].text);
            let current = words_of(&pair[1].text);
            // Words are unique: the overlap is where the current chunk's
            // first word sits in the previous chunk.
            let at = previous
                .iter()
                .position(|word| *word == current[0])
                .unwrap_or_else(|| panic!("chunk {} has no overlap", pair[1].index));
            let shared = previous.len() - at;
            assert_eq!(previous[at..], current[..shared], "overlap is the tail");
            assert!(shared < current.len(), "chunk {} adds words", pair[1].index);
            let overlap_text = current[..shared].join(" ");
            assert!(count_tokens(&overlap_text) <= overlap + 2, "{overlap_text}");
            covered.extend_from_slice(&current[shared..]);
        }
        assert_eq!(covered, words_of(&text));
    }

    #[test]
    fn knowledge_paragraphs_that_fit_are_never_split() {
        let paragraphs: Vec<String> = (0..6)
            .map(|p| {
                (0..3)
                    .map(|s| {
                        format!(
                            "Paragraph {p} sentence {s} talks about topic number {}.",
                            p * 10 + s
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let max = count_tokens(&paragraphs[0]) * 2 + 5;
        let chunks = chunk_text(&paragraphs.join("\n\n"), max, 0);
        assert_within(&chunks, max);
        assert!(chunks.len() >= 3);
        let rejoined: Vec<&str> = chunks.iter().flat_map(|c| c.text.split("\n\n")).collect();
        assert_eq!(rejoined, paragraphs);
    }

    #[test]
    fn knowledge_long_paragraph_splits_at_sentence_ends() {
        let sentences: Vec<String> = (0..40)
            .map(|i| format!("Sentence number {i} is about the e.g. case of item {i}."))
            .collect();
        let chunks = chunk_text(&sentences.join(" "), 60, 0);
        assert_within(&chunks, 60);
        for chunk in &chunks {
            assert!(chunk.text.starts_with("Sentence number"), "{}", chunk.text);
            assert!(chunk.text.ends_with('.'), "{}", chunk.text);
        }
    }

    #[test]
    fn knowledge_overlong_sentence_splits_between_words() {
        let words: Vec<String> = (0..1500).map(|i| format!("word{i}")).collect();
        let text = words.join(" ");
        let chunks = chunk_text(&text, 50, 10);
        assert_within(&chunks, 50);
        for chunk in &chunks {
            for word in chunk.text.split(' ') {
                assert!(words.contains(&word.to_owned()), "`{word}` is cut");
            }
        }
        assert_eq!(
            chunks.last().map(|c| c.text.ends_with("word1499")),
            Some(true)
        );
    }

    #[test]
    fn knowledge_overlong_word_splits_by_tokens() {
        let word: String = (0..3000)
            .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
            .collect();
        let chunks = chunk_text(&word, 64, 0);
        assert!(chunks.len() > 1);
        assert_within(&chunks, 64);
        let rejoined: String = chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(rejoined, word);
    }

    #[test]
    fn knowledge_multibyte_text_never_breaks_a_character() {
        let text = "知識ベースの文章です。".repeat(300);
        let chunks = chunk_text(&text, 16, 4);
        assert_within(&chunks, 16);
    }

    #[test]
    fn knowledge_whitespace_is_normalised_and_blank_input_gives_no_chunks() {
        assert!(chunk_text("", 100, 10).is_empty());
        assert!(chunk_text(" \n\t\r\n \n", 100, 10).is_empty());
        let chunks = chunk_text("  a \t b\r\n\r\n\r\n c  \nd ", 100, 10);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].text, "a b\n\nc\nd");
        assert_eq!(chunks[0].index, 0);
    }

    #[test]
    fn knowledge_tiny_limits_still_make_progress() {
        let chunks = chunk_text("one two three four five six", 1, 5);
        assert_within(&chunks, MIN_MAX_TOKENS);
        let text: Vec<String> = chunks.iter().flat_map(|c| words_of(&c.text)).collect();
        assert!(text.contains(&"six".to_owned()));
    }
}
