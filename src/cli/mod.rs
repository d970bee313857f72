//! The command line: one file per subcommand, one exit code per kind of failure.

pub mod approval;
pub mod audit;
pub mod check;
pub mod config;
pub mod demo;
pub mod exit;
pub mod finance;
pub mod gateway;
pub mod list;
pub mod migrate;
pub mod policy;
pub mod prune;
pub mod reconciler;
pub mod report;
pub mod settle;
pub mod shell;
pub mod show;
pub mod version;
pub mod watch;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::ledger::panes::Pane;

#[derive(Debug, Parser)]
#[command(
    name = "effectwatch",
    version,
    disable_version_flag = true,
    about = "Watch and settle the side effects automated workers perform"
)]
pub struct Cli {
    /// Print the version and the ledger schema this binary makes, and the schema of the
    /// configured ledger when one is reachable.
    #[arg(short = 'V', long)]
    pub version: bool,

    /// PostgreSQL URL of the effect ledger (postgres://user@host/db?sslmode=require).
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,

    /// A streaming replica for what only reads (console panes and detail, list, show,
    /// finance, report, audit list); actions and the writer go to --database-url.
    #[arg(
        long,
        env = "EFFECTWATCH_READ_URL",
        global = true,
        hide_env_values = true
    )]
    pub read_url: Option<String>,

    /// Config file (TOML); default: the platform config dir's effectwatch/config.toml.
    #[arg(long, global = true)]
    pub config: Option<std::path::PathBuf>,

    /// Name written in the audit trail for your actions (default: config, else the OS user).
    #[arg(long, global = true)]
    pub operator: Option<String>,

    /// Refuse every action that writes to the ledger.
    #[arg(long, global = true)]
    pub read_only: bool,

    #[command(flatten)]
    pub console: ConsoleFlags,

    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// A gateway over stdio: the one agent that started it is its only
    /// client, and its calls come one after another.
    pub fn serves_one_agent_over_stdio(&self) -> bool {
        matches!(
            &self.command,
            Some(Command::Ledger(LedgerCommand::Gateway(gateway)))
                if gateway.command.is_none() && gateway.listen.is_none()
        )
    }
}

/// What only the console reads, given before `watch` or after it; kept
/// out of the other subcommands' help, where it would mean nothing.
#[derive(Debug, Clone, Default, Args)]
pub struct ConsoleFlags {
    /// Theme: dark, light, high-contrast, colour-blind, or a path to a .toml file.
    #[arg(long)]
    pub theme: Option<String>,

    /// Seconds between polls (the console also wakes on NOTIFY).
    #[arg(long)]
    pub poll_interval: Option<f64>,

    /// No desktop notifications.
    #[arg(long)]
    pub no_notify: bool,

    #[command(flatten)]
    pub time_travel: TimeTravel,
}

impl ConsoleFlags {
    /// These flags, each one not given taken from `outer` (those before the subcommand).
    pub fn or(self, outer: ConsoleFlags) -> ConsoleFlags {
        ConsoleFlags {
            theme: self.theme.or(outer.theme),
            poll_interval: self.poll_interval.or(outer.poll_interval),
            no_notify: self.no_notify || outer.no_notify,
            time_travel: self.time_travel.or(outer.time_travel),
        }
    }
}

/// `--at`: for the console, `list` and `finance`.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct TimeTravel {
    /// Time travel: the ledger as it stood at this instant (RFC 3339 or a
    /// time ago, e.g. 2h); always read-only.
    #[arg(long, value_name = "TIME", value_parser = crate::time_args::parse_instant)]
    pub at: Option<chrono::DateTime<chrono::Utc>>,
}

impl TimeTravel {
    pub fn or(self, outer: TimeTravel) -> TimeTravel {
        TimeTravel {
            at: self.at.or(outer.at),
        }
    }
}

/// Every subcommand. Those that run on a ledger connection are
/// [`LedgerCommand`]s; the others need none (or make their own).
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The whole product on a private ledger: its own PostgreSQL, a fake provider, simulated agents, the console.
    Demo(demo::DemoArgs),
    /// The live console (also what runs without a subcommand).
    Watch(ConsoleFlags),
    /// Print the config file read, the resolved settings (secrets masked) and the log file.
    Config,
    #[command(flatten)]
    Ledger(LedgerCommand),
    /// A monitoring plugin (Nagios, Icinga, Sensu): exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
    Check(check::CheckArgs),
    /// A completion script for your shell, generated from this command line.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The manual page (roff) on stdout; with --dir, one page per subcommand written there.
    Man {
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
    /// An MCP tool server over the demo's fake provider (refund, lookup_refunds), to try the gateway on.
    McpTools(gateway::McpToolsArgs),
}

/// The subcommands that run on a connection to the ledger (to its replica
/// when they only read and one is configured).
#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Install or upgrade the ledger schema (idempotent).
    Migrate,
    /// List the items of one pane.
    List {
        #[arg(value_parser = parse_pane)]
        pane: Pane,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Words that must match: plain text, field:value with key, target, action, state, provider, requester, or mismatch, replays-only, with-replays, holder:settled, stopped-asking.
        #[arg(long)]
        filter: Option<String>,
        #[command(flatten)]
        time_travel: TimeTravel,
    },
    /// Show one effect with its attempts, events, reconciliations and audit entries.
    Show {
        op_key: String,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// The audit trail.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Suspected double effects and exposure per currency, for finance.
    Finance(finance::FinanceArgs),
    /// A post-mortem of a time range: pane entries, reconciliations, operator actions, resolution times.
    Report(report::ReportArgs),
    /// Approvals an approving system granted: what they authorise, until when; grant and revoke.
    Approval {
        #[command(subcommand)]
        command: approval::ApprovalCommand,
    },
    /// What each action's effects may do next: retry semantics, windows, holds, approval limit.
    Policy {
        #[command(subcommand)]
        command: policy::PolicyCommand,
    },
    #[command(about = crate::settle::verbs::PRUNE.about)]
    Prune(prune::PruneArgs),
    /// An MCP proxy between an agent and its tool server: each side-effecting tool call recorded in the ledger.
    Gateway(gateway::GatewayArgs),
    #[command(flatten)]
    Settle(settle::SettleCommand),
}

impl LedgerCommand {
    /// The subcommand's name, for the connection's application_name.
    pub fn name(&self) -> &'static str {
        match self {
            LedgerCommand::Migrate => "migrate",
            LedgerCommand::List { .. } => "list",
            LedgerCommand::Show { .. } => "show",
            LedgerCommand::Audit { .. } => "audit",
            LedgerCommand::Finance(_) => "finance",
            LedgerCommand::Report(_) => "report",
            LedgerCommand::Prune(_) => "prune",
            LedgerCommand::Policy { .. } => "policy",
            LedgerCommand::Approval { .. } => "approval",
            LedgerCommand::Gateway(_) => "gateway",
            LedgerCommand::Settle(_) => "settle",
        }
    }

    /// Whether it only reads: it goes to the replica when there is one.
    pub fn only_reads(&self) -> bool {
        matches!(
            self,
            LedgerCommand::List { .. }
                | LedgerCommand::Show { .. }
                | LedgerCommand::Finance(_)
                | LedgerCommand::Report(_)
                | LedgerCommand::Audit {
                    command: AuditCommand::List(_)
                }
        )
    }
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check the whole hash chain up to its head; exits non-zero when it is broken.
    Verify {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// An anchor `audit anchor` printed earlier (SEQ:HASH): fail unless the chain still
        /// holds that entry with that hash, which catches a rewrite by the ledger's owner.
        #[arg(long, value_name = "ANCHOR")]
        expect: Option<crate::ledger::audit::Anchor>,
    },
    /// Print the chain's head (SEQ:HASH) to keep outside the ledger, for `verify --expect`.
    Anchor {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// The entries of a range, oldest first, with what each changed; --operator NAME: only theirs.
    #[command(
        after_help = "Filter by operator: --operator NAME lists only the entries NAME made. Here it is a filter, not the name written for your own actions; the config's operator never filters."
    )]
    List(audit::AuditListArgs),
    /// Make the Ed25519 key that signs the chain's checkpoints when retention drops months of it.
    Keygen {
        /// A new file (never overwritten), readable by its owner only.
        #[arg(long, value_name = "FILE")]
        out: std::path::PathBuf,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

fn parse_pane(text: &str) -> Result<Pane, String> {
    text.parse()
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::Parser;

    fn parsed(words: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("effectwatch").chain(words.iter().copied()))
            .unwrap_or_else(|error| panic!("{words:?}: {error}"))
    }

    #[test]
    fn only_a_gateway_over_stdio_is_taken_to_serve_one_agent() {
        let stdio = [
            "gateway",
            "--policy",
            "p.toml",
            "--upstream",
            "tools",
            "--stdio",
        ];
        assert!(parsed(&stdio).serves_one_agent_over_stdio());
        let http = [
            "gateway",
            "--policy",
            "p.toml",
            "--listen",
            "127.0.0.1:8931",
            "--upstream",
            "tools",
        ];
        assert!(!parsed(&http).serves_one_agent_over_stdio());
        assert!(!parsed(&[]).serves_one_agent_over_stdio());
        assert!(!parsed(&["migrate"]).serves_one_agent_over_stdio());
    }
}
