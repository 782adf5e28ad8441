//! `[webhooks]` settings.

use std::time::Duration;

use serde::Deserialize;

/// `[webhooks]`: `retry_delays_ms`, `timeout_ms`, `lease_margin_ms`,
/// `concurrency`, `poll_seconds`, `disable_after_failures`,
/// `allow_private_addresses`, `event_retention_seconds`,
/// `max_in_flight_per_org`, `max_in_flight_per_webhook`,
/// `manual_sends_per_minute`, `replay_max_per_call`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct WebhookSettings {
    /// Waits after failed attempt 1, 2, ...; a delivery gets one attempt more
    /// than this list has entries (spec: 30 s, 2 min, 10 min, 1 h -> 5 attempts).
    pub retry_delays_ms: Vec<u64>,
    /// One attempt's limit (connect, send, answer).
    pub timeout_ms: u64,
    /// Added to the timeout for the claim's lease: a delivery whose scheduler
    /// died mid-attempt is due again after `timeout_ms + lease_margin_ms`.
    pub lease_margin_ms: u64,
    /// Attempts in flight per scheduler process.
    pub concurrency: usize,
    /// Safety-net re-check when no notification arrives.
    pub poll_seconds: u64,
    /// Consecutive failed deliveries that disable a webhook.
    pub disable_after_failures: i32,
    /// Allows http:// and private, loopback and link-local targets (tests).
    pub allow_private_addresses: bool,
    /// Events, with their deliveries and attempts, are deleted this long
    /// after they were recorded, once none of their deliveries is pending;
    /// 0 keeps them forever.
    pub event_retention_seconds: u64,
    /// Attempts in flight at once for one organization's webhooks, across
    /// every scheduler: a slow receiver holds at most this many of the
    /// schedulers' slots, and claims take each organization in turn.
    pub max_in_flight_per_org: i64,
    /// Attempts in flight at once for one webhook, across every scheduler.
    pub max_in_flight_per_webhook: i64,
    /// Manual sends (test events, redeliveries, replays) one webhook takes
    /// in a minute; more are answered 429 with `Retry-After`.
    pub manual_sends_per_minute: i32,
    /// Deliveries one replay queues at most; the answer's `remaining` says
    /// how many more a further replay would take.
    pub replay_max_per_call: i64,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            retry_delays_ms: vec![30_000, 120_000, 600_000, 3_600_000],
            timeout_ms: 10_000,
            lease_margin_ms: 5_000,
            concurrency: 16,
            poll_seconds: 30,
            disable_after_failures: 10,
            allow_private_addresses: false,
            event_retention_seconds: 30 * 24 * 3600,
            max_in_flight_per_org: 8,
            max_in_flight_per_webhook: 4,
            manual_sends_per_minute: 60,
            replay_max_per_call: 100,
        }
    }
}

impl WebhookSettings {
    pub fn max_attempts(&self) -> i32 {
        self.retry_delays_ms.len() as i32 + 1
    }

    /// The wait after failed attempt `attempt` (1-based); `None` once the
    /// delivery has had all its attempts.
    pub fn retry_delay(&self, attempt: i32) -> Option<Duration> {
        let index = usize::try_from(attempt).ok()?.checked_sub(1)?;
        self.retry_delays_ms
            .get(index)
            .map(|ms| Duration::from_millis(*ms))
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }

    pub fn lease(&self) -> Duration {
        self.timeout() + Duration::from_millis(self.lease_margin_ms)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.concurrency == 0 {
            return Err("webhooks.concurrency must be at least 1".into());
        }
        if self.disable_after_failures < 1 {
            return Err("webhooks.disable_after_failures must be at least 1".into());
        }
        if self.max_in_flight_per_org < 1 || self.max_in_flight_per_webhook < 1 {
            return Err(
                "webhooks.max_in_flight_per_org and max_in_flight_per_webhook must be at least 1"
                    .into(),
            );
        }
        if self.manual_sends_per_minute < 1 || self.replay_max_per_call < 1 {
            return Err(
                "webhooks.manual_sends_per_minute and replay_max_per_call must be at least 1"
                    .into(),
            );
        }
        Ok(())
    }
}
