//! Where the test servers are: the machine's own, unless the environment
//! names others.

pub const POSTGRES_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// The PostgreSQL server's admin URL (`UNIGEN_TEST_DATABASE_URL`).
pub(crate) fn postgres_admin_url() -> String {
    env_or("UNIGEN_TEST_DATABASE_URL", POSTGRES_ADMIN_URL)
}

/// The RabbitMQ URL (`UNIGEN_TEST_AMQP_URL`).
pub(crate) fn amqp_url() -> String {
    env_or("UNIGEN_TEST_AMQP_URL", DEFAULT_AMQP_URL)
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}
