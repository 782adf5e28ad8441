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
mod state;
pub mod team;

use actix_web::{HttpResponse, web};

pub use csrf::Csrf;
pub use error::DashError;
pub use form::{FormFields, Posted};
pub use layout::Chrome;
pub use roles::Role;
pub use session::{Member, SignedIn};
pub use state::{DashboardState, parse_id, render, see_other};

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
