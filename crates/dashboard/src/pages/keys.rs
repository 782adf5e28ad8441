//! API keys (`/keys`): the organization's keys with their credits in the
//! billing period, search by name, sort by last use or expiry; creating a
//! key (its value shown once) and revoking one, with the same rules as
//! `POST /keys` (`unigen_core::domain::key_rules`). The granter is the
//! organization's plan: a member may grant any scope the plan offers.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::{Datelike, Utc};
use serde::Deserialize;
use unigen_core::domain::key_rules::{self, KeyRequest};
use unigen_core::domain::{ApiKeyMaterial, Scope};
use unigen_db::models::NewApiKey;
use unigen_db::queries::keys::{KeyInsert, KeyPageQuery, KeySort};
use unigen_db::{DbError, queries};
use uuid::Uuid;

use crate::error::DashError;
use crate::form::Posted;
use crate::layout::Chrome;
use crate::once::{self, OnceForm, Submission};
use crate::session::SignedIn;
use crate::state::{DashboardState, parse_id, render, see_other};

const PAGE_SIZE: i64 = 50;
/// Longest search text read.
const MAX_SEARCH_CHARS: usize = 100;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/keys", web::get().to(list_keys))
        .route("/keys", web::post().to(create_key))
        .route("/keys/new", web::get().to(new_key))
        .route("/keys/{id}/revoke", web::get().to(confirm_revoke))
        .route("/keys/{id}/revoke", web::post().to(revoke_key));
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    q: Option<String>,
    sort: Option<String>,
    after: Option<String>,
}

struct KeyRow {
    id: Uuid,
    name: String,
    prefix: String,
    scopes: Vec<String>,
    created: String,
    last_used: String,
    expires: String,
    expired: bool,
    credits: i64,
}

#[derive(Template)]
#[template(path = "keys.html")]
struct KeysPage {
    chrome: Chrome,
    rows: Vec<KeyRow>,
    search: String,
    sort: &'static str,
    can_manage: bool,
    /// The query string of the next page, if there is one.
    next: Option<String>,
    period_start: String,
}

fn parse_sort(raw: Option<&str>) -> Result<(KeySort, &'static str), DashError> {
    match raw.unwrap_or("created") {
        "" | "created" => Ok((KeySort::Created, "created")),
        "last_used" => Ok((KeySort::LastUsed, "last_used")),
        "expiry" => Ok((KeySort::Expiry, "expiry")),
        _ => Err(DashError::BadRequest(
            "Sort by must be created, last_used or expiry.".into(),
        )),
    }
}

/// The first day of the billing period (periods are calendar months, UTC).
fn period_start() -> chrono::NaiveDate {
    let today = Utc::now().date_naive();
    today.with_day(1).unwrap_or(today)
}

async fn list_keys(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
    query: web::Query<ListQuery>,
) -> Result<HttpResponse, DashError> {
    let (sort, sort_name) = parse_sort(query.sort.as_deref())?;
    let search: String = query
        .q
        .as_deref()
        .unwrap_or("")
        .trim()
        .chars()
        .take(MAX_SEARCH_CHARS)
        .collect();
    let after = match query.after.as_deref().filter(|a| !a.is_empty()) {
        Some(raw) => Some(raw.parse::<Uuid>().map_err(|_| {
            DashError::BadRequest("The page link is not valid: start from the first page.".into())
        })?),
        None => None,
    };
    let period = period_start();
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let mut keys = queries::keys::page_for_org(
        &mut conn,
        &KeyPageQuery {
            org_id: signed_in.org_id(),
            search: Some(search.as_str()).filter(|s| !s.is_empty()),
            sort,
            after,
            limit: PAGE_SIZE + 1,
            period_start: period,
        },
    )
    .await?;
    let more = keys.len() as i64 > PAGE_SIZE;
    keys.truncate(PAGE_SIZE as usize);
    let now = Utc::now();
    let next = match (more, keys.last()) {
        (true, Some(last)) => Some(
            url::form_urlencoded::Serializer::new(String::new())
                .append_pair("q", &search)
                .append_pair("sort", sort_name)
                .append_pair("after", &last.id.to_string())
                .finish(),
        ),
        _ => None,
    };
    let rows = keys
        .into_iter()
        .map(|k| KeyRow {
            id: k.id,
            expired: k.expires_at.is_some_and(|at| at <= now),
            name: k.name,
            prefix: k.key_prefix,
            scopes: k.scopes,
            created: super::datetime(&k.created_at),
            last_used: super::maybe_datetime(k.last_used_at.as_ref(), "Never"),
            expires: super::maybe_datetime(k.expires_at.as_ref(), "Never"),
            credits: k.credits_in_period,
        })
        .collect();
    render(&KeysPage {
        can_manage: signed_in.role().can_manage_keys(),
        chrome: signed_in.chrome("keys", "API keys"),
        rows,
        search,
        sort: sort_name,
        next,
        period_start: period.format("%Y-%m-%d").to_string(),
    })
}

#[derive(Template)]
#[template(path = "key_new.html")]
struct NewKeyPage {
    chrome: Chrome,
    /// (scope name, checked)
    scopes: Vec<(&'static str, bool)>,
    all_checked: bool,
    name: String,
    expires: String,
    error: Option<String>,
    /// One-time id: a resubmission (reload) creates no second key.
    form_id: String,
}

/// The scopes the organization's plan offers.
async fn offered_scopes(state: &DashboardState, org_id: Uuid) -> Result<Vec<Scope>, DashError> {
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let plan = queries::billing::plan_of_org(&mut conn, org_id).await?;
    Ok(key_rules::offered_scopes(|bucket| plan.limit(bucket)))
}

fn new_key_page(
    signed_in: &SignedIn,
    offered: &[Scope],
    checked: &[&str],
    name: &str,
    expires: &str,
    error: Option<String>,
) -> Result<NewKeyPage, DashError> {
    Ok(NewKeyPage {
        chrome: signed_in.chrome("keys", "Create key"),
        scopes: offered
            .iter()
            .map(|s| (s.as_str(), checked.contains(&s.as_str())))
            .collect(),
        all_checked: checked.contains(&"all"),
        // Echoed back: bounded.
        name: name
            .chars()
            .take(key_rules::MAX_KEY_NAME_CHARS * 2)
            .collect(),
        expires: expires.chars().take(40).collect(),
        error,
        form_id: once::new_form_id()?,
    })
}

async fn new_key(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
) -> Result<HttpResponse, DashError> {
    signed_in.require(signed_in.role().can_manage_keys())?;
    let offered = offered_scopes(&state, signed_in.org_id()).await?;
    render(&new_key_page(&signed_in, &offered, &[], "", "", None)?)
}

#[derive(Template)]
#[template(path = "key_created.html")]
struct CreatedPage {
    chrome: Chrome,
    name: String,
    value: String,
    scopes: Vec<String>,
    expires: String,
}

fn field_label(field: &str) -> &'static str {
    match field {
        "name" => "Name",
        "scopes" => "Scopes",
        "expires_at" => "Expires",
        _ => "Form",
    }
}

async fn create_key(
    state: web::Data<DashboardState>,
    posted: Posted,
) -> Result<HttpResponse, DashError> {
    let Posted { signed_in, form } = posted;
    signed_in.require(signed_in.role().can_manage_keys())?;
    let offered = offered_scopes(&state, signed_in.org_id()).await?;
    let checked = form.all("scope");
    let name = form.get("name").unwrap_or("");
    let expires = form.get("expires").unwrap_or("").trim();
    let refuse = |status: StatusCode, message: String| -> Result<HttpResponse, DashError> {
        let page = new_key_page(&signed_in, &offered, &checked, name, expires, Some(message))?;
        Ok(HttpResponse::build(status)
            .content_type("text/html; charset=utf-8")
            .body(page.render()?))
    };
    // `All scopes` is every scope the plan offers.
    let requested: Vec<String> = if checked.contains(&"all") {
        offered.iter().map(|s| s.as_str().to_owned()).collect()
    } else {
        checked.iter().map(|s| (*s).to_owned()).collect()
    };
    let request = KeyRequest {
        name: Some(name),
        scopes: Some(&requested),
        expires_at: Some(expires).filter(|e| !e.is_empty()),
        // A member is not a key: no expiry of its own bounds the key's.
        granter_expires_at: None,
    };
    let key = match request.validate(Utc::now()) {
        Ok(key) => key,
        Err(err) => {
            let message = if err.field == "scopes" && requested.is_empty() {
                "Scopes: choose at least one scope.".to_owned()
            } else {
                format!("{}: {}", field_label(err.field), err.message)
            };
            return refuse(StatusCode::BAD_REQUEST, message);
        }
    };
    if let Some(scope) = key_rules::first_ungranted(&key.scopes, &offered) {
        return refuse(
            StatusCode::FORBIDDEN,
            format!("Scopes: the organization's plan does not offer the `{scope}` scope."),
        );
    }
    let once = match OnceForm::claim(&state, &signed_in, &form, "key").await? {
        Submission::First(once) => once,
        Submission::Repeated => {
            return Err(DashError::BadRequest(
                "This form was already sent: its key was created, and its value is not shown again."
                    .into(),
            ));
        }
    };
    let material = ApiKeyMaterial::generate().map_err(DashError::internal)?;
    let inserted = async {
        let mut conn = state.pool.get().await.map_err(DbError::from)?;
        queries::keys::insert_within_plan(
            &mut conn,
            &NewApiKey {
                id: Uuid::now_v7(),
                org_id: signed_in.org_id(),
                name: &key.name,
                key_hash: &material.hash,
                key_prefix: &material.display_prefix,
                scopes: key.scope_names(),
                expires_at: key.expires_at,
                created_by_key: None,
                created_by_member: Some(signed_in.member.id),
            },
        )
        .await
    }
    .await;
    let created = match inserted {
        Ok(KeyInsert::Created(created)) => {
            once.done(&state, &signed_in).await?;
            created
        }
        Ok(KeyInsert::LimitReached { plan, max }) => {
            // The same cap and words as `POST /keys`.
            once.release(&state, &signed_in).await?;
            return refuse(
                StatusCode::PAYMENT_REQUIRED,
                key_rules::limit_message(&plan, max),
            );
        }
        Err(err) => {
            once.release(&state, &signed_in).await?;
            return Err(err.into());
        }
    };
    tracing::info!(key.id = %created.id, member.id = %signed_in.member.id, "key created from the dashboard");
    render(&CreatedPage {
        chrome: signed_in.chrome("keys", "Key created"),
        name: created.name,
        value: material.plaintext,
        scopes: created.scopes,
        expires: super::maybe_datetime(created.expires_at.as_ref(), "Never"),
    })
}

#[derive(Template)]
#[template(path = "key_revoke.html")]
struct RevokePage {
    chrome: Chrome,
    id: Uuid,
    name: String,
    prefix: String,
}

async fn confirm_revoke(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
    path: web::Path<String>,
) -> Result<HttpResponse, DashError> {
    let id = parse_id(&path)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let key = queries::keys::find_active_for_org(&mut conn, signed_in.org_id(), id)
        .await?
        .ok_or(DashError::NotFound)?;
    signed_in.require(signed_in.role().can_manage_keys())?;
    render(&RevokePage {
        chrome: signed_in.chrome("keys", "Revoke key"),
        id: key.id,
        name: key.name,
        prefix: key.key_prefix,
    })
}

async fn revoke_key(
    state: web::Data<DashboardState>,
    posted: Posted,
    path: web::Path<String>,
) -> Result<HttpResponse, DashError> {
    let signed_in = posted.signed_in;
    signed_in.require(signed_in.role().can_manage_keys())?;
    let id = parse_id(&path)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    // As `DELETE /keys/{id}`: the trigger tells every API process.
    if !queries::keys::revoke_for_org(&mut conn, signed_in.org_id(), id, Utc::now()).await? {
        return Err(DashError::NotFound);
    }
    (state.keys_changed)(id);
    tracing::info!(key.id = %id, member.id = %signed_in.member.id, "key revoked from the dashboard");
    Ok(see_other(&state.url("/keys")))
}
