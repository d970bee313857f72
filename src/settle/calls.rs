//! Rust callers of the settling functions of `sql/0009_compensation.sql` and `sql/0010_escalation.sql`, with
//! the rows they return. Each is one statement, so one transaction.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgExecutor;

use crate::ledger::LedgerError;

/// What `ledger.op_compensate` decided.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct CompensationStart {
    /// created | existing | awaiting_approval
    pub status: String,
    pub compensation_key: Option<String>,
    pub compensation_state: Option<String>,
    pub dispatched: bool,
    pub requested_by: Option<String>,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub approval_limit_minor: Option<i64>,
    pub audit_seq: Option<i64>,
}

pub async fn compensate<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    seen: i64,
    operator: &str,
    reason: &str,
) -> Result<CompensationStart, LedgerError> {
    Ok(sqlx::query_as::<_, CompensationStart>(
        "select status, compensation_key, compensation_state, dispatched, requested_by,
                amount_minor, currency, approval_limit_minor, audit_seq
           from ledger.op_compensate(op_key => $1, expected_version => $2, operator => $3, reason => $4)",
    )
    .bind(op_key)
    .bind(seen)
    .bind(operator)
    .bind(reason)
    .fetch_one(executor)
    .await?)
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Approval {
    pub status: String,
    pub compensation_key: String,
    pub compensation_state: String,
    pub requested_by: String,
    pub audit_seq: i64,
}

pub async fn approve<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    seen: i64,
    operator: &str,
    reason: &str,
) -> Result<Approval, LedgerError> {
    Ok(sqlx::query_as::<_, Approval>(
        "select status, compensation_key, compensation_state, requested_by, audit_seq
           from ledger.op_approve_compensation(op_key => $1, expected_version => $2,
                                               operator => $3, reason => $4)",
    )
    .bind(op_key)
    .bind(seen)
    .bind(operator)
    .bind(reason)
    .fetch_one(executor)
    .await?)
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Rejection {
    pub status: String,
    pub requested_by: String,
    pub audit_seq: i64,
}

pub async fn reject<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    seen: i64,
    operator: &str,
    reason: &str,
) -> Result<Rejection, LedgerError> {
    Ok(sqlx::query_as::<_, Rejection>(
        "select status, requested_by, audit_seq
           from ledger.op_reject_compensation(op_key => $1, expected_version => $2,
                                              operator => $3, reason => $4)",
    )
    .bind(op_key)
    .bind(seen)
    .bind(operator)
    .bind(reason)
    .fetch_one(executor)
    .await?)
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct DispatchClaim {
    pub claimed: bool,
    pub state: String,
    pub dispatched_at: Option<DateTime<Utc>>,
    pub audit_seq: Option<i64>,
}

pub async fn dispatch_compensation<'c>(
    executor: impl PgExecutor<'c>,
    compensation_key: &str,
    operator: &str,
) -> Result<DispatchClaim, LedgerError> {
    Ok(sqlx::query_as::<_, DispatchClaim>(
        "select claimed, state, dispatched_at, audit_seq
           from ledger.op_dispatch_compensation(compensation_key => $1, operator => $2)",
    )
    .bind(compensation_key)
    .bind(operator)
    .fetch_one(executor)
    .await?)
}

/// What the provider answered to a compensation, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompensationResult<'a> {
    pub outcome: &'a str,
    pub external_ref: Option<&'a str>,
    pub result: Option<&'a Value>,
    pub retryable: Option<bool>,
    pub reason: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct CompensationRecorded {
    pub applied: bool,
    pub state: String,
    pub late: bool,
    pub original_state: String,
    pub audit_seq: i64,
}

pub async fn complete_compensation<'c>(
    executor: impl PgExecutor<'c>,
    compensation_key: &str,
    operator: &str,
    answer: &CompensationResult<'_>,
) -> Result<CompensationRecorded, LedgerError> {
    Ok(sqlx::query_as::<_, CompensationRecorded>(
        "select applied, state, late, original_state, audit_seq
           from ledger.op_complete_compensation(compensation_key => $1, operator => $2, outcome => $3,
                external_ref => $4, result => $5, retryable => $6, reason => $7)",
    )
    .bind(compensation_key)
    .bind(operator)
    .bind(answer.outcome)
    .bind(answer.external_ref)
    .bind(answer.result)
    .bind(answer.retryable)
    .bind(answer.reason)
    .fetch_one(executor)
    .await?)
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

pub async fn escalation_status<'c>(
    executor: impl PgExecutor<'c>,
    escalation_key: &str,
) -> Result<Option<EscalationStatus>, LedgerError> {
    Ok(sqlx::query_as::<_, EscalationStatus>(
        "select escalation_key, op_key, sink, decision, state, delivery_attempts, last_error,
                next_attempt_at, delivered_at
           from ledger.escalations where escalation_key = $1",
    )
    .bind(escalation_key)
    .fetch_optional(executor)
    .await?)
}

/// Escalations not yet resolved, oldest first.
pub async fn open_escalations<'c>(
    executor: impl PgExecutor<'c>,
    limit: i64,
) -> Result<Vec<EscalationStatus>, LedgerError> {
    Ok(sqlx::query_as::<_, EscalationStatus>(
        "select escalation_key, op_key, sink, decision, state, delivery_attempts, last_error,
                next_attempt_at, delivered_at
           from ledger.escalations where state <> 'resolved'
          order by created_at, id limit $1",
    )
    .bind(limit)
    .fetch_all(executor)
    .await?)
}
