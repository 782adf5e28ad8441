//! Route table: `/api/v1/...` (documented in OpenAPI), files, health, docs.

mod agent_runs;
mod agents;
mod batches;
mod batches_docs;
mod billing;
mod chat;
mod chat_stream;
mod delivery;
mod edits;
mod embeddings;
mod files;
mod generation;
mod health;
mod images;
mod job_events;
mod jobs;
mod keys;
mod knowledge;
mod legacy;
mod messages;
mod messages_native;
mod messages_stream;
mod models;
mod multipart;
mod music;
mod openai_files;
pub mod params;
mod responses;
mod responses_background;
mod responses_continued;
mod responses_docs;
mod responses_native;
mod responses_stored;
mod responses_stream;
mod speech;
mod transcriptions;
mod translations;
mod usage;
mod videos;
mod webhooks;

use utoipa_actix_web::service_config::ServiceConfig;

pub use agent_runs::replay as replay_agent_run;
pub use knowledge::{KNOWLEDGE_BODY_CEILING, KNOWLEDGE_UPLOAD_TEMPLATE};
pub use openai_files::{FILES_MULTIPART_OVERHEAD, FILES_UPLOAD_TEMPLATE};

/// Every `/api/v1` route; each is collected into the OpenAPI document.
pub fn configure_v1(cfg: &mut ServiceConfig) {
    cfg.service(images::create_image_generation)
        .service(edits::create_image_edit)
        .service(videos::create_video_generation)
        .service(speech::create_speech)
        .service(transcriptions::create_transcription)
        .service(translations::create_translation)
        .service(music::create_music_generation)
        .service(legacy::legacy_generate)
        .service(legacy::legacy_logo)
        .service(models::list_models)
        .service(models::get_model)
        .service(chat::create_chat_completion)
        .service(responses::create_response)
        .service(responses_stored::get_response)
        .service(responses_stored::delete_response)
        .service(responses_stored::cancel_response)
        .service(responses_stored::list_input_items)
        .service(messages::create_message)
        .service(messages::count_message_tokens)
        .service(embeddings::create_embeddings)
        .service(openai_files::create_file)
        .service(openai_files::list_files)
        .service(openai_files::get_file)
        .service(openai_files::get_file_content)
        .service(openai_files::delete_file)
        .service(batches::create_batch)
        .service(batches::list_batches)
        .service(batches::get_batch)
        .service(batches::cancel_batch)
        .service(jobs::list_jobs)
        .service(jobs::get_job)
        .service(jobs::cancel_job)
        .service(job_events::stream_job_events)
        .service(usage::get_usage)
        .service(billing::get_credits)
        .service(billing::get_quota)
        .service(billing::get_overage_status)
        .service(billing::configure_overage)
        .service(billing::get_account)
        .service(webhooks::create_webhook)
        .service(webhooks::list_webhooks)
        .service(webhooks::get_webhook)
        .service(webhooks::update_webhook)
        .service(webhooks::delete_webhook)
        .service(webhooks::rotate_webhook_secret)
        .service(webhooks::test_webhook)
        .service(webhooks::list_webhook_deliveries)
        .service(webhooks::redeliver_webhook_delivery)
        .service(webhooks::replay_webhook_deliveries)
        .service(agents::create_agent)
        .service(agents::list_agents)
        .service(agents::get_agent)
        .service(agents::update_agent)
        .service(agents::delete_agent)
        .service(agents::duplicate_agent)
        .service(agent_runs::run_agent)
        .service(agent_runs::list_runs)
        .service(agent_runs::get_run)
        .service(knowledge::upload_knowledge_file)
        .service(knowledge::list_knowledge_files)
        .service(knowledge::get_knowledge_file)
        .service(knowledge::delete_knowledge_file)
        .service(keys::create_key)
        .service(keys::list_keys)
        .service(keys::delete_key);
}

/// The `/v1` routes at the root, where Anthropic's SDKs and Claude Code
/// send them (`ANTHROPIC_BASE_URL` is the service's origin); the same
/// handlers as under `/api/v1`.
pub fn configure_root_v1(cfg: &mut ServiceConfig) {
    cfg.service(messages::create_message)
        .service(messages::count_message_tokens)
        // OpenAI's Files and Batches APIs, for `OPENAI_BASE_URL=<origin>/v1`.
        .service(openai_files::create_file)
        .service(openai_files::list_files)
        .service(openai_files::get_file)
        .service(openai_files::get_file_content)
        .service(openai_files::delete_file)
        .service(batches::create_batch)
        .service(batches::list_batches)
        .service(batches::get_batch)
        .service(batches::cancel_batch);
}

/// Routes outside the versioned API.
pub fn configure_root(cfg: &mut actix_web::web::ServiceConfig) {
    cfg.service(files::get_file)
        .service(health::healthz)
        .service(health::readyz)
        .service(health::metrics);
}
