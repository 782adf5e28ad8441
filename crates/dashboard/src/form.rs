//! Posted forms. [`FormFields`] reads an `application/x-www-form-urlencoded`
//! body as name/value pairs (repeated names kept: one checkbox per scope);
//! [`Posted`] is the signed-in member with a form whose CSRF token was
//! checked: every state-changing handler takes it, so none can forget the
//! check.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};

use crate::csrf::{self, Csrf};
use crate::error::DashError;
use crate::session::SignedIn;

/// Largest form body the dashboard reads.
pub const MAX_FORM_BYTES: usize = 64 * 1024;

pub fn payload_config() -> web::PayloadConfig {
    web::PayloadConfig::new(MAX_FORM_BYTES)
}

/// A form's fields in the order sent.
#[derive(Debug, Clone, Default)]
pub struct FormFields(pub Vec<(String, String)>);

impl FormFields {
    pub fn parse(body: &[u8]) -> Self {
        FormFields(
            url::form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of `name`, trimmed, `None` when absent or blank.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.get(name).map(str::trim).filter(|v| !v.is_empty())
    }

    /// Every value of `name` (checkboxes).
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

fn read_body(
    req: &HttpRequest,
    payload: &mut Payload,
) -> impl Future<Output = Result<FormFields, DashError>> + 'static {
    let body = web::Bytes::from_request(req, payload);
    async move {
        let body = body.await.map_err(|_| {
            DashError::BadRequest(format!(
                "The form could not be read (at most {} KiB).",
                MAX_FORM_BYTES / 1024
            ))
        })?;
        Ok(FormFields::parse(&body))
    }
}

impl FromRequest for FormFields {
    type Error = DashError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        Box::pin(read_body(req, payload))
    }
}

/// A signed-in member's form, its CSRF token checked (403 otherwise).
pub struct Posted {
    pub signed_in: SignedIn,
    pub form: FormFields,
}

impl FromRequest for Posted {
    type Error = DashError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let signed_in = SignedIn::from_request(req, payload);
        let form = read_body(req, payload);
        Box::pin(async move {
            let signed_in = signed_in.await?;
            let form = form.await?;
            Csrf::check(&signed_in, form.get(csrf::FIELD).unwrap_or(""))?;
            Ok(Posted { signed_in, form })
        })
    }
}
