//! Anthropic's Messages API (`POST /v1/messages`) and the internal chat
//! completion request (OpenAI's chat shape), both ways:
//!
//! - [`request`]: a Messages request read, checked and translated into a
//!   chat completion request body. What only a native Anthropic upstream
//!   can honour (`top_k`, `thinking`, server tools, documents...) is listed
//!   apart ([`request::MessagesRequest::bridge_refusals`]): a model bridged
//!   through chat answers such a request with a 400 naming it, never by
//!   dropping it.
//! - [`response`]: a chat completion's answer as a Messages answer, and the
//!   chunk stream as Anthropic's server-sent events, in their order.
//! - [`error`]: Anthropic's error body and its statuses.

pub mod error;
pub mod request;
pub mod response;

pub use error::{ErrorKind, error_body};
pub use request::{Invalid, MessagesRequest, parse_count_tokens, parse_request};
pub use response::{Event, StreamTranslator, stop_reason, to_message};
