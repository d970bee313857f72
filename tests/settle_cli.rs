//! The settling commands through the real binary: exit codes, JSON
//! output, read-only, stale versions, bulk confirmation, hostile keys.

mod common;
mod settle_support;

use std::process::Output;

use effectwatch::ledger::State;
use serde_json::Value;
use settle_support::Rig;

struct Cli {
    url: String,
    config: tempfile::NamedTempFile,
}

impl Cli {
    fn new(rig: &Rig) -> Cli {
        let config = tempfile::NamedTempFile::new().unwrap();
        let text = format!(
            "{}\n[sinks.ops]\nkind = \"webhook\"\nurl = \"{}/hooks/ops\"\ntimeout_ms = 400\n",
            rig.fake.provider_toml("pay", 400),
            rig.base_url
        );
        std::fs::write(config.path(), text).unwrap();
        Cli {
            url: rig.db.url.clone(),
            config,
        }
    }

    async fn run(&self, args: &[&str]) -> Output {
        // Async: the fake provider answers on this test's runtime meanwhile.
        tokio::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"))
            .arg("--config")
            .arg(self.config.path())
            .args(["--operator", "carol"])
            .args(args)
            .env("DATABASE_URL", &self.url)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn settling_from_the_command_line() {
    let rig = Rig::new().await;
    let cli = Cli::new(&rig);
    rig.unknown_effect("refund:CLI:v1", 1500).await;
    let id = rig.provider_did("refund:CLI:v1", 1500);

    let out = cli
        .run(&["reconcile", "refund:CLI:v1", "--format", "json"])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["detail"]["finding"], "exists_once");
    assert_eq!(json["detail"]["external_refs"][0], id.as_str());

    let out = cli
        .run(&["compensate", "refund:CLI:v1", "--reason", "sent twice"])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("refund:CLI:v1 is now compensated"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(rig.effect("refund:CLI:v1").await.state, State::Compensated);
    let operator: String =
        sqlx::query_scalar("select operator from ledger.audit_log order by seq limit 1")
            .fetch_one(&rig.db.pool)
            .await
            .unwrap();
    assert_eq!(operator, "carol");

    // Read-only refuses before anything is written: exit code 8.
    rig.unknown_effect("refund:CLI:v2", 100).await;
    let out = cli
        .run(&[
            "--read-only",
            "resolve",
            "refund:CLI:v2",
            "--failed",
            "--reason",
            "x",
        ])
        .await;
    assert_eq!(out.status.code(), Some(8), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("read-only"));

    // A stale version: exit code 7, nothing written.
    let out = cli
        .run(&[
            "resolve",
            "refund:CLI:v2",
            "--failed",
            "--reason",
            "x",
            "--expect-version",
            "1",
        ])
        .await;
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("changed since you looked"));
    assert_eq!(rig.effect("refund:CLI:v2").await.state, State::Unknown);

    let out = cli
        .run(&["escalate", "refund:CLI:v2", "--reason", "stuck for an hour"])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("delivered to ops"),
        "{}",
        text(&out.stdout)
    );
    let out = cli.run(&["escalation", "list"]).await;
    assert!(
        text(&out.stdout).contains("delivered"),
        "{}",
        text(&out.stdout)
    );
    let out = cli
        .run(&[
            "escalation",
            "resolve",
            "escalate:refund:CLI:v2:unknown_outcome",
            "--reason",
            "done",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = cli.run(&["escalation", "deliver"]).await;
    assert_eq!(text(&out.stdout).trim(), "delivered 0 escalation(s)");
}

#[tokio::test]
async fn a_pane_is_reconciled_in_bulk_after_its_count_is_confirmed() {
    let rig = Rig::new().await;
    let cli = Cli::new(&rig);
    for n in 0..3 {
        let key = format!("refund:BULK{n}:v1");
        rig.unknown_effect(&key, 100).await;
        rig.provider_did(&key, 100);
    }
    rig.unknown_effect("refund:OTHER:v1", 100).await;

    let out = cli
        .run(&["reconcile", "--pane", "unknown", "--filter", "key:BULK"])
        .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("3 items of pane unknown match: pass --yes"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        rig.count("select count(*) from ledger.reconciliations")
            .await,
        0
    );

    let out = cli
        .run(&[
            "reconcile",
            "--pane",
            "unknown",
            "--filter",
            "key:BULK",
            "--yes",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("reconciled 3 of 3: exists_once 3"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(rig.effect("refund:OTHER:v1").await.state, State::Unknown);
}

#[tokio::test]
async fn hostile_keys_never_reach_the_terminal_raw() {
    let rig = Rig::new().await;
    let cli = Cli::new(&rig);
    let key = "refund:\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2J\u{202e}:v1";
    rig.hostile_unknown_effect(key, 100).await;
    for args in [
        vec!["reconcile", key],
        vec!["reconcile", key, "--format", "json"],
        vec!["compensate", key, "--reason", "x"],
        vec![
            "resolve",
            key,
            "--failed",
            "--reason",
            "\u{1b}[31mred",
            "--expect-version",
            "1",
        ],
    ] {
        let out = cli.run(&args).await;
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(
            !all.contains('\u{1b}') && !all.contains('\u{7}') && !all.contains('\u{202e}'),
            "{all:?}"
        );
    }
}

#[tokio::test]
async fn each_operator_call_of_the_ledger_is_a_command() {
    let rig = Rig::new().await;
    let cli = Cli::new(&rig);
    let help = cli.run(&["--help"]).await;
    for command in ["release", "cancel", "annotate", "acknowledge-duplicates"] {
        assert!(
            text(&help.stdout).contains(command),
            "{command} missing from:\n{}",
            text(&help.stdout)
        );
    }

    // A key whose replays put it in the duplicates pane.
    rig.unknown_effect("refund:ACK:v1", 100).await;
    let intent = Rig::intent("refund:ACK:v1", 100);
    effectwatch::ledger::writer::begin_effect(&rig.db.pool, &intent)
        .await
        .unwrap();
    let out = cli
        .run(&[
            "acknowledge-duplicates",
            "refund:ACK:v1",
            "--format",
            "json",
        ])
        .await;
    assert_eq!(out.status.code(), Some(2), "--reason is required");

    let out = cli
        .run(&[
            "acknowledge-duplicates",
            "refund:ACK:v1",
            "--reason",
            "the agent retried on a timeout",
            "--format",
            "json",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["detail"]["op_key"], "refund:ACK:v1");
    let listed: i64 = sqlx::query_scalar(
        "select count(*) from ledger.duplicate_attempts where op_key = 'refund:ACK:v1'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(listed, 0);

    // Nothing left to acknowledge: the ledger says so, exit code 9, nothing written.
    let out = cli
        .run(&[
            "acknowledge-duplicates",
            "refund:ACK:v1",
            "--reason",
            "again",
        ])
        .await;
    assert_eq!(out.status.code(), Some(9), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no repeated or flagged calls"));
}

#[tokio::test]
async fn list_shows_the_version_an_action_expects() {
    let rig = Rig::new().await;
    let cli = Cli::new(&rig);
    rig.unknown_effect("refund:LISTV:v1", 100).await;
    let version = rig.effect("refund:LISTV:v1").await.version;
    let out = cli.run(&["list", "unknown"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    assert!(listed.contains("version"), "{listed}");
    let row = listed
        .lines()
        .find(|line| line.contains("refund:LISTV:v1"))
        .unwrap_or_else(|| panic!("no row in\n{listed}"));
    let cells: Vec<&str> = row.split('┆').map(str::trim).collect();
    assert_eq!(cells[1], version.to_string(), "{row}");

    let out = cli
        .run(&[
            "resolve",
            "refund:LISTV:v1",
            "--failed",
            "--reason",
            "provider says no",
            "--expect-version",
            cells[1],
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[tokio::test]
async fn policies_are_listed_and_changed_from_the_command_line() {
    let rig = Rig::new().await;
    let cli = Cli::new(&rig);
    let out = cli
        .run(&[
            "policy",
            "set",
            "refund",
            "--retry",
            "never-retry",
            "--pending-window",
            "2m",
        ])
        .await;
    assert_eq!(out.status.code(), Some(2), "a reason is required");
    let out = cli
        .run(&[
            "policy",
            "set",
            "refund",
            "--retry",
            "never-retry",
            "--pending-window",
            "2m",
            "--approval-limit",
            "none",
            "--heartbeat-lease",
            "20s",
            "--reason",
            "double refunds are not undone",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("audit entry #"),
        "{}",
        text(&out.stderr)
    );
    let out = cli.run(&["policy", "list", "--format", "json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let refund = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["action"] == "refund")
        .expect("refund listed");
    assert_eq!(refund["retry_semantics"], "never_retry");
    assert_eq!(refund["pending_window_secs"], 120.0);
    assert_eq!(refund["heartbeat_lease_secs"], 20.0);
    let table = cli.run(&["policy", "list"]).await;
    assert!(
        text(&table.stdout).contains("heartbeat lease"),
        "{}",
        text(&table.stdout)
    );
    let out = cli
        .run(&[
            "policy",
            "set",
            "refund",
            "--heartbeat-lease",
            "none",
            "--reason",
            "the workers' own",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = cli.run(&["policy", "list", "--format", "json"]).await;
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list[0]["heartbeat_lease_secs"], Value::Null, "{list}");
    let out = cli
        .run(&[
            "policy",
            "set",
            "refund",
            "--retry",
            "sometimes",
            "--reason",
            "x",
        ])
        .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("never_retry"),
        "{}",
        text(&out.stderr)
    );
    let operator: String = sqlx::query_scalar(
        "select operator from ledger.audit_log where action = 'set_policy' order by seq desc limit 1",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(operator, "carol");
}

#[tokio::test]
async fn a_duplicate_record_is_reversed_from_the_command_line_and_the_effect_stands() {
    let rig = Rig::new().await;
    let cli = Cli::new(&rig);
    let policy = cli
        .run(&[
            "policy",
            "set",
            "refund",
            "--retry",
            "compensate",
            "--reason",
            "paid twice is reversed",
        ])
        .await;
    assert!(policy.status.success(), "{}", text(&policy.stderr));
    rig.unknown_effect("refund:TWO:v1", 1500).await;
    let first = rig.provider_did("refund:TWO:v1", 1500);
    let second = rig.provider_did("refund:TWO:v1", 1500);
    let reconciled = cli.run(&["reconcile", "refund:TWO:v1"]).await;
    assert!(reconciled.status.success(), "{}", text(&reconciled.stderr));
    assert_eq!(rig.effect("refund:TWO:v1").await.state, State::Succeeded);

    let out = cli
        .run(&[
            "reverse-duplicate",
            "refund:TWO:v1",
            "--ref",
            &second,
            "--reason",
            "the provider paid it twice",
            "--format",
            "json",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        answer["detail"]["compensation_state"], "succeeded",
        "{answer}"
    );
    assert_eq!(answer["detail"]["duplicate_ref"], second.as_str());
    assert_eq!(rig.fake.reversals_of(&second).len(), 1);
    assert!(rig.fake.reversals_of(&first).is_empty());
    assert_eq!(rig.effect("refund:TWO:v1").await.state, State::Succeeded);

    // The effect's own record is not a duplicate: refused, nothing sent.
    let refused = cli
        .run(&[
            "reverse-duplicate",
            "refund:TWO:v1",
            "--ref",
            &first,
            "--reason",
            "oops",
        ])
        .await;
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("not a duplicate of it"),
        "{}",
        text(&refused.stderr)
    );
    assert!(rig.fake.reversals_of(&first).is_empty());
}

/// `escalate --pane` sends every item of a filtered pane to a person: the
/// count first (no terminal, no --yes: nothing is sent), then one
/// escalation and audit entry each, delivered; an item already escalated
/// is not sent twice.
#[tokio::test]
async fn a_filtered_pane_is_escalated_item_by_item_after_its_count() {
    let rig = Rig::new().await;
    let cli = Cli::new(&rig);
    for n in 0..3 {
        rig.unknown_effect(&format!("refund:ESC{n}:v1"), 100).await;
    }
    rig.unknown_effect("refund:QUIET:v1", 100).await;
    let escalated = |pool: effectwatch::ledger::LedgerPool| async move {
        sqlx::query_scalar::<_, i64>("select count(*) from ledger.escalations")
            .fetch_one(&pool)
            .await
            .unwrap()
    };

    let args = [
        "escalate",
        "--pane",
        "unknown",
        "--filter",
        "key:ESC",
        "--reason",
        "provider outage",
    ];
    let out = cli.run(&args).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("3 items of pane unknown match: pass --yes"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(escalated(rig.db.pool.clone()).await, 0);

    let out = cli.run(&[&args[..], &["--yes"]].concat()).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("3 of 3 escalated (3 delivered"), "{said}");
    assert_eq!(escalated(rig.db.pool.clone()).await, 3);
    let audited: i64 = sqlx::query_scalar(
        "select count(*) from ledger.audit_log where action = 'escalate' and operator = 'carol'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(audited, 3);

    // Again: nothing new is opened or sent.
    let out = cli.run(&[&args[..], &["--yes"]].concat()).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("0 of 3 escalated (0 delivered, the rest retried in the background), 3 already escalated"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(escalated(rig.db.pool.clone()).await, 3);
}

/// A verb made from one row of the table and one SQL function:
/// reopen-duplicates undoes an acknowledgement from the command line, is
/// refused with the ledger's sentence where there is nothing to undo, and
/// leaves both steps in the audit trail.
#[tokio::test]
async fn an_acknowledgement_of_repeats_is_undone_by_reopening_them() {
    let rig = Rig::new().await;
    let cli = Cli::new(&rig);
    let intent = common::intent("refund:REOPEN:v1", "acct:reopen");
    effectwatch::ledger::writer::begin_effect(&rig.db.pool, &intent)
        .await
        .unwrap();
    // The agent asks again with other parameters: a mismatch, on the pane for good.
    let mut changed = intent.clone();
    changed.params = serde_json::json!({"amount_minor": 999});
    effectwatch::ledger::writer::begin_effect(&rig.db.pool, &changed)
        .await
        .unwrap();
    let on_the_pane = |pool: effectwatch::ledger::LedgerPool| async move {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from ledger.duplicate_attempts where op_key = 'refund:REOPEN:v1'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    assert!(on_the_pane(rig.db.pool.clone()).await > 0);

    let never = cli
        .run(&[
            "reopen-duplicates",
            "refund:REOPEN:v1",
            "--reason",
            "too soon",
        ])
        .await;
    assert!(!never.status.success());
    assert!(
        text(&never.stderr).contains("never acknowledged: nothing to reopen"),
        "{}",
        text(&never.stderr)
    );

    // A key is taken exactly as given: with a space it names no effect,
    // rather than this one.
    let spaced = cli
        .run(&[
            "acknowledge-duplicates",
            "refund:REOPEN:v1 ",
            "--reason",
            "retried",
        ])
        .await;
    assert!(!spaced.status.success());
    assert!(
        text(&spaced.stderr).contains("no effect with key"),
        "{}",
        text(&spaced.stderr)
    );

    let acknowledged = cli
        .run(&[
            "acknowledge-duplicates",
            "refund:REOPEN:v1",
            "--reason",
            "retried",
        ])
        .await;
    assert!(
        acknowledged.status.success(),
        "{}",
        text(&acknowledged.stderr)
    );
    assert_eq!(on_the_pane(rig.db.pool.clone()).await, 0);

    let reopened = cli
        .run(&[
            "reopen-duplicates",
            "refund:REOPEN:v1",
            "--reason",
            "the clear reached too far",
            "--format",
            "json",
        ])
        .await;
    assert!(reopened.status.success(), "{}", text(&reopened.stderr));
    let said: Value = serde_json::from_slice(&reopened.stdout).unwrap();
    assert!(
        said["summary"]
            .as_str()
            .unwrap()
            .starts_with("reopened the repeated calls of refund:REOPEN:v1"),
        "{said}"
    );
    assert!(on_the_pane(rig.db.pool.clone()).await > 0);
    let trail: Vec<(String, String)> = sqlx::query_as(
        "select action, operator from ledger.audit_log
          where op_key = 'refund:REOPEN:v1' and action like '%duplicates' order by seq",
    )
    .fetch_all(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(
        trail,
        [
            ("acknowledge_duplicates".to_string(), "carol".to_string()),
            ("reopen_duplicates".to_string(), "carol".to_string())
        ]
    );
}

/// Escalations in bulk: `escalation acknowledge|resolve --pane
/// escalations` counts the open escalations (by state) first, then acts on
/// each in its own transaction with its audit entry; one already in that
/// state is skipped, and a verb on the wrong kind of pane is refused.
#[tokio::test]
async fn every_open_escalation_is_acknowledged_then_resolved_after_its_count() {
    let rig = Rig::new().await;
    let cli = Cli::new(&rig);
    for n in 0..3 {
        rig.unknown_effect(&format!("refund:BULKESC{n}:v1"), 100)
            .await;
    }
    let out = cli
        .run(&[
            "escalate", "--pane", "unknown", "--reason", "outage", "--yes",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));

    let ack = [
        "escalation",
        "acknowledge",
        "--pane",
        "escalations",
        "--reason",
        "on it",
    ];
    let out = cli.run(&ack).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("3 open escalations (3 delivered) match: pass --yes"),
        "{}",
        text(&out.stderr)
    );
    let out = cli.run(&[&ack[..], &["--yes"]].concat()).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("acknowledge: 3 of 3 escalations done, 0 skipped"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        rig.count("select count(*) from ledger.escalations where state = 'acknowledged'")
            .await,
        3
    );
    assert_eq!(
        rig.count(
            "select count(*) from ledger.audit_log where action = 'acknowledge_escalation' \
             and operator = 'carol' and reason = 'on it'"
        )
        .await,
        3,
        "one audit entry per escalation"
    );

    let out = cli
        .run(&[
            "escalation",
            "resolve",
            "--pane",
            "escalations",
            "--filter",
            "key:BULKESC1",
            "--reason",
            "refunded by hand",
            "--yes",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("1 of 1 escalations done"),
        "{}",
        text(&out.stdout)
    );
    // Again: the two left are acknowledged already.
    let out = cli.run(&[&ack[..], &["--yes"]].concat()).await;
    assert!(
        text(&out.stdout).contains("0 of 2 escalations done, 2 skipped"),
        "{}",
        text(&out.stdout)
    );

    for wrong in [
        &[
            "escalation",
            "resolve",
            "--pane",
            "held",
            "--reason",
            "x",
            "--yes",
        ][..],
        &["release", "--pane", "escalations", "--reason", "x", "--yes"],
    ] {
        let out = cli.run(wrong).await;
        assert_eq!(
            out.status.code(),
            Some(2),
            "{wrong:?}: {}",
            text(&out.stderr)
        );
    }
}
