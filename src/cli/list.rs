use crate::ledger::LedgerPool;
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use super::Format;
use super::exit::{Failure, USAGE};
use crate::console::model::pane_model;
use crate::ledger::panes::{self, Filter, Pane, PaneRows};
use crate::ledger::snapshot;
use crate::text::{safe_json, truncate};
use serde_json::json;

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
    let limit = limit.max(0);
    // The rows and their count in one read, so the two agree.
    let mut read = snapshot::begin(pool).await?;
    let rows = panes::fetch(&mut read, pane, at, &filter, limit, 0).await?;
    let shown = rows.len() as i64;
    let total = if shown < limit {
        shown
    } else {
        panes::count(&mut read, pane, at, &filter).await?
    };
    read.commit()
        .await
        .map_err(crate::ledger::LedgerError::from)?;
    let left_out = LeftOut::of(shown, total);
    match format {
        Format::Json => println!(
            "{}",
            safe_json(&json!({
                "pane": pane,
                "at": at,
                "rows": rows,
                "total": total,
                "left_out": left_out.count(),
                "see_all": left_out.see_all(),
            }))
        ),
        Format::Table => {
            if rows.is_empty() && total == 0 {
                match at {
                    Some(at) => println!("{}: nothing open at {}", pane.title(), at.to_rfc3339()),
                    None => println!("{}: nothing open", pane.title()),
                }
            } else if !rows.is_empty() {
                println!("{}", render_table(&rows));
            }
            if let Some(line) = left_out.line(pane) {
                println!("{line}");
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

/// Items of a pane past `--limit`: said, with the limit that lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeftOut {
    shown: i64,
    total: i64,
}

impl LeftOut {
    pub fn of(shown: i64, total: i64) -> LeftOut {
        LeftOut {
            shown,
            total: total.max(shown),
        }
    }

    pub fn count(self) -> i64 {
        self.total - self.shown
    }

    /// The flag that lists every item, when some were left out.
    pub fn see_all(self) -> Option<String> {
        (self.count() > 0).then(|| format!("--limit {}", self.total))
    }

    /// `Held conflicts: 100 of 342 shown, 242 left out (--limit 342 lists them all)`.
    pub fn line(self, pane: Pane) -> Option<String> {
        let see_all = self.see_all()?;
        Some(format!(
            "{}: {} of {} shown, {} left out ({see_all} lists them all)",
            pane.title(),
            self.shown,
            self.total,
            self.count()
        ))
    }
}

/// A pane's table for the terminal, from the pane's one spec
/// ([`Pane::columns`], which the console prints too), with the version an
/// operator passes to `--expect-version` after the column it marks as the
/// key. Cells are already safe to print (`console::model::pane_model`);
/// long ones are cut here, where no column gives way.
pub fn render_table(rows: &PaneRows) -> Table {
    let pane = rows.pane();
    let key = pane.key_column();
    let model = pane_model(rows);
    let mut header: Vec<&str> = pane.columns().iter().map(|column| column.title).collect();
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
