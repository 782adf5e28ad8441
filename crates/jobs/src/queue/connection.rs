//! Messages, and the connection to the broker.

use tokio::sync::Mutex;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The body of every job message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobMessage {
    pub job_id: Uuid,
    pub tool: String,
    pub attempt: i32,
}

/// The internal queue of knowledge-file processing: `jobs.knowledge`, routing
/// key `knowledge`, declared with the tools' queues. Not a [`unigen_core::domain::Tool`]:
/// it is no public job type.
pub const KNOWLEDGE_QUEUE: &str = "knowledge";

/// The body of a knowledge-file message; the file row is the truth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnowledgeMessage {
    pub file_id: Uuid,
    pub attempt: i32,
}

/// A connection attempt (TCP + AMQP handshake) that takes longer is abandoned
/// and retried by the caller, instead of hanging on a stalled broker.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Broker(#[from] lapin::Error),
    #[error("connecting to RabbitMQ timed out after {0:?}")]
    TimedOut(std::time::Duration),
}

/// Opens a named connection. Callers own reconnection (the publisher lazily,
/// consumers in a backoff loop), which keeps failure handling in one place.
pub async fn connect(url: &str, name: &str) -> Result<lapin::Connection, ConnectError> {
    let properties =
        lapin::ConnectionProperties::default().with_connection_name(name.to_owned().into());
    tokio::time::timeout(CONNECT_TIMEOUT, lapin::Connection::connect(url, properties))
        .await
        .map_err(|_| ConnectError::TimedOut(CONNECT_TIMEOUT))?
        .map_err(ConnectError::from)
}

/// One AMQP connection per process, (re)opened on demand, with a channel per
/// task: brokers handle few connections far better than many.
pub struct SharedConnection {
    url: String,
    name: String,
    state: Mutex<Option<lapin::Connection>>,
}

impl SharedConnection {
    pub fn new(url: &str, name: &str) -> Self {
        Self {
            url: url.to_owned(),
            name: name.to_owned(),
            state: Mutex::new(None),
        }
    }

    /// A new channel on the live connection, reconnecting first if it died.
    pub async fn channel(&self) -> Result<lapin::Channel, ConnectError> {
        let mut state = self.state.lock().await;
        if let Some(connection) = state.as_ref().filter(|c| c.status().connected()) {
            match connection.create_channel().await {
                Ok(channel) => return Ok(channel),
                Err(err) => tracing::warn!(error = %err, "opening a channel failed; reconnecting"),
            }
        }
        let connection = connect(&self.url, &self.name).await?;
        let channel = connection.create_channel().await?;
        *state = Some(connection);
        Ok(channel)
    }

    pub async fn close(&self) {
        if let Some(connection) = self.state.lock().await.take() {
            let _ = connection.close(200, "closing".into()).await;
        }
    }
}
