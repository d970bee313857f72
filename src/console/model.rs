//! Table models: ledger rows turned into display cells once per poll, so a
//! frame only lays out the rows it shows. All untrusted text is sanitised here.

use chrono::{DateTime, Utc};

use super::theme::Role;
use crate::format::{duration_ms, optional_money};
use crate::ledger::escalations::{ApprovalRow, EscalationRow};
use crate::ledger::finance::SuspectedEffect;
use crate::ledger::model::AuditEntry;
use crate::ledger::panes::{DuplicateRow, HeldRow, OverdueRow, Pane, PaneRows, UnknownRow};
use crate::text::sanitize_line;

/// What a column sorts by: a number, or the cell's text (compared without
/// case, computed when sorting rather than stored twice per cell).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum SortValue {
    Number(i64),
    Text,
    /// An amount: compared only within its currency, so every sort on
    /// money orders by currency first.
    Money {
        currency: String,
        minor: i64,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub text: String,
    pub role: Role,
    pub sort: SortValue,
}

impl Cell {
    fn text(text: &str) -> Cell {
        let text = sanitize_line(text);
        Cell {
            sort: SortValue::Text,
            text,
            role: Role::Text,
        }
    }

    fn muted(text: &str) -> Cell {
        Cell {
            role: Role::Muted,
            ..Cell::text(text)
        }
    }

    fn number(value: i64, text: String, role: Role) -> Cell {
        Cell {
            text,
            role,
            sort: SortValue::Number(value),
        }
    }

    fn with_role(mut self, role: Role) -> Cell {
        self.role = role;
        self
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What the selection follows: the op_key, or the escalation key, or the audit seq.
    pub id: String,
    /// The effect's key (for actions and detail), if the row is about one effect.
    pub op_key: Option<String>,
    pub version: Option<i64>,
    pub cells: Vec<Cell>,
    /// The row deserves attention (a mismatch, a late result): drawn with its role.
    pub flag: Option<Role>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Column {
    pub title: &'static str,
    /// Minimum width; columns marked flexible share what is left.
    pub width: u16,
    pub flexible: bool,
    /// See [`Column::kept`].
    pub kept: bool,
    /// The item's key: the selected row's is shown whole when its column
    /// is too narrow for it.
    pub key: bool,
}

/// What the duplicates pane's "needs" column says of a key whose repeats the
/// ledger answered by itself (replayed, told to wait, held, safe retries).
pub const REPLAYS_ONLY: &str = "replays only";

const fn col(title: &'static str, width: u16, flexible: bool) -> Column {
    Column {
        title,
        width,
        flexible,
        kept: false,
        key: false,
    }
}

impl Column {
    /// The column is what the table is about (finance's target): it keeps
    /// its ends at narrow widths as a key does, instead of giving way.
    const fn kept(mut self) -> Column {
        self.kept = true;
        self
    }

    /// The column of the item's key.
    const fn key(mut self) -> Column {
        self.key = true;
        self
    }
}

/// A pane's columns, from the pane's one spec beside its queries.
fn pane_columns(pane: Pane) -> Vec<Column> {
    pane.columns()
        .iter()
        .map(|column| Column {
            title: column.title,
            width: column.width,
            flexible: column.flexible,
            kept: false,
            key: column.key,
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct TableModel {
    pub columns: Vec<Column>,
    pub rows: Vec<Row>,
}

impl TableModel {
    pub fn position(&self, id: &str) -> Option<usize> {
        self.rows.iter().position(|row| row.id == id)
    }

    pub fn sort(&mut self, column: usize, descending: bool) {
        if column >= self.columns.len() {
            return;
        }
        self.rows.sort_by_cached_key(|row| {
            let cell = &row.cells[column];
            let key = match &cell.sort {
                SortValue::Number(value) => (String::new(), *value, String::new()),
                SortValue::Text => (String::new(), 0, cell.text.to_lowercase()),
                SortValue::Money { currency, minor } => (currency.clone(), *minor, String::new()),
            };
            (key, row.id.clone())
        });
        if descending {
            self.rows.reverse();
        }
    }
}

fn money_cell(amount: Option<i64>, currency: Option<&str>) -> Cell {
    let text = sanitize_line(&optional_money(amount, currency));
    Cell {
        sort: SortValue::Money {
            currency: currency.unwrap_or_default().to_uppercase(),
            minor: amount.unwrap_or(i64::MIN),
        },
        text,
        role: Role::Text,
    }
}

fn age_cell(ms: i64, role: Role) -> Cell {
    Cell::number(ms, duration_ms(ms), role)
}

fn time_cell(at: DateTime<Utc>) -> Cell {
    Cell::number(
        at.timestamp_millis(),
        at.format("%m-%d %H:%M:%S").to_string(),
        Role::Muted,
    )
}

/// How late an item is, as a role: the longer past its window, the louder.
fn lateness(ms: i64) -> Role {
    if ms > 15 * 60_000 {
        Role::Critical
    } else {
        Role::Warn
    }
}

/// A pane's rows as cells, under the pane's columns ([`Pane::columns`]).
pub fn pane_model(rows: &PaneRows) -> TableModel {
    let model = TableModel {
        columns: pane_columns(rows.pane()),
        rows: match rows {
            PaneRows::Overdue(rows) => rows.iter().map(overdue_row).collect(),
            PaneRows::Unknown(rows) => rows.iter().map(unknown_row).collect(),
            PaneRows::Duplicates(rows) => rows.iter().map(duplicate_row).collect(),
            PaneRows::Held(rows) => rows.iter().map(held_row).collect(),
        },
    };
    debug_assert!(
        model
            .rows
            .iter()
            .all(|row| row.cells.len() == model.columns.len()),
        "a cell per column of {}",
        rows.pane()
    );
    model
}

fn overdue_row(row: &OverdueRow) -> Row {
    Row {
        id: row.op_key.clone(),
        op_key: Some(row.op_key.clone()),
        version: Some(row.version),
        cells: vec![
            Cell::text(&row.op_key),
            Cell::text(&row.action),
            Cell::text(&row.target),
            money_cell(row.amount_minor, row.currency.as_deref()),
            age_cell(row.age_ms, Role::Text),
            age_cell(row.overdue_ms, lateness(row.overdue_ms)),
            if row.dispatched {
                Cell::text("▲ sent").with_role(Role::Warn)
            } else {
                Cell::muted("○ prepared")
            },
            Cell::text(&row.requested_by),
        ],
        flag: None,
    }
}

fn unknown_row(row: &UnknownRow) -> Row {
    let findings = match row.last_finding.as_deref() {
        None => "✗ never".to_string(),
        Some(last) => format!("{}× last {last}", row.reconciliations),
    };
    let attention = row.attention.as_deref().map(|what| format!("⚑ {what}"));
    Row {
        id: row.op_key.clone(),
        op_key: Some(row.op_key.clone()),
        version: Some(row.version),
        cells: vec![
            Cell::text(&row.op_key),
            Cell::text(&row.action),
            Cell::text(&row.target),
            money_cell(row.amount_minor, row.currency.as_deref()),
            age_cell(row.unknown_ms, lateness(row.unknown_ms)),
            Cell::number(row.attempts, row.attempts.to_string(), Role::Text),
            Cell::text(row.last_error.as_deref().unwrap_or("—")),
            Cell::text(attention.as_deref().unwrap_or(&findings)).with_role(
                if attention.is_some() {
                    Role::Critical
                } else {
                    Role::Muted
                },
            ),
        ],
        flag: attention.map(|_| Role::Critical),
    }
}

fn duplicate_row(row: &DuplicateRow) -> Row {
    Row {
        id: row.op_key.clone(),
        op_key: Some(row.op_key.clone()),
        version: Some(row.version),
        cells: vec![
            Cell::text(&row.op_key),
            if row.needs_look {
                Cell::text(&row.look_reasons.join(", ")).with_role(Role::Warn)
            } else {
                Cell::muted(REPLAYS_ONLY)
            },
            Cell::text(&row.state),
            Cell::number(row.attempts, row.attempts.to_string(), Role::Text),
            Cell::number(row.replays, row.replays.to_string(), Role::Text),
            Cell::number(row.in_flight, row.in_flight.to_string(), Role::Text),
            if row.has_mismatch {
                Cell::number(
                    row.mismatches,
                    format!("✗ {}", row.mismatches),
                    Role::Critical,
                )
            } else {
                Cell::number(0, "✓ 0".into(), Role::Muted)
            },
            time_cell(row.first_seen),
            time_cell(row.last_seen),
            Cell::text(&row.requesters.join(", ")),
        ],
        flag: row.has_mismatch.then_some(Role::Critical),
    }
}

fn held_row(row: &HeldRow) -> Row {
    Row {
        id: row.op_key.clone(),
        op_key: Some(row.op_key.clone()),
        version: Some(row.version),
        cells: vec![
            Cell::text(&row.target),
            Cell::text(&format!("‖ {}", row.op_key)),
            money_cell(row.amount_minor, row.currency.as_deref()),
            age_cell(row.held_ms, Role::Warn),
            Cell::text(&match (row.overlap_from, row.overlap_to) {
                (Some(from), Some(to)) => format!(
                    "→ {} ({}–{})",
                    row.holder_op_key,
                    from.format("%m-%d %H:%M"),
                    to.format("%H:%M")
                ),
                _ => format!("→ {}", row.holder_op_key),
            }),
            Cell::text(&row.holder_state).with_role(state_role(&row.holder_state)),
            money_cell(row.holder_amount_minor, row.holder_currency.as_deref()),
            age_cell(row.holder_age_ms, Role::Text),
        ],
        flag: None,
    }
}

/// The id prefix of an approval's row in the escalations view: the keys that
/// act on an escalation do not apply to it.
pub const APPROVAL_ROW: &str = "approval:";

/// Open escalations, then the compensations waiting for a second operator
/// (approve with `A`, reject with `D`).
pub fn escalation_model(rows: &[EscalationRow], approvals: &[ApprovalRow]) -> TableModel {
    let mut model = TableModel {
        columns: vec![
            col("key", 24, true).key(),
            col("decision needed", 20, true),
            col("sink", 10, false),
            col("state", 13, false),
            col("tries", 5, false),
            col("age", 7, false),
            col("by", 10, false),
            col("last error", 16, true),
        ],
        rows: rows
            .iter()
            .map(|row| Row {
                id: row.escalation_key.clone(),
                op_key: Some(row.op_key.clone()),
                version: Some(row.effect_version),
                cells: vec![
                    Cell::text(&row.op_key),
                    Cell::text(&row.decision_needed),
                    Cell::text(&row.sink),
                    escalation_state_cell(&row.state),
                    Cell::number(
                        row.delivery_attempts.into(),
                        row.delivery_attempts.to_string(),
                        Role::Text,
                    ),
                    age_cell(row.age_ms, Role::Text),
                    Cell::text(&row.created_by),
                    Cell::text(row.last_error.as_deref().unwrap_or("—")),
                ],
                flag: None,
            })
            .collect(),
    };
    model.rows.extend(approvals.iter().map(|row| Row {
        id: format!("{APPROVAL_ROW}{}", row.request_id),
        op_key: Some(row.op_key.clone()),
        version: Some(row.version),
        cells: vec![
            Cell::text(&row.op_key),
            Cell::text(&format!(
                "approve compensation of {}? {}",
                optional_money(row.amount_minor, row.currency.as_deref()),
                row.reason
            )),
            Cell::muted("four-eyes"),
            Cell::text("‖ awaiting approval").with_role(Role::Warn),
            Cell::number(0, "—".into(), Role::Muted),
            age_cell(row.waiting_ms, Role::Warn),
            Cell::text(&row.requested_by),
            Cell::muted("—"),
        ],
        flag: None,
    }));
    model
}

/// An escalation's state, with its symbol and role.
pub fn escalation_state_cell(state: &str) -> Cell {
    Cell::text(&escalation_state_label(state)).with_role(escalation_role(state))
}

fn escalation_state_label(state: &str) -> String {
    let symbol = match state {
        "open" => "…",
        "delivered" => "✉",
        "failed" => "✗",
        "acknowledged" => "✓",
        _ => "·",
    };
    format!("{symbol} {state}")
}

fn escalation_role(state: &str) -> Role {
    match state {
        "failed" => Role::Critical,
        "open" => Role::Warn,
        "delivered" => Role::Accent,
        _ => Role::Ok,
    }
}

pub fn audit_model(entries: &[AuditEntry]) -> TableModel {
    TableModel {
        columns: vec![
            col("#", 6, false),
            col("when", 14, false),
            col("operator", 10, false),
            col("role", 10, false),
            // The longest action names (acknowledge_duplicates,
            // dispatch_compensation) whole: many share a prefix.
            col("action", 22, false),
            col("key", 24, true).key(),
            col("reason", 24, true),
        ],
        rows: entries
            .iter()
            .map(|entry| Row {
                id: entry.seq.to_string(),
                op_key: entry.op_key.clone(),
                version: None,
                cells: vec![
                    Cell::number(entry.seq, entry.seq.to_string(), Role::Muted),
                    time_cell(entry.at),
                    Cell::text(&entry.operator),
                    Cell::muted(&entry.db_role),
                    Cell::text(&entry.action).with_role(Role::Accent),
                    Cell::text(entry.op_key.as_deref().unwrap_or("—")),
                    Cell::text(entry.reason.as_deref().unwrap_or("")),
                ],
                flag: None,
            })
            .collect(),
    }
}

/// The symbol and role of a state, so it reads without colour.
pub fn state_symbol(state: &str) -> &'static str {
    match state {
        "pending" => "◷",
        "held" => "‖",
        "unknown" => "?",
        "succeeded" => "✓",
        "failed" => "✗",
        "compensated" => "↺",
        "cancelled" => "⊘",
        _ => "·",
    }
}

pub fn state_role(state: &str) -> Role {
    match state {
        "succeeded" => Role::Ok,
        "unknown" | "failed" => Role::Critical,
        "pending" | "held" => Role::Warn,
        _ => Role::Muted,
    }
}

/// Suspected double effects: one row per succeeded effect of a suspect group.
pub fn finance_model(rows: &[SuspectedEffect]) -> TableModel {
    TableModel {
        columns: vec![
            col("target", 16, true).kept(),
            col("key", 24, true).key(),
            col("amount", 12, false),
            col("group total", 13, false),
            col("approved", 12, false),
            col("excess", 12, false),
            col("why", 18, true),
            col("provider ref", 14, false),
            col("compensation", 14, false),
        ],
        rows: rows
            .iter()
            .map(|row| {
                let currency = row.currency.as_deref();
                let excess = row.excess_minor.unwrap_or(0);
                Row {
                    id: row.op_key.clone(),
                    op_key: Some(row.op_key.clone()),
                    version: Some(row.version),
                    cells: vec![
                        Cell::text(&row.target),
                        Cell::text(&row.op_key),
                        money_cell(row.amount_minor, currency),
                        money_cell(row.total_minor, currency),
                        money_cell(row.approved_minor, currency),
                        money_cell(row.excess_minor, currency).with_role(if excess > 0 {
                            Role::Critical
                        } else {
                            Role::Text
                        }),
                        Cell::text(&format!("⚑ {}", row.reasons.join(", ")))
                            .with_role(Role::Critical),
                        Cell::text(row.external_ref.as_deref().unwrap_or("—")),
                        if row.compensation_under_way {
                            Cell::text(&format!("↺ {}", row.compensation)).with_role(Role::Ok)
                        } else {
                            Cell::text(&format!("✗ {}", row.compensation)).with_role(Role::Warn)
                        },
                    ],
                    flag: None,
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn money_row(id: &str, minor: i64, currency: &str) -> Row {
        Row {
            id: id.to_string(),
            op_key: Some(id.to_string()),
            version: Some(1),
            cells: vec![money_cell(Some(minor), Some(currency))],
            flag: None,
        }
    }

    /// `332.77 EUR`, `33845 JPY`, `369.38 EUR` under "amount ↑" compared
    /// yen with cents; money now sorts by currency first, then amount.
    #[test]
    fn money_is_sorted_within_its_currency() {
        let mut model = TableModel {
            columns: vec![col("amount", 12, false)],
            rows: vec![
                money_row("a", 33_277, "EUR"),
                money_row("b", 33_845, "JPY"),
                money_row("c", 36_938, "EUR"),
                money_row("d", 89_341, "JPY"),
                money_row("e", 78_162, "eur"),
            ],
        };
        model.sort(0, false);
        let order: Vec<&str> = model.rows.iter().map(|row| row.id.as_str()).collect();
        assert_eq!(order, ["a", "c", "e", "b", "d"]);
        model.sort(0, true);
        let order: Vec<&str> = model.rows.iter().map(|row| row.id.as_str()).collect();
        assert_eq!(order, ["d", "b", "e", "c", "a"]);
    }
}
