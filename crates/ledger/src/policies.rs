//! Action policies (`sql/migrations/0015_policies.sql`): what the writer and the
//! reconciler may do with an action's effects, read by every console and
//! changed only through `ledger.op_set_policy`, audited.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use sqlx::PgExecutor;

use super::LedgerError;

/// One action's policy as `effectwatch policy list` and the detail view show it.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Policy {
    pub action: String,
    pub pending_window_secs: f64,
    pub exclusive_per_target: bool,
    pub compensation_approval_limit_minor: Option<i64>,
    pub retry_when_absent: bool,
    pub retry_semantics: String,
    pub escalation_sink: Option<String>,
    pub approvals_must_be_registered: bool,
    pub conflicts_by_time_range: bool,
    /// What becomes of the effects a holder held when it succeeds:
    /// `leave` (a person decides) or `cancel`.
    pub on_holder_success: String,
    /// More replays of one key than this within an hour put it in the
    /// duplicates pane as a burst (an agent in a loop).
    pub replay_burst_per_hour: i32,
    /// The heartbeat lease a beating worker is held to on this action's
    /// effects; `None`: the worker's own.
    pub heartbeat_lease_secs: Option<f64>,
    /// Whether the action has a policy of its own, or the defaults apply.
    pub configured: bool,
}

/// The retry semantics, as `policy set --retry` spells them.
pub const RETRY_SEMANTICS: [&str; 5] = [
    "safe_retry",
    "reconcile_first",
    "compensate",
    "never_retry",
    "escalate",
];

impl Policy {
    /// What the policy lets happen next to an effect in `state`, in a sentence.
    pub fn next_step(&self, state: &str) -> &'static str {
        match (self.retry_semantics.as_str(), state) {
            ("escalate", "unknown" | "pending") => {
                "a person decides (the reconciler escalates once)"
            }
            ("safe_retry", "unknown") => "the agent may resend under the same key",
            ("never_retry", "unknown" | "pending") => {
                "ask the provider; if absent, a person decides"
            }
            ("compensate", "unknown" | "pending") => {
                "ask the provider; a duplicate is reversed by rule within the approval limit"
            }
            (_, "unknown" | "pending") => "ask the provider; the finding decides",
            ("never_retry" | "escalate", "failed") => "never sent again by itself",
            (_, "failed") => "the agent may retry if it is retryable",
            (_, "succeeded") => "done; a doubt is settled by compensating",
            (_, "held") if self.on_holder_success == "cancel" => {
                "released by rule if the effect ahead fails or is cancelled; cancelled by policy \
                 if it succeeds"
            }
            (_, "held") => {
                "released by rule if the effect ahead fails or is cancelled; if it succeeds, a \
                 person decides: release or cancel"
            }
            _ => "nothing further",
        }
    }
}

const POLICY_COLUMNS: &str =
    "p.action, extract(epoch from p.pending_window)::float8 as pending_window_secs,
    p.exclusive_per_target, p.compensation_approval_limit_minor, p.retry_when_absent,
    p.retry_semantics, p.escalation_sink, p.approvals_must_be_registered, p.conflicts_by_time_range,
    p.on_holder_success, p.replay_burst_per_hour,
    extract(epoch from p.heartbeat_lease)::float8 as heartbeat_lease_secs";

pub async fn list<'c>(executor: impl PgExecutor<'c>) -> Result<Vec<Policy>, LedgerError> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {POLICY_COLUMNS}, true as configured from ledger.action_policies p order by p.action"
    )))
    .fetch_all(executor)
    .await?)
}

/// The policy that applies to `action`: its own, else the defaults.
pub async fn for_action<'c>(
    executor: impl PgExecutor<'c>,
    action: &str,
) -> Result<Policy, LedgerError> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select {POLICY_COLUMNS},
                exists (select 1 from ledger.action_policies c where c.action = $1) as configured
           from ledger.policy_for($1) p"
    )))
    .bind(action)
    .fetch_one(executor)
    .await?)
}

/// What to change; `None` keeps the current value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyChange {
    pub pending_window: Option<Duration>,
    pub exclusive_per_target: Option<bool>,
    /// `Some(None)` removes the limit.
    pub compensation_approval_limit_minor: Option<Option<i64>>,
    pub retry_when_absent: Option<bool>,
    pub retry_semantics: Option<String>,
    /// `Some(None)` removes the sink.
    pub escalation_sink: Option<Option<String>>,
    pub approvals_must_be_registered: Option<bool>,
    pub conflicts_by_time_range: Option<bool>,
    /// `leave` or `cancel`: see [`Policy::on_holder_success`].
    pub on_holder_success: Option<String>,
    /// See [`Policy::replay_burst_per_hour`].
    pub replay_burst_per_hour: Option<i32>,
    /// `Some(None)` removes the lease: workers keep their own.
    pub heartbeat_lease: Option<Option<Duration>>,
}

/// Changes `action`'s policy; returns it as recorded, and the audit entry.
pub async fn set<'c>(
    executor: impl PgExecutor<'c>,
    action: &str,
    change: &PolicyChange,
    operator: &str,
    reason: &str,
) -> Result<(Value, i64), LedgerError> {
    Ok(sqlx::query_as(
        "select policy, audit_seq from ledger.op_set_policy(
            action => $1, operator => $2, reason => $3, pending_window => $4,
            exclusive_per_target => $5, compensation_approval_limit_minor => $6,
            clear_approval_limit => $7, retry_when_absent => $8, retry_semantics => $9,
            escalation_sink => $10, clear_escalation_sink => $11,
            approvals_must_be_registered => $12, conflicts_by_time_range => $13,
            on_holder_success => $14, replay_burst_per_hour => $15,
            heartbeat_lease => $16, clear_heartbeat_lease => $17)",
    )
    .bind(action)
    .bind(operator)
    .bind(reason)
    .bind(change.pending_window)
    .bind(change.exclusive_per_target)
    .bind(change.compensation_approval_limit_minor.flatten())
    .bind(matches!(
        change.compensation_approval_limit_minor,
        Some(None)
    ))
    .bind(change.retry_when_absent)
    .bind(change.retry_semantics.as_deref())
    .bind(change.escalation_sink.clone().flatten())
    .bind(matches!(change.escalation_sink, Some(None)))
    .bind(change.approvals_must_be_registered)
    .bind(change.conflicts_by_time_range)
    .bind(change.on_holder_success.as_deref())
    .bind(change.replay_burst_per_hour)
    .bind(change.heartbeat_lease.flatten())
    .bind(matches!(change.heartbeat_lease, Some(None)))
    .fetch_one(executor)
    .await?)
}

/// Ledger-wide: whether an action with no policy of its own is refused at
/// `begin_effect` (`refuse`) or runs under the defaults (`allow`). Returns
/// the audit entry.
pub async fn set_unknown_actions<'c>(
    executor: impl PgExecutor<'c>,
    mode: &str,
    operator: &str,
    reason: &str,
) -> Result<i64, LedgerError> {
    Ok(sqlx::query_scalar(
        "select audit_seq from ledger.op_set_unknown_actions(mode => $1, operator => $2, reason => $3)",
    )
    .bind(mode)
    .bind(operator)
    .bind(reason)
    .fetch_one(executor)
    .await?)
}
