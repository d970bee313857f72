//! What an incident report reads of a span of time: the items that entered
//! each pane, the reconciliations, and the operators' actions — each
//! filtered by target and action (ILIKE patterns, or none).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::panes::Pane;
use super::{LedgerError, LedgerPool};

/// An item that entered a pane in the span (`ledger.pane_entries`), as of
/// the span's end once [`PaneEntry::as_of`] has cut it there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct PaneEntry {
    #[sqlx(try_from = "String")]
    pub pane: Pane,
    pub effect_id: i64,
    pub op_key: String,
    pub target: String,
    pub action: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub entered_at: DateTime<Utc>,
    /// When it left the pane, if it did by the end of the span.
    pub resolved_at: Option<DateTime<Utc>>,
    /// What it became: a state, or `dispatched` for a deadline reset.
    pub resolved_to: Option<String>,
    /// Entry to resolution, or to the end of the span while still open.
    #[sqlx(skip)]
    pub duration_ms: i64,
}

impl PaneEntry {
    /// As of `until`: a resolution after it is not one yet.
    pub fn as_of(mut self, until: DateTime<Utc>) -> PaneEntry {
        if self.resolved_at.is_some_and(|at| at > until) {
            self.resolved_at = None;
            self.resolved_to = None;
        }
        self.duration_ms = (self.resolved_at.unwrap_or(until) - self.entered_at).num_milliseconds();
        self
    }

    pub fn is_open(&self) -> bool {
        self.resolved_at.is_none()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ReportReconciliation {
    pub at: DateTime<Utc>,
    pub op_key: String,
    pub target: String,
    pub provider: Option<String>,
    pub finding: String,
    pub external_refs: Vec<String>,
    pub state_before: String,
    pub state_after: String,
    pub requested_by: String,
    pub duration_ms: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct OperatorAction {
    pub seq: i64,
    pub at: DateTime<Utc>,
    pub operator: String,
    pub db_role: String,
    pub action: String,
    pub op_key: Option<String>,
    pub reason: Option<String>,
    pub after: Option<Value>,
}

/// A span `[start, end)` and what narrows it: ILIKE patterns, or none.
#[derive(Debug, Clone, Copy)]
pub struct Span<'a> {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub target_like: Option<&'a str>,
    pub action_like: Option<&'a str>,
}

pub async fn pane_entries(
    pool: &LedgerPool,
    span: Span<'_>,
) -> Result<Vec<PaneEntry>, LedgerError> {
    Ok(sqlx::query_as::<_, PaneEntry>(
        "select pane, effect_id, op_key, target, action, amount_minor, currency, entered_at,
                resolved_at, resolved_to
           from ledger.pane_entries($1, $2, $3, $4)",
    )
    .bind(span.start)
    .bind(span.end)
    .bind(span.target_like)
    .bind(span.action_like)
    .fetch_all(pool)
    .await?)
}

pub async fn reconciliations(
    pool: &LedgerPool,
    span: Span<'_>,
) -> Result<Vec<ReportReconciliation>, LedgerError> {
    Ok(sqlx::query_as::<_, ReportReconciliation>(
        "select r.at, r.op_key, e.target, r.provider, r.finding, r.external_refs,
                r.state_before, r.state_after, r.requested_by, r.duration_ms
           from ledger.reconciliations r
           join ledger.effects e on e.id = r.effect_id
          where r.at >= $1 and r.at < $2
            and ($3::text is null or e.target ilike $3)
            and ($4::text is null or e.action ilike $4)
          order by r.at, r.id",
    )
    .bind(span.start)
    .bind(span.end)
    .bind(span.target_like)
    .bind(span.action_like)
    .fetch_all(pool)
    .await?)
}

/// Entries about no effect (a prune) belong to an unfiltered span only.
pub async fn operator_actions(
    pool: &LedgerPool,
    span: Span<'_>,
) -> Result<Vec<OperatorAction>, LedgerError> {
    Ok(sqlx::query_as::<_, OperatorAction>(
        "select a.seq, a.at, a.operator, a.db_role, a.action, a.op_key, a.reason, a.after
           from ledger.audit_log a
           left join ledger.effects e on e.id = a.effect_id
          where a.at >= $1 and a.at < $2
            and ($3::text is null or e.target ilike $3)
            and ($4::text is null or e.action ilike $4)
          order by a.seq",
    )
    .bind(span.start)
    .bind(span.end)
    .bind(span.target_like)
    .bind(span.action_like)
    .fetch_all(pool)
    .await?)
}
