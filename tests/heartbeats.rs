//! Heartbeats: a worker that beats while its provider call runs holds a
//! short lease on the effect. When the beats stop, the effect is unknown
//! (worker_lost) in every view at once, written so by the reconciler's next
//! pass and settled against the provider; a slow call that keeps beating is
//! never touched; a beat that comes after its lease ran out is told the call
//! is no longer the worker's.

mod common;
mod settle_support;

use std::time::Duration;

use effectwatch::ledger::State;
use effectwatch::ledger::writer::{self, Completion, Outcome};
use effectwatch::settle::Request;
use effectwatch::settle::verbs::{self, Answers};
use settle_support::Rig;

const LEASE: Duration = Duration::from_secs(1);

async fn beat(rig: &Rig, op_key: &str) -> writer::Beat {
    writer::heartbeat(&rig.db.pool, op_key, LEASE, "agent-7@host-1")
        .await
        .expect("a heartbeat")
}

/// (state, error class) of `op_key` in the views of now, and in its row.
async fn shown_and_written(rig: &Rig, op_key: &str) -> ((String, Option<String>), String) {
    let shown =
        sqlx::query_as("select state, error_class from ledger.effects_at(null) where op_key = $1")
            .bind(op_key)
            .fetch_one(&rig.db.pool)
            .await
            .unwrap();
    let written = sqlx::query_scalar("select state from ledger.effects where op_key = $1")
        .bind(op_key)
        .fetch_one(&rig.db.pool)
        .await
        .unwrap();
    (shown, written)
}

async fn in_pane(rig: &Rig, pane: &str, op_key: &str) -> bool {
    let sql = match pane {
        "unknown" => {
            "select exists (select 1 from ledger.unknown_outcomes_at(null) where op_key = $1)"
        }
        _ => "select exists (select 1 from ledger.overdue_pending_at(null) where op_key = $1)",
    };
    sqlx::query_scalar(sql)
        .bind(op_key)
        .fetch_one(&rig.db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_worker_that_stops_beating_is_unknown_at_once_and_the_reconciler_settles_it() {
    let rig = Rig::new().await;
    rig.begin_and_dispatch("refund:KILLED:v1", 1500).await;
    let first = beat(&rig, "refund:KILLED:v1").await;
    assert!(first.alive, "{first:?}");
    assert!(first.lease_until.is_some());
    // The provider did it; the worker died before it could say so.
    rig.provider_did("refund:KILLED:v1", 1500);
    assert!(!in_pane(&rig, "unknown", "refund:KILLED:v1").await);

    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    // Every view says so before anything is written.
    let (shown, written) = shown_and_written(&rig, "refund:KILLED:v1").await;
    assert_eq!(shown, ("unknown".into(), Some("worker_lost".into())));
    assert_eq!(written, "pending");
    assert!(in_pane(&rig, "unknown", "refund:KILLED:v1").await);
    assert!(!in_pane(&rig, "overdue", "refund:KILLED:v1").await);
    let last_error: String = sqlx::query_scalar(
        "select last_error from ledger.unknown_outcomes_at(null) where op_key = $1",
    )
    .bind("refund:KILLED:v1")
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert!(
        last_error.starts_with("worker_lost: no heartbeat from agent-7@host-1 since"),
        "{last_error}"
    );
    let unknown_count: i64 =
        sqlx::query_scalar("select items from ledger.pane_counts_at(null) where pane = 'unknown'")
            .fetch_one(&rig.db.pool)
            .await
            .unwrap();
    assert_eq!(unknown_count, 1);

    // The reconciler's pass writes the loss, then settles it against the provider.
    let service = rig.reconciler(settle_support::reconciler_settings("reconciler@test"));
    let summary = service.pass().await.unwrap();
    assert_eq!(summary.workers_lost, 1, "{summary:?}");
    assert_eq!(summary.findings.get("exists_once"), Some(&1), "{summary:?}");
    assert!(
        summary.line().contains("1 workers lost mid-call"),
        "{}",
        summary.line()
    );
    assert_eq!(rig.effect("refund:KILLED:v1").await.state, State::Succeeded);
    let (operator, reason): (String, String) = sqlx::query_as(
        "select operator, reason from ledger.audit_log where action = 'worker_lost'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(operator, "ledger");
    assert!(reason.contains("presumed lost mid-call"), "{reason}");
    let history: Vec<(String, Option<String>)> = sqlx::query_as(
        "select v.state, v.error_class from ledger.effect_history v
           join ledger.effects e on e.id = v.effect_id
          where e.op_key = $1 order by v.version",
    )
    .bind("refund:KILLED:v1")
    .fetch_all(&rig.db.pool)
    .await
    .unwrap();
    assert!(
        history.contains(&("unknown".into(), Some("worker_lost".into()))),
        "{history:?}"
    );
    rig.audit_intact().await;
}

#[tokio::test]
async fn a_slow_call_that_keeps_beating_is_never_touched() {
    let rig = Rig::new().await;
    rig.begin_and_dispatch("refund:SLOW:v1", 900).await;
    let service = rig.reconciler(settle_support::reconciler_settings("reconciler@test"));
    // Three leases' length, beating every third of a lease, a pass between beats.
    for _ in 0..10 {
        assert!(beat(&rig, "refund:SLOW:v1").await.alive);
        let summary = service.pass().await.unwrap();
        assert_eq!(summary.workers_lost, 0, "{summary:?}");
        tokio::time::sleep(LEASE / 3).await;
        let (shown, written) = shown_and_written(&rig, "refund:SLOW:v1").await;
        assert_eq!((shown.0.as_str(), written.as_str()), ("pending", "pending"));
    }
    let beats: i64 = sqlx::query_scalar(
        "select w.beats from ledger.worker_leases w join ledger.effects e on e.id = w.effect_id
          where e.op_key = 'refund:SLOW:v1'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(beats, 10);
    // It answers; the lease is done with.
    writer::complete_effect(
        &rig.db.pool,
        "refund:SLOW:v1",
        Outcome::Succeeded,
        &Completion {
            external_ref: Some("re_slow".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        rig.count("select count(*) from ledger.worker_leases").await,
        0
    );
    let after = beat(&rig, "refund:SLOW:v1").await;
    assert!(!after.alive);
    assert_eq!(after.state, State::Succeeded);
}

#[tokio::test]
async fn a_beat_after_its_lease_ran_out_is_told_the_call_is_lost_and_a_late_answer_still_settles_it()
 {
    let rig = Rig::new().await;
    rig.begin_and_dispatch("refund:STALLED:v1", 700).await;
    assert!(beat(&rig, "refund:STALLED:v1").await.alive);
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let late = beat(&rig, "refund:STALLED:v1").await;
    assert!(!late.alive, "{late:?}");
    assert_eq!(late.state, State::Unknown);
    let (shown, written) = shown_and_written(&rig, "refund:STALLED:v1").await;
    assert_eq!(shown, ("unknown".into(), Some("worker_lost".into())));
    assert_eq!(written, "unknown");
    // The worker was only stalled: its answer still settles the effect.
    let completed = writer::complete_effect(
        &rig.db.pool,
        "refund:STALLED:v1",
        Outcome::Succeeded,
        &Completion {
            external_ref: Some("re_stalled".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(completed.state, State::Succeeded);
}

#[tokio::test]
async fn an_operator_acts_on_a_lost_worker_as_shown_before_anything_wrote_it() {
    let rig = Rig::new().await;
    rig.begin_and_dispatch("refund:SHOWN:v1", 700).await;
    assert!(beat(&rig, "refund:SHOWN:v1").await.alive);
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let shown_version: i64 = sqlx::query_scalar(
        "select version from ledger.unknown_outcomes_at(null) where op_key = 'refund:SHOWN:v1'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    // Resolve applies to unknown effects only: the operator acts on what was shown.
    let settler = rig.settler("ops@test");
    settler
        .settle(Request::on_effect(
            &verbs::RESOLVE,
            "refund:SHOWN:v1",
            Some(shown_version),
            Answers {
                outcome: Some(verbs::Outcome::Failed),
                ..Answers::because("the provider's dashboard shows no refund")
            },
        ))
        .await
        .expect("resolving what the console showed");
    assert_eq!(rig.effect("refund:SHOWN:v1").await.state, State::Failed);
    let actions: Vec<String> = sqlx::query_scalar(
        "select action from ledger.audit_log where op_key = 'refund:SHOWN:v1' order by seq",
    )
    .fetch_all(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(actions, ["worker_lost", "resolve"]);
    rig.audit_intact().await;
}

#[tokio::test]
async fn a_lease_outside_reason_or_another_logins_beat_is_refused() {
    let rig = Rig::new().await;
    rig.begin_and_dispatch("refund:ODD:v1", 700).await;
    for lease in [Duration::from_millis(200), Duration::from_secs(7200)] {
        let refused = writer::heartbeat(&rig.db.pool, "refund:ODD:v1", lease, "agent-7")
            .await
            .expect_err("an unreasonable lease");
        assert!(
            refused
                .to_string()
                .contains("a heartbeat lease is from 1 second to 1 hour"),
            "{refused}"
        );
    }
    let missing = writer::heartbeat(&rig.db.pool, "refund:NOBODY:v1", LEASE, "agent-7")
        .await
        .expect_err("no such effect");
    assert!(
        missing.to_string().contains("no effect with key"),
        "{missing}"
    );
    assert_eq!(
        rig.count("select count(*) from ledger.worker_leases").await,
        0
    );
}

/// A lease can start with the claim: `begin_and_dispatch` (and
/// `mark_dispatched`) given a lease make it in the same round trip, so a
/// worker that dies before its first beat is still found when the lease
/// ends; a lease the ledger refuses leaves nothing written.
#[tokio::test]
async fn a_lease_taken_with_the_claim_needs_no_beat_and_a_refused_one_writes_nothing() {
    let rig = Rig::new().await;
    let intent = Rig::intent("refund:CLAIMED:v1", 400);
    let started = writer::begin_and_dispatch(&rig.db.pool, &intent, "agent-7", false, Some(LEASE))
        .await
        .unwrap()
        .expect("an answer");
    assert!(started.dispatched);
    let (shown, _) = shown_and_written(&rig, "refund:CLAIMED:v1").await;
    assert_eq!(shown.0, "pending");
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let (shown, written) = shown_and_written(&rig, "refund:CLAIMED:v1").await;
    assert_eq!(shown, ("unknown".into(), Some("worker_lost".into())));
    assert_eq!(written, "pending");

    let begun = writer::begin_effect(&rig.db.pool, &Rig::intent("refund:MARKED:v1", 400))
        .await
        .unwrap();
    assert_eq!(begun.decision, effectwatch::ledger::Decision::Proceed);
    let refused = sqlx::query(
        "select * from ledger.mark_dispatched(op_key => 'refund:MARKED:v1', heartbeat_lease => '2 hours')",
    )
    .execute(&rig.db.pool)
    .await
    .expect_err("a lease of two hours");
    assert!(
        refused
            .to_string()
            .contains("a heartbeat lease is from 1 second to 1 hour")
    );
    let claimed: bool = sqlx::query_scalar(
        "select claimed from ledger.mark_dispatched(op_key => 'refund:MARKED:v1', heartbeat_lease => '5 seconds')",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert!(claimed);

    let refused = writer::begin_and_dispatch(
        &rig.db.pool,
        &Rig::intent("refund:NEVER-MADE:v1", 400),
        "agent-7",
        false,
        Some(Duration::from_millis(100)),
    )
    .await
    .expect_err("a lease under a second");
    assert!(
        refused
            .to_string()
            .contains("a heartbeat lease is from 1 second"),
        "{refused}"
    );
    assert_eq!(
        rig.count("select count(*) from ledger.effects where op_key = 'refund:NEVER-MADE:v1'")
            .await,
        0,
        "nothing written"
    );
    assert_eq!(
        rig.count("select count(*) from ledger.worker_leases").await,
        2
    );
}

/// An action's policy sets the lease a beating worker is held to, whatever
/// lease the worker was set up with: its claim and its beats answer the
/// lease in force, and it is found lost within that. A caller that beats
/// not at all keeps the window's rule; clearing the policy's lease gives
/// each worker its own again. Each change is audited.
#[tokio::test]
async fn an_actions_policy_sets_the_lease_a_beating_worker_is_held_to() {
    use effectwatch::ledger::policies::{self, PolicyChange};
    let rig = Rig::new().await;
    let pool = &rig.db.pool;
    let set = |lease: Option<Duration>| PolicyChange {
        heartbeat_lease: Some(lease),
        ..PolicyChange::default()
    };
    let (policy, _) = policies::set(
        pool,
        "refund",
        &set(Some(LEASE)),
        "alice",
        "refunds answer in ms",
    )
    .await
    .unwrap();
    assert_eq!(policy["heartbeat_lease"], "00:00:01", "{policy}");
    assert_eq!(
        policies::for_action(pool, "refund")
            .await
            .unwrap()
            .heartbeat_lease_secs,
        Some(1.0)
    );

    // A worker set up with 15 s is held to the policy's second.
    let own = Duration::from_secs(15);
    let started = writer::begin_and_dispatch(
        pool,
        &Rig::intent("refund:POLICY:v1", 1500),
        "agent-7",
        false,
        Some(own),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(started.dispatched);
    assert_eq!(started.heartbeat_lease, Some(LEASE));
    let beat = writer::heartbeat(pool, "refund:POLICY:v1", own, "agent-7")
        .await
        .unwrap();
    assert_eq!(beat.lease_in_force, Some(LEASE));
    let lease: f64 = sqlx::query_scalar(
        "select extract(epoch from w.lease)::float8 from ledger.worker_leases w
           join ledger.effects e on e.id = w.effect_id where e.op_key = 'refund:POLICY:v1'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(lease, 1.0);
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let (shown, _) = shown_and_written(&rig, "refund:POLICY:v1").await;
    assert_eq!(shown, ("unknown".into(), Some("worker_lost".into())));

    // A caller that takes no lease is not given the policy's.
    let bare = writer::begin_and_dispatch(
        pool,
        &Rig::intent("refund:BARE:v1", 1500),
        "agent-7",
        false,
        None,
    )
    .await
    .unwrap()
    .unwrap();
    assert!(bare.dispatched);
    assert_eq!(bare.heartbeat_lease, None);
    tokio::time::sleep(LEASE + Duration::from_millis(200)).await;
    let (shown, _) = shown_and_written(&rig, "refund:BARE:v1").await;
    assert_eq!(shown, ("pending".into(), None));

    // Cleared: each worker's own lease again.
    let (policy, _) = policies::set(pool, "refund", &set(None), "alice", "back to the workers'")
        .await
        .unwrap();
    assert!(policy.get("heartbeat_lease").is_none(), "{policy}");
    let again = writer::begin_and_dispatch(
        pool,
        &Rig::intent("refund:OWN:v1", 1500),
        "agent-7",
        false,
        Some(own),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(again.heartbeat_lease, Some(own));

    let audited: Vec<(String, Option<String>)> = sqlx::query_as(
        "select operator, after->>'heartbeat_lease' from ledger.audit_log
          where action = 'set_policy' order by seq",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(
        audited,
        vec![
            ("alice".into(), Some("00:00:01".into())),
            ("alice".into(), None)
        ]
    );

    // A lease the ledger would refuse is refused at the policy, nothing changed.
    let refused = policies::set(
        pool,
        "refund",
        &set(Some(Duration::from_millis(10))),
        "alice",
        "too short",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        refused.contains("a heartbeat lease is from 1 second to 1 hour"),
        "{refused}"
    );
}
