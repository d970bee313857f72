//! `effectwatch report`: a post-mortem of a time range, as markdown that
//! pastes into a post-mortem document, JSON or CSV. Also the pieces the
//! other reporting commands share: time arguments, safe markdown and CSV
//! cells, and atomic output files.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use crate::ledger::LedgerPool;
use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Args, ValueEnum};

use super::exit::{FAILURE, Failure};
use crate::format::{duration_ms, optional_money};
use crate::ledger::panes::{Pane, PaneRows};
pub mod assembly;

use crate::text::{safe_json, sanitize_line, truncate};
use crate::time_args::parse_instant;
use assembly::{self as report, PaneEntry, Progress, Report, ReportScope};

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Start of the range: RFC 3339, a date, or a time ago (2h, 7d).
    #[arg(long, value_parser = parse_instant)]
    pub since: DateTime<Utc>,
    /// End of the range (default: now).
    #[arg(long, value_parser = parse_instant)]
    pub until: Option<DateTime<Utc>>,
    /// Only targets containing this text (case-insensitive).
    #[arg(long)]
    pub target: Option<String>,
    /// Only actions containing this text (case-insensitive).
    #[arg(long)]
    pub action: Option<String>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Md)]
    pub format: ReportFormat,
    /// Write to this file (replaced atomically) instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Md,
    Json,
    Csv,
}

/// Rows of each pane's table in markdown; JSON and CSV carry them all.
const MD_ROWS: usize = 200;
/// Lines of each worst item's timeline in markdown.
const MD_TIMELINE: usize = 60;

pub async fn run(pool: &LedgerPool, args: ReportArgs) -> Result<(), Failure> {
    let scope = ReportScope {
        since: args.since,
        until: args.until.unwrap_or_else(Utc::now),
        target: args.target,
        action: args.action,
    };
    let mut progress = ProgressLine::new();
    let built = report::build(pool, &scope, |p| progress.update(p)).await;
    progress.clear();
    let report = built?;
    let text = match args.format {
        ReportFormat::Md => markdown(&report),
        ReportFormat::Json => safe_json(&report) + "\n",
        ReportFormat::Csv => csv(&report)?,
    };
    write_output(args.output.as_deref(), text.as_bytes())
}

/// A one-line counter on stderr while a range is read, only when stderr is
/// a terminal (never in a pipe or a log).
struct ProgressLine {
    enabled: bool,
    shown: bool,
}

impl ProgressLine {
    fn new() -> Self {
        ProgressLine {
            enabled: std::io::stderr().is_terminal(),
            shown: false,
        }
    }

    fn update(&mut self, progress: Progress) {
        if !self.enabled {
            return;
        }
        self.shown = true;
        eprint!(
            "\r\x1b[2Kreading the ledger: {:>3.0}% (to {}) · {} pane entries, {} reconciliations, {} operator actions",
            progress.fraction * 100.0,
            progress.read_until.format("%Y-%m-%d %H:%M"),
            progress.entries,
            progress.reconciliations,
            progress.operator_actions
        );
        let _ = std::io::stderr().flush();
    }

    fn clear(&mut self) {
        if self.shown {
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }
}

// Markdown ----------------------------------------------------------------------

pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    md_heading(&mut out, report);
    md_summary(&mut out, report);
    md_worst(&mut out, report);
    md_entered(&mut out, report);
    md_reconciliations(&mut out, report);
    md_operator_actions(&mut out, report);
    md_still_open(&mut out, report);
    out
}

fn md_heading(out: &mut String, report: &Report) {
    let scope = &report.scope;
    let _ = writeln!(
        out,
        "# Effect ledger report: {} – {}\n",
        time(scope.since),
        time(scope.until)
    );
    let mut scope_line = format!(
        "Generated {} by effectwatch {}.",
        time(report.generated_at),
        env!("CARGO_PKG_VERSION")
    );
    if let Some(target) = &scope.target {
        let _ = write!(scope_line, " Targets matching “{}”.", md(target));
    }
    if let Some(action) = &scope.action {
        let _ = write!(scope_line, " Actions matching “{}”.", md(action));
    }
    let _ = writeln!(out, "{scope_line} Times are UTC.\n");
}

fn md_summary(out: &mut String, report: &Report) {
    out.push_str("## Summary\n\n");
    out.push_str("| Pane | Entered | Resolved | Open at end | Median to resolution | Worst resolved | Oldest still open |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    for summary in &report.summary {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            summary.pane.title(),
            summary.entered,
            summary.resolved,
            summary.open_at_end,
            opt_duration(summary.median_ms),
            opt_duration(summary.worst_ms),
            opt_duration(summary.oldest_open_ms)
        );
    }
    let _ = writeln!(
        out,
        "\n{} reconciliations, {} operator actions in the range.\n",
        report.reconciliations.len(),
        report.operator_actions.len()
    );
}

fn md_worst(out: &mut String, report: &Report) {
    if report.worst.is_empty() {
        return;
    }
    out.push_str("## Worst items\n\n");
    for (index, worst) in report.worst.iter().enumerate() {
        let entry = &worst.entry;
        let _ = writeln!(
            out,
            "### {}. {} — {}, {}\n",
            index + 1,
            md(&entry.op_key),
            entry.pane.title().to_lowercase(),
            resolution(entry)
        );
        let _ = writeln!(
            out,
            "{} on {}, {}; entered {}.\n",
            md(&entry.action),
            md(&entry.target),
            optional_money(entry.amount_minor, entry.currency.as_deref()),
            time(entry.entered_at)
        );
        out.push_str("| Time | Kind | What |\n|---|---|---|\n");
        for line in worst.timeline.iter().take(MD_TIMELINE) {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                time(line.at),
                line.kind,
                md(&line.text)
            );
        }
        if worst.timeline.len() > MD_TIMELINE {
            let _ = writeln!(
                out,
                "\n… {} more lines: `effectwatch show` has them all.",
                worst.timeline.len() - MD_TIMELINE
            );
        }
        out.push('\n');
    }
}

fn md_entered(out: &mut String, report: &Report) {
    out.push_str("## Entered each pane\n\n");
    for pane in Pane::ALL {
        let entries: Vec<&PaneEntry> = report.entries.iter().filter(|e| e.pane == pane).collect();
        let _ = writeln!(out, "### {} ({})\n", pane.title(), entries.len());
        if entries.is_empty() {
            out.push_str("Nothing entered.\n\n");
            continue;
        }
        out.push_str("| Key | Target | Action | Amount | Entered | Resolved | Took | Became |\n");
        out.push_str("|---|---|---|---:|---|---|---:|---|\n");
        for entry in entries.iter().take(MD_ROWS) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                md(&entry.op_key),
                md(&entry.target),
                md(&entry.action),
                optional_money(entry.amount_minor, entry.currency.as_deref()),
                time(entry.entered_at),
                entry.resolved_at.map_or("open".to_string(), time),
                duration_ms(entry.duration_ms),
                entry.resolved_to.as_deref().map_or("—".to_string(), md)
            );
        }
        more(out, entries.len());
    }
}

fn md_reconciliations(out: &mut String, report: &Report) {
    let _ = writeln!(
        out,
        "## Reconciliations ({})\n",
        report.reconciliations.len()
    );
    if report.reconciliations.is_empty() {
        out.push_str("None.\n\n");
        return;
    }
    out.push_str("| Time | Key | Provider | Finding | References | State | By |\n");
    out.push_str("|---|---|---|---|---|---|---|\n");
    for recon in report.reconciliations.iter().take(MD_ROWS) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} → {} | {} |",
            time(recon.at),
            md(&recon.op_key),
            recon.provider.as_deref().map_or("—".to_string(), md),
            md(&recon.finding),
            md(&recon.external_refs.join(", ")),
            md(&recon.state_before),
            md(&recon.state_after),
            md(&recon.requested_by)
        );
    }
    more(out, report.reconciliations.len());
}

fn md_operator_actions(out: &mut String, report: &Report) {
    let _ = writeln!(
        out,
        "## Operator actions ({})\n",
        report.operator_actions.len()
    );
    if report.operator_actions.is_empty() {
        out.push_str("None.\n\n");
        return;
    }
    out.push_str("| Time | Audit # | Operator | Action | Key | Reason |\n");
    out.push_str("|---|---:|---|---|---|---|\n");
    for action in report.operator_actions.iter().take(MD_ROWS) {
        let _ = writeln!(
            out,
            "| {} | {} | {} ({}) | {} | {} | {} |",
            time(action.at),
            action.seq,
            md(&action.operator),
            md(&action.db_role),
            md(&action.action),
            action.op_key.as_deref().map_or("—".to_string(), md),
            action.reason.as_deref().map_or("—".to_string(), md)
        );
    }
    more(out, report.operator_actions.len());
}

fn md_still_open(out: &mut String, report: &Report) {
    let until = report.scope.until;
    let _ = writeln!(out, "## Still open at {}\n", time(until));
    for open in &report.open_at_end {
        let _ = writeln!(out, "- **{}**: {}", open.pane.title(), open.count);
        for (key, age) in open_rows(&open.rows, until).into_iter().take(MD_ROWS) {
            let _ = writeln!(out, "  - {} ({})", md(&key), duration_ms(age));
        }
        if open.count as usize > MD_ROWS.min(open.rows.len()) {
            let _ = writeln!(
                out,
                "  - … {} more",
                open.count as usize - MD_ROWS.min(open.rows.len())
            );
        }
    }
}

/// Keys and ages of a pane's rows at the end of the range: how long each
/// had been overdue, unknown, held, or (duplicates) seen again.
fn open_rows(rows: &PaneRows, until: DateTime<Utc>) -> Vec<(String, i64)> {
    match rows {
        PaneRows::Overdue(rows) => rows
            .iter()
            .map(|r| (r.op_key.clone(), r.overdue_ms))
            .collect(),
        PaneRows::Unknown(rows) => rows
            .iter()
            .map(|r| (r.op_key.clone(), r.unknown_ms))
            .collect(),
        PaneRows::Duplicates(rows) => rows
            .iter()
            .map(|r| (r.op_key.clone(), (until - r.first_seen).num_milliseconds()))
            .collect(),
        PaneRows::Held(rows) => rows.iter().map(|r| (r.op_key.clone(), r.held_ms)).collect(),
    }
}

fn more(out: &mut String, total: usize) {
    if total > MD_ROWS {
        let _ = writeln!(
            out,
            "\n… {} more: `--format csv` or `--format json` has them all.",
            total - MD_ROWS
        );
    }
    out.push('\n');
}

fn resolution(entry: &PaneEntry) -> String {
    match (&entry.resolved_at, &entry.resolved_to) {
        (Some(_), Some(to)) => format!(
            "resolved ({}) after {}",
            md(to),
            duration_ms(entry.duration_ms)
        ),
        (Some(_), None) => format!("resolved after {}", duration_ms(entry.duration_ms)),
        _ => format!("still open at the end ({})", duration_ms(entry.duration_ms)),
    }
}

fn opt_duration(ms: Option<i64>) -> String {
    ms.map_or("—".to_string(), duration_ms)
}

fn time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

/// Ledger text as one markdown table cell: no terminal controls, no line
/// breaks, and every character markdown would act on inside a table cell
/// escaped, so a hostile key cannot add links, images, cells, emphasis,
/// code or HTML tags.
pub fn md(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in truncate(&sanitize_line(text), 300).chars() {
        if matches!(
            ch,
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '~' | '&'
        ) {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

// CSV ---------------------------------------------------------------------------

/// One table: every pane entry, reconciliation and operator action, by time.
fn csv(report: &Report) -> Result<String, Failure> {
    let mut rows: Vec<(DateTime<Utc>, CsvRow)> = Vec::new();
    for entry in &report.entries {
        rows.push((entry.entered_at, pane_entry_row(entry)));
    }
    for recon in &report.reconciliations {
        rows.push((recon.at, reconciliation_row(recon)));
    }
    for action in &report.operator_actions {
        rows.push((action.at, operator_action_row(action)));
    }
    rows.sort_by_key(|(at, _)| *at);
    let mut writer = csv::Writer::from_writer(Vec::new());
    let fail = |e: csv::Error| Failure::new(FAILURE, format!("cannot write CSV: {e}"));
    writer.write_record(CSV_HEADER).map_err(fail)?;
    for (_, row) in rows {
        writer.write_record(&row).map_err(fail)?;
    }
    csv_finish(writer)
}

/// The report's CSV columns. Every record kind fills all of them, leaving
/// blank the ones it has no value for, so the file is one table.
const CSV_HEADER: [&str; 14] = [
    "record",
    "at",
    "pane",
    "op_key",
    "target",
    "action",
    "amount_minor",
    "currency",
    "resolved_at",
    "resolution_ms",
    "became",
    "open_at_end",
    "by",
    "detail",
];

type CsvRow = [String; 14];

fn csv_time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn pane_entry_row(entry: &PaneEntry) -> CsvRow {
    [
        "pane_entry".into(),
        csv_time(entry.entered_at),
        entry.pane.name().into(),
        csv_text(&entry.op_key),
        csv_text(&entry.target),
        csv_text(&entry.action),
        entry
            .amount_minor
            .map(|a| a.to_string())
            .unwrap_or_default(),
        entry.currency.clone().unwrap_or_default(),
        entry.resolved_at.map(csv_time).unwrap_or_default(),
        if entry.is_open() {
            String::new()
        } else {
            entry.duration_ms.to_string()
        },
        entry
            .resolved_to
            .as_deref()
            .map(csv_text)
            .unwrap_or_default(),
        entry.is_open().to_string(),
        String::new(),
        String::new(),
    ]
}

fn reconciliation_row(recon: &report::ReportReconciliation) -> CsvRow {
    [
        "reconciliation".into(),
        csv_time(recon.at),
        String::new(),
        csv_text(&recon.op_key),
        csv_text(&recon.target),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        csv_text(&recon.state_after),
        String::new(),
        csv_text(&recon.requested_by),
        csv_text(&format!(
            "{} at {} [{}]: {} -> {}",
            recon.finding,
            recon.provider.as_deref().unwrap_or("?"),
            recon.external_refs.join(", "),
            recon.state_before,
            recon.state_after
        )),
    ]
}

fn operator_action_row(action: &report::OperatorAction) -> CsvRow {
    [
        "operator_action".into(),
        csv_time(action.at),
        String::new(),
        action.op_key.as_deref().map(csv_text).unwrap_or_default(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        csv_text(&action.operator),
        csv_text(&format!(
            "#{} {}: {}",
            action.seq,
            action.action,
            action.reason.as_deref().unwrap_or("")
        )),
    ]
}

/// Ledger text as a CSV cell: one line, no terminal controls, and never
/// read as a formula by a spreadsheet (a leading = + - @ gets a quote).
pub fn csv_text(text: &str) -> String {
    let clean = sanitize_line(text);
    if clean.starts_with(['=', '+', '-', '@']) {
        format!("'{clean}")
    } else {
        clean
    }
}

pub fn csv_finish(writer: csv::Writer<Vec<u8>>) -> Result<String, Failure> {
    let bytes = writer
        .into_inner()
        .map_err(|e| Failure::new(FAILURE, format!("cannot write CSV: {e}")))?;
    String::from_utf8(bytes).map_err(|e| Failure::new(FAILURE, format!("cannot write CSV: {e}")))
}

// Output ------------------------------------------------------------------------

/// Standard output, or a file replaced atomically: written beside it under a
/// temporary name, flushed to disk, then renamed over it, so a reader never
/// sees half a report and a failure leaves the old file as it was.
pub fn write_output(path: Option<&Path>, bytes: &[u8]) -> Result<(), Failure> {
    match path {
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(bytes)
                .and_then(|()| stdout.flush())
                .map_err(|e| Failure::new(FAILURE, format!("cannot write to standard output: {e}")))
        }
        Some(path) => {
            let mut file = AtomicFile::create(path)?;
            file.write_all(bytes).map_err(|e| {
                Failure::new(FAILURE, format!("cannot write {}: {e}", path.display()))
            })?;
            file.commit()
        }
    }
}

/// A file that appears at its path, complete, only when committed.
pub struct AtomicFile {
    path: PathBuf,
    temp: tempfile::NamedTempFile,
}

impl AtomicFile {
    pub fn create(path: &Path) -> Result<Self, Failure> {
        let dir = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let temp = tempfile::Builder::new()
            .prefix(".effectwatch-")
            .tempfile_in(dir)
            .map_err(|e| {
                Failure::new(
                    FAILURE,
                    format!("cannot create a file in {}: {e}", dir.display()),
                )
            })?;
        Ok(AtomicFile {
            path: path.to_path_buf(),
            temp,
        })
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.temp.as_file_mut().write_all(bytes)
    }

    /// Flushes to disk and renames into place.
    pub fn commit(self) -> Result<(), Failure> {
        let path = self.path;
        self.temp
            .as_file()
            .sync_all()
            .map_err(|e| Failure::new(FAILURE, format!("cannot write {}: {e}", path.display())))?;
        self.temp.persist(&path).map_err(|e| {
            Failure::new(
                FAILURE,
                format!("cannot write {}: {}", path.display(), e.error),
            )
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_cells_cannot_inject() {
        assert_eq!(md("a|b"), "a\\|b");
        assert_eq!(md("![x](http://e)"), "!\\[x\\](http://e)");
        assert_eq!(md("<img src=x>"), "\\<img src=x\\>");
        assert_eq!(md("line\nbreak\x1b[2J"), "line break\\\\u{001B}\\[2J");
    }

    #[test]
    fn csv_cells_are_never_formulas() {
        assert_eq!(csv_text("=HYPERLINK(\"x\")"), "'=HYPERLINK(\"x\")");
        assert_eq!(csv_text("refund:INV-1"), "refund:INV-1");
        assert_eq!(csv_text("a\nb"), "a b");
    }
}
