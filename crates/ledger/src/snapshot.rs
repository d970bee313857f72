//! One consistent read: a read-only repeatable-read transaction, so every
//! query of a poll, a detail view, a review or a check sees the ledger at
//! the same instant while workers write.

use sqlx::PgExecutor;

use super::{LedgerError, LedgerPool, LedgerTransaction};

pub async fn begin(pool: &LedgerPool) -> Result<LedgerTransaction<'static>, LedgerError> {
    let mut tx = pool.begin().await?;
    sqlx::query("set transaction isolation level repeatable read read only")
        .execute(&mut tx)
        .await?;
    Ok(tx)
}

/// The database and login the snapshot reads as, for the console's header.
pub async fn whoami<'c>(tx: impl PgExecutor<'c>) -> Result<(String, String), LedgerError> {
    Ok(
        sqlx::query_as("select current_database()::text, session_user::text")
            .fetch_one(tx)
            .await?,
    )
}

/// Seconds the server's data may be behind its primary when it is a
/// standby, counting a WAL receiver that receives nothing (ledger.replica_lag
/// says how), and whether it hears from its primary now
/// (ledger.replica_receiving); both None on a primary.
pub async fn replica<'c>(
    tx: impl PgExecutor<'c>,
) -> Result<(Option<f64>, Option<bool>), LedgerError> {
    Ok(
        sqlx::query_as("select ledger.replica_lag(), ledger.replica_receiving()")
            .fetch_one(tx)
            .await?,
    )
}

pub async fn is_standby(pool: &LedgerPool) -> Result<bool, LedgerError> {
    Ok(sqlx::query_scalar("select pg_is_in_recovery()")
        .fetch_one(pool)
        .await?)
}
