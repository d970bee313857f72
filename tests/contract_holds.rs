//! Holds end by rule: when the effect holding others settles, what it held
//! is decided again in the same transaction, whoever settled it. A holder
//! that failed or was cancelled releases the oldest effect it held (the
//! held call, asked again, proceeds; the rest wait behind the released
//! one); one that succeeded leaves them for a person, or cancels them where
//! the action's policy says so; one whose outcome is unknown changes
//! nothing. Every change is the ledger's, audited with why.

mod common;
mod settle_support;

use effectwatch::ledger::actions::{CANCEL, SeenVersion};
use effectwatch::ledger::policies::{self, PolicyChange};
use effectwatch::ledger::writer::{
    Completion, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, State};
use settle_support::Rig;

fn refund(key: &str) -> Intent {
    common::intent(key, "invoice:INV-9")
}

/// A, dispatched and waiting for its answer; B and C, asked after it on the
/// same invoice, held behind it (B first).
async fn a_holds_b_and_c(rig: &Rig) {
    let pool = &rig.db.pool;
    assert_eq!(
        begin_effect(pool, &refund("refund:A"))
            .await
            .unwrap()
            .decision,
        Decision::Proceed
    );
    assert!(
        mark_dispatched(pool, "refund:A", None, "w")
            .await
            .unwrap()
            .claimed
    );
    for key in ["refund:B", "refund:C"] {
        assert_eq!(
            begin_effect(pool, &refund(key)).await.unwrap().decision,
            Decision::Held,
            "{key}"
        );
    }
}

async fn answer(rig: &Rig, key: &str, outcome: Outcome) {
    complete_effect(
        &rig.db.pool,
        key,
        outcome,
        &Completion {
            external_ref: (outcome == Outcome::Succeeded).then(|| format!("ref:{key}")),
            reason: Some("the provider answered".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
}

/// The audit entries the ledger's rules wrote: (action, key, reason).
async fn by_rule(rig: &Rig) -> Vec<(String, String, String)> {
    sqlx::query_as(
        "select action, op_key, reason from ledger.audit_log where operator = 'ledger' order by seq",
    )
    .fetch_all(&rig.db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_failed_holder_releases_the_oldest_it_held_and_the_held_call_proceeds() {
    let rig = Rig::new().await;
    a_holds_b_and_c(&rig).await;
    answer(&rig, "refund:A", Outcome::Failed { retryable: false }).await;

    let b = rig.effect("refund:B").await;
    assert_eq!((b.state, b.held_by), (State::Pending, None));
    assert_eq!(rig.effect("refund:C").await.state, State::Held);
    assert_eq!(
        rig.holder_of("refund:C").await.as_deref(),
        Some("refund:B"),
        "C waits behind the released one, not a settled holder"
    );
    assert_eq!(
        by_rule(&rig).await,
        [(
            "release_by_rule".to_string(),
            "refund:B".to_string(),
            "released by rule: refund:A, which held it, failed".to_string()
        )]
    );

    // The held agent asks again and goes ahead; a second ask is in flight.
    let pool = &rig.db.pool;
    let again = begin_effect(pool, &refund("refund:B")).await.unwrap();
    assert_eq!(again.decision, Decision::Proceed);
    assert_eq!(
        begin_effect(pool, &refund("refund:B"))
            .await
            .unwrap()
            .decision,
        Decision::InFlight
    );
    assert!(
        mark_dispatched(pool, "refund:B", None, "w")
            .await
            .unwrap()
            .claimed
    );
    // B fails too: C is released in turn.
    answer(&rig, "refund:B", Outcome::Failed { retryable: false }).await;
    assert_eq!(rig.effect("refund:C").await.state, State::Pending);
    assert_eq!(
        rig.count("select count(*) from ledger.held_conflicts")
            .await,
        0
    );
    rig.audit_intact().await;
}

#[tokio::test]
async fn a_holder_cancelled_by_an_operator_releases_the_oldest_it_held() {
    let rig = Rig::new().await;
    let pool = &rig.db.pool;
    assert_eq!(
        begin_effect(pool, &refund("refund:A"))
            .await
            .unwrap()
            .decision,
        Decision::Proceed
    );
    assert_eq!(
        begin_effect(pool, &refund("refund:B"))
            .await
            .unwrap()
            .decision,
        Decision::Held
    );
    CANCEL
        .call(
            &rig.operator_pool,
            "refund:A",
            SeenVersion(rig.effect("refund:A").await.version),
            "alice",
            "the customer withdrew the claim",
        )
        .await
        .unwrap();
    assert_eq!(rig.effect("refund:B").await.state, State::Pending);
    let rules = by_rule(&rig).await;
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        rules[0].2,
        "released by rule: refund:A, which held it, cancelled"
    );
    rig.audit_intact().await;
}

#[tokio::test]
async fn a_holder_whose_outcome_is_unknown_still_holds() {
    let rig = Rig::new().await;
    a_holds_b_and_c(&rig).await;
    answer(&rig, "refund:A", Outcome::Unknown).await;
    assert_eq!(rig.effect("refund:B").await.state, State::Held);
    assert_eq!(rig.holder_of("refund:B").await.as_deref(), Some("refund:A"));
    assert!(by_rule(&rig).await.is_empty());
}

#[tokio::test]
async fn a_succeeded_holder_leaves_what_it_held_for_a_person() {
    let rig = Rig::new().await;
    a_holds_b_and_c(&rig).await;
    answer(&rig, "refund:A", Outcome::Succeeded).await;
    for key in ["refund:B", "refund:C"] {
        assert_eq!(rig.effect(key).await.state, State::Held, "{key}");
    }
    assert!(by_rule(&rig).await.is_empty());
    // The detail view says what the rule was and what is left to decide.
    let history = effectwatch::ledger::history::load(&rig.db.pool, "refund:B")
        .await
        .unwrap();
    let next = history.policy.unwrap().next_step("held");
    assert!(
        next.contains("released by rule if the effect ahead fails")
            && next.contains("a person decides"),
        "{next}"
    );
}

#[tokio::test]
async fn a_succeeded_holder_cancels_what_it_held_where_the_policy_says_so() {
    let rig = Rig::new().await;
    policies::set(
        &rig.operator_pool,
        "refund",
        &PolicyChange {
            on_holder_success: Some("cancel".into()),
            ..PolicyChange::default()
        },
        "alice",
        "one refund per invoice: a second one asked meanwhile is moot",
    )
    .await
    .unwrap();
    a_holds_b_and_c(&rig).await;
    answer(&rig, "refund:A", Outcome::Succeeded).await;
    for key in ["refund:B", "refund:C"] {
        assert_eq!(rig.effect(key).await.state, State::Cancelled, "{key}");
    }
    let rules = by_rule(&rig).await;
    assert_eq!(
        rules
            .iter()
            .map(|(action, key, _)| (action.as_str(), key.as_str()))
            .collect::<Vec<_>>(),
        [
            ("cancel_by_rule", "refund:B"),
            ("cancel_by_rule", "refund:C")
        ]
    );
    assert!(rules[0].2.contains("refund:A, which held it, succeeded"));
    // Asked again, the cancelled call is told so and does not proceed.
    let again = begin_effect(&rig.db.pool, &refund("refund:B"))
        .await
        .unwrap();
    assert_ne!(again.decision, Decision::Proceed);
    rig.audit_intact().await;
}

/// A key asked while the only open effect on its target is held waits
/// behind that held one; when the held one is cancelled, it is released.
#[tokio::test]
async fn a_held_holder_cancelled_releases_what_waits_behind_it() {
    let rig = Rig::new().await;
    a_holds_b_and_c(&rig).await;
    answer(&rig, "refund:A", Outcome::Succeeded).await;
    // A succeeded: B and C wait for a person. D, asked now, waits behind B.
    assert_eq!(
        begin_effect(&rig.db.pool, &refund("refund:D"))
            .await
            .unwrap()
            .decision,
        Decision::Held
    );
    assert_eq!(rig.holder_of("refund:D").await.as_deref(), Some("refund:B"));
    CANCEL
        .call(
            &rig.operator_pool,
            "refund:B",
            SeenVersion(rig.effect("refund:B").await.version),
            "alice",
            "the customer asked once",
        )
        .await
        .unwrap();
    assert_eq!(rig.effect("refund:D").await.state, State::Pending);
    rig.audit_intact().await;
}

/// A hold begin_effect makes while its holder's failure is being written
/// in another transaction is either seen by the holder's rule (released)
/// or sees the failure (not held at all): never held behind a settled
/// effect, waiting for a person for nothing. Raced over many rounds.
#[tokio::test]
async fn a_hold_made_while_its_holder_fails_is_never_left_behind_it() {
    const ROUNDS: usize = 150;
    let rig = Rig::new().await;
    let pool = &rig.db.pool;
    let (mut held_then_released, mut proceeded) = (0, 0);
    for round in 0..ROUNDS {
        let target = format!("invoice:RACE-{round}");
        let (holder, asker) = (format!("refund:A-{round}"), format!("refund:B-{round}"));
        begin_effect(pool, &common::intent(&holder, &target))
            .await
            .unwrap();
        mark_dispatched(pool, &holder, None, "w").await.unwrap();
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(2));
        let failing = {
            let (pool, barrier, holder) = (pool.clone(), barrier.clone(), holder.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                complete_effect(
                    &pool,
                    &holder,
                    Outcome::Failed { retryable: false },
                    &Completion {
                        reason: Some("declined".into()),
                        ..Completion::default()
                    },
                )
                .await
                .unwrap();
            })
        };
        let asking = {
            let (pool, barrier, intent) = (
                pool.clone(),
                barrier.clone(),
                common::intent(&asker, &target),
            );
            tokio::spawn(async move {
                barrier.wait().await;
                begin_effect(&pool, &intent).await.unwrap().decision
            })
        };
        failing.await.unwrap();
        let decision = asking.await.unwrap();
        let (state, held_by_state): (String, Option<String>) = sqlx::query_as(
            "select e.state, h.state from ledger.effects e
               left join ledger.effects h on h.id = e.held_by
              where e.op_key = $1",
        )
        .bind(&asker)
        .fetch_one(pool)
        .await
        .unwrap();
        assert!(
            state == "pending",
            "round {round}: {asker} answered {decision:?} is {state}, held by a {held_by_state:?} effect"
        );
        match decision {
            Decision::Held => held_then_released += 1,
            _ => proceeded += 1,
        }
    }
    eprintln!(
        "{ROUNDS} rounds: {held_then_released} held then released by the rule, {proceeded} proceeded"
    );
    assert_eq!(held_then_released + proceeded, ROUNDS);
}
