//! Security headers on every dashboard response, and error pages rendered
//! with the dashboard's prefix.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};

use crate::error::DashError;
use crate::state::DashboardState;

/// No inline script or style; images from this origin (signed file URLs
/// are same-origin) or data: URLs.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; media-src 'self'; connect-src 'self'; frame-ancestors 'none'; \
    form-action 'self'; base-uri 'none'; object-src 'none'";

pub async fn dashboard_headers(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let prefix = req
        .app_data::<web::Data<DashboardState>>()
        .map(|s| s.prefix.clone())
        .unwrap_or_default();
    let response = next.call(req).await?;
    // Error pages again, now with the prefix (links and the stylesheet).
    let mut response = match response
        .response()
        .error()
        .and_then(|e| e.as_error::<DashError>())
    {
        Some(err) if !matches!(err, DashError::SignInRequired { .. }) => {
            let page = err.page(&prefix);
            let status = response.status();
            response.into_response(
                HttpResponse::build(status)
                    .content_type("text/html; charset=utf-8")
                    .body(page),
            )
        }
        _ => response.map_into_boxed_body(),
    };
    let headers = response.headers_mut();
    let mut set = |name: HeaderName, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(header::CONTENT_SECURITY_POLICY, CSP);
    set(header::X_FRAME_OPTIONS, "DENY");
    set(header::REFERRER_POLICY, "same-origin");
    set(header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(
        HeaderName::from_static("cross-origin-opener-policy"),
        "same-origin",
    );
    // Pages never cached (they show secrets once); assets set their own.
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    Ok(response)
}
