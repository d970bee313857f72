//! Reconciliation against the fake provider: an unknown effect stays
//! unknown until evidence settles it, whatever the provider does wrong.

mod common;
mod settle_support;

use std::time::{Duration, Instant};

use effectwatch::fakeprovider::{Fault, Route};
use effectwatch::ledger::{LedgerError, State};
use effectwatch::settle::verbs::{self, Answers};
use effectwatch::settle::{Request, SettleError};
use settle_support::{PROVIDER_TIMEOUT_MS, Rig};

fn reconcile(op_key: &str, seen: Option<i64>) -> Request {
    Request::on_effect(&verbs::RECONCILE, op_key, seen, Answers::default())
}

#[tokio::test]
async fn an_unknown_effect_stays_unknown_until_evidence_settles_it() {
    let rig = Rig::new().await;
    let settler = rig.settler("alice");
    rig.unknown_effect("refund:INV-1:v1", 1500).await;
    // The agent's call did land; only its answer was lost.
    let landed = rig
        .fake
        .insert_effect(effectwatch::fakeprovider::NewEffect {
            kind: "refund".into(),
            amount_minor: Some(1500),
            currency: Some("EUR".into()),
            target: Some("invoice:refund:INV-1:v1".into()),
            idempotency_key: Some("refund:INV-1:v1".into()),
            ..Default::default()
        });

    let faults = [
        Fault::Hang,
        Fault::Reset,
        Fault::Status(503),
        Fault::Status(500),
        Fault::Malformed,
        Fault::Slow(Duration::from_millis(PROVIDER_TIMEOUT_MS * 3)),
    ];
    for fault in faults {
        rig.fake.fail_next(Route::Lookup, fault);
        let started = Instant::now();
        let report = settler
            .settle(reconcile("refund:INV-1:v1", None))
            .await
            .unwrap_or_else(|e| panic!("{fault:?}: {e}"));
        let took = started.elapsed();
        eprintln!("reconcile with the provider faulted by {fault:?}: indeterminate in {took:?}");
        assert_eq!(
            report.detail["finding"], "indeterminate",
            "{fault:?}: {}",
            report.summary
        );
        assert_eq!(report.detail["state"], "unknown", "{fault:?}");
        // A hanging provider is bounded by its timeout.
        assert!(
            took < Duration::from_millis(PROVIDER_TIMEOUT_MS + 1500),
            "{fault:?} took {took:?}"
        );
        assert_eq!(rig.effect("refund:INV-1:v1").await.state, State::Unknown);
    }
    let stored: Vec<(String, serde_json::Value, Option<i32>)> = sqlx::query_as(
        "select finding, evidence, duration_ms from ledger.reconciliations order by id",
    )
    .fetch_all(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(
        stored.len(),
        faults.len(),
        "every query is stored, whatever it found"
    );
    let kinds: Vec<&str> = stored
        .iter()
        .map(|(_, e, _)| e["error"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        [
            "timeout",
            "connection",
            "server_error",
            "server_error",
            "unparseable",
            "timeout"
        ]
    );
    assert!(stored.iter().all(|(_, _, ms)| ms.is_some()));

    // Evidence at last: the provider answers, and has it once.
    let report = settler
        .settle(reconcile("refund:INV-1:v1", None))
        .await
        .unwrap();
    assert_eq!(
        report.detail["finding"], "exists_once",
        "{}",
        report.summary
    );
    let effect = rig.effect("refund:INV-1:v1").await;
    assert_eq!(effect.state, State::Succeeded);
    assert_eq!(effect.external_ref.as_deref(), Some(landed.id.as_str()));
    assert_eq!(
        rig.count("select count(*) from ledger.audit_log where action = 'reconcile'")
            .await,
        7
    );
    rig.audit_intact().await;
}

#[tokio::test]
async fn a_late_success_is_indeterminate_until_final() {
    let rig = Rig::new().await;
    let settler = rig.settler("alice");
    rig.begin_and_dispatch("refund:LATE:v1", 900).await;
    // The agent's own call: the provider accepts it as pending, final later.
    let client = reqwest::Client::new();
    let answer = client
        .post(format!("{}/v1/effects", rig.base_url))
        .header("Idempotency-Key", "refund:LATE:v1")
        .header("X-Fake-Fault", "late=600")
        .json(&serde_json::json!({"kind": "refund", "amount_minor": 900, "currency": "EUR"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 202);
    effectwatch::ledger::writer::complete_effect(
        &rig.db.pool,
        "refund:LATE:v1",
        effectwatch::ledger::writer::Outcome::Unknown,
        &Default::default(),
    )
    .await
    .unwrap();

    let first = settler
        .settle(reconcile("refund:LATE:v1", None))
        .await
        .unwrap();
    assert_eq!(
        first.detail["finding"], "indeterminate",
        "{}",
        first.summary
    );
    assert_eq!(rig.effect("refund:LATE:v1").await.state, State::Unknown);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let second = settler
        .settle(reconcile("refund:LATE:v1", None))
        .await
        .unwrap();
    assert_eq!(
        second.detail["finding"], "exists_once",
        "{}",
        second.summary
    );
    assert_eq!(rig.effect("refund:LATE:v1").await.state, State::Succeeded);
}

#[tokio::test]
async fn reconcile_finds_the_effect_and_settles_it_with_the_reference() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:INV-2:v1", 2500).await;
    let id = rig.provider_did("refund:INV-2:v1", 2500);
    let seen = rig.effect("refund:INV-2:v1").await.version;
    let report = rig
        .settler("alice")
        .settle(reconcile("refund:INV-2:v1", Some(seen)))
        .await
        .unwrap();
    assert_eq!(report.detail["finding"], "exists_once");
    assert!(report.summary.contains(&id), "{}", report.summary);
    let effect = rig.effect("refund:INV-2:v1").await;
    assert_eq!(effect.state, State::Succeeded);
    assert_eq!(effect.external_ref.as_deref(), Some(id.as_str()));
    let (refs, evidence): (Vec<String>, serde_json::Value) = sqlx::query_as(
        "select external_refs, evidence from ledger.reconciliations where op_key = 'refund:INV-2:v1'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(refs, vec![id.clone()]);
    assert_eq!(
        evidence["answer"]["data"],
        serde_json::Value::Null,
        "only the relevant part"
    );
    assert_eq!(evidence["answer"][0]["id"], id.as_str());
    // Once succeeded, the external reference is asked by id.
    let again = rig
        .settler("alice")
        .settle(reconcile("refund:INV-2:v1", None))
        .await
        .unwrap();
    assert_eq!(again.detail["finding"], "exists_once");
    assert!(
        again.detail["evidence"]["request"]
            .as_str()
            .unwrap()
            .contains(&id)
    );
}

#[tokio::test]
async fn absent_duplicate_and_mismatch_are_told_apart() {
    let rig = Rig::new().await;
    let settler = rig.settler("alice");

    rig.unknown_effect("refund:ABSENT:v1", 100).await;
    let report = settler
        .settle(reconcile("refund:ABSENT:v1", None))
        .await
        .unwrap();
    assert_eq!(report.detail["finding"], "absent");
    let effect = rig.effect("refund:ABSENT:v1").await;
    assert_eq!(
        (effect.state, effect.retryable),
        (State::Failed, Some(true))
    );

    // The provider applied the agent's request twice on its side.
    rig.unknown_effect("refund:DUP:v1", 700).await;
    let client = reqwest::Client::new();
    client
        .post(format!("{}/v1/effects", rig.base_url))
        .header("Idempotency-Key", "refund:DUP:v1")
        .header("X-Fake-Fault", "duplicate")
        .json(&serde_json::json!({"kind": "refund", "amount_minor": 700, "currency": "EUR"}))
        .send()
        .await
        .unwrap();
    let report = settler
        .settle(reconcile("refund:DUP:v1", None))
        .await
        .unwrap();
    assert_eq!(report.detail["finding"], "duplicate", "{}", report.summary);
    assert_eq!(report.detail["external_refs"].as_array().unwrap().len(), 2);
    let effect = rig.effect("refund:DUP:v1").await;
    assert_eq!(effect.state, State::Unknown);
    assert_eq!(effect.attention.as_deref(), Some("duplicate"));

    // The provider holds a different amount than the ledger approved.
    rig.unknown_effect("refund:MIS:v1", 1000).await;
    rig.provider_did("refund:MIS:v1", 10_000);
    let report = settler
        .settle(reconcile("refund:MIS:v1", None))
        .await
        .unwrap();
    assert_eq!(report.detail["finding"], "mismatch");
    assert_eq!(report.detail["differences"][0]["field"], "amount_minor");
    assert_eq!(
        rig.effect("refund:MIS:v1").await.attention.as_deref(),
        Some("mismatch")
    );
    rig.audit_intact().await;
}

#[tokio::test]
async fn a_stale_version_is_refused_with_nothing_written_and_nothing_asked() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:STALE:v1", 100).await;
    rig.provider_did("refund:STALE:v1", 100);
    let seen = rig.effect("refund:STALE:v1").await.version;
    let before = rig.footprint().await;
    let error = rig
        .settler("alice")
        .settle(reconcile("refund:STALE:v1", Some(seen - 1)))
        .await
        .unwrap_err();
    assert!(
        matches!(error, SettleError::Ledger(LedgerError::Changed(_))),
        "{error}"
    );
    assert!(
        error.to_string().contains("changed since you looked"),
        "{error}"
    );
    assert_eq!(rig.footprint().await, before);
    assert_eq!(rig.fake.requests(Route::Lookup), 0);
}

#[tokio::test]
async fn an_unconfigured_provider_is_a_clear_error_not_a_finding() {
    let rig = Rig::new().await;
    let intent = effectwatch::ledger::writer::Intent {
        op_key: "msg:1".into(),
        action: "message".into(),
        target: "user:1".into(),
        params: serde_json::json!({}),
        requested_by: "agent".into(),
        provider: Some("smtp".into()),
        ..Default::default()
    };
    effectwatch::ledger::writer::begin_effect(&rig.db.pool, &intent)
        .await
        .unwrap();
    let before = rig.footprint().await;
    let error = rig
        .settler("alice")
        .settle(reconcile("msg:1", None))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("[providers.smtp]"), "{error}");
    assert_eq!(rig.footprint().await, before);
}

#[tokio::test]
async fn bulk_reconciliation_settles_each_item_on_its_own() {
    let rig = Rig::new().await;
    let mut items = Vec::new();
    for n in 0..6 {
        let key = format!("refund:BULK-{n}:v1");
        rig.unknown_effect(&key, 100 + n).await;
        if n % 2 == 0 {
            rig.provider_did(&key, 100 + n);
        }
        let version = rig.effect(&key).await.version;
        // One item was looked at too early.
        items.push((key, if n == 5 { version - 1 } else { version }));
    }
    let done = rig.settler("alice").reconcile_many(items).await.unwrap();
    let findings: Vec<String> = done
        .iter()
        .map(|item| match &item.result {
            Ok(report) => report.detail["finding"].as_str().unwrap_or("?").to_string(),
            Err(error) => format!("error: {error}").chars().take(40).collect(),
        })
        .collect();
    assert_eq!(
        &findings[..5],
        [
            "exists_once",
            "absent",
            "exists_once",
            "absent",
            "exists_once"
        ]
    );
    assert!(
        findings[5].starts_with("error: effect refund:BULK-5:v1 changed"),
        "{findings:?}"
    );
}

/// Figures for the report: reconcile latency against the fake provider,
/// end to end (read, ask over HTTP, compare, record with audit entry).
#[tokio::test]
async fn reconcile_latency_is_measured() {
    let rig = Rig::new().await;
    let settler = rig.settler("alice");
    let mut timings = Vec::new();
    for n in 0..40 {
        let key = format!("refund:LAT-{n}:v1");
        rig.unknown_effect(&key, 100).await;
        rig.provider_did(&key, 100);
        let started = Instant::now();
        let report = settler.settle(reconcile(&key, None)).await.unwrap();
        timings.push(started.elapsed());
        assert_eq!(report.detail["finding"], "exists_once");
    }
    timings.sort();
    let median = timings[timings.len() / 2];
    let p95 = timings[timings.len() * 95 / 100];
    eprintln!(
        "reconcile latency against the fake provider: median {:.1} ms, p95 {:.1} ms, max {:.1} ms (n = {})",
        median.as_secs_f64() * 1000.0,
        p95.as_secs_f64() * 1000.0,
        timings[timings.len() - 1].as_secs_f64() * 1000.0,
        timings.len()
    );
    assert!(median < Duration::from_millis(500));
}

#[tokio::test]
async fn the_report_says_what_the_ledger_recorded_not_what_the_provider_said() {
    let rig = Rig::new().await;
    let settler = rig.settler("alice");
    // Sent a moment ago and still inside its window: the provider has nothing
    // yet, which proves nothing, so the ledger records indeterminate.
    rig.begin_and_dispatch("refund:INV-W:v1", 700).await;
    let report = settler
        .settle(reconcile("refund:INV-W:v1", None))
        .await
        .unwrap();
    assert_eq!(
        report.detail["finding"], "indeterminate",
        "{}",
        report.detail
    );
    assert_eq!(report.detail["provider_finding"], "absent");
    assert!(
        report
            .summary
            .contains("indeterminate (provider said absent)"),
        "{}",
        report.summary
    );
    assert!(
        report.summary.contains("pending → pending"),
        "{}",
        report.summary
    );
    let recorded: String = sqlx::query_scalar(
        "select finding from ledger.reconciliations where op_key = 'refund:INV-W:v1'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(recorded, "indeterminate");
}

/// An unknown refund whose params nest 200 levels deep, written by hand as a ledger may
/// already hold one (the writer refuses such params now).
async fn deep_unknown_effect(rig: &Rig, op_key: &str, amount_minor: i64) {
    sqlx::query(
        "insert into ledger.effects (op_key, action, target, params, params_hash, amount_minor,
                                     currency, provider, requested_by, state, pending_window,
                                     deadline_at)
         select $1, 'refund', 'invoice:' || $1, p, ledger.params_hash(p), $2, 'EUR', 'pay',
                'agent-7', 'pending', interval '5 minutes', now() + interval '5 minutes'
           from (select jsonb_build_object('amount_minor', $2::bigint, 'currency', 'EUR')
                        || jsonb_build_object('note', (repeat('[', 200) || repeat(']', 200))::jsonb) p) params",
    )
    .bind(op_key)
    .bind(amount_minor)
    .execute(&rig.db.pool)
    .await
    .unwrap();
    let claim = effectwatch::ledger::writer::mark_dispatched(&rig.db.pool, op_key, None, "agent-7")
        .await
        .unwrap();
    assert!(claim.claimed);
    effectwatch::ledger::writer::complete_effect(
        &rig.db.pool,
        op_key,
        effectwatch::ledger::writer::Outcome::Unknown,
        &effectwatch::ledger::writer::Completion::default(),
    )
    .await
    .unwrap();
}

/// Params nested deeper than a JSON reader recurses are shown cut, and the effect settles as
/// any other: by `show`, by hand, by reconciliation and by the reconciler service.
#[tokio::test]
async fn params_nested_200_levels_deep_are_shown_and_settled() {
    let rig = Rig::new().await;
    for key in ["refund:DEEP:1", "refund:DEEP:2", "refund:DEEP:3"] {
        deep_unknown_effect(&rig, key, 700).await;
    }

    let shown = common::effectwatch_cli(&["--database-url", &rig.db.url, "show", "refund:DEEP:1"]);
    let stdout = String::from_utf8_lossy(&shown.stdout);
    assert_eq!(
        shown.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(stdout.contains("nested deeper than"), "{stdout}");
    let effect = rig.effect("refund:DEEP:1").await;
    assert_eq!(effect.params["amount_minor"], 700);

    // By hand, through the command line.
    let annotated = common::effectwatch_cli(&[
        "--database-url",
        &rig.db.url,
        "--operator",
        "alice",
        "annotate",
        "refund:DEEP:1",
        "--reason",
        "looked at it",
    ]);
    assert_eq!(
        annotated.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&annotated.stderr)
    );

    let resolved = common::effectwatch_cli(&[
        "--database-url",
        &rig.db.url,
        "--operator",
        "alice",
        "resolve",
        "refund:DEEP:1",
        "--failed",
        "--reason",
        "the provider has no such refund",
    ]);
    assert_eq!(
        resolved.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resolved.stderr)
    );
    assert_eq!(rig.effect("refund:DEEP:1").await.state, State::Failed);

    // Reconciled by an operator.
    rig.provider_did("refund:DEEP:2", 700);
    let report = rig
        .settler("alice")
        .settle(reconcile("refund:DEEP:2", None))
        .await
        .unwrap();
    assert_eq!(report.detail["finding"], "exists_once", "{report:?}");
    assert_eq!(rig.effect("refund:DEEP:2").await.state, State::Succeeded);

    // And by the reconciler service, which used to skip it.
    rig.provider_did("refund:DEEP:3", 700);
    let service = rig.reconciler(settle_support::reconciler_settings("reconciler@test"));
    let summary = service.pass().await.unwrap();
    assert_eq!(summary.findings.get("exists_once"), Some(&1), "{summary:?}");
    assert_eq!(rig.effect("refund:DEEP:3").await.state, State::Succeeded);
}

/// Evidence nested deeper than a JSON reader recurses (a provider's answer 127 levels deep,
/// wrapped by the ledger's own record of it) leaves the effect readable: `show` cuts it.
#[tokio::test]
async fn evidence_nested_too_deep_to_read_is_shown_cut() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:DEEP-EVIDENCE:v1", 300).await;
    sqlx::query(
        "insert into ledger.reconciliations (effect_id, op_key, provider, finding, evidence,
                                             state_before, state_after, requested_by)
         select e.id, e.op_key, 'pay', 'indeterminate',
                jsonb_build_object('answer', (repeat('[', 200) || repeat(']', 200))::jsonb),
                'unknown', 'unknown', 'reconciler@test'
           from ledger.effects e where e.op_key = 'refund:DEEP-EVIDENCE:v1'",
    )
    .execute(&rig.db.pool)
    .await
    .unwrap();
    let shown = common::effectwatch_cli(&[
        "--database-url",
        &rig.db.url,
        "show",
        "refund:DEEP-EVIDENCE:v1",
        "--format",
        "json",
    ]);
    let stdout = String::from_utf8_lossy(&shown.stdout);
    assert_eq!(
        shown.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(stdout.contains("nested deeper than"), "{stdout}");
}
