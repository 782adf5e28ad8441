//! `GET /jobs/{id}/events`: a job's changes as server-sent events.
//!
//! A job only moves forward: `pending` < `processing` < a terminal state,
//! progress grows while it is processing, and a retried attempt starts
//! processing again with a higher attempt number. An event's id encodes
//! that position (`<status rank>-<attempt>-<progress>`), so the same state
//! has the same id on every connection, and ids sort in the job's order. A
//! stream sends a state only if it lies beyond the last one sent (or the
//! `Last-Event-ID` a client resumes from): nothing is repeated, and the
//! newest state is never skipped. A job handed back to the queue (worker
//! lost or stopping) is not reported until it moves beyond what was sent.
//!
//! Streams wake on the job's change notifications (LISTEN/NOTIFY, as long
//! polls do); the `notify.recheck_seconds` re-read only covers a lost
//! notification. A stopping process ends its streams at once.
//!
//! An organization holds at most `http.max_event_streams_per_org` open
//! streams on one API process (a 429 past it), and each stream checks its
//! key again at every keep-alive: once the key is revoked or expired (or
//! the organization suspended), the stream ends.

use std::fmt;

use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, get, web};
use chrono::Utc;
use futures_util::stream;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use unigen_core::domain::JobStatus;
use unigen_db::DbError;
use unigen_db::models::Job;
use unigen_db::notify::JobWatch;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::event_streams::StreamPlace;
use crate::routes::jobs::JOB_SCOPES;
use crate::routes::params::{not_found, path_id};
use crate::state::AppState;
use crate::views::JobView;

const KIND: &str = "job";
/// Pause between reads while the database is unreachable.
const DB_RETRY_PAUSE: Duration = Duration::from_millis(250);
const LAST_EVENT_ID: &str = "Last-Event-ID";

/// Where a job is; ordered as the job moves (field order matters: a
/// terminal state lies beyond every attempt's progress).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Position {
    /// 0 pending, 1 processing, 2 terminal.
    rank: u8,
    attempt: i32,
    progress: i16,
}

impl Position {
    fn of(job: &Job) -> Self {
        let rank = match job.status.parse::<JobStatus>() {
            Ok(JobStatus::Pending) => 0,
            Ok(JobStatus::Processing) => 1,
            Ok(status) if status.is_terminal() => 2,
            // Unknown to this version: treated as pending (never final).
            _ => 0,
        };
        Self {
            rank,
            attempt: job.attempt.max(0),
            progress: job.progress.clamp(0, 100),
        }
    }

    fn is_terminal(self) -> bool {
        self.rank == 2
    }

    /// `progress` for a running attempt's advance, `status` otherwise.
    fn event_type(self) -> &'static str {
        if self.rank == 1 && self.progress > 0 {
            "progress"
        } else {
            "status"
        }
    }

    /// A `Last-Event-ID` this endpoint sent.
    fn parse(raw: &str) -> Option<Self> {
        let mut parts = raw.trim().splitn(3, '-');
        let rank = parts.next()?.parse::<u8>().ok().filter(|r| *r <= 2)?;
        let attempt = parts.next()?.parse::<i32>().ok().filter(|a| *a >= 0)?;
        let progress = parts
            .next()?
            .parse::<i16>()
            .ok()
            .filter(|p| (0..=100).contains(p))?;
        Some(Self {
            rank,
            attempt,
            progress,
        })
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.rank, self.attempt, self.progress)
    }
}

fn last_event_id(req: &HttpRequest) -> Result<Option<Position>, ApiError> {
    let Some(value) = req.headers().get(LAST_EVENT_ID) else {
        return Ok(None);
    };
    let invalid = || ApiError::InvalidField {
        param: LAST_EVENT_ID.into(),
        message: format!(
            "{LAST_EVENT_ID} must be the id of an event of this stream (<rank>-<attempt>-<progress>, \
             e.g. 1-1-40)"
        ),
    };
    let raw = value.to_str().map_err(|_| invalid())?;
    // An empty id resets, as in the EventSource specification.
    if raw.trim().is_empty() {
        return Ok(None);
    }
    Position::parse(raw).map(Some).ok_or_else(invalid)
}

/// Stream a job's changes: its current state first, then one event per
/// change (`status` or `progress`, each with an `id:` and the job as
/// `data:`); the stream ends after the terminal event. Resume with
/// `Last-Event-ID` to receive only what came after that event.
#[utoipa::path(
    tag = "jobs",
    params(
        ("id" = String, Path, description = "Job id"),
        ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event received (`<rank>-<attempt>-<progress>`): only states beyond it are sent (none repeated); when it is the terminal event, the stream ends at once"),
    ),
    responses(
        (status = 200, description = "`text/event-stream`. Each event: `event: status|progress`, `id: <rank>-<attempt>-<progress>` (the same state has the same id on every connection), `data:` the job as GET /jobs/{id} answers it (`JobView`). `: keep-alive` comments every 15 seconds. Ends after the event of a terminal status (completed, failed, cancelled).", body = String, content_type = "text/event-stream"),
        (status = 400, description = "`Last-Event-ID` is not an id of this stream (`param` names the header)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "API key does not have required scope: jobs (or usage)", body = ErrorBody),
        (status = 404, description = "Unknown or expired job (another organization's job included)", body = ErrorBody),
    ),
    security(("bearer" = ["jobs", "usage"]))
)]
#[get("/jobs/{id}/events")]
pub async fn stream_job_events(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    caller.require_any(&JOB_SCOPES)?;
    let id = path_id(KIND, &path)?;
    let after = last_event_id(&req)?;
    let place = state
        .event_streams
        .take(caller.org_id)
        .ok_or(ApiError::RateLimited {
            message: "Too many open job event streams for this organization; close one first",
            retry_after_seconds: 5,
        })?;
    // Subscribed before the first read: a change in between is not lost.
    let watch = state.hub.subscribe(id);
    let job = state
        .job_reads
        .read(caller.org_id, id)
        .await?
        .ok_or_else(|| not_found(KIND, &path))?;
    let keep_alive = keep_alive_timer(state.limits.event_keep_alive);
    let cursor = Cursor {
        state,
        org_id: caller.org_id,
        key_hash: caller.key_hash,
        id,
        watch,
        sent: after,
        next_read: Read::Have(Box::new(job)),
        keep_alive,
        _place: place,
    };
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stream::unfold(Some(cursor), |cursor| async move {
            let mut cursor = cursor?;
            match cursor.next_frame().await {
                Frame::Event { bytes, last } => Some((Ok(bytes), (!last).then_some(cursor))),
                Frame::KeepAlive => Some((
                    Ok::<_, actix_web::Error>(Bytes::from_static(b": keep-alive\n\n")),
                    Some(cursor),
                )),
                Frame::End => None,
            }
        })))
}

fn keep_alive_timer(every: Duration) -> Interval {
    let mut timer = tokio::time::interval_at(Instant::now() + every, every);
    timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
    timer
}

enum Read {
    /// The job as read before the stream began.
    Have(Box<Job>),
    Now,
    Wait,
}

enum Frame {
    Event { bytes: Bytes, last: bool },
    KeepAlive,
    End,
}

/// One open stream: what it sent last and what wakes it.
struct Cursor {
    state: web::Data<AppState>,
    org_id: Uuid,
    /// The key that opened the stream, checked again at each keep-alive.
    key_hash: [u8; 32],
    id: Uuid,
    watch: JobWatch,
    /// The position of the last event sent (or resumed from).
    sent: Option<Position>,
    next_read: Read,
    keep_alive: Interval,
    /// Counted against the organization's open streams until dropped.
    _place: StreamPlace,
}

impl Cursor {
    async fn next_frame(&mut self) -> Frame {
        loop {
            let job = match std::mem::replace(&mut self.next_read, Read::Wait) {
                Read::Have(job) => Some(*job),
                Read::Now => match self.state.job_reads.read(self.org_id, self.id).await {
                    Ok(Some(job)) => Some(job),
                    // Deleted by retention meanwhile: nothing more will happen.
                    Ok(None) => return Frame::End,
                    Err(DbError::Unavailable(_) | DbError::ConnectionLost(_)) => {
                        // The listener's reconnect wakes us when it is back.
                        tokio::select! {
                            () = self.watch.changed() => {}
                            () = tokio::time::sleep(DB_RETRY_PAUSE) => {}
                        }
                        self.next_read = Read::Now;
                        None
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, job.id = %self.id, "job event stream ended by a read error");
                        return Frame::End;
                    }
                },
                Read::Wait => {
                    let recheck = self.state.limits.recheck;
                    tokio::select! {
                        () = self.watch.changed() => {}
                        // Only for a notification lost in transit.
                        () = tokio::time::sleep(recheck) => {}
                        _ = self.keep_alive.tick() => return self.keep_alive_frame().await,
                        // Not held open through the graceful stop: the
                        // client resumes elsewhere with `Last-Event-ID`.
                        () = self.state.shutdown.cancelled() => return Frame::End,
                    }
                    self.next_read = Read::Now;
                    None
                }
            };
            let Some(job) = job else { continue };
            let position = Position::of(&job);
            if self.sent.is_none_or(|sent| position > sent) {
                self.sent = Some(position);
                return Frame::Event {
                    bytes: event_bytes(&self.state, &job, position),
                    last: position.is_terminal(),
                };
            }
            if position.is_terminal() {
                // The client already has the final event (it resumed after it).
                return Frame::End;
            }
        }
    }
}

impl Cursor {
    /// A keep-alive, if the stream's key may still be used: a revoked or
    /// expired key (or a suspended organization) ends the stream. An
    /// unreachable database does not: the next keep-alive checks again.
    async fn keep_alive_frame(&self) -> Frame {
        match crate::auth::valid_key(&self.state, &self.key_hash).await {
            Ok(_) => Frame::KeepAlive,
            Err(ApiError::InvalidKey | ApiError::KeyExpired | ApiError::OrgSuspended) => {
                tracing::info!(job.id = %self.id, "job event stream ended: its key is no longer valid");
                Frame::End
            }
            Err(err) => {
                tracing::warn!(error = %err, job.id = %self.id, "job event stream: key not checked");
                Frame::KeepAlive
            }
        }
    }
}

fn event_bytes(state: &AppState, job: &Job, position: Position) -> Bytes {
    let view = JobView::new(job, &state.signer, Utc::now());
    // Compact JSON has no line breaks: one `data:` line.
    let data = serde_json::to_string(&view).unwrap_or_default();
    Bytes::from(format!(
        "event: {}\nid: {position}\ndata: {data}\n\n",
        position.event_type()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rank: u8, attempt: i32, progress: i16) -> Position {
        Position {
            rank,
            attempt,
            progress,
        }
    }

    #[test]
    fn positions_order_as_a_job_moves_and_round_trip_as_ids() {
        let order = [
            at(0, 0, 0),
            at(1, 1, 0),
            at(1, 1, 40),
            // Rescued and claimed again: a later attempt.
            at(1, 2, 0),
            at(1, 2, 10),
            at(2, 0, 0),
            at(2, 2, 100),
        ];
        for pair in order.windows(2) {
            assert!(pair[0] < pair[1], "{} < {}", pair[0], pair[1]);
        }
        for position in order {
            assert_eq!(Position::parse(&position.to_string()), Some(position));
        }
        assert_eq!(at(1, 3, 40).to_string(), "1-3-40");
        assert_eq!(at(1, 1, 40).event_type(), "progress");
        assert_eq!(at(1, 1, 0).event_type(), "status");
        assert_eq!(at(2, 1, 100).event_type(), "status");
        assert_eq!(at(0, 0, 0).event_type(), "status");
    }

    #[test]
    fn ids_not_sent_by_this_stream_are_refused() {
        for raw in [
            "", "1-1", "3-1-0", "1-1-101", "1--1-0", "a-b-c", "1-1-40-2", "1-1-+",
        ] {
            assert_eq!(Position::parse(raw), None, "{raw}");
        }
    }
}
