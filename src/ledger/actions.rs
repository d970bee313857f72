//! Operator actions: each one SQL function call, in one transaction with its
//! audit entry, refused if the effect changed since the operator looked.

use serde::Serialize;
use serde_json::Value;
use sqlx::PgExecutor;

use super::{LedgerError, State};

/// The version of the effect the operator saw when deciding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenVersion(pub i64);

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ActionOutcome {
    pub state: State,
    pub version: i64,
    pub audit_seq: i64,
}

/// How an operator settles an effect by hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    Succeeded { external_ref: String },
    Failed { retryable: bool },
}

pub async fn resolve<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    seen: SeenVersion,
    operator: &str,
    reason: &str,
    resolution: &Resolution,
) -> Result<ActionOutcome, LedgerError> {
    let (outcome, external_ref, retryable) = match resolution {
        Resolution::Succeeded { external_ref } => ("succeeded", Some(external_ref.as_str()), false),
        Resolution::Failed { retryable } => ("failed", None, *retryable),
    };
    Ok(sqlx::query_as::<_, ActionOutcome>(
        "select state, version, audit_seq from ledger.op_resolve(
            op_key => $1, expected_version => $2, operator => $3, reason => $4,
            outcome => $5, external_ref => $6, retryable => $7)",
    )
    .bind(op_key)
    .bind(seen.0)
    .bind(operator)
    .bind(reason)
    .bind(outcome)
    .bind(external_ref)
    .bind(retryable)
    .fetch_one(executor)
    .await?)
}

pub async fn release<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    seen: SeenVersion,
    operator: &str,
    reason: &str,
) -> Result<ActionOutcome, LedgerError> {
    Ok(sqlx::query_as::<_, ActionOutcome>(
        "select state, version, audit_seq from ledger.op_release(
            op_key => $1, expected_version => $2, operator => $3, reason => $4)",
    )
    .bind(op_key)
    .bind(seen.0)
    .bind(operator)
    .bind(reason)
    .fetch_one(executor)
    .await?)
}

pub async fn cancel<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    seen: SeenVersion,
    operator: &str,
    reason: &str,
) -> Result<ActionOutcome, LedgerError> {
    Ok(sqlx::query_as::<_, ActionOutcome>(
        "select state, version, audit_seq from ledger.op_cancel(
            op_key => $1, expected_version => $2, operator => $3, reason => $4)",
    )
    .bind(op_key)
    .bind(seen.0)
    .bind(operator)
    .bind(reason)
    .fetch_one(executor)
    .await?)
}

pub async fn annotate<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    seen: SeenVersion,
    operator: &str,
    note: &str,
) -> Result<ActionOutcome, LedgerError> {
    Ok(sqlx::query_as::<_, ActionOutcome>(
        "select state, version, audit_seq from ledger.op_annotate(
            op_key => $1, expected_version => $2, operator => $3, note => $4)",
    )
    .bind(op_key)
    .bind(seen.0)
    .bind(operator)
    .bind(note)
    .fetch_one(executor)
    .await?)
}

/// What a provider said about an effect, as stored by `record_reconciliation`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub provider: String,
    pub finding: String,
    pub external_refs: Vec<String>,
    pub evidence: Value,
    pub duration_ms: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ReconciliationOutcome {
    pub state: State,
    pub version: i64,
    pub reconciliation_id: i64,
    pub audit_seq: i64,
    /// What the ledger recorded: the provider's finding, or a narrower one
    /// (an `absent` inside the call's window is `indeterminate`).
    pub finding: String,
}

pub async fn record_reconciliation<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    seen: SeenVersion,
    operator: &str,
    finding: &Finding,
) -> Result<ReconciliationOutcome, LedgerError> {
    Ok(sqlx::query_as::<_, ReconciliationOutcome>(
        "select state, version, reconciliation_id, audit_seq, recorded_finding as finding from ledger.record_reconciliation(
            op_key => $1, expected_version => $2, operator => $3, provider => $4, finding => $5,
            external_refs => $6, evidence => $7, duration_ms => $8)",
    )
    .bind(op_key)
    .bind(seen.0)
    .bind(operator)
    .bind(&finding.provider)
    .bind(&finding.finding)
    .bind(&finding.external_refs)
    .bind(&finding.evidence)
    .bind(finding.duration_ms)
    .fetch_one(executor)
    .await?)
}
