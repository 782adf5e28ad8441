//! Honest offline test models for chat and embeddings, documented as such:
//! they exercise the whole API (validation, streaming, usage, errors) without
//! an upstream, and are not language models.
//!
//! - `echo`: answers with the last user message, token by token; stop
//!   sequences and `max_tokens` apply as with a real model.
//! - embeddings: signed feature hashing of words and character trigrams,
//!   L2-normalised, so texts sharing words and spellings are closer.

use crate::chat::{ChatParams, count_prompt_tokens, token_pieces};

/// A finished completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub text: String,
    /// Pieces as streamed (each one token or more).
    pub pieces: Vec<String>,
    /// `stop` or `length`.
    pub finish_reason: &'static str,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
}

/// The echo model's reply to `params`.
pub fn echo(params: &ChatParams) -> Completion {
    let last_user = params.last_user_text();
    let mut text = last_user;
    let mut finish_reason = "stop";
    if let Some(cut) = params
        .stop
        .iter()
        .filter_map(|s| text.find(s.as_str()))
        .min()
    {
        text.truncate(cut);
    }
    let mut pieces = token_pieces(&text);
    if pieces.len() > params.max_tokens as usize {
        pieces.truncate(params.max_tokens as usize);
        finish_reason = "length";
        text = pieces.concat();
    }
    Completion {
        completion_tokens: pieces.len() as u32,
        prompt_tokens: count_prompt_tokens(&params.messages),
        text,
        pieces,
        finish_reason,
    }
}

pub const DEFAULT_EMBEDDING_DIMENSIONS: u32 = 256;

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A deterministic unit vector of `dimensions` for `text`.
pub fn embed(text: &str, dimensions: u32) -> Vec<f32> {
    let dims = dimensions.max(1) as usize;
    let mut vector = vec![0f32; dims];
    let mut add = |feature: &[u8], weight: f32| {
        let hash = fnv1a(feature);
        let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
        vector[(hash % dims as u64) as usize] += sign * weight;
    };
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    for word in &words {
        add(word.as_bytes(), 1.0);
        let padded: Vec<char> = format!(" {word} ").chars().collect();
        for gram in padded.windows(3) {
            add(gram.iter().collect::<String>().as_bytes(), 0.5);
        }
    }
    if words.is_empty() {
        add(lower.as_bytes(), 1.0);
    }
    let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|v| *v /= norm);
    }
    vector
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ChatCompletionRequest;

    fn params(json: serde_json::Value) -> ChatParams {
        serde_json::from_value::<ChatCompletionRequest>(json)
            .unwrap()
            .validate(false, false)
            .unwrap()
    }

    #[test]
    fn echo_answers_the_last_user_message_and_honours_stop_and_max_tokens() {
        let reply = echo(&params(serde_json::json!({"messages": [
            {"role": "system", "content": "be brief"}, {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"}, {"role": "user", "content": "Hello there, world"}]})));
        assert_eq!(
            (reply.text.as_str(), reply.finish_reason),
            ("Hello there, world", "stop")
        );
        assert_eq!(reply.pieces.concat(), reply.text);
        assert_eq!(reply.completion_tokens as usize, reply.pieces.len());
        assert!(reply.prompt_tokens > 10);
        let stopped = echo(&params(
            serde_json::json!({"messages": [{"role": "user", "content": "one two END three"}], "stop": ["END"]}),
        ));
        assert_eq!(stopped.text, "one two ");
        let short = echo(&params(
            serde_json::json!({"messages": [{"role": "user", "content": "a b c d e f g"}], "max_tokens": 3}),
        ));
        assert_eq!(
            (short.completion_tokens, short.finish_reason),
            (3, "length")
        );
    }

    #[test]
    fn embeddings_are_unit_vectors_and_similar_texts_are_closer() {
        let cos = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let cat = embed("The cat sat on the mat", 256);
        let cats = embed("A cat sitting on a mat", 256);
        let stocks = embed("Quarterly earnings beat market expectations", 256);
        assert!((cos(&cat, &cat) - 1.0).abs() < 1e-5);
        assert!(
            cos(&cat, &cats) > cos(&cat, &stocks) + 0.2,
            "{} vs {}",
            cos(&cat, &cats),
            cos(&cat, &stocks)
        );
        assert_eq!(embed("same", 64), embed("same", 64));
        assert_eq!(embed("x", 17).len(), 17);
        assert!((embed("?!", 8).iter().map(|v| v * v).sum::<f32>() - 1.0).abs() < 1e-5);
    }
}
