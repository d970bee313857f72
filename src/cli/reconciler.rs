//! `effectwatch reconcile --watch` (a service: passes until SIGTERM, with
//! `/metrics` and `/healthz`) and `--once` (one pass, for cron).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::ledger::LedgerPool;

use super::exit::{BAD_CONFIG, FAILURE, Failure, REFUSED};
use crate::config::Config;
use crate::ledger::reconciler::LeaseTerms;
use crate::reconciler::metrics::{self, Exposed};
use crate::reconciler::{Reconciler, ReconcilerSettings};
use crate::settle::Settler;

/// How the command was asked to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceArgs {
    pub watch: bool,
    /// Overrides `reconciler.name`.
    pub name: Option<String>,
    /// Overrides `reconciler.metrics_address`.
    pub metrics: Option<SocketAddr>,
}

/// The settings `[reconciler]` gives, under `name` when one is given.
pub fn settings(config: &Config, name: Option<String>) -> ReconcilerSettings {
    let section = &config.reconciler;
    ReconcilerSettings {
        name: name
            .or_else(|| section.name.clone())
            .unwrap_or_else(ReconcilerSettings::default_name),
        terms: LeaseTerms {
            lease: Duration::from_secs(section.lease_secs),
            grace: Duration::from_secs(section.grace_secs),
            batch: section.batch,
        },
        interval: Duration::from_secs_f64(section.interval_secs),
        backoff: Duration::from_secs_f64(section.backoff_secs),
        backoff_max: Duration::from_secs_f64(section.backoff_max_secs),
        escalate_after: section.escalate_after,
        sink: section.sink.clone(),
        concurrency: section.concurrency,
    }
}

/// A reconciler settling on `pool` as `settings.name`.
pub fn reconciler(config: &Config, pool: LedgerPool, settings: ReconcilerSettings) -> Reconciler {
    let settler = Settler::new(
        pool.clone(),
        Arc::new(config.clone()),
        settings.name.clone(),
        false,
    );
    Reconciler::new(settler, pool, settings)
}

pub async fn run(pool: &LedgerPool, config: &Config, args: ServiceArgs) -> Result<(), Failure> {
    if config.read_only {
        return Err(Failure::new(
            REFUSED,
            "read-only: the reconciler writes what it finds; run it without --read-only",
        ));
    }
    let settings = settings(config, args.name);
    let reconciler = reconciler(config, pool.clone(), settings);
    if !args.watch {
        let summary = reconciler
            .pass()
            .await
            .map_err(|error| Failure::new(FAILURE, error.to_string()))?;
        println!("{}", summary.line());
        return Ok(());
    }
    log_to_stderr();
    let (stop_sender, stop) = tokio::sync::watch::channel(false);
    let address = match args.metrics {
        Some(address) => Some(address),
        None => config
            .reconciler
            .metrics_address
            .as_deref()
            .map(|text| text.parse::<SocketAddr>())
            .transpose()
            .map_err(|error| {
                Failure::new(BAD_CONFIG, format!("reconciler.metrics_address: {error}"))
            })?,
    };
    let served = match address {
        Some(address) => {
            let exposed = Exposed {
                counters: reconciler.counters(),
                pool: pool.clone(),
                stale_after: (reconciler.settings().interval * 3).max(Duration::from_secs(30)),
            };
            let (bound, task) = metrics::serve(address, exposed, stop.clone())
                .await
                .map_err(|error| {
                    Failure::new(
                        BAD_CONFIG,
                        format!("cannot serve metrics on {address}: {error}"),
                    )
                })?;
            tracing::info!("metrics on http://{bound}/metrics, health on /healthz");
            Some(task)
        }
        None => None,
    };
    tracing::info!(
        "{} reconciling every {:.1} s",
        reconciler.settings().name,
        reconciler.settings().interval.as_secs_f64()
    );
    tokio::spawn(async move {
        wait_for_stop_signal().await;
        tracing::info!("stopping after the pass under way");
        let _ = stop_sender.send(true);
    });
    reconciler.run(stop).await;
    if let Some(task) = served {
        let _ = task.await;
    }
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// A service's log goes where its supervisor collects it.
fn log_to_stderr() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
