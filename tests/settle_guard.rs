//! What stops a write: read-only (one dispatcher), the database's roles
//! (whatever the console believes), and a version the operator saw that is
//! no longer current. And the by-hand actions, each with its audit entry.

mod common;
mod settle_support;

use effectwatch::fakeprovider::Route;
use effectwatch::ledger::writer::{self, Intent};
use effectwatch::ledger::{LedgerError, State};
use effectwatch::settle::verbs::{self, Answers, On, Outcome};
use effectwatch::settle::{Request, SettleError, Settler};
use serde_json::json;
use settle_support::{Rig, role_pool};

fn every_request(op_key: &str, seen: Option<i64>) -> Vec<Request> {
    let key = op_key.to_string();
    let reason = "because".to_string();
    vec![
        Request::on_effect(&verbs::RECONCILE, key.clone(), seen, Answers::default()),
        Request::on_effect(
            &verbs::COMPENSATE,
            key.clone(),
            seen,
            Answers::because(reason.clone()),
        ),
        Request::on_effect(
            &verbs::ESCALATE,
            key.clone(),
            seen,
            Answers {
                sink: None,
                ..Answers::because(reason.clone())
            },
        ),
        Request::on_effect(
            &verbs::RESOLVE,
            key.clone(),
            seen,
            Answers {
                outcome: Some(Outcome::Succeeded),
                reference: "fx_1".into(),
                ..Answers::because(reason.clone())
            },
        ),
        Request::on_effect(
            &verbs::RELEASE,
            key.clone(),
            seen,
            Answers::because(reason.clone()),
        ),
        Request::on_effect(
            &verbs::CANCEL,
            key.clone(),
            seen,
            Answers::because(reason.clone()),
        ),
        Request::on_effect(
            &verbs::ANNOTATE,
            key.clone(),
            seen,
            Answers::because(reason.clone()),
        ),
        Request::on_effect(
            &verbs::APPROVE,
            key.clone(),
            seen,
            Answers::because(reason.clone()),
        ),
        Request::on_effect(
            &verbs::REJECT,
            key.clone(),
            seen,
            Answers::because(reason.clone()),
        ),
        Request::on_escalation(
            &verbs::ACKNOWLEDGE_ESCALATION,
            format!("escalate:{key}:unknown_outcome"),
            Answers::because(reason.clone()),
        ),
        Request::on_escalation(
            &verbs::RESOLVE_ESCALATION,
            format!("escalate:{key}:unknown_outcome"),
            Answers::because(reason),
        ),
    ]
}

/// Two effects on one target: the second is held behind the first.
async fn held_pair(rig: &Rig, target: &str) -> (String, String) {
    let mut keys = Vec::new();
    for n in 1..=2 {
        let key = format!("booking:{target}:{n}");
        writer::begin_effect(
            &rig.db.pool,
            &Intent {
                op_key: key.clone(),
                action: "booking".into(),
                target: target.into(),
                params: json!({ "seat": n }),
                requested_by: "agent-3".into(),
                provider: Some("pay".into()),
                ..Intent::default()
            },
        )
        .await
        .unwrap();
        keys.push(key);
    }
    assert_eq!(rig.effect(&keys[1]).await.state, State::Held);
    (keys[0].clone(), keys[1].clone())
}

#[tokio::test]
async fn read_only_refuses_every_writing_request_in_one_place() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:RO:v1", 100).await;
    let settler = Settler::new(rig.operator_pool.clone(), rig.config.clone(), "alice", true);
    let before = rig.footprint().await;
    for request in every_request("refund:RO:v1", None) {
        let name = request.name();
        let error = settler.settle(request).await.unwrap_err();
        assert!(matches!(error, SettleError::ReadOnly(_)), "{name}: {error}");
        assert!(error.to_string().starts_with("read-only:"), "{error}");
    }
    assert!(matches!(
        settler
            .reconcile_many(vec![("refund:RO:v1".into(), 1)])
            .await,
        Err(SettleError::ReadOnly(_))
    ));
    assert!(matches!(
        settler.deliver_due_escalations().await,
        Err(SettleError::ReadOnly(_))
    ));
    assert_eq!(rig.footprint().await, before);
    assert_eq!(rig.fake.requests(Route::Any), 0);
}

#[tokio::test]
async fn the_readonly_role_is_refused_by_the_database_itself() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:ROLE:v1", 100).await;
    rig.succeeded_effect("refund:ROLE:v2", 100).await;
    let (_, held) = held_pair(&rig, "flight:LH-1").await;
    let readonly = role_pool(&rig.db, "effect_readonly").await;
    // The console does not know it is read-only: only the database stops it.
    let settler = Settler::new(readonly.clone(), rig.config.clone(), "mallory", false);
    let before = rig.footprint().await;
    let attempts = [
        Request::on_effect(
            &verbs::RECONCILE,
            "refund:ROLE:v1",
            None,
            Answers::default(),
        ),
        Request::on_effect(
            &verbs::RESOLVE,
            "refund:ROLE:v1",
            None,
            Answers {
                outcome: Some(Outcome::Failed),
                retryable: true,
                ..Answers::because("I say so")
            },
        ),
        Request::on_effect(
            &verbs::COMPENSATE,
            "refund:ROLE:v2",
            None,
            Answers::because("x"),
        ),
        Request::on_effect(
            &verbs::ESCALATE,
            "refund:ROLE:v1",
            None,
            Answers {
                sink: None,
                ..Answers::because("x")
            },
        ),
        Request::on_effect(&verbs::RELEASE, held.clone(), None, Answers::because("x")),
        Request::on_effect(&verbs::CANCEL, held, None, Answers::because("x")),
        Request::on_effect(
            &verbs::ANNOTATE,
            "refund:ROLE:v1",
            None,
            Answers::because("x"),
        ),
    ];
    for request in attempts {
        let name = request.name();
        let error = settler.settle(request).await.unwrap_err();
        assert!(
            matches!(error, SettleError::Ledger(LedgerError::Refused(_))),
            "{name}: {error}"
        );
        assert!(error.to_string().contains("permission denied"), "{error}");
    }
    // Nor by hand.
    let by_hand =
        sqlx::query("update ledger.effects set state = 'failed' where op_key = 'refund:ROLE:v1'")
            .execute(&readonly)
            .await
            .unwrap_err();
    assert!(
        by_hand.to_string().contains("permission denied"),
        "{by_hand}"
    );
    assert_eq!(rig.footprint().await, before);
    assert_eq!(
        rig.fake.requests(Route::Create),
        0,
        "no compensation was sent"
    );

    // Agents may write effects, not settle them.
    let agent = role_pool(&rig.db, "effect_agent").await;
    let settler = Settler::new(agent, rig.config.clone(), "agent-7", false);
    let error = settler
        .settle(Request::on_effect(
            &verbs::ANNOTATE,
            "refund:ROLE:v1",
            None,
            Answers::because("x"),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(error, SettleError::Ledger(LedgerError::Refused(_))),
        "{error}"
    );
}

#[tokio::test]
async fn a_stale_version_is_refused_with_nothing_written() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:OLD:v1", 100).await;
    let seen = rig.effect("refund:OLD:v1").await.version;
    // Someone else acted since the operator looked.
    rig.settler("bob")
        .settle(Request::on_effect(
            &verbs::ANNOTATE,
            "refund:OLD:v1",
            None,
            Answers::because("looking"),
        ))
        .await
        .unwrap();
    rig.settler("bob")
        .settle(Request::on_effect(
            &verbs::RECONCILE,
            "refund:OLD:v1",
            None,
            Answers::default(),
        ))
        .await
        .unwrap();
    let now = rig.effect("refund:OLD:v1").await.version;
    assert_ne!(now, seen);

    let before = rig.footprint().await;
    let lookups = rig.fake.requests(Route::Lookup);
    let settler = rig.settler("alice");
    for request in every_request("refund:OLD:v1", Some(seen)) {
        if request.verb.on == On::Escalation {
            continue; // escalations carry no version
        }
        let name = request.name();
        let error = settler.settle(request).await.unwrap_err();
        assert!(
            matches!(error, SettleError::Ledger(LedgerError::Changed(_))),
            "{name}: {error}"
        );
        assert!(
            error.to_string().contains("changed since you looked"),
            "{name}: {error}"
        );
    }
    assert_eq!(rig.footprint().await, before);
    assert_eq!(
        rig.fake.requests(Route::Lookup),
        lookups,
        "nothing was asked either"
    );
}

#[tokio::test]
async fn resolve_release_cancel_and_annotate_by_hand_with_reasons() {
    let rig = Rig::new().await;
    let alice = rig.settler("alice");
    rig.unknown_effect("refund:HAND:v1", 100).await;
    rig.unknown_effect("refund:HAND:v2", 100).await;
    let (_, held_one) = held_pair(&rig, "flight:LH-2").await;
    let (_, held_two) = held_pair(&rig, "flight:LH-3").await;

    let resolved = alice
        .settle(Request::on_effect(
            &verbs::RESOLVE,
            "refund:HAND:v1",
            None,
            Answers {
                outcome: Some(Outcome::Succeeded),
                reference: "bank:123".into(),
                ..Answers::because("the bank statement shows it")
            },
        ))
        .await
        .unwrap();
    assert!(
        resolved.summary.contains("succeeded"),
        "{}",
        resolved.summary
    );
    assert_eq!(
        rig.effect("refund:HAND:v1").await.external_ref.as_deref(),
        Some("bank:123")
    );
    alice
        .settle(Request::on_effect(
            &verbs::RESOLVE,
            "refund:HAND:v2",
            None,
            Answers {
                outcome: Some(Outcome::Failed),
                ..Answers::because("the provider's support says it was declined")
            },
        ))
        .await
        .unwrap();
    assert_eq!(rig.effect("refund:HAND:v2").await.state, State::Failed);
    alice
        .settle(Request::on_effect(
            &verbs::RELEASE,
            held_one.clone(),
            None,
            Answers::because("different seat"),
        ))
        .await
        .unwrap();
    assert_eq!(rig.effect(&held_one).await.state, State::Pending);
    alice
        .settle(Request::on_effect(
            &verbs::CANCEL,
            held_two.clone(),
            None,
            Answers::because("duplicate booking"),
        ))
        .await
        .unwrap();
    assert_eq!(rig.effect(&held_two).await.state, State::Cancelled);
    alice
        .settle(Request::on_effect(
            &verbs::ANNOTATE,
            "refund:HAND:v2",
            None,
            Answers::because("called the bank"),
        ))
        .await
        .unwrap();

    let no_reason = alice
        .settle(Request::on_effect(
            &verbs::RELEASE,
            held_one.clone(),
            None,
            Answers::because(""),
        ))
        .await
        .unwrap_err();
    assert!(no_reason.to_string().contains("reason"), "{no_reason}");
    let entries: Vec<(String, String, Option<String>)> =
        sqlx::query_as("select operator, action, reason from ledger.audit_log order by seq")
            .fetch_all(&rig.db.pool)
            .await
            .unwrap();
    let actions: Vec<&str> = entries.iter().map(|(_, a, _)| a.as_str()).collect();
    assert_eq!(
        actions,
        ["resolve", "resolve", "release", "cancel", "annotate"]
    );
    assert!(
        entries
            .iter()
            .all(|(who, _, why)| who == "alice" && why.is_some())
    );
    rig.audit_intact().await;
}
