//! Retention removes only old settled effects nothing protects, exports
//! them first, writes one audit entry, and leaves every protected record —
//! and, while no month of history has ended before the cutoff, the whole
//! audit trail — in place (months dropped whole: history_partitions.rs). The append-only history stays
//! append-only for everyone else.

mod common;

use effectwatch::ledger::LedgerPool;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, Utc};
use effectwatch::ledger::actions::{self, SeenVersion};
use effectwatch::ledger::audit;
use effectwatch::ledger::history::find_effect;
use effectwatch::ledger::retention::{self, Cutoff, ExportSink};
use effectwatch::ledger::writer::{
    Completion, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, State};
use serde_json::{Value, json};
use sqlx::Connection;

async fn checkpoint(pool: &LedgerPool) -> DateTime<Utc> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    let at = sqlx::query_scalar::<_, DateTime<Utc>>("select now()")
        .fetch_one(pool)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    at
}

fn intent(key: &str, target: &str) -> Intent {
    Intent {
        op_key: key.to_string(),
        action: "refund".to_string(),
        target: target.to_string(),
        params: json!({"amount_minor": 100, "currency": "EUR", "key": key}),
        requested_by: "agent-1".to_string(),
        amount_minor: Some(100),
        currency: Some("EUR".to_string()),
        provider: Some("pay".to_string()),
        ..Intent::default()
    }
}

async fn settle(pool: &LedgerPool, key: &str, target: &str, outcome: Outcome) {
    common::settle(pool, &intent(key, target), outcome).await;
}

async fn state(pool: &LedgerPool, key: &str) -> Option<State> {
    find_effect(pool, key).await.unwrap().map(|e| e.state)
}

async fn count(pool: &LedgerPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// Attempts and state changes of each effect, by key.
async fn history_sizes(pool: &LedgerPool) -> BTreeMap<String, (i64, i64)> {
    sqlx::query_as::<_, (String, i64, i64)>(
        "select e.op_key,
                (select count(*) from ledger.attempts a where a.effect_id = e.id),
                (select count(*) from ledger.effect_events ev where ev.effect_id = e.id)
           from ledger.effects e",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(key, attempts, events)| (key, (attempts, events)))
    .collect()
}

#[derive(Default)]
struct Collected {
    records: Vec<Value>,
    finished: bool,
}

impl ExportSink for Collected {
    fn record(&mut self, data: &Value) -> std::io::Result<()> {
        assert!(!self.finished);
        self.records.push(data.clone());
        Ok(())
    }
    fn finish(&mut self) -> std::io::Result<()> {
        self.finished = true;
        Ok(())
    }
}

const PRUNABLE: [&str; 4] = ["p:ok", "p:replayed", "p:failed", "p:cancelled"];
const PROTECTED: [&str; 11] = [
    "k:retryable",
    "k:unknown",
    "k:pending",
    "k:held",
    "k:compensated",
    "compensate:k:compensated:1",
    "k:annotated",
    "k:double:v1",
    "k:double:v2",
    "k:late",
    "k:recent",
];

/// One effect of every kind; all but k:recent settled (or left open) before the returned instant.
async fn ledger_of_every_kind(pool: &LedgerPool) -> DateTime<Utc> {
    settle(pool, "p:ok", "t:ok", Outcome::Succeeded).await;
    settle(pool, "p:replayed", "t:replayed", Outcome::Succeeded).await;
    assert_eq!(
        begin_effect(pool, &intent("p:replayed", "t:replayed"))
            .await
            .unwrap()
            .decision,
        Decision::Replay
    );
    settle(
        pool,
        "p:failed",
        "t:failed",
        Outcome::Failed { retryable: false },
    )
    .await;
    // The only cancellation without an operator: by hand, through the state machine.
    begin_effect(pool, &intent("p:cancelled", "t:cancelled"))
        .await
        .unwrap();
    sqlx::query("update ledger.effects set state = 'cancelled' where op_key = 'p:cancelled'")
        .execute(pool)
        .await
        .unwrap();

    settle(
        pool,
        "k:retryable",
        "t:retryable",
        Outcome::Failed { retryable: true },
    )
    .await;
    settle(pool, "k:unknown", "t:unknown", Outcome::Unknown).await;
    begin_effect(pool, &intent("k:pending", "t:conflict"))
        .await
        .unwrap();
    assert_eq!(
        begin_effect(pool, &intent("k:held", "t:conflict"))
            .await
            .unwrap()
            .decision,
        Decision::Held
    );
    settle(pool, "k:compensated", "t:compensated", Outcome::Succeeded).await;
    sqlx::query(
        "select * from ledger.op_compensate(op_key => 'k:compensated', expected_version => null,
                operator => 'alice', reason => 'sent twice')",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "select * from ledger.op_dispatch_compensation('compensate:k:compensated:1', 'alice')",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "select * from ledger.op_complete_compensation(compensation_key => 'compensate:k:compensated:1',
                operator => 'alice', outcome => 'succeeded', external_ref => 'rev-1')",
    )
    .execute(pool)
    .await
    .unwrap();
    settle(pool, "k:annotated", "t:annotated", Outcome::Succeeded).await;
    let annotated = find_effect(pool, "k:annotated").await.unwrap().unwrap();
    actions::ANNOTATE
        .call(
            pool,
            "k:annotated",
            SeenVersion(annotated.version),
            "bob",
            "checked with the bank",
        )
        .await
        .unwrap();
    settle(pool, "k:double:v1", "t:double", Outcome::Succeeded).await;
    settle(pool, "k:double:v2", "t:double", Outcome::Succeeded).await;
    settle(pool, "k:late", "t:late", Outcome::Succeeded).await;
    let late = complete_effect(
        pool,
        "k:late",
        Outcome::Failed { retryable: false },
        &Completion::default(),
    )
    .await
    .unwrap();
    assert!(late.late);

    let cutoff = checkpoint(pool).await;
    settle(pool, "k:recent", "t:recent", Outcome::Succeeded).await;
    cutoff
}

#[tokio::test]
async fn prune_removes_only_what_nothing_protects() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let cutoff = ledger_of_every_kind(pool).await;
    assert_eq!(state(pool, "k:compensated").await, Some(State::Compensated));
    assert_eq!(state(pool, "p:cancelled").await, Some(State::Cancelled));

    let plan = retention::plan(pool, Cutoff::Before(cutoff), false, None)
        .await
        .unwrap();
    assert_eq!(plan.prunable, 4);
    assert_eq!(
        plan.kept,
        BTreeMap::from([
            ("compensated".to_string(), 1),
            ("needs_attention".to_string(), 1),
            ("operator_action".to_string(), 2),
            ("retryable".to_string(), 1),
            ("suspected_double".to_string(), 2),
        ])
    );

    let before = history_sizes(pool).await;
    let audit_before = count(pool, "select count(*) from ledger.audit_log").await;
    let (attempts, events) = PRUNABLE
        .iter()
        .map(|key| before[*key])
        .fold((0, 0), |(a, e), (x, y)| (a + x, e + y));
    assert_eq!(before["p:replayed"].0, 2, "dispatch, replay");

    let mut export = Collected::default();
    let outcome = retention::prune(
        pool,
        Cutoff::Before(cutoff),
        "retention-bot",
        "older than the test",
        Some(&mut export),
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        (
            outcome.effects,
            outcome.attempts,
            outcome.events,
            outcome.reconciliations,
            outcome.holds
        ),
        (4, attempts, events, 0, 0)
    );
    assert_eq!(outcome.cutoff, cutoff);
    assert_eq!(
        outcome.kept,
        json!({"compensated": 1, "needs_attention": 1, "operator_action": 2, "retryable": 1, "suspected_double": 2})
    );

    // Exported first, exactly what went, with its history.
    assert!(export.finished);
    let mut exported: Vec<&str> = export
        .records
        .iter()
        .map(|r| r["effect"]["op_key"].as_str().unwrap())
        .collect();
    exported.sort_unstable();
    let mut expected = PRUNABLE.to_vec();
    expected.sort_unstable();
    assert_eq!(exported, expected);
    let replayed = export
        .records
        .iter()
        .find(|r| r["effect"]["op_key"] == "p:replayed")
        .unwrap();
    assert_eq!(replayed["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(replayed["events"].as_array().unwrap().len(), 2);

    for key in PRUNABLE {
        assert_eq!(state(pool, key).await, None, "{key} should be gone");
    }
    let after = history_sizes(pool).await;
    for key in PROTECTED {
        assert_eq!(
            after.get(key),
            before.get(key),
            "{key} and its history must stay"
        );
    }
    assert_eq!(after.len(), PROTECTED.len());
    assert_eq!(
        count(pool, "select count(*) from ledger.attempts a where not exists (select 1 from ledger.effects e where e.id = a.effect_id)").await,
        0
    );

    // The audit trail: every entry kept, one more for the prune, chain intact.
    assert_eq!(
        count(pool, "select count(*) from ledger.audit_log").await,
        audit_before + 1
    );
    let (action, operator, effect_id, after_json): (String, String, Option<i64>, Value) = sqlx::query_as(
        "select action, operator, effect_id, after from ledger.audit_log order by seq desc limit 1",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(
        (action.as_str(), operator.as_str(), effect_id),
        ("prune", "retention-bot", None)
    );
    assert_eq!(after_json["effects"], 4);
    assert_eq!(after_json["attempts"], attempts);
    assert!(audit::verify(pool).await.unwrap().is_intact());

    // Again: nothing left to remove, and that is audited too.
    let again = retention::prune(
        pool,
        Cutoff::Before(cutoff),
        "retention-bot",
        "again",
        None,
        None,
    )
    .await
    .unwrap();
    assert_eq!(again.effects, 0);
    assert_eq!(
        count(pool, "select count(*) from ledger.audit_log").await,
        audit_before + 2
    );

    // Through the binary: a dry run changes nothing; then everything settled before now that
    // nothing protects goes (k:recent and a new one), exported to a file first.
    settle(pool, "p:new", "t:new", Outcome::Succeeded).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pruned.jsonl");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_effectwatch"))
            .args(args)
            .args(["--database-url", &db.url, "--operator", "carol"])
            .env("XDG_CONFIG_HOME", dir.path())
            .env("HOME", dir.path())
            .env_remove("DATABASE_URL")
            .output()
            .unwrap()
    };
    let dry = run(&["prune", "--older-than", "0s", "--dry-run"]);
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    assert!(String::from_utf8_lossy(&dry.stdout).starts_with("would prune 2 settled effects\n"));
    assert!(state(pool, "p:new").await.is_some());
    let refused = run(&["prune", "--older-than", "0s", "--read-only"]);
    assert_eq!(refused.status.code(), Some(8));
    assert!(state(pool, "p:new").await.is_some());

    let done = run(&[
        "prune",
        "--older-than",
        "0s",
        "--export",
        file.to_str().unwrap(),
    ]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(
        stdout.starts_with(
            "pruned 2 effects (2 attempts, 4 state changes, 0 reconciliations, 0 holds)"
        ),
        "{stdout}"
    );
    let lines: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let mut keys: Vec<&str> = lines
        .iter()
        .map(|l| l["effect"]["op_key"].as_str().unwrap())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["k:recent", "p:new"]);
    let last_operator: String =
        sqlx::query_scalar("select operator from ledger.audit_log order by seq desc limit 1")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(last_operator, "carol");
    for key in [
        "k:unknown",
        "k:pending",
        "k:held",
        "k:compensated",
        "k:retryable",
    ] {
        assert!(state(pool, key).await.is_some(), "{key} must stay");
    }
}

#[tokio::test]
async fn the_history_stays_append_only_outside_a_prune() {
    let db = common::test_db().await;
    let pool = &db.pool;
    settle(pool, "a:done", "t:a", Outcome::Succeeded).await;
    // A replay and an in-flight repeat, so both effects have attempts for the triggers to guard.
    begin_effect(pool, &intent("a:done", "t:a")).await.unwrap();
    begin_effect(pool, &intent("a:open", "t:b")).await.unwrap();
    begin_effect(pool, &intent("a:open", "t:b")).await.unwrap();

    let refused = |result: Result<sqlx::postgres::PgQueryResult, sqlx::Error>| match result {
        Err(sqlx::Error::Database(db)) => {
            assert_eq!(db.code().as_deref(), Some("42501"), "{}", db.message())
        }
        other => panic!("expected a refusal, got {other:?}"),
    };
    refused(
        sqlx::query("delete from ledger.attempts")
            .execute(pool)
            .await,
    );
    refused(
        sqlx::query("delete from ledger.effect_versions")
            .execute(pool)
            .await,
    );

    // A marker set by hand outside the transaction never matches it.
    let mut conn = db.connect().await;
    sqlx::query("set ledger.prune_xact = '1'")
        .execute(&mut conn)
        .await
        .unwrap();
    refused(
        sqlx::query("delete from ledger.attempts")
            .execute(&mut conn)
            .await,
    );

    // Even the right marker, forged inside a transaction, lets no history of an open effect
    // go, and never an UPDATE.
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("select set_config('ledger.prune_xact', pg_current_xact_id()::text, true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    refused(
        sqlx::query("delete from ledger.attempts where op_key = 'a:open'")
            .execute(&mut *tx)
            .await,
    );
    drop(tx);
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("select set_config('ledger.prune_xact', pg_current_xact_id()::text, true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    refused(
        sqlx::query(
            "update ledger.effect_versions set reason = 'rewritten'
              where effect_id = (select id from ledger.effects where op_key = 'a:done')",
        )
        .execute(&mut *tx)
        .await,
    );
    drop(tx);
    let done = find_effect(pool, "a:done").await.unwrap().unwrap();
    actions::ANNOTATE
        .call(pool, "a:done", SeenVersion(done.version), "bob", "a note")
        .await
        .unwrap();
    refused(
        sqlx::query("delete from ledger.audit_log")
            .execute(pool)
            .await,
    );
    // a:done's dispatch and replay, a:open's in-flight repeat: nothing was deleted.
    assert_eq!(count(pool, "select count(*) from ledger.attempts").await, 3);

    // Operators and read-only consoles read the reports but cannot prune.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("set local role effect_operator")
        .execute(&mut tx)
        .await
        .unwrap();
    sqlx::query("select count(*) from ledger.suspected_double_effects")
        .execute(&mut tx)
        .await
        .unwrap();
    sqlx::query("select count(*) from ledger.overdue_pending_at(now())")
        .execute(&mut tx)
        .await
        .unwrap();
    refused(
        sqlx::query("select * from ledger.prune_settled(interval '0', 'mallory', 'tidy up')")
            .execute(&mut tx)
            .await,
    );
    drop(tx);
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("set local role effect_readonly")
        .execute(&mut tx)
        .await
        .unwrap();
    sqlx::query("select * from ledger.exposure")
        .execute(&mut tx)
        .await
        .unwrap();
    sqlx::query("select * from ledger.pane_entries(now() - interval '1 hour', now())")
        .execute(&mut tx)
        .await
        .unwrap();
    refused(
        sqlx::query("select * from ledger.prune_export(interval '0')")
            .execute(&mut tx)
            .await,
    );
    drop(tx);
    assert_eq!(state(pool, "a:done").await, Some(State::Succeeded));
}

#[tokio::test]
async fn a_replay_weeks_later_after_a_prune_is_answered_from_the_keys_tombstone() {
    let db = common::test_db().await;
    let pool = &db.pool;
    settle(pool, "refund:OLD:v1", "invoice:OLD", Outcome::Succeeded).await;
    settle(
        pool,
        "refund:GONE:v1",
        "invoice:GONE",
        Outcome::Failed { retryable: false },
    )
    .await;
    let result: Value = sqlx::query_scalar(
        "update ledger.effects set result = '{\"receipt\": \"r-1\"}' where op_key = 'refund:OLD:v1' returning result",
    )
    .fetch_one(pool)
    .await
    .unwrap_or(json!(null));
    let cutoff = checkpoint(pool).await;
    let outcome = retention::prune(
        pool,
        Cutoff::Before(cutoff),
        "retention-bot",
        "old",
        None,
        None,
    )
    .await
    .unwrap();
    assert_eq!((outcome.effects, outcome.tombstones), (2, 2));
    assert_eq!(state(pool, "refund:OLD:v1").await, None, "the row is gone");

    // The same request weeks later: the outcome it had, never a second refund.
    let replay = begin_effect(pool, &intent("refund:OLD:v1", "invoice:OLD"))
        .await
        .unwrap();
    assert_eq!(replay.decision, Decision::Replay);
    assert_eq!(replay.state, State::Succeeded);
    assert_eq!(replay.result, Some(result).filter(|r| !r.is_null()));
    let stop = begin_effect(pool, &intent("refund:GONE:v1", "invoice:GONE"))
        .await
        .unwrap();
    assert_eq!(stop.decision, Decision::Stop);
    // Another amount under the old key is another intent: rejected, as before.
    let mut changed = intent("refund:OLD:v1", "invoice:OLD");
    changed.amount_minor = Some(999);
    let rejected = begin_effect(pool, &changed).await.unwrap();
    assert_eq!(rejected.decision, Decision::Rejected);
    assert_eq!(
        count(
            pool,
            "select count(*) from ledger.effects where op_key = 'refund:OLD:v1'"
        )
        .await,
        0,
        "no key proceeded again"
    );
    let replays: i32 = sqlx::query_scalar(
        "select replays from ledger.key_tombstones where op_key = 'refund:OLD:v1'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(replays, 2, "every call after the prune is counted");

    // Tombstones have their own retention: never shorter than 30 days.
    let refused = retention::prune_tombstones(pool, Duration::from_secs(86_400), "bot", "too soon")
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("at least 30 days"),
        "{refused}"
    );
    let (dropped, _) =
        retention::prune_tombstones(pool, Duration::from_secs(400 * 86_400), "bot", "yearly")
            .await
            .unwrap();
    assert_eq!(dropped, 0, "young tombstones stay");
    assert!(audit::verify(pool).await.unwrap().is_intact());
}

/// `prune --dry-run` says what the real run will do, refusing what it
/// refuses; and a tombstone age the ledger refuses is refused before any
/// effect is pruned, not after.
#[tokio::test]
async fn a_dry_run_says_what_the_real_run_does_and_a_bad_tombstone_age_prunes_nothing() {
    let db = common::test_db().await;
    let pool = &db.pool;
    settle(pool, "k:old", "t:old", Outcome::Succeeded).await;
    // An audit entry that names no effect: dropping its month needs a signed checkpoint.
    retention::prune_tombstones(pool, Duration::from_secs(400 * 86_400), "ops", "yearly")
        .await
        .unwrap();
    common::age_ledger(pool, 3, true).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "operator = \"retention-bot\"\n").unwrap();
    let cli = |args: &[&str]| {
        let mut all = vec![
            "--database-url",
            &db.url,
            "--config",
            config.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        let output = common::effectwatch_cli(&all);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.code(), text)
    };
    let effects = || count(pool, "select count(*) from ledger.effects");

    // Without a signing key the months stay: the dry run must not promise them.
    let (code, dry) = cli(&["prune", "--older-than", "30d", "--dry-run"]);
    assert_eq!(code, Some(0), "{dry}");
    assert!(dry.starts_with("would prune 1 settled effects\n"), "{dry}");
    assert!(!dry.contains("would drop the history"), "{dry}");
    assert!(dry.contains("would not drop the history"), "{dry}");

    // An instant in the future is refused by the real run: so by the dry run.
    let future = ["prune", "--older-than", "2999-01-01T00:00:00Z"];
    let (real_code, real) = cli(&future);
    let (dry_code, dry) = cli(&[&future[..], &["--dry-run"]].concat());
    assert_ne!(real_code, Some(0), "{real}");
    assert_eq!(dry_code, real_code, "dry run: {dry}\nreal run: {real}");
    assert!(dry.contains("at least 0"), "{dry}");
    assert_eq!(effects().await, 1);

    // A tombstone age under 30 days: refused, by the dry run and before the real run prunes.
    let short = [
        "prune",
        "--older-than",
        "30d",
        "--tombstones-older-than",
        "1d",
    ];
    let (dry_code, dry) = cli(&[&short[..], &["--dry-run"]].concat());
    assert_ne!(dry_code, Some(0), "{dry}");
    assert!(dry.contains("at least 30 days"), "{dry}");
    let (code, real) = cli(&short);
    assert_ne!(code, Some(0), "{real}");
    assert!(real.contains("at least 30 days"), "{real}");
    assert_eq!(effects().await, 1, "nothing was pruned: {real}");

    let (code, dry) = cli(&[
        "prune",
        "--older-than",
        "30d",
        "--tombstones-older-than",
        "400d",
        "--dry-run",
    ]);
    assert_eq!(code, Some(0), "{dry}");
    assert!(dry.contains("would drop 0 key tombstones"), "{dry}");
    let (code, real) = cli(&["prune", "--older-than", "30d"]);
    assert_eq!(code, Some(0), "{real}");
    assert!(real.contains("pruned 1 effects"), "{real}");
    assert!(real.contains("were not dropped"), "{real}");
}

/// A result nested deeper than a JSON reader walks (an agent's, stored
/// before the ledger refused deep params, or a provider's answer) is
/// exported cut where the readers cut it, and the prune goes on.
#[tokio::test]
async fn an_export_cuts_what_is_nested_too_deep_as_the_readers_do() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let key = "p:deep";
    let request = intent(key, "invoice:deep");
    begin_effect(pool, &request).await.unwrap();
    mark_dispatched(pool, key, None, "worker-1").await.unwrap();
    let mut deep = json!("bottom");
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let completion = Completion {
        result: Some(json!({"receipt": deep})),
        ..Completion::default()
    };
    complete_effect(pool, key, Outcome::Succeeded, &completion)
        .await
        .unwrap();
    let cutoff = checkpoint(pool).await;

    let mut export = Collected::default();
    let outcome = retention::prune(
        pool,
        Cutoff::Before(cutoff),
        "retention-bot",
        "older than the test",
        Some(&mut export),
        None,
    )
    .await
    .expect("the prune is not stopped by a deep value");
    assert_eq!(outcome.effects, 1);
    assert!(export.finished);
    let written = serde_json::to_string(&export.records).unwrap();
    assert!(
        written.contains(effectwatch::ledger::json::CUT_NOTE),
        "{}",
        &written[..200.min(written.len())]
    );
    assert!(written.contains("p:deep"));
    assert_eq!(state(pool, key).await, None);
}
