//! `effectwatch policy list|set`: what each action's effects may do next
//! (retry semantics, pending window, holds, the approval limit, the sink),
//! changed through the ledger's audited `op_set_policy`.

use clap::{Args, Subcommand};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use super::Format;
use super::exit::{Failure, REFUSED};
use crate::config::Config;
use crate::format::duration_ms;
use crate::ledger::policies::{self, Policy, PolicyChange, RETRY_SEMANTICS};
use crate::settle::verbs;
use crate::text::{safe_json, sanitize_line};
use crate::time_args::parse_duration;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Every action with a policy of its own (others get the defaults).
    List {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    #[command(about = verbs::SET_POLICY.about)]
    Set(Box<SetArgs>),
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// The action whose policy changes; leave it out to change only ledger-wide settings.
    #[arg(required_unless_present = "unknown_actions")]
    pub action: Option<String>,
    #[arg(help = verbs::SET_UNKNOWN_ACTIONS.about)]
    #[arg(long, value_parser = ["allow", "refuse"])]
    pub unknown_actions: Option<String>,
    /// What may happen after a doubt: safe_retry, reconcile_first, compensate (a duplicate is
    /// reversed by rule), never_retry, escalate.
    #[arg(long, value_parser = parse_semantics)]
    pub retry: Option<String>,
    /// How long a dispatched effect may wait for its answer (e.g. 5m).
    #[arg(long, value_parser = parse_duration)]
    pub pending_window: Option<std::time::Duration>,
    /// Hold a second open effect of this action on one target.
    #[arg(long)]
    pub exclusive: Option<bool>,
    /// Compensations above this (minor units) need a second operator; "none" removes the limit.
    #[arg(long, value_parser = parse_limit)]
    pub approval_limit: Option<Limit>,
    /// Whether a reconciliation that finds nothing makes the effect retryable.
    #[arg(long)]
    pub retry_when_absent: Option<bool>,
    /// Bookings: effects conflict when their time ranges on a target overlap.
    #[arg(long)]
    pub by_time_range: Option<bool>,
    /// When the effect holding others succeeds: leave them for a person, or cancel them.
    /// (When it fails or is cancelled, the oldest it held is always released.)
    #[arg(long, value_parser = ["leave", "cancel"])]
    pub on_holder_success: Option<String>,
    /// More replays of one key than this within an hour put it in the duplicates pane as a
    /// burst (default 20).
    #[arg(long, value_name = "PER_HOUR", value_parser = clap::value_parser!(i32).range(1..))]
    pub replay_burst: Option<i32>,
    /// How long a worker that beats may go without a beat on this action's effects before they
    /// are unknown (worker_lost), whatever lease the worker was set up with (e.g. 30s, 1s..1h);
    /// "none": each worker's own.
    #[arg(long, value_parser = parse_lease)]
    pub heartbeat_lease: Option<Lease>,
    /// Refuse approval refs the approving system never registered.
    #[arg(long)]
    pub approvals_registered: Option<bool>,
    /// The sink the reconciler escalates this action to; "none" removes it.
    #[arg(long)]
    pub sink: Option<String>,
    /// Why: required, written in the audit trail.
    #[arg(long)]
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Minor(i64),
    None,
}

fn parse_limit(text: &str) -> Result<Limit, String> {
    if text.eq_ignore_ascii_case("none") {
        return Ok(Limit::None);
    }
    text.parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .map(Limit::Minor)
        .ok_or_else(|| format!("{text:?} is not an amount in minor units (or none)"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    Of(std::time::Duration),
    WorkersOwn,
}

fn parse_lease(text: &str) -> Result<Lease, String> {
    if text.eq_ignore_ascii_case("none") {
        return Ok(Lease::WorkersOwn);
    }
    parse_duration(text).map(Lease::Of)
}

fn parse_semantics(text: &str) -> Result<String, String> {
    let wanted = text.replace('-', "_");
    RETRY_SEMANTICS
        .iter()
        .find(|name| **name == wanted)
        .map(|name| name.to_string())
        .ok_or_else(|| format!("one of {}", RETRY_SEMANTICS.join(", ")))
}

pub async fn run(
    pool: &crate::ledger::LedgerPool,
    config: &Config,
    command: PolicyCommand,
) -> Result<(), Failure> {
    match command {
        PolicyCommand::List { format } => {
            let list = policies::list(pool).await?;
            match format {
                Format::Json => println!("{}", safe_json(&list)),
                Format::Table => println!("{}", policy_table(&list)),
            }
            Ok(())
        }
        PolicyCommand::Set(args) => set(pool, config, *args).await,
    }
}

fn policy_table(list: &[Policy]) -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "action",
        "retry",
        "window",
        "exclusive",
        "approval limit",
        "retry when absent",
        "sink",
        "replay burst",
        "heartbeat lease",
    ]);
    for policy in list {
        table.add_row([
            sanitize_line(&policy.action),
            policy.retry_semantics.clone(),
            duration_ms((policy.pending_window_secs * 1000.0) as i64),
            policy.exclusive_per_target.to_string(),
            policy
                .compensation_approval_limit_minor
                .map(|n| n.to_string())
                .unwrap_or_else(|| "none".into()),
            // Only an action that may be retried is retried when absent.
            match policy.retry_semantics.as_str() {
                "never_retry" | "escalate" => {
                    format!("no ({})", policy.retry_semantics)
                }
                _ => policy.retry_when_absent.to_string(),
            },
            policy
                .escalation_sink
                .as_deref()
                .map(sanitize_line)
                .unwrap_or_else(|| "default".into()),
            format!("> {}/h", policy.replay_burst_per_hour),
            policy
                .heartbeat_lease_secs
                .map(|secs| duration_ms((secs * 1000.0) as i64))
                .unwrap_or_else(|| "the worker's".into()),
        ]);
    }
    table
}

async fn set(
    pool: &crate::ledger::LedgerPool,
    config: &Config,
    args: SetArgs,
) -> Result<(), Failure> {
    if config.read_only {
        return Err(Failure::new(REFUSED, "read-only: policy set refused"));
    }
    if let Some(mode) = &args.unknown_actions {
        let seq = policies::set_unknown_actions(pool, mode, &config.operator, &args.reason).await?;
        eprintln!("unknown actions are now {mode}d; audit entry #{seq}");
    }
    let Some(action) = args.action.clone() else {
        return Ok(());
    };
    let reason = args.reason.clone();
    let change = args.change();
    let (policy, seq) = policies::set(pool, &action, &change, &config.operator, &reason).await?;
    println!("{}", safe_json(&policy));
    eprintln!(
        "policy of {} changed; audit entry #{seq}",
        sanitize_line(&action)
    );
    Ok(())
}

impl SetArgs {
    /// The action's policy change: what was given, with "none" as a removal.
    fn change(self) -> PolicyChange {
        PolicyChange {
            pending_window: self.pending_window,
            exclusive_per_target: self.exclusive,
            compensation_approval_limit_minor: self.approval_limit.map(|limit| match limit {
                Limit::Minor(n) => Some(n),
                Limit::None => None,
            }),
            retry_when_absent: self.retry_when_absent,
            retry_semantics: self.retry,
            escalation_sink: self
                .sink
                .map(|sink| (!sink.eq_ignore_ascii_case("none")).then_some(sink)),
            approvals_must_be_registered: self.approvals_registered,
            conflicts_by_time_range: self.by_time_range,
            on_holder_success: self.on_holder_success,
            replay_burst_per_hour: self.replay_burst,
            heartbeat_lease: self.heartbeat_lease.map(|lease| match lease {
                Lease::Of(duration) => Some(duration),
                Lease::WorkersOwn => None,
            }),
        }
    }
}
