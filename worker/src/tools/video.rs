//! Video generation: frames rendered in Rust, encoded by ffmpeg.

use serde_json::json;
use unigen_core::ProviderError;
use unigen_core::params::video::VideoParams;
use unigen_core::telemetry::semconv;
use unigen_db::models::Job;
use unigen_render::video;
use unigen_render::video::{VideoMode, VideoSpec};

use super::{input, params_of, store_output};
use crate::WorkerContext;
use crate::error::ToolError;
use crate::output::ToolOutput;
use crate::progress::Progress;

pub async fn run(
    context: &WorkerContext,
    job: &Job,
    progress: &Progress<'_>,
) -> Result<ToolOutput, ToolError> {
    let params: VideoParams = params_of(job)?;
    let (width, height) =
        video::dimensions(&params.resolution, &params.aspect_ratio).ok_or_else(|| {
            ToolError::InvalidParams(format!("{} at {}", params.resolution, params.aspect_ratio))
        })?;
    if let Some((model, client)) = super::media_client(context, job)? {
        let mut body = serde_json::json!({
            "prompt": params.prompt, "duration": params.duration_seconds, "resolution": params.resolution,
            "aspect_ratio": params.aspect_ratio, "fps": params.fps, "seed": params.seed,
            "loop": params.looping, "prompt_optimizer": params.prompt_optimizer,
        });
        if let Some(negative) = &params.negative_prompt {
            body["negative_prompt"] = json!(negative);
        }
        for (field, name) in [("source_image", "image"), ("source_video", "video")] {
            if let Some(uri) = super::input_data_uri(context, &params.inputs, field).await? {
                body[name] = json!(uri);
            }
        }
        progress.report(10).await;
        let bytes = super::run_media(
            model,
            client.as_ref(),
            body,
            None,
            semconv::output_type::VIDEO,
        )
        .await?;
        let seconds = unigen_core::audio::probe_duration(&bytes).await?;
        let key = store_output(context, job, "video.mp4", bytes).await?;
        return Ok(ToolOutput {
            output: json!({ "video": {
                "file": key, "duration": seconds, "width": width, "height": height, "fps": params.fps,
            }}),
            actual_credits: job.estimated_credits,
        });
    }
    let mode = match params.mode.as_str() {
        "image_to_video" => VideoMode::ImageToVideo,
        "video_to_video" => VideoMode::VideoToVideo,
        _ => VideoMode::TextToVideo,
    };
    super::simulate_local(context, job, semconv::output_type::VIDEO).await?;
    let source_image = match input(context, &params.inputs, "source_image").await? {
        Some(bytes) => Some(
            super::blocking(move || {
                unigen_core::images::decode_bounded(
                    &bytes,
                    unigen_core::params::edit::MAX_INPUT_SIDE,
                    unigen_core::images::MAX_DECODE_ALLOC,
                )
                .map_err(|err| {
                    ToolError::Provider(ProviderError::Permanent(match err {
                        unigen_core::images::ImageLimitError::Undecodable => {
                            "the source_image could not be decoded".into()
                        }
                        too_large => format!("the source_image is too large: {too_large}"),
                    }))
                })
            })
            .await?,
        ),
        None => None,
    };
    let source_video = input(context, &params.inputs, "source_video").await?;
    let spec = VideoSpec {
        prompt: &params.prompt,
        negative_prompt: params.negative_prompt.as_deref(),
        seed: params.seed,
        duration_seconds: params.duration_seconds,
        fps: params.fps,
        width,
        height,
        mode,
        source_image: source_image.as_ref(),
        source_video: source_video.as_deref(),
        looping: params.looping,
    };
    // The renderer reports progress synchronously; forward it to the job row.
    let (tx, mut rx) = tokio::sync::watch::channel(0u8);
    let report = move |percent: u8| {
        let _ = tx.send(percent);
    };
    let mut generate = std::pin::pin!(video::generate(&spec, &report));
    let rendered = loop {
        tokio::select! {
            result = &mut generate => break result?,
            changed = rx.changed() => {
                if changed.is_ok() {
                    let percent = *rx.borrow_and_update();
                    progress.report(i16::from(percent)).await;
                }
            }
        }
    };
    let key = store_output(context, job, "video.mp4", rendered.bytes).await?;
    let seconds = rendered.duration_seconds;
    Ok(ToolOutput {
        output: json!({ "video": {
            "file": key, "duration": seconds, "width": rendered.width, "height": rendered.height, "fps": rendered.fps,
        }}),
        actual_credits: job.estimated_credits,
    })
}
