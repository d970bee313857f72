//! The second round of holes, each closed at the database: booking retries,
//! approvals and policies that cannot be dodged, and what an agent may send
//! or do to another login's effect. Each test reproduces the hole as it was
//! found.

mod common;
mod settle_support;

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use effectwatch::ledger::approvals::{self, Grant};
use effectwatch::ledger::policies::{self, PolicyChange};
use effectwatch::ledger::retention;
use effectwatch::ledger::writer::{
    Completion, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, LedgerError, State};
use serde_json::json;
use settle_support::{Rig, role_pool};

fn at(hour: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2027, 3, 1, hour, 0, 0).unwrap()
}

fn booking(key: &str, from: u32, to: u32) -> Intent {
    Intent {
        op_key: key.to_string(),
        action: "booking".into(),
        target: "room:7".into(),
        params: json!({ "guest": "Ada" }),
        requested_by: "agent-3".into(),
        during: Some((at(from), at(to))),
        ..Intent::default()
    }
}

async fn policy(rig: &Rig, action: &str, change: PolicyChange) {
    policies::set(&rig.operator_pool, action, &change, "alice", "the contract")
        .await
        .unwrap();
}

async fn by_time_range(rig: &Rig, exclusive: bool) {
    policy(
        rig,
        "booking",
        PolicyChange {
            conflicts_by_time_range: Some(true),
            exclusive_per_target: Some(exclusive),
            ..PolicyChange::default()
        },
    )
    .await;
}

async fn fail_retryable(rig: &Rig, key: &str) {
    let pool = &rig.db.pool;
    assert!(mark_dispatched(pool, key, None, "w").await.unwrap().claimed);
    complete_effect(
        pool,
        key,
        Outcome::Failed { retryable: true },
        &Completion {
            reason: Some("the room system was down".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
}

async fn booking_retry_beside_another_range(exclusive: bool) {
    let rig = Rig::new().await;
    by_time_range(&rig, exclusive).await;
    let pool = &rig.db.pool;
    assert_eq!(
        begin_effect(pool, &booking("book:10", 10, 11))
            .await
            .unwrap()
            .decision,
        Decision::Proceed
    );
    fail_retryable(&rig, "book:10").await;
    // Another guest takes the afternoon meanwhile; still open.
    assert_eq!(
        begin_effect(pool, &booking("book:14", 14, 15))
            .await
            .unwrap()
            .decision,
        Decision::Proceed
    );
    // The morning's retry does not overlap it: it goes ahead.
    let retried = begin_effect(pool, &booking("book:10", 10, 11))
        .await
        .unwrap();
    assert_eq!(retried.decision, Decision::Retry);
    assert_eq!(rig.effect("book:10").await.state, State::Pending);
}

#[tokio::test]
async fn a_booking_retry_waits_only_for_an_overlapping_booking() {
    booking_retry_beside_another_range(true).await;
}

#[tokio::test]
async fn a_booking_retry_under_a_non_exclusive_policy_is_answered_not_an_error() {
    booking_retry_beside_another_range(false).await;
    // And one that does overlap an open booking is held, not an exclusion error.
    let rig = Rig::new().await;
    by_time_range(&rig, false).await;
    let pool = &rig.db.pool;
    begin_effect(pool, &booking("book:A", 10, 11))
        .await
        .unwrap();
    fail_retryable(&rig, "book:A").await;
    assert_eq!(
        begin_effect(pool, &booking("book:B", 10, 12))
            .await
            .unwrap()
            .decision,
        Decision::Proceed
    );
    let retried = begin_effect(pool, &booking("book:A", 10, 11))
        .await
        .unwrap();
    assert_eq!(retried.decision, Decision::Held);
    // Once B is made, the retry would double-book it: overlap, naming B.
    assert!(
        mark_dispatched(pool, "book:B", None, "w")
            .await
            .unwrap()
            .claimed
    );
    complete_effect(pool, "book:B", Outcome::Succeeded, &Completion::default())
        .await
        .unwrap();
    let retried = begin_effect(pool, &booking("book:A", 10, 11))
        .await
        .unwrap();
    assert_eq!(retried.decision, Decision::Overlap);
    assert_eq!(retried.result.unwrap()["overlaps"], "book:B");
}

#[tokio::test]
async fn a_pruned_booking_replayed_with_another_range_is_rejected() {
    let rig = Rig::new().await;
    by_time_range(&rig, true).await;
    let pool = &rig.db.pool;
    begin_effect(pool, &booking("book:P", 10, 11))
        .await
        .unwrap();
    assert!(
        mark_dispatched(pool, "book:P", None, "w")
            .await
            .unwrap()
            .claimed
    );
    complete_effect(pool, "book:P", Outcome::Succeeded, &Completion::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cutoff: DateTime<Utc> = sqlx::query_scalar("select now()")
        .fetch_one(pool)
        .await
        .unwrap();
    retention::prune(
        pool,
        retention::Cutoff::Before(cutoff),
        "retention-bot",
        "old",
        None,
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        rig.count("select count(*) from ledger.key_tombstones where op_key = 'book:P'")
            .await,
        1
    );
    let same = begin_effect(pool, &booking("book:P", 10, 11))
        .await
        .unwrap();
    assert_eq!(same.decision, Decision::Replay);
    let moved = begin_effect(pool, &booking("book:P", 15, 16))
        .await
        .unwrap();
    assert_eq!(moved.decision, Decision::Rejected);
}

fn refund(key: &str, amount: i64) -> Intent {
    Intent {
        op_key: key.to_string(),
        action: "refund".into(),
        target: format!("invoice:{key}"),
        params: json!({ "amount_minor": amount, "currency": "EUR" }),
        requested_by: "agent-7".into(),
        amount_minor: Some(amount),
        currency: Some("EUR".into()),
        ..Intent::default()
    }
}

#[tokio::test]
async fn a_policy_that_demands_a_registered_approval_refuses_an_effect_naming_none() {
    let rig = Rig::new().await;
    policy(
        &rig,
        "refund",
        PolicyChange {
            approvals_must_be_registered: Some(true),
            compensation_approval_limit_minor: Some(Some(10_000)),
            ..PolicyChange::default()
        },
    )
    .await;
    let pool = &rig.db.pool;
    let big = begin_effect(pool, &refund("refund:BIG", 99_999_999))
        .await
        .unwrap();
    assert_eq!(big.decision, Decision::Rejected);
    assert!(
        big.result.unwrap()["refused"]
            .as_str()
            .unwrap()
            .contains("requires an approval"),
    );
    // Within the limit, none is needed.
    let small = begin_effect(pool, &refund("refund:SMALL", 500))
        .await
        .unwrap();
    assert_eq!(small.decision, Decision::Proceed);
}

#[tokio::test]
async fn action_names_are_normalised_and_a_ledger_may_refuse_unknown_ones() {
    let rig = Rig::new().await;
    policy(
        &rig,
        "refund",
        PolicyChange {
            approvals_must_be_registered: Some(true),
            ..PolicyChange::default()
        },
    )
    .await;
    let pool = &rig.db.pool;
    // "Refund" and " refund " are refund, under refund's policy.
    for (key, action) in [("refund:U1", "Refund"), ("refund:U2", " refund ")] {
        let mut intent = refund(key, 100);
        intent.action = action.to_string();
        let begun = begin_effect(pool, &intent).await.unwrap();
        assert_eq!(begun.decision, Decision::Rejected, "{action:?}");
        assert_eq!(rig.effect(key).await.action, "refund");
    }
    // A name of its own runs under the defaults, until the ledger refuses them.
    let mut invented = refund("refund:U3", 100);
    invented.action = "refund2".into();
    assert_eq!(
        begin_effect(pool, &invented).await.unwrap().decision,
        Decision::Proceed
    );
    policies::set_unknown_actions(&rig.operator_pool, "refuse", "alice", "no invented actions")
        .await
        .unwrap();
    invented.op_key = "refund:U4".into();
    let refused = begin_effect(pool, &invented).await.unwrap_err();
    assert!(
        matches!(&refused, LedgerError::Invalid(m) if m.contains("refund2 has no policy")),
        "{refused:?}"
    );
    let audited = rig
        .count("select count(*) from ledger.audit_log where action = 'set_unknown_actions'")
        .await;
    assert_eq!(audited, 1);
    // check names the action in use with no policy.
    let health = effectwatch::cli::check::health::measure(&rig.db.pool, false, false)
        .await
        .unwrap();
    assert_eq!(health.actions_without_policy, ["refund2 (1 effects)"]);
}

fn approved(key: &str, version: i32) -> Intent {
    Intent {
        approval_ref: Some("AP-900".into()),
        approval_version: Some(version),
        target: "invoice:900".into(),
        ..refund(key, 90_000)
    }
}

fn grant(version: i32) -> Grant {
    Grant {
        approval_ref: "AP-900".into(),
        version,
        action: "refund".into(),
        target: "invoice:900".into(),
        expires_at: Utc::now() + chrono::Duration::hours(1),
        amount_ceiling: Some((100_000, "EUR".into())),
        params: None,
    }
}

#[tokio::test]
async fn an_approval_regranted_as_a_new_version_authorises_no_second_effect() {
    let rig = Rig::new().await;
    let approver = role_pool(&rig.db, "effect_approver").await;
    approvals::grant(&approver, &grant(1), "bot", "ticket 1")
        .await
        .unwrap();
    let pool = &rig.db.pool;
    let first = begin_effect(pool, &approved("refund:900:a", 1))
        .await
        .unwrap();
    assert_eq!(first.decision, Decision::Proceed);
    approvals::grant(&approver, &grant(2), "bot", "to extend expiry")
        .await
        .unwrap();
    let second = begin_effect(pool, &approved("refund:900:b", 2))
        .await
        .unwrap();
    assert_eq!(second.decision, Decision::Rejected);
    assert!(
        second.result.unwrap()["refused"]
            .as_str()
            .unwrap()
            .contains("already authorised another effect"),
    );
    // The approver lists its approvals without reading the effects.
    let listed = approvals::list(&approver, 10).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(
        listed
            .iter()
            .any(|a| a.consumed_by.as_deref() == Some("refund:900:a"))
    );
}

#[tokio::test]
async fn amounts_are_never_negative() {
    let rig = Rig::new().await;
    let refused = begin_effect(&rig.db.pool, &refund("refund:NEG", -100_000_000))
        .await
        .unwrap_err();
    assert!(
        format!("{refused:?}").contains("not negative"),
        "{refused:?}"
    );
}

#[tokio::test]
async fn the_ledgers_own_approval_refs_and_policies_are_not_anyones_to_take() {
    let rig = Rig::new().await;
    let approver = role_pool(&rig.db, "effect_approver").await;
    let squat = Grant {
        approval_ref: "compensation_request:1".into(),
        ..grant(1)
    };
    let refused = approvals::grant(&approver, &squat, "bot", "blocking four-eyes")
        .await
        .unwrap_err();
    assert!(format!("{refused}").contains("ledger's own"), "{refused}");
    let mut named = refund("refund:SQUAT", 100);
    named.approval_ref = Some("compensation_request:7".into());
    assert!(begin_effect(&rig.db.pool, &named).await.is_err());
    let stopped = policies::set(
        &rig.operator_pool,
        "compensate",
        &PolicyChange {
            conflicts_by_time_range: Some(true),
            ..PolicyChange::default()
        },
        "mallory",
        "stop every compensation",
    )
    .await
    .unwrap_err();
    assert!(
        format!("{stopped}").contains("ledger's own action"),
        "{stopped}"
    );
}

#[tokio::test]
async fn another_agent_login_cannot_reopen_an_effect_it_does_not_own() {
    let rig = Rig::new().await;
    let a1 = common::roles::LoginRole::create(&rig.db, "effect_agent").await;
    let a2 = common::roles::LoginRole::create(&rig.db, "effect_agent").await;
    let (Some(mut one), Some(mut two)) = (a1.connect(&rig.db).await, a2.connect(&rig.db).await)
    else {
        return;
    };
    policy(
        &rig,
        "refund",
        PolicyChange {
            retry_semantics: Some("safe_retry".into()),
            ..PolicyChange::default()
        },
    )
    .await;
    for (key, outcome) in [
        ("refund:OWN:unknown", Outcome::Unknown),
        ("refund:OWN:failed", Outcome::Failed { retryable: true }),
    ] {
        let intent = refund(key, 100);
        assert_eq!(
            begin_effect(&mut one, &intent).await.unwrap().decision,
            Decision::Proceed
        );
        assert!(
            mark_dispatched(&mut one, key, None, "a1")
                .await
                .unwrap()
                .claimed
        );
        complete_effect(&mut one, key, outcome, &Completion::default())
            .await
            .unwrap();
        let before = rig.effect(key).await;
        // Refused outright, telling nothing of the effect (0023).
        let other = begin_effect(&mut two, &intent).await;
        assert!(
            matches!(other, Err(LedgerError::Refused(_))),
            "{key}: {other:?}"
        );
        let after = rig.effect(key).await;
        assert_eq!(
            (after.state, after.version),
            (before.state, before.version),
            "{key}"
        );
        // Its own login still may.
        assert_eq!(
            begin_effect(&mut one, &intent).await.unwrap().decision,
            Decision::Retry,
            "{key}"
        );
    }
}

#[tokio::test]
async fn params_nested_absurdly_deep_are_refused_at_the_door() {
    let rig = Rig::new().await;
    let mut deep = json!(1);
    for _ in 0..200 {
        deep = json!({ "a": deep });
    }
    let mut intent = refund("refund:DEEP", 100);
    intent.params = deep;
    let refused = begin_effect(&rig.db.pool, &intent).await.unwrap_err();
    assert!(
        format!("{refused:?}").contains("deeper than 64"),
        "{refused:?}"
    );
    // 64 levels is a document, and passes.
    let mut fine = json!(1);
    for _ in 0..63 {
        fine = json!({ "a": fine });
    }
    intent.params = fine;
    assert_eq!(
        begin_effect(&rig.db.pool, &intent).await.unwrap().decision,
        Decision::Proceed
    );
}

#[tokio::test]
async fn blank_keys_and_names_are_refused() {
    let rig = Rig::new().await;
    for (field, value) in [
        ("op_key", "   "),
        ("action", "   "),
        ("target", "  "),
        ("requested_by", " "),
    ] {
        let mut intent = refund("refund:BLANK", 100);
        match field {
            "op_key" => intent.op_key = value.into(),
            "action" => intent.action = value.into(),
            "target" => intent.target = value.into(),
            _ => intent.requested_by = value.into(),
        }
        let refused = begin_effect(&rig.db.pool, &intent).await.unwrap_err();
        assert!(
            matches!(&refused, LedgerError::Invalid(m) if m.contains("blank")),
            "{field}: {refused:?}"
        );
    }
}

#[tokio::test]
async fn approval_commands_say_what_is_wrong_in_one_line() {
    let rig = Rig::new().await;
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"))
            .args(args)
            .env("DATABASE_URL", &rig.db.url)
            .output()
            .unwrap()
    };
    let nope = run(&["approval", "revoke", "NOPE", "--reason", "cleanup"]);
    let said = String::from_utf8_lossy(&nope.stderr);
    assert!(!nope.status.success());
    assert!(said.contains("no approval NOPE"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    let far = run(&[
        "approval",
        "grant",
        "AP-F",
        "--version",
        "1",
        "--action",
        "refund",
        "--target",
        "invoice:1",
        "--expires",
        "99999999999d",
        "--reason",
        "forever",
    ]);
    let said = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), Some(2), "{said}");
    assert!(said.contains("too far away"), "{said}");
}
