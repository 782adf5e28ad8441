//! The chrome every signed-in page gets: the `nav` landmark with the
//! sections, the member's email and the `Sign out` form.
//! `templates/base.html` renders it; page templates `{% extends "base.html" %}`
//! and fill the `content` block (the `title` comes from `chrome.title`).

/// The nav's sections: (key for `active`, link path, name).
pub const SECTIONS: [(&str, &str, &str); 8] = [
    ("overview", "/", "Overview"),
    ("keys", "/keys", "API keys"),
    ("usage", "/usage", "Usage"),
    ("jobs", "/jobs", "Jobs"),
    ("webhooks", "/webhooks", "Webhooks"),
    ("credits", "/credits", "Credits"),
    ("models", "/models", "Models"),
    ("team", "/team", "Team"),
];

#[derive(Debug, Clone)]
pub struct Chrome {
    /// The dashboard's prefix: links are `{{ chrome.prefix }}/keys`.
    pub prefix: String,
    /// The page's title (the `<title>` and the `<h1>`).
    pub title: String,
    /// The current section (a key of [`SECTIONS`]): marked `aria-current`.
    pub active: &'static str,
    pub email: String,
    /// The session's CSRF token, for the page's forms.
    pub csrf_token: String,
    /// Appended to asset URLs (`?v=`), so they can be cached for long.
    pub asset_version: &'static str,
}

impl Chrome {
    pub fn sections(&self) -> &'static [(&'static str, &'static str, &'static str)] {
        &SECTIONS
    }

    /// A link under the dashboard.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.prefix)
    }
}
