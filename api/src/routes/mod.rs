//! Route table: `/api/v1/...` (documented in OpenAPI), files, health, docs.

mod files;
mod health;
mod images;
mod jobs;
pub mod params;

use utoipa_actix_web::service_config::ServiceConfig;

/// Every `/api/v1` route; each is collected into the OpenAPI document.
pub fn configure_v1(cfg: &mut ServiceConfig) {
    cfg.service(images::create_image_generation)
        .service(jobs::list_jobs)
        .service(jobs::get_job)
        .service(jobs::cancel_job);
}

/// Routes outside the versioned API.
pub fn configure_root(cfg: &mut actix_web::web::ServiceConfig) {
    cfg.service(files::get_file)
        .service(health::healthz)
        .service(health::readyz)
        .service(health::metrics);
}
