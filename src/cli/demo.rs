//! `effectwatch demo`: a private cluster, the fake provider, simulated
//! agents and the console, all stopped together when the console quits.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::signal::unix::{Signal, SignalKind, signal};

use super::exit::{BAD_CONFIG, FAILURE, Failure, REFUSED, UNREACHABLE};
use super::watch::{self, WatchArgs};
use crate::config::Config;
use crate::console::run::Housekeeping;
use crate::demo::provider_client::ProviderClient;
use crate::demo::simulator::{SimStats, Simulator, SimulatorOptions};
use crate::demo::{self, HeadlessSummary};
use crate::fakeprovider::FakeProvider;
use crate::ledger::{self, LedgerPool, migrate};
use crate::localpg::LocalCluster;
use crate::text::safe_json;
use crate::time_args::parse_duration;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Start over: remove the demo's kept cluster first.
    #[arg(long)]
    pub fresh: bool,
    /// Seed for the simulated agents, for a reproducible run.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Effects per second across all agents.
    #[arg(long, default_value_t = 2.0)]
    pub rate: f64,
    /// How many simulated agents work in parallel.
    #[arg(long, default_value_t = 4)]
    pub agents: usize,
    /// No console: run the agents, print progress on stderr and the pane counts as JSON at the end.
    #[arg(long)]
    pub headless: bool,
    /// With --headless: how long to run (e.g. 10s, 2m).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Every demo action's pending window (default 20–45 s): shorter makes items overdue sooner.
    #[arg(long, value_parser = parse_duration)]
    pub pending_window: Option<Duration>,
    /// No reconciler service beside the console: every unknown effect waits for you.
    #[arg(long)]
    pub no_reconciler: bool,
    /// Where the demo keeps its cluster (default: the platform data dir).
    #[arg(long)]
    pub data_dir: Option<std::path::PathBuf>,
    /// Only an explicit `--database-url` (set by main from the global flag):
    /// the demo never uses a database it did not create because
    /// DATABASE_URL happened to be set.
    #[arg(skip)]
    pub database_url: Option<String>,
    /// Theme: dark, light, high-contrast, colour-blind, or a path to a .toml file.
    #[arg(long)]
    pub theme: Option<String>,
    /// No desktop notifications.
    #[arg(long)]
    pub no_notify: bool,
}

pub async fn run(config: &Config, args: DemoArgs) -> Result<(), Failure> {
    if !(0.05..=500.0).contains(&args.rate) {
        return Err(Failure::new(
            BAD_CONFIG,
            format!(
                "--rate must be between 0.05 and 500 effects per second (got {})",
                args.rate
            ),
        ));
    }
    let mut signals = StopSignals::new()?;
    let mut cluster: Option<LocalCluster> = None;
    let url = match &args.database_url {
        Some(url) => url.clone(),
        None => {
            let dir = args.data_dir.clone().unwrap_or_else(demo::data_dir);
            if let Some(refusal) = args.fresh.then(|| demo::fresh_refusal(&dir)).flatten() {
                return Err(Failure::new(REFUSED, refusal));
            }
            eprintln!(
                "effectwatch demo: starting a private PostgreSQL in {}",
                dir.display()
            );
            let (started, url) = demo::start_cluster(dir, args.fresh)
                .await
                .map_err(|e| Failure::new(UNREACHABLE, e))?;
            cluster = Some(started);
            url
        }
    };
    let port = cluster.as_ref().map(LocalCluster::port);
    let result = run_on(config, &args, url, port, &mut signals).await;
    if let Some(cluster) = cluster {
        let stopped = tokio::task::spawn_blocking(move || cluster.stop()).await;
        if let Ok(Err(error)) = stopped {
            eprintln!("effectwatch demo: stopping PostgreSQL: {error}");
        }
    }
    result
}

async fn run_on(
    config: &Config,
    args: &DemoArgs,
    url: String,
    cluster_port: Option<u16>,
    signals: &mut StopSignals,
) -> Result<(), Failure> {
    let mut connect = config.connect_settings(url.clone(), "demo");
    connect.max_connections = (args.agents as u32 + 4).max(6);
    let pool = ledger::connect(&connect).await?;
    migrate::run(&pool).await?;
    // Someone else's ledger keeps its policies unless a window was asked for.
    let update_windows = args.database_url.is_none() || args.pending_window.is_some();
    demo::install_demo_policies(&pool, args.pending_window, update_windows).await?;
    let provider = DemoProvider::start(args).await?;
    let mut demo_config = config.clone();
    demo_config
        .merge_toml(&demo::demo_adapters_toml(&provider.url))
        .map_err(|e| Failure::new(FAILURE, e))?;
    let client = ProviderClient::new(provider.url.clone()).map_err(|e| Failure::new(FAILURE, e))?;
    let join_files = JoinFiles::write(&url, &provider.url);
    let simulator = Simulator::start(
        pool.clone(),
        client,
        SimulatorOptions {
            agents: args.agents,
            rate: args.rate,
            seed: args.seed,
        },
    );
    let running = Running {
        pool: &pool,
        stats: simulator.stats.clone(),
        provider_url: &provider.url,
        cluster_port,
    };
    let operator = watch::OperatorWiring::settling(&demo_config, pool.clone());
    let reconciler = DemoReconciler::start(args, &demo_config, &pool);
    let outcome = if args.headless {
        run_headless(args, signals, &running, operator.housekeeping.as_ref()).await
    } else {
        let about = demo_about(
            join_files.operator_config.as_deref(),
            &provider.url,
            cluster_port,
            reconciler.line(),
            join_files.gateway_line.as_deref(),
        );
        let console = WatchArgs {
            database_url: url,
            read_url: None,
            theme: args.theme.clone(),
            poll_interval: None,
            no_notify: args.no_notify,
            at: None,
            operator,
            background_status: Some(Arc::new({
                let stats = running.stats.clone();
                move || stats.line()
            })),
            about,
            welcome: Some(
                "demo: agents are at work · i: how a second operator joins · ?: every key"
                    .to_string(),
            ),
        };
        run_console(&demo_config, console, signals).await
    };
    simulator.stop().await;
    reconciler.stop().await;
    provider.keep_and_stop();
    pool.close().await;
    join_files.remove();
    outcome
}

/// What the headless loop reports on while the demo runs.
struct Running<'a> {
    pool: &'a LedgerPool,
    stats: Arc<SimStats>,
    provider_url: &'a str,
    cluster_port: Option<u16>,
}

/// `--headless`: progress on stderr every two seconds until the duration
/// ends or a signal arrives, then the pane counts as JSON on stdout.
async fn run_headless(
    args: &DemoArgs,
    signals: &mut StopSignals,
    running: &Running<'_>,
    housekeeping: Option<&Housekeeping>,
) -> Result<(), Failure> {
    let duration = args.duration.unwrap_or(Duration::from_secs(30));
    let started = Instant::now();
    while started.elapsed() < duration {
        let pause = Duration::from_secs(2).min(duration.saturating_sub(started.elapsed()));
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            name = signals.recv() => {
                eprintln!("effectwatch demo: {name}: stopping");
                break;
            }
        }
        if let Some(deliver) = housekeeping {
            let _ = deliver().await;
        }
        eprintln!("{}", running.stats.line());
    }
    demo::pane_counts(running.pool)
        .await
        .map(|panes| {
            println!(
                "{}",
                safe_json(&HeadlessSummary {
                    seconds: started.elapsed().as_secs_f64(),
                    provider_url: running.provider_url.to_string(),
                    cluster_port: running.cluster_port,
                    status: running.stats.line(),
                    panes,
                })
            );
        })
        .map_err(Failure::from)
}

/// The console on the demo's ledger, until it quits or a signal arrives.
async fn run_console(
    demo_config: &Config,
    console: WatchArgs,
    signals: &mut StopSignals,
) -> Result<(), Failure> {
    tokio::select! {
        result = watch::run(demo_config, console) => result,
        name = signals.recv() => {
            // The console was dropped mid-run: give the terminal back here.
            let _ = crossterm::execute!(
                std::io::stdout(),
                crossterm::event::DisableMouseCapture
            );
            let _ = ratatui::try_restore();
            eprintln!("effectwatch demo: {name}: stopping");
            Ok(())
        }
    }
}

/// The fake provider, and the file that keeps its effects between runs on
/// the demo's own cluster (someone else's ledger starts it empty).
struct DemoProvider {
    provider: FakeProvider,
    url: String,
    memory: Option<PathBuf>,
}

impl DemoProvider {
    async fn start(args: &DemoArgs) -> Result<DemoProvider, Failure> {
        let memory = args.database_url.is_none().then(|| {
            args.data_dir
                .clone()
                .unwrap_or_else(demo::data_dir)
                .join("provider.json")
        });
        let (provider, url) = FakeProvider::start().await.map_err(|error| {
            Failure::new(FAILURE, format!("cannot start the fake provider: {error}"))
        })?;
        if let Some(saved) = memory.as_ref().and_then(|path| std::fs::read(path).ok()) {
            match serde_json::from_slice(&saved) {
                Ok(effects) => provider.restore(effects),
                Err(error) => {
                    tracing::warn!(%error, "the fake provider's saved effects are unreadable; starting empty")
                }
            }
        }
        Ok(DemoProvider {
            provider,
            url,
            memory,
        })
    }

    /// Saves the provider's effects for the next run, then stops it.
    fn keep_and_stop(self) {
        if let Some(path) = &self.memory
            && let Ok(saved) = serde_json::to_vec(&self.provider.effects())
            && let Err(error) = std::fs::write(path, saved)
        {
            eprintln!(
                "effectwatch demo: cannot save the provider's effects to {}: {error}",
                path.display()
            );
        }
        drop(self.provider);
    }
}

/// The files through which others join the running demo: a second
/// operator's config and the gateway's policy, removed when it ends.
struct JoinFiles {
    operator_config: Option<PathBuf>,
    gateway_policy: Option<PathBuf>,
    gateway_line: Option<String>,
}

impl JoinFiles {
    fn write(database_url: &str, provider_url: &str) -> JoinFiles {
        let operator_config = write_operator_config(database_url, provider_url);
        if let Some(path) = &operator_config {
            eprintln!(
                "effectwatch demo: a second operator (four-eyes approvals) can join with: effectwatch --config {} --operator bob",
                path.display()
            );
        }
        let gateway_policy = write_gateway_policy();
        let gateway_line = operator_config
            .as_deref()
            .zip(gateway_policy.as_deref())
            .map(|(config, policy)| gateway_command(config, policy, provider_url));
        if let Some(line) = &gateway_line {
            eprintln!(
                "effectwatch demo: an MCP agent can reach the demo's refund tool through: {line}"
            );
        }
        JoinFiles {
            operator_config,
            gateway_policy,
            gateway_line,
        }
    }

    fn remove(&self) {
        for path in self
            .operator_config
            .iter()
            .chain(self.gateway_policy.iter())
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The reconciler service beside the console, unless `--no-reconciler`.
struct DemoReconciler {
    stop: tokio::sync::watch::Sender<bool>,
    /// What the about overlay says of it, and its task.
    running: Option<(String, tokio::task::JoinHandle<()>)>,
}

impl DemoReconciler {
    fn start(args: &DemoArgs, demo_config: &Config, pool: &LedgerPool) -> DemoReconciler {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let running = (!args.no_reconciler).then(|| {
            let service = super::reconciler::reconciler(
                demo_config,
                pool.clone(),
                demo_reconciler_settings(demo_config),
            );
            let line = format!(
                "{} every {:.0} s, after {:.0} s unknown (off with --no-reconciler)",
                service.settings().name,
                service.settings().interval.as_secs_f64(),
                service.settings().terms.grace.as_secs_f64()
            );
            let task = tokio::spawn(async move { service.run(stopped).await });
            (line, task)
        });
        DemoReconciler { stop, running }
    }

    fn line(&self) -> Option<&str> {
        self.running.as_ref().map(|(line, _)| line.as_str())
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        if let Some((_, task)) = self.running {
            let _ = task.await;
        }
    }
}

/// What the demo's console lists in its about overlay: what was printed
/// before the console took the screen, and is needed while it runs.
fn demo_about(
    operator_config: Option<&std::path::Path>,
    provider_url: &str,
    cluster_port: Option<u16>,
    reconciler: Option<&str>,
    gateway: Option<&str>,
) -> Vec<(String, String)> {
    let mut lines = Vec::new();
    if let Some(gateway) = gateway {
        lines.push(("MCP gateway".to_string(), gateway.to_string()));
    }
    if let Some(reconciler) = reconciler {
        lines.push(("reconciler".to_string(), reconciler.to_string()));
    }
    if let Some(path) = operator_config {
        lines.push((
            "second operator".to_string(),
            format!("effectwatch --config {} --operator bob", path.display()),
        ));
    }
    if let Some(port) = cluster_port {
        lines.push((
            "demo PostgreSQL".to_string(),
            format!("127.0.0.1:{port} (private cluster, stopped when the demo ends)"),
        ));
    }
    lines.push(("demo provider".to_string(), provider_url.to_string()));
    lines
}

/// The demo's reconciler settles by rule beside the operator, so the audit
/// view shows both; it waits long enough for the unknown pane to be seen.
fn demo_reconciler_settings(config: &Config) -> crate::reconciler::ReconcilerSettings {
    let mut settings = super::reconciler::settings(config, Some("reconciler@demo".to_string()));
    if config.reconciler == crate::config::ReconcilerConfig::default() {
        settings.interval = Duration::from_secs(5);
        settings.terms.grace = Duration::from_secs(45);
        settings.backoff = Duration::from_secs(15);
        settings.backoff_max = Duration::from_secs(120);
        settings.escalate_after = 3;
    }
    settings
}

/// Writes a config a second operator can use against this demo (its
/// database, provider and sink), so four-eyes approval can be tried:
/// `effectwatch --config FILE --operator bob`. Best effort: the demo runs
/// without it.
fn write_operator_config(database_url: &str, provider_url: &str) -> Option<std::path::PathBuf> {
    let path = std::env::temp_dir().join(format!(
        "effectwatch-demo-operator-{}.toml",
        std::process::id()
    ));
    let text = format!(
        "# A second operator on the running demo: effectwatch --config {} --operator bob\ndatabase_url = \"{database_url}\"\n\n{}",
        path.display(),
        demo::demo_adapters_toml(provider_url)
    );
    match std::fs::write(&path, text) {
        Ok(()) => Some(path),
        Err(error) => {
            tracing::warn!(%error, "cannot write the second operator's config");
            None
        }
    }
}

/// The example policy for the demo's MCP tool server, written where a
/// gateway started by hand can read it. Best effort, like the operator's.
fn write_gateway_policy() -> Option<std::path::PathBuf> {
    let path = std::env::temp_dir().join(format!(
        "effectwatch-demo-gateway-{}.toml",
        std::process::id()
    ));
    match std::fs::write(&path, demo::GATEWAY_POLICY) {
        Ok(()) => Some(path),
        Err(error) => {
            tracing::warn!(%error, "cannot write the gateway's example policy");
            None
        }
    }
}

/// The command an MCP client runs to reach the demo's tools through the
/// gateway (its stdio is the MCP session).
fn gateway_command(
    operator_config: &std::path::Path,
    policy: &std::path::Path,
    provider_url: &str,
) -> String {
    let program = std::env::current_exe()
        .map(|path| path.display().to_string())
        .unwrap_or_else(|_| "effectwatch".to_string());
    format!(
        "{program} --config {} gateway --policy {} --upstream {program} mcp-tools --provider-url {provider_url}",
        operator_config.display(),
        policy.display()
    )
}

/// SIGINT, SIGTERM and SIGHUP: each ends a demo run early, with the normal
/// shutdown (the server is not left running). In the console the terminal is
/// raw, so Ctrl-C arrives as a key instead.
struct StopSignals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl StopSignals {
    fn new() -> Result<StopSignals, Failure> {
        let listen = |kind| {
            signal(kind)
                .map_err(|error| Failure::new(FAILURE, format!("cannot handle signals: {error}")))
        };
        Ok(StopSignals {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
            hangup: listen(SignalKind::hangup())?,
        })
    }

    /// The name of the next signal received.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.hangup.recv() => "SIGHUP",
        }
    }
}
