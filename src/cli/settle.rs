//! The settling commands: one subcommand per verb of the table
//! ([`crate::settle::verbs`]), `reconcile` (also the reconciler service),
//! and the escalation loop. All go through [`crate::settle::Settler`], the
//! same code the console uses; `--read-only` is refused there.

use std::io::{BufRead, IsTerminal, Write};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::ledger::LedgerPool;
use clap::error::ErrorKind;
use clap::{Arg, ArgAction, ArgGroup, ArgMatches, Args, FromArgMatches, Subcommand};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use serde_json::json;

use super::Format;
use super::exit::{BAD_CONFIG, FAILURE, Failure, REFUSED, USAGE, code_for};
use crate::config::Config;
use crate::ledger::escalations;
use crate::ledger::panes::{self, Filter, Pane, PaneRows, Scope};
use crate::settle::verbs::{self, Answers, Cli, Field, On, Outcome, Subject, Verb};
use crate::settle::{BulkItem, Request, SettleError, Settled, Settler};
use crate::text::{safe_json, sanitize_line, truncate};

#[derive(Debug, Subcommand)]
pub enum SettleCommand {
    #[command(about = verbs::RECONCILE.about)]
    Reconcile(ReconcileArgs),
    /// compensate, resolve, release, …: one subcommand per verb of the table.
    #[command(flatten)]
    Verb(VerbCommand<OnEffects>),
    /// Escalations: list, acknowledge, resolve, deliver.
    Escalation {
        #[command(subcommand)]
        command: EscalationCommand,
    },
}

/// Every item of a (filtered) pane instead of one key: the same four
/// arguments for every verb that acts in bulk.
#[derive(Debug, Args)]
pub struct PaneArgs {
    /// Every item of this pane instead of one key (overdue, unknown, duplicates, held), one
    /// transaction and audit entry each.
    #[arg(long, value_parser = parse_listing)]
    pub pane: Option<Listing>,
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

/// What `--pane` names: a pane of effects, or the open escalations (for
/// the verbs on escalations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    Pane(Pane),
    Escalations,
}

impl std::fmt::Display for Listing {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listing::Pane(pane) => pane.fmt(formatter),
            Listing::Escalations => formatter.write_str("escalations"),
        }
    }
}

fn parse_listing(text: &str) -> Result<Listing, String> {
    if text == "escalations" {
        return Ok(Listing::Escalations);
    }
    text.parse().map(Listing::Pane).map_err(|_| {
        format!(
            "unknown pane {text:?} (expected overdue, unknown, duplicates or held; escalations \
             for `escalation acknowledge|resolve`)"
        )
    })
}

impl PaneArgs {
    /// `verb` for every item of the pane, when one is named.
    fn bulk(&self, verb: &'static str) -> Option<Bulk<'_>> {
        Some(Bulk {
            verb,
            listing: self.pane?,
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

#[derive(Debug, Subcommand)]
pub enum EscalationCommand {
    /// Escalations not yet resolved, with their delivery state.
    List {
        #[arg(long, default_value_t = 100)]
        limit: i64,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// acknowledge, resolve: one subcommand per verb on an escalation.
    #[command(flatten)]
    Verb(VerbCommand<OnEscalations>),
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

/// Which verbs a [`VerbCommand`] offers: those on effects at the top, those
/// on escalations under `escalation`.
pub trait VerbGroup {
    const ON: On;
}

#[derive(Debug)]
pub struct OnEffects;

impl VerbGroup for OnEffects {
    const ON: On = On::Effect;
}

#[derive(Debug)]
pub struct OnEscalations;

impl VerbGroup for OnEscalations {
    const ON: On = On::Escalation;
}

/// `effectwatch <verb> KEY --reason …` for every verb of the table whose
/// subcommand is made from its row: its arguments are the verb's fields,
/// so a new verb needs no code here.
#[derive(Debug)]
pub struct VerbCommand<G> {
    verb: &'static Verb,
    key: Option<String>,
    seen: Option<i64>,
    each: Option<PaneArgs>,
    answers: Answers,
    format: Format,
    group: PhantomData<G>,
}

/// The subcommand of one verb, from its row.
fn verb_subcommand(verb: &'static Verb) -> clap::Command {
    let key = match verb.on {
        On::Effect => Arg::new("key")
            .value_name("OP_KEY")
            .help("The effect's operation key."),
        On::Escalation => Arg::new("key")
            .value_name("ESCALATION_KEY")
            .help("The escalation key (escalate:<op_key>:<decision>)."),
    };
    let mut command = clap::Command::new(verb.name);
    command = if verb.every_item.is_some() {
        let command = PaneArgs::augment_args(command.arg(key))
            .group(ArgGroup::new("which").required(true).args(["key", "pane"]));
        match verb.on {
            On::Effect => command,
            On::Escalation => command.mut_arg("pane", |pane| {
                pane.help(
                    "escalations: every open escalation instead of one key, one transaction \
                     and audit entry each.",
                )
            }),
        }
    } else {
        command.arg(key.required(true))
    };
    for field in verb.fields {
        command = match field {
            Field::Reference => command.arg(
                Arg::new("ref")
                    .long("ref")
                    .value_name("REF")
                    .required(true)
                    .help(
                        "The provider record to reverse: one a reconciliation found besides the effect's own.",
                    ),
            ),
            Field::Outcome => command
                .arg(
                    Arg::new("succeeded")
                        .long("succeeded")
                        .value_name("EXTERNAL_REF")
                        .help("It happened: the provider's reference for it."),
                )
                .arg(
                    Arg::new("failed")
                        .long("failed")
                        .action(ArgAction::SetTrue)
                        .help("It did not happen."),
                )
                .arg(
                    Arg::new("retryable")
                        .long("retryable")
                        .action(ArgAction::SetTrue)
                        .requires("failed")
                        .help("With --failed: the same key may be dispatched again."),
                )
                .group(
                    ArgGroup::new("outcome")
                        .required(true)
                        .args(["succeeded", "failed"]),
                ),
            Field::Sink => command.arg(Arg::new("to").long("to").value_name("NAME").help(
                "The sink (a [sinks.NAME] of the config); default: the only one configured.",
            )),
            Field::Reason => command.arg(
                Arg::new("reason")
                    .long("reason")
                    .visible_alias("note")
                    .value_name("REASON")
                    .required(true)
                    .help("Why: required, written in the audit trail."),
            ),
        };
    }
    if verb.on == On::Effect {
        let expect = Arg::new("expect_version")
            .long("expect-version")
            .value_name("N")
            .value_parser(clap::value_parser!(i64))
            .help("The version you decided on; refused if the effect changed since (default: the current one).");
        command = command.arg(if verb.every_item.is_some() {
            expect.conflicts_with("pane")
        } else {
            expect
        });
    }
    // The verb's own words, after the arguments: the pane arguments'
    // doc comment would otherwise be its about.
    command
        .arg(
            Arg::new("format")
                .long("format")
                .value_name("FORMAT")
                .value_parser(clap::builder::EnumValueParser::<Format>::new())
                .default_value("table"),
        )
        .about(verb.about)
}

fn made_verbs(on: On) -> impl Iterator<Item = &'static Verb> {
    verbs::VERBS
        .iter()
        .copied()
        .filter(move |verb| verb.on == on && verb.cli == Cli::Made)
}

/// An argument as given; one the verb does not ask for is absent. Any other
/// failure to read one is a mistake here, not the operator's, and is said.
fn given<T: Clone + Send + Sync + 'static>(
    arguments: &ArgMatches,
    id: &str,
) -> Result<Option<T>, clap::Error> {
    match arguments.try_get_one::<T>(id) {
        Ok(value) => Ok(value.cloned()),
        Err(clap::parser::MatchesError::UnknownArgument { .. }) => Ok(None),
        Err(error) => Err(clap::Error::raw(
            ErrorKind::InvalidValue,
            format!("{id}: {error}"),
        )),
    }
}

impl<G: VerbGroup> FromArgMatches for VerbCommand<G> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let Some((name, arguments)) = matches.subcommand() else {
            return Err(clap::Error::new(ErrorKind::MissingSubcommand));
        };
        let verb = made_verbs(G::ON)
            .find(|verb| verb.name == name)
            .ok_or_else(|| {
                clap::Error::raw(
                    ErrorKind::InvalidSubcommand,
                    format!("no verb is called {name}"),
                )
            })?;
        let text = |id: &str| {
            given::<String>(arguments, id).map(|value| value.map(|value| value.trim().to_string()))
        };
        let flag = |id: &str| given::<bool>(arguments, id).map(|value| value == Some(true));
        let succeeded = text("succeeded")?;
        let outcome = match (&succeeded, flag("failed")?) {
            (Some(_), _) => Some(Outcome::Succeeded),
            (None, true) => Some(Outcome::Failed),
            (None, false) => None,
        };
        let each = match verb.every_item {
            Some(_) => Some(PaneArgs::from_arg_matches(arguments)?),
            None => None,
        };
        Ok(VerbCommand {
            verb,
            // The key exactly as given: the ledger's keys may hold spaces,
            // and a trimmed one could name another effect.
            key: given::<String>(arguments, "key")?,
            seen: given::<i64>(arguments, "expect_version")?,
            each,
            answers: Answers {
                reason: text("reason")?.unwrap_or_default(),
                reference: text("ref")?.or(succeeded).unwrap_or_default(),
                outcome,
                retryable: flag("retryable")?,
                sink: text("to")?,
            },
            format: arguments
                .get_one::<Format>("format")
                .copied()
                .unwrap_or(Format::Table),
            group: PhantomData,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = VerbCommand::from_arg_matches(matches)?;
        Ok(())
    }
}

impl<G: VerbGroup> Subcommand for VerbCommand<G> {
    fn augment_subcommands(command: clap::Command) -> clap::Command {
        made_verbs(G::ON).fold(command, |command, verb| {
            command.subcommand(verb_subcommand(verb))
        })
    }

    fn augment_subcommands_for_update(command: clap::Command) -> clap::Command {
        VerbCommand::<G>::augment_subcommands(command)
    }

    fn has_subcommand(name: &str) -> bool {
        made_verbs(G::ON).any(|verb| verb.name == name)
    }
}

impl<G> VerbCommand<G> {
    /// One verb on its key, or on every item of a (filtered) pane after
    /// the count and the question.
    async fn run(self, settler: &Settler, pool: &LedgerPool) -> Result<(), Failure> {
        let VerbCommand {
            verb,
            key,
            seen,
            each,
            answers,
            format,
            ..
        } = self;
        let bulk = each.as_ref().and_then(|each| each.bulk(verb.name));
        let subject = match (bulk, key) {
            (Some(bulk), _) => match bulk.choose(verb, settler, pool).await? {
                None => return Ok(()),
                Some(Chosen::All(subject)) => subject,
                Some(Chosen::CancelInstead { release, cancel }) => {
                    return release_or_cancel(settler, release, cancel, answers, format).await;
                }
            },
            (None, Some(op_key)) if verb.on == On::Effect => {
                if *verb == verbs::RELEASE {
                    say_if_stopped_asking(pool, &op_key).await?;
                }
                Subject::Effect { op_key, seen }
            }
            (None, Some(escalation_key)) => Subject::Escalation { escalation_key },
            (None, None) => {
                return Err(Failure::new(
                    USAGE,
                    format!("{}: a key or --pane", verb.name),
                ));
            }
        };
        let many = matches!(subject, Subject::Pane { .. } | Subject::Escalations { .. });
        let request = verb
            .request(subject, answers)
            .ok_or_else(|| Failure::new(USAGE, format!("{}: not for what was named", verb.name)))?;
        let settled = settler.settle(request).await?;
        print_settled(&settled, format);
        if many { failed_items(&settled) } else { Ok(()) }
    }
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
                let request = Request::on_effect(
                    &verbs::RECONCILE,
                    op_key,
                    args.expect_version,
                    Answers::default(),
                );
                settle_and_print(&settler, request, args.format).await
            }
        },
        SettleCommand::Verb(command) => command.run(&settler, pool).await,
        SettleCommand::Escalation { command } => match command {
            EscalationCommand::List { limit, format } => {
                list_escalations(pool, limit, format).await
            }
            EscalationCommand::Verb(command) => command.run(&settler, pool).await,
            EscalationCommand::Deliver { watch, interval } => {
                deliver(&settler, watch, interval).await
            }
        },
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
    listing: Listing,
    each: &'a PaneArgs,
}

/// What the operator chose to do to every item.
enum Chosen {
    All(Subject),
    /// Release the held items whose agents still ask for them, and cancel
    /// the ones whose agents stopped.
    CancelInstead {
        release: Vec<(String, i64)>,
        cancel: Vec<(String, i64)>,
    },
}

/// The operator's answer to the count.
enum Answer {
    No,
    All,
    CancelInstead,
}

/// At most this many open escalations are read to filter.
const ESCALATIONS_READ: i64 = 100_000;

impl Bulk<'_> {
    fn filter(&self) -> Result<Filter, Failure> {
        Filter::parse(self.each.filter.as_deref().unwrap_or_default())
            .map_err(|error| Failure::new(USAGE, error))
    }

    fn limit(&self) -> i64 {
        self.each.limit.max(1)
    }

    /// `3`, or `500 (the first 500; raise --limit for more)` at the limit.
    fn count(&self, items: usize, more: bool) -> String {
        if more {
            format!(
                "{items} (the first {}; raise --limit for more)",
                self.limit()
            )
        } else {
            items.to_string()
        }
    }

    /// The rows of an effect pane the verb acts on; None when there are
    /// none (said on stdout).
    async fn pane_rows(
        &self,
        settler: &Settler,
        pool: &LedgerPool,
        on: On,
    ) -> Result<Option<(Pane, PaneRows)>, Failure> {
        let verb = self.verb;
        if settler.is_read_only() {
            return Err(SettleError::ReadOnly(verb.to_string()).into());
        }
        let pane = match (on, self.listing) {
            (On::Effect, Listing::Pane(pane)) => pane,
            (On::Effect, Listing::Escalations) => {
                return Err(Failure::new(
                    USAGE,
                    format!(
                        "{verb} acts on effects: --pane overdue, unknown, duplicates or held \
                         (escalations: `effectwatch escalation acknowledge|resolve --pane \
                         escalations`)"
                    ),
                ));
            }
            (On::Escalation, _) => {
                return Err(Failure::new(
                    USAGE,
                    format!("escalation {verb} acts on escalations: --pane escalations"),
                ));
            }
        };
        let rows = panes::fetch(pool, pane, None, &self.filter()?, self.limit(), 0).await?;
        if rows.is_empty() {
            println!("{}: nothing to {verb}", pane.title());
            return Ok(None);
        }
        Ok(Some((pane, rows)))
    }

    /// Every `(key, version seen)` of the pane to act on, or None when
    /// there is nothing to do or the operator said no (both said on stdout).
    async fn items(
        &self,
        settler: &Settler,
        pool: &LedgerPool,
    ) -> Result<Option<Vec<(String, i64)>>, Failure> {
        let Some((pane, rows)) = self.pane_rows(settler, pool, On::Effect).await? else {
            return Ok(None);
        };
        let items = rows.versions();
        let count = self.count(items.len(), items.len() as i64 == self.limit());
        match self.confirm(&format!("{count} items of pane {pane}"), None)? {
            Answer::All => Ok(Some(items)),
            Answer::No | Answer::CancelInstead => Ok(None),
        }
    }

    /// What `verb` acts on: every item of the (filtered) pane, or every
    /// open escalation, after the count and the question; None when there
    /// is nothing to do or the operator said no. Releasing held items
    /// whose agents stopped asking says so, and offers to cancel those.
    async fn choose(
        &self,
        verb: &Verb,
        settler: &Settler,
        pool: &LedgerPool,
    ) -> Result<Option<Chosen>, Failure> {
        if verb.on == On::Escalation && self.listing == Listing::Escalations {
            return self.choose_escalations(settler, pool).await;
        }
        let Some((pane, rows)) = self.pane_rows(settler, pool, verb.on).await? else {
            return Ok(None);
        };
        let items = rows.versions();
        let count = self.count(items.len(), items.len() as i64 == self.limit());
        let stopped = if *verb == verbs::RELEASE {
            rows.stopped_asking()
        } else {
            Vec::new()
        };
        let offer = match stopped.is_empty() {
            true => None,
            false => {
                // The operator's filter, narrowed to those items.
                let filter = self.filter()?;
                let only_those = match filter.scopes.contains(&Scope::StoppedAsking) {
                    true => filter.text(),
                    false => filter.toggled(Scope::StoppedAsking).text(),
                };
                Some(StoppedAsking {
                    stopped: stopped.len(),
                    of: items.len(),
                    cancel_first: format!(
                        "effectwatch cancel --pane {pane} --filter '{only_those}' --reason … --yes"
                    ),
                })
            }
        };
        let answer = self.confirm(&format!("{count} items of pane {pane}"), offer.as_ref())?;
        Ok(match answer {
            Answer::No => None,
            Answer::All => Some(Chosen::All(Subject::Pane { targets: items })),
            Answer::CancelInstead => Some(Chosen::CancelInstead {
                release: items
                    .into_iter()
                    .filter(|item| !stopped.contains(item))
                    .collect(),
                cancel: stopped,
            }),
        })
    }

    /// Every open escalation the filter matches, newest first, after the
    /// count (and how many of each state) and the question.
    async fn choose_escalations(
        &self,
        settler: &Settler,
        pool: &LedgerPool,
    ) -> Result<Option<Chosen>, Failure> {
        let verb = self.verb;
        if settler.is_read_only() {
            return Err(SettleError::ReadOnly(verb.to_string()).into());
        }
        let filter = self.filter()?;
        let mut matching: Vec<_> = escalations::open(pool, None, ESCALATIONS_READ)
            .await?
            .into_iter()
            .filter(|row| filter.matches_fields(&row.filter_fields()))
            .collect();
        if matching.is_empty() {
            println!("Escalations: nothing to {verb}");
            return Ok(None);
        }
        let more = matching.len() as i64 > self.limit();
        matching.truncate(self.limit() as usize);
        let mut states = std::collections::BTreeMap::<&str, usize>::new();
        for row in &matching {
            *states.entry(row.state.as_str()).or_default() += 1;
        }
        let split: Vec<String> = states.iter().map(|(s, n)| format!("{n} {s}")).collect();
        let count = self.count(matching.len(), more);
        let what = format!("{count} open escalations ({})", split.join(", "));
        Ok(match self.confirm(&what, None)? {
            Answer::All => Some(Chosen::All(Subject::Escalations {
                escalation_keys: matching.into_iter().map(|row| row.escalation_key).collect(),
            })),
            Answer::No | Answer::CancelInstead => None,
        })
    }

    /// Asks the operator about `what` (`3 items of pane held`) unless
    /// `--yes`; without a terminal to ask on, says what `--yes` would do.
    fn confirm(&self, what: &str, offer: Option<&StoppedAsking>) -> Result<Answer, Failure> {
        let verb = self.verb;
        let said = offer.map(StoppedAsking::sentence);
        if self.each.yes {
            if let Some(said) = said {
                eprintln!(
                    "note: {said}; one released and never dispatched can still be withdrawn: \
                     effectwatch cancel KEY --reason …"
                );
            }
            return Ok(Answer::All);
        }
        if !std::io::stdin().is_terminal() {
            let instead = offer
                .zip(said)
                .map(|(offer, said)| {
                    format!(
                        " ({said}; to cancel those instead, first: {})",
                        offer.cancel_first
                    )
                })
                .unwrap_or_default();
            return Err(Failure::new(
                USAGE,
                format!("{what} match: pass --yes to {verb} them all{instead}"),
            ));
        }
        let choices = match offer {
            Some(offer) if offer.stopped == offer.of => {
                format!("[y: {verb} them all / c: cancel them instead / N]")
            }
            Some(offer) => format!(
                "[y: {verb} all {} / c: cancel those {}, {verb} the other {} / N]",
                offer.of,
                offer.stopped,
                offer.of - offer.stopped
            ),
            None => "[y/N]".to_string(),
        };
        let said = said.map(|said| format!(" {said}.")).unwrap_or_default();
        eprint!("{verb} {what}?{said} {choices} ");
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        Ok(match answer.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => Answer::All,
            "c" | "cancel" if offer.is_some() => Answer::CancelInstead,
            _ => {
                println!("nothing done");
                Answer::No
            }
        })
    }
}

/// Held items whose agents have not asked for them within their pending
/// window: released, they go to Overdue undispatched.
struct StoppedAsking {
    stopped: usize,
    of: usize,
    /// The command that cancels them before a release of the rest.
    cancel_first: String,
}

impl StoppedAsking {
    fn sentence(&self) -> String {
        let which = if self.stopped == self.of {
            "all of them".to_string()
        } else {
            format!("{} of them", self.stopped)
        };
        format!(
            "{which}: their agents have not asked for them within their pending window; \
             released, they go to Overdue undispatched"
        )
    }
}

/// A release of one held key whose agent stopped asking for it: said
/// before it is done, with the cancel that withdraws it instead.
async fn say_if_stopped_asking(pool: &LedgerPool, op_key: &str) -> Result<(), Failure> {
    if let Some(held_ms) = panes::held_without_asking(pool, op_key).await? {
        eprintln!(
            "note: {} has not been asked for within its pending window (held {} ago): released, it goes \
             to Overdue undispatched unless its agent asks again; `effectwatch cancel {} \
             --reason …` withdraws it",
            sanitize_line(op_key),
            crate::format::duration_ms(held_ms),
            sanitize_line(op_key)
        );
    }
    Ok(())
}

/// Cancels the held items whose agents stopped asking, then releases the
/// rest: each an operator call in its own transaction, as any bulk verb.
async fn release_or_cancel(
    settler: &Settler,
    release: Vec<(String, i64)>,
    cancel: Vec<(String, i64)>,
    answers: Answers,
    format: Format,
) -> Result<(), Failure> {
    let mut failed = 0;
    for (verb, targets) in [(&verbs::CANCEL, cancel), (&verbs::RELEASE, release)] {
        if targets.is_empty() {
            continue;
        }
        let request = verb
            .request(Subject::Pane { targets }, answers.clone())
            .ok_or_else(|| Failure::new(USAGE, format!("{}: not for a pane", verb.name)))?;
        let settled = settler.settle(request).await?;
        print_settled(&settled, format);
        failed += failed_items(&settled).map_or(1, |()| 0);
    }
    if failed > 0 {
        return Err(Failure::already_said(FAILURE));
    }
    Ok(())
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
