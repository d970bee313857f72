//! The state machine lives in the database: whoever writes — the writer API, an operator
//! function or a superuser typing UPDATE by hand — can only move an effect along the paths of
//! docs/contract.md ("State machine in the database"), every change bumps the version and is
//! recorded, and the history is append-only.

mod common;

use common::intent;
use effectwatch::ledger::LedgerPool;

use effectwatch::ledger::history::find_effect;
use effectwatch::ledger::writer::{
    Completion, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, Effect, State};
use sqlx::Connection;

async fn effect(pool: &LedgerPool, op_key: &str) -> Effect {
    find_effect(pool, op_key)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no effect {op_key}"))
}

/// The code and message of a database error; panics on success or another kind of error.
fn db_error<T: std::fmt::Debug>(result: Result<T, sqlx::Error>) -> (String, String) {
    match result {
        Err(sqlx::Error::Database(db)) => (
            db.code().map(|c| c.to_string()).unwrap_or_default(),
            db.message().to_string(),
        ),
        other => panic!("expected a database error, got {other:?}"),
    }
}

async fn set_state(pool: &LedgerPool, op_key: &str, to: &str) -> Result<u64, sqlx::Error> {
    sqlx::query("update ledger.effects set state = $1 where op_key = $2")
        .bind(to)
        .bind(op_key)
        .execute(pool)
        .await
        .map(|done| done.rows_affected())
}

/// Every situation an effect can be in, as far as the transition rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    PendingPrepared,
    PendingDispatched,
    Held,
    Unknown,
    Succeeded,
    FailedRetryable,
    FailedFinal,
    Compensated,
    Cancelled,
}

impl Source {
    const ALL: [Source; 9] = [
        Source::PendingPrepared,
        Source::PendingDispatched,
        Source::Held,
        Source::Unknown,
        Source::Succeeded,
        Source::FailedRetryable,
        Source::FailedFinal,
        Source::Compensated,
        Source::Cancelled,
    ];

    fn state(self) -> State {
        match self {
            Source::PendingPrepared | Source::PendingDispatched => State::Pending,
            Source::Held => State::Held,
            Source::Unknown => State::Unknown,
            Source::Succeeded => State::Succeeded,
            Source::FailedRetryable | Source::FailedFinal => State::Failed,
            Source::Compensated => State::Compensated,
            Source::Cancelled => State::Cancelled,
        }
    }

    /// The state machine of docs/contract.md, written out independently of the SQL.
    fn may_become(self, to: State) -> bool {
        use State::*;
        match self {
            Source::PendingPrepared => matches!(to, Succeeded | Failed | Unknown | Cancelled),
            Source::PendingDispatched => matches!(to, Succeeded | Failed | Unknown),
            Source::Held => matches!(to, Pending | Cancelled),
            Source::Unknown => matches!(to, Succeeded | Failed),
            Source::Succeeded => matches!(to, Compensated),
            Source::FailedRetryable => matches!(to, Pending),
            Source::FailedFinal | Source::Compensated | Source::Cancelled => false,
        }
    }

    /// Brings a new effect `op_key` on `target` into this situation, through the writer API
    /// where it offers the path and with the allowed UPDATE sequence otherwise.
    async fn set_up(self, pool: &LedgerPool, op_key: &str, target: &str) {
        let request = intent(op_key, target);
        if self == Source::Held {
            let holder = intent(&format!("{op_key}:holder"), target);
            assert_eq!(
                begin_effect(pool, &holder).await.unwrap().decision,
                Decision::Proceed
            );
            assert_eq!(
                begin_effect(pool, &request).await.unwrap().decision,
                Decision::Held
            );
            return;
        }
        assert_eq!(
            begin_effect(pool, &request).await.unwrap().decision,
            Decision::Proceed
        );
        if self == Source::PendingPrepared {
            return;
        }
        if self == Source::Cancelled {
            set_state(pool, op_key, "cancelled").await.unwrap();
            return;
        }
        assert!(
            mark_dispatched(pool, op_key, None, "w")
                .await
                .unwrap()
                .claimed
        );
        let done = Completion {
            external_ref: Some(format!("ref-{op_key}")),
            ..Completion::default()
        };
        let outcome = match self {
            Source::PendingDispatched => return,
            Source::Unknown => Outcome::Unknown,
            Source::Succeeded | Source::Compensated => Outcome::Succeeded,
            Source::FailedRetryable => Outcome::Failed { retryable: true },
            Source::FailedFinal => Outcome::Failed { retryable: false },
            Source::PendingPrepared | Source::Held | Source::Cancelled => unreachable!(),
        };
        assert!(
            complete_effect(pool, op_key, outcome, &done)
                .await
                .unwrap()
                .applied
        );
        if self == Source::Compensated {
            set_state(pool, op_key, "compensated").await.unwrap();
        }
    }
}

async fn events(pool: &LedgerPool, op_key: &str) -> Vec<(Option<String>, String)> {
    sqlx::query_as(
        "select from_state, to_state from ledger.effect_events where op_key = $1 order by id",
    )
    .bind(op_key)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_superuser_update_can_only_follow_the_allowed_transitions() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let superuser: bool =
        sqlx::query_scalar("select rolsuper from pg_roles where rolname = current_user")
            .fetch_one(pool)
            .await
            .unwrap();
    assert!(
        superuser,
        "this test is about what even a superuser cannot do"
    );

    let mut checked = 0;
    for source in Source::ALL {
        for to in State::ALL {
            let key = format!("t:{source:?}:{to}");
            source
                .set_up(pool, &key, &format!("target:{source:?}:{to}"))
                .await;
            let before = effect(pool, &key).await;
            assert_eq!(before.state, source.state(), "{key}");
            let events_before = events(pool, &key).await;

            let result = set_state(pool, &key, to.as_str()).await;
            let after = effect(pool, &key).await;
            if to == source.state() {
                // Not a transition: the row is rewritten, nothing is recorded as a change.
                assert_eq!(result.unwrap(), 1, "{key}");
                assert_eq!(after.state, to);
                assert_eq!(after.version, before.version + 1, "{key}");
                assert_eq!(events(pool, &key).await, events_before, "{key}");
            } else if source.may_become(to) {
                assert_eq!(
                    result.unwrap_or_else(|e| panic!("{key}: {source:?} -> {to} refused: {e}")),
                    1
                );
                assert_eq!(after.state, to, "{key}");
                assert_eq!(after.version, before.version + 1, "{key}");
                let mut expected = events_before.clone();
                expected.push((Some(source.state().to_string()), to.to_string()));
                assert_eq!(events(pool, &key).await, expected, "{key}");
            } else {
                let (code, message) = db_error(result);
                assert_eq!(code, "23514", "{key}: {message}");
                let from_to = format!("{} -> {}", source.state(), to);
                assert!(
                    message.contains(&key) && message.contains(&from_to),
                    "{key}: the error must name the key and both states: {message}"
                );
                assert_eq!(after, before, "{key}: a refused update must change nothing");
                assert_eq!(events(pool, &key).await, events_before, "{key}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 63);
}

#[tokio::test]
async fn an_effect_is_created_pending_or_held_only() {
    let db = common::test_db().await;
    let pool = &db.pool;
    for state in ["unknown", "succeeded", "failed", "compensated", "cancelled"] {
        let key = format!("created-as-{state}");
        let result = sqlx::query(
            "insert into ledger.effects (op_key, action, target, params_hash, requested_by, state,
                                         pending_window)
             values ($1, 'refund', 'invoice:1', 'x', 'psql', $2, interval '5 minutes')",
        )
        .bind(&key)
        .bind(state)
        .execute(pool)
        .await;
        let (code, message) = db_error(result);
        assert_eq!(code, "23514", "{message}");
        assert!(
            message.contains(&key) && message.contains(state),
            "{message}"
        );
    }
    let none: i64 = sqlx::query_scalar("select count(*) from ledger.effects")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(none, 0);

    // A hand-written insert in pending is an ordinary (if unusual) writer, and is recorded.
    sqlx::query(
        "insert into ledger.effects (op_key, action, target, params_hash, requested_by, state,
                                     pending_window)
         values ('by-hand', 'refund', 'invoice:1', 'x', 'psql', 'pending', interval '5 minutes')",
    )
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(
        events(pool, "by-hand").await,
        [(None, "pending".to_string())]
    );
}

#[tokio::test]
async fn the_identity_of_an_effect_never_changes() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let key = "refund:ID:1";
    begin_effect(pool, &intent(key, "invoice:ID"))
        .await
        .unwrap();
    let before = effect(pool, key).await;
    for assignment in [
        "op_key = 'refund:ID:2'",
        "action = 'payout'",
        "target = 'invoice:OTHER'",
        "params = '{\"amount_minor\": 999999, \"currency\": \"EUR\"}'",
        "params_hash = 'forged'",
        "params = '{\"amount_minor\": 999999}', params_hash = ledger.params_hash('{\"amount_minor\": 999999}')",
        "created_at = now() - interval '1 day'",
    ] {
        let sql = format!("update ledger.effects set {assignment} where op_key = '{key}'");
        let (code, message) = db_error(sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await);
        assert_eq!(code, "23514", "{assignment}: {message}");
        assert!(
            message.contains(key) && message.contains("never changes"),
            "{assignment}: {message}"
        );
    }
    assert_eq!(effect(pool, key).await, before);
}

#[tokio::test]
async fn every_update_bumps_the_version_whatever_it_sets() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let key = "refund:V:1";
    begin_effect(pool, &intent(key, "invoice:V")).await.unwrap();
    let mut expected = 1;
    assert_eq!(effect(pool, key).await.version, expected);

    mark_dispatched(pool, key, None, "w").await.unwrap();
    expected += 1;
    assert_eq!(effect(pool, key).await.version, expected);

    for assignment in [
        "provider = 'stripe'",
        "provider = provider",
        // The version is the database's: neither reset nor jumped by a writer.
        "version = 1",
        "version = version + 100",
        "version = null",
    ] {
        let before = effect(pool, key).await;
        let sql = format!("update ledger.effects set {assignment} where op_key = '{key}'");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(pool)
            .await
            .unwrap_or_else(|e| panic!("{assignment}: {e}"));
        expected += 1;
        let after = effect(pool, key).await;
        assert_eq!(after.version, expected, "{assignment}");
        assert!(after.updated_at >= before.updated_at);
    }

    complete_effect(pool, key, Outcome::Unknown, &Completion::default())
        .await
        .unwrap();
    expected += 1;
    assert_eq!(effect(pool, key).await.version, expected);

    // A completion that only adds a late flag is an update too.
    sqlx::query("update ledger.effects set state = 'failed', retryable = false where op_key = $1")
        .bind(key)
        .execute(pool)
        .await
        .unwrap();
    expected += 1;
    complete_effect(
        pool,
        key,
        Outcome::Succeeded,
        &Completion {
            external_ref: Some("r".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    expected += 1;
    let row = effect(pool, key).await;
    assert_eq!(row.version, expected);
    assert!(row.late_result_at.is_some());
}

/// from_state, to_state, actor, db_role, reason
type EventRow = (Option<String>, String, String, String, Option<String>);

#[tokio::test]
async fn every_state_change_is_recorded_with_from_and_to() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let key = "refund:EV:1";
    let request = intent(key, "invoice:EV");
    let worker = Completion {
        worker: Some("worker-9".into()),
        reason: Some("timeout".into()),
        ..Completion::default()
    };
    assert_eq!(
        begin_effect(pool, &request).await.unwrap().decision,
        Decision::Proceed
    );
    mark_dispatched(pool, key, None, "worker-9").await.unwrap();
    complete_effect(pool, key, Outcome::Unknown, &worker)
        .await
        .unwrap();
    sqlx::query(
        "select * from ledger.record_reconciliation(op_key => $1, expected_version => null,
            operator => 'alice', provider => 'stripe', finding => 'absent')",
    )
    .bind(key)
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(
        begin_effect(pool, &request).await.unwrap().decision,
        Decision::Retry
    );
    mark_dispatched(pool, key, None, "worker-9").await.unwrap();
    complete_effect(
        pool,
        key,
        Outcome::Succeeded,
        &Completion {
            external_ref: Some("re_1".into()),
            worker: Some("worker-9".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    set_state(pool, key, "compensated").await.unwrap();

    let history: Vec<EventRow> = sqlx::query_as(
        "select from_state, to_state, actor, db_role, reason from ledger.effect_events
          where op_key = $1 order by id",
    )
    .bind(key)
    .fetch_all(pool)
    .await
    .unwrap();
    let session_user: String = sqlx::query_scalar("select session_user::text")
        .fetch_one(pool)
        .await
        .unwrap();
    let transitions: Vec<(Option<&str>, &str)> = history
        .iter()
        .map(|(from, to, ..)| (from.as_deref(), to.as_str()))
        .collect();
    assert_eq!(
        transitions,
        [
            (None, "pending"),
            (Some("pending"), "unknown"),
            (Some("unknown"), "failed"),
            (Some("failed"), "pending"),
            (Some("pending"), "succeeded"),
            (Some("succeeded"), "compensated"),
        ]
    );
    let actors: Vec<&str> = history.iter().map(|h| h.2.as_str()).collect();
    assert_eq!(
        actors,
        [
            "agent-1",
            "worker-9",
            "alice",
            "agent-1",
            "worker-9",
            // A hand-written UPDATE is attributed to the database role, never to whoever
            // acted earlier on the same connection.
            session_user.as_str(),
        ]
    );
    assert!(history.iter().all(|h| h.3 == session_user));
    assert_eq!(history[1].4.as_deref(), Some("timeout"));
    assert_eq!(
        history[2].4.as_deref(),
        Some("reconciliation with stripe: absent")
    );
    assert_eq!(history[5].4, None);
}

#[tokio::test]
async fn the_actor_of_one_transaction_does_not_leak_into_the_next() {
    let db = common::test_db().await;
    let mut conn = db.connect().await;
    let key = "refund:LEAK:1";
    begin_effect(&mut conn, &intent(key, "invoice:LEAK"))
        .await
        .unwrap();
    complete_effect(
        &mut conn,
        key,
        Outcome::Unknown,
        &Completion {
            worker: Some("worker-x".into()),
            reason: Some("reset".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    sqlx::query("update ledger.effects set state = 'failed' where op_key = $1")
        .bind(key)
        .execute(&mut conn)
        .await
        .unwrap();
    let (actor, reason): (String, Option<String>) = sqlx::query_as(
        "select actor, reason from ledger.effect_events where op_key = $1 order by id desc limit 1",
    )
    .bind(key)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    let session_user: String = sqlx::query_scalar("select session_user::text")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(actor, session_user);
    assert_eq!(reason, None);
    conn.close().await.unwrap();
}

#[tokio::test]
async fn history_and_attempts_are_append_only() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let key = "refund:AO:1";
    for _ in 0..3 {
        begin_effect(pool, &intent(key, "invoice:AO"))
            .await
            .unwrap();
    }
    set_state(pool, key, "unknown").await.unwrap();

    for table in ["ledger.effect_versions", "ledger.attempts"] {
        let count = |pool: LedgerPool| async move {
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
                "select count(*) from {table}"
            )))
            .fetch_one(&pool)
            .await
            .unwrap()
        };
        let rows = count(pool.clone()).await;
        assert!(rows >= 1, "{table} should have rows to protect");
        for statement in [
            format!("update {table} set at = now()"),
            format!("delete from {table}"),
            format!(
                "delete from {table} where effect_id = (select id from ledger.effects where op_key = '{key}')"
            ),
            format!("truncate {table}"),
        ] {
            let (code, message) = db_error(
                sqlx::query(sqlx::AssertSqlSafe(statement.clone()))
                    .execute(pool)
                    .await,
            );
            assert_eq!(code, "42501", "{statement}: {message}");
            assert!(
                message.contains("append-only") && message.contains(table),
                "{statement}: {message}"
            );
        }
        assert_eq!(count(pool.clone()).await, rows, "{table}");
    }

    // Nor can they be emptied through the effects they belong to.
    let (_, message) = db_error(
        sqlx::query("truncate ledger.effects cascade")
            .execute(pool)
            .await,
    );
    assert!(message.contains("append-only"), "{message}");
    let effects: i64 = sqlx::query_scalar("select count(*) from ledger.effects")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(effects, 1);
}

#[tokio::test]
async fn the_row_checks_refuse_every_writer_and_name_the_check() {
    let db = common::test_db().await;
    let pool = &db.pool;
    // A valid row, column by column; each refused insert changes one of its values.
    let valid = [
        ("op_key", "'k'"),
        ("action", "'refund'"),
        ("target", "'invoice:1'"),
        ("params", "'{}'"),
        ("params_hash", "'x'"),
        ("amount_minor", "1500"),
        ("currency", "'EUR'"),
        ("requested_by", "'psql'"),
        ("state", "'pending'"),
        ("held_by", "null"),
        ("pending_window", "interval '5 minutes'"),
        ("during", "null"),
    ];
    let columns = valid.map(|(column, _)| column).join(", ");
    let inserts = [
        ("op_key", "''", "effects_op_key_check"),
        ("action", "''", "effects_action_check"),
        ("target", "''", "effects_target_check"),
        ("params", "'[1]'", "effects_params_check"),
        ("currency", "'eur'", "effects_currency_check"),
        ("currency", "null", "effects_amount_check"),
        ("amount_minor", "null", "effects_amount_check"),
        ("state", "'lost'", "effects_state_check"),
        ("state", "'held'", "effects_held_by_check"),
        (
            "pending_window",
            "interval '0'",
            "effects_pending_window_check",
        ),
        ("during", "'empty'", "effects_during_check"),
    ];
    for (changed, value, check) in inserts {
        let values = valid
            .map(|(column, valid)| if column == changed { value } else { valid })
            .join(", ");
        let sql = format!("insert into ledger.effects ({columns}) values ({values})");
        let (code, message) = db_error(sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await);
        assert_eq!(code, "23514", "{check}: {message}");
        assert!(message.contains(check), "{check}: {message}");
    }
    let none: i64 = sqlx::query_scalar("select count(*) from ledger.effects")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(none, 0);

    // And on every update: what an update may change is checked as the insert was.
    let values = valid.map(|(_, value)| value).join(", ");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "insert into ledger.effects ({columns}) values ({values})"
    )))
    .execute(pool)
    .await
    .unwrap();
    let before = effect(pool, "k").await;
    for (assignment, check) in [
        ("attention = 'maybe'", "effects_attention_check"),
        ("error_class = 'gremlins'", "effects_error_class_check"),
        ("currency = 'euro'", "effects_currency_check"),
        (
            "pending_window = interval '-1 minute'",
            "effects_pending_window_check",
        ),
    ] {
        let sql = format!("update ledger.effects set {assignment} where op_key = 'k'");
        let (code, message) = db_error(sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await);
        assert_eq!(code, "23514", "{assignment}: {message}");
        assert!(message.contains(check), "{assignment}: {message}");
    }
    assert_eq!(effect(pool, "k").await, before);
}
