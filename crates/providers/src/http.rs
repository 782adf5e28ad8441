//! What the HTTP adapters share: one retry policy and one classification of
//! failures. Connection errors, timeouts, 408, 429 and 5xx are transient and
//! retried with backoff (honouring `Retry-After`); other 4xx are permanent
//! with the upstream's short message.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

use unigen_core::ProviderError;

/// Retries after the first try.
pub const MAX_RETRIES: usize = 3;
/// A longer `Retry-After` is cut to this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A failed attempt: the error and how long the upstream asked us to wait.
pub struct Attempt {
    pub error: ProviderError,
    pub retry_after: Option<Duration>,
}

impl Attempt {
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            error: ProviderError::Permanent(message.into()),
            retry_after: None,
        }
    }
}

/// Runs `attempt` until it succeeds, fails permanently, or the retries are used up.
pub async fn with_retries<T, F, Fut>(attempt: F) -> Result<T, ProviderError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Attempt>>,
{
    attempt
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(200))
                .with_max_delay(Duration::from_secs(10))
                .with_max_times(MAX_RETRIES)
                .with_jitter(),
        )
        .when(|failed: &Attempt| matches!(failed.error, ProviderError::Transient(_)))
        // `None` from `planned` means no retries left: keep it `None`, or
        // an upstream that always sends Retry-After is retried forever.
        .adjust(|failed: &Attempt, planned| planned.map(|p| failed.retry_after.unwrap_or(p)))
        .await
        .map_err(|failed| failed.error)
}

pub fn connection_failure(err: reqwest::Error) -> Attempt {
    let reason = if err.is_timeout() {
        "the upstream timed out"
    } else {
        "the upstream could not be reached"
    };
    Attempt {
        error: ProviderError::Transient(reason.into()),
        retry_after: None,
    }
}

/// Adds the bearer key, when there is one.
pub fn bearer(request: reqwest::RequestBuilder, api_key: &str) -> reqwest::RequestBuilder {
    if api_key.is_empty() {
        request
    } else {
        request.bearer_auth(api_key)
    }
}

/// The answer's `Retry-After` in seconds, cut to [`MAX_RETRY_AFTER`].
pub fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|secs| Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

/// Classifies a non-success answer. `message` picks the upstream's short
/// explanation out of a JSON error body (it must not return secrets).
pub async fn status_failure(
    response: reqwest::Response,
    message: impl FnOnce(&serde_json::Value) -> Option<String>,
) -> Attempt {
    let status = response.status();
    let retry_after = retry_after(&response);
    let error = match status.as_u16() {
        408 | 429 | 500..=599 => {
            ProviderError::Transient(format!("the upstream answered {status}"))
        }
        _ => {
            let body = response.text().await.unwrap_or_default();
            let explained = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .as_ref()
                .and_then(message);
            ProviderError::Permanent(
                explained
                    .unwrap_or_else(|| format!("the upstream rejected the request ({status})")),
            )
        }
    };
    Attempt { error, retry_after }
}
