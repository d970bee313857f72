//! The reconciler service: settles what rules can settle, without a person,
//! through the same [`Settler`] and the same audited SQL as an operator.
//!
//! Each pass leases a batch of unknown effects (and dispatched pending ones
//! past their window and a grace period), asks each one's provider, and lets
//! the ledger apply what the finding allows. An action whose policy says
//! `compensate` has a duplicate at its provider reversed by rule, within its
//! approval limit. What no rule can settle — a duplicate of any other action
//! or above that limit, a mismatch, a provider that cannot tell after
//! several tries, one that cannot be asked at all — is escalated to a
//! person, once. Any
//! number of reconcilers may run against one ledger: leases keep them off
//! each other's effects, and a killed one's leases expire.

pub mod metrics;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::ledger::LedgerPool;
use futures_util::StreamExt;
use futures_util::stream;

use crate::ledger::LedgerError;
use crate::ledger::State;
use crate::ledger::reconciler::{self as leases, LeaseTerms, Leased};
use crate::settle::{Reconciled, Request, SettleError, Settler};
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

    fn merge(&mut self, other: PassSummary) {
        self.leased += other.leased;
        for (finding, count) in other.findings {
            *self.findings.entry(finding).or_default() += count;
        }
        self.changed += other.changed;
        self.failed += other.failed;
        self.escalated += other.escalated;
        self.reversed += other.reversed;
    }

    /// One line for the log and `--once`.
    pub fn line(&self) -> String {
        if self.leased == 0 {
            return "nothing to reconcile".to_string();
        }
        let findings: Vec<String> = self
            .findings
            .iter()
            .map(|(finding, count)| format!("{count} {finding}"))
            .collect();
        let mut parts = vec![format!("{} reconciled", self.leased)];
        if !findings.is_empty() {
            parts.push(findings.join(", "));
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
        self.counters.pass_succeeded();
        Ok(summary)
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
                    .escalate(&effect, "the action's policy sends every doubt to a person")
                    .await?;
            return Ok(Handled::ByPolicy { escalated });
        }
        let reconciled = self
            .settler
            .reconcile_effect(&effect.op_key, Some(effect.version))
            .await;
        let (finding, failure, reconciled) = match reconciled {
            Ok(reconciled) => (reconciled.finding.clone(), None, Some(reconciled)),
            Err(SettleError::Ledger(LedgerError::NotFound(_))) => return Ok(Handled::Changed),
            Err(SettleError::Ledger(LedgerError::Changed(_) | LedgerError::NotApplicable(_))) => {
                self.end(&effect, "changed").await?;
                return Ok(Handled::Changed);
            }
            // The ledger itself is in trouble: end the pass; the leases expire.
            Err(SettleError::Ledger(
                error @ (LedgerError::Unreachable(_)
                | LedgerError::LoginRefused(_)
                | LedgerError::SchemaMissing(_)
                | LedgerError::Database(_)),
            )) => return Err(error),
            Err(error) => ("error".to_string(), Some(error.line()), None),
        };
        let end = self.end(&effect, &finding).await?;
        // The ledger decides whether a duplicate is settled by rule (the
        // action's policy compensates): it then records the effect as
        // succeeded, and each extra record is reversed here.
        let reversal = match &reconciled {
            Some(reconciled) if finding == "duplicate" && reconciled.state == State::Succeeded => {
                Some(self.reverse_duplicates(&effect, reconciled).await)
            }
            _ => None,
        };
        let needs_person = match (finding.as_str(), &reversal) {
            ("duplicate", Some(Ok(_))) => None,
            ("duplicate", Some(Err(why))) => Some(format!(
                "the provider holds this effect more than once and the policy's reversal could not \
                 be made: {why}"
            )),
            ("duplicate" | "mismatch", None) => Some(format!(
                "the provider reports a {finding} for this key: a person must decide"
            )),
            ("absent", _) if effect.retry_semantics == "never_retry" => Some(
                "the provider has no such effect and the action is never retried automatically: \
                 decide whether to send it again"
                    .to_string(),
            ),
            _ if end.settled => None,
            ("indeterminate", _) if end.tries >= self.settings.escalate_after => Some(format!(
                "the provider could not tell after {} tries",
                end.tries
            )),
            ("error", _) if end.tries >= self.settings.escalate_after => Some(format!(
                "the reconciler cannot ask the provider ({}) after {} tries",
                failure.as_deref().unwrap_or("?"),
                end.tries
            )),
            _ => None,
        };
        let reversed = match &reversal {
            Some(Ok(reversed)) => *reversed,
            _ => 0,
        };
        let escalated = match needs_person {
            Some(why) if !end.escalated => self.escalate(&effect, &why).await?,
            _ => false,
        };
        Ok(match failure {
            None => Handled::Reconciled {
                finding,
                escalated,
                reversed,
            },
            Some(error) => Handled::Failed { error, escalated },
        })
    }

    /// The action's policy compensates: the ledger recorded the effect as
    /// its provider's first record, and each other record is reversed by a
    /// compensation of its own. How many were reversed, or why not: above
    /// the approval limit, a provider that refused, an answer not known.
    async fn reverse_duplicates(
        &self,
        effect: &Leased,
        reconciled: &Reconciled,
    ) -> Result<usize, String> {
        let reason = format!(
            "{}: the provider holds {} more than once and the action's policy compensates",
            self.settings.name, effect.op_key
        );
        let mut reversed = 0;
        for duplicate_ref in reconciled.external_refs.iter().skip(1) {
            let request = Request::ReverseDuplicate {
                op_key: effect.op_key.clone(),
                seen: None,
                duplicate_ref: duplicate_ref.clone(),
                reason: reason.clone(),
            };
            let settled = self
                .settler
                .settle(request)
                .await
                .map_err(|error| error.line())?;
            // Above the approval limit it waits for a second operator; a
            // provider that refused or did not answer is a person's too.
            if settled.detail["compensation_state"] != "succeeded" {
                return Err(settled.summary);
            }
            reversed += 1;
        }
        Ok(reversed)
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

    /// Hands the effect to a person once. A sink that cannot be reached now
    /// is retried by the escalation loop; one that is not configured leaves
    /// the effect for the next pass (and says so in the log).
    async fn escalate(&self, effect: &Leased, why: &str) -> Result<bool, LedgerError> {
        let op_key = effect.op_key.as_str();
        let request = Request::Escalate {
            op_key: op_key.to_string(),
            seen: None,
            sink: effect
                .escalation_sink
                .clone()
                .or_else(|| self.settings.sink.clone()),
            reason: format!("{}: {why}", self.settings.name),
        };
        match self.settler.settle(request).await {
            Ok(_) => {
                leases::mark_escalated(&self.pool, op_key, &self.settings.name).await?;
                Ok(true)
            }
            Err(error) => {
                tracing::warn!(
                    op_key = %sanitize_line(op_key),
                    "could not escalate: {}",
                    error.line()
                );
                Ok(false)
            }
        }
    }

    /// Passes until `stop` resolves; the pass under way is finished first,
    /// so no lease is left taken. A failed pass (the database went away) is
    /// logged and tried again at the next interval.
    pub async fn run(&self, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            match self.pass().await {
                Ok(summary) if summary.leased > 0 => tracing::info!("{}", summary.line()),
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
