//! An operator call for every item of a pane: one transaction and one audit
//! entry per effect, an item changed since skipped, a failure stopping
//! nothing else, and the count of each said.

mod common;

use std::sync::Arc;

use effectwatch::config::Config;
use effectwatch::ledger::writer;
use effectwatch::settle::verbs::{self, Answers, Subject};
use effectwatch::settle::{Request, Settler};

#[tokio::test]
async fn releasing_a_pane_releases_each_item_on_its_own_and_skips_what_changed() {
    let db = common::test_db().await;
    let mut held = Vec::new();
    for n in 0..3 {
        let target = format!("invoice:BULK-{n}");
        writer::begin_effect(
            &db.pool,
            &common::intent(&format!("refund:BULK-{n}:1"), &target),
        )
        .await
        .unwrap();
        let second = format!("refund:BULK-{n}:2");
        let begun = writer::begin_effect(&db.pool, &common::intent(&second, &target))
            .await
            .unwrap();
        assert_eq!(begun.state.as_str(), "held");
        let version: i64 =
            sqlx::query_scalar("select version from ledger.effects where op_key = $1")
                .bind(&second)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        held.push((second, version));
    }
    // The operator decided on a version the third effect no longer has.
    held[2].1 -= 1;
    let settler = Settler::new(
        db.pool.clone(),
        Arc::new(Config::default()),
        "ops".to_string(),
        false,
    );
    let settled = settler
        .settle(Request {
            verb: &verbs::RELEASE,
            subject: Subject::Pane {
                targets: held.clone(),
            },
            answers: Answers::because("the holders are settled"),
        })
        .await
        .unwrap();
    assert!(
        settled.summary.contains("2 of 3 done, 1 skipped"),
        "{}",
        settled.summary
    );
    let states: Vec<String> = sqlx::query_scalar(
        "select state from ledger.effects where op_key like 'refund:BULK-%:2' order by op_key",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(states, ["pending", "pending", "held"]);
    let audited: i64 = sqlx::query_scalar(
        "select count(*) from ledger.audit_log where action = 'release' and reason = 'the holders are settled'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(audited, 2, "one audit entry per effect released");
}

/// The same from the command line: `release --pane held --filter … --yes`.
#[tokio::test]
async fn the_cli_releases_a_filtered_pane_and_asks_first() {
    let db = common::test_db().await;
    for n in 0..2 {
        let target = format!("invoice:CLIBULK-{n}");
        writer::begin_effect(
            &db.pool,
            &common::intent(&format!("refund:CLIBULK-{n}:1"), &target),
        )
        .await
        .unwrap();
        writer::begin_effect(
            &db.pool,
            &common::intent(&format!("refund:CLIBULK-{n}:2"), &target),
        )
        .await
        .unwrap();
    }
    let asked = common::effectwatch_cli(&[
        "--database-url",
        &db.url,
        "--operator",
        "ops",
        "release",
        "--pane",
        "held",
        "--filter",
        "CLIBULK",
        "--reason",
        "holders settled",
    ]);
    assert_eq!(asked.status.code(), Some(2), "{asked:?}");
    let said = String::from_utf8_lossy(&asked.stderr);
    assert!(
        said.contains("2 items of pane held match: pass --yes"),
        "{said}"
    );

    let done = common::effectwatch_cli(&[
        "--database-url",
        &db.url,
        "--operator",
        "ops",
        "release",
        "--pane",
        "held",
        "--filter",
        "CLIBULK",
        "--reason",
        "holders settled",
        "--yes",
    ]);
    assert!(done.status.success(), "{done:?}");
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(said.contains("2 of 2 done, 0 skipped"), "{said}");
    let held: i64 = sqlx::query_scalar("select count(*) from ledger.effects where state = 'held'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(held, 0);
}

/// Releasing held items whose agents stopped asking sends them to Overdue
/// undispatched: `release --pane held` says how many, and how to cancel
/// those instead; the `stopped-asking` filter picks them; a release of one
/// such key says so too. An agent has stopped when its last ask is older
/// than the effect's pending window, however often it asked before; one
/// held a moment ago has not, though it has not asked again yet.
#[tokio::test]
async fn a_release_says_which_agents_stopped_asking_and_how_to_cancel_them() {
    let db = common::test_db().await;
    for n in 0..3 {
        let target = format!("invoice:QUIET-{n}");
        writer::begin_effect(
            &db.pool,
            &common::intent(&format!("refund:QUIET-{n}:1"), &target),
        )
        .await
        .unwrap();
        let mut held = common::intent(&format!("refund:QUIET-{n}:2"), &target);
        // QUIET-0 was held a moment ago, inside its window; the others
        // have one-second windows that will have passed.
        if n > 0 {
            held.pending_window_secs = Some(1);
        }
        writer::begin_effect(&db.pool, &held).await.unwrap();
        // QUIET-2's agent asked again once, then went quiet.
        if n == 2 {
            let again = writer::begin_effect(&db.pool, &held).await.unwrap();
            assert_eq!(again.state.as_str(), "held");
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
    let cli = |args: &[&str]| {
        common::effectwatch_cli(
            &[&["--database-url", &db.url, "--operator", "ops"][..], args].concat(),
        )
    };
    let said = |output: &std::process::Output| String::from_utf8_lossy(&output.stderr).into_owned();

    let asked = cli(&[
        "release",
        "--pane",
        "held",
        "--filter",
        "QUIET",
        "--reason",
        "holders done",
    ]);
    assert_eq!(asked.status.code(), Some(2), "{asked:?}");
    let stderr = said(&asked);
    assert!(stderr.contains("3 items of pane held match"), "{stderr}");
    assert!(
        stderr.contains(
            "2 of them: their agents have not asked for them within their pending window; \
             released, they go to Overdue undispatched"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("effectwatch cancel --pane held --filter 'QUIET stopped-asking'"),
        "{stderr}"
    );

    // One of them alone: said before it is released.
    let one = cli(&["release", "refund:QUIET-1:2", "--reason", "holder done"]);
    assert!(one.status.success(), "{one:?}");
    assert!(
        said(&one).contains("has not been asked for within its pending window"),
        "{}",
        said(&one)
    );
    // The one held a moment ago is released without a word.
    let asking = cli(&["release", "refund:QUIET-0:2", "--reason", "holder done"]);
    assert!(asking.status.success(), "{asking:?}");
    assert!(!said(&asking).contains("asked"), "{}", said(&asking));

    // The offer taken: the filter picks the one left whose agent stopped.
    let cancelled = cli(&[
        "cancel",
        "--pane",
        "held",
        "--filter",
        "QUIET stopped-asking",
        "--reason",
        "its agent is gone",
        "--yes",
    ]);
    assert!(cancelled.status.success(), "{cancelled:?}");
    let states: Vec<String> = sqlx::query_scalar(
        "select state from ledger.effects where op_key like 'refund:QUIET-%:2' order by op_key",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(states, ["pending", "pending", "cancelled"]);
}
