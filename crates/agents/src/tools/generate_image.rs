//! `generate_image`: a real job on the image pipeline, waited for.
//!
//! The job is submitted like `POST /images/generations` with `n` = 1 on the
//! default image model, but holds no credits: the run charges the tool's
//! price itself, and the job only counts its image in the
//! `image_generations` bucket. A job still running after `image_wait` is
//! cancelled, which releases its reservation.

use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};
use tokio::time::Instant;
use uuid::Uuid;

use super::args::Args;
use super::kit::{Done, Failure, ToolDeps, ToolScope};
use unigen_core::domain::{JobStatus, ModelCategory, Tool};
use unigen_core::params::image::ImageGenerationRequest;
use unigen_core::storage::{UrlSigner, present_files};
use unigen_db::billing::{Bucket, Estimate, to_milli};
use unigen_db::models::Job;
use unigen_db::queries::jobs::CancelOutcome;
use unigen_db::{DbError, queries};
use unigen_jobs::{NewJobRequest, SubmitError, cancel};

/// Seeds stay below 2^53 so JavaScript clients read them exactly.
pub(super) const MAX_SEED: i64 = (1 << 53) - 1;
/// Longest pause between two reads of the job: a lost notification only
/// delays the answer by this much.
const RECHECK: Duration = Duration::from_secs(1);

/// The images endpoint's request for these arguments (one image).
pub(super) fn image_request(args: &Args<'_>) -> Result<ImageGenerationRequest, Failure> {
    Ok(ImageGenerationRequest {
        prompt: args.string("prompt")?.map(str::to_owned),
        model: None,
        size: args.string("size")?.map(str::to_owned),
        n: Some(1),
        style: args.string("style")?.map(str::to_owned),
        upscale: None,
        negative_prompt: args.string("negative_prompt")?.map(str::to_owned),
        seed: args
            .integer("seed", 0, MAX_SEED)?
            .and_then(|seed| u64::try_from(seed).ok()),
        response_format: None,
    })
}

pub(super) async fn generate_image(
    deps: &ToolDeps,
    args: &Args<'_>,
    scope: &ToolScope<'_>,
) -> Result<Done, Failure> {
    let params = image_request(args)?.validate(random_seed())?;
    let model = deps
        .catalogue
        .resolve_capable(None, ModelCategory::Image, "text_to_image")
        .map_err(|err| {
            tracing::error!(error = %err, "generate_image: no image model");
            Failure::new("image generation is not available on this server")
        })?;
    let bucket = Bucket::ImageGenerations;
    let input_params = serde_json::to_value(&params).map_err(|err| {
        tracing::error!(error = %err, "generate_image: parameters do not serialize");
        Failure::new("image generation failed")
    })?;
    let job = deps
        .submitter
        .submit(NewJobRequest {
            org_id: scope.org_id,
            api_key_id: scope.api_key_id,
            tool: Tool::Image,
            model,
            input_params,
            estimate: Estimate {
                credits: 0,
                bucket: Some((
                    bucket,
                    to_milli(f64::from(params.n), bucket.multiplier(model.tier)),
                )),
            },
            cancel_after: None,
            idempotency: None,
        })
        .await
        .map_err(|err| match err {
            SubmitError::Refused(refusal) => Failure::new(refusal.to_string()),
            SubmitError::Db(err) => {
                tracing::warn!(error = %err, "generate_image: submitting the job failed");
                Failure::new("image generation is unavailable right now; try again later")
            }
        })?;
    tracing::info!(job.id = %job.id, "generate_image: job submitted");
    match wait(deps, scope.org_id, job.id).await {
        Some(job) => finished(&deps.signer, &job),
        None => give_up(deps, scope.org_id, job.id).await,
    }
}

/// The job once terminal, or `None` when `image_wait` passed first.
/// Subscribes before reading, so a change between the read and the wait
/// still wakes it; re-reads periodically in case a notification was lost.
async fn wait(deps: &ToolDeps, org_id: Uuid, id: Uuid) -> Option<Job> {
    let deadline = Instant::now() + deps.image_wait;
    let mut watch = deps.hub.subscribe(id);
    loop {
        match read(deps, org_id, id).await {
            Ok(Some(job)) if is_terminal(&job) => return Some(job),
            Ok(_) => {}
            // The job is safe in the database: keep waiting within the limit.
            Err(err) => {
                tracing::warn!(job.id = %id, error = %err, "generate_image: reading the job failed")
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        tokio::select! {
            _ = watch.changed() => {}
            _ = tokio::time::sleep(RECHECK.min(deadline - now)) => {}
        }
    }
}

async fn read(deps: &ToolDeps, org_id: Uuid, id: Uuid) -> Result<Option<Job>, DbError> {
    let mut conn = deps.pool.get().await?;
    queries::jobs::find_for_org(&mut conn, org_id, id).await
}

fn is_terminal(job: &Job) -> bool {
    job.status
        .parse::<JobStatus>()
        .is_ok_and(JobStatus::is_terminal)
}

/// The tool's result for a terminal job.
fn finished(signer: &UrlSigner, job: &Job) -> Result<Done, Failure> {
    match job.status.parse::<JobStatus>() {
        Ok(JobStatus::Completed) => {
            let images = job
                .output_data
                .as_ref()
                .map(|output| present_files(output, signer, Utc::now().timestamp(), job.org_id))
                .and_then(|output| images(&output))
                .ok_or_else(|| {
                    tracing::error!(job.id = %job.id, "generate_image: completed job has no images");
                    Failure::new("image generation failed: the job produced no image")
                })?;
            Ok(Done::output(json!({ "job_id": job.id, "images": images })))
        }
        Ok(JobStatus::Failed) => Err(Failure::new(format!(
            "image generation failed: {}",
            job.error_message.as_deref().unwrap_or("unknown error")
        ))),
        Ok(JobStatus::Cancelled) => Err(Failure::new("image generation was cancelled")),
        Ok(JobStatus::Pending | JobStatus::Processing) | Err(_) => {
            tracing::error!(job.id = %job.id, status = %job.status, "generate_image: job is not finished");
            Err(Failure::new("image generation did not finish"))
        }
    }
}

/// `[{url, width, height}]` of a presented output; `None` if it has none.
fn images(output: &Value) -> Option<Vec<Value>> {
    let images: Vec<Value> = output["images"]
        .as_array()?
        .iter()
        .map(|image| {
            Some(json!({
                "url": image["url"].as_str()?,
                "width": image["width"].as_u64()?,
                "height": image["height"].as_u64()?,
            }))
        })
        .collect::<Option<_>>()?;
    (!images.is_empty()).then_some(images)
}

/// Cancels a job that outlived the wait (releasing its reservation) and
/// says so. A job that finished meanwhile is reported as it finished.
async fn give_up(deps: &ToolDeps, org_id: Uuid, id: Uuid) -> Result<Done, Failure> {
    let late = || Failure::new("image generation did not finish in time");
    let cancelled = async {
        let mut conn = deps.pool.get().await?;
        cancel(&mut conn, org_id, id).await
    }
    .await;
    match cancelled {
        Ok(CancelOutcome::Cancelled(_)) => {
            // The worker aborts its provider call when told.
            deps.notifier.job_changed(id);
            tracing::info!(job.id = %id, "generate_image: job cancelled after the wait");
            Err(Failure::new(format!(
                "image generation did not finish within {} seconds; the job was cancelled",
                deps.image_wait.as_secs()
            )))
        }
        Ok(CancelOutcome::AlreadyFinished(_)) => match read(deps, org_id, id).await {
            Ok(Some(job)) => finished(&deps.signer, &job),
            Ok(None) | Err(_) => Err(late()),
        },
        Ok(CancelOutcome::NotFound) => {
            tracing::error!(job.id = %id, "generate_image: job vanished");
            Err(late())
        }
        Err(err) => {
            tracing::warn!(job.id = %id, error = %err, "generate_image: cancelling the job failed");
            Err(late())
        }
    }
}

/// A seed when the call names none, as the images endpoint picks it.
fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // Any value is a valid seed; the clock is random enough for art.
        bytes = Utc::now()
            .timestamp_nanos_opt()
            .unwrap_or_default()
            .to_le_bytes();
    }
    u64::from_le_bytes(bytes) >> 11
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORG: Uuid = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001);

    fn job(status: &str, output: Option<Value>, error: Option<&str>) -> Job {
        let now = Utc::now();
        Job {
            id: Uuid::now_v7(),
            org_id: ORG,
            api_key_id: Uuid::now_v7(),
            tool: "image".into(),
            status: status.into(),
            progress: 100,
            model: "local/procedural-v1".into(),
            model_tier: "fast".into(),
            input_params: json!({"prompt": "a lighthouse"}),
            output_data: output,
            estimated_credits: 0,
            actual_credits: Some(0),
            error_message: error.map(str::to_owned),
            attempt: 1,
            enqueued_at: Some(now),
            worker_id: None,
            lease_expires_at: None,
            created_at: now,
            started_at: Some(now),
            completed_at: Some(now),
            usage: None,
            cancel_after: None,
            trace_context: None,
        }
    }

    #[test]
    fn agents_tools_generate_image_presents_a_finished_job() {
        let signer = UrlSigner::new("secret", "https://api.test/v1", Duration::from_secs(600));
        let done = job(
            "completed",
            Some(
                json!({"images": [{"file": format!("{ORG}/job/0.png"), "width": 512, "height": 384}]}),
            ),
            None,
        );
        let output = finished(&signer, &done).unwrap().output;
        assert_eq!(output["job_id"], json!(done.id));
        let url = output["images"][0]["url"].as_str().unwrap();
        assert_eq!(
            signer.verified_key(url, Utc::now().timestamp()).as_deref(),
            Some(format!("{ORG}/job/0.png").as_str())
        );
        assert_eq!(
            (
                &output["images"][0]["width"],
                &output["images"][0]["height"]
            ),
            (&json!(512), &json!(384))
        );

        let failed = job("failed", None, Some("the provider refused the prompt"));
        assert_eq!(
            finished(&signer, &failed).unwrap_err().0,
            "image generation failed: the provider refused the prompt"
        );
        let empty = job("completed", Some(json!({"images": []})), None);
        assert!(
            finished(&signer, &empty)
                .unwrap_err()
                .0
                .contains("no image")
        );
        let cancelled = job("cancelled", None, None);
        assert_eq!(
            finished(&signer, &cancelled).unwrap_err().0,
            "image generation was cancelled"
        );
    }

    #[test]
    fn agents_tools_generate_image_asks_for_one_image_with_the_endpoint_rules() {
        let arguments =
            json!({"prompt": "a fox", "size": "512x512", "style": "natural", "seed": 42, "n": 4});
        let params = image_request(&Args::of(&arguments).unwrap())
            .unwrap()
            .validate(7)
            .unwrap();
        assert_eq!(
            (
                params.n,
                params.size.as_str(),
                params.style.as_str(),
                params.seed
            ),
            (1, "512x512", "natural", 42),
            "n is always 1"
        );
        assert_eq!((params.width, params.height), (512, 512));
        assert!(random_seed() <= MAX_SEED as u64);
    }
}
