//! Fixed, realistic console data: the screenshots, the render benchmark
//! and the view snapshots draw from it, so they show what an operator on a
//! busy payments ledger would see, at a fixed instant.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;

use super::app::Snapshot;
use crate::ledger::escalations::{ApprovalRow, EscalationRow};
use crate::ledger::finance::{Exposure, FinanceReview, SuspectedEffect};
use crate::ledger::history::EffectHistory;
use crate::ledger::model::{Attempt, AuditEntry, Effect, EffectEvent, Reconciliation, State};
use crate::ledger::panes::{DuplicateRow, HeldRow, OverdueRow, Pane, PaneRows, UnknownRow};

/// The instant every fixture is relative to.
pub fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 14, 5, 0)
        .single()
        .expect("a valid fixed instant")
}

fn ago(seconds: i64) -> DateTime<Utc> {
    now() - chrono::Duration::seconds(seconds)
}

pub fn overdue_rows(count: usize) -> Vec<OverdueRow> {
    let currencies = ["EUR", "USD", "GBP", "JPY"];
    (0..count)
        .map(|i| {
            let invoice = 400 + (i * 37) % 600;
            let currency = currencies[i % currencies.len()];
            OverdueRow {
                op_key: format!("refund:INV-{invoice}:AP-{}:v1", 10 + i % 89),
                effect_id: 1000 + i as i64,
                action: if i % 5 == 3 {
                    "booking".into()
                } else {
                    "refund".into()
                },
                target: format!("invoice:INV-{invoice}"),
                amount_minor: Some(1500 + (i as i64 * 733) % 48_000),
                currency: Some(currency.into()),
                provider: Some("stripe-eu".into()),
                requested_by: format!("agent-{}", 1 + i % 7),
                created_at: ago(400 + (count - i) as i64 * 11),
                dispatched: i % 3 != 2,
                deadline_at: Some(ago(100 + (count - i) as i64 * 11)),
                overdue_ms: (100 + (count - i) as i64 * 11) * 1000,
                age_ms: (400 + (count - i) as i64 * 11) * 1000,
                version: 2,
            }
        })
        .collect()
}

pub fn unknown_rows() -> Vec<UnknownRow> {
    let row = |key: &str,
               target: &str,
               amount: i64,
               currency: &str,
               since: i64,
               error: &str,
               findings: &[&str],
               attention: Option<&str>| UnknownRow {
        op_key: key.into(),
        effect_id: 2000,
        action: "refund".into(),
        target: target.into(),
        amount_minor: Some(amount),
        currency: Some(currency.into()),
        provider: Some("stripe-eu".into()),
        requested_by: "agent-7".into(),
        unknown_since: ago(since),
        unknown_ms: since * 1000,
        attempts: 2 + findings.len() as i64,
        last_error: Some(error.into()),
        reconciliations: findings.len() as i64,
        last_finding: findings.last().map(|f| f.to_string()),
        findings: findings.iter().map(|f| f.to_string()).collect(),
        attention: attention.map(str::to_string),
        version: 3,
    };
    vec![
        row(
            "refund:INV-402:AP-91:v1",
            "invoice:INV-402",
            15_000,
            "EUR",
            1_260,
            "timeout: no response within 10 s",
            &[],
            None,
        ),
        row(
            "refund:INV-417:AP-12:v1",
            "invoice:INV-417",
            4_990,
            "USD",
            845,
            "connection reset by peer",
            &["indeterminate"],
            None,
        ),
        row(
            "refund:INV-433:AP-40:v2",
            "invoice:INV-433",
            120_000,
            "JPY",
            610,
            "HTTP 503 from the provider",
            &["indeterminate", "indeterminate"],
            None,
        ),
        row(
            "refund:INV-448:AP-77:v1",
            "invoice:INV-448",
            32_500,
            "GBP",
            302,
            "timeout: no response within 10 s",
            &["duplicate"],
            Some("duplicate"),
        ),
        row(
            "refund:INV-450:AP-03:v1",
            "invoice:INV-450",
            2_000,
            "EUR",
            95,
            "worker crashed after dispatch",
            &[],
            None,
        ),
    ]
}

pub fn duplicate_rows() -> Vec<DuplicateRow> {
    let row = |key: &str,
               state: &str,
               replays: i64,
               in_flight: i64,
               mismatches: i64,
               first: i64,
               last: i64,
               requesters: &[&str]| DuplicateRow {
        op_key: key.into(),
        effect_id: 3000,
        action: "refund".into(),
        target: "invoice:INV-402".into(),
        state: state.into(),
        attempts: replays + in_flight + mismatches,
        replays,
        in_flight,
        mismatches,
        late_results: 0,
        first_seen: ago(first),
        last_seen: ago(last),
        requesters: requesters.iter().map(|r| r.to_string()).collect(),
        has_mismatch: mismatches > 0,
        version: 4,
    };
    vec![
        row(
            "refund:INV-402:AP-91:v1",
            "unknown",
            0,
            2,
            1,
            1_300,
            40,
            &["agent-7", "agent-7-retry"],
        ),
        row(
            "webhook:evt_1Q8xK2L",
            "succeeded",
            2,
            0,
            0,
            900,
            120,
            &["webhook-receiver"],
        ),
        row(
            "booking:room-12:2026-12-04",
            "succeeded",
            1,
            0,
            0,
            700,
            300,
            &["agent-3"],
        ),
        row(
            "message:C-1042:refund-notice",
            "succeeded",
            3,
            1,
            0,
            600,
            15,
            &["agent-2", "agent-5"],
        ),
    ]
}

pub fn held_rows() -> Vec<HeldRow> {
    let row = |target: &str,
               key: &str,
               amount: i64,
               held: i64,
               holder: &str,
               holder_state: &str,
               holder_amount: i64| HeldRow {
        op_key: key.into(),
        effect_id: 4000,
        target: target.into(),
        action: "refund".into(),
        amount_minor: Some(amount),
        currency: Some("EUR".into()),
        requested_by: "agent-4".into(),
        held_since: ago(held),
        held_ms: held * 1000,
        holder_op_key: holder.into(),
        holder_effect_id: 4001,
        holder_state: holder_state.into(),
        holder_age_ms: (held + 30) * 1000,
        holder_amount_minor: Some(holder_amount),
        holder_currency: Some("EUR".into()),
        version: 1,
    };
    vec![
        row(
            "invoice:INV-402",
            "refund:INV-402:AP-92:v1",
            15_000,
            1_100,
            "refund:INV-402:AP-91:v1",
            "unknown",
            15_000,
        ),
        row(
            "invoice:INV-466",
            "refund:INV-466:AP-18:v1",
            7_450,
            240,
            "refund:INV-466:AP-17:v1",
            "pending",
            7_450,
        ),
        row(
            "invoice:INV-466",
            "refund:INV-466:AP-19:v1",
            7_450,
            60,
            "refund:INV-466:AP-17:v1",
            "pending",
            7_450,
        ),
    ]
}

pub fn escalation_rows() -> Vec<EscalationRow> {
    vec![
        EscalationRow {
            escalation_key: "escalate:refund:INV-448:AP-77:v1:duplicate".into(),
            op_key: "refund:INV-448:AP-77:v1".into(),
            sink: "oncall".into(),
            decision_needed: "provider shows two refunds: compensate one?".into(),
            state: "delivered".into(),
            delivery_attempts: 1,
            last_error: None,
            created_by: "alice".into(),
            created_at: ago(280),
            age_ms: 280_000,
            effect_version: 5,
        },
        EscalationRow {
            escalation_key: "escalate:refund:INV-433:AP-40:v2:unknown".into(),
            op_key: "refund:INV-433:AP-40:v2".into(),
            sink: "finance".into(),
            decision_needed: "outcome unknown after 2 reconciliations".into(),
            state: "failed".into(),
            delivery_attempts: 3,
            last_error: Some("HTTP 502 from the webhook".into()),
            created_by: "bob".into(),
            created_at: ago(500),
            age_ms: 500_000,
            effect_version: 4,
        },
    ]
}

pub fn audit_entries() -> Vec<AuditEntry> {
    let entry = |seq: i64, seconds: i64, operator: &str, action: &str, key: &str, reason: &str| {
        AuditEntry {
            seq,
            at: ago(seconds),
            operator: operator.into(),
            db_role: "ops_alice".into(),
            action: action.into(),
            effect_id: Some(2000 + seq),
            op_key: Some(key.into()),
            reason: Some(reason.into()),
            before: Some(json!({ "state": "unknown", "version": 3 })),
            after: Some(json!({ "state": "succeeded", "version": 4 })),
            hash: format!("{:064x}", seq * 7919),
        }
    };
    vec![
        entry(
            42,
            30,
            "alice",
            "reconcile",
            "refund:INV-448:AP-77:v1",
            "reconciliation with stripe-eu: duplicate",
        ),
        entry(
            41,
            280,
            "alice",
            "escalate",
            "refund:INV-448:AP-77:v1",
            "two refunds at the provider",
        ),
        entry(
            40,
            900,
            "bob",
            "resolve",
            "refund:INV-380:AP-11:v1",
            "provider dashboard shows re_3Q8 settled",
        ),
        entry(
            39,
            1_400,
            "bob",
            "release",
            "refund:INV-377:AP-02:v1",
            "holder confirmed failed by the issuer",
        ),
    ]
}

/// Everything the poller would hold, with `overdue` items in the first pane.
pub fn snapshot(overdue: usize) -> Snapshot {
    snapshot_with(overdue_rows(overdue), overdue as i64)
}

/// A snapshot whose overdue pane holds `rows` out of `total` open items.
pub fn snapshot_with(rows: Vec<OverdueRow>, total: i64) -> Snapshot {
    let unknown = unknown_rows();
    let duplicates = duplicate_rows();
    let held = held_rows();
    Snapshot {
        counts: vec![
            (Pane::Overdue, total),
            (Pane::Unknown, unknown.len() as i64),
            (Pane::Duplicates, duplicates.len() as i64),
            (Pane::Held, held.len() as i64),
        ],
        panes: vec![
            (Pane::Overdue, PaneRows::Overdue(rows)),
            (Pane::Unknown, PaneRows::Unknown(unknown)),
            (Pane::Duplicates, PaneRows::Duplicates(duplicates)),
            (Pane::Held, PaneRows::Held(held)),
        ],
        escalations: escalation_rows(),
        approvals: approval_rows(),
        audit: audit_entries(),
        escalation_count: None,
        audit_count: None,
        listening: true,
        finance: Some(finance()),
        finance_error: None,
        polled_at: now(),
        latency: Duration::from_millis(14),
        database: "payments".into(),
        role: "ops_alice".into(),
        offsets: [0; 4],
    }
}

/// The story of one refund whose outcome went unknown and was reconciled.
pub fn history() -> EffectHistory {
    let params = json!({ "amount_minor": 15000, "currency": "EUR", "invoice": "INV-402", "reason": "duplicate charge" });
    let effect = Effect {
        id: 2000,
        op_key: "refund:INV-402:AP-91:v1".into(),
        action: "refund".into(),
        target: "invoice:INV-402".into(),
        params: params.clone(),
        params_hash: "9f2c…".into(),
        amount_minor: Some(15_000),
        currency: Some("EUR".into()),
        provider: Some("stripe-eu".into()),
        requested_by: "agent-7".into(),
        owner_role: "agents_eu".into(),
        approval_ref: Some("AP-91".into()),
        approval_version: Some(1),
        request_id: Some("req-7f3a".into()),
        state: State::Unknown,
        pending_window_secs: 300,
        deadline_at: Some(ago(1_000)),
        external_ref: None,
        result: None,
        failure_reason: Some("timeout: no response within 10 s".into()),
        retryable: None,
        late_result_at: None,
        attention: None,
        version: 3,
        created_at: ago(1_330),
        dispatched_at: Some(ago(1_300)),
        dispatched_by: Some("worker-2".into()),
        dispatched_role: Some("agents_eu".into()),
        updated_at: ago(60),
        settled_at: None,
        compensates: None,
        held_by: None,
    };
    let attempt =
        |id: i64, kind: &str, by: &str, seconds: i64, offered: Option<serde_json::Value>| Attempt {
            id,
            kind: kind.into(),
            requested_by: Some(by.into()),
            db_role: "agents_eu".into(),
            request_id: Some(format!("req-{id}")),
            params_hash: None,
            params: offered,
            detail: None,
            flagged: kind == "mismatch",
            at: ago(seconds),
        };
    let event =
        |id: i64, from: Option<&str>, to: &str, actor: &str, seconds: i64, reason: Option<&str>| {
            EffectEvent {
                id,
                from_state: from.map(str::to_string),
                to_state: to.into(),
                actor: actor.into(),
                db_role: "agents_eu".into(),
                reason: reason.map(str::to_string),
                at: ago(seconds),
            }
        };
    let mut offered = params.clone();
    offered["amount_minor"] = json!(16000);
    let mut related = effect.clone();
    related.id = 2001;
    related.op_key = "refund:INV-402:AP-92:v1".into();
    related.state = State::Held;
    related.held_by = Some(2000);
    EffectHistory {
        attempts: vec![
            attempt(2, "dispatch", "worker-2", 1_300, None),
            attempt(3, "in_flight", "agent-7", 1_100, None),
            attempt(4, "mismatch", "agent-7-retry", 900, Some(offered)),
        ],
        events: vec![
            event(1, None, "pending", "agent-7", 1_330, None),
            event(
                2,
                Some("pending"),
                "unknown",
                "worker-2",
                1_290,
                Some("timeout: no response within 10 s"),
            ),
        ],
        reconciliations: vec![Reconciliation {
            id: 1,
            provider: Some("stripe-eu".into()),
            finding: "indeterminate".into(),
            external_refs: vec![],
            evidence: json!({ "error": "HTTP 503" }),
            duration_ms: Some(2_004),
            state_before: "unknown".into(),
            state_after: "unknown".into(),
            requested_by: "alice".into(),
            at: ago(600),
        }],
        escalations: vec![],
        audit: vec![AuditEntry {
            seq: 37,
            at: ago(600),
            operator: "alice".into(),
            db_role: "ops_alice".into(),
            action: "reconcile".into(),
            effect_id: Some(2000),
            op_key: Some("refund:INV-402:AP-91:v1".into()),
            reason: Some("reconciliation with stripe-eu: indeterminate".into()),
            before: None,
            after: None,
            hash: "ab".repeat(32),
        }],
        related: vec![related],
        effect,
    }
}

pub fn approval_rows() -> Vec<ApprovalRow> {
    vec![ApprovalRow {
        request_id: 7,
        op_key: "refund:INV-448:AP-77:v1".into(),
        target: "invoice:INV-448".into(),
        amount_minor: Some(32_500),
        currency: Some("GBP".into()),
        requested_by: "alice".into(),
        reason: "provider shows the refund twice".into(),
        waiting_ms: 95_000,
        version: 5,
    }]
}

/// Two refunds of one invoice that both went through, and an over-approved booking.
pub fn finance() -> FinanceReview {
    let suspect = |target: &str,
                   key: &str,
                   amount: i64,
                   currency: &str,
                   total: i64,
                   approved: Option<i64>,
                   excess: i64,
                   reasons: &[&str],
                   reference: &str,
                   compensation: &str| SuspectedEffect {
        target: target.into(),
        action: "refund".into(),
        op_key: key.into(),
        effect_id: 5000,
        amount_minor: Some(amount),
        currency: Some(currency.into()),
        provider: Some("stripe-eu".into()),
        external_ref: Some(reference.into()),
        approval_ref: Some("AP-91".into()),
        approval_version: Some(1),
        requested_by: "agent-7".into(),
        succeeded_at: Some(ago(3_600)),
        reasons: reasons.iter().map(|r| r.to_string()).collect(),
        succeeded_effects: 2,
        total_minor: Some(total),
        approved_minor: approved,
        excess_minor: Some(excess),
        compensation: compensation.into(),
        compensation_key: None,
        compensation_under_way: compensation != "none",
        version: 3,
    };
    FinanceReview {
        at: None,
        since: Some(ago(30 * 86_400)),
        suspected: vec![
            suspect(
                "invoice:INV-402",
                "refund:INV-402:AP-91:v1",
                15_000,
                "EUR",
                30_000,
                Some(15_000),
                15_000,
                &["repeated", "over_approved"],
                "re_3Q8a",
                "none",
            ),
            suspect(
                "invoice:INV-402",
                "refund:INV-402:AP-91:v2",
                15_000,
                "EUR",
                30_000,
                Some(15_000),
                15_000,
                &["repeated", "over_approved"],
                "re_3Q8f",
                "pending",
            ),
            suspect(
                "invoice:INV-448",
                "refund:INV-448:AP-77:v1",
                32_500,
                "GBP",
                32_500,
                None,
                32_500,
                &["provider_duplicate"],
                "re_9Zk1",
                "awaiting_approval",
            ),
        ],
        exposure: vec![
            Exposure {
                currency: "EUR".into(),
                unknown_effects: 2,
                unknown_minor: 17_000,
                suspected_effects: 2,
                suspected_excess_minor: 15_000,
                compensated_effects: 1,
                compensated_minor: 4_200,
                awaiting_approval: 0,
                awaiting_approval_minor: 0,
            },
            Exposure {
                currency: "GBP".into(),
                unknown_effects: 1,
                unknown_minor: 32_500,
                suspected_effects: 1,
                suspected_excess_minor: 32_500,
                compensated_effects: 0,
                compensated_minor: 0,
                awaiting_approval: 1,
                awaiting_approval_minor: 32_500,
            },
            Exposure {
                currency: "JPY".into(),
                unknown_effects: 1,
                unknown_minor: 120_000,
                suspected_effects: 0,
                suspected_excess_minor: 0,
                compensated_effects: 0,
                compensated_minor: 0,
                awaiting_approval: 0,
                awaiting_approval_minor: 0,
            },
        ],
    }
}
