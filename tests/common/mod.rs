//! Test harness: every test gets a database of its own, with the migrations in `./sql` applied.
//!
//! Why it is built this way:
//! - One server per test process, shared by all its tests: starting a cluster costs about a
//!   second, a database a few tens of milliseconds. With `DATABASE_URL` set, that server is used
//!   instead (CI with a service container, or a developer's own server) and nothing is started.
//! - Only the server's URL lives in the static, never a pool: every `#[tokio::test]` has its own
//!   runtime, and a pool's connections are tied to the runtime that opened them.
//! - The local cluster sits in a static, which is never dropped, so a watchdog stops it and
//!   removes its folder when the test process exits, however it exits.
//! - A test's database is dropped when its `TestDb` is, on a thread of its own (`Drop` cannot
//!   await, and the test's runtime may be the one being torn down); tests leave nothing behind on
//!   a shared server, and a throwaway cluster does not fill the disk during long runs.
#![allow(dead_code)] // each test file uses its own part of the harness

pub mod patroni;
pub mod pgbouncer;
pub mod python_client;
pub mod roles;
pub mod toolchain;
pub mod typescript_client;

/// What a live console polls with, every `interval`, unfiltered.
pub fn live_poll_settings(
    interval: std::time::Duration,
) -> effectwatch::console::poller::PollSettings {
    effectwatch::console::poller::PollSettings {
        settled_actions: 0,
        filter: Default::default(),
        interval,
        paused: false,
        offsets: [0; 4],
        at: None,
    }
}

/// A EUR 12.00 refund on `target`, asked by agent-1: the intent most tests write.
pub fn intent(op_key: &str, target: &str) -> effectwatch::ledger::writer::Intent {
    effectwatch::ledger::writer::Intent {
        op_key: op_key.to_string(),
        action: "refund".to_string(),
        target: target.to_string(),
        params: serde_json::json!({"amount_minor": 1200, "currency": "EUR"}),
        requested_by: "agent-1".to_string(),
        amount_minor: Some(1200),
        currency: Some("EUR".into()),
        ..Default::default()
    }
}

/// Begins `intent`, claims its dispatch and completes it with `outcome` and
/// the provider reference `ref:<key>`: an effect that went its whole way.
pub async fn settle(
    pool: &effectwatch::ledger::LedgerPool,
    intent: &effectwatch::ledger::writer::Intent,
    outcome: effectwatch::ledger::writer::Outcome,
) {
    use effectwatch::ledger::writer::{Completion, begin_effect, complete_effect, mark_dispatched};
    let key = intent.op_key.as_str();
    assert_eq!(
        begin_effect(pool, intent).await.unwrap().decision,
        effectwatch::ledger::Decision::Proceed,
        "{key}"
    );
    assert!(mark_dispatched(pool, key, None, "w").await.unwrap().claimed);
    let completion = Completion {
        external_ref: Some(format!("ref:{key}")),
        ..Completion::default()
    };
    complete_effect(pool, key, outcome, &completion)
        .await
        .unwrap();
}

use std::str::FromStr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use effectwatch::connection::url_with_database;
use effectwatch::ledger::LedgerPool;
use effectwatch::localpg::{ClusterOptions, LocalCluster};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, PgConnection};

const APPLICATION_NAME: &str = "effectwatch-test";
/// How long dropping a test database may hold up the end of a test.
const DROP_TIMEOUT: Duration = Duration::from_secs(15);

/// A fresh database for one test; dropped (best effort) when this is dropped.
pub struct TestDb {
    pub pool: LedgerPool,
    /// URL of this test's database.
    pub url: String,
    admin_url: String,
    name: String,
}

/// Creates a uniquely named database, installs the ledger as `effectwatch
/// migrate` does (migrations, then definitions) and returns a pool on it.
pub async fn test_db() -> TestDb {
    let db = empty_db().await;
    effectwatch::ledger::migrate::run(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("installing the ledger in test database {}: {e}", db.name));
    db
}

/// A uniquely named database with no ledger in it yet.
#[allow(dead_code)]
pub async fn empty_db() -> TestDb {
    let server = server();
    let name = unique_name();

    let mut admin = PgConnection::connect_with(&options(&server.admin_url))
        .await
        .unwrap_or_else(|e| panic!("connecting to the test server: {e}"));
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("creating test database {name}: {e}"));
    let _ = admin.close().await;

    let url = url_with_database(&server.admin_url, &name);
    TestDb {
        pool: PgPoolOptions::new()
            .max_connections(10)
            .connect_with(options(&url))
            .await
            .unwrap_or_else(|e| panic!("connecting to test database {name}: {e}"))
            .into(),
        url,
        admin_url: server.admin_url.clone(),
        name,
    }
}

impl TestDb {
    /// A connection of its own, outside the pool (e.g. for LISTEN or a held transaction).
    pub async fn connect(&self) -> PgConnection {
        PgConnection::connect_with(&options(&self.url))
            .await
            .unwrap_or_else(|e| panic!("connecting to test database {}: {e}", self.name))
    }

    /// Another pool on this database, with at most `max` connections.
    pub async fn pool_with(&self, max: u32) -> LedgerPool {
        PgPoolOptions::new()
            .max_connections(max)
            .connect_with(options(&self.url))
            .await
            .unwrap_or_else(|e| panic!("connecting to test database {}: {e}", self.name))
            .into()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("drop {name}"))
            .spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                let drop_db = async {
                    let mut admin = PgConnection::connect_with(&options(&admin_url)).await?;
                    // FORCE: the test's own pool may still hold connections.
                    sqlx::query(AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
                    )))
                    .execute(&mut admin)
                    .await?;
                    admin.close().await
                };
                let result =
                    runtime.block_on(async { tokio::time::timeout(DROP_TIMEOUT, drop_db).await });
                if let Ok(Err(e)) = result {
                    eprintln!("note: could not drop test database {name}: {e}");
                }
                let _ = done_tx.send(());
            });
        if spawned.is_ok() {
            let _ = done_rx.recv_timeout(DROP_TIMEOUT + Duration::from_secs(1));
        }
    }
}

struct Server {
    /// URL of the server's `postgres` database, used to create and drop test databases.
    admin_url: String,
    /// Keeps the local cluster, if we started one, for the life of the process.
    _cluster: Option<LocalCluster>,
}

/// The server of this test process, started on first use.
fn server() -> &'static Server {
    static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
    let server = SERVER.get_or_init(|| {
        if let Ok(url) = std::env::var("DATABASE_URL")
            && !url.is_empty()
        {
            return Ok(Server {
                admin_url: url_with_database(&url, "postgres"),
                _cluster: None,
            });
        }
        let cluster = LocalCluster::start(ClusterOptions {
            fast_unsafe: true,
            ..ClusterOptions::default()
        })
        .map_err(|e| format!("starting a local PostgreSQL for the tests: {e}"))?;
        cluster
            .stop_when_process_exits(std::process::id())
            .map_err(|e| e.to_string())?;
        Ok(Server {
            admin_url: cluster.url("postgres"),
            _cluster: Some(cluster),
        })
    });
    match server {
        Ok(server) => server,
        Err(e) => panic!("{e}"),
    }
}

fn options(url: &str) -> PgConnectOptions {
    PgConnectOptions::from_str(url)
        .unwrap_or_else(|e| panic!("invalid database URL: {e}"))
        .application_name(APPLICATION_NAME)
}

/// `ew_test_<pid>_<counter>_<time>`: unique within the process, across processes sharing a
/// server, and across runs that reuse a pid on a server that kept a leftover database.
fn unique_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "ew_test_{:x}_{n}_{:x}",
        std::process::id(),
        nanos & 0xffff_ffff_ffff
    )
}

/// Writes an effect the way a ledger without the visible-text rule (made by an
/// older version, or by a superuser's hand) could still hold it, control and
/// format characters in its key or target included: whoever wrote a row, the
/// console and the CLI must show it safely.
pub async fn force_effect(
    pool: &LedgerPool,
    intent: &effectwatch::ledger::writer::Intent,
) -> effectwatch::ledger::Decision {
    // The rule is the guard trigger's, through this one function: a superuser's hand lifts it
    // for the whole (throwaway) database.
    sqlx::query(
        "create or replace function ledger.has_hidden_character(value text) returns boolean
         language sql immutable parallel safe as $$ select false $$",
    )
    .execute(pool)
    .await
    .unwrap_or_else(|e| panic!("lifting the visible-text rule: {e}"));
    sqlx::query_scalar(
        "select decision from ledger.open_effect($1, $2, $3, $4, $5,
            make_interval(secs => $6::bigint), $7, $8, $9, $10, $11, $12)",
    )
    .bind(&intent.op_key)
    .bind(&intent.action)
    .bind(&intent.target)
    .bind(&intent.params)
    .bind(&intent.requested_by)
    .bind(intent.pending_window_secs)
    .bind(intent.amount_minor)
    .bind(&intent.currency)
    .bind(&intent.provider)
    .bind(&intent.approval_ref)
    .bind(intent.approval_version)
    .bind(&intent.request_id)
    .fetch_one(pool)
    .await
    .unwrap_or_else(|e| panic!("forcing effect {:?}: {e}", intent.op_key))
}

/// The real binary with `args`, as a script or a monitoring system runs it:
/// in a fresh HOME (no config of this machine's own) and without
/// DATABASE_URL, so only what `args` says reaches it.
pub fn effectwatch_cli(args: &[&str]) -> std::process::Output {
    let home = tempfile::tempdir().unwrap();
    std::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"))
        .args(args)
        .env("XDG_CONFIG_HOME", home.path())
        .env("HOME", home.path())
        .env_remove("DATABASE_URL")
        .output()
        .unwrap_or_else(|e| panic!("running effectwatch {args:?}: {e}"))
}

/// One statement on its own connection to `url`: for a server of the test's
/// own (a primary, a standby), outside any test database.
pub async fn execute(url: &str, statement: &str) {
    let mut conn = PgConnection::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    sqlx::query(AssertSqlSafe(statement.to_string()))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
}

/// A server of the test's own (its standbys are made from it) with a
/// migrated `ledger` database; returns it and that database's URL. None,
/// said on stderr, where the PostgreSQL server binaries are not installed
/// (a machine that only reaches a server through DATABASE_URL): such a test
/// is skipped there, never passed.
pub async fn primary_with_ledger() -> Option<(LocalCluster, String)> {
    let primary = match LocalCluster::start(ClusterOptions::default()) {
        Ok(primary) => primary,
        Err(effectwatch::localpg::LocalPgError::BinariesMissing) => {
            eprintln!(
                "skipped: this test starts a primary and a standby of its own, and the PostgreSQL server binaries are not installed"
            );
            return None;
        }
        Err(error) => panic!("a primary of the test's own: {error}"),
    };
    execute(&primary.url("postgres"), "create database ledger").await;
    let url = primary.url("ledger");
    let migrated = effectwatch_cli(&["migrate", "--database-url", &url]);
    assert!(migrated.status.success(), "{migrated:?}");
    Some((primary, url))
}

/// Waits until the primary at `url` sees standby `name` streaming in this
/// sync state (`async`, `sync`).
pub async fn wait_for_standby(url: &str, name: &str, sync_state: &str) {
    let started = std::time::Instant::now();
    loop {
        let mut conn = PgConnection::connect(url).await.unwrap();
        let seen: Option<String> = sqlx::query_scalar(
            "select sync_state from pg_stat_replication where application_name = $1 and state = 'streaming'",
        )
        .bind(name)
        .fetch_optional(&mut conn)
        .await
        .unwrap();
        if seen.as_deref() == Some(sync_state) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "standby {name} never became {sync_state} (last seen {seen:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Makes standby `name` the primary's synchronous one, and waits until it is.
pub async fn make_synchronous(url: &str, name: &str) {
    execute(
        url,
        &format!("alter system set synchronous_standby_names = '{name}'"),
    )
    .await;
    execute(url, "select pg_reload_conf()").await;
    wait_for_standby(url, name, "sync").await;
}

/// Moves the whole ledger `months` into the past (common/age_ledger.sql),
/// making those months' partitions first when `make_months`.
pub async fn age_ledger(pool: &LedgerPool, months: i32, make_months: bool) {
    let mut tx = pool.begin().await.unwrap();
    if make_months {
        sqlx::query(
            "select ledger.ensure_history_partitions(now() - make_interval(months => $1), now())",
        )
        .bind(months)
        .execute(&mut tx)
        .await
        .unwrap();
    }
    sqlx::query("select set_config('effectwatch_test.age_months', $1::text, true)")
        .bind(months)
        .execute(&mut tx)
        .await
        .unwrap();
    sqlx::query(include_str!("age_ledger.sql"))
        .execute(&mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}
