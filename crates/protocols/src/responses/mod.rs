//! OpenAI's Responses API (`POST /v1/responses`) bridged through the
//! internal chat completion request (OpenAI's chat shape):
//!
//! - [`request`]: a Responses request read field by field and checked; what
//!   the bridge cannot honour is an [`Invalid`] naming the field (never
//!   dropped); then translated into a chat completion request body.
//! - [`items`]: input items (messages with `input_text` / `input_image`
//!   parts, `function_call`, `function_call_output`) in their stored shape,
//!   and a conversation of items as chat messages.
//! - [`output`]: a chat answer as output items, the status, the usage and
//!   the `response` object.
//! - [`stream`]: a chat chunk stream as the typed Responses events, in
//!   order, with `sequence_number`.
//! - [`list`]: a page of a response's input items.
//! - [`background`]: `background: true` responses as jobs: ids, statuses
//!   and the object polled before the answer exists.
//! - [`native`]: a request passed through to an upstream that speaks the
//!   Responses API natively: the fields the service reads, the input items
//!   it stores, what the hold counts.
//!
//! Nothing here reads a clock or draws a random number: ids are minted
//! from a base the caller gives ([`Ids`]), times are passed in.

pub mod background;
mod ids;
mod invalid;
pub mod items;
pub mod list;
pub mod native;
pub mod output;
pub mod request;
pub mod stream;

pub use ids::Ids;
pub use invalid::Invalid;
pub use request::{ResponsesRequest, parse_request};

/// The Responses name of a chat request field that the chat validation
/// refused (`max_completion_tokens` was `max_output_tokens`, `messages` was
/// built from `input` and `instructions`, `response_format` from
/// `text.format`).
pub fn responses_param(chat_field: &str) -> &str {
    match chat_field {
        "max_tokens" | "max_completion_tokens" => "max_output_tokens",
        "messages" => "input",
        "response_format" => "text.format",
        "reasoning_effort" => "reasoning.effort",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_carry_their_prefix_and_base() {
        let mut ids = Ids::new("0193ab");
        let (a, b) = (ids.mint("msg"), ids.mint("fc"));
        assert_eq!(a, "msg_0193ab0000");
        assert_eq!(b, "fc_0193ab0001");
    }

    #[test]
    fn chat_fields_are_named_as_the_client_sent_them() {
        assert_eq!(
            responses_param("max_completion_tokens"),
            "max_output_tokens"
        );
        assert_eq!(responses_param("max_tokens"), "max_output_tokens");
        assert_eq!(responses_param("messages"), "input");
        assert_eq!(responses_param("response_format"), "text.format");
        assert_eq!(responses_param("temperature"), "temperature");
        assert_eq!(Invalid::new("a", "b").to_string(), "b");
    }
}
