//! Installs or upgrades the ledger schema from the migrations in `sql/`,
//! compiled into the binary so a deployed console needs no source tree.

use sqlx::PgPool;
use sqlx::migrate::Migrator;

use super::LedgerError;

pub static MIGRATOR: Migrator = sqlx::migrate!("./sql");

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    pub applied: Vec<String>,
    pub already: usize,
}

/// Applies what is missing; running it again applies nothing and says so.
pub async fn run(pool: &PgPool) -> Result<MigrationReport, LedgerError> {
    let done: Vec<i64> = applied_versions(pool).await?;
    MIGRATOR
        .run(pool)
        .await
        .map_err(|error| LedgerError::Database(format!("migration failed: {error}")))?;
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

async fn applied_versions(pool: &PgPool) -> Result<Vec<i64>, LedgerError> {
    let exists: bool =
        sqlx::query_scalar("select to_regclass('public._sqlx_migrations') is not null")
            .fetch_one(pool)
            .await?;
    if !exists {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_scalar(
        "select version from public._sqlx_migrations where success order by version",
    )
    .fetch_all(pool)
    .await?)
}
