use std::collections::HashMap;

use actix_web::{HttpResponse, post, web};
use serde_json::json;
use unigen_core::ValidationError;
use unigen_core::domain::{ModelCategory, Scope, Tool};
use unigen_core::params::edit::{ImageEditRequest, MAX_INPUT_SIDE, MAX_OUTPUT_SIDE, output_size};

use super::generation::{self, Generation, image_dimensions, random_seed};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::{json_body, query_bool};
use crate::state::AppState;
use crate::views::{AsyncJobCreated, job_usage};

/// Edit an image: inpainting, outpainting, background removal or replacement,
/// object removal, super resolution, face enhancement, colorization, style
/// transfer. Output is PNG for background removal (transparency), JPEG otherwise.
#[utoipa::path(
    tag = "images",
    request_body = ImageEditRequest,
    params(("async" = Option<bool>, Query, description = "Answer at once with the job (default false)")),
    responses(
        (status = 200, description = "`{created, data: [{url, width, height}], model, model_tier, usage}`", body = Object),
        (status = 202, description = "Async job created, or the sync wait limit passed", body = AsyncJobCreated),
        (status = 400, description = "image missing; invalid operation; mask missing for inpainting or objectRemoval; mask size differs", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "API key does not have required scope: image_edit", body = ErrorBody),
        (status = 500, body = ErrorBody),
    ),
    security(("bearer" = ["image_edit"]))
)]
#[post("/images/edits")]
pub async fn create_image_edit(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::ImageEdit)?;
    let is_async = query_bool(&query, "async", false)?;
    let request: ImageEditRequest = json_body(&body)?;
    let model = state.catalogue.resolve_capable(
        request.model.as_deref(),
        ModelCategory::Image,
        "image_edit",
    )?;
    let (mut params, media) = request.validate(random_seed())?;
    let loaded = generation::fetch_inputs(&state, media).await?;
    let (width, height) = image_dimensions("image", &loaded[0].1)?;
    if width > MAX_INPUT_SIDE || height > MAX_INPUT_SIDE {
        return Err(ValidationError::new(
            "image",
            format!("image must be at most {MAX_INPUT_SIDE}x{MAX_INPUT_SIDE} pixels"),
        )
        .into());
    }
    if let Some((_, mask)) = loaded.get(1) {
        let mask_size = image_dimensions("mask", mask)?;
        if mask_size != (width, height) {
            return Err(ValidationError::new(
                "mask",
                format!(
                    "mask must have the image's dimensions ({width}x{height}), got {}x{}",
                    mask_size.0, mask_size.1
                ),
            )
            .into());
        }
    }
    let (out_w, out_h) = output_size(&params, width, height);
    if out_w > MAX_OUTPUT_SIDE || out_h > MAX_OUTPUT_SIDE {
        return Err(ValidationError::new(
            "image",
            format!("the result would be {out_w}x{out_h}; at most {MAX_OUTPUT_SIDE} pixels per side are produced"),
        )
        .into());
    }
    params.inputs = generation::store_inputs(&state, caller.org_id, loaded).await?;
    let generation = Generation {
        tool: Tool::ImageEdit,
        model,
        estimated_credits: model.credits_per_unit,
        quota_units: 1.0,
        params: serde_json::to_value(&params).map_err(ApiError::internal)?,
        is_async,
        what: "image edit",
    };
    let job = match generation::run(&state, &caller, generation)
        .await?
        .completed(&state)
    {
        Ok(job) => job,
        Err(response) => return Ok(*response),
    };
    let output = generation::presented_output(&state, &job)?;
    let data: Vec<_> = output["images"]
        .as_array()
        .ok_or_else(|| generation::malformed(&job))?
        .iter()
        .map(|image| json!({ "url": image["url"], "width": image["width"], "height": image["height"] }))
        .collect();
    Ok(HttpResponse::Ok().json(json!({
        "created": job.created_at.timestamp(),
        "data": data,
        "model": job.model,
        "model_tier": job.model_tier,
        "usage": job_usage(&job),
    })))
}
