//! Dead-lettered job messages: a message no worker could take (it hit the
//! queue's delivery limit, or its job could not be read) lands in its tool's
//! dead-letter queue. Its job would stay `pending` forever, its reservation
//! held, and the relay would never publish it again (it was published).
//! Each round pulls those messages and fails their jobs with a reason, which
//! releases the reservation and sends `generation.failed`; then acks them.

use std::sync::Arc;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use futures_util::future::BoxFuture;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicNackOptions};
use unigen_core::domain::Tool;
use unigen_db::notify::Notifier;
use unigen_db::{DbError, PgPool, queries};
use unigen_jobs::queue::{JobMessage, Publisher, Topology};

use crate::metrics::SchedulerMetrics;
use crate::runner::{Activity, Task};

/// Messages pulled per tool per round.
const BATCH: usize = 100;

pub struct DeadLetters {
    pool: PgPool,
    publisher: Arc<Publisher>,
    topology: Topology,
    notifier: Notifier,
    metrics: Arc<SchedulerMetrics>,
}

impl DeadLetters {
    pub fn new(
        pool: PgPool,
        publisher: Arc<Publisher>,
        topology: Topology,
        notifier: Notifier,
        metrics: Arc<SchedulerMetrics>,
    ) -> Self {
        Self {
            pool,
            publisher,
            topology,
            notifier,
            metrics,
        }
    }

    async fn round(&self) -> anyhow::Result<Activity> {
        let channel = self.publisher.ensure_connected().await?;
        let mut busy = false;
        for tool in Tool::ALL {
            let mut deliveries: Vec<Delivery> = Vec::new();
            while deliveries.len() < BATCH {
                let queue = self.topology.dead_letter_queue(tool.as_str());
                match channel
                    .basic_get(queue.into(), BasicGetOptions { no_ack: false })
                    .await?
                {
                    Some(message) => deliveries.push(message.delivery),
                    None => break,
                }
            }
            if deliveries.is_empty() {
                continue;
            }
            busy |= deliveries.len() == BATCH;
            let messages: Vec<(uuid::Uuid, i32)> = deliveries
                .iter()
                .filter_map(|d| serde_json::from_slice::<JobMessage>(&d.data).ok())
                .map(|m| (m.job_id, m.attempt))
                .collect();
            match self.fail_jobs(&messages).await {
                Ok(()) => {
                    for delivery in deliveries {
                        delivery.ack(BasicAckOptions::default()).await?;
                    }
                }
                Err(err) => {
                    // Back to the dead-letter queue: the next round retries.
                    for delivery in deliveries {
                        let requeue = BasicNackOptions {
                            requeue: true,
                            ..Default::default()
                        };
                        let _ = delivery.nack(requeue).await;
                    }
                    return Err(err.into());
                }
            }
        }
        Ok(if busy { Activity::Busy } else { Activity::Idle })
    }

    /// Fails the stranded jobs; their events and released reservations
    /// commit with them.
    async fn fail_jobs(&self, messages: &[(uuid::Uuid, i32)]) -> Result<(), DbError> {
        if messages.is_empty() {
            return Ok(());
        }
        let mut pooled = self.pool.get().await?;
        let conn: &mut AsyncPgConnection = &mut pooled;
        let failed = conn
            .transaction::<_, DbError, _>(async |conn| {
                let failed = queries::jobs::fail_dead_lettered(conn, messages).await?;
                super::record_given_up(conn, &failed).await?;
                Ok(failed)
            })
            .await?;
        if !failed.is_empty() {
            self.notifier.events_recorded();
        }
        for job in &failed {
            self.metrics.job_failed(&job.tool, "dead_lettered");
            self.metrics.job_finished(
                &job.tool,
                &job.model,
                unigen_core::telemetry::metrics::job_status::FAILED,
            );
            tracing::warn!(job.id = %job.id, tool = %job.tool, attempt = job.attempt, "job message dead-lettered; job failed");
            self.notifier.job_changed(job.id);
        }
        Ok(())
    }
}

impl Task for DeadLetters {
    fn name(&self) -> &'static str {
        "dead_letters"
    }

    fn work(&mut self) -> BoxFuture<'_, anyhow::Result<Activity>> {
        Box::pin(self.round())
    }
}
