//! Per-test databases cloned from a template migrated once per migration set.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use diesel_async::{AsyncConnection, AsyncPgConnection};
use sha2::{Digest, Sha256};
use tokio_postgres::NoTls;

use crate::env::postgres_admin_url;

/// Any advisory lock id, shared by every test process.
const TEMPLATE_LOCK: i64 = 0x756e_6967_656e;
/// Databases of crashed runs older than this are dropped.
const STALE_AFTER: Duration = Duration::from_secs(3600);

pub struct TestDatabase {
    pub name: String,
    pub url: String,
    admin_url: String,
}

fn url_for(admin_url: &str, name: &str) -> String {
    let base = admin_url
        .rsplit_once('/')
        .map_or(admin_url, |(base, _)| base);
    format!("{base}/{name}")
}

async fn admin_client(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// The template's name changes whenever a migration does.
fn template_name() -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    let mut entries: Vec<_> = walk(&dir);
    entries.sort();
    let mut hasher = Sha256::new();
    for path in entries {
        hasher.update(path.to_string_lossy().as_bytes());
        hasher.update(std::fs::read(&path).unwrap_or_default());
    }
    format!("unigen_tpl_{}", &hex::encode(hasher.finalize())[..16])
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path))
        } else {
            out.push(path)
        }
    }
    out
}

impl TestDatabase {
    pub async fn create() -> anyhow::Result<Self> {
        let admin_url = postgres_admin_url();
        let admin = admin_client(&admin_url).await?;
        let template = template_name();
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
        let name = format!(
            "unigen_t_{now}_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..10]
        );

        admin
            .execute("SELECT pg_advisory_lock($1)", &[&TEMPLATE_LOCK])
            .await?;
        let result = async {
            let exists = admin
                .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&template])
                .await?
                .is_some();
            if !exists {
                // Migrate under a temporary name, then rename: a crash never
                // leaves a half-migrated template behind.
                let building = format!("{template}_building");
                admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)"))
                    .await?;
                admin
                    .batch_execute(&format!("CREATE DATABASE {building}"))
                    .await?;
                migrate(url_for(&admin_url, &building)).await?;
                admin
                    .batch_execute(&format!("ALTER DATABASE {building} RENAME TO {template}"))
                    .await?;
            }
            admin
                .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
                .await?;
            drop_stale(&admin, now).await;
            anyhow::Ok(())
        }
        .await;
        admin
            .execute("SELECT pg_advisory_unlock($1)", &[&TEMPLATE_LOCK])
            .await?;
        result?;
        let url = url_for(&admin_url, &name);
        Ok(Self {
            name,
            url,
            admin_url,
        })
    }

    /// A database with nothing in it (not even the migrations): for tests
    /// of `migrate` itself.
    pub async fn empty() -> anyhow::Result<Self> {
        let admin_url = postgres_admin_url();
        let admin = admin_client(&admin_url).await?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
        let name = format!(
            "unigen_t_{now}_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..10]
        );
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await?;
        let url = url_for(&admin_url, &name);
        Ok(Self {
            name,
            url,
            admin_url,
        })
    }

    pub async fn connect(&self) -> AsyncPgConnection {
        AsyncPgConnection::establish(&self.url)
            .await
            .expect("connecting to the test database")
    }

    /// A raw client for assertions and fixtures.
    pub async fn client(&self) -> tokio_postgres::Client {
        admin_client(&self.url)
            .await
            .expect("connecting to the test database")
    }

    pub async fn scalar_i64(&self, sql: &str) -> i64 {
        self.client()
            .await
            .query_one(sql, &[])
            .await
            .expect("query")
            .get(0)
    }

    /// Polls `sql` until it answers `want`; fails the test (saying `what`
    /// and the last answer) after `timeout`.
    pub async fn wait_for_scalar(
        &self,
        sql: &str,
        want: i64,
        timeout: std::time::Duration,
        what: &str,
    ) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let got = self.scalar_i64(sql).await;
            if got == want {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: `{sql}` is {got}, never became {want}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

async fn drop_stale(admin: &tokio_postgres::Client, now: u64) {
    let Ok(rows) = admin
        .query(
            "SELECT datname FROM pg_database WHERE datname LIKE 'unigen_t_%'",
            &[],
        )
        .await
    else {
        return;
    };
    for row in rows {
        let name: String = row.get(0);
        let created = name
            .split('_')
            .nth(2)
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(now);
        if now.saturating_sub(created) > STALE_AFTER.as_secs() {
            let _ = admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await;
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // Drop runs inside the test's runtime: use a thread with its own.
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let admin = admin_client(&admin_url).await.ok()?;
                admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
                    .ok()
            })
        })
        .join();
    }
}

/// Runs the migrations on a runtime of their own: diesel's migration harness
/// blocks in place, which a test on a current-thread runtime (the first to
/// need the template) would otherwise panic at.
async fn migrate(url: String) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let migrating = runtime.spawn(async move { unigen_db::run_migrations(&url).await });
        runtime.block_on(migrating)??;
        anyhow::Ok(())
    })
    .await?
}
