//! Agents: CRUD with the spec's fields, defaults and limits, plan limits,
//! templates and duplication, organization isolation.

use serde_json::{Value, json};
use unigen_tests::{TestApp, json_of};

async fn create(app: &TestApp, key: &str, body: Value) -> (u16, Value) {
    json_of(app.post_json("/api/v1/agents", key, &body).await).await
}

async fn patch(app: &TestApp, key: &str, id: &str, body: Value) -> (u16, Value) {
    let response = app
        .client
        .patch(app.url(&format!("/api/v1/agents/{id}")))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    json_of(response).await
}

async fn agent_count(app: &TestApp) -> i64 {
    app.db
        .scalar_i64("SELECT count(*) FROM agents WHERE NOT is_template")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_is_created_with_the_spec_defaults_then_read_updated_and_deleted() {
    let app = TestApp::spawn().await;
    let (status, body) = create(
        &app,
        &app.key,
        json!({"name": "Helper", "system_prompt": "Be brief."}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let agent = &body["agent"];
    let id = agent["id"].as_str().unwrap().to_owned();
    for (field, expected) in [
        ("name", json!("Helper")),
        ("description", json!("")),
        ("icon", json!("bot")),
        ("system_prompt", json!("Be brief.")),
        ("model", json!("local/echo")),
        ("tools", json!([])),
        ("temperature", json!(0.7)),
        ("max_tokens", json!(4000)),
        ("max_iterations", json!(10)),
        ("memory_enabled", json!(false)),
        ("is_template", json!(false)),
        ("is_public", json!(false)),
        ("run_count", json!(0)),
    ] {
        assert_eq!(agent[field], expected, "{field}: {agent}");
    }

    let (status, read) = json_of(app.get(&format!("/api/v1/agents/{id}"), &app.key).await).await;
    assert_eq!(status, 200);
    assert_eq!(read, body, "read back as created");

    let (status, updated) = patch(
        &app,
        &app.key,
        &id,
        json!({"description": "Answers briefly", "tools": ["web_search", "generate_chart"],
               "temperature": 0.2, "max_iterations": 3, "memory_enabled": true}),
    )
    .await;
    assert_eq!(status, 200, "{updated}");
    let updated = &updated["agent"];
    assert_eq!(updated["tools"], json!(["web_search", "generate_chart"]));
    assert_eq!(
        (
            &updated["temperature"],
            &updated["max_iterations"],
            &updated["memory_enabled"]
        ),
        (&json!(0.2), &json!(3), &json!(true))
    );
    assert_eq!(updated["name"], "Helper", "fields not sent stay");
    assert!(updated["updated_at"].as_str() > agent["updated_at"].as_str());

    let (status, list) = json_of(app.get("/api/v1/agents", &app.key).await).await;
    assert_eq!(status, 200);
    assert_eq!(list["agents"].as_array().unwrap().len(), 1);

    let response = app.delete(&format!("/api/v1/agents/{id}"), &app.key).await;
    assert_eq!(response.status(), 204);
    let (status, body) = json_of(app.get(&format!("/api/v1/agents/{id}"), &app.key).await).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["message"], format!("agent {id} not found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_agents_are_refused_with_the_field_named_and_nothing_created() {
    let app = TestApp::spawn().await;
    let long = |n: usize| "x".repeat(n);
    let cases = [
        (json!({"system_prompt": "x"}), "name", "name is required".to_owned()),
        (json!({"name": " ", "system_prompt": "x"}), "name", "name is required".to_owned()),
        (
            json!({"name": long(101), "system_prompt": "x"}),
            "name",
            "name must be at most 100 characters".to_owned(),
        ),
        (
            json!({"name": "a", "system_prompt": "x", "description": long(501)}),
            "description",
            "description must be at most 500 characters".to_owned(),
        ),
        (json!({"name": "a"}), "system_prompt", "system_prompt is required".to_owned()),
        (
            json!({"name": "a", "system_prompt": long(10_001)}),
            "system_prompt",
            "system_prompt must be at most 10000 characters".to_owned(),
        ),
        (
            json!({"name": "a", "system_prompt": "x", "tools": ["web_search", "teleport"]}),
            "tools",
            "invalid tool ids: teleport; available: web_search, web_fetch, generate_text, generate_image, analyze_image, generate_chart, create_document".to_owned(),
        ),
        (
            json!({"name": "a", "system_prompt": "x", "temperature": 2.1}),
            "temperature",
            "temperature must be between 0 and 2".to_owned(),
        ),
        (
            json!({"name": "a", "system_prompt": "x", "max_tokens": 8001}),
            "max_tokens",
            "max_tokens must be between 100 and 8000".to_owned(),
        ),
        (
            json!({"name": "a", "system_prompt": "x", "max_iterations": 0}),
            "max_iterations",
            "max_iterations must be between 1 and 20".to_owned(),
        ),
    ];
    for (body, field, message) in cases {
        let (status, answer) = create(&app, &app.key, body.clone()).await;
        assert_eq!(status, 400, "{body} -> {answer}");
        assert_eq!(answer["error"]["param"], field, "{body}");
        assert_eq!(answer["error"]["message"], message, "{body}");
        assert_eq!(answer["error"]["code"], "invalid_request");
    }
    let (status, answer) = create(
        &app,
        &app.key,
        json!({"name": "a", "system_prompt": "x", "model": "local/procedural-v1"}),
    )
    .await;
    assert_eq!((status, &answer["error"]["param"]), (400, &json!("model")));
    let (status, answer) = create(&app, &app.key, json!({"name": 7, "system_prompt": "x"})).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["param"], "name", "{answer}");
    assert_eq!(answer["error"]["message"], "name must be a string, got 7");
    assert_eq!(agent_count(&app).await, 0, "nothing was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_bound_agents_tools_and_iterations_even_under_concurrent_creation() {
    let app = TestApp::spawn().await;
    let free = app.create_org("Free org", "free").await;
    let free_key = app.create_key(free, &["all"], None).await;
    let (status, body) = create(&app, &free_key, json!({"name": "a", "system_prompt": "x"})).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body["error"]["message"],
        "Agents are not available on the Free plan"
    );

    // Pro: 4 tools per agent, 10 iterations, 5 agents.
    let (status, body) = create(
        &app,
        &app.key,
        json!({"name": "a", "system_prompt": "x",
               "tools": ["web_search", "web_fetch", "generate_text", "generate_image", "generate_chart"]}),
    )
    .await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(
        body["error"]["message"],
        "The Pro plan allows at most 4 tools per agent"
    );
    assert_eq!(body["error"]["code"], "limit_reached");
    let (status, body) = create(
        &app,
        &app.key,
        json!({"name": "a", "system_prompt": "x", "max_iterations": 11}),
    )
    .await;
    assert_eq!(status, 402, "{body}");

    let attempts: Vec<_> = (0..8)
        .map(|i| {
            let (client, url, key) = (
                app.client.clone(),
                app.url("/api/v1/agents"),
                app.key.clone(),
            );
            tokio::spawn(async move {
                client
                    .post(url)
                    .bearer_auth(key)
                    .json(&json!({"name": format!("agent {i}"), "system_prompt": "x"}))
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for attempt in attempts {
        statuses.push(attempt.await.unwrap());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 201, 201, 201, 201, 402, 402, 402]);
    assert_eq!(agent_count(&app).await, 5);
    let (status, body) = create(
        &app,
        &app.key,
        json!({"name": "sixth", "system_prompt": "x"}),
    )
    .await;
    assert_eq!(status, 402);
    assert_eq!(
        body["error"]["message"],
        "Agent limit reached: the Pro plan allows 5 agents"
    );

    // An update cannot exceed the plan either, and changes nothing then.
    let (_, list) = json_of(app.get("/api/v1/agents", &app.key).await).await;
    let id = list["agents"][0]["id"].as_str().unwrap().to_owned();
    let (status, _) = patch(
        &app,
        &app.key,
        &id,
        json!({"max_iterations": 15, "name": "renamed"}),
    )
    .await;
    assert_eq!(status, 402);
    let (_, read) = json_of(app.get(&format!("/api/v1/agents/{id}"), &app.key).await).await;
    assert_ne!(read["agent"]["name"], "renamed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_are_listed_by_category_read_and_duplicated_but_never_changed() {
    let app = TestApp::spawn().await;
    let (_, own) = json_of(app.get("/api/v1/agents", &app.key).await).await;
    assert_eq!(own["agents"], json!([]), "templates only on request");

    let (status, all) = json_of(
        app.get("/api/v1/agents?include_templates=true", &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200);
    let templates = all["agents"].as_array().unwrap();
    assert_eq!(templates.len(), 6);
    let mut categories: Vec<&str> = templates
        .iter()
        .map(|t| t["template_category"].as_str().unwrap())
        .collect();
    categories.sort_unstable();
    assert_eq!(
        categories,
        [
            "analysis",
            "coding",
            "content",
            "productivity",
            "research",
            "support"
        ]
    );
    assert!(templates.iter().all(|t| t["is_template"] == true));

    let (_, analysis) = json_of(
        app.get("/api/v1/agents?template_category=analysis", &app.key)
            .await,
    )
    .await;
    let analysis = analysis["agents"].as_array().unwrap();
    assert_eq!(analysis.len(), 1);
    assert_eq!(analysis[0]["name"], "Data Analyst");
    let template_id = analysis[0]["id"].as_str().unwrap().to_owned();
    let (status, body) = json_of(
        app.get("/api/v1/agents?template_category=fun", &app.key)
            .await,
    )
    .await;
    assert_eq!(
        (status, &body["error"]["param"]),
        (400, &json!("template_category"))
    );

    let (status, _) = json_of(
        app.get(&format!("/api/v1/agents/{template_id}"), &app.key)
            .await,
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = patch(&app, &app.key, &template_id, json!({"name": "mine now"})).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "template_read_only", "{body}");
    assert_eq!(
        body["error"]["message"],
        "templates cannot be changed: duplicate the template and change the copy"
    );
    assert_eq!(
        app.delete(&format!("/api/v1/agents/{template_id}"), &app.key)
            .await
            .status(),
        404
    );

    let (status, copy) = json_of(
        app.post_json(
            &format!("/api/v1/agents/{template_id}/duplicate"),
            &app.key,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{copy}");
    let copy = &copy["agent"];
    assert_eq!(copy["name"], "Data Analyst (copy)");
    assert_eq!(copy["is_template"], false);
    assert_eq!(copy["template_category"], "analysis");
    assert_eq!(copy["tools"], json!(["generate_chart", "create_document"]));
    assert_ne!(copy["id"], template_id.as_str());
    let copy_id = copy["id"].as_str().unwrap();
    let (status, named) = json_of(
        app.post_json(
            &format!("/api/v1/agents/{copy_id}/duplicate"),
            &app.key,
            &json!({"name": "Quarterly numbers"}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, &named["agent"]["name"]),
        (201, &json!("Quarterly numbers"))
    );
    let (status, refused) = json_of(
        app.post_json(
            &format!("/api/v1/agents/{copy_id}/duplicate"),
            &app.key,
            &json!({"name": "  "}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        (&refused["error"]["param"], &refused["error"]["message"]),
        (&json!("name"), &json!("name is required"))
    );
    let (_, own) = json_of(app.get("/api/v1/agents", &app.key).await).await;
    assert_eq!(
        own["agents"].as_array().unwrap().len(),
        2,
        "copies are the org's own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_organizations_agent_is_a_404_and_the_agents_scope_is_required() {
    let app = TestApp::spawn().await;
    let (_, body) = create(
        &app,
        &app.key,
        json!({"name": "Private", "system_prompt": "x"}),
    )
    .await;
    let id = body["agent"]["id"].as_str().unwrap().to_owned();
    let other = app.create_org("Other", "pro").await;
    let other_key = app.create_key(other, &["all"], None).await;
    let (status, body) = json_of(app.get(&format!("/api/v1/agents/{id}"), &other_key).await).await;
    assert_eq!(status, 404, "{body}");
    let (status, _) = patch(&app, &other_key, &id, json!({"name": "stolen"})).await;
    assert_eq!(status, 404);
    assert_eq!(
        app.delete(&format!("/api/v1/agents/{id}"), &other_key)
            .await
            .status(),
        404
    );
    let (status, _) = json_of(
        app.post_json(
            &format!("/api/v1/agents/{id}/duplicate"),
            &other_key,
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404);
    let (_, list) = json_of(app.get("/api/v1/agents", &other_key).await).await;
    assert_eq!(list["agents"], json!([]));
    let (status, _) = json_of(app.get("/api/v1/agents/not-a-uuid", &app.key).await).await;
    assert_eq!(status, 404);

    let image_only = app.create_key(app.org_id, &["image"], None).await;
    let (status, body) = json_of(app.get("/api/v1/agents", &image_only).await).await;
    assert_eq!(status, 403);
    assert_eq!(
        body["error"]["message"],
        "API key does not have required scope: agents"
    );
    let (_, read) = json_of(app.get(&format!("/api/v1/agents/{id}"), &app.key).await).await;
    assert_eq!(
        read["agent"]["name"], "Private",
        "unchanged by the other org"
    );
}

/// The duplicate body is optional: none, `null` (what the document allows)
/// and `{}` all keep the default name.
#[tokio::test]
async fn a_duplicate_without_a_body_or_with_a_null_one_keeps_the_default_name() {
    let app = TestApp::spawn().await;
    let (status, agent) = create(
        &app,
        &app.key,
        json!({"name": "Original", "system_prompt": "Be brief."}),
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    let url = app.url(&format!(
        "/api/v1/agents/{}/duplicate",
        agent["agent"]["id"].as_str().unwrap()
    ));
    for body in ["null", " null\n", ""] {
        let response = app
            .client
            .post(&url)
            .bearer_auth(&app.key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let (status, copy) = json_of(response).await;
        assert_eq!(status, 201, "body {body:?}: {copy}");
        assert_eq!(copy["agent"]["name"], "Original (copy)", "body {body:?}");
    }
}
