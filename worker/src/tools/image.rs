//! Image generation (and legacy logos): render `n` images, store each,
//! report progress.

use serde_json::json;
use unigen_core::params::image::ImageParams;
use unigen_db::models::Job;

use unigen_core::config::ModelEntry;
use unigen_providers::openai::OpenAiClient;

use super::{params_of, retry_transient, store_output, upstream_client};
use crate::WorkerContext;
use crate::error::ToolError;
use crate::progress::Progress;
use crate::registry::ToolOutput;

/// Largest side accepted from an upstream image model.
const UPSTREAM_MAX_SIDE: u32 = 8192;

pub async fn run(
    context: &WorkerContext,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    let params: ImageParams = params_of(job)?;
    if let Some((model, client)) = upstream_client(context, job)? {
        return run_upstream(context, job, &params, model, &client).await;
    }
    if let Some((model, client)) = super::media_client(context, job)? {
        let fal = matches!(client, super::MediaClient::Fal(_));
        let mut images = Vec::with_capacity(params.n as usize);
        // One prediction per image (models differ in how many they return),
        // each with its own seed so the images differ.
        for index in 0..params.n {
            let seed = params.seed.wrapping_add(u64::from(index));
            // fal's image apps take a size object and a count; Replicate's
            // models width and height.
            let mut input = if fal {
                json!({
                    "prompt": params.prompt,
                    "image_size": {"width": params.width, "height": params.height},
                    "num_images": 1,
                    "seed": seed,
                })
            } else {
                json!({
                    "prompt": params.prompt,
                    "width": params.width,
                    "height": params.height,
                    "seed": seed,
                })
            };
            if let Some(negative) = &params.negative_prompt {
                input["negative_prompt"] = json!(negative);
            }
            images.push(client.run(model, input, None).await?);
            if index + 1 < params.n {
                progress.report(((index + 1) * 100 / params.n) as i16).await;
            }
        }
        return store_upstream_images(context, job, images).await;
    }
    let mut images = Vec::with_capacity(params.n as usize);
    for index in 0..params.n {
        // Transient provider failures are retried inside the attempt.
        let png = retry_transient(|| async {
            context.local.simulate_conditions().await?;
            if params.logo.is_some() {
                unigen_render::logo(&params, index).await
            } else {
                unigen_render::image(&params, index).await
            }
        })
        .await?;
        let key = store_output(context, job, &format!("{index}.png"), png).await?;
        images.push(json!({ "file": key, "width": params.width, "height": params.height }));
        // The last image's 100% is written with the result: no extra commit.
        if index + 1 < params.n {
            progress.report(((index + 1) * 100 / params.n) as i16).await;
        }
    }
    Ok(ToolOutput {
        output: json!({ "images": images }),
        actual_credits: job.estimated_credits,
    })
}

/// The `openai` adapter: one upstream call for all `n` images.
async fn run_upstream(
    context: &WorkerContext,
    job: &Job,
    params: &ImageParams,
    model: &ModelEntry,
    client: &OpenAiClient,
) -> Result<ToolOutput, ToolError> {
    let mut body = json!({
        "model": model.upstream_model.as_deref().unwrap_or(&model.id),
        "prompt": params.prompt,
        "n": params.n,
        "size": format!("{}x{}", params.width, params.height),
        "response_format": "b64_json",
        "style": params.style,
    });
    // Not every upstream knows `seed`; it is sent for those that do.
    body["seed"] = json!(params.seed);
    let images = client.generate_images(&body).await?;
    store_upstream_images(context, job, images).await
}

/// Stores an upstream's images as PNG files (re-encoded when the upstream
/// answered another format), each decoded within bounds first.
async fn store_upstream_images(
    context: &WorkerContext,
    job: &Job,
    images: Vec<Vec<u8>>,
) -> Result<ToolOutput, ToolError> {
    let mut stored = Vec::with_capacity(images.len());
    for (index, bytes) in images.into_iter().enumerate() {
        let (png, width, height) = as_png(bytes)?;
        let key = store_output(context, job, &format!("{index}.png"), png).await?;
        stored.push(json!({ "file": key, "width": width, "height": height }));
    }
    Ok(ToolOutput {
        actual_credits: job.estimated_credits,
        output: json!({ "images": stored }),
    })
}

/// The image as PNG bytes and its size.
fn as_png(bytes: Vec<u8>) -> Result<(Vec<u8>, u32, u32), ToolError> {
    let undecodable = || {
        ToolError::Provider(unigen_core::ProviderError::Permanent(
            "the upstream image could not be decoded".into(),
        ))
    };
    let image = unigen_core::images::decode_bounded(
        &bytes,
        UPSTREAM_MAX_SIDE,
        4 * unigen_core::images::MAX_DECODE_ALLOC,
    )
    .map_err(|_| undecodable())?;
    let (width, height) = (image.width(), image.height());
    if unigen_core::images::guessed_format(&bytes) == Some(image::ImageFormat::Png) {
        return Ok((bytes, width, height));
    }
    let mut png = std::io::Cursor::new(Vec::new());
    image
        .write_to(&mut png, image::ImageFormat::Png)
        .map_err(|_| undecodable())?;
    Ok((png.into_inner(), width, height))
}
