use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection};
use tokio::sync::Mutex;
use tracing::Instrument;

use super::connection::{self, JobMessage, KNOWLEDGE_QUEUE, KnowledgeMessage};
use super::topology::Topology;
use unigen_core::domain::Tool;
use unigen_core::telemetry::{self, SpanContext, propagation, semconv, spans};

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("broker unavailable: {0}")]
    Broker(#[from] lapin::Error),
    #[error(transparent)]
    Connect(#[from] connection::ConnectError),
    #[error("broker did not confirm the message")]
    NotConfirmed,
    #[error("publish timed out after {0:?}")]
    TimedOut(Duration),
    /// A connection attempt failed moments ago: not retried before
    /// `reconnect_after`, so requests do not queue behind a dead broker.
    #[error("broker unreachable; next connection attempt in {0:?}")]
    Backoff(Duration),
}

/// After a failed connection attempt, the next one waits this long,
/// doubling up to [`MAX_RECONNECT_PAUSE`].
const MIN_RECONNECT_PAUSE: Duration = Duration::from_millis(200);
const MAX_RECONNECT_PAUSE: Duration = Duration::from_secs(5);

/// When the next connection attempt may start, and the pause after it fails.
#[derive(Debug, Clone, Copy)]
struct ReconnectGate {
    not_before: Instant,
    pause: Duration,
}

/// Publishes job messages with publisher confirms over one long-lived
/// connection, reconnecting lazily on the next publish after a failure.
/// A failed publish is never fatal to the caller: the job row stays
/// unconfirmed and the scheduler's relay publishes it later.
pub struct Publisher {
    url: String,
    name: String,
    topology: Topology,
    timeout: Duration,
    state: Mutex<Option<(Connection, Channel)>>,
    gate: std::sync::Mutex<Option<ReconnectGate>>,
}

impl Publisher {
    pub fn new(url: &str, name: &str, topology: Topology, timeout: Duration) -> Self {
        Self {
            url: url.to_owned(),
            name: name.to_owned(),
            topology,
            timeout,
            state: Mutex::new(None),
            gate: std::sync::Mutex::new(None),
        }
    }

    /// Connects and declares the topology for every tool. While the broker
    /// is down, attempts are spaced out (200 ms doubling to 5 s) and callers
    /// in between fail at once with [`PublishError::Backoff`].
    pub async fn ensure_connected(&self) -> Result<Channel, PublishError> {
        let mut state = self.state.lock().await;
        if let Some((connection, channel)) = state.as_ref()
            && connection.status().connected()
            && channel.status().connected()
        {
            return Ok(channel.clone());
        }
        let gate = *self.gate.lock().expect("gate lock");
        if let Some(gate) = gate {
            let now = Instant::now();
            if now < gate.not_before {
                return Err(PublishError::Backoff(gate.not_before - now));
            }
        }
        match self.connect().await {
            Ok((connection, channel)) => {
                *self.gate.lock().expect("gate lock") = None;
                *state = Some((connection, channel.clone()));
                Ok(channel)
            }
            Err(err) => {
                self.close_gate();
                Err(err)
            }
        }
    }

    /// Delays the next connection attempt (a longer pause each time in a row).
    fn close_gate(&self) {
        let mut gate = self.gate.lock().expect("gate lock");
        let pause = gate.map_or(MIN_RECONNECT_PAUSE, |g| {
            (g.pause * 2).min(MAX_RECONNECT_PAUSE)
        });
        *gate = Some(ReconnectGate {
            not_before: Instant::now() + pause,
            pause,
        });
    }

    async fn connect(&self) -> Result<(Connection, Channel), PublishError> {
        let connection = connection::connect(&self.url, &self.name).await?;
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let mut queues: Vec<&str> = Tool::ALL.iter().map(|t| t.as_str()).collect();
        queues.push(KNOWLEDGE_QUEUE);
        self.topology.declare(&channel, &queues).await?;
        Ok((connection, channel))
    }

    /// Publishes and waits for the broker's confirm, within the timeout,
    /// in a PRODUCER span of its own (a child of the current span).
    pub async fn publish(&self, message: &JobMessage) -> Result<(), PublishError> {
        let span = self.job_span(message, None);
        self.publish_in(message, &span).await
    }

    /// The PRODUCER span of publishing `message`: a child of the current
    /// span, linked to `link` (a job's earlier context, on a recovery
    /// republish). Disabled when tracing is off.
    pub fn job_span(&self, message: &JobMessage, link: Option<SpanContext>) -> tracing::Span {
        if !telemetry::enabled() {
            return tracing::Span::none();
        }
        spans::publish(
            &self.topology.exchange(),
            &message.tool,
            &message.job_id.to_string(),
            link,
        )
    }

    /// [`Publisher::publish`] within `span` (see [`Publisher::job_span`]):
    /// its context travels in the message's `traceparent` / `tracestate`.
    pub async fn publish_in(
        &self,
        message: &JobMessage,
        span: &tracing::Span,
    ) -> Result<(), PublishError> {
        let payload = serde_json::to_vec(message).expect("job message serializes");
        let headers = propagation::headers_of(span);
        let result = self
            .publish_to(&message.tool, &message.job_id.to_string(), payload, headers)
            .instrument(span.clone())
            .await;
        if result.is_err() {
            spans::fail(span, semconv::error_type::BROKER);
        }
        result
    }

    /// Publishes a knowledge file's message to the `knowledge` queue, as
    /// [`Publisher::publish`] does a job's.
    pub async fn publish_knowledge(&self, message: &KnowledgeMessage) -> Result<(), PublishError> {
        let payload = serde_json::to_vec(message).expect("knowledge message serializes");
        let span = if telemetry::enabled() {
            spans::publish(
                &self.topology.exchange(),
                KNOWLEDGE_QUEUE,
                &message.file_id.to_string(),
                None,
            )
        } else {
            tracing::Span::none()
        };
        let headers = propagation::headers_of(&span);
        let result = self
            .publish_to(
                KNOWLEDGE_QUEUE,
                &message.file_id.to_string(),
                payload,
                headers,
            )
            .instrument(span.clone())
            .await;
        if result.is_err() {
            spans::fail(&span, semconv::error_type::BROKER);
        }
        result
    }

    async fn publish_to(
        &self,
        routing_key: &str,
        message_id: &str,
        payload: Vec<u8>,
        trace_headers: Vec<(&'static str, String)>,
    ) -> Result<(), PublishError> {
        let publish = self.publish_confirmed(routing_key, message_id, &payload, trace_headers);
        match tokio::time::timeout(self.timeout, publish).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => {
                self.reset().await;
                Err(err)
            }
            Err(_) => {
                // A broker that does not answer at all (a dead network path)
                // must not make every request wait out the timeout.
                self.close_gate();
                self.reset().await;
                Err(PublishError::TimedOut(self.timeout))
            }
        }
    }

    async fn publish_confirmed(
        &self,
        routing_key: &str,
        message_id: &str,
        payload: &[u8],
        trace_headers: Vec<(&'static str, String)>,
    ) -> Result<(), PublishError> {
        let channel = self.ensure_connected().await?;
        let mut properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_message_id(message_id.into());
        if !trace_headers.is_empty() {
            let mut headers = FieldTable::default();
            for (name, value) in trace_headers {
                headers.insert(ShortString::from(name), AMQPValue::LongString(value.into()));
            }
            properties = properties.with_headers(headers);
        }
        let confirmation = channel
            .basic_publish(
                self.topology.exchange().into(),
                routing_key.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                payload,
                properties,
            )
            .await?
            .await?;
        match confirmation {
            Confirmation::Ack(None) => Ok(()),
            // Returned (unroutable) or nacked: not safely enqueued.
            Confirmation::Ack(Some(_)) | Confirmation::Nack(_) | Confirmation::NotRequested => {
                Err(PublishError::NotConfirmed)
            }
        }
    }

    /// Drops the connection for the next publish to open a new one. The
    /// close is sent in the background, bounded: a broker that stopped
    /// answering (its connection still open) never answers it, and the state
    /// lock held across it made every later publish wait forever.
    async fn reset(&self) {
        let taken = self.state.lock().await.take();
        if let Some((connection, _)) = taken {
            let timeout = self.timeout;
            tokio::spawn(async move {
                let _ = tokio::time::timeout(timeout, connection.close(200, "reconnecting".into()))
                    .await;
            });
        }
    }
}
