//! Installs or upgrades the ledger schema from the migrations in `sql/`,
//! compiled into the binary so a deployed console needs no source tree.

use super::LedgerPool;
use sqlx::migrate::Migrator;

use super::LedgerError;

pub static MIGRATOR: Migrator = sqlx::migrate!("./sql");

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
    MIGRATOR
        .run(&pool.session_pool())
        .await
        .map_err(|error| LedgerError::Database(format!("migration failed: {error}")))?;
    super::retention::ensure_months(pool).await?;
    let applied = MIGRATOR
        .iter()
        .filter(|migration| !done.contains(&migration.version))
        .map(|migration| format!("{:04} {}", migration.version, migration.description))
        .collect();
    Ok(MigrationReport {
        applied,
        already: done.len(),
    })
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
