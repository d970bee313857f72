//! `effectwatch gateway`: an MCP proxy between an agent and its tool
//! server that records every side-effecting tool call in the ledger, so an
//! agent in any language or framework gets one provider call per business
//! action and an unknown outcome — never a blind retry — when a reply is
//! lost. See `policy` for the file that says which tools change the world.

pub mod certify;
pub mod policy;
pub mod proxy;
pub mod told;
pub mod tools;
pub mod upstream;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::ServerHandler;
use rmcp::ServiceExt;
use rmcp::model::{Implementation, ServerConfig, Tool};
use rmcp::service::{RoleServer, Service};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use crate::ledger::LedgerPool;
use policy::{Policy, Route};
use proxy::Gateway;
use upstream::{Upstream, UpstreamSpec};

/// What start-up found: the lines an operator reads first.
#[derive(Debug, Clone, Default)]
pub struct StartupReport {
    pub recorded: Vec<String>,
    pub passed: Vec<String>,
    pub unmapped: Vec<String>,
    /// Tools under a name that looks like a mapped one: `(name, mapped)`.
    pub lookalikes: Vec<(String, String)>,
}

impl StartupReport {
    /// The first line: what is refused (or let through unrecorded), when anything is.
    pub fn unmapped_line(&self, policy_path: &str, allow_unmapped: bool) -> Option<String> {
        if self.unmapped.is_empty() {
            return None;
        }
        Some(if allow_unmapped {
            format!(
                "relaying {} tool(s) that may change the world UNRECORDED (--allow-unmapped): {}",
                self.unmapped.len(),
                self.unmapped.join(", ")
            )
        } else {
            format!(
                "refusing {} tool(s) that may change the world and have no rule in {policy_path}, and hiding them from the agent's tools/list: {} (map them, mark them read_only, or pass --allow-unmapped)",
                self.unmapped.len(),
                self.unmapped.join(", ")
            )
        })
    }

    /// Said at start-up whenever the upstream offers one: another tool
    /// under a mapped tool's likeness is an attack or a mistake.
    pub fn lookalike_line(&self) -> Option<String> {
        if self.lookalikes.is_empty() {
            return None;
        }
        let named: Vec<String> = self
            .lookalikes
            .iter()
            .map(|(name, of)| format!("\"{}\" looks like {of}", name.escape_default()))
            .collect();
        Some(format!(
            "refusing {} tool(s) whose names only look like mapped ones, even with --allow-unmapped, and hiding them from the agent's tools/list: {}",
            named.len(),
            named.join(", ")
        ))
    }

    pub fn summary_line(&self, upstream: &str, requested_by: &str) -> String {
        format!(
            "recording {} tool(s) as {requested_by} ({}); relaying {} that only read ({}); upstream {upstream}",
            self.recorded.len(),
            self.recorded.join(", "),
            self.passed.len(),
            self.passed.join(", ")
        )
    }
}

/// Connects the upstream, checks the policy against the tools it offers and
/// builds the gateway; a mistake in the policy is an error here, not at the
/// first call.
pub async fn start(
    spec: UpstreamSpec,
    policy: Policy,
    pool: LedgerPool,
    allow_unmapped: bool,
) -> Result<(Gateway, StartupReport), String> {
    // A connection let go stays open while a recorded call on it may still
    // be waiting for its answer.
    let upstream = Upstream::new(
        spec,
        policy.upstream_timeout() + std::time::Duration::from_secs(5),
    );
    let peer = upstream.peer(None).await?;
    let tools: Vec<Tool> = peer
        .list_all_tools()
        .await
        .map_err(|error| format!("the upstream did not list its tools: {error}"))?;
    if let Err(problems) = policy.check_against(&tools) {
        upstream.close().await;
        return Err(problems.join("; "));
    }
    let info = peer
        .peer_info()
        .map(|info| {
            let mut config = ServerConfig::new(info.capabilities.clone()).with_server_info(
                info.server_info
                    .clone()
                    .unwrap_or_else(|| Implementation::new("upstream", "unknown")),
            );
            config.instructions = info.instructions.clone();
            config
        })
        .unwrap_or_else(|| ServerConfig::new(Default::default()));
    let mut report = StartupReport::default();
    for tool in &tools {
        let name = tool.name.to_string();
        match policy.route(&name) {
            Route::Recorded => report.recorded.push(name),
            Route::PassThrough => report.passed.push(name),
            Route::Unmapped => report.unmapped.push(name),
            Route::Lookalike { of } => report.lookalikes.push((name, of)),
        }
    }
    let gateway = Gateway::new(upstream, policy, pool, info, allow_unmapped);
    Ok((gateway, report))
}

/// Serves one MCP session on this process's stdin and stdout until the
/// client goes.
pub async fn serve_stdio<S: Service<RoleServer>>(service: S) -> Result<(), String> {
    let running = service
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|error| format!("the MCP client did not start a session: {error}"))?;
    running
        .waiting()
        .await
        .map(|_| ())
        .map_err(|error| format!("the MCP session ended badly: {error}"))
}

/// A session's DELETE, answered 204: the SDK answers 202 ("accepted",
/// as if the end were still to come), which clients log as a failed
/// termination although the session is closed.
async fn session_closed(
    method: axum::http::Method,
    mut response: axum::response::Response,
) -> axum::response::Response {
    if method == axum::http::Method::DELETE && response.status() == axum::http::StatusCode::ACCEPTED
    {
        *response.status_mut() = axum::http::StatusCode::NO_CONTENT;
        *response.body_mut() = axum::body::Body::empty();
    }
    response
}

/// Serves MCP over streamable HTTP at `/mcp` on `address`; returns the
/// bound address and the server to await.
pub async fn serve_http<S, F>(
    factory: F,
    address: SocketAddr,
) -> Result<(SocketAddr, impl Future<Output = Result<(), String>>), String>
where
    S: ServerHandler,
    F: Fn() -> Result<S, std::io::Error> + Send + Sync + 'static,
{
    let mut config = StreamableHttpServerConfig::default();
    if !address.ip().is_loopback() {
        // Told to listen beyond this machine: the address it was given is
        // the one callers use.
        config = config.with_allowed_hosts([address.ip().to_string()]);
    }
    let service =
        StreamableHttpService::new(factory, Arc::new(LocalSessionManager::default()), config);
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::map_response(session_closed));
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| format!("cannot listen on {address}: {error}"))?;
    let bound = listener
        .local_addr()
        .map_err(|error| format!("cannot listen on {address}: {error}"))?;
    let server = async move {
        axum::serve(listener, router)
            .await
            .map_err(|error| format!("the HTTP listener failed: {error}"))
    };
    Ok((bound, server))
}
