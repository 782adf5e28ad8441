//! Organizations and their plans.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::DbError;
use crate::models::{NewOrganization, Organization, Plan};
use crate::schema::{organizations, plans};

pub async fn create(
    conn: &mut AsyncPgConnection,
    new: &NewOrganization<'_>,
) -> Result<Organization, DbError> {
    Ok(diesel::insert_into(organizations::table)
        .values(new)
        .returning(Organization::as_returning())
        .get_result(conn)
        .await?)
}

pub async fn find(conn: &mut AsyncPgConnection, id: Uuid) -> Result<Option<Organization>, DbError> {
    Ok(organizations::table
        .find(id)
        .select(Organization::as_select())
        .first(conn)
        .await
        .optional()?)
}

pub async fn list(conn: &mut AsyncPgConnection) -> Result<Vec<Organization>, DbError> {
    Ok(organizations::table
        .order(organizations::created_at.asc())
        .select(Organization::as_select())
        .load(conn)
        .await?)
}

pub async fn find_plan(conn: &mut AsyncPgConnection, code: &str) -> Result<Option<Plan>, DbError> {
    Ok(plans::table
        .find(code)
        .select(Plan::as_select())
        .first(conn)
        .await
        .optional()?)
}

pub async fn plan_codes(conn: &mut AsyncPgConnection) -> Result<Vec<String>, DbError> {
    Ok(plans::table
        .select(plans::code)
        .order(plans::code)
        .load(conn)
        .await?)
}

pub async fn list_plans(conn: &mut AsyncPgConnection) -> Result<Vec<Plan>, DbError> {
    Ok(plans::table
        .order(plans::included_credits.asc())
        .select(Plan::as_select())
        .load(conn)
        .await?)
}

/// An operator's change to a plan's limits; `None` leaves a value as it is.
/// A bucket set to `Some(None)` becomes unlimited.
#[derive(Debug, Default, AsChangeset)]
#[diesel(table_name = plans)]
pub struct PlanChange {
    pub included_credits: Option<i64>,
    pub rate_limit_per_minute: Option<i32>,
    pub concurrent_requests: Option<i32>,
    pub chat_tokens: Option<Option<i64>>,
    pub image_generations: Option<Option<i64>>,
    pub video_seconds: Option<Option<i64>>,
    pub stt_seconds: Option<Option<i64>>,
    pub tts_chars: Option<Option<i64>>,
    pub image_edits: Option<Option<i64>>,
    pub music_tracks: Option<Option<i64>>,
    pub agent_runs: Option<Option<i64>>,
}

pub async fn update_plan(
    conn: &mut AsyncPgConnection,
    code: &str,
    change: &PlanChange,
) -> Result<Option<Plan>, DbError> {
    Ok(diesel::update(plans::table.find(code))
        .set(change)
        .returning(Plan::as_returning())
        .get_result(conn)
        .await
        .optional()?)
}
