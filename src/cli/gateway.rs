//! `effectwatch gateway` and `effectwatch mcp-tools`.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::exit::{BAD_CONFIG, FAILURE, Failure, UNREACHABLE};
use crate::gateway::policy::Policy;
use crate::gateway::tools::{DemoTools, ToolFaults};
use crate::gateway::upstream::UpstreamSpec;
use crate::gateway::{self, serve_http, serve_stdio};
use crate::ledger::LedgerPool;

#[derive(Debug, clap::Args)]
pub struct GatewayArgs {
    /// The policy file: which tools change the world, and the key, target and params of each.
    #[arg(long, value_name = "FILE")]
    pub policy: PathBuf,
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
}

pub async fn run(pool: LedgerPool, args: GatewayArgs) -> Result<(), Failure> {
    let policy = Policy::load(&args.policy).map_err(|error| Failure::new(BAD_CONFIG, error))?;
    let spec =
        UpstreamSpec::parse(&args.upstream).map_err(|error| Failure::new(BAD_CONFIG, error))?;
    let described = spec.describe();
    let requested_by = policy.requested_by();
    let (gateway, report) = gateway::start(spec, policy, pool, args.allow_unmapped)
        .await
        .map_err(|error| Failure::new(UNREACHABLE.max(BAD_CONFIG), error))?;
    if let Some(line) =
        report.unmapped_line(&args.policy.display().to_string(), args.allow_unmapped)
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
        },
    )
    .map_err(|error| Failure::new(FAILURE, error))?;
    gateway::tools::serve(tools, args.listen)
        .await
        .map_err(|error| Failure::new(FAILURE, error))
}
