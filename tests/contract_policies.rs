//! Retry semantics are a property of the action: error classes hold the
//! outcome to what they mean, a safe-retry action's unknown effect may be
//! sent again under its key, a rate limit makes the key wait, and policies
//! change only through the audited operator function.

mod common;
mod settle_support;

use std::time::Duration;

use effectwatch::ledger::policies::{self, PolicyChange};
use effectwatch::ledger::writer::{
    Completion, ErrorClass, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, State};
use settle_support::{Rig, role_pool};

async fn dispatched(rig: &Rig, key: &str) {
    let begun = begin_effect(&rig.db.pool, &Rig::intent(key, 1500))
        .await
        .unwrap();
    assert_eq!(begun.decision, Decision::Proceed);
    assert!(
        mark_dispatched(&rig.db.pool, key, None, "agent-7")
            .await
            .unwrap()
            .claimed
    );
}

fn failing(class: ErrorClass) -> Completion {
    Completion {
        worker: Some("agent-7".into()),
        reason: Some(format!("provider said {}", class.as_str())),
        error_class: Some(class),
        ..Completion::default()
    }
}

async fn set(rig: &Rig, action: &str, change: PolicyChange) {
    policies::set(
        &rig.operator_pool,
        action,
        &change,
        "alice",
        "the provider's contract",
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_timeout_is_never_recorded_as_a_failure() {
    let rig = Rig::new().await;
    dispatched(&rig, "refund:T:v1").await;
    let refused = complete_effect(
        &rig.db.pool,
        "refund:T:v1",
        Outcome::Failed { retryable: true },
        &failing(ErrorClass::Timeout),
    )
    .await
    .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("a timeout means the outcome is unknown"),
        "{refused}"
    );
    assert_eq!(rig.effect("refund:T:v1").await.state, State::Pending);
    let done = complete_effect(
        &rig.db.pool,
        "refund:T:v1",
        Outcome::Unknown,
        &failing(ErrorClass::ConnectionReset),
    )
    .await
    .unwrap();
    assert_eq!(done.state, State::Unknown);
    // Under the default policy the agent must not send it again: reconcile.
    let again = begin_effect(&rig.db.pool, &Rig::intent("refund:T:v1", 1500))
        .await
        .unwrap();
    assert_eq!(again.decision, Decision::InFlight);
}

#[tokio::test]
async fn a_business_rejection_is_final_and_a_rate_limit_waits_then_retries_the_same_key() {
    let rig = Rig::new().await;
    dispatched(&rig, "refund:NO:v1").await;
    // The agent says "retryable", the class says otherwise: the class wins.
    let done = complete_effect(
        &rig.db.pool,
        "refund:NO:v1",
        Outcome::Failed { retryable: true },
        &failing(ErrorClass::BusinessRejection),
    )
    .await
    .unwrap();
    assert_eq!(done.state, State::Failed);
    let again = begin_effect(&rig.db.pool, &Rig::intent("refund:NO:v1", 1500))
        .await
        .unwrap();
    assert_eq!(again.decision, Decision::Stop);

    dispatched(&rig, "refund:SLOW:v1").await;
    let mut limited = failing(ErrorClass::RateLimited);
    limited.retry_after = Some(Duration::from_millis(1200));
    complete_effect(
        &rig.db.pool,
        "refund:SLOW:v1",
        Outcome::Failed { retryable: false },
        &limited,
    )
    .await
    .unwrap();
    let wait = begin_effect(&rig.db.pool, &Rig::intent("refund:SLOW:v1", 1500))
        .await
        .unwrap();
    assert_eq!(wait.decision, Decision::Wait);
    let seconds = wait.result.unwrap()["retry_after_seconds"]
        .as_i64()
        .unwrap();
    assert!((1..=2).contains(&seconds), "{seconds}");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let retry = begin_effect(&rig.db.pool, &Rig::intent("refund:SLOW:v1", 1500))
        .await
        .unwrap();
    assert_eq!(retry.decision, Decision::Retry);
    assert_eq!(rig.effect("refund:SLOW:v1").await.state, State::Pending);
}

#[tokio::test]
async fn a_safe_retry_action_sends_an_unknown_effect_again_under_its_key() {
    let rig = Rig::new().await;
    set(
        &rig,
        "refund",
        PolicyChange {
            retry_semantics: Some("safe_retry".into()),
            ..PolicyChange::default()
        },
    )
    .await;
    rig.unknown_effect("refund:SAFE:v1", 1500).await;
    let again = begin_effect(&rig.db.pool, &Rig::intent("refund:SAFE:v1", 1500))
        .await
        .unwrap();
    assert_eq!(again.decision, Decision::Retry);
    let claim = mark_dispatched(&rig.db.pool, "refund:SAFE:v1", None, "agent-7")
        .await
        .unwrap();
    assert!(claim.claimed, "one caller may send it again");
    let other = begin_effect(&rig.db.pool, &Rig::intent("refund:SAFE:v1", 1500))
        .await
        .unwrap();
    assert_eq!(other.decision, Decision::InFlight, "and only one");
}

#[tokio::test]
async fn policies_change_only_through_the_audited_function() {
    let rig = Rig::new().await;
    let before = rig.count("select count(*) from ledger.audit_log").await;
    let (policy, seq) = policies::set(
        &rig.operator_pool,
        "booking",
        &PolicyChange {
            retry_semantics: Some("never_retry".into()),
            pending_window: Some(Duration::from_secs(90)),
            compensation_approval_limit_minor: Some(Some(5_000)),
            ..PolicyChange::default()
        },
        "alice",
        "double bookings cost a night's stay",
    )
    .await
    .unwrap();
    assert_eq!(policy["retry_semantics"], "never_retry");
    assert!(seq > 0);
    assert_eq!(
        rig.count("select count(*) from ledger.audit_log").await,
        before + 1
    );
    let listed = policies::list(&rig.operator_pool).await.unwrap();
    let booking = listed.iter().find(|p| p.action == "booking").unwrap();
    assert_eq!(booking.pending_window_secs, 90.0);
    assert_eq!(booking.compensation_approval_limit_minor, Some(5_000));
    // Clearing the limit is a change of its own, audited with before and after.
    policies::set(
        &rig.operator_pool,
        "booking",
        &PolicyChange {
            compensation_approval_limit_minor: Some(None),
            ..PolicyChange::default()
        },
        "bob",
        "no four-eyes for bookings",
    )
    .await
    .unwrap();
    let (operator, before_limit, after_limit): (String, Option<i64>, Option<i64>) = sqlx::query_as(
        "select operator, (before->>'compensation_approval_limit_minor')::bigint,
                (after->>'compensation_approval_limit_minor')::bigint
           from ledger.audit_log where action = 'set_policy' order by seq desc limit 1",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(
        (operator.as_str(), before_limit, after_limit),
        ("bob", Some(5_000), None)
    );

    let refused = policies::set(
        &rig.operator_pool,
        "booking",
        &PolicyChange::default(),
        "alice",
        " ",
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("reason"), "{refused}");
    let unknown = policies::set(
        &rig.operator_pool,
        "booking",
        &PolicyChange {
            retry_semantics: Some("whenever".into()),
            ..PolicyChange::default()
        },
        "alice",
        "typo",
    )
    .await
    .unwrap_err();
    assert!(unknown.to_string().contains("retry_semantics"), "{unknown}");

    // A read-only console reads policies and cannot change them, nor write the table.
    let readonly = role_pool(&rig.db, "effect_readonly").await;
    assert!(!policies::list(&readonly).await.unwrap().is_empty());
    assert!(
        policies::set(
            &readonly,
            "booking",
            &PolicyChange::default(),
            "mallory",
            "x"
        )
        .await
        .is_err()
    );
    let agent = role_pool(&rig.db, "effect_agent").await;
    assert!(
        sqlx::query("update ledger.action_policies set retry_semantics = 'safe_retry'")
            .execute(&agent)
            .await
            .is_err()
    );
    assert!(
        sqlx::query("update ledger.action_policies set retry_semantics = 'safe_retry'")
            .execute(&rig.operator_pool)
            .await
            .is_err()
    );
    rig.audit_intact().await;
}
