//! `effectwatch gateway` and `effectwatch mcp-tools`.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::exit::{BAD_CONFIG, FAILURE, Failure, UNREACHABLE, USAGE};
use crate::gateway::certify::{Certification, Verdict};
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
    /// purpose, each judged by the tool server's own lookup. Exit 0 only when every line holds.
    Certify(CertifyArgs),
}

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
}

pub async fn run(pool: LedgerPool, args: GatewayArgs) -> Result<(), Failure> {
    if let Some(GatewayCommand::Certify(certify)) = args.command {
        return run_certify(pool, certify).await;
    }
    let Some(policy_path) = args.policy.clone() else {
        return Err(Failure::new(USAGE, "gateway needs --policy FILE"));
    };
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
        None => serve_stdio(gateway.clone()).await,
        Some(address) => {
            let shared = gateway.clone();
            let (bound, server) = serve_http(move || Ok(shared.clone()), address)
                .await
                .map_err(|error| Failure::new(UNREACHABLE, error))?;
            eprintln!("effectwatch gateway: listening on http://{bound}/mcp");
            server.await
        }
    };
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
    let (gateway, _) = gateway::start(spec, policy, pool, false)
        .await
        .map_err(|error| Failure::new(BAD_CONFIG, error))?;
    let certification = Certification::new(gateway.clone(), &args.tool, arguments)
        .map_err(|error| Failure::new(BAD_CONFIG, error))?;
    let lines = certification.run().await;
    gateway.close().await;
    match args.format {
        super::Format::Json => println!("{}", crate::text::safe_json(&lines)),
        super::Format::Table => {
            for line in &lines {
                let mark = match line.verdict {
                    Verdict::Held => "held",
                    Verdict::NotHeld => "NOT HELD",
                    Verdict::NotChecked => "not checked",
                };
                println!(
                    "[{mark}] {}: {}",
                    line.check,
                    crate::text::message_line(&line.saw)
                );
            }
        }
    }
    let failed = lines
        .iter()
        .filter(|line| line.verdict == Verdict::NotHeld)
        .count();
    if failed == 0 {
        Ok(())
    } else {
        Err(Failure::new(
            FAILURE,
            format!("{failed} line(s) of the release checklist do not hold"),
        ))
    }
}
