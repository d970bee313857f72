//! Compensation (`sql/migrations/0009_compensation.sql`): starting one, the second
//! operator's approval or rejection, and the operator path that dispatches
//! and completes it. Each call is one statement, so one transaction.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgExecutor;

use super::LedgerError;

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

/// What `ledger.op_reverse_duplicate` decided about one extra provider record.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ReversalStart {
    /// created | existing | awaiting_approval (above the action's limit)
    pub status: String,
    pub compensation_key: Option<String>,
    pub compensation_state: Option<String>,
    pub dispatched: bool,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub approval_limit_minor: Option<i64>,
    pub audit_seq: Option<i64>,
}

pub async fn reverse_duplicate<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    seen: i64,
    operator: &str,
    reason: &str,
    duplicate_ref: &str,
) -> Result<ReversalStart, LedgerError> {
    Ok(sqlx::query_as::<_, ReversalStart>(
        "select status, compensation_key, compensation_state, dispatched, amount_minor, currency,
                approval_limit_minor, audit_seq
           from ledger.op_reverse_duplicate(op_key => $1, expected_version => $2, operator => $3,
                                            reason => $4, duplicate_ref => $5)",
    )
    .bind(op_key)
    .bind(seen)
    .bind(operator)
    .bind(reason)
    .bind(duplicate_ref)
    .fetch_one(executor)
    .await?)
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Approval {
    pub status: String,
    pub compensation_key: String,
    pub compensation_state: String,
    pub requested_by: String,
    /// The provider record reversed, when the request was a duplicate's.
    pub duplicate_ref: Option<String>,
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
        "select status, compensation_key, compensation_state, requested_by, duplicate_ref, audit_seq
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

/// The key of the effect a compensation reverses; `None` when
/// `compensation_key` names no compensation.
pub async fn original_of<'c>(
    executor: impl PgExecutor<'c>,
    compensation_key: &str,
) -> Result<Option<String>, LedgerError> {
    Ok(sqlx::query_scalar(
        "select o.op_key from ledger.effects c join ledger.effects o on o.id = c.compensates
          where c.op_key = $1",
    )
    .bind(compensation_key)
    .fetch_optional(executor)
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
