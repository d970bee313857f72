use std::sync::Arc;
use std::time::Duration;

use super::exit::{BAD_CONFIG, FAILURE, Failure};
use crate::config::Config;
use crate::console::app::OperatorRequest;
use crate::console::run::{self, ConsoleOptions, Housekeeping, NotificationOptions, Performer};
use crate::console::theme::Theme;
use crate::ledger::ConnectSettings;

/// What the command line adds to the config file.
pub struct WatchArgs {
    pub database_url: String,
    pub theme: Option<String>,
    pub poll_interval: Option<f64>,
    pub no_notify: bool,
    pub performer: Performer,
    pub background_status: Option<Arc<dyn Fn() -> String + Send + Sync>>,
    pub housekeeping: Option<Housekeeping>,
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
    let mut connect = ConnectSettings::new(args.database_url);
    connect.statement_timeout = Duration::from_secs(config.statement_timeout_secs);
    // Fail fast on a wrong URL before taking over the terminal.
    connect.options()?;
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
        performer: args.performer,
        background_status: args.background_status,
        housekeeping: args.housekeeping,
    })
    .await
    .map_err(|error| Failure::new(FAILURE, format!("terminal error: {error}")))
}

/// A performer that refuses everything, for consoles that must not write.
pub fn refusing_performer() -> Performer {
    Arc::new(|request: OperatorRequest| {
        Box::pin(async move { Err(format!("read-only: {:?} refused", request.action)) })
    })
}
