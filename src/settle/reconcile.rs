//! Reconcile: ask the provider, compare, store the finding with its
//! evidence and duration, and let the ledger apply the state change its
//! state machine allows (docs/contract.md). A timeout, reset, 5xx or
//! unreadable answer is indeterminate: stored, and the effect stays as it
//! is.

use std::time::Instant;

use serde_json::{Value, json};

use super::finding::{Assessment, assess};
use super::{Request, Running, SettleError, Settled, Settler, bulk_settled};
use crate::adapters::provider::{EffectQuery, Provider};
use crate::ledger::State;
use crate::ledger::actions::{self, Finding, ReconciliationOutcome, SeenVersion};

/// A reconciliation as the ledger recorded it, for a caller that decides
/// what comes next (the reconciler service), and its report.
#[derive(Debug, Clone, PartialEq)]
pub struct Reconciled {
    /// The finding as recorded, which the ledger may have narrowed.
    pub finding: String,
    pub state_before: State,
    pub state: State,
    /// The provider records the finding rests on, as the provider listed them.
    pub external_refs: Vec<String>,
    pub settled: Settled,
}

impl Settler {
    /// Asks the provider about one effect and records the finding; refused
    /// like any writing request when read-only.
    pub async fn reconcile_effect(
        &self,
        op_key: &str,
        seen: Option<i64>,
    ) -> Result<Reconciled, SettleError> {
        if self.read_only {
            return Err(SettleError::ReadOnly("reconcile".into()));
        }
        let (effect, seen) = self.look(op_key, seen).await?;
        let provider = self.provider_for(&effect)?;
        let mut answer = ask(provider, &EffectQuery::from(&effect)).await?;
        // What the provider said is stored and shown: never with a secret it echoed.
        answer.evidence = self.config.secret_redactor().value(&answer.evidence);
        let finding = Finding {
            provider: provider.name().to_string(),
            finding: answer.assessment.finding.as_str().to_string(),
            external_refs: answer.assessment.external_refs.clone(),
            evidence: answer.evidence.clone(),
            duration_ms: answer.duration_ms,
        };
        let recorded = actions::record_reconciliation(
            &self.pool,
            op_key,
            SeenVersion(seen),
            &self.operator,
            &finding,
        )
        .await?;
        let settled = report(op_key, provider.name(), effect.state, &answer, &recorded);
        Ok(Reconciled {
            finding: recorded.finding,
            state_before: effect.state,
            state: recorded.state,
            external_refs: answer.assessment.external_refs,
            settled,
        })
    }
}

/// The provider's answer about one effect, assessed, with the evidence to
/// store and how long the provider took.
struct Answer {
    assessment: Assessment,
    evidence: Value,
    duration_ms: i32,
}

/// Asks the provider. An answer that could not be had is indeterminate,
/// except a configuration problem: then nothing was asked, and the
/// operator must fix the configuration.
async fn ask(provider: &Provider, query: &EffectQuery) -> Result<Answer, SettleError> {
    let started = Instant::now();
    let looked = provider.lookup(query).await;
    let duration_ms = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
    let (assessment, evidence) = match looked {
        Ok(lookup) => {
            let assessment = assess(query, &lookup.effects);
            let mut evidence = lookup.evidence;
            if let Some(map) = evidence.as_object_mut() {
                map.insert("effects".into(), json!(lookup.effects));
                if !assessment.differences.is_empty() {
                    map.insert("differences".into(), json!(assessment.differences));
                }
                if assessment.ignored > 0 {
                    map.insert("ignored_other_keys".into(), json!(assessment.ignored));
                }
            }
            (assessment, evidence)
        }
        Err(error) if error.is_config() => {
            return Err(SettleError::Provider(error.to_string()));
        }
        Err(error) => (Assessment::indeterminate(), error.evidence(provider.name())),
    };
    Ok(Answer {
        assessment,
        evidence,
        duration_ms,
    })
}

/// The report of a recorded reconciliation, a line and its JSON.
fn report(
    op_key: &str,
    provider: &str,
    state_before: State,
    answer: &Answer,
    recorded: &ReconciliationOutcome,
) -> Settled {
    let Answer {
        assessment,
        evidence,
        duration_ms,
    } = answer;
    let refs = if assessment.external_refs.is_empty() {
        String::new()
    } else {
        format!(" [{}]", assessment.external_refs.join(", "))
    };
    let why = evidence
        .get("message")
        .and_then(|m| m.as_str())
        .map(|m| format!(" ({m})"))
        .unwrap_or_default();
    // What the ledger recorded is what happened; the provider's answer
    // is shown beside it when the ledger narrowed it.
    let provider_said = assessment.finding.as_str();
    let narrowed = if recorded.finding == provider_said {
        String::new()
    } else {
        format!(" (provider said {provider_said})")
    };
    Settled::new(
        format!(
            "reconciled {op_key} with {provider}: {}{narrowed}{refs}{why} — {state_before} → {} in {duration_ms} ms",
            recorded.finding, recorded.state
        ),
        json!({
            "action": "reconcile",
            "op_key": op_key,
            "provider": provider,
            "finding": recorded.finding,
            "provider_finding": assessment.finding,
            "external_refs": assessment.external_refs,
            "differences": assessment.differences,
            "state_before": state_before,
            "state": recorded.state,
            "version": recorded.version,
            "reconciliation_id": recorded.reconciliation_id,
            "audit_seq": recorded.audit_seq,
            "duration_ms": duration_ms,
            "evidence": evidence,
        }),
    )
}

/// Ask the provider about an effect, or every item of a pane: the row of
/// [`super::verbs::RECONCILE`].
pub(super) fn run<'a>(settler: &'a Settler, request: &'a Request) -> Running<'a> {
    Box::pin(async move {
        if let Some((op_key, seen)) = request.effect() {
            Ok(settler.reconcile_effect(op_key, seen).await?.settled)
        } else if let Some(targets) = request.pane() {
            Ok(bulk_settled(
                &settler.reconcile_many(targets.to_vec()).await?,
            ))
        } else {
            Err(request.unfit())
        }
    })
}
