//! The ledger's trust boundaries, each as the attack that found it: logins
//! settling what is not theirs, keys squatting on the ledger's own
//! namespace, triggers a session can switch off, agents reading other
//! fleets' params, invisible characters in identities. Every attack runs
//! against the real server as the login that would try it.

mod common;

use common::roles::LoginRole;
use effectwatch::cli::check::health::{self as check, Thresholds};
use effectwatch::cli::show;
use effectwatch::ledger::LedgerPool;
use effectwatch::ledger::history;
use effectwatch::ledger::writer::{
    self, Completion, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, LedgerError};
use serde_json::json;
use sqlx::{AssertSqlSafe, PgConnection};

fn intent(op_key: &str, target: &str, requested_by: &str) -> Intent {
    Intent {
        op_key: op_key.to_string(),
        action: "refund".to_string(),
        target: target.to_string(),
        params: json!({"amount_minor": 1500, "currency": "EUR", "iban": "DE02 1203 0000 0000 2020 51"}),
        requested_by: requested_by.to_string(),
        amount_minor: Some(1500),
        currency: Some("EUR".to_string()),
        ..Intent::default()
    }
}

async fn state_of(pool: &LedgerPool, op_key: &str) -> (String, bool, i64) {
    sqlx::query_as(
        "select state, dispatched_at is not null, version from ledger.effects where op_key = $1",
    )
    .bind(op_key)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// `(kind, requested_by, db_role, flagged, refused)` of every attempt on a key.
async fn attempts(
    pool: &LedgerPool,
    op_key: &str,
) -> Vec<(String, Option<String>, String, bool, Option<String>)> {
    sqlx::query_as(
        "select kind, requested_by, db_role, flagged, detail ->> 'refused'
           from ledger.attempts where op_key = $1 order by id",
    )
    .bind(op_key)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The raw writer calls of the attack, as any agent could type them in psql.
async fn raw_dispatch(
    conn: &mut PgConnection,
    op_key: &str,
    worker: &str,
) -> (bool, Option<String>) {
    sqlx::query_as("select claimed, refused from ledger.mark_dispatched($1, worker => $2)")
        .bind(op_key)
        .bind(worker)
        .fetch_one(conn)
        .await
        .unwrap()
}

async fn raw_complete(
    conn: &mut PgConnection,
    op_key: &str,
    worker: &str,
) -> (bool, Option<String>) {
    sqlx::query_as(
        "select applied, refused from ledger.complete_effect($1, 'succeeded', 'fake-ref', worker => $2)",
    )
    .bind(op_key)
    .bind(worker)
    .fetch_one(conn)
    .await
    .unwrap()
}

async fn succeeded_effect(conn: &mut PgConnection, op_key: &str, target: &str, agent: &str) {
    assert_eq!(
        begin_effect(&mut *conn, &intent(op_key, target, agent))
            .await
            .unwrap()
            .decision,
        Decision::Proceed
    );
    assert!(
        mark_dispatched(&mut *conn, op_key, None, agent)
            .await
            .unwrap()
            .claimed
    );
    let done = complete_effect(
        &mut *conn,
        op_key,
        Outcome::Succeeded,
        &Completion {
            external_ref: Some(format!("re_{op_key}")),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    assert!(done.applied);
}

fn sqlstate(result: Result<impl std::fmt::Debug, sqlx::Error>) -> (String, String) {
    match result {
        Err(sqlx::Error::Database(e)) => (
            e.code().map(|c| c.to_string()).unwrap_or_default(),
            e.message().to_string(),
        ),
        other => panic!("expected a database error, got {other:?}"),
    }
}

#[tokio::test]
async fn an_agent_cannot_settle_an_operators_compensation() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let agent = LoginRole::create(&db, "effect_agent").await;
    let operator = LoginRole::create(&db, "effect_operator").await;
    let (Some(mut agent_conn), Some(mut operator_conn)) =
        (agent.connect(&db).await, operator.connect(&db).await)
    else {
        return;
    };
    succeeded_effect(&mut agent_conn, "hij-1", "invoice:HIJ", "agent1").await;
    let compensation: String = sqlx::query_scalar(
        "select compensation_key from ledger.op_compensate('hij-1', null, 'op1', 'refund sent twice')",
    )
    .fetch_one(&mut operator_conn)
    .await
    .unwrap();
    assert_eq!(compensation, "compensate:hij-1:1");

    // The attack: claim and complete the compensation under the operator's name.
    let (claimed, refused) = raw_dispatch(&mut agent_conn, &compensation, "op1").await;
    assert!(!claimed);
    let refused = refused.expect("the dispatch is refused with a reason");
    assert!(refused.contains("only the operator path"), "{refused}");
    let (applied, refused) = raw_complete(&mut agent_conn, &compensation, "op1").await;
    assert!(!applied);
    assert!(refused.is_some());

    // Nothing changed: the original is not compensated, the compensation was never sent.
    assert_eq!(state_of(pool, "hij-1").await.0, "succeeded");
    let (state, dispatched, version) = state_of(pool, &compensation).await;
    assert_eq!((state.as_str(), dispatched, version), ("pending", false, 2));
    // Both calls are kept, flagged, under the login that made them.
    let kept = attempts(pool, &compensation).await;
    assert_eq!(kept.len(), 2, "{kept:?}");
    for (kind, named, login, flagged, refused) in &kept {
        assert_eq!(kind, "refused");
        assert_eq!(named.as_deref(), Some("op1"));
        assert_eq!(login, &agent.name);
        assert!(*flagged && refused.is_some());
    }
    // The refusals show in the duplicates pane, like any other flagged attempt.
    let in_pane: i64 =
        sqlx::query_scalar("select count(*) from ledger.duplicate_attempts where op_key = $1")
            .bind(&compensation)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(in_pane, 1);
    // `show` puts the name the agent gave beside the login it used.
    let shown = show::render(&history::load(pool, &compensation).await.unwrap());
    assert!(
        shown.contains(&format!("refused ⚑ by op1 (login {})", agent.name)),
        "{shown}"
    );

    // The operator path still works, and settles the original.
    let claimed: bool = sqlx::query_scalar(
        "select claimed from ledger.op_dispatch_compensation('compensate:hij-1:1', 'op1')",
    )
    .fetch_one(&mut operator_conn)
    .await
    .unwrap();
    assert!(claimed);
    let original: String = sqlx::query_scalar(
        "select original_state from ledger.op_complete_compensation('compensate:hij-1:1', 'op1', 'succeeded', 're_rev')",
    )
    .fetch_one(&mut operator_conn)
    .await
    .unwrap();
    assert_eq!(original, "compensated");
}

#[tokio::test]
async fn one_agent_login_cannot_settle_another_logins_effect() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let owner = LoginRole::create(&db, "effect_agent").await;
    let intruder = LoginRole::create(&db, "effect_agent").await;
    let (Some(mut owner_conn), Some(mut intruder_conn)) =
        (owner.connect(&db).await, intruder.connect(&db).await)
    else {
        return;
    };
    let key = "refund:INV-9:v1";
    begin_effect(&mut owner_conn, &intent(key, "invoice:INV-9", "agent1"))
        .await
        .unwrap();

    let (claimed, refused) = raw_dispatch(&mut intruder_conn, key, "agent1").await;
    assert!(!claimed);
    let refused = refused.unwrap();
    assert!(
        refused.contains(&owner.name) && refused.contains(&intruder.name),
        "{refused}"
    );
    // The owner dispatches; the intruder's forged completion is refused too.
    assert!(
        mark_dispatched(&mut owner_conn, key, None, "agent1")
            .await
            .unwrap()
            .claimed
    );
    let (applied, _) = raw_complete(&mut intruder_conn, key, "agent1").await;
    assert!(!applied);
    let (state, _, _) = state_of(pool, key).await;
    assert_eq!(state, "pending");
    let external_ref: Option<String> =
        sqlx::query_scalar("select external_ref from ledger.effects where op_key = $1")
            .bind(key)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(external_ref, None);
    // Through the Rust writer, the refusal is an error.
    let forged = complete_effect(
        &mut intruder_conn,
        key,
        Outcome::Succeeded,
        &Completion::default(),
    )
    .await;
    assert!(matches!(forged, Err(LedgerError::Refused(_))), "{forged:?}");

    let kinds: Vec<(String, String, bool)> = attempts(pool, key)
        .await
        .into_iter()
        .map(|(kind, _, login, flagged, _)| (kind, login, flagged))
        .collect();
    assert_eq!(
        kinds,
        [
            ("refused".to_string(), intruder.name.clone(), true),
            ("dispatch".to_string(), owner.name.clone(), false),
            ("refused".to_string(), intruder.name.clone(), true),
            ("refused".to_string(), intruder.name.clone(), true),
        ]
    );
    // The owner completes as usual.
    let done = complete_effect(
        &mut owner_conn,
        key,
        Outcome::Succeeded,
        &Completion::default(),
    )
    .await
    .unwrap();
    assert!(done.applied);
}

#[tokio::test]
async fn agents_of_one_fleet_sharing_a_login_keep_working() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let fleet = LoginRole::create(&db, "effect_agent").await;
    let (Some(mut worker_a), Some(mut worker_b)) =
        (fleet.connect(&db).await, fleet.connect(&db).await)
    else {
        return;
    };
    let key = "booking:ROOM-4:2026-12-24";
    begin_effect(&mut worker_a, &intent(key, "room:4", "agent-a"))
        .await
        .unwrap();
    // Another worker of the fleet, under another name, takes over.
    assert!(
        mark_dispatched(&mut worker_b, key, None, "agent-b")
            .await
            .unwrap()
            .claimed
    );
    let done = complete_effect(
        &mut worker_b,
        key,
        Outcome::Succeeded,
        &Completion::default(),
    )
    .await
    .unwrap();
    assert!(done.applied);
    let effect = history::find_effect(pool, key).await.unwrap().unwrap();
    assert_eq!(effect.owner_role, fleet.name);
    assert_eq!(effect.dispatched_role.as_deref(), Some(fleet.name.as_str()));
    assert_eq!(
        effect.requester(),
        format!("agent-a (login {})", fleet.name)
    );
    assert_eq!(
        effect.dispatcher(),
        format!("agent-b (login {})", fleet.name)
    );
}

#[tokio::test]
async fn the_ledgers_own_keys_are_reserved_and_compensation_numbering_cannot_be_blocked() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let agent = LoginRole::create(&db, "effect_agent").await;
    let Some(mut conn) = agent.connect(&db).await else {
        return;
    };
    succeeded_effect(&mut conn, "sq-1", "invoice:SQ", "agent1").await;
    for squat in [
        "compensate:sq-1:1",
        "escalate:sq-1:unknown_outcome",
        "Compensate:sq-1:1",
    ] {
        let (code, message) = sqlstate(
            sqlx::query(
                "select * from ledger.begin_effect(op_key => $1, action => 'anything',
                    target => 'elsewhere', params => '{}', requested_by => 'agent1')",
            )
            .bind(squat)
            .execute(&mut conn)
            .await,
        );
        assert_eq!(code, "42501", "{squat}: {message}");
        assert!(message.contains("made by the ledger itself"), "{message}");
    }
    // A row on the next key anyway (a superuser's hand, an old ledger) is skipped.
    sqlx::query(
        "select * from ledger.open_effect('compensate:sq-1:1', 'anything', 'elsewhere', '{}'::jsonb,
            'root', null, null, null, null, null, null, null)",
    )
    .execute(pool)
    .await
    .unwrap();
    let key: String = sqlx::query_scalar(
        "select compensation_key from ledger.op_compensate('sq-1', null, 'op1', 'reverse it')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(key, "compensate:sq-1:2");
}

#[tokio::test]
async fn the_ledgers_triggers_fire_in_every_session_mode() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let mut conn = db.connect().await;
    succeeded_effect(&mut conn, "sm-succ", "invoice:SM", "agent1").await;
    sqlx::query(
        "select * from ledger.op_annotate('sm-succ', null, 'op1', 'so the audit log has an entry')",
    )
    .execute(pool)
    .await
    .unwrap();

    let weak: Vec<String> = sqlx::query_scalar(
        "select c.relname || '.' || t.tgname from pg_trigger t
           join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'ledger' and not t.tgisinternal and t.tgenabled <> 'A'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(weak.is_empty(), "{weak:?}");

    // The attack: replica mode switches off ordinary triggers for the session.
    for (what, sql) in [
        (
            "state machine",
            "update ledger.effects set state = 'pending' where op_key = 'sm-succ'",
        ),
        ("history", "delete from ledger.effect_versions"),
        ("attempts", "update ledger.attempts set flagged = true"),
        ("audit", "delete from ledger.audit_log"),
    ] {
        sqlx::query("begin").execute(&mut conn).await.unwrap();
        sqlx::query("set local session_replication_role = replica")
            .execute(&mut conn)
            .await
            .unwrap();
        let result = sqlx::query(AssertSqlSafe(sql)).execute(&mut conn).await;
        sqlx::query("rollback").execute(&mut conn).await.unwrap();
        let (code, message) = sqlstate(result);
        assert!(
            ["23514", "42501"].contains(&code.as_str()),
            "{what}: {code} {message}"
        );
    }
    assert_eq!(state_of(pool, "sm-succ").await.0, "succeeded");

    // What a superuser can still do, explicitly, `effectwatch check` fails on.
    let healthy = check::measure(pool, false, false).await.unwrap();
    assert!(check::evaluate(&healthy, &Thresholds::default()).is_empty());
    sqlx::query("alter table ledger.effects disable trigger effects_guard")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("alter table ledger.audit_log enable trigger audit_append_only")
        .execute(pool)
        .await
        .unwrap();
    let weakened = check::measure(pool, false, false).await.unwrap();
    assert_eq!(
        weakened.weak_triggers,
        ["audit_log.audit_append_only", "effects.effects_guard"]
    );
    let breaches = check::evaluate(&weakened, &Thresholds::default());
    assert_eq!(breaches.len(), 1);
    assert!(
        breaches[0].what.contains("effects.effects_guard"),
        "{breaches:?}"
    );
}

async fn visible(conn: &mut PgConnection) -> Vec<String> {
    sqlx::query_scalar("select op_key from ledger.effects where params ? 'iban' order by op_key")
        .fetch_all(conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_agent_reads_back_only_its_own_logins_effects() {
    let db = common::test_db().await;
    let first = LoginRole::create(&db, "effect_agent").await;
    let second = LoginRole::create(&db, "effect_agent").await;
    let operator = LoginRole::create(&db, "effect_operator").await;
    let reader = LoginRole::create(&db, "effect_readonly").await;
    let (
        Some(mut first_conn),
        Some(mut second_conn),
        Some(mut operator_conn),
        Some(mut reader_conn),
    ) = (
        first.connect(&db).await,
        second.connect(&db).await,
        operator.connect(&db).await,
        reader.connect(&db).await,
    )
    else {
        return;
    };
    begin_effect(&mut first_conn, &intent("fleet-1:a", "invoice:F1", "a"))
        .await
        .unwrap();
    begin_effect(&mut second_conn, &intent("fleet-2:a", "invoice:F2", "b"))
        .await
        .unwrap();
    begin_effect(&mut second_conn, &intent("fleet-2:b", "invoice:F3", "b"))
        .await
        .unwrap();
    assert_eq!(visible(&mut first_conn).await, ["fleet-1:a"]);
    assert_eq!(visible(&mut second_conn).await, ["fleet-2:a", "fleet-2:b"]);
    let all = ["fleet-1:a", "fleet-2:a", "fleet-2:b"];
    assert_eq!(visible(&mut operator_conn).await, all);
    assert_eq!(visible(&mut reader_conn).await, all);
    // The writer API still answers for every key, whoever's it is: another
    // fleet's is refused, telling nothing of it (issue 40).
    let begun = begin_effect(&mut first_conn, &intent("fleet-2:a", "invoice:F2", "a")).await;
    assert!(
        matches!(&begun, Err(LedgerError::Refused(why)) if why == writer::NOT_YOURS),
        "{begun:?}"
    );
}

/// A role declaring logins one tenant (`effect_tenant_*`), dropped at the end.
struct TenantRole {
    name: String,
    admin_url: String,
}

impl TenantRole {
    async fn create(db: &common::TestDb, members: &[&LoginRole]) -> TenantRole {
        let name = format!(
            "effect_tenant_ew_{:x}_{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
                & 0xff_ffff_ffff
        );
        sqlx::query(AssertSqlSafe(format!("create role \"{name}\" nologin")))
            .execute(&db.pool)
            .await
            .unwrap();
        for member in members {
            sqlx::query(AssertSqlSafe(format!(
                "grant \"{name}\" to \"{}\"",
                member.name
            )))
            .execute(&db.pool)
            .await
            .unwrap();
        }
        TenantRole {
            name,
            admin_url: db.url.clone(),
        }
    }
}

impl Drop for TenantRole {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                use sqlx::Connection;
                let mut admin = PgConnection::connect(&url).await.ok()?;
                sqlx::query(AssertSqlSafe(format!("drop role if exists \"{name}\"")))
                    .execute(&mut admin)
                    .await
                    .ok()
            })
        })
        .join();
    }
}

/// Every column of `ledger.begin_effect`'s answer, as any agent sees it in psql.
async fn raw_begin(
    conn: &mut PgConnection,
    op_key: &str,
    target: &str,
    requested_by: &str,
) -> (
    String,
    Option<i64>,
    Option<String>,
    Option<serde_json::Value>,
) {
    sqlx::query_as(
        "select decision, effect_id, state, result from ledger.begin_effect(
            op_key => $1, action => 'refund', target => $2,
            params => '{\"amount_minor\": 1500, \"currency\": \"EUR\", \"iban\": \"DE02 1203 0000 0000 2020 51\"}',
            requested_by => $3, amount_minor => 1500, currency => 'EUR')",
    )
    .bind(op_key)
    .bind(target)
    .bind(requested_by)
    .fetch_one(conn)
    .await
    .unwrap()
}

/// Issue 40, "A replay answers whoever asks": another login sending the
/// owner's key and params got the owner's stored result.
#[tokio::test]
async fn a_repeat_is_answered_only_to_the_login_that_made_the_key_or_its_tenant() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let owner = LoginRole::create(&db, "effect_agent").await;
    let stranger = LoginRole::create(&db, "effect_agent").await;
    let colleague = LoginRole::create(&db, "effect_agent").await;
    let (Some(mut owner_conn), Some(mut stranger_conn), Some(mut colleague_conn)) = (
        owner.connect(&db).await,
        stranger.connect(&db).await,
        colleague.connect(&db).await,
    ) else {
        return;
    };
    let _tenant = TenantRole::create(&db, &[&owner, &colleague]).await;
    let key = "refund:INV-40:v1";
    let target = "invoice:INV-40";
    let stored = json!({"refund_id": "re_40", "card": "4242"});
    assert_eq!(
        begin_effect(&mut owner_conn, &intent(key, target, "agent-a"))
            .await
            .unwrap()
            .decision,
        Decision::Proceed
    );
    assert!(
        mark_dispatched(&mut owner_conn, key, None, "agent-a")
            .await
            .unwrap()
            .claimed
    );
    complete_effect(
        &mut owner_conn,
        key,
        Outcome::Succeeded,
        &Completion {
            external_ref: Some("re_40".into()),
            result: Some(stored.clone()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();

    // The stranger, with the owner's key and params: refused, and told
    // nothing — no effect id, no state, no result.
    assert_eq!(
        raw_begin(&mut stranger_conn, key, target, "agent-b").await,
        ("refused".to_string(), None, None, None)
    );
    let begun = begin_effect(&mut stranger_conn, &intent(key, target, "agent-b")).await;
    assert!(
        matches!(&begun, Err(LedgerError::Refused(why)) if why == writer::NOT_YOURS),
        "{begun:?}"
    );
    // Other params under the key: refused the same way, not `rejected`
    // with the state.
    let mut other = intent(key, target, "agent-b");
    other.params = json!({"amount_minor": 9900, "currency": "EUR"});
    other.amount_minor = Some(9900);
    assert!(matches!(
        begin_effect(&mut stranger_conn, &other).await,
        Err(LedgerError::Refused(_))
    ));

    // A login of the owner's tenant, and the owner, get the replay.
    for (conn, name) in [
        (&mut colleague_conn, "agent-c"),
        (&mut owner_conn, "agent-a"),
    ] {
        let begun = begin_effect(&mut *conn, &intent(key, target, name))
            .await
            .unwrap();
        assert_eq!(
            (begun.decision, begun.result.as_ref()),
            (Decision::Replay, Some(&stored)),
            "{name}"
        );
    }
    // The effect is as the owner left it.
    assert_eq!(state_of(pool, key).await.0, "succeeded");

    // The stranger's calls are kept, flagged, under its login, saying what
    // was withheld; the duplicates pane shows the key as a refused call.
    let refused: Vec<(String, Option<String>, Option<String>)> = sqlx::query_as(
        "select db_role, requested_by, detail ->> 'withheld' from ledger.attempts
          where op_key = $1 and kind = 'refused' and flagged order by id",
    )
    .bind(key)
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(
        refused,
        [
            (
                stranger.name.clone(),
                Some("agent-b".into()),
                Some("replay".into())
            ),
            (
                stranger.name.clone(),
                Some("agent-b".into()),
                Some("replay".into())
            ),
            (
                stranger.name.clone(),
                Some("agent-b".into()),
                Some("rejected".into())
            ),
        ]
    );
    let (needs_look, reasons): (bool, Vec<String>) = sqlx::query_as(
        "select needs_look, look_reasons from ledger.duplicate_attempts where op_key = $1",
    )
    .bind(key)
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(
        needs_look && reasons.contains(&"refused call".to_string()),
        "{reasons:?}"
    );

    // In flight, and failed and retryable: refused too, and the stranger
    // cannot reopen it.
    let open = "refund:INV-41:v1";
    begin_effect(&mut owner_conn, &intent(open, "invoice:INV-41", "agent-a"))
        .await
        .unwrap();
    assert_eq!(
        raw_begin(&mut stranger_conn, open, "invoice:INV-41", "agent-b")
            .await
            .0,
        "refused"
    );
    assert!(
        mark_dispatched(&mut owner_conn, open, None, "agent-a")
            .await
            .unwrap()
            .claimed
    );
    complete_effect(
        &mut owner_conn,
        open,
        Outcome::Failed { retryable: true },
        &Completion {
            reason: Some("declined for now".into()),
            ..Completion::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        raw_begin(&mut stranger_conn, open, "invoice:INV-41", "agent-b").await,
        ("refused".to_string(), None, None, None)
    );
    assert_eq!(state_of(pool, open).await.0, "failed");
    assert_eq!(
        begin_effect(&mut owner_conn, &intent(open, "invoice:INV-41", "agent-a"))
            .await
            .unwrap()
            .decision,
        Decision::Retry
    );

    // Pruned, the key keeps its owner: the tombstone answers as the effect did.
    let pruned: i64 = sqlx::query_scalar(
        "select effects from ledger.prune_settled(interval '0', 'ops', 'issue 40',
            only_ids => array[(select id from ledger.effects where op_key = $1)])",
    )
    .bind(key)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(pruned, 1);
    let kept: Option<String> =
        sqlx::query_scalar("select owner_role from ledger.key_tombstones where op_key = $1")
            .bind(key)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(kept.as_deref(), Some(owner.name.as_str()));
    assert_eq!(
        raw_begin(&mut stranger_conn, key, target, "agent-b").await,
        ("refused".to_string(), None, None, None)
    );
    for (conn, name) in [
        (&mut colleague_conn, "agent-c"),
        (&mut owner_conn, "agent-a"),
    ] {
        let begun = begin_effect(&mut *conn, &intent(key, target, name))
            .await
            .unwrap();
        assert_eq!(
            (begun.decision, begun.result.as_ref()),
            (Decision::Replay, Some(&stored)),
            "{name}, after the prune"
        );
    }
    // A tombstone from before owners were kept answers no login but a
    // superuser's session; it still never proceeds.
    sqlx::query(
        "insert into ledger.key_tombstones (op_key, effect_id, material_hash, final_state, settled_at)
         select 'refund:OLD:v1', 1, ledger.material_hash(ledger.params_hash($1), 'refund', 'invoice:OLD', 1500, 'EUR', null),
                'succeeded', now()",
    )
    .bind(json!({"amount_minor": 1500, "currency": "EUR", "iban": "DE02 1203 0000 0000 2020 51"}))
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(
        raw_begin(&mut owner_conn, "refund:OLD:v1", "invoice:OLD", "agent-a")
            .await
            .0,
        "refused"
    );
    assert_eq!(
        begin_effect(pool, &intent("refund:OLD:v1", "invoice:OLD", "admin"))
            .await
            .unwrap()
            .decision,
        Decision::Replay
    );
}

#[tokio::test]
async fn invisible_characters_never_enter_a_key_action_or_target() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let hostile = [
        (
            "op_key",
            "hu-\u{200b}zero\u{200d}width\u{feff}-e",
            "invoice:1",
            "U+200B at 4",
        ),
        ("target", "plain-key", "invoice:\u{202e}1", "U+202E at 9"),
        ("op_key", "tag-\u{e0041}", "invoice:1", "U+E0041 at 5"),
        ("op_key", "esc-\u{1b}[2J", "invoice:1", "U+001B at 5"),
        ("op_key", "soft\u{ad}hyphen", "invoice:1", "U+00AD at 5"),
    ];
    for (field, key, target, expected) in hostile {
        let result = begin_effect(pool, &intent(key, target, "agent1")).await;
        match result {
            Err(LedgerError::Invalid(message)) => {
                assert!(
                    message.contains(&format!("{field} has {expected}")),
                    "{message}"
                );
                assert!(
                    !message.contains(key),
                    "the message never echoes the hidden character"
                );
            }
            other => panic!("{key:?}: expected a refusal, got {other:?}"),
        }
    }
    let action = Intent {
        action: "re\u{200c}fund".to_string(),
        ..intent("clean-key", "invoice:1", "agent1")
    };
    assert!(matches!(
        begin_effect(pool, &action).await,
        Err(LedgerError::Invalid(_))
    ));

    // No path around the API either: the table itself refuses them.
    let (code, message) = sqlstate(
        sqlx::query(
            "insert into ledger.effects (op_key, action, target, params_hash, requested_by, state, pending_window)
             values ('by-hand-' || chr(8205), 'refund', 'invoice:1', '', 'root', 'pending', '1 minute')",
        )
        .execute(pool)
        .await,
    );
    assert_eq!(code, "23514", "{message}");
    assert!(message.contains("effects_op_key_visible"), "{message}");
    // Visible text of every script is welcome.
    let begun = begin_effect(pool, &intent("réf:日本:Ωμέγα:🎉", "facture:№ 42", "agent1"))
        .await
        .unwrap();
    assert_eq!(begun.decision, Decision::Proceed);
}
