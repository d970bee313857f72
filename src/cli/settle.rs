//! The settling commands: reconcile (one effect or a pane), compensate,
//! escalate, resolve, release, cancel, annotate, approve, reject, and the
//! escalation loop. All go through [`crate::settle::Settler`], the same
//! code the console uses; `--read-only` is refused there.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use crate::ledger::LedgerPool;
use clap::error::ErrorKind;
use clap::{ArgGroup, ArgMatches, Args, FromArgMatches, Subcommand};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use serde_json::json;

use super::Format;
use super::exit::{BAD_CONFIG, FAILURE, Failure, REFUSED, USAGE, code_for};
use crate::config::Config;
use crate::ledger::actions::{OPERATOR_CALLS, OperatorCall, Resolution};
use crate::ledger::escalations;
use crate::ledger::panes::{self, Filter, Pane};
use crate::settle::{BulkItem, Request, SettleError, Settled, Settler};
use crate::text::{safe_json, sanitize_line, truncate};

#[derive(Debug, Subcommand)]
pub enum SettleCommand {
    /// Ask the provider what exists for an effect (or every item of a pane) and record the finding.
    Reconcile(ReconcileArgs),
    /// Reverse a succeeded effect with a compensation under its own key (above the action's limit,
    /// a second operator must approve).
    Compensate(ActionArgs),
    /// Reverse one extra provider record of an effect the provider holds twice (the effect
    /// stands; above the action's limit, a second operator must approve).
    ReverseDuplicate(ReverseDuplicateArgs),
    /// Hand an effect to a person through a sink: the decision needed, the key, the entry, the evidence.
    Escalate(EscalateArgs),
    /// Settle an effect by hand, with evidence: --succeeded REF, or --failed.
    Resolve(ResolveArgs),
    /// release, cancel, annotate, …: one subcommand per operator call of the ledger.
    #[command(flatten)]
    Operator(OperatorCommand),
    /// Approve a compensation another operator requested; it is sent at once.
    Approve(ActionArgs),
    /// Turn down a compensation request (the requester may withdraw their own).
    Reject(ActionArgs),
    /// Escalations: list, acknowledge, resolve, deliver.
    Escalation {
        #[command(subcommand)]
        command: EscalationCommand,
    },
}

#[derive(Debug, Args)]
pub struct ActionArgs {
    /// The effect's operation key.
    pub op_key: String,
    /// Why: required, written in the audit trail.
    #[arg(long, visible_alias = "note")]
    pub reason: String,
    /// The version you decided on; refused if the effect changed since (default: the current one).
    #[arg(long, value_name = "N")]
    pub expect_version: Option<i64>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct ReverseDuplicateArgs {
    #[command(flatten)]
    pub action: ActionArgs,
    /// The provider record to reverse: one a reconciliation found besides the effect's own.
    #[arg(long = "ref", value_name = "REF")]
    pub duplicate_ref: String,
}

/// Every item of a (filtered) pane instead of one key: the same four
/// arguments for every verb that acts in bulk.
#[derive(Debug, Args)]
pub struct PaneArgs {
    /// Every item of this pane instead of one key (overdue, unknown, duplicates, held), one
    /// transaction and audit entry each.
    #[arg(long, value_parser = parse_pane)]
    pub pane: Option<Pane>,
    /// With --pane: words that must match, as in `list --filter`.
    #[arg(long, requires = "pane")]
    pub filter: Option<String>,
    /// With --pane: no question asked (required when stdin is not a terminal).
    #[arg(long, requires = "pane")]
    pub yes: bool,
    /// With --pane: at most this many items.
    #[arg(long, default_value_t = 500, requires = "pane")]
    pub limit: i64,
}

impl PaneArgs {
    /// `verb` for every item of the pane, when one is named.
    fn bulk(&self, verb: &'static str) -> Option<Bulk<'_>> {
        Some(Bulk {
            verb,
            pane: self.pane?,
            each: self,
        })
    }
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("what").required(true).args(["op_key", "pane", "watch", "once"])))]
pub struct ReconcileArgs {
    /// The effect's operation key (or --pane, --watch, --once).
    pub op_key: Option<String>,
    /// Run as a service: reconcile what rules can settle, escalate the rest,
    /// until SIGTERM (see [reconciler] in the config).
    #[arg(long)]
    pub watch: bool,
    /// One pass of the service, for cron: what is due now, then exit.
    #[arg(long)]
    pub once: bool,
    /// With --watch: serve /metrics and /healthz here (e.g. 127.0.0.1:9187).
    #[arg(long, value_name = "ADDRESS", requires = "watch")]
    pub metrics: Option<std::net::SocketAddr>,
    /// With --watch or --once: the name in the audit trail (default reconciler@HOST).
    #[arg(long = "as", value_name = "NAME")]
    pub name: Option<String>,
    #[command(flatten)]
    pub each: PaneArgs,
    /// The version you decided on; refused if the effect changed since.
    #[arg(long, value_name = "N", conflicts_with = "pane")]
    pub expect_version: Option<i64>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["op_key", "pane"])))]
pub struct EscalateArgs {
    /// The effect's operation key.
    pub op_key: Option<String>,
    #[command(flatten)]
    pub each: PaneArgs,
    /// The sink (a [sinks.NAME] of the config); default: the only one configured.
    #[arg(long, value_name = "NAME")]
    pub to: Option<String>,
    /// Why: required, sent with the escalation and written in the audit trail.
    #[arg(long)]
    pub reason: String,
    /// The version you decided on; refused if the effect changed since (default: the current one).
    #[arg(long, value_name = "N")]
    pub expect_version: Option<i64>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("outcome").required(true).args(["succeeded", "failed"])))]
pub struct ResolveArgs {
    /// The effect's operation key.
    pub op_key: String,
    /// It happened: the provider's reference for it.
    #[arg(long, value_name = "EXTERNAL_REF")]
    pub succeeded: Option<String>,
    /// It did not happen.
    #[arg(long)]
    pub failed: bool,
    /// With --failed: the same key may be dispatched again.
    #[arg(long, requires = "failed")]
    pub retryable: bool,
    /// The evidence: required, written in the audit trail.
    #[arg(long)]
    pub reason: String,
    /// The version you decided on; refused if the effect changed since (default: the current one).
    #[arg(long, value_name = "N")]
    pub expect_version: Option<i64>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Subcommand)]
pub enum EscalationCommand {
    /// Escalations not yet resolved, with their delivery state.
    List {
        #[arg(long, default_value_t = 100)]
        limit: i64,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// A person has it: delivery stops, it stays open.
    Acknowledge(EscalationArgs),
    /// The decision was taken: close it.
    Resolve(EscalationArgs),
    /// Deliver the escalations that are due, retrying failed ones with backoff.
    Deliver {
        /// Keep delivering until interrupted.
        #[arg(long)]
        watch: bool,
        /// With --watch: seconds between passes.
        #[arg(long, default_value_t = 5.0)]
        interval: f64,
    },
}

#[derive(Debug, Args)]
pub struct EscalationArgs {
    /// The escalation key (escalate:<op_key>:<decision>).
    pub escalation_key: String,
    #[arg(long)]
    pub reason: String,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `effectwatch <call> KEY --reason …` for every [`OPERATOR_CALLS`] entry: the
/// subcommands are made from the ledger's list, so an action of that shape
/// needs no code here.
#[derive(Debug)]
pub struct OperatorCommand {
    call: &'static OperatorCall,
    args: OperatorArgs,
}

/// One effect by its key, or every item of a (filtered) pane.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["op_key", "pane"])))]
pub struct OperatorArgs {
    /// The effect's operation key.
    pub op_key: Option<String>,
    #[command(flatten)]
    pub each: PaneArgs,
    /// Why: required, written in the audit trail.
    #[arg(long, visible_alias = "note")]
    pub reason: String,
    /// The version you decided on; refused if the effect changed since (default: the current one).
    #[arg(long, value_name = "N", conflicts_with = "pane")]
    pub expect_version: Option<i64>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

impl FromArgMatches for OperatorCommand {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let Some((name, arguments)) = matches.subcommand() else {
            return Err(clap::Error::new(ErrorKind::MissingSubcommand));
        };
        let call = OperatorCall::named(name).ok_or_else(|| {
            clap::Error::raw(
                ErrorKind::InvalidSubcommand,
                format!("no operator action is called {name}"),
            )
        })?;
        Ok(OperatorCommand {
            call,
            args: OperatorArgs::from_arg_matches(arguments)?,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = OperatorCommand::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Subcommand for OperatorCommand {
    fn augment_subcommands(command: clap::Command) -> clap::Command {
        OPERATOR_CALLS.iter().fold(command, |command, call| {
            // The verb's own words, after the arguments: their struct's
            // doc comment would otherwise be every verb's about.
            command.subcommand(
                OperatorArgs::augment_args(clap::Command::new(call.name)).about(call.about),
            )
        })
    }

    fn augment_subcommands_for_update(command: clap::Command) -> clap::Command {
        OperatorCommand::augment_subcommands(command)
    }

    fn has_subcommand(name: &str) -> bool {
        OperatorCall::named(name).is_some()
    }
}

fn parse_pane(text: &str) -> Result<Pane, String> {
    text.parse()
}

impl From<SettleError> for Failure {
    fn from(error: SettleError) -> Self {
        let code = match &error {
            SettleError::ReadOnly(_) => REFUSED,
            SettleError::Ledger(ledger) => code_for(ledger),
            SettleError::Provider(_) | SettleError::Sink(_) => BAD_CONFIG,
            SettleError::Invalid(_) => USAGE,
            SettleError::Unrecorded { .. } => FAILURE,
        };
        Failure::new(code, error.line())
    }
}

pub async fn run(
    pool: &LedgerPool,
    config: &Config,
    command: SettleCommand,
) -> Result<(), Failure> {
    let settler = Settler::new(
        pool.clone(),
        Arc::new(config.clone()),
        config.operator.clone(),
        config.read_only,
    );
    match command {
        SettleCommand::Reconcile(args) if args.watch || args.once => {
            let service = super::reconciler::ServiceArgs {
                watch: args.watch,
                name: args.name,
                metrics: args.metrics,
            };
            super::reconciler::run(pool, config, service).await
        }
        SettleCommand::Reconcile(args) => match args.each.bulk("reconcile") {
            Some(bulk) => reconcile_pane(&settler, pool, bulk, args.format).await,
            None => {
                let op_key = args.op_key.unwrap_or_default();
                let request = Request::Reconcile {
                    op_key,
                    seen: args.expect_version,
                };
                settle_and_print(&settler, request, args.format).await
            }
        },
        SettleCommand::Compensate(args) => {
            let format = args.format;
            let request = Request::Compensate {
                op_key: args.op_key,
                seen: args.expect_version,
                reason: args.reason,
            };
            settle_and_print(&settler, request, format).await
        }
        SettleCommand::ReverseDuplicate(args) => {
            let format = args.action.format;
            let request = Request::ReverseDuplicate {
                op_key: args.action.op_key,
                seen: args.action.expect_version,
                duplicate_ref: args.duplicate_ref,
                reason: args.action.reason,
            };
            settle_and_print(&settler, request, format).await
        }
        SettleCommand::Escalate(args) => match (args.op_key, args.each.bulk("escalate")) {
            (Some(op_key), _) => {
                let request = Request::Escalate {
                    op_key,
                    seen: args.expect_version,
                    sink: args.to,
                    reason: args.reason,
                };
                settle_and_print(&settler, request, args.format).await
            }
            (None, Some(bulk)) => {
                let Some(items) = bulk.items(&settler, pool).await? else {
                    return Ok(());
                };
                let request = Request::EscalateMany {
                    targets: items,
                    sink: args.to,
                    reason: args.reason,
                };
                let settled = settler.settle(request).await?;
                print_settled(&settled, args.format);
                failed_items(&settled)
            }
            (None, None) => Err(Failure::new(USAGE, "escalate: a key or --pane")),
        },
        SettleCommand::Resolve(args) => {
            let resolution = match args.succeeded {
                Some(external_ref) => Resolution::Succeeded { external_ref },
                None => Resolution::Failed {
                    retryable: args.retryable,
                },
            };
            let request = Request::Resolve {
                op_key: args.op_key,
                seen: args.expect_version,
                reason: args.reason,
                resolution,
            };
            settle_and_print(&settler, request, args.format).await
        }
        SettleCommand::Operator(OperatorCommand { call, args }) => {
            match (args.each.bulk(call.name), args.op_key.clone()) {
                (Some(bulk), _) => operate_on_pane(&settler, pool, call, bulk, &args).await,
                (None, Some(op_key)) => {
                    let request = Request::Operator {
                        call,
                        op_key,
                        seen: args.expect_version,
                        reason: args.reason,
                    };
                    settle_and_print(&settler, request, args.format).await
                }
                (None, None) => Err(Failure::new(USAGE, "name a key or --pane")),
            }
        }
        SettleCommand::Approve(args) => {
            let (format, op_key, seen, reason) = args.parts();
            settle_and_print(
                &settler,
                Request::Approve {
                    op_key,
                    seen,
                    reason,
                },
                format,
            )
            .await
        }
        SettleCommand::Reject(args) => {
            let (format, op_key, seen, reason) = args.parts();
            settle_and_print(
                &settler,
                Request::Reject {
                    op_key,
                    seen,
                    reason,
                },
                format,
            )
            .await
        }
        SettleCommand::Escalation { command } => match command {
            EscalationCommand::List { limit, format } => {
                list_escalations(pool, limit, format).await
            }
            EscalationCommand::Acknowledge(args) => {
                let request = Request::Acknowledge {
                    escalation_key: args.escalation_key,
                    reason: args.reason,
                };
                settle_and_print(&settler, request, args.format).await
            }
            EscalationCommand::Resolve(args) => {
                let request = Request::ResolveEscalation {
                    escalation_key: args.escalation_key,
                    reason: args.reason,
                };
                settle_and_print(&settler, request, args.format).await
            }
            EscalationCommand::Deliver { watch, interval } => {
                deliver(&settler, watch, interval).await
            }
        },
    }
}

impl ActionArgs {
    fn parts(self) -> (Format, String, Option<i64>, String) {
        (self.format, self.op_key, self.expect_version, self.reason)
    }
}

async fn settle_and_print(
    settler: &Settler,
    request: Request,
    format: Format,
) -> Result<(), Failure> {
    let settled = settler.settle(request).await?;
    print_settled(&settled, format);
    Ok(())
}

fn print_settled(settled: &Settled, format: Format) {
    match format {
        Format::Table => println!("{}", settled.summary),
        Format::Json => println!(
            "{}",
            safe_json(&json!({ "summary": settled.summary, "detail": settled.detail }))
        ),
    }
}

/// What a bulk action over a (filtered) pane acts on, once the operator
/// has seen how many items and said yes.
struct Bulk<'a> {
    verb: &'static str,
    pane: Pane,
    each: &'a PaneArgs,
}

impl Bulk<'_> {
    /// Every `(key, version seen)` to act on, or None when there is
    /// nothing to do or the operator said no (both said on stdout).
    async fn items(
        &self,
        settler: &Settler,
        pool: &LedgerPool,
    ) -> Result<Option<Vec<(String, i64)>>, Failure> {
        let (verb, pane) = (self.verb, self.pane);
        if settler.is_read_only() {
            return Err(SettleError::ReadOnly(verb).into());
        }
        let filter = Filter::parse(self.each.filter.as_deref().unwrap_or_default())
            .map_err(|error| Failure::new(USAGE, error))?;
        let limit = self.each.limit.max(1);
        let rows = panes::fetch(pool, pane, None, &filter, limit, 0).await?;
        let items = rows.versions();
        if items.is_empty() {
            println!("{}: nothing to {verb}", pane.title());
            return Ok(None);
        }
        let count = if items.len() as i64 == limit {
            format!(
                "{} (the first {limit}; raise --limit for more)",
                items.len()
            )
        } else {
            items.len().to_string()
        };
        if !self.each.yes {
            if !std::io::stdin().is_terminal() {
                return Err(Failure::new(
                    USAGE,
                    format!("{count} items of pane {pane} match: pass --yes to {verb} them all"),
                ));
            }
            eprint!("{verb} {count} items of pane {pane}? [y/N] ");
            let _ = std::io::stderr().flush();
            let mut answer = String::new();
            let _ = std::io::stdin().lock().read_line(&mut answer);
            if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
                println!("nothing done");
                return Ok(None);
            }
        }
        Ok(Some(items))
    }
}

/// A bulk result's exit: a failure when any item failed.
fn failed_items(settled: &Settled) -> Result<(), Failure> {
    let failed = settled
        .detail
        .get("failed")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    if failed > 0 {
        return Err(Failure::new(FAILURE, format!("{failed} could not be done")));
    }
    Ok(())
}

/// An operator call for every item of a (filtered) pane: the count and the
/// question first, then one transaction per effect.
async fn operate_on_pane(
    settler: &Settler,
    pool: &LedgerPool,
    call: &'static OperatorCall,
    bulk: Bulk<'_>,
    args: &OperatorArgs,
) -> Result<(), Failure> {
    let Some(items) = bulk.items(settler, pool).await? else {
        return Ok(());
    };
    let settled = settler.operate_many(call, items, &args.reason).await;
    print_settled(&settled, args.format);
    failed_items(&settled)
}

/// Bulk: the count is shown before anything is asked of a provider.
async fn reconcile_pane(
    settler: &Settler,
    pool: &LedgerPool,
    bulk: Bulk<'_>,
    format: Format,
) -> Result<(), Failure> {
    let Some(items) = bulk.items(settler, pool).await? else {
        return Ok(());
    };
    let done = settler.reconcile_many(items).await?;
    print_bulk(&done, format);
    let failed = done.iter().filter(|item| item.result.is_err()).count();
    if failed > 0 {
        return Err(Failure::new(
            FAILURE,
            format!(
                "{failed} of {} reconciliations could not be done",
                done.len()
            ),
        ));
    }
    Ok(())
}

fn print_bulk(done: &[BulkItem], format: Format) {
    match format {
        Format::Json => {
            let items: Vec<_> = done
                .iter()
                .map(|item| match &item.result {
                    Ok(report) => json!({ "op_key": item.op_key, "ok": true,
                                          "summary": report.summary, "detail": report.detail }),
                    Err(error) => {
                        json!({ "op_key": item.op_key, "ok": false, "error": error.line() })
                    }
                })
                .collect();
            println!("{}", safe_json(&items));
        }
        Format::Table => {
            for item in done {
                match &item.result {
                    Ok(report) => println!("  ok  {}", report.summary),
                    Err(error) => {
                        println!("  !!  {}: {}", sanitize_line(&item.op_key), error.line())
                    }
                }
            }
            println!("{}", crate::settle::bulk_settled(done).summary);
        }
    }
}

async fn list_escalations(pool: &LedgerPool, limit: i64, format: Format) -> Result<(), Failure> {
    let open = escalations::unresolved(pool, limit.max(1)).await?;
    match format {
        Format::Json => println!("{}", safe_json(&open)),
        Format::Table if open.is_empty() => println!("no open escalations"),
        Format::Table => {
            let mut table = Table::new();
            table.load_preset(UTF8_FULL_CONDENSED);
            table.set_header([
                "escalation",
                "sink",
                "state",
                "attempts",
                "next attempt",
                "last error",
            ]);
            for row in &open {
                let next = if matches!(row.state.as_str(), "open" | "failed") {
                    row.next_attempt_at.format("%H:%M:%S").to_string()
                } else {
                    "—".to_string()
                };
                table.add_row([
                    truncate(&sanitize_line(&row.escalation_key), 60),
                    sanitize_line(&row.sink),
                    row.state.clone(),
                    row.delivery_attempts.to_string(),
                    next,
                    truncate(&sanitize_line(row.last_error.as_deref().unwrap_or("")), 48),
                ]);
            }
            println!("{table}");
        }
    }
    Ok(())
}

async fn deliver(settler: &Settler, watch: bool, interval: f64) -> Result<(), Failure> {
    let pause = Duration::from_secs_f64(interval.clamp(0.1, 3600.0));
    loop {
        match settler.deliver_due_escalations().await {
            Ok(delivered) if !watch => {
                println!("delivered {delivered} escalation(s)");
                return Ok(());
            }
            Ok(0) => {}
            Ok(delivered) => println!("delivered {delivered} escalation(s)"),
            Err(error) if !watch || matches!(error, SettleError::ReadOnly(_)) => {
                return Err(error.into());
            }
            // A lost database is retried on the next pass.
            Err(error) => eprintln!("effectwatch: {}", error.line()),
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}
