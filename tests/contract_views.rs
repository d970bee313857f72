//! The panes are views: each lists exactly the effects it should, a filter narrows it, each is
//! served by its partial index on a ledger full of settled effects, and every change is
//! announced on the NOTIFY channel the consoles listen on.

mod common;

use effectwatch::ledger::LedgerPool;
use std::collections::BTreeSet;
use std::time::Duration;

use effectwatch::ledger::NOTIFY_CHANNEL;
use effectwatch::ledger::actions::{self, SeenVersion};
use effectwatch::ledger::panes::{self, Filter, Pane, PaneRows};
use effectwatch::ledger::writer::{
    Completion, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, State};
use serde_json::{Value, json};
use sqlx::postgres::PgListener;

fn intent(op_key: &str, action: &str, target: &str, window_secs: i64) -> Intent {
    Intent {
        op_key: op_key.to_string(),
        action: action.to_string(),
        target: target.to_string(),
        params: json!({"amount_minor": 700, "currency": "EUR"}),
        requested_by: "agent-a".to_string(),
        pending_window_secs: Some(window_secs),
        amount_minor: Some(700),
        currency: Some("EUR".into()),
        provider: Some("stripe".into()),
        ..Intent::default()
    }
}

async fn begin(pool: &LedgerPool, intent: &Intent, expected: Decision) {
    let begun = begin_effect(pool, intent).await.unwrap();
    assert_eq!(begun.decision, expected, "{}", intent.op_key);
}

async fn dispatch(pool: &LedgerPool, op_key: &str) {
    assert!(
        mark_dispatched(pool, op_key, None, "w")
            .await
            .unwrap()
            .claimed,
        "{op_key}"
    );
}

async fn complete(pool: &LedgerPool, op_key: &str, outcome: Outcome) {
    let completion = Completion {
        external_ref: Some(format!("ref-{op_key}")),
        result: Some(json!({"ok": true})),
        ..Completion::default()
    };
    assert!(
        complete_effect(pool, op_key, outcome, &completion)
            .await
            .unwrap()
            .applied
    );
}

async fn view_keys(pool: &LedgerPool, view: &str) -> BTreeSet<String> {
    sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!("select op_key from {view}")))
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

async fn fetched(pool: &LedgerPool, pane: Pane, filter: &str) -> BTreeSet<String> {
    let filter = Filter::parse(filter).unwrap();
    panes::fetch(pool, pane, None, &filter, 100, 0)
        .await
        .unwrap()
        .op_keys()
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// One effect in every situation a pane cares about (compensated is not reachable through the
/// writer API and is left out).
async fn build_ledger(pool: &LedgerPool) {
    const LONG: i64 = 3600;
    // Pending within its window, prepared: no pane.
    begin(
        pool,
        &intent("v:fresh", "refund", "invoice:1", LONG),
        Decision::Proceed,
    )
    .await;
    // Pending past a one-second window, prepared and dispatched.
    begin(
        pool,
        &intent("v:overdue-a", "refund", "invoice:9", 1),
        Decision::Proceed,
    )
    .await;
    let mut overdue_b = intent("v:overdue-b", "refund", "invoice:17", 1);
    overdue_b.requested_by = "agent-b".into();
    begin(pool, &overdue_b, Decision::Proceed).await;
    dispatch(pool, "v:overdue-b").await;
    // Unknown outcomes.
    for (key, target) in [("v:unknown-a", "invoice:9"), ("v:unknown-b", "invoice:17")] {
        begin(
            pool,
            &intent(key, "payout", target, LONG),
            Decision::Proceed,
        )
        .await;
        dispatch(pool, key).await;
        complete(pool, key, Outcome::Unknown).await;
    }
    // Settled: no pane.
    begin(
        pool,
        &intent("v:succeeded", "refund", "invoice:2", LONG),
        Decision::Proceed,
    )
    .await;
    dispatch(pool, "v:succeeded").await;
    complete(pool, "v:succeeded", Outcome::Succeeded).await;
    begin(
        pool,
        &intent("v:failed", "refund", "invoice:3", LONG),
        Decision::Proceed,
    )
    .await;
    dispatch(pool, "v:failed").await;
    complete(pool, "v:failed", Outcome::Failed { retryable: false }).await;
    // Held behind a pending effect on the same target; another held one is then cancelled.
    begin(
        pool,
        &intent("v:holder", "refund", "invoice:4", LONG),
        Decision::Proceed,
    )
    .await;
    begin(
        pool,
        &intent("v:held", "refund", "invoice:4", LONG),
        Decision::Held,
    )
    .await;
    begin(
        pool,
        &intent("v:held-cancelled", "refund", "invoice:4", LONG),
        Decision::Held,
    )
    .await;
    actions::CANCEL
        .call(
            pool,
            "v:held-cancelled",
            SeenVersion(1),
            "alice",
            "duplicate",
        )
        .await
        .unwrap();
    begin(
        pool,
        &intent("v:holder-9", "booking", "invoice:9", LONG),
        Decision::Proceed,
    )
    .await;
    begin(
        pool,
        &intent("v:held-9", "booking", "invoice:9", LONG),
        Decision::Held,
    )
    .await;
    // Cancelled before dispatch.
    begin(
        pool,
        &intent("v:cancelled", "refund", "invoice:5", LONG),
        Decision::Proceed,
    )
    .await;
    actions::CANCEL
        .call(pool, "v:cancelled", SeenVersion(1), "alice", "not needed")
        .await
        .unwrap();
    // Duplicate attempts: a replay, an in-flight repeat, a mismatch.
    let dup = intent("v:dup", "refund", "invoice:6", LONG);
    begin(pool, &dup, Decision::Proceed).await;
    dispatch(pool, "v:dup").await;
    complete(pool, "v:dup", Outcome::Succeeded).await;
    begin(pool, &dup, Decision::Replay).await;
    let again = intent("v:again", "notify", "invoice:7", LONG);
    begin(pool, &again, Decision::Proceed).await;
    begin(pool, &again, Decision::InFlight).await;
    let mut mismatch = intent("v:mismatch", "charge", "invoice:9", LONG);
    begin(pool, &mismatch, Decision::Proceed).await;
    mismatch.params = json!({"amount_minor": 7000, "currency": "EUR"});
    begin(pool, &mismatch, Decision::Rejected).await;

    // Let the one-second windows pass.
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

#[tokio::test]
async fn each_pane_lists_exactly_its_items() {
    let db = common::test_db().await;
    let pool = &db.pool;
    build_ledger(pool).await;

    let expected = [
        (
            Pane::Overdue,
            "ledger.overdue_pending",
            set(&["v:overdue-a", "v:overdue-b"]),
        ),
        (
            Pane::Unknown,
            "ledger.unknown_outcomes",
            set(&["v:unknown-a", "v:unknown-b"]),
        ),
        (
            Pane::Duplicates,
            "ledger.duplicate_attempts",
            set(&["v:dup", "v:again", "v:mismatch"]),
        ),
        (
            Pane::Held,
            "ledger.held_conflicts",
            set(&["v:held", "v:held-9"]),
        ),
    ];
    for (pane, view, keys) in &expected {
        assert_eq!(&view_keys(pool, view).await, keys, "{view}");
        assert_eq!(&fetched(pool, *pane, "with-replays").await, keys, "{pane}");
    }
    // The duplicates pane lists what needs a look; a plain replay is counted.
    assert_eq!(
        fetched(pool, Pane::Duplicates, "").await,
        set(&["v:again", "v:mismatch"])
    );
    assert_eq!(
        fetched(pool, Pane::Duplicates, "replays-only").await,
        set(&["v:dup"])
    );

    // What the panes say about their items.
    let PaneRows::Overdue(overdue) =
        panes::fetch(pool, Pane::Overdue, None, &Filter::default(), 10, 0)
            .await
            .unwrap()
    else {
        panic!("overdue rows")
    };
    let dispatched: Vec<(&str, bool)> = overdue
        .iter()
        .map(|r| (r.op_key.as_str(), r.dispatched))
        .collect();
    assert_eq!(dispatched, [("v:overdue-a", false), ("v:overdue-b", true)]);
    assert!(overdue.iter().all(|r| r.overdue_ms > 0));

    let PaneRows::Held(held) = panes::fetch(pool, Pane::Held, None, &Filter::default(), 10, 0)
        .await
        .unwrap()
    else {
        panic!("held rows")
    };
    let holders: Vec<(&str, &str, &str)> = held
        .iter()
        .map(|r| {
            (
                r.op_key.as_str(),
                r.holder_op_key.as_str(),
                r.holder_state.as_str(),
            )
        })
        .collect();
    assert_eq!(
        holders,
        [
            ("v:held", "v:holder", "pending"),
            ("v:held-9", "v:holder-9", "pending")
        ]
    );

    let PaneRows::Duplicates(duplicates) = panes::fetch(
        pool,
        Pane::Duplicates,
        None,
        &Filter::parse("with-replays").unwrap(),
        10,
        0,
    )
    .await
    .unwrap() else {
        panic!("duplicate rows")
    };
    // Mismatches come first.
    assert_eq!(duplicates[0].op_key, "v:mismatch");
    assert!(duplicates[0].has_mismatch);
    assert_eq!(duplicates[0].mismatches, 1);
    let dup = duplicates.iter().find(|r| r.op_key == "v:dup").unwrap();
    assert_eq!(
        (dup.replays, dup.in_flight, dup.has_mismatch),
        (1, 0, false)
    );
    assert_eq!(dup.state, "succeeded");
    let again = duplicates.iter().find(|r| r.op_key == "v:again").unwrap();
    assert_eq!((again.replays, again.in_flight), (0, 1));

    let counts = panes::counts(pool, None).await.unwrap();
    let items: Vec<(&str, i64)> = counts.iter().map(|c| (c.pane.as_str(), c.items)).collect();
    assert_eq!(
        items,
        [
            ("overdue", 2),
            ("unknown", 2),
            ("duplicates", 2),
            ("replays", 1),
            ("held", 2),
            ("escalations", 0),
            ("approvals", 0),
            ("audit", 2)
        ]
    );

    // Settling an item takes it out of its pane.
    complete(pool, "v:overdue-b", Outcome::Succeeded).await;
    assert_eq!(
        view_keys(pool, "ledger.overdue_pending").await,
        set(&["v:overdue-a"])
    );
    let version: i64 =
        sqlx::query_scalar("select version from ledger.effects where op_key = 'v:unknown-a'")
            .fetch_one(pool)
            .await
            .unwrap();
    actions::resolve(
        pool,
        "v:unknown-a",
        SeenVersion(version),
        "alice",
        "confirmed",
        &actions::Resolution::Failed { retryable: false },
    )
    .await
    .unwrap();
    assert_eq!(
        view_keys(pool, "ledger.unknown_outcomes").await,
        set(&["v:unknown-b"])
    );
}

#[tokio::test]
async fn a_filter_narrows_each_pane() {
    let db = common::test_db().await;
    let pool = &db.pool;
    build_ledger(pool).await;

    let cases: [(Pane, &str, &[&str]); 21] = [
        (Pane::Overdue, "target:invoice:9", &["v:overdue-a"]),
        (Pane::Unknown, "target:invoice:9", &["v:unknown-a"]),
        (Pane::Duplicates, "target:invoice:9", &["v:mismatch"]),
        (Pane::Held, "target:invoice:9", &["v:held-9"]),
        (Pane::Overdue, "target:invoice:17", &["v:overdue-b"]),
        // Plain words match the key, target, action, provider or requester.
        (Pane::Overdue, "overdue-b", &["v:overdue-b"]),
        (Pane::Overdue, "agent-b", &["v:overdue-b"]),
        (Pane::Unknown, "payout", &["v:unknown-a", "v:unknown-b"]),
        (Pane::Unknown, "STRIPE", &["v:unknown-a", "v:unknown-b"]),
        (Pane::Held, "booking", &["v:held-9"]),
        (Pane::Duplicates, "notify", &["v:again"]),
        // Every word must match.
        (Pane::Unknown, "payout target:invoice:17", &["v:unknown-b"]),
        (Pane::Unknown, "payout 17", &["v:unknown-b"]),
        (Pane::Unknown, "payout target:invoice:4", &[]),
        (Pane::Overdue, "requester:agent-a", &["v:overdue-a"]),
        // state: means the effect's state in every pane.
        (
            Pane::Overdue,
            "state:pending target:invoice:9",
            &["v:overdue-a"],
        ),
        (Pane::Overdue, "state:held", &[]),
        (Pane::Held, "state:held target:invoice:9", &["v:held-9"]),
        // operator: is the audit's and the escalations'; no pane has it.
        (Pane::Unknown, "operator:alice", &[]),
        // LIKE wildcards in a filter are plain characters.
        (Pane::Overdue, "key:%", &[]),
        (Pane::Unknown, "v_unknown", &[]),
    ];
    for (pane, filter, keys) in cases {
        assert_eq!(
            fetched(pool, pane, filter).await,
            set(keys),
            "{pane} filtered by {filter:?}"
        );
    }
    // A field a pane does not have matches nothing there rather than everything.
    assert_eq!(fetched(pool, Pane::Held, "provider:stripe").await, set(&[]));
    // Keys and targets are full of colons: an unknown prefix is plain text.
    assert_eq!(
        Filter::parse("invoice:INV-7").unwrap().terms,
        vec![(None, "invoice:INV-7".to_string())]
    );
    assert!(Filter::parse("target:").is_err());
}

/// Every index the plan of `sql` uses.
async fn plan_indexes(pool: &LedgerPool, sql: &str) -> (BTreeSet<String>, Value) {
    let plan: Value =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("explain (format json) {sql}")))
            .fetch_one(pool)
            .await
            .unwrap();
    fn walk(node: &Value, out: &mut BTreeSet<String>) {
        match node {
            Value::Object(map) => {
                if let Some(Value::String(name)) = map.get("Index Name") {
                    out.insert(name.clone());
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut names = BTreeSet::new();
    walk(&plan, &mut names);
    // A month of a history table is served by its copy of the table's index.
    let names: Vec<String> = names.into_iter().collect();
    let indexes: Vec<String> = sqlx::query_scalar(
        "select coalesce(parent.relname, c.relname)::text
           from pg_class c
           left join pg_inherits i on i.inhrelid = c.oid
           left join pg_class parent on parent.oid = i.inhparent
          where c.relname = any ($1) and c.relnamespace = 'ledger'::regnamespace",
    )
    .bind(&names)
    .fetch_all(pool)
    .await
    .unwrap();
    (indexes.into_iter().collect(), plan)
}

#[tokio::test]
async fn each_pane_is_served_by_its_partial_index() {
    let db = common::test_db().await;
    let pool = &db.pool;
    build_ledger(pool).await;

    // A ledger that has seen thousands of effects, all dispatched and settled, written
    // through the API: its attempts are thousands of dispatch claims, none a duplicate.
    let settled: i64 = sqlx::query_scalar(
        "with begun as materialized (
             select g, b.decision
               from generate_series(1, 5000) g,
                    lateral ledger.begin_effect(
                        op_key => 'bulk:' || g, action => 'bulk', target => 'bulk:' || g,
                        params => jsonb_build_object('n', g), requested_by => 'bulk') b),
         dispatched as materialized (
             select begun.g, begun.decision
               from begun, lateral ledger.mark_dispatched(op_key => 'bulk:' || begun.g) d
              where d.claimed)
         select count(*)
           from dispatched as begun,
                lateral ledger.complete_effect(op_key => 'bulk:' || begun.g, outcome => 'succeeded',
                                               external_ref => 'ref-' || begun.g) c
          where begun.decision = 'proceed' and c.applied and c.state = 'succeeded'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(settled, 5000);
    sqlx::query("analyze").execute(pool).await.unwrap();

    for (view, index) in [
        ("ledger.overdue_pending", "effects_pending_deadline_idx"),
        ("ledger.unknown_outcomes", "effects_watched_idx"),
        ("ledger.duplicate_attempts", "attempts_duplicate_idx"),
        ("ledger.held_conflicts", "effects_watched_idx"),
    ] {
        let (indexes, plan) = plan_indexes(pool, &format!("select * from {view}")).await;
        assert!(
            indexes.contains(index),
            "{view} should be served by {index}; plan uses {indexes:?}:\n{plan:#}"
        );
    }
    // The panes still list only what is open.
    assert_eq!(
        view_keys(pool, "ledger.held_conflicts").await,
        set(&["v:held", "v:held-9"])
    );
}

async fn next_notification(listener: &mut PgListener) -> Value {
    let notification = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("a notification within 10 s")
        .expect("the listener keeps working");
    assert_eq!(notification.channel(), NOTIFY_CHANNEL);
    serde_json::from_str(notification.payload()).expect("the payload is JSON")
}

/// Changes that can alter a pane are announced; the happy path (created
/// pending, dispatched, answered within its window) is not, because a
/// notifying transaction commits under a database-wide lock. Notifications
/// arrive in commit order, so the first one seen proves the earlier changes
/// sent none.
#[tokio::test]
async fn pane_changes_are_announced_on_the_notify_channel() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let mut listener = PgListener::connect(&db.url).await.unwrap();
    listener.listen(NOTIFY_CHANNEL).await.unwrap();

    let quiet = "refund:NOTIFY:quiet";
    begin_effect(pool, &intent(quiet, "refund", "invoice:Q", 60))
        .await
        .unwrap();
    dispatch(pool, quiet).await;
    complete(pool, quiet, Outcome::Succeeded).await;

    let key = "refund:NOTIFY:1";
    let begun = begin_effect(pool, &intent(key, "refund", "invoice:N", 60))
        .await
        .unwrap();
    dispatch(pool, key).await;
    complete(pool, key, Outcome::Unknown).await;
    let changed = next_notification(&mut listener).await;
    assert_eq!(
        changed["op_key"], key,
        "the happy path of {quiet} and the creation of {key} were silent"
    );
    assert_eq!(changed["id"], begun.effect_id);
    assert_eq!(changed["state"], State::Unknown.as_str());

    // An operator's change is announced too.
    let version = changed["version"].as_i64().unwrap();
    actions::resolve(
        pool,
        key,
        SeenVersion(version),
        "alice",
        "provider confirmed",
        &actions::Resolution::Succeeded {
            external_ref: "re_1".into(),
        },
    )
    .await
    .unwrap();
    let resolved = next_notification(&mut listener).await;
    assert_eq!(resolved["op_key"], key);
    assert_eq!(resolved["state"], "succeeded");

    // A held effect enters a pane as it is created.
    let first = "refund:NOTIFY:first";
    let held = "refund:NOTIFY:held";
    begin_effect(pool, &intent(first, "refund", "invoice:H", 60))
        .await
        .unwrap();
    begin_effect(pool, &intent(held, "refund", "invoice:H", 60))
        .await
        .unwrap();
    let entered = next_notification(&mut listener).await;
    assert_eq!(entered["op_key"], held);
    assert_eq!(entered["state"], "held");

    // An overdue effect leaving its pane is announced when it settles.
    let late = "refund:NOTIFY:late";
    begin_effect(pool, &intent(late, "refund", "invoice:L", 1))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    complete(pool, late, Outcome::Succeeded).await;
    let left = next_notification(&mut listener).await;
    assert_eq!(left["op_key"], late);
    assert_eq!(left["state"], "succeeded");

    // A rolled-back change is never announced.
    let mut tx = pool.begin().await.unwrap();
    begin_effect(
        &mut tx,
        &intent("refund:NOTIFY:rolled-back", "refund", "invoice:H", 60),
    )
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    let other = "refund:NOTIFY:2";
    begin_effect(pool, &intent(other, "refund", "invoice:H", 60))
        .await
        .unwrap();
    let next = next_notification(&mut listener).await;
    assert_eq!(next["op_key"], other);

    // Acknowledging a pending effect's repeats, and reopening them, moves it
    // off and back onto the duplicates pane: both are announced.
    let repeated = "refund:NOTIFY:repeated";
    for _ in 0..2 {
        begin_effect(pool, &intent(repeated, "refund", "invoice:R", 60))
            .await
            .unwrap();
    }
    let asked: i64 = sqlx::query_scalar("select version from ledger.effects where op_key = $1")
        .bind(repeated)
        .fetch_one(pool)
        .await
        .unwrap();
    let acknowledged = actions::ACKNOWLEDGE_DUPLICATES
        .call(pool, repeated, SeenVersion(asked), "alice", "retried")
        .await
        .unwrap();
    let announced = next_notification(&mut listener).await;
    assert_eq!(announced["op_key"], repeated);
    assert_eq!(announced["version"], acknowledged.version);
    let reopened = actions::REOPEN_DUPLICATES
        .call(
            pool,
            repeated,
            SeenVersion(acknowledged.version),
            "alice",
            "too soon",
        )
        .await
        .unwrap();
    let announced = next_notification(&mut listener).await;
    assert_eq!(announced["version"], reopened.version);
}

async fn audit_actions(pool: &LedgerPool, op_key: &str) -> Vec<String> {
    sqlx::query_scalar(
        "select a.action from ledger.audit_log a join ledger.effects e on e.id = a.effect_id
          where e.op_key = $1 order by a.seq",
    )
    .bind(op_key)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn acknowledged_repeats_leave_the_duplicates_pane_and_stay_on_record() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let ack = &actions::ACKNOWLEDGE_DUPLICATES;

    // A flagged mismatch stays in the pane for good; a replay is a plain repeat.
    let original = intent("d:mismatch", "refund", "acct:d1", 300);
    begin(pool, &original, Decision::Proceed).await;
    let mut changed = original.clone();
    changed.params = json!({"amount_minor": 9900, "currency": "EUR"});
    begin(pool, &changed, Decision::Rejected).await;
    let quiet = intent("d:quiet", "refund", "acct:d2", 300);
    begin(pool, &quiet, Decision::Proceed).await;
    assert_eq!(
        view_keys(pool, "ledger.duplicate_attempts").await,
        set(&["d:mismatch"])
    );
    let seen = sqlx::query_scalar::<_, i64>("select version from ledger.effects where op_key = $1")
        .bind("d:mismatch")
        .fetch_one(pool)
        .await
        .unwrap();
    let before: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("select now()")
        .fetch_one(pool)
        .await
        .unwrap();

    // Refused without a reason, on a version the operator did not see, and for a key the
    // pane does not list: nothing is written.
    assert!(matches!(
        ack.call(pool, "d:mismatch", SeenVersion(seen), "alice", " ")
            .await,
        Err(effectwatch::ledger::LedgerError::Invalid(_))
    ));
    assert!(matches!(
        ack.call(pool, "d:mismatch", SeenVersion(seen + 1), "alice", "seen")
            .await,
        Err(effectwatch::ledger::LedgerError::Changed(_))
    ));
    assert!(matches!(
        ack.call(pool, "d:quiet", SeenVersion(1), "alice", "seen")
            .await,
        Err(effectwatch::ledger::LedgerError::NotApplicable(_))
    ));
    assert!(audit_actions(pool, "d:mismatch").await.is_empty());

    let done = ack
        .call(
            pool,
            "d:mismatch",
            SeenVersion(seen),
            "alice",
            "agent bug, ticket 42",
        )
        .await
        .unwrap();
    assert_eq!(done.version, seen + 1);
    assert!(
        view_keys(pool, "ledger.duplicate_attempts")
            .await
            .is_empty()
    );
    assert_eq!(
        audit_actions(pool, "d:mismatch").await,
        ["acknowledge_duplicates"]
    );
    // The attempt stays, and the pane as it stood before shows it still.
    let mismatches: i64 = sqlx::query_scalar(
        "select count(*) from ledger.attempts where op_key = 'd:mismatch' and kind = 'mismatch'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(mismatches, 1);
    let then: Vec<String> =
        sqlx::query_scalar("select op_key from ledger.duplicate_attempts_at($1)")
            .bind(before)
            .fetch_all(pool)
            .await
            .unwrap();
    assert_eq!(then, ["d:mismatch"]);

    // A repeat after the acknowledgement shows again, counted from there.
    begin(pool, &changed, Decision::Rejected).await;
    let PaneRows::Duplicates(rows) =
        panes::fetch(pool, Pane::Duplicates, None, &Filter::default(), 10, 0)
            .await
            .unwrap()
    else {
        panic!("duplicates rows expected");
    };
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].op_key.as_str(), rows[0].attempts),
        ("d:mismatch", 1)
    );
}
