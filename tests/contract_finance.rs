//! What finance calls a suspected double effect: money paid beyond what was
//! approved, largest first within a currency; never effects that moved no
//! money by count alone, never a group its approvals explain.

mod common;

use effectwatch::ledger::LedgerPool;
use effectwatch::ledger::finance;
use effectwatch::ledger::writer::{
    Completion, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use serde_json::json;

/// A succeeded effect; `money`: amount and currency, None for one that moved none.
async fn succeeded(
    pool: &LedgerPool,
    op_key: &str,
    action: &str,
    target: &str,
    money: Option<(i64, &str)>,
    approval: Option<(&str, i64)>,
) {
    let mut params = json!({"note": op_key});
    if let Some((_, approved)) = approval {
        params["approved_amount_minor"] = json!(approved);
    }
    let intent = Intent {
        op_key: op_key.into(),
        action: action.into(),
        target: target.into(),
        params,
        requested_by: "agent-1".into(),
        amount_minor: money.map(|(minor, _)| minor),
        currency: money.map(|(_, currency)| currency.to_string()),
        approval_ref: approval.map(|(reference, _)| reference.to_string()),
        ..Intent::default()
    };
    begin_effect(pool, &intent).await.unwrap();
    mark_dispatched(pool, op_key, None, "w").await.unwrap();
    let completion = Completion {
        external_ref: Some(format!("ref-{op_key}")),
        ..Completion::default()
    };
    complete_effect(pool, op_key, Outcome::Succeeded, &completion)
        .await
        .unwrap();
}

#[tokio::test]
async fn suspected_doubles_are_money_beyond_approval_largest_first_within_a_currency() {
    let db = common::test_db().await;
    let pool = &db.pool;
    // Two messages to one customer: nothing moved, nothing suspect.
    succeeded(pool, "msg:1", "notify", "customer:7", None, None).await;
    succeeded(pool, "msg:2", "notify", "customer:7", None, None).await;
    // Two refunds, each under its own approval for its own amount: explained.
    succeeded(
        pool,
        "ok:1",
        "refund",
        "invoice:OK",
        Some((500, "EUR")),
        Some(("AP-1", 500)),
    )
    .await;
    succeeded(
        pool,
        "ok:2",
        "refund",
        "invoice:OK",
        Some((700, "EUR")),
        Some(("AP-2", 700)),
    )
    .await;
    // Paid twice without approval: the second is the excess.
    succeeded(
        pool,
        "small:1",
        "refund",
        "invoice:S",
        Some((300, "EUR")),
        None,
    )
    .await;
    succeeded(
        pool,
        "small:2",
        "refund",
        "invoice:S",
        Some((300, "EUR")),
        None,
    )
    .await;
    succeeded(
        pool,
        "big:1",
        "refund",
        "invoice:B",
        Some((9_000, "EUR")),
        None,
    )
    .await;
    succeeded(
        pool,
        "big:2",
        "refund",
        "invoice:B",
        Some((9_000, "EUR")),
        None,
    )
    .await;
    // Fewer minor units, another currency: never ranked against EUR.
    succeeded(
        pool,
        "yen:1",
        "refund",
        "invoice:Y",
        Some((100, "JPY")),
        None,
    )
    .await;
    succeeded(
        pool,
        "yen:2",
        "refund",
        "invoice:Y",
        Some((100, "JPY")),
        None,
    )
    .await;

    let review = finance::review(pool, None, None).await.unwrap();
    let listed: Vec<(&str, Option<&str>, Option<i64>)> = review
        .suspected
        .iter()
        .map(|row| {
            (
                row.op_key.as_str(),
                row.currency.as_deref(),
                row.excess_minor,
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("big:1", Some("EUR"), Some(9_000)),
            ("big:2", Some("EUR"), Some(9_000)),
            ("small:1", Some("EUR"), Some(300)),
            ("small:2", Some("EUR"), Some(300)),
            ("yen:1", Some("JPY"), Some(100)),
            ("yen:2", Some("JPY"), Some(100)),
        ]
    );
    let eur = review
        .exposure
        .iter()
        .find(|row| row.currency == "EUR")
        .unwrap();
    assert_eq!(
        (eur.suspected_effects, eur.suspected_excess_minor),
        (4, 9_300),
        "the explained group adds nothing to the exposure"
    );
}

#[tokio::test]
async fn the_finance_table_never_cuts_two_keys_into_the_same_text() {
    let db = common::test_db().await;
    let stem = "refund:customer-4711:invoice-2026-11-000123:approval";
    for version in ["v1", "v2"] {
        let key = format!("{stem}:{version}");
        succeeded(
            &db.pool,
            &key,
            "refund",
            "invoice:long",
            Some((900, "EUR")),
            None,
        )
        .await;
    }
    let output = common::effectwatch_cli(&["--database-url", &db.url, "finance"]);
    assert_eq!(output.status.code(), Some(0));
    let table = String::from_utf8(output.stdout).unwrap();
    // Both keys are longer than a cell; their ends, which differ, stay.
    assert!(table.contains("approval:v1"), "{table}");
    assert!(table.contains("approval:v2"), "{table}");
    assert!(table.contains("refund:customer"), "{table}");
}

/// The suspected doubles as ledger.suspected_double_effects lists them.
async fn suspects(pool: &LedgerPool) -> Vec<(String, Vec<String>, Option<i64>)> {
    sqlx::query_as(
        "select op_key, reasons, excess_minor from ledger.suspected_double_effects order by op_key",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn finance_reads_only_the_groups_that_can_hold_a_double_and_misses_none() {
    let db = common::test_db().await;
    let pool = &db.pool;
    // Alone and within its approval: never a candidate.
    succeeded(
        pool,
        "alone:1",
        "refund",
        "order:1",
        Some((500, "EUR")),
        None,
    )
    .await;
    succeeded(
        pool,
        "alone:2",
        "refund",
        "order:2",
        Some((500, "EUR")),
        Some(("ap-2", 500)),
    )
    .await;
    // Alone and above what its own approval states.
    succeeded(
        pool,
        "above:1",
        "refund",
        "order:3",
        Some((900, "EUR")),
        Some(("ap-3", 400)),
    )
    .await;
    // Paid twice.
    succeeded(
        pool,
        "twice:1",
        "refund",
        "order:4",
        Some((300, "EUR")),
        None,
    )
    .await;
    succeeded(
        pool,
        "twice:2",
        "refund",
        "order:4",
        Some((300, "EUR")),
        None,
    )
    .await;
    // One success, and a failed effect whose approval is the only one on
    // record for the target: the success exceeds it.
    let failed = Intent {
        op_key: "other:failed".into(),
        action: "refund".into(),
        target: "order:5".into(),
        params: json!({"approved_amount_minor": 100}),
        requested_by: "agent-1".into(),
        amount_minor: Some(100),
        currency: Some("EUR".into()),
        ..Intent::default()
    };
    begin_effect(pool, &failed).await.unwrap();
    mark_dispatched(pool, "other:failed", None, "w")
        .await
        .unwrap();
    complete_effect(
        pool,
        "other:failed",
        Outcome::Failed { retryable: false },
        &Completion::default(),
    )
    .await
    .unwrap();
    succeeded(
        pool,
        "other:paid",
        "refund",
        "order:5",
        Some((700, "EUR")),
        None,
    )
    .await;

    let candidates: Vec<String> = sqlx::query_scalar(
        "select op_key from ledger.effects where double_candidate order by op_key",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(candidates, ["above:1", "other:paid", "twice:2"]);
    let listed = suspects(pool).await;
    let keys: Vec<&str> = listed.iter().map(|(key, _, _)| key.as_str()).collect();
    assert_eq!(keys, ["above:1", "other:paid", "twice:1", "twice:2"]);

    // Every effect a candidate: the rule read over every group lists the same.
    sqlx::query(
        "do $$ begin
             alter table ledger.effects disable trigger user;
             update ledger.effects set double_candidate = true;
             alter table ledger.effects enable always trigger effects_guard;
             alter table ledger.effects enable always trigger effects_frozen_identity;
             alter table ledger.effects enable always trigger effects_history;
             alter table ledger.effects enable always trigger effects_settle_original;
         end $$",
    )
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(suspects(pool).await, listed);
}
