//! Sessions: a random id in an `HttpOnly`, `SameSite=Lax` cookie (`Secure`
//! behind https), stored server-side as its SHA-256 with the member and a
//! CSRF token. [`SignedIn`] loads the member on every request (so a removed
//! member or an ended session is signed out at once in every process) and
//! marks the session used; without one it redirects to the sign-in page.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use unigen_db::models::MemberRow;
use unigen_db::queries;
use uuid::Uuid;

use crate::error::DashError;
use crate::layout::Chrome;
use crate::roles::Role;
use crate::state::DashboardState;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "unigen_session";

/// A signed-in team member.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: Uuid,
    pub org_id: Uuid,
    pub email: String,
    pub role: Role,
}

impl TryFrom<MemberRow> for Member {
    type Error = DashError;

    fn try_from(row: MemberRow) -> Result<Self, DashError> {
        Ok(Member {
            id: row.id,
            org_id: row.org_id,
            email: row.email,
            role: row.role.parse().map_err(DashError::internal)?,
        })
    }
}

/// The member behind this request's session, and the session's CSRF token.
#[derive(Debug, Clone)]
pub struct SignedIn {
    pub member: Member,
    pub csrf_token: String,
    /// The dashboard's prefix (for links).
    pub prefix: String,
}

impl SignedIn {
    pub fn org_id(&self) -> Uuid {
        self.member.org_id
    }

    pub fn role(&self) -> Role {
        self.member.role
    }

    /// `Ok` when `allowed` (a `Role::can_*` answer), else a 403.
    pub fn require(&self, allowed: bool) -> Result<(), DashError> {
        if allowed {
            Ok(())
        } else {
            Err(DashError::Forbidden)
        }
    }

    /// The page chrome (nav, email, sign-out form) for a page.
    pub fn chrome(&self, active: &'static str, title: impl Into<String>) -> Chrome {
        Chrome {
            prefix: self.prefix.clone(),
            title: title.into(),
            active,
            email: self.member.email.clone(),
            csrf_token: self.csrf_token.clone(),
            asset_version: crate::assets::version(),
        }
    }
}

/// The session id's stored form.
pub fn hash_session_id(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// A random token: 32 bytes from the OS, hex.
pub fn random_token() -> Result<String, DashError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(DashError::internal)?;
    Ok(hex::encode(bytes))
}

/// A cookie's value from the request's `Cookie` headers.
pub fn cookie_value<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers()
        .get_all(actix_web::http::header::COOKIE)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"'))
        .filter(|v| !v.is_empty())
}

/// A `Set-Cookie` value for the dashboard's path; `max_age` 0 deletes it.
pub fn set_cookie(state: &DashboardState, name: &str, value: &str, max_age: i64) -> String {
    let path = if state.prefix.is_empty() {
        "/"
    } else {
        &state.prefix
    };
    let secure = if state.secure_cookies { "; Secure" } else { "" };
    format!("{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}")
}

/// Creates a session for the member; returns the cookie's `Set-Cookie`.
pub async fn start_session(state: &DashboardState, member_id: Uuid) -> Result<String, DashError> {
    let id = random_token()?;
    let csrf = random_token()?;
    let max_age = chrono::Duration::days(state.settings.session_max_days.max(1) as i64);
    let mut conn = state.pool.get().await.map_err(unigen_db::DbError::from)?;
    queries::members::create_session(
        &mut conn,
        &hash_session_id(&id),
        member_id,
        &csrf,
        Utc::now() + max_age,
    )
    .await?;
    // Old sessions are cleared now and then, here rather than by a task.
    let _ = queries::members::purge_sessions(&mut conn, idle_cutoff(state, Utc::now())).await;
    Ok(set_cookie(
        state,
        SESSION_COOKIE,
        &id,
        max_age.num_seconds(),
    ))
}

/// Ends the request's session, if any; returns the deleting `Set-Cookie`.
pub async fn end_session(state: &DashboardState, req: &HttpRequest) -> Result<String, DashError> {
    if let Some(id) = cookie_value(req, SESSION_COOKIE) {
        let mut conn = state.pool.get().await.map_err(unigen_db::DbError::from)?;
        queries::members::delete_session(&mut conn, &hash_session_id(id)).await?;
    }
    Ok(set_cookie(state, SESSION_COOKIE, "", 0))
}

/// Sessions last used before this are over.
pub fn idle_cutoff(state: &DashboardState, now: DateTime<Utc>) -> DateTime<Utc> {
    now - chrono::Duration::hours(state.settings.session_idle_hours.max(1) as i64)
}

/// The dashboard's state from a request (registered on its scope).
pub fn state_of(req: &HttpRequest) -> Result<web::Data<DashboardState>, DashError> {
    req.app_data::<web::Data<DashboardState>>()
        .cloned()
        .ok_or_else(|| DashError::internal("dashboard state missing"))
}

impl FromRequest for SignedIn {
    type Error = DashError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let state = state_of(req);
        let id = cookie_value(req, SESSION_COOKIE).map(hash_session_id);
        Box::pin(async move {
            let state = state?;
            let login_url = state.url("/login");
            let Some(id_hash) = id else {
                return Err(DashError::SignInRequired { login_url });
            };
            let mut conn = state.pool.get().await.map_err(unigen_db::DbError::from)?;
            let found = queries::members::touch_session(
                &mut conn,
                &id_hash,
                idle_cutoff(&state, Utc::now()),
            )
            .await?;
            let Some((row, csrf_token)) = found else {
                return Err(DashError::SignInRequired { login_url });
            };
            Ok(SignedIn {
                member: Member::try_from(row)?,
                csrf_token,
                prefix: state.prefix.clone(),
            })
        })
    }
}
