//! The API's one error type, rendered once as `{"error": {message, type, code}}`.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use unigen_agents::PlanRefusal;
use unigen_agents::run::StartError;
use unigen_core::ValidationError;
use unigen_db::DbError;
use unigen_db::billing::Refusal;
use unigen_jobs::SubmitError;
use unigen_knowledge::upload::UploadRefusal;
use unigen_providers::completion::ChatError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("invalid or missing API key")]
    InvalidKey,
    #[error("API key has expired")]
    KeyExpired,
    #[error("API key does not have required scope: {0}")]
    MissingScope(&'static str),
    #[error("organization is suspended")]
    OrgSuspended,
    #[error("{0}")]
    Validation(#[from] ValidationError),
    #[error("{0}")]
    BadRequest(String),
    /// A body field of the wrong JSON type; `param` is its path (`n`,
    /// `messages[0].content`).
    #[error("{message}")]
    InvalidField { param: String, message: String },
    /// A known path asked with another method (405, `Allow` lists the methods).
    #[error("{method} is not allowed on {path}; allowed: {allow}")]
    MethodNotAllowed {
        method: String,
        path: String,
        allow: String,
    },
    #[error("{0}")]
    NotFound(String),
    /// A job in a terminal state cannot be cancelled.
    #[error("{0}")]
    JobFinished(String),
    /// A sync request's job failed; the message is the job's reason.
    #[error("{0}")]
    GenerationFailed(String),
    #[error("the job was cancelled before it finished")]
    JobCancelled,
    /// A sync request's job was cancelled at its `Cancel-After` deadline (408).
    #[error("job {0} was cancelled: its Cancel-After deadline passed before it finished")]
    DeadlineExceeded(uuid::Uuid),
    /// Every upstream of a model failed (after retries and fallbacks).
    #[error("the model provider failed: {0}")]
    Upstream(String),
    #[error("{0}")]
    Unavailable(String),
    /// A quota bucket, the credits or the overage hard limit (402).
    #[error("{0}")]
    Quota(#[from] Refusal),
    /// Over the plan's request rate or concurrency (429).
    #[error("{message}")]
    RateLimited {
        message: &'static str,
        retry_after_seconds: u64,
    },
    /// The organization's plan does not include the feature at all.
    #[error("{0}")]
    NotOnPlan(String),
    /// The plan's maximum count of something is reached.
    #[error("{0}")]
    LimitReached(String),
    /// A disabled webhook cannot be sent a test event (409).
    #[error("{0}")]
    WebhookDisabled(String),
    /// A webhook delivery's attempt is in flight; redeliver after it (409).
    #[error("{0}")]
    DeliveryInFlight(String),
    /// A shared template agent can be read and duplicated, not changed (403).
    #[error("{0}")]
    TemplateReadOnly(String),
    /// A request with the same Idempotency-Key is still running (409).
    #[error("a request with this Idempotency-Key is still in progress; retry once it has finished")]
    IdempotencyKeyInUse,
    /// The Idempotency-Key was first used with another request (422).
    #[error(
        "this Idempotency-Key was already used with a different request (method, path, body or API key)"
    )]
    IdempotencyKeyReused,
    /// The body is larger than `http.max_body_bytes` (413).
    #[error("the request body is larger than the limit of {0} bytes")]
    PayloadTooLarge(usize),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

/// The code table: status, `type` and `code` of each error, in one place.
impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        match self {
            ApiError::InvalidKey | ApiError::KeyExpired => (
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "unauthorized",
            ),
            ApiError::MissingScope(_) | ApiError::OrgSuspended => {
                (StatusCode::FORBIDDEN, "permission_error", "forbidden")
            }
            ApiError::Validation(_) | ApiError::BadRequest(_) | ApiError::InvalidField { .. } => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "invalid_request",
            ),
            ApiError::JobFinished(_) => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "job_finished",
            ),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found_error", "not_found"),
            ApiError::MethodNotAllowed { .. } => (
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                "method_not_allowed",
            ),
            ApiError::IdempotencyKeyInUse => (
                StatusCode::CONFLICT,
                "invalid_request_error",
                "idempotency_key_in_use",
            ),
            ApiError::IdempotencyKeyReused => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request_error",
                "idempotency_key_reused",
            ),
            ApiError::JobCancelled => (
                StatusCode::CONFLICT,
                "invalid_request_error",
                "job_cancelled",
            ),
            ApiError::DeadlineExceeded(_) => (
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                "deadline_exceeded",
            ),
            ApiError::GenerationFailed(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "generation_failed",
            ),
            ApiError::Upstream(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "server_error",
            ),
            ApiError::Unavailable(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "service_unavailable",
            ),
            ApiError::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "server_error",
            ),
            ApiError::Quota(_) => (
                StatusCode::PAYMENT_REQUIRED,
                "insufficient_quota",
                "quota_exceeded",
            ),
            ApiError::RateLimited { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "rate_limited",
            ),
            ApiError::NotOnPlan(_) => (
                StatusCode::FORBIDDEN,
                "permission_error",
                "not_available_on_plan",
            ),
            ApiError::LimitReached(_) => (
                StatusCode::PAYMENT_REQUIRED,
                "invalid_request_error",
                "limit_reached",
            ),
            ApiError::WebhookDisabled(_) => (
                StatusCode::CONFLICT,
                "invalid_request_error",
                "webhook_disabled",
            ),
            ApiError::DeliveryInFlight(_) => (
                StatusCode::CONFLICT,
                "invalid_request_error",
                "delivery_in_flight",
            ),
            ApiError::TemplateReadOnly(_) => (
                StatusCode::FORBIDDEN,
                "permission_error",
                "template_read_only",
            ),
            ApiError::PayloadTooLarge(_) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "payload_too_large",
            ),
        }
    }

    /// The machine-readable `code` of this error.
    pub fn code(&self) -> &'static str {
        self.parts().2
    }

    pub fn internal(err: impl Into<anyhow::Error>) -> Self {
        ApiError::Internal(err.into())
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// Human-readable; the spec's text where it gives one.
    pub message: String,
    /// Error class, e.g. `invalid_request_error`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Machine-readable code, e.g. `invalid_request`, `unauthorized`.
    pub code: &'static str,
    /// The request field at fault, for validation errors; `null` otherwise
    /// (always present, as in OpenAI's errors).
    pub param: Option<String>,
    /// What the exhausted bucket has left, for quota errors (402).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining: Option<f64>,
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.parts().0
    }

    fn error_response(&self) -> HttpResponse {
        let (status, kind, code) = self.parts();
        if let ApiError::Internal(err) = self {
            // The cause goes to the log, never to the client.
            tracing::error!(error = format!("{err:#}"), "request failed");
        }
        let param = match self {
            ApiError::Validation(v) => Some(v.field.to_owned()),
            ApiError::InvalidField { param, .. } => Some(param.clone()),
            ApiError::IdempotencyKeyInUse | ApiError::IdempotencyKeyReused => {
                Some("Idempotency-Key".to_owned())
            }
            _ => None,
        };
        let remaining = match self {
            ApiError::Quota(refusal) => Some(refusal.remaining()),
            _ => None,
        };
        let mut response = HttpResponse::build(status);
        if let ApiError::RateLimited {
            retry_after_seconds,
            ..
        } = self
        {
            response.insert_header(("Retry-After", retry_after_seconds.to_string()));
        }
        if let ApiError::MethodNotAllowed { allow, .. } = self {
            response.insert_header(("Allow", allow.as_str()));
        }
        response.json(ErrorBody {
            error: ErrorDetail {
                message: self.to_string(),
                kind,
                code,
                param,
                remaining,
            },
        })
    }
}

const DATABASE_UNAVAILABLE: &str = "the database is unavailable; retry shortly";

impl From<DbError> for ApiError {
    fn from(err: DbError) -> Self {
        match err {
            DbError::Unavailable(e) => {
                tracing::warn!(error = %e, "database unavailable");
                ApiError::Unavailable(DATABASE_UNAVAILABLE.into())
            }
            DbError::ConnectionLost(e) => {
                tracing::warn!(error = %e, "database connection lost");
                ApiError::Unavailable(DATABASE_UNAVAILABLE.into())
            }
            DbError::Query(e) => ApiError::internal(e),
        }
    }
}

/// For query sequences run in a transaction whose error type is `ApiError`.
impl From<diesel::result::Error> for ApiError {
    fn from(err: diesel::result::Error) -> Self {
        DbError::from(err).into()
    }
}

impl From<ChatError> for ApiError {
    fn from(err: ChatError) -> Self {
        match err {
            ChatError::Invalid(invalid) => ApiError::Validation(invalid),
            ChatError::Upstream(message) => ApiError::Upstream(message),
        }
    }
}

impl From<PlanRefusal> for ApiError {
    fn from(refusal: PlanRefusal) -> Self {
        match refusal {
            PlanRefusal::NotOnPlan(_) => ApiError::NotOnPlan(refusal.to_string()),
            PlanRefusal::TooManyAgents { .. }
            | PlanRefusal::TooManyTools { .. }
            | PlanRefusal::TooManyIterations { .. } => ApiError::LimitReached(refusal.to_string()),
        }
    }
}

impl From<UploadRefusal> for ApiError {
    fn from(refusal: UploadRefusal) -> Self {
        match refusal {
            UploadRefusal::NotOnPlan(_) => ApiError::NotOnPlan(refusal.to_string()),
            UploadRefusal::TooManyFiles { .. } => ApiError::LimitReached(refusal.to_string()),
            UploadRefusal::TooLarge { .. } => {
                ValidationError::new("file", refusal.to_string()).into()
            }
        }
    }
}

impl From<StartError> for ApiError {
    fn from(err: StartError) -> Self {
        match err {
            StartError::Plan(refusal) => refusal.into(),
            StartError::Refused(refusal) => ApiError::Quota(refusal),
            StartError::Invalid(invalid) => ApiError::Validation(invalid),
            StartError::Db(e) => e.into(),
        }
    }
}

impl From<SubmitError> for ApiError {
    fn from(err: SubmitError) -> Self {
        match err {
            SubmitError::Db(e) => e.into(),
            SubmitError::Refused(refusal) => ApiError::Quota(refusal),
        }
    }
}

/// actix answers a body over the payload limit with plain text: such an
/// answer gets the JSON error body every other error has.
pub fn json_payload_too_large<B>(
    res: actix_web::dev::ServiceResponse<B>,
    limit: usize,
) -> actix_web::Result<actix_web::middleware::ErrorHandlerResponse<B>> {
    use actix_web::middleware::ErrorHandlerResponse;
    let is_json = res
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if is_json {
        return Ok(ErrorHandlerResponse::Response(res.map_into_left_body()));
    }
    let (request, _) = res.into_parts();
    let response = ApiError::PayloadTooLarge(limit).error_response();
    Ok(ErrorHandlerResponse::Response(
        actix_web::dev::ServiceResponse::new(request, response).map_into_right_body(),
    ))
}

#[cfg(test)]
mod tests {
    use actix_web::body::MessageBody;

    use super::*;

    fn body_of(err: ApiError) -> (u16, serde_json::Value) {
        let response = err.error_response();
        let status = response.status().as_u16();
        let bytes = response.into_body().try_into_bytes().unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[test]
    fn auth_failures_use_the_spec_messages() {
        assert_eq!(
            body_of(ApiError::InvalidKey).1["error"]["message"],
            "invalid or missing API key"
        );
        assert_eq!(body_of(ApiError::KeyExpired).0, 401);
        let (status, body) = body_of(ApiError::MissingScope("image"));
        assert_eq!(status, 403);
        assert_eq!(
            body["error"]["message"],
            "API key does not have required scope: image"
        );
        assert_eq!(body["error"]["code"], "forbidden");
    }

    #[test]
    fn validation_errors_name_the_field_and_internal_errors_hide_the_cause() {
        let (status, body) =
            body_of(ValidationError::new("n", "n must be between 1 and 10").into());
        assert_eq!(status, 400);
        assert_eq!(body["error"]["param"], "n");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        let (status, body) = body_of(ApiError::internal(anyhow::anyhow!("password=hunter2")));
        assert_eq!(status, 500);
        assert_eq!(body["error"]["message"], "internal error");
    }
}
