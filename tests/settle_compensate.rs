//! Compensation against the fake provider: its own key, linked to the
//! original, never sent twice — retried, repeated, concurrent, or rerun
//! after a crash — and four-eyes above the action's limit.

mod common;
mod settle_support;

use std::time::Duration;

use effectwatch::adapters::provider::{CompensationOutcome, EffectQuery, Provider};
use effectwatch::fakeprovider::{Fault, Route};
use effectwatch::ledger::compensation;
use effectwatch::ledger::{LedgerError, State};
use effectwatch::settle::verbs::{self, Answers};
use effectwatch::settle::{Request, SettleError};
use settle_support::Rig;

fn compensate(op_key: &str, seen: Option<i64>) -> Request {
    Request::on_effect(
        &verbs::COMPENSATE,
        op_key,
        seen,
        Answers::because("customer was refunded twice"),
    )
}

fn approve(op_key: &str) -> Request {
    Request::on_effect(
        &verbs::APPROVE,
        op_key,
        None,
        Answers::because("checked the invoice"),
    )
}

#[tokio::test]
async fn a_compensation_is_an_effect_of_its_own_sent_under_its_own_key() {
    let rig = Rig::new().await;
    let original_ref = rig.succeeded_effect("refund:C1:v1", 1500).await;
    let report = rig
        .settler("alice")
        .settle(compensate("refund:C1:v1", None))
        .await
        .unwrap();
    assert_eq!(report.detail["sent"], true, "{}", report.summary);
    assert_eq!(
        report.detail["compensation_key"],
        "compensate:refund:C1:v1:1"
    );

    let original = rig.effect("refund:C1:v1").await;
    assert_eq!(original.state, State::Compensated);
    let compensation = rig.effect("compensate:refund:C1:v1:1").await;
    assert_eq!(compensation.state, State::Succeeded);
    assert_eq!(compensation.compensates, Some(original.id));
    assert_eq!(compensation.amount_minor, Some(1500));
    assert_eq!(compensation.requested_by, "alice");

    // At the provider: one reversal of the original, under the compensation's key.
    let reversals = rig.fake.reversals_of(&original_ref);
    assert_eq!(reversals.len(), 1);
    assert_eq!(
        reversals[0].idempotency_key.as_deref(),
        Some("compensate:refund:C1:v1:1")
    );
    assert_eq!(
        compensation.external_ref.as_deref(),
        Some(reversals[0].id.as_str())
    );
    assert_eq!(reversals[0].amount_minor, Some(1500));

    // Asking again changes nothing and sends nothing.
    let again = rig
        .settler("bob")
        .settle(compensate("refund:C1:v1", None))
        .await
        .unwrap();
    assert_eq!(again.detail["sent"], false);
    assert_eq!(again.detail["status"], "existing");
    assert_eq!(rig.fake.requests(Route::Create), 1);

    let actions: Vec<String> =
        sqlx::query_scalar("select action from ledger.audit_log order by seq")
            .fetch_all(&rig.db.pool)
            .await
            .unwrap();
    assert_eq!(
        actions,
        [
            "compensate",
            "dispatch_compensation",
            "compensated",
            "compensation_result"
        ]
    );
    rig.audit_intact().await;

    // Each names the other, as show and the detail view follow it.
    let links = |history: &effectwatch::ledger::history::EffectHistory| {
        history
            .links
            .iter()
            .map(|link| {
                (
                    link.relation.clone(),
                    link.op_key.clone(),
                    link.state.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    let shown = effectwatch::ledger::history::load(&rig.db.pool, "refund:C1:v1")
        .await
        .unwrap();
    assert_eq!(
        links(&shown),
        [(
            "compensated by".to_string(),
            "compensate:refund:C1:v1:1".to_string(),
            "succeeded".to_string()
        )]
    );
    let request = &shown.compensation_requests[..];
    assert_eq!(request.len(), 1, "one request, though asked twice");
    assert_eq!(
        (request[0].state.as_str(), request[0].requested_by.as_str()),
        ("created", "alice")
    );
    assert_eq!(
        request[0].compensation_key.as_deref(),
        Some("compensate:refund:C1:v1:1")
    );
    let back = effectwatch::ledger::history::load(&rig.db.pool, "compensate:refund:C1:v1:1")
        .await
        .unwrap();
    assert_eq!(
        links(&back),
        [(
            "compensates".to_string(),
            "refund:C1:v1".to_string(),
            "compensated".to_string()
        )]
    );
    let json = serde_json::to_value(&shown).unwrap();
    assert_eq!(json["links"][0]["op_key"], "compensate:refund:C1:v1:1");
    assert_eq!(json["compensation_requests"][0]["state"], "created");
}

#[tokio::test]
async fn operators_compensating_the_same_effect_at_once_send_exactly_one_request() {
    let rig = Rig::new().await;
    let original_ref = rig.succeeded_effect("refund:RACE:v1", 4200).await;
    let seen = rig.effect("refund:RACE:v1").await.version;
    // A slow provider widens the window in which the others arrive.
    rig.fake
        .set_fault(Route::Create, Some(Fault::Slow(Duration::from_millis(150))));
    let mut tasks = tokio::task::JoinSet::new();
    for operator in [
        "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
    ] {
        let settler = rig.settler(operator);
        tasks.spawn(async move {
            settler
                .settle(compensate("refund:RACE:v1", Some(seen)))
                .await
        });
    }
    let mut sent = 0;
    while let Some(joined) = tasks.join_next().await {
        let report = joined.unwrap().unwrap();
        if report.detail["sent"] == true {
            sent += 1;
        }
    }
    assert_eq!(sent, 1, "exactly one operator dispatches");
    assert_eq!(
        rig.fake.requests(Route::Create),
        1,
        "exactly one compensation request"
    );
    assert_eq!(rig.fake.reversals_of(&original_ref).len(), 1);
    assert_eq!(
        rig.count("select count(*) from ledger.effects where compensates is not null")
            .await,
        1
    );
    assert_eq!(rig.effect("refund:RACE:v1").await.state, State::Compensated);
    rig.audit_intact().await;
}

#[tokio::test]
async fn a_crash_between_dispatch_and_record_then_a_rerun_does_not_compensate_twice() {
    let rig = Rig::new().await;
    let original_ref = rig.succeeded_effect("refund:CRASH:v1", 800).await;
    let original = rig.effect("refund:CRASH:v1").await;

    // The first run: created, claimed, sent — and the console dies before
    // it records the answer.
    let pool = &rig.operator_pool;
    let start = compensation::compensate(
        pool,
        "refund:CRASH:v1",
        original.version,
        "alice",
        "double refund",
    )
    .await
    .unwrap();
    let key = start.compensation_key.unwrap();
    assert!(
        compensation::dispatch_compensation(pool, &key, "alice")
            .await
            .unwrap()
            .claimed
    );
    let provider = Provider::build("pay", &rig.config.providers["pay"]).unwrap();
    let prepared = provider
        .prepare_compensation(&EffectQuery::from(&original), &key, "double refund")
        .unwrap();
    let answer = provider.compensate(prepared).await;
    assert!(matches!(
        answer.outcome,
        CompensationOutcome::Succeeded { .. }
    ));

    // The rerun: finds the compensation, is refused the claim, sends nothing.
    let rerun = rig
        .settler("alice")
        .settle(compensate("refund:CRASH:v1", None))
        .await
        .unwrap();
    assert_eq!(rerun.detail["sent"], false, "{}", rerun.summary);
    assert!(rerun.summary.contains("reconcile"), "{}", rerun.summary);
    assert_eq!(rig.fake.requests_with_key(&key), 1);

    // Reconciling the compensation by its key settles both.
    let report = rig
        .settler("alice")
        .settle(Request::on_effect(
            &verbs::RECONCILE,
            key.clone(),
            None,
            Answers::default(),
        ))
        .await
        .unwrap();
    assert_eq!(
        report.detail["finding"], "exists_once",
        "{}",
        report.summary
    );
    assert_eq!(rig.effect(&key).await.state, State::Succeeded);
    assert_eq!(
        rig.effect("refund:CRASH:v1").await.state,
        State::Compensated
    );

    let last = rig
        .settler("bob")
        .settle(compensate("refund:CRASH:v1", None))
        .await
        .unwrap();
    assert_eq!(last.detail["sent"], false);
    assert_eq!(rig.fake.reversals_of(&original_ref).len(), 1);
    assert_eq!(rig.fake.requests(Route::Create), 1);
    rig.audit_intact().await;
}

#[tokio::test]
async fn a_compensation_that_times_out_is_unknown_then_reconciled_never_resent() {
    let rig = Rig::new().await;
    let original_ref = rig.succeeded_effect("refund:SLOW:v1", 300).await;
    // The provider applies the reversal but never answers in time.
    rig.fake.fail_next(Route::Create, Fault::ApplyThenHang);
    let report = rig
        .settler("alice")
        .settle(compensate("refund:SLOW:v1", None))
        .await
        .unwrap();
    assert_eq!(report.detail["sent"], true);
    assert_eq!(
        report.detail["compensation_state"], "unknown",
        "{}",
        report.summary
    );
    assert_eq!(rig.effect("refund:SLOW:v1").await.state, State::Succeeded);

    let again = rig
        .settler("bob")
        .settle(compensate("refund:SLOW:v1", None))
        .await
        .unwrap();
    assert_eq!(again.detail["sent"], false);
    let key = "compensate:refund:SLOW:v1:1";
    rig.settler("bob")
        .settle(Request::on_effect(
            &verbs::RECONCILE,
            key,
            None,
            Answers::default(),
        ))
        .await
        .unwrap();
    assert_eq!(rig.effect("refund:SLOW:v1").await.state, State::Compensated);
    assert_eq!(rig.fake.requests_with_key(key), 1);
    assert_eq!(rig.fake.reversals_of(&original_ref).len(), 1);
}

#[tokio::test]
async fn a_refused_compensation_fails_and_the_next_one_gets_a_new_key() {
    let rig = Rig::new().await;
    rig.succeeded_effect("refund:NO:v1", 300).await;
    rig.fake.fail_next(Route::Create, Fault::Status(422));
    let report = rig
        .settler("alice")
        .settle(compensate("refund:NO:v1", None))
        .await
        .unwrap();
    assert_eq!(
        report.detail["compensation_state"], "failed",
        "{}",
        report.summary
    );
    assert_eq!(rig.effect("refund:NO:v1").await.state, State::Succeeded);

    let second = rig
        .settler("alice")
        .settle(compensate("refund:NO:v1", None))
        .await
        .unwrap();
    assert_eq!(
        second.detail["compensation_key"],
        "compensate:refund:NO:v1:2"
    );
    assert_eq!(
        second.detail["compensation_state"], "succeeded",
        "{}",
        second.summary
    );
    assert_eq!(rig.effect("refund:NO:v1").await.state, State::Compensated);
}

#[tokio::test]
async fn above_the_limit_a_second_different_operator_must_approve() {
    let rig = Rig::new().await;
    sqlx::query(
        "insert into ledger.action_policies (action, compensation_approval_limit_minor) values ('refund', 1000)",
    )
    .execute(&rig.db.pool)
    .await
    .unwrap();
    let original_ref = rig.succeeded_effect("refund:BIG:v1", 5000).await;
    let alice = rig.settler("alice");

    let asked = alice
        .settle(compensate("refund:BIG:v1", None))
        .await
        .unwrap();
    assert_eq!(
        asked.detail["status"], "awaiting_approval",
        "{}",
        asked.summary
    );
    assert!(asked.summary.contains("50.00 EUR") && asked.summary.contains("10.00 EUR"));
    let again = alice
        .settle(compensate("refund:BIG:v1", None))
        .await
        .unwrap();
    assert_eq!(again.detail["status"], "awaiting_approval");
    assert_eq!(
        rig.count("select count(*) from ledger.compensation_requests")
            .await,
        1
    );
    assert_eq!(
        rig.count("select count(*) from ledger.awaiting_approval")
            .await,
        1
    );
    assert_eq!(
        rig.count("select count(*) from ledger.effects where compensates is not null")
            .await,
        0
    );
    assert_eq!(
        rig.fake.requests(Route::Create),
        0,
        "nothing is sent before approval"
    );

    // The requester cannot approve their own request; the database says so.
    let before = rig.footprint().await;
    let error = rig
        .settler("Alice ")
        .settle(approve("refund:BIG:v1"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, SettleError::Ledger(LedgerError::NotApplicable(_))),
        "{error}"
    );
    assert!(error.to_string().contains("cannot also approve"), "{error}");
    assert_eq!(rig.footprint().await, before);

    let approved = rig
        .settler("bob")
        .settle(approve("refund:BIG:v1"))
        .await
        .unwrap();
    assert_eq!(approved.detail["sent"], true, "{}", approved.summary);
    assert!(
        approved.summary.starts_with("approved"),
        "{}",
        approved.summary
    );
    let compensation = rig.effect("compensate:refund:BIG:v1:1").await;
    assert_eq!(compensation.requested_by, "alice");
    assert!(
        compensation
            .approval_ref
            .unwrap()
            .starts_with("compensation_request:")
    );
    assert_eq!(rig.effect("refund:BIG:v1").await.state, State::Compensated);
    assert_eq!(rig.fake.reversals_of(&original_ref).len(), 1);
    let decided: (String, Option<String>) =
        sqlx::query_as("select state, decided_by from ledger.compensation_requests")
            .fetch_one(&rig.db.pool)
            .await
            .unwrap();
    assert_eq!(decided, ("created".to_string(), Some("bob".to_string())));

    // Rejected: nothing is created or sent, and a new request may follow.
    rig.succeeded_effect("refund:BIG:v2", 7000).await;
    alice
        .settle(compensate("refund:BIG:v2", None))
        .await
        .unwrap();
    let rejected = rig
        .settler("bob")
        .settle(Request::on_effect(
            &verbs::REJECT,
            "refund:BIG:v2",
            None,
            Answers::because("the customer keeps it"),
        ))
        .await
        .unwrap();
    assert!(
        rejected.summary.starts_with("rejected"),
        "{}",
        rejected.summary
    );
    assert_eq!(
        rig.count("select count(*) from ledger.awaiting_approval")
            .await,
        0
    );
    assert_eq!(rig.fake.requests(Route::Create), 1);
    let error = rig
        .settler("bob")
        .settle(approve("refund:BIG:v2"))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("waiting for approval"),
        "{error}"
    );

    // Below the limit, no approval is needed.
    rig.succeeded_effect("refund:SMALL:v1", 900).await;
    let direct = alice
        .settle(compensate("refund:SMALL:v1", None))
        .await
        .unwrap();
    assert_eq!(direct.detail["sent"], true);
    rig.audit_intact().await;
}

#[tokio::test]
async fn refusals_write_nothing_and_send_nothing() {
    let rig = Rig::new().await;
    rig.succeeded_effect("refund:R:v1", 300).await;
    rig.unknown_effect("refund:R:v2", 300).await;
    let seen = rig.effect("refund:R:v1").await.version;
    let before = rig.footprint().await;

    let stale = rig
        .settler("alice")
        .settle(compensate("refund:R:v1", Some(seen - 1)))
        .await
        .unwrap_err();
    assert!(
        matches!(stale, SettleError::Ledger(LedgerError::Changed(_))),
        "{stale}"
    );
    let unknown = rig
        .settler("alice")
        .settle(compensate("refund:R:v2", None))
        .await
        .unwrap_err();
    assert!(
        unknown.to_string().contains("cannot compensate"),
        "{unknown}"
    );
    let no_reason = rig
        .settler("alice")
        .settle(Request::on_effect(
            &verbs::COMPENSATE,
            "refund:R:v1",
            None,
            Answers::because(" "),
        ))
        .await
        .unwrap_err();
    assert!(no_reason.to_string().contains("reason"), "{no_reason}");

    assert_eq!(rig.footprint().await, before);
    assert_eq!(rig.fake.requests(Route::Create), 0);
}
