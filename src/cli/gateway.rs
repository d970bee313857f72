//! `effectwatch gateway` and `effectwatch mcp-tools`.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::exit::{BAD_CONFIG, FAILURE, Failure, REFUSED, UNREACHABLE, USAGE};
use crate::gateway::certify::{self, Certification, Line, Settlement, Verdict};
use crate::gateway::policy::Policy;
use crate::gateway::tools::{DemoTools, ToolFaults};
use crate::gateway::upstream::UpstreamSpec;
use crate::gateway::{self, serve_http, serve_stdio};
use crate::ledger::LedgerPool;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct GatewayArgs {
    #[command(subcommand)]
    pub command: Option<GatewayCommand>,
    /// The policy file: which tools change the world, and the key, target and params of each.
    #[arg(long, value_name = "FILE", required = true)]
    pub policy: Option<PathBuf>,
    /// Serve MCP over streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8931).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Relay unmapped tools that may change the world, unrecorded (logged), instead of refusing them.
    #[arg(long)]
    pub allow_unmapped: bool,
    /// The tool server: a URL (http://…/mcp), or a command and its arguments, spoken to over
    /// stdio. Put it last: every word after it belongs to the command.
    #[arg(long, required = true, num_args = 1.., allow_hyphen_values = true, value_name = "COMMAND…|URL")]
    pub upstream: Vec<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum GatewayCommand {
    /// The release checklist, run against a staging tool server and ledger: each failure made on
    /// purpose, each judged by the tool server's own lookup. Exit 0 only when every line holds
    /// and nothing the run made is left open.
    #[command(after_help = CERTIFY_AFTER_HELP)]
    Certify(CertifyArgs),
}

const CERTIFY_AFTER_HELP: &str = "\
A run's effects are recorded as requested by certify:<alias> (never the gateway's \
gateway:<alias>), and each key carries the run's marker, certify-<run>-<case>; the output \
names the run and counts its effects. At the end, every effect the run left open (the \
dropped reply is unknown, the dead caller's call pending, a hold) is settled through the \
operator functions, each with an audit entry, the reason \"certification run <run>: staging \
effect\" and certify:<alias> as the operator: cancelled if never dispatched, else resolved, \
as succeeded with the tool's reference when it answered with one, as failed (not \
retryable) when not. The checklist's repeated calls are acknowledged, so nothing of the run \
stays in the overdue, unknown, held or duplicates panes. The effects stay in the ledger, \
settled, until retention prunes them.

Settling needs the operator role: pass --operator-url with an operator login on the same \
ledger when --database-url is an agent's. Certify refuses to start (exit 8) when the login \
that would settle may not; what could not be settled at the end is printed on stderr with \
the commands an operator runs, and the exit is 1.";

#[derive(Debug, clap::Args)]
pub struct CertifyArgs {
    /// The policy file; the tool's rule names its lookup (lookup, lookup_count).
    #[arg(long, value_name = "FILE")]
    pub policy: PathBuf,
    /// The side-effecting tool to certify.
    #[arg(long)]
    pub tool: String,
    /// A call's arguments, as JSON; each case makes them its own business action.
    #[arg(long, value_name = "JSON")]
    pub args: String,
    /// The ledger and the tool server are staging: certification makes real effects on purpose.
    #[arg(long)]
    pub staging: bool,
    /// An operator login (effect_operator) on the same ledger, to settle what the run leaves
    /// open (default: --database-url, which must then be allowed the operator functions).
    #[arg(long, value_name = "URL")]
    pub operator_url: Option<String>,
    #[arg(long, value_enum, default_value_t = super::Format::Table)]
    pub format: super::Format,
    /// The staging tool server: a URL, or a command and its arguments. Put it last.
    #[arg(long, required = true, num_args = 1.., allow_hyphen_values = true, value_name = "COMMAND…|URL")]
    pub upstream: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct McpToolsArgs {
    /// The fake provider's base URL (`effectwatch demo` prints it).
    #[arg(long, value_name = "URL")]
    pub provider_url: String,
    /// Serve over streamable HTTP at http://ADDR/mcp instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Fault for tests: perform the refund, then exit before answering (a lost reply).
    #[arg(long)]
    pub exit_after_refund: bool,
    /// Fault for tests: decline refunds above this amount (minor units) without calling the provider.
    #[arg(long, value_name = "MINOR_UNITS")]
    pub decline_over: Option<i64>,
    /// Fault for certification: ignore the operation key the gateway passes, so a repeated call refunds again.
    #[arg(long)]
    pub ignore_key: bool,
    /// Fault for certification: lookup_refunds answers that there are none.
    #[arg(long)]
    pub lying_lookup: bool,
    /// Fault for tests: also offer a refund tool under a lookalike name that claims to only read.
    #[arg(long)]
    pub impostor: bool,
    /// Fault for tests: state no outcome in `_meta` (a tool server written before the signal), so the gateway judges by wording.
    #[arg(long)]
    pub unsigned: bool,
    /// Fault for tests: every error answered as "Error executing tool <name>", its detail hidden, as some SDKs do.
    #[arg(long)]
    pub hidden_errors: bool,
}

pub async fn run(pool: LedgerPool, args: GatewayArgs) -> Result<(), Failure> {
    if let Some(GatewayCommand::Certify(certify)) = args.command {
        return run_certify(pool, certify).await;
    }
    let Some(policy_path) = args.policy.clone() else {
        return Err(Failure::new(USAGE, "gateway needs --policy FILE"));
    };
    crate::logging::warnings_to_stderr();
    let policy = Policy::load(&policy_path).map_err(|error| Failure::new(BAD_CONFIG, error))?;
    let spec =
        UpstreamSpec::parse(&args.upstream).map_err(|error| Failure::new(BAD_CONFIG, error))?;
    let described = spec.describe();
    let requested_by = policy.requested_by();
    let (gateway, report) = gateway::start(spec, policy, pool, args.allow_unmapped)
        .await
        // A policy the tools contradict, or an upstream that cannot be started,
        // is a mistake in what the gateway was told.
        .map_err(|error| Failure::new(BAD_CONFIG, error))?;
    if let Some(line) = report.lookalike_line() {
        eprintln!("effectwatch gateway: {line}");
    }
    if let Some(line) =
        report.unmapped_line(&policy_path.display().to_string(), args.allow_unmapped)
    {
        eprintln!("effectwatch gateway: {line}");
    }
    eprintln!(
        "effectwatch gateway: {}",
        report.summary_line(&described, &requested_by)
    );
    let served = match args.listen {
        None => until_stopped(serve_stdio(gateway.clone())).await,
        Some(address) => {
            let shared = gateway.clone();
            let (bound, server) = serve_http(move || Ok(shared.clone()), address)
                .await
                .map_err(|error| Failure::new(UNREACHABLE, error))?;
            eprintln!("effectwatch gateway: listening on http://{bound}/mcp");
            until_stopped(server).await
        }
    };
    // Successes answered and still being recorded are recorded before the
    // process ends.
    gateway.close().await;
    served.map_err(|error| Failure::new(FAILURE, error))
}

pub async fn run_tools(args: McpToolsArgs) -> Result<(), Failure> {
    let tools = DemoTools::new(
        &args.provider_url,
        ToolFaults {
            exit_after_refund: args.exit_after_refund,
            decline_over: args.decline_over,
            ignore_key: args.ignore_key,
            lying_lookup: args.lying_lookup,
            impostor: args.impostor,
            unsigned: args.unsigned,
            hidden_errors: args.hidden_errors,
        },
    )
    .map_err(|error| Failure::new(FAILURE, error))?;
    gateway::tools::serve(tools, args.listen)
        .await
        .map_err(|error| Failure::new(FAILURE, error))
}

async fn run_certify(pool: LedgerPool, args: CertifyArgs) -> Result<(), Failure> {
    if !args.staging {
        return Err(Failure::new(
            USAGE,
            "certify makes real effects on purpose (refunds twice, dropped replies): pass --staging to say the ledger and the tool server are staging",
        ));
    }
    let arguments = match serde_json::from_str::<serde_json::Value>(&args.args) {
        Ok(serde_json::Value::Object(arguments)) => arguments,
        Ok(_) => return Err(Failure::new(USAGE, "--args must be a JSON object")),
        Err(error) => return Err(Failure::new(USAGE, format!("--args is not JSON: {error}"))),
    };
    let policy = Policy::load(&args.policy).map_err(|error| Failure::new(BAD_CONFIG, error))?;
    let spec =
        UpstreamSpec::parse(&args.upstream).map_err(|error| Failure::new(BAD_CONFIG, error))?;
    // What the run leaves open is settled at its end: nothing is made
    // unless the login that settles may.
    let settling = match &args.operator_url {
        Some(url) => {
            let mut settings = crate::ledger::ConnectSettings::new(url.clone());
            settings.application_name = "effectwatch:certify:settle".into();
            crate::ledger::connect(&settings).await?
        }
        None => pool.clone(),
    };
    if !certify::may_settle(&settling).await? {
        return Err(Failure::new(
            REFUSED,
            match args.operator_url {
                Some(_) => {
                    "certify settles what its run leaves open (unknown, pending, held) through the operator functions, which the login of --operator-url may not call: give an operator login (effect_operator); nothing was made"
                }
                None => {
                    "certify settles what its run leaves open (unknown, pending, held) through the operator functions, which this login may not call: pass --operator-url with an operator login (effect_operator) on the same ledger; nothing was made"
                }
            },
        ));
    }
    let (gateway, _) = gateway::start(spec, policy, pool, false)
        .await
        .map_err(|error| Failure::new(BAD_CONFIG, error))?;
    // The gateway is the run's alone (no clone kept here): it records as
    // certification, never as the gateway's own name.
    let certification = Certification::new(gateway, &args.tool, arguments)
        .map_err(|error| Failure::new(BAD_CONFIG, error))?;
    let lines = certification.run().await;
    certification.gateway().close().await;
    let settlement = certification.settle(&settling).await;
    if args.operator_url.is_some() {
        settling.close().await;
    }
    match args.format {
        super::Format::Json => println!(
            "{}",
            crate::text::safe_json(&CertifyReport {
                run: certification.run_id(),
                requested_by: certification.requested_by(),
                marker: certification.marker(),
                reason: certification.reason(),
                checklist: &lines,
                effects: &settlement,
            })
        ),
        super::Format::Table => print_table(&certification, &lines, &settlement),
    }
    if !settlement.left_open.is_empty() {
        say_left_open(&certification, &settlement);
    }
    let failed = lines
        .iter()
        .filter(|line| line.verdict == Verdict::NotHeld)
        .count();
    if failed > 0 {
        Err(Failure::new(
            FAILURE,
            format!("{failed} line(s) of the release checklist do not hold"),
        ))
    } else if !settlement.left_open.is_empty() {
        Err(Failure::new(
            FAILURE,
            format!(
                "the checklist holds, but {} effect(s) of certification run {} are still open",
                settlement.left_open.len(),
                certification.run_id()
            ),
        ))
    } else {
        Ok(())
    }
}

#[derive(serde::Serialize)]
struct CertifyReport<'a> {
    run: &'a str,
    requested_by: &'a str,
    marker: String,
    reason: String,
    checklist: &'a [Line],
    effects: &'a Settlement,
}

fn print_table(certification: &Certification, lines: &[Line], settlement: &Settlement) {
    use crate::text::message_line;
    for line in lines {
        let mark = match line.verdict {
            Verdict::Held => "held",
            Verdict::NotHeld => "NOT HELD",
            Verdict::NotChecked => "not checked",
        };
        println!("[{mark}] {}: {}", line.check, message_line(&line.saw));
    }
    let run = certification.run_id();
    println!(
        "certification run {run}: {} effect(s) made as {}, every key marked {}",
        settlement.made.len(),
        message_line(certification.requested_by()),
        certification.marker()
    );
    println!(
        "certification run {run}: settled {} effect(s) it left open, each with an audit entry \"{}\"",
        settlement.settled.len(),
        certification.reason()
    );
    for settled in &settlement.settled {
        let evidence = match &settled.external_ref {
            Some(reference) => format!(", the tool's reference {}", message_line(reference)),
            None if settled.how == "resolve" => ", the tool gave no reference".to_string(),
            None => String::new(),
        };
        println!(
            "  {}: {} → {} ({}{evidence})",
            message_line(&settled.op_key),
            settled.was,
            settled.now,
            settled.how
        );
    }
    if !settlement.acknowledged.is_empty() {
        println!(
            "certification run {run}: acknowledged the repeated calls (made on purpose) of {} effect(s)",
            settlement.acknowledged.len()
        );
    }
}

/// What could not be settled, on stderr, with the commands an operator runs.
fn say_left_open(certification: &Certification, settlement: &Settlement) {
    use crate::text::message_line;
    eprintln!(
        "effectwatch gateway certify: {} effect(s) of certification run {} could not be settled and show in the operators' panes, requested by {}; an operator settles them with:",
        settlement.left_open.len(),
        certification.run_id(),
        message_line(certification.requested_by())
    );
    let reason = shell_word(&certification.reason());
    for open in &settlement.left_open {
        let key = shell_word(&open.op_key);
        let command = match open.settle_with {
            "resolve" => match &open.external_ref {
                Some(reference) => format!(
                    "effectwatch resolve {key} --succeeded {} --reason {reason}",
                    shell_word(reference)
                ),
                None => format!("effectwatch resolve {key} --failed --reason {reason}"),
            },
            // The run's effects could not be read: find them by its marker.
            "list" => format!(
                "effectwatch list unknown --filter {key}  # and overdue, held, duplicates; then resolve, cancel or acknowledge-duplicates each"
            ),
            verb => format!("effectwatch {verb} {key} --reason {reason}"),
        };
        eprintln!("  {command}");
        eprintln!("    ({}: {})", open.state, message_line(&open.problem));
    }
}

/// `text` as one word for a POSIX shell.
fn shell_word(text: &str) -> String {
    format!(
        "'{}'",
        crate::text::sanitize_line(text).replace('\'', "'\\''")
    )
}

/// Serves until `serving` ends or the process is asked to stop (Ctrl-C,
/// SIGTERM): either way the caller then closes the gateway in order.
async fn until_stopped(
    serving: impl std::future::Future<Output = Result<(), String>>,
) -> Result<(), String> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|error| format!("cannot watch for SIGTERM: {error}"))?;
    tokio::select! {
        served = serving => served,
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = terminate.recv() => Ok(()),
    }
}
