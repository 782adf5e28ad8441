//! What the HTTP adapters share: one retry policy and one classification of
//! failures. Connection errors, timeouts, 408, 429 and 5xx are transient and
//! retried with backoff (honouring `Retry-After`); other 4xx are permanent
//! with the upstream's short message.
//!
//! That message reaches the tenant, so it is cleaned first, whatever the
//! adapter: every configured upstream key is redacted (as fal and Replicate
//! always did), and so is anything shaped like a credential; an answer
//! about this server's own provider account (401, 402, 403, quota,
//! billing, credentials) becomes one neutral message, since it says nothing
//! about the tenant's request and much about the operator's account.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

use unigen_core::ProviderError;
use unigen_core::telemetry::spans;

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
        // A retry is an event of the attempt's GenAI span (none with tracing off).
        .notify(|failed: &Attempt, wait: Duration| {
            let kind = spans::provider_error_type(&failed.error);
            let wait_ms = wait.as_millis() as i64;
            tracing::info!(target: spans::TARGET, reason = kind, wait_ms, "retry");
        })
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

/// What a tenant is told when an upstream refused this server's account
/// (credentials, quota, billing) rather than the request.
pub const ACCOUNT_UNAVAILABLE: &str = "the model's provider is not available to this server right now; try again later or use another model";

/// Every key configured for an upstream (registered as the upstreams are
/// built): redacted from any upstream text a tenant may see.
static SECRETS: std::sync::RwLock<Vec<String>> = std::sync::RwLock::new(Vec::new());

/// Adds a configured key to those [`clean_message`] redacts.
pub fn register_secret(secret: &str) {
    let secret = secret.trim();
    // Shorter values would redact ordinary words.
    if secret.len() < 8 {
        return;
    }
    let mut secrets = SECRETS.write().unwrap_or_else(|e| e.into_inner());
    if !secrets.iter().any(|known| known == secret) {
        secrets.push(secret.to_owned());
    }
}

/// Words in an upstream's error that mean this server's account, not the
/// tenant's request, is the problem.
const ACCOUNT_WORDS: [&str; 16] = [
    "quota",
    "billing",
    "credit balance",
    "credits",
    "payment",
    "insufficient_quota",
    "api key",
    "api_key",
    "apikey",
    "x-api-key",
    "authenticat",
    "unauthori",
    "permission_denied",
    "permission denied",
    "subscription",
    "your account",
];

/// Prefixes of the providers' key formats.
const KEY_PREFIXES: [&str; 11] = [
    "sk-", "sk_", "AIza", "r8_", "gsk_", "xai-", "hf_", "fal_", "key-", "whsec_", "pk_",
];

/// An upstream's error text as a tenant may see it (see the module's
/// documentation): the neutral [`ACCOUNT_UNAVAILABLE`] when it is about this
/// server's account.
pub fn clean_message(status: u16, text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    if (401..=403).contains(&status) || ACCOUNT_WORDS.iter().any(|w| lower.contains(w)) {
        return ACCOUNT_UNAVAILABLE.to_owned();
    }
    let mut text = text.to_owned();
    for secret in SECRETS.read().unwrap_or_else(|e| e.into_inner()).iter() {
        text = text.replace(secret.as_str(), "<redacted>");
    }
    redact_credentials(&text)
}

/// Words shaped like credentials (a provider key prefix, or a long run of
/// letters and digits mixed, without the dashes and dots of model names)
/// replaced by `<redacted>`.
fn redact_credentials(text: &str) -> String {
    let is_key_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '*');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(is_key_char) {
        out.push_str(&rest[..start]);
        let word_len = rest[start..]
            .find(|c: char| !is_key_char(c))
            .unwrap_or(rest.len() - start);
        let word = &rest[start..start + word_len];
        let prefixed = KEY_PREFIXES.iter().any(|p| word.starts_with(p)) && word.len() >= 12;
        let long_mixed = word.len() >= 32
            && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && word.chars().any(|c| c.is_ascii_digit())
            && word.chars().any(|c| c.is_ascii_alphabetic());
        if prefixed || long_mixed {
            out.push_str("<redacted>");
        } else {
            out.push_str(word);
        }
        rest = &rest[start + word_len..];
    }
    out.push_str(rest);
    out
}

/// Classifies a non-success answer. `message` picks the upstream's short
/// explanation out of a JSON error body; it is cleaned ([`clean_message`])
/// before it goes anywhere.
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
        401..=403 => ProviderError::Permanent(ACCOUNT_UNAVAILABLE.to_owned()),
        code => {
            let body = response.text().await.unwrap_or_default();
            let explained = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .as_ref()
                .and_then(message)
                .map(|text| clean_message(code, &text));
            ProviderError::Permanent(
                explained
                    .unwrap_or_else(|| format!("the upstream rejected the request ({status})")),
            )
        }
    };
    Attempt { error, retry_after }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use unigen_core::config::UpstreamSettings;
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;
    use crate::anthropic::AnthropicClient;
    use crate::gemini::GeminiClient;
    use crate::openai::OpenAiClient;
    use crate::vendor::ChatUpstream;

    #[test]
    fn account_errors_are_neutral_and_credentials_are_redacted() {
        for (status, text) in [
            (401, "Incorrect API key provided: sk-abc***xyz"),
            (403, "PERMISSION_DENIED"),
            (
                400,
                "Your credit balance is too low to access the Anthropic API.",
            ),
            (
                400,
                "You exceeded your current quota, please check your plan and billing details.",
            ),
            (400, "API key not valid. Please pass a valid API key."),
        ] {
            assert_eq!(clean_message(status, text), ACCOUNT_UNAVAILABLE, "{text}");
        }
        let cleaned = clean_message(
            400,
            "bad value near sk-proj-0123456789abcdef and AIzaSyA0123456789 (req 9f8e7d6c5b4a39281706f5e4d3c2b1a0)",
        );
        assert_eq!(
            cleaned,
            "bad value near <redacted> and <redacted> (req <redacted>)"
        );
        // Ordinary explanations pass unchanged, model names included.
        let plain = "messages[0].content must be a string or an array of parts";
        assert_eq!(clean_message(400, plain), plain);
        let model = "model gemini-2.0-flash-thinking-exp-01-21-preview-0042 is not found";
        assert_eq!(clean_message(404, model), model);
        register_secret("plain-words-secret");
        assert_eq!(
            clean_message(400, "value plain-words-secret is wrong"),
            "value <redacted> is wrong"
        );
    }

    /// Each adapter's chat call against an upstream answering `status` with
    /// `message`: the error its caller (and so the tenant) sees.
    async fn errors_seen(status: u16, message: &str) -> Vec<String> {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(status).set_body_json(json!({"error": {"message": message}})),
            )
            .mount(&server)
            .await;
        let settings = UpstreamSettings {
            base_url: server.uri(),
            api_key: "operator-key-0042".into(),
            timeout_seconds: 5,
            ..Default::default()
        };
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let mut seen = Vec::new();
        for result in [
            OpenAiClient::new(&settings).chat(&body).await,
            AnthropicClient::new(&settings).chat(&body).await,
            GeminiClient::new(&settings).chat(&body).await,
        ] {
            seen.push(result.expect_err("the upstream refused").to_string());
        }
        seen
    }

    #[tokio::test]
    async fn openai_anthropic_and_gemini_never_pass_on_a_key_or_the_operators_account() {
        for seen in errors_seen(400, "unknown parameter near operator-key-0042").await {
            assert_eq!(seen, "unknown parameter near <redacted>");
        }
        for seen in errors_seen(400, "Your credit balance is too low to access the API").await {
            assert_eq!(seen, ACCOUNT_UNAVAILABLE);
        }
        for seen in errors_seen(401, "Incorrect API key provided: operator-key-0042").await {
            assert_eq!(seen, ACCOUNT_UNAVAILABLE);
        }
    }
}
