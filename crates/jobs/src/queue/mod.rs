//! RabbitMQ: topology, the job message, and a confirming publisher.
//! Messages are pointers (`{job_id, tool, attempt}`); the job row is the truth.

mod connection;
mod publisher;
mod topology;
mod trace;

pub use connection::{
    CONNECT_TIMEOUT, ConnectError, JobMessage, KNOWLEDGE_QUEUE, KnowledgeMessage, SharedConnection,
    connect,
};
pub use publisher::{PublishError, Publisher};
pub use topology::Topology;
pub use trace::message_context;
