//! Image generation (and legacy logos): render `n` images, store each,
//! report progress.

use serde_json::json;
use unigen_shared::db::models::Job;
use unigen_shared::jobs::image::ImageParams;

use super::{params_of, retry_transient, store_output};
use crate::WorkerContext;
use crate::error::ToolError;
use crate::execute::Progress;
use crate::registry::ToolOutput;

pub async fn run(
    context: &WorkerContext,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    let params: ImageParams = params_of(job)?;
    let mut images = Vec::with_capacity(params.n as usize);
    for index in 0..params.n {
        // Transient provider failures are retried inside the attempt.
        let png = retry_transient(|| async {
            if params.logo.is_some() {
                context.local.generate_logo(&params, index).await
            } else {
                context.local.generate_image(&params, index).await
            }
        })
        .await?;
        let key = store_output(context, job, &format!("{index}.png"), png).await?;
        images.push(json!({ "file": key, "width": params.width, "height": params.height }));
        progress.report(((index + 1) * 100 / params.n) as i16).await;
    }
    Ok(ToolOutput {
        output: json!({ "images": images }),
        actual_credits: job.estimated_credits,
    })
}
