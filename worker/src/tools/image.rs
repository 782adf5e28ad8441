//! Image generation (and legacy logos): render `n` images, store each,
//! report progress.

use serde_json::json;
use unigen_core::params::image::ImageParams;
use unigen_db::models::Job;

use unigen_providers::vendor::ImageCall;

use super::{params_of, retry_transient, store_output};
use crate::WorkerContext;
use crate::error::ToolError;
use crate::output::ToolOutput;
use crate::progress::Progress;
use crate::trace;
use unigen_core::telemetry::semconv;

/// Largest side accepted from an upstream image model.
const UPSTREAM_MAX_SIDE: u32 = 8192;

pub async fn run(
    context: &WorkerContext,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    let params: ImageParams = params_of(job)?;
    let model = super::configured_model(context, job)?;
    if let Some(client) = context.providers.images(model) {
        let span = trace::media_call(model, semconv::output_type::IMAGE);
        trace::record_prompt(&span, &params.prompt);
        let request = ImageCall {
            model: model.upstream_model.as_deref().unwrap_or(&model.id),
            prompt: &params.prompt,
            negative_prompt: params.negative_prompt.as_deref(),
            n: params.n,
            width: params.width,
            height: params.height,
            seed: params.seed,
            style: &params.style,
        };
        let images = trace::call(span, model, None, client.generate(&request)).await?;
        return store_upstream_images(context, job, images).await;
    }
    let mut images = Vec::with_capacity(params.n as usize);
    for index in 0..params.n {
        // Transient provider failures are retried inside the attempt.
        // One CLIENT span per attempt: retries are visible in the trace.
        let png = retry_transient(|| {
            let span = trace::media_call(model, semconv::output_type::IMAGE);
            trace::record_prompt(&span, &params.prompt);
            trace::call(span, model, Some(&model.id), async {
                context.local.simulate_conditions().await?;
                if params.logo.is_some() {
                    unigen_render::logo(&params, index).await
                } else {
                    unigen_render::image(&params, index).await
                }
            })
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
