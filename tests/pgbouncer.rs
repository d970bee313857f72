//! Agents, commands and the console through a real PgBouncer in transaction
//! pooling mode: a server connection is a client's only for one transaction,
//! so nothing may lean on a statement prepared earlier or on a session.

mod common;

use std::time::Duration;

use common::pgbouncer::PgBouncer;
use effectwatch::console::app::{Message, Notifications};
use effectwatch::ledger::writer::{
    Completion, Outcome, begin_effect, complete_effect, heartbeat, mark_dispatched,
};
use effectwatch::ledger::{self, ConnectSettings, Decision, LedgerPool, Pooler};
use serde_json::json;

async fn through(bouncer: &PgBouncer, database: &str, max_connections: u32) -> LedgerPool {
    let mut settings = ConnectSettings::new(bouncer.url(database));
    settings.max_connections = max_connections;
    ledger::connect(&settings)
        .await
        .expect("connecting through pgbouncer")
}

fn database_of(url: &str) -> String {
    reqwest::Url::parse(url)
        .unwrap()
        .path()
        .trim_start_matches('/')
        .to_string()
}

#[tokio::test]
async fn the_writer_api_works_unchanged_through_transaction_pooling() {
    let db = common::test_db().await;
    let Some(bouncer) = PgBouncer::start(&db.url) else {
        return;
    };
    let pool = through(&bouncer, &database_of(&db.url), 8).await;
    assert_eq!(
        pool.pooler(),
        Pooler::Transaction,
        "the pooler was not recognised"
    );

    // The replay set, each call on whichever server connection PgBouncer hands out.
    for round in 0..3 {
        let key = format!("refund:INV-{round}:v1");
        let intent = common::intent(&key, &format!("invoice:INV-{round}"));
        assert_eq!(
            begin_effect(&pool, &intent).await.unwrap().decision,
            Decision::Proceed
        );
        assert!(
            mark_dispatched(&pool, &key, Some("req-1"), "agent-1")
                .await
                .unwrap()
                .claimed
        );
        let completion = Completion {
            external_ref: Some(format!("re_{round}")),
            ..Default::default()
        };
        let completed = complete_effect(&pool, &key, Outcome::Succeeded, &completion)
            .await
            .unwrap();
        assert!(completed.applied);
        let replay = begin_effect(&pool, &intent).await.unwrap();
        assert_eq!(replay.decision, Decision::Replay);
        let mut changed = intent.clone();
        changed.params = json!({"amount_minor": 9900, "currency": "EUR"});
        assert_eq!(
            begin_effect(&pool, &changed).await.unwrap().decision,
            Decision::Rejected
        );
    }
    let in_flight = common::intent("refund:INV-open:v1", "invoice:INV-open");
    assert_eq!(
        begin_effect(&pool, &in_flight).await.unwrap().decision,
        Decision::Proceed
    );
    mark_dispatched(&pool, &in_flight.op_key, None, "agent-1")
        .await
        .unwrap();
    assert_eq!(
        begin_effect(&pool, &in_flight).await.unwrap().decision,
        Decision::InFlight
    );
    // Heartbeats, each on whichever server connection is free: the lease
    // moves, and ends with the call.
    let lease = Duration::from_secs(5);
    let mut lease_ends = Vec::new();
    for _ in 0..4 {
        let beat = heartbeat(&pool, &in_flight.op_key, lease, "agent-1")
            .await
            .unwrap();
        assert!(beat.alive, "{beat:?}");
        lease_ends.push(beat.lease_until.unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        lease_ends.windows(2).all(|pair| pair[0] < pair[1]),
        "{lease_ends:?}"
    );
    complete_effect(
        &pool,
        &in_flight.op_key,
        Outcome::Succeeded,
        &Completion::default(),
    )
    .await
    .unwrap();
    assert!(
        !heartbeat(&pool, &in_flight.op_key, lease, "agent-1")
            .await
            .unwrap()
            .alive
    );
}

#[tokio::test]
async fn thirty_two_callers_with_one_key_through_pgbouncer_get_one_proceed_and_no_error() {
    let db = common::test_db().await;
    let Some(bouncer) = PgBouncer::start(&db.url) else {
        return;
    };
    // More callers than PgBouncer has server connections (8): they queue there.
    let pool = through(&bouncer, &database_of(&db.url), 32).await;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(32));
    let callers: Vec<_> = (0..32)
        .map(|_| {
            let pool = pool.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                let intent = common::intent("refund:INV-32:v1", "invoice:INV-32");
                barrier.wait().await;
                begin_effect(&pool, &intent).await
            })
        })
        .collect();
    let mut proceeds = 0;
    let mut errors = Vec::new();
    for caller in callers {
        match caller.await.unwrap() {
            Ok(begun) if begun.decision == Decision::Proceed => proceeds += 1,
            Ok(begun) => assert_eq!(begun.decision, Decision::InFlight),
            Err(error) => errors.push(error.to_string()),
        }
    }
    assert!(
        errors.is_empty(),
        "calls failed through pgbouncer: {errors:?}"
    );
    assert_eq!(proceeds, 1);
    let rows: i64 = sqlx::query_scalar("select count(*) from ledger.effects")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 1);
}

#[tokio::test]
async fn every_command_works_through_pgbouncer_and_migrate_says_it_needs_the_server() {
    let db = common::test_db().await;
    let Some(bouncer) = PgBouncer::start(&db.url) else {
        return;
    };
    let intent = common::intent("refund:INV-7:v1", "invoice:INV-7");
    begin_effect(&db.pool, &intent).await.unwrap();
    mark_dispatched(&db.pool, &intent.op_key, None, "agent-1")
        .await
        .unwrap();
    let completion = Completion {
        error_class: Some(effectwatch::ledger::writer::ErrorClass::Timeout),
        ..Default::default()
    };
    complete_effect(&db.pool, &intent.op_key, Outcome::Unknown, &completion)
        .await
        .unwrap();

    let url = bouncer.url(&database_of(&db.url));
    let commands: [&[&str]; 6] = [
        &["list", "unknown"],
        &["show", "refund:INV-7:v1"],
        &["audit", "verify"],
        &[
            "annotate",
            "refund:INV-7:v1",
            "--reason",
            "asked the provider by phone",
        ],
        &["finance"],
        &["check"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.extend(["--database-url", &url, "--operator", "ops-1"]);
        let output = common::effectwatch_cli(&args);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !stderr.contains("prepared statement") && !stdout.contains("cannot tell"),
            "{command:?} through pgbouncer: {stdout}{stderr}"
        );
        // check answers WARNING or CRITICAL for the unknown effect: still an answer.
        let answered = if command[0] == "check" {
            matches!(output.status.code(), Some(0..=2))
        } else {
            output.status.success()
        };
        assert!(answered, "{command:?} through pgbouncer: {stdout}{stderr}");
    }
    let noted: i64 = sqlx::query_scalar(
        "select count(*) from ledger.audit_log where action = 'annotate' and operator = 'ops-1'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(noted, 1, "the note did not land through pgbouncer");

    let migrate = common::effectwatch_cli(&["migrate", "--database-url", &url]);
    let stderr = String::from_utf8_lossy(&migrate.stderr);
    assert!(!migrate.status.success());
    assert!(
        stderr.contains("not through the transaction pooler") && stderr.trim().lines().count() == 1,
        "{stderr}"
    );
}

#[tokio::test]
async fn a_console_behind_transaction_pooling_says_notifications_do_not_arrive_and_polls() {
    let db = common::test_db().await;
    let Some(bouncer) = PgBouncer::start(&db.url) else {
        return;
    };
    let direct = heard(ConnectSettings::new(db.url.clone())).await;
    assert_eq!(direct, Notifications::Arriving);
    let pooled = heard(ConnectSettings::new(bouncer.url(&database_of(&db.url)))).await;
    assert_eq!(pooled, Notifications::Lost);
}

/// What the console's poller ends up saying about notifications, within 60 s: under a loaded
/// machine a listener's first tries may fail and back off (250 ms doubling), and reconnecting
/// is only the state on the way to an answer.
async fn heard(connect: ConnectSettings) -> Notifications {
    let (_settings_tx, settings_rx) =
        tokio::sync::watch::channel(common::live_poll_settings(Duration::from_millis(200)));
    let (messages_tx, mut messages) = tokio::sync::mpsc::channel(16);
    let poller = effectwatch::console::poller::spawn(connect, settings_rx, messages_tx);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut last = Notifications::Reconnecting;
    while let Ok(Some(message)) = tokio::time::timeout_at(deadline, messages.recv()).await {
        if let Message::Snapshot(snapshot) = message {
            last = snapshot.notifications;
            if last != Notifications::Reconnecting {
                break;
            }
        }
    }
    poller.abort();
    last
}

#[tokio::test]
async fn a_pooler_told_to_drop_the_startup_options_is_still_recognised() {
    let db = common::test_db().await;
    // Common advice for clients that send options: drop them silently. The
    // statement timeout then never arrives, and named statements collide.
    let Some(bouncer) = PgBouncer::start_with(&db.url, "ignore_startup_parameters = options")
    else {
        return;
    };
    let pool = through(&bouncer, &database_of(&db.url), 4).await;
    assert_eq!(pool.pooler(), Pooler::Transaction);
    let timeout: String = sqlx::query_scalar("select current_setting('statement_timeout')")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(timeout, "10s", "the timeout is set per transaction instead");
    let intent = common::intent("refund:OPT:v1", "invoice:OPT");
    assert_eq!(
        begin_effect(&pool, &intent).await.unwrap().decision,
        Decision::Proceed
    );
    assert_eq!(
        begin_effect(&pool, &intent).await.unwrap().decision,
        Decision::InFlight
    );
}

/// Clients of the pooler that are not effectwatch, as psql is: one simple
/// query after another on their own connections, until told to stop.
fn busy_clients(
    url: &str,
    count: usize,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<u64>> {
    use sqlx::Connection;
    use std::str::FromStr;
    let options = sqlx::postgres::PgConnectOptions::from_str(url)
        .unwrap()
        .extra_float_digits(None)
        .statement_cache_capacity(0);
    (0..count)
        .map(|_| {
            let options = options.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut connection = sqlx::PgConnection::connect_with(&options).await.unwrap();
                let mut statements = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    sqlx::raw_sql("select count(*) from ledger.effects")
                        .execute(&mut connection)
                        .await
                        .unwrap();
                    statements += 1;
                }
                statements
            })
        })
        .collect()
}

#[tokio::test]
async fn thirty_two_commands_beside_twelve_busy_clients_of_the_pooler_all_succeed() {
    let db = common::test_db().await;
    let Some(bouncer) = PgBouncer::start(&db.url) else {
        return;
    };
    let intent = common::intent("refund:INV-9:v1", "invoice:INV-9");
    begin_effect(&db.pool, &intent).await.unwrap();
    let url = bouncer.url(&database_of(&db.url));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let others = busy_clients(&url, 12, &stop);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let home = tempfile::tempdir().unwrap();
    let commands: Vec<std::process::Child> = (0..32)
        .map(|i| {
            let command: &[&str] = if i % 2 == 0 {
                &["list", "overdue"]
            } else {
                &["show", "refund:INV-9:v1"]
            };
            std::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"))
                .args(command)
                .args(["--database-url", &url, "--operator", "ops-1"])
                .env("XDG_CONFIG_HOME", home.path())
                .env("HOME", home.path())
                .env_remove("DATABASE_URL")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<_> = tokio::task::spawn_blocking(move || {
        commands
            .into_iter()
            .map(|child| child.wait_with_output().unwrap())
            .collect()
    })
    .await
    .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut statements = 0;
    for other in others {
        statements += other.await.unwrap();
    }
    assert!(statements > 0, "the other clients ran nothing");
    let failures: Vec<String> = outputs
        .iter()
        .filter(|output| !output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stderr).trim().to_string())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of 32 commands failed beside 12 busy clients ({statements} statements): {failures:?}",
        failures.len()
    );
}
