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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt, TryFutureExt, TryStreamExt};
use sqlx::postgres::{PgArguments, PgListener, PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{
    Acquire, AssertSqlSafe, Either, Execute, Executor, PgPool, Postgres, SqlSafeStr, SqlStr,
    Transaction, error::BoxDynError,
};

use super::target::{ConnectSettings, Hosts, Pooler, find_server, server_name};

/// A pool on the ledger. Cloning it shares it. Made from several hosts, it
/// follows the primary: an error that says the server went away (or stopped
/// taking writes) makes the next call look for the primary among the hosts
/// again, and switch to it, so a console, a settler or a reconciler that
/// holds one pool for its whole life carries on after a failover.
#[derive(Debug, Clone)]
pub struct LedgerPool {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    current: RwLock<Current>,
    statement_timeout_ms: u128,
    following: Option<Following>,
}

/// The server a pool uses now.
#[derive(Debug, Clone)]
struct Current {
    pool: PgPool,
    pooler: Pooler,
    /// How a transaction starts behind a transaction pooler: with the
    /// statement timeout the startup options could not carry.
    begin: SqlStr,
    server: String,
}

/// How a pool made from several hosts finds the primary again.
#[derive(Debug)]
struct Following {
    settings: ConnectSettings,
    hosts: Hosts,
    /// Set by an error that may mean the primary moved; cleared once it is found.
    suspect: AtomicBool,
    /// One search at a time; the other callers wait for its answer. It
    /// holds when the last search found no primary, and why.
    searching: tokio::sync::Mutex<Option<(std::time::Instant, String)>>,
    switches: AtomicU64,
}

impl Current {
    fn new(pool: PgPool, pooler: Pooler, statement_timeout_ms: u128, server: String) -> Current {
        let begin = format!("begin; set local statement_timeout = {statement_timeout_ms}");
        Current {
            pool,
            pooler,
            begin: AssertSqlSafe(begin).into_sql_str(),
            server,
        }
    }
}

impl LedgerPool {
    pub(crate) fn new(
        pool: PgPool,
        pooler: Pooler,
        statement_timeout_ms: u128,
        server: String,
        following: Option<(ConnectSettings, Hosts)>,
    ) -> Self {
        LedgerPool {
            shared: Arc::new(Shared {
                current: RwLock::new(Current::new(pool, pooler, statement_timeout_ms, server)),
                statement_timeout_ms,
                following: following.map(|(settings, hosts)| Following {
                    settings,
                    hosts,
                    suspect: AtomicBool::new(false),
                    searching: tokio::sync::Mutex::new(None),
                    switches: AtomicU64::new(0),
                }),
            }),
        }
    }

    fn current(&self) -> Current {
        self.shared
            .current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub fn pooler(&self) -> Pooler {
        self.current().pooler
    }

    /// `host:port/database` of the server in use now.
    pub fn server(&self) -> String {
        self.current().server
    }

    /// Whether this pool was made from several hosts and follows the primary.
    pub fn follows(&self) -> bool {
        self.shared.following.is_some()
    }

    /// How many times the pool has moved to another server.
    pub fn switches(&self) -> u64 {
        self.shared
            .following
            .as_ref()
            .map_or(0, |following| following.switches.load(Ordering::Relaxed))
    }

    /// The next call looks for the primary first.
    pub(crate) fn suspect(&self) {
        if let Some(following) = &self.shared.following {
            following.suspect.store(true, Ordering::Relaxed);
        }
    }

    /// Takes note of an error: one that may mean the primary moved makes
    /// the next call look for it.
    fn note(&self, error: &sqlx::Error) {
        if self.shared.following.is_some() && may_mean_the_primary_moved(error) {
            self.suspect();
        }
    }

    /// The server to use now: the same one, unless an error made it suspect;
    /// then the primary among the hosts, switched to if it is another. When
    /// no host is the primary the call fails saying so; callers meanwhile
    /// get that answer for a moment rather than each searching again.
    async fn ready(&self) -> Result<Current, sqlx::Error> {
        let Some(following) = &self.shared.following else {
            return Ok(self.current());
        };
        if !following.suspect.load(Ordering::Relaxed) {
            return Ok(self.current());
        }
        let mut last_failure = following.searching.lock().await;
        if !following.suspect.load(Ordering::Relaxed) {
            return Ok(self.current());
        }
        if let Some((at, why)) = last_failure.as_ref()
            && at.elapsed() < SEARCH_PAUSE
        {
            return Err(no_primary(why));
        }
        let found = match find_server(&following.settings, &following.hosts).await {
            Ok(found) => found,
            Err(error) => {
                let why = error.to_string();
                *last_failure = Some((std::time::Instant::now(), why.clone()));
                return Err(no_primary(&why));
            }
        };
        *last_failure = None;
        let server = server_name(&found.url);
        let before = self.current();
        if server != before.server || found.pooler != before.pooler {
            let pool = following
                .settings
                .pool(&found.url, found.pooler)
                .map_err(|error| no_primary(&error.to_string()))?;
            let now = Current::new(pool, found.pooler, self.shared.statement_timeout_ms, server);
            *self
                .shared
                .current
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = now;
            // The old pool is dropped, not closed: calls still holding it
            // finish (or fail) on their own, and its connections go with it.
            if self.server() != before.server {
                following.switches.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "the ledger's primary is now {} (was {})",
                    self.server(),
                    before.server
                );
            }
        }
        following.suspect.store(false, Ordering::Relaxed);
        Ok(self.current())
    }

    /// A transaction whose statements are safe behind this pool's pooler.
    pub async fn begin(&self) -> Result<LedgerTransaction<'static>, sqlx::Error> {
        let current = self.ready().await?;
        let tx = match current.pooler {
            Pooler::None => current.pool.begin().await,
            Pooler::Transaction => current.pool.begin_with(current.begin.clone()).await,
        }
        .inspect_err(|error| self.note(error))?;
        Ok(LedgerTransaction {
            tx,
            pooler: current.pooler,
            pool: self.clone(),
        })
    }

    /// A connection of its own that LISTENs. Behind a transaction pooler it
    /// connects, but the pooler drops the subscription with the transaction:
    /// whoever listens must find out whether notifications arrive.
    pub async fn listener(&self) -> Result<PgListener, sqlx::Error> {
        let current = self.ready().await?;
        PgListener::connect_with(&current.pool)
            .await
            .inspect_err(|error| self.note(error))
    }

    pub async fn close(&self) {
        self.current().pool.close().await
    }

    /// The driver's pool, for what must hold one server connection for a
    /// whole session (migrations take a session-level lock).
    pub fn session_pool(&self) -> PgPool {
        self.current().pool
    }
}

/// How long a search that found no primary answers for the callers after it.
const SEARCH_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

fn no_primary(why: &str) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        why.to_string(),
    ))
}

/// An error after which the primary may be elsewhere: the connection or the
/// server went away, or the server no longer takes writes (a demoted
/// primary answers as a standby).
fn may_mean_the_primary_moved(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(database) => database.code().is_some_and(|code| {
            code.starts_with("08") || matches!(code.as_ref(), "25006" | "57P01" | "57P02" | "57P03")
        }),
        _ => false,
    }
}

/// A pool straight to the server, as tests and the demo's own cluster have.
impl From<PgPool> for LedgerPool {
    fn from(pool: PgPool) -> Self {
        LedgerPool::new(pool, Pooler::None, 0, String::new(), None)
    }
}

/// A transaction on a [`LedgerPool`]; pass `&mut tx` where an executor is asked for.
#[derive(Debug)]
pub struct LedgerTransaction<'c> {
    tx: Transaction<'c, Postgres>,
    pooler: Pooler,
    /// Told of errors that may mean the primary moved.
    pool: LedgerPool,
}

impl LedgerTransaction<'_> {
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        let pool = self.pool.clone();
        self.tx.commit().await.inspect_err(|error| pool.note(error))
    }

    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.tx.rollback().await
    }

    /// A savepoint inside this transaction.
    pub async fn begin(&mut self) -> Result<LedgerTransaction<'_>, sqlx::Error> {
        Ok(LedgerTransaction {
            tx: Acquire::begin(&mut *self.tx).await?,
            pooler: self.pooler,
            pool: self.pool.clone(),
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

    // Collected before it is handed on: a pool that follows the primary
    // holds its server behind a lock, which a stream cannot borrow; behind a
    // transaction pooler the stream may only end once the transaction has,
    // or a pooled server would stay ours.
    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Step, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        futures_util::stream::once(async move {
            let current = self.ready().await?;
            let steps: Result<Vec<Step>, sqlx::Error> = match current.pooler {
                Pooler::None => current.pool.fetch_many(query).try_collect().await,
                Pooler::Transaction => {
                    async {
                        let mut tx = self.begin().await?;
                        let steps: Vec<Step> = (&mut tx).fetch_many(query).try_collect().await?;
                        tx.commit().await?;
                        Ok(steps)
                    }
                    .await
                }
            };
            let steps = steps.inspect_err(|error| self.note(error))?;
            Ok::<_, sqlx::Error>(futures_util::stream::iter(steps.into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        Box::pin(async move {
            let current = self.ready().await?;
            let row = match current.pooler {
                Pooler::None => current.pool.fetch_optional(query).await,
                Pooler::Transaction => {
                    async {
                        let mut tx = self.begin().await?;
                        let row = (&mut tx).fetch_optional(query).await?;
                        tx.commit().await?;
                        Ok(row)
                    }
                    .await
                }
            };
            row.inspect_err(|error| self.note(error))
        })
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement, sqlx::Error>>
    where
        'p: 'e,
    {
        Box::pin(async move {
            let pool = self.ready().await?.pool;
            pool.prepare_with(sql, parameters).await
        })
    }

    fn describe<'e>(
        self,
        sql: SqlStr,
    ) -> BoxFuture<'e, Result<sqlx::Describe<Postgres>, sqlx::Error>>
    where
        'p: 'e,
    {
        Box::pin(async move {
            let pool = self.ready().await?.pool;
            pool.describe(sql).await
        })
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
        let pool = self.pool.clone();
        (&mut *self.tx)
            .fetch_many(query)
            .inspect_err(move |error| pool.note(error))
            .boxed()
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
        let pool = self.pool.clone();
        (&mut *self.tx)
            .fetch_optional(query)
            .inspect_err(move |error| pool.note(error))
            .boxed()
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
