//! Webhook management (scope `webhooks`): create, list, read, update,
//! delete, rotate the secret, send a test event, list deliveries, redeliver
//! one delivery, replay failed deliveries.

use std::collections::HashMap;

use actix_web::{HttpResponse, delete, get, patch, post, web};
use chrono::{DateTime, Utc};
use diesel_async::AsyncPgConnection;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use unigen_core::ValidationError;
use unigen_core::domain::Scope;
use unigen_db::models::{NewWebhook, Webhook, WebhookUpdate};
use unigen_db::queries::webhooks::{
    CreateOutcome, DeliveryLog, RedeliverOutcome, ReplayOutcome, SendTarget, TestOutcome,
};
use unigen_db::{DbError, queries};
use unigen_jobs::webhooks;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::routes::params::{json_body, not_found, parse_bound, path_id};
use crate::state::AppState;

/// Body of `POST /webhooks` (all but `enabled` and `headers` required) and
/// `PATCH /webhooks/{id}` (any subset).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct WebhookRequest {
    /// 1 to 100 characters, not only spaces.
    #[schema(min_length = 1, max_length = 100, pattern = "\\S")]
    pub name: Option<String>,
    /// HTTPS URL that receives the POSTs.
    #[schema(example = "https://example.com/hooks/unigen")]
    pub url: Option<String>,
    /// Event kinds to receive, e.g. `generation.completed`.
    #[schema(min_items = 1)]
    pub events: Option<Vec<String>>,
    /// Default true. `true` on PATCH also re-enables an automatically
    /// disabled webhook and resets its failure count.
    pub enabled: Option<bool>,
    /// Custom request headers (name -> value); `x-service-*`, `webhook-id`,
    /// `webhook-timestamp`, `webhook-signature`, `content-type`,
    /// `content-length`, `host`, `transfer-encoding` and `connection` are reserved.
    #[schema(value_type = Option<Object>)]
    pub headers: Option<Value>,
}

/// Body of `POST /webhooks`, as documented: [`WebhookRequest`] with its
/// required fields. Documentation only: the handler reads a [`WebhookRequest`].
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct WebhookCreateRequest {
    /// 1 to 100 characters, not only spaces.
    #[schema(min_length = 1, max_length = 100, pattern = "\\S")]
    pub name: String,
    /// HTTPS URL that receives the POSTs.
    #[schema(
        example = "https://example.com/hooks/unigen",
        min_length = 1,
        max_length = 2048
    )]
    pub url: String,
    /// Event kinds to receive, e.g. `generation.completed`.
    #[schema(min_items = 1)]
    pub events: Vec<String>,
    /// Default true.
    pub enabled: Option<bool>,
    /// Custom request headers (name -> value); `x-service-*`, `webhook-id`,
    /// `webhook-timestamp`, `webhook-signature`, `content-type`,
    /// `content-length`, `host`, `transfer-encoding` and `connection` are reserved.
    #[schema(value_type = Option<Object>)]
    pub headers: Option<Value>,
}

/// A webhook. `secret` appears only when issued (create, rotate-secret).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookView {
    pub id: Uuid,
    pub name: String,
    pub url: String,
    pub events: Vec<String>,
    pub enabled: bool,
    #[schema(value_type = Object)]
    pub headers: Value,
    /// Deliveries that failed since the last successful one.
    pub consecutive_failures: i32,
    /// Set when the webhook was disabled after consecutive failed deliveries.
    pub disabled_at: Option<DateTime<Utc>>,
    pub disabled_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The signing secret, `whsec_` + base64 of 32 random bytes; store it
    /// now, it is not shown again. The whole string is the HMAC-SHA256 key of
    /// `x-service-signature`; Standard Webhooks libraries take it as-is for
    /// `webhook-signature`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl WebhookView {
    fn new(webhook: Webhook, show_secret: bool) -> Self {
        Self {
            id: webhook.id,
            name: webhook.name,
            url: webhook.url,
            events: webhook.events,
            enabled: webhook.enabled,
            headers: webhook.headers,
            consecutive_failures: webhook.consecutive_failures,
            disabled_at: webhook.disabled_at,
            disabled_reason: webhook.disabled_reason,
            created_at: webhook.created_at,
            updated_at: webhook.updated_at,
            secret: show_secret.then_some(webhook.secret),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookView>,
}

/// The answer to `POST /webhooks/{id}/test`: the event queued for delivery.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TestEventQueued {
    pub event_id: Uuid,
    #[schema(example = "webhook.test")]
    pub event_type: String,
}

/// One finished attempt of a delivery.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AttemptView {
    pub number: i32,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i32,
    /// The receiver's status; absent when there was no answer.
    pub status_code: Option<i32>,
    /// Why there was no (2xx) answer: timeout, connection failure...
    pub error: Option<String>,
}

/// One event's delivery to the webhook.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryView {
    pub id: Uuid,
    pub event_id: Uuid,
    pub event_type: String,
    /// `pending`, `succeeded` or `failed`.
    pub status: String,
    /// Attempts started so far.
    pub attempt_count: i32,
    /// When the next attempt starts; only while `pending`.
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub attempts: Vec<AttemptView>,
}

impl From<DeliveryLog> for DeliveryView {
    fn from(log: DeliveryLog) -> Self {
        let d = log.delivery;
        Self {
            id: d.id,
            event_id: d.event_id,
            event_type: log.event_type,
            next_attempt_at: (d.status == "pending").then_some(d.next_attempt_at),
            status: d.status,
            attempt_count: d.attempts,
            last_status_code: d.last_status_code,
            last_error: d.last_error,
            created_at: d.created_at,
            completed_at: d.completed_at,
            attempts: log
                .attempts
                .into_iter()
                .map(|a| AttemptView {
                    number: a.number,
                    started_at: a.started_at,
                    duration_ms: a.duration_ms,
                    status_code: a.status_code,
                    error: a.error,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryList {
    pub deliveries: Vec<DeliveryView>,
}

/// The answer to a redelivery: the delivery and the event attempted again.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RedeliveryQueued {
    pub delivery_id: Uuid,
    /// Unchanged: the same `x-service-event-id` and `webhook-id` as before.
    pub event_id: Uuid,
}

/// Body of `POST /webhooks/{id}/replay`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ReplayRequest {
    /// Required. ISO 8601: deliveries of events created at or after this
    /// time (`2026-11-27T08:00:00Z`; a time without an offset is UTC; a date
    /// is its midnight UTC).
    #[schema(value_type = String, example = "2026-11-27T08:00:00Z")]
    pub since: Option<Value>,
    /// Required; only `failed` is supported.
    #[schema(value_type = String, pattern = "^failed$", example = "failed")]
    pub status: Option<Value>,
}

/// The answer to a replay: how many deliveries are attempted again, and
/// how many more matched (a replay queues at most `webhooks.replay_max_per_call`,
/// oldest event first; replay again for the rest).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReplayQueued {
    pub replayed: usize,
    pub remaining: i64,
}

/// A manual send (test, redelivery, replay) over the webhook's minute.
fn manual_sends_spent(retry_after_seconds: u64) -> ApiError {
    ApiError::RateLimited {
        message: "Too many test events, redeliveries and replays for this webhook; retry after Retry-After seconds",
        retry_after_seconds,
    }
}

const KIND: &str = "webhook";
const DELIVERY_KIND: &str = "delivery";

/// Register a webhook; the answer carries its signing secret, shown only here.
#[utoipa::path(
    tag = "webhooks",
    request_body = WebhookCreateRequest,
    responses(
        (status = 201, body = WebhookView),
        (status = 400, description = "Invalid field; `param` names it (`url` not https, unknown `events` kind...)", body = ErrorBody),
        (status = 402, description = "`limit_reached`: the plan's webhook limit is reached", body = ErrorBody),
        (status = 403, description = "Missing scope `webhooks`, or `not_available_on_plan`: no webhooks on the plan", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
    ),
    security(("bearer" = ["webhooks"]))
)]
#[post("/webhooks")]
pub async fn create_webhook(
    state: web::Data<AppState>,
    caller: Caller,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Webhooks)?;
    let request: WebhookRequest = json_body(&body)?;
    let name = webhooks::validate_name(request.name.as_deref())?;
    let url = webhooks::validate_url(request.url.as_deref(), state.allow_private_webhooks)?;
    let kinds = webhooks::validate_events(request.events.as_deref())?;
    let headers = webhooks::validate_headers(request.headers.as_ref())?;
    let secret = webhooks::generate_secret().map_err(ApiError::internal)?;
    let new = NewWebhook {
        id: Uuid::now_v7(),
        org_id: caller.org_id,
        name: &name,
        url: &url,
        events: &kinds,
        enabled: request.enabled.unwrap_or(true),
        secret: &secret,
        headers: &headers,
    };
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    match queries::webhooks::create_within_plan(&mut conn, &new).await? {
        CreateOutcome::Created(webhook) => Ok(HttpResponse::Created().json(
            replayed_without_secret(&caller, WebhookView::new(*webhook, true)),
        )),
        CreateOutcome::NotOnPlan { plan } => Err(ApiError::NotOnPlan(format!(
            "Webhooks are not available on the {plan} plan"
        ))),
        CreateOutcome::LimitReached { plan, max } => Err(ApiError::LimitReached(format!(
            "Webhook limit reached: the {plan} plan allows {max} webhooks"
        ))),
    }
}

/// List the organization's webhooks (without secrets).
#[utoipa::path(
    tag = "webhooks",
    responses(
        (status = 200, body = WebhookList),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
    ),
    security(("bearer" = ["webhooks"]))
)]
#[get("/webhooks")]
pub async fn list_webhooks(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Webhooks)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let webhooks = queries::webhooks::list_for_org(&mut conn, caller.org_id).await?;
    Ok(HttpResponse::Ok().json(WebhookList {
        webhooks: webhooks
            .into_iter()
            .map(|w| WebhookView::new(w, false))
            .collect(),
    }))
}

/// Read a webhook (without its secret).
#[utoipa::path(
    tag = "webhooks",
    params(("id" = String, Path, description = "Webhook id")),
    responses(
        (status = 200, body = WebhookView),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, description = "Unknown webhook (another organization's included)", body = ErrorBody),
    ),
    security(("bearer" = ["webhooks"]))
)]
#[get("/webhooks/{id}")]
pub async fn get_webhook(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Webhooks)?;
    let id = path_id(KIND, &path)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let webhook = queries::webhooks::find_for_org(&mut conn, caller.org_id, id)
        .await?
        .ok_or_else(|| not_found(KIND, &path))?;
    Ok(HttpResponse::Ok().json(WebhookView::new(webhook, false)))
}

/// Change any of the create fields; `enabled: true` re-enables a webhook
/// disabled after failed deliveries and resets its failure count.
#[utoipa::path(
    tag = "webhooks",
    params(("id" = String, Path, description = "Webhook id")),
    request_body = WebhookRequest,
    responses(
        (status = 200, body = WebhookView),
        (status = 400, description = "Invalid field; `param` names it", body = ErrorBody),
        (status = 404, description = "Unknown webhook (another organization's included)", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
    ),
    security(("bearer" = ["webhooks"]))
)]
#[patch("/webhooks/{id}")]
pub async fn update_webhook(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Webhooks)?;
    let id = path_id(KIND, &path)?;
    let request: WebhookRequest = json_body(&body)?;
    let changes = WebhookUpdate {
        name: match &request.name {
            Some(name) => Some(webhooks::validate_name(Some(name.as_str()))?),
            None => None,
        },
        url: match &request.url {
            Some(url) => Some(webhooks::validate_url(
                Some(url.as_str()),
                state.allow_private_webhooks,
            )?),
            None => None,
        },
        events: match &request.events {
            Some(kinds) => Some(webhooks::validate_events(Some(kinds.as_slice()))?),
            None => None,
        },
        enabled: request.enabled,
        headers: match &request.headers {
            Some(headers) => Some(webhooks::validate_headers(Some(headers))?),
            None => None,
        },
    };
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let webhook = queries::webhooks::update(&mut conn, caller.org_id, id, changes)
        .await?
        .ok_or_else(|| not_found(KIND, &path))?;
    if webhook.enabled {
        // Deliveries paused while it was disabled are due again.
        state.notifier.events_recorded();
    }
    Ok(HttpResponse::Ok().json(WebhookView::new(webhook, false)))
}

/// Delete a webhook with its delivery history; pending deliveries are dropped.
#[utoipa::path(
    tag = "webhooks",
    params(("id" = String, Path, description = "Webhook id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = ["webhooks"]))
)]
#[delete("/webhooks/{id}")]
pub async fn delete_webhook(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Webhooks)?;
    let id = path_id(KIND, &path)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    if queries::webhooks::delete(&mut conn, caller.org_id, id).await? {
        Ok(HttpResponse::NoContent().finish())
    } else {
        Err(not_found(KIND, &path))
    }
}

/// Issue a new signing secret (shown once); the old one stops at once.
#[utoipa::path(
    tag = "webhooks",
    params(("id" = String, Path, description = "Webhook id")),
    responses(
        (status = 200, body = WebhookView),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = ["webhooks"]))
)]
#[post("/webhooks/{id}/rotate-secret")]
pub async fn rotate_webhook_secret(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Webhooks)?;
    let id = path_id(KIND, &path)?;
    let secret = webhooks::generate_secret().map_err(ApiError::internal)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let webhook = queries::webhooks::rotate_secret(&mut conn, caller.org_id, id, &secret)
        .await?
        .ok_or_else(|| not_found(KIND, &path))?;
    Ok(HttpResponse::Ok().json(replayed_without_secret(
        &caller,
        WebhookView::new(webhook, true),
    )))
}

/// An `Idempotency-Key` replay answers the same fields without the signing
/// secret, which is never stored with the key's record (as a new API key's
/// value is not).
fn replayed_without_secret(caller: &Caller, mut view: WebhookView) -> WebhookView {
    let secret = view.secret.take();
    caller
        .effects
        .replay_with(|| serde_json::to_vec(&view).ok().map(Into::into));
    view.secret = secret;
    view
}

/// Send a `webhook.test` event to this webhook only (delivered, signed and
/// retried like any other event).
#[utoipa::path(
    tag = "webhooks",
    params(("id" = String, Path, description = "Webhook id")),
    responses(
        (status = 202, body = TestEventQueued),
        (status = 404, description = "Unknown webhook (another organization's included)", body = ErrorBody),
        (status = 409, description = "`webhook_disabled`: the webhook is disabled; enable it (PATCH `enabled: true`) first", body = ErrorBody),
        (status = 429, description = "`rate_limited`: the webhook's test events, redeliveries and replays of this minute (`webhooks.manual_sends_per_minute`) are spent; `Retry-After` says when the next is taken", body = ErrorBody),
    ),
    security(("bearer" = ["webhooks"]))
)]
#[post("/webhooks/{id}/test")]
pub async fn test_webhook(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Webhooks)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let webhook = enabled_webhook(&mut conn, &caller, &path).await?;
    let event =
        match queries::webhooks::send_test_event(&mut conn, &webhook, &state.webhook_settings)
            .await?
        {
            TestOutcome::Queued(event) => event,
            TestOutcome::RateLimited {
                retry_after_seconds,
            } => return Err(manual_sends_spent(retry_after_seconds)),
        };
    state.notifier.events_recorded();
    Ok(HttpResponse::Accepted().json(TestEventQueued {
        event_id: event.id,
        event_type: event.kind,
    }))
}

/// A webhook's recent deliveries, newest first, with their attempts.
#[utoipa::path(
    tag = "webhooks",
    params(
        ("id" = String, Path, description = "Webhook id"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "1 to 100, default 20"),
        ("status" = Option<String>, Query, pattern = "^(pending|succeeded|failed)$", description = "pending, succeeded or failed"),
    ),
    responses(
        (status = 200, body = DeliveryList),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("bearer" = ["webhooks"]))
)]
#[get("/webhooks/{id}/deliveries")]
pub async fn list_webhook_deliveries(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Webhooks)?;
    let id = path_id(KIND, &path)?;
    let limit = match query.get("limit") {
        None => 20,
        Some(raw) => raw
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "limit must be an integer from 1 to 100, got `{raw}`"
                ))
            })?,
    };
    let status = match query.get("status").map(String::as_str) {
        None => None,
        Some(s @ ("pending" | "succeeded" | "failed")) => Some(s),
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "status must be pending, succeeded or failed, got `{other}`"
            )));
        }
    };
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    queries::webhooks::find_for_org(&mut conn, caller.org_id, id)
        .await?
        .ok_or_else(|| not_found(KIND, &path))?;
    let logs = queries::webhooks::recent_deliveries(&mut conn, id, status, limit).await?;
    Ok(HttpResponse::Ok().json(DeliveryList {
        deliveries: logs.into_iter().map(DeliveryView::from).collect(),
    }))
}

/// The webhook of the caller's organization, enabled: a disabled one makes
/// no attempts, so nothing could be sent "now".
async fn enabled_webhook(
    conn: &mut AsyncPgConnection,
    caller: &Caller,
    raw_id: &str,
) -> Result<Webhook, ApiError> {
    let id = path_id(KIND, raw_id)?;
    match queries::webhooks::find_send_target(conn, caller.org_id, id).await? {
        SendTarget::Enabled(webhook) => Ok(*webhook),
        SendTarget::Disabled => Err(ApiError::WebhookDisabled(
            "the webhook is disabled; enable it (PATCH enabled=true) to send events again".into(),
        )),
        SendTarget::NotFound => Err(not_found(KIND, raw_id)),
    }
}

/// Attempt one delivery's event again now, outside the retry schedule, with
/// the same event id (`x-service-event-id`, `webhook-id`). A finished
/// delivery ends with this attempt's result (no retries); a pending one keeps
/// its scheduled retries if this attempt fails.
#[utoipa::path(
    tag = "webhooks",
    params(
        ("id" = String, Path, description = "Webhook id"),
        ("deliveryId" = String, Path, description = "Delivery id (from `GET /webhooks/{id}/deliveries`)"),
    ),
    responses(
        (status = 202, description = "The attempt is queued: the scheduler makes it at once", body = RedeliveryQueued),
        (status = 401, body = ErrorBody),
        (status = 403, description = "Missing scope `webhooks`", body = ErrorBody),
        (status = 404, description = "Unknown webhook (another organization's included), or no such delivery of this webhook", body = ErrorBody),
        (status = 409, description = "`webhook_disabled`: enable the webhook first; `delivery_in_flight`: an attempt of this delivery is under way, retry when it has ended", body = ErrorBody),
        (status = 429, description = "`rate_limited`: the webhook's test events, redeliveries and replays of this minute (`webhooks.manual_sends_per_minute`) are spent; `Retry-After` says when the next is taken", body = ErrorBody),
    ),
    security(("bearer" = ["webhooks"]))
)]
#[post("/webhooks/{id}/deliveries/{deliveryId}/redeliver")]
pub async fn redeliver_webhook_delivery(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Webhooks)?;
    let (raw_webhook, raw_delivery) = path.into_inner();
    let delivery_id = path_id(DELIVERY_KIND, &raw_delivery)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let webhook = enabled_webhook(&mut conn, &caller, &raw_webhook).await?;
    match queries::webhooks::redeliver(&mut conn, webhook.id, delivery_id, &state.webhook_settings)
        .await?
    {
        RedeliverOutcome::Queued { event_id } => {
            state.notifier.events_recorded();
            Ok(HttpResponse::Accepted().json(RedeliveryQueued {
                delivery_id,
                event_id,
            }))
        }
        RedeliverOutcome::NotFound => Err(not_found(DELIVERY_KIND, &raw_delivery)),
        RedeliverOutcome::InFlight => Err(ApiError::DeliveryInFlight(
            "an attempt of this delivery is in flight; redeliver once it has ended".into(),
        )),
        RedeliverOutcome::RateLimited {
            retry_after_seconds,
        } => Err(manual_sends_spent(retry_after_seconds)),
    }
}

/// Send the webhook's failed deliveries of events created since `since`
/// again: one attempt each, now, with their original event ids.
#[utoipa::path(
    tag = "webhooks",
    params(("id" = String, Path, description = "Webhook id")),
    request_body = ReplayRequest,
    responses(
        (status = 202, description = "`replayed` deliveries (at most `webhooks.replay_max_per_call`, oldest event first) are queued; the scheduler attempts them at once; `remaining` more matched: replay again for them", body = ReplayQueued),
        (status = 400, description = "`since` missing or not ISO 8601, or `status` other than `failed`; `param` names the field", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "Missing scope `webhooks`", body = ErrorBody),
        (status = 404, description = "Unknown webhook (another organization's included)", body = ErrorBody),
        (status = 409, description = "`webhook_disabled`: enable the webhook first", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than the server's limit", body = ErrorBody),
        (status = 429, description = "`rate_limited`: the webhook's test events, redeliveries and replays of this minute (`webhooks.manual_sends_per_minute`) are spent; `Retry-After` says when the next is taken", body = ErrorBody),
    ),
    security(("bearer" = ["webhooks"]))
)]
#[post("/webhooks/{id}/replay")]
pub async fn replay_webhook_deliveries(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Webhooks)?;
    let request: ReplayRequest = json_body(&body)?;
    let since = replay_since(request.since.as_ref())?;
    replay_status(request.status.as_ref())?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let webhook = enabled_webhook(&mut conn, &caller, &path).await?;
    let (replayed, remaining) = match queries::webhooks::replay_failed(
        &mut conn,
        webhook.id,
        since,
        &state.webhook_settings,
    )
    .await?
    {
        ReplayOutcome::Queued {
            replayed,
            remaining,
        } => (replayed, remaining),
        ReplayOutcome::RateLimited {
            retry_after_seconds,
        } => return Err(manual_sends_spent(retry_after_seconds)),
    };
    if replayed > 0 {
        state.notifier.events_recorded();
    }
    Ok(HttpResponse::Accepted().json(ReplayQueued {
        replayed,
        remaining,
    }))
}

fn replay_since(since: Option<&Value>) -> Result<DateTime<Utc>, ValidationError> {
    match since {
        None | Some(Value::Null) => Err(ValidationError::new(
            "since",
            "since is required: an ISO 8601 time, e.g. 2026-11-27T08:00:00Z",
        )),
        Some(Value::String(raw)) => Ok(parse_bound("since", raw, false)?.in_utc()),
        Some(other) => Err(ValidationError::new(
            "since",
            format!("since must be an ISO 8601 time as a string, got `{other}`"),
        )),
    }
}

fn replay_status(status: Option<&Value>) -> Result<(), ValidationError> {
    match status {
        Some(Value::String(s)) if s == "failed" => Ok(()),
        None | Some(Value::Null) => Err(ValidationError::new(
            "status",
            "status is required and must be `failed` (only failed deliveries can be replayed)",
        )),
        Some(other) => Err(ValidationError::new(
            "status",
            format!(
                "status must be `failed` (only failed deliveries can be replayed), got `{other}`"
            ),
        )),
    }
}
