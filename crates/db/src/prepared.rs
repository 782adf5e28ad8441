//! Raw statements prepared once per connection.
//!
//! diesel never caches a `sql_query`: its text could be built at run time,
//! so every call parses and plans it again (PostgreSQL's log: 0.1 to 0.8 ms
//! of parse and bind per statement on the job path, and one more round
//! trip). [`Prepared`] marks a raw statement whose text is a constant, and
//! the connection's statement cache then keeps it, keyed by its text and
//! bind types, like the statements diesel builds itself.
//!
//! Only for constant text (never `format!`), and never with `*` in what the
//! statement returns: a prepared statement whose result columns change
//! under it (a migration adding a column while the process runs) fails
//! with "cached plan must not change result type".

use diesel::QueryResult;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};

/// A raw statement of constant text; see the module's documentation.
#[derive(Debug, Clone, Copy)]
pub struct Prepared<Q>(Q);

/// `.prepared()` on raw statements.
pub trait PrepareOnce: Sized {
    /// Keeps this statement prepared on the connection that runs it. Its SQL
    /// text must be a constant and return no `*`.
    fn prepared(self) -> Prepared<Self> {
        Prepared(self)
    }
}

impl<Q: QueryFragment<Pg>> PrepareOnce for Q {}

impl<Q: QueryFragment<Pg>> QueryFragment<Pg> for Prepared<Q> {
    fn walk_ast<'b>(&'b self, pass: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        self.0.walk_ast(pass)
    }

    // The inner `sql_query` reports itself unsafe to cache because its text
    // could vary; this wrapper's contract is that it does not.
    fn is_safe_to_cache_prepared(&self, _backend: &Pg) -> QueryResult<bool> {
        Ok(true)
    }
}

impl<Q> QueryId for Prepared<Q> {
    type QueryId = ();
    // No type identifies the text: the cache keys it by text and bind types.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q: Query> Query for Prepared<Q> {
    type SqlType = Q::SqlType;
}
