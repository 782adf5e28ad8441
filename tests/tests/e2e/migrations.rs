//! `migrate`: the migrations, then `migrations/functions.sql`, under an
//! advisory lock.

use unigen_tests::TestDatabase;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_migrating_at_once_both_succeed_and_the_functions_are_current() {
    let db = TestDatabase::empty().await.unwrap();
    let (first, second) = tokio::join!(
        unigen_db::run_migrations(&db.url),
        unigen_db::run_migrations(&db.url)
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    assert!(
        first.is_empty() != second.is_empty(),
        "one run applied every migration, the other found none pending: {first:?} / {second:?}"
    );
    let function_count = |name: &'static str| {
        let db = &db;
        async move {
            db.scalar_i64(&format!(
                "SELECT count(*) FROM pg_proc WHERE proname = '{name}'"
            ))
            .await
        }
    };
    assert_eq!(
        function_count("unigen_admit").await,
        1,
        "functions.sql applied"
    );
    assert_eq!(
        function_count("unigen_take_rate_token").await,
        0,
        "dead function dropped"
    );
    // Applying it again changes nothing and fails nothing.
    assert!(unigen_db::run_migrations(&db.url).await.unwrap().is_empty());
    assert_eq!(function_count("unigen_admit").await, 1);
}

/// The keys API's migration gives the new `keys` scope to keys stored with
/// every scope (how `all` was saved before it), and to no other key: run
/// from the schema as it was before it (the later migrations and it rolled
/// back with their down.sql).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_stored_with_every_earlier_scope_gain_the_keys_scope_and_others_do_not() {
    let db = TestDatabase::empty().await.unwrap();
    unigen_db::run_migrations(&db.url).await.unwrap();
    let client = db.client().await;
    let newest_first = [
        (
            "20261127130000",
            include_str!("../../../migrations/2026-11-27-130000_idempotency_keys/down.sql"),
        ),
        (
            "20261127120000",
            include_str!("../../../migrations/2026-11-27-120000_job_cancel_after/down.sql"),
        ),
        (
            "20261127110000",
            include_str!("../../../migrations/2026-11-27-110000_keys_api/down.sql"),
        ),
    ];
    for (version, down) in newest_first {
        client.batch_execute(down).await.unwrap();
        let removed = client
            .execute(
                "DELETE FROM __diesel_schema_migrations WHERE version = $1",
                &[&version],
            )
            .await
            .unwrap();
        assert_eq!(removed, 1, "migration {version} was applied");
    }
    client
        .batch_execute(
            "INSERT INTO organizations (id, name, plan_code)
                 VALUES ('00000000-0000-7000-8000-0000000000aa', 'Old', 'pro');
             INSERT INTO api_keys (id, org_id, name, key_hash, key_prefix, scopes) VALUES
               ('00000000-0000-7000-8000-0000000000a1', '00000000-0000-7000-8000-0000000000aa',
                'all', sha256('a'::bytea), 'sk_aaaaaa',
                ARRAY['chat','image','image_edit','video','music','tts','stt','usage','jobs','agents','webhooks']),
               ('00000000-0000-7000-8000-0000000000a2', '00000000-0000-7000-8000-0000000000aa',
                'some', sha256('b'::bytea), 'sk_bbbbbb', ARRAY['chat','image']);",
        )
        .await
        .unwrap();

    let applied = unigen_db::run_migrations(&db.url).await.unwrap();
    assert_eq!(applied.len(), 3, "{applied:?}");
    let scopes = |name: &'static str| {
        let client = &client;
        async move {
            let row = client
                .query_one("SELECT scopes FROM api_keys WHERE name = $1", &[&name])
                .await
                .unwrap();
            row.get::<_, Vec<String>>(0)
        }
    };
    assert!(scopes("all").await.contains(&"keys".to_owned()));
    assert_eq!(scopes("some").await, ["chat", "image"]);
}

/// The worker's pool plans its prepared statements once (`Planning::Generic`);
/// every other pool leaves the choice to PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generic_planning_pool_sets_plan_cache_mode_on_every_connection() {
    use diesel_async::RunQueryDsl;
    use unigen_core::config::DatabaseSettings;
    use unigen_db::Planning;

    #[derive(diesel::QueryableByName)]
    struct Mode {
        #[diesel(sql_type = diesel::sql_types::Text)]
        plan_cache_mode: String,
    }
    let db = TestDatabase::empty().await.unwrap();
    let settings = DatabaseSettings {
        url: db.url.clone(),
        pool_size: 2,
        connect_timeout_ms: 5_000,
    };
    for (planning, expected) in [
        (Planning::Generic, "force_generic_plan"),
        (Planning::Default, "auto"),
    ] {
        let pool = unigen_db::build_pool_planning(&settings, planning).unwrap();
        // Both connections of the pool, held at once.
        let (mut first, mut second) = (pool.get().await.unwrap(), pool.get().await.unwrap());
        for conn in [&mut first, &mut second] {
            let mode: Mode = diesel::sql_query("SHOW plan_cache_mode")
                .get_result(&mut **conn)
                .await
                .unwrap();
            assert_eq!(mode.plan_cache_mode, expected, "{planning:?}");
        }
    }
}
