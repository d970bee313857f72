//! Simulated agents: several workers calling the real writer API over real
//! connections and a provider over real HTTP, with the faults production
//! sees — lost responses, crashes between dispatch and record, retries,
//! reused keys, duplicate webhook deliveries, conflicting actions, late
//! results — so the panes fill within a minute (escalations, which wait
//! for the reconciler's tries, within two).

use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::ledger::LedgerPool;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::provider_client::ProviderClient;
use crate::ledger::writer::{self, Completion, Intent, Outcome};
use crate::ledger::{Decision, LedgerError};

#[derive(Debug, Clone)]
pub struct SimulatorOptions {
    pub agents: usize,
    /// Effects per second across all agents.
    pub rate: f64,
    pub seed: u64,
}

/// What the simulator has done so far, for the status line.
#[derive(Debug, Default)]
pub struct SimStats {
    pub effects: AtomicU64,
    pub succeeded: AtomicU64,
    pub lost_responses: AtomicU64,
    pub crashes: AtomicU64,
    pub never_answered: AtomicU64,
    pub replays: AtomicU64,
    pub mismatches: AtomicU64,
    pub webhook_redeliveries: AtomicU64,
    pub held: AtomicU64,
    pub late_results: AtomicU64,
    pub failures: AtomicU64,
    pub errors: AtomicU64,
}

impl SimStats {
    pub fn line(&self) -> String {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        format!(
            "sim: {} effects · {} ok · {} lost responses · {} crashes · {} unanswered · {} replays · {} reused keys · {} webhook redeliveries · {} held · {} late · {} errors",
            get(&self.effects),
            get(&self.succeeded),
            get(&self.lost_responses),
            get(&self.crashes),
            get(&self.never_answered),
            get(&self.replays),
            get(&self.mismatches),
            get(&self.webhook_redeliveries),
            get(&self.held),
            get(&self.late_results),
            get(&self.errors),
        )
    }
}

/// The scenarios and their weights out of 100.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Normal,
    LostResponse,
    CrashAfterDispatch,
    NeverAnswered,
    RetrySameKey,
    ReusedKeyChangedParams,
    WebhookRedelivered,
    ConflictingActions,
    LateSuccess,
    ProviderRefused,
}

const SCENARIOS: [(Scenario, u32); 10] = [
    (Scenario::Normal, 40),
    (Scenario::LostResponse, 9),
    (Scenario::CrashAfterDispatch, 6),
    (Scenario::NeverAnswered, 5),
    (Scenario::RetrySameKey, 9),
    (Scenario::ReusedKeyChangedParams, 6),
    (Scenario::WebhookRedelivered, 9),
    (Scenario::ConflictingActions, 8),
    (Scenario::LateSuccess, 4),
    (Scenario::ProviderRefused, 4),
];

pub struct Simulator {
    pub stats: Arc<SimStats>,
    tasks: JoinSet<()>,
    stop: watch::Sender<bool>,
}

impl Simulator {
    pub fn start(
        pool: LedgerPool,
        provider: ProviderClient,
        options: SimulatorOptions,
    ) -> Simulator {
        let stats = Arc::new(SimStats::default());
        let run = format!("{}.{}", options.seed, chrono::Utc::now().format("%H%M%S"));
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let agents = options.agents.max(1);
        let pause = Duration::from_secs_f64(agents as f64 / options.rate.max(0.01));
        for index in 0..agents {
            let agent = Agent {
                name: format!("agent-{}", index + 1),
                pool: pool.clone(),
                provider: provider.clone(),
                rng: StdRng::seed_from_u64(
                    options.seed.wrapping_mul(1000).wrapping_add(index as u64),
                ),
                stats: stats.clone(),
                sequence: 0,
                run: run.clone(),
                held: std::sync::Mutex::new(Vec::new()),
                beats: index % 2 == 0,
            };
            let mut stopped = stopped.clone();
            tasks.spawn(async move {
                let mut agent = agent;
                // Spread the agents so they do not all act on the same tick.
                tokio::time::sleep(pause.mul_f64(index as f64 / agents as f64)).await;
                loop {
                    if let Err(error) = agent.act().await {
                        agent.stats.errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(agent = %agent.name, %error, "simulated agent step failed");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = stopped.changed() => return,
                    }
                }
            });
        }
        Simulator { stats, tasks, stop }
    }

    /// Stops every agent; what they recorded stays in the ledger.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        let deadline = tokio::time::sleep(Duration::from_secs(5));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                next = self.tasks.join_next() => if next.is_none() { return },
                _ = &mut deadline => { self.tasks.abort_all(); return }
            }
        }
    }
}

struct Agent {
    name: String,
    pool: LedgerPool,
    provider: ProviderClient,
    rng: StdRng,
    stats: Arc<SimStats>,
    sequence: u64,
    /// Part of every key: the seed, and when this run started, so a resumed
    /// ledger never mistakes a new run's intents for replays of the last one.
    run: String,
    /// Intents that were held, to ask about again (when, what, tries left),
    /// as a real agent comes back to a call it was told to wait with.
    held: std::sync::Mutex<Vec<(tokio::time::Instant, Intent, u8)>>,
    /// Runs on a client that beats while a provider call is out (as the
    /// Python and TypeScript clients do): when it dies mid-call, its effect
    /// is unknown once the lease ends. The others' crashes wait out their
    /// window, as a bare SQL caller's do.
    beats: bool,
}

/// The clients' default heartbeat lease.
const HEARTBEAT_LEASE: Duration = Duration::from_secs(15);

/// How long a held agent waits before it asks again, and how often it does.
const HELD_RETRY_AFTER: Duration = Duration::from_secs(15);
const HELD_RETRIES: u8 = 8;

const CURRENCIES: [&str; 4] = ["EUR", "USD", "GBP", "JPY"];

impl Agent {
    fn pick(&mut self) -> Scenario {
        let total: u32 = SCENARIOS.iter().map(|(_, weight)| weight).sum();
        let mut roll = self.rng.random_range(0..total);
        for (scenario, weight) in SCENARIOS {
            if roll < weight {
                return scenario;
            }
            roll -= weight;
        }
        Scenario::Normal
    }

    fn next_id(&mut self) -> String {
        self.sequence += 1;
        format!(
            "{}-{}-{}",
            self.run,
            self.name.trim_start_matches("agent-"),
            self.sequence
        )
    }

    /// A refund, a booking or a message, with its key and material params.
    fn intent(&mut self) -> Intent {
        let id = self.next_id();
        // A shop's invoices: two refunds of one invoice are two agents'
        // doing (ConflictingActions), rarely chance.
        let invoice = self.rng.random_range(1_000..99_999);
        match self.rng.random_range(0..10) {
            0..=5 => {
                let currency = CURRENCIES[self.rng.random_range(0..CURRENCIES.len())];
                let amount = if currency == "JPY" {
                    self.rng.random_range(500..60_000)
                } else {
                    self.rng.random_range(500..40_000)
                };
                let approval = format!("AP-{}", self.rng.random_range(10..99));
                Intent {
                    op_key: format!("refund:INV-{invoice}:{approval}:{id}"),
                    action: "refund".into(),
                    target: format!("invoice:INV-{invoice}"),
                    params: json!({ "amount_minor": amount, "currency": currency, "invoice": format!("INV-{invoice}") }),
                    requested_by: self.name.clone(),
                    amount_minor: Some(amount),
                    currency: Some(currency.into()),
                    provider: Some(super::DEMO_PROVIDER.into()),
                    approval_ref: Some(approval),
                    approval_version: Some(1),
                    request_id: Some(format!("req-{id}")),
                    ..Intent::default()
                }
            }
            6..=7 => {
                let room = self.rng.random_range(1..40);
                let day = self.rng.random_range(1..28);
                let nights = self.rng.random_range(1..5);
                let during = stay(day, nights);
                Intent {
                    op_key: format!("booking:room-{room}:2026-12-{day:02}:{id}"),
                    action: "booking".into(),
                    target: format!("room:{room}"),
                    params: json!({ "room": room, "nights": nights }),
                    requested_by: self.name.clone(),
                    provider: Some(super::DEMO_PROVIDER.into()),
                    request_id: Some(format!("req-{id}")),
                    during,
                    ..Intent::default()
                }
            }
            _ => {
                let customer = self.rng.random_range(1000..1100);
                Intent {
                    op_key: format!("message:C-{customer}:refund-notice:{id}"),
                    action: "message".into(),
                    target: format!("customer:C-{customer}"),
                    params: json!({ "template": "refund-notice", "channel": "email" }),
                    requested_by: self.name.clone(),
                    provider: Some(super::DEMO_PROVIDER.into()),
                    request_id: Some(format!("req-{id}")),
                    ..Intent::default()
                }
            }
        }
    }

    /// Asks again about the held intents that are due: one released by its
    /// holder's failure proceeds, and this agent sends it.
    async fn ask_again(&mut self) -> Result<(), String> {
        let now = tokio::time::Instant::now();
        let queued = std::mem::take(&mut *self.held_queue());
        let (due, waiting): (Vec<_>, Vec<_>) =
            queued.into_iter().partition(|(at, _, _)| *at <= now);
        *self.held_queue() = waiting;
        for (_, intent, tries) in due {
            let begun = self.begin(&intent).await?;
            if begun.decision.may_dispatch() {
                self.claim_call_complete(&intent).await?;
            } else if begun.decision == Decision::Held && tries > 1 {
                self.held_queue()
                    .push((now + HELD_RETRY_AFTER, intent, tries - 1));
            }
        }
        Ok(())
    }

    async fn act(&mut self) -> Result<(), String> {
        self.ask_again().await?;
        let scenario = self.pick();
        self.stats.effects.fetch_add(1, Ordering::Relaxed);
        let intent = self.intent();
        match scenario {
            Scenario::Normal => self.full_run(&intent).await,
            Scenario::LostResponse => self.lose_response(&intent).await,
            Scenario::CrashAfterDispatch => self.crash_after_dispatch(&intent).await,
            Scenario::NeverAnswered => self.never_answer(&intent).await,
            Scenario::RetrySameKey => self.retry_same_key(&intent).await,
            Scenario::ReusedKeyChangedParams => self.reuse_key_changed_params(&intent).await,
            Scenario::WebhookRedelivered => self.redeliver_webhook(&intent).await,
            Scenario::ConflictingActions => self.conflict(&intent).await,
            Scenario::LateSuccess => self.succeed_late(&intent).await,
            Scenario::ProviderRefused => self.refused_then_retry(&intent).await,
        }
    }

    async fn lose_response(&self, intent: &Intent) -> Result<(), String> {
        if self.begin_and_claim(intent).await? {
            // The provider does the work; the answer never reaches us.
            let _ = self.provider.create(intent).await;
            self.complete(
                intent,
                Outcome::Unknown,
                None,
                "timeout: no response within 10 s",
            )
            .await?;
            self.stats.lost_responses.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn crash_after_dispatch(&self, intent: &Intent) -> Result<(), String> {
        if self.begin_and_claim(intent).await? {
            if self.beats {
                writer::heartbeat(&self.pool, &intent.op_key, HEARTBEAT_LEASE, &self.name)
                    .await
                    .map_err(describe)?;
            }
            let _ = self.provider.create(intent).await;
            // The worker dies here: the ledger never hears back.
            self.stats.crashes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn never_answer(&self, intent: &Intent) -> Result<(), String> {
        if self.begin_and_claim(intent).await? {
            // The request is lost on the way: the provider never saw it.
            self.stats.never_answered.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn retry_same_key(&mut self, intent: &Intent) -> Result<(), String> {
        self.full_run(intent).await?;
        for _ in 0..self.rng.random_range(1..3) {
            let begun = self.begin(intent).await?;
            if begun.decision == Decision::Replay {
                self.stats.replays.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    async fn reuse_key_changed_params(&mut self, intent: &Intent) -> Result<(), String> {
        self.full_run(intent).await?;
        let mut changed = intent.clone();
        if let Some(amount) = changed.amount_minor {
            let bumped = amount + 100 * self.rng.random_range(1..20);
            changed.amount_minor = Some(bumped);
            changed.params["amount_minor"] = json!(bumped);
        } else {
            changed.params["note"] = json!("edited by the agent after a retry");
        }
        if self.begin(&changed).await?.decision == Decision::Rejected {
            self.stats.mismatches.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn redeliver_webhook(&mut self, intent: &Intent) -> Result<(), String> {
        let event = format!("webhook:evt_{}", self.next_id());
        let delivery = Intent {
            op_key: event.clone(),
            action: "webhook".into(),
            target: format!("order:ORD-{}", self.rng.random_range(1000..9999)),
            params: json!({ "event": event, "type": "charge.refunded" }),
            requested_by: "webhook-receiver".into(),
            ..intent.clone()
        };
        let delivery = Intent {
            amount_minor: None,
            currency: None,
            approval_ref: None,
            approval_version: None,
            ..delivery
        };
        self.full_run(&delivery).await?;
        for _ in 0..self.rng.random_range(1..3) {
            self.begin(&delivery).await?;
            self.stats
                .webhook_redeliveries
                .fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Two agents decide to refund the same invoice at once.
    async fn conflict(&mut self, intent: &Intent) -> Result<(), String> {
        let first = self.begin_and_claim(intent).await?;
        let mut second = intent.clone();
        second.op_key = format!("{}:second", intent.op_key);
        second.requested_by = format!("{}-twin", self.name);
        if self.begin(&second).await?.decision == Decision::Held {
            self.stats.held.fetch_add(1, Ordering::Relaxed);
            self.come_back_later(&second);
        }
        if first && self.rng.random_bool(0.5) {
            // Half the time the first one stays unanswered, keeping the hold.
            self.complete(intent, Outcome::Unknown, None, "connection reset by peer")
                .await?;
            self.stats.lost_responses.fetch_add(1, Ordering::Relaxed);
        } else if first {
            self.call_and_complete(intent).await?;
        }
        Ok(())
    }

    async fn succeed_late(&mut self, intent: &Intent) -> Result<(), String> {
        if !self.begin_and_claim(intent).await? {
            return Ok(());
        }
        let created = self.provider.create(intent).await;
        self.complete(intent, Outcome::Unknown, None, "HTTP 503 from the provider")
            .await?;
        self.stats.lost_responses.fetch_add(1, Ordering::Relaxed);
        // The answer turns up much later, possibly after a person settled it.
        let (pool, key, target, stats) = (
            self.pool.clone(),
            intent.op_key.clone(),
            intent.target.clone(),
            self.stats.clone(),
        );
        let delay = Duration::from_secs(self.rng.random_range(20..90));
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let completion = Completion {
                external_ref: created.ok(),
                reason: Some("late webhook from the provider".into()),
                worker: Some("late-webhook".into()),
                target: Some(target),
                ..Completion::default()
            };
            if let Ok(done) =
                writer::complete_effect(&pool, &key, Outcome::Succeeded, &completion).await
                && done.late
            {
                stats.late_results.fetch_add(1, Ordering::Relaxed);
            }
        });
        Ok(())
    }

    async fn refused_then_retry(&self, intent: &Intent) -> Result<(), String> {
        if self.begin_and_claim(intent).await? {
            self.complete(
                intent,
                Outcome::Failed { retryable: true },
                None,
                "card issuer declined: try again later",
            )
            .await?;
            self.stats.failures.fetch_add(1, Ordering::Relaxed);
            // The agent retries under the same key, as it should.
            if self.begin(intent).await?.decision == Decision::Retry {
                self.claim_call_complete(intent).await?;
            }
        }
        Ok(())
    }

    async fn begin(&self, intent: &Intent) -> Result<writer::Begun, String> {
        writer::begin_effect(&self.pool, intent)
            .await
            .map_err(describe)
    }

    fn held_queue(&self) -> std::sync::MutexGuard<'_, Vec<(tokio::time::Instant, Intent, u8)>> {
        // Only this agent's own task touches it: a poisoned lock is still its data.
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Told to wait (held): ask again later, as a real agent would.
    fn come_back_later(&self, intent: &Intent) {
        self.held_queue().push((
            tokio::time::Instant::now() + HELD_RETRY_AFTER,
            intent.clone(),
            HELD_RETRIES,
        ));
    }

    /// Begins and claims; true when this agent may call the provider. A
    /// call told to wait behind another is asked again later.
    async fn begin_and_claim(&self, intent: &Intent) -> Result<bool, String> {
        let begun = self.begin(intent).await?;
        if begun.decision == Decision::Held {
            self.come_back_later(intent);
        }
        if !begun.decision.may_dispatch() {
            return Ok(false);
        }
        let claim = writer::mark_dispatched_on_target(
            &self.pool,
            &intent.op_key,
            &intent.target,
            intent.request_id.as_deref(),
            &self.name,
        )
        .await
        .map_err(describe)?;
        Ok(claim.claimed)
    }

    async fn full_run(&self, intent: &Intent) -> Result<(), String> {
        if self.begin_and_claim(intent).await? {
            self.call_and_complete(intent).await?;
        }
        Ok(())
    }

    async fn claim_call_complete(&self, intent: &Intent) -> Result<(), String> {
        let claim = writer::mark_dispatched_on_target(
            &self.pool,
            &intent.op_key,
            &intent.target,
            intent.request_id.as_deref(),
            &self.name,
        )
        .await
        .map_err(describe)?;
        if claim.claimed {
            self.call_and_complete(intent).await?;
        }
        Ok(())
    }

    async fn call_and_complete(&self, intent: &Intent) -> Result<(), String> {
        match self.provider.create(intent).await {
            Ok(reference) => {
                self.complete(
                    intent,
                    Outcome::Succeeded,
                    Some(reference),
                    "provider confirmed",
                )
                .await?;
                self.stats.succeeded.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                self.complete(intent, Outcome::Unknown, None, &error)
                    .await?;
                self.stats.lost_responses.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Completes naming the effect's target, as a writer ready for a ledger
    /// distributed by target does.
    async fn complete(
        &self,
        intent: &Intent,
        outcome: Outcome,
        external_ref: Option<String>,
        reason: &str,
    ) -> Result<(), String> {
        let completion = Completion {
            external_ref: external_ref.clone(),
            result: external_ref.map(|reference| json!({ "provider_ref": reference })),
            reason: Some(reason.to_string()),
            worker: Some(self.name.clone()),
            target: Some(intent.target.clone()),
            ..Completion::default()
        };
        writer::complete_effect(&self.pool, &intent.op_key, outcome, &completion)
            .await
            .map_err(describe)?;
        Ok(())
    }
}

fn describe(error: LedgerError) -> String {
    error.to_string()
}

/// The params a provider call carries, from the intent.
pub fn provider_body(intent: &Intent) -> Value {
    json!({
        "op_key": intent.op_key,
        "action": intent.action,
        "target": intent.target,
        "amount_minor": intent.amount_minor,
        "currency": intent.currency,
        "params": intent.params,
    })
}

/// A stay in December 2026 from `day`, for `nights`: check-in at 15:00,
/// check-out at 11:00, so a stay ending on the day another begins does not
/// overlap it — as a hotel's booking system sees it.
fn stay(day: u32, nights: u32) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let check_in = chrono::NaiveDate::from_ymd_opt(2026, 12, day)?
        .and_hms_opt(15, 0, 0)?
        .and_utc();
    let check_out =
        check_in + chrono::Duration::days(i64::from(nights)) - chrono::Duration::hours(4);
    Some((check_in, check_out))
}

#[cfg(test)]
mod tests {
    use super::stay;

    fn overlap(a: (u32, u32), b: (u32, u32)) -> bool {
        let (a, b) = (stay(a.0, a.1).unwrap(), stay(b.0, b.1).unwrap());
        a.0 < b.1 && b.0 < a.1
    }

    #[test]
    fn stays_overlap_only_when_their_nights_do() {
        assert!(
            !overlap((3, 2), (5, 1)),
            "check-out on the 5th, check-in on the 5th"
        );
        assert!(overlap((3, 3), (5, 1)), "the night of the 5th is in both");
        assert!(!overlap((1, 1), (20, 4)));
        assert!(stay(31, 1).is_some() && stay(32, 1).is_none());
    }
}
