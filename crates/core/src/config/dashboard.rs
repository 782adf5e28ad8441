//! `[dashboard]` settings.

use serde::Deserialize;

/// `[dashboard]`: `enabled`, `path_prefix`, `session_idle_hours`,
/// `session_max_days`, `login_max_failures`, `login_window_minutes`,
/// `lockout_minutes`. The session cookie is `Secure` when
/// `http.public_base_url` is https.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct DashboardSettings {
    /// Serve the dashboard from the API process.
    pub enabled: bool,
    /// Where it is served: `/dashboard` (no trailing slash). Every link is
    /// built from it, so it works behind a path prefix.
    pub path_prefix: String,
    /// A session unused this long ends.
    pub session_idle_hours: u64,
    /// A session ends this long after sign-in, used or not.
    pub session_max_days: u64,
    /// Failed sign-ins for one email within `login_window_minutes` that
    /// lock it ...
    pub login_max_failures: i32,
    /// The window `login_max_failures` counts in.
    pub login_window_minutes: u64,
    /// ... for this long.
    pub lockout_minutes: u64,
}

impl Default for DashboardSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            path_prefix: "/dashboard".to_owned(),
            session_idle_hours: 12,
            session_max_days: 30,
            login_max_failures: 10,
            login_window_minutes: 15,
            lockout_minutes: 15,
        }
    }
}

impl DashboardSettings {
    /// The prefix with one leading slash and no trailing one (`/` alone
    /// becomes the empty prefix: the dashboard at the root).
    pub fn normalized_prefix(&self) -> String {
        let trimmed = self.path_prefix.trim().trim_matches('/');
        if trimmed.is_empty() {
            String::new()
        } else {
            format!("/{trimmed}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_normalized() {
        let mut settings = DashboardSettings::default();
        assert_eq!(settings.normalized_prefix(), "/dashboard");
        settings.path_prefix = "admin/ui/".into();
        assert_eq!(settings.normalized_prefix(), "/admin/ui");
        settings.path_prefix = "/".into();
        assert_eq!(settings.normalized_prefix(), "");
    }
}
