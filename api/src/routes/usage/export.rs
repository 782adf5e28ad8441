//! `format=csv`: every record of the filtered range, newest first, up to
//! [`CSV_ROW_CAP`] rows, read in keyset batches from one snapshot so the
//! file is consistent and memory holds one batch of rows at a time.

use diesel_async::AsyncPgConnection;
use unigen_db::queries::usage;
use unigen_db::queries::usage::{LocalRecord, UsageFilter};

use super::view::local_time;
use crate::error::ApiError;

/// Largest export; `X-Total-Count` tells when the range holds more.
pub const CSV_ROW_CAP: i64 = 100_000;
const BATCH_ROWS: i64 = 1_000;

pub const HEADER: [&str; 13] = [
    "timestamp",
    "request_id",
    "api_key_id",
    "endpoint",
    "method",
    "model",
    "credits",
    "latency_ms",
    "status",
    "tools_used",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
];

pub struct CsvExport {
    pub body: Vec<u8>,
    /// Records in the range (more than the rows when capped).
    pub total: i64,
    pub rows: i64,
}

fn row(local: &LocalRecord) -> [String; 13] {
    let r = &local.record;
    [
        local_time(r.created_at, local.utc_offset_seconds),
        r.id.to_string(),
        r.api_key_id.map(|id| id.to_string()).unwrap_or_default(),
        r.endpoint.clone(),
        r.method.clone(),
        r.model.clone(),
        r.credits.to_string(),
        r.latency_ms.to_string(),
        r.status.clone(),
        // One field: the csv writer quotes it when it holds a comma.
        r.tools_used.join(","),
        r.prompt_tokens.to_string(),
        r.completion_tokens.to_string(),
        r.total_tokens.to_string(),
    ]
}

pub async fn export(
    conn: &mut AsyncPgConnection,
    filter: &UsageFilter,
    timezone: &str,
) -> Result<CsvExport, ApiError> {
    conn.build_transaction()
        .read_only()
        .repeatable_read()
        .run(async |conn| {
            let total = usage::summarize(conn, filter).await?.requests;
            let mut writer = csv::Writer::from_writer(Vec::new());
            writer.write_record(HEADER).map_err(ApiError::internal)?;
            let mut rows = 0;
            let mut after = None;
            while rows < CSV_ROW_CAP {
                let batch_size = BATCH_ROWS.min(CSV_ROW_CAP - rows);
                let batch = usage::records_after(conn, filter, timezone, after, batch_size).await?;
                for record in &batch {
                    writer
                        .write_record(row(record))
                        .map_err(ApiError::internal)?;
                }
                rows += batch.len() as i64;
                match batch.last() {
                    Some(last) if batch.len() as i64 == batch_size => {
                        after = Some((last.record.created_at, last.record.id));
                    }
                    _ => break,
                }
            }
            let body = writer
                .into_inner()
                .map_err(|e| ApiError::internal(anyhow::anyhow!("csv: {e}")))?;
            Ok(CsvExport { body, total, rows })
        })
        .await
}
