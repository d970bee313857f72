//! The channel every change to `ledger.effects` is announced on, and the
//! probe a listener sends itself to find out whether announcements reach it:
//! a transaction pooler accepts LISTEN and then silently drops it with the
//! transaction, so an accepted LISTEN proves nothing.

use super::{LedgerError, LedgerPool};

pub const NOTIFY_CHANNEL: &str = "effectwatch_ledger";

/// A connection of its own that LISTENs ([`LedgerPool::listener`]).
pub type Listener = sqlx::postgres::PgListener;

/// Whether the server still answers: the cheapest statement there is.
pub async fn ping(pool: &LedgerPool) -> Result<(), LedgerError> {
    sqlx::query("select 1").execute(pool).await?;
    Ok(())
}

/// Probes carry this prefix; the ledger's own announcements are JSON objects.
const PROBE_PREFIX: &str = "probe:";

/// Announces a probe through `pool`, as any change would be announced.
pub async fn send_probe(pool: &LedgerPool, token: &str) -> Result<String, LedgerError> {
    let payload = format!("{PROBE_PREFIX}{token}");
    sqlx::query("select pg_notify($1, $2)")
        .bind(NOTIFY_CHANNEL)
        .bind(&payload)
        .execute(pool)
        .await?;
    Ok(payload)
}

/// Whether a notification is some listener's probe rather than a change.
pub fn is_probe(payload: &str) -> bool {
    payload.starts_with(PROBE_PREFIX)
}
