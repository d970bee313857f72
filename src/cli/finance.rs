//! `effectwatch finance`: suspected double effects and exposure per
//! currency, for finance to review and export. Money is shown from integer
//! minor units with its currency, and totalled per currency only.

use crate::ledger::LedgerPool;
use chrono::{DateTime, Utc};
use clap::{Args, ValueEnum};
use comfy_table::{CellAlignment, Table, presets::UTF8_FULL_CONDENSED};

use super::exit::{FAILURE, Failure};
use super::report::{csv_finish, csv_text, write_output};
use crate::format::{money, optional_money};
use crate::ledger::finance::{self, Exposure, FinanceReview, SuspectedEffect};
use crate::text::{safe_json, sanitize_line, truncate, truncate_middle};

#[derive(Debug, Clone, Args)]
pub struct FinanceArgs {
    /// Only what happened since: RFC 3339, a date, or a time ago (30d).
    #[arg(long, value_parser = crate::time_args::parse_instant)]
    pub since: Option<DateTime<Utc>>,
    #[arg(long, value_enum, default_value_t = FinanceFormat::Table)]
    pub format: FinanceFormat,
    /// Print one part only (CSV prints the suspected double effects unless `--only exposure`).
    #[arg(long, value_enum)]
    pub only: Option<FinancePart>,
    #[command(flatten)]
    pub time_travel: super::TimeTravel,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FinanceFormat {
    Table,
    Json,
    Csv,
}

/// Which part to print; CSV is one table, so it prints one part (the
/// suspected double effects unless `--only exposure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FinancePart {
    Suspected,
    Exposure,
}

const CELL_WIDTH: usize = 40;

pub async fn run(pool: &LedgerPool, args: FinanceArgs) -> Result<(), Failure> {
    let FinanceArgs {
        since,
        format,
        only,
        time_travel: super::TimeTravel { at },
    } = args;
    let mut review = finance::review(pool, at, since).await?;
    match only {
        Some(FinancePart::Suspected) => review.exposure.clear(),
        Some(FinancePart::Exposure) => review.suspected.clear(),
        None => {}
    }
    let text = match format {
        FinanceFormat::Json => safe_json(&review) + "\n",
        FinanceFormat::Table => table(&review, only),
        FinanceFormat::Csv if only == Some(FinancePart::Exposure) => {
            exposure_csv(&review.exposure)?
        }
        FinanceFormat::Csv => suspected_csv(&review.suspected)?,
    };
    write_output(None, text.as_bytes())
}

fn cell(text: &str) -> String {
    truncate(&sanitize_line(text), CELL_WIDTH)
}

/// Keys and targets differ at their ends (`…:AP-91:v1`, `…:AP-91:v2`): cut
/// in the middle, so two rows never read the same.
fn key_cell(text: &str) -> String {
    truncate_middle(&sanitize_line(text), CELL_WIDTH)
}

fn opt(text: Option<&str>) -> String {
    text.map(cell).unwrap_or_else(|| "—".to_string())
}

fn table(review: &FinanceReview, only: Option<FinancePart>) -> String {
    let mut out = String::new();
    let mut since = review
        .since
        .map(|at| format!(" since {}", at.format("%Y-%m-%d %H:%M:%S UTC")))
        .unwrap_or_default();
    if let Some(at) = review.at {
        since.push_str(&format!(" as of {}", at.format("%Y-%m-%d %H:%M:%S UTC")));
    }
    if only != Some(FinancePart::Exposure) {
        let groups = finance::groups(&review.suspected);
        if groups.is_empty() {
            out.push_str(&format!("Suspected double effects{since}: none\n"));
        } else {
            out.push_str(&format!(
                "Suspected double effects{since}: {} on {} target/action pairs\n",
                review.suspected.len(),
                groups.len()
            ));
            out.push_str(&format!("{}\n", suspected_table(&review.suspected)));
        }
    }
    if only != Some(FinancePart::Suspected) {
        if !out.is_empty() {
            out.push('\n');
        }
        if review.exposure.is_empty() {
            out.push_str(&format!("Exposure per currency{since}: none\n"));
        } else {
            out.push_str(&format!("Exposure per currency{since}\n"));
            out.push_str(&format!("{}\n", exposure_table(&review.exposure)));
        }
    }
    out
}

fn suspected_table(rows: &[SuspectedEffect]) -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "target",
        "action",
        "key",
        "amount",
        "provider ref",
        "succeeded",
        "why",
        "group total",
        "approved",
        "excess",
        "compensation",
    ]);
    for row in rows {
        let currency = row.currency.as_deref();
        let compensation = match &row.compensation_key {
            Some(key) => format!("{} ({})", row.compensation, key_cell(key)),
            None => row.compensation.clone(),
        };
        table.add_row([
            key_cell(&row.target),
            cell(&row.action),
            key_cell(&row.op_key),
            optional_money(row.amount_minor, currency),
            opt(row.external_ref.as_deref()),
            row.succeeded_at
                .map(|at| at.format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_else(|| "—".to_string()),
            row.reasons.join(", "),
            optional_money(row.total_minor, currency),
            optional_money(row.approved_minor, currency),
            optional_money(row.excess_minor, currency),
            compensation,
        ]);
    }
    for column in [3, 7, 8, 9] {
        if let Some(column) = table.column_mut(column) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

fn exposure_table(rows: &[Exposure]) -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "currency",
        "unknown",
        "suspected doubles (excess)",
        "compensated",
        "awaiting approval",
    ]);
    let figure = |count: i64, minor: i64, currency: &str| {
        if count == 0 {
            "—".to_string()
        } else {
            format!("{} ({count})", money(minor, currency))
        }
    };
    for row in rows {
        let currency = row.currency.as_str();
        table.add_row([
            cell(currency),
            figure(row.unknown_effects, row.unknown_minor, currency),
            figure(row.suspected_effects, row.suspected_excess_minor, currency),
            figure(row.compensated_effects, row.compensated_minor, currency),
            figure(row.awaiting_approval, row.awaiting_approval_minor, currency),
        ]);
    }
    for column in 1..5 {
        if let Some(column) = table.column_mut(column) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

fn csv_error(error: csv::Error) -> Failure {
    Failure::new(FAILURE, format!("cannot write CSV: {error}"))
}

/// One row per effect; amounts as integer minor units beside their currency.
fn suspected_csv(rows: &[SuspectedEffect]) -> Result<String, Failure> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer
        .write_record([
            "target",
            "action",
            "op_key",
            "amount_minor",
            "currency",
            "provider",
            "external_ref",
            "approval_ref",
            "approval_version",
            "requested_by",
            "succeeded_at",
            "reasons",
            "succeeded_effects",
            "group_total_minor",
            "approved_minor",
            "excess_minor",
            "compensation",
            "compensation_key",
            "compensation_under_way",
        ])
        .map_err(csv_error)?;
    let number = |value: Option<i64>| value.map(|v| v.to_string()).unwrap_or_default();
    let text = |value: Option<&str>| value.map(csv_text).unwrap_or_default();
    for row in rows {
        writer
            .write_record([
                csv_text(&row.target),
                csv_text(&row.action),
                csv_text(&row.op_key),
                number(row.amount_minor),
                text(row.currency.as_deref()),
                text(row.provider.as_deref()),
                text(row.external_ref.as_deref()),
                text(row.approval_ref.as_deref()),
                row.approval_version
                    .map(|v| v.to_string())
                    .unwrap_or_default(),
                csv_text(&row.requested_by),
                row.succeeded_at
                    .map(|at| at.to_rfc3339())
                    .unwrap_or_default(),
                row.reasons.join(" "),
                row.succeeded_effects.to_string(),
                number(row.total_minor),
                number(row.approved_minor),
                number(row.excess_minor),
                row.compensation.clone(),
                text(row.compensation_key.as_deref()),
                row.compensation_under_way.to_string(),
            ])
            .map_err(csv_error)?;
    }
    csv_finish(writer)
}

fn exposure_csv(rows: &[Exposure]) -> Result<String, Failure> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer
        .write_record([
            "currency",
            "unknown_effects",
            "unknown_minor",
            "suspected_effects",
            "suspected_excess_minor",
            "compensated_effects",
            "compensated_minor",
            "awaiting_approval",
            "awaiting_approval_minor",
        ])
        .map_err(csv_error)?;
    for row in rows {
        writer
            .write_record([
                csv_text(&row.currency),
                row.unknown_effects.to_string(),
                row.unknown_minor.to_string(),
                row.suspected_effects.to_string(),
                row.suspected_excess_minor.to_string(),
                row.compensated_effects.to_string(),
                row.compensated_minor.to_string(),
                row.awaiting_approval.to_string(),
                row.awaiting_approval_minor.to_string(),
            ])
            .map_err(csv_error)?;
    }
    csv_finish(writer)
}
