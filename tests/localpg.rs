//! The private PostgreSQL cluster (`effectwatch::localpg`) and the test harness built on it.

mod common;

use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use effectwatch::localpg::{ClusterOptions, LocalCluster};
use sqlx::{Connection, PgConnection};

async fn connect(cluster: &LocalCluster) -> PgConnection {
    PgConnection::connect(&cluster.url("postgres"))
        .await
        .expect("connect to the local cluster")
}

#[tokio::test]
async fn temporary_cluster_starts_answers_and_leaves_nothing_behind() {
    let started = Instant::now();
    let cluster = LocalCluster::start(ClusterOptions {
        fast_unsafe: true,
        ..ClusterOptions::default()
    })
    .expect("start a cluster");
    eprintln!("temporary cluster started in {:?}", started.elapsed());
    let port = cluster.port();
    assert_ne!(port, 0);
    assert_eq!(
        cluster.url("somedb"),
        format!("postgres://postgres@127.0.0.1:{port}/somedb")
    );

    let mut conn = connect(&cluster).await;
    let one: i32 = sqlx::query_scalar("select 1")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(one, 1);
    let data_directory: String = sqlx::query_scalar("show data_directory")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let fsync: String = sqlx::query_scalar("show fsync")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(fsync, "off");
    let max_connections: String = sqlx::query_scalar("show max_connections")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(max_connections, "200");
    conn.close().await.unwrap();

    let folder = PathBuf::from(data_directory)
        .parent()
        .expect("data directory sits in the cluster folder")
        .to_path_buf();
    assert!(folder.is_dir(), "{} should exist", folder.display());

    let stopping = Instant::now();
    cluster.stop().expect("stop the cluster");
    eprintln!("temporary cluster stopped in {:?}", stopping.elapsed());
    assert!(
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).is_err(),
        "port {port} still accepts connections after stop"
    );
    assert!(!folder.exists(), "{} should be removed", folder.display());
}

#[tokio::test]
async fn dropping_a_temporary_cluster_stops_it() {
    let cluster = LocalCluster::start(ClusterOptions::default()).expect("start a cluster");
    let port = cluster.port();
    drop(cluster);
    assert!(
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).is_err(),
        "port {port} still accepts connections after drop"
    );
}

#[tokio::test]
async fn watchdog_stops_a_never_dropped_cluster_when_the_process_exits() {
    let cluster = LocalCluster::start(ClusterOptions {
        fast_unsafe: true,
        ..ClusterOptions::default()
    })
    .expect("start a cluster");
    let port = cluster.port();
    let mut conn = connect(&cluster).await;
    let data_directory: String = sqlx::query_scalar("show data_directory")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let folder = PathBuf::from(data_directory)
        .parent()
        .unwrap()
        .to_path_buf();

    // Stand-in for the test process: a short-lived child.
    let mut owner = std::process::Command::new("sleep")
        .arg("0.3")
        .spawn()
        .unwrap();
    cluster.stop_when_process_exits(owner.id()).unwrap();
    std::mem::forget(cluster);
    owner.wait().unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    while folder.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!folder.exists(), "{} should be removed", folder.display());
    assert!(
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).is_err(),
        "port {port} still accepts connections"
    );
}

#[tokio::test]
async fn cluster_in_a_given_folder_is_resumed() {
    let parent = tempfile::tempdir().unwrap();
    // When we run as root the server runs as `postgres`, which must be able to reach the folder.
    std::fs::set_permissions(
        parent.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let folder = parent.path().join("cluster");
    let options = || ClusterOptions {
        data_dir: Some(folder.clone()),
        ..ClusterOptions::default()
    };

    let cluster = LocalCluster::start(options()).expect("first start");
    let mut conn = connect(&cluster).await;
    sqlx::raw_sql("create table kept (v text); insert into kept values ('still here')")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    cluster.stop().expect("first stop");
    assert!(folder.join("data").is_dir(), "a given folder is kept");

    let started = Instant::now();
    let cluster = LocalCluster::start(options()).expect("second start");
    eprintln!("existing cluster resumed in {:?}", started.elapsed());
    let mut conn = connect(&cluster).await;
    let v: String = sqlx::query_scalar("select v from kept")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(v, "still here");
    conn.close().await.unwrap();
    cluster.stop().expect("second stop");
    assert!(folder.join("data").is_dir(), "a given folder is kept");
}

#[tokio::test]
async fn server_left_running_in_a_given_folder_is_replaced() {
    let parent = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        parent.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let folder = parent.path().join("cluster");
    let options = || ClusterOptions {
        data_dir: Some(folder.clone()),
        fast_unsafe: true,
        ..ClusterOptions::default()
    };

    // A run that died without stopping its server (killed, or aborted).
    let leftover = LocalCluster::start(options()).expect("first start");
    let leftover_port = leftover.port();
    std::mem::forget(leftover);

    let cluster = LocalCluster::start(options()).expect("start over a leftover server");
    let mut conn = connect(&cluster).await;
    let one: i32 = sqlx::query_scalar("select 1")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(one, 1);
    conn.close().await.unwrap();
    if cluster.port() != leftover_port {
        assert!(
            TcpStream::connect_timeout(
                &([127, 0, 0, 1], leftover_port).into(),
                Duration::from_secs(1)
            )
            .is_err(),
            "the leftover server on port {leftover_port} should be stopped"
        );
    }
    cluster.stop().expect("stop");
}

#[tokio::test]
async fn cluster_on_a_taken_port_fails_with_the_server_log() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let err = LocalCluster::start(ClusterOptions {
        port: Some(port),
        ..ClusterOptions::default()
    })
    .expect_err("the port is taken");
    let message = err.to_string();
    assert!(
        message.contains("Address already in use"),
        "error should carry the server log: {message}"
    );
}

/// Names of the databases the two harness tests below got; the second to finish compares them.
static HARNESS_DATABASES: Mutex<Vec<String>> = Mutex::new(Vec::new());

async fn check_harness_database() {
    let db = common::test_db().await;
    let (name, application): (String, String) =
        sqlx::query_as("select current_database(), current_setting('application_name')")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(name.starts_with("ew_test_"), "{name}");
    assert_eq!(application, "effectwatch-test");
    assert!(db.url.ends_with(&format!("/{name}")), "{}", db.url);

    // The migration bookkeeping is there, so migrations ran.
    let migrations_table: Option<String> =
        sqlx::query_scalar("select to_regclass('_sqlx_migrations')::text")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(migrations_table.is_some());

    let mut conn = db.connect().await;
    let same: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(same, name);
    conn.close().await.unwrap();
    let pool = db.pool_with(2).await;
    let same: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(same, name);
    pool.close().await;

    let mut seen = HARNESS_DATABASES.lock().unwrap();
    seen.push(name);
    if let [first, second] = seen.as_slice() {
        assert_ne!(first, second, "two tests got the same database");
    }
}

#[tokio::test]
async fn harness_gives_each_test_its_own_database_a() {
    check_harness_database().await;
}

#[tokio::test]
async fn harness_gives_each_test_its_own_database_b() {
    check_harness_database().await;
}

#[tokio::test]
async fn harness_drops_the_database_with_the_test_db() {
    let db = common::test_db().await;
    let name: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    drop(db);

    let other = common::test_db().await;
    let still_there: bool =
        sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
            .bind(&name)
            .fetch_one(&other.pool)
            .await
            .unwrap();
    assert!(!still_there, "{name} should have been dropped");
}
