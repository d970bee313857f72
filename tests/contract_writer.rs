//! The writer API contract (`ledger.begin_effect`, `mark_dispatched`, `complete_effect`) against
//! a real PostgreSQL: replays, in-flight effects, webhook redeliveries, mismatched params,
//! concurrent callers, conflicts per target, retries and late results.

mod common;

use effectwatch::ledger::LedgerPool;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effectwatch::ledger::actions::{self, Finding, Resolution, SeenVersion};
use effectwatch::ledger::history::find_effect;
use effectwatch::ledger::writer::{
    Begun, Completion, ErrorClass, Intent, Outcome, begin_and_dispatch, begin_effect,
    complete_effect, mark_dispatched, mark_dispatched_on_target,
};
use effectwatch::ledger::{Decision, Effect, LedgerError, State};
use serde_json::{Value, json};
use sqlx::{PgConnection, Row};
use tokio::sync::Barrier;

const CONCURRENCY: usize = 16;
const ROUNDS: usize = 3;

fn intent(op_key: &str, action: &str, target: &str, params: Value) -> Intent {
    Intent {
        op_key: op_key.to_string(),
        action: action.to_string(),
        target: target.to_string(),
        params,
        requested_by: "agent-7".to_string(),
        ..Intent::default()
    }
}

fn refund(op_key: &str, target: &str) -> Intent {
    intent(
        op_key,
        "refund",
        target,
        json!({"amount_minor": 1500, "currency": "EUR"}),
    )
}

async fn effect(pool: &LedgerPool, op_key: &str) -> Effect {
    find_effect(pool, op_key)
        .await
        .expect("read the effect")
        .unwrap_or_else(|| panic!("no effect with key {op_key}"))
}

async fn effect_rows(pool: &LedgerPool, op_key: &str) -> i64 {
    sqlx::query_scalar("select count(*) from ledger.effects where op_key = $1")
        .bind(op_key)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The kinds of the attempts recorded for a key, in order.
async fn attempt_kinds(pool: &LedgerPool, op_key: &str) -> Vec<String> {
    sqlx::query_scalar("select kind from ledger.attempts where op_key = $1 order by id")
        .bind(op_key)
        .fetch_all(pool)
        .await
        .unwrap()
}

/// The state of each version of an effect, in order: its history as the ledger keeps it (the
/// stored versions, and the one it was created with where that is its row's own).
async fn version_states(pool: &LedgerPool, op_key: &str) -> Vec<String> {
    sqlx::query_scalar(
        "select v.state from ledger.effect_history v
           join ledger.effects e on e.id = v.effect_id
          where e.op_key = $1 order by v.version",
    )
    .bind(op_key)
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn attempts_of_kind(pool: &LedgerPool, op_key: &str, kind: &str) -> i64 {
    sqlx::query_scalar("select count(*) from ledger.attempts where op_key = $1 and kind = $2")
        .bind(op_key)
        .bind(kind)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn done(external_ref: &str, result: Value) -> Completion {
    Completion {
        external_ref: Some(external_ref.to_string()),
        result: Some(result),
        worker: Some("worker-1".to_string()),
        ..Completion::default()
    }
}

/// begin -> claim -> complete, as a well-behaved agent does.
async fn run_to(pool: &LedgerPool, intent: &Intent, outcome: Outcome, completion: &Completion) {
    let begun = begin_effect(pool, intent).await.unwrap();
    assert!(
        begun.decision.may_dispatch(),
        "{}: {:?}",
        intent.op_key,
        begun
    );
    let claim = mark_dispatched(pool, &intent.op_key, None, "worker-1")
        .await
        .unwrap();
    assert!(claim.claimed);
    let completed = complete_effect(pool, &intent.op_key, outcome, completion)
        .await
        .unwrap();
    assert!(completed.applied, "{}: {:?}", intent.op_key, completed);
}

async fn connections(db: &common::TestDb, n: usize) -> Vec<PgConnection> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(db.connect().await);
    }
    out
}

/// Every connection calls begin_effect with its own intent at the same moment; returns the
/// connections (for the next round) and what each call answered.
async fn begin_all_at_once(
    conns: Vec<PgConnection>,
    intents: Vec<Intent>,
) -> (Vec<PgConnection>, Vec<Begun>) {
    assert_eq!(conns.len(), intents.len());
    let barrier = Arc::new(Barrier::new(conns.len()));
    let mut tasks = Vec::new();
    for (mut conn, intent) in conns.into_iter().zip(intents) {
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let begun = begin_effect(&mut conn, &intent).await;
            (conn, begun)
        }));
    }
    let mut conns = Vec::new();
    let mut answers = Vec::new();
    for task in tasks {
        let (conn, begun) = task.await.expect("task");
        conns.push(conn);
        answers
            .push(begun.unwrap_or_else(|e| panic!("begin_effect failed under concurrency: {e}")));
    }
    (conns, answers)
}

fn count(answers: &[Begun], decision: Decision) -> usize {
    answers.iter().filter(|b| b.decision == decision).count()
}

#[tokio::test]
async fn the_same_request_twice_replays_the_stored_result() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let key = "refund:INV-402:AP-91:v1";
    let request = refund(key, "invoice:INV-402");

    let first = begin_effect(pool, &request).await.unwrap();
    assert_eq!(first.decision, Decision::Proceed);
    assert_eq!(first.state, State::Pending);
    assert_eq!(first.result, None);
    let stored = json!({"refund_id": "re_1", "status": "done", "amount_minor": 1500});
    let claim = mark_dispatched(pool, key, Some("req-1"), "worker-1")
        .await
        .unwrap();
    assert!(claim.claimed);
    let completed = complete_effect(pool, key, Outcome::Succeeded, &done("re_1", stored.clone()))
        .await
        .unwrap();
    assert!(completed.applied && !completed.late);
    assert_eq!(completed.state, State::Succeeded);

    let second = begin_effect(pool, &request).await.unwrap();
    assert_eq!(second.decision, Decision::Replay);
    assert_eq!(second.effect_id, first.effect_id);
    assert_eq!(second.state, State::Succeeded);
    assert_eq!(second.result, Some(stored.clone()));

    assert_eq!(effect_rows(pool, key).await, 1);
    assert_eq!(attempts_of_kind(pool, key, "replay").await, 1);
    let row = effect(pool, key).await;
    assert_eq!(row.external_ref.as_deref(), Some("re_1"));
    assert_eq!(row.result, Some(stored.clone()));

    // A psql-level caller with named arguments gets the same answer.
    let sql = sqlx::query(
        "select decision, effect_id, state, result from ledger.begin_effect(
            op_key => $1, action => 'refund', target => 'invoice:INV-402',
            params => '{\"amount_minor\": 1500, \"currency\": \"EUR\"}', requested_by => 'psql-user')",
    )
    .bind(key)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(sql.get::<String, _>("decision"), "replay");
    assert_eq!(sql.get::<i64, _>("effect_id"), first.effect_id);
    assert_eq!(sql.get::<Value, _>("result"), stored);
    assert_eq!(effect_rows(pool, key).await, 1);
    assert_eq!(attempts_of_kind(pool, key, "replay").await, 2);
    // The completion is the effect's third version, not an attempt: attempts are the
    // calls beyond the happy path's own.
    assert_eq!(
        attempt_kinds(pool, key).await,
        ["dispatch", "replay", "replay"]
    );
    assert_eq!(
        version_states(pool, key).await,
        ["pending", "pending", "succeeded"]
    );
}

#[tokio::test]
async fn an_unknown_or_dispatched_effect_is_in_flight_never_proceed() {
    let db = common::test_db().await;
    let pool = &db.pool;

    // Completed as unknown (a timeout): never dispatched again blindly.
    let key = "booking:HOTEL-1:v1";
    let request = intent(key, "booking", "hotel:1", json!({"nights": 2}));
    assert_eq!(
        begin_effect(pool, &request).await.unwrap().decision,
        Decision::Proceed
    );
    assert!(mark_dispatched(pool, key, None, "w").await.unwrap().claimed);
    let timeout = Completion {
        reason: Some("timeout after 30 s".into()),
        ..Completion::default()
    };
    let completed = complete_effect(pool, key, Outcome::Unknown, &timeout)
        .await
        .unwrap();
    assert_eq!(completed.state, State::Unknown);
    for _ in 0..3 {
        let again = begin_effect(pool, &request).await.unwrap();
        assert_eq!(again.decision, Decision::InFlight);
        assert_eq!(again.state, State::Unknown);
        let claim = mark_dispatched(pool, key, None, "w").await.unwrap();
        assert!(
            !claim.claimed,
            "an unknown effect must not be claimed again"
        );
    }
    assert_eq!(effect(pool, key).await.state, State::Unknown);
    assert_eq!(attempts_of_kind(pool, key, "in_flight").await, 3);
    assert_eq!(attempts_of_kind(pool, key, "proceed").await, 0);

    // Pending and dispatched, no answer yet.
    let key = "message:USER-9:welcome";
    let request = intent(key, "message", "user:9", json!({"template": "welcome"}));
    assert_eq!(
        begin_effect(pool, &request).await.unwrap().decision,
        Decision::Proceed
    );
    assert!(mark_dispatched(pool, key, None, "w").await.unwrap().claimed);
    let again = begin_effect(pool, &request).await.unwrap();
    assert_eq!(again.decision, Decision::InFlight);
    assert_eq!(again.state, State::Pending);
    assert!(
        !mark_dispatched(pool, key, None, "w2")
            .await
            .unwrap()
            .claimed
    );

    // Pending but not yet dispatched is in flight as well: another caller must not start it.
    let key = "message:USER-10:welcome";
    let request = intent(key, "message", "user:10", json!({"template": "welcome"}));
    assert_eq!(
        begin_effect(pool, &request).await.unwrap().decision,
        Decision::Proceed
    );
    assert_eq!(
        begin_effect(pool, &request).await.unwrap().decision,
        Decision::InFlight
    );
}

/// What a naive webhook handler does for one delivery: record the event under its id, try to
/// claim it whatever the decision said, and do the work only when the claim succeeded.
async fn deliver(pool: &LedgerPool, event_id: &str) -> (Decision, bool) {
    let request = intent(
        event_id,
        "webhook",
        "order:77",
        json!({"event": "order.paid", "order": 77}),
    );
    let begun = begin_effect(pool, &request).await.unwrap();
    let claim = mark_dispatched(pool, event_id, None, "webhook-worker")
        .await
        .unwrap();
    (begun.decision, claim.claimed)
}

#[tokio::test]
async fn a_webhook_delivered_several_times_does_its_work_once() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let work = AtomicUsize::new(0);
    let event = "evt_1NZ2aXK9";

    // Delivery 1 claims the event and starts the work.
    let (decision, claimed) = deliver(pool, event).await;
    assert_eq!(decision, Decision::Proceed);
    assert!(claimed);
    work.fetch_add(1, Ordering::SeqCst);

    // Delivery 2 arrives while the work is still running.
    let (decision, claimed) = deliver(pool, event).await;
    assert_eq!(decision, Decision::InFlight);
    assert!(!claimed, "a second delivery must not be able to claim");

    complete_effect(
        pool,
        event,
        Outcome::Succeeded,
        &done("wh-1", json!({"ok": true})),
    )
    .await
    .unwrap();

    // Delivery 3 arrives after the work is done.
    let (decision, claimed) = deliver(pool, event).await;
    assert_eq!(decision, Decision::Replay);
    assert!(!claimed);

    assert_eq!(work.load(Ordering::SeqCst), 1);
    assert_eq!(effect_rows(pool, event).await, 1);
    assert_eq!(
        attempt_kinds(pool, event).await,
        [
            "dispatch",
            "in_flight",
            "dispatch_refused",
            "replay",
            "dispatch_refused"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_webhook_deliveries_do_the_work_once() {
    let db = common::test_db().await;
    for deliveries in [2usize, 3] {
        let event = format!("evt_concurrent_{deliveries}");
        let work = Arc::new(AtomicUsize::new(0));
        let barrier = Arc::new(Barrier::new(deliveries));
        let mut tasks = Vec::new();
        for _ in 0..deliveries {
            let pool = db.pool.clone();
            let (event, work, barrier) = (event.clone(), work.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let (decision, claimed) = deliver(&pool, &event).await;
                if claimed {
                    work.fetch_add(1, Ordering::SeqCst);
                    complete_effect(
                        &pool,
                        &event,
                        Outcome::Succeeded,
                        &done("wh", json!({"ok": true})),
                    )
                    .await
                    .unwrap();
                }
                (decision, claimed)
            }));
        }
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        assert_eq!(work.load(Ordering::SeqCst), 1, "{answers:?}");
        assert_eq!(answers.iter().filter(|(_, claimed)| *claimed).count(), 1);
        assert_eq!(
            answers
                .iter()
                .filter(|(d, _)| *d == Decision::Proceed)
                .count(),
            1,
            "{answers:?}"
        );
        assert!(
            answers.iter().all(|(d, _)| matches!(
                d,
                Decision::Proceed | Decision::InFlight | Decision::Replay
            )),
            "{answers:?}"
        );
        assert_eq!(effect_rows(&db.pool, &event).await, 1);
        assert_eq!(attempts_of_kind(&db.pool, &event, "dispatch").await, 1);
    }
}

#[tokio::test]
async fn the_same_key_with_other_params_is_rejected_and_never_merged() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let key = "refund:INV-500:AP-1:v1";
    let original = refund(key, "invoice:INV-500");
    assert_eq!(
        begin_effect(pool, &original).await.unwrap().decision,
        Decision::Proceed
    );
    let before = effect(pool, key).await;

    let mut other = original.clone();
    other.params = json!({"amount_minor": 1600, "currency": "EUR"});
    other.requested_by = "agent-8".into();
    let rejected = begin_effect(pool, &other).await.unwrap();
    assert_eq!(rejected.decision, Decision::Rejected);
    assert_eq!(rejected.effect_id, before.id);
    assert_eq!(rejected.result, None);

    let after = effect(pool, key).await;
    assert_eq!(after.params, before.params);
    assert_eq!(after.params_hash, before.params_hash);
    assert_eq!(after.version, before.version);
    assert_eq!(after.state, State::Pending);
    assert_eq!(
        after.params,
        json!({"amount_minor": 1500, "currency": "EUR"})
    );

    let mismatch = sqlx::query(
        "select params, params_hash, requested_by, flagged from ledger.attempts
          where op_key = $1 and kind = 'mismatch'",
    )
    .bind(key)
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(mismatch.len(), 1);
    assert_eq!(
        mismatch[0].get::<Option<Value>, _>("params"),
        Some(json!({"amount_minor": 1600, "currency": "EUR"}))
    );
    assert_ne!(
        mismatch[0]
            .get::<Option<String>, _>("params_hash")
            .as_deref(),
        Some(before.params_hash.as_str())
    );
    assert_eq!(
        mismatch[0]
            .get::<Option<String>, _>("requested_by")
            .as_deref(),
        Some("agent-8")
    );
    assert!(mismatch[0].get::<bool, _>("flagged"));

    // Same key, same params, other action or target: also a different intent.
    let mut other_action = original.clone();
    other_action.action = "payout".into();
    assert_eq!(
        begin_effect(pool, &other_action).await.unwrap().decision,
        Decision::Rejected
    );
    let mut other_target = original.clone();
    other_target.target = "invoice:INV-501".into();
    assert_eq!(
        begin_effect(pool, &other_target).await.unwrap().decision,
        Decision::Rejected
    );
    assert_eq!(attempts_of_kind(pool, key, "mismatch").await, 3);
    assert_eq!(effect(pool, key).await.version, before.version);

    // The same params written with keys in another order and other whitespace are the same
    // intent, whether they come from a driver or as JSON text typed in SQL.
    let reordered = |decision: &'static str| {
        let pool = pool.clone();
        async move {
            let got: String = sqlx::query_scalar(
                "select decision from ledger.begin_effect(
                    op_key => $1, action => 'refund', target => 'invoice:INV-500',
                    params => '{   \"currency\" :\"EUR\",
                                   \"amount_minor\":    1500 }'::jsonb,
                    requested_by => 'psql-user')",
            )
            .bind(key)
            .fetch_one(&pool)
            .await
            .unwrap();
            assert_eq!(got, decision);
        }
    };
    reordered("in_flight").await;
    let mut from_text = original.clone();
    from_text.params =
        serde_json::from_str("{\"currency\":\"EUR\",\n \"amount_minor\" : 1500}").unwrap();
    assert_eq!(
        begin_effect(pool, &from_text).await.unwrap().decision,
        Decision::InFlight
    );

    assert!(mark_dispatched(pool, key, None, "w").await.unwrap().claimed);
    complete_effect(
        pool,
        key,
        Outcome::Succeeded,
        &done("re_500", json!({"id": 1})),
    )
    .await
    .unwrap();
    reordered("replay").await;
    assert_eq!(attempts_of_kind(pool, key, "mismatch").await, 3);
    assert_eq!(effect_rows(pool, key).await, 1);
}

/// A repeat call is answered from the effect that holds its key, even when
/// its arguments would not make a valid new row: the key's answer comes
/// first, and the repeat takes no effect id on its way.
#[tokio::test]
async fn a_repeat_whose_arguments_no_new_row_could_hold_is_answered_not_refused() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let key = "refund:INV-510:v1";
    let original = refund(key, "invoice:INV-510");
    let first = begin_effect(pool, &original).await.unwrap();
    assert_eq!(first.decision, Decision::Proceed);

    let mut zero_window = original.clone();
    zero_window.pending_window_secs = Some(0);
    assert_eq!(
        begin_effect(pool, &zero_window).await.unwrap().decision,
        Decision::InFlight
    );
    let mut amount_without_currency = original.clone();
    amount_without_currency.amount_minor = Some(1500);
    let answer = begin_effect(pool, &amount_without_currency).await.unwrap();
    assert_eq!(answer.decision, Decision::Rejected);
    assert_eq!(answer.effect_id, first.effect_id);
    assert_eq!(attempt_kinds(pool, key).await, ["in_flight", "mismatch"]);

    let next = begin_effect(pool, &refund("refund:INV-511:v1", "invoice:INV-511"))
        .await
        .unwrap();
    assert_eq!(next.effect_id, first.effect_id + 1);
}
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_callers_of_one_key_converge_on_one_proceed() {
    let db = common::test_db().await;
    let mut conns = connections(&db, CONCURRENCY).await;
    for round in 0..ROUNDS {
        let key = format!("refund:INV-C{round}:v1");
        let intents = (0..CONCURRENCY)
            .map(|i| {
                let mut intent = refund(&key, &format!("invoice:C{round}"));
                intent.requested_by = format!("agent-{i}");
                intent
            })
            .collect();
        let (back, answers) = begin_all_at_once(conns, intents).await;
        conns = back;
        assert_eq!(
            count(&answers, Decision::Proceed),
            1,
            "round {round}: {answers:?}"
        );
        assert_eq!(
            count(&answers, Decision::InFlight),
            CONCURRENCY - 1,
            "round {round}: {answers:?}"
        );
        let id = answers[0].effect_id;
        assert!(answers.iter().all(|b| b.effect_id == id));
        assert_eq!(effect_rows(&db.pool, &key).await, 1);
        assert_eq!(
            attempts_of_kind(&db.pool, &key, "in_flight").await,
            (CONCURRENCY - 1) as i64
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_keys_on_one_exclusive_target_hold_all_but_one() {
    let db = common::test_db().await;
    let mut conns = connections(&db, CONCURRENCY).await;
    for round in 0..ROUNDS {
        let target = format!("invoice:T{round}");
        let intents = (0..CONCURRENCY)
            .map(|i| refund(&format!("refund:T{round}:AP-{i}"), &target))
            .collect();
        let (back, answers) = begin_all_at_once(conns, intents).await;
        conns = back;
        assert_eq!(
            count(&answers, Decision::Proceed),
            1,
            "round {round}: {answers:?}"
        );
        assert_eq!(
            count(&answers, Decision::Held),
            CONCURRENCY - 1,
            "round {round}: {answers:?}"
        );
        let proceeding = answers
            .iter()
            .find(|b| b.decision == Decision::Proceed)
            .unwrap()
            .effect_id;
        let rows =
            sqlx::query("select state, held_by from ledger.effects where target = $1 and id <> $2")
                .bind(&target)
                .bind(proceeding)
                .fetch_all(&db.pool)
                .await
                .unwrap();
        assert_eq!(rows.len(), CONCURRENCY - 1);
        for row in rows {
            assert_eq!(row.get::<String, _>("state"), "held");
            assert_eq!(row.get::<Option<i64>, _>("held_by"), Some(proceeding));
        }
        let in_view: i64 = sqlx::query_scalar(
            "select count(*) from ledger.held_conflicts where target = $1 and holder_effect_id = $2",
        )
        .bind(&target)
        .bind(proceeding)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(in_view, (CONCURRENCY - 1) as i64);
    }
}

async fn version(pool: &LedgerPool, op_key: &str) -> SeenVersion {
    SeenVersion(effect(pool, op_key).await.version)
}

async fn held_keys(pool: &LedgerPool) -> Vec<(String, String)> {
    sqlx::query_as("select op_key, holder_op_key from ledger.held_conflicts order by op_key")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_second_key_on_an_exclusive_target_is_held_until_released_or_cancelled() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let target = "invoice:INV-700";
    let a = refund("refund:INV-700:A", target);
    let b = refund("refund:INV-700:B", target);
    let c = refund("refund:INV-700:C", target);

    assert_eq!(
        begin_effect(pool, &a).await.unwrap().decision,
        Decision::Proceed
    );
    let held = begin_effect(pool, &b).await.unwrap();
    assert_eq!(held.decision, Decision::Held);
    assert_eq!(held.state, State::Held);
    assert_eq!(
        held_keys(pool).await,
        [(
            "refund:INV-700:B".to_string(),
            "refund:INV-700:A".to_string()
        )]
    );
    // Asking again does not change anything.
    assert_eq!(
        begin_effect(pool, &b).await.unwrap().decision,
        Decision::Held
    );
    assert!(
        !mark_dispatched(pool, &b.op_key, None, "w")
            .await
            .unwrap()
            .claimed
    );
    assert_eq!(
        begin_effect(pool, &c).await.unwrap().decision,
        Decision::Held
    );
    assert_eq!(held_keys(pool).await.len(), 2);
    // Another action on the same target is no conflict.
    let note = intent("message:INV-700:1", "message", target, json!({}));
    assert_eq!(
        begin_effect(pool, &note).await.unwrap().decision,
        Decision::Proceed
    );

    // Releasing the hold makes it pending, and it leaves the pane.
    let released = actions::RELEASE
        .call(
            pool,
            &b.op_key,
            version(pool, &b.op_key).await,
            "alice",
            "A was checked by hand",
        )
        .await
        .unwrap();
    assert_eq!(released.state, State::Pending);
    let row = effect(pool, &b.op_key).await;
    assert_eq!(row.state, State::Pending);
    assert_eq!(row.held_by, None);
    assert_eq!(
        held_keys(pool).await,
        [(
            "refund:INV-700:C".to_string(),
            "refund:INV-700:A".to_string()
        )]
    );
    let closed: Vec<(String, String)> = sqlx::query_as(
        "select e.op_key, h.closed_how from ledger.holds h join ledger.effects e on e.id = h.effect_id
          where h.closed_at is not null order by e.op_key",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(closed, [("refund:INV-700:B".into(), "released".into())]);
    assert!(
        mark_dispatched(pool, &b.op_key, None, "w")
            .await
            .unwrap()
            .claimed
    );

    // Cancelling a hold makes it cancelled and it leaves the pane; the key is closed for good.
    let cancelled = actions::CANCEL
        .call(
            pool,
            &c.op_key,
            version(pool, &c.op_key).await,
            "alice",
            "duplicate of A",
        )
        .await
        .unwrap();
    assert_eq!(cancelled.state, State::Cancelled);
    assert_eq!(effect(pool, &c.op_key).await.state, State::Cancelled);
    assert!(held_keys(pool).await.is_empty());
    assert_eq!(
        begin_effect(pool, &c).await.unwrap().decision,
        Decision::Stop
    );
    let open_holds: i64 =
        sqlx::query_scalar("select count(*) from ledger.holds where closed_at is null")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(open_holds, 0);
}

#[tokio::test]
async fn a_policy_can_make_an_action_non_exclusive_per_target() {
    let db = common::test_db().await;
    let pool = &db.pool;
    sqlx::query(
        "insert into ledger.action_policies (action, exclusive_per_target) values ('message', false)",
    )
    .execute(pool)
    .await
    .unwrap();
    let target = "user:42";
    for i in 0..3 {
        let m = intent(
            &format!("message:42:{i}"),
            "message",
            target,
            json!({"n": i}),
        );
        let begun = begin_effect(pool, &m).await.unwrap();
        assert_eq!(begun.decision, Decision::Proceed, "message {i}");
    }
    // An action without such a policy stays exclusive on the same target.
    let r1 = refund("refund:42:1", target);
    let r2 = refund("refund:42:2", target);
    assert_eq!(
        begin_effect(pool, &r1).await.unwrap().decision,
        Decision::Proceed
    );
    assert_eq!(
        begin_effect(pool, &r2).await.unwrap().decision,
        Decision::Held
    );
    assert_eq!(
        held_keys(pool).await,
        [("refund:42:2".to_string(), "refund:42:1".to_string())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retryable_failure_is_retried_by_exactly_one_caller() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let key = "refund:INV-800:v1";
    let request = refund(key, "invoice:INV-800");
    let failed = Completion {
        reason: Some("provider said 429".into()),
        ..Completion::default()
    };
    run_to(pool, &request, Outcome::Failed { retryable: true }, &failed).await;
    let row = effect(pool, key).await;
    assert_eq!(row.state, State::Failed);
    assert_eq!(row.retryable, Some(true));
    assert!(row.dispatched_at.is_some());

    let retry = begin_effect(pool, &request).await.unwrap();
    assert_eq!(retry.decision, Decision::Retry);
    assert_eq!(retry.state, State::Pending);
    let row = effect(pool, key).await;
    assert_eq!(row.state, State::Pending);
    assert_eq!(row.dispatched_at, None);
    assert_eq!(row.retryable, None);
    assert_eq!(row.failure_reason, None);
    assert!(mark_dispatched(pool, key, None, "w").await.unwrap().claimed);
    complete_effect(pool, key, Outcome::Failed { retryable: true }, &failed)
        .await
        .unwrap();

    // Many retriers at once: exactly one gets to retry.
    let conns = connections(&db, CONCURRENCY).await;
    let (_conns, answers) =
        begin_all_at_once(conns, (0..CONCURRENCY).map(|_| request.clone()).collect()).await;
    assert_eq!(count(&answers, Decision::Retry), 1, "{answers:?}");
    assert_eq!(
        count(&answers, Decision::InFlight),
        CONCURRENCY - 1,
        "{answers:?}"
    );
    assert_eq!(attempts_of_kind(pool, key, "retry").await, 2);
    assert_eq!(effect_rows(pool, key).await, 1);

    // A failure that is not retryable stops every later caller.
    assert!(mark_dispatched(pool, key, None, "w").await.unwrap().claimed);
    complete_effect(
        pool,
        key,
        Outcome::Failed { retryable: false },
        &Completion {
            reason: Some("card declined".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    for _ in 0..2 {
        let stop = begin_effect(pool, &request).await.unwrap();
        assert_eq!(stop.decision, Decision::Stop);
        assert_eq!(stop.state, State::Failed);
    }
    let row = effect(pool, key).await;
    assert_eq!(row.state, State::Failed);
    assert_eq!(row.retryable, Some(false));
    assert_eq!(row.failure_reason.as_deref(), Some("card declined"));
    assert!(!mark_dispatched(pool, key, None, "w").await.unwrap().claimed);
}

async fn assert_late(pool: &LedgerPool, key: &str, settled: State) {
    let before = effect(pool, key).await;
    assert_eq!(before.state, settled);
    assert_eq!(before.late_result_at, None);
    let late = complete_effect(
        pool,
        key,
        Outcome::Succeeded,
        &done("late-ref", json!({"late": true})),
    )
    .await
    .unwrap();
    assert!(!late.applied, "{key}: {late:?}");
    assert!(late.late, "{key}: {late:?}");
    assert_eq!(late.state, settled);

    let after = effect(pool, key).await;
    assert_eq!(after.state, settled);
    assert_eq!(after.external_ref, before.external_ref);
    assert_eq!(after.result, before.result);
    assert!(after.late_result_at.is_some());
    let (kind, flagged, detail): (String, bool, Value) = sqlx::query_as(
        "select kind, flagged, detail from ledger.attempts where op_key = $1 order by id desc limit 1",
    )
    .bind(key)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(kind, "late_result");
    assert!(flagged);
    assert_eq!(detail["external_ref"], "late-ref");
    assert_eq!(detail["state_when_received"], settled.as_str());
}

#[tokio::test]
async fn a_late_result_after_settlement_is_flagged_never_applied() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let unknown = Completion {
        reason: Some("connection reset".into()),
        ..Completion::default()
    };

    // Reconciled as absent -> failed, then the worker's success arrives.
    let key = "refund:LATE:1";
    run_to(pool, &refund(key, "invoice:L1"), Outcome::Unknown, &unknown).await;
    let finding = Finding {
        provider: "stripe".into(),
        finding: "absent".into(),
        external_refs: vec![],
        evidence: json!({"searched": key}),
        duration_ms: 12,
    };
    let reconciled =
        actions::record_reconciliation(pool, key, version(pool, key).await, "alice", &finding)
            .await
            .unwrap();
    assert_eq!(reconciled.state, State::Failed);
    assert_late(pool, key, State::Failed).await;

    // Resolved by an operator as succeeded with another reference.
    let key = "refund:LATE:2";
    run_to(pool, &refund(key, "invoice:L2"), Outcome::Unknown, &unknown).await;
    actions::resolve(
        pool,
        key,
        version(pool, key).await,
        "alice",
        "seen in the provider dashboard",
        &Resolution::Succeeded {
            external_ref: "op-ref".into(),
        },
    )
    .await
    .unwrap();
    assert_late(pool, key, State::Succeeded).await;

    // Resolved by an operator as failed while still pending (dispatched, no answer).
    let key = "refund:LATE:3";
    let request = refund(key, "invoice:L3");
    begin_effect(pool, &request).await.unwrap();
    mark_dispatched(pool, key, None, "w").await.unwrap();
    actions::resolve(
        pool,
        key,
        version(pool, key).await,
        "alice",
        "provider confirmed it never arrived",
        &Resolution::Failed { retryable: false },
    )
    .await
    .unwrap();
    assert_late(pool, key, State::Failed).await;

    // The same answer delivered twice is a harmless repeat, not a late result.
    let key = "refund:LATE:4";
    let answer = done("re_4", json!({"id": 4}));
    run_to(
        pool,
        &refund(key, "invoice:L4"),
        Outcome::Succeeded,
        &answer,
    )
    .await;
    let repeat = complete_effect(pool, key, Outcome::Succeeded, &answer)
        .await
        .unwrap();
    assert!(!repeat.applied);
    assert!(!repeat.late);
    assert_eq!(repeat.state, State::Succeeded);
    let row = effect(pool, key).await;
    assert_eq!(row.late_result_at, None);
    let (kind, flagged): (String, bool) = sqlx::query_as(
        "select kind, flagged from ledger.attempts where op_key = $1 order by id desc limit 1",
    )
    .bind(key)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!((kind.as_str(), flagged), ("completion_repeat", false));
    let flagged_count: i64 =
        sqlx::query_scalar("select count(*) from ledger.attempts where op_key = $1 and flagged")
            .bind(key)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(flagged_count, 0);
}

#[tokio::test]
async fn a_new_hold_points_at_the_open_effect_in_the_way_not_a_settled_one() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let target = "invoice:INV-900";
    let a = refund("refund:INV-900:A", target);
    let b = refund("refund:INV-900:B", target);
    let c = refund("refund:INV-900:C", target);
    assert_eq!(
        begin_effect(pool, &a).await.unwrap().decision,
        Decision::Proceed
    );
    assert_eq!(
        begin_effect(pool, &b).await.unwrap().decision,
        Decision::Held
    );
    // A settles; B stays held until a person decides, and is now what is in the way.
    run_to_completion(pool, &a.op_key).await;
    assert_eq!(
        begin_effect(pool, &c).await.unwrap().decision,
        Decision::Held
    );

    let holders: Vec<(String, String, String)> = sqlx::query_as(
        "select op_key, holder_op_key, holder_state from ledger.held_conflicts order by op_key",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(
        holders,
        [
            (b.op_key.clone(), a.op_key.clone(), "succeeded".to_string()),
            (c.op_key.clone(), b.op_key.clone(), "held".to_string()),
        ],
        "C must be shown held by the open effect B, not by the settled A"
    );
    let hold_holder: String = sqlx::query_scalar(
        "select e.op_key from ledger.holds h join ledger.effects e on e.id = h.holder_id
          join ledger.effects held on held.id = h.effect_id where held.op_key = $1",
    )
    .bind(&c.op_key)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(hold_holder, b.op_key);
}

async fn run_to_completion(pool: &LedgerPool, op_key: &str) {
    assert!(
        mark_dispatched(pool, op_key, None, "w")
            .await
            .unwrap()
            .claimed
    );
    let done = complete_effect(pool, op_key, Outcome::Succeeded, &done("re", json!({})))
        .await
        .unwrap();
    assert!(done.applied);
}

/// A retry must not open a second effect on an exclusive target: while
/// another key is open there, the failed effect waits (decision `held`,
/// state still failed) instead of going back to pending.
#[tokio::test]
async fn a_retry_waits_while_another_key_is_open_on_the_target() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let first = refund("refund:INV-9:a", "invoice:INV-9");
    run_to(
        pool,
        &first,
        Outcome::Failed { retryable: true },
        &Completion::default(),
    )
    .await;
    let second = refund("refund:INV-9:b", "invoice:INV-9");
    assert_eq!(
        begin_effect(pool, &second).await.unwrap().decision,
        Decision::Proceed
    );

    let again = begin_effect(pool, &first).await.unwrap();
    assert_eq!(again.decision, Decision::Held);
    assert_eq!(effect(pool, "refund:INV-9:a").await.state, State::Failed);

    run_to_completion(pool, "refund:INV-9:b").await;
    assert_eq!(
        begin_effect(pool, &first).await.unwrap().decision,
        Decision::Retry
    );
}

/// Clearing dispatched_at by hand would let a second worker claim the call.
#[tokio::test]
async fn a_dispatch_cannot_be_undone_by_hand() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let intent = refund("refund:INV-10:a", "invoice:INV-10");
    begin_effect(pool, &intent).await.unwrap();
    assert!(
        mark_dispatched(pool, "refund:INV-10:a", None, "w1")
            .await
            .unwrap()
            .claimed
    );
    let error = sqlx::query(
        "update ledger.effects set dispatched_at = null where op_key = 'refund:INV-10:a'",
    )
    .execute(pool)
    .await
    .unwrap_err();
    assert!(error.to_string().contains("cannot be undone"), "{error}");
    assert!(
        !mark_dispatched(pool, "refund:INV-10:a", None, "w2")
            .await
            .unwrap()
            .claimed
    );
}

/// The amount, currency and provider are part of the intent: a retry that
/// changes one of them is another intent, never dispatched under this key.
#[tokio::test]
async fn a_changed_amount_currency_or_provider_is_rejected() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let mut original = refund("refund:INV-11:a", "invoice:INV-11");
    original.amount_minor = Some(1500);
    original.currency = Some("EUR".into());
    original.provider = Some("pay".into());
    run_to(
        pool,
        &original,
        Outcome::Failed { retryable: true },
        &Completion::default(),
    )
    .await;
    for change in [
        Intent {
            amount_minor: Some(150_000),
            ..original.clone()
        },
        Intent {
            currency: Some("USD".into()),
            ..original.clone()
        },
        Intent {
            provider: Some("other".into()),
            ..original.clone()
        },
    ] {
        assert_eq!(
            begin_effect(pool, &change).await.unwrap().decision,
            Decision::Rejected
        );
    }
    assert_eq!(
        attempts_of_kind(pool, "refund:INV-11:a", "mismatch").await,
        3
    );
    let lowercase = Intent {
        currency: Some("eur".into()),
        ..original.clone()
    };
    assert_eq!(
        begin_effect(pool, &lowercase).await.unwrap().decision,
        Decision::Retry
    );
}

/// A success reported for an effect recorded as failed means the money
/// moved: the key must never be retried, and a person must look.
#[tokio::test]
async fn a_late_success_on_a_failed_effect_stops_its_retries() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let intent = refund("refund:INV-12:a", "invoice:INV-12");
    run_to(
        pool,
        &intent,
        Outcome::Failed { retryable: true },
        &Completion::default(),
    )
    .await;
    let late = complete_effect(
        pool,
        "refund:INV-12:a",
        Outcome::Succeeded,
        &done("re_late", json!({})),
    )
    .await
    .unwrap();
    assert!(late.late);
    let row = effect(pool, "refund:INV-12:a").await;
    assert_eq!(row.state, State::Failed);
    assert_eq!(row.retryable, Some(false));
    assert_eq!(row.attention.as_deref(), Some("mismatch"));
    assert_eq!(
        begin_effect(pool, &intent).await.unwrap().decision,
        Decision::Stop
    );
}

/// Reconciliation must not fail a call still inside its window (the
/// provider may not show it yet), nor settle an effect on a record that is
/// already another effect's reference.
#[tokio::test]
async fn reconciliation_guards_in_flight_calls_and_foreign_references() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let key = "refund:INV-13:a";
    let mut first = refund(key, "invoice:INV-13");
    first.provider = Some("pay".into());
    first.pending_window_secs = Some(600);
    begin_effect(pool, &first).await.unwrap();
    assert!(mark_dispatched(pool, key, None, "w").await.unwrap().claimed);
    let finding = |finding: &str, refs: Vec<String>| Finding {
        provider: "pay".into(),
        finding: finding.into(),
        external_refs: refs,
        evidence: json!({}),
        duration_ms: 3,
    };
    let seen = effect(pool, key).await.version;
    let absent = actions::record_reconciliation(
        pool,
        key,
        SeenVersion(seen),
        "alice",
        &finding("absent", vec![]),
    )
    .await
    .unwrap();
    assert_eq!(
        absent.state,
        State::Pending,
        "absent inside the window proves nothing"
    );
    let stored: String =
        sqlx::query_scalar("select finding from ledger.reconciliations where op_key = $1")
            .bind(key)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(stored, "indeterminate");

    let other = "refund:INV-13:b";
    let mut second = refund(other, "invoice:INV-13b");
    second.provider = Some("pay".into());
    run_to(
        pool,
        &second,
        Outcome::Succeeded,
        &done("re_shared", json!({})),
    )
    .await;
    let seen = effect(pool, key).await.version;
    let found = actions::record_reconciliation(
        pool,
        key,
        SeenVersion(seen),
        "alice",
        &finding("exists_once", vec!["re_shared".into()]),
    )
    .await
    .unwrap();
    assert_eq!(
        found.state,
        State::Pending,
        "another effect's reference settles nothing"
    );
    assert_eq!(
        effect(pool, key).await.attention.as_deref(),
        Some("mismatch")
    );
}

/// (stored version rows, the history's states, the first version's actor, db role, whether
/// it is at creation and due a window later).
async fn creation_as_kept(
    pool: &LedgerPool,
    op_key: &str,
) -> (i64, Vec<String>, String, String, bool) {
    let row = sqlx::query(
        "select (select count(*) from ledger.effect_versions v where v.effect_id = e.id) as stored,
                array(select h.state from ledger.effect_history h where h.effect_id = e.id
                       order by h.version) as states,
                first.actor, first.db_role,
                first.at = e.created_at and first.state_since = e.created_at
                    and first.deadline_at is not distinct from e.created_at + e.pending_window
                    as as_created
           from ledger.effects e
          cross join lateral (select h.* from ledger.effect_history h
                               where h.effect_id = e.id and h.version = 1) first
          where e.op_key = $1",
    )
    .bind(op_key)
    .fetch_one(pool)
    .await
    .unwrap();
    (
        row.get("stored"),
        row.get("states"),
        row.get("actor"),
        row.get("db_role"),
        row.get("as_created"),
    )
}

/// The login the tests write with: a version's db role.
async fn session_login(pool: &LedgerPool) -> String {
    sqlx::query_scalar("select session_user::text")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_version_an_effect_is_created_with_is_a_row_only_when_its_own_row_cannot_say_it() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let login = session_login(pool).await;

    // An agent's new key, the hot path: no row for its creation, and the history reads the
    // version from the effect's own creation columns, as the row would have said.
    let plain = "refund:CREATED:plain";
    begin_effect(pool, &refund(plain, "invoice:CREATED-1"))
        .await
        .unwrap();
    assert_eq!(
        creation_as_kept(pool, plain).await,
        (
            0,
            vec!["pending".to_string()],
            "agent-7".to_string(),
            login.clone(),
            true
        )
    );
    let before_completion: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("select clock_timestamp()")
            .fetch_one(pool)
            .await
            .unwrap();
    mark_dispatched(pool, plain, None, "worker-1")
        .await
        .unwrap();
    complete_effect(
        pool,
        plain,
        Outcome::Succeeded,
        &Completion {
            external_ref: Some("re_1".to_string()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        creation_as_kept(pool, plain).await.1,
        ["pending", "pending", "succeeded"]
    );
    // The past reads it too: before its dispatch it was pending, version 1, due a window on.
    let (state, version, due_as_created): (String, i64, bool) = sqlx::query_as(
        "select a.state, a.version, a.deadline_at = a.created_at + a.pending_window
           from ledger.effects_at($1) a where a.op_key = $2",
    )
    .bind(before_completion)
    .bind(plain)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(
        (state.as_str(), version, due_as_created),
        ("pending", 1, true)
    );
    let events: Vec<(Option<String>, String)> = sqlx::query_as(
        "select from_state, to_state from ledger.effect_events where op_key = $1 order by at, id",
    )
    .bind(plain)
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(
        events,
        [
            (None, "pending".to_string()),
            (Some("pending".to_string()), "succeeded".to_string())
        ]
    );

    // Held behind the open one: its row cannot say what held it at creation, so it is kept.
    let blocker = "refund:CREATED:blocker";
    let held = "refund:CREATED:held";
    begin_effect(pool, &refund(blocker, "invoice:CREATED-2"))
        .await
        .unwrap();
    assert_eq!(
        begin_effect(pool, &refund(held, "invoice:CREATED-2"))
            .await
            .unwrap()
            .decision,
        Decision::Held
    );
    assert_eq!(creation_as_kept(pool, held).await.0, 1);

    // By hand, with a reason, or with a deadline of its own: kept, and read back as written.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("select set_config('ledger.reason', 'imported from the old system', true)")
        .execute(&mut tx)
        .await
        .unwrap();
    sqlx::query(
        "insert into ledger.effects (op_key, action, target, params_hash, requested_by, state,
                                     pending_window, deadline_at)
         values ('by-hand:reason', 'refund', 'invoice:CREATED-3', 'x', 'importer', 'pending',
                 interval '5 minutes', now() + interval '5 minutes')",
    )
    .execute(&mut tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    sqlx::query(
        "insert into ledger.effects (op_key, action, target, params_hash, requested_by, state,
                                     pending_window)
         values ('by-hand:no-deadline', 'refund', 'invoice:CREATED-4', 'x', 'importer', 'pending',
                 interval '5 minutes')",
    )
    .execute(pool)
    .await
    .unwrap();
    for key in ["by-hand:reason", "by-hand:no-deadline"] {
        assert_eq!(creation_as_kept(pool, key).await.0, 1, "{key}");
    }
    let reason: Option<String> = sqlx::query_scalar(
        "select reason from ledger.effect_history h join ledger.effects e on e.id = h.effect_id
          where e.op_key = 'by-hand:reason'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(reason.as_deref(), Some("imported from the old system"));

    // The mark is part of the row's identity: no update may move a creation in or out.
    let refused =
        sqlx::query("update ledger.effects set creation_version_stored = true where op_key = $1")
            .bind(plain)
            .execute(pool)
            .await;
    assert!(refused.is_err(), "{refused:?}");
}

/// (stored version rows, whether the latest version is the row's own, the history as JSON
/// without its ids, oldest first).
async fn versions_as_kept(pool: &LedgerPool, op_key: &str) -> (i64, bool, Vec<serde_json::Value>) {
    let row = sqlx::query(
        "select (select count(*) from ledger.effect_versions v where v.effect_id = e.id) as stored,
                e.latest_version_in_row,
                array(select to_jsonb(h) - 'id' from ledger.effect_history h
                       where h.effect_id = e.id order by h.version) as history
           from ledger.effects e where e.op_key = $1",
    )
    .bind(op_key)
    .fetch_one(pool)
    .await
    .unwrap();
    (
        row.get("stored"),
        row.get("latest_version_in_row"),
        row.get("history"),
    )
}

#[tokio::test]
async fn the_latest_version_is_a_row_only_when_its_own_row_cannot_say_it_or_a_change_supersedes_it()
{
    let db = common::test_db().await;
    let pool = &db.pool;
    let login = session_login(pool).await;

    // The hot path: an agent's plain answer is the row's own columns, read back as the
    // version a row would have said.
    let plain = "refund:LATEST:plain";
    begin_effect(pool, &refund(plain, "invoice:LATEST-1"))
        .await
        .unwrap();
    let unnamed = Completion {
        worker: None,
        ..done("re_L1", json!({}))
    };
    complete_effect(pool, plain, Outcome::Succeeded, &unnamed)
        .await
        .unwrap();
    let (stored, in_row, history) = versions_as_kept(pool, plain).await;
    assert_eq!((stored, in_row, history.len()), (0, true, 2));
    let answered = &history[1];
    let row = effect(pool, plain).await;
    assert_eq!(answered["version"], json!(2));
    assert_eq!(answered["from_state"], json!("pending"));
    assert_eq!(answered["state"], json!("succeeded"));
    assert_eq!(answered["actor"], json!("agent-7"));
    assert_eq!(answered["db_role"], json!(login));
    assert_eq!(answered["reason"], json!("worker reported succeeded"));
    assert_eq!(answered["external_ref"], json!("re_L1"));
    let answered_at: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(answered["at"].clone()).unwrap();
    assert_eq!(answered_at, row.updated_at);
    assert_eq!(
        last_version(pool, plain).await,
        (
            "pending".into(),
            "succeeded".into(),
            "agent-7".into(),
            "worker reported succeeded".into()
        )
    );

    // A later change supersedes it: it becomes a row as it stood, and the history before the
    // change reads the same, word for word.
    let late = complete_effect(
        pool,
        plain,
        Outcome::Failed { retryable: false },
        &Completion::default(),
    )
    .await
    .unwrap();
    assert!(late.late);
    let (stored, in_row, after) = versions_as_kept(pool, plain).await;
    assert_eq!((stored, in_row, after.len()), (2, false, 3));
    assert_eq!(after[..2], history[..]);
    assert_eq!(after[2]["state"], json!("succeeded"));
    assert!(after[2]["late_result_at"].is_string(), "{:?}", after[2]);

    // Dispatched by a worker and answered with no worker named, as the SQL agent of
    // docs/contract.md does: the dispatch is kept when the answer supersedes it, and the answer
    // stays in the row, made by the requester.
    let worked = "refund:LATEST:worked";
    begin_effect(pool, &refund(worked, "invoice:LATEST-2"))
        .await
        .unwrap();
    mark_dispatched(pool, worked, None, "worker-9")
        .await
        .unwrap();
    assert_eq!(versions_as_kept(pool, worked).await.0, 0);
    complete_effect(pool, worked, Outcome::Succeeded, &unnamed)
        .await
        .unwrap();
    let (stored, in_row, history) = versions_as_kept(pool, worked).await;
    assert_eq!((stored, in_row, history.len()), (1, true, 3));
    let actors: Vec<(&str, &str)> = history
        .iter()
        .map(|v| (v["state"].as_str().unwrap(), v["actor"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actors,
        [
            ("pending", "agent-7"),
            ("pending", "worker-9"),
            ("succeeded", "agent-7")
        ]
    );
    assert_eq!(history[1]["reason"], json!(null));
    assert!(history[1]["dispatched_at"].is_string());

    // The answer the late result stored out of the row reads in the past as any stored
    // version: between the two, the plain effect was succeeded, version 2, with its reference.
    let (state, version, external_ref): (String, i64, Option<String>) = sqlx::query_as(
        "select a.state, a.version, a.external_ref from ledger.effects_at($1) a where a.op_key = $2",
    )
    .bind(answered_at)
    .bind(plain)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(
        (state.as_str(), version, external_ref.as_deref()),
        ("succeeded", 2, Some("re_L1"))
    );

    // An answer that names a worker, even the dispatching one, or gives a reason of its own,
    // cannot be read from the row: kept.
    let named_worker = "refund:LATEST:named-worker";
    begin_effect(pool, &refund(named_worker, "invoice:LATEST-3"))
        .await
        .unwrap();
    mark_dispatched(pool, named_worker, None, "worker-9")
        .await
        .unwrap();
    let by_the_worker = Completion {
        worker: Some("worker-9".into()),
        ..done("re_L3", json!({}))
    };
    complete_effect(pool, named_worker, Outcome::Succeeded, &by_the_worker)
        .await
        .unwrap();
    assert_eq!(versions_as_kept(pool, named_worker).await.0, 2);
    assert_eq!(last_version(pool, named_worker).await.2, "worker-9");

    let with_reason = "refund:LATEST:reason";
    begin_effect(pool, &refund(with_reason, "invoice:LATEST-4"))
        .await
        .unwrap();
    let explained = Completion {
        reason: Some("settled by the bank's batch".into()),
        worker: None,
        ..done("re_L4", json!({}))
    };
    complete_effect(pool, with_reason, Outcome::Succeeded, &explained)
        .await
        .unwrap();
    assert_eq!(versions_as_kept(pool, with_reason).await.0, 1);
    assert_eq!(
        last_version(pool, with_reason).await.3,
        "settled by the bank's batch"
    );

    // The mark is the guard's to set: a hand-written update cannot claim a version is in
    // the row.
    sqlx::query("update ledger.effects set latest_version_in_row = true where op_key = $1")
        .bind(with_reason)
        .execute(pool)
        .await
        .unwrap();
    let (stored, in_row, _) = versions_as_kept(pool, with_reason).await;
    assert_eq!((stored, in_row), (2, false));
}

#[tokio::test]
async fn a_dispatch_or_completion_naming_another_target_is_refused_and_kept() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let refund = refund("refund:TGT:v1", "invoice:TGT-1");
    assert_eq!(
        begin_effect(pool, &refund).await.unwrap().decision,
        Decision::Proceed
    );

    // A writer that took this key for another invoice's may neither claim
    // nor settle it: the effect stays as it was, and the call is kept.
    let claim = mark_dispatched_on_target(pool, &refund.op_key, "invoice:OTHER", None, "w")
        .await
        .unwrap_err();
    match claim {
        LedgerError::Refused(reason) => assert!(
            reason.contains("is on target invoice:TGT-1, not invoice:OTHER"),
            "{reason}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let elsewhere = Completion {
        target: Some("invoice:OTHER".to_string()),
        ..done("ref-TGT", json!({"id": "ref-TGT"}))
    };
    let completion = complete_effect(pool, &refund.op_key, Outcome::Succeeded, &elsewhere)
        .await
        .unwrap_err();
    assert!(
        matches!(&completion, LedgerError::Refused(reason) if reason.contains("not invoice:OTHER")),
        "{completion:?}"
    );
    let unchanged = effect(pool, &refund.op_key).await;
    assert_eq!(unchanged.state, State::Pending);
    assert!(unchanged.dispatched_at.is_none());
    let flagged: i64 = sqlx::query_scalar(
        "select count(*) from ledger.attempts
          where op_key = $1 and kind = 'refused' and flagged
            and detail ->> 'refused' like '%not invoice:OTHER'",
    )
    .bind(&refund.op_key)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(flagged, 2);

    // Naming its own target, the same calls go through.
    let claim = mark_dispatched_on_target(pool, &refund.op_key, &refund.target, None, "w")
        .await
        .unwrap();
    assert!(claim.claimed);
    let here = Completion {
        target: Some(refund.target.clone()),
        ..done("ref-TGT", json!({"id": "ref-TGT"}))
    };
    let completed = complete_effect(pool, &refund.op_key, Outcome::Succeeded, &here)
        .await
        .unwrap();
    assert!(completed.applied);
    assert_eq!(completed.state, State::Succeeded);
}

/// The version a completion leaves: (from state, state, actor, reason), latest first.
async fn last_version(pool: &LedgerPool, op_key: &str) -> (String, String, String, String) {
    let row = sqlx::query(
        "select v.from_state, v.state, v.actor, v.reason from ledger.effect_history v
           join ledger.effects e on e.id = v.effect_id
          where e.op_key = $1 order by v.version desc limit 1",
    )
    .bind(op_key)
    .fetch_one(pool)
    .await
    .unwrap();
    (
        row.get("from_state"),
        row.get("state"),
        row.get("actor"),
        row.get("reason"),
    )
}

/// A completion is applied by one statement when it is the owner's plain answer, and by the
/// full path otherwise (an error class to read, a repeat): either way the version it leaves
/// says who answered and why, and nothing is applied twice.
#[tokio::test]
async fn a_completion_keeps_who_answered_and_why_on_either_path() {
    let db = common::test_db().await;
    let pool = &db.pool;

    // No worker named: the requester answered, for the reason the ledger words.
    let plain = "refund:who-1";
    begin_effect(pool, &refund(plain, "invoice:who-1"))
        .await
        .unwrap();
    let completed = complete_effect(pool, plain, Outcome::Succeeded, &Completion::default())
        .await
        .unwrap();
    assert!(completed.applied && !completed.late);
    assert_eq!(completed.state, State::Succeeded);
    assert_eq!(
        last_version(pool, plain).await,
        (
            "pending".into(),
            "succeeded".into(),
            "agent-7".into(),
            "worker reported succeeded".into()
        )
    );

    // A named worker and its reason.
    let named = "refund:who-2";
    begin_effect(pool, &refund(named, "invoice:who-2"))
        .await
        .unwrap();
    let completion = Completion {
        worker: Some("worker-3".into()),
        reason: Some("card declined".into()),
        ..Completion::default()
    };
    let failed = complete_effect(
        pool,
        named,
        Outcome::Failed { retryable: false },
        &completion,
    )
    .await
    .unwrap();
    assert!(failed.applied);
    assert_eq!(failed.state, State::Failed);
    assert_eq!(
        last_version(pool, named).await,
        (
            "pending".into(),
            "failed".into(),
            "worker-3".into(),
            "card declined".into()
        )
    );
    assert_eq!(
        effect(pool, named).await.failure_reason.as_deref(),
        Some("card declined")
    );

    // An error class goes the full path: a timeout makes the outcome unknown.
    let timed_out = "refund:who-3";
    begin_effect(pool, &refund(timed_out, "invoice:who-3"))
        .await
        .unwrap();
    let completion = Completion {
        error_class: Some(ErrorClass::Timeout),
        ..Completion::default()
    };
    let unknown = complete_effect(pool, timed_out, Outcome::Unknown, &completion)
        .await
        .unwrap();
    assert!(unknown.applied);
    assert_eq!(unknown.state, State::Unknown);
    assert_eq!(
        last_version(pool, timed_out).await,
        (
            "pending".into(),
            "unknown".into(),
            "agent-7".into(),
            "worker reported unknown".into()
        )
    );

    // The same answer again is a repeat, kept as an attempt; no second version.
    let versions_before = version_states(pool, plain).await;
    let again = complete_effect(pool, plain, Outcome::Succeeded, &Completion::default())
        .await
        .unwrap();
    assert!(!again.applied && !again.late);
    assert_eq!(version_states(pool, plain).await, versions_before);
    assert_eq!(attempts_of_kind(pool, plain, "completion_repeat").await, 1);
}

/// A refused completion sets nothing for the rest of its transaction: a later write in it is
/// kept with its own actor and reason, not with those of the call that was refused.
#[tokio::test]
async fn a_refused_completion_leaves_no_reason_behind_in_its_transaction() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let refused_key = "refund:leak-1";
    begin_effect(pool, &refund(refused_key, "invoice:leak-1"))
        .await
        .unwrap();

    let mut tx = pool.begin().await.unwrap();
    let elsewhere = Completion {
        target: Some("invoice:elsewhere".into()),
        ..Completion::default()
    };
    let refused = complete_effect(&mut tx, refused_key, Outcome::Succeeded, &elsewhere).await;
    assert!(
        matches!(refused, Err(LedgerError::Refused(_))),
        "{refused:?}"
    );
    let reason: Option<String> =
        sqlx::query_scalar("select nullif(current_setting('ledger.reason', true), '')")
            .fetch_one(&mut tx)
            .await
            .unwrap();
    assert_eq!(reason, None, "the refused call left its reason set");
    let later = "refund:leak-2";
    begin_effect(&mut tx, &refund(later, "invoice:leak-2"))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let stored: bool =
        sqlx::query_scalar("select creation_version_stored from ledger.effects where op_key = $1")
            .bind(later)
            .fetch_one(pool)
            .await
            .unwrap();
    assert!(!stored, "a plain creation is its row's own version");
    assert_eq!(effect(pool, refused_key).await.state, State::Pending);
}

/// `begin_and_dispatch` is `begin_effect` then `mark_dispatched` in one
/// transaction: the first caller is claimed, the attempts are the two
/// calls', a repeat is in flight and then a replay, and a rejected call is
/// told what it changed, numbers compared by value.
#[tokio::test]
async fn one_call_begins_and_claims_and_a_rejected_call_is_told_what_it_changed() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let key = "refund:INV-990:v1";
    let mut request = refund(key, "invoice:INV-990");
    request.request_id = Some("req-1".into());
    request.amount_minor = Some(1500);
    request.currency = Some("EUR".into());

    let first = begin_and_dispatch(pool, &request, "worker-1", false, None)
        .await
        .unwrap()
        .expect("the caller's own key");
    assert_eq!(first.begun.decision, Decision::Proceed);
    assert!(first.dispatched, "the first caller is claimed");
    assert!(effect(pool, key).await.dispatched_at.is_some());
    assert_eq!(attempt_kinds(pool, key).await, ["dispatch"]);

    let repeat = begin_and_dispatch(pool, &request, "worker-2", false, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(repeat.begun.decision, Decision::InFlight);
    assert!(!repeat.dispatched, "a repeat is never claimed");

    let stored = json!({"refund_id": "re_9"});
    complete_effect(pool, key, Outcome::Succeeded, &done("re_9", stored.clone()))
        .await
        .unwrap();
    let replay = begin_and_dispatch(pool, &request, "worker-2", false, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(replay.begun.decision, Decision::Replay);
    assert_eq!(replay.begun.result, Some(stored));
    assert!(!replay.dispatched);

    // The same amount spelt otherwise is no difference; another amount
    // and another target are.
    let mut other = request.clone();
    other.params = json!({"amount_minor": 1500.0, "currency": "EUR", "note": "again"});
    other.target = "invoice:INV-991".into();
    other.amount_minor = Some(2500);
    let rejected = begin_and_dispatch(pool, &other, "worker-3", false, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rejected.begun.decision, Decision::Rejected);
    assert!(!rejected.dispatched);
    let said: Vec<(String, Value, Value)> = rejected
        .differences
        .into_iter()
        .map(|difference| (difference.field, difference.recorded, difference.now))
        .collect();
    assert_eq!(
        said,
        [
            (
                "target".to_string(),
                json!("invoice:INV-990"),
                json!("invoice:INV-991")
            ),
            ("amount_minor".to_string(), json!(1500), json!(2500)),
            ("params.note".to_string(), Value::Null, json!("again")),
        ]
    );
    assert_eq!(effect(pool, key).await.state, State::Succeeded);
}

/// What an effect's history, attempts and lease say of it: the same whether
/// it was begun and claimed in one call or in two.
async fn as_recorded(pool: &LedgerPool, op_key: &str) -> Vec<String> {
    sqlx::query_scalar(
        "select format('version %s %s -> %s by %s (%s), reason %s, dispatched %s, due %s', h.version,
                       h.from_state, h.state, h.actor, h.db_role, h.reason, h.dispatched_at is not null,
                       h.deadline_at - coalesce(h.dispatched_at, e.created_at))
           from ledger.effect_history h join ledger.effects e on e.id = h.effect_id
          where e.op_key = $1
         union all
         select format('row version %s, creation stored %s, latest in row %s, dispatched by %s as %s',
                       e.version, e.creation_version_stored, e.latest_version_in_row, e.dispatched_by,
                       e.dispatched_role)
           from ledger.effects e where e.op_key = $1
         union all
         select format('attempt %s by %s, request %s', a.kind, a.requested_by, a.request_id)
           from ledger.attempts a where a.op_key = $1
         union all
         select format('lease %s for %s', w.lease, w.worker)
           from ledger.worker_leases w join ledger.effects e on e.id = w.effect_id where e.op_key = $1
         order by 1",
    )
    .bind(op_key)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A new key begun and dispatched in one call is written once — inserted
/// claimed, not inserted and then updated — and reads exactly as one begun
/// and claimed in two calls: two versions, one dispatch attempt, its lease.
#[tokio::test]
async fn a_new_key_claimed_as_it_is_begun_is_written_once_and_reads_as_two_calls() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let mut one_call = refund("refund:INV-995:v1", "invoice:INV-995");
    one_call.request_id = Some("req-1".into());
    let mut two_calls = refund("refund:INV-996:v1", "invoice:INV-996");
    two_calls.request_id = Some("req-1".into());
    let lease = Some(std::time::Duration::from_secs(30));

    let mut transaction = pool.begin().await.unwrap();
    let started = begin_and_dispatch(&mut transaction, &one_call, "worker-1", false, lease)
        .await
        .unwrap()
        .expect("the caller's own key");
    let (inserted, updated): (i64, i64) = sqlx::query_as(
        "select n_tup_ins, n_tup_upd from pg_stat_xact_user_tables
          where schemaname = 'ledger' and relname = 'effects'",
    )
    .fetch_one(&mut transaction)
    .await
    .unwrap();
    transaction.commit().await.unwrap();
    assert_eq!(started.begun.decision, Decision::Proceed);
    assert!(started.dispatched);
    assert_eq!(started.heartbeat_lease, lease);
    assert_eq!((inserted, updated), (1, 0), "one write of the row");

    begin_effect(pool, &two_calls).await.unwrap();
    sqlx::query(
        "select * from ledger.mark_dispatched(op_key => $1, request_id => 'req-1', worker => 'worker-1',
                                              heartbeat_lease => interval '30 seconds')",
    )
    .bind(&two_calls.op_key)
    .execute(pool)
    .await
    .unwrap();

    let once = as_recorded(pool, &one_call.op_key).await;
    assert_eq!(once, as_recorded(pool, &two_calls.op_key).await);
    assert_eq!(
        version_states(pool, &one_call.op_key).await,
        ["pending", "pending"]
    );
    assert!(
        once.contains(&"attempt dispatch by worker-1, request req-1".to_string()),
        "{once:?}"
    );

    // The completion after it is the third version, as after two calls.
    for key in [&one_call.op_key, &two_calls.op_key] {
        complete_effect(
            pool,
            key,
            Outcome::Succeeded,
            &done("re_1", json!({"refund_id": "re_1"})),
        )
        .await
        .unwrap();
    }
    assert_eq!(
        version_states(pool, &one_call.op_key).await,
        version_states(pool, &two_calls.op_key).await
    );
    assert_eq!(effect(pool, &one_call.op_key).await.version, 3);
}

/// Only a claim made as the key is created may insert an effect at version
/// 2: a row written by hand at 2 would give it a history nobody made.
#[tokio::test]
async fn an_effect_inserted_at_version_two_that_is_no_claim_is_refused() {
    let db = common::test_db().await;
    let refused = sqlx::query(
        "insert into ledger.effects (op_key, action, target, params, params_hash, requested_by,
                                     owner_role, state, pending_window, deadline_at, version)
         values ('k-2', 'refund', 'invoice:1', '{}', ledger.params_hash('{}'), 'agent-7', session_user,
                 'pending', interval '5 minutes', now() + interval '5 minutes', 2)",
    )
    .execute(&db.pool)
    .await
    .expect_err("a version 2 that was never claimed");
    assert!(
        refused
            .to_string()
            .contains("at 2 only when claimed as it is created"),
        "{refused}"
    );
}
