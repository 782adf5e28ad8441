//! Dashboard team members, their server-side sessions and failed sign-ins.
//! Every read of a member is scoped by organization, except the sign-in
//! look-up by email and the session look-up by its hash.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Bytea, Integer, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::DbError;
use crate::models::{MemberRow, NewMember};
use crate::schema::{dashboard_sessions, login_failures, members};

/// Emails are stored lowercased and trimmed; look-ups use the same form.
pub fn normalize_email(email: &str) -> String {
    email.trim().to_lowercase()
}

/// Inserts a member; a taken email is a unique violation
/// ([`DbError::is_unique_violation`]).
pub async fn insert(
    conn: &mut AsyncPgConnection,
    new: &NewMember<'_>,
) -> Result<MemberRow, DbError> {
    Ok(diesel::insert_into(members::table)
        .values(new)
        .returning(MemberRow::as_returning())
        .get_result(conn)
        .await?)
}

/// The organization's members, by email.
pub async fn list_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
) -> Result<Vec<MemberRow>, DbError> {
    Ok(members::table
        .filter(members::org_id.eq(org_id))
        .order(members::email.asc())
        .select(MemberRow::as_select())
        .load(conn)
        .await?)
}

pub async fn find_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
) -> Result<Option<MemberRow>, DbError> {
    Ok(members::table
        .filter(members::org_id.eq(org_id))
        .filter(members::id.eq(id))
        .select(MemberRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

pub async fn find_by_email_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    email: &str,
) -> Result<Option<MemberRow>, DbError> {
    Ok(members::table
        .filter(members::org_id.eq(org_id))
        .filter(members::email.eq(normalize_email(email)))
        .select(MemberRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The member with this email and its password hash, for sign-in.
pub async fn find_credentials(
    conn: &mut AsyncPgConnection,
    email: &str,
) -> Result<Option<(MemberRow, String)>, DbError> {
    Ok(members::table
        .filter(members::email.eq(normalize_email(email)))
        .select((MemberRow::as_select(), members::password_hash))
        .first(conn)
        .await
        .optional()?)
}

/// How many owners the organization has.
pub async fn count_owners(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<i64, DbError> {
    Ok(members::table
        .filter(members::org_id.eq(org_id))
        .filter(members::role.eq("owner"))
        .count()
        .get_result(conn)
        .await?)
}

/// Changes a member's role; false when the organization has no such member.
/// Sessions carry no role (each request reads it), so the change applies at
/// once.
pub async fn update_role_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    role: &str,
) -> Result<bool, DbError> {
    let updated = diesel::update(members::table)
        .filter(members::org_id.eq(org_id))
        .filter(members::id.eq(id))
        .set(members::role.eq(role))
        .execute(conn)
        .await?;
    Ok(updated == 1)
}

/// Removes a member; its sessions go with it (ON DELETE CASCADE), so it is
/// signed out of every API process at once. False when the organization
/// has no such member.
pub async fn delete_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
) -> Result<bool, DbError> {
    let deleted = diesel::delete(members::table)
        .filter(members::org_id.eq(org_id))
        .filter(members::id.eq(id))
        .execute(conn)
        .await?;
    Ok(deleted == 1)
}

// ---- sessions ----

/// Records a new session (its id's hash, never the id).
pub async fn create_session(
    conn: &mut AsyncPgConnection,
    id_hash: &[u8; 32],
    member_id: Uuid,
    csrf_token: &str,
    expires_at: DateTime<Utc>,
) -> Result<(), DbError> {
    diesel::insert_into(dashboard_sessions::table)
        .values((
            dashboard_sessions::id_hash.eq(&id_hash[..]),
            dashboard_sessions::member_id.eq(member_id),
            dashboard_sessions::csrf_token.eq(csrf_token),
            dashboard_sessions::expires_at.eq(expires_at),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

#[derive(QueryableByName)]
struct SessionMember {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    id: Uuid,
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    org_id: Uuid,
    #[diesel(sql_type = Text)]
    email: String,
    #[diesel(sql_type = Text)]
    role: String,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(sql_type = Text)]
    csrf_token: String,
}

/// The member signed in by this session and the session's CSRF token, if
/// the session exists, was used after `idle_cutoff` and has not expired;
/// marks it used now. One statement.
pub async fn touch_session(
    conn: &mut AsyncPgConnection,
    id_hash: &[u8; 32],
    idle_cutoff: DateTime<Utc>,
) -> Result<Option<(MemberRow, String)>, DbError> {
    let row: Option<SessionMember> = diesel::sql_query(
        "UPDATE dashboard_sessions s SET last_seen_at = now() \
         FROM members m \
         WHERE s.id_hash = $1 AND m.id = s.member_id \
           AND s.last_seen_at > $2 AND s.expires_at > now() \
         RETURNING m.id, m.org_id, m.email, m.role, m.created_at, s.csrf_token",
    )
    .bind::<Bytea, _>(&id_hash[..])
    .bind::<Timestamptz, _>(idle_cutoff)
    .get_result(conn)
    .await
    .optional()?;
    Ok(row.map(|r| {
        (
            MemberRow {
                id: r.id,
                org_id: r.org_id,
                email: r.email,
                role: r.role,
                created_at: r.created_at,
            },
            r.csrf_token,
        )
    }))
}

/// Ends one session (sign-out).
pub async fn delete_session(
    conn: &mut AsyncPgConnection,
    id_hash: &[u8; 32],
) -> Result<(), DbError> {
    diesel::delete(dashboard_sessions::table)
        .filter(dashboard_sessions::id_hash.eq(&id_hash[..]))
        .execute(conn)
        .await?;
    Ok(())
}

/// Ends every session of a member.
pub async fn delete_sessions_of(
    conn: &mut AsyncPgConnection,
    member_id: Uuid,
) -> Result<usize, DbError> {
    Ok(diesel::delete(dashboard_sessions::table)
        .filter(dashboard_sessions::member_id.eq(member_id))
        .execute(conn)
        .await?)
}

/// Deletes sessions that can no longer be used.
pub async fn purge_sessions(
    conn: &mut AsyncPgConnection,
    idle_cutoff: DateTime<Utc>,
) -> Result<usize, DbError> {
    Ok(diesel::delete(dashboard_sessions::table)
        .filter(
            dashboard_sessions::last_seen_at
                .le(idle_cutoff)
                .or(dashboard_sessions::expires_at.le(diesel::dsl::now)),
        )
        .execute(conn)
        .await?)
}

/// Active sessions per member of the organization (for the team page).
pub async fn session_counts_for_org(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    idle_cutoff: DateTime<Utc>,
) -> Result<Vec<(Uuid, i64)>, DbError> {
    Ok(dashboard_sessions::table
        .inner_join(members::table)
        .filter(members::org_id.eq(org_id))
        .filter(dashboard_sessions::last_seen_at.gt(idle_cutoff))
        .filter(dashboard_sessions::expires_at.gt(diesel::dsl::now))
        .group_by(dashboard_sessions::member_id)
        .select((dashboard_sessions::member_id, diesel::dsl::count_star()))
        .load(conn)
        .await?)
}

// ---- failed sign-ins ----

/// Until when sign-ins for this email are refused, if they are now.
pub async fn locked_until(
    conn: &mut AsyncPgConnection,
    email: &str,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, DbError> {
    let until: Option<Option<DateTime<Utc>>> = login_failures::table
        .filter(login_failures::email.eq(normalize_email(email)))
        .select(login_failures::locked_until)
        .first(conn)
        .await
        .optional()?;
    Ok(until.flatten().filter(|at| *at > now))
}

#[derive(QueryableByName)]
struct Locked {
    #[diesel(sql_type = diesel::sql_types::Nullable<Timestamptz>)]
    locked_until: Option<DateTime<Utc>>,
}

/// Counts a failed sign-in for this email, in one statement: failures older
/// than `window` start a new count; the `max_failures`-th failure within it
/// locks the email for `lockout` (and starts the count again). Returns the
/// lock's end when this failure set it.
pub async fn record_failure(
    conn: &mut AsyncPgConnection,
    email: &str,
    now: DateTime<Utc>,
    window: chrono::Duration,
    max_failures: i32,
    lockout: chrono::Duration,
) -> Result<Option<DateTime<Utc>>, DbError> {
    let row: Locked = diesel::sql_query(
        "INSERT INTO login_failures AS f (email, failures, window_started_at, locked_until) \
         VALUES ($1, 1, $2, CASE WHEN $4 <= 1 THEN $2 + $5 END) \
         ON CONFLICT (email) DO UPDATE SET \
           failures = CASE \
             WHEN f.window_started_at <= $2 - $3 THEN 1 \
             WHEN f.failures + 1 >= $4 THEN 0 \
             ELSE f.failures + 1 END, \
           window_started_at = CASE \
             WHEN f.window_started_at <= $2 - $3 THEN $2 \
             ELSE f.window_started_at END, \
           locked_until = CASE \
             WHEN f.window_started_at > $2 - $3 AND f.failures + 1 >= $4 THEN $2 + $5 \
             WHEN f.window_started_at <= $2 - $3 AND $4 <= 1 THEN $2 + $5 \
             ELSE f.locked_until END \
         RETURNING f.locked_until",
    )
    .bind::<Text, _>(normalize_email(email))
    .bind::<Timestamptz, _>(now)
    .bind::<diesel::sql_types::Interval, _>(to_interval(window))
    .bind::<Integer, _>(max_failures)
    .bind::<diesel::sql_types::Interval, _>(to_interval(lockout))
    .get_result(conn)
    .await?;
    Ok(row.locked_until.filter(|at| *at > now))
}

fn to_interval(d: chrono::Duration) -> diesel::data_types::PgInterval {
    diesel::data_types::PgInterval::from_microseconds(d.num_microseconds().unwrap_or(i64::MAX))
}

/// A successful sign-in forgets the email's failures.
pub async fn clear_failures(conn: &mut AsyncPgConnection, email: &str) -> Result<(), DbError> {
    diesel::delete(login_failures::table)
        .filter(login_failures::email.eq(normalize_email(email)))
        .execute(conn)
        .await?;
    Ok(())
}
