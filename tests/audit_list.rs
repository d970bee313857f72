//! `effectwatch audit list`: the entries of a range, oldest first, narrowed
//! by operator and key, as a table, JSON or CSV, through the real binary.

mod common;

use effectwatch::ledger::actions::{self, SeenVersion};
use effectwatch::ledger::writer::begin_effect;
use serde_json::Value;

fn effectwatch(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let output = common::effectwatch_cli(&[&["--database-url", url], args].concat());
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[tokio::test]
async fn audit_list_reads_a_range_by_operator_and_key_in_every_format() {
    let db = common::test_db().await;
    for (key, operator) in [("refund:A:v1", "alice"), ("refund:B:v1", "bob")] {
        begin_effect(&db.pool, &common::intent(key, &format!("invoice:{key}")))
            .await
            .unwrap();
        actions::ANNOTATE
            .call(
                &db.pool,
                key,
                SeenVersion(1),
                operator,
                "called the customer",
            )
            .await
            .unwrap();
        actions::CANCEL
            .call(&db.pool, key, SeenVersion(1), operator, "customer withdrew")
            .await
            .unwrap();
    }

    let (code, json, stderr) = effectwatch(&db.url, &["audit", "list", "--format", "json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let entries: Value = serde_json::from_str(&json).unwrap();
    let read: Vec<(&str, &str, &str)> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["operator"].as_str().unwrap(),
                e["action"].as_str().unwrap(),
                e["target"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        read,
        [
            ("alice", "annotate", "invoice:refund:A:v1"),
            ("alice", "cancel", "invoice:refund:A:v1"),
            ("bob", "annotate", "invoice:refund:B:v1"),
            ("bob", "cancel", "invoice:refund:B:v1")
        ],
        "oldest first, each with its effect's target"
    );

    // --operator narrows to that name; the config's own operator would not.
    let (code, csv, _) = effectwatch(
        &db.url,
        &["--operator", "bob", "audit", "list", "--format", "csv"],
    );
    assert_eq!(code, Some(0));
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(lines[0].starts_with("seq,at,operator,db_role,action,op_key,target,reason,changed"));
    assert!(
        lines[2].contains(",bob,")
            && lines[2].contains("/state: \"\"pending\"\" → \"\"cancelled\"\""),
        "{csv}"
    );

    let (code, table, _) = effectwatch(&db.url, &["audit", "list", "--key", "refund:A:v1"]);
    assert_eq!(code, Some(0));
    assert!(table.contains("called the customer"), "{table}");
    assert!(!table.contains("refund:B:v1"), "{table}");

    // A range with nothing in it says so; a range that ends before it starts is refused.
    let (code, empty, _) = effectwatch(&db.url, &["audit", "list", "--until", "2000-01-01"]);
    assert_eq!(
        (code, empty.as_str()),
        (Some(0), "no audit entries in that range\n")
    );
    let (code, _, refused) = effectwatch(
        &db.url,
        &["audit", "list", "--since", "1h", "--until", "2h"],
    );
    assert_eq!(code, Some(2));
    assert!(
        refused.contains("--until must be after --since"),
        "{refused}"
    );
}
