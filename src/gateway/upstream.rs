//! The tool server behind the gateway: a command it starts and speaks to
//! over stdio, or a streamable-HTTP URL. A command that exits is started
//! again on the next call; over HTTP each caller's authorization gets a
//! connection of its own, held in memory only, so one agent's credential is
//! never used for another's call.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::sync::Mutex;

type Connection = RunningService<RoleClient, ClientConfig>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamSpec {
    Command { program: String, args: Vec<String> },
    Url(String),
}

impl UpstreamSpec {
    /// `http://…` or `https://…` is a URL; anything else a command line,
    /// already split into words.
    pub fn parse(words: &[String]) -> Result<UpstreamSpec, String> {
        let Some((first, rest)) = words.split_first() else {
            return Err("--upstream needs a command or a URL".into());
        };
        if first.starts_with("http://") || first.starts_with("https://") {
            if !rest.is_empty() {
                return Err(format!(
                    "--upstream {first} is a URL: it takes no further words (got {:?})",
                    rest.join(" ")
                ));
            }
            return Ok(UpstreamSpec::Url(first.clone()));
        }
        if first.trim().is_empty() {
            return Err("--upstream needs a command or a URL".into());
        }
        Ok(UpstreamSpec::Command {
            program: first.clone(),
            args: rest.to_vec(),
        })
    }

    pub fn describe(&self) -> String {
        match self {
            UpstreamSpec::Command { program, args } => std::iter::once(program.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            UpstreamSpec::Url(url) => url.clone(),
        }
    }
}

/// How many callers' connections are kept open at once, and how long one
/// unused is kept: each costs a session at the tool server and memory here
/// (200 callers held 200 connections, 40 MB → 97 MB, before they were
/// bounded).
pub const MOST_CONNECTIONS: usize = 64;
pub const IDLE_CONNECTION: Duration = Duration::from_secs(300);

pub struct Upstream {
    spec: UpstreamSpec,
    /// Keyed by the caller's authorization (`None` for a command, or a
    /// caller without one).
    connections: Mutex<HashMap<Option<String>, Kept>>,
    most: usize,
    idle: Duration,
    /// How long a connection let go is left open for the calls already
    /// made on it: the longest a recorded call waits for its answer.
    grace: Duration,
}

struct Kept {
    connection: Arc<Connection>,
    used: Instant,
}

impl Upstream {
    pub fn new(spec: UpstreamSpec, grace: Duration) -> Upstream {
        Upstream::with_limits(spec, MOST_CONNECTIONS, IDLE_CONNECTION, grace)
    }

    pub fn with_limits(
        spec: UpstreamSpec,
        most: usize,
        idle: Duration,
        grace: Duration,
    ) -> Upstream {
        Upstream {
            spec,
            connections: Mutex::new(HashMap::new()),
            most: most.max(1),
            idle,
            grace,
        }
    }

    pub fn spec(&self) -> &UpstreamSpec {
        &self.spec
    }

    /// How many connections are open now.
    pub async fn open_connections(&self) -> usize {
        self.connections.lock().await.len()
    }

    /// A live connection for a caller with this authorization header,
    /// connecting (again) when there is none. Connections unused for longer
    /// than the idle time are let go, and the least recently used when
    /// there are already as many as allowed.
    pub async fn peer(&self, authorization: Option<&str>) -> Result<Peer<RoleClient>, String> {
        let key = match self.spec {
            UpstreamSpec::Command { .. } => None,
            UpstreamSpec::Url(_) => authorization.map(str::to_string),
        };
        let mut connections = self.connections.lock().await;
        let now = Instant::now();
        if let Some(kept) = connections.get_mut(&key)
            && !kept.connection.is_closed()
            && !kept.connection.is_transport_closed()
        {
            kept.used = now;
            return Ok(kept.connection.peer().clone());
        }
        let idle: Vec<Option<String>> = connections
            .iter()
            .filter(|(_, kept)| now.duration_since(kept.used) > self.idle)
            .map(|(key, _)| key.clone())
            .collect();
        for key in idle {
            self.let_go(connections.remove(&key));
        }
        while connections.len() >= self.most {
            let oldest = connections
                .iter()
                .min_by_key(|(_, kept)| kept.used)
                .map(|(key, _)| key.clone());
            match oldest {
                Some(oldest) => self.let_go(connections.remove(&oldest)),
                None => break,
            }
        }
        let connection = Arc::new(self.connect(key.as_deref()).await?);
        let peer = connection.peer().clone();
        connections.insert(
            key,
            Kept {
                connection,
                used: now,
            },
        );
        Ok(peer)
    }

    /// Closes a connection once the calls already made on it have had
    /// their time: a caller's call in flight is never cut by another
    /// caller's arrival.
    fn let_go(&self, kept: Option<Kept>) {
        let Some(kept) = kept else { return };
        let grace = self.grace;
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            if let Ok(connection) = Arc::try_unwrap(kept.connection) {
                let _ = connection.cancel().await;
            }
        });
    }

    async fn connect(&self, authorization: Option<&str>) -> Result<Connection, String> {
        let client = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("effectwatch-gateway", env!("CARGO_PKG_VERSION")),
        );
        let described = self.spec.describe();
        match &self.spec {
            UpstreamSpec::Command { program, args } => {
                let mut command = tokio::process::Command::new(program);
                command.args(args);
                let transport = TokioChildProcess::new(command)
                    .map_err(|error| format!("cannot start the upstream {described:?}: {error}"))?;
                client.serve(transport).await.map_err(|error| {
                    format!("the upstream {described:?} did not start MCP: {error}")
                })
            }
            UpstreamSpec::Url(url) => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(authorization) = authorization {
                    match authorization.strip_prefix("Bearer ") {
                        Some(token) => config = config.auth_header(token),
                        None => {
                            let value = authorization.parse().map_err(|_| {
                                "the caller's authorization header is not valid".to_string()
                            })?;
                            config = config.custom_headers(HashMap::from([(
                                reqwest::header::AUTHORIZATION,
                                value,
                            )]));
                        }
                    }
                }
                let transport = StreamableHttpClientTransport::from_config(config);
                client
                    .serve(transport)
                    .await
                    .map_err(|error| format!("cannot reach the upstream {described}: {error}"))
            }
        }
    }

    pub async fn close(&self) {
        let connections: Vec<_> = self.connections.lock().await.drain().collect();
        for (_, kept) in connections {
            if let Ok(connection) = Arc::try_unwrap(kept.connection) {
                let _ = connection.cancel().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_url_or_a_command() {
        assert_eq!(
            UpstreamSpec::parse(&words("http://127.0.0.1:9/mcp")).unwrap(),
            UpstreamSpec::Url("http://127.0.0.1:9/mcp".into())
        );
        assert_eq!(
            UpstreamSpec::parse(&words("tools --fast")).unwrap(),
            UpstreamSpec::Command {
                program: "tools".into(),
                args: vec!["--fast".into()]
            }
        );
        assert!(UpstreamSpec::parse(&words("http://x/mcp extra")).is_err());
        assert!(UpstreamSpec::parse(&[]).is_err());
    }
}
