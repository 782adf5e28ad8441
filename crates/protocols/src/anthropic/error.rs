//! Anthropic's error shape: `{"type": "error", "error": {"type", "message"}}`,
//! each error type with its HTTP status.

use serde_json::{Value, json};

/// The `error.type` values of Anthropic's API that this service answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400 (and other 4xx without a type of their own).
    InvalidRequest,
    /// 401.
    Authentication,
    /// 402: credits or quota used up.
    Billing,
    /// 403.
    Permission,
    /// 404.
    NotFound,
    /// 413.
    RequestTooLarge,
    /// 429.
    RateLimit,
    /// 500.
    Api,
    /// 529: the model provider is overloaded or unavailable.
    Overloaded,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request_error",
            ErrorKind::Authentication => "authentication_error",
            ErrorKind::Billing => "billing_error",
            ErrorKind::Permission => "permission_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::RequestTooLarge => "request_too_large",
            ErrorKind::RateLimit => "rate_limit_error",
            ErrorKind::Api => "api_error",
            ErrorKind::Overloaded => "overloaded_error",
        }
    }

    /// The HTTP status Anthropic answers this error with.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::InvalidRequest => 400,
            ErrorKind::Authentication => 401,
            ErrorKind::Billing => 402,
            ErrorKind::Permission => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::RequestTooLarge => 413,
            ErrorKind::RateLimit => 429,
            ErrorKind::Api => 500,
            ErrorKind::Overloaded => 529,
        }
    }

    /// The error type of another API's status: other 4xx are invalid
    /// requests, 503 is overloaded, other 5xx API errors.
    pub fn from_status(status: u16) -> Self {
        match status {
            401 => ErrorKind::Authentication,
            402 => ErrorKind::Billing,
            403 => ErrorKind::Permission,
            404 => ErrorKind::NotFound,
            413 => ErrorKind::RequestTooLarge,
            429 => ErrorKind::RateLimit,
            503 | 529 => ErrorKind::Overloaded,
            500..=599 => ErrorKind::Api,
            _ => ErrorKind::InvalidRequest,
        }
    }
}

/// The error body.
pub fn error_body(kind: ErrorKind, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind.as_str(), "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_type_has_anthropics_status_and_statuses_map_back() {
        for (kind, name, status) in [
            (ErrorKind::InvalidRequest, "invalid_request_error", 400),
            (ErrorKind::Authentication, "authentication_error", 401),
            (ErrorKind::Billing, "billing_error", 402),
            (ErrorKind::Permission, "permission_error", 403),
            (ErrorKind::NotFound, "not_found_error", 404),
            (ErrorKind::RequestTooLarge, "request_too_large", 413),
            (ErrorKind::RateLimit, "rate_limit_error", 429),
            (ErrorKind::Api, "api_error", 500),
            (ErrorKind::Overloaded, "overloaded_error", 529),
        ] {
            assert_eq!((kind.as_str(), kind.status()), (name, status));
            assert_eq!(ErrorKind::from_status(status), kind, "{name}");
        }
        assert_eq!(ErrorKind::from_status(405), ErrorKind::InvalidRequest);
        assert_eq!(ErrorKind::from_status(422), ErrorKind::InvalidRequest);
        assert_eq!(ErrorKind::from_status(503), ErrorKind::Overloaded);
        assert_eq!(ErrorKind::from_status(502), ErrorKind::Api);
    }

    #[test]
    fn the_body_is_anthropics_shape() {
        assert_eq!(
            error_body(ErrorKind::Overloaded, "busy"),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
        );
    }
}
