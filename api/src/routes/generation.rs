//! The path every generation endpoint shares: load and store media inputs,
//! submit the job, answer 202 for `async=true`, or wait and render.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, HttpResponseBuilder};
use chrono::Utc;
use tokio::time::Instant;
use unigen_core::ValidationError;
use unigen_core::config::ModelEntry;
use unigen_core::domain::{JobStatus, Tool};
use unigen_core::fetch::{Media, sniff};
use unigen_core::params::{MediaRef, StoredInput, StoredInputs};
use unigen_db::DbError;
use unigen_db::billing::{AccountSnapshot, Bucket, Estimate, to_milli};
use unigen_db::models::Job;
use unigen_db::queries::jobs::CANCEL_AFTER_REASON;
use unigen_jobs::NewJobRequest;
use uuid::Uuid;

pub use super::delivery::{Delivery, Timing};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::metering::{ConcurrencySlot, read_balances, record_job_charge};
use crate::state::AppState;
use crate::views::{AsyncJobCreated, JobView};
use crate::wait;

/// Files uploaded in a multipart body, by request field.
pub type Uploads = Vec<(&'static str, Vec<u8>)>;

/// Loads every media field (URL or base64) and checks its format. Nothing is
/// stored yet, so a request rejected afterwards leaves nothing behind.
pub async fn fetch_inputs(
    state: &AppState,
    refs: Vec<MediaRef>,
) -> Result<Vec<(&'static str, Media)>, ApiError> {
    fetch_uploaded_inputs(state, refs, Uploads::new()).await
}

/// [`fetch_inputs`] where a field's file may have been uploaded: its bytes
/// get the same checks (size cap, format) with the same messages.
pub async fn fetch_uploaded_inputs(
    state: &AppState,
    refs: Vec<MediaRef>,
    mut uploads: Uploads,
) -> Result<Vec<(&'static str, Media)>, ApiError> {
    let mut loaded = Vec::with_capacity(refs.len());
    for media_ref in refs {
        let uploaded = uploads
            .iter()
            .position(|(field, _)| *field == media_ref.field)
            .map(|i| uploads.swap_remove(i).1);
        if let Some(bytes) = uploaded {
            let media = state
                .fetcher
                .accept(media_ref.field, bytes, media_ref.kind)
                .map_err(|e| ApiError::Validation(ValidationError::new(e.field, e.to_string())))?;
            loaded.push((media_ref.field, media));
            continue;
        }
        let media = match own_file(state, &media_ref).await? {
            Some(media) => media,
            None => state
                .fetcher
                .load(media_ref.field, &media_ref.source, media_ref.kind)
                .await
                .map_err(|e| ApiError::Validation(ValidationError::new(e.field, e.to_string())))?,
        };
        loaded.push((media_ref.field, media));
    }
    Ok(loaded)
}

/// A signed URL of this API's own files (e.g. an earlier job's output) is
/// read from storage directly: no HTTP round trip to ourselves, and it works
/// whatever the network policy for client URLs. Its size is checked first,
/// against the same `fetch.max_bytes` as any input: a 512 MiB video output
/// is refused without a byte of it read.
async fn own_file(state: &AppState, media_ref: &MediaRef) -> Result<Option<Media>, ApiError> {
    let Some(key) = state
        .signer
        .verified_key(media_ref.source.trim(), Utc::now().timestamp())
    else {
        return Ok(None);
    };
    let invalid = |reason: &str| {
        ApiError::Validation(ValidationError::new(
            media_ref.field,
            format!("{} {reason}", media_ref.field),
        ))
    };
    let too_large = || {
        let err = state.fetcher.too_large(media_ref.field);
        ApiError::Validation(ValidationError::new(err.field, err.to_string()))
    };
    let meta = state
        .store
        .head(&key)
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(|| invalid("refers to a file that no longer exists"))?;
    if meta.size > state.fetcher.max_bytes() as u64 {
        return Err(too_large());
    }
    let bytes = state
        .store
        .get(&key)
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(|| invalid("refers to a file that no longer exists"))?;
    if bytes.len() > state.fetcher.max_bytes() {
        return Err(too_large());
    }
    let extension = sniff(&bytes, media_ref.kind)
        .ok_or_else(|| invalid("is not a supported format for this field"))?;
    Ok(Some(Media { bytes, extension }))
}

/// Stores loaded inputs under the organization; the keys go into the job's
/// parameters, so the worker never fetches client URLs.
pub async fn store_inputs(
    state: &AppState,
    org_id: Uuid,
    loaded: Vec<(&'static str, Media)>,
) -> Result<StoredInputs, ApiError> {
    let mut stored = StoredInputs::new();
    for (field, media) in loaded {
        let key = format!("{org_id}/inputs/{}.{}", Uuid::now_v7(), media.extension);
        state
            .store
            .put(&key, media.bytes)
            .await
            .map_err(ApiError::internal)?;
        stored.insert(field.to_owned(), StoredInput { file: key });
    }
    Ok(stored)
}

/// The completed image job's files, each base64 (`response_format=b64_json`),
/// in the order of its `images`.
pub async fn images_base64(state: &AppState, job: &Job) -> Result<Vec<String>, ApiError> {
    use base64::Engine;
    let images = job
        .output_data
        .as_ref()
        .and_then(|o| o["images"].as_array())
        .ok_or_else(|| malformed(job))?;
    let mut encoded = Vec::with_capacity(images.len());
    for image in images {
        let key = image["file"].as_str().ok_or_else(|| malformed(job))?;
        let bytes = state
            .store
            .get(key)
            .await
            .map_err(ApiError::internal)?
            .ok_or_else(|| malformed(job))?;
        encoded.push(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    Ok(encoded)
}

/// Width and height of an image input from its header (no pixels decoded),
/// or a 400 naming the field: not an image, or a side over
/// [`MAX_INPUT_SIDE`] (a few bytes of PNG header can declare 60000x60000).
pub fn image_dimensions(field: &'static str, media: &Media) -> Result<(u32, u32), ApiError> {
    use unigen_core::images::{ImageLimitError, dimensions_bounded};
    use unigen_core::params::edit::MAX_INPUT_SIDE;
    dimensions_bounded(&media.bytes, MAX_INPUT_SIDE).map_err(|err| {
        let message = match err {
            ImageLimitError::TooLarge { .. } => {
                format!("{field} must be at most {MAX_INPUT_SIDE}x{MAX_INPUT_SIDE} pixels")
            }
            ImageLimitError::Undecodable | ImageLimitError::TooMuchMemory => {
                format!("{field} could not be decoded as an image")
            }
        };
        ApiError::Validation(ValidationError::new(field, message))
    })
}

pub struct Generation<'a> {
    pub tool: Tool,
    pub model: &'a ModelEntry,
    pub params: serde_json::Value,
    pub estimated_credits: i64,
    /// Units of the tool's quota bucket the request asks for (before the
    /// tier multiplier): images, seconds, characters, tracks.
    pub quota_units: f64,
    /// `?async`, `Prefer` and `Cancel-After`.
    pub timing: Timing,
    /// Used in the error of a failed sync job: "<what> failed: <reason>".
    pub what: &'static str,
}

/// What a generation request led to.
pub enum Outcome {
    /// Answered at once (`async`, `Prefer: respond-async`), or the
    /// `Prefer: wait` passed first: the async creation answer.
    Accepted(Job),
    /// Sync, but the server's wait limit passed first.
    StillRunning(Job),
    /// The job completed; the endpoint renders its response.
    Completed(Job),
}

/// An [`Outcome`] and the `Prefer` preference the request applied.
pub struct Answer {
    pub outcome: Outcome,
    preference_applied: Option<String>,
}

impl Answer {
    /// A response of `status` carrying `Preference-Applied` when a
    /// preference was applied.
    pub fn respond(&self, status: StatusCode) -> HttpResponseBuilder {
        respond(status, self.preference_applied.as_deref())
    }

    /// The completed job and the start of its 200 answer, or the standard
    /// 202 answer: the async creation body, or the job itself when the sync
    /// wait limit passed.
    pub fn completed(
        self,
        state: &AppState,
    ) -> Result<(Job, HttpResponseBuilder), Box<HttpResponse>> {
        let applied = self.preference_applied.as_deref();
        match self.outcome {
            Outcome::Completed(job) => Ok((job, respond(StatusCode::OK, applied))),
            Outcome::Accepted(job) => Err(Box::new(
                respond(StatusCode::ACCEPTED, applied).json(AsyncJobCreated::from(&job)),
            )),
            Outcome::StillRunning(job) => Err(Box::new(
                respond(StatusCode::ACCEPTED, applied).json(JobView::new(
                    &job,
                    &state.signer,
                    Utc::now(),
                )),
            )),
        }
    }
}

fn respond(status: StatusCode, preference_applied: Option<&str>) -> HttpResponseBuilder {
    let mut builder = HttpResponse::build(status);
    if let Some(applied) = preference_applied {
        builder.insert_header(("Preference-Applied", applied));
    }
    builder
}

/// Submits; answers at once for `async` (or `Prefer: respond-async`), or
/// waits (the server's sync limit, or `Prefer: wait`) and returns the job
/// completed (a failed or cancelled job is an error).
pub async fn run(
    state: &AppState,
    caller: &Caller,
    generation: Generation<'_>,
) -> Result<Answer, ApiError> {
    // Held while this request submits and, if sync, waits.
    let _slot = ConcurrencySlot::acquire(state, caller).await?;
    let estimate = estimate(&generation);
    let Timing {
        delivery,
        cancel_after,
    } = generation.timing;
    let answer = |outcome| Answer {
        outcome,
        preference_applied: delivery.preference_applied(),
    };
    let cancel_after = match cancel_after {
        Some(after) => {
            Some(Utc::now() + chrono::Duration::from_std(after).map_err(ApiError::internal)?)
        }
        None => None,
    };
    let job = state
        .submitter
        .submit(NewJobRequest {
            org_id: caller.org_id,
            api_key_id: caller.key_id,
            tool: generation.tool,
            model: generation.model,
            input_params: generation.params,
            estimate,
            cancel_after,
            idempotency: caller.effects.claim(),
        })
        .await?;
    state.metrics.job_submitted(generation.tool);
    // With the request's id (its span) and the trace's (tracing on).
    tracing::info!(job_id = %job.id, tool = %generation.tool, "job submitted");
    caller.effects.job_submitted(|| {
        serde_json::to_vec(&AsyncJobCreated::from(&job))
            .ok()
            .map(Into::into)
    });
    let limit = match delivery {
        Delivery::Async | Delivery::RespondAsync => return Ok(answer(Outcome::Accepted(job))),
        Delivery::Wait(seconds) => Duration::from_secs(seconds),
        Delivery::Sync => state.limits.sync_wait,
    };
    // The wait is the job's (queue and worker), not the gateway's overhead.
    let (job, balances) = unigen_core::telemetry::metrics::waiting_on_upstream(wait_within(
        state,
        caller.org_id,
        &job,
        limit,
    ))
    .await?;
    match job.status.parse::<JobStatus>() {
        Ok(JobStatus::Completed) => {
            let credits_used = job.actual_credits.unwrap_or(0);
            match balances {
                Balances::Read(Some(balances)) => caller.charges.record(credits_used, balances),
                Balances::Read(None) => {}
                Balances::Unread => record_job_charge(state, caller, credits_used).await,
            }
            Ok(answer(Outcome::Completed(job)))
        }
        Ok(JobStatus::Failed) => Err(ApiError::GenerationFailed(format!(
            "{} failed: {}",
            generation.what,
            job.error_message.as_deref().unwrap_or("unknown error")
        ))),
        Ok(JobStatus::Cancelled) if job.error_message.as_deref() == Some(CANCEL_AFTER_REASON) => {
            Err(ApiError::DeadlineExceeded(job.id))
        }
        Ok(JobStatus::Cancelled) => Err(ApiError::JobCancelled),
        Ok(JobStatus::Pending | JobStatus::Processing) | Err(_) => Ok(answer(match delivery {
            Delivery::Wait(_) => Outcome::Accepted(job),
            _ => Outcome::StillRunning(job),
        })),
    }
}

/// Waits up to `limit` for the job to finish. A `Cancel-After` deadline
/// within the wait ends it there: the job is cancelled now, exactly as the
/// scheduler's sweep would (reservation released, event, worker woken), so
/// the request answers at the deadline rather than at the sweep's round.
///
/// The account's balances (for the credit headers) are read alongside the
/// job once woken, so a sync answer costs no round trip after the job's.
async fn wait_within(
    state: &AppState,
    org_id: Uuid,
    submitted: &Job,
    limit: Duration,
) -> Result<(Job, Balances), ApiError> {
    let started = Instant::now();
    let id = submitted.id;
    let until_deadline = submitted
        .cancel_after
        .map(|at| (at - Utc::now()).to_std().unwrap_or_default());
    let first = until_deadline.map_or(limit, |left| left.min(limit));
    let balances = || read_balances(state, org_id);
    let (mut job, mut read) =
        wait::until_finished_alongside(state, org_id, id, first, balances).await?;
    if !is_terminal(&job) && job.cancel_after.is_some_and(|at| at <= Utc::now()) {
        let cancelled = {
            let mut conn = state.pool.get().await.map_err(DbError::from)?;
            unigen_jobs::cancel_one_past_deadline(&mut conn, org_id, id).await?
        };
        if let Some(cancelled) = cancelled {
            // Wakes the worker running it (it aborts) and the event delivery.
            state.notifier.job_changed(id);
            state.notifier.events_recorded();
            return Ok((cancelled, Balances::Unread));
        }
    }
    // Finished meanwhile, or the database's clock is behind ours (the sweep
    // cancels it then): the rest of the wait as usual.
    let waited = started.elapsed();
    if !is_terminal(&job) && waited < limit {
        (job, read) =
            wait::until_finished_alongside(state, org_id, id, limit - waited, balances).await?;
    }
    Ok((job, read.map_or(Balances::Unread, Balances::Read)))
}

/// The balances a wait read with the terminal job, for the credit headers.
enum Balances {
    /// Read after the job's completion (`None`: no account, or the read
    /// failed and was logged).
    Read(Option<AccountSnapshot>),
    /// Not read: the job was terminal before any wake-up.
    Unread,
}

fn is_terminal(job: &Job) -> bool {
    job.status
        .parse::<JobStatus>()
        .is_ok_and(JobStatus::is_terminal)
}

/// The credits and quota units a generation holds until it settles.
pub fn estimate(generation: &Generation<'_>) -> Estimate {
    let bucket = Bucket::for_tool(generation.tool);
    let multiplier = bucket.multiplier(generation.model.tier);
    Estimate {
        credits: generation.estimated_credits,
        bucket: Some((bucket, to_milli(generation.quota_units, multiplier))),
    }
}

/// The job's output presented (file keys signed into URLs), or a 500 when a
/// completed job has none (a worker bug, logged).
pub fn presented_output(state: &AppState, job: &Job) -> Result<serde_json::Value, ApiError> {
    job.output_data
        .as_ref()
        .map(|o| {
            unigen_core::storage::present_files(
                o,
                &state.signer,
                Utc::now().timestamp(),
                job.org_id,
            )
        })
        .ok_or_else(|| {
            ApiError::internal(anyhow::anyhow!("completed job {} has no output", job.id))
        })
}

pub fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("OS random source");
    // Below 2^53, so the seed survives JavaScript clients' numbers.
    u64::from_le_bytes(bytes) >> 11
}

pub fn malformed(job: &Job) -> ApiError {
    ApiError::internal(anyhow::anyhow!("job {} has malformed output", job.id))
}
