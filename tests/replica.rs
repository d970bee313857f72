//! Consoles and reports on a real streaming replica (`pg_basebackup -R`),
//! started here beside a primary of our own: what only reads goes to the
//! replica, every action to the primary; the console polls the replica
//! (it sends no notifications) and says how far behind it is.

mod common;

use std::time::{Duration, Instant};

use effectwatch::console::poller::{self, PollSettings};
use effectwatch::ledger::panes::{Filter, Pane};
use effectwatch::ledger::writer::{
    Completion, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{self, ConnectSettings};
use sqlx::{Connection, PgConnection};

/// Waits until the standby has replayed the effect `op_key` at `version`.
async fn replayed(url: &str, op_key: &str, version: i64) {
    let started = Instant::now();
    loop {
        let mut conn = PgConnection::connect(url).await.unwrap();
        let seen: Option<i64> =
            sqlx::query_scalar("select version from ledger.effects where op_key = $1")
                .bind(op_key)
                .fetch_optional(&mut conn)
                .await
                .unwrap_or(None);
        if seen == Some(version) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the standby never replayed {op_key} v{version} (saw {seen:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn reads_go_to_the_replica_actions_to_the_primary_and_the_console_says_how_far_behind() {
    let Some((primary, primary_url)) = common::primary_with_ledger().await else {
        return;
    };
    let standby = primary.start_standby("replica1").unwrap();
    let replica_url = standby.url("ledger");

    let pool = ledger::connect(&ConnectSettings::new(primary_url.clone()))
        .await
        .unwrap();
    let intent = common::intent("refund:R-1:v1", "invoice:R-1");
    begin_effect(&pool, &intent).await.unwrap();
    mark_dispatched(&pool, &intent.op_key, None, "w")
        .await
        .unwrap();
    complete_effect(
        &pool,
        &intent.op_key,
        Outcome::Unknown,
        &Completion::default(),
    )
    .await
    .unwrap();
    replayed(&replica_url, "refund:R-1:v1", 3).await;

    // The console's poll, on the replica: the pane, and how far behind it is.
    let settings = PollSettings {
        settled_actions: 0,
        filter: Filter::default(),
        paused: false,
        interval: Duration::from_secs(2),
        offsets: [0; 4],
        at: None,
    };
    let read = ledger::connect(&ConnectSettings::new(replica_url.clone()))
        .await
        .unwrap();
    let snapshot = poller::poll(&read, &settings).await.unwrap();
    let unknown = snapshot
        .panes
        .iter()
        .find(|(pane, _)| *pane == Pane::Unknown)
        .unwrap();
    assert_eq!(unknown.1.op_keys(), ["refund:R-1:v1"]);
    let lag = snapshot
        .replica_lag
        .expect("a standby says how far behind it is");
    assert!((0.0..30.0).contains(&lag), "{lag}");
    assert_eq!(
        snapshot.durability, None,
        "the primary's settings decide, not the standby's"
    );
    let on_primary = poller::poll(&pool, &settings).await.unwrap();
    assert_eq!(on_primary.replica_lag, None);

    // The CLI: list reads the replica; an action goes to the primary.
    let both = [
        "--database-url",
        primary_url.as_str(),
        "--read-url",
        replica_url.as_str(),
    ];
    let listed =
        common::effectwatch_cli(&[&both[..], &["list", "unknown", "--format", "json"]].concat());
    assert!(listed.status.success(), "{listed:?}");
    assert!(String::from_utf8_lossy(&listed.stdout).contains("refund:R-1:v1"));
    let annotated = common::effectwatch_cli(
        &[
            &both[..],
            &["annotate", "refund:R-1:v1", "--reason", "called the bank"],
        ]
        .concat(),
    );
    assert!(annotated.status.success(), "{annotated:?}");
    // The replica refuses writes: the action reached the primary.
    let on_replica_only = common::effectwatch_cli(&[
        "--database-url",
        &replica_url,
        "annotate",
        "refund:R-1:v1",
        "--reason",
        "from the replica",
    ]);
    assert!(!on_replica_only.status.success());
    assert!(
        String::from_utf8_lossy(&on_replica_only.stderr).contains("read-only"),
        "{on_replica_only:?}"
    );
    let notes: i64 =
        sqlx::query_scalar("select count(*) from ledger.audit_log where action = 'annotate'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(notes, 1);

    // A replica that stops replaying falls behind, and the lag grows.
    common::execute(&replica_url, "select pg_wal_replay_pause()").await;
    let second = common::intent("refund:R-2:v1", "invoice:R-2");
    begin_effect(&pool, &second).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let behind = poller::poll(&read, &settings).await.unwrap();
    assert!(
        behind.replica_lag.unwrap() >= 1.0,
        "paused replay: {:?}",
        behind.replica_lag
    );
    common::execute(&replica_url, "select pg_wal_replay_resume()").await;

    read.close().await;
    pool.close().await;
    standby.stop().unwrap();
    primary.stop().unwrap();
}

/// The lag a console polling `read` is shown.
async fn lag_shown(read: &ledger::LedgerPool) -> f64 {
    let settings = PollSettings {
        settled_actions: 0,
        filter: Filter::default(),
        paused: false,
        interval: Duration::from_secs(2),
        offsets: [0; 4],
        at: None,
    };
    let snapshot = poller::poll(read, &settings).await.unwrap();
    snapshot
        .replica_lag
        .expect("a standby says how far behind it is")
}

/// A standby whose WAL receiver can no longer reach the primary has
/// replayed all it received, so "received = replayed" called it 0.0 s
/// behind while it served ever older data. Its lag must grow from the last
/// word it had from the primary.
#[tokio::test]
async fn a_replica_whose_receiver_stopped_is_shown_falling_behind_not_current() {
    let Some((primary, primary_url)) = common::primary_with_ledger().await else {
        return;
    };
    let standby = primary.start_standby("replica2").unwrap();
    let replica_url = standby.url("ledger");
    let pool = ledger::connect(&ConnectSettings::new(primary_url.clone()))
        .await
        .unwrap();
    // A console's login: the receiver's details are hidden from it.
    common::execute(
        &primary_url,
        "create role replica_reader login in role effect_readonly",
    )
    .await;
    let first = common::intent("refund:S-1:v1", "invoice:S-1");
    begin_effect(&pool, &first).await.unwrap();
    replayed(&replica_url, "refund:S-1:v1", 1).await;
    let read = ledger::connect(&ConnectSettings::new(replica_url.clone()))
        .await
        .unwrap();
    let mut as_reader = reqwest::Url::parse(&replica_url).unwrap();
    as_reader.set_username("replica_reader").unwrap();
    let reader = ledger::connect(&ConnectSettings::new(as_reader.to_string()))
        .await
        .unwrap();
    let streaming = lag_shown(&read).await;
    assert!(streaming < 5.0, "a streaming standby: {streaming}");
    let streaming = lag_shown(&reader).await;
    assert!(
        streaming < 5.0,
        "a streaming standby, to a reader: {streaming}"
    );

    // The receiver loses the primary (a closed port), and keeps losing it.
    common::execute(
        &replica_url,
        "alter system set primary_conninfo = 'host=127.0.0.1 port=1 user=postgres connect_timeout=1'",
    )
    .await;
    common::execute(&replica_url, "select pg_reload_conf()").await;
    let started = Instant::now();
    loop {
        let mut conn = PgConnection::connect(&replica_url).await.unwrap();
        let receiving: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_wal_receiver where status = 'streaming'",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        if receiving == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the receiver kept streaming"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The primary moves on; the standby never hears of it.
    let second = common::intent("refund:S-2:v1", "invoice:S-2");
    begin_effect(&pool, &second).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let behind = lag_shown(&read).await;
    assert!(
        behind >= 2.0,
        "a standby that receives nothing is shown {behind} s behind"
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let later = lag_shown(&read).await;
    assert!(
        later >= behind + 1.0,
        "the lag does not grow: {behind} then {later}"
    );
    let to_reader = lag_shown(&reader).await;
    assert!(to_reader >= later, "to a reader: {to_reader}");

    reader.close().await;
    read.close().await;
    pool.close().await;
    standby.stop().unwrap();
    primary.stop().unwrap();
}
