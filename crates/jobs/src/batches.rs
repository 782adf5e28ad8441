//! OpenAI's Files and Batches APIs on the job pipeline: uploads streamed to
//! the file store, batches created from a validated input file (its lines
//! become `batch_lines` rows the workers claim), and the end of a batch (its
//! output and error files written, its counts, status and webhook event).
//! The API routes and the scheduler call these; the lines' pure parsing and
//! output format are `unigen_protocols::batch`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use unigen_core::storage::{ByteStream, FileStore, StorageError};
use unigen_db::models::Event;
use unigen_db::queries::batches::{self, BatchRow, Ending, LineCounts, NewBatch, NewLine};
use unigen_db::queries::files::{self, FileRow, NewFile};
use unigen_db::{DbError, PgPool, queries};
use unigen_protocols::batch::{
    self as wire, COMPLETION_WINDOW, ENDPOINTS, LineSplitter, Validator,
};
use uuid::Uuid;

/// What a worker names in `--tools` to run batch lines.
pub const BATCH_QUEUE: &str = "batch";
/// The purposes a client may upload a file for.
pub const UPLOAD_PURPOSES: &[&str] = &["batch", "user_data"];
/// The purpose of a batch's output and error files.
pub const OUTPUT_PURPOSE: &str = "batch_output";
/// Lines inserted (and results read) per statement.
const CHUNK: usize = 1000;

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// A field of the request; `param` names it.
    #[error("{message}")]
    Invalid {
        param: &'static str,
        message: String,
    },
    #[error("{0}")]
    NotFound(String),
    /// The batch has ended: nothing to cancel (409).
    #[error("{0}")]
    Conflict(String),
    #[error("the file is larger than the limit of {0} bytes")]
    TooLarge(u64),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl From<diesel::result::Error> for BatchError {
    fn from(err: diesel::result::Error) -> Self {
        Self::Db(err.into())
    }
}

fn invalid(param: &'static str, message: impl Into<String>) -> BatchError {
    BatchError::Invalid {
        param,
        message: message.into(),
    }
}

/// Where a file's bytes are stored.
pub fn file_storage_key(org_id: Uuid, file_id: &str) -> String {
    format!("openai-files/{org_id}/{file_id}")
}

/// Checks an upload's `purpose`.
pub fn check_purpose(purpose: Option<&str>) -> Result<&'static str, BatchError> {
    let purpose = purpose
        .ok_or_else(|| invalid("purpose", "`purpose` is required: one of batch, user_data"))?;
    UPLOAD_PURPOSES
        .iter()
        .find(|p| **p == purpose)
        .copied()
        .ok_or_else(|| {
            invalid(
                "purpose",
                format!("`purpose` must be one of batch, user_data, not `{purpose}`"),
            )
        })
}

/// Stores an upload from `chunks` as they arrive (never whole in memory),
/// refusing it past `max_bytes`, then records it. Nothing is kept of a
/// refused or failed upload.
pub async fn upload(
    pool: &PgPool,
    store: &dyn FileStore,
    org_id: Uuid,
    purpose: &str,
    filename: &str,
    chunks: ByteStream,
    max_bytes: u64,
) -> Result<FileRow, BatchError> {
    let id = format!("file-{}", Uuid::now_v7().simple());
    let key = file_storage_key(org_id, &id);
    let over = Arc::new(AtomicBool::new(false));
    let flag = over.clone();
    let mut seen = 0u64;
    let bounded = chunks
        .map(move |chunk| {
            let chunk = chunk?;
            seen += chunk.len() as u64;
            if seen > max_bytes {
                flag.store(true, Ordering::Relaxed);
                return Err(StorageError::Io(std::io::Error::other(
                    "the upload is larger than the limit",
                )));
            }
            Ok(chunk)
        })
        .boxed();
    let bytes = match store.put_stream(&key, bounded).await {
        Ok(bytes) => bytes,
        Err(_) if over.load(Ordering::Relaxed) => return Err(BatchError::TooLarge(max_bytes)),
        Err(err) => return Err(err.into()),
    };
    let recorded = async {
        let mut conn = pool.get().await.map_err(DbError::from)?;
        files::insert(
            &mut conn,
            &NewFile {
                id: &id,
                org_id,
                purpose,
                filename,
                bytes: bytes as i64,
                storage_key: &key,
            },
        )
        .await
    }
    .await;
    match recorded {
        Ok(row) => Ok(row),
        Err(err) => {
            let _ = store.delete(&key).await;
            Err(err.into())
        }
    }
}

/// A file in OpenAI's shape.
pub fn file_object(file: &FileRow) -> Value {
    json!({
        "id": file.id,
        "object": "file",
        "bytes": file.bytes,
        "created_at": file.created_at.timestamp(),
        "filename": file.filename,
        "purpose": file.purpose,
        "status": "processed",
        "status_details": null,
        "expires_at": null,
    })
}

/// `POST /batches`, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateBatch {
    pub input_file_id: String,
    pub endpoint: String,
    pub metadata: Option<Value>,
}

/// Reads a create request: `input_file_id`, `endpoint` (one of
/// [`ENDPOINTS`]), `completion_window` (`24h`), `metadata` (at most 16
/// string pairs, keys up to 64 and values up to 512 characters).
pub fn parse_create(body: &Map<String, Value>) -> Result<CreateBatch, BatchError> {
    let string = |field: &'static str| -> Result<String, BatchError> {
        match body.get(field) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            None | Some(Value::Null) => Err(invalid(field, format!("`{field}` is required"))),
            Some(_) => Err(invalid(
                field,
                format!("`{field}` must be a non-empty string"),
            )),
        }
    };
    let input_file_id = string("input_file_id")?;
    let endpoint = string("endpoint")?;
    if !ENDPOINTS.contains(&endpoint.as_str()) {
        return Err(invalid(
            "endpoint",
            format!(
                "`endpoint` must be one of {}, not `{endpoint}`",
                ENDPOINTS.join(", ")
            ),
        ));
    }
    let window = string("completion_window")?;
    if window != COMPLETION_WINDOW {
        return Err(invalid(
            "completion_window",
            format!("`completion_window` must be \"{COMPLETION_WINDOW}\", not `{window}`"),
        ));
    }
    let metadata = match body.get("metadata") {
        None | Some(Value::Null) => None,
        Some(Value::Object(pairs)) => {
            if pairs.len() > 16 {
                return Err(invalid("metadata", "`metadata` holds at most 16 pairs"));
            }
            for (key, value) in pairs {
                let ok = key.chars().count() <= 64
                    && value.as_str().is_some_and(|v| v.chars().count() <= 512);
                if !ok {
                    return Err(invalid(
                        "metadata",
                        format!(
                            "`metadata.{key}`: keys are at most 64 characters and values strings of at most 512"
                        ),
                    ));
                }
            }
            Some(Value::Object(pairs.clone()))
        }
        Some(_) => return Err(invalid("metadata", "`metadata` must be an object")),
    };
    for field in body.keys() {
        if !matches!(
            field.as_str(),
            "input_file_id" | "endpoint" | "completion_window" | "metadata"
        ) {
            return Err(BatchError::Invalid {
                param: "body",
                message: format!("unknown field `{field}`"),
            });
        }
    }
    Ok(CreateBatch {
        input_file_id,
        endpoint,
        metadata,
    })
}

/// Creates a batch from the organization's input file: every line checked
/// (the first bad one refuses the batch, naming it) and stored as a line
/// to run, all in one transaction: a refused batch leaves nothing.
pub async fn create(
    pool: &PgPool,
    store: &dyn FileStore,
    org_id: Uuid,
    api_key_id: Option<Uuid>,
    request: &CreateBatch,
    now: DateTime<Utc>,
) -> Result<BatchRow, BatchError> {
    let mut pooled = pool.get().await.map_err(DbError::from)?;
    let conn: &mut AsyncPgConnection = &mut pooled;
    let file = files::find(conn, org_id, &request.input_file_id)
        .await?
        .ok_or_else(|| BatchError::NotFound(format!("file {} not found", request.input_file_id)))?;
    if file.purpose != "batch" {
        return Err(invalid(
            "input_file_id",
            format!(
                "file {} has purpose `{}`; a batch's input file must have purpose `batch`",
                file.id, file.purpose
            ),
        ));
    }
    let id = format!("batch_{}", Uuid::now_v7().simple());
    let expires_at = now + chrono::Duration::hours(24);
    conn.transaction::<_, BatchError, _>(async |conn| {
        batches::insert(
            conn,
            &NewBatch {
                id: &id,
                org_id,
                api_key_id,
                endpoint: &request.endpoint,
                input_file_id: &file.id,
                completion_window: COMPLETION_WINDOW,
                metadata: request.metadata.as_ref(),
                expires_at,
            },
        )
        .await?;
        let total = insert_lines(conn, store, &file, &id, org_id, &request.endpoint).await?;
        batches::set_total(conn, &id, total as i32).await?;
        Ok(())
    })
    .await?;
    batches::find(conn, org_id, &id)
        .await?
        .ok_or_else(|| BatchError::NotFound(format!("batch {id} not found")))
}

/// Streams the input file through the validator, inserting its lines
/// [`CHUNK`] at a time; the count of requests.
async fn insert_lines(
    conn: &mut AsyncPgConnection,
    store: &dyn FileStore,
    file: &FileRow,
    batch_id: &str,
    org_id: Uuid,
    endpoint: &str,
) -> Result<usize, BatchError> {
    let input_invalid = |err: wire::LineError| invalid("input_file_id", err.to_string());
    let size = store
        .head(&file.storage_key)
        .await?
        .map(|meta| meta.size)
        .ok_or_else(|| BatchError::NotFound(format!("file {} has no content", file.id)))?;
    let mut stream = store
        .stream(&file.storage_key, 0..size)
        .await?
        .ok_or_else(|| BatchError::NotFound(format!("file {} has no content", file.id)))?;
    let mut splitter = LineSplitter::new();
    let mut validator = Validator::new(endpoint);
    let mut pending: Vec<NewLine> = Vec::with_capacity(CHUNK);
    let mut last_line = 0;
    let mut accept = |line: usize, raw: &[u8], pending: &mut Vec<NewLine>| {
        last_line = line;
        if let Some(accepted) = validator.check(line, raw).map_err(input_invalid)? {
            pending.push(NewLine {
                id: Uuid::now_v7(),
                line_no: accepted.line as i32,
                custom_id: accepted.custom_id,
                body: Value::Object(accepted.body),
            });
        }
        Ok::<_, BatchError>(())
    };
    while let Some(chunk) = stream.next().await {
        let chunk: Bytes = chunk?;
        for (line, raw) in splitter.feed(&chunk).map_err(input_invalid)? {
            accept(line, &raw, &mut pending)?;
        }
        if pending.len() >= CHUNK {
            batches::insert_lines(conn, batch_id, org_id, &pending).await?;
            pending.clear();
        }
    }
    if let Some((line, raw)) = splitter.finish().map_err(input_invalid)? {
        accept(line, &raw, &mut pending)?;
    }
    if !pending.is_empty() {
        batches::insert_lines(conn, batch_id, org_id, &pending).await?;
    }
    validator.finish(last_line).map_err(input_invalid)
}

/// A batch in OpenAI's shape; `counts` are its lines' outcomes so far when
/// it has not ended (its stored counts are final once it has).
pub fn batch_object(batch: &BatchRow, counts: Option<LineCounts>) -> Value {
    let at = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp());
    let (completed, failed) = match counts {
        Some(counts) => (counts.succeeded, counts.failed),
        None => (i64::from(batch.completed), i64::from(batch.failed)),
    };
    json!({
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": batch.errors,
        "input_file_id": batch.input_file_id,
        "completion_window": batch.completion_window,
        "status": batch.status,
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "created_at": batch.created_at.timestamp(),
        "in_progress_at": at(batch.in_progress_at),
        "expires_at": batch.expires_at.timestamp(),
        "finalizing_at": at(batch.finalizing_at),
        "completed_at": at(batch.completed_at),
        "failed_at": at(batch.failed_at),
        "expired_at": at(batch.expired_at),
        "cancelling_at": at(batch.cancelling_at),
        "cancelled_at": at(batch.cancelled_at),
        "request_counts": {
            "total": batch.total,
            "completed": completed,
            "failed": failed,
        },
        "metadata": batch.metadata,
    })
}

/// The batch in OpenAI's shape, read with its current counts.
pub async fn present(conn: &mut AsyncPgConnection, batch: &BatchRow) -> Result<Value, DbError> {
    if batch.ended() {
        return Ok(batch_object(batch, None));
    }
    let counts = batches::line_counts(conn, &batch.id).await?;
    Ok(batch_object(batch, Some(counts)))
}

/// Cancels the organization's batch (its unstarted lines never run).
pub async fn cancel(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: &str,
) -> Result<BatchRow, BatchError> {
    match batches::cancel(conn, org_id, id).await? {
        batches::Cancelled::Cancelling(batch) => Ok(batch),
        batches::Cancelled::Ended(batch) => Err(BatchError::Conflict(format!(
            "batch {id} cannot be cancelled: its status is {}",
            batch.status
        ))),
        batches::Cancelled::NotFound => Err(BatchError::NotFound(format!("batch {id} not found"))),
    }
}

/// The webhook event of a batch's end: `batch.completed`, `batch.failed`,
/// `batch.expired` or `batch.cancelled`.
pub fn ended_event(batch: &BatchRow) -> Event {
    Event {
        id: Uuid::now_v7(),
        org_id: batch.org_id,
        kind: format!("batch.{}", batch.status),
        data: json!({
            "batchId": batch.id,
            "status": batch.status,
            "endpoint": batch.endpoint,
            "inputFileId": batch.input_file_id,
            "outputFileId": batch.output_file_id,
            "errorFileId": batch.error_file_id,
            "requestCounts": {
                "total": batch.total,
                "completed": batch.completed,
                "failed": batch.failed,
            },
        }),
        created_at: Utc::now(),
    }
}

/// Ends the next batch ready to end, if any: writes its output file (the
/// answered lines) and error file (failed lines, and lines never run), the
/// files' rows, its final status and counts and its event, in one
/// transaction (the files are written first: a scheduler killed before the
/// commit leaves the batch to end again).
pub async fn end_next(
    pool: &PgPool,
    store: &Arc<dyn FileStore>,
) -> Result<Option<BatchRow>, BatchError> {
    let mut pooled = pool.get().await.map_err(DbError::from)?;
    let conn: &mut AsyncPgConnection = &mut pooled;
    conn.transaction::<_, BatchError, _>(async |conn| {
        let Some(batch) = batches::next_to_end(conn).await? else {
            return Ok(None);
        };
        let status = if batch.status == "cancelling" {
            "cancelled"
        } else if batch.expired_at.is_some() {
            "expired"
        } else {
            "completed"
        };
        if status != "completed" {
            // A dead worker's lines that will not run again: their holds go back.
            for line in batches::abandon_running(conn, &batch.id, status).await? {
                queries::billing::release(conn, line, None).await?;
            }
        }
        let mut output = OutputFile::new(store.clone(), batch.org_id, &batch.id, "output");
        let mut errors = OutputFile::new(store.clone(), batch.org_id, &batch.id, "error");
        let mut counts = LineCounts::default();
        let mut after = 0;
        loop {
            let lines = batches::line_results(conn, &batch.id, after, CHUNK as i64).await?;
            let Some(last) = lines.last() else { break };
            after = last.line_no;
            for line in &lines {
                let simple = line.id.simple();
                let id = format!("batch_req_{simple}");
                match (line.status.as_str(), line.status_code, &line.response) {
                    ("succeeded", Some(code), Some(body)) => {
                        counts.succeeded += 1;
                        let request_id = format!("req_{simple}");
                        output
                            .write(wire::output_line(&id, &line.custom_id, code as u16, &request_id, body))
                            .await?;
                    }
                    ("failed", Some(code), Some(body)) => {
                        counts.failed += 1;
                        let request_id = format!("req_{simple}");
                        errors
                            .write(wire::output_line(&id, &line.custom_id, code as u16, &request_id, body))
                            .await?;
                    }
                    (unrun, _, _) => {
                        counts.unrun += 1;
                        let (code, message) = if unrun == "expired" {
                            ("batch_expired", "This request could not be executed before the completion window expired.")
                        } else {
                            ("batch_cancelled", "This request was not executed: the batch was cancelled.")
                        };
                        errors.write(wire::error_line(&id, &line.custom_id, code, message)).await?;
                    }
                }
            }
        }
        let output_file = output.finish(conn).await?;
        let error_file = errors.finish(conn).await?;
        let ended = batches::end(
            conn,
            &batch.id,
            &Ending {
                status,
                counts,
                output_file_id: output_file.as_deref(),
                error_file_id: error_file.as_deref(),
            },
        )
        .await?;
        queries::events::insert(conn, &ended_event(&ended)).await?;
        Ok(Some(ended))
    })
    .await
}

/// The items sent to `rx`, as a stream (ends when every sender is gone).
pub fn receiver_stream(rx: tokio::sync::mpsc::Receiver<Result<Bytes, StorageError>>) -> ByteStream {
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed()
}

/// An upload in flight: its lines' channel, its task, its file id and key.
type OpenUpload = (
    tokio::sync::mpsc::Sender<Result<Bytes, StorageError>>,
    tokio::task::JoinHandle<Result<u64, StorageError>>,
    String,
    String,
);

/// An output or error file written as its lines come; created on its first
/// line (a batch without errors has no error file).
struct OutputFile {
    store: Arc<dyn FileStore>,
    org_id: Uuid,
    name: String,
    open: Option<OpenUpload>,
}

impl OutputFile {
    fn new(store: Arc<dyn FileStore>, org_id: Uuid, batch_id: &str, kind: &str) -> Self {
        Self {
            store,
            org_id,
            name: format!("{batch_id}_{kind}.jsonl"),
            open: None,
        }
    }

    async fn write(&mut self, line: String) -> Result<(), BatchError> {
        if self.open.is_none() {
            let id = format!("file-{}", Uuid::now_v7().simple());
            let key = file_storage_key(self.org_id, &id);
            let (tx, rx) = tokio::sync::mpsc::channel(64);
            let (store, task_key) = (self.store.clone(), key.clone());
            let task =
                tokio::spawn(async move { store.put_stream(&task_key, receiver_stream(rx)).await });
            self.open = Some((tx, task, id, key));
        }
        let (tx, ..) = self.open.as_mut().expect("opened above");
        if tx.send(Ok(Bytes::from(line))).await.is_err() {
            // The upload stopped: its error is `finish`'s.
            return self.fail().await;
        }
        Ok(())
    }

    async fn fail(&mut self) -> Result<(), BatchError> {
        let Some((tx, task, ..)) = self.open.take() else {
            return Ok(());
        };
        drop(tx);
        match task.await {
            Ok(Err(err)) => Err(err.into()),
            _ => Err(BatchError::Storage(StorageError::Io(
                std::io::Error::other("writing a batch file stopped"),
            ))),
        }
    }

    /// Completes the upload and records the file; its id (none without a line).
    async fn finish(self, conn: &mut AsyncPgConnection) -> Result<Option<String>, BatchError> {
        let Some((tx, task, id, key)) = self.open else {
            return Ok(None);
        };
        drop(tx);
        let bytes = task
            .await
            .map_err(|e| StorageError::Io(std::io::Error::other(e.to_string())))??;
        files::insert(
            conn,
            &NewFile {
                id: &id,
                org_id: self.org_id,
                purpose: OUTPUT_PURPOSE,
                filename: &self.name,
                bytes: bytes as i64,
                storage_key: &key,
            },
        )
        .await?;
        Ok(Some(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_create_request_is_read_with_its_metadata() {
        let request = parse_create(&body(json!({
            "input_file_id": "file-1",
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
            "metadata": {"job": "nightly"},
        })))
        .unwrap();
        assert_eq!(request.endpoint, "/v1/chat/completions");
        assert_eq!(request.metadata, Some(json!({"job": "nightly"})));
    }

    #[test]
    fn bad_create_fields_name_their_param() {
        let param = |value: Value| match parse_create(&body(value)).unwrap_err() {
            BatchError::Invalid { param, .. } => param,
            other => panic!("{other}"),
        };
        let base =
            json!({"input_file_id": "f", "endpoint": "/v1/embeddings", "completion_window": "24h"});
        let with = |key: &str, value: Value| {
            let mut b = base.clone();
            b[key] = value;
            b
        };
        assert_eq!(param(with("endpoint", json!("/v1/images"))), "endpoint");
        assert_eq!(
            param(with("completion_window", json!("1h"))),
            "completion_window"
        );
        assert_eq!(param(with("input_file_id", json!(3))), "input_file_id");
        assert_eq!(param(with("metadata", json!({"k": 1}))), "metadata");
        assert_eq!(param(with("priority", json!(1))), "body");
        assert_eq!(
            param(json!({"endpoint": "/v1/embeddings", "completion_window": "24h"})),
            "input_file_id"
        );
    }

    #[test]
    fn only_batch_and_user_data_may_be_uploaded() {
        assert_eq!(check_purpose(Some("batch")).unwrap(), "batch");
        assert_eq!(check_purpose(Some("user_data")).unwrap(), "user_data");
        for bad in [Some("fine-tune"), Some("batch_output"), None] {
            assert!(matches!(
                check_purpose(bad),
                Err(BatchError::Invalid {
                    param: "purpose",
                    ..
                })
            ));
        }
    }
}
