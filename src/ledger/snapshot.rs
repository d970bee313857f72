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

/// Seconds the server replays behind its primary when it is a standby
/// (0 when it has replayed all it received); None on a primary. An idle
/// primary sends nothing, so the last replayed commit's age alone would
/// call a caught-up standby late.
pub async fn replica_lag<'c>(tx: impl PgExecutor<'c>) -> Result<Option<f64>, LedgerError> {
    Ok(sqlx::query_scalar(
        "select case when pg_is_in_recovery() then
                    case when pg_last_wal_receive_lsn() is not distinct from pg_last_wal_replay_lsn()
                         then 0::float8
                         else coalesce(extract(epoch from now() - pg_last_xact_replay_timestamp())::float8, 0)
                    end
                end",
    )
    .fetch_one(tx)
    .await?)
}

pub async fn is_standby(pool: &LedgerPool) -> Result<bool, LedgerError> {
    Ok(sqlx::query_scalar("select pg_is_in_recovery()")
        .fetch_one(pool)
        .await?)
}
