//! The one list of tools this worker can run, and dispatch to their handlers.

use unigen_core::domain::Tool;
use unigen_db::models::Job;

use crate::budget::Kind;
use crate::error::ToolError;
use crate::output::ToolOutput;
use crate::progress::Progress;
use crate::{WorkerContext, tools};

/// Runs the job's tool once a permit of its model's kind (remote or local)
/// in the tool's budget is free; the caller renews the lease meanwhile.
pub async fn run(
    context: &WorkerContext,
    tool: Tool,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    // A model no longer configured fails in its handler, at once.
    let kind = context
        .catalogue
        .get(&job.model)
        .map_or(Kind::Local, Kind::of);
    let _permit = context.budgets.acquire(tool, kind).await;
    // Benchmark models: the handler runs only for the first job of a shape
    // (a response is a chat turn: its answer is never reused).
    if tool != Tool::Responses && tools::fixture::serves(context, job) {
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
        Tool::Responses => tools::responses::run(context, job).await,
    }
}
