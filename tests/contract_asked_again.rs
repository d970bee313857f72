//! A key asked for again after its window passed with no answer: the call
//! that dispatched it is presumed lost, so the effect is an unknown outcome
//! — in the unknown pane, for the reconciler — and the caller is still told
//! never to call. Within its window, or never dispatched, nothing changes.

mod common;

use effectwatch::ledger::writer::{self, Completion, Outcome};
use effectwatch::ledger::{Decision, LedgerPool};

async fn state_of(pool: &LedgerPool, op_key: &str) -> (String, Option<String>) {
    sqlx::query_as("select state, error_class from ledger.effects where op_key = $1")
        .bind(op_key)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn in_pane(pool: &LedgerPool, view: &str, op_key: &str) -> bool {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "select exists (select 1 from ledger.{view} where op_key = $1)"
    )))
    .bind(op_key)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Lets the effect's one-second window pass.
async fn past_the_window() {
    tokio::time::sleep(std::time::Duration::from_millis(1_300)).await;
}

#[tokio::test]
async fn asked_again_after_its_window_a_dispatched_effect_is_unknown() {
    let db = common::test_db().await;
    let key = "refund:ASKED-1";
    let mut intent = common::intent(key, "invoice:ASKED-1");
    intent.pending_window_secs = Some(1);
    writer::begin_effect(&db.pool, &intent).await.unwrap();
    writer::mark_dispatched(&db.pool, key, None, "agent-1")
        .await
        .unwrap();

    // Within the window the first call may still answer.
    let early = writer::begin_effect(&db.pool, &intent).await.unwrap();
    assert_eq!(early.decision, Decision::InFlight);
    assert_eq!(state_of(&db.pool, key).await.0, "pending");

    past_the_window().await;
    assert!(in_pane(&db.pool, "overdue_pending", key).await);
    let late = writer::begin_effect(&db.pool, &intent).await.unwrap();
    assert_eq!(late.decision, Decision::InFlight, "never told to call");
    assert_eq!(
        state_of(&db.pool, key).await,
        ("unknown".to_string(), Some("timeout".to_string()))
    );
    assert!(in_pane(&db.pool, "unknown_outcomes", key).await);
    assert!(!in_pane(&db.pool, "overdue_pending", key).await);
    // The change the rule made is kept, with why, in the effect's history
    // once the next change moves it out of the row.

    // The first caller's answer, arriving late, still settles it.
    let completed = writer::complete_effect(
        &db.pool,
        key,
        Outcome::Succeeded,
        &Completion {
            external_ref: Some("re_asked_1".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    assert!(completed.applied);
    assert_eq!(state_of(&db.pool, key).await.0, "succeeded");
    let reason: String = sqlx::query_scalar(
        "select v.reason from ledger.effect_versions v join ledger.effects e on e.id = v.effect_id
          where e.op_key = $1 and v.state = 'unknown'",
    )
    .bind(key)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(reason.contains("presumed lost"), "{reason}");
    let replay = writer::begin_effect(&db.pool, &intent).await.unwrap();
    assert_eq!(replay.decision, Decision::Replay);
}

#[tokio::test]
async fn an_effect_never_dispatched_stays_pending_when_asked_again() {
    let db = common::test_db().await;
    let key = "refund:ASKED-2";
    let mut intent = common::intent(key, "invoice:ASKED-2");
    intent.pending_window_secs = Some(1);
    writer::begin_effect(&db.pool, &intent).await.unwrap();
    past_the_window().await;
    writer::begin_effect(&db.pool, &intent).await.unwrap();
    assert_eq!(
        state_of(&db.pool, key).await.0,
        "pending",
        "nothing was sent"
    );
}
