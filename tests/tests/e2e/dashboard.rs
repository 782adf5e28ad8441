//! The dashboard's sign-in, sessions, CSRF, roles, tenancy, escaping, API
//! keys and team pages, driven as a browser would (reqwest with cookies).

use reqwest::StatusCode;
use serde_json::json;
use unigen_tests::dashboard::{PASSWORD, csrf_token, element_text, hidden_value};
use unigen_tests::{TestApp, TestOptions};

async fn app() -> TestApp {
    TestApp::spawn_with(TestOptions::default().without_worker().without_scheduler()).await
}

fn location(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn count_keys(app: &TestApp) -> i64 {
    app.db
        .scalar_i64("SELECT count(*) FROM api_keys WHERE revoked_at IS NULL")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_opens_every_page_and_signing_out_ends_the_session_at_once() {
    let app = app().await;
    let browser = app.browser();
    // Not signed in: every page sends to the sign-in page.
    for path in ["/", "/keys", "/team"] {
        let response = browser.get(path).await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER, "{path}");
        assert_eq!(location(&response), "/dashboard/login");
    }
    let bare = browser
        .client
        .get(format!("{}/dashboard", app.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(location(&bare), "/dashboard/");

    let (status, html) = browser.page("/login").await;
    assert_eq!(status, 200);
    assert!(
        html.contains("<label for=\"email\">Email</label>"),
        "{html}"
    );
    assert!(html.contains("<label for=\"password\">Password</label>"));
    assert!(html.contains(">Sign in</button>"));

    let email = app.add_member(app.org_id, "owner").await;
    // A wrong password and an unknown email get the same words.
    for (who, password) in [
        (email.as_str(), "wrong password!"),
        ("nobody@example.test", PASSWORD),
    ] {
        let response = browser.sign_in(who, password).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert!(
            response
                .text()
                .await
                .unwrap()
                .contains("Invalid email or password")
        );
    }

    let response = browser.sign_in(&email.to_uppercase(), PASSWORD).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&response), "/dashboard/");
    let cookie = response
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with("unigen_session="))
        .expect("a session cookie");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Lax"), "{cookie}");
    assert!(cookie.contains("Path=/dashboard"), "{cookie}");
    assert!(!cookie.contains("Secure"), "plain http: {cookie}");
    let session = cookie.split(';').next().unwrap().to_owned();

    let response = browser.get("/").await;
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["referrer-policy"], "same-origin");
    assert_eq!(headers["cache-control"], "no-store");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    let html = response.text().await.unwrap();
    assert!(html.contains("<nav aria-label=\"Main\">"));
    for name in [
        "Overview", "API keys", "Usage", "Jobs", "Webhooks", "Credits", "Models", "Team",
    ] {
        assert!(html.contains(&format!(">{name}</a>")), "nav link {name}");
    }
    assert!(html.contains(&email), "the member's email");
    assert!(html.contains(">Sign out</button>"));
    assert!(html.contains("Credit balance"));
    for path in ["/keys", "/team"] {
        assert_eq!(browser.page(path).await.0, 200, "{path}");
    }

    let response = browser.post("/logout", "/", &[]).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&response), "/dashboard/login");
    assert_eq!(browser.get("/").await.status(), StatusCode::SEE_OTHER);
    // The old cookie is dead on the server too.
    let replayed = app
        .browser()
        .client
        .get(browser.url("/"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(replayed.status(), StatusCode::SEE_OTHER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_expires() {
    let app = app().await;
    let (browser, _) = app.signed_in("member").await;
    assert_eq!(browser.get("/").await.status(), 200);
    app.sql("UPDATE dashboard_sessions SET last_seen_at = now() - interval '13 hours'")
        .await;
    let response = browser.get("/").await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&response), "/dashboard/login");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_failed_sign_ins_lock_the_email_for_fifteen_minutes() {
    let app = app().await;
    let email = app.add_member(app.org_id, "member").await;
    let other = app.add_member(app.org_id, "member").await;
    let browser = app.browser();
    for attempt in 1..=10 {
        let response = browser.sign_in(&email, "not the password").await;
        let body = response.text().await.unwrap();
        if attempt < 10 {
            assert!(
                body.contains("Invalid email or password"),
                "attempt {attempt}"
            );
        } else {
            assert!(
                body.contains("Sign-in is locked for 15 more minutes"),
                "{body}"
            );
        }
    }
    // Refused even with the right password, with a message saying so.
    let response = browser.sign_in(&email, PASSWORD).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("Too many failed sign-in attempts")
    );
    // Another email is not locked.
    assert_eq!(
        app.browser().sign_in(&other, PASSWORD).await.status(),
        StatusCode::SEE_OTHER
    );
    // Fifteen minutes later it opens again.
    app.sql("UPDATE login_failures SET locked_until = now() - interval '1 second'")
        .await;
    assert_eq!(
        browser.sign_in(&email, PASSWORD).await.status(),
        StatusCode::SEE_OTHER
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_sees_no_controls_and_its_requests_are_refused() {
    let app = app().await;
    let (viewer, _) = app.signed_in("viewer").await;
    let (_, keys) = viewer.page("/keys").await;
    assert!(
        !keys.contains("Create key"),
        "no create button for a viewer"
    );
    assert!(!keys.contains(">Revoke</button>"));
    assert_eq!(viewer.page("/keys/new").await.0, StatusCode::FORBIDDEN);
    let before = count_keys(&app).await;
    let response = viewer
        .post("/keys", "/keys", &[("name", "sneaky"), ("scope", "usage")])
        .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(count_keys(&app).await, before, "nothing created");

    let (_, team) = viewer.page("/team").await;
    assert!(!team.contains("Add member"));
    let response = viewer
        .post(
            "/team",
            "/team",
            &[("email", "x@example.test"), ("role", "viewer")],
        )
        .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);

    // A member manages keys but not the team.
    let (member, _) = app.signed_in("member").await;
    assert!(member.page("/keys").await.1.contains("Create key"));
    let response = member
        .post(
            "/team",
            "/team",
            &[("email", "y@example.test"), ("role", "viewer")],
        )
        .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        app.db
            .scalar_i64("SELECT count(*) FROM members WHERE email LIKE '_@example.test'")
            .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_without_this_sessions_csrf_token_are_refused_and_change_nothing() {
    let app = app().await;
    let (alice, _) = app.signed_in("owner").await;
    let (bob, _) = app.signed_in("owner").await;
    let before = count_keys(&app).await;
    let fields = [("name", "csrf"), ("scope", "usage")];
    // None at all.
    let response = alice.post_raw("/keys", &fields).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(response.text().await.unwrap().contains("security token"));
    // Bob's.
    let (_, bob_page) = bob.page("/keys").await;
    let bob_token = csrf_token(&bob_page).unwrap();
    let mut forged = vec![("csrf_token", bob_token.as_str())];
    forged.extend_from_slice(&fields);
    assert_eq!(
        alice.post_raw("/keys", &forged).await.status(),
        StatusCode::FORBIDDEN
    );
    // Signing out needs it too.
    assert_eq!(
        alice.post_raw("/logout", &[]).await.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(alice.get("/").await.status(), 200, "still signed in");
    assert_eq!(count_keys(&app).await, before);
    // The sign-in form without its token.
    let email = app.add_member(app.org_id, "member").await;
    let response = app
        .browser()
        .post_raw("/login", &[("email", &email), ("password", PASSWORD)])
        .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_organizations_key_and_member_are_not_found_pages() {
    let app = app().await;
    let other_org = app.create_org("Other", "pro").await;
    let other_key = app.create_key(other_org, &["all"], None).await;
    let key_id: String = {
        let client = app.db.client().await;
        let row = client
            .query_one(
                "SELECT id::text FROM api_keys WHERE org_id = $1",
                &[&other_org],
            )
            .await
            .unwrap();
        row.get(0)
    };
    let other_email = app.add_member(other_org, "member").await;
    let member_id: String = {
        let client = app.db.client().await;
        client
            .query_one(
                "SELECT id::text FROM members WHERE email = $1",
                &[&other_email],
            )
            .await
            .unwrap()
            .get(0)
    };
    let (owner, _) = app.signed_in("owner").await;
    let (status, html) = owner.page(&format!("/keys/{key_id}/revoke")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("Not found"));
    let response = owner
        .post(&format!("/keys/{key_id}/revoke"), "/keys", &[])
        .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    // The key still works.
    assert_eq!(app.get("/api/v1/usage", &other_key).await.status(), 200);
    assert_eq!(
        owner.page(&format!("/team/{member_id}/remove")).await.0,
        StatusCode::NOT_FOUND
    );
    let response = owner
        .post(&format!("/team/{member_id}/remove"), "/team", &[])
        .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        app.db
            .scalar_i64(&format!(
                "SELECT count(*) FROM members WHERE id = '{member_id}'"
            ))
            .await,
        1
    );
    // Forged ids and unknown pages: 404 pages, not errors.
    for path in ["/keys/not-a-uuid/revoke", "/team/%27;--/remove", "/nowhere"] {
        let (status, html) = owner.page(path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(html.contains("<h1>Not found</h1>"), "{path}: {html}");
    }
    // Another organization's keys are not listed.
    assert!(!owner.page("/keys").await.1.contains(&key_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_named_script_shows_as_text() {
    let app = app().await;
    let (owner, _) = app.signed_in("owner").await;
    let name = "<script>alert(1)</script>";
    let response = owner
        .post("/keys", "/keys/new", &[("name", name), ("scope", "usage")])
        .await;
    assert_eq!(response.status(), 200);
    let created = response.text().await.unwrap();
    let (_, list) = owner.page("/keys").await;
    let (_, searched) = owner.page("/keys?q=%3Cscript").await;
    for html in [&created, &list, &searched] {
        assert!(!html.contains(name), "raw markup in the page");
        assert!(
            html.contains("&#60;script&#62;alert(1)&#60;/script&#62;")
                || html.contains("&lt;script&gt;"),
            "{html}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_created_in_the_dashboard_has_exactly_its_scopes_until_revoked() {
    let app = app().await;
    let (member, _) = app.signed_in("member").await;
    let (status, form) = member.page("/keys/new").await;
    assert_eq!(status, 200);
    for label in ["Name", "Expires"] {
        assert!(form.contains(&format!(">{label}</label>")), "{label}");
    }
    for scope in ["chat", "image", "usage", "jobs", "keys"] {
        assert!(
            form.contains(&format!("value=\"{scope}\"> {scope}</label>")),
            "{scope}"
        );
    }
    assert!(form.contains("All scopes") && form.contains(">Create</button>"));

    let response = member
        .post(
            "/keys",
            "/keys/new",
            &[
                ("name", "reporting"),
                ("scope", "usage"),
                ("scope", "jobs"),
                ("expires", "2999-01-31"),
            ],
        )
        .await;
    assert_eq!(response.status(), 200);
    let html = response.text().await.unwrap();
    assert!(html.contains("will not be shown again"));
    assert!(html.contains(">Copy</button>"));
    let value = element_text(&html, "new-key-value").expect("the key's value");
    assert!(unigen_core::domain::looks_like_key(&value), "{value}");

    // Exactly its scopes.
    assert_eq!(app.get("/api/v1/usage", &value).await.status(), 200);
    assert_eq!(app.get("/api/v1/jobs", &value).await.status(), 200);
    let response = app
        .post_json(
            "/api/v1/images/generations",
            &value,
            &json!({"prompt": "a cat"}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        app.get("/api/v1/keys", &value).await.status(),
        StatusCode::FORBIDDEN
    );

    // Listed without its value, with its expiry; never shown again.
    let (_, list) = member.page("/keys").await;
    assert!(list.contains("reporting") && list.contains("2999-01-31"));
    assert!(!list.contains(&value));
    assert!(!list.contains(&value[..20]));

    // Revoked from the dashboard: the API answers 401 at once.
    let id: String = app
        .db
        .client()
        .await
        .query_one(
            "SELECT id::text FROM api_keys WHERE name = 'reporting'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let (status, confirm) = member.page(&format!("/keys/{id}/revoke")).await;
    assert_eq!(status, 200);
    assert!(confirm.contains(">Revoke key</button>"));
    let response = member
        .post(
            &format!("/keys/{id}/revoke"),
            &format!("/keys/{id}/revoke"),
            &[],
        )
        .await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        app.get("/api/v1/usage", &value).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert!(!member.page("/keys").await.1.contains("reporting"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_key_forms_get_a_clear_message_and_create_nothing() {
    let app = app().await;
    let (owner, _) = app.signed_in("owner").await;
    let before = count_keys(&app).await;
    let long = "n".repeat(10_000);
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[("name", &long), ("scope", "usage")],
            "Name: name must be at most 100 characters",
        ),
        (&[("name", "x")], "Scopes: choose at least one scope"),
        (&[("name", "x"), ("scope", "root")], "Scopes: scopes: "),
        (
            &[("name", "x"), ("scope", "usage"), ("expires", "31/01/2999")],
            "Expires: ",
        ),
        (
            &[("name", "x"), ("scope", "usage"), ("expires", "2001-01-01")],
            "must be in the future",
        ),
    ];
    for (fields, message) in cases {
        let response = owner.post("/keys", "/keys/new", fields).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{message}");
        let html = response.text().await.unwrap();
        assert!(html.contains(message), "{message}: {html}");
    }
    // A scope the plan does not offer (free: no video, music...).
    app.sql(&format!(
        "UPDATE plans SET video_seconds = 0 WHERE code = (SELECT plan_code FROM organizations WHERE id = '{}')",
        app.org_id
    ))
    .await;
    let (_, form) = owner.page("/keys/new").await;
    assert!(!form.contains("value=\"video\""), "not offered");
    let response = owner
        .post("/keys", "/keys/new", &[("name", "x"), ("scope", "video")])
        .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("does not offer the `video` scope")
    );
    // `All scopes` is every scope the plan offers.
    let response = owner
        .post(
            "/keys",
            "/keys/new",
            &[("name", "everything"), ("scope", "all")],
        )
        .await;
    assert_eq!(response.status(), 200);
    let scopes: String = app
        .db
        .client()
        .await
        .query_one(
            "SELECT array_to_string(scopes, ',') FROM api_keys WHERE name = 'everything'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        !scopes.contains("video") && scopes.contains("keys"),
        "{scopes}"
    );
    assert_eq!(count_keys(&app).await, before + 1);
    // Unparsable list parameters are a 400 page.
    assert_eq!(
        owner.page("/keys?sort=sideways").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        owner.page("/keys?after=zzz").await.0,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_searched_by_name_and_sorted_by_last_use_or_expiry() {
    let app = app().await;
    let (owner, _) = app.signed_in("owner").await;
    for (name, expires) in [
        ("alpha build", "2999-03-01"),
        ("beta deploy", "2999-01-01"),
        ("gamma build", ""),
    ] {
        let mut fields = vec![("name", name), ("scope", "usage")];
        if !expires.is_empty() {
            fields.push(("expires", expires));
        }
        assert_eq!(
            owner.post("/keys", "/keys/new", &fields).await.status(),
            200
        );
    }
    app.sql(
        "UPDATE api_keys SET last_used_at = now() - interval '1 hour' WHERE name = 'gamma build'",
    )
    .await;
    app.sql("UPDATE api_keys SET last_used_at = now() WHERE name = 'alpha build'")
        .await;
    let order = |html: &str, names: &[&str]| -> Vec<usize> {
        names
            .iter()
            .map(|n| html.find(n).unwrap_or(usize::MAX))
            .collect()
    };
    let (_, found) = owner.page("/keys?q=BUILD").await;
    assert!(found.contains("alpha build") && found.contains("gamma build"));
    assert!(!found.contains("beta deploy"));
    let (_, by_use) = owner.page("/keys?sort=last_used").await;
    let at = order(&by_use, &["alpha build", "gamma build", "beta deploy"]);
    assert!(at[0] < at[1] && at[1] < at[2], "{at:?}");
    let (_, by_expiry) = owner.page("/keys?sort=expiry").await;
    let at = order(&by_expiry, &["beta deploy", "alpha build", "gamma build"]);
    assert!(at[0] < at[1] && at[1] < at[2], "{at:?}");
    // A search with LIKE's wildcards takes them literally.
    assert!(!owner.page("/keys?q=%25").await.1.contains("alpha build"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_and_removing_a_member_ends_its_sessions_at_once() {
    let app = app().await;
    let (owner, _) = app.signed_in("owner").await;
    let (status, team) = owner.page("/team").await;
    assert_eq!(status, 200);
    assert!(team.contains("Add member"));
    assert!(team.contains(">Email</label>") && team.contains(">Role</label>"));

    let response = owner
        .post(
            "/team",
            "/team",
            &[("email", "New.Person@Example.test"), ("role", "member")],
        )
        .await;
    assert_eq!(response.status(), 200);
    let html = response.text().await.unwrap();
    assert!(html.contains("will not be shown again"));
    let password = element_text(&html, "new-member-password").expect("a one-time password");
    assert!(
        !owner.page("/team").await.1.contains(&password),
        "shown once"
    );

    let newcomer = app.browser();
    assert_eq!(
        newcomer
            .sign_in("new.person@example.test", &password)
            .await
            .status(),
        StatusCode::SEE_OTHER
    );
    assert_eq!(newcomer.get("/keys").await.status(), 200);

    // The same email again is refused with a message.
    let response = owner
        .post(
            "/team",
            "/team",
            &[("email", "new.person@example.test"), ("role", "viewer")],
        )
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.text().await.unwrap().contains("already exists"));

    let id: String = app
        .db
        .client()
        .await
        .query_one(
            "SELECT id::text FROM members WHERE email = 'new.person@example.test'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // Demoted to viewer: its very next request has the new role.
    let response = owner
        .post(&format!("/team/{id}/role"), "/team", &[("role", "viewer")])
        .await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        newcomer.get("/keys/new").await.status(),
        StatusCode::FORBIDDEN
    );

    let (status, confirm) = owner.page(&format!("/team/{id}/remove")).await;
    assert_eq!(status, 200);
    assert!(confirm.contains(">Remove member</button>"));
    let response = owner
        .post(&format!("/team/{id}/remove"), "/team", &[])
        .await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let response = newcomer.get("/keys").await;
    assert_eq!(
        response.status(),
        StatusCode::SEE_OTHER,
        "signed out at once"
    );
    assert_eq!(
        app.db
            .scalar_i64("SELECT count(*) FROM dashboard_sessions s JOIN members m ON m.id = s.member_id WHERE m.email = 'new.person@example.test'")
            .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_can_neither_remove_nor_demote_nor_make_an_owner() {
    let app = app().await;
    let owner_email = app.add_member(app.org_id, "owner").await;
    let owner_id: String = app
        .db
        .client()
        .await
        .query_one(
            "SELECT id::text FROM members WHERE email = $1",
            &[&owner_email],
        )
        .await
        .unwrap()
        .get(0);
    let (admin, _) = app.signed_in("admin").await;
    let (_, team) = admin.page("/team").await;
    assert!(
        !team.contains(&format!("/team/{owner_id}/remove")),
        "no control on an owner"
    );
    assert!(
        !team.contains("<option value=\"owner\""),
        "cannot grant owner"
    );
    assert_eq!(
        admin
            .post(&format!("/team/{owner_id}/remove"), "/team", &[])
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        admin
            .post(
                &format!("/team/{owner_id}/role"),
                "/team",
                &[("role", "viewer")]
            )
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        admin
            .post(
                "/team",
                "/team",
                &[("email", "boss@example.test"), ("role", "owner")]
            )
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        app.db
            .scalar_i64("SELECT count(*) FROM members WHERE role = 'owner'")
            .await,
        1
    );
    // An admin manages the rest of the team.
    let response = admin
        .post(
            "/team",
            "/team",
            &[("email", "helper@example.test"), ("role", "admin")],
        )
        .await;
    assert_eq!(response.status(), 200);
    // The last owner stays an owner.
    let owner = app.browser();
    owner.sign_in(&owner_email, PASSWORD).await;
    let response = owner
        .post(
            &format!("/team/{owner_id}/role"),
            "/team",
            &[("role", "admin")],
        )
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("at least one owner")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resubmitted_create_form_makes_no_second_key_or_webhook_and_shows_no_secret() {
    let app = app().await;
    let (owner, _) = app.signed_in("owner").await;
    let before = count_keys(&app).await;
    let (_, form) = owner.page("/keys/new").await;
    let token = csrf_token(&form).expect("a csrf token");
    let form_id = hidden_value(&form, "form_id").expect("a one-time form id");
    let fields = [
        ("csrf_token", token.as_str()),
        ("form_id", form_id.as_str()),
        ("name", "once"),
        ("scope", "usage"),
    ];
    let first = owner.post_raw("/keys", &fields).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.text().await.unwrap().contains("new-key-value"));
    // What a reload of the answer sends: the same form again.
    let again = owner.post_raw("/keys", &fields).await;
    assert_eq!(again.status(), StatusCode::BAD_REQUEST);
    let html = again.text().await.unwrap();
    assert!(html.contains("already sent"), "{html}");
    assert!(!html.contains("new-key-value"), "{html}");
    assert_eq!(count_keys(&app).await, before + 1);
    // Without the form's id (an old page): refused, nothing made.
    let stale = owner
        .post_raw(
            "/keys",
            &[
                ("csrf_token", token.as_str()),
                ("name", "stale"),
                ("scope", "usage"),
            ],
        )
        .await;
    assert_eq!(stale.status(), StatusCode::BAD_REQUEST);
    assert_eq!(count_keys(&app).await, before + 1);

    // The same for a webhook and its signing secret.
    let (_, page) = owner.page("/webhooks").await;
    let form_id = hidden_value(&page, "form_id").expect("a one-time form id");
    let fields = [
        ("csrf_token", token.as_str()),
        ("form_id", form_id.as_str()),
        ("name", "once"),
        ("url", "https://example.com/hook"),
        ("events", "generation.completed"),
    ];
    let first = owner.post_raw("/webhooks", &fields).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.text().await.unwrap().contains("webhook-secret"));
    let again = owner.post_raw("/webhooks", &fields).await;
    assert_eq!(again.status(), StatusCode::BAD_REQUEST);
    assert!(!again.text().await.unwrap().contains("webhook-secret"));
    assert_eq!(
        app.db
            .scalar_i64("SELECT count(*) FROM webhooks WHERE name = 'once'")
            .await,
        1
    );
}
