//! What every handler shares: the dashboard's state, and the answers a
//! page gives (a rendered template, a redirect, a 404 for a malformed id).
//! A leaf: the crate root re-exports it, and its modules import it here.

use std::sync::Arc;

use actix_web::HttpResponse;
use unigen_core::config::DashboardSettings;
use unigen_core::storage::UrlSigner;
use unigen_db::PgPool;
use unigen_db::notify::{ListenerHub, Notifier};
use unigen_providers::Catalogue;

use crate::error::DashError;

/// Everything the dashboard's handlers share; registered as
/// `web::Data<DashboardState>` on the dashboard's scope. Cheap to clone.
#[derive(Clone)]
pub struct DashboardState {
    pub pool: PgPool,
    /// Job changes, as the API's long polls and event streams see them.
    pub hub: ListenerHub,
    pub notifier: Notifier,
    pub catalogue: Arc<Catalogue>,
    /// Signs file URLs (job outputs), as the API does.
    pub signer: UrlSigner,
    pub settings: DashboardSettings,
    /// `settings.path_prefix`, normalized: `/dashboard`, or empty at the root.
    pub prefix: String,
    /// The session cookie is `Secure` (`http.public_base_url` is https).
    pub secure_cookies: bool,
    /// Called with a key's id after it is revoked, so this process's key
    /// cache forgets it (and only it) at once (others hear the database's
    /// notification).
    pub keys_changed: Arc<dyn Fn(uuid::Uuid) + Send + Sync>,
    /// Webhook URLs may name private and loopback addresses
    /// (`webhooks.allow_private_addresses`, as for the API).
    pub allow_private_webhooks: bool,
    /// `[webhooks]`: the manual-send rate and the replay cap, as for the API.
    pub webhook_settings: unigen_core::config::WebhookSettings,
}

impl DashboardState {
    /// A path under the dashboard: `url("/keys")` -> `/dashboard/keys`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.prefix)
    }
}

/// Renders a page template as `text/html`.
pub fn render<T: askama::Template>(page: &T) -> Result<HttpResponse, DashError> {
    let html = page.render().map_err(DashError::from)?;
    Ok(HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(html))
}

/// A 303 redirect (after a form, or to the sign-in page).
pub fn see_other(location: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((actix_web::http::header::LOCATION, location))
        .finish()
}

/// Parses an id from a path: a malformed id is the same 404 as another
/// organization's object.
pub fn parse_id(raw: &str) -> Result<uuid::Uuid, DashError> {
    raw.parse().map_err(|_| DashError::NotFound)
}
