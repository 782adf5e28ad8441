//! Member roles and what each may do. A control a role may not use is not
//! shown, and its request is a 403 all the same (`SignedIn::require`).

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Owner,
    Admin,
    Member,
    Viewer,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Owner, Role::Admin, Role::Member, Role::Viewer];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Admin => "admin",
            Role::Member => "member",
            Role::Viewer => "viewer",
        }
    }

    /// Create and revoke API keys.
    pub fn can_manage_keys(self) -> bool {
        match self {
            Role::Owner | Role::Admin | Role::Member => true,
            Role::Viewer => false,
        }
    }

    /// Cancel jobs.
    pub fn can_cancel_jobs(self) -> bool {
        match self {
            Role::Owner | Role::Admin | Role::Member => true,
            Role::Viewer => false,
        }
    }

    /// Create, re-enable, redeliver and replay webhooks.
    pub fn can_manage_webhooks(self) -> bool {
        match self {
            Role::Owner | Role::Admin => true,
            Role::Member | Role::Viewer => false,
        }
    }

    /// Add, remove and change the role of members.
    pub fn can_manage_team(self) -> bool {
        match self {
            Role::Owner | Role::Admin => true,
            Role::Member | Role::Viewer => false,
        }
    }

    /// Change the organization's overage settings.
    pub fn can_change_overage(self) -> bool {
        match self {
            Role::Owner | Role::Admin => true,
            Role::Member | Role::Viewer => false,
        }
    }

    /// Whether a member with this role may give `target` its role, change
    /// it or remove it: an admin may not touch an owner, nor make one.
    pub fn can_manage_role(self, target: Role) -> bool {
        match self {
            Role::Owner => true,
            Role::Admin => target != Role::Owner,
            Role::Member | Role::Viewer => false,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a role (owner, admin, member or viewer)")]
pub struct UnknownRole(pub String);

impl FromStr for Role {
    type Err = UnknownRole;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == s.trim())
            .ok_or_else(|| UnknownRole(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_grant_what_the_issue_lists() {
        assert!(Role::Member.can_manage_keys() && Role::Member.can_cancel_jobs());
        assert!(!Role::Member.can_manage_webhooks() && !Role::Member.can_manage_team());
        assert!(!Role::Viewer.can_manage_keys() && !Role::Viewer.can_cancel_jobs());
        assert!(Role::Admin.can_manage_team() && Role::Admin.can_change_overage());
        assert!(!Role::Admin.can_manage_role(Role::Owner));
        assert!(Role::Admin.can_manage_role(Role::Viewer));
        assert!(Role::Owner.can_manage_role(Role::Owner));
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
        }
        assert!("root".parse::<Role>().is_err());
    }
}
