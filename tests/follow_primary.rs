//! Following the primary: a URL with several hosts (libpq's
//! `postgres://h1:p1,h2:p2/db`) gives a pool that uses whichever is the
//! primary, and keeps following it when a standby is promoted, so the
//! console, a settler and the reconciler, each holding one pool for its
//! whole life, carry on after a failover and say where they are now.

mod common;

use std::time::{Duration, Instant};

use effectwatch::console::app::Message;
use effectwatch::console::poller;
use effectwatch::ledger::writer::begin_effect;
use effectwatch::ledger::{self, ConnectSettings, Decision};

fn host_list(ports: &[u16]) -> String {
    let hosts: Vec<String> = ports
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    format!("postgres://postgres@{}/ledger", hosts.join(","))
}

#[tokio::test]
async fn one_pool_and_a_console_follow_the_primary_to_the_promoted_standby() {
    let Some((mut primary, url)) = common::primary_with_ledger().await else {
        return;
    };
    let standby = primary.start_standby("follower").unwrap();
    // Synchronous: what the primary acknowledged is on the standby when it dies.
    common::make_synchronous(&url, "follower").await;
    let primary_server = format!("127.0.0.1:{}/ledger", primary.port());
    let standby_server = format!("127.0.0.1:{}/ledger", standby.port());

    // The standby is listed first: the pool must pass it over for the primary.
    let mut settings = ConnectSettings::new(host_list(&[standby.port(), primary.port()]));
    settings.connect_timeout = Duration::from_secs(2);
    let pool = ledger::connect(&settings).await.unwrap();
    assert!(pool.follows());
    assert_eq!(pool.server(), primary_server);
    let before = common::intent("refund:F-1:v1", "invoice:F-1");
    assert_eq!(
        begin_effect(&pool, &before).await.unwrap().decision,
        Decision::Proceed
    );

    let (_settings_sender, settings_receiver) =
        tokio::sync::watch::channel(common::live_poll_settings(Duration::from_millis(200)));
    let (sender, mut messages) = tokio::sync::mpsc::channel(64);
    let console = poller::spawn(settings.clone(), settings_receiver, sender);
    let first_read_from = loop {
        if let Some(Message::Snapshot(snapshot)) = messages.recv().await {
            break snapshot.server;
        }
    };
    assert_eq!(first_read_from.as_deref(), Some(primary_server.as_str()));

    primary.crash().unwrap();
    standby.promote().unwrap();

    // The same pool carries on: the calls that meet the dead primary fail,
    // and the next ones go to the promoted standby.
    let started = Instant::now();
    let after = common::intent("refund:F-2:v1", "invoice:F-2");
    let mut failures = 0;
    let decision = loop {
        match begin_effect(&pool, &after).await {
            Ok(begun) => break begun.decision,
            Err(_) => failures += 1,
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the pool never found the promoted standby ({failures} failed calls)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(decision, Decision::Proceed);
    assert_eq!(pool.server(), standby_server);
    assert_eq!(pool.switches(), 1);
    // What was acknowledged before the crash is there: the key is answered, not begun again.
    assert_ne!(
        begin_effect(&pool, &before).await.unwrap().decision,
        Decision::Proceed
    );

    // The console reads the new primary and its snapshot names it.
    let read_from = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the console never read the promoted standby"
        );
        match tokio::time::timeout(Duration::from_secs(5), messages.recv()).await {
            Ok(Some(Message::Snapshot(snapshot))) if snapshot.server != first_read_from => {
                break snapshot.server;
            }
            _ => {}
        }
    };
    assert_eq!(read_from.as_deref(), Some(standby_server.as_str()));
    console.abort();
}

#[tokio::test]
async fn no_primary_among_the_hosts_is_one_line_naming_each() {
    let Some((primary, url)) = common::primary_with_ledger().await else {
        return;
    };
    let standby = primary.start_standby("lonely").unwrap();
    common::wait_for_standby(&url, "lonely", "async").await;
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut settings = ConnectSettings::new(host_list(&[standby.port(), free]));
    settings.connect_timeout = Duration::from_secs(2);
    let error = ledger::connect(&settings).await.unwrap_err().to_string();
    assert!(error.contains("no primary among the hosts"), "{error}");
    assert!(
        error.contains(&format!("127.0.0.1:{}/ledger is a standby", standby.port())),
        "{error}"
    );
    assert!(
        error.contains(&format!("127.0.0.1:{free}/ledger")),
        "{error}"
    );
    assert_eq!(error.lines().count(), 1, "{error}");
    assert_eq!(
        error.matches("is the server running").count(),
        1,
        "the hint is said once: {error}"
    );
    // Any server will do when the URL says so.
    let mut any = ConnectSettings::new(format!(
        "{}?target_session_attrs=any",
        host_list(&[free, standby.port()])
    ));
    any.connect_timeout = Duration::from_secs(2);
    let pool = ledger::connect(&any).await.unwrap();
    assert_eq!(
        pool.server(),
        format!("127.0.0.1:{}/ledger", standby.port())
    );
}

/// What a writer meets while the primary moves — its connection ended by
/// the server's shutdown, or a server that now refuses writes as a standby
/// — is trouble reaching the primary, to try again, never a database error
/// about the call (the gateway told a model "could not record this call"
/// for the first, and nothing about trying again).
#[tokio::test]
async fn a_server_that_ends_the_connection_or_stops_taking_writes_is_out_of_reach() {
    use effectwatch::ledger::LedgerError;
    use sqlx::Connection;

    let db = common::test_db().await;
    let mut demoted = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("set default_transaction_read_only = on")
        .execute(&mut demoted)
        .await
        .unwrap();
    let refused = sqlx::query("create table written_on_a_standby (x int)")
        .execute(&mut demoted)
        .await
        .expect_err("a read-only server refuses a write");
    let sorted = LedgerError::from_sqlx(refused);
    assert!(matches!(sorted, LedgerError::NotPrimary(_)), "{sorted:?}");
    assert!(sorted.is_connection());
    assert!(
        sorted.to_string().contains("not taking writes now"),
        "{sorted}"
    );

    let mut ended = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let pid: i32 = sqlx::query_scalar("select pg_backend_pid()")
        .fetch_one(&mut ended)
        .await
        .unwrap();
    let terminated: bool = sqlx::query_scalar("select pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(terminated);
    let lost = sqlx::query("select 1")
        .execute(&mut ended)
        .await
        .expect_err("a connection the server ended");
    let sorted = LedgerError::from_sqlx(lost);
    assert!(sorted.is_connection(), "{sorted:?}");
}

/// A pooled connection idle for a second or more is asked whether its
/// server is still there before it is handed out, so one the server ended
/// meanwhile costs no call; one used within the second is handed out as it
/// is (asking every time was a round trip on every writer call), and a
/// call on it that meets a server gone is an error that says so.
#[tokio::test]
async fn a_connection_idle_a_second_is_asked_before_use_and_a_busy_one_is_not() {
    let db = common::test_db().await;
    let mut settings = ConnectSettings::new(db.url.clone());
    settings.max_connections = 1;
    let pool = ledger::connect(&settings).await.unwrap();
    let backend = || async {
        sqlx::query_scalar::<_, i32>("select pg_backend_pid()")
            .fetch_one(&pool)
            .await
    };
    let admin = &db.pool;
    let end = |pid: i32| async move {
        // Waits until it is gone, so the next call meets a closed connection.
        let ended: bool = sqlx::query_scalar("select pg_terminate_backend($1, 5000)")
            .bind(pid)
            .fetch_one(admin)
            .await
            .unwrap();
        assert!(ended);
    };

    let first = backend().await.unwrap();
    // The pool asks a connection as it takes it back (in a task of its
    // own): that is over before this one is ended, idle in the pool.
    tokio::time::sleep(Duration::from_millis(200)).await;
    end(first).await;
    let lost = backend()
        .await
        .expect_err("a connection used a moment ago is not asked first");
    assert!(
        ledger::LedgerError::from_sqlx(lost).is_connection(),
        "the error says the connection is gone"
    );

    let second = backend().await.unwrap();
    assert_ne!(second, first, "a new connection after the lost one");
    end(second).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let third = backend()
        .await
        .expect("a connection idle a second is asked, and replaced when its server ended it");
    assert_ne!(third, second);
}
