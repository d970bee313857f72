//! `effectwatch demo`: the whole product on a private ledger — a PostgreSQL
//! cluster of its own, a fake provider on 127.0.0.1, simulated agents — and
//! the console on top. Quitting stops all of it.

pub mod provider_client;
pub mod simulator;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::ledger::LedgerPool;
use serde::Serialize;

use crate::ledger::panes::{self, PaneCount};
use crate::ledger::{self, ConnectSettings, LedgerError};
use crate::localpg::{ClusterOptions, LocalCluster, LocalPgError};

pub const DEMO_DATABASE: &str = "effectwatch_demo";

/// The demo's provider, as its config names it: the simulated agents'
/// effects and the gateway's refunds (examples/gateway.toml) name it, so
/// the demo's reconciler can ask it about any of them.
pub const DEMO_PROVIDER: &str = "demo-payments";

/// The gateway's policy for the demo's tool server (`effectwatch
/// mcp-tools`), which the demo writes out for a gateway started by hand.
pub const GATEWAY_POLICY: &str = include_str!("../../examples/gateway.toml");

/// Where the demo keeps its cluster between runs.
pub fn data_dir() -> PathBuf {
    // The server runs as the `postgres` user when we are root, and it must be
    // able to reach its folder: a root-only home would lock it out.
    if nix::unistd::Uid::effective().is_root() {
        return PathBuf::from("/var/lib/effectwatch/demo");
    }
    directories::ProjectDirs::from("", "", "effectwatch")
        .map(|dirs| dirs.data_dir().join("demo"))
        .unwrap_or_else(|| std::env::temp_dir().join("effectwatch-demo"))
}

/// Why `--fresh` must not remove `dir`, if it must not: a folder that is
/// neither empty nor a demo cluster (`data/PG_VERSION`) may be anything.
pub fn fresh_refusal(dir: &Path) -> Option<String> {
    if !dir.exists() || dir.join("data/PG_VERSION").is_file() {
        return None;
    }
    let empty = std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_none());
    (!empty).then(|| {
        format!(
            "refusing to remove {} for --fresh: it is not empty and holds no demo cluster (no data/PG_VERSION)",
            dir.display()
        )
    })
}

/// Starts (or resumes) the demo's own cluster and returns it with the URL of
/// the demo database, created on first use. A watchdog stops the server when
/// this process exits, however it exits.
pub async fn start_cluster(dir: PathBuf, fresh: bool) -> Result<(LocalCluster, String), String> {
    if fresh && dir.exists() {
        if let Some(refusal) = fresh_refusal(&dir) {
            return Err(refusal);
        }
        stop_leftover_server(&dir).await?;
        std::fs::remove_dir_all(&dir)
            .map_err(|error| format!("cannot remove {} for --fresh: {error}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)
        .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
    let cluster = start_blocking(dir).await?;
    if let Err(error) = cluster.stop_when_process_exits(std::process::id()) {
        tracing::warn!(%error, "the demo's PostgreSQL may outlive a killed demo");
    }
    let admin = ledger::connect(&ConnectSettings::new(cluster.url("postgres")))
        .await
        .map_err(|e| e.to_string())?;
    ledger::migrate::create_database_if_missing(&admin, DEMO_DATABASE)
        .await
        .map_err(|e| e.to_string())?;
    admin.close().await;
    let url = cluster.url(DEMO_DATABASE);
    Ok((cluster, url))
}

async fn start_blocking(dir: PathBuf) -> Result<LocalCluster, String> {
    let options = ClusterOptions {
        data_dir: Some(dir),
        ..ClusterOptions::default()
    };
    tokio::task::spawn_blocking(move || LocalCluster::start(options))
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error: LocalPgError| first_lines(&error.to_string()))
}

/// A server left running in `dir` by a killed run would outlive its removed
/// folder. Starting the cluster stops such a server first (and starts ours,
/// which we then stop).
async fn stop_leftover_server(dir: &Path) -> Result<(), String> {
    let pid_file = dir.join("data/postmaster.pid");
    if !pid_file.exists() {
        return Ok(());
    }
    match start_blocking(dir.to_path_buf()).await {
        Ok(cluster) => tokio::task::spawn_blocking(move || cluster.stop())
            .await
            .map_err(|error| error.to_string())?
            .map_err(|error| first_lines(&error.to_string())),
        // A cluster too broken to start can still go, unless its server is still up.
        Err(error) if pid_file.exists() => Err(format!(
            "cannot stop the server still running in {} before removing it for --fresh: {error}",
            dir.display()
        )),
        Err(_) => Ok(()),
    }
}

fn first_lines(text: &str) -> String {
    text.lines().take(6).collect::<Vec<_>>().join(" | ")
}

/// Policies that make the demo lively: short windows so items turn overdue
/// within a minute, and a four-eyes limit on large refunds. `window` sets
/// every action's window (a headless test wants seconds, not a minute).
/// Existing policies keep their windows unless `update_windows` (the demo's
/// own ledger, or a window asked for); nothing else of theirs is changed.
pub async fn install_demo_policies(
    pool: &LedgerPool,
    window: Option<Duration>,
    update_windows: bool,
) -> Result<(), LedgerError> {
    let existing: Vec<String> = crate::ledger::policies::list(pool)
        .await?
        .into_iter()
        .map(|policy| policy.action)
        .collect();
    // Bookings conflict as a hotel's do: a room is held only by a stay
    // whose dates overlap (a policy the demo's own ledger is given even
    // where it had the earlier one, exclusive per room). What waits behind
    // an effect that then succeeds is cancelled by rule where it can no
    // longer be right: a stay overlapping a booked one, a second refund of
    // an invoice refunded meanwhile (a new request after review, as a
    // finance team has it, not a wait for a person) — so the held pane
    // keeps what waits on an open holder, which a person may decide.
    let policies = [
        (
            "refund",
            30.0,
            true,
            false,
            Some(20_000_i64),
            "reconcile_first",
        ),
        ("booking", 45.0, false, true, None, "reconcile_first"),
        ("message", 20.0, false, false, None, "never_retry"),
        ("webhook", 20.0, false, false, None, "safe_retry"),
    ];
    for (action, seconds, exclusive, by_range, limit, semantics) in policies {
        let exists = existing.iter().any(|name| name == action);
        if exists && !update_windows {
            continue;
        }
        let seconds = window.map(|w| w.as_secs_f64()).unwrap_or(seconds);
        let change = crate::ledger::policies::PolicyChange {
            pending_window: Some(Duration::from_secs_f64(seconds)),
            // A ledger that has its policy keeps everything but the window.
            exclusive_per_target: (!exists || by_range).then_some(exclusive),
            conflicts_by_time_range: by_range.then_some(true),
            on_holder_success: (by_range || (exclusive && !exists)).then(|| "cancel".to_string()),
            compensation_approval_limit_minor: (!exists).then_some(limit),
            retry_semantics: (!exists).then(|| semantics.to_string()),
            ..Default::default()
        };
        crate::ledger::policies::set(
            pool,
            action,
            &change,
            "effectwatch demo",
            "the demo's policy for its simulated agents",
        )
        .await?;
    }
    Ok(())
}

/// Pane sizes after a headless run, printed as JSON for scripts and tests.
#[derive(Debug, Serialize)]
pub struct HeadlessSummary {
    pub seconds: f64,
    /// Where the fake provider listened; gone once the demo has stopped.
    pub provider_url: String,
    /// The demo database's server port, if the demo ran its own cluster.
    pub cluster_port: Option<u16>,
    pub status: String,
    pub panes: Vec<PaneCount>,
}

/// The four panes' counts (the agents fill those; escalations and approvals
/// wait for an operator).
pub async fn pane_counts(pool: &LedgerPool) -> Result<Vec<PaneCount>, LedgerError> {
    let mut counts = panes::counts(pool, None).await?;
    counts.retain(|count| {
        panes::Pane::ALL
            .iter()
            .any(|pane| pane.name() == count.pane)
    });
    Ok(counts)
}

/// The demo's provider and escalation sink, both served by the fake provider.
pub fn demo_adapters_toml(provider_url: &str) -> String {
    format!(
        "{}\n[sinks.oncall]\nkind = \"webhook\"\nurl = \"{provider_url}/hooks/oncall\"\ntimeout_ms = 2000\n",
        crate::fakeprovider::provider_toml(DEMO_PROVIDER, provider_url, 2000)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::policy::Policy;

    #[test]
    fn the_gateway_policy_names_the_provider_the_demo_configures() {
        let policy = Policy::parse(GATEWAY_POLICY).unwrap();
        let config =
            crate::config::Config::from_toml(&demo_adapters_toml("http://127.0.0.1:1")).unwrap();
        for (tool, rule) in policy.tools.iter().filter(|(_, rule)| !rule.read_only) {
            assert_eq!(rule.provider.as_deref(), Some(DEMO_PROVIDER), "{tool}");
        }
        assert!(config.providers.contains_key(DEMO_PROVIDER));
    }
}
