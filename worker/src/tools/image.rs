//! Image generation: render `n` images, store each, report progress.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use serde_json::json;
use unigen_shared::db::models::Job;
use unigen_shared::jobs::image::ImageParams;
use unigen_shared::providers::ProviderError;

use crate::WorkerContext;
use crate::error::ToolError;
use crate::execute::Progress;
use crate::registry::ToolOutput;

pub async fn run(
    context: &WorkerContext,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    let params: ImageParams = serde_json::from_value(job.input_params.clone())
        .map_err(|e| ToolError::InvalidParams(e.to_string()))?;
    let mut images = Vec::with_capacity(params.n as usize);
    for index in 0..params.n {
        // Transient provider failures are retried inside the attempt.
        let png = (|| context.local.generate_image(&params, index))
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(50))
                    .with_max_delay(Duration::from_secs(2))
                    .with_max_times(3)
                    .with_jitter(),
            )
            .when(|e| matches!(e, ProviderError::Transient(_)))
            .await?;
        let key = format!("{}/{}/{index}.png", job.org_id, job.id);
        context
            .store
            .put(&key, png)
            .await
            .map_err(|e| ToolError::Storage(e.to_string()))?;
        images.push(json!({ "file": key, "width": params.width, "height": params.height }));
        progress.report(((index + 1) * 100 / params.n) as i16).await;
    }
    Ok(ToolOutput {
        output: json!({ "images": images }),
        actual_credits: job.estimated_credits,
    })
}
