use crate::ledger::LedgerPool;
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use super::Format;
use super::exit::{Failure, USAGE};
use crate::console::model::pane_model;
use crate::ledger::panes::{self, Filter, Pane, PaneRows};
use crate::text::{safe_json, truncate};

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
            if pane == Pane::Duplicates
                && let Some(count) = panes::replays_not_listed(pool, at, &filter).await?
                && count > 0
            {
                eprintln!(
                    "{}: the ledger answered their repeats itself (--filter with-replays lists them)",
                    crate::format::replays_not_listed(count)
                );
            }
        }
    }
    Ok(())
}

/// A pane's table for the terminal, from the pane's one spec (the
/// console's columns, `console::model::pane_model`), with the version an
/// operator passes to `--expect-version` after the key. Cells are already
/// safe to print; long ones are cut here, where no column gives way.
pub fn render_table(rows: &PaneRows) -> Table {
    let model = pane_model(rows);
    let key = model
        .columns
        .iter()
        .position(|column| matches!(column.title, "key" | "held key"))
        .unwrap_or(0);
    let mut header: Vec<&str> = model.columns.iter().map(|column| column.title).collect();
    header.insert(key + 1, "version");
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(header);
    for row in &model.rows {
        let mut cells: Vec<String> = row
            .cells
            .iter()
            .map(|cell| truncate(&cell.text, CELL_WIDTH))
            .collect();
        let version = row.version.map(|v| v.to_string()).unwrap_or_default();
        cells.insert(key + 1, version);
        table.add_row(cells);
    }
    table
}
