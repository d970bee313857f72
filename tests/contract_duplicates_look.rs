//! The duplicates pane lists the keys a person must look at and counts the
//! ones the ledger answered by itself: a plain replay is the ledger doing
//! its job. Each row says whether it needs a look and why, at any instant;
//! filters pick them (`replays-only`, `with-replays`, `mismatch`) and the
//! held pane's `holder:settled`.

mod common;

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use effectwatch::ledger::panes::{self, Filter, Pane, PaneRows};
use effectwatch::ledger::policies::{self, PolicyChange};
use effectwatch::ledger::writer::{
    Completion, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, LedgerPool};
use serde_json::json;

async fn begin(pool: &LedgerPool, intent: &Intent, expected: Decision) {
    let begun = begin_effect(pool, intent).await.unwrap();
    assert_eq!(begun.decision, expected, "{}", intent.op_key);
}

async fn succeed(pool: &LedgerPool, op_key: &str) {
    assert!(
        mark_dispatched(pool, op_key, None, "w")
            .await
            .unwrap()
            .claimed
    );
    let completion = Completion {
        external_ref: Some(format!("ref-{op_key}")),
        result: Some(json!({"ok": true})),
        ..Completion::default()
    };
    assert!(
        complete_effect(pool, op_key, Outcome::Succeeded, &completion)
            .await
            .unwrap()
            .applied
    );
}

async fn listed(pool: &LedgerPool, pane: Pane, filter: &str) -> BTreeSet<String> {
    let filter = Filter::parse(filter).unwrap();
    let rows = panes::fetch(pool, pane, None, &filter, 100, 0)
        .await
        .unwrap();
    let counted = panes::count(pool, pane, None, &filter).await.unwrap();
    assert_eq!(
        counted as usize,
        rows.len(),
        "{pane} {filter:?}: count and rows"
    );
    rows.op_keys().into_iter().map(str::to_string).collect()
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

async fn reasons_at(
    pool: &LedgerPool,
    op_key: &str,
    at: Option<DateTime<Utc>>,
) -> (bool, Vec<String>) {
    sqlx::query_as(
        "select needs_look, look_reasons from ledger.duplicate_attempts_at($2) where op_key = $1",
    )
    .bind(op_key)
    .bind(at)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn pane_count(pool: &LedgerPool, pane: &str) -> i64 {
    sqlx::query_scalar("select items from ledger.pane_counts where pane = $1")
        .bind(pane)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn now(pool: &LedgerPool) -> DateTime<Utc> {
    sqlx::query_scalar("select clock_timestamp()")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn plain_replays_are_counted_and_what_needs_a_person_is_listed() {
    let db = common::test_db().await;
    let pool = &db.pool;

    // Replayed twice: the ledger answered with the stored result.
    let replayed = common::intent("refund:R-1", "invoice:R-1");
    begin(pool, &replayed, Decision::Proceed).await;
    succeed(pool, &replayed.op_key).await;
    begin(pool, &replayed, Decision::Replay).await;
    begin(pool, &replayed, Decision::Replay).await;

    // Asked again with other parameters.
    let mismatched = common::intent("refund:M-1", "invoice:M-1");
    begin(pool, &mismatched, Decision::Proceed).await;
    succeed(pool, &mismatched.op_key).await;
    let mut changed = mismatched.clone();
    changed.params = json!({"amount_minor": 9900, "currency": "EUR"});
    begin(pool, &changed, Decision::Rejected).await;

    // Asked again while the first call had no answer yet.
    let repeated = common::intent("refund:F-1", "invoice:F-1");
    begin(pool, &repeated, Decision::Proceed).await;
    assert!(
        mark_dispatched(pool, &repeated.op_key, None, "w")
            .await
            .unwrap()
            .claimed
    );
    begin(pool, &repeated, Decision::InFlight).await;

    assert_eq!(reasons_at(pool, "refund:R-1", None).await, (false, vec![]));
    assert_eq!(
        reasons_at(pool, "refund:M-1", None).await,
        (true, vec!["mismatch".to_string()])
    );
    assert_eq!(
        reasons_at(pool, "refund:F-1", None).await,
        (true, vec!["repeat in flight".to_string()])
    );

    // The pane lists what needs a look; the counts say both.
    assert_eq!(
        listed(pool, Pane::Duplicates, "").await,
        set(&["refund:M-1", "refund:F-1"])
    );
    assert_eq!(pane_count(pool, "duplicates").await, 2);
    assert_eq!(pane_count(pool, "replays").await, 1);
    assert_eq!(
        listed(pool, Pane::Duplicates, "replays-only").await,
        set(&["refund:R-1"])
    );
    assert_eq!(
        listed(pool, Pane::Duplicates, "with-replays").await,
        set(&["refund:R-1", "refund:M-1", "refund:F-1"])
    );
    assert_eq!(
        listed(pool, Pane::Duplicates, "mismatch").await,
        set(&["refund:M-1"])
    );
    assert_eq!(
        listed(pool, Pane::Duplicates, "with-replays R-1").await,
        set(&["refund:R-1"])
    );
    // A scope that means nothing to a pane lists nothing there; one that
    // only widens leaves it as it is.
    assert!(listed(pool, Pane::Held, "mismatch").await.is_empty());
    assert!(
        Filter::parse("replays-only with-replays").is_err(),
        "the two ask for different things"
    );
    let PaneRows::Duplicates(rows) =
        panes::fetch(pool, Pane::Duplicates, None, &Filter::default(), 10, 0)
            .await
            .unwrap()
    else {
        panic!("duplicates rows")
    };
    assert!(rows.iter().all(|row| row.needs_look));
}

#[tokio::test]
async fn a_burst_of_replays_needs_a_look_by_the_actions_policy_and_not_before() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let change = PolicyChange {
        replay_burst_per_hour: Some(2),
        ..PolicyChange::default()
    };
    let (policy, _) = policies::set(pool, "refund", &change, "ops", "agents loop")
        .await
        .unwrap();
    assert_eq!(policy["replay_burst_per_hour"], 2);
    let zero = PolicyChange {
        replay_burst_per_hour: Some(0),
        ..PolicyChange::default()
    };
    assert!(
        policies::set(pool, "refund", &zero, "ops", "no")
            .await
            .is_err()
    );

    let looping = common::intent("refund:L-1", "invoice:L-1");
    begin(pool, &looping, Decision::Proceed).await;
    succeed(pool, &looping.op_key).await;
    begin(pool, &looping, Decision::Replay).await;
    begin(pool, &looping, Decision::Replay).await;
    let at_two = now(pool).await;
    begin(pool, &looping, Decision::Replay).await;

    assert_eq!(
        reasons_at(pool, "refund:L-1", None).await,
        (true, vec!["replay burst".to_string()])
    );
    assert_eq!(
        listed(pool, Pane::Duplicates, "").await,
        set(&["refund:L-1"])
    );
    // As it stood after two replays: within the limit, counted, not listed.
    assert_eq!(
        reasons_at(pool, "refund:L-1", Some(at_two)).await,
        (false, vec![])
    );
    let counts_then: Vec<(String, i64)> =
        sqlx::query_as("select pane, items from ledger.pane_counts_at($1) where pane in ('duplicates', 'replays') order by pane")
            .bind(at_two)
            .fetch_all(pool)
            .await
            .unwrap();
    assert_eq!(
        counts_then,
        [("duplicates".to_string(), 0), ("replays".to_string(), 1)]
    );
    assert_eq!(
        policies::for_action(pool, "refund")
            .await
            .unwrap()
            .replay_burst_per_hour,
        2
    );
    assert_eq!(
        policies::for_action(pool, "booking")
            .await
            .unwrap()
            .replay_burst_per_hour,
        20,
        "an action with no policy of its own has the default"
    );
}

#[tokio::test]
async fn held_items_whose_holder_settled_are_picked_by_a_filter() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let holder = common::intent("refund:H-1", "invoice:H");
    let waiting = common::intent("refund:H-2", "invoice:H");
    let other_holder = common::intent("refund:G-1", "invoice:G");
    let other_waiting = common::intent("refund:G-2", "invoice:G");
    begin(pool, &holder, Decision::Proceed).await;
    begin(pool, &waiting, Decision::Held).await;
    begin(pool, &other_holder, Decision::Proceed).await;
    begin(pool, &other_waiting, Decision::Held).await;
    assert!(listed(pool, Pane::Held, "holder:settled").await.is_empty());

    // Its holder succeeded: the held one stays for a person (policy: leave).
    succeed(pool, &holder.op_key).await;
    assert_eq!(
        listed(pool, Pane::Held, "holder:settled").await,
        set(&["refund:H-2"])
    );
    assert_eq!(
        listed(pool, Pane::Held, "").await,
        set(&["refund:H-2", "refund:G-2"])
    );
    assert!(
        listed(pool, Pane::Duplicates, "holder:settled")
            .await
            .is_empty()
    );
}
