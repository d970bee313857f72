//! Compensate: a new effect with its own key, linked to the original,
//! dispatched through the provider under that key. The SQL side makes it
//! idempotent (one live compensation per effect, one dispatcher per
//! compensation) and enforces four-eyes above the action's limit; this
//! side checks everything it can before writing, sends, and records.

use serde_json::{Value, json};

use super::{Request, Running, SettleError, Settled, Settler, require_reason};
use crate::adapters::provider::{
    CompensationAnswer, CompensationOutcome, EffectQuery, Prepared, Provider,
};
use crate::crash_point::crash_point;
use crate::format::optional_money;
use crate::ledger::compensation::{self, CompensationResult};
use crate::ledger::{Effect, LedgerError, State};
use crate::text::sanitize_line;

/// What became of the dispatch step.
enum Dispatch {
    Sent {
        outcome: CompensationOutcome,
        recorded: compensation::CompensationRecorded,
        evidence: Value,
    },
    /// Not sent by us: already dispatched, settled, or claimed by another operator.
    NotSent { state: State, why: String },
}

impl Settler {
    /// Whether a compensation of `effect` could be sent as configured.
    fn check_sendable(&self, effect: &Effect, reason: &str) -> Result<(), SettleError> {
        self.provider_for(effect)?
            .prepare_compensation(&EffectQuery::from(effect), "compensate:check", reason)
            .map(|_| ())
            .map_err(|error| SettleError::Provider(error.to_string()))
    }

    /// Claims and sends a compensation, then records the answer. Sends
    /// nothing if it was already dispatched, is settled, or another
    /// operator claimed it first.
    async fn dispatch_compensation(
        &self,
        original: &Effect,
        compensation_key: &str,
        reason: &str,
    ) -> Result<Dispatch, SettleError> {
        let compensation = self.effect(compensation_key).await?;
        if let Some(why) = why_not_sendable(&compensation) {
            return Ok(Dispatch::NotSent {
                state: compensation.state,
                why,
            });
        }
        let provider = self.provider_for(original)?;
        let prepared =
            prepare_reversal(provider, original, &compensation, compensation_key, reason)?;
        crash_point("before_compensation_claim");
        let claim =
            compensation::dispatch_compensation(&self.pool, compensation_key, &self.operator)
                .await?;
        crash_point("after_compensation_claim");
        if !claim.claimed {
            return Ok(Dispatch::NotSent {
                state: compensation.state,
                why: "another operator dispatched it a moment ago".to_string(),
            });
        }
        let answer = provider.compensate(prepared).await;
        crash_point("after_compensation_sent");
        self.record_compensation(compensation_key, answer).await
    }

    /// Records the provider's answer to a sent compensation.
    async fn record_compensation(
        &self,
        compensation_key: &str,
        answer: CompensationAnswer,
    ) -> Result<Dispatch, SettleError> {
        let (outcome, external_ref, retryable, why) = match &answer.outcome {
            CompensationOutcome::Succeeded { external_ref } => {
                ("succeeded", Some(external_ref.as_str()), None, None)
            }
            CompensationOutcome::Failed { reason, retryable } => {
                ("failed", None, Some(*retryable), Some(reason.as_str()))
            }
            CompensationOutcome::Unknown { reason } => {
                ("unknown", None, None, Some(reason.as_str()))
            }
        };
        // Stored as evidence: never with a secret the provider echoed.
        let redactor = self.config.secret_redactor();
        let evidence = redactor.value(&answer.evidence);
        let why = why.map(|why| redactor.text(why));
        let recorded = compensation::complete_compensation(
            &self.pool,
            compensation_key,
            &self.operator,
            &CompensationResult {
                outcome,
                external_ref,
                result: Some(&evidence),
                retryable,
                reason: why.as_deref(),
            },
        )
        .await
        .map_err(|error| SettleError::Unrecorded {
            what: "the compensation",
            key: sanitize_line(compensation_key),
            cause: error.to_string(),
        })?;
        Ok(Dispatch::Sent {
            outcome: answer.outcome,
            recorded,
            evidence: answer.evidence,
        })
    }
}

/// Why a compensation cannot be sent now, if it cannot: only an unsent one
/// can, or a failed one that is still in play, which was never received
/// by the provider and which the ledger reopens for this dispatch.
fn why_not_sendable(compensation: &Effect) -> Option<String> {
    let never_received =
        compensation.state == State::Failed && compensation.retryable == Some(true);
    let unsent = compensation.state == State::Pending && compensation.dispatched_at.is_none();
    if unsent || never_received {
        return None;
    }
    Some(match (compensation.state, compensation.dispatched_at) {
        (State::Pending, Some(at)) => format!(
            "already dispatched at {} with no answer recorded: reconcile {} if it stays pending",
            at.format("%Y-%m-%d %H:%M:%S UTC"),
            compensation.op_key
        ),
        (State::Held, _) => "held behind another effect: release it first".to_string(),
        (state, _) => format!("already {state}"),
    })
}

/// The provider's request for a compensation. A reversal of a duplicate
/// record sends that record, not the effect's.
fn prepare_reversal(
    provider: &Provider,
    original: &Effect,
    compensation: &Effect,
    compensation_key: &str,
    reason: &str,
) -> Result<Prepared, SettleError> {
    let duplicate_ref = compensation
        .params
        .get("reverses_duplicate")
        .and_then(Value::as_str);
    let mut reversed = EffectQuery::from(original);
    if let Some(duplicate_ref) = duplicate_ref {
        reversed.external_ref = Some(duplicate_ref.to_string());
    }
    let again = match duplicate_ref {
        Some(duplicate_ref) => format!(
            "reverse-duplicate {} --ref {duplicate_ref}",
            original.op_key
        ),
        None => format!("compensate {}", original.op_key),
    };
    provider
        .prepare_compensation(&reversed, compensation_key, reason)
        .map_err(|error| {
            SettleError::Provider(format!(
                "compensation {} exists but cannot be sent: {error}; fix the configuration and \
                 run {} again",
                sanitize_line(compensation_key),
                sanitize_line(&again)
            ))
        })
}

fn compensation_report(
    action: &str,
    op_key: &str,
    status: &str,
    key: &str,
    amount: &str,
    dispatch: Dispatch,
    audit_seq: Option<i64>,
) -> Settled {
    match dispatch {
        Dispatch::Sent {
            outcome,
            recorded,
            evidence,
        } => {
            let said = match &outcome {
                CompensationOutcome::Succeeded { external_ref } => {
                    format!(
                        "succeeded ({external_ref}); {op_key} is now {}",
                        recorded.original_state
                    )
                }
                CompensationOutcome::Failed { reason, .. } => format!("failed: {reason}"),
                CompensationOutcome::Unknown { reason } => {
                    format!("outcome unknown ({reason}): reconcile {key}")
                }
            };
            Settled::new(
                format!("compensation {key} of {amount} sent: {said}"),
                json!({ "action": action, "op_key": op_key, "status": status, "compensation_key": key,
                        "sent": true, "compensation_state": recorded.state,
                        "original_state": recorded.original_state, "late": recorded.late,
                        "audit_seq": audit_seq, "result_audit_seq": recorded.audit_seq,
                        "evidence": evidence }),
            )
        }
        Dispatch::NotSent { state, why } => {
            let opening = if status == "existing" {
                format!("already compensating {op_key}: {key}")
            } else {
                format!("compensation {key}")
            };
            Settled::new(
                format!("{opening} is {state}, not sent again: {why}"),
                json!({ "action": action, "op_key": op_key, "status": status, "compensation_key": key,
                        "sent": false, "compensation_state": state, "why": why, "audit_seq": audit_seq }),
            )
        }
    }
}

/// The effect a verb of one effect is about; refused for any other subject.
fn one_effect(request: &Request) -> Result<(&str, Option<i64>), SettleError> {
    request.effect().ok_or_else(|| request.unfit())
}

/// The row of [`super::verbs::COMPENSATE`]: a new effect with its own
/// key, linked to the original, sent at once unless a second operator must
/// approve it.
pub(super) fn run<'a>(settler: &'a Settler, request: &'a Request) -> Running<'a> {
    Box::pin(async move {
        let (op_key, seen) = one_effect(request)?;
        let reason = request.reason();
        require_reason(reason, "compensate")?;
        let (effect, seen) = settler.look(op_key, seen).await?;
        // Before anything is written: a compensation we could not send is
        // worse than none. (In any other state the ledger answers: it
        // returns the live compensation, or says why it does not apply.)
        if effect.state == State::Succeeded {
            settler.check_sendable(&effect, reason)?;
        }
        let start =
            compensation::compensate(&settler.pool, op_key, seen, &settler.operator, reason)
                .await?;
        let amount = optional_money(start.amount_minor, start.currency.as_deref());
        match (start.status.as_str(), start.compensation_key.clone()) {
            ("awaiting_approval", _) => {
                let limit = optional_money(start.approval_limit_minor, start.currency.as_deref());
                let requester = start.requested_by.clone().unwrap_or_default();
                Ok(Settled::new(
                    format!(
                        "compensation of {op_key} ({amount}) is above the limit ({limit}): it waits for a \
                         second operator's approval (requested by {requester}; `effectwatch approve {op_key}`)"
                    ),
                    json!({ "action": "compensate", "op_key": op_key, "status": "awaiting_approval",
                            "requested_by": requester, "amount_minor": start.amount_minor,
                            "currency": start.currency, "approval_limit_minor": start.approval_limit_minor,
                            "audit_seq": start.audit_seq }),
                ))
            }
            (status, Some(key)) => {
                let dispatch = settler.dispatch_compensation(&effect, &key, reason).await?;
                Ok(compensation_report(
                    "compensate",
                    op_key,
                    status,
                    &key,
                    &amount,
                    dispatch,
                    start.audit_seq,
                ))
            }
            (status, None) => Err(SettleError::Invalid(format!(
                "the ledger answered {status} without a compensation key for {}",
                sanitize_line(op_key)
            ))),
        }
    })
}

/// The row of [`super::verbs::REVERSE_DUPLICATE`]: reverses one extra
/// record of an effect its provider holds twice (`ledger.op_reverse_duplicate`),
/// a compensation of its own sent with that record as the one to reverse;
/// the effect itself stands.
pub(super) fn reverse_duplicate<'a>(settler: &'a Settler, request: &'a Request) -> Running<'a> {
    Box::pin(async move {
        let (op_key, seen) = one_effect(request)?;
        let duplicate_ref = request.answers.reference.trim();
        let reason = request.reason();
        require_reason(reason, "reverse a duplicate")?;
        let (effect, seen) = settler.look(op_key, seen).await?;
        settler.check_sendable(&effect, reason)?;
        let start = compensation::reverse_duplicate(
            &settler.pool,
            op_key,
            seen,
            &settler.operator,
            reason,
            duplicate_ref,
        )
        .await?;
        let amount = optional_money(start.amount_minor, start.currency.as_deref());
        let Some(key) = start.compensation_key.as_deref() else {
            let limit = optional_money(start.approval_limit_minor, start.currency.as_deref());
            return Ok(Settled::new(
                format!(
                    "reversing the duplicate {duplicate_ref} of {op_key} ({amount}) is above the limit \
                     ({limit}): it waits for a second operator's approval (`effectwatch approve {op_key}`)"
                ),
                json!({ "action": "reverse_duplicate", "op_key": op_key, "status": start.status,
                        "duplicate_ref": duplicate_ref, "amount_minor": start.amount_minor,
                        "currency": start.currency, "approval_limit_minor": start.approval_limit_minor,
                        "audit_seq": start.audit_seq }),
            ));
        };
        let dispatch = settler.dispatch_compensation(&effect, key, reason).await?;
        let mut settled = compensation_report(
            "reverse_duplicate",
            op_key,
            &start.status,
            key,
            &amount,
            dispatch,
            start.audit_seq,
        );
        if let Some(detail) = settled.detail.as_object_mut() {
            detail.insert("duplicate_ref".into(), json!(duplicate_ref));
        }
        Ok(settled)
    })
}

/// The row of [`super::verbs::SEND_COMPENSATION`]: sends a compensation
/// that exists and was never dispatched, by its own key — the step its
/// creator recorded as owed (`ledger.next_steps`).
pub(super) fn send<'a>(settler: &'a Settler, request: &'a Request) -> Running<'a> {
    Box::pin(async move {
        let (compensation_key, _) = one_effect(request)?;
        let reason = request.reason();
        require_reason(reason, "send a compensation")?;
        let original_key = compensation::original_of(&settler.pool, compensation_key)
            .await?
            .ok_or_else(|| {
                SettleError::Ledger(LedgerError::NotApplicable(format!(
                    "{} is not a compensation",
                    sanitize_line(compensation_key)
                )))
            })?;
        let original = settler.effect(&original_key).await?;
        let amount = optional_money(original.amount_minor, original.currency.as_deref());
        let dispatch = settler
            .dispatch_compensation(&original, compensation_key, reason)
            .await?;
        Ok(compensation_report(
            "send_compensation",
            &original_key,
            "existing",
            compensation_key,
            &amount,
            dispatch,
            None,
        ))
    })
}

/// The row of [`super::verbs::APPROVE`].
pub(super) fn approve<'a>(settler: &'a Settler, request: &'a Request) -> Running<'a> {
    Box::pin(async move {
        let (op_key, seen) = one_effect(request)?;
        let reason = request.reason();
        require_reason(reason, "approve")?;
        let (effect, seen) = settler.look(op_key, seen).await?;
        if effect.state == State::Succeeded {
            settler.check_sendable(&effect, reason)?;
        }
        let approval =
            compensation::approve(&settler.pool, op_key, seen, &settler.operator, reason).await?;
        let amount = optional_money(effect.amount_minor, effect.currency.as_deref());
        let dispatch = settler
            .dispatch_compensation(&effect, &approval.compensation_key, reason)
            .await?;
        let mut report = compensation_report(
            "approve",
            op_key,
            "created",
            &approval.compensation_key,
            &amount,
            dispatch,
            Some(approval.audit_seq),
        );
        let what = match &approval.duplicate_ref {
            Some(duplicate_ref) => format!("the reversal of the duplicate {duplicate_ref} of"),
            None => "the compensation".to_string(),
        };
        report.summary = sanitize_line(&format!(
            "approved {what} {} requested by {}; {}",
            op_key, approval.requested_by, report.summary
        ));
        if let Some(map) = report.detail.as_object_mut() {
            map.insert("requested_by".into(), json!(approval.requested_by));
        }
        Ok(report)
    })
}

/// The row of [`super::verbs::REJECT`].
pub(super) fn reject<'a>(settler: &'a Settler, request: &'a Request) -> Running<'a> {
    Box::pin(async move {
        let (op_key, seen) = one_effect(request)?;
        let reason = request.reason();
        require_reason(reason, "reject")?;
        let (_, seen) = settler.look(op_key, seen).await?;
        let rejection =
            compensation::reject(&settler.pool, op_key, seen, &settler.operator, reason).await?;
        Ok(Settled::new(
            format!(
                "rejected the compensation of {op_key} requested by {} (audit #{})",
                rejection.requested_by, rejection.audit_seq
            ),
            json!({ "action": "reject", "op_key": op_key, "status": rejection.status,
                    "requested_by": rejection.requested_by, "audit_seq": rejection.audit_seq }),
        ))
    })
}
