//! The rules for creating an API key, shared by `POST /keys` and the
//! dashboard's API keys page: a name of 1 to 100 characters, known scopes
//! (`all` or `*` for every scope), an optional expiry in the future and no
//! later than the granting key's own (a key made by an expiring key
//! expires with it at the latest), and no scope beyond what the one
//! granting it holds.

use chrono::{DateTime, NaiveDate, Utc};

use crate::ValidationError;
use crate::domain::{Bucket, Scope};
use crate::validate::required_text;

pub const MAX_KEY_NAME_CHARS: usize = 100;

/// A creation request as received (every field optional, checked here).
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyRequest<'a> {
    pub name: Option<&'a str>,
    pub scopes: Option<&'a [String]>,
    pub expires_at: Option<&'a str>,
    /// The granting key's own expiry (`POST /keys`); `None` when it never
    /// expires or the granter is not a key (a dashboard member).
    pub granter_expires_at: Option<DateTime<Utc>>,
}

/// A validated creation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidKey {
    pub name: String,
    pub scopes: Vec<Scope>,
    pub expires_at: Option<DateTime<Utc>>,
}

impl ValidKey {
    /// The scopes' wire names, as stored.
    pub fn scope_names(&self) -> Vec<String> {
        self.scopes.iter().map(|s| s.as_str().to_owned()).collect()
    }
}

impl KeyRequest<'_> {
    /// Checks each field; the error names the first one that is wrong.
    pub fn validate(self, now: DateTime<Utc>) -> Result<ValidKey, ValidationError> {
        let name = required_text("name", self.name, MAX_KEY_NAME_CHARS)?;
        let scopes = parse_scopes(self.scopes)?;
        let expires_at = self
            .expires_at
            .map(|raw| parse_expiry(raw, now))
            .transpose()?;
        let expires_at = within_granter(expires_at, self.granter_expires_at)?;
        Ok(ValidKey {
            name,
            scopes,
            expires_at,
        })
    }
}

/// A key never outlives the key that grants it: without an expiry of its
/// own it takes the granter's; one past the granter's is refused.
fn within_granter(
    expires_at: Option<DateTime<Utc>>,
    granter: Option<DateTime<Utc>>,
) -> Result<Option<DateTime<Utc>>, ValidationError> {
    match (expires_at, granter) {
        (None, granter) => Ok(granter),
        (Some(at), Some(limit)) if at > limit => Err(ValidationError::new(
            "expires_at",
            format!(
                "expires_at must not be later than the creating key's own expiry, {}",
                limit.to_rfc3339()
            ),
        )),
        (Some(at), _) => Ok(Some(at)),
    }
}

/// The refusal past the plan's cap on an organization's active keys
/// (`plans.max_api_keys`), from `POST /keys` and the dashboard alike.
pub fn limit_message(plan: &str, max: i32) -> String {
    format!("API key limit reached: the {plan} plan allows {max} active keys; revoke one first")
}

/// No key grants more than its creator holds: the first of `scopes` that
/// `held` lacks.
pub fn first_ungranted(scopes: &[Scope], held: &[Scope]) -> Option<Scope> {
    scopes.iter().copied().find(|scope| !held.contains(scope))
}

/// The quota bucket a scope spends, if any: a plan whose limit for it is
/// 0 does not offer the scope.
pub fn scope_bucket(scope: Scope) -> Option<Bucket> {
    match scope {
        Scope::Chat => Some(Bucket::ChatTokens),
        Scope::Image => Some(Bucket::ImageGenerations),
        Scope::ImageEdit => Some(Bucket::ImageEdits),
        Scope::Video => Some(Bucket::VideoSeconds),
        Scope::Music => Some(Bucket::MusicTracks),
        Scope::Tts => Some(Bucket::TtsChars),
        Scope::Stt => Some(Bucket::SttSeconds),
        Scope::Agents => Some(Bucket::AgentRuns),
        Scope::Usage | Scope::Jobs | Scope::Webhooks | Scope::Keys => None,
    }
}

/// The scopes a plan offers, given its limit per bucket (`None`
/// unlimited, `Some(0)` not on the plan): what a team member may grant
/// from the dashboard.
pub fn offered_scopes(limit: impl Fn(Bucket) -> Option<i64>) -> Vec<Scope> {
    Scope::ALL
        .iter()
        .copied()
        .filter(|scope| scope_bucket(*scope).is_none_or(|bucket| limit(bucket) != Some(0)))
        .collect()
}

/// Known scope names, duplicates collapsed; `all` (or `*`) is every scope,
/// as in the operator CLI.
fn parse_scopes(names: Option<&[String]>) -> Result<Vec<Scope>, ValidationError> {
    let names = names.ok_or_else(|| ValidationError::new("scopes", "scopes is required"))?;
    if names.is_empty() {
        return Err(ValidationError::new(
            "scopes",
            "scopes must list at least one scope",
        ));
    }
    if let Some(blank) = names
        .iter()
        .find(|n| n.trim().is_empty() || n.contains(','))
    {
        return Err(ValidationError::new(
            "scopes",
            format!("scopes: `{blank}` is not a scope name"),
        ));
    }
    Scope::parse_list(&names.join(","))
        .map_err(|e| ValidationError::new("scopes", format!("scopes: {e}")))
}

/// An ISO 8601 date-time (RFC 3339) or a date meaning midnight UTC; it
/// must lie in the future.
fn parse_expiry(raw: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, ValidationError> {
    let at = DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .or_else(|_| {
            NaiveDate::parse_from_str(raw, "%Y-%m-%d")
                .map(|d| d.and_time(chrono::NaiveTime::MIN).and_utc())
        })
        .map_err(|_| {
            let shown: String = raw.chars().take(40).collect();
            ValidationError::new(
                "expires_at",
                format!(
                    "expires_at must be an ISO 8601 date-time (2027-01-31T12:00:00Z) or date \
                     (2027-01-31), got `{shown}`"
                ),
            )
        })?;
    if at <= now {
        return Err(ValidationError::new(
            "expires_at",
            format!("expires_at must be in the future, got {}", at.to_rfc3339()),
        ));
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(
        name: &str,
        scopes: &[&str],
        expires_at: Option<&str>,
    ) -> Result<ValidKey, ValidationError> {
        let scopes: Vec<String> = scopes.iter().map(|s| (*s).to_owned()).collect();
        KeyRequest {
            name: Some(name),
            scopes: Some(&scopes),
            expires_at,
            granter_expires_at: None,
        }
        .validate(Utc::now())
    }

    fn field_of(result: Result<ValidKey, ValidationError>) -> &'static str {
        match result {
            Ok(_) => panic!("accepted"),
            Err(err) => err.field,
        }
    }

    #[test]
    fn creation_requests_are_validated_field_by_field() {
        let ok = check("ci", &["image", "jobs", "image"], Some("2999-01-02")).unwrap();
        assert_eq!(ok.scopes, vec![Scope::Image, Scope::Jobs]);
        assert_eq!(
            ok.expires_at.unwrap().to_rfc3339(),
            "2999-01-02T00:00:00+00:00"
        );
        let all = check("ops", &["all"], None).unwrap();
        assert_eq!(all.scopes, Scope::ALL.to_vec());
        assert!(all.scopes.contains(&Scope::Keys));

        assert_eq!(field_of(check(" ", &["image"], None)), "name");
        assert_eq!(field_of(check(&"n".repeat(101), &["image"], None)), "name");
        assert!(check(&"n".repeat(100), &["image"], None).is_ok());
        assert_eq!(field_of(check("x", &[], None)), "scopes");
        assert_eq!(field_of(check("x", &["pixels"], None)), "scopes");
        assert_eq!(field_of(check("x", &["image,jobs"], None)), "scopes");
        assert_eq!(field_of(check("x", &[""], None)), "scopes");
        assert_eq!(
            field_of(check("x", &["image"], Some("2001-01-01T00:00:00Z"))),
            "expires_at"
        );
        assert_eq!(
            field_of(check("x", &["image"], Some("next week"))),
            "expires_at"
        );
        assert_eq!(field_of(KeyRequest::default().validate(Utc::now())), "name");
    }

    #[test]
    fn no_key_outlives_the_key_that_grants_it() {
        let now = Utc::now();
        let granter = now + chrono::Duration::days(7);
        let scopes = vec!["image".to_owned()];
        let request = |expires_at| KeyRequest {
            name: Some("child"),
            scopes: Some(&scopes),
            expires_at,
            granter_expires_at: Some(granter),
        };
        // No expiry asked: the granter's.
        assert_eq!(
            request(None).validate(now).unwrap().expires_at,
            Some(granter)
        );
        // Sooner: kept.
        let sooner = (now + chrono::Duration::days(1)).to_rfc3339();
        let kept = request(Some(&sooner)).validate(now).unwrap().expires_at;
        assert!(kept.is_some_and(|at| at < granter));
        // Later: refused, naming the granter's expiry.
        let err = request(Some("2999-01-01")).validate(now).unwrap_err();
        assert_eq!(err.field, "expires_at");
        assert!(
            err.message.contains("creating key's own expiry"),
            "{}",
            err.message
        );
        // A granter that never expires sets no limit.
        let free = KeyRequest {
            granter_expires_at: None,
            ..request(Some("2999-01-01"))
        };
        assert!(free.validate(now).unwrap().expires_at.is_some());
        assert_eq!(
            KeyRequest {
                expires_at: None,
                ..free
            }
            .validate(now)
            .unwrap()
            .expires_at,
            None
        );
    }

    #[test]
    fn a_plan_offers_the_scopes_whose_bucket_is_not_zero() {
        let offered = offered_scopes(|bucket| match bucket {
            Bucket::VideoSeconds => Some(0),
            Bucket::ImageGenerations => Some(100),
            _ => None,
        });
        assert!(!offered.contains(&Scope::Video));
        assert!(offered.contains(&Scope::Image));
        assert!(offered.contains(&Scope::Keys));
        assert_eq!(offered.len(), Scope::ALL.len() - 1);
    }

    #[test]
    fn no_scope_beyond_what_the_granter_holds() {
        assert_eq!(
            first_ungranted(&[Scope::Image], &[Scope::Image, Scope::Jobs]),
            None
        );
        assert_eq!(
            first_ungranted(&[Scope::Jobs, Scope::Keys], &[Scope::Jobs]),
            Some(Scope::Keys)
        );
    }
}
