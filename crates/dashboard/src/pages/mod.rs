//! One module per page; each has a `configure` adding its routes (paths
//! relative to the dashboard's prefix).

use actix_web::web;

pub mod keys;
pub mod login;
pub mod overview;
pub mod team;

// Helper B's pages.
pub mod credits;
mod cursor;
pub mod jobs;
pub mod models;
pub mod usage;
pub mod webhooks;

pub fn configure(cfg: &mut web::ServiceConfig) {
    login::configure(cfg);
    overview::configure(cfg);
    keys::configure(cfg);
    team::configure(cfg);
    usage::configure(cfg);
    jobs::configure(cfg);
    webhooks::configure(cfg);
    credits::configure(cfg);
    models::configure(cfg);
}

/// Date-times as pages show them (UTC).
pub fn datetime(at: &chrono::DateTime<chrono::Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// An optional date-time, or `never` / a dash.
pub fn maybe_datetime(at: Option<&chrono::DateTime<chrono::Utc>>, none: &str) -> String {
    at.map_or_else(|| none.to_owned(), datetime)
}
