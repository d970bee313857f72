//! One consistent read: a read-only repeatable-read transaction, so every
//! query of a poll, a detail view, a review or a check sees the ledger at
//! the same instant while workers write.

use sqlx::{PgPool, Postgres, Transaction};

use super::LedgerError;

pub async fn begin(pool: &PgPool) -> Result<Transaction<'static, Postgres>, LedgerError> {
    let mut tx = pool.begin().await?;
    sqlx::query("set transaction isolation level repeatable read read only")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// The database and login the snapshot reads as, for the console's header.
pub async fn whoami(tx: &mut sqlx::PgConnection) -> Result<(String, String), LedgerError> {
    Ok(
        sqlx::query_as("select current_database()::text, session_user::text")
            .fetch_one(tx)
            .await?,
    )
}
