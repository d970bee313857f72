//! The articles' failure-injection list, run end to end: agents that follow
//! the writer protocol (begin, dispatch, call the fake provider with the
//! key as its idempotency key, complete), the failure injected where the
//! article puts it, and the reconciler settling what the agent could not.
//! Every test asserts the provider's own state — one intended effect is one
//! effect there — and that the ledger recorded what happened.

mod common;
mod settle_support;

use std::time::Duration;

use chrono::Utc;
use effectwatch::demo::provider_client::ProviderClient;
use effectwatch::fakeprovider::{Fault, Route};
use effectwatch::ledger::approvals::{self, Grant};
use effectwatch::ledger::retention::{self, Cutoff};
use effectwatch::ledger::writer::{
    Completion, ErrorClass, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, State};
use settle_support::{Rig, role_pool};

/// Where an agent stops short of the protocol's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Crash {
    Never,
    /// After the provider call, before recording its outcome.
    BeforeRecording,
}

/// What the agent did.
#[derive(Debug, PartialEq, Eq)]
enum Ran {
    /// The ledger said not to call (replay, in_flight, stop, rejected…).
    Told(Decision),
    /// It called the provider and recorded this.
    Called(State),
    /// It called the provider and crashed.
    Crashed,
    /// Another caller had the dispatch.
    NotClaimed,
}

async fn agent(rig: &Rig, intent: &Intent, crash: Crash) -> Ran {
    let pool = &rig.db.pool;
    let begun = begin_effect(pool, intent).await.expect("begin_effect");
    if !begun.decision.may_dispatch() {
        return Ran::Told(begun.decision);
    }
    match mark_dispatched(pool, &intent.op_key, None, "agent-7").await {
        Ok(claim) if claim.claimed => {}
        _ => return Ran::NotClaimed,
    }
    let client = ProviderClient::new(rig.base_url.clone()).unwrap();
    let called = client.create(intent).await;
    if crash == Crash::BeforeRecording {
        return Ran::Crashed;
    }
    let (outcome, completion) = match called {
        Ok(id) => (
            Outcome::Succeeded,
            Completion {
                external_ref: Some(id),
                worker: Some("agent-7".into()),
                ..Completion::default()
            },
        ),
        // A reset or a timeout: the call may have landed.
        Err(error) => (
            Outcome::Unknown,
            Completion {
                reason: Some(error),
                worker: Some("agent-7".into()),
                error_class: Some(ErrorClass::ConnectionReset),
                ..Completion::default()
            },
        ),
    };
    let completed = complete_effect(pool, &intent.op_key, outcome, &completion)
        .await
        .expect("complete_effect");
    Ran::Called(completed.state)
}

fn refund(key: &str, amount: i64) -> Intent {
    let mut intent = Rig::intent(key, amount);
    intent.pending_window_secs = Some(1);
    intent
}

/// Effects the provider holds under `key`.
fn at_provider(rig: &Rig, key: &str) -> usize {
    rig.fake
        .effects()
        .iter()
        .filter(|effect| effect.idempotency_key.as_deref() == Some(key))
        .count()
}

async fn reconcile(rig: &Rig) {
    let mut settings = settle_support::reconciler_settings("reconciler@test");
    settings.backoff = Duration::from_secs(30);
    settings.backoff_max = Duration::from_secs(30);
    settings.concurrency = 2;
    rig.reconciler(settings)
        .pass()
        .await
        .expect("a reconcile pass");
}

async fn attempts(rig: &Rig, key: &str, kind: &str) -> i64 {
    sqlx::query_scalar("select count(*) from ledger.attempts where op_key = $1 and kind = $2")
        .bind(key)
        .bind(kind)
        .fetch_one(&rig.db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_task_delivered_twice_at_once_is_one_effect() {
    let rig = Rig::new().await;
    let intent = refund("refund:TWICE:v1", 1500);
    let (first, second) = tokio::join!(
        agent(&rig, &intent, Crash::Never),
        agent(&rig, &intent, Crash::Never)
    );
    let called = [&first, &second]
        .iter()
        .filter(|ran| matches!(ran, Ran::Called(_)))
        .count();
    assert_eq!(called, 1, "{first:?} {second:?}");
    assert_eq!(rig.fake.requests_with_key("refund:TWICE:v1"), 1);
    assert_eq!(at_provider(&rig, "refund:TWICE:v1"), 1);
    assert_eq!(rig.effect("refund:TWICE:v1").await.state, State::Succeeded);
    assert_eq!(attempts(&rig, "refund:TWICE:v1", "in_flight").await, 1);
}

#[tokio::test]
async fn a_response_dropped_after_the_effect_is_reconciled_not_repeated() {
    let rig = Rig::new().await;
    let intent = refund("refund:DROP:v1", 1500);
    rig.fake.fail_next(Route::Create, Fault::ApplyThenReset);
    assert_eq!(
        agent(&rig, &intent, Crash::Never).await,
        Ran::Called(State::Unknown)
    );
    // The redelivered task must not call again.
    assert_eq!(
        agent(&rig, &intent, Crash::Never).await,
        Ran::Told(Decision::InFlight)
    );
    reconcile(&rig).await;
    let effect = rig.effect("refund:DROP:v1").await;
    assert_eq!(effect.state, State::Succeeded);
    let provider_id = rig.fake.effects()[0].id.clone();
    assert_eq!(effect.external_ref.as_deref(), Some(provider_id.as_str()));
    assert_eq!(at_provider(&rig, "refund:DROP:v1"), 1);
    assert_eq!(rig.fake.requests_with_key("refund:DROP:v1"), 1);
}

#[tokio::test]
async fn a_crash_after_dispatch_before_recording_is_found_by_the_reconciler() {
    let rig = Rig::new().await;
    let intent = refund("refund:CRASH:v1", 1500);
    assert_eq!(
        agent(&rig, &intent, Crash::BeforeRecording).await,
        Ran::Crashed
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await; // past its 1 s window
    reconcile(&rig).await;
    assert_eq!(rig.effect("refund:CRASH:v1").await.state, State::Succeeded);
    // The agent comes back: the stored outcome, no second call.
    assert_eq!(
        agent(&rig, &intent, Crash::Never).await,
        Ran::Told(Decision::Replay)
    );
    assert_eq!(at_provider(&rig, "refund:CRASH:v1"), 1);
    assert_eq!(rig.fake.requests_with_key("refund:CRASH:v1"), 1);
}

#[tokio::test]
async fn a_crash_after_recording_before_acknowledging_replays_the_outcome() {
    let rig = Rig::new().await;
    let intent = refund("refund:ACK:v1", 1500);
    assert_eq!(
        agent(&rig, &intent, Crash::Never).await,
        Ran::Called(State::Succeeded)
    );
    // The queue never heard back and delivers the task again.
    let begun = begin_effect(&rig.db.pool, &intent).await.unwrap();
    assert_eq!(begun.decision, Decision::Replay);
    assert_eq!(at_provider(&rig, "refund:ACK:v1"), 1);
    assert_eq!(attempts(&rig, "refund:ACK:v1", "replay").await, 1);
}

#[tokio::test]
async fn a_late_success_after_a_failure_stops_the_retry() {
    let rig = Rig::new().await;
    let intent = refund("refund:LATE:v1", 1500);
    begin_effect(&rig.db.pool, &intent).await.unwrap();
    assert!(
        mark_dispatched(&rig.db.pool, "refund:LATE:v1", None, "agent-7")
            .await
            .unwrap()
            .claimed
    );
    let id = ProviderClient::new(rig.base_url.clone())
        .unwrap()
        .create(&intent)
        .await
        .unwrap();
    // The agent misread the answer and reported a retryable failure …
    complete_effect(
        &rig.db.pool,
        "refund:LATE:v1",
        Outcome::Failed { retryable: true },
        &Completion::default(),
    )
    .await
    .unwrap();
    // … then the provider's late word arrives: it did happen.
    let late = complete_effect(
        &rig.db.pool,
        "refund:LATE:v1",
        Outcome::Succeeded,
        &Completion {
            external_ref: Some(id),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    assert!(late.late);
    assert_eq!(
        agent(&rig, &intent, Crash::Never).await,
        Ran::Told(Decision::Stop),
        "no retry after the money moved"
    );
    assert_eq!(at_provider(&rig, "refund:LATE:v1"), 1);
    assert_eq!(attempts(&rig, "refund:LATE:v1", "late_result").await, 1);
}

#[tokio::test]
async fn a_material_parameter_changed_under_the_old_key_is_rejected() {
    let rig = Rig::new().await;
    let intent = refund("refund:PARAM:v1", 1500);
    assert_eq!(
        agent(&rig, &intent, Crash::Never).await,
        Ran::Called(State::Succeeded)
    );
    let changed = refund("refund:PARAM:v1", 1600);
    assert_eq!(
        agent(&rig, &changed, Crash::Never).await,
        Ran::Told(Decision::Rejected)
    );
    assert_eq!(at_provider(&rig, "refund:PARAM:v1"), 1);
    assert_eq!(attempts(&rig, "refund:PARAM:v1", "mismatch").await, 1);
}

#[tokio::test]
async fn an_approval_expiring_between_attempts_stops_the_second_call() {
    let rig = Rig::new().await;
    let approver = role_pool(&rig.db, "effect_approver").await;
    let mut intent = refund("refund:APPR:v1", 1500);
    intent.approval_ref = Some("AP-7".into());
    intent.approval_version = Some(1);
    approvals::grant(
        &approver,
        &Grant {
            approval_ref: "AP-7".into(),
            version: 1,
            action: "refund".into(),
            target: intent.target.clone(),
            expires_at: Utc::now() + chrono::Duration::milliseconds(900),
            amount_ceiling: Some((2_000, "EUR".into())),
            params: None,
        },
        "finance-bot",
        "ticket 7",
    )
    .await
    .unwrap();
    rig.fake.fail_next(Route::Create, Fault::Status(503));
    assert_eq!(
        agent(&rig, &intent, Crash::Never).await,
        Ran::Called(State::Unknown)
    );
    reconcile(&rig).await; // nothing there: failed, retryable
    assert_eq!(rig.effect("refund:APPR:v1").await.state, State::Failed);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(agent(&rig, &intent, Crash::Never).await, Ran::NotClaimed);
    assert_eq!(rig.effect("refund:APPR:v1").await.state, State::Cancelled);
    assert_eq!(at_provider(&rig, "refund:APPR:v1"), 0);
    assert_eq!(
        rig.fake.requests_with_key("refund:APPR:v1"),
        1,
        "only the first call"
    );
}

#[tokio::test]
async fn a_replay_weeks_later_after_a_prune_is_not_a_second_refund() {
    let rig = Rig::new().await;
    let intent = refund("refund:OLD:v1", 1500);
    assert_eq!(
        agent(&rig, &intent, Crash::Never).await,
        Ran::Called(State::Succeeded)
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    let pruned = retention::prune(
        &rig.db.pool,
        Cutoff::OlderThan(Duration::ZERO),
        "retention-bot",
        "test",
        None,
        None,
    )
    .await
    .unwrap();
    assert_eq!(pruned.effects, 1);
    assert_eq!(
        agent(&rig, &intent, Crash::Never).await,
        Ran::Told(Decision::Replay)
    );
    assert_eq!(at_provider(&rig, "refund:OLD:v1"), 1);
    assert_eq!(rig.fake.requests_with_key("refund:OLD:v1"), 1);
}

#[tokio::test]
async fn two_distinct_approved_actions_are_two_effects() {
    let rig = Rig::new().await;
    let approver = role_pool(&rig.db, "effect_approver").await;
    for (key, approval) in [("refund:D1:v1", "AP-D1"), ("refund:D2:v1", "AP-D2")] {
        let mut intent = refund(key, 700);
        intent.approval_ref = Some(approval.into());
        intent.approval_version = Some(1);
        approvals::grant(
            &approver,
            &Grant {
                approval_ref: approval.into(),
                version: 1,
                action: "refund".into(),
                target: intent.target.clone(),
                expires_at: Utc::now() + chrono::Duration::hours(1),
                amount_ceiling: Some((1_000, "EUR".into())),
                params: None,
            },
            "finance-bot",
            "two refunds",
        )
        .await
        .unwrap();
        assert_eq!(
            agent(&rig, &intent, Crash::Never).await,
            Ran::Called(State::Succeeded)
        );
    }
    assert_eq!(rig.fake.effects().len(), 2);
}
