//! Least privilege, tested by logging in as each kind of role: agents write through the writer
//! API only, operators change rows through the operator functions only, read-only consoles
//! read and nothing else.

mod common;

use common::roles::LoginRole;
use effectwatch::ledger::LedgerPool;
use effectwatch::ledger::actions::{self, Finding, Resolution, SeenVersion};
use effectwatch::ledger::writer::{
    Completion, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, LedgerError, State};
use serde_json::json;
use sqlx::{AssertSqlSafe, Connection, PgConnection};

fn intent(op_key: &str, target: &str) -> Intent {
    Intent {
        op_key: op_key.to_string(),
        action: "refund".to_string(),
        target: target.to_string(),
        params: json!({"amount_minor": 900, "currency": "EUR"}),
        requested_by: "agent-7".to_string(),
        ..Intent::default()
    }
}

/// Expects "permission denied" (SQLSTATE 42501).
fn assert_denied<T: std::fmt::Debug>(what: &str, result: Result<T, sqlx::Error>) {
    match result {
        Err(sqlx::Error::Database(e)) => assert_eq!(
            e.code().as_deref(),
            Some("42501"),
            "{what}: expected permission denied, got {}",
            e.message()
        ),
        other => panic!("{what}: expected permission denied, got {other:?}"),
    }
}

async fn exec(conn: &mut PgConnection, sql: &str) -> Result<u64, sqlx::Error> {
    sqlx::query(AssertSqlSafe(sql.to_string()))
        .execute(conn)
        .await
        .map(|r| r.rows_affected())
}

async fn names(pool: &LedgerPool, sql: &'static str) -> Vec<String> {
    sqlx::query_scalar(sql).fetch_all(pool).await.unwrap()
}

/// Every table of the ledger with one of its ordinary (writable) columns.
async fn tables(pool: &LedgerPool) -> Vec<(String, String)> {
    sqlx::query_as(
        "select c.relname::text, (select a.attname::text from pg_attribute a
                                   where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
                                     and a.attidentity = '' and a.attgenerated = ''
                                   order by a.attnum limit 1)
           from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'ledger' and c.relkind in ('r', 'p')
          order by 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The tables a role reads: a month of a history table is read through
/// its table, and holds no grants of its own.
async fn readable_tables(pool: &LedgerPool) -> Vec<String> {
    sqlx::query_scalar(
        "select c.relname::text from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'ledger' and c.relkind in ('r', 'p') and not c.relispartition
          order by 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Tries every kind of write on every ledger table as this connection's role.
async fn assert_no_dml(conn: &mut PgConnection, pool: &LedgerPool) {
    let tables = tables(pool).await;
    assert!(tables.len() >= 8, "{tables:?}");
    for (table, column) in tables {
        assert_denied(
            &format!("insert into {table}"),
            exec(conn, &format!("insert into ledger.{table} default values")).await,
        );
        assert_denied(
            &format!("update {table}"),
            exec(
                conn,
                &format!("update ledger.{table} set {column} = {column}"),
            )
            .await,
        );
        assert_denied(
            &format!("delete from {table}"),
            exec(conn, &format!("delete from ledger.{table}")).await,
        );
        assert_denied(
            &format!("truncate {table}"),
            exec(conn, &format!("truncate ledger.{table}")).await,
        );
    }
}

async fn assert_reads_every_view(conn: &mut PgConnection, pool: &LedgerPool) {
    let views = names(
        pool,
        "select viewname::text from pg_views where schemaname = 'ledger' order by 1",
    )
    .await;
    for expected in [
        "overdue_pending",
        "unknown_outcomes",
        "duplicate_attempts",
        "held_conflicts",
        "pane_counts",
    ] {
        assert!(
            views.iter().any(|v| v == expected),
            "{expected} in {views:?}"
        );
    }
    for view in views {
        let as_role: i64 =
            sqlx::query_scalar(AssertSqlSafe(format!("select count(*) from ledger.{view}")))
                .fetch_one(&mut *conn)
                .await
                .unwrap_or_else(|e| panic!("selecting ledger.{view}: {e}"));
        let as_owner: i64 =
            sqlx::query_scalar(AssertSqlSafe(format!("select count(*) from ledger.{view}")))
                .fetch_one(pool)
                .await
                .unwrap();
        assert_eq!(as_role, as_owner, "ledger.{view} shows the role everything");
    }
}

/// The ledger functions `role` may execute.
async fn executable(pool: &LedgerPool, role: &str) -> Vec<String> {
    sqlx::query_scalar(
        "select p.proname::text from pg_proc p join pg_namespace n on n.oid = p.pronamespace
          where n.nspname = 'ledger' and has_function_privilege($1, p.oid, 'execute')
          order by 1",
    )
    .bind(role)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// An effect left in `unknown` and a held one, made by the superuser.
async fn set_up(pool: &LedgerPool) {
    begin_effect(pool, &intent("r:unknown", "invoice:R1"))
        .await
        .unwrap();
    mark_dispatched(pool, "r:unknown", None, "w").await.unwrap();
    complete_effect(pool, "r:unknown", Outcome::Unknown, &Completion::default())
        .await
        .unwrap();
    begin_effect(pool, &intent("r:holder", "invoice:R2"))
        .await
        .unwrap();
    assert_eq!(
        begin_effect(pool, &intent("r:held", "invoice:R2"))
            .await
            .unwrap()
            .decision,
        Decision::Held
    );
    assert_eq!(
        begin_effect(pool, &intent("r:held-2", "invoice:R2"))
            .await
            .unwrap()
            .decision,
        Decision::Held
    );
    begin_effect(pool, &intent("r:pending", "invoice:R3"))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_agent_writes_through_the_writer_api_only() {
    let db = common::test_db().await;
    let pool = &db.pool;
    set_up(pool).await;
    let role = LoginRole::create(&db, "effect_agent").await;
    let Some(mut conn) = role.connect(&db).await else {
        return;
    };

    let key = "refund:AGENT:1";
    let begun = begin_effect(&mut conn, &intent(key, "invoice:A1"))
        .await
        .unwrap();
    assert_eq!(begun.decision, Decision::Proceed);
    assert!(
        mark_dispatched(&mut conn, key, None, "agent-worker")
            .await
            .unwrap()
            .claimed
    );
    let done = complete_effect(
        &mut conn,
        key,
        Outcome::Succeeded,
        &Completion {
            external_ref: Some("re_a".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    assert!(done.applied);
    // Named-argument calls from SQL work for the role as well.
    let decision: String = sqlx::query_scalar(
        "select decision from ledger.begin_effect(op_key => 'refund:AGENT:1', action => 'refund',
            target => 'invoice:A1', params => '{\"currency\":\"EUR\",\"amount_minor\":900}',
            requested_by => 'agent-7')",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(decision, "replay");
    let state: String =
        sqlx::query_scalar("select state from ledger.effects where op_key = 'refund:AGENT:1'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(state, "succeeded");

    // No way around the API.
    assert_denied(
        "update ledger.effects",
        exec(
            &mut conn,
            "update ledger.effects set state = 'succeeded' where op_key = 'r:unknown'",
        )
        .await,
    );
    assert_no_dml(&mut conn, pool).await;
    // Nor the operator's functions.
    let resolve = actions::resolve(
        &mut conn,
        "r:unknown",
        SeenVersion(3),
        "agent-7",
        "I am sure",
        &Resolution::Succeeded {
            external_ref: "x".into(),
        },
    )
    .await;
    assert!(
        matches!(resolve, Err(LedgerError::Refused(_))),
        "{resolve:?}"
    );
    assert_denied(
        "op_resolve",
        exec(
            &mut conn,
            "select * from ledger.op_resolve(op_key => 'r:unknown', expected_version => null,
                operator => 'agent', reason => 'x', outcome => 'failed')",
        )
        .await,
    );
    assert_denied(
        "record_reconciliation",
        exec(
            &mut conn,
            "select * from ledger.record_reconciliation(op_key => 'r:unknown', expected_version => null,
                operator => 'agent', provider => 'p', finding => 'absent')",
        )
        .await,
    );
    assert_denied(
        "op_annotate",
        exec(
            &mut conn,
            "select * from ledger.op_annotate('r:unknown', null, 'agent', 'note')",
        )
        .await,
    );
    assert_eq!(
        executable(pool, &role.name).await,
        [
            // begin_effect and mark_dispatched in one round trip (0025).
            "begin_and_dispatch",
            "begin_effect",
            // The key form, for SQL callers to make their keys (0022).
            "canonical_arguments",
            "canonical_json",
            "complete_effect",
            "current_actor",
            // Beats while a provider call runs (0027).
            "heartbeat",
            "key_form",
            "key_from_template",
            "mark_dispatched",
            "money_value",
            "normalised",
            "params_by_value",
            // A gateway's check of its callers' keys (0023).
            "refused_to_requester",
            "white_space_trimmed"
        ]
    );

    // The history says which role did it.
    let roles: Vec<String> = sqlx::query_scalar(
        "select distinct db_role from ledger.effect_events where op_key = 'refund:AGENT:1'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(roles, std::slice::from_ref(&role.name));
    let unknown_state: String =
        sqlx::query_scalar("select state from ledger.effects where op_key = 'r:unknown'")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(unknown_state, "unknown");
    conn.close().await.unwrap();
}

#[tokio::test]
async fn an_operator_changes_rows_through_the_operator_functions_only() {
    let db = common::test_db().await;
    let pool = &db.pool;
    set_up(pool).await;
    let role = LoginRole::create(&db, "effect_operator").await;
    let Some(mut conn) = role.connect(&db).await else {
        return;
    };

    assert_reads_every_view(&mut conn, pool).await;
    for table in readable_tables(pool).await {
        sqlx::query(AssertSqlSafe(format!(
            "select * from ledger.{table} limit 1"
        )))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("operator reading ledger.{table}: {e}"));
    }

    let finding = Finding {
        provider: "stripe".into(),
        finding: "indeterminate".into(),
        external_refs: vec![],
        evidence: json!({"http_status": 503}),
        duration_ms: 300,
    };
    let recon =
        actions::record_reconciliation(&mut conn, "r:unknown", SeenVersion(3), "alice", &finding)
            .await
            .unwrap();
    assert_eq!(recon.state, State::Unknown);
    let resolved = actions::resolve(
        &mut conn,
        "r:unknown",
        SeenVersion(recon.version),
        "alice",
        "the provider's dashboard shows it",
        &Resolution::Succeeded {
            external_ref: "re_77".into(),
        },
    )
    .await
    .unwrap();
    assert_eq!(resolved.state, State::Succeeded);
    let released = actions::RELEASE
        .call(&mut conn, "r:held", SeenVersion(1), "alice", "checked")
        .await
        .unwrap();
    assert_eq!(released.state, State::Pending);
    let cancelled = actions::CANCEL
        .call(&mut conn, "r:held-2", SeenVersion(1), "alice", "dup")
        .await
        .unwrap();
    assert_eq!(cancelled.state, State::Cancelled);
    actions::ANNOTATE
        .call(&mut conn, "r:pending", SeenVersion(1), "alice", "looking")
        .await
        .unwrap();
    let intact: Option<i64> =
        sqlx::query_scalar("select first_broken_seq from ledger.verify_audit_chain()")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(intact, None);

    // The audit trail names the database role, whatever operator name was claimed.
    let audit: Vec<(String, String)> =
        sqlx::query_as("select action, db_role from ledger.audit_log order by seq")
            .fetch_all(pool)
            .await
            .unwrap();
    let actions_done: Vec<&str> = audit.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(
        actions_done,
        ["reconcile", "resolve", "release", "cancel", "annotate"]
    );
    assert!(
        audit.iter().all(|(_, db_role)| db_role == &role.name),
        "{audit:?}"
    );
    let event_role: String = sqlx::query_scalar(
        "select db_role from ledger.effect_events where op_key = 'r:unknown' order by id desc limit 1",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(event_role, role.name);

    // No row changes by hand, and no writer API.
    assert_no_dml(&mut conn, pool).await;
    let begin = begin_effect(&mut conn, &intent("refund:OP:1", "invoice:OP")).await;
    assert!(matches!(begin, Err(LedgerError::Refused(_))), "{begin:?}");
    assert_denied(
        "mark_dispatched",
        exec(
            &mut conn,
            "select * from ledger.mark_dispatched('r:pending')",
        )
        .await,
    );
    assert_denied(
        "complete_effect",
        exec(
            &mut conn,
            "select * from ledger.complete_effect('r:pending', 'succeeded')",
        )
        .await,
    );
    assert_denied(
        "ledger.audit",
        exec(
            &mut conn,
            "select ledger.audit('mallory', 'annotate', e, 'forged', null, null)
               from ledger.effects e limit 1",
        )
        .await,
    );
    let writer_functions: Vec<String> = executable(pool, &role.name)
        .await
        .into_iter()
        .filter(|f| {
            [
                "begin_effect",
                "mark_dispatched",
                "complete_effect",
                "audit",
                "record_attempt",
            ]
            .contains(&f.as_str())
        })
        .collect();
    assert!(writer_functions.is_empty(), "{writer_functions:?}");
    let audit_count: i64 = sqlx::query_scalar("select count(*) from ledger.audit_log")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(audit_count, 5);
    conn.close().await.unwrap();
}

#[tokio::test]
async fn a_read_only_role_reads_and_writes_nothing() {
    let db = common::test_db().await;
    let pool = &db.pool;
    set_up(pool).await;
    actions::ANNOTATE
        .call(pool, "r:pending", SeenVersion(1), "alice", "a note")
        .await
        .unwrap();
    let role = LoginRole::create(&db, "effect_readonly").await;
    let Some(mut conn) = role.connect(&db).await else {
        return;
    };

    assert_reads_every_view(&mut conn, pool).await;
    let checked: i64 = sqlx::query_scalar("select checked from ledger.verify_audit_chain()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(checked, 1);

    // Only functions that cannot write: PostgreSQL refuses INSERT, UPDATE and DELETE inside a
    // stable or immutable function.
    let readable = executable(pool, &role.name).await;
    assert!(
        readable.iter().any(|f| f == "verify_audit_chain"),
        "{readable:?}"
    );
    let volatile: Vec<String> = sqlx::query_scalar(
        "select p.proname::text from pg_proc p join pg_namespace n on n.oid = p.pronamespace
          where n.nspname = 'ledger' and has_function_privilege($1, p.oid, 'execute')
            and p.provolatile = 'v'
          order by 1",
    )
    .bind(&role.name)
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(
        volatile.is_empty(),
        "a read-only role may execute functions that can write: {volatile:?}"
    );
    for call in [
        "select * from ledger.begin_effect(op_key => 'ro:1', action => 'refund', target => 't',
            params => '{}', requested_by => 'ro')",
        "select * from ledger.mark_dispatched('r:pending')",
        "select * from ledger.complete_effect('r:pending', 'succeeded')",
        "select * from ledger.op_annotate('r:pending', null, 'ro', 'note')",
        "select * from ledger.op_cancel('r:pending', null, 'ro', 'why')",
        "select * from ledger.op_release('r:held', null, 'ro', 'why')",
        "select * from ledger.op_resolve('r:unknown', null, 'ro', 'why', 'failed')",
        "select * from ledger.record_reconciliation(op_key => 'r:unknown', expected_version => null,
            operator => 'ro', provider => 'p', finding => 'absent')",
    ] {
        assert_denied(call, exec(&mut conn, call).await);
    }
    let annotate = actions::ANNOTATE
        .call(&mut conn, "r:pending", SeenVersion(1), "ro", "x")
        .await;
    assert!(
        matches!(annotate, Err(LedgerError::Refused(_))),
        "{annotate:?}"
    );
    assert_no_dml(&mut conn, pool).await;

    let (effects, audit): (i64, i64) = sqlx::query_as(
        "select (select count(*) from ledger.effects), (select count(*) from ledger.audit_log)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!((effects, audit), (5, 1));
    conn.close().await.unwrap();
}
