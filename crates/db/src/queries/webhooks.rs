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
use crate::prepared::PrepareOnce;
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
        .prepared()
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

/// What a redelivery request found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedeliverOutcome {
    /// An extra attempt of this event is due now.
    Queued { event_id: Uuid },
    /// No such delivery of this webhook.
    NotFound,
    /// An attempt is in flight; its result is not known yet.
    InFlight,
    /// The webhook's manual sends of this minute are spent.
    RateLimited { retry_after_seconds: u64 },
}

/// Makes an extra attempt of one delivery of `webhook_id` due now, outside
/// the retry schedule. A finished delivery becomes pending for that one
/// attempt; a pending one keeps its scheduled next attempt (`resume_at`) in
/// case the extra attempt fails. Committed before it returns, so the attempt
/// survives the API process; the scheduler's claim makes it exactly once.
/// Takes one of the webhook's manual sends ([`take_manual_send`]).
pub async fn redeliver(
    conn: &mut AsyncPgConnection,
    webhook_id: Uuid,
    delivery_id: Uuid,
    settings: &WebhookSettings,
) -> Result<RedeliverOutcome, DbError> {
    conn.transaction::<_, DbError, _>(async |conn| {
        let target = webhook_deliveries::table.filter(
            webhook_deliveries::id
                .eq(delivery_id)
                .and(webhook_deliveries::webhook_id.eq(webhook_id)),
        );
        let Some(delivery) = target
            .select(WebhookDelivery::as_select())
            .for_update()
            .first(conn)
            .await
            .optional()?
        else {
            return Ok(RedeliverOutcome::NotFound);
        };
        let now = Utc::now();
        if delivery.status == "pending" {
            // A claim counts the attempt and leases the row until
            // `next_attempt_at`; the attempt's row is written when it ends.
            let leased = delivery.attempts > 0 && delivery.next_attempt_at > now;
            if leased && !attempt_recorded(conn, delivery.id, delivery.attempts).await? {
                return Ok(RedeliverOutcome::InFlight);
            }
        }
        if let Some(retry_after_seconds) = take_manual_send(conn, webhook_id, settings).await? {
            return Ok(RedeliverOutcome::RateLimited {
                retry_after_seconds,
            });
        }
        if delivery.status == "pending" {
            diesel::sql_query(
                "UPDATE webhook_deliveries SET \
                   resume_at = CASE WHEN manual_attempt THEN resume_at ELSE next_attempt_at END, \
                   manual_attempt = true, next_attempt_at = now() WHERE id = $1",
            )
            .bind::<SqlUuid, _>(delivery.id)
            .prepared()
            .execute(conn)
            .await?;
        } else {
            diesel::update(webhook_deliveries::table.find(delivery.id))
                .set((
                    webhook_deliveries::status.eq("pending"),
                    webhook_deliveries::manual_attempt.eq(true),
                    webhook_deliveries::resume_at.eq(None::<DateTime<Utc>>),
                    webhook_deliveries::next_attempt_at.eq(diesel::dsl::now),
                    webhook_deliveries::completed_at.eq(None::<DateTime<Utc>>),
                ))
                .execute(conn)
                .await?;
        }
        Ok(RedeliverOutcome::Queued {
            event_id: delivery.event_id,
        })
    })
    .await
}

async fn attempt_recorded(
    conn: &mut AsyncPgConnection,
    delivery_id: Uuid,
    number: i32,
) -> Result<bool, DbError> {
    Ok(diesel::select(diesel::dsl::exists(
        webhook_attempts::table.filter(
            webhook_attempts::delivery_id
                .eq(delivery_id)
                .and(webhook_attempts::number.eq(number)),
        ),
    ))
    .get_result(conn)
    .await?)
}

/// What a replay queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayOutcome {
    /// `replayed` deliveries get an extra attempt now; `remaining` more
    /// matched and are left for a further replay.
    Queued { replayed: usize, remaining: i64 },
    /// The webhook's manual sends of this minute are spent.
    RateLimited { retry_after_seconds: u64 },
}

/// Replay: the `failed` deliveries of `webhook_id` whose event was created
/// at or after `since`, oldest event first, at most `replay_max_per_call`,
/// each get one extra attempt, due now. Takes one of the webhook's manual
/// sends ([`take_manual_send`]).
pub async fn replay_failed(
    conn: &mut AsyncPgConnection,
    webhook_id: Uuid,
    since: DateTime<Utc>,
    settings: &WebhookSettings,
) -> Result<ReplayOutcome, DbError> {
    conn.transaction::<_, DbError, _>(async |conn| {
        if let Some(retry_after_seconds) = take_manual_send(conn, webhook_id, settings).await? {
            return Ok(ReplayOutcome::RateLimited {
                retry_after_seconds,
            });
        }
        let replayed = diesel::sql_query(
            "UPDATE webhook_deliveries SET status = 'pending', manual_attempt = true, \
               resume_at = NULL, next_attempt_at = now(), completed_at = NULL \
             WHERE id IN ( \
               SELECT d.id FROM webhook_deliveries d JOIN events e ON e.id = d.event_id \
                WHERE d.webhook_id = $1 AND d.status = 'failed' AND e.created_at >= $2 \
                ORDER BY e.created_at, d.id LIMIT $3 FOR UPDATE OF d)",
        )
        .bind::<SqlUuid, _>(webhook_id)
        .bind::<Timestamptz, _>(since)
        .bind::<BigInt, _>(settings.replay_max_per_call.max(1))
        .prepared()
        .execute(conn)
        .await?;
        let remaining = count_failed_since(conn, webhook_id, since).await?;
        Ok(ReplayOutcome::Queued {
            replayed,
            remaining,
        })
    })
    .await
}

/// Takes one manual send (test event, redelivery, replay) of the webhook's
/// minute: a fixed window that starts with its first send and holds
/// `manual_sends_per_minute`. The row stays locked to the caller's
/// transaction. `None`: taken; `Some(seconds)`: refused, the window ends
/// in that many seconds (at least 1).
pub async fn take_manual_send(
    conn: &mut AsyncPgConnection,
    webhook_id: Uuid,
    settings: &WebhookSettings,
) -> Result<Option<u64>, DbError> {
    #[derive(QueryableByName)]
    struct Taken {
        #[diesel(sql_type = Bool)]
        taken: bool,
        #[diesel(sql_type = diesel::sql_types::Double)]
        wait_seconds: f64,
    }
    let row: Option<Taken> = diesel::sql_query(
        "WITH w AS ( \
           SELECT id, manual_sends, manual_window_at, \
                  manual_window_at IS NULL OR manual_window_at <= now() - interval '1 minute' AS fresh \
             FROM webhooks WHERE id = $1 FOR UPDATE), \
         taken AS ( \
           UPDATE webhooks t SET \
                  manual_window_at = CASE WHEN w.fresh THEN now() ELSE w.manual_window_at END, \
                  manual_sends = CASE WHEN w.fresh THEN 1 ELSE w.manual_sends + 1 END \
             FROM w WHERE t.id = w.id AND (w.fresh OR w.manual_sends < $2) \
           RETURNING t.id) \
         SELECT EXISTS (SELECT 1 FROM taken) AS taken, \
                COALESCE(extract(epoch FROM w.manual_window_at + interval '1 minute' - now()), 0)::float8 \
                  AS wait_seconds \
           FROM w",
    )
    .bind::<SqlUuid, _>(webhook_id)
    .bind::<Integer, _>(settings.manual_sends_per_minute)
    .prepared()
    .get_result(conn)
    .await
    .optional()?;
    Ok(match row {
        // A webhook deleted meanwhile: the send finds nothing to do.
        None => None,
        Some(row) if row.taken => None,
        Some(row) => Some((row.wait_seconds.ceil() as u64).max(1)),
    })
}

/// A delivery as listed: the row, its event's kind and its finished attempts.
#[derive(Debug, Clone)]
pub struct DeliveryLog {
    pub delivery: WebhookDelivery,
    pub event_type: String,
    /// The job the event is about (`jobId` of `generation.*` events).
    pub job_id: Option<Uuid>,
    pub attempts: Vec<WebhookAttempt>,
}

/// A webhook's most recent deliveries, newest first, optionally of one status.
/// Deliveries and their attempts are read in one snapshot: an attempt is
/// never listed without the schedule its recording set.
pub async fn recent_deliveries(
    conn: &mut AsyncPgConnection,
    webhook_id: Uuid,
    status: Option<&str>,
    limit: i64,
) -> Result<Vec<DeliveryLog>, DbError> {
    deliveries_page(conn, webhook_id, status, None, limit).await
}

/// A keyset page of a webhook's deliveries, newest first: those older than
/// `before` (the previous page's last `(created_at, id)`), through
/// `webhook_deliveries_webhook_idx`; with their attempts, in one snapshot.
pub async fn deliveries_page(
    conn: &mut AsyncPgConnection,
    webhook_id: Uuid,
    status: Option<&str>,
    before: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<DeliveryLog>, DbError> {
    conn.build_transaction()
        .read_only()
        .repeatable_read()
        .run(async |conn| {
            let mut query = webhook_deliveries::table
                .inner_join(events::table)
                .filter(webhook_deliveries::webhook_id.eq(webhook_id))
                .order((
                    webhook_deliveries::created_at.desc(),
                    webhook_deliveries::id.desc(),
                ))
                .limit(limit)
                .select((
                    WebhookDelivery::as_select(),
                    events::kind,
                    events::data.retrieve_as_text("jobId").nullable(),
                ))
                .into_boxed();
            if let Some(status) = status {
                query = query.filter(webhook_deliveries::status.eq(status.to_owned()));
            }
            if let Some((at, id)) = before {
                query = query.filter(
                    webhook_deliveries::created_at
                        .lt(at)
                        .or(webhook_deliveries::created_at
                            .eq(at)
                            .and(webhook_deliveries::id.lt(id))),
                );
            }
            let rows: Vec<(WebhookDelivery, String, Option<String>)> = query.load(conn).await?;
            with_attempts(conn, rows).await
        })
        .await
}

/// The deliveries of one job's events (to any webhook of the organization),
/// oldest first, with the webhook's name and their attempts; read through
/// `events_job_idx`.
pub async fn deliveries_for_job(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    job_id: Uuid,
) -> Result<Vec<(String, DeliveryLog)>, DbError> {
    conn.build_transaction()
        .read_only()
        .repeatable_read()
        .run(async |conn| {
            let rows: Vec<(WebhookDelivery, String, Option<String>, String)> =
                webhook_deliveries::table
                    .inner_join(events::table)
                    .inner_join(webhooks::table)
                    .filter(events::org_id.eq(org_id))
                    .filter(events::data.has_key("jobId"))
                    .filter(
                        events::data
                            .retrieve_as_text("jobId")
                            .eq(job_id.to_string()),
                    )
                    .order((
                        webhook_deliveries::created_at.asc(),
                        webhook_deliveries::id.asc(),
                    ))
                    .limit(200)
                    .select((
                        WebhookDelivery::as_select(),
                        events::kind,
                        events::data.retrieve_as_text("jobId").nullable(),
                        webhooks::name,
                    ))
                    .load(conn)
                    .await?;
            let mut names = Vec::with_capacity(rows.len());
            let mut bare = Vec::with_capacity(rows.len());
            for (delivery, kind, job, name) in rows {
                names.push(name);
                bare.push((delivery, kind, job));
            }
            let logs = with_attempts(conn, bare).await?;
            Ok(names.into_iter().zip(logs).collect())
        })
        .await
}

/// The rows with their attempts (one query for all of them).
async fn with_attempts(
    conn: &mut AsyncPgConnection,
    rows: Vec<(WebhookDelivery, String, Option<String>)>,
) -> Result<Vec<DeliveryLog>, DbError> {
    let ids: Vec<Uuid> = rows.iter().map(|(d, _, _)| d.id).collect();
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
        .map(|(delivery, event_type, job)| {
            let attempts = attempts
                .iter()
                .filter(|a| a.delivery_id == delivery.id)
                .cloned()
                .collect();
            DeliveryLog {
                delivery,
                event_type,
                job_id: job.and_then(|j| j.parse().ok()),
                attempts,
            }
        })
        .collect())
}

/// How many deliveries [`replay_failed`] with the same arguments would
/// attempt again now.
pub async fn count_failed_since(
    conn: &mut AsyncPgConnection,
    webhook_id: Uuid,
    since: DateTime<Utc>,
) -> Result<i64, DbError> {
    Ok(webhook_deliveries::table
        .inner_join(events::table)
        .filter(webhook_deliveries::webhook_id.eq(webhook_id))
        .filter(webhook_deliveries::status.eq("failed"))
        .filter(events::created_at.ge(since))
        .count()
        .get_result(conn)
        .await?)
}

/// A webhook of the organization, as an action that sends something now
/// (test, redeliver, replay) finds it: a disabled one makes no attempts.
#[derive(Debug)]
pub enum SendTarget {
    Enabled(Box<Webhook>),
    Disabled,
    NotFound,
}

pub async fn find_send_target(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
) -> Result<SendTarget, DbError> {
    Ok(match find_for_org(conn, org_id, id).await? {
        None => SendTarget::NotFound,
        Some(webhook) if !webhook.enabled => SendTarget::Disabled,
        Some(webhook) => SendTarget::Enabled(Box::new(webhook)),
    })
}

/// What a test event request did.
#[derive(Debug, Clone)]
pub enum TestOutcome {
    Queued(Box<Event>),
    /// The webhook's manual sends of this minute are spent.
    RateLimited {
        retry_after_seconds: u64,
    },
}

/// Records a `webhook.test` event and its delivery to this webhook only
/// (nobody subscribes to the kind: the insert fans out to no one), in one
/// transaction that takes one of the webhook's manual sends
/// ([`take_manual_send`]). The caller wakes the delivery after the commit.
pub async fn send_test_event(
    conn: &mut AsyncPgConnection,
    webhook: &Webhook,
    settings: &WebhookSettings,
) -> Result<TestOutcome, DbError> {
    let event = crate::events::webhook_test(webhook.org_id, webhook.id);
    conn.transaction::<_, DbError, _>(async |conn| {
        if let Some(retry_after_seconds) = take_manual_send(conn, webhook.id, settings).await? {
            return Ok(TestOutcome::RateLimited {
                retry_after_seconds,
            });
        }
        crate::queries::events::insert(conn, &event).await?;
        insert_delivery(conn, webhook.id, event.id).await?;
        Ok(TestOutcome::Queued(Box::new(event)))
    })
    .await
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
    /// An extra attempt (redeliver, replay), outside the retry schedule.
    #[diesel(sql_type = Bool)]
    pub manual: bool,
    /// Extra attempts before this one: `attempt - manual_attempts` is the
    /// position in the schedule.
    #[diesel(sql_type = Integer)]
    pub manual_attempts: i32,
    /// A pending delivery redelivered early: its next scheduled attempt,
    /// restored if this extra attempt fails.
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub resume_at: Option<DateTime<Utc>>,
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

/// The advisory lock that serializes claims across schedulers, so the
/// in-flight caps each claim reads are exact: "unigenwh" in ASCII.
const CLAIM_LOCK: i64 = 0x756e_6967_656e_7768;

/// The webhooks with pending deliveries, one index probe each (a skip scan
/// of `webhook_deliveries_pending_idx`), and the attempts in flight (leases
/// not run out, through `webhook_deliveries_leased_idx`): the start of
/// [`claim_due`] and [`next_due_at`]. `$1` is the per-webhook cap, `$2` the
/// per-organization one; `open` holds the enabled webhooks below both, with
/// the slots each has free.
macro_rules! open_webhooks_sql {
    () => {
        "WITH RECURSIVE hooks(webhook_id) AS ( \
           (SELECT webhook_id FROM webhook_deliveries WHERE status = 'pending' \
             ORDER BY webhook_id LIMIT 1) \
           UNION ALL \
           SELECT (SELECT d.webhook_id FROM webhook_deliveries d \
                    WHERE d.status = 'pending' AND d.webhook_id > h.webhook_id \
                    ORDER BY d.webhook_id LIMIT 1) \
             FROM hooks h WHERE h.webhook_id IS NOT NULL), \
         busy AS ( \
           SELECT d.webhook_id, w.org_id, d.leased_until \
             FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id \
            WHERE d.leased_until > now()), \
         open AS ( \
           SELECT * FROM ( \
             SELECT w.id, w.org_id, \
                    $1 - (SELECT count(*) FROM busy b WHERE b.webhook_id = w.id) AS free, \
                    $2 - (SELECT count(*) FROM busy b WHERE b.org_id = w.org_id) AS org_free \
               FROM hooks h JOIN webhooks w ON w.id = h.webhook_id WHERE w.enabled) o \
            WHERE free > 0 AND org_free > 0) "
    };
}

/// Claims up to `limit` due deliveries of enabled webhooks, fairly: at most
/// `max_in_flight_per_webhook` and `max_in_flight_per_org` attempts in
/// flight (across every scheduler), and the organizations in turn (each
/// one's oldest due delivery, then each one's second...), so one tenant's
/// backlog or slow receiver never holds the others' deliveries.
///
/// A claim counts the attempt and moves `next_attempt_at` and
/// `leased_until` past the lease, so no other scheduler takes it meanwhile
/// and a scheduler that dies mid-attempt leaves it due again. The
/// candidates are picked first (window functions cannot lock), then locked
/// with SKIP LOCKED and re-checked; claims are serialized by an advisory
/// lock, so concurrent schedulers never exceed the caps.
pub async fn claim_due(
    conn: &mut AsyncPgConnection,
    limit: i64,
    settings: &WebhookSettings,
) -> Result<Vec<ClaimedDelivery>, DbError> {
    let lease = settings.lease().as_secs_f64();
    conn.transaction::<_, DbError, _>(async |conn| {
        diesel::sql_query("SELECT pg_advisory_xact_lock($1)")
            .bind::<BigInt, _>(CLAIM_LOCK)
            .prepared()
            .execute(conn)
            .await?;
        Ok(diesel::sql_query(concat!(
            open_webhooks_sql!(),
            ", candidates AS ( \
               SELECT c.id, c.next_attempt_at, o.org_id, o.org_free FROM open o \
                CROSS JOIN LATERAL ( \
                  SELECT d.id, d.next_attempt_at FROM webhook_deliveries d \
                   WHERE d.webhook_id = o.id AND d.status = 'pending' \
                     AND d.next_attempt_at <= now() \
                   ORDER BY d.next_attempt_at LIMIT o.free) c), \
             picked AS ( \
               SELECT id FROM ( \
                 SELECT id, next_attempt_at, org_free, row_number() OVER \
                          (PARTITION BY org_id ORDER BY next_attempt_at, id) AS turn \
                   FROM candidates) r \
                WHERE turn <= org_free ORDER BY turn, next_attempt_at LIMIT $3), \
             due AS ( \
               SELECT d.id FROM webhook_deliveries d \
                WHERE d.id IN (SELECT id FROM picked) AND d.status = 'pending' \
                  AND d.next_attempt_at <= now() \
                FOR UPDATE OF d SKIP LOCKED) \
             UPDATE webhook_deliveries d \
                SET attempts = d.attempts + 1, \
                    next_attempt_at = now() + make_interval(secs => $4), \
                    leased_until = now() + make_interval(secs => $4) \
               FROM due, webhooks w, events e \
              WHERE d.id = due.id AND w.id = d.webhook_id AND e.id = d.event_id \
             RETURNING d.id AS delivery_id, d.attempts AS attempt, w.id AS webhook_id, w.url, \
                       w.secret, w.headers, e.id AS event_id, e.org_id, e.type AS event_type, \
                       e.data, e.created_at AS event_created_at, d.manual_attempt AS manual, \
                       d.manual_attempts, d.resume_at",
        ))
        .bind::<BigInt, _>(settings.max_in_flight_per_webhook)
        .bind::<BigInt, _>(settings.max_in_flight_per_org)
        .bind::<BigInt, _>(limit)
        .bind::<diesel::sql_types::Double, _>(lease)
        .prepared()
        .load(conn)
        .await?)
    })
    .await
}

/// When [`claim_due`] may next find something: the earliest pending
/// delivery of an enabled webhook below both caps, or the earliest lease
/// of an attempt in flight (an attempt that ends, or a lease that runs
/// out, frees a slot).
pub async fn next_due_at(
    conn: &mut AsyncPgConnection,
    settings: &WebhookSettings,
) -> Result<Option<DateTime<Utc>>, DbError> {
    #[derive(QueryableByName)]
    struct NextDue {
        #[diesel(sql_type = Nullable<Timestamptz>)]
        at: Option<DateTime<Utc>>,
    }
    let row: NextDue = diesel::sql_query(concat!(
        open_webhooks_sql!(),
        "SELECT LEAST( \
           (SELECT min(n.at) FROM open o CROSS JOIN LATERAL ( \
              SELECT d.next_attempt_at AS at FROM webhook_deliveries d \
               WHERE d.webhook_id = o.id AND d.status = 'pending' \
               ORDER BY d.next_attempt_at LIMIT 1) n), \
           (SELECT min(leased_until) FROM busy)) AS at",
    ))
    .bind::<BigInt, _>(settings.max_in_flight_per_webhook)
    .bind::<BigInt, _>(settings.max_in_flight_per_org)
    .prepared()
    .get_result(conn)
    .await?;
    Ok(row.at)
}

/// Seconds since the oldest pending delivery was created (0 when none is
/// pending), on the database's clock: the webhook backlog's age. Reads the
/// pending deliveries only (the partial index `webhook_deliveries_due_idx`).
pub async fn oldest_pending_age_seconds(conn: &mut AsyncPgConnection) -> Result<f64, DbError> {
    #[derive(QueryableByName)]
    struct Age {
        #[diesel(sql_type = diesel::sql_types::Double)]
        seconds: f64,
    }
    let row: Age = diesel::sql_query(
        "SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 AS seconds \
           FROM webhook_deliveries WHERE status = 'pending'",
    )
    .get_result(conn)
    .await?;
    Ok(row.seconds.max(0.0))
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

/// Records a finished attempt and moves the delivery on ([`next_step`]):
/// succeeded (and the webhook's failure counter reset), retried later, or
/// failed (counted against the webhook, which is disabled at
/// `disable_after_failures`, or at once by a 410 Gone).
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
        request_headers: outcome.request_headers.clone(),
        response_body: outcome.response_body.clone(),
    };
    let ours = webhook_deliveries::table.filter(
        webhook_deliveries::id
            .eq(claimed.delivery_id)
            .and(webhook_deliveries::status.eq("pending"))
            .and(webhook_deliveries::attempts.eq(claimed.attempt)),
    );
    conn.transaction::<_, DbError, _>(async |conn| {
        // The webhook first, then the delivery: the order `DELETE FROM
        // webhooks` takes them in (the row, then its deliveries by cascade).
        // Locking the delivery first deadlocked with a delete that came
        // between the two locks (the success path updates the webhook).
        let webhook = webhooks::table
            .find(claimed.webhook_id)
            .select(webhooks::id)
            .for_no_key_update()
            .first::<Uuid>(conn)
            .await
            .optional()?;
        if webhook.is_none() {
            return Ok(Settled::Deleted);
        }
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
        let now = Utc::now();
        let next = next_step(claimed, outcome, settings, now);
        let (status, next_attempt_at, completed_at) = match next {
            Next::Succeeded => ("succeeded", None, Some(now)),
            Next::Retry(at) | Next::ExtraFailed { resume: Some(at) } => ("pending", Some(at), None),
            Next::Failed | Next::Gone | Next::ExtraFailed { resume: None } => {
                ("failed", None, Some(now))
            }
        };
        let updated = diesel::update(ours)
            .set((
                webhook_deliveries::status.eq(status),
                webhook_deliveries::completed_at.eq(completed_at),
                webhook_deliveries::last_status_code.eq(status_code),
                webhook_deliveries::last_error.eq(&outcome.error),
                webhook_deliveries::manual_attempt.eq(false),
                webhook_deliveries::manual_attempts
                    .eq(webhook_deliveries::manual_attempts + i32::from(claimed.manual)),
                webhook_deliveries::resume_at.eq(None::<DateTime<Utc>>),
                // The attempt is no longer in flight.
                webhook_deliveries::leased_until.eq(None::<DateTime<Utc>>),
                // Read only while pending.
                webhook_deliveries::next_attempt_at.eq(next_attempt_at.unwrap_or(now)),
            ))
            .execute(conn)
            .await?;
        if updated == 0 {
            return Ok(Settled::Stale);
        }
        match next {
            Next::Succeeded => {
                diesel::update(webhooks::table.find(claimed.webhook_id))
                    .set(webhooks::consecutive_failures.eq(0))
                    .execute(conn)
                    .await?;
                Ok(Settled::Succeeded)
            }
            Next::Retry(_) => Ok(Settled::RetryScheduled),
            Next::Failed => {
                let disabled = count_failed_delivery(
                    conn,
                    claimed.webhook_id,
                    settings.disable_after_failures,
                )
                .await?;
                Ok(Settled::Failed { disabled })
            }
            Next::Gone => {
                let disabled = disable_gone(conn, claimed.webhook_id).await?;
                Ok(Settled::Failed { disabled })
            }
            // Each failed extra attempt counts, so repeated redeliveries or
            // replays to a failing receiver disable the webhook too.
            Next::ExtraFailed { resume } => {
                let disabled = count_failed_delivery(
                    conn,
                    claimed.webhook_id,
                    settings.disable_after_failures,
                )
                .await?;
                Ok(match resume {
                    Some(_) => Settled::RetryScheduled,
                    None => Settled::Failed { disabled },
                })
            }
        }
    })
    .await
}

/// Where a finished attempt leaves its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Succeeded,
    /// Pending again, next attempt at this time.
    Retry(DateTime<Utc>),
    /// Failed for good: counted towards the webhook's automatic disable.
    Failed,
    /// The receiver answered 410 Gone: failed, and the webhook disabled.
    Gone,
    /// An extra attempt (redeliver, replay) failed: counted towards the
    /// webhook's automatic disable; pending again at `resume` (its
    /// schedule, as it was), or failed when the delivery had finished.
    ExtraFailed {
        resume: Option<DateTime<Utc>>,
    },
}

/// The receiver's status that disables its webhook at once.
const GONE: u16 = 410;

/// Decides the delivery's next step after an attempt ended at `now`.
///
/// - A 2xx succeeds; a 410 Gone fails it and disables the webhook.
/// - An extra attempt (redeliver, replay) that fails leaves a pending
///   delivery's schedule as it was (`resume_at`) and ends a finished one
///   `failed` again; either way it counts as one failed delivery towards
///   the webhook's automatic disable.
/// - A scheduled attempt is retried after the schedule's wait for its
///   position (extra attempts do not move it), or the receiver's
///   `Retry-After` when that is later, capped at the schedule's longest wait.
fn next_step(
    claimed: &ClaimedDelivery,
    outcome: &AttemptOutcome,
    settings: &WebhookSettings,
    now: DateTime<Utc>,
) -> Next {
    if outcome.succeeded() {
        return Next::Succeeded;
    }
    if outcome.status_code == Some(GONE) {
        return Next::Gone;
    }
    let after =
        |delay: Duration| now + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
    let asked = outcome.retry_after.map(|wait| {
        let longest = settings.retry_delays_ms.iter().copied().max().unwrap_or(0);
        after(wait.min(Duration::from_millis(longest)))
    });
    if claimed.manual {
        return Next::ExtraFailed {
            resume: claimed
                .resume_at
                .map(|scheduled| asked.map_or(scheduled, |at| at.max(scheduled))),
        };
    }
    match settings.retry_delay(claimed.attempt - claimed.manual_attempts) {
        Some(delay) => {
            let scheduled = after(delay);
            Next::Retry(asked.map_or(scheduled, |at| at.max(scheduled)))
        }
        None => Next::Failed,
    }
}

/// Disables the webhook because its receiver answered 410 Gone; true when
/// this call disabled it.
async fn disable_gone(conn: &mut AsyncPgConnection, webhook_id: Uuid) -> Result<bool, DbError> {
    let disabled =
        diesel::update(webhooks::table.filter(webhooks::id.eq(webhook_id).and(webhooks::enabled)))
            .set((
                webhooks::enabled.eq(false),
                webhooks::consecutive_failures.eq(webhooks::consecutive_failures + 1),
                webhooks::disabled_at.eq(Some(Utc::now())),
                webhooks::disabled_reason.eq(Some(
                    "the receiver answered 410 Gone; re-enable with PATCH enabled=true",
                )),
                webhooks::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)
            .await?;
    Ok(disabled == 1)
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
    .prepared()
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
    /// The receiver's `Retry-After` on a 429 or 503 answer.
    pub retry_after: Option<Duration>,
    /// The request headers sent (name -> value), signatures included; an
    /// empty object when nothing was sent.
    pub request_headers: serde_json::Value,
    /// The first [`RESPONSE_BODY_KEPT`] bytes of the answer, when there was one.
    pub response_body: Option<String>,
}

/// How much of a receiver's answer an attempt keeps.
pub const RESPONSE_BODY_KEPT: usize = 1024;

impl AttemptOutcome {
    pub fn succeeded(&self) -> bool {
        self.error.is_none() && self.status_code.is_some_and(|c| (200..300).contains(&c))
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn claimed(attempt: i32, manual: bool, resume_at: Option<DateTime<Utc>>) -> ClaimedDelivery {
        ClaimedDelivery {
            delivery_id: Uuid::nil(),
            attempt,
            webhook_id: Uuid::nil(),
            url: String::new(),
            secret: String::new(),
            headers: serde_json::Value::Null,
            event_id: Uuid::nil(),
            org_id: Uuid::nil(),
            event_type: String::new(),
            data: serde_json::Value::Null,
            event_created_at: Utc::now(),
            manual,
            manual_attempts: 0,
            resume_at,
        }
    }

    fn answered(code: u16, retry_after: Option<u64>) -> AttemptOutcome {
        AttemptOutcome {
            status_code: Some(code),
            error: None,
            duration: Duration::ZERO,
            retry_after: retry_after.map(Duration::from_secs),
            request_headers: serde_json::Value::Null,
            response_body: None,
        }
    }

    #[test]
    fn retry_after_wins_only_when_later_and_is_capped_at_the_longest_wait() {
        let settings = WebhookSettings::default();
        let now = Utc.with_ymd_and_hms(2026, 11, 27, 8, 0, 0).unwrap();
        let secs = |n: i64| Next::Retry(now + chrono::Duration::seconds(n));
        let step = |outcome| next_step(&claimed(1, false, None), &outcome, &settings, now);
        assert_eq!(step(answered(503, None)), secs(30));
        assert_eq!(step(answered(503, Some(10))), secs(30));
        assert_eq!(step(answered(429, Some(120))), secs(120));
        assert_eq!(step(answered(503, Some(86_400))), secs(3_600));
        // The last scheduled attempt is not retried, whatever it asks.
        let last = next_step(
            &claimed(5, false, None),
            &answered(503, Some(60)),
            &settings,
            now,
        );
        assert_eq!(last, Next::Failed);
        // Extra attempts do not move the schedule's position.
        let mut after_extra = claimed(6, false, None);
        after_extra.manual_attempts = 2;
        assert_eq!(
            next_step(&after_extra, &answered(500, None), &settings, now),
            secs(3_600)
        );
    }

    #[test]
    fn gone_and_extra_attempts_end_as_documented() {
        let settings = WebhookSettings::default();
        let now = Utc.with_ymd_and_hms(2026, 11, 27, 8, 0, 0).unwrap();
        let scheduled = now + chrono::Duration::minutes(10);
        assert_eq!(
            next_step(
                &claimed(1, false, None),
                &answered(410, None),
                &settings,
                now
            ),
            Next::Gone
        );
        assert_eq!(
            next_step(
                &claimed(6, true, None),
                &answered(500, None),
                &settings,
                now
            ),
            Next::ExtraFailed { resume: None }
        );
        assert_eq!(
            next_step(
                &claimed(2, true, Some(scheduled)),
                &answered(500, None),
                &settings,
                now
            ),
            Next::ExtraFailed {
                resume: Some(scheduled)
            }
        );
        assert_eq!(
            next_step(
                &claimed(2, true, Some(scheduled)),
                &answered(200, None),
                &settings,
                now
            ),
            Next::Succeeded
        );
    }
}
