//! Escalation: one per key, delivered once even when delivery is retried,
//! its state visible, closed by acknowledge and resolve.

mod common;
mod settle_support;

use std::time::{Duration, Instant};

use effectwatch::fakeprovider::{Fault, Route};
use effectwatch::ledger::escalations;
use effectwatch::settle::verbs::{self, Answers};
use effectwatch::settle::{Request, Settler};
use serde_json::Value;
use settle_support::{PROVIDER_TIMEOUT_MS, Rig};

fn escalate(op_key: &str, sink: Option<&str>) -> Request {
    Request::on_effect(
        &verbs::ESCALATE,
        op_key,
        None,
        Answers {
            sink: sink.map(str::to_string),
            ..Answers::because("nobody can tell whether the customer got the money")
        },
    )
}

/// Runs delivery passes until the escalation is delivered (or a bound).
async fn deliver_until_delivered(settler: &Settler, rig: &Rig, key: &str) -> usize {
    for pass in 1..=100 {
        settler.deliver_due_escalations().await.unwrap();
        let status = escalations::escalation_status(&rig.db.pool, key)
            .await
            .unwrap()
            .unwrap();
        if status.state == "delivered" {
            return pass;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{key} was never delivered");
}

#[tokio::test]
async fn a_sink_that_fails_twice_then_succeeds_delivers_the_escalation_once() {
    let rig = Rig::new().await;
    let settler = rig.settler("alice");
    rig.unknown_effect("refund:ESC:v1", 1500).await;
    // The provider cannot tell: the effect stays unknown, with that evidence.
    rig.fake.fail_next(Route::Lookup, Fault::Status(503));
    settler
        .settle(Request::on_effect(
            &verbs::RECONCILE,
            "refund:ESC:v1",
            None,
            Answers::default(),
        ))
        .await
        .unwrap();
    rig.fake.fail_next(Route::Hook, Fault::Status(503));
    rig.fake.fail_next(Route::Hook, Fault::Status(503));

    let report = settler
        .settle(escalate("refund:ESC:v1", None))
        .await
        .unwrap();
    let key = report.detail["escalation_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(key, "escalate:refund:ESC:v1:unknown_outcome");
    assert!(
        report.summary.contains("retried in the background"),
        "{}",
        report.summary
    );
    let status = escalations::escalation_status(&rig.db.pool, &key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (status.state.as_str(), status.delivery_attempts),
        ("failed", 1)
    );
    assert!(status.last_error.unwrap().contains("503"));

    deliver_until_delivered(&settler, &rig, &key).await;
    for _ in 0..3 {
        assert_eq!(settler.deliver_due_escalations().await.unwrap(), 0);
    }
    assert_eq!(
        rig.fake.requests(Route::Hook),
        3,
        "two failures and one success"
    );
    let hooks = rig.fake.hooks();
    assert_eq!(hooks.len(), 1, "delivered once");
    assert_eq!(hooks[0].idempotency_key.as_deref(), Some(key.as_str()));
    let status = escalations::escalation_status(&rig.db.pool, &key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (status.state.as_str(), status.delivery_attempts),
        ("delivered", 3)
    );
    let outcomes: Vec<bool> =
        sqlx::query_scalar("select ok from ledger.escalation_deliveries order by id")
            .fetch_all(&rig.db.pool)
            .await
            .unwrap();
    assert_eq!(outcomes, [false, false, true]);
    // Each try is in the effect's record, for show and the detail's timeline.
    let shown = effectwatch::ledger::history::load(&rig.db.pool, "refund:ESC:v1")
        .await
        .unwrap();
    let tries: Vec<(i32, bool)> = shown
        .escalation_deliveries
        .iter()
        .map(|delivery| (delivery.attempt, delivery.ok))
        .collect();
    assert_eq!(tries, [(1, false), (2, false), (3, true)]);
    assert!(
        shown.escalation_deliveries[0]
            .error
            .as_deref()
            .unwrap()
            .contains("503")
    );
    let timeline = effectwatch::ledger::history::timeline(&shown);
    assert_eq!(
        timeline
            .iter()
            .filter(|entry| entry.kind == "deliver")
            .count(),
        3
    );

    // The decision, the key, the ledger entry and the evidence; not the raw log.
    let body = &hooks[0].body;
    let mut fields: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "attempts",
            "decision",
            "decision_needed",
            "effect",
            "escalated_at",
            "escalated_by",
            "escalation_key",
            "evidence",
            "reason",
            "text"
        ]
    );
    assert_eq!(body["decision"], "unknown_outcome");
    assert_eq!(body["effect"]["op_key"], "refund:ESC:v1");
    assert_eq!(body["effect"]["amount_minor"], 1500);
    assert_eq!(body["evidence"][0]["finding"], "indeterminate");
    let text = body["text"].as_str().unwrap();
    assert!(
        text.contains("refund:ESC:v1") && text.contains("15.00 EUR"),
        "{text}"
    );
    rig.audit_intact().await;
}

#[tokio::test]
async fn the_same_decision_escalated_again_returns_the_open_escalation() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:TWICE:v1", 100).await;
    let first = rig
        .settler("alice")
        .settle(escalate("refund:TWICE:v1", None))
        .await
        .unwrap();
    let second = rig
        .settler("bob")
        .settle(escalate("refund:TWICE:v1", None))
        .await
        .unwrap();
    assert_eq!(second.detail["status"], "existing", "{}", second.summary);
    assert_eq!(
        first.detail["escalation_key"],
        second.detail["escalation_key"]
    );
    assert_eq!(rig.fake.hooks().len(), 1);
    assert_eq!(
        rig.count("select count(*) from ledger.escalations").await,
        1
    );

    let key = first.detail["escalation_key"].as_str().unwrap().to_string();
    let bob = rig.settler("bob");
    let acked = bob
        .settle(Request::on_escalation(
            &verbs::ACKNOWLEDGE_ESCALATION,
            key.clone(),
            Answers::because("on it"),
        ))
        .await
        .unwrap();
    assert!(
        acked.summary.starts_with("acknowledged"),
        "{}",
        acked.summary
    );
    let resolved = bob
        .settle(Request::on_escalation(
            &verbs::RESOLVE_ESCALATION,
            key.clone(),
            Answers::because("reconciled"),
        ))
        .await
        .unwrap();
    assert!(
        resolved.summary.starts_with("resolved"),
        "{}",
        resolved.summary
    );
    let repeat = bob
        .settle(Request::on_escalation(
            &verbs::RESOLVE_ESCALATION,
            key.clone(),
            Answers::because("again"),
        ))
        .await
        .unwrap();
    assert_eq!(repeat.detail["status"], "unchanged");

    // Once resolved, the same situation escalated again is a new page.
    let third = rig
        .settler("carol")
        .settle(escalate("refund:TWICE:v1", None))
        .await
        .unwrap();
    assert_eq!(third.detail["escalation_key"], format!("{key}:2"));
    let actions: Vec<String> =
        sqlx::query_scalar("select action from ledger.audit_log order by seq")
            .fetch_all(&rig.db.pool)
            .await
            .unwrap();
    assert_eq!(
        actions,
        [
            "escalate",
            "acknowledge_escalation",
            "resolve_escalation",
            "escalate"
        ]
    );
    rig.audit_intact().await;
}

#[tokio::test]
async fn pagerduty_gets_one_incident_per_key_and_the_loop_closed() {
    // The routing key comes from an environment variable; PATH is always set
    // (tests must not change the environment of a multi-threaded process).
    let rig = Rig::with_sinks(Some(
        "[sinks.pd]\nkind = \"pagerduty\"\nurl = \"{base}/v2/enqueue\"\nrouting_key_env = \"PATH\"\ntimeout_ms = 400\n\
         [sinks.ops]\nkind = \"webhook\"\nurl = \"{base}/hooks/ops\"\n",
    ))
    .await;
    rig.succeeded_effect("refund:PD:v1", 100).await;
    let settler = rig.settler("alice");
    let unchosen = settler
        .settle(escalate("refund:PD:v1", None))
        .await
        .unwrap_err();
    assert!(unchosen.to_string().contains("--to: ops, pd"), "{unchosen}");

    let report = settler
        .settle(escalate("refund:PD:v1", Some("pd")))
        .await
        .unwrap();
    let key = report.detail["escalation_key"]
        .as_str()
        .unwrap()
        .to_string();
    for request in [
        Request::on_escalation(
            &verbs::ACKNOWLEDGE_ESCALATION,
            key.clone(),
            Answers::because("paged"),
        ),
        Request::on_escalation(
            &verbs::RESOLVE_ESCALATION,
            key.clone(),
            Answers::because("fine"),
        ),
    ] {
        let closed = settler.settle(request).await.unwrap();
        assert_eq!(closed.detail["sink_told"], true, "{}", closed.detail);
    }
    let events: Vec<Value> = rig.fake.hooks().into_iter().map(|h| h.body).collect();
    let actions: Vec<&str> = events
        .iter()
        .map(|e| e["event_action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["trigger", "acknowledge", "resolve"]);
    assert!(events.iter().all(|e| e["dedup_key"] == key.as_str()));
    assert_eq!(events[0]["routing_key"], std::env::var("PATH").unwrap());
    assert_eq!(events[0]["payload"]["source"], "effectwatch");
    assert_eq!(
        events[0]["payload"]["custom_details"]["escalation_key"],
        key.as_str()
    );
}

#[tokio::test]
async fn a_hanging_sink_is_bounded_and_its_state_visible() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:HANG:v1", 100).await;
    rig.fake.set_fault(Route::Hook, Some(Fault::Hang));
    let started = Instant::now();
    let report = rig
        .settler("alice")
        .settle(escalate("refund:HANG:v1", None))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_millis(PROVIDER_TIMEOUT_MS + 1500));
    let key = report.detail["escalation_key"].as_str().unwrap();
    let status = escalations::escalation_status(&rig.db.pool, key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.state, "failed");
    assert!(status.last_error.unwrap().contains("no answer"));
    rig.fake.set_fault(Route::Hook, None);
    deliver_until_delivered(&rig.settler("alice"), &rig, key).await;
    assert_eq!(rig.fake.hooks().len(), 1);
}

#[tokio::test]
async fn two_consoles_delivering_at_once_deliver_once() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:PAR:v1", 100).await;
    rig.fake.fail_next(Route::Hook, Fault::Status(500));
    let report = rig
        .settler("alice")
        .settle(escalate("refund:PAR:v1", None))
        .await
        .unwrap();
    let key = report.detail["escalation_key"]
        .as_str()
        .unwrap()
        .to_string();
    rig.fake
        .set_fault(Route::Hook, Some(Fault::Slow(Duration::from_millis(150))));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (a, b) = (rig.settler("alice"), rig.settler("bob"));
    let (first, second) = tokio::join!(a.deliver_due_escalations(), b.deliver_due_escalations());
    assert_eq!(first.unwrap() + second.unwrap(), 1);
    assert_eq!(rig.fake.hooks().len(), 1);
    let status = escalations::escalation_status(&rig.db.pool, &key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.state, "delivered");
}

#[tokio::test]
async fn command_and_desktop_sinks() {
    let folder = tempfile::tempdir().unwrap();
    let out = folder.path().join("escalation.json");
    let sinks = format!(
        "[sinks.script]\nkind = \"command\"\nprogram = \"/bin/sh\"\n\
         args = [\"-c\", \"cat > '{}'; echo $EFFECTWATCH_ESCALATION_KEY >> '{}'\"]\n\
         [sinks.desk]\nkind = \"desktop\"\ntimeout_ms = 1000\nretry = {{ base_ms = 10, max_secs = 1 }}\n",
        out.display(),
        out.display()
    );
    let rig = Rig::with_sinks(Some(&sinks)).await;
    rig.unknown_effect("refund:CMD:v1", 100).await;
    let settler = rig.settler("alice");
    let report = settler
        .settle(escalate("refund:CMD:v1", Some("script")))
        .await
        .unwrap();
    assert_eq!(
        report.detail["delivery"]["delivered"], true,
        "{}",
        report.summary
    );
    let written = std::fs::read_to_string(&out).unwrap();
    let (json, key) = written.rsplit_once('}').unwrap();
    let payload: Value = serde_json::from_str(&format!("{json}}}")).unwrap();
    assert_eq!(payload["effect"]["op_key"], "refund:CMD:v1");
    assert_eq!(key.trim(), "escalate:refund:CMD:v1:unknown_outcome");

    // Without a desktop session this fails at once; with one it shows a
    // notification. Either way the call is bounded.
    rig.succeeded_effect("refund:DESK:v1", 100).await;
    let started = Instant::now();
    let report = settler
        .settle(escalate("refund:DESK:v1", Some("desk")))
        .await
        .unwrap();
    let took = started.elapsed();
    eprintln!(
        "desktop sink: delivered = {}, {} ms ({})",
        report.detail["delivery"]["delivered"],
        took.as_millis(),
        report.detail["delivery"]["error"]
    );
    assert!(took < Duration::from_millis(2500), "{took:?}");
}
