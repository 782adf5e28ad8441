//! The `knowledge` queue's consumer (`--tools knowledge`): claim a file in
//! PostgreSQL, ack, then process it (`knowledge::process::process_file`)
//! under a renewed lease and write its chunks and `completed` in one
//! transaction, or `failed` with the user-facing reason. A transient failure
//! puts the file aside until its lease runs out; the scheduler then retries
//! it (or fails it after `jobs.max_attempts` claims).

use std::sync::Arc;
use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use unigen_core::config::Settings;
use unigen_db::models::{KnowledgeFile, NewKnowledgeChunk};
use unigen_db::{DbError, queries};
use unigen_jobs::queue::KnowledgeMessage;
use unigen_knowledge::KnowledgeFormat;
use unigen_knowledge::process::{EmbeddedChunk, ProcessOptions, process_file};
use unigen_knowledge::retrieve::Embedder;

use crate::WorkerContext;

/// What processing files needs besides the worker's context; built once.
pub(crate) struct KnowledgeWorker {
    embedder: Embedder,
    options: ProcessOptions,
    /// Extractions at once in this process: a slot is held until the
    /// blocking parser returns, even after its time limit.
    extractions: Arc<Semaphore>,
    retry_delay: Duration,
}

impl KnowledgeWorker {
    pub fn new(settings: &Settings) -> Self {
        Self {
            embedder: Embedder::new(settings),
            options: ProcessOptions::from_settings(&settings.knowledge),
            extractions: Arc::new(Semaphore::new(settings.knowledge.concurrent_extractions)),
            retry_delay: Duration::from_secs(settings.knowledge.retry_delay_seconds),
        }
    }
}

/// Consumes the `knowledge` queue until `shutdown`, reconnecting with backoff.
/// A knowledge message: claim the file, ack, process it, in the delivery's
/// CONSUMER span `process jobs.knowledge` (tracing on), parented on the
/// context the message carries.
pub(crate) async fn handle_delivery(
    context: &WorkerContext,
    worker: &KnowledgeWorker,
    delivery: Delivery,
    hard_stop: CancellationToken,
) {
    let span = crate::trace::process_span(context, unigen_jobs::queue::KNOWLEDGE_QUEUE, &delivery);
    handle_message(context, worker, delivery, hard_stop)
        .instrument(span)
        .await
}

async fn handle_message(
    context: &WorkerContext,
    worker: &KnowledgeWorker,
    delivery: Delivery,
    hard_stop: CancellationToken,
) {
    let Ok(message) = serde_json::from_slice::<KnowledgeMessage>(&delivery.data) else {
        tracing::error!(
            bytes = delivery.data.len(),
            "unreadable knowledge message; dead-lettering"
        );
        let _ = delivery
            .nack(BasicNackOptions {
                requeue: false,
                ..Default::default()
            })
            .await;
        return;
    };
    let claimed = async {
        let mut conn = context.pool.get().await.map_err(DbError::from)?;
        queries::knowledge::claim(
            &mut conn,
            message.file_id,
            &context.worker_id,
            context.lease,
        )
        .await
    }
    .await;
    match claimed {
        Ok(Some(file)) => {
            // Ownership now lives in PostgreSQL (the lease).
            if let Err(err) = delivery.ack(BasicAckOptions::default()).await {
                tracing::warn!(error = %err, "ack failed; a redelivery will find the file claimed");
            }
            let span = tracing::info_span!("knowledge_file", file.id = %file.id, attempt = file.attempt, format = %file.format);
            run_claimed(context, worker, file, hard_stop)
                .instrument(span)
                .await;
        }
        Ok(None) => {
            // Taken by another worker, finished, or deleted: a duplicate.
            let _ = delivery.ack(BasicAckOptions::default()).await;
        }
        Err(err) => {
            tracing::warn!(file.id = %message.file_id, error = %err, "claim failed; requeueing");
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

/// Why a file was not processed.
enum Failure {
    /// Fails the file with this message for the user.
    Final(String),
    /// Retried later (lease expiry); the reason is kept for the last failure.
    Retry(String),
}

enum Outcome {
    Finished(Result<Vec<EmbeddedChunk>, Failure>),
    /// Deleted or taken over (the lease could not be renewed).
    NoLongerOurs,
    /// The worker is stopping and the grace period is over.
    Shutdown,
}

async fn run_claimed(
    context: &WorkerContext,
    worker: &KnowledgeWorker,
    file: KnowledgeFile,
    hard_stop: CancellationToken,
) {
    let started = std::time::Instant::now();
    let (id, attempt) = (file.id, file.attempt);
    let outcome = tokio::select! {
        result = process(context, worker, &file) => Outcome::Finished(result),
        () = keep_lease(context, id, attempt) => Outcome::NoLongerOurs,
        () = hard_stop.cancelled() => Outcome::Shutdown,
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    let written = async {
        let mut conn = context.pool.get().await.map_err(DbError::from)?;
        match outcome {
            Outcome::Finished(Ok(chunks)) => {
                let count = chunks.len();
                let rows: Vec<NewKnowledgeChunk> = chunks
                    .into_iter()
                    .map(|chunk| NewKnowledgeChunk {
                        file_id: id,
                        chunk_index: chunk.index,
                        agent_id: file.agent_id,
                        content: chunk.content,
                        token_count: chunk.token_count,
                        embedding: chunk.embedding,
                    })
                    .collect();
                let model = worker.embedder.model_id();
                let done =
                    queries::knowledge::complete(&mut conn, id, attempt, model, &rows).await?;
                tracing::info!(duration_ms, chunks = count, written = done, "knowledge file processed");
                Ok(done)
            }
            Outcome::Finished(Err(Failure::Final(message))) => {
                tracing::info!(duration_ms, reason = %message, "knowledge file failed");
                queries::knowledge::fail(&mut conn, id, attempt, &message).await
            }
            Outcome::Finished(Err(Failure::Retry(reason))) => {
                let delay = worker.retry_delay * attempt.max(1) as u32;
                tracing::warn!(duration_ms, reason = %reason, retry_in_s = delay.as_secs(), "knowledge file will be retried");
                queries::knowledge::retry_later(&mut conn, id, attempt, &reason, delay).await
            }
            Outcome::NoLongerOurs => {
                tracing::info!(duration_ms, "knowledge file deleted or taken over; aborted");
                Ok(false)
            }
            Outcome::Shutdown => {
                let released = queries::knowledge::release(&mut conn, id, attempt).await?;
                tracing::info!(released, "worker stopping; knowledge file handed back");
                Ok(released)
            }
        }
    }
    .await;
    if let Err(err) = written {
        // The lease runs out and the scheduler retries the file.
        tracing::error!(error = %err, "writing the knowledge file's state failed");
    }
}

/// The file's bytes -> chunks with embeddings.
async fn process(
    context: &WorkerContext,
    worker: &KnowledgeWorker,
    file: &KnowledgeFile,
) -> Result<Vec<EmbeddedChunk>, Failure> {
    let format: KnowledgeFormat = file
        .format
        .parse()
        .map_err(|_| Failure::Final(format!("unsupported file format `{}`", file.format)))?;
    let bytes = context
        .store
        .get(&file.storage_key)
        .await
        .map_err(|err| Failure::Retry(format!("reading the stored file failed: {err}")))?
        .ok_or_else(|| {
            Failure::Final("the uploaded file is missing from storage: upload it again".into())
        })?;
    let slot = worker
        .extractions
        .clone()
        .acquire_owned()
        .await
        .expect("semaphore never closed");
    process_file(format, bytes, &worker.options, &worker.embedder, slot)
        .await
        .map_err(|err| {
            if err.is_retryable() {
                Failure::Retry(err.to_string())
            } else {
                Failure::Final(err.to_string())
            }
        })
}

/// Renews the lease every third of its length; resolves when it cannot
/// (the file was deleted or taken over), so the work is abandoned.
async fn keep_lease(context: &WorkerContext, id: uuid::Uuid, attempt: i32) {
    let every = context.lease / 3;
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        renew.tick().await;
        let renewed = async {
            let mut conn = context.pool.get().await.map_err(DbError::from)?;
            queries::knowledge::renew_lease(&mut conn, id, attempt, context.lease).await
        }
        .await;
        match renewed {
            Ok(true) => {}
            Ok(false) => return,
            // Keep working through a database blip; the next renewal may succeed.
            Err(err) => tracing::warn!(error = %err, "lease renewal failed"),
        }
    }
}
