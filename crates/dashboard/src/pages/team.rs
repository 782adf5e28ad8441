//! Team (`/team`): the organization's members and roles. Owners and
//! admins add members (a one-time password shown once), change roles and
//! remove members; an admin can neither touch an owner nor make one, and
//! the last owner stays. Removing a member ends its sessions at once.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::Utc;
use unigen_db::models::MemberRow;
use unigen_db::{DbError, queries};
use uuid::Uuid;

use crate::error::DashError;
use crate::form::Posted;
use crate::layout::Chrome;
use crate::roles::Role;
use crate::session::{SignedIn, idle_cutoff};
use crate::state::{DashboardState, parse_id, render, see_other};
use crate::team::{TeamError, add_member};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/team", web::get().to(list_members))
        .route("/team", web::post().to(create_member))
        .route("/team/{id}/role", web::post().to(change_role))
        .route("/team/{id}/remove", web::get().to(confirm_remove))
        .route("/team/{id}/remove", web::post().to(remove_member));
}

struct MemberLine {
    id: Uuid,
    email: String,
    role: &'static str,
    added: String,
    sessions: i64,
    is_self: bool,
    /// The signed-in member may change this member's role and remove it.
    manageable: bool,
}

#[derive(Template)]
#[template(path = "team.html")]
struct TeamPage {
    chrome: Chrome,
    members: Vec<MemberLine>,
    can_manage: bool,
    /// Roles the signed-in member may give.
    grantable: Vec<&'static str>,
    email: String,
    role: String,
    error: Option<String>,
    /// A member just added, and its one-time password.
    added: Option<(String, String)>,
}

async fn team_page(
    state: &DashboardState,
    signed_in: &SignedIn,
    email: &str,
    role: &str,
    error: Option<String>,
    added: Option<(String, String)>,
) -> Result<TeamPage, DashError> {
    let actor = signed_in.role();
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let rows = queries::members::list_for_org(&mut conn, signed_in.org_id()).await?;
    let sessions = queries::members::session_counts_for_org(
        &mut conn,
        signed_in.org_id(),
        idle_cutoff(state, Utc::now()),
    )
    .await?;
    let members = rows
        .into_iter()
        .map(|row| {
            let role: Role = row.role.parse().map_err(DashError::internal)?;
            Ok(MemberLine {
                id: row.id,
                sessions: sessions
                    .iter()
                    .find(|(id, _)| *id == row.id)
                    .map_or(0, |(_, n)| *n),
                is_self: row.id == signed_in.member.id,
                manageable: actor.can_manage_team() && actor.can_manage_role(role),
                email: row.email,
                role: role.as_str(),
                added: super::datetime(&row.created_at),
            })
        })
        .collect::<Result<Vec<_>, DashError>>()?;
    Ok(TeamPage {
        chrome: signed_in.chrome("team", "Team"),
        members,
        can_manage: actor.can_manage_team(),
        grantable: Role::ALL
            .into_iter()
            .filter(|r| actor.can_manage_role(*r))
            .map(Role::as_str)
            .collect(),
        email: email.chars().take(254).collect(),
        role: role.chars().take(20).collect(),
        error,
        added,
    })
}

async fn list_members(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
) -> Result<HttpResponse, DashError> {
    render(&team_page(&state, &signed_in, "", "member", None, None).await?)
}

fn with_status(status: StatusCode, page: &TeamPage) -> Result<HttpResponse, DashError> {
    Ok(HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .body(page.render()?))
}

async fn create_member(
    state: web::Data<DashboardState>,
    posted: Posted,
) -> Result<HttpResponse, DashError> {
    let Posted { signed_in, form } = posted;
    signed_in.require(signed_in.role().can_manage_team())?;
    let email = form.get("email").unwrap_or("");
    let role_raw = form.get("role").unwrap_or("");
    let refuse = async |status: StatusCode, message: String| {
        let page = team_page(&state, &signed_in, email, role_raw, Some(message), None).await?;
        with_status(status, &page)
    };
    let role: Role = match role_raw.parse() {
        Ok(role) => role,
        Err(_) => {
            return refuse(StatusCode::BAD_REQUEST, "Role: choose a role.".into()).await;
        }
    };
    if !signed_in.role().can_manage_role(role) {
        return refuse(
            StatusCode::FORBIDDEN,
            format!("Role: your role cannot add an {}.", role.as_str()),
        )
        .await;
    }
    let password = unigen_core::password::generate_password().map_err(DashError::internal)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let result = add_member(&mut conn, signed_in.org_id(), email, role, password.clone()).await;
    drop(conn);
    match result {
        Ok(member) => {
            tracing::info!(member.id = %member.id, by = %signed_in.member.id, "member added");
            let page = team_page(
                &state,
                &signed_in,
                "",
                "member",
                None,
                Some((member.email, password)),
            )
            .await?;
            with_status(StatusCode::OK, &page)
        }
        Err(TeamError::Invalid(message)) => {
            refuse(StatusCode::BAD_REQUEST, format!("Email: {message}")).await
        }
        Err(TeamError::EmailTaken) => {
            refuse(
                StatusCode::BAD_REQUEST,
                "Email: a member with this email already exists.".into(),
            )
            .await
        }
        Err(TeamError::UnknownOrganization) => Err(DashError::NotFound),
        Err(TeamError::Db(err)) => Err(err.into()),
    }
}

/// The organization's member `id` (404 otherwise) and its role.
async fn target(
    state: &DashboardState,
    signed_in: &SignedIn,
    raw_id: &str,
) -> Result<(MemberRow, Role), DashError> {
    let id = parse_id(raw_id)?;
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let row = queries::members::find_for_org(&mut conn, signed_in.org_id(), id)
        .await?
        .ok_or(DashError::NotFound)?;
    let role = row.role.parse().map_err(DashError::internal)?;
    Ok((row, role))
}

/// Refuses to leave the organization without an owner.
async fn keep_an_owner(state: &DashboardState, org_id: Uuid) -> Result<(), DashError> {
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    if queries::members::count_owners(&mut conn, org_id).await? <= 1 {
        return Err(DashError::BadRequest(
            "The organization must keep at least one owner.".into(),
        ));
    }
    Ok(())
}

async fn change_role(
    state: web::Data<DashboardState>,
    posted: Posted,
    path: web::Path<String>,
) -> Result<HttpResponse, DashError> {
    let Posted { signed_in, form } = posted;
    let actor = signed_in.role();
    signed_in.require(actor.can_manage_team())?;
    let (member, current) = target(&state, &signed_in, &path).await?;
    let new: Role = form
        .get("role")
        .unwrap_or("")
        .parse()
        .map_err(|_| DashError::BadRequest("Role: choose a role.".into()))?;
    // An admin neither demotes an owner nor makes one.
    signed_in.require(actor.can_manage_role(current) && actor.can_manage_role(new))?;
    if current == Role::Owner && new != Role::Owner {
        keep_an_owner(&state, signed_in.org_id()).await?;
    }
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    if !queries::members::update_role_for_org(
        &mut conn,
        signed_in.org_id(),
        member.id,
        new.as_str(),
    )
    .await?
    {
        return Err(DashError::NotFound);
    }
    tracing::info!(member.id = %member.id, role = new.as_str(), by = %signed_in.member.id, "member role changed");
    Ok(see_other(&state.url("/team")))
}

#[derive(Template)]
#[template(path = "team_remove.html")]
struct RemovePage {
    chrome: Chrome,
    id: Uuid,
    email: String,
    is_self: bool,
}

async fn confirm_remove(
    state: web::Data<DashboardState>,
    signed_in: SignedIn,
    path: web::Path<String>,
) -> Result<HttpResponse, DashError> {
    let actor = signed_in.role();
    signed_in.require(actor.can_manage_team())?;
    let (member, role) = target(&state, &signed_in, &path).await?;
    signed_in.require(actor.can_manage_role(role))?;
    render(&RemovePage {
        chrome: signed_in.chrome("team", "Remove member"),
        is_self: member.id == signed_in.member.id,
        id: member.id,
        email: member.email,
    })
}

async fn remove_member(
    state: web::Data<DashboardState>,
    posted: Posted,
    path: web::Path<String>,
) -> Result<HttpResponse, DashError> {
    let signed_in = posted.signed_in;
    let actor = signed_in.role();
    signed_in.require(actor.can_manage_team())?;
    let (member, role) = target(&state, &signed_in, &path).await?;
    signed_in.require(actor.can_manage_role(role))?;
    if role == Role::Owner {
        keep_an_owner(&state, signed_in.org_id()).await?;
    }
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    // Its sessions go with it: signed out everywhere at once.
    if !queries::members::delete_for_org(&mut conn, signed_in.org_id(), member.id).await? {
        return Err(DashError::NotFound);
    }
    tracing::info!(member.id = %member.id, by = %signed_in.member.id, "member removed");
    Ok(see_other(&state.url(if member.id == signed_in.member.id {
        "/login"
    } else {
        "/team"
    })))
}
