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
