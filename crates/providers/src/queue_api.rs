//! What the vendors' queue APIs (fal's requests, Replicate's predictions)
//! share: submit, poll with a growing pause, cancel upstream when the job is
//! cancelled, the deadline passes or polling breaks down, and download the
//! output with a size cap. Each adapter says how its vendor names and reads
//! things; the order of the steps and what is cancelled when lives here.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use unigen_core::ProviderError;
use unigen_core::config::UpstreamSettings;

use crate::http::{Attempt, with_retries};
use crate::outputs::{OutputSource, read_capped};
use crate::upstream::{Auth, Upstream};

/// Polling starts this often and slows down to `MAX_POLL`.
const FIRST_POLL: Duration = Duration::from_millis(500);
const MAX_POLL: Duration = Duration::from_secs(5);
/// A best-effort cancel request waits at most this long.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(10);

/// One configured queue API.
#[derive(Clone)]
pub(crate) struct QueueApi {
    pub base_url: String,
    /// Every configured key: redacted from whatever an error quotes.
    api_keys: Vec<String>,
    pub timeout: Duration,
    first_poll: Duration,
    max_poll: Duration,
    /// The API itself (keys in turn, configured headers).
    pub upstream: Upstream,
}

impl std::fmt::Debug for QueueApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("QueueApi")
            .field("base_url", &self.base_url)
            .field("keys", &self.api_keys.len())
            .field("timeout", &self.timeout)
            .field("first_poll", &self.first_poll)
            .field("max_poll", &self.max_poll)
            .finish_non_exhaustive()
    }
}

impl QueueApi {
    pub fn new(settings: &UpstreamSettings, auth: Auth) -> Self {
        Self {
            base_url: settings.base_url.trim_end_matches('/').to_owned(),
            api_keys: settings.keys(),
            upstream: Upstream::new(settings, auth, &[]),
            timeout: Duration::from_secs(settings.timeout_seconds),
            first_poll: FIRST_POLL,
            max_poll: MAX_POLL,
        }
    }

    /// Tests poll in milliseconds rather than seconds.
    #[cfg(test)]
    pub fn with_polling(mut self, first: Duration, max: Duration) -> Self {
        self.first_poll = first;
        self.max_poll = max;
        self
    }

    /// The pauses between polls: `first_poll`, growing x1.5 to `max_poll`.
    pub fn pauses(&self) -> impl Iterator<Item = Duration> + use<> {
        let max = self.max_poll;
        std::iter::successors(Some(self.first_poll), move |pause| {
            Some(pause.mul_f64(1.5).min(max))
        })
    }

    /// The timeout of a best-effort cancel request.
    pub fn cancel_timeout(&self) -> Duration {
        self.timeout.min(CANCEL_TIMEOUT)
    }

    /// A link the vendor answered that may be followed with the key.
    pub fn is_api_url(&self, url: &str) -> bool {
        url.strip_prefix(self.base_url.as_str())
            .is_some_and(|rest| rest.starts_with('/'))
    }

    /// `text` without the key, cut to `max_chars` characters.
    pub fn clip(&self, text: &str, max_chars: usize) -> String {
        let text = self
            .api_keys
            .iter()
            .fold(text.to_owned(), |text, key| text.replace(key, "<redacted>"));
        text.chars().take(max_chars).collect()
    }

    /// Downloads an output file URL with a size cap (bytes, enforced while
    /// the body streams) and the client's timeout over the whole download.
    /// Only http(s), and never a private, loopback or link-local address,
    /// directly or through a redirect, except the configured API's own
    /// origin (`outputs`). With `key_to_api`, the first key goes to URLs
    /// under the API's origin (its files API), never elsewhere.
    pub async fn download<F, Fut>(
        &self,
        url: &str,
        max_bytes: usize,
        key_to_api: bool,
        status_failure: F,
    ) -> Result<Vec<u8>, ProviderError>
    where
        F: Fn(reqwest::Response) -> Fut,
        Fut: Future<Output = Attempt>,
    {
        let source = OutputSource {
            base_url: &self.base_url,
            api_key: key_to_api
                .then(|| self.api_keys.first().map(String::as_str))
                .flatten(),
            timeout: self.timeout,
        };
        with_retries(|| async {
            let response = source.open(url).await?;
            if !response.status().is_success() {
                return Err(status_failure(response).await);
            }
            read_capped(response, max_bytes).await
        })
        .await
    }
}

/// Why waiting for a submitted run stopped without its result.
pub(crate) enum Stop {
    /// The run ended upstream (failed, canceled, its result refused):
    /// nothing to cancel.
    Ended(ProviderError),
    /// Polling broke down: the run may still be going.
    Lost(ProviderError),
}

/// One run: `submit` until the vendor names it (before that there is nothing
/// to cancel), then `wait` for its result. `cancel` firing or `deadline`
/// passing, or polling breaking down, sends `cancel_upstream` (best effort)
/// so nothing keeps running, and billing, unobserved. `noun` names the run
/// in the deadline's message ("request", "prediction").
pub(crate) async fn drive<H, W, C>(
    cancel: &CancellationToken,
    deadline: Duration,
    noun: &str,
    submit: impl Future<Output = Result<H, ProviderError>>,
    wait: impl FnOnce(H) -> W,
    cancel_upstream: impl FnOnce(H) -> C,
) -> Result<Value, ProviderError>
where
    H: Clone,
    W: Future<Output = Result<Value, Stop>>,
    C: Future<Output = ()>,
{
    let until = tokio::time::Instant::now() + deadline;
    let submitted = tokio::select! {
        biased;
        () = cancel.cancelled() => return Err(cancelled()),
        () = tokio::time::sleep_until(until) => return Err(timed_out(noun, deadline)),
        submitted = submit => submitted?,
    };
    let stopped = tokio::select! {
        biased;
        () = cancel.cancelled() => cancelled(),
        () = tokio::time::sleep_until(until) => timed_out(noun, deadline),
        outcome = wait(submitted.clone()) => match outcome {
            Ok(result) => return Ok(result),
            Err(Stop::Ended(error)) => return Err(error),
            Err(Stop::Lost(error)) => error,
        },
    };
    cancel_upstream(submitted).await;
    Err(stopped)
}

fn cancelled() -> ProviderError {
    ProviderError::Permanent("cancelled".into())
}

fn timed_out(noun: &str, deadline: Duration) -> ProviderError {
    let secs = deadline.as_secs() + u64::from(deadline.subsec_nanos() > 0);
    ProviderError::Transient(format!("the {noun} did not finish within {secs}s"))
}
