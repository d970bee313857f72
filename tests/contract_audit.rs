//! The audit trail: one entry per operator action, written in the same transaction as the
//! change; append-only; hash-chained so tampering is found; unbroken under concurrent
//! operators. And the optimistic check every operator action makes first.

mod common;

use common::intent;
use common::roles::LoginRole;
use effectwatch::ledger::LedgerPool;

use std::sync::Arc;

use effectwatch::ledger::actions::{self, Finding, Resolution, SeenVersion};
use effectwatch::ledger::audit::{self, ChainReport};
use effectwatch::ledger::history::{find_effect, load};
use effectwatch::ledger::writer::{
    Completion, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, Effect, LedgerError, State};
use serde_json::{Value, json};
use sqlx::Connection;
use tokio::sync::Barrier;

async fn effect(pool: &LedgerPool, op_key: &str) -> Effect {
    find_effect(pool, op_key)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no effect {op_key}"))
}

async fn seen(pool: &LedgerPool, op_key: &str) -> SeenVersion {
    SeenVersion(effect(pool, op_key).await.version)
}

async fn audit_count(pool: &LedgerPool) -> i64 {
    sqlx::query_scalar("select count(*) from ledger.audit_log")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn reconciliation_count(pool: &LedgerPool) -> i64 {
    sqlx::query_scalar("select count(*) from ledger.reconciliations")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[derive(Debug, sqlx::FromRow)]
struct Entry {
    seq: i64,
    operator: String,
    action: String,
    op_key: Option<String>,
    reason: Option<String>,
    before: Option<Value>,
    after: Option<Value>,
}

async fn last_entry(pool: &LedgerPool) -> Entry {
    sqlx::query_as(
        "select seq, operator, action, op_key, reason, before, after
           from ledger.audit_log order by seq desc limit 1",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn pending_dispatched(pool: &LedgerPool, op_key: &str) {
    assert_eq!(
        begin_effect(pool, &intent(op_key, &format!("invoice:{op_key}")))
            .await
            .unwrap()
            .decision,
        Decision::Proceed
    );
    assert!(
        mark_dispatched(pool, op_key, None, "w")
            .await
            .unwrap()
            .claimed
    );
}

async fn unknown(pool: &LedgerPool, op_key: &str) {
    pending_dispatched(pool, op_key).await;
    complete_effect(pool, op_key, Outcome::Unknown, &Completion::default())
        .await
        .unwrap();
}

/// Two keys on one target: `holder` pending, `held` held.
async fn held(pool: &LedgerPool, holder: &str, held: &str) {
    let target = format!("invoice:{holder}");
    assert_eq!(
        begin_effect(pool, &intent(holder, &target))
            .await
            .unwrap()
            .decision,
        Decision::Proceed
    );
    assert_eq!(
        begin_effect(pool, &intent(held, &target))
            .await
            .unwrap()
            .decision,
        Decision::Held
    );
}

fn absent() -> Finding {
    Finding {
        provider: "stripe".into(),
        finding: "absent".into(),
        external_refs: vec![],
        evidence: json!({"query": "by idempotency key"}),
        duration_ms: 40,
    }
}

async fn verify(pool: &LedgerPool) -> ChainReport {
    audit::verify(pool).await.unwrap()
}

#[tokio::test]
async fn every_operator_action_writes_exactly_one_audit_entry() {
    let db = common::test_db().await;
    let pool = &db.pool;
    unknown(pool, "k:resolve").await;
    unknown(pool, "k:reconcile").await;
    held(pool, "k:holder", "k:release").await;
    held(pool, "k:holder2", "k:cancel").await;

    let mut expected_seq = 0;
    let mut check = |outcome_seq: i64, entry: Entry, action: &str, key: &str| {
        expected_seq += 1;
        assert_eq!(outcome_seq, expected_seq, "{action}");
        assert_eq!(entry.seq, expected_seq, "{action}");
        assert_eq!(entry.action, action);
        assert_eq!(entry.op_key.as_deref(), Some(key));
        assert_eq!(entry.operator, "alice");
        assert!(
            entry.reason.as_deref().is_some_and(|r| !r.is_empty()),
            "{action}"
        );
        entry
    };

    let out = actions::resolve(
        pool,
        "k:resolve",
        seen(pool, "k:resolve").await,
        "alice",
        "the provider dashboard shows it",
        &Resolution::Succeeded {
            external_ref: "re_9".into(),
        },
    )
    .await
    .unwrap();
    assert_eq!(out.state, State::Succeeded);
    let entry = check(
        out.audit_seq,
        last_entry(pool).await,
        "resolve",
        "k:resolve",
    );
    assert_eq!(
        entry.reason.as_deref(),
        Some("the provider dashboard shows it")
    );
    assert_eq!(entry.before.as_ref().unwrap()["state"], "unknown");
    assert_eq!(entry.after.as_ref().unwrap()["state"], "succeeded");
    assert_eq!(entry.after.as_ref().unwrap()["external_ref"], "re_9");
    assert_eq!(audit_count(pool).await, 1);

    let out = actions::record_reconciliation(
        pool,
        "k:reconcile",
        seen(pool, "k:reconcile").await,
        "alice",
        &absent(),
    )
    .await
    .unwrap();
    let entry = check(
        out.audit_seq,
        last_entry(pool).await,
        "reconcile",
        "k:reconcile",
    );
    assert_eq!(entry.after.as_ref().unwrap()["state"], "failed");
    assert_eq!(entry.after.as_ref().unwrap()["finding"], "absent");
    assert_eq!(audit_count(pool).await, 2);

    let out = actions::RELEASE
        .call(
            pool,
            "k:release",
            seen(pool, "k:release").await,
            "alice",
            "ok",
        )
        .await
        .unwrap();
    let entry = check(
        out.audit_seq,
        last_entry(pool).await,
        "release",
        "k:release",
    );
    assert_eq!(entry.before.as_ref().unwrap()["state"], "held");
    assert_eq!(entry.after.as_ref().unwrap()["state"], "pending");

    let out = actions::CANCEL
        .call(
            pool,
            "k:cancel",
            seen(pool, "k:cancel").await,
            "alice",
            "dup",
        )
        .await
        .unwrap();
    let entry = check(out.audit_seq, last_entry(pool).await, "cancel", "k:cancel");
    assert_eq!(entry.after.as_ref().unwrap()["state"], "cancelled");

    let before_note = effect(pool, "k:holder").await;
    let out = actions::ANNOTATE
        .call(
            pool,
            "k:holder",
            seen(pool, "k:holder").await,
            "alice",
            "customer called",
        )
        .await
        .unwrap();
    let entry = check(
        out.audit_seq,
        last_entry(pool).await,
        "annotate",
        "k:holder",
    );
    assert_eq!(entry.reason.as_deref(), Some("customer called"));
    assert_eq!(entry.after, None);
    // A note changes nothing on the effect.
    assert_eq!(effect(pool, "k:holder").await, before_note);

    assert_eq!(audit_count(pool).await, 5);
    let report = verify(pool).await;
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.checked, 5);

    // The entries are part of each effect's history.
    let history = load(pool, "k:resolve").await.unwrap();
    assert_eq!(history.audit.len(), 1);
    assert_eq!(history.audit[0].action, "resolve");
}

#[tokio::test]
async fn an_action_and_its_audit_entry_commit_or_roll_back_together() {
    let db = common::test_db().await;
    let pool = &db.pool;
    unknown(pool, "k:tx").await;
    let before = effect(pool, "k:tx").await;

    let mut tx = pool.begin().await.unwrap();
    let out = actions::resolve(
        &mut tx,
        "k:tx",
        SeenVersion(before.version),
        "alice",
        "checked",
        &Resolution::Failed { retryable: false },
    )
    .await
    .unwrap();
    assert_eq!(out.state, State::Failed);
    let inside: i64 = sqlx::query_scalar("select count(*) from ledger.audit_log")
        .fetch_one(&mut tx)
        .await
        .unwrap();
    assert_eq!(inside, 1);
    // Not visible to anyone else before commit.
    assert_eq!(audit_count(pool).await, 0);
    tx.rollback().await.unwrap();

    assert_eq!(audit_count(pool).await, 0);
    assert_eq!(effect(pool, "k:tx").await, before);

    // An action that does not apply writes nothing either.
    let refused = actions::RELEASE
        .call(pool, "k:tx", SeenVersion(before.version), "alice", "x")
        .await;
    assert!(
        matches!(refused, Err(LedgerError::NotApplicable(_))),
        "{refused:?}"
    );
    // Nor does one without a reason.
    let refused = actions::resolve(
        pool,
        "k:tx",
        SeenVersion(before.version),
        "alice",
        "   ",
        &Resolution::Failed { retryable: false },
    )
    .await;
    assert!(
        matches!(refused, Err(LedgerError::Invalid(_))),
        "{refused:?}"
    );
    assert_eq!(audit_count(pool).await, 0);
    assert_eq!(effect(pool, "k:tx").await, before);

    // The chain continues from what was committed: the rolled-back seq is reused, no gap.
    let out = actions::ANNOTATE
        .call(pool, "k:tx", SeenVersion(before.version), "alice", "note")
        .await
        .unwrap();
    assert_eq!(out.audit_seq, 1);
    assert!(verify(pool).await.is_intact());
}

#[tokio::test]
async fn an_action_on_a_stale_version_is_refused_and_writes_nothing() {
    let db = common::test_db().await;
    let pool = &db.pool;

    async fn assert_changed<T: std::fmt::Debug>(
        pool: &LedgerPool,
        key: &str,
        attempt: Result<T, LedgerError>,
        audit_before: i64,
        current: &Effect,
    ) {
        match attempt {
            Err(LedgerError::Changed(message)) => {
                assert!(message.contains("changed since you looked"), "{message}");
                assert!(message.contains(key), "{message}");
            }
            other => panic!("{key}: expected Changed, got {other:?}"),
        }
        assert_eq!(audit_count(pool).await, audit_before, "{key}");
        assert_eq!(&effect(pool, key).await, current, "{key}");
    }

    // resolve: the operator looked while it was pending; the worker then reported unknown.
    pending_dispatched(pool, "s:resolve").await;
    let looked = seen(pool, "s:resolve").await;
    complete_effect(pool, "s:resolve", Outcome::Unknown, &Completion::default())
        .await
        .unwrap();
    let current = effect(pool, "s:resolve").await;
    assert_eq!(current.state, State::Unknown);
    let attempt = actions::resolve(
        pool,
        "s:resolve",
        looked,
        "alice",
        "looked fine",
        &Resolution::Succeeded {
            external_ref: "re_1".into(),
        },
    )
    .await;
    assert_changed(pool, "s:resolve", attempt, 0, &current).await;

    // cancel: another operator released the hold in the meantime.
    held(pool, "s:holder", "s:cancel").await;
    let looked = seen(pool, "s:cancel").await;
    actions::RELEASE
        .call(pool, "s:cancel", looked, "bob", "go ahead")
        .await
        .unwrap();
    let current = effect(pool, "s:cancel").await;
    let attempt = actions::CANCEL
        .call(pool, "s:cancel", looked, "alice", "dup")
        .await;
    assert_changed(pool, "s:cancel", attempt, 1, &current).await;

    // release: the held effect was cancelled by someone else.
    held(pool, "s:holder2", "s:release").await;
    let looked = seen(pool, "s:release").await;
    actions::CANCEL
        .call(pool, "s:release", looked, "bob", "dup")
        .await
        .unwrap();
    let current = effect(pool, "s:release").await;
    let attempt = actions::RELEASE
        .call(pool, "s:release", looked, "alice", "go")
        .await;
    assert_changed(pool, "s:release", attempt, 2, &current).await;

    // annotate: the worker dispatched it since.
    begin_effect(pool, &intent("s:annotate", "invoice:s-annotate"))
        .await
        .unwrap();
    let looked = seen(pool, "s:annotate").await;
    mark_dispatched(pool, "s:annotate", None, "w")
        .await
        .unwrap();
    let current = effect(pool, "s:annotate").await;
    let attempt = actions::ANNOTATE
        .call(pool, "s:annotate", looked, "alice", "note")
        .await;
    assert_changed(pool, "s:annotate", attempt, 2, &current).await;

    // reconcile: the late answer arrived first.
    unknown(pool, "s:reconcile").await;
    let looked = seen(pool, "s:reconcile").await;
    complete_effect(
        pool,
        "s:reconcile",
        Outcome::Succeeded,
        &Completion {
            external_ref: Some("re_2".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    let current = effect(pool, "s:reconcile").await;
    let attempt =
        actions::record_reconciliation(pool, "s:reconcile", looked, "alice", &absent()).await;
    assert_changed(pool, "s:reconcile", attempt, 2, &current).await;
    assert_eq!(reconciliation_count(pool).await, 0);
    assert_eq!(current.state, State::Succeeded);

    assert!(verify(pool).await.is_intact());
}

#[tokio::test]
async fn audit_entries_cannot_be_updated_deleted_or_truncated() {
    let db = common::test_db().await;
    let pool = &db.pool;
    begin_effect(pool, &intent("a:1", "invoice:a1"))
        .await
        .unwrap();
    for i in 0..3 {
        actions::ANNOTATE
            .call(pool, "a:1", SeenVersion(1), "alice", &format!("note {i}"))
            .await
            .unwrap();
    }
    for statement in [
        "update ledger.audit_log set reason = 'rewritten' where seq = 2",
        "update ledger.audit_log set operator = 'mallory'",
        "delete from ledger.audit_log where seq = 3",
        "delete from ledger.audit_log",
        "truncate ledger.audit_log",
    ] {
        match sqlx::query(statement).execute(pool).await {
            Err(sqlx::Error::Database(e)) => {
                assert_eq!(e.code().as_deref(), Some("42501"), "{statement}");
                assert!(
                    e.message().contains("append-only"),
                    "{statement}: {}",
                    e.message()
                );
            }
            other => panic!("{statement}: expected an error, got {other:?}"),
        }
    }
    assert_eq!(audit_count(pool).await, 3);
    let report = verify(pool).await;
    assert!(report.is_intact());
    assert_eq!(report.checked, 3);

    // A writer cannot choose its own seq, hash or role either: the chain trigger sets them.
    sqlx::query(
        "insert into ledger.audit_log (seq, operator, db_role, action, prev_hash, hash)
         values (99, 'mallory', 'forged_role', 'annotate', 'forged', 'forged')",
    )
    .execute(pool)
    .await
    .unwrap();
    let (seq, db_role, prev_hash): (i64, String, String) = sqlx::query_as(
        "select seq, db_role, prev_hash from ledger.audit_log order by seq desc limit 1",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(seq, 4);
    assert_ne!(db_role, "forged_role");
    assert_ne!(prev_hash, "forged");
    assert!(verify(pool).await.is_intact());
}

/// Runs statements with the audit triggers off, as an attacker with the owner's rights might.
async fn tamper(db: &common::TestDb, statement: &str) {
    let mut conn = db.connect().await;
    sqlx::query("alter table ledger.audit_log disable trigger all")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(statement.to_string()))
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("alter table ledger.audit_log enable trigger all")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
}

async fn five_entries(pool: &LedgerPool) {
    begin_effect(pool, &intent("a:chain", "invoice:chain"))
        .await
        .unwrap();
    for i in 1..=5 {
        actions::ANNOTATE
            .call(
                pool,
                "a:chain",
                SeenVersion(1),
                "alice",
                &format!("note {i}"),
            )
            .await
            .unwrap();
    }
    let report = verify(pool).await;
    assert!(report.is_intact());
    assert_eq!(report.checked, 5);
}

#[tokio::test]
async fn an_altered_entry_is_named_as_the_first_broken_one() {
    let db = common::test_db().await;
    let pool = &db.pool;
    five_entries(pool).await;

    tamper(
        &db,
        "update ledger.audit_log set reason = 'x' where seq = 2",
    )
    .await;
    let report = verify(pool).await;
    assert_eq!(report.first_broken_seq, Some(2), "{report:?}");
    assert_eq!(report.checked, 1);
    assert!(
        report.problem.as_deref().unwrap_or("").contains("altered"),
        "{report:?}"
    );

    // The same as a psql user sees it.
    let (first_broken, problem): (Option<i64>, Option<String>) =
        sqlx::query_as("select first_broken_seq, problem from ledger.verify_audit_chain()")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(first_broken, Some(2));
    assert!(problem.is_some());

    // Rewriting the entry's own hash to match moves the break to the next link, not away.
    tamper(
        &db,
        "update ledger.audit_log a
            set hash = ledger.audit_entry_hash(a.prev_hash, a.seq, a.at, a.operator, a.db_role,
                                               a.action, a.effect_id, a.op_key, a.reason,
                                               a.before, a.after)
          where seq = 2",
    )
    .await;
    let report = verify(pool).await;
    assert_eq!(report.first_broken_seq, Some(3), "{report:?}");
    assert_eq!(report.checked, 2);
}

#[tokio::test]
async fn a_deleted_middle_entry_is_reported() {
    let db = common::test_db().await;
    let pool = &db.pool;
    five_entries(pool).await;

    tamper(&db, "delete from ledger.audit_log where seq = 3").await;
    let report = verify(pool).await;
    assert_eq!(report.first_broken_seq, Some(4), "{report:?}");
    assert_eq!(report.checked, 2);
    assert!(
        report.problem.as_deref().unwrap_or("").contains("missing"),
        "{report:?}"
    );

    // Renumbering to hide the gap still breaks the hash links.
    tamper(
        &db,
        "update ledger.audit_log set seq = seq - 1 where seq > 3",
    )
    .await;
    let report = verify(pool).await;
    assert_eq!(report.first_broken_seq, Some(3), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_operators_keep_one_unbroken_chain() {
    const OPERATORS: usize = 8;
    const NOTES: usize = 5;
    let db = common::test_db().await;
    let pool = &db.pool;
    for i in 0..OPERATORS {
        begin_effect(pool, &intent(&format!("c:{i}"), &format!("invoice:c{i}")))
            .await
            .unwrap();
    }
    begin_effect(pool, &intent("c:shared", "invoice:shared"))
        .await
        .unwrap();

    let barrier = Arc::new(Barrier::new(OPERATORS));
    let mut tasks = Vec::new();
    for i in 0..OPERATORS {
        let mut conn = db.connect().await;
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut seqs = Vec::new();
            for n in 0..NOTES {
                let key = if n % 2 == 0 {
                    format!("c:{i}")
                } else {
                    "c:shared".to_string()
                };
                let out = actions::ANNOTATE
                    .call(
                        &mut conn,
                        &key,
                        SeenVersion(1),
                        &format!("operator-{i}"),
                        &format!("note {n} from {i}"),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("operator {i}: {e}"));
                seqs.push(out.audit_seq);
            }
            conn.close().await.unwrap();
            seqs
        }));
    }
    let mut seqs = Vec::new();
    for task in tasks {
        seqs.extend(task.await.unwrap());
    }
    seqs.sort_unstable();
    let total = (OPERATORS * NOTES) as i64;
    assert_eq!(seqs, (1..=total).collect::<Vec<_>>());
    let stored: Vec<i64> = sqlx::query_scalar("select seq from ledger.audit_log order by seq")
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(stored, (1..=total).collect::<Vec<_>>());
    let report = verify(pool).await;
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.checked, total);
}

/// An operator login that sets the ledger's own marker for carrying history between
/// partitions, then resolves an effect: the entry still joins the chain, the head moves, and
/// verify counts it.
#[tokio::test]
async fn a_forged_history_move_marker_cannot_write_an_entry_outside_the_chain() {
    let db = common::test_db().await;
    let pool = &db.pool;
    unknown(pool, "k:forged-move").await;
    let operator = LoginRole::create(&db, "effect_operator").await;
    let Some(mut conn) = operator.connect(&db).await else {
        return;
    };
    let version = effect(pool, "k:forged-move").await.version;

    let mut tx = conn.begin().await.unwrap();
    sqlx::query("select set_config('ledger.history_move_xact', pg_current_xact_id()::text, true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let audit_seq: i64 = sqlx::query_scalar(
        "select audit_seq from ledger.op_resolve('k:forged-move', $1, 'mallory', 'off the books',
                                                 'failed')",
    )
    .bind(version)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let (seq, hash): (i64, String) =
        sqlx::query_as("select seq, hash from ledger.audit_log where operator = 'mallory'")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!((audit_seq, seq), (1, 1), "the entry is off the chain");
    let (head_seq, head_hash): (i64, String) =
        sqlx::query_as("select seq, hash from ledger.audit_head")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!((head_seq, head_hash), (seq, hash));
    let report = verify(pool).await;
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.checked, 1);
}

/// An agent that sets the ledger's reason setting before its writer calls cannot put words
/// of its choosing on its effect's timeline.
#[tokio::test]
async fn an_agent_cannot_put_a_reason_of_its_own_on_its_timeline() {
    const FORGED: &str = "approved by alice (ticket 4711)";
    let db = common::test_db().await;
    let pool = &db.pool;
    let agent = LoginRole::create(&db, "effect_agent").await;
    let Some(mut conn) = agent.connect(&db).await else {
        return;
    };
    let forge = "select set_config('ledger.reason', 'approved by alice (ticket 4711)', false)";
    sqlx::query(forge).execute(&mut conn).await.unwrap();
    for (key, outcome) in [
        ("k:forged-ok", "succeeded"),
        ("k:forged-unknown", "unknown"),
    ] {
        let target = format!("invoice:{key}");
        assert_eq!(
            begin_effect(&mut conn, &intent(key, &target))
                .await
                .unwrap()
                .decision,
            Decision::Proceed
        );
        assert!(
            mark_dispatched(&mut conn, key, None, "w")
                .await
                .unwrap()
                .claimed
        );
        let applied: bool =
            sqlx::query_scalar("select applied from ledger.complete_effect($1, $2, 're_1')")
                .bind(key)
                .bind(outcome)
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert!(applied);
    }
    // A held effect, then a retry of the unknown one: other branches that write versions.
    assert_eq!(
        begin_effect(
            &mut conn,
            &intent("k:forged-held", "invoice:k:forged-unknown")
        )
        .await
        .unwrap()
        .decision,
        Decision::Held
    );

    let reasons: Vec<(String, Option<String>)> = sqlx::query_as(
        "select e.op_key, h.reason from ledger.effect_history h
           join ledger.effects e on e.id = h.effect_id order by e.op_key, h.version",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(reasons.len() >= 7, "{reasons:?}");
    assert!(
        reasons
            .iter()
            .all(|(_, reason)| reason.as_deref() != Some(FORGED)),
        "{reasons:?}"
    );
    for key in ["k:forged-ok", "k:forged-unknown", "k:forged-held"] {
        let timeline = effectwatch::cli::show::render(&load(pool, key).await.unwrap());
        assert!(!timeline.contains("alice"), "{timeline}");
    }
}

/// Every function that runs with the owner's rights and can write forgets the caller's settings
/// first: a function added without it would trust whatever a login set before calling it. (A
/// stable one cannot write, so a setting it is handed reaches no history or audit entry.)
#[tokio::test]
async fn every_security_definer_function_forgets_the_callers_settings_first() {
    let db = common::test_db().await;
    let trusting: Vec<String> = sqlx::query_scalar(
        "select p.oid::regprocedure::text from pg_proc p
          where p.pronamespace = 'ledger'::regnamespace and p.prosecdef and p.provolatile = 'v'
            and p.prosrc !~ '^\\s*(#[^\\n]*\\n\\s*)?(declare[\\s\\S]*?\\n)?(begin\\s+)?(ignored := |perform |select )ledger\\.forget_caller_settings\\(\\);'
          order by 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(trusting, Vec::<String>::new());
    let definers: i64 = sqlx::query_scalar(
        "select count(*) from pg_proc where pronamespace = 'ledger'::regnamespace and prosecdef",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(definers >= 30, "{definers}");
}

/// Deleting the newest entries leaves a chain that links up: only the head, which every entry
/// moves, says entries are gone.
#[tokio::test]
async fn the_newest_entries_deleted_are_caught_by_the_head() {
    let db = common::test_db().await;
    let pool = &db.pool;
    five_entries(pool).await;

    tamper(&db, "delete from ledger.audit_log where seq >= 4").await;
    let report = verify(pool).await;
    assert_eq!(report.first_broken_seq, Some(4), "{report:?}");
    assert_eq!(report.checked, 3);
    assert!(
        report
            .problem
            .as_deref()
            .unwrap_or("")
            .contains("entries 4 to 5 are missing"),
        "{report:?}"
    );

    // An entry stored without its place, as the forged marker once did, is named too.
    let db = common::test_db().await;
    five_entries(&db.pool).await;
    tamper(
        &db,
        "insert into ledger.audit_log (seq, operator, db_role, action, reason, prev_hash, hash)
         values (0, 'mallory', 'x', 'resolve', 'off the books', '', '')",
    )
    .await;
    let report = verify(&db.pool).await;
    assert_eq!(report.first_broken_seq, Some(0), "{report:?}");
    assert!(
        report.problem.as_deref().unwrap_or("").contains("mallory"),
        "{report:?}"
    );
}
