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

/// Which entries `audit list` reads; every part narrows, None: any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// The name written in the trail (exact).
    pub operator: Option<String>,
    /// The effect's key (exact).
    pub op_key: Option<String>,
    pub limit: i64,
}

/// Entries in the order they were made (oldest first), each with its
/// effect's target, within the query; read by the audit log's time index.
pub async fn list<'c>(
    executor: impl PgExecutor<'c>,
    query: &AuditQuery,
) -> Result<Vec<AuditEntry>, LedgerError> {
    Ok(sqlx::query_as::<_, AuditEntry>(
        "select a.seq, a.at, a.operator, a.db_role, a.action, a.effect_id, a.op_key, a.reason,
                a.before, a.after, a.hash, e.target
           from ledger.audit_log a
           left join ledger.effects e on e.id = a.effect_id
          where ($1::timestamptz is null or a.at >= $1)
            and ($2::timestamptz is null or a.at < $2)
            and ($3::text is null or a.operator = $3)
            and ($4::text is null or a.op_key = $4)
          order by a.seq
          limit $5",
    )
    .bind(query.since)
    .bind(query.until)
    .bind(query.operator.as_deref())
    .bind(query.op_key.as_deref())
    .bind(query.limit)
    .fetch_all(executor)
    .await?)
}

/// The newest entries made up to `at` (None: now) first, up to `limit`.
pub async fn recent<'c>(
    executor: impl PgExecutor<'c>,
    at: Option<chrono::DateTime<chrono::Utc>>,
    limit: i64,
) -> Result<Vec<AuditEntry>, LedgerError> {
    Ok(sqlx::query_as::<_, AuditEntry>(
        "select a.seq, a.at, a.operator, a.db_role, a.action, a.effect_id, a.op_key, a.reason,
                a.before, a.after, a.hash, e.target
           from ledger.audit_log_at($1) a
           left join ledger.effects e on e.id = a.effect_id
          order by a.seq desc limit $2",
    )
    .bind(at)
    .bind(limit)
    .fetch_all(executor)
    .await?)
}
