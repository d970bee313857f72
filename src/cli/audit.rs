use crate::ledger::LedgerPool;
use chrono::{DateTime, Utc};
use clap::{Args, ValueEnum};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use super::Format;
use super::exit::{FAILURE, Failure, USAGE};
use super::report::{csv_finish, csv_text, write_output};
use crate::ledger::audit::{self, AuditQuery};
use crate::ledger::history::params_diff;
use crate::ledger::model::AuditEntry;
use crate::text::{safe_json, sanitize_line};

#[derive(Debug, Clone, Args)]
pub struct AuditListArgs {
    /// From this instant: RFC 3339, a date, or a time ago (24h).
    #[arg(long, value_parser = crate::time_args::parse_instant)]
    pub since: Option<DateTime<Utc>>,
    /// Up to (not including) this instant.
    #[arg(long, value_parser = crate::time_args::parse_instant)]
    pub until: Option<DateTime<Utc>>,
    /// Only the entries of this operator: the global `--operator NAME`,
    /// given on this command line (the config's operator is not a filter).
    #[arg(skip)]
    pub operator: Option<String>,
    /// Only the entries about this effect's key.
    #[arg(long)]
    pub key: Option<String>,
    #[arg(long, value_enum, default_value_t = AuditFormat::Table)]
    pub format: AuditFormat,
    #[arg(long, default_value_t = 1000)]
    pub limit: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuditFormat {
    Table,
    Json,
    Csv,
}

pub async fn list(pool: &LedgerPool, args: AuditListArgs) -> Result<(), Failure> {
    if let (Some(since), Some(until)) = (args.since, args.until)
        && until <= since
    {
        return Err(Failure::new(USAGE, "--until must be after --since"));
    }
    let query = AuditQuery {
        since: args.since,
        until: args.until,
        operator: args.operator,
        op_key: args.key,
        limit: args.limit.max(1),
    };
    let entries = audit::list(pool, &query).await?;
    let text = match args.format {
        AuditFormat::Json => safe_json(&entries) + "\n",
        AuditFormat::Csv => csv(&entries)?,
        AuditFormat::Table if entries.is_empty() => "no audit entries in that range\n".to_string(),
        AuditFormat::Table => table(&entries) + "\n",
    };
    write_output(None, text.as_bytes())
}

/// What an entry changed, field by field: `/state: pending → succeeded`.
pub fn changes(entry: &AuditEntry) -> String {
    match (&entry.before, &entry.after) {
        (Some(before), Some(after)) => params_diff(before, after).join("; "),
        (None, Some(_)) => "created".to_string(),
        _ => String::new(),
    }
}

fn table(entries: &[AuditEntry]) -> String {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "#", "at", "operator", "role", "action", "key", "target", "reason", "changed",
    ]);
    for entry in entries {
        table.add_row([
            entry.seq.to_string(),
            entry.at.format("%Y-%m-%d %H:%M:%S").to_string(),
            sanitize_line(&entry.operator),
            sanitize_line(&entry.db_role),
            sanitize_line(&entry.action),
            sanitize_line(entry.op_key.as_deref().unwrap_or("—")),
            sanitize_line(entry.target.as_deref().unwrap_or("—")),
            sanitize_line(entry.reason.as_deref().unwrap_or("")),
            sanitize_line(&changes(entry)),
        ]);
    }
    table.to_string()
}

fn csv(entries: &[AuditEntry]) -> Result<String, Failure> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let error = |e: csv::Error| Failure::new(FAILURE, format!("cannot write CSV: {e}"));
    writer
        .write_record([
            "seq", "at", "operator", "db_role", "action", "op_key", "target", "reason", "changed",
            "hash",
        ])
        .map_err(error)?;
    for entry in entries {
        writer
            .write_record([
                entry.seq.to_string(),
                entry.at.to_rfc3339(),
                csv_text(&entry.operator),
                csv_text(&entry.db_role),
                csv_text(&entry.action),
                csv_text(entry.op_key.as_deref().unwrap_or("")),
                csv_text(entry.target.as_deref().unwrap_or("")),
                csv_text(entry.reason.as_deref().unwrap_or("")),
                csv_text(&changes(entry)),
                entry.hash.clone(),
            ])
            .map_err(error)?;
    }
    csv_finish(writer)
}

pub async fn verify(pool: &LedgerPool, format: Format) -> Result<(), Failure> {
    let report = audit::verify(pool).await?;
    match format {
        Format::Json => println!("{}", safe_json(&report)),
        Format::Table if report.is_intact() => {
            println!("audit chain intact: {} entries verified", report.checked)
        }
        Format::Table => {}
    }
    match report.first_broken_seq {
        None => Ok(()),
        Some(seq) => Err(Failure::new(
            FAILURE,
            format!(
                "audit chain BROKEN at entry {seq} ({} entries before it verified): {}",
                report.checked,
                sanitize_line(report.problem.as_deref().unwrap_or("unknown problem"))
            ),
        )),
    }
}
