//! The contract between live and time travel: a scripted history (agents, timeouts,
//! duplicates, holds, reconciliations, operator actions, compensations, escalations) is read
//! live at several instants; afterwards every view read as of each of those instants returns
//! exactly what the live view returned then: rows, order and counts.

mod common;

use effectwatch::ledger::LedgerPool;
use std::time::Duration;

use chrono::{DateTime, Utc};
use effectwatch::ledger::panes::{self, Filter, Pane};
use effectwatch::ledger::writer::{
    Completion, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, audit, finance};
use serde_json::{Value, json};
use sqlx::AssertSqlSafe;

/// Each view with its function of an instant, read in a total order so that two reads of
/// the same rows compare equal.
const VIEWS: [(&str, &str); 10] = [
    ("ledger.overdue_pending", "ledger.overdue_pending_at($1)"),
    ("ledger.unknown_outcomes", "ledger.unknown_outcomes_at($1)"),
    (
        "ledger.duplicate_attempts",
        "ledger.duplicate_attempts_at($1)",
    ),
    ("ledger.held_conflicts", "ledger.held_conflicts_at($1)"),
    ("ledger.open_escalations", "ledger.open_escalations_at($1)"),
    (
        "ledger.awaiting_approval",
        "ledger.awaiting_approval_at($1)",
    ),
    ("ledger.pane_counts", "ledger.pane_counts_at($1)"),
    ("ledger.audit_log", "ledger.audit_log_at($1)"),
    (
        "ledger.suspected_double_effects",
        "ledger.suspected_double_effects_at($1, null)",
    ),
    ("ledger.exposure", "ledger.exposure_at($1, null)"),
];

fn rows_sql(source: &str) -> String {
    format!(
        "select coalesce(jsonb_agg(to_jsonb(v) order by to_jsonb(v)::text), '[]'::jsonb)
           from {source} v"
    )
}

/// Everything the console and the CLI read, at one instant.
#[derive(Debug, PartialEq)]
struct Reading {
    views: Vec<(String, Value)>,
    panes: Vec<(String, Value)>,
    counts: Value,
    audit: Value,
    finance: Value,
}

/// Reads every view the console and the CLI read: live (`at` None) or as of `at`, as
/// `--at` does.
async fn read(
    conn: &mut effectwatch::ledger::LedgerTransaction<'_>,
    at: Option<DateTime<Utc>>,
) -> Reading {
    let mut views = Vec::new();
    for (live, as_of) in VIEWS {
        let sql = rows_sql(if at.is_some() { as_of } else { live });
        let mut query = sqlx::query_scalar::<_, Value>(AssertSqlSafe(sql));
        if let Some(at) = at {
            query = query.bind(at);
        }
        let rows = query
            .fetch_one(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("{live} at {at:?}: {e}"));
        views.push((live.to_string(), rows));
    }
    let mut pane_rows = Vec::new();
    for pane in Pane::ALL {
        let none = Filter::default();
        let rows = match at {
            None => panes::fetch(&mut *conn, pane, None, &none, 500, 0).await,
            Some(at) => panes::fetch(&mut *conn, pane, Some(at), &none, 500, 0).await,
        };
        let rows = serde_json::to_value(rows.unwrap()).unwrap();
        pane_rows.push((pane.name().to_string(), rows));
    }
    let counts = match at {
        None => panes::counts(&mut *conn, None).await,
        Some(at) => panes::counts(&mut *conn, Some(at)).await,
    };
    let counts = serde_json::to_value(counts.unwrap()).unwrap();
    let audit = serde_json::to_value(audit::recent(&mut *conn, at, 300).await.unwrap()).unwrap();
    let finance = json!({
        "suspected": finance::suspected(&mut *conn, at, None).await.unwrap(),
        "exposure": finance::exposure(&mut *conn, at, None).await.unwrap(),
    });
    Reading {
        views,
        panes: pane_rows,
        counts,
        audit,
        finance,
    }
}

/// Reads every live view in one snapshot; returns the snapshot's instant.
async fn read_live(pool: &LedgerPool) -> (DateTime<Utc>, Reading) {
    let mut tx = effectwatch::ledger::snapshot::begin(pool).await.unwrap();
    let at: DateTime<Utc> = sqlx::query_scalar("select now()")
        .fetch_one(&mut tx)
        .await
        .unwrap();
    let reading = read(&mut tx, None).await;
    tx.commit().await.unwrap();
    (at, reading)
}

/// Reads every view as of `at`, as `--at` does.
async fn read_as_of(pool: &LedgerPool, at: DateTime<Utc>) -> Reading {
    let mut tx = effectwatch::ledger::snapshot::begin(pool).await.unwrap();
    let reading = read(&mut tx, Some(at)).await;
    tx.commit().await.unwrap();
    reading
}

fn refund(op_key: &str, target: &str, amount_minor: i64, window_secs: i64) -> Intent {
    Intent {
        op_key: op_key.into(),
        action: "refund".into(),
        target: target.into(),
        params: json!({"amount_minor": amount_minor, "currency": "EUR"}),
        requested_by: "agent-7".into(),
        pending_window_secs: Some(window_secs),
        amount_minor: Some(amount_minor),
        currency: Some("EUR".into()),
        provider: Some("pay".into()),
        ..Intent::default()
    }
}

async fn begin(pool: &LedgerPool, intent: &Intent, expected: Decision) {
    let begun = begin_effect(pool, intent).await.unwrap();
    assert_eq!(begun.decision, expected, "{}", intent.op_key);
}

async fn dispatch(pool: &LedgerPool, op_key: &str) {
    let claim = mark_dispatched(pool, op_key, None, "worker-1")
        .await
        .unwrap();
    assert!(claim.claimed, "{op_key}");
}

async fn complete(pool: &LedgerPool, op_key: &str, outcome: Outcome) {
    let completion = Completion {
        external_ref: (outcome == Outcome::Succeeded).then(|| format!("ref-{op_key}")),
        reason: (outcome != Outcome::Succeeded).then(|| "read timeout".to_string()),
        ..Completion::default()
    };
    complete_effect(pool, op_key, outcome, &completion)
        .await
        .unwrap();
}

async fn sql(pool: &LedgerPool, statement: &str) {
    sqlx::query(AssertSqlSafe(statement))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
}

#[tokio::test]
async fn every_view_as_of_an_instant_is_what_the_live_view_showed_then() {
    let db = common::test_db().await;
    let pool = &db.pool;
    sql(
        pool,
        "insert into ledger.action_policies (action, compensation_approval_limit_minor)
         values ('refund', 1000)
         on conflict (action) do update set compensation_approval_limit_minor = 1000",
    )
    .await;
    let mut samples = Vec::new();

    // Agents: one in flight, one held behind it, one timed out, one replayed and
    // retried with other params.
    begin(pool, &refund("a1", "invoice:A", 500, 1), Decision::Proceed).await;
    dispatch(pool, "a1").await;
    begin(pool, &refund("a2", "invoice:A", 500, 1), Decision::Held).await;
    begin(pool, &refund("b1", "invoice:B", 700, 30), Decision::Proceed).await;
    dispatch(pool, "b1").await;
    complete(pool, "b1", Outcome::Unknown).await;
    begin(pool, &refund("c1", "invoice:C", 900, 30), Decision::Proceed).await;
    dispatch(pool, "c1").await;
    complete(pool, "c1", Outcome::Succeeded).await;
    begin(pool, &refund("c1", "invoice:C", 900, 30), Decision::Replay).await;
    begin(
        pool,
        &refund("c1", "invoice:C", 901, 30),
        Decision::Rejected,
    )
    .await;
    samples.push(read_live(pool).await);

    // The window passes: a1 is overdue.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    samples.push(read_live(pool).await);

    // Operators: an inconclusive reconciliation, a note, a cancelled hold.
    sql(
        pool,
        "select * from ledger.record_reconciliation('b1', null, 'alice', 'pay', 'indeterminate')",
    )
    .await;
    sql(
        pool,
        "select * from ledger.op_annotate('b1', null, 'alice', 'provider is slow today')",
    )
    .await;
    sql(pool, "select * from ledger.op_cancel('a2', null, 'alice', 'the agent asked again under a new key')").await;
    samples.push(read_live(pool).await);

    // Late answer for a1; the same refund paid twice on another target.
    complete(pool, "a1", Outcome::Succeeded).await;
    begin(
        pool,
        &refund("d1", "invoice:D", 2500, 30),
        Decision::Proceed,
    )
    .await;
    dispatch(pool, "d1").await;
    complete(pool, "d1", Outcome::Succeeded).await;
    begin(
        pool,
        &refund("d2", "invoice:D", 2500, 30),
        Decision::Proceed,
    )
    .await;
    dispatch(pool, "d2").await;
    complete(pool, "d2", Outcome::Succeeded).await;
    samples.push(read_live(pool).await);

    // A compensation above the limit waits for a second operator; b1 is escalated.
    sql(
        pool,
        "select * from ledger.op_compensate('d2', null, 'alice', 'paid twice')",
    )
    .await;
    sql(
        pool,
        "select * from ledger.op_escalate('b1', null, 'alice', 'provider cannot say', 'oncall')",
    )
    .await;
    samples.push(read_live(pool).await);

    // Approved, sent, confirmed; the escalation is acknowledged and b1 resolved by hand.
    sql(pool, "select * from ledger.op_approve_compensation('d2', null, 'bob', 'checked the bank statement')").await;
    sql(
        pool,
        "select * from ledger.op_dispatch_compensation('compensate:d2:1', 'bob')",
    )
    .await;
    sql(pool, "select * from ledger.op_complete_compensation('compensate:d2:1', 'bob', 'succeeded', 'rf-1')").await;
    let escalation_key: String =
        sqlx::query_scalar("select escalation_key from ledger.escalations where op_key = 'b1'")
            .fetch_one(pool)
            .await
            .unwrap();
    sqlx::query("select * from ledger.op_acknowledge_escalation($1, 'carol', 'on it')")
        .bind(&escalation_key)
        .execute(pool)
        .await
        .unwrap();
    sql(pool, "select * from ledger.op_resolve('b1', null, 'carol', 'provider dashboard shows it', 'succeeded', 'ref-b1')").await;
    samples.push(read_live(pool).await);

    // c1's flagged mismatch is acknowledged: off the duplicates pane; then the agent
    // replays c1 once more and it is back, with that one repeat.
    sql(
        pool,
        "select * from ledger.op_acknowledge_duplicates('c1', null, 'carol', 'agent bug, fixed')",
    )
    .await;
    samples.push(read_live(pool).await);
    begin(pool, &refund("c1", "invoice:C", 900, 30), Decision::Replay).await;
    samples.push(read_live(pool).await);

    // The history must have put something in every view at some instant, or the
    // comparison below proves nothing about it.
    for (index, (live, _)) in VIEWS.iter().enumerate() {
        let seen = samples.iter().any(|(_, reading)| {
            reading.views[index]
                .1
                .as_array()
                .is_some_and(|rows| !rows.is_empty())
        });
        assert!(seen, "{live} was empty at every sampled instant");
    }

    for (at, live) in &samples {
        let past = read_as_of(pool, *at).await;
        for ((view, then), (_, now)) in live.views.iter().zip(&past.views) {
            assert_eq!(then, now, "{view} as of {at}");
        }
        for ((pane, then), (_, now)) in live.panes.iter().zip(&past.panes) {
            assert_eq!(then, now, "pane {pane} (rows and order) as of {at}");
        }
        assert_eq!(live.counts, past.counts, "pane counts as of {at}");
        assert_eq!(live.audit, past.audit, "audit as of {at}");
        assert_eq!(live.finance, past.finance, "finance as of {at}");
    }
}

#[tokio::test]
async fn nothing_after_the_instant_shows_in_any_view() {
    let db = common::test_db().await;
    let pool = &db.pool;
    begin(pool, &refund("e1", "invoice:E", 100, 30), Decision::Proceed).await;
    let before: DateTime<Utc> = sqlx::query_scalar("select now()")
        .fetch_one(pool)
        .await
        .unwrap();
    dispatch(pool, "e1").await;
    complete(pool, "e1", Outcome::Unknown).await;
    sql(
        pool,
        "select * from ledger.op_annotate('e1', null, 'alice', 'after the instant')",
    )
    .await;
    sql(
        pool,
        "select * from ledger.op_escalate('e1', null, 'alice', 'after the instant', 'oncall')",
    )
    .await;

    let past = read_as_of(pool, before).await;
    for (view, rows) in &past.views {
        if view == "ledger.pane_counts" {
            assert!(
                rows.as_array()
                    .unwrap()
                    .iter()
                    .all(|row| row["items"] == json!(0)),
                "{rows}"
            );
        } else {
            assert_eq!(rows, &json!([]), "{view} as of before anything happened");
        }
    }
    let now = read_live(pool).await.1;
    let unknown = &now.views[1].1;
    assert_eq!(unknown.as_array().map(Vec::len), Some(1), "{unknown}");
}

#[tokio::test]
async fn the_console_at_an_instant_shows_every_view_as_it_stood_with_matching_tab_counts() {
    use effectwatch::console::poller::{self, PollSettings};
    let db = common::test_db().await;
    let pool = &db.pool;
    begin(pool, &refund("f1", "invoice:F", 100, 30), Decision::Proceed).await;
    dispatch(pool, "f1").await;
    complete(pool, "f1", Outcome::Unknown).await;
    sql(
        pool,
        "select * from ledger.op_annotate('f1', null, 'alice', 'before the instant')",
    )
    .await;
    let instant: DateTime<Utc> = sqlx::query_scalar("select now()")
        .fetch_one(pool)
        .await
        .unwrap();
    sql(
        pool,
        "select * from ledger.op_annotate('f1', null, 'alice', 'after the instant')",
    )
    .await;
    sql(
        pool,
        "select * from ledger.op_escalate('f1', null, 'alice', 'after the instant', 'oncall')",
    )
    .await;

    let settings = |at| PollSettings {
        settled_actions: 0,
        filter: Filter::default(),
        interval: Duration::from_secs(2),
        paused: false,
        offsets: [0; 4],
        at,
    };
    let past = poller::poll(pool, &settings(Some(instant))).await.unwrap();
    assert!(
        past.audit.iter().all(|entry| entry.at <= instant),
        "{:?}",
        past.audit
    );
    assert_eq!(past.audit.len(), 1);
    assert_eq!(past.audit_count, Some(1));
    assert!(past.escalations.is_empty());
    assert_eq!(past.escalation_count, Some(0));
    let finance = past
        .finance
        .expect("the finance view is read with every poll");
    assert_eq!(finance.at, Some(instant));
    assert_eq!(finance.exposure.len(), 1, "{:?}", finance.exposure);
    assert_eq!(finance.exposure[0].unknown_effects, 1);

    let now = poller::poll(pool, &settings(None)).await.unwrap();
    assert_eq!(now.audit_count, Some(now.audit.len() as i64));
    assert_eq!(now.audit.len(), 3, "two notes and the escalation");
    assert_eq!(now.escalation_count, Some(1));
    assert_eq!(now.escalations.len(), 1);
}
