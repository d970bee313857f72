//! The reconciler's `/metrics` (Prometheus text) and `/healthz`. Its own
//! work is counted as it happens; the ledger's figures (effects by state,
//! the oldest unknown, escalations by state, leases) are read at each scrape
//! so they are never older than the scrape.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use crate::ledger::LedgerPool;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Handled;
use crate::ledger::reconciler::figures;

type Labels = Vec<(String, String)>;

/// What this reconciler has done since it started.
#[derive(Debug, Default)]
pub struct WorkCounters {
    reconciliations: Family<Labels, Counter>,
    escalations: Counter,
    reversals: Counter,
    passes: Counter,
    failed_passes: Counter,
    last_success: Mutex<Option<(Instant, f64)>>,
}

impl WorkCounters {
    pub(super) fn record(&self, handled: &Handled) {
        let (finding, escalated) = match handled {
            Handled::Reconciled {
                finding,
                escalated,
                reversed,
            } => {
                self.reversals.inc_by(*reversed as u64);
                (finding.as_str(), *escalated)
            }
            Handled::Changed => ("changed", false),
            Handled::Failed { escalated, .. } => ("error", *escalated),
            Handled::ByPolicy { escalated } => ("left_to_a_person", *escalated),
        };
        self.reconciliations
            .get_or_create(&vec![("finding".to_string(), finding.to_string())])
            .inc();
        if escalated {
            self.escalations.inc();
        }
    }

    /// A next step taken up: the reversals it made and whether it told a person.
    pub(super) fn record_step(&self, taken: &super::StepTaken) {
        self.reversals.inc_by(taken.reversed as u64);
        if taken.escalated {
            self.escalations.inc();
        }
    }

    pub(super) fn pass_succeeded(&self) {
        self.passes.inc();
        let now = chrono::Utc::now().timestamp_millis() as f64 / 1000.0;
        if let Ok(mut last) = self.last_success.lock() {
            *last = Some((Instant::now(), now));
        }
    }

    pub(super) fn pass_failed(&self) {
        self.passes.inc();
        self.failed_passes.inc();
    }

    /// How long ago the last pass that reached the ledger ended.
    pub fn since_last_success(&self) -> Option<Duration> {
        let last = self.last_success.lock().ok()?;
        last.map(|(at, _)| at.elapsed())
    }

    pub fn reconciled(&self, finding: &str) -> u64 {
        self.reconciliations
            .get_or_create(&vec![("finding".to_string(), finding.to_string())])
            .get()
    }
}

/// What the endpoints share.
#[derive(Clone)]
pub struct Exposed {
    pub counters: std::sync::Arc<WorkCounters>,
    pub pool: LedgerPool,
    /// Unhealthy when no pass has reached the ledger for this long.
    pub stale_after: Duration,
}

/// The Prometheus text for one scrape.
pub async fn render(exposed: &Exposed) -> Result<String, String> {
    let ledger = figures(&exposed.pool)
        .await
        .map_err(|error| crate::text::sanitize_line(&error.to_string()))?;
    let counters = &exposed.counters;
    let mut registry = Registry::with_prefix("effectwatch");
    let effects = Family::<Labels, Gauge>::default();
    for (state, count) in &ledger.effects_by_state {
        effects
            .get_or_create(&vec![("state".to_string(), state.clone())])
            .set(*count);
    }
    registry.register("effects", "Effects in the ledger, by state", effects);
    let escalations = Family::<Labels, Gauge>::default();
    for (state, count) in &ledger.escalations_by_state {
        escalations
            .get_or_create(&vec![("state".to_string(), state.clone())])
            .set(*count);
    }
    registry.register(
        "escalations",
        "Escalations in the ledger, by state",
        escalations,
    );
    let oldest = Gauge::<f64, AtomicU64>::default();
    oldest.set(ledger.oldest_unknown_seconds);
    registry.register(
        "oldest_unknown_seconds",
        "How long the oldest unknown effect has been unknown (0: none is)",
        oldest,
    );
    let leased = Gauge::<i64>::default();
    leased.set(ledger.leased);
    registry.register(
        "reconcile_leased",
        "Effects leased to a reconciler right now (all reconcilers)",
        leased,
    );
    let backing_off = Gauge::<i64>::default();
    backing_off.set(ledger.backing_off);
    registry.register(
        "reconcile_backing_off",
        "Open effects waiting for their next try (all reconcilers)",
        backing_off,
    );
    registry.register(
        "reconciliations",
        "Reconciliations by this reconciler, by recorded finding",
        counters.reconciliations.clone(),
    );
    registry.register(
        "reconciler_escalations",
        "Effects this reconciler handed to a person",
        counters.escalations.clone(),
    );
    registry.register(
        "reconciler_duplicate_reversals",
        "Duplicate provider records this reconciler reversed by policy (compensate semantics)",
        counters.reversals.clone(),
    );
    let switches = Counter::<u64>::default();
    switches.inc_by(exposed.pool.switches());
    registry.register(
        "ledger_primary_switches",
        "Times this reconciler's pool followed the primary to another host",
        switches,
    );
    registry.register(
        "reconcile_passes",
        "Passes this reconciler ran",
        counters.passes.clone(),
    );
    registry.register(
        "reconcile_failed_passes",
        "Passes that could not reach the ledger",
        counters.failed_passes.clone(),
    );
    let last = Gauge::<f64, AtomicU64>::default();
    if let Ok(guard) = counters.last_success.lock()
        && let Some((_, unix)) = *guard
    {
        last.set(unix);
    }
    registry.register(
        "reconcile_last_success_timestamp_seconds",
        "When this reconciler's last successful pass ended (Unix time; 0: none yet)",
        last,
    );
    let mut text = String::new();
    encode(&mut text, &registry).map_err(|error| error.to_string())?;
    Ok(text)
}

async fn metrics(State(exposed): State<Exposed>) -> impl IntoResponse {
    match render(&exposed).await {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        ),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("cannot read the ledger: {error}\n"),
        ),
    }
}

async fn health(State(exposed): State<Exposed>) -> impl IntoResponse {
    match exposed.counters.since_last_success() {
        Some(age) if age <= exposed.stale_after => (
            StatusCode::OK,
            format!("ok: last pass {:.1} s ago\n", age.as_secs_f64()),
        ),
        Some(age) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "stale: no pass has reached the ledger for {:.0} s\n",
                age.as_secs_f64()
            ),
        ),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "starting: no pass has reached the ledger yet\n".to_string(),
        ),
    }
}

/// Binds `address` now (so a taken port is an error at start, not later)
/// and serves until `stop` turns true.
pub async fn serve(
    address: SocketAddr,
    exposed: Exposed,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(health))
        .with_state(exposed);
    let task = tokio::spawn(async move {
        let stopped = async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        };
        if let Err(error) = axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await
        {
            tracing::warn!("metrics endpoint stopped: {error}");
        }
    });
    Ok((bound, task))
}
