//! PostgreSQL access: the pool, embedded migrations, row types and one query
//! module per aggregate, LISTEN/NOTIFY, the billing rules and the event
//! outbox. Query functions take `&mut AsyncPgConnection` so they
//! compose inside transactions.

pub mod billing;
pub mod events;
pub mod models;
pub mod notify;
pub mod prepared;
pub mod queries;
pub mod schema;

use std::time::Duration;

use diesel_async::pooled_connection::deadpool::{BuildError, Pool, PoolError};
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::{AsyncConnection, AsyncMigrationHarness, AsyncPgConnection};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use unigen_core::config::DatabaseSettings;

pub use diesel_async::AsyncPgConnection as PgConnection;

pub type PgPool = Pool<AsyncPgConnection>;
pub type PooledConnection = diesel_async::pooled_connection::deadpool::Object<AsyncPgConnection>;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations");

/// Every SQL function of the schema in its current version, applied after
/// the migrations (`CREATE OR REPLACE`).
pub const FUNCTIONS: &str = include_str!("../../../migrations/functions.sql");

/// The advisory lock `migrate` holds in the migrated database: "unigenm" in
/// ASCII.
const MIGRATION_LOCK: i64 = 0x0075_6e69_6765_6e6d;

/// Errors of the data layer, classified once for every caller.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database unavailable: {0}")]
    Unavailable(#[from] PoolError),
    /// The connection died under a query (network cut, server restart): the
    /// database is unreachable for now, not the query wrong.
    #[error("database connection lost: {0}")]
    ConnectionLost(diesel::result::Error),
    #[error("query failed: {0}")]
    Query(diesel::result::Error),
}

impl From<diesel::result::Error> for DbError {
    fn from(err: diesel::result::Error) -> Self {
        use diesel::result::{DatabaseErrorKind, Error};
        match &err {
            // diesel-async reports a dead socket or connection task this way.
            Error::DatabaseError(
                DatabaseErrorKind::UnableToSendCommand | DatabaseErrorKind::ClosedConnection,
                _,
            ) => DbError::ConnectionLost(err),
            // The server is shutting down or restarting (SQLSTATE class 57P).
            Error::DatabaseError(_, info) if is_server_shutdown(info.message()) => {
                DbError::ConnectionLost(err)
            }
            _ => DbError::Query(err),
        }
    }
}

fn is_server_shutdown(message: &str) -> bool {
    message.starts_with("terminating connection")
        || message.contains("the database system is shutting down")
        || message.contains("the database system is starting up")
}

impl DbError {
    pub fn is_unique_violation(&self) -> bool {
        matches!(
            self,
            DbError::Query(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::UniqueViolation,
                _
            ))
        )
    }
}

/// Builds the connection pool. Connections are opened lazily, so this
/// succeeds while the database is down; requests then fail with 503.
pub fn build_pool(settings: &DatabaseSettings) -> Result<PgPool, BuildError> {
    build_pool_planning(settings, Planning::Default)
}

/// How a pool's connections plan their prepared statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planning {
    /// PostgreSQL's own choice (`plan_cache_mode = auto`).
    Default,
    /// One generic plan per prepared statement (`force_generic_plan`).
    /// PostgreSQL otherwise re-plans every call of a statement taking an
    /// array (it guesses the generic plan dearer): 0.3 to 0.8 ms per call
    /// of the worker's claim and completion. Only for a pool whose
    /// statements are known to plan well generically: the setting also
    /// reaches the statements inside plpgsql functions.
    Generic,
}

/// [`build_pool`] with the given planning.
pub fn build_pool_planning(
    settings: &DatabaseSettings,
    planning: Planning,
) -> Result<PgPool, BuildError> {
    let mut config = ManagerConfig::default();
    // A broken connection is detected without a round trip; `Verified` would
    // add a `SELECT 1` to every checkout.
    config.recycling_method = RecyclingMethod::Fast;
    if planning == Planning::Generic {
        config.custom_setup = Box::new(|url| {
            Box::pin(async move {
                use diesel_async::SimpleAsyncConnection;
                let mut conn = AsyncPgConnection::establish(url).await?;
                conn.batch_execute("SET plan_cache_mode = force_generic_plan")
                    .await
                    .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
                Ok(conn)
            })
        });
    }
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(
        settings.url.clone(),
        config,
    );
    let timeout = Duration::from_millis(settings.connect_timeout_ms);
    Pool::builder(manager)
        .max_size(settings.pool_size)
        .runtime(deadpool::Runtime::Tokio1)
        .wait_timeout(Some(timeout))
        .create_timeout(Some(timeout))
        .recycle_timeout(Some(timeout))
        .build()
}

/// Applies pending migrations, then [`FUNCTIONS`], under an advisory lock so
/// that processes starting together never race. Needs a multi-threaded
/// tokio runtime.
pub async fn run_migrations(database_url: &str) -> anyhow::Result<Vec<String>> {
    use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
    // Held on a connection of its own for the whole run: a second process
    // starting at the same moment waits, then finds nothing pending.
    let mut lock = AsyncPgConnection::establish(database_url).await?;
    diesel::sql_query("SELECT pg_advisory_lock($1)")
        .bind::<diesel::sql_types::BigInt, _>(MIGRATION_LOCK)
        .execute(&mut lock)
        .await?;
    let result = async {
        let connection = AsyncPgConnection::establish(database_url).await?;
        let mut harness = AsyncMigrationHarness::new(connection);
        let applied = harness
            .run_pending_migrations(MIGRATIONS)
            .map_err(|e| anyhow::anyhow!("migration failed: {e}"))?
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>();
        lock.batch_execute(FUNCTIONS)
            .await
            .map_err(|e| anyhow::anyhow!("applying migrations/functions.sql failed: {e}"))?;
        Ok(applied)
    }
    .await;
    // Also released when the connection closes.
    let _ = diesel::sql_query("SELECT pg_advisory_unlock($1)")
        .bind::<diesel::sql_types::BigInt, _>(MIGRATION_LOCK)
        .execute(&mut lock)
        .await;
    result
}
