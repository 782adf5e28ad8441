//! Dashboard helpers for the end-to-end tests: team members made as the
//! operator CLI makes them, and a [`Browser`] (reqwest with a cookie store,
//! redirects not followed) that signs in and posts forms with the page's
//! CSRF token.

use reqwest::{Response, StatusCode};
use unigen_dashboard::Role;
use uuid::Uuid;

use crate::TestApp;

/// A password long enough for the rules.
pub const PASSWORD: &str = "correct horse battery staple";

impl TestApp {
    /// Adds a dashboard member to `org` with [`PASSWORD`]; its email.
    pub async fn add_member(&self, org: Uuid, role: &str) -> String {
        let email = format!(
            "{role}-{}@example.test",
            &Uuid::new_v4().simple().to_string()[..10]
        );
        let role: Role = role.parse().expect("a role");
        let mut conn = self.db.connect().await;
        unigen_dashboard::team::add_member(&mut conn, org, &email, role, PASSWORD.to_owned())
            .await
            .expect("adding a member");
        email
    }

    /// A fresh browser (no cookies) for this stack's dashboard.
    pub fn browser(&self) -> Browser {
        Browser::new(&self.base_url)
    }

    /// A browser signed in as a new member of the test organization.
    pub async fn signed_in(&self, role: &str) -> (Browser, String) {
        let email = self.add_member(self.org_id, role).await;
        let browser = self.browser();
        let response = browser.sign_in(&email, PASSWORD).await;
        assert_eq!(
            response.status(),
            StatusCode::SEE_OTHER,
            "signing in as {role}"
        );
        (browser, email)
    }
}

/// A cookie-keeping HTTP client for the dashboard at `/dashboard`.
pub struct Browser {
    pub client: reqwest::Client,
    pub base_url: String,
}

impl Browser {
    pub fn new(base_url: &str) -> Self {
        let client = reqwest::Client::builder()
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .expect("client");
        Browser {
            client,
            base_url: base_url.to_owned(),
        }
    }

    /// `/dashboard{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("{}/dashboard{path}", self.base_url)
    }

    pub async fn get(&self, path: &str) -> Response {
        self.client.get(self.url(path)).send().await.expect("GET")
    }

    /// A page's status and HTML.
    pub async fn page(&self, path: &str) -> (StatusCode, String) {
        let response = self.get(path).await;
        let status = response.status();
        (status, response.text().await.expect("body"))
    }

    /// Posts these fields as a form, as they are (no token added).
    pub async fn post_raw(&self, path: &str, fields: &[(&str, &str)]) -> Response {
        self.client
            .post(self.url(path))
            .form(fields)
            .send()
            .await
            .expect("POST")
    }

    /// Posts a form with the CSRF token of the page at `token_from`.
    pub async fn post(&self, path: &str, token_from: &str, fields: &[(&str, &str)]) -> Response {
        let (_, html) = self.page(token_from).await;
        let token = csrf_token(&html).expect("a csrf_token on the page");
        let mut all = vec![("csrf_token", token.as_str())];
        // A form that shows a secret once carries a one-time id as well.
        let form_id = hidden_value(&html, "form_id");
        if let Some(form_id) = &form_id {
            all.push(("form_id", form_id.as_str()));
        }
        all.extend_from_slice(fields);
        self.post_raw(path, &all).await
    }

    /// Signs in through the sign-in form.
    pub async fn sign_in(&self, email: &str, password: &str) -> Response {
        self.post(
            "/login",
            "/login",
            &[("email", email), ("password", password)],
        )
        .await
    }
}

/// The value of the first `name="csrf_token"` field in a page.
pub fn csrf_token(html: &str) -> Option<String> {
    hidden_value(html, "csrf_token")
}

/// The value of the first `name="{name}"` field (`value` right after it).
pub fn hidden_value(html: &str, name: &str) -> Option<String> {
    let marker = format!("name=\"{name}\" value=\"");
    let at = html.find(&marker)?;
    let rest = &html[at + marker.len()..];
    Some(rest[..rest.find('"')?].to_owned())
}

/// The text of the element with this id (`id="x">TEXT<`), unescaped of nothing.
pub fn element_text(html: &str, id: &str) -> Option<String> {
    let marker = format!("id=\"{id}\">");
    let at = html.find(&marker)? + marker.len();
    let rest = &html[at..];
    Some(rest[..rest.find('<')?].trim().to_owned())
}
