//! The one list of tools this worker can run, and dispatch to their handlers.

use unigen_core::domain::Tool;
use unigen_db::models::Job;

use crate::error::ToolError;
use crate::progress::Progress;
use crate::{WorkerContext, tools};

/// What a finished tool hands back: `outputData` (file keys, not URLs) and
/// the credits it actually consumed.
pub struct ToolOutput {
    pub output: serde_json::Value,
    pub actual_credits: i64,
}

pub async fn run(
    context: &WorkerContext,
    tool: Tool,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    // Benchmark models: the handler runs only for the first job of a shape.
    if tools::fixture::serves(context, job) {
        return tools::fixture::run(context, tool, job, handler(context, tool, job, progress))
            .await;
    }
    handler(context, tool, job, progress).await
}

/// The tool's handler; each picks the model's adapter (`local` unless the
/// model names an upstream).
async fn handler(
    context: &WorkerContext,
    tool: Tool,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    match tool {
        Tool::Image => tools::image::run(context, job, progress).await,
        Tool::ImageEdit => tools::edit::run(context, job, progress).await,
        Tool::Video => tools::video::run(context, job, progress).await,
        Tool::Music => tools::music::run(context, job, progress).await,
        Tool::Tts => tools::speech::run(context, job, progress).await,
        Tool::Stt => tools::transcription::run(context, job, progress).await,
    }
}
