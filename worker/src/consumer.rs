//! One consumer per queue (prefetch = its budget, reconnects), and the job
//! queues' handler: claim, ack, run.

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions};
use lapin::types::FieldTable;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use unigen_core::domain::Tool;
use unigen_jobs::queue::JobMessage;

use crate::WorkerContext;
use crate::claim::Claimed;
use crate::execute::run_claimed;

/// Consumes `queue` (a tool's, or `knowledge`) until `shutdown`,
/// reconnecting with backoff. Each delivery waits for one of the queue's
/// `permits` (`prefetch` of them: a tool's budgets, see `budget`), then
/// `handle` owns it (ack or nack included).
pub(crate) async fn consume<H, Fut>(
    context: Arc<WorkerContext>,
    queue: &'static str,
    (permits, prefetch): (Arc<Semaphore>, usize),
    shutdown: CancellationToken,
    running: TaskTracker,
    handle: H,
) where
    H: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let handle = Arc::new(handle);
    let prefetch = u16::try_from(prefetch).unwrap_or(u16::MAX);
    let mut backoff = reconnect_backoff();
    while !shutdown.is_cancelled() {
        match session(
            &context, queue, prefetch, &shutdown, &running, &permits, &handle,
        )
        .await
        {
            Ok(()) => return,
            Err(err) => {
                let delay = backoff.next().unwrap_or(Duration::from_secs(5));
                tracing::warn!(queue, error = %err, retry_in_ms = delay.as_millis() as u64, "consumer disconnected");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// At most 5 s apart (jitter adds up to the delay again), like the
/// publisher's and the listener's: after an outage the queue is consumed
/// again within seconds of the broker's return.
fn reconnect_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_millis(2_500))
        .with_jitter()
        .without_max_times()
        .build()
}

async fn session<H, Fut>(
    context: &WorkerContext,
    queue: &'static str,
    prefetch: u16,
    shutdown: &CancellationToken,
    running: &TaskTracker,
    permits: &Arc<Semaphore>,
    handle: &Arc<H>,
) -> anyhow::Result<()>
where
    H: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let channel = context.amqp.channel().await?;
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await?;
    context.topology.declare(&channel, &[queue]).await?;
    let tag = format!("{}-{queue}", context.worker_id);
    let mut deliveries = channel
        .basic_consume(
            context.topology.queue(queue).into(),
            tag.clone().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    tracing::info!(queue, prefetch, "consuming");
    loop {
        tokio::select! {
            () = shutdown.cancelled() => {
                // Closing the channel returns every unacknowledged message
                // (those still waiting for a permit) to the queue.
                let _ = channel.close(200, "worker stopping".into()).await;
                return Ok(());
            }
            delivery = deliveries.next() => match delivery {
                Some(Ok(delivery)) => {
                    let (permits, shutdown, handle) = (permits.clone(), shutdown.clone(), handle.clone());
                    running.spawn(async move {
                        let _permit = tokio::select! {
                            permit = permits.acquire_owned() => permit.expect("semaphore never closed"),
                            // Not started: the channel close requeues the message.
                            () = shutdown.cancelled() => return,
                        };
                        handle(delivery).await;
                    });
                }
                Some(Err(err)) => return Err(err.into()),
                None => anyhow::bail!("the broker closed the consumer"),
            },
        }
    }
}

/// A job queue's message: claim the job, ack, run it, in the delivery's
/// CONSUMER span (tracing on).
pub(crate) async fn handle_job_delivery(
    context: &WorkerContext,
    tool: Tool,
    delivery: Delivery,
    hard_stop: CancellationToken,
) {
    let span = crate::trace::process_span(context, tool.as_str(), &delivery);
    handle_job(context, tool, delivery, hard_stop, &span)
        .instrument(span.clone())
        .await
}

async fn handle_job(
    context: &WorkerContext,
    tool: Tool,
    delivery: Delivery,
    hard_stop: CancellationToken,
    span: &tracing::Span,
) {
    let message = match serde_json::from_slice::<JobMessage>(&delivery.data) {
        Ok(message) if message.tool == tool.as_str() => message,
        _ => {
            tracing::error!(%tool, bytes = delivery.data.len(), "unreadable job message; dead-lettering");
            let _ = delivery
                .nack(BasicNackOptions {
                    requeue: false,
                    ..Default::default()
                })
                .await;
            return;
        }
    };
    if !span.is_disabled() {
        span.record("unigen.job.id", message.job_id.to_string());
    }
    match context.claimer.claim(message.job_id).await {
        Ok(Claimed::Ours(job)) => {
            span.record("unigen.job.attempt", job.attempt);
            // The claim announced itself (`processing` now) and its event.
            // Ownership now lives in PostgreSQL (the lease): ack at once, so a
            // long job never trips the broker's consumer timeout into a rerun,
            // but beside the run, not before it (the ack's hop to the broker
            // connection's thread was on every job's path).
            let acker = delivery.acker;
            tokio::spawn(async move {
                if let Err(err) = acker.ack(BasicAckOptions::default()).await {
                    tracing::warn!(error = %err, "ack failed; a redelivery will find the job claimed");
                }
            });
            run_claimed(context, tool, *job, hard_stop).await;
        }
        Ok(Claimed::NotPending) => {
            // Taken by another worker, cancelled or finished: a duplicate.
            let _ = delivery.ack(BasicAckOptions::default()).await;
        }
        Ok(Claimed::Unknown) => {
            tracing::error!(job.id = %message.job_id, "message refers to no job; dead-lettering");
            let _ = delivery
                .nack(BasicNackOptions {
                    requeue: false,
                    ..Default::default()
                })
                .await;
        }
        Err(err) => {
            tracing::warn!(job.id = %message.job_id, error = %err, "claim failed; requeueing");
            // Do not spin on a database outage.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = delivery
                .nack(BasicNackOptions {
                    requeue: true,
                    ..Default::default()
                })
                .await;
        }
    }
}
