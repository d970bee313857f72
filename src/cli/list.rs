use crate::ledger::LedgerPool;
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use super::Format;
use super::exit::{Failure, USAGE};
use crate::format::{duration_ms, optional_money};
use crate::ledger::panes::{self, Filter, Pane, PaneRows, Scope};
use crate::text::{safe_json, sanitize_line, truncate};

const CELL_WIDTH: usize = 48;

pub async fn run(
    pool: &LedgerPool,
    at: Option<chrono::DateTime<chrono::Utc>>,
    pane: Pane,
    format: Format,
    limit: i64,
    filter: Option<&str>,
) -> Result<(), Failure> {
    let filter =
        Filter::parse(filter.unwrap_or_default()).map_err(|error| Failure::new(USAGE, error))?;
    let rows = panes::fetch(pool, pane, at, &filter, limit, 0).await?;
    match format {
        Format::Json => println!("{}", safe_json(&rows)),
        Format::Table => {
            if rows.is_empty() {
                match at {
                    Some(at) => println!("{}: nothing open at {}", pane.title(), at.to_rfc3339()),
                    None => println!("{}: nothing open", pane.title()),
                }
            } else {
                println!("{}", render_table(&rows));
            }
            if pane == Pane::Duplicates && !replays_listed(&filter) {
                let replays = filter.toggled(Scope::ReplaysOnly);
                let count = panes::count(pool, pane, at, &replays).await?;
                if count > 0 {
                    eprintln!(
                        "{} not listed: the ledger answered their repeats itself (--filter with-replays lists them)",
                        crate::format::count_of(
                            count as usize,
                            "key only replayed",
                            "keys only replayed"
                        )
                    );
                }
            }
        }
    }
    Ok(())
}

fn replays_listed(filter: &Filter) -> bool {
    filter
        .scopes
        .iter()
        .any(|scope| matches!(scope, Scope::WithReplays | Scope::ReplaysOnly))
}

fn cell(text: &str) -> String {
    truncate(&sanitize_line(text), CELL_WIDTH)
}

fn opt(text: Option<&str>) -> String {
    text.map(cell).unwrap_or_else(|| "—".to_string())
}

pub fn render_table(rows: &PaneRows) -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    match rows {
        PaneRows::Overdue(rows) => {
            table.set_header([
                "key",
                "version",
                "action",
                "target",
                "amount",
                "age",
                "past window",
                "dispatched",
                "requester",
            ]);
            for row in rows {
                table.add_row([
                    cell(&row.op_key),
                    row.version.to_string(),
                    cell(&row.action),
                    cell(&row.target),
                    optional_money(row.amount_minor, row.currency.as_deref()),
                    duration_ms(row.age_ms),
                    duration_ms(row.overdue_ms),
                    if row.dispatched {
                        "yes (no answer)".into()
                    } else {
                        "no (prepared)".into()
                    },
                    cell(&row.requested_by),
                ]);
            }
        }
        PaneRows::Unknown(rows) => {
            table.set_header([
                "key",
                "version",
                "action",
                "target",
                "amount",
                "unknown for",
                "attempts",
                "last error",
                "reconciliations",
            ]);
            for row in rows {
                let findings = if row.findings.is_empty() {
                    "none".to_string()
                } else {
                    row.findings.join(", ")
                };
                table.add_row([
                    cell(&row.op_key),
                    row.version.to_string(),
                    cell(&row.action),
                    cell(&row.target),
                    optional_money(row.amount_minor, row.currency.as_deref()),
                    duration_ms(row.unknown_ms),
                    row.attempts.to_string(),
                    opt(row.last_error.as_deref()),
                    format!("{} ({})", row.reconciliations, cell(&findings)),
                ]);
            }
        }
        PaneRows::Duplicates(rows) => {
            table.set_header([
                "key",
                "version",
                "state",
                "needs",
                "attempts",
                "replays",
                "in flight",
                "mismatches",
                "first seen",
                "last seen",
                "requesters",
            ]);
            for row in rows {
                let mismatches = if row.has_mismatch {
                    format!("✗ {}", row.mismatches)
                } else {
                    "0".into()
                };
                table.add_row([
                    cell(&row.op_key),
                    row.version.to_string(),
                    row.state.clone(),
                    if row.needs_look {
                        cell(&row.look_reasons.join(", "))
                    } else {
                        "replays only".to_string()
                    },
                    row.attempts.to_string(),
                    row.replays.to_string(),
                    row.in_flight.to_string(),
                    mismatches,
                    row.first_seen.format("%Y-%m-%d %H:%M:%S").to_string(),
                    row.last_seen.format("%Y-%m-%d %H:%M:%S").to_string(),
                    cell(&row.requesters.join(", ")),
                ]);
            }
        }
        PaneRows::Held(rows) => {
            table.set_header([
                "target",
                "held key",
                "version",
                "amount",
                "held for",
                "held by",
                "holder state",
                "holder age",
            ]);
            for row in rows {
                table.add_row([
                    cell(&row.target),
                    cell(&row.op_key),
                    row.version.to_string(),
                    optional_money(row.amount_minor, row.currency.as_deref()),
                    duration_ms(row.held_ms),
                    cell(&row.holder_op_key),
                    row.holder_state.clone(),
                    duration_ms(row.holder_age_ms),
                ]);
            }
        }
    }
    table
}
