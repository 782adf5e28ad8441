//! Adding and removing team members: the operator CLI and the Team page
//! share these. Passwords are hashed (argon2id) on a blocking thread.

use diesel_async::AsyncPgConnection;
use unigen_db::DbError;
use unigen_db::models::{MemberRow, NewMember};
use unigen_db::queries;
use uuid::Uuid;

use crate::roles::Role;

/// The longest email accepted (RFC 5321's path limit).
pub const MAX_EMAIL_CHARS: usize = 254;

#[derive(Debug, thiserror::Error)]
pub enum TeamError {
    #[error("{0}")]
    Invalid(String),
    #[error("a member with this email already exists")]
    EmailTaken,
    #[error("no organization has this id")]
    UnknownOrganization,
    #[error(transparent)]
    Db(#[from] DbError),
}

/// A plausible email, lowercased and trimmed: one `@` with text on both
/// sides, no spaces or control characters, at most 254 characters.
pub fn parse_email(raw: &str) -> Result<String, TeamError> {
    let email = queries::members::normalize_email(raw);
    let invalid = || TeamError::Invalid("Enter an email address such as name@example.com.".into());
    if email.chars().count() > MAX_EMAIL_CHARS {
        return Err(TeamError::Invalid(format!(
            "An email has at most {MAX_EMAIL_CHARS} characters."
        )));
    }
    let (local, domain) = email.split_once('@').ok_or_else(invalid)?;
    if local.is_empty()
        || domain.is_empty()
        || domain.contains('@')
        || email.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(invalid());
    }
    Ok(email)
}

/// Adds a member with this password (checked and hashed here).
pub async fn add_member(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    email: &str,
    role: Role,
    password: String,
) -> Result<MemberRow, TeamError> {
    let email = parse_email(email)?;
    let hash = tokio::task::spawn_blocking(move || unigen_core::password::hash_password(&password))
        .await
        .map_err(|e| TeamError::Invalid(format!("hashing failed: {e}")))?
        .map_err(|e| TeamError::Invalid(e.to_string()))?;
    if queries::orgs::find(conn, org_id).await?.is_none() {
        return Err(TeamError::UnknownOrganization);
    }
    let new = NewMember {
        id: Uuid::now_v7(),
        org_id,
        email: &email,
        password_hash: &hash,
        role: role.as_str(),
    };
    match queries::members::insert(conn, &new).await {
        Ok(member) => Ok(member),
        Err(err) if err.is_unique_violation() => Err(TeamError::EmailTaken),
        Err(err) => Err(err.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_normalized_and_checked() {
        assert_eq!(
            parse_email("  Ana@Example.COM ").unwrap(),
            "ana@example.com"
        );
        assert!(parse_email("no-at-sign").is_err());
        assert!(parse_email("@example.com").is_err());
        assert!(parse_email("a@").is_err());
        assert!(parse_email("a b@example.com").is_err());
        assert!(parse_email(&format!("{}@example.com", "a".repeat(250))).is_err());
    }
}
