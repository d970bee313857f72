//! The reconciler service: settles what rules can settle, without a person,
//! through the same [`Settler`] and the same audited SQL as an operator.
//!
//! Each pass leases a batch of unknown effects (and dispatched pending ones
//! past their window and a grace period), asks each one's provider, and lets
//! the ledger apply what the finding allows. Then it takes up the next steps
//! the ledger records as owed (`ledger.next_steps`), whoever left them: an
//! action whose policy says `compensate` has a duplicate at its provider
//! reversed by rule, within its approval limit; a compensation created and
//! never sent is sent; what no rule can settle — a duplicate of any other
//! action or above that limit, a mismatch, an absent effect that is never
//! retried — is escalated to a person, once. A provider that cannot tell
//! after several tries, or cannot be asked at all, is escalated too. Last,
//! escalations due for delivery are delivered. Each step is recorded in the
//! transaction of the step before it, so a reconciler (or a console) killed
//! between two steps leaves the rest to the next pass of any reconciler.
//! Any number of reconcilers may run against one ledger: leases keep them
//! off each other's effects and steps, and a killed one's leases expire.

pub mod metrics;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::ledger::LedgerPool;
use futures_util::StreamExt;
use futures_util::stream;

use crate::crash_point::crash_point;
use crate::ledger::LedgerError;
use crate::ledger::State;
use crate::ledger::history;
use crate::ledger::reconciler::{self as leases, LeaseTerms, Leased, NextStep};
use crate::settle::verbs::{self, Answers};
use crate::settle::{Request, SettleError, Settled, Settler};
use crate::text::sanitize_line;

pub use metrics::WorkCounters;

/// How a reconciler works; `[reconciler]` in the config.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcilerSettings {
    /// The operator name its reconciliations and escalations are audited
    /// under: `reconciler@<host>` unless configured.
    pub name: String,
    pub terms: LeaseTerms,
    /// Pause between passes that found nothing more to do.
    pub interval: Duration,
    /// The wait before an effect left open is asked again, doubled per try.
    pub backoff: Duration,
    pub backoff_max: Duration,
    /// Passes that leave an effect open before a person is asked.
    pub escalate_after: i32,
    /// The sink escalations go to; `None` picks the only one configured.
    pub sink: Option<String>,
    /// Effects asked about at once within one pass.
    pub concurrency: usize,
}

impl ReconcilerSettings {
    pub fn default_name() -> String {
        let host = whoami::hostname().unwrap_or_else(|_| "localhost".to_string());
        format!("reconciler@{host}")
    }
}

/// What became of one leased effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// The finding as the ledger recorded it (`exists_once`, `absent`,
    /// `duplicate`, `mismatch`, `indeterminate`).
    /// `reversed`: the duplicate provider records reversed by rule.
    Reconciled {
        finding: String,
        escalated: bool,
        reversed: usize,
    },
    /// The effect changed since it was leased (its agent answered, an
    /// operator acted): nothing was asked.
    Changed,
    /// The provider could not be asked (not configured, unreadable config).
    Failed { error: String, escalated: bool },
    /// The action's policy sends every doubt to a person: nothing was asked.
    ByPolicy { escalated: bool },
}

/// What became of one next step a pass took up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepTaken {
    /// Still owed: waiting for a provider, an approval or a sink.
    pub open: bool,
    pub reversed: usize,
    pub escalated: bool,
}

/// One pass: how many effects were leased and what became of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassSummary {
    pub leased: usize,
    pub findings: BTreeMap<String, usize>,
    pub changed: usize,
    pub failed: usize,
    pub escalated: usize,
    /// Duplicate provider records reversed by a compensation of their own.
    pub reversed: usize,
    /// Next steps taken up, and how many of those are still owed.
    pub steps: usize,
    pub steps_open: usize,
    /// Escalations delivered by the pass's delivery round.
    pub delivered: usize,
    /// Effects whose workers stopped beating, written unknown (worker_lost)
    /// before the pass leased anything.
    pub workers_lost: usize,
}

impl PassSummary {
    fn add(&mut self, handled: &Handled) {
        match handled {
            Handled::Reconciled {
                finding,
                escalated,
                reversed,
            } => {
                *self.findings.entry(finding.clone()).or_default() += 1;
                self.escalated += usize::from(*escalated);
                self.reversed += reversed;
            }
            Handled::Changed => self.changed += 1,
            Handled::Failed { escalated, .. } => {
                self.failed += 1;
                self.escalated += usize::from(*escalated);
            }
            Handled::ByPolicy { escalated } => {
                *self
                    .findings
                    .entry("left to a person".to_string())
                    .or_default() += 1;
                self.escalated += usize::from(*escalated);
            }
        }
    }

    fn add_step(&mut self, taken: &StepTaken) {
        self.steps += 1;
        self.steps_open += usize::from(taken.open);
        self.reversed += taken.reversed;
        self.escalated += usize::from(taken.escalated);
    }

    fn merge(&mut self, other: PassSummary) {
        self.leased += other.leased;
        for (finding, count) in other.findings {
            *self.findings.entry(finding).or_default() += count;
        }
        self.changed += other.changed;
        self.failed += other.failed;
        self.escalated += other.escalated;
        self.reversed += other.reversed;
        self.steps += other.steps;
        self.steps_open += other.steps_open;
        self.delivered += other.delivered;
        self.workers_lost += other.workers_lost;
    }

    /// Whether the pass did anything at all.
    pub fn did_work(&self) -> bool {
        self.leased > 0 || self.steps > 0 || self.delivered > 0 || self.workers_lost > 0
    }

    /// One line for the log and `--once`.
    pub fn line(&self) -> String {
        if !self.did_work() {
            return "nothing to reconcile".to_string();
        }
        let findings: Vec<String> = self
            .findings
            .iter()
            .map(|(finding, count)| format!("{count} {finding}"))
            .collect();
        let mut parts = Vec::new();
        if self.workers_lost > 0 {
            parts.push(format!("{} workers lost mid-call", self.workers_lost));
        }
        if self.leased > 0 {
            parts.push(format!("{} reconciled", self.leased));
        }
        if !findings.is_empty() {
            parts.push(findings.join(", "));
        }
        if self.steps > 0 {
            let waiting = if self.steps_open > 0 {
                format!(" ({} still waiting)", self.steps_open)
            } else {
                String::new()
            };
            parts.push(format!("{} next steps taken up{waiting}", self.steps));
        }
        if self.changed > 0 {
            parts.push(format!("{} changed meanwhile", self.changed));
        }
        if self.failed > 0 {
            parts.push(format!("{} could not be asked", self.failed));
        }
        if self.reversed > 0 {
            parts.push(format!("{} duplicate records reversed", self.reversed));
        }
        if self.escalated > 0 {
            parts.push(format!("{} escalated to a person", self.escalated));
        }
        if self.delivered > 0 {
            parts.push(format!("{} escalations delivered", self.delivered));
        }
        parts.join(" · ")
    }
}

pub struct Reconciler {
    settler: Settler,
    pool: LedgerPool,
    settings: ReconcilerSettings,
    counters: Arc<WorkCounters>,
}

impl Reconciler {
    /// `settler` must settle as `settings.name` and may not be read-only.
    pub fn new(settler: Settler, pool: LedgerPool, settings: ReconcilerSettings) -> Reconciler {
        Reconciler {
            settler,
            pool,
            settings,
            counters: Arc::new(WorkCounters::default()),
        }
    }

    pub fn counters(&self) -> Arc<WorkCounters> {
        self.counters.clone()
    }

    pub fn settings(&self) -> &ReconcilerSettings {
        &self.settings
    }

    /// Leases and settles batches until none is left to lease: what was due
    /// when the pass began is done (or backing off) when it returns. (A
    /// short batch is no sign of the end: beside other reconcilers, some of
    /// what one statement picked was leased by another a moment before.)
    pub async fn pass(&self) -> Result<PassSummary, LedgerError> {
        let mut summary = PassSummary::default();
        // The history's next months exist before anything is written in
        // them (one indexed read when they do).
        if let Err(error) = crate::ledger::retention::ensure_months(&self.pool).await {
            tracing::warn!(%error, "cannot make the history's next months");
        }
        // A worker whose heartbeats stopped: its effect is unknown now, and
        // this pass takes it up with the rest.
        match leases::declare_lost_workers(&self.pool).await {
            Ok(lost) => summary.workers_lost = lost.len(),
            Err(error) => {
                self.counters.pass_failed();
                return Err(error);
            }
        }
        let began = match leases::ledger_now(&self.pool).await {
            Ok(began) => began,
            Err(error) => {
                self.counters.pass_failed();
                return Err(error);
            }
        };
        loop {
            let batch = match self.batch(began).await {
                Ok(batch) => batch,
                Err(error) => {
                    self.counters.pass_failed();
                    return Err(error);
                }
            };
            let done = batch.leased == 0;
            summary.merge(batch);
            if done {
                break;
            }
        }
        crash_point("after_reconciliations");
        if let Err(error) = self.next_steps(&mut summary).await {
            self.counters.pass_failed();
            return Err(error);
        }
        // What this pass (or a killed process before it) escalated and is
        // due for delivery; a sink that fails is retried with backoff.
        match self.settler.deliver_due_escalations().await {
            Ok(delivered) => summary.delivered = delivered,
            Err(error) => tracing::warn!("delivering escalations failed: {}", error.line()),
        }
        self.counters.pass_succeeded();
        Ok(summary)
    }

    /// Takes up the steps due, a batch at a time, each once, until none is
    /// left to claim: one left open waits for a later pass.
    async fn next_steps(&self, summary: &mut PassSummary) -> Result<(), LedgerError> {
        let mut taken = Vec::new();
        loop {
            let claimed = leases::claim_next_steps(
                &self.pool,
                &self.settings.name,
                self.settings.terms.lease,
                self.settings.terms.batch,
                &taken,
            )
            .await?;
            if claimed.is_empty() {
                return Ok(());
            }
            taken.extend(claimed.iter().map(|step| step.step_id));
            let taken: Vec<Result<StepTaken, LedgerError>> = stream::iter(claimed)
                .map(|step| self.take_step(step))
                .buffer_unordered(self.settings.concurrency.max(1))
                .collect()
                .await;
            for result in taken {
                let taken = result?;
                self.counters.record_step(&taken);
                summary.add_step(&taken);
            }
        }
    }

    /// Takes one step and ends its claim: closed when taken or no longer
    /// owed, else due again after a backoff.
    async fn take_step(&self, step: NextStep) -> Result<StepTaken, LedgerError> {
        let progress = match step.step.as_str() {
            "reverse_duplicates" => self.reverse_duplicates(&step).await?,
            "escalate" => {
                let escalated = self
                    .escalate(&step.op_key, step.escalation_sink.clone(), &step.why)
                    .await?;
                StepProgress {
                    done: escalated.is_some(),
                    outcome: escalated
                        .clone()
                        .unwrap_or_else(|| "no sink could take it".to_string()),
                    reversed: 0,
                    escalated: escalated.is_some_and(|line| line.starts_with("escalated")),
                }
            }
            "send_compensation" => self.send_compensation(&step).await?,
            other => {
                StepProgress::waiting(format!("this reconciler does not know the step {other}"))
            }
        };
        let end = leases::end_next_step(
            &self.pool,
            &step,
            &self.settings.name,
            progress.done,
            &progress.outcome,
            self.settings.backoff,
            self.settings.backoff_max,
        )
        .await?;
        Ok(StepTaken {
            open: end.open,
            reversed: progress.reversed,
            escalated: progress.escalated,
        })
    }

    /// The action's policy compensates and the provider holds the effect
    /// more than once: each extra record the reconciliation listed is
    /// reversed by a compensation of its own (asking again for one returns
    /// its reversal). Open while a reversal is in flight or waits for a
    /// second operator; a person is told when the rule cannot finish it.
    async fn reverse_duplicates(&self, step: &NextStep) -> Result<StepProgress, LedgerError> {
        let op_key = step.op_key.as_str();
        let Some(effect) = history::find_effect(&self.pool, op_key).await? else {
            return Ok(StepProgress::closed("the effect is gone"));
        };
        if effect.attention.as_deref() != Some("duplicate") {
            return Ok(StepProgress::closed("no longer held twice"));
        }
        if effect.state != State::Succeeded {
            let why = format!(
                "the provider holds this effect more than once, and it is {}: reverse the extra \
                 records by hand",
                effect.state
            );
            return self.hand_over(op_key, step, &why).await;
        }
        let reason = format!(
            "{}: the provider holds {op_key} more than once and the action's policy compensates",
            self.settings.name
        );
        let mut reversed = 0;
        for duplicate_ref in leases::duplicate_records(&self.pool, op_key).await? {
            let request = Request::on_effect(
                &verbs::REVERSE_DUPLICATE,
                op_key,
                None,
                Answers {
                    reference: duplicate_ref.clone(),
                    ..Answers::because(reason.clone())
                },
            );
            let settled = match unless_ledger_trouble(self.settler.settle(request).await)? {
                Ok(settled) => settled,
                Err(SettleError::Ledger(LedgerError::Changed(why))) => {
                    return Ok(StepProgress::waiting(why));
                }
                Err(error) => {
                    let why = format!(
                        "the provider holds this effect more than once and the policy's reversal \
                         could not be made: {}",
                        error.line()
                    );
                    return self.hand_over(op_key, step, &why).await;
                }
            };
            match reversal_state(&settled) {
                Reversal::Done { sent } => reversed += usize::from(sent),
                Reversal::InFlight => {
                    return Ok(StepProgress {
                        reversed,
                        ..StepProgress::waiting(settled.summary)
                    });
                }
                // A second operator must approve it; once approved, the
                // next try goes on with the records after it.
                Reversal::AwaitsApproval => {
                    let why = format!(
                        "the provider holds this effect more than once and the policy's reversal \
                         waits for a second operator: {}",
                        settled.summary
                    );
                    let told = self
                        .escalate(op_key, step.escalation_sink.clone(), &why)
                        .await?;
                    return Ok(StepProgress {
                        reversed,
                        escalated: told
                            .as_deref()
                            .is_some_and(|line| line.starts_with("escalated")),
                        ..StepProgress::waiting(settled.summary)
                    });
                }
                Reversal::Refused => {
                    let why = format!(
                        "the provider holds this effect more than once and the policy's reversal \
                         could not be made: {}",
                        settled.summary
                    );
                    let mut handed = self.hand_over(op_key, step, &why).await?;
                    handed.reversed = reversed;
                    return Ok(handed);
                }
            }
        }
        Ok(StepProgress {
            reversed,
            ..StepProgress::closed("every extra record is reversed")
        })
    }

    /// Sends a compensation whose sender died before it claimed the dispatch.
    async fn send_compensation(&self, step: &NextStep) -> Result<StepProgress, LedgerError> {
        let request = Request::on_effect(
            &verbs::SEND_COMPENSATION,
            step.op_key.clone(),
            None,
            Answers::because(format!("{}: {}", self.settings.name, step.why)),
        );
        match unless_ledger_trouble(self.settler.settle(request).await)? {
            Ok(settled) => Ok(StepProgress::closed(settled.summary)),
            // Sent, and the answer is not recorded: the compensation is
            // pending and dispatched, and reconciled like any other.
            Err(error @ SettleError::Unrecorded { .. }) => Ok(StepProgress::closed(error.line())),
            // Not configured, or cannot be sent as configured: asked again
            // later, once the configuration is fixed.
            Err(error) => Ok(StepProgress::waiting(error.line())),
        }
    }

    /// A person takes it from here: the step is closed once they are told.
    async fn hand_over(
        &self,
        op_key: &str,
        step: &NextStep,
        why: &str,
    ) -> Result<StepProgress, LedgerError> {
        Ok(
            match self
                .escalate(op_key, step.escalation_sink.clone(), why)
                .await?
            {
                Some(line) => StepProgress {
                    escalated: line.starts_with("escalated"),
                    ..StepProgress::closed(format!("handed to a person: {line}"))
                },
                None => StepProgress::waiting(why.to_string()),
            },
        )
    }

    async fn batch(
        &self,
        began: chrono::DateTime<chrono::Utc>,
    ) -> Result<PassSummary, LedgerError> {
        let leased = leases::lease(
            &self.pool,
            &self.settings.name,
            self.settings.terms,
            Some(began),
        )
        .await?;
        let mut summary = PassSummary {
            leased: leased.len(),
            ..PassSummary::default()
        };
        let handled: Vec<Result<Handled, LedgerError>> = stream::iter(leased)
            .map(|effect| self.handle(effect))
            .buffer_unordered(self.settings.concurrency.max(1))
            .collect()
            .await;
        for result in handled {
            let handled = result?;
            self.counters.record(&handled);
            summary.add(&handled);
        }
        Ok(summary)
    }

    /// Reconciles one leased effect and ends its lease; escalates what no
    /// rule can settle.
    async fn handle(&self, effect: Leased) -> Result<Handled, LedgerError> {
        if effect.retry_semantics == "escalate" {
            let end = self.end(&effect, "left to a person").await?;
            let escalated = !end.escalated
                && self
                    .escalate_leased(&effect, "the action's policy sends every doubt to a person")
                    .await?;
            return Ok(Handled::ByPolicy { escalated });
        }
        let reconciled = self
            .settler
            .reconcile_effect(&effect.op_key, Some(effect.version))
            .await;
        crash_point("after_finding");
        let (finding, failure) = match unless_ledger_trouble(reconciled)? {
            Ok(reconciled) => (reconciled.finding, None),
            Err(SettleError::Ledger(LedgerError::NotFound(_))) => return Ok(Handled::Changed),
            Err(SettleError::Ledger(LedgerError::Changed(_) | LedgerError::NotApplicable(_))) => {
                self.end(&effect, "changed").await?;
                return Ok(Handled::Changed);
            }
            Err(error) => ("error".to_string(), Some(error.line())),
        };
        let end = self.end(&effect, &finding).await?;
        crash_point("after_lease_end");
        // What a finding leaves owed (reversals by rule, a person to tell)
        // the ledger recorded with it as next steps, which this pass takes
        // up after its reconciliations. What is left here is a provider
        // that cannot answer, pass after pass.
        let needs_person = match finding.as_str() {
            _ if end.settled => None,
            "indeterminate" if end.tries >= self.settings.escalate_after => Some(format!(
                "the provider could not tell after {} tries",
                end.tries
            )),
            "error" if end.tries >= self.settings.escalate_after => Some(format!(
                "the reconciler cannot ask the provider ({}) after {} tries",
                failure.as_deref().unwrap_or("?"),
                end.tries
            )),
            _ => None,
        };
        let escalated = match needs_person {
            Some(why) if !end.escalated => self.escalate_leased(&effect, &why).await?,
            _ => false,
        };
        Ok(match failure {
            None => Handled::Reconciled {
                finding,
                escalated,
                reversed: 0,
            },
            Some(error) => Handled::Failed { error, escalated },
        })
    }

    async fn end(&self, effect: &Leased, finding: &str) -> Result<leases::LeaseEnd, LedgerError> {
        leases::end_lease(
            &self.pool,
            &effect.op_key,
            &self.settings.name,
            finding,
            self.settings.backoff,
            self.settings.backoff_max,
        )
        .await
    }

    /// Hands a leased effect to a person once; whether a new escalation was made.
    async fn escalate_leased(&self, effect: &Leased, why: &str) -> Result<bool, LedgerError> {
        let told = self
            .escalate(&effect.op_key, effect.escalation_sink.clone(), why)
            .await?;
        Ok(told.is_some_and(|line| line.starts_with("escalated")))
    }

    /// Hands the effect to a person: its summary (`escalated …`, or
    /// `already escalated …` for one open for the same decision), or `None`
    /// when no sink could take it. A sink that cannot be reached now is
    /// retried by the delivery loop; one that is not configured leaves the
    /// effect for the next pass (and says so in the log).
    async fn escalate(
        &self,
        op_key: &str,
        sink: Option<String>,
        why: &str,
    ) -> Result<Option<String>, LedgerError> {
        let request = Request::on_effect(
            &verbs::ESCALATE,
            op_key,
            None,
            Answers {
                sink: sink.or_else(|| self.settings.sink.clone()),
                ..Answers::because(format!("{}: {why}", self.settings.name))
            },
        );
        match unless_ledger_trouble(self.settler.settle(request).await)? {
            Ok(settled) => {
                leases::mark_escalated(&self.pool, op_key, &self.settings.name).await?;
                Ok(Some(settled.summary))
            }
            Err(error) => {
                tracing::warn!(
                    op_key = %sanitize_line(op_key),
                    "could not escalate: {}",
                    error.line()
                );
                Ok(None)
            }
        }
    }

    /// Passes until `stop` resolves; the pass under way is finished first,
    /// so no lease is left taken. A failed pass (the database went away) is
    /// logged and tried again at the next interval.
    pub async fn run(&self, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            match self.pass().await {
                Ok(summary) if summary.did_work() => tracing::info!("{}", summary.line()),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(
                        "reconcile pass failed: {}",
                        sanitize_line(&error.to_string())
                    )
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.interval) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            if *stop.borrow() {
                return;
            }
        }
    }
}

/// How far one step got.
struct StepProgress {
    /// Taken, or no longer owed: the step is closed.
    done: bool,
    /// What happened, or (still open) why not yet.
    outcome: String,
    reversed: usize,
    escalated: bool,
}

impl StepProgress {
    fn closed(outcome: impl Into<String>) -> StepProgress {
        StepProgress {
            done: true,
            outcome: outcome.into(),
            reversed: 0,
            escalated: false,
        }
    }

    fn waiting(outcome: impl Into<String>) -> StepProgress {
        StepProgress {
            done: false,
            ..StepProgress::closed(outcome)
        }
    }
}

/// Where one reversal of a duplicate record stands.
enum Reversal {
    /// Succeeded; `sent` by this request rather than found so.
    Done {
        sent: bool,
    },
    /// Sent and not yet answered: a reconciliation of the compensation settles it.
    InFlight,
    AwaitsApproval,
    /// The provider refused it, or it was settled otherwise than succeeded.
    Refused,
}

fn reversal_state(settled: &Settled) -> Reversal {
    let detail = &settled.detail;
    if detail["status"] == "awaiting_approval" {
        return Reversal::AwaitsApproval;
    }
    match detail["compensation_state"].as_str() {
        Some("succeeded") => Reversal::Done {
            sent: detail["sent"] == true,
        },
        Some("pending" | "unknown") => Reversal::InFlight,
        _ => Reversal::Refused,
    }
}

/// Lifts the ledger's own trouble (unreachable, a login refused, no schema,
/// a database error) out of a settling result: it ends the pass, and the
/// leases and claims expire. Any other error concerns one effect.
fn unless_ledger_trouble<T>(
    result: Result<T, SettleError>,
) -> Result<Result<T, SettleError>, LedgerError> {
    match result {
        Err(SettleError::Ledger(
            error @ (LedgerError::Unreachable(_)
            | LedgerError::NotPrimary(_)
            | LedgerError::LoginRefused(_)
            | LedgerError::SchemaMissing(_)
            | LedgerError::Database(_)),
        )) => Err(error),
        other => Ok(other),
    }
}
