//! Webhooks, their deliveries and attempts: management for the API, claim
//! and settlement for the scheduler's delivery task.

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{
    BigInt, Bool, Integer, Jsonb, Nullable, Text, Timestamptz, Uuid as SqlUuid,
};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::DbError;
use crate::models::{Event, NewWebhook, Webhook, WebhookAttempt, WebhookDelivery, WebhookUpdate};
use crate::schema::{events, webhook_attempts, webhook_deliveries, webhooks};
use unigen_core::config::WebhookSettings;

/// Why a webhook could not be created.
#[derive(Debug)]
pub enum CreateOutcome {
    Created(Box<Webhook>),
    /// The plan has no webhooks at all.
    NotOnPlan {
        plan: String,
    },
    /// The organization already has the plan's maximum.
    LimitReached {
        plan: String,
        max: i32,
    },
}

#[derive(QueryableByName)]
struct PlanLimit {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Integer)]
    max_webhooks: i32,
}

/// Creates the webhook if the organization's plan allows one more. The
/// organization row is locked meanwhile, so concurrent creates cannot
/// overshoot the limit.
pub async fn create_within_plan(
    conn: &mut AsyncPgConnection,
    new: &NewWebhook<'_>,
) -> Result<CreateOutcome, DbError> {
    conn.transaction::<_, DbError, _>(async |conn| {
        let limit: PlanLimit = diesel::sql_query(
            "SELECT p.name, p.max_webhooks FROM organizations o \
             JOIN plans p ON p.code = o.plan_code WHERE o.id = $1 FOR UPDATE OF o",
        )
        .bind::<SqlUuid, _>(new.org_id)
        .get_result(conn)
        .await?;
        if limit.max_webhooks <= 0 {
            return Ok(CreateOutcome::NotOnPlan { plan: limit.name });
        }
        let count: i64 = webhooks::table
            .filter(webhooks::org_id.eq(new.org_id))
            .count()
            .get_result(conn)
            .await?;
        if count >= i64::from(limit.max_webhooks) {
            return Ok(CreateOutcome::LimitReached {
                plan: limit.name,
                max: limit.max_webhooks,
            });
        }
        let webhook = diesel::insert_into(webhooks::table)
            .values(new)
            .returning(Webhook::as_returning())
            .get_result(conn)
            .await?;
        Ok(CreateOutcome::Created(Box::new(webhook)))
    })
    .await
}

/// An organization's webhooks, oldest first.
pub async fn list_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
) -> Result<Vec<Webhook>, DbError> {
    Ok(webhooks::table
        .filter(webhooks::org_id.eq(org_id))
        .order((webhooks::created_at.asc(), webhooks::id.asc()))
        .select(Webhook::as_select())
        .load(conn)
        .await?)
}

/// One webhook of the organization (another organization's is `None`).
pub async fn find_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
) -> Result<Option<Webhook>, DbError> {
    Ok(webhooks::table
        .filter(webhooks::id.eq(id).and(webhooks::org_id.eq(org_id)))
        .select(Webhook::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Applies `changes`. `enabled: true` also clears an automatic disable and
/// the failure counter, so the webhook starts afresh.
pub async fn update(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    changes: WebhookUpdate,
) -> Result<Option<Webhook>, DbError> {
    let re_enable = changes.enabled == Some(true);
    conn.transaction::<_, DbError, _>(async |conn| {
        let target = webhooks::table.filter(webhooks::id.eq(id).and(webhooks::org_id.eq(org_id)));
        let updated = diesel::update(target)
            .set((&changes, webhooks::updated_at.eq(diesel::dsl::now)))
            .returning(Webhook::as_returning())
            .get_result(conn)
            .await
            .optional()?;
        if updated.is_none() || !re_enable {
            return Ok(updated);
        }
        Ok(Some(
            diesel::update(webhooks::table.find(id))
                .set((
                    webhooks::consecutive_failures.eq(0),
                    webhooks::disabled_at.eq(None::<DateTime<Utc>>),
                    webhooks::disabled_reason.eq(None::<String>),
                ))
                .returning(Webhook::as_returning())
                .get_result(conn)
                .await?,
        ))
    })
    .await
}

/// Replaces the signing secret; the old one stops working at once.
pub async fn rotate_secret(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    secret: &str,
) -> Result<Option<Webhook>, DbError> {
    Ok(
        diesel::update(
            webhooks::table.filter(webhooks::id.eq(id).and(webhooks::org_id.eq(org_id))),
        )
        .set((
            webhooks::secret.eq(secret),
            webhooks::updated_at.eq(diesel::dsl::now),
        ))
        .returning(Webhook::as_returning())
        .get_result(conn)
        .await
        .optional()?,
    )
}

/// Deletes the webhook with its deliveries and attempts.
pub async fn delete(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<bool, DbError> {
    let deleted = diesel::delete(
        webhooks::table.filter(webhooks::id.eq(id).and(webhooks::org_id.eq(org_id))),
    )
    .execute(conn)
    .await?;
    Ok(deleted == 1)
}

/// A pending delivery of `event_id` to this webhook only (test events).
pub async fn insert_delivery(
    conn: &mut AsyncPgConnection,
    webhook_id: Uuid,
    event_id: Uuid,
) -> Result<(), DbError> {
    diesel::insert_into(webhook_deliveries::table)
        .values((
            webhook_deliveries::id.eq(Uuid::now_v7()),
            webhook_deliveries::webhook_id.eq(webhook_id),
            webhook_deliveries::event_id.eq(event_id),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// A delivery as listed: the row, its event's kind and its finished attempts.
#[derive(Debug, Clone)]
pub struct DeliveryLog {
    pub delivery: WebhookDelivery,
    pub event_type: String,
    pub attempts: Vec<WebhookAttempt>,
}

/// A webhook's most recent deliveries, newest first, optionally of one status.
pub async fn recent_deliveries(
    conn: &mut AsyncPgConnection,
    webhook_id: Uuid,
    status: Option<&str>,
    limit: i64,
) -> Result<Vec<DeliveryLog>, DbError> {
    let mut query = webhook_deliveries::table
        .inner_join(events::table)
        .filter(webhook_deliveries::webhook_id.eq(webhook_id))
        .order((
            webhook_deliveries::created_at.desc(),
            webhook_deliveries::id.desc(),
        ))
        .limit(limit)
        .select((WebhookDelivery::as_select(), events::kind))
        .into_boxed();
    if let Some(status) = status {
        query = query.filter(webhook_deliveries::status.eq(status.to_owned()));
    }
    let rows: Vec<(WebhookDelivery, String)> = query.load(conn).await?;
    let ids: Vec<Uuid> = rows.iter().map(|(d, _)| d.id).collect();
    let attempts: Vec<WebhookAttempt> = webhook_attempts::table
        .filter(webhook_attempts::delivery_id.eq_any(&ids))
        .order((
            webhook_attempts::delivery_id.asc(),
            webhook_attempts::number.asc(),
        ))
        .select(WebhookAttempt::as_select())
        .load(conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(delivery, event_type)| {
            let attempts = attempts
                .iter()
                .filter(|a| a.delivery_id == delivery.id)
                .cloned()
                .collect();
            DeliveryLog {
                delivery,
                event_type,
                attempts,
            }
        })
        .collect())
}

/// A delivery claimed for one attempt, with what the attempt needs.
#[derive(Debug, Clone, QueryableByName)]
pub struct ClaimedDelivery {
    #[diesel(sql_type = SqlUuid)]
    pub delivery_id: Uuid,
    /// This attempt's number (attempts are counted when claimed).
    #[diesel(sql_type = Integer)]
    pub attempt: i32,
    #[diesel(sql_type = SqlUuid)]
    pub webhook_id: Uuid,
    #[diesel(sql_type = Text)]
    pub url: String,
    #[diesel(sql_type = Text)]
    pub secret: String,
    #[diesel(sql_type = Jsonb)]
    pub headers: serde_json::Value,
    #[diesel(sql_type = SqlUuid)]
    pub event_id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    pub org_id: Uuid,
    #[diesel(sql_type = Text)]
    pub event_type: String,
    #[diesel(sql_type = Jsonb)]
    pub data: serde_json::Value,
    #[diesel(sql_type = Timestamptz)]
    pub event_created_at: DateTime<Utc>,
}

impl ClaimedDelivery {
    pub fn event(&self) -> Event {
        Event {
            id: self.event_id,
            org_id: self.org_id,
            kind: self.event_type.clone(),
            data: self.data.clone(),
            created_at: self.event_created_at,
        }
    }
}

/// Claims up to `limit` due deliveries of enabled webhooks: counts the
/// attempt and moves `next_attempt_at` past `lease`, so no other scheduler
/// takes them meanwhile (SKIP LOCKED while claiming, the lease after) and a
/// scheduler that dies mid-attempt leaves them due again.
pub async fn claim_due(
    conn: &mut AsyncPgConnection,
    limit: i64,
    lease: Duration,
) -> Result<Vec<ClaimedDelivery>, DbError> {
    Ok(diesel::sql_query(
        "WITH due AS ( \
           SELECT d.id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id \
           WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND w.enabled \
           ORDER BY d.next_attempt_at LIMIT $1 \
           FOR UPDATE OF d SKIP LOCKED) \
         UPDATE webhook_deliveries d \
            SET attempts = d.attempts + 1, \
                next_attempt_at = now() + make_interval(secs => $2) \
           FROM due, webhooks w, events e \
          WHERE d.id = due.id AND w.id = d.webhook_id AND e.id = d.event_id \
         RETURNING d.id AS delivery_id, d.attempts AS attempt, w.id AS webhook_id, w.url, \
                   w.secret, w.headers, e.id AS event_id, e.org_id, e.type AS event_type, \
                   e.data, e.created_at AS event_created_at",
    )
    .bind::<BigInt, _>(limit)
    .bind::<diesel::sql_types::Double, _>(lease.as_secs_f64())
    .load(conn)
    .await?)
}

/// When the next pending delivery of an enabled webhook falls due (leases of
/// attempts in flight included).
pub async fn next_due_at(conn: &mut AsyncPgConnection) -> Result<Option<DateTime<Utc>>, DbError> {
    #[derive(QueryableByName)]
    struct NextDue {
        #[diesel(sql_type = Nullable<Timestamptz>)]
        at: Option<DateTime<Utc>>,
    }
    let row: NextDue = diesel::sql_query(
        "SELECT min(d.next_attempt_at) AS at FROM webhook_deliveries d \
         JOIN webhooks w ON w.id = d.webhook_id WHERE d.status = 'pending' AND w.enabled",
    )
    .get_result(conn)
    .await?;
    Ok(row.at)
}

/// What recording an attempt changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Succeeded,
    /// Failed; attempted again after the schedule's wait.
    RetryScheduled,
    /// The last attempt failed: the delivery is `failed`. `disabled`: this
    /// failure disabled the webhook.
    Failed {
        disabled: bool,
    },
    /// Another scheduler took the delivery over (our lease ran out): only
    /// the attempt row was written.
    Stale,
    /// The webhook was deleted during the attempt: nothing to record.
    Deleted,
}

/// Records a finished attempt and moves the delivery on: succeeded (and the
/// webhook's failure counter reset), retried later, or failed (counted
/// against the webhook, which is disabled at `disable_after_failures`).
/// Updates are fenced on the attempt number, so a late result of an attempt
/// whose lease expired changes nothing but its own attempt row.
pub async fn record_attempt(
    conn: &mut AsyncPgConnection,
    claimed: &ClaimedDelivery,
    started_at: DateTime<Utc>,
    outcome: &AttemptOutcome,
    settings: &WebhookSettings,
) -> Result<Settled, DbError> {
    let status_code = outcome.status_code.map(i32::from);
    let attempt = WebhookAttempt {
        delivery_id: claimed.delivery_id,
        number: claimed.attempt,
        started_at,
        duration_ms: i32::try_from(outcome.duration.as_millis()).unwrap_or(i32::MAX),
        status_code,
        error: outcome.error.clone(),
    };
    let ours = webhook_deliveries::table.filter(
        webhook_deliveries::id
            .eq(claimed.delivery_id)
            .and(webhook_deliveries::status.eq("pending"))
            .and(webhook_deliveries::attempts.eq(claimed.attempt)),
    );
    conn.transaction::<_, DbError, _>(async |conn| {
        // Locked, so a concurrent delete waits for this record to finish.
        let exists = webhook_deliveries::table
            .find(claimed.delivery_id)
            .select(webhook_deliveries::id)
            .for_update()
            .first::<Uuid>(conn)
            .await
            .optional()?;
        if exists.is_none() {
            return Ok(Settled::Deleted);
        }
        diesel::insert_into(webhook_attempts::table)
            .values(&attempt)
            .on_conflict_do_nothing()
            .execute(conn)
            .await?;
        let retry = settings.retry_delay(claimed.attempt);
        let (status, next_attempt) = if outcome.succeeded() {
            ("succeeded", None)
        } else if let Some(delay) = retry {
            ("pending", Some(delay))
        } else {
            ("failed", None)
        };
        let updated = match next_attempt {
            Some(delay) => {
                let at =
                    Utc::now() + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
                diesel::update(ours)
                    .set((
                        webhook_deliveries::next_attempt_at.eq(at),
                        webhook_deliveries::last_status_code.eq(status_code),
                        webhook_deliveries::last_error.eq(&outcome.error),
                    ))
                    .execute(conn)
                    .await?
            }
            None => {
                diesel::update(ours)
                    .set((
                        webhook_deliveries::status.eq(status),
                        webhook_deliveries::completed_at.eq(Some(Utc::now())),
                        webhook_deliveries::last_status_code.eq(status_code),
                        webhook_deliveries::last_error.eq(&outcome.error),
                    ))
                    .execute(conn)
                    .await?
            }
        };
        if updated == 0 {
            return Ok(Settled::Stale);
        }
        match status {
            "succeeded" => {
                diesel::update(webhooks::table.find(claimed.webhook_id))
                    .set(webhooks::consecutive_failures.eq(0))
                    .execute(conn)
                    .await?;
                Ok(Settled::Succeeded)
            }
            "pending" => Ok(Settled::RetryScheduled),
            _ => {
                let disabled = count_failed_delivery(
                    conn,
                    claimed.webhook_id,
                    settings.disable_after_failures,
                )
                .await?;
                Ok(Settled::Failed { disabled })
            }
        }
    })
    .await
}

/// Counts one more failed delivery; at `threshold` the webhook is disabled.
/// True when this call disabled it.
async fn count_failed_delivery(
    conn: &mut AsyncPgConnection,
    webhook_id: Uuid,
    threshold: i32,
) -> Result<bool, DbError> {
    #[derive(QueryableByName)]
    struct Disabled {
        #[diesel(sql_type = Bool)]
        now_disabled: bool,
    }
    // SET reads the old values, so `enabled` here is before this update.
    let row: Disabled = diesel::sql_query(
        "UPDATE webhooks SET consecutive_failures = consecutive_failures + 1, \
           enabled = enabled AND consecutive_failures + 1 < $2, \
           disabled_at = CASE WHEN enabled AND consecutive_failures + 1 >= $2 \
                              THEN now() ELSE disabled_at END, \
           disabled_reason = CASE WHEN enabled AND consecutive_failures + 1 >= $2 \
                              THEN $3 ELSE disabled_reason END, \
           updated_at = now() \
         WHERE id = $1 \
         RETURNING COALESCE(NOT enabled AND disabled_at = now(), false) AS now_disabled",
    )
    .bind::<SqlUuid, _>(webhook_id)
    .bind::<Integer, _>(threshold)
    .bind::<Text, _>(format!(
        "{threshold} consecutive deliveries failed; re-enable with PATCH enabled=true"
    ))
    .get_result(conn)
    .await?;
    Ok(row.now_disabled)
}

/// How one attempt ended: a 2xx answer, another answer, or no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptOutcome {
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub duration: Duration,
}

impl AttemptOutcome {
    pub fn succeeded(&self) -> bool {
        self.error.is_none() && self.status_code.is_some_and(|c| (200..300).contains(&c))
    }
}
