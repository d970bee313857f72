//! Escalations (`sql/migrations/0010_escalation.sql`): handing an effect to a person,
//! the delivery loop's leases and attempts, acknowledging and resolving;
//! and the open escalations and compensations awaiting a second operator
//! as the console lists them, now or as they stood at an instant
//! (`sql/migrations/0007_panes.sql`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
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

impl EscalationRow {
    /// What a filter's words search in it (the console's escalations view
    /// and `escalation acknowledge|resolve --pane escalations --filter`).
    pub fn filter_fields(&self) -> [(&'static str, &str); 5] {
        [
            ("key", &self.op_key),
            ("state", &self.state),
            ("operator", &self.created_by),
            ("sink", &self.sink),
            ("decision", &self.decision_needed),
        ]
    }
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

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct EscalationStart {
    /// created | existing
    pub status: String,
    pub escalation_key: String,
    pub state: String,
    pub sink_name: String,
    pub decision: String,
    pub decision_needed: String,
    pub audit_seq: Option<i64>,
}

pub async fn escalate<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    seen: i64,
    operator: &str,
    reason: &str,
    sink: &str,
) -> Result<EscalationStart, LedgerError> {
    Ok(sqlx::query_as::<_, EscalationStart>(
        "select status, escalation_key, state, sink_name, decision, decision_needed, audit_seq
           from ledger.op_escalate(op_key => $1, expected_version => $2, operator => $3,
                                   reason => $4, sink => $5)",
    )
    .bind(op_key)
    .bind(seen)
    .bind(operator)
    .bind(reason)
    .bind(sink)
    .fetch_one(executor)
    .await?)
}

/// An escalation claimed for one delivery attempt.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Claimed {
    pub escalation_key: String,
    pub sink: String,
    pub payload: Value,
    pub attempt: i32,
}

fn interval_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 1000)
}

pub async fn claim_due_escalations<'c>(
    executor: impl PgExecutor<'c>,
    worker: &str,
    lease: Duration,
    max_items: i32,
    only_key: Option<&str>,
) -> Result<Vec<Claimed>, LedgerError> {
    Ok(sqlx::query_as::<_, Claimed>(
        "select escalation_key, sink, payload, attempt
           from ledger.claim_due_escalations(worker => $1,
                lease => make_interval(secs => $2::double precision / 1000),
                max_items => $3, only_key => $4)",
    )
    .bind(worker)
    .bind(interval_ms(lease))
    .bind(max_items)
    .bind(only_key)
    .fetch_all(executor)
    .await?)
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct DeliveryRecorded {
    pub state: String,
    pub delivery_attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
}

#[allow(clippy::too_many_arguments)]
pub async fn record_delivery<'c>(
    executor: impl PgExecutor<'c>,
    escalation_key: &str,
    attempt: i32,
    worker: &str,
    ok: bool,
    error: Option<&str>,
    retry_after: Duration,
    duration_ms: i32,
) -> Result<DeliveryRecorded, LedgerError> {
    Ok(sqlx::query_as::<_, DeliveryRecorded>(
        "select state, delivery_attempts, next_attempt_at
           from ledger.record_escalation_delivery(escalation_key => $1, attempt => $2, worker => $3,
                ok => $4, error => $5,
                retry_after => make_interval(secs => $6::double precision / 1000),
                duration_ms => $7)",
    )
    .bind(escalation_key)
    .bind(attempt)
    .bind(worker)
    .bind(ok)
    .bind(error)
    .bind(interval_ms(retry_after))
    .bind(duration_ms)
    .fetch_one(executor)
    .await?)
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct EscalationClosed {
    /// changed | unchanged
    pub status: String,
    pub state: String,
    pub op_key: String,
    pub sink: String,
    pub audit_seq: Option<i64>,
}

/// Acknowledges (`resolve = false`) or resolves an escalation.
pub async fn close_escalation<'c>(
    executor: impl PgExecutor<'c>,
    escalation_key: &str,
    operator: &str,
    reason: &str,
    resolve: bool,
) -> Result<EscalationClosed, LedgerError> {
    let sql = if resolve {
        "select status, state, op_key, sink, audit_seq
           from ledger.op_resolve_escalation(escalation_key => $1, operator => $2, reason => $3)"
    } else {
        "select status, state, op_key, sink, audit_seq
           from ledger.op_acknowledge_escalation(escalation_key => $1, operator => $2, reason => $3)"
    };
    Ok(sqlx::query_as::<_, EscalationClosed>(sql)
        .bind(escalation_key)
        .bind(operator)
        .bind(reason)
        .fetch_one(executor)
        .await?)
}

/// One escalation as the console shows it, with its delivery state.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct EscalationStatus {
    pub escalation_key: String,
    pub op_key: String,
    pub sink: String,
    pub decision: Option<String>,
    pub state: String,
    pub delivery_attempts: i32,
    pub last_error: Option<String>,
    pub next_attempt_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// The columns of [`EscalationStatus`].
const STATUS_COLUMNS: &str = "escalation_key, op_key, sink, decision, state, delivery_attempts, \
     last_error, next_attempt_at, delivered_at";

pub async fn escalation_status<'c>(
    executor: impl PgExecutor<'c>,
    escalation_key: &str,
) -> Result<Option<EscalationStatus>, LedgerError> {
    let sql = format!("select {STATUS_COLUMNS} from ledger.escalations where escalation_key = $1");
    Ok(sqlx::query_as::<_, EscalationStatus>(AssertSqlSafe(sql))
        .bind(escalation_key)
        .fetch_optional(executor)
        .await?)
}

/// Escalations not yet resolved, oldest first, with their delivery state.
pub async fn unresolved<'c>(
    executor: impl PgExecutor<'c>,
    limit: i64,
) -> Result<Vec<EscalationStatus>, LedgerError> {
    let sql = format!(
        "select {STATUS_COLUMNS} from ledger.escalations where state <> 'resolved'
          order by created_at, id limit $1"
    );
    Ok(sqlx::query_as::<_, EscalationStatus>(AssertSqlSafe(sql))
        .bind(limit)
        .fetch_all(executor)
        .await?)
}
