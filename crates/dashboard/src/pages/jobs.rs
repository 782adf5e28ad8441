//! Jobs (`/jobs`): the organization's jobs, newest first, keyset-paginated,
//! filtered by tool and status (kept in the URL). A job's page
//! (`/jobs/{id}`) shows its status (live: the page's script follows
//! `/jobs/{id}/events`, this dashboard's own stream of the job's changes,
//! authorised by the session), progress, timeline, error, parameters,
//! outputs on signed URLs, `Cancel job` (the API's cancel path), and the
//! webhook deliveries of its events with their attempts.

use std::collections::HashMap;
use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::{DateTime, Utc};
use futures_util::stream;
use serde_json::{Value, json};
use unigen_core::domain::{JobStatus, Tool};
use unigen_core::storage::present_files;
use unigen_db::models::Job;
use unigen_db::notify::JobWatch;
use unigen_db::queries::jobs::{CancelOutcome, JobPage, JobSummary};
use unigen_db::{DbError, queries};
use uuid::Uuid;

use super::cursor;
use super::webhooks::{DeliveryRow, delivery_rows};
use crate::error::DashError;
use crate::form::Posted;
use crate::layout::Chrome;
use crate::session::SignedIn;
use crate::state::{DashboardState, parse_id, render, see_other};

const PAGE_SIZE: i64 = 50;
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Re-read without a notification (one lost in transit).
const RECHECK: Duration = Duration::from_secs(5);
/// A stream is closed after this long; the page's script reconnects.
const STREAM_LIFETIME: Duration = Duration::from_secs(30 * 60);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/jobs", web::get().to(list_jobs))
        .route("/jobs/{id}", web::get().to(job_page))
        .route("/jobs/{id}/events", web::get().to(job_events))
        .route("/jobs/{id}/cancel", web::post().to(cancel_job));
}

/// Milliseconds between two instants, as `1.2 s` / `340 ms`; a dash when
/// either is missing.
fn span(from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> String {
    match (from, to) {
        (Some(from), Some(to)) => {
            let ms = (to - from).num_milliseconds().max(0);
            if ms < 1000 {
                format!("{ms} ms")
            } else if ms < 120_000 {
                format!("{:.1} s", ms as f64 / 1000.0)
            } else {
                format!("{:.1} min", ms as f64 / 60_000.0)
            }
        }
        _ => "—".into(),
    }
}

struct JobRow {
    id: Uuid,
    tool: String,
    status: String,
    model: String,
    created: String,
    queue_wait: String,
    run_time: String,
    credits: String,
}

impl JobRow {
    fn of(job: &JobSummary) -> Self {
        let active = matches!(job.status.as_str(), "pending" | "processing");
        Self {
            id: job.id,
            tool: job.tool.clone(),
            status: job.status.clone(),
            model: job.model.clone(),
            created: super::datetime(&job.created_at),
            queue_wait: span(Some(job.created_at), job.started_at),
            run_time: span(job.started_at, job.completed_at),
            credits: match (job.actual_credits, active) {
                (Some(credits), _) => credits.to_string(),
                (None, true) => format!("≤ {}", job.estimated_credits),
                (None, false) => "0".into(),
            },
        }
    }
}

#[derive(Template)]
#[template(path = "jobs.html")]
struct JobsPage {
    chrome: Chrome,
    tools: Vec<&'static str>,
    statuses: Vec<&'static str>,
    tool: String,
    status: String,
    rows: Vec<JobRow>,
    /// The next page's URL, when there may be one.
    next: Option<String>,
    first: Option<String>,
}

fn pick<T: std::str::FromStr>(
    query: &HashMap<String, String>,
    name: &str,
    label: &str,
    all: &[&str],
) -> Result<Option<T>, DashError> {
    match query.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(raw) => raw.parse().map(Some).map_err(|_| {
            DashError::BadRequest(format!("{label} must be one of: {}.", all.join(", ")))
        }),
    }
}

async fn list_jobs(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, DashError> {
    let tools: Vec<&'static str> = Tool::ALL.iter().map(|t| t.as_str()).collect();
    let statuses: Vec<&'static str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
    let tool: Option<Tool> = pick(&query, "tool", "Tool", &tools)?;
    let status: Option<JobStatus> = pick(&query, "status", "Status", &statuses)?;
    let before = cursor::decode(query.get("before").map(String::as_str))?;
    let jobs = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::jobs::page_for_org(
            &mut conn,
            signed_in.org_id(),
            &JobPage {
                tool,
                status,
                before,
                limit: PAGE_SIZE,
            },
        )
        .await?
    };
    let filters = format!(
        "tool={}&status={}",
        tool.map_or("", Tool::as_str),
        status.map_or("", JobStatus::as_str)
    );
    let next = (jobs.len() as i64 == PAGE_SIZE)
        .then(|| jobs.last())
        .flatten()
        .map(|last| {
            format!(
                "{}/jobs?{filters}&before={}",
                signed_in.prefix,
                cursor::encode(last.created_at, last.id)
            )
        });
    let first = before.map(|_| format!("{}/jobs?{filters}", signed_in.prefix));
    render(&JobsPage {
        chrome: signed_in.chrome("jobs", "Jobs"),
        tools,
        statuses,
        tool: tool.map_or(String::new(), |t| t.as_str().to_owned()),
        status: status.map_or(String::new(), |s| s.as_str().to_owned()),
        rows: jobs.iter().map(JobRow::of).collect(),
        next,
        first,
    })
}

/// One output file of a job, on its signed URL.
struct Output {
    /// `img`, `video`, `audio` or `link`.
    kind: &'static str,
    url: String,
    label: String,
}

/// A transcription segment.
struct Segment {
    start: String,
    end: String,
    text: String,
}

#[derive(Template)]
#[template(path = "job.html")]
struct JobDetailPage {
    chrome: Chrome,
    id: Uuid,
    tool: String,
    model: String,
    status: String,
    terminal: bool,
    progress: i16,
    created: String,
    started: String,
    finished: String,
    queue_wait: String,
    run_time: String,
    credits: String,
    error: Option<String>,
    params: String,
    outputs: Vec<Output>,
    transcript: Option<String>,
    segments: Vec<Segment>,
    can_cancel: bool,
    events_url: String,
    deliveries: Vec<DeliveryRow>,
    show_webhook: bool,
    can_redeliver: bool,
}

/// Every signed URL of the presented output, with the element that shows it.
fn outputs_of(tool: &str, presented: &Value) -> Vec<Output> {
    let mut found = Vec::new();
    collect_urls(presented, "", &mut found);
    found
        .into_iter()
        .map(|(field, url)| {
            let kind = match (tool, field.as_str()) {
                (_, f) if f.contains("thumbnail") || f.contains("poster") => "img",
                ("image" | "image_edit", _) => "img",
                ("video", _) => "video",
                ("music" | "tts", _) => "audio",
                _ => "link",
            };
            Output {
                kind,
                url,
                label: field,
            }
        })
        .collect()
}

fn collect_urls(value: &Value, field: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match v {
                    Value::String(url)
                        if (k == "url" || k.ends_with("_url")) && url.contains("/files/") =>
                    {
                        let name = if k == "url" {
                            field.to_owned()
                        } else {
                            k.clone()
                        };
                        out.push((
                            if name.is_empty() {
                                "output".into()
                            } else {
                                name
                            },
                            url.clone(),
                        ));
                    }
                    _ => collect_urls(v, k, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect_urls(item, &format!("{field} {}", i + 1), out);
            }
        }
        _ => {}
    }
}

fn seconds(value: Option<&Value>) -> String {
    value
        .and_then(Value::as_f64)
        .map_or_else(|| "—".into(), |s| format!("{s:.2} s"))
}

async fn job_page(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
    path: web::Path<String>,
) -> Result<HttpResponse, DashError> {
    let id = parse_id(&path)?;
    let org_id = signed_in.org_id();
    let (job, deliveries) = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        let job = queries::jobs::find_for_org(&mut conn, org_id, id)
            .await?
            .ok_or(DashError::NotFound)?;
        let deliveries = queries::webhooks::deliveries_for_job(&mut conn, org_id, id).await?;
        (job, deliveries)
    };
    let now = Utc::now();
    let presented = job
        .output_data
        .as_ref()
        .map(|output| present_files(output, &state.signer, now.timestamp(), org_id));
    let outputs = presented
        .as_ref()
        .map(|p| outputs_of(&job.tool, p))
        .unwrap_or_default();
    let transcript = presented
        .as_ref()
        .and_then(|p| p.get("text"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let segments = presented
        .as_ref()
        .and_then(|p| p.get("segments"))
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|s| Segment {
                    start: seconds(s.get("start")),
                    end: seconds(s.get("end")),
                    text: s
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                })
                .collect()
        })
        .unwrap_or_default();
    let status: Option<JobStatus> = job.status.parse().ok();
    let terminal = status.is_some_and(JobStatus::is_terminal);
    let params = serde_json::to_string_pretty(&present_files(
        &job.input_params,
        &state.signer,
        now.timestamp(),
        org_id,
    ))
    .unwrap_or_default();
    let row = JobRow::of(&JobSummary {
        id: job.id,
        tool: job.tool.clone(),
        status: job.status.clone(),
        model: job.model.clone(),
        estimated_credits: job.estimated_credits,
        actual_credits: job.actual_credits,
        created_at: job.created_at,
        started_at: job.started_at,
        completed_at: job.completed_at,
    });
    render(&JobDetailPage {
        chrome: signed_in.chrome("jobs", format!("Job {id}")),
        id,
        tool: job.tool.clone(),
        model: job.model.clone(),
        status: job.status.clone(),
        terminal,
        progress: job.progress.clamp(0, 100),
        created: super::datetime(&job.created_at),
        started: super::maybe_datetime(job.started_at.as_ref(), "—"),
        finished: super::maybe_datetime(job.completed_at.as_ref(), "—"),
        queue_wait: row.queue_wait,
        run_time: row.run_time,
        credits: row.credits,
        error: job.error_message.clone(),
        params,
        outputs,
        transcript,
        segments,
        can_cancel: !terminal && signed_in.role().can_cancel_jobs(),
        events_url: format!("{}/jobs/{id}/events", signed_in.prefix),
        deliveries: delivery_rows(deliveries),
        show_webhook: true,
        can_redeliver: signed_in.role().can_manage_webhooks(),
    })
}

async fn cancel_job(
    state: web::Data<DashboardState>,
    posted: Posted,
    path: web::Path<String>,
) -> Result<HttpResponse, DashError> {
    let signed_in = &posted.signed_in;
    signed_in.require(signed_in.role().can_cancel_jobs())?;
    let id = parse_id(&path)?;
    let outcome = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        // The API's cancel path (DELETE /jobs/{id}): the reservation is
        // released in the same transaction, nothing is charged.
        unigen_jobs::cancel(&mut conn, signed_in.org_id(), id).await?
    };
    match outcome {
        CancelOutcome::Cancelled(_) => {
            // Wakes waiters, streams and the worker running it.
            state.notifier.job_changed(id);
            Ok(see_other(&format!("{}/jobs/{id}", signed_in.prefix)))
        }
        CancelOutcome::AlreadyFinished(status) => Err(DashError::BadRequest(format!(
            "The job cannot be cancelled: it is already {status}."
        ))),
        CancelOutcome::NotFound => Err(DashError::NotFound),
    }
}

/// What the page's script needs of a job state.
fn event_of(job: &Job) -> Bytes {
    let data = json!({
        "status": job.status,
        "progress": job.progress.clamp(0, 100),
        "error": job.error_message,
        "started_at": job.started_at.as_ref().map(super::datetime),
        "completed_at": job.completed_at.as_ref().map(super::datetime),
    });
    Bytes::from(format!("event: status\ndata: {data}\n\n"))
}

struct Follow {
    state: web::Data<DashboardState>,
    org_id: Uuid,
    id: Uuid,
    watch: JobWatch,
    /// What was sent last: (status, progress).
    sent: Option<(String, i16)>,
    first: Option<Box<Job>>,
    ends_at: tokio::time::Instant,
}

enum Step {
    Send(Bytes, bool),
    KeepAlive,
    End,
}

impl Follow {
    async fn step(&mut self) -> Step {
        loop {
            let job = match self.first.take() {
                Some(job) => *job,
                None => {
                    tokio::select! {
                        () = self.watch.changed() => {}
                        () = tokio::time::sleep(RECHECK) => {}
                        () = tokio::time::sleep_until(self.ends_at) => return Step::End,
                    }
                    let read = async {
                        let mut conn = self.state.pool.get().await.map_err(DbError::from)?;
                        queries::jobs::find_for_org(&mut conn, self.org_id, self.id).await
                    };
                    match read.await {
                        Ok(Some(job)) => job,
                        Ok(None) => return Step::End,
                        // Unreachable database: try again at the next wake-up.
                        Err(_) => return Step::KeepAlive,
                    }
                }
            };
            let now = (job.status.clone(), job.progress);
            if self.sent.as_ref() == Some(&now) {
                continue;
            }
            self.sent = Some(now);
            let terminal = job
                .status
                .parse::<JobStatus>()
                .is_ok_and(JobStatus::is_terminal);
            return Step::Send(event_of(&job), terminal);
        }
    }
}

/// `text/event-stream` of the job's status and progress: its current state
/// first, then each change, ending after a terminal status. Woken by the
/// same change notifications as the API's `GET /jobs/{id}/events`.
async fn job_events(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
    path: web::Path<String>,
) -> Result<HttpResponse, DashError> {
    let id = parse_id(&path)?;
    let org_id = signed_in.org_id();
    // Subscribed before the first read: a change in between is not lost.
    let watch = state.hub.subscribe(id);
    let job = {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::jobs::find_for_org(&mut conn, org_id, id)
            .await?
            .ok_or(DashError::NotFound)?
    };
    let follow = Follow {
        state: state.clone(),
        org_id,
        id,
        watch,
        sent: None,
        first: Some(Box::new(job)),
        ends_at: tokio::time::Instant::now() + STREAM_LIFETIME,
    };
    let keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-store"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stream::unfold(
            Some((follow, keep_alive)),
            |cursor| async move {
                let (mut follow, mut keep_alive) = cursor?;
                let step = tokio::select! {
                    step = follow.step() => step,
                    _ = keep_alive.tick() => Step::KeepAlive,
                };
                match step {
                    Step::Send(bytes, last) => Some((
                        Ok::<_, actix_web::Error>(bytes),
                        (!last).then_some((follow, keep_alive)),
                    )),
                    Step::KeepAlive => Some((
                        Ok(Bytes::from_static(b": keep-alive\n\n")),
                        Some((follow, keep_alive)),
                    )),
                    Step::End => None,
                }
            },
        )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_get_the_element_of_their_tool() {
        let image = json!({"images": [{"url": "http://x/files/o/1.png?sig=a", "width": 8}]});
        let found = outputs_of("image", &image);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].kind, "img");
        let speech = json!({"audio_url": "http://x/files/o/a.mp3?sig=b", "format": "mp3"});
        assert_eq!(outputs_of("tts", &speech)[0].kind, "audio");
        let video = json!({"url": "http://x/files/o/v.mp4?sig=c", "thumbnail_url": "http://x/files/o/t.png?sig=d"});
        let mut kinds: Vec<&str> = outputs_of("video", &video).iter().map(|o| o.kind).collect();
        kinds.sort_unstable();
        assert_eq!(kinds, ["img", "video"]);
        // Client URLs (not our signed files) are not shown as outputs.
        assert!(outputs_of("image", &json!({"url": "https://elsewhere.example/x.png"})).is_empty());
    }

    #[test]
    fn spans_read_in_sensible_units() {
        let t0 = DateTime::<Utc>::from_timestamp(1_764_000_000, 0).unwrap();
        assert_eq!(
            span(Some(t0), Some(t0 + chrono::Duration::milliseconds(340))),
            "340 ms"
        );
        assert_eq!(
            span(Some(t0), Some(t0 + chrono::Duration::milliseconds(1500))),
            "1.5 s"
        );
        assert_eq!(span(Some(t0), None), "—");
    }
}
