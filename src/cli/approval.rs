//! `effectwatch approval grant|revoke|list`: what an approving system
//! authorises, for how long, and its revocation — each audited. Needs a
//! login with the `effect_approver` role to grant or revoke.

use clap::{Args, Subcommand};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use super::Format;
use super::exit::{Failure, REFUSED, USAGE};
use crate::config::Config;
use crate::ledger::approvals::{self, Grant};
use crate::settle::verbs;
use crate::text::{safe_json, sanitize_line};
use crate::time_args::{parse_duration, parse_instant};

#[derive(Debug, Subcommand)]
pub enum ApprovalCommand {
    #[command(about = verbs::GRANT_APPROVAL.about)]
    Grant(GrantArgs),
    #[command(about = verbs::REVOKE_APPROVAL.about)]
    Revoke {
        approval_ref: String,
        /// The version to revoke; the newest when left out.
        #[arg(long)]
        version: Option<i32>,
        #[arg(long)]
        reason: String,
    },
    /// The newest approvals, with what consumed them.
    List {
        #[arg(long, default_value_t = 100)]
        limit: i64,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

#[derive(Debug, Args)]
pub struct GrantArgs {
    pub approval_ref: String,
    /// A change to an approval is a new version; the newest supersedes the others.
    #[arg(long, default_value_t = 1)]
    pub version: i32,
    #[arg(long)]
    pub action: String,
    #[arg(long)]
    pub target: String,
    /// How long it holds (e.g. 2h) or until when (RFC 3339).
    #[arg(long)]
    pub expires: String,
    /// At most this amount, in minor units (with --currency).
    #[arg(long, requires = "currency")]
    pub ceiling: Option<i64>,
    #[arg(long, requires = "ceiling")]
    pub currency: Option<String>,
    /// Exactly these params (a JSON object), if they matter.
    #[arg(long)]
    pub params: Option<String>,
    #[arg(long)]
    pub reason: String,
}

pub async fn run(
    pool: &crate::ledger::LedgerPool,
    config: &Config,
    command: ApprovalCommand,
) -> Result<(), Failure> {
    match command {
        ApprovalCommand::Grant(args) => {
            refuse_read_only(config)?;
            let too_far = || Failure::new(USAGE, "--expires is too far away");
            let expires_at = match parse_duration(&args.expires) {
                Ok(length) => chrono::Utc::now()
                    .checked_add_signed(chrono::Duration::from_std(length).map_err(|_| too_far())?)
                    .ok_or_else(too_far)?,
                Err(_) => parse_instant(&args.expires)
                    .map_err(|problem| Failure::new(USAGE, format!("--expires: {problem}")))?,
            };
            let params = args
                .params
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|error| Failure::new(USAGE, format!("--params is not JSON: {error}")))?;
            let grant = Grant {
                approval_ref: args.approval_ref,
                version: args.version,
                action: args.action,
                target: args.target,
                expires_at,
                amount_ceiling: args.ceiling.zip(args.currency),
                params,
            };
            let (approval, seq) =
                approvals::grant(pool, &grant, &config.operator, &args.reason).await?;
            println!("{}", safe_json(&approval));
            eprintln!("approval granted; audit entry #{seq}");
        }
        ApprovalCommand::Revoke {
            approval_ref,
            version,
            reason,
        } => {
            refuse_read_only(config)?;
            let (approval, seq) =
                approvals::revoke(pool, &approval_ref, version, &config.operator, &reason).await?;
            println!("{}", safe_json(&approval));
            match seq {
                Some(seq) => eprintln!("approval revoked; audit entry #{seq}"),
                None => eprintln!("approval was already revoked: nothing changed"),
            }
        }
        ApprovalCommand::List { limit, format } => {
            let list = approvals::list(pool, limit).await?;
            match format {
                Format::Json => println!("{}", safe_json(&list)),
                Format::Table => {
                    let mut table = Table::new();
                    table.load_preset(UTF8_FULL_CONDENSED).set_header([
                        "approval",
                        "action",
                        "target",
                        "ceiling",
                        "expires",
                        "granted by",
                        "state",
                    ]);
                    let now = chrono::Utc::now();
                    for approval in &list {
                        let state = match (&approval.revoked_at, &approval.consumed_by) {
                            (Some(_), _) => "revoked".to_string(),
                            (None, Some(key)) => format!("consumed by {}", sanitize_line(key)),
                            (None, None) if approval.expires_at <= now => "expired".to_string(),
                            (None, None) => "open".to_string(),
                        };
                        table.add_row([
                            format!(
                                "{} v{}",
                                sanitize_line(&approval.approval_ref),
                                approval.version
                            ),
                            sanitize_line(&approval.action),
                            sanitize_line(&approval.target),
                            crate::format::optional_money(
                                approval.amount_ceiling_minor,
                                approval.currency.as_deref(),
                            ),
                            approval.expires_at.to_rfc3339(),
                            sanitize_line(&approval.granted_by),
                            state,
                        ]);
                    }
                    println!("{table}");
                }
            }
        }
    }
    Ok(())
}

fn refuse_read_only(config: &Config) -> Result<(), Failure> {
    if config.read_only {
        return Err(Failure::new(
            REFUSED,
            "read-only: approvals are not changed",
        ));
    }
    Ok(())
}
