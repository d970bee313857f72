//! What the result of a confirmed action changes at once: the message,
//! headed by what the action was done to, and the items it acted on, shown
//! as they now are until a read that began after the result shows them
//! itself. Without that, the selection stays on an item already acted on
//! and the next key acts on it again.

use serde_json::Value;

use super::{App, Task, VIEWS, View, model};
use crate::console::model::{APPROVAL_ROW, TableModel};
use crate::console::theme::Role;
use crate::ledger::panes::Pane;
use crate::settle::verbs::{self, Runs, Subject};
use crate::settle::{Request, Settled};

/// What an action this console confirmed did to one item, as its result
/// said, kept until a read that knows of the action arrives: a poll already
/// under way when it committed would otherwise bring the item back as it
/// was.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Acted {
    pub(crate) on: ActedOn,
    /// The console's count of settled actions with this one in it: a
    /// snapshot read for at least as many shows what it did.
    pub(crate) known_from: u64,
    /// The request's name (release, resolve escalation…), for a refusal
    /// that says why the item must be read again first.
    pub(crate) by: String,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ActedOn {
    /// An effect, and what it became when the result says so: its state
    /// and version. Neither is known of an item of a bulk action (the
    /// result only counts them), nor after a compensation or escalation.
    Effect {
        op_key: String,
        state: Option<String>,
        version: Option<i64>,
        /// Its repeated calls were acknowledged: it left the duplicates pane.
        off_duplicates: bool,
    },
    /// An escalation, in the state the ledger answered.
    Escalation {
        escalation_key: String,
        state: String,
    },
    /// The compensation of this effect awaiting approval was approved or
    /// rejected: it awaits no longer.
    Approval { op_key: String },
}

impl App {
    pub(super) fn on_settled(
        &mut self,
        request: Request,
        result: Result<Settled, String>,
    ) -> Vec<Task> {
        let keys = request.keys();
        match result {
            Ok(report) if wrote_nothing(&report) => self.report(
                format!(
                    "cannot {}: {} (nothing written)",
                    request.name(),
                    report.summary
                ),
                Role::Warn,
                &keys,
            ),
            Ok(report) => {
                // Counted: what was settled may change the money at risk (the
                // finance review is read again), and a read begun with this
                // count shows what it did.
                self.settled_actions += 1;
                let known_from = self.settled_actions;
                let by = request.name();
                self.acted
                    .extend(acted_on(&request, &report).into_iter().map(|on| Acted {
                        on,
                        known_from,
                        by: by.clone(),
                    }));
                self.show_acted();
                for view in VIEWS {
                    self.reselect(view);
                }
                self.report(format!("✓ {}", report.summary), Role::Ok, &keys);
            }
            Err(error) => self.report(format!("✗ {error}"), Role::Critical, &keys),
        }
        let mut tasks = vec![Task::Repoll];
        tasks.extend(self.refresh_detail());
        tasks
    }

    /// Forgets what a read begun after `read_with` settled actions shows by
    /// itself, and shows the rest on the models just built from it.
    pub(super) fn acted_after(&mut self, read_with: u64) {
        self.acted.retain(|acted| acted.known_from > read_with);
        self.show_acted();
    }

    /// Shows each item acted on as the result said it is: gone from the
    /// views that no longer list it (the selection then falls on the row
    /// that took its place), else at its new version and state.
    fn show_acted(&mut self) {
        for acted in &self.acted {
            for view in VIEWS {
                show_on(&mut self.models[view], view, &acted.on);
            }
        }
    }

    /// The action on this effect whose outcome the next read must show
    /// before anything else is done to it: the ledger's rules of what
    /// applies were read for the effect as it was.
    pub(super) fn awaiting_read(&self, op_key: &str) -> Option<&Acted> {
        self.acted.iter().rev().find(|acted| match &acted.on {
            ActedOn::Effect { op_key: key, .. } => key == op_key,
            _ => false,
        })
    }

    /// An escalation's state: as this console's last action on it left it,
    /// else as last read.
    pub(super) fn escalation_state(&self, escalation_key: &str) -> Option<&str> {
        let acted = self.acted.iter().rev().find_map(|acted| match &acted.on {
            ActedOn::Escalation {
                escalation_key: key,
                state,
            } if key == escalation_key => Some(state.as_str()),
            _ => None,
        });
        acted.or_else(|| {
            self.snapshot
                .as_ref()?
                .escalations
                .iter()
                .find(|row| row.escalation_key == escalation_key)
                .map(|row| row.state.as_str())
        })
    }
}

/// An escalation already in the state asked for is answered `unchanged`:
/// nothing was written, which the operator reads as a refusal, not a
/// success.
fn wrote_nothing(report: &Settled) -> bool {
    report.detail.get("status").and_then(Value::as_str) == Some("unchanged")
}

/// What a request that succeeded did to each item, as far as its report says.
fn acted_on(request: &Request, report: &Settled) -> Vec<ActedOn> {
    let state = report
        .detail
        .get("state")
        .and_then(Value::as_str)
        .map(str::to_string);
    let version = report.detail.get("version").and_then(Value::as_i64);
    let unknown = |op_key: &str| ActedOn::Effect {
        op_key: op_key.to_string(),
        state: None,
        version: None,
        off_duplicates: false,
    };
    let verb = request.verb;
    match &request.subject {
        Subject::Escalation { escalation_key } => state
            .map(|state| ActedOn::Escalation {
                escalation_key: escalation_key.clone(),
                state,
            })
            .into_iter()
            .collect(),
        // Each escalation acted on, in the state the ledger answered.
        Subject::Escalations { .. } => report
            .detail
            .get("states")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|pair| {
                Some(ActedOn::Escalation {
                    escalation_key: pair.get(0)?.as_str()?.to_string(),
                    state: pair.get(1)?.as_str()?.to_string(),
                })
            })
            .collect(),
        Subject::Pane { targets } => targets.iter().map(|(op_key, _)| unknown(op_key)).collect(),
        Subject::Effect { op_key, .. } if *verb == verbs::APPROVE || *verb == verbs::REJECT => {
            vec![
                ActedOn::Approval {
                    op_key: op_key.clone(),
                },
                unknown(op_key),
            ]
        }
        // What the effect became, where the report is of the effect itself
        // (a compensation's or an escalation's is of another record).
        Subject::Effect { op_key, .. }
            if matches!(verb.runs, Runs::Call(_))
                || *verb == verbs::RECONCILE
                || *verb == verbs::RESOLVE =>
        {
            vec![ActedOn::Effect {
                op_key: op_key.clone(),
                state,
                version,
                // Taking a key off the duplicates pane is what acknowledging is for.
                off_duplicates: *verb == verbs::ACKNOWLEDGE_DUPLICATES,
            }]
        }
        Subject::Effect { op_key, .. } => vec![unknown(op_key)],
    }
}

/// The one state every item of a pane is in, for the panes that list one
/// (sql/migrations/0007_panes.sql): an effect that left it left the pane.
fn state_listed(pane: Pane) -> Option<&'static str> {
    match pane {
        Pane::Overdue => Some("pending"),
        Pane::Unknown => Some("unknown"),
        Pane::Held => Some("held"),
        Pane::Duplicates => None,
    }
}

/// Shows one item acted on in one view's rows.
fn show_on(model: &mut TableModel, view: View, on: &ActedOn) {
    match on {
        ActedOn::Effect {
            op_key,
            state,
            version,
            off_duplicates,
        } => {
            let leaves = match view {
                View::Pane(Pane::Duplicates) => *off_duplicates,
                View::Pane(pane) => state
                    .as_deref()
                    .zip(state_listed(pane))
                    .is_some_and(|(now, listed)| now != listed),
                _ => false,
            };
            // A row read at the new version or later already says it.
            let older = |row: &model::Row| {
                row.op_key.as_deref() == Some(op_key.as_str())
                    && row
                        .version
                        .zip(*version)
                        .is_none_or(|(read, now)| read < now)
            };
            if leaves {
                model.rows.retain(|row| !older(row));
                return;
            }
            let state_column = model.columns.iter().position(|c| c.title == "state");
            for row in model.rows.iter_mut().filter(|row| older(row)) {
                if row.version.is_some() && version.is_some() {
                    row.version = *version;
                }
                // The duplicates pane shows the effect's state; the
                // escalations view's column is the escalation's.
                if let (View::Pane(_), Some(column), Some(state)) = (view, state_column, state)
                    && let Some(cell) = row.cells.get_mut(column)
                {
                    cell.text = state.clone();
                }
            }
        }
        ActedOn::Escalation {
            escalation_key,
            state,
        } if view == View::Escalations => {
            if state == "resolved" {
                model.rows.retain(|row| row.id != *escalation_key);
                return;
            }
            let state_column = model.columns.iter().position(|c| c.title == "state");
            for row in model
                .rows
                .iter_mut()
                .filter(|row| row.id == *escalation_key)
            {
                if let Some(cell) = state_column.and_then(|column| row.cells.get_mut(column)) {
                    *cell = model::escalation_state_cell(state);
                }
            }
        }
        ActedOn::Approval { op_key } if view == View::Escalations => {
            model.rows.retain(|row| {
                !(row.id.starts_with(APPROVAL_ROW) && row.op_key.as_deref() == Some(op_key))
            });
        }
        ActedOn::Escalation { .. } | ActedOn::Approval { .. } => {}
    }
}
