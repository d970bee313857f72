//! What a provider's answer means for one ledger effect: pure, so every
//! case is tested without a network.

use serde::Serialize;
use serde_json::Value;

use crate::adapters::provider::{EffectQuery, ProviderEffect, ProviderStatus};

/// The findings of a reconciliation (docs/settling.md, "Reconciliation"), as
/// `ledger.record_reconciliation` takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    ExistsOnce,
    Absent,
    Duplicate,
    Mismatch,
    Indeterminate,
}

impl FindingKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::ExistsOnce => "exists_once",
            FindingKind::Absent => "absent",
            FindingKind::Duplicate => "duplicate",
            FindingKind::Mismatch => "mismatch",
            FindingKind::Indeterminate => "indeterminate",
        }
    }
}

/// A material field on which the ledger and the provider disagree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Difference {
    pub field: String,
    pub ledger: Value,
    pub provider: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assessment {
    pub finding: FindingKind,
    pub external_refs: Vec<String>,
    pub differences: Vec<Difference>,
    /// Effects in the answer that belong to other keys (a business-key
    /// lookup returns everything on the target).
    pub ignored: usize,
}

impl Assessment {
    pub fn indeterminate() -> Self {
        Assessment {
            finding: FindingKind::Indeterminate,
            external_refs: Vec::new(),
            differences: Vec::new(),
            ignored: 0,
        }
    }
}

/// Whether a provider effect is this ledger effect. An effect that names a
/// key (its idempotency key, or `metadata.op_key`) is ours only under our
/// key; one that names none is ours if it carries our reference, or — with
/// no reference known — if the lookup returned it (a business-key lookup;
/// its material fields are compared below).
fn is_ours(query: &EffectQuery, effect: &ProviderEffect) -> bool {
    let named_key = effect.idempotency_key.clone().or_else(|| {
        effect
            .metadata
            .as_ref()
            .and_then(|m| m.get("op_key"))
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    match (named_key, &query.external_ref) {
        (Some(key), _) => key == query.op_key,
        (None, Some(reference)) => &effect.id == reference,
        (None, None) => true,
    }
}

fn same_value(ledger: &Value, provider: &Value) -> bool {
    if ledger == provider {
        return true;
    }
    let text = |value: &Value| match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    };
    matches!((text(ledger), text(provider)), (Some(a), Some(b)) if a == b)
}

/// Every material field both sides know: amount, currency, and each
/// metadata field that is also one of the ledger's params (or its target
/// or action).
pub fn differences(query: &EffectQuery, effect: &ProviderEffect) -> Vec<Difference> {
    let mut found = Vec::new();
    if let (Some(ledger), Some(provider)) = (query.amount_minor, effect.amount_minor)
        && ledger != provider
    {
        found.push(Difference {
            field: "amount_minor".into(),
            ledger: ledger.into(),
            provider: provider.into(),
        });
    }
    if let (Some(ledger), Some(provider)) = (&query.currency, &effect.currency)
        && !ledger.eq_ignore_ascii_case(provider)
    {
        found.push(Difference {
            field: "currency".into(),
            ledger: ledger.clone().into(),
            provider: provider.clone().into(),
        });
    }
    if let Some(Value::Object(metadata)) = &effect.metadata {
        for (name, provider) in metadata {
            let ledger = match name.as_str() {
                "op_key" => continue,
                "target" => Value::String(query.target.clone()),
                "action" => Value::String(query.action.clone()),
                other => match query.params.get(other) {
                    Some(value) => value.clone(),
                    None => continue,
                },
            };
            if !same_value(&ledger, provider) {
                found.push(Difference {
                    field: format!("metadata.{name}"),
                    ledger,
                    provider: provider.clone(),
                });
            }
        }
    }
    found
}

pub fn assess(query: &EffectQuery, effects: &[ProviderEffect]) -> Assessment {
    let ours: Vec<&ProviderEffect> = effects.iter().filter(|e| is_ours(query, e)).collect();
    let ignored = effects.len() - ours.len();
    let live: Vec<&ProviderEffect> = ours
        .iter()
        .copied()
        .filter(|e| e.status != ProviderStatus::Failed)
        .collect();
    let succeeded = live
        .iter()
        .filter(|e| e.status == ProviderStatus::Succeeded)
        .count();
    let references =
        |list: &[&ProviderEffect]| list.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
    let (finding, external_refs, differences) = match (succeeded, live.len()) {
        // Nothing there, or only failed attempts: it did not happen.
        (0, 0) => (FindingKind::Absent, Vec::new(), Vec::new()),
        // Accepted but not final: nothing can be concluded yet.
        (0, _) => (FindingKind::Indeterminate, references(&live), Vec::new()),
        (1, 1) => {
            let differences = differences(query, live[0]);
            let finding = if differences.is_empty() {
                FindingKind::ExistsOnce
            } else {
                FindingKind::Mismatch
            };
            (finding, references(&live), differences)
        }
        // More than one live effect for one intent: money may have moved twice.
        _ => (FindingKind::Duplicate, references(&live), Vec::new()),
    };
    Assessment {
        finding,
        external_refs,
        differences,
        ignored,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn query() -> EffectQuery {
        EffectQuery {
            op_key: "refund:INV-1".into(),
            action: "refund".into(),
            target: "invoice:INV-1".into(),
            params: json!({"reason": "damaged", "amount_minor": 1500}),
            amount_minor: Some(1500),
            currency: Some("EUR".into()),
            external_ref: None,
            provider: Some("pay".into()),
        }
    }

    fn effect(id: &str, status: ProviderStatus) -> ProviderEffect {
        ProviderEffect {
            id: id.into(),
            status,
            raw_status: None,
            amount_minor: Some(1500),
            currency: Some("eur".into()),
            idempotency_key: Some("refund:INV-1".into()),
            metadata: None,
        }
    }

    #[test]
    fn one_matching_effect_exists_once() {
        let found = assess(&query(), &[effect("fx_1", ProviderStatus::Succeeded)]);
        assert_eq!(found.finding, FindingKind::ExistsOnce);
        assert_eq!(found.external_refs, vec!["fx_1".to_string()]);
    }

    #[test]
    fn nothing_or_only_failures_is_absent() {
        assert_eq!(assess(&query(), &[]).finding, FindingKind::Absent);
        let failed = assess(&query(), &[effect("fx_1", ProviderStatus::Failed)]);
        assert_eq!(failed.finding, FindingKind::Absent);
    }

    #[test]
    fn pending_is_indeterminate_and_two_are_a_duplicate() {
        let pending = assess(&query(), &[effect("fx_1", ProviderStatus::Pending)]);
        assert_eq!(pending.finding, FindingKind::Indeterminate);
        let two = assess(
            &query(),
            &[
                effect("fx_1", ProviderStatus::Succeeded),
                effect("fx_2", ProviderStatus::Succeeded),
            ],
        );
        assert_eq!(two.finding, FindingKind::Duplicate);
        assert_eq!(two.external_refs.len(), 2);
    }

    #[test]
    fn material_differences_are_a_mismatch() {
        let mut other = effect("fx_1", ProviderStatus::Succeeded);
        other.amount_minor = Some(15000);
        other.metadata = Some(json!({"reason": "damaged", "target": "invoice:INV-2"}));
        let found = assess(&query(), &[other]);
        assert_eq!(found.finding, FindingKind::Mismatch);
        let fields: Vec<&str> = found.differences.iter().map(|d| d.field.as_str()).collect();
        assert_eq!(fields, vec!["amount_minor", "metadata.target"]);
    }

    #[test]
    fn effects_of_other_keys_are_ignored() {
        let mut foreign = effect("fx_9", ProviderStatus::Succeeded);
        foreign.idempotency_key = Some("refund:INV-2".into());
        let found = assess(
            &query(),
            &[foreign, effect("fx_1", ProviderStatus::Succeeded)],
        );
        assert_eq!(found.finding, FindingKind::ExistsOnce);
        assert_eq!(found.ignored, 1);
        let mut keyless = effect("fx_3", ProviderStatus::Succeeded);
        keyless.idempotency_key = None;
        let mut known = query();
        known.external_ref = Some("fx_1".into());
        assert_eq!(
            assess(&known, &[keyless.clone()]).finding,
            FindingKind::Absent
        );
        assert_eq!(
            assess(&query(), &[keyless]).finding,
            FindingKind::ExistsOnce
        );
    }
}
