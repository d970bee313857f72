//! Approvals bind to what they authorise and expire: begin_effect refuses
//! an unknown, expired, revoked or superseded approval, or terms outside
//! it; an approval authorises one effect; mark_dispatched stops a dispatch
//! whose approval lapsed between attempts. Without a registered approval the
//! writer behaves as before.

mod common;
mod settle_support;

use std::time::Duration;

use chrono::Utc;
use effectwatch::ledger::approvals::{self, Grant};
use effectwatch::ledger::policies::{self, PolicyChange};
use effectwatch::ledger::writer::{
    Completion, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, LedgerError, State};
use serde_json::json;
use settle_support::{Rig, role_pool};

fn approved(key: &str, target: &str, approval: &str, version: i32, amount: i64) -> Intent {
    Intent {
        op_key: key.to_string(),
        action: "refund".into(),
        target: target.to_string(),
        params: json!({ "amount_minor": amount, "currency": "EUR" }),
        requested_by: "agent-7".into(),
        amount_minor: Some(amount),
        currency: Some("EUR".into()),
        provider: Some("pay".into()),
        approval_ref: Some(approval.to_string()),
        approval_version: Some(version),
        ..Intent::default()
    }
}

fn grant(approval: &str, version: i32, target: &str, lasts: Duration) -> Grant {
    Grant {
        approval_ref: approval.to_string(),
        version,
        action: "refund".into(),
        target: target.to_string(),
        expires_at: Utc::now() + chrono::Duration::from_std(lasts).unwrap(),
        amount_ceiling: Some((2_000, "EUR".into())),
        params: None,
    }
}

async fn refusal_of(rig: &Rig, intent: &Intent) -> String {
    let begun = begin_effect(&rig.db.pool, intent).await.unwrap();
    assert_eq!(begun.decision, Decision::Rejected, "{intent:?}");
    assert_eq!(begun.state, State::Cancelled);
    begun.result.unwrap()["refused"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn an_approval_authorises_one_effect_within_its_terms_and_only_while_it_holds() {
    let rig = Rig::new().await;
    let approver = role_pool(&rig.db, "effect_approver").await;
    let hour = Duration::from_secs(3600);
    approvals::grant(
        &approver,
        &grant("AP-1", 1, "invoice:1", hour),
        "finance-bot",
        "ticket 7",
    )
    .await
    .unwrap();

    // Outside its terms: another target, more money, another currency.
    let other_target =
        refusal_of(&rig, &approved("refund:X:v1", "invoice:2", "AP-1", 1, 500)).await;
    assert!(
        other_target.contains("authorises refund on invoice:1"),
        "{other_target}"
    );
    let too_much = refusal_of(
        &rig,
        &approved("refund:Y:v1", "invoice:1", "AP-1", 1, 2_500),
    )
    .await;
    assert!(
        too_much.contains("outside approval AP-1 v1 (at most 2000 EUR)"),
        "{too_much}"
    );

    // Within them: proceeds, and consumes it.
    let first = begin_effect(
        &rig.db.pool,
        &approved("refund:A:v1", "invoice:1", "AP-1", 1, 1_500),
    )
    .await
    .unwrap();
    assert_eq!(first.decision, Decision::Proceed);
    // A second branch of the workflow under the same approval is another effect.
    let second = refusal_of(
        &rig,
        &approved("refund:B:v1", "invoice:1", "AP-1", 1, 1_500),
    )
    .await;
    assert!(
        second.contains("already authorised another effect"),
        "{second}"
    );
    // The first key itself, done and asked again, gets its outcome.
    assert!(
        mark_dispatched(&rig.db.pool, "refund:A:v1", None, "w")
            .await
            .unwrap()
            .claimed
    );
    complete_effect(
        &rig.db.pool,
        "refund:A:v1",
        Outcome::Succeeded,
        &Completion {
            external_ref: Some("re_1".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    let again = begin_effect(
        &rig.db.pool,
        &approved("refund:A:v1", "invoice:1", "AP-1", 1, 1_500),
    )
    .await
    .unwrap();
    assert_eq!(again.decision, Decision::Replay);
    // A refused key stays closed: asking again is a stop, not a proceed.
    let refused_again = begin_effect(
        &rig.db.pool,
        &approved("refund:B:v1", "invoice:1", "AP-1", 1, 1_500),
    )
    .await
    .unwrap();
    assert_eq!(refused_again.decision, Decision::Stop);
    let listed = approvals::list(&rig.operator_pool, 10).await.unwrap();
    assert_eq!(listed[0].consumed_by.as_deref(), Some("refund:A:v1"));
    rig.audit_intact().await;
}

#[tokio::test]
async fn expired_revoked_superseded_and_unknown_approvals_are_refused() {
    let rig = Rig::new().await;
    let approver = role_pool(&rig.db, "effect_approver").await;
    let hour = Duration::from_secs(3600);
    approvals::grant(
        &approver,
        &grant("AP-E", 1, "invoice:e", Duration::from_millis(400)),
        "bot",
        "t",
    )
    .await
    .unwrap();
    approvals::grant(&approver, &grant("AP-R", 1, "invoice:r", hour), "bot", "t")
        .await
        .unwrap();
    approvals::revoke(&approver, "AP-R", Some(1), "bot", "the customer withdrew")
        .await
        .unwrap();
    approvals::grant(&approver, &grant("AP-S", 1, "invoice:s", hour), "bot", "t")
        .await
        .unwrap();
    approvals::grant(
        &approver,
        &grant("AP-S", 2, "invoice:s", hour),
        "bot",
        "new amount",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let expired = refusal_of(&rig, &approved("refund:E:v1", "invoice:e", "AP-E", 1, 100)).await;
    assert!(expired.contains("AP-E v1 expired at"), "{expired}");
    let revoked = refusal_of(&rig, &approved("refund:R:v1", "invoice:r", "AP-R", 1, 100)).await;
    assert!(revoked.contains("revoked by bot"), "{revoked}");
    let superseded = refusal_of(&rig, &approved("refund:S:v1", "invoice:s", "AP-S", 1, 100)).await;
    assert!(superseded.contains("superseded by v2"), "{superseded}");
    let unknown_version =
        refusal_of(&rig, &approved("refund:S:v9", "invoice:s", "AP-S", 9, 100)).await;
    assert!(
        unknown_version.contains("AP-S v9 is unknown"),
        "{unknown_version}"
    );
    let current = begin_effect(
        &rig.db.pool,
        &approved("refund:S:v2", "invoice:s", "AP-S", 2, 100),
    )
    .await
    .unwrap();
    assert_eq!(current.decision, Decision::Proceed);

    // An approval nobody registered passes as before, unless the policy says otherwise.
    let free = begin_effect(
        &rig.db.pool,
        &approved("refund:F:v1", "invoice:f", "AP-NEW", 1, 100),
    )
    .await
    .unwrap();
    assert_eq!(free.decision, Decision::Proceed);
    policies::set(
        &rig.operator_pool,
        "refund",
        &PolicyChange {
            approvals_must_be_registered: Some(true),
            ..PolicyChange::default()
        },
        "alice",
        "refunds need the approval system",
    )
    .await
    .unwrap();
    let unregistered = refusal_of(
        &rig,
        &approved("refund:G:v1", "invoice:g", "AP-GHOST", 1, 100),
    )
    .await;
    assert!(
        unregistered.contains("AP-GHOST v1 is unknown"),
        "{unregistered}"
    );
    let refused_rows = rig
        .count("select count(*) from ledger.effects where state = 'cancelled' and failure_reason is not null")
        .await;
    assert_eq!(refused_rows, 5, "every refusal is kept, with its reason");
}

#[tokio::test]
async fn an_approval_that_expires_between_attempts_stops_the_dispatch() {
    let rig = Rig::new().await;
    let approver = role_pool(&rig.db, "effect_approver").await;
    approvals::grant(
        &approver,
        &grant("AP-T", 1, "invoice:t", Duration::from_millis(700)),
        "bot",
        "t",
    )
    .await
    .unwrap();
    let intent = approved("refund:T:v1", "invoice:t", "AP-T", 1, 100);
    assert_eq!(
        begin_effect(&rig.db.pool, &intent).await.unwrap().decision,
        Decision::Proceed
    );
    assert!(
        mark_dispatched(&rig.db.pool, "refund:T:v1", None, "w")
            .await
            .unwrap()
            .claimed
    );
    complete_effect(
        &rig.db.pool,
        "refund:T:v1",
        Outcome::Failed { retryable: true },
        &Completion::default(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    // The agent retries under the key; the approval is gone by now.
    assert_eq!(
        begin_effect(&rig.db.pool, &intent).await.unwrap().decision,
        Decision::Retry
    );
    let stopped = mark_dispatched(&rig.db.pool, "refund:T:v1", None, "w")
        .await
        .unwrap_err();
    match stopped {
        LedgerError::Refused(reason) => assert!(reason.contains("AP-T v1 expired"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(rig.effect("refund:T:v1").await.state, State::Cancelled);
    let flagged = rig
        .count("select count(*) from ledger.attempts where kind = 'dispatch_refused' and flagged")
        .await;
    assert_eq!(flagged, 1);
}

#[tokio::test]
async fn two_distinct_approved_actions_are_not_collapsed_and_only_the_approver_grants() {
    let rig = Rig::new().await;
    let approver = role_pool(&rig.db, "effect_approver").await;
    let hour = Duration::from_secs(3600);
    for (approval, target) in [("AP-10", "invoice:10"), ("AP-11", "invoice:11")] {
        approvals::grant(
            &approver,
            &grant(approval, 1, target, hour),
            "bot",
            "two refunds",
        )
        .await
        .unwrap();
    }
    for (key, target, approval) in [
        ("refund:10:v1", "invoice:10", "AP-10"),
        ("refund:11:v1", "invoice:11", "AP-11"),
    ] {
        let begun = begin_effect(&rig.db.pool, &approved(key, target, approval, 1, 900))
            .await
            .unwrap();
        assert_eq!(begun.decision, Decision::Proceed, "{key}");
    }
    let denied = approvals::grant(
        &rig.operator_pool,
        &grant("AP-SELF", 1, "invoice:12", hour),
        "alice",
        "I approve my own refund",
    )
    .await
    .unwrap_err();
    assert!(matches!(denied, LedgerError::Refused(_)), "{denied:?}");
    let audit_actions: Vec<String> = sqlx::query_scalar(
        "select action from ledger.audit_log where action like '%approval' order by seq",
    )
    .fetch_all(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(audit_actions, vec!["grant_approval", "grant_approval"]);
}
