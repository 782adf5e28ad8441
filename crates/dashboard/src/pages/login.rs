//! Sign-in and sign-out. A wrong email or a wrong password get the same
//! words; `login_max_failures` failures for one email within
//! `login_window_minutes` refuse it for `lockout_minutes`. The form, posted
//! before any session exists, carries a token matching a cookie it set
//! (double submit), so another site cannot sign a browser in.

use actix_web::http::StatusCode;
use actix_web::http::header::SET_COOKIE;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use chrono::Utc;
use unigen_db::{DbError, queries};

use crate::csrf::{self, tokens_match};
use crate::error::DashError;
use crate::form::{FormFields, Posted};
use crate::session::{self, cookie_value, random_token, set_cookie};
use crate::state::{DashboardState, see_other};

/// The sign-in form's double-submit cookie.
const LOGIN_COOKIE: &str = "unigen_login";
pub const INVALID: &str = "Invalid email or password";

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/login", web::get().to(login_page))
        .route("/login", web::post().to(sign_in))
        .route("/logout", web::post().to(sign_out));
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage<'a> {
    prefix: &'a str,
    asset_version: &'a str,
    csrf_token: &'a str,
    email: &'a str,
    error: Option<String>,
}

fn page(
    state: &DashboardState,
    req: &HttpRequest,
    status: StatusCode,
    email: &str,
    error: Option<String>,
) -> Result<HttpResponse, DashError> {
    // The browser's token is kept (several sign-in tabs all work); a new
    // one otherwise.
    let token = match cookie_value(req, LOGIN_COOKIE) {
        Some(token) if token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()) => {
            token.to_owned()
        }
        _ => random_token()?,
    };
    let html = LoginPage {
        prefix: &state.prefix,
        asset_version: crate::assets::version(),
        csrf_token: &token,
        email,
        error,
    }
    .render()?;
    Ok(HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .insert_header((SET_COOKIE, set_cookie(state, LOGIN_COOKIE, &token, 3600)))
        .body(html))
}

async fn login_page(
    state: web::Data<DashboardState>,
    req: HttpRequest,
) -> Result<HttpResponse, DashError> {
    page(&state, &req, StatusCode::OK, "", None)
}

async fn sign_in(
    state: web::Data<DashboardState>,
    req: HttpRequest,
    form: FormFields,
) -> Result<HttpResponse, DashError> {
    let expected = cookie_value(&req, LOGIN_COOKIE).unwrap_or("");
    if !tokens_match(expected, form.get(csrf::FIELD).unwrap_or("")) {
        return Err(DashError::CsrfRejected);
    }
    let email = queries::members::normalize_email(form.get("email").unwrap_or(""));
    let password = form.get("password").unwrap_or("").to_owned();
    // Echoed back into the form: keep it short.
    let shown: String = email.chars().take(254).collect();
    if email.is_empty() || email.len() > 254 || password.is_empty() {
        return page(
            &state,
            &req,
            StatusCode::UNAUTHORIZED,
            &shown,
            Some(INVALID.to_owned()),
        );
    }
    let settings = &state.settings;
    let now = Utc::now();
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    if let Some(until) = queries::members::locked_until(&mut conn, &email, now).await? {
        return page(
            &state,
            &req,
            StatusCode::TOO_MANY_REQUESTS,
            &shown,
            Some(locked_message(until, now)),
        );
    }
    let found = queries::members::find_credentials(&mut conn, &email).await?;
    drop(conn);
    let hash = found.as_ref().map_or_else(
        || unigen_core::password::dummy_hash().to_owned(),
        |(_, h)| h.clone(),
    );
    let matches = tokio::task::spawn_blocking(move || {
        unigen_core::password::verify_password(&password, &hash)
    })
    .await
    .map_err(DashError::internal)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let member = match found {
        Some((member, _)) if matches => member,
        _ => {
            let locked = queries::members::record_failure(
                &mut conn,
                &email,
                now,
                chrono::Duration::minutes(settings.login_window_minutes.max(1) as i64),
                settings.login_max_failures.max(1),
                chrono::Duration::minutes(settings.lockout_minutes.max(1) as i64),
            )
            .await?;
            tracing::info!(locked = locked.is_some(), "dashboard sign-in failed");
            return match locked {
                Some(until) => page(
                    &state,
                    &req,
                    StatusCode::TOO_MANY_REQUESTS,
                    &shown,
                    Some(locked_message(until, now)),
                ),
                None => page(
                    &state,
                    &req,
                    StatusCode::UNAUTHORIZED,
                    &shown,
                    Some(INVALID.to_owned()),
                ),
            };
        }
    };
    queries::members::clear_failures(&mut conn, &email).await?;
    drop(conn);
    let cookie = session::start_session(&state, member.id).await?;
    tracing::info!(member.id = %member.id, org.id = %member.org_id, "dashboard sign-in");
    let mut response = see_other(&state.url("/"));
    let headers = response.headers_mut();
    for value in [cookie, set_cookie(&state, LOGIN_COOKIE, "", 0)] {
        if let Ok(value) = value.parse() {
            headers.append(SET_COOKIE, value);
        }
    }
    Ok(response)
}

fn locked_message(until: chrono::DateTime<Utc>, now: chrono::DateTime<Utc>) -> String {
    let minutes = ((until - now).num_seconds() + 59) / 60;
    format!(
        "Too many failed sign-in attempts for this email. Sign-in is locked for {} more minute{}.",
        minutes.max(1),
        if minutes == 1 { "" } else { "s" }
    )
}

async fn sign_out(
    state: web::Data<DashboardState>,
    req: HttpRequest,
    _posted: Posted,
) -> Result<HttpResponse, DashError> {
    let cookie = session::end_session(&state, &req).await?;
    let mut response = see_other(&state.url("/login"));
    if let Ok(value) = cookie.parse() {
        response.headers_mut().append(SET_COOKIE, value);
    }
    Ok(response)
}
