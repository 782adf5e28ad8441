use std::collections::HashMap;

use actix_web::{HttpResponse, post, web};
use chrono::Utc;
use unigen_shared::domain::{JobStatus, ModelCategory, Scope, Tool};
use unigen_shared::jobs::NewJobRequest;
use unigen_shared::jobs::image::ImageGenerationRequest;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::{json_body, query_bool};
use crate::state::AppState;
use crate::views::{AsyncJobCreated, ImageGenerationResponse, JobView};
use crate::wait;

/// Generate images from a prompt.
///
/// Sync by default: answers when the images are ready, or 202 with the job
/// if that takes longer than the server's wait limit. `?async=true` answers
/// at once with the job id.
#[utoipa::path(
    tag = "images",
    request_body = ImageGenerationRequest,
    params(("async" = Option<bool>, Query, description = "Answer at once with the job instead of waiting")),
    responses(
        (status = 200, description = "Images generated", body = ImageGenerationResponse),
        (status = 202, description = "Async job created (`async=true`), or the sync wait limit passed (a job)", body = AsyncJobCreated),
        (status = 400, description = "Invalid request; `param` names the field", body = ErrorBody),
        (status = 401, description = "invalid or missing API key / API key has expired", body = ErrorBody),
        (status = 403, description = "API key does not have required scope: image", body = ErrorBody),
        (status = 500, description = "Generation failed", body = ErrorBody),
    ),
    security(("bearer" = ["image"]))
)]
#[post("/images/generations")]
pub async fn create_image_generation(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Image)?;
    let is_async = query_bool(&query, "async", false)?;
    let request: ImageGenerationRequest = json_body(&body)?;
    let model = state
        .catalogue
        .resolve(request.model.as_deref(), ModelCategory::Image)?;
    let params = request.validate(random_seed())?;
    let job = state
        .submitter
        .submit(NewJobRequest {
            org_id: caller.org_id,
            api_key_id: caller.key_id,
            tool: Tool::Image,
            model,
            estimated_credits: model.credits_per_unit * i64::from(params.n),
            input_params: serde_json::to_value(&params).map_err(ApiError::internal)?,
        })
        .await?;
    state.metrics.job_submitted(Tool::Image);
    if is_async {
        return Ok(HttpResponse::Accepted().json(AsyncJobCreated::from(&job)));
    }
    let job = wait::until_finished(&state, caller.org_id, job.id, state.limits.sync_wait).await?;
    let now = Utc::now();
    match job.status.parse::<JobStatus>() {
        Ok(JobStatus::Completed) => ImageGenerationResponse::from_job(&job, &state.signer, now)
            .map(|response| HttpResponse::Ok().json(response))
            .ok_or_else(|| {
                ApiError::internal(anyhow::anyhow!("job {} has malformed output", job.id))
            }),
        Ok(JobStatus::Failed) => Err(ApiError::GenerationFailed(format!(
            "image generation failed: {}",
            job.error_message.as_deref().unwrap_or("unknown error")
        ))),
        Ok(JobStatus::Cancelled) => Err(ApiError::JobCancelled),
        Ok(JobStatus::Pending | JobStatus::Processing) | Err(_) => {
            Ok(HttpResponse::Accepted().json(JobView::new(&job, &state.signer, now)))
        }
    }
}

fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("OS random source");
    // Below 2^53, so the seed survives JavaScript clients' numbers.
    u64::from_le_bytes(bytes) >> 11
}
