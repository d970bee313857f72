//! `effectwatch check` as Nagios, Icinga, Sensu and cron run it: the real
//! binary, its exit code in the monitoring-plugin convention (0 OK,
//! 1 WARNING, 2 CRITICAL, 3 UNKNOWN) and its one line with performance
//! data, JSON or Prometheus output.

mod common;

use std::process::{Command, Output};

use effectwatch::ledger::writer::{
    Completion, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use serde_json::{Value, json};

/// A check judged by the thresholds given alone, so what it prints is
/// exactly what the flags say.
fn check(url: &str, args: &[&str]) -> Output {
    common::effectwatch_cli(
        &[
            &["check", "--no-default-thresholds"],
            args,
            &["--database-url", url],
        ]
        .concat(),
    )
}

/// A check as a monitoring system runs it out of the box.
fn check_with_defaults(url: &str, args: &[&str]) -> Output {
    common::effectwatch_cli(&[&["check"], args, &["--database-url", url]].concat())
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[tokio::test]
async fn exit_codes_and_the_status_line_follow_the_monitoring_plugin_convention() {
    let db = common::test_db().await;

    let ok = check(&db.url, &["--warn-overdue", "0", "--crit-unknown", "0"]);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(
        stdout(&ok),
        "EFFECTWATCH OK - overdue 0, unknown 0, duplicates 0, replays 0, held 0, escalations 0, approvals 0 \
         | overdue=0;0; unknown=0;;0 duplicates=0 replays=0 held=0 escalations=0 approvals=0 \
         oldest_overdue=0s oldest_unknown=0s oldest_held=0s oldest_escalations=0s weak_triggers=0;;0 \
         steps_owed=0 unowned_work=0;0\n"
    );

    // One effect whose outcome nobody knows.
    let intent = Intent {
        op_key: "refund:INV-1:v1".into(),
        action: "refund".into(),
        target: "invoice:INV-1".into(),
        params: json!({"amount_minor": 1500}),
        requested_by: "agent-1".into(),
        amount_minor: Some(1500),
        currency: Some("EUR".into()),
        ..Intent::default()
    };
    begin_effect(&db.pool, &intent).await.unwrap();
    mark_dispatched(&db.pool, &intent.op_key, None, "w")
        .await
        .unwrap();
    complete_effect(
        &db.pool,
        &intent.op_key,
        Outcome::Unknown,
        &Completion::default(),
    )
    .await
    .unwrap();

    let critical = check(&db.url, &["--warn-unknown", "0", "--crit-unknown", "0"]);
    assert_eq!(critical.status.code(), Some(2));
    let line = stdout(&critical);
    assert_eq!(line.lines().count(), 1);
    // Said once: a cron mail does not get the verdict twice.
    assert_eq!(String::from_utf8_lossy(&critical.stderr), "");
    assert!(
        line.starts_with("EFFECTWATCH CRITICAL - unknown 1 > 0 | overdue=0 unknown=1;0;0 "),
        "{line}"
    );

    // Above the warning limit, within the critical one.
    let warning = check(&db.url, &["--warn-unknown", "0", "--crit-unknown", "5"]);
    assert_eq!(warning.status.code(), Some(1));
    assert!(
        stdout(&warning)
            .starts_with("EFFECTWATCH WARNING - unknown 1 > 0 | overdue=0 unknown=1;0;5 "),
        "{}",
        stdout(&warning)
    );

    // The worst figure decides; a lesser one is still named, marked as such.
    let mixed = check(&db.url, &["--warn-age", "0s", "--crit-unknown", "0"]);
    assert_eq!(mixed.status.code(), Some(2));
    let line = stdout(&mixed);
    assert!(
        line.starts_with("EFFECTWATCH CRITICAL - unknown 1 > 0; oldest unknown "),
        "{line}"
    );
    assert!(line.contains(" > 0s (warning) |"), "{line}");
    let age: f64 = line
        .split_whitespace()
        .find_map(|field| field.strip_prefix("oldest_unknown="))
        .and_then(|figure| figure.split('s').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(age > 0.0, "{line}");

    // The older --max-… names still mean critical.
    let within = check(&db.url, &["--max-unknown", "1", "--max-age", "1h"]);
    assert_eq!(within.status.code(), Some(0));
    let aged = check(&db.url, &["--max-age", "0s"]);
    assert_eq!(aged.status.code(), Some(2));
    assert!(
        stdout(&aged).starts_with("EFFECTWATCH CRITICAL - oldest unknown "),
        "{}",
        stdout(&aged)
    );

    let json_out = check(
        &db.url,
        &[
            "--max-unknown",
            "0",
            "--max-suspected",
            "0",
            "--format",
            "json",
        ],
    );
    assert_eq!(json_out.status.code(), Some(2));
    let verdict: Value = serde_json::from_str(&stdout(&json_out)).unwrap();
    assert_eq!(verdict["status"], "critical");
    assert_eq!(
        verdict["breaches"],
        json!([{"what": "unknown", "value": 1, "limit": 0, "unit": "items", "level": "critical"}])
    );
    assert_eq!(verdict["health"]["suspected"], 0);
    let panes: Vec<(&str, i64)> = verdict["health"]["panes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["pane"].as_str().unwrap(), p["items"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        panes,
        [
            ("overdue", 0),
            ("unknown", 1),
            ("duplicates", 0),
            ("replays", 0),
            ("held", 0),
            ("escalations", 0),
            ("approvals", 0)
        ]
    );

    let prometheus = check(&db.url, &["--format", "prometheus"]);
    assert_eq!(prometheus.status.code(), Some(0));
    let text = stdout(&prometheus);
    for line in [
        "# TYPE effectwatch_up gauge",
        "effectwatch_up 1",
        "# TYPE effectwatch_pane_items gauge",
        "effectwatch_pane_items{pane=\"unknown\"} 1",
        "effectwatch_pane_items{pane=\"overdue\"} 0",
        "effectwatch_pane_oldest_seconds{pane=\"overdue\"} 0",
        "effectwatch_check_thresholds_exceeded 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    let unknown_age: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("effectwatch_pane_oldest_seconds{pane=\"unknown\"} "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(unknown_age > 0.0);
}

#[test]
fn an_unreachable_database_is_unknown_never_ok_or_critical() {
    let unreachable = "postgres://postgres@127.0.0.1:1/ledger";
    let text = check(unreachable, &["--max-unknown", "0", "--timeout", "2"]);
    assert_eq!(text.status.code(), Some(3));
    let line = stdout(&text);
    assert!(
        line.starts_with("EFFECTWATCH UNKNOWN - cannot tell: cannot reach the database"),
        "{line}"
    );
    assert_eq!(line.lines().count(), 1);
    assert_eq!(String::from_utf8_lossy(&text.stderr), "");

    let json_out = check(unreachable, &["--format", "json"]);
    assert_eq!(json_out.status.code(), Some(3));
    let verdict: Value = serde_json::from_str(&stdout(&json_out)).unwrap();
    assert_eq!(verdict["status"], "unknown");
    assert!(verdict["error"].as_str().unwrap().contains("cannot reach"));

    let prometheus = check(unreachable, &["--format", "prometheus"]);
    assert_eq!(prometheus.status.code(), Some(3));
    assert_eq!(
        stdout(&prometheus),
        "# HELP effectwatch_up Whether the ledger could be read (1) or not (0).\n# TYPE effectwatch_up gauge\neffectwatch_up 0\n"
    );

    // A URL that is not one, and no URL at all, are UNKNOWN too.
    assert_eq!(check("not a url", &[]).status.code(), Some(3));
    let home = tempfile::tempdir().unwrap();
    let no_url = Command::new(env!("CARGO_BIN_EXE_effectwatch"))
        .arg("check")
        .env("XDG_CONFIG_HOME", home.path())
        .env("HOME", home.path())
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert_eq!(no_url.status.code(), Some(3));
}

/// Without a flag a check still judges: an unknown-outcome pane of eleven
/// is a warning by default, and a figure given replaces its default.
#[tokio::test]
async fn a_check_with_no_thresholds_given_judges_by_the_defaults() {
    let db = common::test_db().await;
    let quiet = check_with_defaults(&db.url, &[]);
    assert_eq!(quiet.status.code(), Some(0), "{}", stdout(&quiet));
    assert!(
        stdout(&quiet).contains("unknown=0;10;50"),
        "{}",
        stdout(&quiet)
    );
    for n in 0..11 {
        let key = format!("refund:DEF-{n}");
        let intent = Intent {
            op_key: key.clone(),
            action: "refund".into(),
            target: format!("invoice:DEF-{n}"),
            params: json!({}),
            requested_by: "agent-1".into(),
            ..Intent::default()
        };
        begin_effect(&db.pool, &intent).await.unwrap();
        mark_dispatched(&db.pool, &key, None, "w").await.unwrap();
        complete_effect(&db.pool, &key, Outcome::Unknown, &Completion::default())
            .await
            .unwrap();
    }
    let warned = check_with_defaults(&db.url, &[]);
    assert_eq!(warned.status.code(), Some(1), "{}", stdout(&warned));
    assert!(
        stdout(&warned).contains("unknown 11 > 10"),
        "{}",
        stdout(&warned)
    );
    let given = check_with_defaults(&db.url, &["--warn-unknown", "20"]);
    assert_eq!(given.status.code(), Some(0), "{}", stdout(&given));
    let none = check_with_defaults(&db.url, &["--no-default-thresholds"]);
    assert_eq!(none.status.code(), Some(0), "{}", stdout(&none));
}
