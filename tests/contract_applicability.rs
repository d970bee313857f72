//! Which operator action applies to an effect is defined once, in
//! `ledger.refusals`: every operator function refuses exactly what it lists
//! for the effect (the console greys its keys by that list), with the same
//! sentence, and nothing else.

mod common;

use effectwatch::ledger::Decision;
use effectwatch::ledger::LedgerPool;
use effectwatch::ledger::writer::{
    Completion, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use serde_json::{Value, json};

const ACTIONS: [&str; 5] = [
    "resolve",
    "release",
    "cancel",
    "compensate",
    "acknowledge_duplicates",
];

/// Each kind of effect an operator meets, and the actions that apply to it.
const APPLIES: [(&str, &[&str]); 7] = [
    ("never dispatched", &["resolve", "cancel"]),
    ("dispatched", &["resolve"]),
    ("held", &["release", "cancel"]),
    ("unknown", &["resolve"]),
    ("succeeded", &["compensate"]),
    ("failed", &[]),
    ("asked twice", &["resolve", "acknowledge_duplicates"]),
];

/// An effect of that kind under `op_key`, on a target of its own.
async fn make(pool: &LedgerPool, op_key: &str, kind: &str) {
    let target = format!("invoice:{op_key}");
    let intent = common::intent(op_key, &target);
    if kind == "held" {
        let holder = common::intent(&format!("{op_key}:holder"), &target);
        begin_effect(pool, &holder).await.unwrap();
        mark_dispatched(pool, &holder.op_key, None, "w")
            .await
            .unwrap();
        let begun = begin_effect(pool, &intent).await.unwrap();
        assert_eq!(begun.decision, Decision::Held, "{op_key}");
        return;
    }
    begin_effect(pool, &intent).await.unwrap();
    if kind == "never dispatched" {
        return;
    }
    mark_dispatched(pool, op_key, None, "w").await.unwrap();
    let outcome = match kind {
        "unknown" => Outcome::Unknown,
        "succeeded" => Outcome::Succeeded,
        "failed" => Outcome::Failed { retryable: false },
        "asked twice" => {
            begin_effect(pool, &intent).await.unwrap();
            return;
        }
        _ => return,
    };
    let completion = Completion {
        external_ref: Some(format!("ref-{op_key}")),
        ..Completion::default()
    };
    complete_effect(pool, op_key, outcome, &completion)
        .await
        .unwrap();
}

/// Runs the operator function of `action` on the effect; the error's text if refused.
async fn run(pool: &LedgerPool, action: &str, op_key: &str) -> Result<(), String> {
    let version: i64 = sqlx::query_scalar("select version from ledger.effects where op_key = $1")
        .bind(op_key)
        .fetch_one(pool)
        .await
        .unwrap();
    let sql = match action {
        "resolve" => "select 1 from ledger.op_resolve($1, $2, 'ops', 'looked', 'failed')",
        "release" => "select 1 from ledger.op_release($1, $2, 'ops', 'looked')",
        "cancel" => "select 1 from ledger.op_cancel($1, $2, 'ops', 'looked')",
        "compensate" => "select 1 from ledger.op_compensate($1, $2, 'ops', 'looked')",
        "acknowledge_duplicates" => {
            "select 1 from ledger.op_acknowledge_duplicates($1, $2, 'ops', 'looked')"
        }
        other => panic!("no operator function for {other}"),
    };
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(op_key)
        .bind(version)
        .execute(pool)
        .await
        .map(|_| ())
        .map_err(|error| error.to_string())
}

async fn refused_actions(pool: &LedgerPool, op_key: &str) -> Value {
    sqlx::query_scalar("select refused from ledger.refusals(array[$1])")
        .bind(op_key)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn every_operator_function_refuses_exactly_what_the_ledger_lists_and_says_why() {
    let db = common::test_db().await;
    for (kind, applies) in APPLIES {
        for action in ACTIONS {
            let op_key = format!("{}-{action}", kind.replace(' ', "-"));
            make(&db.pool, &op_key, kind).await;
            let refused = refused_actions(&db.pool, &op_key).await;
            let listed: Vec<&str> = ACTIONS
                .into_iter()
                .filter(|a| refused.get(a).is_none())
                .collect();
            assert_eq!(
                listed, applies,
                "what applies to a {kind} effect: {refused}"
            );
            let ran = run(&db.pool, action, &op_key).await;
            match refused.get(action).and_then(Value::as_str) {
                Some(why) => {
                    let error = ran.expect_err(&format!("{action} ran on a {kind} effect"));
                    assert!(
                        error.contains(why) && error.contains("cannot"),
                        "{action} on a {kind} effect: {error}"
                    );
                }
                None => assert_eq!(ran, Ok(()), "{action} on a {kind} effect"),
            }
        }
    }
}

#[tokio::test]
async fn a_compensation_is_not_compensated_in_turn_and_asking_again_returns_it() {
    let db = common::test_db().await;
    make(&db.pool, "paid", "succeeded").await;
    run(&db.pool, "compensate", "paid").await.unwrap();
    let compensation: String =
        sqlx::query_scalar("select compensation_key from ledger.compensation_requests")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let refused = refused_actions(&db.pool, &compensation).await;
    assert_eq!(
        refused["compensate"],
        json!("it is itself a compensation: reconcile or resolve it instead")
    );
    let error = run(&db.pool, "compensate", &compensation)
        .await
        .unwrap_err();
    assert!(error.contains("itself a compensation"), "{error}");
    // Asking again for the original returns the compensation already made.
    run(&db.pool, "compensate", "paid").await.unwrap();
}

#[tokio::test]
async fn whether_a_compensation_waits_for_approval_is_what_op_compensate_then_does() {
    let db = common::test_db().await;
    let limit = effectwatch::ledger::policies::PolicyChange {
        compensation_approval_limit_minor: Some(Some(1_000)),
        ..Default::default()
    };
    effectwatch::ledger::policies::set(&db.pool, "refund", &limit, "ops", "four eyes above 10 EUR")
        .await
        .unwrap();
    // common::intent is 12.00 EUR: above; the second is 5.00 EUR: within.
    make(&db.pool, "above", "succeeded").await;
    let mut small = common::intent("within", "invoice:within");
    small.amount_minor = Some(500);
    begin_effect(&db.pool, &small).await.unwrap();
    mark_dispatched(&db.pool, "within", None, "w")
        .await
        .unwrap();
    let paid = Completion {
        external_ref: Some("ref-within".into()),
        ..Completion::default()
    };
    complete_effect(&db.pool, "within", Outcome::Succeeded, &paid)
        .await
        .unwrap();

    let keys = ["above".to_string(), "within".to_string()];
    let said = effectwatch::ledger::actions::applicability(&db.pool, &keys)
        .await
        .unwrap();
    for (op_key, waits) in [("above", true), ("within", false)] {
        assert_eq!(said[op_key].approval_limit_minor, Some(1_000));
        assert_eq!(said[op_key].currency.as_deref(), Some("EUR"));
        assert_eq!(
            said[op_key].compensation_waits_for_approval, waits,
            "{op_key}"
        );
        let version: i64 =
            sqlx::query_scalar("select version from ledger.effects where op_key = $1")
                .bind(op_key)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        let status: String = sqlx::query_scalar(
            "select status from ledger.op_compensate($1, $2, 'ops', 'customer asked')",
        )
        .bind(op_key)
        .bind(version)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        let expected = if waits {
            "awaiting_approval"
        } else {
            "created"
        };
        assert_eq!(status, expected, "{op_key}");
    }
}
