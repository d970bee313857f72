//! Settling effects: reconcile with the provider, compensate, escalate,
//! resolve, release, cancel, annotate — the orchestration the CLI and the
//! console share. Every write is one SQL function call, in one transaction
//! with its audit entry, refused if the effect changed since the operator
//! looked. Read-only is enforced here, in [`Settler::settle`], for every
//! writing request; a console connected as `effect_readonly` is refused by
//! the database itself whatever this says.

mod compensate;
mod escalate;
pub mod finding;
mod reconcile;
pub mod verbs;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::ledger::LedgerPool;
use serde::Serialize;
use serde_json::{Value, json};
use thiserror::Error;

use crate::adapters::provider::Provider;
use crate::adapters::sink::Sink;
use crate::config::Config;
use crate::ledger::actions::{self, ActionOutcome, OperatorCall, Resolution, SeenVersion};
use crate::ledger::history;
use crate::ledger::{Effect, LedgerError};
use crate::text::sanitize_line;

pub use escalate::DeliveryOutcome;
pub use reconcile::Reconciled;

/// Everything an operator can ask of the settling machinery. `seen` is the
/// version the operator saw; `None` reads the current one first.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Reconcile {
        op_key: String,
        seen: Option<i64>,
    },
    /// Every `(op_key, version seen)`, a few at a time; each succeeds or fails on its own.
    ReconcileMany {
        targets: Vec<(String, i64)>,
    },
    /// One operator call for every `(op_key, version seen)` of a (filtered)
    /// pane, one transaction and one audit entry each; an effect changed
    /// since, or to which the call no longer applies, is skipped.
    OperatorMany {
        call: &'static OperatorCall,
        targets: Vec<(String, i64)>,
        reason: String,
    },
    Compensate {
        op_key: String,
        seen: Option<i64>,
        reason: String,
    },
    /// Reverse one extra record of an effect its provider holds twice.
    ReverseDuplicate {
        op_key: String,
        seen: Option<i64>,
        duplicate_ref: String,
        reason: String,
    },
    /// Send a compensation that exists but was never dispatched (its
    /// sender died, or it was approved and the approver's console closed).
    SendCompensation {
        compensation_key: String,
        reason: String,
    },
    Escalate {
        op_key: String,
        seen: Option<i64>,
        /// A configured sink; `None` picks the only one configured.
        sink: Option<String>,
        reason: String,
    },
    /// Escalate every `(op_key, version seen)` of a (filtered) pane to one
    /// sink: one escalation (and audit entry) each, delivered in the
    /// background's way; an effect changed since is skipped.
    EscalateMany {
        targets: Vec<(String, i64)>,
        sink: Option<String>,
        reason: String,
    },
    Resolve {
        op_key: String,
        seen: Option<i64>,
        reason: String,
        resolution: Resolution,
    },
    /// An operator action of the common shape (release, cancel, annotate, …).
    Operator {
        call: &'static OperatorCall,
        op_key: String,
        seen: Option<i64>,
        reason: String,
    },
    Approve {
        op_key: String,
        seen: Option<i64>,
        reason: String,
    },
    Reject {
        op_key: String,
        seen: Option<i64>,
        reason: String,
    },
    Acknowledge {
        escalation_key: String,
        reason: String,
    },
    ResolveEscalation {
        escalation_key: String,
        reason: String,
    },
    /// Acknowledge every escalation named, one after the other, each in
    /// its own transaction with its audit entry; one acknowledged or
    /// resolved since is skipped.
    AcknowledgeMany {
        escalation_keys: Vec<String>,
        reason: String,
    },
    /// Resolve every escalation named, as [`Request::AcknowledgeMany`].
    ResolveEscalationMany {
        escalation_keys: Vec<String>,
        reason: String,
    },
}

/// How the items of a bulk action went, each in its own transaction: done,
/// skipped (changed since, no longer applicable, gone) and failed, with the
/// first failure kept to say.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) done: usize,
    pub(crate) skipped: usize,
    pub(crate) failed: usize,
    first_failure: Option<String>,
}

impl Tally {
    /// Counts a failed item as skipped or failed; the caller counts what a
    /// successful one was.
    pub(crate) fn counted<T>(&mut self, op_key: &str, result: Result<T, LedgerError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(
                LedgerError::Changed(_) | LedgerError::NotApplicable(_) | LedgerError::NotFound(_),
            ) => {
                self.skipped += 1;
                None
            }
            Err(error) => {
                self.failed += 1;
                self.first_failure
                    .get_or_insert_with(|| format!("{op_key}: {error}"));
                None
            }
        }
    }

    /// ` (first: …)` when an item failed.
    pub(crate) fn first_failure(&self) -> String {
        self.first_failure
            .as_ref()
            .map(|first| format!(" (first: {})", sanitize_line(first)))
            .unwrap_or_default()
    }
}

impl Request {
    pub fn name(&self) -> &'static str {
        match self {
            Request::Reconcile { .. } | Request::ReconcileMany { .. } => "reconcile",
            Request::Compensate { .. } => "compensate",
            Request::ReverseDuplicate { .. } => "reverse a duplicate",
            Request::SendCompensation { .. } => "send a compensation",
            Request::Escalate { .. } | Request::EscalateMany { .. } => "escalate",
            Request::Resolve { .. } => "resolve",
            Request::Operator { call, .. } | Request::OperatorMany { call, .. } => call.name,
            Request::Approve { .. } => "approve",
            Request::Reject { .. } => "reject",
            Request::Acknowledge { .. } | Request::AcknowledgeMany { .. } => "acknowledge",
            Request::ResolveEscalation { .. } | Request::ResolveEscalationMany { .. } => {
                "resolve escalation"
            }
        }
    }

    /// The effect (or escalation) key the request is about; the first of many.
    pub fn key(&self) -> &str {
        match self {
            Request::Reconcile { op_key, .. }
            | Request::Compensate { op_key, .. }
            | Request::ReverseDuplicate { op_key, .. }
            | Request::Escalate { op_key, .. }
            | Request::Resolve { op_key, .. }
            | Request::Operator { op_key, .. }
            | Request::Approve { op_key, .. }
            | Request::Reject { op_key, .. } => op_key,
            Request::ReconcileMany { targets }
            | Request::OperatorMany { targets, .. }
            | Request::EscalateMany { targets, .. } => targets
                .first()
                .map(|(op_key, _)| op_key.as_str())
                .unwrap_or(""),
            Request::Acknowledge { escalation_key, .. }
            | Request::ResolveEscalation { escalation_key, .. } => escalation_key,
            Request::AcknowledgeMany {
                escalation_keys, ..
            }
            | Request::ResolveEscalationMany {
                escalation_keys, ..
            } => escalation_keys.first().map(String::as_str).unwrap_or(""),
            Request::SendCompensation {
                compensation_key, ..
            } => compensation_key,
        }
    }
}

/// What happened, for a status bar (`summary`, one safe line) and for
/// `--format json` or a detail view (`detail`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settled {
    pub summary: String,
    pub detail: Value,
}

impl Settled {
    fn new(summary: impl AsRef<str>, detail: Value) -> Settled {
        Settled {
            summary: sanitize_line(summary.as_ref()),
            detail,
        }
    }
}

/// Why a request did not happen, or not entirely; one line each.
#[derive(Debug, Error)]
pub enum SettleError {
    #[error("read-only: {0} refused (this console runs with --read-only or read_only = true)")]
    ReadOnly(&'static str),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A provider that is not configured or cannot make the request: nothing was sent.
    #[error("{0}")]
    Provider(String),
    /// A sink that is not configured or cannot be used.
    #[error("{0}")]
    Sink(String),
    #[error("{0}")]
    Invalid(String),
    /// The request left, but what came back could not be written down.
    #[error("{what} was sent but its answer could not be recorded ({cause}): reconcile {key}")]
    Unrecorded {
        what: &'static str,
        key: String,
        cause: String,
    },
}

impl SettleError {
    /// The message, safe for a terminal.
    pub fn line(&self) -> String {
        sanitize_line(&self.to_string())
    }
}

/// One item of a bulk reconciliation.
#[derive(Debug)]
pub struct BulkItem {
    pub op_key: String,
    pub result: Result<Settled, SettleError>,
}

/// How many bulk reconciliations run at once: enough to hide latency,
/// few enough not to flood a provider.
const BULK_CONCURRENCY: usize = 4;

#[derive(Debug)]
struct Adapters {
    providers: BTreeMap<String, Result<Provider, String>>,
    sinks: BTreeMap<String, Result<Sink, String>>,
}

impl Adapters {
    fn build(config: &Config) -> Adapters {
        Adapters {
            providers: config
                .providers
                .iter()
                .map(|(name, provider)| {
                    (
                        name.clone(),
                        Provider::build(name, provider).map_err(|e| e.to_string()),
                    )
                })
                .collect(),
            sinks: config
                .sinks
                .iter()
                .map(|(name, sink)| {
                    (
                        name.clone(),
                        Sink::build(name, sink).map_err(|e| e.to_string()),
                    )
                })
                .collect(),
        }
    }
}

/// Settles effects for one operator; cheap to clone (everything is shared).
#[derive(Debug, Clone)]
pub struct Settler {
    pool: LedgerPool,
    config: Arc<Config>,
    operator: String,
    read_only: bool,
    adapters: Arc<Adapters>,
}

impl Settler {
    /// Adapters are built now; one that is misconfigured reports its
    /// problem when used (and in [`Settler::adapter_problems`]), without
    /// keeping the others from working.
    pub fn new(
        pool: LedgerPool,
        config: Arc<Config>,
        operator: impl Into<String>,
        read_only: bool,
    ) -> Settler {
        let adapters = Arc::new(Adapters::build(&config));
        Settler {
            pool,
            config,
            operator: operator.into(),
            read_only,
            adapters,
        }
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The one dispatcher, and the ledger-side read-only gate: every request
    /// writes (a reconciliation stores its finding), so read-only refuses all.
    pub async fn settle(&self, request: Request) -> Result<Settled, SettleError> {
        if self.read_only {
            return Err(SettleError::ReadOnly(request.name()));
        }
        match request {
            Request::Reconcile { op_key, seen } => self.reconcile(&op_key, seen).await,
            Request::ReconcileMany { targets } => {
                Ok(bulk_settled(&self.reconcile_many(targets).await?))
            }
            Request::OperatorMany {
                call,
                targets,
                reason,
            } => Ok(self.operate_many(call, targets, &reason).await),
            Request::Compensate {
                op_key,
                seen,
                reason,
            } => self.compensate(&op_key, seen, &reason).await,
            Request::ReverseDuplicate {
                op_key,
                seen,
                duplicate_ref,
                reason,
            } => {
                self.reverse_duplicate(&op_key, seen, &duplicate_ref, &reason)
                    .await
            }
            Request::SendCompensation {
                compensation_key,
                reason,
            } => self.send_compensation(&compensation_key, &reason).await,
            Request::Escalate {
                op_key,
                seen,
                sink,
                reason,
            } => self.escalate(&op_key, seen, sink.as_deref(), &reason).await,
            Request::EscalateMany {
                targets,
                sink,
                reason,
            } => self.escalate_many(targets, sink.as_deref(), &reason).await,
            Request::Resolve {
                op_key,
                seen,
                reason,
                resolution,
            } => self.resolve(&op_key, seen, &reason, &resolution).await,
            Request::Operator {
                call,
                op_key,
                seen,
                reason,
            } => {
                let seen = self.seen(&op_key, seen).await?;
                let outcome = call
                    .call(&self.pool, &op_key, seen, &self.operator, &reason)
                    .await?;
                Ok(simple_report(call.done, &op_key, &outcome))
            }
            Request::Approve {
                op_key,
                seen,
                reason,
            } => self.approve(&op_key, seen, &reason).await,
            Request::Reject {
                op_key,
                seen,
                reason,
            } => self.reject(&op_key, seen, &reason).await,
            Request::Acknowledge {
                escalation_key,
                reason,
            } => self.close_escalation(&escalation_key, &reason, false).await,
            Request::ResolveEscalation {
                escalation_key,
                reason,
            } => self.close_escalation(&escalation_key, &reason, true).await,
            Request::AcknowledgeMany {
                escalation_keys,
                reason,
            } => {
                self.close_escalations(&escalation_keys, &reason, false)
                    .await
            }
            Request::ResolveEscalationMany {
                escalation_keys,
                reason,
            } => {
                self.close_escalations(&escalation_keys, &reason, true)
                    .await
            }
        }
    }

    /// `call` on every `(op_key, version seen)`, one after the other, each
    /// in its own transaction: a failure stops nothing else. Says how many
    /// were done, skipped (changed since, or no longer applicable) and
    /// failed.
    async fn operate_many(
        &self,
        call: &'static OperatorCall,
        targets: Vec<(String, i64)>,
        reason: &str,
    ) -> Settled {
        let mut tally = Tally::default();
        for (op_key, seen) in &targets {
            let called = call
                .call(
                    &self.pool,
                    op_key,
                    SeenVersion(*seen),
                    &self.operator,
                    reason,
                )
                .await;
            if tally.counted(op_key, called).is_some() {
                tally.done += 1;
            }
        }
        let Tally {
            done,
            skipped,
            failed,
            ..
        } = tally;
        Settled::new(
            format!(
                "{}: {done} of {} done, {skipped} skipped (changed since or no longer applicable), {failed} failed{}",
                call.name,
                targets.len(),
                tally.first_failure()
            ),
            json!({ "action": call.name, "done": done, "skipped": skipped, "failed": failed }),
        )
    }

    /// Reconciles every `(op_key, version seen)`, a few at a time; each
    /// item succeeds or fails on its own.
    pub async fn reconcile_many(
        &self,
        items: Vec<(String, i64)>,
    ) -> Result<Vec<BulkItem>, SettleError> {
        if self.read_only {
            return Err(SettleError::ReadOnly("reconcile"));
        }
        let gate = Arc::new(tokio::sync::Semaphore::new(BULK_CONCURRENCY));
        let mut tasks = tokio::task::JoinSet::new();
        for (index, (op_key, seen)) in items.into_iter().enumerate() {
            let settler = self.clone();
            let gate = gate.clone();
            tasks.spawn(async move {
                let _permit = gate.acquire_owned().await;
                let result = settler.reconcile(&op_key, Some(seen)).await;
                (index, BulkItem { op_key, result })
            });
        }
        let mut done = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(item) => done.push(item),
                Err(error) => {
                    return Err(SettleError::Invalid(format!(
                        "a reconciliation task failed: {error}"
                    )));
                }
            }
        }
        done.sort_by_key(|(index, _)| *index);
        Ok(done.into_iter().map(|(_, item)| item).collect())
    }

    /// The effect as it is now, or NotFound.
    async fn effect(&self, op_key: &str) -> Result<Effect, SettleError> {
        history::find_effect(&self.pool, op_key)
            .await?
            .ok_or_else(|| SettleError::Ledger(LedgerError::NotFound(op_key.to_string())))
    }

    /// The effect and the version to act on: the one the operator saw, which
    /// must still be current (checked here before any provider is called,
    /// and again by the SQL function that writes).
    async fn look(&self, op_key: &str, seen: Option<i64>) -> Result<(Effect, i64), SettleError> {
        let effect = self.effect(op_key).await?;
        match seen {
            Some(seen) if seen != effect.version => Err(changed(op_key, effect.version, seen)),
            Some(seen) => Ok((effect, seen)),
            None => {
                let version = effect.version;
                Ok((effect, version))
            }
        }
    }

    async fn seen(&self, op_key: &str, seen: Option<i64>) -> Result<SeenVersion, SettleError> {
        match seen {
            Some(seen) => Ok(SeenVersion(seen)),
            None => Ok(SeenVersion(self.effect(op_key).await?.version)),
        }
    }

    fn provider_for(&self, effect: &Effect) -> Result<&Provider, SettleError> {
        let name = effect.provider.as_deref().ok_or_else(|| {
            SettleError::Provider(format!(
                "{} names no provider: nothing to ask; resolve it by hand with evidence",
                sanitize_line(&effect.op_key)
            ))
        })?;
        match self.adapters.providers.get(name) {
            Some(Ok(provider)) => Ok(provider),
            Some(Err(problem)) => Err(SettleError::Provider(problem.clone())),
            None => Err(SettleError::Provider(format!(
                "provider {} is not configured: add [providers.{}] to the config file",
                sanitize_line(name),
                sanitize_line(name)
            ))),
        }
    }

    fn sink(&self, name: &str) -> Result<&Sink, String> {
        match self.adapters.sinks.get(name) {
            Some(Ok(sink)) => Ok(sink),
            Some(Err(problem)) => Err(problem.clone()),
            None => Err(format!(
                "sink {} is not configured: add [sinks.{}] to the config file",
                sanitize_line(name),
                sanitize_line(name)
            )),
        }
    }

    async fn resolve(
        &self,
        op_key: &str,
        seen: Option<i64>,
        reason: &str,
        resolution: &Resolution,
    ) -> Result<Settled, SettleError> {
        let seen = self.seen(op_key, seen).await?;
        let outcome =
            actions::resolve(&self.pool, op_key, seen, &self.operator, reason, resolution).await?;
        Ok(simple_report("resolved", op_key, &outcome))
    }
}

fn require_reason(reason: &str, action: &str) -> Result<(), SettleError> {
    if reason.trim().is_empty() {
        Err(SettleError::Invalid(format!(
            "{action} needs a reason (--reason)"
        )))
    } else {
        Ok(())
    }
}

fn changed(op_key: &str, now: i64, seen: i64) -> SettleError {
    SettleError::Ledger(LedgerError::Changed(format!(
        "effect {} changed since you looked (version {now} now, you saw {seen})",
        sanitize_line(op_key)
    )))
}

/// One line for a bulk reconciliation: how many, and how many of each
/// finding (`reconciled 52 of 53: absent 40, exists_once 12; 1 failed`).
pub fn bulk_settled(items: &[BulkItem]) -> Settled {
    let total = items.len();
    let failed = items.iter().filter(|item| item.result.is_err()).count();
    let mut findings = BTreeMap::<&str, usize>::new();
    for report in items.iter().filter_map(|item| item.result.as_ref().ok()) {
        let finding = report.detail.get("finding").and_then(Value::as_str);
        *findings.entry(finding.unwrap_or("?")).or_default() += 1;
    }
    let tally: Vec<String> = findings.iter().map(|(f, n)| format!("{f} {n}")).collect();
    let failures = if failed > 0 {
        format!("; {failed} failed")
    } else {
        String::new()
    };
    Settled::new(
        format!(
            "reconciled {} of {total}: {}{failures}",
            total - failed,
            tally.join(", ")
        ),
        json!({ "action": "reconcile", "reconciled": total - failed, "failed": failed,
                "findings": findings }),
    )
}

fn simple_report(done: &str, op_key: &str, outcome: &ActionOutcome) -> Settled {
    Settled::new(
        format!(
            "{done} {}: now {} (version {}, audit #{})",
            op_key, outcome.state, outcome.version, outcome.audit_seq
        ),
        json!({ "action": done, "op_key": op_key, "state": outcome.state,
                "version": outcome.version, "audit_seq": outcome.audit_seq }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_names_itself_and_writes() {
        let requests = [
            Request::Reconcile {
                op_key: "k".into(),
                seen: None,
            },
            Request::Acknowledge {
                escalation_key: "e".into(),
                reason: "r".into(),
            },
            Request::Operator {
                call: &actions::ANNOTATE,
                op_key: "k".into(),
                seen: Some(1),
                reason: "n".into(),
            },
        ];
        for request in requests {
            assert!(!request.name().is_empty());
            assert!(!request.key().is_empty());
        }
    }

    #[test]
    fn a_bulk_reconciliation_counts_each_finding() {
        let item = |key: &str, finding: Option<&str>| BulkItem {
            op_key: key.into(),
            result: match finding {
                Some(finding) => Ok(Settled::new("ok", json!({ "finding": finding }))),
                None => Err(SettleError::Invalid("changed".into())),
            },
        };
        let report = bulk_settled(&[
            item("a", Some("absent")),
            item("b", Some("exists_once")),
            item("c", Some("absent")),
            item("d", None),
        ]);
        assert_eq!(
            report.summary,
            "reconciled 3 of 4: absent 2, exists_once 1; 1 failed"
        );
        assert_eq!(report.detail["findings"]["absent"], 2);
        let all_fine = bulk_settled(&[item("a", Some("absent"))]);
        assert_eq!(all_fine.summary, "reconciled 1 of 1: absent 1");
    }

    #[test]
    fn reports_are_one_safe_line() {
        let report = Settled::new("done \u{1b}[2J\nnext", Value::Null);
        assert_eq!(report.summary, "done \\u{001B}[2J next");
    }
}
