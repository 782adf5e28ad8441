//! The one list of tools this worker can run, and dispatch to their handlers.

use unigen_shared::db::models::Job;
use unigen_shared::domain::Tool;

use crate::WorkerContext;
use crate::error::ToolError;
use crate::execute::Progress;
use crate::tools;

/// What a finished tool hands back: `outputData` (file keys, not URLs) and
/// the credits it actually consumed.
pub struct ToolOutput {
    pub output: serde_json::Value,
    pub actual_credits: i64,
}

pub fn is_supported(tool: Tool) -> bool {
    match tool {
        Tool::Image => true,
        Tool::ImageEdit | Tool::Video | Tool::Music | Tool::Tts | Tool::Stt => false,
    }
}

pub fn supported_list() -> String {
    Tool::ALL
        .iter()
        .filter(|t| is_supported(**t))
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

pub async fn run(
    context: &WorkerContext,
    tool: Tool,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    match tool {
        Tool::Image => tools::image::run(context, job, progress).await,
        Tool::ImageEdit | Tool::Video | Tool::Music | Tool::Tts | Tool::Stt => Err(
            ToolError::InvalidParams(format!("tool {tool} is not supported by this worker")),
        ),
    }
}
