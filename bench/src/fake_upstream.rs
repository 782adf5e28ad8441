//! A minimal OpenAI-compatible server with a fixed answer, so a benchmark
//! measures the gateway in front of it and not a model: chat completions,
//! and `POST /v1/images/generations` (a tiny `b64_json` PNG) for the
//! `bench/remote-image` model of `bench/unigen-bench.toml`. It does no work per
//! request beyond reading one JSON field, so it is never the bottleneck.

use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, get, post, web};
use serde::Deserialize;
use serde_json::{Value, json};

/// The answer's text, and its token counts as a real model would report them.
const CONTENT: &str = "Hello from the fake upstream.";
const PROMPT_TOKENS: u32 = 9;
const COMPLETION_TOKENS: u32 = 6;

#[derive(clap::Args)]
pub struct Args {
    /// Port to listen on (127.0.0.1 only).
    #[arg(long, default_value_t = 9400)]
    port: u16,
    /// Fixed delay before every answer, in milliseconds (a stand-in for model time).
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// HTTP worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
}

/// The only request fields that change the answer.
#[derive(Deserialize)]
struct ChatRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stream: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    eprintln!(
        "fake upstream on http://127.0.0.1:{}/v1 (latency {} ms, {} workers)",
        args.port, args.latency_ms, args.workers
    );
    serve(args.port, args.latency_ms, args.workers)
}

/// Serves on `port` from a thread of its own, for a benchmark that brings
/// its vendor along (`jobs-throughput --provider-latency-ms`). Fails if the
/// port cannot be bound.
pub fn spawn(port: u16, latency_ms: u64) -> anyhow::Result<()> {
    // Bind here first, so a taken port is an error, not a silent thread death.
    drop(std::net::TcpListener::bind(("127.0.0.1", port))?);
    std::thread::spawn(move || {
        if let Err(err) = serve(port, latency_ms, 2) {
            eprintln!("fake upstream stopped: {err:#}");
        }
    });
    Ok(())
}

fn serve(port: u16, latency_ms: u64, workers: usize) -> anyhow::Result<()> {
    let latency = Duration::from_millis(latency_ms);
    actix_web::rt::System::new().block_on(async move {
        HttpServer::new(move || {
            App::new()
                .app_data(web::Data::new(latency))
                .service(chat_completions)
                .service(images_generations)
                .service(models)
        })
        .workers(workers)
        // Hundreds of jobs wait on it at once.
        .backlog(4096)
        // Connections left idle between benchmark passes stay open, so the
        // gateway's pool does not reconnect (or hit a closed socket) mid-run.
        .keep_alive(Duration::from_secs(75))
        .bind(("127.0.0.1", port))?
        .run()
        .await
    })?;
    Ok(())
}

#[post("/v1/chat/completions")]
async fn chat_completions(latency: web::Data<Duration>, body: web::Bytes) -> HttpResponse {
    let Ok(request) = serde_json::from_slice::<ChatRequest>(&body) else {
        return HttpResponse::BadRequest().json(json!({
            "error": { "message": "the body is not a JSON chat request", "type": "invalid_request_error" }
        }));
    };
    if !latency.is_zero() {
        actix_web::rt::time::sleep(**latency).await;
    }
    let model = request.model.unwrap_or_else(|| "bench".to_owned());
    if request.stream {
        HttpResponse::Ok()
            .content_type("text/event-stream")
            .insert_header(("Cache-Control", "no-cache"))
            .body(sse_body(&model))
    } else {
        HttpResponse::Ok().json(completion(&model))
    }
}

/// A 1x1 PNG, base64.
const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

/// OpenAI's image generation answer, `b64_json`, after the latency.
#[post("/v1/images/generations")]
async fn images_generations(latency: web::Data<Duration>) -> HttpResponse {
    if !latency.is_zero() {
        actix_web::rt::time::sleep(**latency).await;
    }
    HttpResponse::Ok().json(json!({ "created": 0, "data": [{ "b64_json": PNG_B64 }] }))
}

#[get("/v1/models")]
async fn models() -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "object": "list",
        "data": [{ "id": "bench", "object": "model", "created": 0, "owned_by": "bench" }],
    }))
}

fn usage() -> Value {
    json!({
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
    })
}

/// A non-streaming `chat.completion`.
fn completion(model: &str) -> Value {
    json!({
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": CONTENT },
            "finish_reason": "stop",
        }],
        "usage": usage(),
    })
}

/// The answer as server-sent `chat.completion.chunk` events: the role, the
/// content in a few pieces, the finish reason, the usage (gateways ask for it
/// with `stream_options.include_usage`), then `[DONE]`.
fn sse_body(model: &str) -> String {
    let chunk = |choices: Value| {
        json!({
            "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
            "model": model, "choices": choices,
        })
    };
    let delta = |delta: Value, finish: Option<&str>| {
        chunk(json!([{ "index": 0, "delta": delta, "finish_reason": finish }]))
    };
    let mut events = vec![delta(json!({ "role": "assistant", "content": "" }), None)];
    events.extend(
        CONTENT
            .split_inclusive(' ')
            .map(|piece| delta(json!({ "content": piece }), None)),
    );
    events.push(delta(json!({}), Some("stop")));
    let mut last = chunk(json!([]));
    last["usage"] = usage();
    events.push(last);
    let mut body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_carries_the_whole_answer_and_ends_with_done() {
        let body = sse_body("bench");
        assert!(body.ends_with("data: [DONE]\n\n"));
        let text: String = body
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|e| *e != "[DONE]")
            .filter_map(|e| {
                let v: Value = serde_json::from_str(e).unwrap();
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        assert_eq!(text, CONTENT);
    }
}
