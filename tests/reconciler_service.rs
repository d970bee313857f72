//! The reconciler service against a real ledger and the fake provider:
//! what rules settle, what goes to a person (once), leases that keep
//! concurrent reconcilers apart and expire when one dies, its metrics and
//! health, and the process itself stopping cleanly on SIGTERM.

mod common;
mod settle_support;

use std::time::Duration;

use effectwatch::fakeprovider::{Fault, Route};
use effectwatch::ledger::State;
use effectwatch::ledger::reconciler::{self as leases, LeaseTerms};
use effectwatch::reconciler::metrics::{self, Exposed};
use effectwatch::reconciler::{Reconciler, ReconcilerSettings};
use effectwatch::settle::Request;
use effectwatch::settle::verbs::{self, Answers, Outcome};
use settle_support::Rig;

fn settings(name: &str) -> ReconcilerSettings {
    settle_support::reconciler_settings(name)
}

fn reconciler(rig: &Rig, settings: ReconcilerSettings) -> Reconciler {
    rig.reconciler(settings)
}

async fn reconciliations_of(rig: &Rig, op_key: &str) -> i64 {
    sqlx::query_scalar("select count(*) from ledger.reconciliations where op_key = $1")
        .bind(op_key)
        .fetch_one(&rig.db.pool)
        .await
        .unwrap()
}

async fn escalations_of(rig: &Rig, op_key: &str) -> i64 {
    sqlx::query_scalar("select count(*) from ledger.escalations e join ledger.effects f on f.id = e.effect_id where f.op_key = $1")
        .bind(op_key)
        .fetch_one(&rig.db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_pass_settles_what_the_provider_can_answer_for_under_the_reconcilers_name() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:HAPPENED:v1", 1500).await;
    rig.provider_did("refund:HAPPENED:v1", 1500);
    rig.unknown_effect("refund:NEVER:v1", 900).await;
    // An agent still inside its window is left alone.
    rig.begin_and_dispatch("refund:INFLIGHT:v1", 700).await;

    let service = reconciler(&rig, settings("reconciler@test"));
    let summary = service.pass().await.unwrap();

    assert_eq!(summary.leased, 2, "{summary:?}");
    assert_eq!(summary.findings.get("exists_once"), Some(&1));
    assert_eq!(summary.findings.get("absent"), Some(&1));
    assert_eq!(
        rig.effect("refund:HAPPENED:v1").await.state,
        State::Succeeded
    );
    let never = rig.effect("refund:NEVER:v1").await;
    assert_eq!(never.state, State::Failed);
    assert_eq!(rig.effect("refund:INFLIGHT:v1").await.state, State::Pending);
    let operators: Vec<String> = sqlx::query_scalar(
        "select distinct operator from ledger.audit_log where action = 'reconcile'",
    )
    .fetch_all(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(operators, vec!["reconciler@test".to_string()]);
    // Settled effects left the reconciler's books; a second pass finds nothing.
    assert_eq!(
        rig.count(
            "select count(*) from ledger.reconcile_leases l join ledger.effects e on e.id = l.effect_id
              where l.settled_version is distinct from e.version"
        )
        .await,
        0
    );
    assert_eq!(service.pass().await.unwrap().leased, 0);
    rig.audit_intact().await;
}

#[tokio::test]
async fn a_provider_that_cannot_tell_is_asked_again_then_a_person_is_asked_once() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:FOG:v1", 1500).await;
    rig.fake.set_fault(Route::Lookup, Some(Fault::Status(503)));
    let service = reconciler(&rig, settings("reconciler@test"));

    for pass in 1..=5 {
        let summary = service.pass().await.unwrap();
        assert_eq!(summary.leased, 1, "pass {pass}: {summary:?}");
        assert_eq!(summary.findings.get("indeterminate"), Some(&1));
        assert_eq!(summary.escalated, usize::from(pass == 3), "pass {pass}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(rig.effect("refund:FOG:v1").await.state, State::Unknown);
    assert_eq!(reconciliations_of(&rig, "refund:FOG:v1").await, 5);
    assert_eq!(escalations_of(&rig, "refund:FOG:v1").await, 1);
    let delivered = rig
        .fake
        .hooks()
        .iter()
        .filter(|hook| hook.body.to_string().contains("refund:FOG:v1"))
        .count();
    assert_eq!(delivered, 1, "the person is asked once");
    let reason: String = sqlx::query_scalar(
        "select reason from ledger.audit_log where action = 'escalate' order by seq desc limit 1",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert!(reason.contains("could not tell after 3 tries"), "{reason}");
}

#[tokio::test]
async fn a_duplicate_at_the_provider_goes_to_a_person_and_is_not_asked_about_again() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:TWICE:v1", 1500).await;
    rig.provider_did("refund:TWICE:v1", 1500);
    rig.provider_did("refund:TWICE:v1", 1500);
    let service = reconciler(&rig, settings("reconciler@test"));

    let summary = service.pass().await.unwrap();
    assert_eq!(summary.findings.get("duplicate"), Some(&1), "{summary:?}");
    assert_eq!(summary.escalated, 1);
    assert_eq!(service.pass().await.unwrap().leased, 0);
    assert_eq!(reconciliations_of(&rig, "refund:TWICE:v1").await, 1);
    assert_eq!(escalations_of(&rig, "refund:TWICE:v1").await, 1);
}

#[tokio::test]
async fn four_reconcilers_at_once_never_ask_about_one_effect_twice() {
    let rig = Rig::new().await;
    let count = 120;
    for n in 0..count {
        let key = format!("refund:MANY-{n}:v1");
        rig.unknown_effect(&key, 100 + n).await;
        if n % 2 == 0 {
            rig.provider_did(&key, 100 + n);
        }
    }
    let lookups_before = rig.fake.requests(Route::Lookup);
    let services: Vec<Reconciler> = (0..4)
        .map(|n| {
            let mut settings = settings(&format!("reconciler-{n}@test"));
            settings.terms.batch = 7;
            reconciler(&rig, settings)
        })
        .collect();
    let summaries =
        futures_util::future::join_all(services.iter().map(|service| service.pass())).await;
    let leased: usize = summaries.iter().map(|s| s.as_ref().unwrap().leased).sum();

    assert_eq!(leased, count as usize);
    assert_eq!(
        rig.fake.requests(Route::Lookup) - lookups_before,
        count as u64,
        "one lookup per effect"
    );
    let most: i64 = sqlx::query_scalar(
        "select coalesce(max(n), 0) from (select count(*) n from ledger.reconciliations group by effect_id) c",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(most, 1, "no effect reconciled twice");
    let open = rig
        .count("select count(*) from ledger.effects where state = 'unknown'")
        .await;
    assert_eq!(open, 0);
    let workers: i64 = sqlx::query_scalar(
        "select count(distinct operator) from ledger.audit_log where action = 'reconcile'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert!(
        workers >= 2,
        "the work was shared ({workers} reconcilers did it)"
    );
}

#[tokio::test]
async fn a_dead_reconcilers_lease_holds_until_it_expires() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:ORPHAN:v1", 1500).await;
    let dead = leases::lease(
        &rig.operator_pool,
        "reconciler@gone",
        LeaseTerms {
            lease: Duration::from_millis(600),
            grace: Duration::ZERO,
            batch: 10,
        },
        None,
    )
    .await
    .unwrap();
    assert_eq!(dead.len(), 1);
    let service = reconciler(&rig, settings("reconciler@alive"));
    assert_eq!(service.pass().await.unwrap().leased, 0, "the lease holds");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let summary = service.pass().await.unwrap();
    assert_eq!(summary.leased, 1, "{summary:?}");
    assert_eq!(summary.findings.get("absent"), Some(&1));
    // The dead one's late end of lease changes nothing.
    let end = leases::end_lease(
        &rig.operator_pool,
        "refund:ORPHAN:v1",
        "reconciler@gone",
        "indeterminate",
        Duration::from_secs(1),
        Duration::from_secs(1),
    )
    .await
    .unwrap();
    assert!(!end.settled);
    assert_eq!(rig.effect("refund:ORPHAN:v1").await.state, State::Failed);
}

#[tokio::test]
async fn an_effect_changed_after_its_lease_is_not_reconciled_over() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:RACE:v1", 1500).await;
    let taken = leases::lease(
        &rig.operator_pool,
        "reconciler@slow",
        LeaseTerms {
            lease: Duration::from_millis(1),
            grace: Duration::ZERO,
            batch: 10,
        },
        None,
    )
    .await
    .unwrap();
    assert_eq!(taken.len(), 1);
    // An operator settles it by hand meanwhile.
    rig.settler("alice")
        .settle(Request::on_effect(
            &verbs::RESOLVE,
            "refund:RACE:v1",
            None,
            Answers {
                outcome: Some(Outcome::Succeeded),
                reference: "re_1".into(),
                ..Answers::because("the provider's dashboard shows it")
            },
        ))
        .await
        .unwrap();
    let service = reconciler(&rig, settings("reconciler@test"));
    let summary = service.pass().await.unwrap();
    assert_eq!(summary.leased, 0, "settled effects are not leased");
    assert_eq!(reconciliations_of(&rig, "refund:RACE:v1").await, 0);
}

#[tokio::test]
async fn metrics_and_health_describe_the_ledger_and_the_work() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:M1:v1", 1500).await;
    rig.unknown_effect("refund:M2:v1", 1500).await;
    rig.fake.fail_next(Route::Lookup, Fault::Status(503));
    let mut settings = settings("reconciler@test");
    settings.backoff = Duration::from_secs(60);
    settings.backoff_max = Duration::from_secs(60);
    let service = reconciler(&rig, settings);
    let (stop_sender, stop) = tokio::sync::watch::channel(false);
    let exposed = Exposed {
        counters: service.counters(),
        pool: rig.operator_pool.clone(),
        stale_after: Duration::from_secs(30),
    };
    let (address, served) = metrics::serve("127.0.0.1:0".parse().unwrap(), exposed, stop)
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let health = client
        .get(format!("http://{address}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 503, "no pass yet");

    service.pass().await.unwrap();
    let health = client
        .get(format!("http://{address}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let text = client
        .get(format!("http://{address}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "effectwatch_effects{state=\"unknown\"} 1",
        "effectwatch_effects{state=\"failed\"} 1",
        "effectwatch_reconciliations_total{finding=\"absent\"} 1",
        "effectwatch_reconciliations_total{finding=\"indeterminate\"} 1",
        "effectwatch_reconcile_passes_total 1",
        "effectwatch_reconcile_backing_off 1",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    let oldest = text
        .lines()
        .find(|line| line.starts_with("effectwatch_oldest_unknown_seconds "))
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|value| value.parse::<f64>().ok())
        .expect("oldest unknown age");
    assert!(oldest > 0.0 && oldest < 600.0, "{oldest}");
    stop_sender.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the endpoint stops")
        .unwrap();
}

#[cfg(unix)]
#[tokio::test]
async fn the_service_reconciles_in_the_background_and_stops_on_sigterm() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:SVC:v1", 1500).await;
    rig.provider_did("refund:SVC:v1", 1500);
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        format!(
            "{}\n[sinks.ops]\nkind = \"webhook\"\nurl = \"{}/hooks/ops\"\n\n[reconciler]\ninterval_secs = 0.2\ngrace_secs = 0\n",
            rig.fake.provider_toml("pay", 400),
            rig.base_url
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"))
        .arg("--config")
        .arg(config.path())
        .args(["reconcile", "--watch", "--as", "reconciler@ci"])
        .args(["--metrics", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", &rig.db.url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while rig.effect("refund:SVC:v1").await.state != State::Succeeded {
        assert!(
            std::time::Instant::now() < deadline,
            "the service never settled it"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The pass that settled it goes on to its next steps and deliveries
    // before it counts as done: healthy once it has.
    loop {
        let health = reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
            .await
            .unwrap();
        if health.status().as_u16() == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never healthy: {}",
            health.text().await.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("stops within 10 s of SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let mut stderr = String::new();
    use tokio::io::AsyncReadExt;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    assert!(stderr.contains("stopped"), "{stderr}");
    let operator: String = sqlx::query_scalar(
        "select operator from ledger.audit_log where action = 'reconcile' limit 1",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(operator, "reconciler@ci");
}

#[tokio::test]
async fn once_runs_one_pass_and_says_what_it_did() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:CRON:v1", 1500).await;
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        format!(
            "{}\n[reconciler]\ngrace_secs = 0\n",
            rig.fake.provider_toml("pay", 400)
        ),
    )
    .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"))
        .arg("--config")
        .arg(config.path())
        .args(["reconcile", "--once"])
        .env("DATABASE_URL", &rig.db.url)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "1 reconciled · 1 absent");
    assert_eq!(rig.effect("refund:CRON:v1").await.state, State::Failed);
}

async fn set_semantics(rig: &Rig, semantics: &str) {
    effectwatch::ledger::policies::set(
        &rig.operator_pool,
        "refund",
        &effectwatch::ledger::policies::PolicyChange {
            retry_semantics: Some(semantics.to_string()),
            ..Default::default()
        },
        "alice",
        "the provider's contract",
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_never_retry_action_found_absent_fails_for_good_and_goes_to_a_person() {
    let rig = Rig::new().await;
    set_semantics(&rig, "never_retry").await;
    rig.unknown_effect("refund:ONCE:v1", 1500).await;
    let service = reconciler(&rig, settings("reconciler@test"));
    let summary = service.pass().await.unwrap();
    assert_eq!(summary.findings.get("absent"), Some(&1), "{summary:?}");
    assert_eq!(summary.escalated, 1);
    let effect = rig.effect("refund:ONCE:v1").await;
    assert_eq!(effect.state, State::Failed);
    assert_eq!(effect.retryable, Some(false), "never retried by itself");
    assert_eq!(escalations_of(&rig, "refund:ONCE:v1").await, 1);
}

#[tokio::test]
async fn an_escalate_action_is_handed_to_a_person_once_without_asking_the_provider() {
    let rig = Rig::new().await;
    set_semantics(&rig, "escalate").await;
    rig.unknown_effect("refund:HUMAN:v1", 1500).await;
    let lookups = rig.fake.requests(Route::Lookup);
    let service = reconciler(&rig, settings("reconciler@test"));
    let summary = service.pass().await.unwrap();
    assert_eq!(summary.escalated, 1, "{summary:?}");
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(service.pass().await.unwrap().leased, 0, "handed over once");
    assert_eq!(
        rig.fake.requests(Route::Lookup),
        lookups,
        "nothing was asked"
    );
    assert_eq!(reconciliations_of(&rig, "refund:HUMAN:v1").await, 0);
    assert_eq!(escalations_of(&rig, "refund:HUMAN:v1").await, 1);
    assert_eq!(rig.effect("refund:HUMAN:v1").await.state, State::Unknown);
}

fn reverse(op_key: &str, duplicate_ref: &str, reason: &str) -> effectwatch::settle::Request {
    effectwatch::settle::Request::on_effect(
        &verbs::REVERSE_DUPLICATE,
        op_key,
        None,
        Answers {
            reference: duplicate_ref.to_string(),
            ..Answers::because(reason.to_string())
        },
    )
}

async fn set_compensating_policy(rig: &Rig, approval_limit_minor: i64) {
    effectwatch::ledger::policies::set(
        &rig.operator_pool,
        "refund",
        &effectwatch::ledger::policies::PolicyChange {
            retry_semantics: Some("compensate".to_string()),
            compensation_approval_limit_minor: Some(Some(approval_limit_minor)),
            ..Default::default()
        },
        "alice",
        "refunds are reversed when the provider pays twice",
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_duplicate_of_an_action_that_compensates_is_reversed_by_rule_and_the_effect_stands() {
    let rig = Rig::new().await;
    set_compensating_policy(&rig, 10_000).await;
    rig.unknown_effect("refund:TWICE:v1", 1500).await;
    let first = rig.provider_did("refund:TWICE:v1", 1500);
    let second = rig.provider_did("refund:TWICE:v1", 1500);
    let service = reconciler(&rig, settings("reconciler@test"));

    let summary = service.pass().await.unwrap();
    assert_eq!(summary.findings.get("duplicate"), Some(&1), "{summary:?}");
    assert_eq!((summary.reversed, summary.escalated), (1, 0), "{summary:?}");
    assert!(
        summary.line().contains("1 duplicate records reversed"),
        "{}",
        summary.line()
    );

    // The refund happened: it stands, on the provider's first record, and
    // with its one extra record reversed it is no longer held twice.
    let effect = rig.effect("refund:TWICE:v1").await;
    assert_eq!(effect.state, State::Succeeded);
    assert_eq!(effect.external_ref.as_deref(), Some(first.as_str()));
    assert_eq!(effect.attention, None);
    let suspected: i64 = sqlx::query_scalar(
        "select count(*) from ledger.suspected_double_effects where op_key = 'refund:TWICE:v1'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(suspected, 0, "finance still counts the reversed record");
    // The second payment is reversed at the provider, once; the first is not touched.
    assert_eq!(rig.fake.reversals_of(&second).len(), 1);
    assert!(rig.fake.reversals_of(&first).is_empty());
    let (reversal_state, reversal_ref): (String, Option<String>) = sqlx::query_as(
        "select c.state, c.params ->> 'reverses_duplicate' from ledger.effects c
          join ledger.effects o on o.id = c.compensates where o.op_key = 'refund:TWICE:v1'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(
        (reversal_state.as_str(), reversal_ref),
        ("succeeded", Some(second.clone()))
    );
    let audited: Vec<String> = sqlx::query_scalar(
        "select action from ledger.audit_log where operator = 'reconciler@test' order by seq",
    )
    .fetch_all(&rig.db.pool)
    .await
    .unwrap();
    assert!(
        audited.contains(&"reverse_duplicate".to_string())
            && audited.contains(&"duplicates_reversed".to_string()),
        "{audited:?}"
    );

    // Nothing is asked or sent again: not by the next pass, nor by asking
    // for the same reversal by hand.
    assert_eq!(service.pass().await.unwrap().leased, 0);
    let again = rig
        .settler("alice")
        .settle(reverse("refund:TWICE:v1", &second, "checking"))
        .await
        .unwrap();
    assert_eq!(again.detail["status"], "existing", "{}", again.summary);
    assert_eq!(rig.fake.reversals_of(&second).len(), 1);
    assert_eq!(escalations_of(&rig, "refund:TWICE:v1").await, 0);

    // The effect itself can still be compensated in full, later, by a person.
    let full = rig
        .settler("alice")
        .settle(effectwatch::settle::Request::on_effect(
            &verbs::COMPENSATE,
            "refund:TWICE:v1",
            None,
            Answers::because("the customer returned the goods"),
        ))
        .await
        .unwrap();
    assert_eq!(
        full.detail["compensation_state"], "succeeded",
        "{}",
        full.summary
    );
    assert_eq!(rig.fake.reversals_of(&first).len(), 1);
    assert_eq!(
        rig.effect("refund:TWICE:v1").await.state,
        State::Compensated
    );
    rig.audit_intact().await;
}

#[tokio::test]
async fn a_duplicate_above_the_approval_limit_waits_for_a_second_operator_and_a_person_is_asked() {
    let rig = Rig::new().await;
    set_compensating_policy(&rig, 1000).await;
    rig.unknown_effect("refund:BIG:v1", 1500).await;
    let first = rig.provider_did("refund:BIG:v1", 1500);
    let second = rig.provider_did("refund:BIG:v1", 1500);
    let service = reconciler(&rig, settings("reconciler@test"));

    let summary = service.pass().await.unwrap();
    assert_eq!((summary.reversed, summary.escalated), (0, 1), "{summary:?}");
    assert!(
        rig.fake.reversals_of(&second).is_empty(),
        "sent above the limit"
    );
    // The reversal stays owed until it is approved, taken up once a pass
    // however short the backoff.
    assert_eq!((summary.steps, summary.steps_open), (1, 1), "{summary:?}");
    assert_eq!(
        rig.count("select tries::bigint from ledger.next_steps where step = 'reverse_duplicates'")
            .await,
        1
    );
    assert!(rig.fake.reversals_of(&first).is_empty());
    let effect = rig.effect("refund:BIG:v1").await;
    assert_eq!(
        (effect.state, effect.attention.as_deref()),
        (State::Succeeded, Some("duplicate"))
    );
    assert_eq!(
        rig.count("select count(*) from ledger.effects where compensates is not null")
            .await,
        0,
        "nothing exists that could be dispatched before the approval"
    );
    let (requested_by, duplicate_ref): (String, Option<String>) = sqlx::query_as(
        "select requested_by, duplicate_ref from ledger.compensation_requests
          where op_key = 'refund:BIG:v1' and state = 'awaiting_approval'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(
        (requested_by.as_str(), duplicate_ref),
        ("reconciler@test", Some(second.clone()))
    );
    let reason: String = sqlx::query_scalar(
        "select reason from ledger.audit_log where action = 'escalate' order by seq desc limit 1",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert!(
        reason.contains("above the limit") && reason.contains("second operator"),
        "{reason}"
    );

    // A second operator approves: the duplicate record is reversed, the effect stands.
    let approved = rig
        .settler("bob")
        .settle(effectwatch::settle::Request::on_effect(
            &verbs::APPROVE,
            "refund:BIG:v1",
            None,
            Answers::because("paid twice, checked with the provider"),
        ))
        .await
        .unwrap();
    assert_eq!(
        approved.detail["compensation_state"], "succeeded",
        "{}",
        approved.summary
    );
    assert_eq!(rig.fake.reversals_of(&second).len(), 1);
    assert!(rig.fake.reversals_of(&first).is_empty());
    let effect = rig.effect("refund:BIG:v1").await;
    assert_eq!((effect.state, effect.attention), (State::Succeeded, None));
    assert!(
        approved
            .summary
            .contains(&format!("the reversal of the duplicate {second}")),
        "{}",
        approved.summary
    );
    // Its record says what was reversed, who asked and who approved.
    let history = effectwatch::ledger::history::load(&rig.db.pool, "refund:BIG:v1")
        .await
        .unwrap();
    let described: Vec<String> = history
        .compensation_requests
        .iter()
        .map(|request| request.describe())
        .collect();
    assert_eq!(
        described,
        [format!(
            "reverse the duplicate {second}, asked by reconciler@test (15.00 EUR, above the limit of 10.00 EUR): created by bob"
        )]
    );
    rig.audit_intact().await;
}

#[tokio::test]
async fn only_a_record_the_reconciliation_found_twice_can_be_reversed() {
    let rig = Rig::new().await;
    set_compensating_policy(&rig, 10_000).await;
    // Succeeded once, no duplicate found: there is nothing to reverse.
    let reference = rig.succeeded_effect("refund:ONCE:v1", 1500).await;
    let settler = rig.settler("alice");
    let refused = settler
        .settle(reverse("refund:ONCE:v1", "fx_999", "a guess"))
        .await
        .unwrap_err()
        .line();
    assert!(
        refused.contains("only a succeeded effect its provider holds twice"),
        "{refused}"
    );
    // Found twice: its own reference, or one the provider never listed, is refused.
    rig.unknown_effect("refund:DUP:v1", 1500).await;
    let first = rig.provider_did("refund:DUP:v1", 1500);
    rig.provider_did("refund:DUP:v1", 1500);
    settler
        .settle(effectwatch::settle::Request::on_effect(
            &verbs::RECONCILE,
            "refund:DUP:v1",
            None,
            Answers::default(),
        ))
        .await
        .unwrap();
    let own = settler
        .settle(reverse("refund:DUP:v1", &first, "mistake"))
        .await
        .unwrap_err()
        .line();
    assert!(own.contains("not a duplicate of it"), "{own}");
    let stranger = settler
        .settle(reverse("refund:DUP:v1", &reference, "mistake"))
        .await
        .unwrap_err()
        .line();
    // Another effect's record is refused, whatever a reconciliation listed.
    assert!(
        stranger.contains("the reference of another effect"),
        "{stranger}"
    );
    let unlisted = settler
        .settle(reverse("refund:DUP:v1", "fx_404", "mistake"))
        .await
        .unwrap_err()
        .line();
    assert!(unlisted.contains("among its duplicates"), "{unlisted}");
    assert_eq!(
        rig.count("select count(*) from ledger.effects where compensates is not null")
            .await,
        0
    );
}
