use std::sync::Arc;
use std::time::Duration;

use super::exit::{BAD_CONFIG, FAILURE, Failure};
use crate::config::Config;
use crate::console::run::{self, ConsoleOptions, Housekeeping, NotificationOptions, Performer};
use crate::console::theme::Theme;
use crate::ledger::{self, ConnectSettings};
use crate::settle::{Request, Settler};

/// What the command line adds to the config file.
pub struct WatchArgs {
    pub database_url: String,
    pub theme: Option<String>,
    pub poll_interval: Option<f64>,
    pub no_notify: bool,
    pub performer: Performer,
    pub background_status: Option<Arc<dyn Fn() -> String + Send + Sync>>,
    pub housekeeping: Option<Housekeeping>,
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
    let connect = config.connect_settings(args.database_url, "console");
    // Fail fast on a wrong URL before taking over the terminal.
    connect.options()?;
    refuse_what_waiting_cannot_fix(&connect).await?;
    let notifications =
        (config.notifications.enabled && !args.no_notify).then(|| NotificationOptions {
            min_interval: Duration::from_secs(config.notifications.min_interval_secs),
            timeout: Duration::from_millis(config.notifications.timeout_ms),
        });
    tracing::info!(operator = %config.operator, read_only = config.read_only, "console starting");
    run::run(ConsoleOptions {
        connect,
        theme,
        operator: config.operator.clone(),
        read_only: config.read_only,
        poll_interval,
        notifications,
        mouse: config.mouse,
        performer: args.performer,
        background_status: args.background_status,
        housekeeping: args.housekeeping,
        at: args.at,
    })
    .await
    .map_err(|error| Failure::new(FAILURE, format!("terminal error: {error}")))
}

/// One look at the ledger before the console takes the screen: a login the
/// server turns down or a missing schema ends here, with the CLI's exit code
/// and message, instead of a console waiting for a first poll that never
/// comes. A server that is down or slow is left to the console, which
/// shows it as unreachable and reconnects by itself.
async fn refuse_what_waiting_cannot_fix(connect: &ConnectSettings) -> Result<(), Failure> {
    let mut probe = connect.clone();
    probe.connect_timeout = Duration::from_secs(2);
    probe.max_connections = 1;
    let looked = async {
        let pool = ledger::connect(&probe).await?;
        let counted = crate::ledger::panes::counts(&pool).await.map(|_| ());
        pool.close().await;
        counted
    };
    match tokio::time::timeout(Duration::from_secs(3), looked).await {
        Ok(Err(error)) if error.is_permanent() => Err(error.into()),
        _ => Ok(()),
    }
}

/// A performer that refuses everything, for consoles that must not write.
pub fn refusing_performer() -> Performer {
    Arc::new(|request: Request| {
        let refused = format!("read-only: {} refused", request.name());
        Box::pin(async move { Err(refused) })
    })
}

/// The console's writing actions, carried out by the same [`Settler`] the
/// CLI uses: one code path for every way an operator acts.
pub fn settling_performer(settler: Arc<Settler>) -> Performer {
    Arc::new(move |request: Request| {
        let settler = settler.clone();
        Box::pin(async move {
            settler
                .perform(request)
                .await
                .map(|report| report.summary)
                .map_err(|error| error.line())
        })
    })
}
