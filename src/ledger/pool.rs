//! The pool every part of effectwatch reaches the ledger through.
//!
//! Behind a transaction pooler (PgBouncer with `pool_mode = transaction`) a
//! server connection is ours only until the transaction ends. Two things the
//! driver does by default then break: a statement prepared under a name stays
//! on a server the next client gets (`prepared statement "sqlx_s_1" already
//! exists`), and a statement parsed in one round trip and bound in the next
//! may meet another server in between. So there every statement runs unnamed,
//! inside a transaction, and the statement timeout is set per transaction,
//! since such a pooler refuses it as a startup option.

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use sqlx::postgres::{PgArguments, PgListener, PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{
    Acquire, AssertSqlSafe, Either, Execute, Executor, PgPool, Postgres, SqlSafeStr, SqlStr,
    Transaction, error::BoxDynError,
};

/// What stands between effectwatch and the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooler {
    /// The server itself, or a pooler that keeps a client's server for the
    /// whole session.
    None,
    /// A pooler that hands the server to another client after each transaction.
    Transaction,
}

impl Pooler {
    pub fn as_str(self) -> &'static str {
        match self {
            Pooler::None => "none",
            Pooler::Transaction => "transaction",
        }
    }
}

#[derive(Debug, Clone)]
pub struct LedgerPool {
    pool: PgPool,
    pooler: Pooler,
    /// How a transaction starts behind a transaction pooler: with the
    /// statement timeout the startup options could not carry.
    begin: SqlStr,
}

impl LedgerPool {
    pub(crate) fn new(pool: PgPool, pooler: Pooler, statement_timeout_ms: u128) -> Self {
        let begin = format!("begin; set local statement_timeout = {statement_timeout_ms}");
        LedgerPool {
            pool,
            pooler,
            begin: AssertSqlSafe(begin).into_sql_str(),
        }
    }

    pub fn pooler(&self) -> Pooler {
        self.pooler
    }

    /// A transaction whose statements are safe behind this pool's pooler.
    pub async fn begin(&self) -> Result<LedgerTransaction<'static>, sqlx::Error> {
        let tx = match self.pooler {
            Pooler::None => self.pool.begin().await?,
            Pooler::Transaction => self.pool.begin_with(self.begin.clone()).await?,
        };
        Ok(LedgerTransaction {
            tx,
            pooler: self.pooler,
        })
    }

    /// A connection of its own that LISTENs. Behind a transaction pooler it
    /// connects, but the pooler drops the subscription with the transaction:
    /// whoever listens must find out whether notifications arrive.
    pub async fn listener(&self) -> Result<PgListener, sqlx::Error> {
        PgListener::connect_with(&self.pool).await
    }

    pub async fn close(&self) {
        self.pool.close().await
    }

    /// The driver's pool, for what must hold one server connection for a
    /// whole session (migrations take a session-level lock).
    pub fn session_pool(&self) -> &PgPool {
        &self.pool
    }
}

/// A pool straight to the server, as tests and the demo's own cluster have.
impl From<PgPool> for LedgerPool {
    fn from(pool: PgPool) -> Self {
        LedgerPool::new(pool, Pooler::None, 0)
    }
}

/// A transaction on a [`LedgerPool`]; pass `&mut tx` where an executor is asked for.
#[derive(Debug)]
pub struct LedgerTransaction<'c> {
    tx: Transaction<'c, Postgres>,
    pooler: Pooler,
}

impl LedgerTransaction<'_> {
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }

    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.tx.rollback().await
    }

    /// A savepoint inside this transaction.
    pub async fn begin(&mut self) -> Result<LedgerTransaction<'_>, sqlx::Error> {
        Ok(LedgerTransaction {
            tx: Acquire::begin(&mut *self.tx).await?,
            pooler: self.pooler,
        })
    }
}

/// A query as this pool must send it: unnamed behind a transaction pooler.
struct AsPooled<E> {
    query: E,
    named: bool,
}

impl<E> AsPooled<E> {
    fn new<'q>(query: E, pooler: Pooler) -> Self
    where
        E: Execute<'q, Postgres>,
    {
        let named = query.persistent() && pooler == Pooler::None;
        AsPooled { query, named }
    }
}

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for AsPooled<E> {
    fn sql(self) -> SqlStr {
        self.query.sql()
    }

    fn statement(&self) -> Option<&PgStatement> {
        // A statement prepared earlier lives on one server only.
        if self.named {
            self.query.statement()
        } else {
            None
        }
    }

    fn take_arguments(&mut self) -> Result<Option<PgArguments>, BoxDynError> {
        self.query.take_arguments()
    }

    fn persistent(&self) -> bool {
        self.named
    }
}

type Step = Either<PgQueryResult, PgRow>;

impl<'p> Executor<'p> for &'p LedgerPool {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Step, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.pooler {
            Pooler::None => self.pool.fetch_many(query),
            // Collected before the commit: the stream may only end once the
            // transaction has, or a pooled server would stay ours.
            Pooler::Transaction => futures_util::stream::once(async move {
                let mut tx = self.begin().await?;
                let steps: Vec<Step> = (&mut tx).fetch_many(query).try_collect().await?;
                tx.commit().await?;
                Ok::<_, sqlx::Error>(futures_util::stream::iter(steps.into_iter().map(Ok)))
            })
            .try_flatten()
            .boxed(),
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.pooler {
            Pooler::None => self.pool.fetch_optional(query),
            Pooler::Transaction => Box::pin(async move {
                let mut tx = self.begin().await?;
                let row = (&mut tx).fetch_optional(query).await?;
                tx.commit().await?;
                Ok(row)
            }),
        }
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e>(
        self,
        sql: SqlStr,
    ) -> BoxFuture<'e, Result<sqlx::Describe<Postgres>, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.describe(sql)
    }
}

impl<'t, 'c> Executor<'t> for &'t mut LedgerTransaction<'c> {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Step, sqlx::Error>>
    where
        't: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let query = AsPooled::new(query, self.pooler);
        (&mut *self.tx).fetch_many(query)
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        't: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let query = AsPooled::new(query, self.pooler);
        (&mut *self.tx).fetch_optional(query)
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement, sqlx::Error>>
    where
        't: 'e,
    {
        (&mut *self.tx).prepare_with(sql, parameters)
    }

    fn describe<'e>(
        self,
        sql: SqlStr,
    ) -> BoxFuture<'e, Result<sqlx::Describe<Postgres>, sqlx::Error>>
    where
        't: 'e,
    {
        (&mut *self.tx).describe(sql)
    }
}
