//! Open escalations and compensations awaiting a second operator, as the
//! console lists them, now or as they stood at an instant
//! (`sql/0007_panes.sql`).

use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, PgExecutor};

use super::LedgerError;

/// An open escalation (`ledger.open_escalations`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, sqlx::FromRow)]
pub struct EscalationRow {
    pub escalation_key: String,
    pub op_key: String,
    pub sink: String,
    pub decision_needed: String,
    pub state: String,
    pub delivery_attempts: i32,
    pub last_error: Option<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub age_ms: i64,
    /// The escalated effect's version, so reconcile, compensate and escalate work on the row.
    pub effect_version: i64,
}

/// A compensation waiting for a second operator (`ledger.awaiting_approval`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, sqlx::FromRow)]
pub struct ApprovalRow {
    pub request_id: i64,
    pub op_key: String,
    pub target: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub requested_by: String,
    pub reason: String,
    pub waiting_ms: i64,
    /// The original effect's version, which approve and reject check.
    pub version: i64,
}

/// The live view now, its function of an instant in the past.
fn source(view: &str, at: Option<DateTime<Utc>>) -> String {
    match at {
        Some(_) => format!("ledger.{view}_at($2)"),
        None => format!("ledger.{view}"),
    }
}

/// The newest open escalations first, up to `limit`, at `at` (None: now).
pub async fn open<'c>(
    executor: impl PgExecutor<'c>,
    at: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<EscalationRow>, LedgerError> {
    let sql = format!(
        "select s.escalation_key, s.op_key, s.sink, s.decision_needed, s.state, s.delivery_attempts,
                s.last_error, s.created_by, s.created_at,
                (extract(epoch from s.age) * 1000)::bigint as age_ms, s.effect_version
           from {} s order by s.created_at desc limit $1",
        source("open_escalations", at)
    );
    let mut query = sqlx::query_as::<_, EscalationRow>(AssertSqlSafe(sql)).bind(limit);
    if let Some(at) = at {
        query = query.bind(at);
    }
    Ok(query.fetch_all(executor).await?)
}

/// The longest-waiting requests first, up to `limit`, at `at` (None: now).
pub async fn awaiting_approval<'c>(
    executor: impl PgExecutor<'c>,
    at: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<ApprovalRow>, LedgerError> {
    let sql = format!(
        "select request_id, op_key, target, amount_minor, currency, requested_by, reason,
                (extract(epoch from waiting_for) * 1000)::bigint as waiting_ms, version
           from {} v order by requested_at limit $1",
        source("awaiting_approval", at)
    );
    let mut query = sqlx::query_as::<_, ApprovalRow>(AssertSqlSafe(sql)).bind(limit);
    if let Some(at) = at {
        query = query.bind(at);
    }
    Ok(query.fetch_all(executor).await?)
}
