//! The dashboard's one error type, rendered as an HTML page: a 400 with its
//! message, 403, 404 `Not found`, a 303 to the sign-in page, or a generic
//! 500/503 whose cause goes to the log only.

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use askama::Template;
use unigen_db::DbError;

#[derive(Debug, thiserror::Error)]
pub enum DashError {
    /// Bad input: the message is shown on the page.
    #[error("{0}")]
    BadRequest(String),
    /// The member's role may not do this.
    #[error("Your role does not allow this action.")]
    Forbidden,
    /// A form without this session's CSRF token.
    #[error(
        "This form was not sent from this session (its security token is missing or belongs \
         to another session). Reload the page and try again."
    )]
    CsrfRejected,
    /// Nothing with this id in the member's organization (a malformed id,
    /// or another organization's object, included).
    #[error("Not found")]
    NotFound,
    /// Not signed in (or the session ended): go to this sign-in URL.
    #[error("Sign in to continue.")]
    SignInRequired { login_url: String },
    #[error("database error: {0}")]
    Db(#[from] DbError),
    #[error("template error: {0}")]
    Template(#[from] askama::Error),
    #[error("internal error: {0}")]
    Internal(#[from] anyhow::Error),
}

impl DashError {
    pub fn internal(err: impl std::fmt::Display) -> Self {
        DashError::Internal(anyhow::anyhow!("{err}"))
    }

    /// The heading and the message the page shows (never a cause of a 5xx).
    pub fn public_text(&self) -> (&'static str, String) {
        match self {
            DashError::BadRequest(message) => ("Bad request", message.clone()),
            DashError::Forbidden => ("Forbidden", self.to_string()),
            DashError::CsrfRejected => ("Forbidden", self.to_string()),
            DashError::NotFound => (
                "Not found",
                "There is nothing here, or it belongs to another organization.".to_owned(),
            ),
            DashError::SignInRequired { .. } => ("Sign in", self.to_string()),
            DashError::Db(DbError::Unavailable(_) | DbError::ConnectionLost(_)) => (
                "Service unavailable",
                "The database is unavailable. Try again in a moment.".to_owned(),
            ),
            DashError::Db(DbError::Query(_)) | DashError::Template(_) | DashError::Internal(_) => (
                "Something went wrong",
                "The server could not show this page. Try again in a moment.".to_owned(),
            ),
        }
    }
}

/// The error page. `prefix` is empty when rendered without the request
/// (the dashboard's middleware re-renders it with the prefix).
#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage<'a> {
    pub prefix: &'a str,
    pub asset_version: &'a str,
    pub status: u16,
    pub heading: &'a str,
    pub message: &'a str,
}

impl DashError {
    /// The full HTML page for this error under `prefix`.
    pub fn page(&self, prefix: &str) -> String {
        let (heading, message) = self.public_text();
        let page = ErrorPage {
            prefix,
            asset_version: crate::assets::version(),
            status: self.status_code().as_u16(),
            heading,
            message: &message,
        };
        page.render().unwrap_or_else(|_| {
            format!("<!doctype html><title>{heading}</title><h1>{heading}</h1>")
        })
    }
}

impl ResponseError for DashError {
    fn status_code(&self) -> StatusCode {
        match self {
            DashError::BadRequest(_) => StatusCode::BAD_REQUEST,
            DashError::Forbidden | DashError::CsrfRejected => StatusCode::FORBIDDEN,
            DashError::NotFound => StatusCode::NOT_FOUND,
            DashError::SignInRequired { .. } => StatusCode::SEE_OTHER,
            DashError::Db(DbError::Unavailable(_) | DbError::ConnectionLost(_)) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            DashError::Db(DbError::Query(_)) | DashError::Template(_) | DashError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        if status.is_server_error() {
            tracing::error!(error = %self, "dashboard request failed");
        }
        if let DashError::SignInRequired { login_url } = self {
            let mut response = HttpResponse::SeeOther().finish();
            if let Ok(value) = HeaderValue::from_str(login_url) {
                response.headers_mut().insert(header::LOCATION, value);
            }
            return response;
        }
        HttpResponse::build(status)
            .content_type("text/html; charset=utf-8")
            .body(self.page(""))
    }
}
