//! Webhooks (`/webhooks`): each webhook with its URL, events and state;
//! `Create webhook` (the signing secret shown once); `Re-enable`. A
//! webhook's page (`/webhooks/{id}`) lists its deliveries (keyset pages)
//! with their attempts (the exact signed headers, the first 1 KB of the
//! answer), `Redeliver` per delivery, `Replay failed` (which first says how
//! many it will send) and `Send test event`. Every action goes through the
//! same `unigen_db::queries::webhooks` calls as the API's routes, and wakes
//! the delivery the same way.

use std::collections::HashMap;

use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use unigen_db::models::{NewWebhook, Webhook, WebhookUpdate};
use unigen_db::queries::webhooks::{
    CreateOutcome, DeliveryLog, RedeliverOutcome, ReplayOutcome, SendTarget, TestOutcome,
};
use unigen_db::{DbError, queries};
use unigen_jobs::webhooks as rules;
use uuid::Uuid;

use super::cursor;
use crate::error::DashError;
use crate::form::Posted;
use crate::layout::Chrome;
use crate::once::{self, OnceForm, Submission};
use crate::session::SignedIn;
use crate::state::{DashboardState, parse_id, render, see_other};

const PAGE_SIZE: i64 = 25;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/webhooks", web::get().to(list_webhooks))
        .route("/webhooks", web::post().to(create_webhook))
        .route("/webhooks/{id}", web::get().to(webhook_page))
        .route("/webhooks/{id}/enable", web::post().to(re_enable))
        .route("/webhooks/{id}/test", web::post().to(send_test))
        .route("/webhooks/{id}/replay", web::post().to(replay))
        .route(
            "/webhooks/{id}/deliveries/{delivery}/redeliver",
            web::post().to(redeliver),
        );
}

/// One attempt as shown.
pub struct AttemptRow {
    pub number: i32,
    pub started: String,
    pub duration_ms: i32,
    /// `HTTP 200`, or the error.
    pub outcome: String,
    pub headers: Vec<(String, String)>,
    pub response_body: Option<String>,
}

/// One delivery as shown (webhook and job pages).
pub struct DeliveryRow {
    pub id: Uuid,
    pub webhook_id: Uuid,
    pub webhook_name: String,
    pub event_type: String,
    pub job_id: Option<Uuid>,
    pub status: String,
    pub attempt_count: i32,
    pub last_status: String,
    pub next_retry: String,
    pub created: String,
    pub attempts: Vec<AttemptRow>,
}

impl DeliveryRow {
    fn of(log: DeliveryLog, webhook_name: String) -> Self {
        let d = log.delivery;
        Self {
            id: d.id,
            webhook_id: d.webhook_id,
            webhook_name,
            event_type: log.event_type,
            job_id: log.job_id,
            next_retry: if d.status == "pending" {
                super::datetime(&d.next_attempt_at)
            } else {
                "—".into()
            },
            status: d.status,
            attempt_count: d.attempts,
            last_status: d
                .last_status_code
                .map_or_else(|| "—".into(), |c| c.to_string()),
            created: super::datetime(&d.created_at),
            attempts: log
                .attempts
                .into_iter()
                .map(|a| AttemptRow {
                    number: a.number,
                    started: super::datetime(&a.started_at),
                    duration_ms: a.duration_ms,
                    outcome: match (a.status_code, a.error) {
                        (_, Some(error)) => error,
                        (Some(code), None) => format!("HTTP {code}"),
                        (None, None) => "no answer".into(),
                    },
                    headers: a
                        .request_headers
                        .as_object()
                        .map(|map| {
                            map.iter()
                                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                                .collect()
                        })
                        .unwrap_or_default(),
                    response_body: a.response_body,
                })
                .collect(),
        }
    }
}

/// The job page's deliveries (webhook name first).
pub fn delivery_rows(logs: Vec<(String, DeliveryLog)>) -> Vec<DeliveryRow> {
    logs.into_iter()
        .map(|(name, log)| DeliveryRow::of(log, name))
        .collect()
}

struct WebhookRow {
    id: Uuid,
    name: String,
    url: String,
    events: String,
    enabled: bool,
    why: String,
    failures: i32,
}

impl WebhookRow {
    fn of(w: &Webhook) -> Self {
        Self {
            id: w.id,
            name: w.name.clone(),
            url: w.url.clone(),
            events: w.events.join(", "),
            enabled: w.enabled,
            why: match (&w.disabled_reason, w.disabled_at) {
                (Some(reason), Some(at)) => format!("{reason} ({})", super::datetime(&at)),
                (Some(reason), None) => reason.clone(),
                (None, _) => "disabled by a member".into(),
            },
            failures: w.consecutive_failures,
        }
    }
}

#[derive(Template)]
#[template(path = "webhooks.html")]
struct WebhooksPage {
    chrome: Chrome,
    rows: Vec<WebhookRow>,
    can_manage: bool,
    event_kinds: &'static [&'static str],
    /// Just created: the webhook and its secret, shown once.
    created: Option<(String, String)>,
    /// One-time id of the create form: a resubmission creates nothing.
    form_id: String,
}

async fn list_webhooks(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
) -> Result<HttpResponse, DashError> {
    let webhooks = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::webhooks::list_for_org(&mut conn, signed_in.org_id()).await?
    };
    render(&WebhooksPage {
        can_manage: signed_in.role().can_manage_webhooks(),
        chrome: signed_in.chrome("webhooks", "Webhooks"),
        rows: webhooks.iter().map(WebhookRow::of).collect(),
        event_kinds: rules::EVENT_KINDS,
        created: None,
        form_id: once::new_form_id()?,
    })
}

/// The rules' message, as the page shows it.
fn invalid(err: unigen_core::ValidationError) -> DashError {
    DashError::BadRequest(err.to_string())
}

async fn create_webhook(
    state: web::Data<DashboardState>,
    posted: Posted,
) -> Result<HttpResponse, DashError> {
    let Posted { signed_in, form } = posted;
    signed_in.require(signed_in.role().can_manage_webhooks())?;
    // The API's rules (POST /webhooks).
    let name = rules::validate_name(form.get("name")).map_err(invalid)?;
    let url =
        rules::validate_url(form.get("url"), state.allow_private_webhooks).map_err(invalid)?;
    let kinds: Vec<String> = form.all("events").into_iter().map(str::to_owned).collect();
    let kinds = rules::validate_events(Some(&kinds)).map_err(invalid)?;
    let headers = rules::validate_headers(None).map_err(invalid)?;
    let secret = rules::generate_secret().map_err(DashError::internal)?;
    let new = NewWebhook {
        id: Uuid::now_v7(),
        org_id: signed_in.org_id(),
        name: &name,
        url: &url,
        events: &kinds,
        enabled: true,
        secret: &secret,
        headers: &headers,
    };
    let once = match OnceForm::claim(&state, &signed_in, &form, "webhook").await? {
        Submission::First(once) => once,
        Submission::Repeated => {
            return Err(DashError::BadRequest(
                "This form was already sent: its webhook was created, and its signing secret is not shown again."
                    .into(),
            ));
        }
    };
    let outcome = async {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::webhooks::create_within_plan(&mut conn, &new).await
    }
    .await;
    let refused = match outcome {
        Ok(CreateOutcome::Created(webhook)) => Ok(webhook),
        Ok(CreateOutcome::NotOnPlan { plan }) => Err(DashError::BadRequest(format!(
            "Webhooks are not available on the {plan} plan."
        ))),
        Ok(CreateOutcome::LimitReached { plan, max }) => Err(DashError::BadRequest(format!(
            "Webhook limit reached: the {plan} plan allows {max} webhooks."
        ))),
        Err(err) => Err(err.into()),
    };
    let created = match refused {
        Ok(created) => {
            once.done(&state, &signed_in).await?;
            created
        }
        Err(err) => {
            once.release(&state, &signed_in).await?;
            return Err(err);
        }
    };
    let webhooks = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::webhooks::list_for_org(&mut conn, signed_in.org_id()).await?
    };
    // Shown in this answer only: the page is `no-store` and is never
    // rendered with the secret again.
    render(&WebhooksPage {
        can_manage: true,
        chrome: signed_in.chrome("webhooks", "Webhooks"),
        rows: webhooks.iter().map(WebhookRow::of).collect(),
        event_kinds: rules::EVENT_KINDS,
        created: Some((created.name.clone(), created.secret.clone())),
        form_id: once::new_form_id()?,
    })
}

#[derive(Template)]
#[template(path = "webhook.html")]
struct WebhookDetailPage {
    chrome: Chrome,
    webhook: WebhookRow,
    can_manage: bool,
    can_redeliver: bool,
    show_webhook: bool,
    deliveries: Vec<DeliveryRow>,
    next: Option<String>,
    first: Option<String>,
    notice: Option<String>,
    /// A replay waiting for confirmation: (since as typed, since as shown, count).
    replay: Option<(String, String, i64)>,
    since_default: String,
}

/// Fixed notices after an action (nothing from the URL is echoed).
fn notice(done: Option<&str>) -> Option<String> {
    Some(
        match done? {
            "enabled" => "The webhook is enabled again; its failure count is reset.",
            "test" => "A webhook.test event is queued for delivery.",
            "redelivered" => "The delivery is queued: it will be attempted again now.",
            "replayed" => "The failed deliveries are queued: each will be attempted again now.",
            _ => return None,
        }
        .to_owned(),
    )
}

async fn detail(
    state: &DashboardState,
    signed_in: SignedIn,
    raw_id: &str,
    before: Option<(DateTime<Utc>, Uuid)>,
    notice: Option<String>,
    replay: Option<(String, String, i64)>,
) -> Result<HttpResponse, DashError> {
    let id = parse_id(raw_id)?;
    let (webhook, logs) = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        let webhook = queries::webhooks::find_for_org(&mut conn, signed_in.org_id(), id)
            .await?
            .ok_or(DashError::NotFound)?;
        let logs =
            queries::webhooks::deliveries_page(&mut conn, id, None, before, PAGE_SIZE).await?;
        (webhook, logs)
    };
    let base = format!("{}/webhooks/{id}", signed_in.prefix);
    let next = (logs.len() as i64 == PAGE_SIZE)
        .then(|| logs.last())
        .flatten()
        .map(|last| {
            format!(
                "{base}?before={}",
                cursor::encode(last.delivery.created_at, last.delivery.id)
            )
        });
    let first = before.map(|_| base.clone());
    let can_manage = signed_in.role().can_manage_webhooks();
    let since_default = (Utc::now() - chrono::Duration::days(1))
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    render(&WebhookDetailPage {
        chrome: signed_in.chrome("webhooks", format!("Webhook {}", webhook.name)),
        can_manage,
        can_redeliver: can_manage && webhook.enabled,
        show_webhook: false,
        deliveries: logs
            .into_iter()
            .map(|log| DeliveryRow::of(log, webhook.name.clone()))
            .collect(),
        webhook: WebhookRow::of(&webhook),
        next,
        first,
        notice,
        replay,
        since_default,
    })
}

async fn webhook_page(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
    path: web::Path<String>,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, DashError> {
    let before = cursor::decode(query.get("before").map(String::as_str))?;
    let notice = notice(query.get("done").map(String::as_str));
    detail(&state, signed_in, &path, before, notice, None).await
}

async fn re_enable(
    state: web::Data<DashboardState>,
    posted: Posted,
    path: web::Path<String>,
) -> Result<HttpResponse, DashError> {
    let signed_in = &posted.signed_in;
    signed_in.require(signed_in.role().can_manage_webhooks())?;
    let id = parse_id(&path)?;
    {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        // The API's PATCH `enabled: true`: clears the automatic disable and
        // the failure count.
        let changes = WebhookUpdate {
            enabled: Some(true),
            ..WebhookUpdate::default()
        };
        queries::webhooks::update(&mut conn, signed_in.org_id(), id, changes)
            .await?
            .ok_or(DashError::NotFound)?;
    }
    // Deliveries paused while it was disabled are due again.
    state.notifier.events_recorded();
    Ok(see_other(&format!(
        "{}/webhooks/{id}?done=enabled",
        signed_in.prefix
    )))
}

/// The webhook, enabled, or the page's answer why not.
async fn target(
    state: &DashboardState,
    signed_in: &SignedIn,
    id: Uuid,
) -> Result<Webhook, DashError> {
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    match queries::webhooks::find_send_target(&mut conn, signed_in.org_id(), id).await? {
        SendTarget::Enabled(webhook) => Ok(*webhook),
        SendTarget::Disabled => Err(DashError::BadRequest(
            "The webhook is disabled: re-enable it first.".into(),
        )),
        SendTarget::NotFound => Err(DashError::NotFound),
    }
}

async fn send_test(
    state: web::Data<DashboardState>,
    posted: Posted,
    path: web::Path<String>,
) -> Result<HttpResponse, DashError> {
    let signed_in = &posted.signed_in;
    signed_in.require(signed_in.role().can_manage_webhooks())?;
    let webhook = target(&state, signed_in, parse_id(&path)?).await?;
    {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        if let TestOutcome::RateLimited {
            retry_after_seconds,
        } =
            queries::webhooks::send_test_event(&mut conn, &webhook, &state.webhook_settings).await?
        {
            return Err(manual_sends_spent(retry_after_seconds));
        }
    }
    state.notifier.events_recorded();
    Ok(see_other(&format!(
        "{}/webhooks/{}?done=test",
        signed_in.prefix, webhook.id
    )))
}

async fn redeliver(
    state: web::Data<DashboardState>,
    posted: Posted,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, DashError> {
    let signed_in = &posted.signed_in;
    signed_in.require(signed_in.role().can_manage_webhooks())?;
    let (raw_webhook, raw_delivery) = path.into_inner();
    let delivery_id = parse_id(&raw_delivery)?;
    let webhook = target(&state, signed_in, parse_id(&raw_webhook)?).await?;
    let outcome = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::webhooks::redeliver(&mut conn, webhook.id, delivery_id, &state.webhook_settings)
            .await?
    };
    match outcome {
        RedeliverOutcome::Queued { .. } => {
            state.notifier.events_recorded();
            Ok(see_other(&format!(
                "{}/webhooks/{}?done=redelivered",
                signed_in.prefix, webhook.id
            )))
        }
        RedeliverOutcome::NotFound => Err(DashError::NotFound),
        RedeliverOutcome::InFlight => Err(DashError::BadRequest(
            "An attempt of this delivery is under way; redeliver it once it has ended.".into(),
        )),
        RedeliverOutcome::RateLimited {
            retry_after_seconds,
        } => Err(manual_sends_spent(retry_after_seconds)),
    }
}

/// The webhook's test events, redeliveries and replays of this minute are
/// spent (`webhooks.manual_sends_per_minute`, shared with the API).
fn manual_sends_spent(retry_after_seconds: u64) -> DashError {
    DashError::BadRequest(format!(
        "Too many test events, redeliveries and replays for this webhook: try again in \
         {retry_after_seconds} s."
    ))
}

/// `Since` as typed in a `datetime-local` field (UTC), or a date.
fn parse_since(raw: Option<&str>) -> Result<(String, DateTime<Utc>), DashError> {
    let raw = raw
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| DashError::BadRequest("Since is required: a date and time (UTC).".into()))?;
    let at = NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M")
        .or_else(|_| NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M:%S"))
        .or_else(|_| {
            NaiveDate::parse_from_str(raw, "%Y-%m-%d").map(|d| d.and_time(chrono::NaiveTime::MIN))
        })
        .map_err(|_| {
            DashError::BadRequest(
                "Since must be a date and time like 2026-11-29T08:00 (UTC).".into(),
            )
        })?;
    Ok((raw.to_owned(), at.and_utc()))
}

/// `Replay failed`: without `confirm`, the page says how many deliveries
/// it would send and asks; with it, they are sent.
async fn replay(
    state: web::Data<DashboardState>,
    posted: Posted,
    path: web::Path<String>,
) -> Result<HttpResponse, DashError> {
    let Posted { signed_in, form } = posted;
    signed_in.require(signed_in.role().can_manage_webhooks())?;
    let (typed, since) = parse_since(form.get("since"))?;
    let webhook = target(&state, &signed_in, parse_id(&path)?).await?;
    if form.get("confirm") != Some("yes") {
        let count = {
            let mut conn = state.pool.get().await.map_err(DbError::from)?;
            // One replay sends at most `replay_max_per_call` of them.
            queries::webhooks::count_failed_since(&mut conn, webhook.id, since)
                .await?
                .min(state.webhook_settings.replay_max_per_call)
        };
        let shown = super::datetime(&since);
        return detail(
            &state,
            signed_in,
            &path,
            None,
            None,
            Some((typed, shown, count)),
        )
        .await;
    }
    let replayed = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        match queries::webhooks::replay_failed(
            &mut conn,
            webhook.id,
            since,
            &state.webhook_settings,
        )
        .await?
        {
            ReplayOutcome::Queued { replayed, .. } => replayed,
            ReplayOutcome::RateLimited {
                retry_after_seconds,
            } => return Err(manual_sends_spent(retry_after_seconds)),
        }
    };
    if replayed > 0 {
        state.notifier.events_recorded();
    }
    Ok(see_other(&format!(
        "{}/webhooks/{}?done=replayed",
        signed_in.prefix, webhook.id
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_datetime_local_and_dates_and_refuses_the_rest() {
        let (_, at) = parse_since(Some("2026-11-29T08:30")).unwrap();
        assert_eq!(at.to_rfc3339(), "2026-11-29T08:30:00+00:00");
        let (_, at) = parse_since(Some("2026-11-29")).unwrap();
        assert_eq!(at.to_rfc3339(), "2026-11-29T00:00:00+00:00");
        for bad in [None, Some(""), Some("yesterday"), Some("2026-02-30T00:00")] {
            assert!(
                matches!(parse_since(bad), Err(DashError::BadRequest(_))),
                "{bad:?}"
            );
        }
        assert!(notice(Some("<script>")).is_none());
    }
}
