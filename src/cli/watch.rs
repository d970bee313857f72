use std::sync::Arc;
use std::time::Duration;

use super::exit::{BAD_CONFIG, FAILURE, Failure};
use crate::config::Config;
use crate::console::action::Action;
use crate::console::app::OperatorRequest;
use crate::console::run::{self, ConsoleOptions, Housekeeping, NotificationOptions, Performer};
use crate::console::theme::Theme;
use crate::ledger::actions::Resolution;
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
    Arc::new(|request: OperatorRequest| {
        Box::pin(async move { Err(format!("read-only: {:?} refused", request.action)) })
    })
}

/// The console's writing actions, carried out by the same [`Settler`] the
/// CLI uses: one code path for every way an operator acts.
pub fn settling_performer(settler: Arc<Settler>) -> Performer {
    Arc::new(move |request: OperatorRequest| {
        let settler = settler.clone();
        Box::pin(async move { perform(&settler, request).await })
    })
}

async fn perform(settler: &Settler, request: OperatorRequest) -> Result<String, String> {
    let reason = request.reason.clone();
    if request.action == Action::ReconcileAll {
        let items = settler
            .reconcile_many(request.targets)
            .await
            .map_err(|e| e.to_string())?;
        let total = items.len();
        let failed = items.iter().filter(|item| item.result.is_err()).count();
        let mut findings: Vec<String> = items
            .iter()
            .filter_map(|item| item.result.as_ref().ok())
            .filter_map(|report| {
                report
                    .detail
                    .get("finding")
                    .and_then(|f| f.as_str())
                    .map(str::to_string)
            })
            .collect();
        findings.sort();
        findings.dedup();
        return Ok(format!(
            "reconciled {} of {total} ({failed} failed): {}",
            total - failed,
            findings.join(", ")
        ));
    }
    if let Some(escalation_key) = request.escalation_key {
        let settle_request = match request.action {
            Action::Acknowledge => Request::Acknowledge {
                escalation_key,
                reason,
            },
            _ => Request::ResolveEscalation {
                escalation_key,
                reason,
            },
        };
        return settler
            .perform(settle_request)
            .await
            .map(|r| r.summary)
            .map_err(|e| e.to_string());
    }
    let Some((op_key, seen)) = request.targets.into_iter().next() else {
        return Err("nothing selected".to_string());
    };
    let seen = Some(seen);
    let settle_request = match request.action {
        Action::Reconcile => Request::Reconcile { op_key, seen },
        Action::Compensate => Request::Compensate {
            op_key,
            seen,
            reason,
        },
        Action::Escalate => Request::Escalate {
            op_key,
            seen,
            sink: None,
            reason,
        },
        Action::ResolveSucceeded => Request::Resolve {
            op_key,
            seen,
            reason,
            resolution: Resolution::Succeeded {
                external_ref: request.external_ref.unwrap_or_default(),
            },
        },
        Action::ResolveFailed => Request::Resolve {
            op_key,
            seen,
            reason,
            resolution: Resolution::Failed { retryable: false },
        },
        Action::Release => Request::Release {
            op_key,
            seen,
            reason,
        },
        Action::Cancel => Request::Cancel {
            op_key,
            seen,
            reason,
        },
        Action::Annotate => Request::Annotate {
            op_key,
            seen,
            note: reason,
        },
        Action::Approve => Request::Approve {
            op_key,
            seen,
            reason,
        },
        Action::Reject => Request::Reject {
            op_key,
            seen,
            reason,
        },
        other => return Err(format!("{other:?} does not write")),
    };
    settler
        .perform(settle_request)
        .await
        .map(|report| report.summary)
        .map_err(|error| error.to_string())
}
