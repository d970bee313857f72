//! A scripted incident, built with the writer API and operator actions, whose
//! post-mortem report, finance figures and time-travel panes are asserted
//! exactly. The ledger stamps its own times, so the script takes checkpoints
//! of the database clock between steps and the assertions are made against
//! those checkpoints and the times the ledger recorded.

mod common;

use effectwatch::ledger::LedgerPool;
use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, Utc};
use effectwatch::cli::report::assembly::{self as report, ReportScope};
use effectwatch::format::duration_ms;
use effectwatch::ledger::actions::{self, Finding, SeenVersion};
use effectwatch::ledger::finance::{self, Exposure};
use effectwatch::ledger::history::find_effect;
use effectwatch::ledger::panes::{self, Filter, Pane, PaneRows};
use effectwatch::ledger::writer::{
    Completion, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, Effect, State};
use serde_json::json;

async fn checkpoint(pool: &LedgerPool) -> DateTime<Utc> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    let at = sqlx::query_scalar::<_, DateTime<Utc>>("select now()")
        .fetch_one(pool)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    at
}

fn refund(key: &str, invoice: &str, amount: i64, currency: &str, window_secs: i64) -> Intent {
    Intent {
        op_key: key.to_string(),
        action: "refund".to_string(),
        target: format!("invoice:{invoice}"),
        params: json!({"amount_minor": amount, "currency": currency, "key": key}),
        requested_by: "agent-7".to_string(),
        pending_window_secs: Some(window_secs),
        amount_minor: Some(amount),
        currency: Some(currency.to_string()),
        provider: Some("pay".to_string()),
        ..Intent::default()
    }
}

async fn begin(pool: &LedgerPool, intent: &Intent) -> Decision {
    begin_effect(pool, intent).await.unwrap().decision
}

async fn dispatch(pool: &LedgerPool, key: &str) {
    assert!(
        mark_dispatched(pool, key, None, "worker-1")
            .await
            .unwrap()
            .claimed
    );
}

async fn complete(
    pool: &LedgerPool,
    key: &str,
    outcome: Outcome,
    external_ref: Option<&str>,
    reason: Option<&str>,
) {
    let completion = Completion {
        external_ref: external_ref.map(str::to_string),
        reason: reason.map(str::to_string),
        worker: Some("worker-1".to_string()),
        ..Completion::default()
    };
    complete_effect(pool, key, outcome, &completion)
        .await
        .unwrap();
}

async fn effect(pool: &LedgerPool, key: &str) -> Effect {
    find_effect(pool, key).await.unwrap().unwrap()
}

async fn reconcile(pool: &LedgerPool, key: &str, finding: &str, refs: &[&str]) {
    let seen = SeenVersion(effect(pool, key).await.version);
    actions::record_reconciliation(
        pool,
        key,
        seen,
        "bob",
        &Finding {
            provider: "pay".to_string(),
            finding: finding.to_string(),
            external_refs: refs.iter().map(|r| r.to_string()).collect(),
            evidence: json!({"checked": key}),
            duration_ms: 42,
        },
    )
    .await
    .unwrap();
}

/// The time of the state change of `key` into `state`.
async fn event_at(pool: &LedgerPool, key: &str, state: &str) -> DateTime<Utc> {
    sqlx::query_scalar(
        "select ev.at from ledger.effect_events ev where ev.op_key = $1 and ev.to_state = $2
          order by ev.at desc limit 1",
    )
    .bind(key)
    .bind(state)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn attempt_at(pool: &LedgerPool, key: &str, kind: &str) -> DateTime<Utc> {
    sqlx::query_scalar(
        "select a.at from ledger.attempts a where a.op_key = $1 and a.kind = $2 order by a.at limit 1",
    )
    .bind(key)
    .bind(kind)
    .fetch_one(pool)
    .await
    .unwrap()
}

fn keys(rows: &PaneRows) -> Vec<&str> {
    rows.op_keys()
}

fn ms(from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    (to - from).num_milliseconds()
}

/// Milliseconds as the pane views give them: SQL rounds to the nearest.
fn ms_rounded(from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    let micros = (to - from).num_microseconds().unwrap();
    (micros + 500).div_euclid(1000)
}

/// The instants the script marks (t0 before it, t1 in the middle, t2 after
/// the range) and the moments the ledger recorded for its items.
struct Incident {
    t0: DateTime<Utc>,
    t1: DateTime<Utc>,
    t2: DateTime<Utc>,
    e_deadline: DateTime<Utc>,
    d_unknown: DateTime<Utc>,
    d_resolved: DateTime<Utc>,
    g_unknown: DateTime<Utc>,
    f2_held: DateTime<Utc>,
    f2_cancelled: DateTime<Utc>,
    a_replay: DateTime<Utc>,
}

/// Runs the script on a fresh ledger and reads back when each thing happened.
async fn incident(pool: &LedgerPool) -> Incident {
    let (t0, t1, t2) = script(pool).await;
    let e_deadline =
        attempt_at(pool, "refund:INV-4:v1", "dispatch").await + chrono::Duration::seconds(1);
    let d_unknown = event_at(pool, "refund:INV-3:v1", "unknown").await;
    let d_resolved = event_at(pool, "refund:INV-3:v1", "succeeded").await;
    let f2_cancelled = event_at(pool, "refund:INV-5:v2", "cancelled").await;
    assert!(t0 < d_unknown && e_deadline < t1 && t1 < d_resolved && f2_cancelled < t2);
    Incident {
        t0,
        t1,
        t2,
        e_deadline,
        d_unknown,
        d_resolved,
        g_unknown: event_at(pool, "refund:INV-7:v1", "unknown").await,
        f2_held: event_at(pool, "refund:INV-5:v2", "held").await,
        f2_cancelled,
        a_replay: attempt_at(pool, "refund:INV-1:v1", "replay").await,
    }
}

/// The script. Keys: A and B refund invoice 1 twice; C refunds invoice 2
/// above its approval; H is refunded and compensated in full; D's outcome
/// is unknown until reconciled; G stays unknown; E is dispatched and never
/// answers (overdue, escalated, found absent after the range); F2 is held
/// behind F and cancelled; A is replayed by a second agent.
async fn script(pool: &LedgerPool) -> (DateTime<Utc>, DateTime<Utc>, DateTime<Utc>) {
    sqlx::query(
        "insert into ledger.action_policies (action, compensation_approval_limit_minor) values ('refund', 1000)",
    )
    .execute(pool)
    .await
    .unwrap();

    let t0 = checkpoint(pool).await;
    for (key, invoice, amount, reference) in [
        ("refund:INV-1:v1", "INV-1", 1500, "pay_A"),
        ("refund:INV-1:v2", "INV-1", 1500, "pay_B"),
        ("refund:INV-6:v1", "INV-6", 300, "pay_H"),
    ] {
        assert_eq!(
            begin(pool, &refund(key, invoice, amount, "EUR", 300)).await,
            Decision::Proceed
        );
        dispatch(pool, key).await;
        complete(pool, key, Outcome::Succeeded, Some(reference), None).await;
    }
    let mut over = refund("refund:INV-2:v1", "INV-2", 2000, "EUR", 300);
    over.params = json!({"amount_minor": 2000, "currency": "EUR", "approved_amount_minor": 1500});
    over.approval_ref = Some("AP-2".to_string());
    assert_eq!(begin(pool, &over).await, Decision::Proceed);
    dispatch(pool, "refund:INV-2:v1").await;
    complete(
        pool,
        "refund:INV-2:v1",
        Outcome::Succeeded,
        Some("pay_C"),
        None,
    )
    .await;

    for (key, invoice, amount, reason) in [
        ("refund:INV-3:v1", "INV-3", 700, "timeout"),
        ("refund:INV-7:v1", "INV-7", 250, "connection reset"),
    ] {
        assert_eq!(
            begin(pool, &refund(key, invoice, amount, "USD", 300)).await,
            Decision::Proceed
        );
        dispatch(pool, key).await;
        complete(pool, key, Outcome::Unknown, None, Some(reason)).await;
    }
    assert_eq!(
        begin(pool, &refund("refund:INV-4:v1", "INV-4", 900, "USD", 1)).await,
        Decision::Proceed
    );
    dispatch(pool, "refund:INV-4:v1").await;
    assert_eq!(
        begin(pool, &refund("refund:INV-5:v1", "INV-5", 400, "EUR", 300)).await,
        Decision::Proceed
    );
    assert_eq!(
        begin(pool, &refund("refund:INV-5:v2", "INV-5", 400, "EUR", 300)).await,
        Decision::Held
    );
    let mut replay = refund("refund:INV-1:v1", "INV-1", 1500, "EUR", 300);
    replay.requested_by = "agent-9".to_string();
    assert_eq!(begin(pool, &replay).await, Decision::Replay);

    // E's one-second window runs out.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let t1 = checkpoint(pool).await;

    reconcile(pool, "refund:INV-3:v1", "exists_once", &["pay_D"]).await;
    let held = effect(pool, "refund:INV-5:v2").await;
    actions::CANCEL
        .call(
            pool,
            "refund:INV-5:v2",
            SeenVersion(held.version),
            "bob",
            "duplicate of v1",
        )
        .await
        .unwrap();
    let compensate = |key: &'static str| {
        sqlx::query_scalar::<_, String>(
            "select status from ledger.op_compensate(op_key => $1, expected_version => null,
                                                     operator => 'alice', reason => 'refunded twice')",
        )
        .bind(key)
    };
    assert_eq!(
        compensate("refund:INV-1:v2").fetch_one(pool).await.unwrap(),
        "awaiting_approval"
    );
    assert_eq!(
        compensate("refund:INV-6:v1").fetch_one(pool).await.unwrap(),
        "created"
    );
    let claimed: bool = sqlx::query_scalar(
        "select claimed from ledger.op_dispatch_compensation('compensate:refund:INV-6:v1:1', 'alice')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(claimed);
    sqlx::query(
        "select * from ledger.op_complete_compensation(compensation_key => 'compensate:refund:INV-6:v1:1',
                operator => 'alice', outcome => 'succeeded', external_ref => 'rev_H')",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "select * from ledger.op_escalate(op_key => 'refund:INV-4:v1', expected_version => null,
                operator => 'bob', reason => 'no answer from pay', sink => 'finance-desk')",
    )
    .execute(pool)
    .await
    .unwrap();
    let t2 = checkpoint(pool).await;

    // After the range: E is found absent at the provider.
    reconcile(pool, "refund:INV-4:v1", "absent", &[]).await;
    (t0, t1, t2)
}

/// The panes at each instant of the incident, and now.
#[tokio::test]
async fn time_travel_shows_each_instant_as_it_was() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let Incident {
        t0,
        t1,
        t2,
        e_deadline,
        d_unknown,
        g_unknown,
        f2_held,
        a_replay,
        ..
    } = incident(pool).await;

    let none = Filter::default();
    for pane in Pane::ALL {
        assert!(
            panes::fetch(pool, pane, Some(t0), &none, 100, 0)
                .await
                .unwrap()
                .is_empty()
        );
    }
    // The four panes, and the keys only replayed that the duplicates pane
    // counts without listing; the other views' counts are held to the
    // live ones in contract_as_of.
    let at_t1: Vec<(String, i64)> = panes::counts(pool, Some(t1))
        .await
        .unwrap()
        .into_iter()
        .take(5)
        .map(|c| (c.pane, c.items))
        .collect();
    assert_eq!(
        at_t1,
        [
            ("overdue", 1),
            ("unknown", 2),
            ("duplicates", 0),
            ("replays", 1),
            ("held", 1)
        ]
        .map(|(p, n)| (p.to_string(), n))
    );

    let PaneRows::Overdue(overdue) = panes::fetch(pool, Pane::Overdue, Some(t1), &none, 100, 0)
        .await
        .unwrap()
    else {
        panic!("overdue rows expected");
    };
    assert_eq!(overdue.len(), 1);
    let e = &overdue[0];
    assert_eq!(e.op_key, "refund:INV-4:v1");
    assert_eq!(e.deadline_at, Some(e_deadline));
    assert_eq!(
        e.deadline_at,
        effect(pool, "refund:INV-4:v1").await.deadline_at
    );
    assert!(e.dispatched);
    assert_eq!(e.overdue_ms, ms_rounded(e_deadline, t1));
    assert_eq!(e.amount_minor, Some(900));
    // A row of the past carries the version it had then: an action taken from
    // it passes the version check only if nothing changed since.
    let version_then: i64 = sqlx::query_scalar(
        "select max(v.version) from ledger.effect_history v
          join ledger.effects e on e.id = v.effect_id
         where e.op_key = 'refund:INV-4:v1' and v.at <= $1",
    )
    .bind(t1)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(e.version, version_then);
    assert!(e.version < effect(pool, "refund:INV-4:v1").await.version);

    let PaneRows::Unknown(unknown) = panes::fetch(pool, Pane::Unknown, Some(t1), &none, 100, 0)
        .await
        .unwrap()
    else {
        panic!("unknown rows expected");
    };
    let unknown = unknown
        .iter()
        .map(|r| {
            (
                r.op_key.as_str(),
                r.unknown_since,
                r.last_error.as_deref(),
                r.attempts,
                r.reconciliations,
            )
        })
        .collect::<Vec<_>>();
    assert_eq!(
        unknown,
        // One attempt each: the dispatch claim. The unknown outcome is their version.
        [
            ("refund:INV-3:v1", d_unknown, Some("timeout"), 1, 0),
            ("refund:INV-7:v1", g_unknown, Some("connection reset"), 1, 0),
        ]
    );

    let PaneRows::Held(held) = panes::fetch(pool, Pane::Held, Some(t1), &none, 100, 0)
        .await
        .unwrap()
    else {
        panic!("held rows expected");
    };
    assert_eq!(held.len(), 1);
    assert_eq!(
        (
            held[0].op_key.as_str(),
            held[0].holder_op_key.as_str(),
            held[0].holder_state.as_str()
        ),
        ("refund:INV-5:v2", "refund:INV-5:v1", "pending")
    );
    assert_eq!(held[0].held_since, f2_held);
    assert_eq!(held[0].held_ms, ms_rounded(f2_held, t1));

    // A plain replay is counted, not listed, unless asked for.
    assert!(
        panes::fetch(pool, Pane::Duplicates, Some(t1), &none, 100, 0)
            .await
            .unwrap()
            .is_empty()
    );
    let with_replays = Filter::parse("with-replays").unwrap();
    let PaneRows::Duplicates(duplicates) =
        panes::fetch(pool, Pane::Duplicates, Some(t1), &with_replays, 100, 0)
            .await
            .unwrap()
    else {
        panic!("duplicate rows expected");
    };
    assert_eq!(duplicates.len(), 1);
    assert!(!duplicates[0].needs_look);
    assert_eq!(
        (
            duplicates[0].op_key.as_str(),
            duplicates[0].state.as_str(),
            duplicates[0].replays
        ),
        ("refund:INV-1:v1", "succeeded", 1)
    );
    assert_eq!(duplicates[0].requesters, ["agent-9"]);
    assert_eq!(duplicates[0].first_seen, a_replay);

    // A filter narrows the past as it narrows the live panes.
    let only_inv7 = Filter::parse("target:INV-7").unwrap();
    assert_eq!(
        keys(
            &panes::fetch(pool, Pane::Unknown, Some(t1), &only_inv7, 100, 0)
                .await
                .unwrap()
        ),
        ["refund:INV-7:v1"]
    );
    assert_eq!(
        panes::count(pool, Pane::Unknown, Some(t1), &only_inv7)
            .await
            .unwrap(),
        1
    );

    // At t2: D resolved, F2 cancelled, E still overdue (found absent only later).
    // The four panes; the other views' counts are held to the live ones in contract_as_of.
    let at_t2: Vec<(String, i64)> = panes::counts(pool, Some(t2))
        .await
        .unwrap()
        .into_iter()
        .take(5)
        .map(|c| (c.pane, c.items))
        .collect();
    assert_eq!(
        at_t2,
        [
            ("overdue", 1),
            ("unknown", 1),
            ("duplicates", 0),
            ("replays", 1),
            ("held", 0)
        ]
        .map(|(p, n)| (p.to_string(), n))
    );

    // Now, the past and the present agree.
    let now = checkpoint(pool).await;
    for pane in Pane::ALL {
        let past = panes::fetch(pool, pane, Some(now), &none, 100, 0)
            .await
            .unwrap();
        let live = panes::fetch(pool, pane, None, &none, 100, 0).await.unwrap();
        assert_eq!(keys(&past), keys(&live), "{pane} at now vs live");
    }
}

/// The incident report over the range: counts, times, the worst items, a target filter.
#[tokio::test]
async fn the_report_reads_the_incident_back_exactly() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let Incident {
        t0,
        t2,
        e_deadline,
        d_unknown,
        d_resolved,
        g_unknown,
        f2_held,
        f2_cancelled,
        a_replay,
        ..
    } = incident(pool).await;

    let scope = ReportScope {
        since: t0,
        until: t2,
        target: None,
        action: None,
    };
    let mut progress = Vec::new();
    let report = report::build(pool, &scope, |p| progress.push(p.fraction))
        .await
        .unwrap();
    assert_eq!(progress.last(), Some(&1.0));

    let entries = report
        .entries
        .iter()
        .map(|e| {
            (
                e.pane,
                e.op_key.as_str(),
                e.entered_at,
                e.resolved_at,
                e.resolved_to.as_deref(),
                e.duration_ms,
            )
        })
        .collect::<Vec<_>>();
    let mut expected = vec![
        (
            Pane::Unknown,
            "refund:INV-3:v1",
            d_unknown,
            Some(d_resolved),
            Some("succeeded"),
            ms(d_unknown, d_resolved),
        ),
        (
            Pane::Unknown,
            "refund:INV-7:v1",
            g_unknown,
            None,
            None,
            ms(g_unknown, t2),
        ),
        (
            Pane::Held,
            "refund:INV-5:v2",
            f2_held,
            Some(f2_cancelled),
            Some("cancelled"),
            ms(f2_held, f2_cancelled),
        ),
        (
            Pane::Duplicates,
            "refund:INV-1:v1",
            a_replay,
            Some(a_replay),
            Some("succeeded"),
            0,
        ),
        // Found absent after the range: still open at its end.
        (
            Pane::Overdue,
            "refund:INV-4:v1",
            e_deadline,
            None,
            None,
            ms(e_deadline, t2),
        ),
    ];
    expected.sort_by_key(|e| e.2);
    assert_eq!(entries, expected);

    let summary = report
        .summary
        .iter()
        .map(|s| {
            (
                s.pane,
                s.entered,
                s.resolved,
                s.open_at_end,
                s.median_ms,
                s.worst_ms,
                s.oldest_open_ms,
            )
        })
        .collect::<Vec<_>>();
    let d_took = ms(d_unknown, d_resolved);
    let f2_took = ms(f2_held, f2_cancelled);
    assert_eq!(
        summary,
        [
            (Pane::Overdue, 1, 0, 1, None, None, Some(ms(e_deadline, t2))),
            (
                Pane::Unknown,
                2,
                1,
                1,
                Some(d_took),
                Some(d_took),
                Some(ms(g_unknown, t2))
            ),
            (Pane::Duplicates, 1, 1, 0, Some(0), Some(0), None),
            (Pane::Held, 1, 1, 0, Some(f2_took), Some(f2_took), None),
        ]
    );

    let recons: Vec<(&str, &str, &str, &str)> = report
        .reconciliations
        .iter()
        .map(|r| {
            (
                r.op_key.as_str(),
                r.finding.as_str(),
                r.state_before.as_str(),
                r.state_after.as_str(),
            )
        })
        .collect();
    assert_eq!(
        recons,
        [("refund:INV-3:v1", "exists_once", "unknown", "succeeded")]
    );

    let actions: Vec<(&str, &str, Option<&str>)> = report
        .operator_actions
        .iter()
        .map(|a| (a.action.as_str(), a.operator.as_str(), a.op_key.as_deref()))
        .collect();
    assert_eq!(
        actions,
        [
            ("reconcile", "bob", Some("refund:INV-3:v1")),
            ("cancel", "bob", Some("refund:INV-5:v2")),
            ("compensate_request", "alice", Some("refund:INV-1:v2")),
            ("compensate", "alice", Some("refund:INV-6:v1")),
            (
                "dispatch_compensation",
                "alice",
                Some("compensate:refund:INV-6:v1:1")
            ),
            ("compensated", "alice", Some("refund:INV-6:v1")),
            (
                "compensation_result",
                "alice",
                Some("compensate:refund:INV-6:v1:1")
            ),
            ("escalate", "bob", Some("refund:INV-4:v1")),
        ]
    );

    let open: Vec<(Pane, i64, Vec<&str>)> = report
        .open_at_end
        .iter()
        .map(|o| (o.pane, o.count, keys(&o.rows)))
        .collect();
    assert_eq!(
        open,
        [
            (Pane::Overdue, 1, vec!["refund:INV-4:v1"]),
            (Pane::Unknown, 1, vec!["refund:INV-7:v1"]),
            (Pane::Duplicates, 1, vec!["refund:INV-1:v1"]),
            (Pane::Held, 0, vec![]),
        ]
    );

    // The worst items are the longest, one per effect, with their timelines.
    let mut by_duration: Vec<(i64, DateTime<Utc>, &str)> =
        expected.iter().map(|e| (e.5, e.2, e.1)).collect();
    by_duration.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let worst: Vec<&str> = report
        .worst
        .iter()
        .map(|w| w.entry.op_key.as_str())
        .collect();
    assert_eq!(
        worst,
        by_duration.iter().take(3).map(|w| w.2).collect::<Vec<_>>()
    );
    let f2 = report
        .worst
        .iter()
        .find(|w| w.entry.op_key == "refund:INV-5:v2");
    if let Some(f2) = f2 {
        let kinds: Vec<&str> = f2.timeline.iter().map(|l| l.kind).collect();
        assert!(
            kinds.contains(&"state") && kinds.contains(&"audit"),
            "{kinds:?}"
        );
    }

    // A target filter keeps only that target's items and actions.
    let narrow = report::build(
        pool,
        &ReportScope {
            target: Some("inv-5".to_string()),
            ..scope.clone()
        },
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(
        narrow
            .entries
            .iter()
            .map(|e| e.op_key.as_str())
            .collect::<Vec<_>>(),
        ["refund:INV-5:v2"]
    );
    assert_eq!(
        narrow
            .operator_actions
            .iter()
            .map(|a| a.action.as_str())
            .collect::<Vec<_>>(),
        ["cancel"]
    );
    assert!(narrow.reconciliations.is_empty());
}

/// Suspected double effects and exposure, now and as of an instant.
#[tokio::test]
async fn finance_reads_the_incident_back_exactly() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let Incident { t1, .. } = incident(pool).await;

    let review = finance::review(pool, None, None).await.unwrap();
    let suspected = review
        .suspected
        .iter()
        .map(|s| {
            (
                s.op_key.as_str(),
                s.target.as_str(),
                s.amount_minor,
                s.external_ref.as_deref(),
                s.reasons.iter().map(String::as_str).collect(),
                s.succeeded_effects,
                s.total_minor,
                s.approved_minor,
                s.excess_minor,
                s.compensation.as_str(),
                s.compensation_under_way,
            )
        })
        .collect::<Vec<_>>();
    assert_eq!(
        suspected,
        [
            (
                "refund:INV-1:v1",
                "invoice:INV-1",
                Some(1500),
                Some("pay_A"),
                vec!["repeated"],
                2,
                Some(3000),
                None,
                Some(1500),
                "none",
                false
            ),
            (
                "refund:INV-1:v2",
                "invoice:INV-1",
                Some(1500),
                Some("pay_B"),
                vec!["repeated"],
                2,
                Some(3000),
                None,
                Some(1500),
                "awaiting_approval",
                true
            ),
            (
                "refund:INV-2:v1",
                "invoice:INV-2",
                Some(2000),
                Some("pay_C"),
                vec!["over_approved"],
                1,
                Some(2000),
                Some(1500),
                Some(500),
                "none",
                false
            ),
        ]
    );
    assert!(
        review
            .suspected
            .iter()
            .all(|s| s.currency.as_deref() == Some("EUR"))
    );
    assert_eq!(finance::groups(&review.suspected).len(), 2);
    assert_eq!(
        review.exposure,
        [
            Exposure {
                currency: "EUR".into(),
                unknown_effects: 0,
                unknown_minor: 0,
                suspected_effects: 3,
                suspected_excess_minor: 2000,
                compensated_effects: 1,
                compensated_minor: 300,
                awaiting_approval: 1,
                awaiting_approval_minor: 1500,
            },
            Exposure {
                currency: "USD".into(),
                unknown_effects: 1,
                unknown_minor: 250,
                suspected_effects: 0,
                suspected_excess_minor: 0,
                compensated_effects: 0,
                compensated_minor: 0,
                awaiting_approval: 0,
                awaiting_approval_minor: 0,
            },
        ]
    );
    // Since t1: no double succeeded then; H was compensated and B's request made after it.
    let recent = finance::review(pool, None, Some(t1)).await.unwrap();
    assert!(recent.suspected.is_empty());
    let recent: Vec<(&str, i64, i64, i64, i64, i64)> = recent
        .exposure
        .iter()
        .map(|x| {
            (
                x.currency.as_str(),
                x.unknown_effects,
                x.compensated_effects,
                x.compensated_minor,
                x.awaiting_approval,
                x.awaiting_approval_minor,
            )
        })
        .collect();
    assert_eq!(recent, [("EUR", 0, 1, 300, 1, 1500)]);
    assert_eq!(
        effect(pool, "refund:INV-6:v1").await.state,
        State::Compensated
    );
}

/// The same through the binary: report, finance and list, and what --at accepts.
#[tokio::test]
async fn the_commands_read_the_incident_back() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let Incident {
        t0,
        t2,
        e_deadline,
        d_unknown,
        d_resolved,
        g_unknown,
        f2_held,
        f2_cancelled,
        ..
    } = incident(pool).await;
    let d_took = ms(d_unknown, d_resolved);
    let f2_took = ms(f2_held, f2_cancelled);

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("incident.md");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_effectwatch"))
            .args(args)
            .args(["--database-url", &db.url])
            .env("XDG_CONFIG_HOME", dir.path())
            .env("HOME", dir.path())
            .env_remove("DATABASE_URL")
            .output()
            .unwrap()
    };
    let since = t0.to_rfc3339();
    let until = t2.to_rfc3339();
    let done = run(&[
        "report",
        "--since",
        &since,
        "--until",
        &until,
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(
        done.stdout.is_empty() && done.stderr.is_empty(),
        "no progress line without a terminal"
    );
    let markdown = std::fs::read_to_string(&out).unwrap();
    for line in [
        format!(
            "| Overdue pending | 1 | 0 | 1 | — | — | {} |",
            duration_ms(ms(e_deadline, t2))
        ),
        format!(
            "| Unknown outcomes | 2 | 1 | 1 | {} | {} | {} |",
            duration_ms(d_took),
            duration_ms(d_took),
            duration_ms(ms(g_unknown, t2))
        ),
        "| Duplicate attempts | 1 | 1 | 0 | 0s | 0s | — |".to_string(),
        format!(
            "| Held conflicts | 1 | 1 | 0 | {} | {} | — |",
            duration_ms(f2_took),
            duration_ms(f2_took)
        ),
        "1 reconciliations, 8 operator actions in the range.".to_string(),
        "### Held conflicts (1)".to_string(),
        "- **Unknown outcomes**: 1".to_string(),
        "  - refund:INV-7:v1 (".to_string(),
    ] {
        assert!(markdown.contains(&line), "missing {line:?} in\n{markdown}");
    }
    assert!(markdown.starts_with("# Effect ledger report: "));

    let csv_out = run(&[
        "report", "--since", &since, "--until", &until, "--format", "csv",
    ]);
    assert!(csv_out.status.success());
    let mut reader = csv::Reader::from_reader(csv_out.stdout.as_slice());
    let records: Vec<String> = reader
        .records()
        .map(|r| r.unwrap()[0].to_string())
        .collect();
    assert_eq!(records.iter().filter(|r| *r == "pane_entry").count(), 5);
    assert_eq!(records.iter().filter(|r| *r == "reconciliation").count(), 1);
    assert_eq!(
        records.iter().filter(|r| *r == "operator_action").count(),
        8
    );

    let finance_csv = run(&["finance", "--format", "csv"]);
    assert!(finance_csv.status.success());
    let mut reader = csv::Reader::from_reader(finance_csv.stdout.as_slice());
    let rows: Vec<Vec<String>> = reader
        .records()
        .map(|r| r.unwrap().iter().map(str::to_string).collect())
        .collect();
    assert_eq!(
        rows.iter()
            .map(|r| (r[2].as_str(), r[3].as_str(), r[4].as_str(), r[15].as_str()))
            .collect::<Vec<_>>(),
        [
            ("refund:INV-1:v1", "1500", "EUR", "1500"),
            ("refund:INV-1:v2", "1500", "EUR", "1500"),
            ("refund:INV-2:v1", "2000", "EUR", "500"),
        ]
    );
    let exposure_csv = run(&["finance", "--only", "exposure", "--format", "csv"]);
    assert_eq!(
        String::from_utf8(exposure_csv.stdout).unwrap(),
        "currency,unknown_effects,unknown_minor,suspected_effects,suspected_excess_minor,compensated_effects,compensated_minor,awaiting_approval,awaiting_approval_minor\n\
         EUR,0,0,3,2000,1,300,1,1500\n\
         USD,1,250,0,0,0,0,0,0\n"
    );

    // Time travel reads the console, list and finance; nothing else takes it.
    let past = run(&["--at", "1h", "list", "overdue"]);
    assert_eq!(past.status.code(), Some(0));
    let refused = run(&["--at", "1h", "show", "refund:INV-1:v1"]);
    assert_eq!(refused.status.code(), Some(2));
}

#[tokio::test]
async fn hostile_text_cannot_escape_a_report() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let t0 = checkpoint(pool).await;
    let key = "refund:|evil](http://x)\x1b[2J<script>";
    let mut intent = refund(key, "INV-9\n| fake | row |", 100, "EUR", 300);
    intent.params = json!({"k": 1});
    // The ledger refuses control characters in keys; a report must stay
    // safe even if one got in, so the row is forced past that rule.
    common::force_effect(pool, &intent).await;
    dispatch(pool, key).await;
    complete(
        pool,
        key,
        Outcome::Unknown,
        None,
        Some("=cmd|' /C calc'!A0"),
    )
    .await;
    let t1 = checkpoint(pool).await;
    let report = report::build(
        pool,
        &ReportScope {
            since: t0,
            until: t1,
            target: None,
            action: None,
        },
        |_| {},
    )
    .await
    .unwrap();
    let markdown = effectwatch::cli::report::markdown(&report);
    assert!(!markdown.contains('\x1b'));
    assert!(!markdown.contains("<script>"));
    assert!(
        !markdown.replace("\\]", "").contains("]("),
        "no link can form"
    );
    assert!(
        markdown.contains("refund:\\|evil\\](http://x)\\\\u{001B}\\[2J\\<script\\>"),
        "{markdown}"
    );
    // Every table row still has the table's number of cells.
    for line in markdown.lines().filter(|l| l.starts_with("| refund")) {
        let cells = line.replace("\\|", "").matches('|').count();
        assert_eq!(cells, 9, "{line}");
    }
}
