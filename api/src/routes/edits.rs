use std::collections::HashMap;

use actix_web::{HttpRequest, HttpResponse, post, web};
use serde_json::json;
use unigen_core::ValidationError;
use unigen_core::domain::{ModelCategory, Scope, Tool};
use unigen_core::params::edit::{ImageEditRequest, MAX_INPUT_SIDE, MAX_OUTPUT_SIDE, output_size};
use unigen_core::params::image::ResponseFormat;

use super::delivery::{CANCEL_AFTER_DOC, PREFER_DOC};
use super::generation::{self, Generation, Timing, Uploads, image_dimensions, random_seed};
use super::multipart::{self, Body, Form, FormSpec};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::json_body;
use crate::state::AppState;
use crate::views::{AsyncJobCreated, job_usage};

/// The parts of a multipart edit: OpenAI's, then the JSON body's other fields.
const EDIT_FORM: FormSpec = FormSpec {
    files: &["image", "mask"],
    fields: &[
        "prompt",
        "model",
        "n",
        "size",
        "response_format",
        "operation",
        "strength",
        "direction",
        "expand_pixels",
        "new_background",
        "scale",
        "seed",
        "model_inputs",
    ],
};

/// `multipart/form-data` body of `POST /images/edits`, as the OpenAI SDKs
/// send it. The JSON body's other fields (`operation`, `strength`,
/// `direction`, `expand_pixels`, `new_background`, `scale`, `seed`,
/// `model_inputs` as JSON text) are accepted as text fields too.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // the schema only: routes::multipart reads the form
pub struct ImageEditForm {
    /// The image (JPEG, PNG, WebP). Sent as `image[]` for several, only the
    /// first is edited. A URL or data URI as text is loaded as in JSON.
    #[schema(value_type = String, format = Binary)]
    image: Vec<u8>,
    /// OpenAI's convention: its transparent pixels are edited (a mask
    /// without transparency: its white pixels). Same size as the image.
    #[schema(value_type = Option<String>, format = Binary)]
    mask: Option<Vec<u8>>,
    prompt: Option<String>,
    model: Option<String>,
    /// Only 1.
    #[schema(minimum = 1, maximum = 1)]
    n: Option<u32>,
    /// `512x512`, `1024x1024` or `auto`.
    size: Option<String>,
    /// `url` (default) or `b64_json`.
    response_format: Option<String>,
}

/// Edit an image: inpainting, outpainting, background removal or replacement,
/// object removal, super resolution, face enhancement, colorization, style
/// transfer. Output is PNG for background removal (transparency), JPEG otherwise.
/// The body is JSON (media as URLs or base64) or, as the OpenAI SDKs send
/// it, `multipart/form-data` with the files. With `response_format`
/// `b64_json`, `data[]` items carry the image (base64) instead of `url`.
#[utoipa::path(
    tag = "images",
    request_body(content(
        (ImageEditRequest = "application/json"),
        (ImageEditForm = "multipart/form-data"),
    )),
    params(
        ("async" = Option<bool>, Query, description = "Answer at once with the job (default false); given, it decides alone: `Prefer` is then ignored"),
        ("Prefer" = Option<String>, Header, description = PREFER_DOC),
        ("Cancel-After" = Option<String>, Header, description = CANCEL_AFTER_DOC),
    ),
    responses(
        (status = 200, description = "The edited image", body = crate::openapi::schemas::ImageEditResponse, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `wait=N` (N as applied, at most 60)"))),
        (status = 202, description = "Async job created, or the sync wait limit passed (the job itself): `JobAccepted`. With `Prefer: respond-async`, at once; with `Prefer: wait=N`, once N seconds passed: the async creation body, as for `async=true`", body = AsyncJobCreated, headers(("Preference-Applied" = String, description = "The `Prefer` preference applied: `respond-async`, or `wait=N` when the wait passed before the job finished"))),
        (status = 400, description = "image missing, not an image or too large; invalid operation; mask missing for inpainting or objectRemoval; mask size differs; invalid `response_format`; an unexpected file in a form; a malformed `Cancel-After`, or one over 24 hours (`param`: `Cancel-After`)", body = ErrorBody),
        (status = 402, description = "`quota_exceeded`: the image edit quota, the credits or the overage hard limit", body = ErrorBody),
        (status = 403, description = "API key does not have required scope: image_edit", body = ErrorBody),
        (status = 408, description = "`deadline_exceeded`: the job was cancelled at its `Cancel-After` deadline while the request waited (the message names the job); nothing is charged", body = ErrorBody),
        (status = 409, description = "`job_cancelled`: the job was cancelled while the request waited", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
        (status = 500, description = "`generation_failed`: the job failed; or an internal error", body = ErrorBody),
    ),
    security(("bearer" = ["image_edit"]))
)]
#[post("/images/edits")]
pub async fn create_image_edit(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<HashMap<String, String>>,
    http: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    // The key's scope first: no body is read for a key that cannot use it.
    caller.require(Scope::ImageEdit)?;
    let body = multipart::read_body(&state, &http, payload, &EDIT_FORM).await?;
    let timing = Timing::read(&http, &query, false)?;
    let (request, uploads, from_form) = match body {
        Body::Json(bytes) => (
            json_body::<ImageEditRequest>(&bytes)?,
            Uploads::new(),
            false,
        ),
        Body::Form(form) => {
            let (request, uploads) = edit_request(form)?;
            (request, uploads, true)
        }
    };
    let response_format = ResponseFormat::parse(request.response_format.as_deref())?;
    let model = state.catalogue.resolve_capable(
        request.model.as_deref(),
        ModelCategory::Image,
        "image_edit",
    )?;
    let (mut params, media) = request.validate(random_seed())?;
    params.mask_from_alpha = from_form;
    let loaded = generation::fetch_uploaded_inputs(&state, media, uploads).await?;
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
        timing,
        what: "image edit",
    };
    let (job, mut ok) = match generation::run(&state, &caller, generation)
        .await?
        .completed(&state)
    {
        Ok(done) => done,
        Err(response) => return Ok(*response),
    };
    let output = generation::presented_output(&state, &job)?;
    let mut data: Vec<_> = output["images"]
        .as_array()
        .ok_or_else(|| generation::malformed(&job))?
        .iter()
        .map(|image| json!({ "url": image["url"], "width": image["width"], "height": image["height"] }))
        .collect();
    if response_format == ResponseFormat::B64Json {
        let encoded = generation::images_base64(&state, &job).await?;
        for (item, b64) in data.iter_mut().zip(encoded) {
            item["b64_json"] = json!(b64);
            if let Some(item) = item.as_object_mut() {
                item.remove("url");
            }
        }
    }
    Ok(ok.json(json!({
        "created": job.created_at.timestamp(),
        "data": data,
        "model": job.model,
        "model_tier": job.model_tier,
        "usage": job_usage(&job),
    })))
}

/// The edit request a form carries; uploaded files go to the returned
/// uploads, checked later exactly as fetched media are.
fn edit_request(mut form: Form) -> Result<(ImageEditRequest, Uploads), ValidationError> {
    let mut uploads = Uploads::new();
    let request = ImageEditRequest {
        image: form.take_source("image", &mut uploads),
        mask: form.take_source("mask", &mut uploads),
        operation: form.text("operation"),
        prompt: form.text("prompt"),
        model: form.text("model"),
        size: form.text("size"),
        n: form.number("n", "an integer")?,
        response_format: form.text("response_format"),
        strength: form.number("strength", "a number")?,
        direction: form.text("direction"),
        expand_pixels: form.number("expand_pixels", "an integer")?,
        new_background: form.text("new_background"),
        scale: form.number("scale", "an integer")?,
        seed: form.number("seed", "a non-negative integer")?,
        model_inputs: form.json("model_inputs")?,
    };
    Ok((request, uploads))
}
