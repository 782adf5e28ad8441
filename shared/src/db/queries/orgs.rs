//! Organizations and their plans.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::db::DbError;
use crate::db::models::{NewOrganization, Organization, Plan};
use crate::db::schema::{organizations, plans};

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
