//! Taking in a poll: the data replaces what is shown while each selection
//! stays on its item, and the small views are filtered here.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::{App, VIEWS, View, model};
use crate::ledger::actions::Applicability;
use crate::ledger::escalations::{ApprovalRow, EscalationRow};
use crate::ledger::finance::FinanceReview;
use crate::ledger::model::AuditEntry;
use crate::ledger::panes::{Filter, Pane, PaneRows};

/// One poll's worth of data; the UI renders from the latest one.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub panes: Vec<(Pane, PaneRows)>,
    /// Items per pane in the whole ledger (not only the fetched window).
    pub counts: Vec<(Pane, i64)>,
    /// Keys of the duplicates pane the ledger answered by itself (replays
    /// only), not listed under the current filter; None when they are.
    pub replays_only: Option<i64>,
    pub escalations: Vec<EscalationRow>,
    pub approvals: Vec<ApprovalRow>,
    pub audit: Vec<AuditEntry>,
    /// Escalations plus approvals, and audit entries, in the whole ledger at
    /// the snapshot's instant; None under a filter (the tab counts what matches).
    pub escalation_count: Option<i64>,
    pub audit_count: Option<i64>,
    /// Whether changes reach the console as they happen: if not, they show
    /// only at the next regular poll.
    pub notifications: Notifications,
    /// `host:port/database` the snapshot was read from: of several hosts,
    /// the one the console found the ledger on.
    pub server: Option<String>,
    pub finance: Option<FinanceReview>,
    /// For each effect shown, what an operator may do with it now (empty
    /// under time travel, where nothing is acted on).
    pub applicability: HashMap<String, Applicability>,
    /// Replay lag in seconds when the console reads a standby (None: the primary).
    pub replica_lag: Option<f64>,
    /// Whether the standby read hears from its primary now (None: the
    /// primary): false while a failover is under way.
    pub primary_heard: Option<bool>,
    /// Whether acknowledged writes survive a failover, as the live ledger's
    /// settings and standbys say (None under time travel).
    pub durability: Option<crate::ledger::durability::Verdict>,
    /// Why the finance review could not be read; the panes are still fresh.
    pub finance_error: Option<String>,
    pub polled_at: DateTime<Utc>,
    pub latency: Duration,
    pub database: String,
    pub role: String,
    /// The window offsets these rows were fetched at.
    pub offsets: [usize; 4],
    /// The filter the panes' rows were read with: until a read for a new
    /// filter arrives, the rows on screen are the previous filter's.
    pub filter: Filter,
    /// How many actions the console had settled when this read began: a
    /// read that counts an action shows what it did.
    pub settled_actions: u64,
}

impl App {
    /// Replaces the data while keeping each selection on its item.
    pub fn apply_snapshot(&mut self, snapshot: Box<Snapshot>) {
        self.data_since = Some(
            Instant::now()
                .checked_sub(snapshot.latency)
                .unwrap_or_else(Instant::now),
        );
        for pane in Pane::ALL {
            let index = View::Pane(pane);
            if let Some((_, rows)) = snapshot.panes.iter().find(|(p, _)| *p == pane) {
                self.models[index] = model::pane_model(rows);
                if pane == Pane::Held {
                    self.stopped_asking = rows
                        .stopped_asking()
                        .into_iter()
                        .map(|(op_key, _)| op_key)
                        .collect();
                }
            }
            self.totals[index] = snapshot
                .counts
                .iter()
                .find(|(p, _)| *p == pane)
                .map(|(_, count)| *count)
                .unwrap_or(self.models[index].rows.len() as i64);
        }
        let escalations = self.filtered_escalations(&snapshot.escalations);
        let approvals: Vec<ApprovalRow> = snapshot
            .approvals
            .iter()
            .filter(|row| {
                self.matches_filter(&[
                    ("key", &row.op_key),
                    ("target", &row.target),
                    ("requester", &row.requested_by),
                    ("state", "awaiting approval"),
                ])
            })
            .cloned()
            .collect();
        let escalations_view = View::Escalations;
        self.models[escalations_view] = model::escalation_model(&escalations, &approvals);
        self.totals[escalations_view] = snapshot
            .escalation_count
            .unwrap_or((escalations.len() + approvals.len()) as i64);
        if let Some(finance) = &snapshot.finance {
            let suspected: Vec<_> = finance
                .suspected
                .iter()
                .filter(|row| {
                    self.matches_filter(&[
                        ("key", &row.op_key),
                        ("target", &row.target),
                        ("action", &row.action),
                        ("provider", row.provider.as_deref().unwrap_or("")),
                        ("requester", &row.requested_by),
                    ])
                })
                .cloned()
                .collect();
            self.models[View::Finance] = model::finance_model(&suspected);
            self.totals[View::Finance] = suspected.len() as i64;
        }
        let audit: Vec<AuditEntry> = snapshot
            .audit
            .iter()
            .filter(|entry| {
                self.matches_filter(&[
                    ("key", entry.op_key.as_deref().unwrap_or("")),
                    ("target", entry.target.as_deref().unwrap_or("")),
                    ("action", &entry.action),
                    ("operator", &entry.operator),
                    ("reason", entry.reason.as_deref().unwrap_or("")),
                ])
            })
            .cloned()
            .collect();
        self.models[View::Audit] = model::audit_model(&audit);
        self.totals[View::Audit] = snapshot.audit_count.unwrap_or(audit.len() as i64);
        self.offsets = snapshot.offsets;
        // What this console's actions did and the read does not show yet
        // (it began before they committed) stays as the results said.
        self.acted_after(snapshot.settled_actions);
        // The table models hold what is shown; the raw rows would only
        // double the memory of a large window.
        let mut snapshot = snapshot;
        snapshot.panes.clear();
        self.snapshot = Some(snapshot);
        for view in VIEWS {
            if let Some((column, descending)) = self.lists[view].sort {
                self.models[view].sort(column, descending);
            }
            self.reselect(view);
        }
        if self.pending_jump_to_end {
            self.pending_jump_to_end = false;
            let last = self.models[self.view].rows.len().saturating_sub(1);
            self.select(self.view, last);
        }
    }

    fn filtered_escalations(&self, rows: &[EscalationRow]) -> Vec<EscalationRow> {
        rows.iter()
            .filter(|row| self.matches_filter(&row.filter_fields()))
            .cloned()
            .collect()
    }

    /// Client-side filtering for the small views (escalations, audit,
    /// finance), meaning what the panes' SQL filter means: every term must
    /// match; `field:value` searches that field only (a view without it
    /// shows nothing), a plain word any field the view has.
    fn matches_filter(&self, fields: &[(&str, &str)]) -> bool {
        self.filter.matches_fields(fields)
    }
}

/// Whether the console hears of changes as they happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Notifications {
    /// LISTEN is up, and a probe announced through the pool reached it.
    Arriving,
    /// The LISTEN connection is being made (again).
    #[default]
    Reconnecting,
    /// LISTEN was accepted but the probe never arrived: a transaction pooler
    /// drops the subscription with the transaction. The console polls.
    Lost,
}
