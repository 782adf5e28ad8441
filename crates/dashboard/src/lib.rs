//! The web dashboard, served by the API binary under one configurable
//! prefix (default `/dashboard`): team members sign in with an email and a
//! password, sessions live in PostgreSQL, every form carries a CSRF token,
//! and every page reads through `unigen_db::queries` with the member's
//! organization, exactly as the API does.
//!
//! A page handler: `SignedIn` (or `Posted` for a form) -> one call into
//! `unigen_db::queries` -> an askama template with a `layout::Chrome` ->
//! [`render`]. Errors are [`DashError`], rendered as HTML pages.

pub mod assets;
pub mod csrf;
pub mod error;
pub mod form;
pub mod headers;
pub mod layout;
pub mod once;
pub mod pages;
pub mod roles;
pub mod session;
pub mod team;

use std::sync::Arc;

use actix_web::{HttpResponse, web};
use unigen_core::config::DashboardSettings;
use unigen_core::storage::UrlSigner;
use unigen_db::PgPool;
use unigen_db::notify::{ListenerHub, Notifier};
use unigen_providers::Catalogue;

pub use csrf::Csrf;
pub use error::DashError;
pub use form::{FormFields, Posted};
pub use layout::Chrome;
pub use roles::Role;
pub use session::{Member, SignedIn};

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

/// Mounts the dashboard (every route, its assets, its headers and its
/// error pages) under `state.prefix`:
/// `app.configure(unigen_dashboard::configure(state))`.
pub fn configure(state: DashboardState) -> impl Fn(&mut web::ServiceConfig) + Clone {
    let data = web::Data::new(state);
    move |cfg: &mut web::ServiceConfig| {
        let prefix = data.prefix.clone();
        let root = format!("{prefix}/");
        if !prefix.is_empty() {
            // `/dashboard` -> `/dashboard/`, so relative links resolve.
            cfg.route(
                &prefix,
                web::get().to(move || {
                    let root = root.clone();
                    async move { see_other(&root) }
                }),
            );
        }
        cfg.service(
            web::scope(&prefix)
                .app_data(data.clone())
                .app_data(form::payload_config())
                .app_data(web::QueryConfig::default().error_handler(|err, _| {
                    DashError::BadRequest(format!("The address has an invalid parameter: {err}"))
                        .into()
                }))
                .app_data(
                    web::PathConfig::default().error_handler(|_, _| DashError::NotFound.into()),
                )
                .wrap(actix_web::middleware::from_fn(headers::dashboard_headers))
                .configure(assets::configure)
                .configure(pages::configure)
                .default_service(web::to(|| async {
                    Err::<HttpResponse, _>(DashError::NotFound)
                })),
        );
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
