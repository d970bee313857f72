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
use futures_util::future::BoxFuture;
use verbs::{Answers, Field, On, Runs, Subject, Verb};

pub use escalate::DeliveryOutcome;
pub use reconcile::Reconciled;

/// A verb asked of the settling machinery: what it is about and what the
/// operator gave. Made by [`Verb::request`], which says whether they fit;
/// carried out by the verb's row ([`Runs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub verb: &'static Verb,
    pub subject: Subject,
    pub answers: Answers,
}

/// A verb being carried out.
pub type Running<'a> = BoxFuture<'a, Result<Settled, SettleError>>;

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
    /// `verb` on one effect, at the version seen (`None`: the current
    /// one); whether it fits is said when it is settled.
    pub fn on_effect(
        verb: &'static Verb,
        op_key: impl Into<String>,
        seen: Option<i64>,
        answers: Answers,
    ) -> Request {
        Request {
            verb,
            subject: Subject::Effect {
                op_key: op_key.into(),
                seen,
            },
            answers,
        }
    }

    /// `verb` on one escalation.
    pub fn on_escalation(
        verb: &'static Verb,
        escalation_key: impl Into<String>,
        answers: Answers,
    ) -> Request {
        Request {
            verb,
            subject: Subject::Escalation {
                escalation_key: escalation_key.into(),
            },
            answers,
        }
    }

    /// The verb's name, in a sentence (`resolve escalation` for an
    /// escalation's).
    pub fn name(&self) -> String {
        match self.verb.on {
            On::Effect => self.verb.name.to_string(),
            On::Escalation => format!("{} escalation", self.verb.name),
        }
    }

    /// Whether the subject is one the verb acts on, with what it must ask.
    pub fn fits(&self) -> bool {
        self.verb.acts_on(&self.subject)
            && (!self.verb.asks(Field::Outcome) || self.answers.outcome.is_some())
    }

    /// Every key the request acts on, in the order the operator saw them.
    pub fn keys(&self) -> Vec<String> {
        match &self.subject {
            Subject::Effect { op_key, .. } => vec![op_key.clone()],
            Subject::Pane { targets } => targets.iter().map(|(op_key, _)| op_key.clone()).collect(),
            Subject::Escalation { escalation_key } => vec![escalation_key.clone()],
            Subject::Escalations { escalation_keys } => escalation_keys.clone(),
        }
    }

    /// The effect (or escalation) key the request is about; the first of many.
    pub fn key(&self) -> &str {
        match &self.subject {
            Subject::Effect { op_key, .. } => op_key,
            Subject::Pane { targets } => targets
                .first()
                .map(|(op_key, _)| op_key.as_str())
                .unwrap_or(""),
            Subject::Escalation { escalation_key } => escalation_key,
            Subject::Escalations { escalation_keys } => {
                escalation_keys.first().map(String::as_str).unwrap_or("")
            }
        }
    }

    /// The effect and the version seen, when the request is about one.
    pub(crate) fn effect(&self) -> Option<(&str, Option<i64>)> {
        match &self.subject {
            Subject::Effect { op_key, seen } => Some((op_key, *seen)),
            _ => None,
        }
    }

    /// Every `(op_key, version seen)`, when the request is about a pane.
    pub(crate) fn pane(&self) -> Option<&[(String, i64)]> {
        match &self.subject {
            Subject::Pane { targets } => Some(targets),
            _ => None,
        }
    }

    /// The escalation's key, when the request is about one.
    pub(crate) fn escalation(&self) -> Option<&str> {
        match &self.subject {
            Subject::Escalation { escalation_key } => Some(escalation_key),
            _ => None,
        }
    }

    /// Every escalation's key, when the request is about a view of them.
    pub(crate) fn escalations(&self) -> Option<&[String]> {
        match &self.subject {
            Subject::Escalations { escalation_keys } => Some(escalation_keys),
            _ => None,
        }
    }

    /// Why, as the operator gave it.
    pub(crate) fn reason(&self) -> &str {
        &self.answers.reason
    }

    /// A request that does not fit its verb, refused before anything is written.
    fn unfit(&self) -> SettleError {
        let about = match &self.subject {
            Subject::Effect { .. } => "an effect",
            Subject::Pane { .. } => "every item of a pane",
            Subject::Escalation { .. } => "an escalation",
            Subject::Escalations { .. } => "every escalation of a view",
        };
        SettleError::Invalid(if self.verb.acts_on(&self.subject) {
            format!(
                "{} needs an outcome (--succeeded REF or --failed)",
                self.name()
            )
        } else {
            format!("{} is not done to {about}", self.name())
        })
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
    ReadOnly(String),
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

    /// The one way a verb is carried out, as its row says, and the
    /// ledger-side read-only gate: every verb writes (a reconciliation
    /// stores its finding), so read-only refuses all.
    pub async fn settle(&self, request: Request) -> Result<Settled, SettleError> {
        if self.read_only {
            return Err(SettleError::ReadOnly(request.name()));
        }
        if !request.fits() {
            return Err(request.unfit());
        }
        match request.verb.runs {
            Runs::Call(call) => self.operate(call, &request).await,
            Runs::With(run) => run(self, &request).await,
        }
    }

    /// An operator call of the common shape on one effect, or on every
    /// item of a pane.
    async fn operate(
        &self,
        call: &'static OperatorCall,
        request: &Request,
    ) -> Result<Settled, SettleError> {
        match &request.subject {
            Subject::Effect { op_key, seen } => {
                let seen = self.seen(op_key, *seen).await?;
                let outcome = call
                    .call(
                        &self.pool,
                        op_key,
                        seen,
                        &self.operator,
                        &request.answers.reason,
                    )
                    .await?;
                Ok(simple_report(call.done, op_key, &outcome))
            }
            Subject::Pane { targets } => Ok(self
                .operate_many(call, targets, &request.answers.reason)
                .await),
            Subject::Escalation { .. } | Subject::Escalations { .. } => Err(request.unfit()),
        }
    }

    /// `call` on every `(op_key, version seen)`, one after the other, each
    /// in its own transaction: a failure stops nothing else. Says how many
    /// were done, skipped (changed since, or no longer applicable) and
    /// failed.
    async fn operate_many(
        &self,
        call: &'static OperatorCall,
        targets: &[(String, i64)],
        reason: &str,
    ) -> Settled {
        let mut tally = Tally::default();
        for (op_key, seen) in targets {
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
            return Err(SettleError::ReadOnly("reconcile".into()));
        }
        let gate = Arc::new(tokio::sync::Semaphore::new(BULK_CONCURRENCY));
        let mut tasks = tokio::task::JoinSet::new();
        for (index, (op_key, seen)) in items.into_iter().enumerate() {
            let settler = self.clone();
            let gate = gate.clone();
            tasks.spawn(async move {
                let _permit = gate.acquire_owned().await;
                let result = settler
                    .reconcile_effect(&op_key, Some(seen))
                    .await
                    .map(|reconciled| reconciled.settled);
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
}

/// Resolve by hand, with evidence: the row of [`verbs::RESOLVE`].
pub(super) fn resolve<'a>(settler: &'a Settler, request: &'a Request) -> Running<'a> {
    Box::pin(async move {
        let (Subject::Effect { op_key, seen }, Some(outcome)) =
            (&request.subject, request.answers.outcome)
        else {
            return Err(request.unfit());
        };
        let resolution = match outcome {
            verbs::Outcome::Succeeded => Resolution::Succeeded {
                external_ref: request.answers.reference.clone(),
            },
            verbs::Outcome::Failed => Resolution::Failed {
                retryable: request.answers.retryable,
            },
        };
        let seen = settler.seen(op_key, *seen).await?;
        let outcome = actions::resolve(
            &settler.pool,
            op_key,
            seen,
            &settler.operator,
            &request.answers.reason,
            &resolution,
        )
        .await?;
        Ok(simple_report("resolved", op_key, &outcome))
    })
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
    fn every_request_names_itself_and_its_key() {
        let effect = Subject::Effect {
            op_key: "k".into(),
            seen: None,
        };
        let escalation = Subject::Escalation {
            escalation_key: "e".into(),
        };
        let because = Answers {
            reason: "r".into(),
            ..Answers::default()
        };
        for (verb, subject, name, key) in [
            (&verbs::RECONCILE, effect.clone(), "reconcile", "k"),
            (&verbs::ANNOTATE, effect, "annotate", "k"),
            (
                &verbs::RESOLVE_ESCALATION,
                escalation,
                "resolve escalation",
                "e",
            ),
        ] {
            let request = verb.request(subject, because.clone()).unwrap();
            assert_eq!((request.name().as_str(), request.key()), (name, key));
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
