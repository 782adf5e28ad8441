//! RabbitMQ: topology, the job message, and a confirming publisher.
//! Messages are pointers (`{job_id, tool, attempt}`); the job row is the truth.

mod publisher;
mod topology;

pub use publisher::{PublishError, Publisher};
pub use topology::Topology;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The body of every job message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobMessage {
    pub job_id: Uuid,
    pub tool: String,
    pub attempt: i32,
}

/// Opens a named connection. Callers own reconnection (the publisher lazily,
/// consumers in a backoff loop), which keeps failure handling in one place.
pub async fn connect(url: &str, name: &str) -> lapin::Result<lapin::Connection> {
    let properties =
        lapin::ConnectionProperties::default().with_connection_name(name.to_owned().into());
    lapin::Connection::connect(url, properties).await
}
