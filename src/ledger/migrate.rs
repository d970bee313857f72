//! Installs or upgrades the ledger schema from the migrations in `sql/`,
//! compiled into the binary so a deployed console needs no source tree.
//!
//! The schema has released versions: each names the last migration it
//! holds. A released migration is never edited again (a test pins its
//! text); a change is a new migration, so a ledger of any released version
//! upgrades in place, all pending migrations in one transaction.

use super::LedgerPool;
use sqlx::migrate::Migrator;

use super::LedgerError;

pub static MIGRATOR: Migrator = sqlx::migrate!("./sql");

/// Released schema versions, oldest first: (version, its last migration).
pub const RELEASED: &[(u32, i64)] = &[(1, 18)];

/// A ledger's (or this binary's) schema: the last released version its
/// migrations hold, and the migrations beyond it, not yet released.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SchemaVersion {
    pub released: u32,
    pub unreleased: Vec<i64>,
}

impl SchemaVersion {
    pub fn of(migrations: &[i64]) -> SchemaVersion {
        let last = migrations.iter().copied().max().unwrap_or(0);
        let (released, covered) = RELEASED
            .iter()
            .rev()
            .find(|(_, through)| *through <= last)
            .copied()
            .unwrap_or((0, 0));
        let mut unreleased: Vec<i64> = migrations
            .iter()
            .copied()
            .filter(|version| *version > covered)
            .collect();
        unreleased.sort_unstable();
        SchemaVersion {
            released,
            unreleased,
        }
    }

    /// The schema these migrations, compiled into this binary, make.
    pub fn of_binary() -> SchemaVersion {
        let versions: Vec<i64> = MIGRATOR.iter().map(|migration| migration.version).collect();
        SchemaVersion::of(&versions)
    }
}

impl std::fmt::Display for SchemaVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.released, self.unreleased.as_slice()) {
            (0, []) => write!(f, "none"),
            (0, more) => write!(f, "unreleased ({} migrations)", more.len()),
            (version, []) => write!(f, "{version}"),
            (version, more) => write!(
                f,
                "{version} + {} ({})",
                crate::format::count_of(
                    more.len(),
                    "unreleased migration",
                    "unreleased migrations"
                ),
                more.iter()
                    .map(|v| format!("{v:04}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// The ledger's schema, or `None` when none is installed.
pub async fn ledger_schema(pool: &LedgerPool) -> Result<Option<SchemaVersion>, LedgerError> {
    let applied = applied_migrations(pool).await?;
    if applied.is_empty() {
        return Ok(None);
    }
    let versions: Vec<i64> = applied.iter().map(|(version, _)| *version).collect();
    Ok(Some(SchemaVersion::of(&versions)))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    pub applied: Vec<String>,
    pub already: usize,
}

/// Creates the database `name` on the cluster `admin` is connected to,
/// unless it exists; says whether it made it.
pub async fn create_database_if_missing(
    admin: &LedgerPool,
    name: &str,
) -> Result<bool, LedgerError> {
    let exists: bool =
        sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
            .bind(name)
            .fetch_one(admin)
            .await?;
    if exists {
        return Ok(false);
    }
    let quoted: String = sqlx::query_scalar("select quote_ident($1)")
        .bind(name)
        .fetch_one(admin)
        .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("create database {quoted}")))
        .execute(admin)
        .await?;
    Ok(true)
}

/// Applies what is missing; running it again applies nothing and says so.
/// A ledger made by migrations other than these is refused with one line
/// saying so, never half-upgraded.
pub async fn run(pool: &LedgerPool) -> Result<MigrationReport, LedgerError> {
    run_through(pool, i64::MAX).await
}

/// [`run`], stopping after migration `last`: the ledger of an earlier
/// release, as a user who installed it has one.
pub async fn run_through(pool: &LedgerPool, last: i64) -> Result<MigrationReport, LedgerError> {
    // Migrations hold a session-level lock and prepare statements as a
    // session does: a transaction pooler would hand their server away.
    if pool.pooler() == super::Pooler::Transaction {
        return Err(LedgerError::Invalid(
            "migrate needs a connection of its own: run it with a URL straight to the server, not through the transaction pooler".to_string(),
        ));
    }
    let applied = applied_migrations(pool).await?;
    if let Some(problem) = foreign_migration(&applied) {
        return Err(LedgerError::OtherVersion(problem));
    }
    let done: Vec<i64> = applied.iter().map(|(version, _)| *version).collect();
    let pending: Vec<&sqlx::migrate::Migration> = MIGRATOR
        .iter()
        .filter(|migration| migration.migration_type.is_up_migration())
        .filter(|migration| migration.version <= last)
        .filter(|migration| !done.contains(&migration.version))
        .collect();
    if !pending.is_empty() {
        apply_in_one_transaction(pool, &pending).await?;
    }
    // A ledger stopped at an older release keeps the months that release made.
    let makes_months: bool = sqlx::query_scalar(
        "select to_regprocedure('ledger.ensure_next_history_months()') is not null",
    )
    .fetch_one(pool)
    .await?;
    if makes_months {
        super::retention::ensure_months(pool).await?;
    }
    let applied = pending
        .iter()
        .map(|migration| format!("{:04} {}", migration.version, migration.description))
        .collect();
    Ok(MigrationReport {
        applied,
        already: done.len(),
    })
}

/// Applies `pending` in one transaction, under the lock every migrate
/// takes: a ledger is upgraded whole or not at all, and two migrates at
/// once apply each migration once. The bookkeeping table is the one the
/// SQL toolkit's migrator keeps, so either can read the other's.
async fn apply_in_one_transaction(
    pool: &LedgerPool,
    pending: &[&sqlx::migrate::Migration],
) -> Result<(), LedgerError> {
    use sqlx::Connection;
    let failed = |step: &str, error: sqlx::Error| {
        LedgerError::Database(format!("migration failed ({step}): {error}"))
    };
    let mut connection = pool
        .session_pool()
        .acquire()
        .await
        .map_err(|error| failed("connect", error))?;
    let mut tx = connection
        .begin()
        .await
        .map_err(|error| failed("begin", error))?;
    sqlx::query("select pg_advisory_xact_lock(hashtext('effectwatch migrate'))")
        .execute(&mut *tx)
        .await
        .map_err(|error| failed("lock", error))?;
    sqlx::raw_sql(
        "create table if not exists public._sqlx_migrations (
            version bigint primary key,
            description text not null,
            installed_on timestamptz not null default now(),
            success boolean not null,
            checksum bytea not null,
            execution_time bigint not null)",
    )
    .execute(&mut *tx)
    .await
    .map_err(|error| failed("bookkeeping", error))?;
    for migration in pending {
        // Another migrate may have applied it while this one waited for the lock.
        let done: bool = sqlx::query_scalar(
            "select exists (select 1 from public._sqlx_migrations where version = $1 and success)",
        )
        .bind(migration.version)
        .fetch_one(&mut *tx)
        .await
        .map_err(|error| failed("bookkeeping", error))?;
        if done {
            continue;
        }
        let started = std::time::Instant::now();
        sqlx::raw_sql(migration.sql.clone())
            .execute(&mut *tx)
            .await
            .map_err(|error| {
                failed(
                    &format!("{:04} {}", migration.version, migration.description),
                    error,
                )
            })?;
        sqlx::query(
            "insert into public._sqlx_migrations (version, description, success, checksum, execution_time)
             values ($1, $2, true, $3, $4)",
        )
        .bind(migration.version)
        .bind(migration.description.as_ref())
        .bind(migration.checksum.as_ref())
        .bind(i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await
        .map_err(|error| failed("bookkeeping", error))?;
    }
    tx.commit().await.map_err(|error| failed("commit", error))
}

/// The first applied migration these migrations do not contain as applied:
/// one they lack, or one whose text differs.
fn foreign_migration(applied: &[(i64, Vec<u8>)]) -> Option<String> {
    applied.iter().find_map(|(version, checksum)| {
        match MIGRATOR.iter().find(|m| m.version == *version) {
            None => Some(format!(
                "migration {version:04} is not one this effectwatch knows"
            )),
            Some(ours) if ours.checksum.as_ref() != checksum.as_slice() => Some(format!(
                "migration {version:04} ({}) differs from this effectwatch's",
                ours.description
            )),
            Some(_) => None,
        }
    })
}

async fn applied_migrations(pool: &LedgerPool) -> Result<Vec<(i64, Vec<u8>)>, LedgerError> {
    let exists: bool =
        sqlx::query_scalar("select to_regclass('public._sqlx_migrations') is not null")
            .fetch_one(pool)
            .await?;
    if !exists {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_as(
        "select version, checksum from public._sqlx_migrations where success order by version",
    )
    .fetch_all(pool)
    .await?)
}
