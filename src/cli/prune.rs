//! `effectwatch prune`: retention. Removes settled effects older than a
//! cutoff that nothing protects (sql/migrations/0013_retention.sql lists what is always
//! kept), after exporting them as JSON lines, then drops the months of
//! history that ended before the cutoff, keeping what belongs to an effect
//! that stays; audit entries that go are vouched for by a checkpoint signed
//! with `[audit] signing_key`. Needs the ledger owner's role: operators
//! cannot prune.

use std::path::{Path, PathBuf};

use crate::ledger::LedgerPool;
use clap::Args;
use serde_json::Value;

use super::exit::{BAD_CONFIG, FAILURE, Failure, REFUSED};
use super::report::AtomicFile;
use crate::config::Config;
use crate::format::duration_ms;
use crate::ledger::audit::CheckpointSigner;
use crate::ledger::retention::{self, Cutoff, ExportSink, PruneError, PrunePlan};
use crate::text::sanitize_line;
use crate::time_args::{parse_duration, parse_instant};

#[derive(Debug, Clone, Args)]
pub struct PruneArgs {
    /// Age of settlement beyond which effects may go: a length of time (90d) or an instant (RFC 3339).
    #[arg(long, value_name = "AGE", value_parser = parse_cutoff)]
    pub older_than: Cutoff,
    /// Write what is removed to this file first, one JSON object per line (replaced atomically).
    #[arg(long, value_name = "FILE")]
    pub export: Option<PathBuf>,
    /// Why, for the audit trail (default: the retention age).
    #[arg(long)]
    pub reason: Option<String>,
    /// Count what would go and what stays, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also drop the tombstones of keys pruned longer ago than this (at least 30d;
    /// after that a replay of such a key could proceed as new).
    #[arg(long, value_name = "AGE", value_parser = parse_duration)]
    pub tombstones_older_than: Option<std::time::Duration>,
}

fn parse_cutoff(text: &str) -> Result<Cutoff, String> {
    match parse_duration(text) {
        Ok(age) => Ok(Cutoff::OlderThan(age)),
        Err(duration_error) => parse_instant(text)
            .map(Cutoff::Before)
            .map_err(|_| duration_error),
    }
}

pub async fn run(pool: &LedgerPool, config: &Config, args: PruneArgs) -> Result<(), Failure> {
    let signer = match &config.audit.signing_key {
        Some(path) => Some(CheckpointSigner::load(path).map_err(|e| Failure::new(BAD_CONFIG, e))?),
        None => None,
    };
    if args.dry_run {
        let plan = retention::plan(
            pool,
            args.older_than,
            signer.is_some(),
            args.tombstones_older_than,
        )
        .await?;
        print_plan(&plan);
        return Ok(());
    }
    if config.read_only {
        return Err(Failure::new(REFUSED, "read-only: prune refused"));
    }
    // Refused after the prune, it would leave half the job done and a usage error.
    if let Some(age) = args.tombstones_older_than {
        retention::check_tombstone_age(pool, age).await?;
    }
    let reason = args
        .reason
        .clone()
        .unwrap_or_else(|| match args.older_than {
            Cutoff::OlderThan(age) => {
                let ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
                format!("retention: settled more than {} ago", duration_ms(ms))
            }
            Cutoff::Before(at) => format!("retention: settled before {}", at.to_rfc3339()),
        });
    let mut sink = match &args.export {
        Some(path) => Some(JsonLines::create(path)?),
        None => None,
    };
    let outcome = retention::prune(
        pool,
        args.older_than,
        &config.operator,
        &reason,
        sink.as_mut().map(|s| s as &mut dyn ExportSink),
        signer.as_ref(),
    )
    .await
    .map_err(|error| match error {
        PruneError::Ledger(error) => Failure::from(error),
        other => Failure::new(FAILURE, other.to_string()),
    })?;
    println!(
        "pruned {} effects ({} attempts, {} state changes, {} reconciliations, {} holds) settled before {}, leaving {} key tombstones; audit entry #{}",
        outcome.effects,
        outcome.attempts,
        outcome.events,
        outcome.reconciliations,
        outcome.holds,
        outcome.cutoff.to_rfc3339(),
        outcome.tombstones,
        outcome.audit_seq
    );
    if let (Some(path), Some(sink)) = (&args.export, &sink) {
        println!("exported {} records to {}", sink.records, path.display());
    }
    print_kept(&outcome.kept);
    print_history(&outcome.history);
    if let Some(through) = outcome.unsigned_through {
        println!(
            "the months of history before {} were not dropped (their rows went one by one): the audit entries in them need a signed checkpoint; make a key with `effectwatch audit keygen --out FILE` and set [audit] signing_key",
            through.to_rfc3339()
        );
    }
    if let Some(age) = args.tombstones_older_than {
        let (dropped, seq) =
            retention::prune_tombstones(pool, age, &config.operator, &reason).await?;
        println!(
            "dropped {dropped} key tombstones older than the tombstone retention; audit entry #{seq}"
        );
    }
    Ok(())
}

fn print_plan(plan: &PrunePlan) {
    println!("would prune {} settled effects", plan.prunable);
    if !plan.months.is_empty() {
        println!(
            "would drop the history of {} (kept: the rows of every effect that stays)",
            plan.months.join(", ")
        );
    }
    if let Some(through) = plan.unsigned_through {
        println!(
            "would not drop the history of the months before {} (their rows would go one by one): the audit entries in them need a signed checkpoint; set [audit] signing_key",
            through.to_rfc3339()
        );
    }
    print_kept(&serde_json::to_value(&plan.kept).unwrap_or(Value::Null));
    if let Some(tombstones) = plan.tombstones {
        println!("would drop {tombstones} key tombstones older than the tombstone retention");
    }
}

/// The months dropped whole: rows dropped and rows carried over, per table.
fn print_history(history: &Value) {
    let months: Vec<&str> = history["months"]
        .as_array()
        .map(|months| months.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if months.is_empty() {
        return;
    }
    let per_table = |side: &str| -> String {
        history[side]
            .as_object()
            .map(|tables| {
                tables
                    .iter()
                    .map(|(table, n)| format!("{} {}", sanitize_line(table), n))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    println!(
        "dropped the history of {}: {} rows went ({}); kept for effects that stay: {}",
        sanitize_line(&months.join(", ")),
        history["dropped"]
            .as_object()
            .map(|t| t.values().filter_map(Value::as_i64).sum::<i64>())
            .unwrap_or(0),
        per_table("dropped"),
        per_table("kept")
    );
    if let Some(seq) = history["checkpoint_seq"].as_i64() {
        println!(
            "audit checkpoint signed at entry #{seq}: `effectwatch audit verify` starts there"
        );
    }
}

fn print_kept(kept: &Value) {
    let Some(kept) = kept.as_object().filter(|k| !k.is_empty()) else {
        return;
    };
    let parts: Vec<String> = kept
        .iter()
        .map(|(reason, count)| format!("{} {}", sanitize_line(reason), count))
        .collect();
    println!("kept old settled effects: {}", parts.join(", "));
}

/// The export: JSON lines into a file that appears only once complete.
struct JsonLines {
    file: Option<AtomicFile>,
    records: usize,
}

impl JsonLines {
    fn create(path: &Path) -> Result<Self, Failure> {
        Ok(JsonLines {
            file: Some(AtomicFile::create(path)?),
            records: 0,
        })
    }
}

impl ExportSink for JsonLines {
    fn record(&mut self, data: &Value) -> std::io::Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("export already finished"))?;
        let mut line = serde_json::to_vec(data)?;
        line.push(b'\n');
        file.write_all(&line)?;
        self.records += 1;
        Ok(())
    }

    fn finish(&mut self) -> std::io::Result<()> {
        match self.file.take() {
            Some(file) => file
                .commit()
                .map_err(|failure| std::io::Error::other(failure.message)),
            None => Ok(()),
        }
    }
}
