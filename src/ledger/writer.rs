//! Rust callers of the writer API (the simulated agents, tests, benchmarks).
//! Everything goes through the SQL functions, exactly as any other agent.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;

use super::{Decision, LedgerError, State};

/// The intent an agent records before it acts.
#[derive(Debug, Clone, Default)]
pub struct Intent {
    pub op_key: String,
    pub action: String,
    pub target: String,
    pub params: Value,
    pub requested_by: String,
    pub pending_window_secs: Option<i64>,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub provider: Option<String>,
    pub approval_ref: Option<String>,
    pub approval_version: Option<i32>,
    pub request_id: Option<String>,
    /// A booking's time range, `[start, end)`, for an action whose policy
    /// conflicts by time range.
    pub during: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Begun {
    pub decision: Decision,
    pub effect_id: i64,
    pub state: State,
    pub result: Option<Value>,
}

pub async fn begin_effect<'c>(
    executor: impl PgExecutor<'c>,
    intent: &Intent,
) -> Result<Begun, LedgerError> {
    let begun = sqlx::query_as::<_, Begun>(
        "select decision, effect_id, state, result from ledger.begin_effect(
            op_key => $1, action => $2, target => $3, params => $4, requested_by => $5,
            pending_window => make_interval(secs => $6::bigint), amount_minor => $7, currency => $8,
            provider => $9, approval_ref => $10, approval_version => $11, request_id => $12,
            during => case when $13::timestamptz is not null then tstzrange($13, $14) end)",
    )
    .bind(&intent.op_key)
    .bind(&intent.action)
    .bind(&intent.target)
    .bind(&intent.params)
    .bind(&intent.requested_by)
    .bind(intent.pending_window_secs)
    .bind(intent.amount_minor)
    .bind(&intent.currency)
    .bind(&intent.provider)
    .bind(&intent.approval_ref)
    .bind(intent.approval_version)
    .bind(&intent.request_id)
    .bind(intent.during.map(|(start, _)| start))
    .bind(intent.during.map(|(_, end)| end))
    .fetch_one(executor)
    .await?;
    Ok(begun)
}

#[derive(Debug, Clone, PartialEq)]
pub struct Dispatch {
    /// Only a caller that claimed the effect may call the provider.
    pub claimed: bool,
    pub state: State,
    pub deadline_at: Option<DateTime<Utc>>,
}

/// The ledger keeps a refused call (another login's effect, a compensation)
/// as a flagged attempt and answers with the reason instead of an error, so
/// the record survives; a Rust caller gets the refusal as an error.
fn refusal(refused: Option<String>) -> Result<(), LedgerError> {
    match refused {
        Some(reason) => Err(LedgerError::Refused(reason)),
        None => Ok(()),
    }
}

pub async fn mark_dispatched<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    request_id: Option<&str>,
    worker: &str,
) -> Result<Dispatch, LedgerError> {
    claim(executor, op_key, None, request_id, worker).await
}

/// [`mark_dispatched`] naming the effect's target too: refused when the key
/// is another target's, and routable on a ledger distributed by target
/// (docs/scale.md).
pub async fn mark_dispatched_on_target<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    target: &str,
    request_id: Option<&str>,
    worker: &str,
) -> Result<Dispatch, LedgerError> {
    claim(executor, op_key, Some(target), request_id, worker).await
}

async fn claim<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    target: Option<&str>,
    request_id: Option<&str>,
    worker: &str,
) -> Result<Dispatch, LedgerError> {
    let (dispatch, refused) =
        sqlx::query_as::<_, (bool, State, Option<DateTime<Utc>>, Option<String>)>(
            "select claimed, state, deadline_at, refused from ledger.mark_dispatched(
            op_key => $1, request_id => $2, worker => $3, target => $4)",
        )
        .bind(op_key)
        .bind(request_id)
        .bind(worker)
        .bind(target)
        .fetch_one(executor)
        .await
        .map(|(claimed, state, deadline_at, refused)| {
            (
                Dispatch {
                    claimed,
                    state,
                    deadline_at,
                },
                refused,
            )
        })?;
    refusal(refused)?;
    Ok(dispatch)
}

/// The outcome a worker observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed { retryable: bool },
    Unknown,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed { .. } => "failed",
            Outcome::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Completion {
    pub external_ref: Option<String>,
    pub result: Option<Value>,
    pub reason: Option<String>,
    pub request_id: Option<String>,
    pub worker: Option<String>,
    /// What kind of error the worker saw, if any: the ledger holds the
    /// outcome to what the class allows (a timeout is never a failure).
    pub error_class: Option<ErrorClass>,
    /// With [`ErrorClass::RateLimited`]: the provider's delay (default 1 min).
    pub retry_after: Option<std::time::Duration>,
    /// The effect's target, when the worker knows it: a key that is
    /// another target's is refused, and the call is routable on a ledger
    /// distributed by target.
    pub target: Option<String>,
}

/// The error classes of the writer API (`ledger.outcome_of_class`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Timeout, reset, 5xx, unreadable answer: the outcome is unknown.
    Timeout,
    ConnectionReset,
    ServerError,
    InvalidResponse,
    /// The provider refused these params: failed for good.
    BusinessRejection,
    /// Retryable under the same key after the provider's delay.
    RateLimited,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Timeout => "timeout",
            ErrorClass::ConnectionReset => "connection_reset",
            ErrorClass::ServerError => "server_error",
            ErrorClass::InvalidResponse => "invalid_response",
            ErrorClass::BusinessRejection => "business_rejection",
            ErrorClass::RateLimited => "rate_limited",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Completed {
    pub applied: bool,
    pub state: State,
    /// The effect had been settled another way: recorded and flagged only.
    pub late: bool,
}

pub async fn complete_effect<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    outcome: Outcome,
    completion: &Completion,
) -> Result<Completed, LedgerError> {
    let retryable = match outcome {
        Outcome::Failed { retryable } => Some(retryable),
        _ => None,
    };
    let (completed, refused) = sqlx::query_as::<_, (bool, State, bool, Option<String>)>(
        "select applied, state, late, refused from ledger.complete_effect(
            op_key => $1, outcome => $2, external_ref => $3, result => $4, retryable => $5,
            reason => $6, request_id => $7, worker => $8, error_class => $9,
            retry_after => $10, target => $11)",
    )
    .bind(op_key)
    .bind(outcome.as_str())
    .bind(&completion.external_ref)
    .bind(&completion.result)
    .bind(retryable)
    .bind(&completion.reason)
    .bind(&completion.request_id)
    .bind(&completion.worker)
    .bind(completion.error_class.map(ErrorClass::as_str))
    .bind(completion.retry_after)
    .bind(&completion.target)
    .fetch_one(executor)
    .await
    .map(|(applied, state, late, refused)| {
        (
            Completed {
                applied,
                state,
                late,
            },
            refused,
        )
    })?;
    refusal(refused)?;
    Ok(completed)
}
