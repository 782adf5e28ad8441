//! Webhook delivery: claims due deliveries (several schedulers share the
//! work through SKIP LOCKED and a lease), POSTs each signed event with a
//! bounded number in flight, and records every attempt.
//!
//! A delivery's first attempt starts when the event's commit is announced
//! ([`EVENTS_RECORDED`]); retries start when they fall due: the loop sleeps
//! until the earliest `next_attempt_at`, at most `poll_seconds` (the safety
//! net for a lost notification).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use unigen_db::notify::{EVENTS_RECORDED, ListenerHub};
use unigen_db::queries::webhooks as queries;
use unigen_db::queries::webhooks::{ClaimedDelivery, Settled};
use unigen_db::{DbError, PgPool};
use unigen_jobs::webhooks::{DeliveryClient, SignedRequest, WebhookSettings};

use crate::metrics::SchedulerMetrics;

/// Shortest sleep when something is already due but was not claimable
/// (another scheduler holds it for the moment): never spin.
const MIN_PAUSE: Duration = Duration::from_millis(50);
const ERROR_PAUSE: Duration = Duration::from_secs(1);

pub struct WebhookDelivery {
    pool: PgPool,
    client: DeliveryClient,
    settings: WebhookSettings,
    hub: ListenerHub,
    metrics: Arc<SchedulerMetrics>,
}

impl WebhookDelivery {
    pub fn new(
        pool: PgPool,
        settings: WebhookSettings,
        hub: ListenerHub,
        metrics: Arc<SchedulerMetrics>,
    ) -> Self {
        Self {
            pool,
            client: DeliveryClient::new(&settings),
            settings,
            hub,
            metrics,
        }
    }

    /// Delivers until `shutdown`, then lets attempts in flight finish (they
    /// are bounded by the attempt timeout). Dropping this future aborts them:
    /// their leases expire and another round retries them.
    pub async fn run(self, shutdown: CancellationToken) {
        // Subscribed before the first claim: a wake-up during a round is kept.
        let mut wake = self.hub.subscribe(EVENTS_RECORDED);
        let mut in_flight = JoinSet::new();
        let poll = Duration::from_secs(self.settings.poll_seconds.max(1));
        while !shutdown.is_cancelled() {
            let free = self.settings.concurrency.saturating_sub(in_flight.len());
            let pause = if free == 0 {
                poll
            } else {
                match self.claim_and_start(free, &mut in_flight).await {
                    // A full batch: more may be due at once.
                    Ok(claimed) if claimed == free => continue,
                    Ok(_) => self.until_next_due(poll).await,
                    Err(err) => {
                        tracing::warn!(error = %err, "claiming webhook deliveries failed");
                        ERROR_PAUSE
                    }
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = wake.changed() => {}
                Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
        let drain = async { while in_flight.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(self.settings.lease(), drain).await;
    }

    async fn claim_and_start(
        &self,
        limit: usize,
        in_flight: &mut JoinSet<()>,
    ) -> Result<usize, DbError> {
        let claimed = {
            let mut conn = self.pool.get().await?;
            queries::claim_due(&mut conn, limit as i64, &self.settings).await?
        };
        let count = claimed.len();
        for delivery in claimed {
            let (pool, client, settings, metrics) = (
                self.pool.clone(),
                self.client.clone(),
                self.settings.clone(),
                self.metrics.clone(),
            );
            in_flight.spawn(attempt(pool, client, settings, metrics, delivery));
        }
        Ok(count)
    }

    /// How long to sleep: until the earliest pending delivery not held back
    /// by an in-flight cap falls due, or a lease in flight ends; at least
    /// [`MIN_PAUSE`], at most `poll`. An attempt of ours that ends wakes the
    /// loop sooner (its slot may be what a capped delivery waits for).
    async fn until_next_due(&self, poll: Duration) -> Duration {
        let next = async {
            let mut conn = self.pool.get().await?;
            queries::next_due_at(&mut conn, &self.settings).await
        }
        .await;
        match next {
            Ok(Some(at)) => (at - Utc::now())
                .to_std()
                .unwrap_or(Duration::ZERO)
                .clamp(MIN_PAUSE, poll),
            Ok(None) => poll,
            Err(err) => {
                tracing::warn!(error = %err, "reading the next webhook due time failed");
                ERROR_PAUSE
            }
        }
    }
}

/// One attempt: POST, then record what happened. If recording fails the
/// lease runs out and the delivery is attempted again (receivers dedupe on
/// the event id).
#[tracing::instrument(skip_all, fields(
    webhook.id = %delivery.webhook_id,
    delivery.id = %delivery.delivery_id,
    event.id = %delivery.event_id,
    attempt = delivery.attempt,
    manual = delivery.manual,
))]
async fn attempt(
    pool: PgPool,
    client: DeliveryClient,
    settings: WebhookSettings,
    metrics: Arc<SchedulerMetrics>,
    delivery: ClaimedDelivery,
) {
    let started_at = Utc::now();
    let event = delivery.event();
    let span = crate::trace::webhook_span(&pool, &delivery).await;
    let outcome = client
        .attempt(&SignedRequest {
            url: &delivery.url,
            secret: &delivery.secret,
            custom_headers: &delivery.headers,
            event: &event,
        })
        .instrument(span.clone())
        .await;
    crate::trace::webhook_done(&span, outcome.status_code, outcome.error.is_some());
    let recorded = async {
        let mut conn = pool.get().await?;
        queries::record_attempt(&mut conn, &delivery, started_at, &outcome, &settings).await
    }
    .await;
    metrics.webhook_attempt(
        outcome_label(&recorded),
        DeliveryClient::result_label(&outcome),
        outcome.duration,
    );
    let duration_ms = outcome.duration.as_millis() as u64;
    let status_code = outcome.status_code;
    let error = outcome.error.as_deref();
    match recorded {
        Ok(Settled::Succeeded) => {
            tracing::info!(duration_ms, status_code, "webhook delivered");
        }
        Ok(Settled::RetryScheduled) => {
            tracing::warn!(
                duration_ms,
                status_code,
                error,
                "webhook attempt failed; retry scheduled"
            );
        }
        Ok(Settled::Failed { disabled }) => {
            tracing::warn!(
                duration_ms,
                status_code,
                error,
                disabled,
                "webhook delivery failed for good"
            );
        }
        Ok(Settled::Deleted) => {
            tracing::info!(
                duration_ms,
                status_code,
                "the webhook was deleted during the attempt"
            );
        }
        Ok(Settled::Stale) => {
            tracing::info!(
                duration_ms,
                status_code,
                "attempt finished after its lease; another attempt owns the delivery"
            );
        }
        Err(err) => {
            tracing::error!(error = %err, "recording a webhook attempt failed; the lease will expire and the delivery be retried");
        }
    }
}

/// The `outcome` label of `unigen_webhook_attempts_total`.
fn outcome_label(recorded: &Result<Settled, DbError>) -> &'static str {
    match recorded {
        Ok(Settled::Succeeded) => "succeeded",
        Ok(Settled::RetryScheduled) => "retry_scheduled",
        Ok(Settled::Failed { .. }) => "failed",
        Ok(Settled::Deleted) => "deleted",
        Ok(Settled::Stale) => "stale",
        Err(_) => "record_error",
    }
}
