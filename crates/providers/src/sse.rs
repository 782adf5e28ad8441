//! Server-sent events out of an upstream's streamed body
//! (`eventsource-stream` does the parsing): what the vendors' streaming
//! endpoints answer.

use futures_util::{Stream, StreamExt};
use unigen_core::ProviderError;

pub use eventsource_stream::Event;

/// The events of `bytes`; a broken connection (or an unreadable stream)
/// is one transient error, after which the stream ends.
pub fn events<S, B, E>(bytes: S) -> impl Stream<Item = Result<Event, ProviderError>> + Send
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    use eventsource_stream::Eventsource;
    bytes.eventsource().scan(false, |broken, event| {
        let item = if *broken {
            None
        } else {
            Some(event.map_err(|_| {
                *broken = true;
                ProviderError::Transient("the upstream stream broke off".into())
            }))
        };
        std::future::ready(item)
    })
}
