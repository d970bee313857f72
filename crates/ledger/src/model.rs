//! The ledger's records as Rust types, read with explicit column lists so a
//! schema change shows up as a compile-visible edit here, not a silent skew.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::json::BoundedJson;

/// The states of DESIGN.md; the database enforces the transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type)]
#[sqlx(type_name = "text", rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum State {
    Pending,
    Held,
    Unknown,
    Succeeded,
    Failed,
    Compensated,
    Cancelled,
}

impl State {
    pub const ALL: [State; 7] = [
        State::Pending,
        State::Held,
        State::Unknown,
        State::Succeeded,
        State::Failed,
        State::Compensated,
        State::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Held => "held",
            State::Unknown => "unknown",
            State::Succeeded => "succeeded",
            State::Failed => "failed",
            State::Compensated => "compensated",
            State::Cancelled => "cancelled",
        }
    }

    /// Open effects still need something to happen before they are settled.
    pub fn is_open(self) -> bool {
        matches!(self, State::Pending | State::Held | State::Unknown)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for State {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|state| state.as_str() == text)
            .ok_or_else(|| format!("unknown state {text:?}"))
    }
}

/// What `ledger.begin_effect` tells the caller to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type)]
#[sqlx(type_name = "text", rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// New: dispatch it.
    Proceed,
    /// Already succeeded: use the stored result, do not call.
    Replay,
    /// Pending or unknown: do not call; reconcile.
    InFlight,
    /// Failed and retryable: dispatch again under the same key.
    Retry,
    /// Failed for good, compensated or cancelled: do not call.
    Stop,
    /// Same key, different params: never merged.
    Rejected,
    /// Another open effect on the target conflicts: wait for a person.
    Held,
    /// Rate limited: the same key may be sent again after
    /// `result.retry_after_seconds`.
    Wait,
    /// A booking whose time range overlaps one already made on the target
    /// (`result.overlaps`, `result.during`): not a retry, a second booking.
    Overlap,
    /// The key is another caller's (another login, outside its tenant):
    /// nothing was done and nothing of the effect is told — no id, no
    /// state, no result. [`crate::writer::begin_effect`] returns it
    /// as [`crate::LedgerError::Refused`].
    Refused,
}

impl Decision {
    /// Whether the caller may now claim the effect and call the provider.
    pub fn may_dispatch(self) -> bool {
        matches!(self, Decision::Proceed | Decision::Retry)
    }
}

/// One row of `ledger.effects`. JSON an agent or a provider sent is read
/// through `BoundedJson`, so that a value nested absurdly deep is shown cut
/// rather than making the row unreadable.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Effect {
    pub id: i64,
    pub op_key: String,
    pub action: String,
    pub target: String,
    #[sqlx(try_from = "BoundedJson")]
    pub params: Value,
    pub params_hash: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub provider: Option<String>,
    pub requested_by: String,
    /// The login role that created the effect, and alone may dispatch or
    /// complete it; `requested_by` is only the name the caller gave.
    pub owner_role: String,
    pub approval_ref: Option<String>,
    pub approval_version: Option<i32>,
    pub request_id: Option<String>,
    pub state: State,
    pub pending_window_secs: i64,
    pub deadline_at: Option<DateTime<Utc>>,
    pub external_ref: Option<String>,
    #[sqlx(try_from = "BoundedJson")]
    pub result: Option<Value>,
    pub failure_reason: Option<String>,
    /// The class of the worker's last error (timeout, connection_reset,
    /// server_error, invalid_response, business_rejection, rate_limited).
    pub error_class: Option<String>,
    pub retryable: Option<bool>,
    pub late_result_at: Option<DateTime<Utc>>,
    pub attention: Option<String>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub dispatched_at: Option<DateTime<Utc>>,
    pub dispatched_by: Option<String>,
    pub dispatched_role: Option<String>,
    pub updated_at: DateTime<Utc>,
    pub settled_at: Option<DateTime<Utc>>,
    pub compensates: Option<i64>,
    pub held_by: Option<i64>,
}

impl Effect {
    /// The column list matching this struct, for `select {COLUMNS} from ledger.effects e`.
    pub const COLUMNS: &'static str = "e.id, e.op_key, e.action, e.target, e.params, e.params_hash, \
        e.amount_minor, e.currency, e.provider, e.requested_by, e.owner_role, e.approval_ref, \
        e.approval_version, \
        e.request_id, e.state, extract(epoch from e.pending_window)::bigint as pending_window_secs, \
        e.deadline_at, e.external_ref, e.result, e.failure_reason, e.error_class, e.retryable, \
        e.late_result_at, \
        e.attention, e.version, e.created_at, e.dispatched_at, e.dispatched_by, e.dispatched_role, \
        e.updated_at, \
        e.settled_at, e.compensates, e.held_by";

    /// The last error as the unknown pane says it (sql/migrations/0024): the
    /// worker's error class, then its reason when it gave one.
    pub fn last_error(&self) -> Option<String> {
        match (self.error_class.as_deref(), self.failure_reason.as_deref()) {
            (None, reason) => reason.map(str::to_string),
            (Some(class), None) => Some(class.to_string()),
            (Some(class), Some(reason)) if reason.starts_with(class) => Some(reason.to_string()),
            (Some(class), Some(reason)) => Some(format!("{class}: {reason}")),
        }
    }

    /// Who asked for it: the name given, and the owning login if it differs.
    pub fn requester(&self) -> String {
        name_and_login(&self.requested_by, &self.owner_role)
    }

    /// Who dispatched it: the worker named, and the login if it differs.
    pub fn dispatcher(&self) -> String {
        let worker = self.dispatched_by.as_deref().unwrap_or("?");
        match &self.dispatched_role {
            Some(login) => name_and_login(worker, login),
            None => worker.to_string(),
        }
    }
}

/// A name a caller gave (`requested_by`, `worker`, `operator`) beside the
/// login role that made the call, when the two differ: the name is only
/// asserted, the login is proof, and a reader must see both.
pub fn name_and_login(name: &str, login: &str) -> String {
    if name == login {
        name.to_string()
    } else {
        format!("{name} (login {login})")
    }
}

/// One call to the writer API for a key.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Attempt {
    pub id: i64,
    pub kind: String,
    pub requested_by: Option<String>,
    /// The login role that made the call.
    pub db_role: String,
    pub request_id: Option<String>,
    pub params_hash: Option<String>,
    #[sqlx(try_from = "BoundedJson")]
    pub params: Option<Value>,
    #[sqlx(try_from = "BoundedJson")]
    pub detail: Option<Value>,
    pub flagged: bool,
    pub at: DateTime<Utc>,
}

/// One state change, as the history trigger recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct EffectEvent {
    pub id: i64,
    pub from_state: Option<String>,
    pub to_state: String,
    pub actor: String,
    pub db_role: String,
    pub reason: Option<String>,
    pub at: DateTime<Utc>,
}

/// What a provider said when asked about an effect.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Reconciliation {
    pub id: i64,
    pub provider: Option<String>,
    pub finding: String,
    pub external_refs: Vec<String>,
    #[sqlx(try_from = "BoundedJson")]
    pub evidence: Value,
    pub duration_ms: Option<i32>,
    pub state_before: String,
    pub state_after: String,
    pub requested_by: String,
    pub at: DateTime<Utc>,
}

/// A review item handed to a person.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Escalation {
    pub id: i64,
    pub escalation_key: String,
    pub op_key: String,
    pub sink: String,
    pub decision_needed: String,
    #[sqlx(try_from = "BoundedJson")]
    pub payload: Value,
    pub state: String,
    pub delivery_attempts: i32,
    pub last_error: Option<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub acknowledged_by: Option<String>,
    pub resolved_by: Option<String>,
}

/// One entry of the hash-chained audit log.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct AuditEntry {
    pub seq: i64,
    pub at: DateTime<Utc>,
    pub operator: String,
    pub db_role: String,
    pub action: String,
    pub effect_id: Option<i64>,
    pub op_key: Option<String>,
    pub reason: Option<String>,
    #[sqlx(try_from = "BoundedJson")]
    pub before: Option<Value>,
    #[sqlx(try_from = "BoundedJson")]
    pub after: Option<Value>,
    pub hash: String,
    /// The target of its effect, where the query reads it (the audit view's `target:`).
    #[sqlx(default)]
    pub target: Option<String>,
}
