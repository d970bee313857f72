use crate::ledger::LedgerPool;
use chrono::{DateTime, Utc};
use clap::{Args, ValueEnum};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use serde::Serialize;

use super::Format;
use super::exit::{FAILURE, Failure, USAGE};
use super::report::{csv_finish, csv_text, write_output};
use crate::config::Config;
use crate::ledger::audit::{
    self, Anchor, AnchorVerdict, AuditQuery, CheckpointSigner, SignatureVerdict,
};
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

pub fn keygen(out: &std::path::Path) -> Result<(), Failure> {
    let signer = CheckpointSigner::generate(out).map_err(|e| Failure::new(FAILURE, e))?;
    println!("wrote the signing key to {}", out.display());
    println!(
        "its public key, for [audit] trusted_keys: {}",
        signer.public_key()
    );
    println!(
        "set [audit] signing_key = \"{}\" where retention runs",
        out.display()
    );
    Ok(())
}

/// The head of the chain, to keep outside the ledger: whoever can rewrite
/// the ledger (its owner) can rewrite the chain and its head together, but
/// not the copy in a ticket or a log.
pub async fn anchor(pool: &LedgerPool, format: Format) -> Result<(), Failure> {
    let head = audit::head(pool).await?;
    match format {
        Format::Json => println!(
            "{}",
            safe_json(
                &serde_json::json!({"seq": head.seq, "hash": head.hash, "anchor": head.to_string()})
            )
        ),
        Format::Table => {
            println!("{head}");
            eprintln!(
                "keep this anchor outside the ledger (a ticket, a log); `effectwatch audit verify --expect {head}` then shows nothing up to entry {} was rewritten or removed",
                head.seq.unwrap_or(0)
            );
        }
    }
    Ok(())
}

/// The chain's verdict and, when months of it were dropped, the
/// checkpoint's signature against the keys the config trusts; with an
/// anchor, whether the chain still holds it.
#[derive(Debug, Serialize)]
struct Verification {
    /// Everything below verified: the only case that prints "intact".
    verified: bool,
    #[serde(flatten)]
    chain: audit::ChainReport,
    checkpoint: Option<CheckpointVerdict>,
    anchor: Option<AnchorCheck>,
}

#[derive(Debug, Serialize)]
struct CheckpointVerdict {
    seq: i64,
    through: DateTime<Utc>,
    kept_entries: i64,
    public_key: String,
    made_by: String,
    signature: SignatureVerdict,
}

#[derive(Debug, Serialize)]
struct AnchorCheck {
    expected: String,
    #[serde(flatten)]
    verdict: AnchorVerdict,
}

pub async fn verify(
    pool: &LedgerPool,
    config: &Config,
    format: Format,
    expect: Option<&Anchor>,
) -> Result<(), Failure> {
    // The chain, its checkpoint and the anchored entry as of one instant: a
    // prune or a new entry between two reads would pair a walk with another
    // checkpoint or head.
    let mut tx = crate::ledger::snapshot::begin(pool).await?;
    let chain = audit::verify(&mut tx).await?;
    let checkpoint = match chain.checkpoint_seq {
        Some(_) => audit::newest_checkpoint(&mut tx)
            .await?
            .map(|mark| CheckpointVerdict {
                signature: audit::judge_signature(&mark, &config.audit.trusted_keys),
                seq: mark.seq,
                through: mark.through,
                kept_entries: mark.kept_entries,
                public_key: mark.public_key,
                made_by: mark.made_by,
            }),
        None => None,
    };
    let anchor = match expect {
        Some(expected) => Some(AnchorCheck {
            expected: expected.to_string(),
            verdict: audit::check_anchor(&mut tx, expected).await?,
        }),
        None => None,
    };
    let failure = failure_of(&chain, checkpoint.as_ref(), anchor.as_ref());
    let verification = Verification {
        verified: failure.is_none(),
        chain,
        checkpoint,
        anchor,
    };
    match format {
        Format::Json => println!("{}", safe_json(&verification)),
        Format::Table => print_verification(&verification),
    }
    match failure {
        Some(message) => Err(Failure::new(FAILURE, message)),
        None => Ok(()),
    }
}

fn print_verification(verification: &Verification) {
    if let Some(mark) = &verification.checkpoint {
        println!(
            "history before {} was dropped: the chain starts from the checkpoint at entry {} (made by {}, {} earlier entries kept), {}",
            mark.through.to_rfc3339(),
            mark.seq,
            sanitize_line(&mark.made_by),
            mark.kept_entries,
            match mark.signature {
                SignatureVerdict::Trusted => "signed by a trusted key".to_string(),
                SignatureVerdict::KeyNotChecked => format!(
                    "signed by key {}, which nothing here vouches for: list it in [audit] trusted_keys",
                    sanitize_line(&mark.public_key)
                ),
                SignatureVerdict::UntrustedKey => format!(
                    "signed by key {}, which is NOT in [audit] trusted_keys",
                    sanitize_line(&mark.public_key)
                ),
                SignatureVerdict::Invalid => "whose signature does NOT verify".to_string(),
            }
        );
    }
    if !verification.verified {
        return;
    }
    let chain = &verification.chain;
    match &verification.anchor {
        Some(AnchorCheck {
            verdict: AnchorVerdict::Holds { seq },
            ..
        }) => println!(
            "audit chain intact: {} entries verified, up to its head; entry {seq} still has the anchored hash",
            chain.checked
        ),
        _ => println!(
            "audit chain intact: {} entries verified, up to its head",
            chain.checked
        ),
    }
}

/// Why the verification fails, if it does: the chain first, then the
/// checkpoint it starts from, then the anchor.
fn failure_of(
    chain: &audit::ChainReport,
    checkpoint: Option<&CheckpointVerdict>,
    anchor: Option<&AnchorCheck>,
) -> Option<String> {
    if let Some(seq) = chain.first_broken_seq {
        return Some(format!(
            "audit chain BROKEN at entry {seq} ({} entries before it verified): {}",
            chain.checked,
            sanitize_line(chain.problem.as_deref().unwrap_or("unknown problem"))
        ));
    }
    if let Some(mark) = checkpoint
        && !mark.signature.is_acceptable()
    {
        return Some(format!(
            "audit checkpoint at entry {} cannot be trusted: {}",
            mark.seq,
            match mark.signature {
                SignatureVerdict::Invalid => "its signature does not verify",
                SignatureVerdict::KeyNotChecked => {
                    "no key is trusted to vouch for it: list the signing key's public key in [audit] trusted_keys"
                }
                _ => "it was signed by a key [audit] trusted_keys does not list",
            }
        ));
    }
    let check = anchor?;
    let expected = &check.expected;
    match &check.verdict {
        AnchorVerdict::Holds { .. } => None,
        AnchorVerdict::Rewritten { seq, hash } => Some(format!(
            "audit anchor {expected} NOT held: entry {seq} now has hash {hash}: the chain was rewritten up to it"
        )),
        AnchorVerdict::Missing { head_seq } => Some(format!(
            "audit anchor {expected} NOT held: no such entry in the chain, whose head is entry {head_seq}: it was cut back or rewritten"
        )),
        AnchorVerdict::Dropped { checkpoint_seq } => Some(format!(
            "audit anchor {expected} cannot be checked: retention dropped its entry with the months before the checkpoint at entry {checkpoint_seq}; take a new anchor after each prune"
        )),
    }
}
