use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::ledger::LedgerPool;

use super::exit::{BAD_CONFIG, FAILURE, Failure};
use crate::config::Config;
use crate::console::run::{self, ConsoleOptions, Housekeeping, NotificationOptions, SettleRequest};
use crate::console::theme::Theme;
use crate::ledger::{self, ConnectSettings, LedgerError};
use crate::settle::{Request, SettleError, Settler};

/// What the command line adds to the config file.
pub struct WatchArgs {
    pub database_url: String,
    /// A streaming replica the console reads (panes, detail); actions still
    /// go to `database_url`.
    pub read_url: Option<String>,
    pub theme: Option<String>,
    pub poll_interval: Option<f64>,
    pub no_notify: bool,
    /// How the console's writing actions are carried out, and its background work.
    pub operator: OperatorWiring,
    pub background_status: Option<Arc<dyn Fn() -> String + Send + Sync>>,
    /// What the caller adds to the about overlay (the demo: how another operator joins).
    pub about: Vec<(String, String)>,
    pub welcome: Option<String>,
    /// Time travel: show the panes as they were at this instant (read-only).
    pub at: Option<chrono::DateTime<chrono::Utc>>,
}

pub async fn run(config: &Config, args: WatchArgs) -> Result<(), Failure> {
    let theme = Theme::load(args.theme.as_deref().unwrap_or(&config.theme))
        .map_err(|e| Failure::new(BAD_CONFIG, e))?;
    let poll_interval = match args.poll_interval {
        Some(seconds) if (0.1..=3600.0).contains(&seconds) => Duration::from_secs_f64(seconds),
        Some(seconds) => {
            return Err(Failure::new(
                BAD_CONFIG,
                format!("--poll-interval must be 0.1 to 3600 s (got {seconds})"),
            ));
        }
        None => config.poll_interval(),
    };
    crate::logging::to_file(&config.log_path()).map_err(|e| Failure::new(BAD_CONFIG, e))?;
    let primary = config.connect_settings(args.database_url.clone(), "console");
    let connect = match &args.read_url {
        Some(read_url) => config.connect_settings(read_url.clone(), "console"),
        None => primary.clone(),
    };
    // Fail fast on a wrong URL before taking over the terminal.
    connect.options()?;
    refuse_what_waiting_cannot_fix(&connect).await?;
    let notifications =
        (config.notifications.enabled && !args.no_notify).then(|| NotificationOptions {
            min_interval: Duration::from_secs(config.notifications.min_interval_secs),
            timeout: Duration::from_millis(config.notifications.timeout_ms),
            unavailable_said: config
                .log_path()
                .with_file_name("notifications-unavailable"),
        });
    tracing::info!(operator = %config.operator, read_only = config.read_only, "console starting");
    let mut extra = args.about;
    if args.read_url.is_some() {
        extra.push(("actions go to".to_string(), primary.server()));
    }
    let about = about(config, &connect, args.at, extra);
    run::run(ConsoleOptions {
        connect,
        replica_lag_stale_secs: config.replica_lag_stale_secs,
        theme,
        operator: config.operator.clone(),
        read_only: config.read_only,
        poll_interval,
        notifications,
        mouse: config.mouse,
        settle_request: args.operator.settle_request,
        background_status: args.background_status,
        housekeeping: args.operator.housekeeping,
        about,
        welcome: args.welcome,
        at: args.at,
    })
    .await
    .map_err(|error| Failure::new(FAILURE, format!("terminal error: {error}")))
}

/// What any console says about itself in its about overlay, then what the
/// caller adds.
fn about(
    config: &Config,
    connect: &ConnectSettings,
    at: Option<chrono::DateTime<chrono::Utc>>,
    added: Vec<(String, String)>,
) -> Vec<(String, String)> {
    let mode = match (at, config.read_only) {
        (Some(at), _) => format!(
            "time travel, read-only: the ledger as of {}",
            at.to_rfc3339()
        ),
        (None, true) => "read-only: every writing action is refused".to_string(),
        (None, false) => "live: writing actions ask for confirmation".to_string(),
    };
    let mut lines = vec![
        ("operator".to_string(), config.operator.clone()),
        ("server".to_string(), connect.server()),
        (
            "connection name".to_string(),
            connect.application_name.clone(),
        ),
        ("mode".to_string(), mode),
        ("log".to_string(), config.log_path().display().to_string()),
    ];
    lines.extend(added);
    lines
}

/// One look at the ledger before the console takes the screen: a login the
/// server turns down, one that may not read the panes (an approver, an
/// agent) or a missing schema ends here, with the CLI's exit code and
/// message, instead of a console waiting for a first poll that never comes.
/// A server that is down or slow is left to the console, which shows it as
/// unreachable and reconnects by itself.
async fn refuse_what_waiting_cannot_fix(connect: &ConnectSettings) -> Result<(), Failure> {
    let mut probe = connect.clone();
    probe.connect_timeout = Duration::from_secs(2);
    probe.max_connections = 1;
    let looked = async {
        let pool = ledger::connect(&probe).await?;
        let mut counted = crate::ledger::panes::counts(&pool, None).await.map(|_| ());
        // A ledger this binary is ahead of fails its first poll on a column
        // it lacks: said now, as the CLI says it, with what to run.
        if let Ok(()) | Err(LedgerError::SchemaMissing(_)) = &counted
            && let Ok(standing) = crate::ledger::migrate::standing(&pool).await
            && let Some(error) = standing.error()
        {
            use crate::ledger::migrate::Standing;
            match standing {
                Standing::Older { .. } | Standing::Redefined { .. } => counted = Err(error),
                // A newer ledger or another line's may serve this console;
                // one that already failed is said as it stands.
                Standing::Newer { .. } | Standing::Differs { .. } if counted.is_err() => {
                    counted = Err(error)
                }
                _ => {}
            }
        }
        pool.close().await;
        counted
    };
    match tokio::time::timeout(Duration::from_secs(3), looked).await {
        Ok(Err(LedgerError::Refused(why))) => Err(LedgerError::Refused(format!(
            "{why}: this login may not read the panes; the console needs one in effect_operator or effect_readonly"
        ))
        .into()),
        Ok(Err(error)) if error.is_permanent() => Err(error.into()),
        _ => Ok(()),
    }
}

/// What stands behind a console's writing keys: the one place `effectwatch`
/// and `effectwatch demo` get their settle_request and housekeeping from.
pub struct OperatorWiring {
    pub settle_request: SettleRequest,
    pub housekeeping: Option<Housekeeping>,
}

impl OperatorWiring {
    /// Settles through a [`Settler`] on a pool of its own, which connects
    /// only when an action runs (a read-only console's never does: the
    /// settler refuses first).
    pub fn for_console(config: &Config, database_url: &str) -> Result<OperatorWiring, Failure> {
        let pool =
            ledger::connect_lazy(&config.connect_settings(database_url.to_string(), "settle"))?;
        Ok(OperatorWiring::settling(config, pool))
    }

    /// Settles on `pool` (the demo passes the pool its agents use), and
    /// delivers due escalations while the console is open when it may write
    /// and a sink is configured (without one a pass would only record "not
    /// configured" as a failed attempt on escalations another worker can
    /// deliver).
    pub fn settling(config: &Config, pool: LedgerPool) -> OperatorWiring {
        let settler = Arc::new(Settler::new(
            pool,
            Arc::new(config.clone()),
            config.operator.clone(),
            config.read_only,
        ));
        OperatorWiring {
            housekeeping: (!config.read_only && !config.sinks.is_empty())
                .then(|| delivery(settler.clone())),
            settle_request: settle_through(settler),
        }
    }
}

/// The console's writing actions, carried out by the same [`Settler`] the
/// CLI uses: one code path for every way an operator acts.
fn settle_through(settler: Arc<Settler>) -> SettleRequest {
    Arc::new(move |request: Request| {
        let settler = settler.clone();
        Box::pin(async move { settler.settle(request).await.map_err(|error| error.line()) })
    })
}

/// Retries due escalation deliveries while the console is open, as the demo
/// does. An error is shown once, not every pass, so it does not keep
/// replacing the outcome of the operator's own actions in the status line.
fn delivery(settler: Arc<Settler>) -> Housekeeping {
    let last_error = Arc::new(Mutex::new(None::<String>));
    Arc::new(move || {
        let (settler, last_error) = (settler.clone(), last_error.clone());
        Box::pin(async move {
            let result = settler.deliver_due_escalations().await;
            let mut last_error = last_error.lock().unwrap_or_else(|e| e.into_inner());
            match result {
                Ok(count) => {
                    *last_error = None;
                    (count > 0).then(|| format!("✉ delivered {count} escalation(s)"))
                }
                Err(SettleError::Sink(_)) => None,
                Err(error) => {
                    let line = format!("escalation delivery: {}", error.line());
                    (last_error.replace(line.clone()).as_ref() != Some(&line)).then_some(line)
                }
            }
        })
    })
}
