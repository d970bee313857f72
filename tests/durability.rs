//! `effectwatch check --durability` against a real primary and a real
//! streaming standby (`pg_basebackup -R`), both started here: whether a
//! write the ledger acknowledged survives a failover, as the settings and
//! the connected standbys say.

mod common;

/// The durability line of `effectwatch config` on that database.
fn config_line(url: &str) -> String {
    let output = common::effectwatch_cli(&["config", "--database-url", url]);
    let text = String::from_utf8(output.stdout).unwrap();
    text.lines()
        .find(|line| line.starts_with("durability:"))
        .unwrap_or_else(|| panic!("no durability line in\n{text}"))
        .to_string()
}

fn check(url: &str) -> (Option<i32>, String) {
    let output = common::effectwatch_cli(&["check", "--durability", "--database-url", url]);
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
    )
}

#[tokio::test]
async fn check_durability_says_whether_acknowledged_writes_survive_a_failover() {
    let Some((primary, url)) = common::primary_with_ledger().await else {
        return;
    };

    let (code, line) = check(&url);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.starts_with("EFFECTWATCH WARNING - not failover-safe: no standby"),
        "{line}"
    );

    let standby = primary.start_standby("standby1").unwrap();
    common::wait_for_standby(&url, "standby1", "async").await;
    let (code, line) = check(&url);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.contains("asynchronous replication to 1 standby(s)"),
        "{line}"
    );
    assert!(line.contains("synchronous_standbys=0;1:;1:"), "{line}");

    common::make_synchronous(&url, "standby1").await;
    let (code, line) = check(&url);
    assert_eq!(code, Some(0), "{line}");
    assert!(
        line.contains("failover-safe: acknowledged writes are on 1 synchronous standby(s)"),
        "{line}"
    );
    assert!(line.contains("synchronous_standbys=1;1:;1:"), "{line}");
    assert!(
        config_line(&url).starts_with("durability:       failover-safe: acknowledged writes"),
        "{}",
        config_line(&url)
    );

    // The standby answers too, and says whose settings count.
    let (code, line) = check(&standby.url("ledger"));
    assert_eq!(code, Some(1), "{line}");
    assert!(line.contains("connected to a standby"), "{line}");

    // An agent login that turns synchronous commit off for itself.
    common::execute(&url, "create role agents login").await;
    common::execute(&url, "alter role agents set synchronous_commit = off").await;
    let (code, line) = check(&url);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.contains("login(s) agents set synchronous_commit off"),
        "{line}"
    );

    // Off for the whole database: a crash alone loses what was acknowledged.
    common::execute(&url, "alter database ledger set synchronous_commit = off").await;
    let (code, line) = check(&url);
    assert_eq!(code, Some(2), "{line}");
    assert!(line.contains("synchronous_commit is off"), "{line}");

    standby.stop().unwrap();
    primary.stop().unwrap();
}
