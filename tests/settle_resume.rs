//! Settling survives a crash at every step: a reconciler (or an operator's
//! command) killed between any two steps of a flow of several leaves what is
//! left recorded as owed, and a fresh reconciler finishes it without
//! repeating an effect at the provider.
//!
//! Each test runs the real binary with `EFFECTWATCH_CRASH_AT` naming the
//! point to die at (the process aborts there, as a crash would), checks it
//! died there, then runs a fresh `reconcile --once` and asserts the
//! provider's state, the ledger's, and that no work is left without a next
//! step.

mod common;
mod settle_support;

use std::process::Output;
use std::time::Duration;

use effectwatch::crash_point::CRASH_AT;
use effectwatch::ledger::State;
use effectwatch::ledger::policies::{self, PolicyChange};
use settle_support::{PROVIDER_TIMEOUT_MS, Rig};

/// The rig's provider and webhook sink, and a reconciler whose leases run
/// out within a second and which asks again at once.
fn config_file(rig: &Rig) -> tempfile::NamedTempFile {
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        format!(
            "{}\n[sinks.ops]\nkind = \"webhook\"\nurl = \"{}/hooks/ops\"\ntimeout_ms = {PROVIDER_TIMEOUT_MS}\n\
             retry = {{ base_ms = 20, max_secs = 1 }}\n\n\
             [reconciler]\ngrace_secs = 0\nlease_secs = 1\nbackoff_secs = 0.05\nbackoff_max_secs = 0.1\n",
            rig.fake.provider_toml("pay", PROVIDER_TIMEOUT_MS),
            rig.base_url
        ),
    )
    .unwrap();
    config
}

/// Runs the binary as `operator`, dying at `crash_at` when given.
async fn run(
    rig: &Rig,
    config: &tempfile::NamedTempFile,
    operator: &str,
    args: &[&str],
    crash_at: Option<&str>,
) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"));
    command
        .arg("--config")
        .arg(config.path())
        .args(["--operator", operator])
        .args(args)
        .env("DATABASE_URL", &rig.db.url)
        .env_remove(CRASH_AT)
        .stdin(std::process::Stdio::null());
    if let Some(point) = crash_at {
        command.env(CRASH_AT, point);
    }
    command.output().await.unwrap()
}

/// Runs `args` with a crash at `point` and checks the process died there.
async fn crash_at(
    rig: &Rig,
    config: &tempfile::NamedTempFile,
    operator: &str,
    args: &[&str],
    point: &str,
) {
    let died = run(rig, config, operator, args, Some(point)).await;
    let stderr = String::from_utf8_lossy(&died.stderr);
    assert!(
        !died.status.success() && stderr.contains(&format!("crash point {point}")),
        "{args:?} did not die at {point}: {:?}\nstdout: {}\nstderr: {stderr}",
        died.status,
        String::from_utf8_lossy(&died.stdout)
    );
}

/// A fresh reconciler's pass, after the dead one's leases ran out.
async fn fresh_pass(rig: &Rig, config: &tempfile::NamedTempFile, wait: Duration) -> String {
    tokio::time::sleep(wait).await;
    let out = run(
        rig,
        config,
        "reconciler@fresh",
        &["reconcile", "--once"],
        None,
    )
    .await;
    assert!(
        out.status.success(),
        "the fresh pass failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Nothing owed is left open, and nothing needing a person lacks one.
async fn nothing_left_without_a_next_step(rig: &Rig) {
    let open: Vec<(String, String, String)> = sqlx::query_as(
        "select e.op_key, s.step, coalesce(s.last_error, '') from ledger.next_steps s
           join ledger.effects e on e.id = s.effect_id where s.done_at is null",
    )
    .fetch_all(&rig.db.pool)
    .await
    .unwrap();
    assert!(open.is_empty(), "steps still owed: {open:?}");
    let unowned: Vec<(String, String)> =
        sqlx::query_as("select op_key, owed from ledger.unowned_work")
            .fetch_all(&rig.db.pool)
            .await
            .unwrap();
    assert!(unowned.is_empty(), "work nobody is on: {unowned:?}");
    rig.audit_intact().await;
}

async fn set_policy(rig: &Rig, action: &str, change: PolicyChange) {
    policies::set(
        &rig.operator_pool,
        action,
        &change,
        "alice",
        "the test's contract",
    )
    .await
    .unwrap();
}

/// Refunds are reversed by rule when paid twice, and a compensation sent
/// with no answer is overdue (and reconciled) after a second.
async fn compensating_ledger(rig: &Rig, approval_limit_minor: i64) {
    set_policy(
        rig,
        "refund",
        PolicyChange {
            retry_semantics: Some("compensate".to_string()),
            compensation_approval_limit_minor: Some(Some(approval_limit_minor)),
            ..Default::default()
        },
    )
    .await;
    set_policy(
        rig,
        "compensate",
        PolicyChange {
            pending_window: Some(Duration::from_secs(1)),
            ..Default::default()
        },
    )
    .await;
}

/// How long a fresh pass waits: the dead process's reconcile lease and
/// step claims (1 s), an unanswered compensation's window (1 s), or an
/// escalation's delivery lease (twice the sink's timeout and 30 s).
fn wait_after(point: &str) -> Duration {
    if point.starts_with("after_delivery") {
        Duration::from_millis(2 * PROVIDER_TIMEOUT_MS + 31_000)
    } else {
        Duration::from_millis(1_300)
    }
}

/// The provider paid one refund twice and the policy compensates: a
/// reconciler records the duplicate and reverses the extra record. Killed
/// at `point`, a fresh reconciler reverses it — once.
async fn a_reversal_by_rule_resumes_after(point: &str) {
    let rig = Rig::new().await;
    compensating_ledger(&rig, 10_000).await;
    let key = format!("refund:TWICE:{point}");
    rig.unknown_effect(&key, 1500).await;
    let first = rig.provider_did(&key, 1500);
    let second = rig.provider_did(&key, 1500);
    let config = config_file(&rig);

    crash_at(
        &rig,
        &config,
        "reconciler@dead",
        &["reconcile", "--once"],
        point,
    )
    .await;
    let said = fresh_pass(&rig, &config, wait_after(point)).await;

    assert_eq!(
        rig.fake.reversals_of(&second).len(),
        1,
        "the extra record is reversed once (fresh pass: {said})"
    );
    assert!(rig.fake.reversals_of(&first).is_empty(), "{said}");
    let effect = rig.effect(&key).await;
    assert_eq!(effect.state, State::Succeeded, "{said}");
    assert_eq!(effect.external_ref.as_deref(), Some(first.as_str()));
    assert_eq!(effect.attention, None, "{said}");
    nothing_left_without_a_next_step(&rig).await;
}

#[tokio::test]
async fn a_reversal_by_rule_resumes_after_the_finding() {
    a_reversal_by_rule_resumes_after("after_finding").await;
}

#[tokio::test]
async fn a_reversal_by_rule_resumes_after_the_lease_ends() {
    a_reversal_by_rule_resumes_after("after_lease_end").await;
}

#[tokio::test]
async fn a_reversal_by_rule_resumes_after_the_reconciliations() {
    a_reversal_by_rule_resumes_after("after_reconciliations").await;
}

#[tokio::test]
async fn a_reversal_by_rule_resumes_after_the_reversal_is_created() {
    a_reversal_by_rule_resumes_after("before_compensation_claim").await;
}

#[tokio::test]
async fn a_reversal_by_rule_resumes_after_its_dispatch_is_claimed() {
    a_reversal_by_rule_resumes_after("after_compensation_claim").await;
}

#[tokio::test]
async fn a_reversal_by_rule_resumes_after_it_is_sent() {
    a_reversal_by_rule_resumes_after("after_compensation_sent").await;
}

/// The provider's record differs from the ledger's: a person must decide.
/// Killed at `point`, a fresh reconciler escalates it and the sink gets
/// one escalation (a redelivery carries the same idempotency key).
async fn an_escalation_resumes_after(point: &str) {
    let rig = Rig::new().await;
    let key = format!("refund:DIFFERS:{point}");
    rig.unknown_effect(&key, 1500).await;
    rig.provider_did(&key, 999);
    let config = config_file(&rig);

    crash_at(
        &rig,
        &config,
        "reconciler@dead",
        &["reconcile", "--once"],
        point,
    )
    .await;
    if point == "after_finding" {
        // Between the two, an operator sees what is owed and that it is not lost.
        let shown = run(&rig, &config, "alice", &["show", &key], None).await;
        let shown = String::from_utf8_lossy(&shown.stdout);
        assert!(
            shown.contains("next step  escalate, owed since reconciler@")
                && shown.contains("a person must decide"),
            "{shown}"
        );
    }
    let said = fresh_pass(&rig, &config, wait_after(point)).await;

    let hooks = rig.fake.hooks();
    let mut keys: Vec<Option<String>> = hooks.iter().map(|h| h.idempotency_key.clone()).collect();
    keys.dedup();
    assert_eq!(
        keys,
        vec![Some(format!("escalate:{key}:mismatch"))],
        "one escalation at the sink (fresh pass: {said})"
    );
    let (state, decision): (String, String) =
        sqlx::query_as("select state, decision from ledger.escalations where op_key = $1")
            .bind(&key)
            .fetch_one(&rig.db.pool)
            .await
            .unwrap();
    assert_eq!(
        (state.as_str(), decision.as_str()),
        ("delivered", "mismatch")
    );
    let effect = rig.effect(&key).await;
    assert_eq!(effect.state, State::Unknown, "a person decides it");
    assert_eq!(effect.attention.as_deref(), Some("mismatch"));
    nothing_left_without_a_next_step(&rig).await;
}

#[tokio::test]
async fn an_escalation_resumes_after_the_finding() {
    an_escalation_resumes_after("after_finding").await;
}

#[tokio::test]
async fn an_escalation_resumes_after_the_lease_ends() {
    an_escalation_resumes_after("after_lease_end").await;
}

#[tokio::test]
async fn an_escalation_resumes_after_the_reconciliations() {
    an_escalation_resumes_after("after_reconciliations").await;
}

#[tokio::test]
async fn an_escalation_resumes_after_it_is_recorded() {
    an_escalation_resumes_after("after_escalation_recorded").await;
}

#[tokio::test]
async fn an_escalation_resumes_after_its_delivery_is_claimed() {
    an_escalation_resumes_after("after_delivery_claim").await;
}

#[tokio::test]
async fn an_escalation_resumes_after_it_is_delivered() {
    an_escalation_resumes_after("after_delivery_sent").await;
}

/// Four-eyes: alice asks to compensate a refund above the limit, bob
/// approves, and bob's command dies at `point`. A fresh reconciler sends
/// the compensation if it never left, or settles it by asking the
/// provider if it did: the refund is reversed once.
async fn an_approved_compensation_resumes_after(point: &str) {
    let rig = Rig::new().await;
    compensating_ledger(&rig, 1_000).await;
    let key = format!("refund:APPROVED:{point}");
    let reference = rig.succeeded_effect(&key, 1500).await;
    let config = config_file(&rig);
    let asked = run(
        &rig,
        &config,
        "alice",
        &["compensate", &key, "--reason", "charged twice"],
        None,
    )
    .await;
    assert!(
        String::from_utf8_lossy(&asked.stdout).contains("approval"),
        "{}{}",
        String::from_utf8_lossy(&asked.stdout),
        String::from_utf8_lossy(&asked.stderr)
    );

    crash_at(
        &rig,
        &config,
        "bob",
        &["approve", &key, "--reason", "checked the statement"],
        point,
    )
    .await;
    let said = fresh_pass(&rig, &config, wait_after(point)).await;

    assert_eq!(
        rig.fake.reversals_of(&reference).len(),
        1,
        "reversed once (fresh pass: {said})"
    );
    assert_eq!(rig.effect(&key).await.state, State::Compensated, "{said}");
    nothing_left_without_a_next_step(&rig).await;
}

#[tokio::test]
async fn an_approved_compensation_resumes_after_it_is_created() {
    an_approved_compensation_resumes_after("before_compensation_claim").await;
}

#[tokio::test]
async fn an_approved_compensation_resumes_after_its_dispatch_is_claimed() {
    an_approved_compensation_resumes_after("after_compensation_claim").await;
}

#[tokio::test]
async fn an_approved_compensation_resumes_after_it_is_sent() {
    an_approved_compensation_resumes_after("after_compensation_sent").await;
}

/// The reproduction: an operator reconciles by hand, finds the
/// refund paid twice, and walks away. The next scheduled pass reverses the
/// extra record instead of saying there is nothing to reconcile.
#[tokio::test]
async fn a_duplicate_found_by_hand_is_reversed_by_the_next_scheduled_pass() {
    let rig = Rig::new().await;
    compensating_ledger(&rig, 10_000).await;
    let key = "refund:BYHAND:v1";
    rig.unknown_effect(key, 1500).await;
    rig.provider_did(key, 1500);
    let second = rig.provider_did(key, 1500);
    let config = config_file(&rig);
    let by_hand = run(&rig, &config, "alice", &["reconcile", key], None).await;
    assert!(
        by_hand.status.success(),
        "{}",
        String::from_utf8_lossy(&by_hand.stderr)
    );
    assert!(rig.fake.reversals_of(&second).is_empty());
    let said = fresh_pass(&rig, &config, Duration::ZERO).await;
    assert_ne!(said, "nothing to reconcile");
    assert!(said.contains("1 duplicate records reversed"), "{said}");
    assert_eq!(rig.fake.reversals_of(&second).len(), 1);
    nothing_left_without_a_next_step(&rig).await;
}

/// A flag whose owed step was closed with nobody told (as a ledger from
/// before next steps, or a hand-edited one, may hold) is named by `check`,
/// which warns until a person or a rule is on it.
#[tokio::test]
async fn check_names_work_nobody_is_on() {
    let rig = Rig::new().await;
    let key = "refund:ORPHAN:v1";
    rig.unknown_effect(key, 1500).await;
    rig.provider_did(key, 999);
    let config = config_file(&rig);
    let by_hand = run(&rig, &config, "alice", &["reconcile", key], None).await;
    assert!(by_hand.status.success());
    let healthy = run(&rig, &config, "alice", &["check"], None).await;
    assert!(
        !String::from_utf8_lossy(&healthy.stdout).contains("nobody is on"),
        "the owed step is someone's: {}",
        String::from_utf8_lossy(&healthy.stdout)
    );
    sqlx::query("update ledger.next_steps set done_at = now(), outcome = 'closed by hand'")
        .execute(&rig.db.pool)
        .await
        .unwrap();
    let warned = run(&rig, &config, "alice", &["check"], None).await;
    let said = String::from_utf8_lossy(&warned.stdout);
    assert!(!warned.status.success(), "{said}");
    assert!(
        said.contains("work nobody is on")
            && said.contains("refund:ORPHAN:v1: decide the mismatch"),
        "{said}"
    );
}

/// A refund of 15.00 whose compensation `compensate` created and died
/// before sending: the provider's reference of the refund, and the config.
async fn compensation_left_unsent(rig: &Rig, key: &str) -> (String, tempfile::NamedTempFile) {
    compensating_ledger(rig, 100_000).await;
    let reference = rig.succeeded_effect(key, 1500).await;
    let config = config_file(rig);
    crash_at(
        rig,
        &config,
        "alice",
        &["compensate", key, "--reason", "customer returned it"],
        "before_compensation_claim",
    )
    .await;
    (reference, config)
}

/// Below the approval limit `compensate` creates the compensation and
/// sends it at once; the command dies in between. A fresh reconciler sends
/// it: the refund is reversed once.
#[tokio::test]
async fn a_compensation_resumes_after_it_is_created() {
    let rig = Rig::new().await;
    let key = "refund:PLAIN:v1";
    let (reference, config) = compensation_left_unsent(&rig, key).await;
    assert!(rig.fake.reversals_of(&reference).is_empty());
    let said = fresh_pass(&rig, &config, Duration::ZERO).await;
    assert!(said.contains("1 next steps taken up"), "{said}");
    assert_eq!(rig.fake.reversals_of(&reference).len(), 1, "{said}");
    assert_eq!(rig.effect(key).await.state, State::Compensated);
    nothing_left_without_a_next_step(&rig).await;
}

/// A compensation its sender left unsent is sent by an operator too, from
/// the command line, by the compensation's key: once, however often asked.
#[tokio::test]
async fn a_compensation_left_unsent_is_sent_once_from_the_command_line() {
    let rig = Rig::new().await;
    let key = "refund:UNSENT:v1";
    let (reference, config) = compensation_left_unsent(&rig, key).await;
    let compensation_key: String = sqlx::query_scalar(
        "select c.op_key from ledger.effects c join ledger.effects o on o.id = c.compensates
          where o.op_key = $1",
    )
    .bind(key)
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    let send = [
        "send-compensation",
        compensation_key.as_str(),
        "--reason",
        "its sender died",
    ];
    for attempt in 0..2 {
        let sent = run(&rig, &config, "bob", &send, None).await;
        let said = String::from_utf8_lossy(&sent.stdout);
        assert!(
            sent.status.success(),
            "attempt {attempt}: {said}{}",
            String::from_utf8_lossy(&sent.stderr)
        );
        assert_eq!(rig.fake.reversals_of(&reference).len(), 1, "{said}");
    }
    assert_eq!(rig.effect(key).await.state, State::Compensated);
    let audited: i64 = sqlx::query_scalar(
        "select count(*) from ledger.audit_log where operator = 'bob' and op_key = $1",
    )
    .bind(&compensation_key)
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert!(audited >= 1, "bob's sending is in the audit trail");

    // The original is no compensation: refused, nothing sent.
    let refused = run(
        &rig,
        &config,
        "bob",
        &["send-compensation", key, "--reason", "x"],
        None,
    )
    .await;
    assert!(!refused.status.success());
    assert_eq!(rig.fake.reversals_of(&reference).len(), 1);
}
