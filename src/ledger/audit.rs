//! The audit chain: verification and reading.

use serde::Serialize;
use sqlx::PgExecutor;

use super::LedgerError;
use super::model::AuditEntry;

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ChainReport {
    pub checked: i64,
    pub first_broken_seq: Option<i64>,
    pub problem: Option<String>,
}

impl ChainReport {
    pub fn is_intact(&self) -> bool {
        self.first_broken_seq.is_none()
    }
}

pub async fn verify<'c>(executor: impl PgExecutor<'c>) -> Result<ChainReport, LedgerError> {
    Ok(sqlx::query_as::<_, ChainReport>(
        "select checked, first_broken_seq, problem from ledger.verify_audit_chain()",
    )
    .fetch_one(executor)
    .await?)
}

/// The newest entries made up to `at` (None: now) first, up to `limit`.
pub async fn recent<'c>(
    executor: impl PgExecutor<'c>,
    at: Option<chrono::DateTime<chrono::Utc>>,
    limit: i64,
) -> Result<Vec<AuditEntry>, LedgerError> {
    Ok(sqlx::query_as::<_, AuditEntry>(
        "select seq, at, operator, db_role, action, effect_id, op_key, reason, before, after, hash
           from ledger.audit_log_at($1) order by seq desc limit $2",
    )
    .bind(at)
    .bind(limit)
    .fetch_all(executor)
    .await?)
}
