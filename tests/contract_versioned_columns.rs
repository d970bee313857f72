//! The columns a version of an effect keeps are declared once, by the
//! history table (`ledger.effect_versions`); every place that copies a
//! version — the guard that stores a version kept in the row, the function
//! that writes a version row, the history view, the state at an instant,
//! and the guard's test of a creation the row itself can say — is held to
//! that declaration here. A new versioned column is one `alter table`,
//! and this test names each place that must carry it, instead of a version
//! that silently drops it.

mod common;

use std::collections::BTreeSet;

use effectwatch::ledger::LedgerPool;

/// The columns of a version row that say who, when and which version, not
/// what the effect was: they are filled by the history itself.
const BOOKKEEPING: &[&str] = &[
    "id",
    "effect_id",
    "version",
    "at",
    "from_state",
    "actor",
    "db_role",
    "reason",
];

async fn versioned_columns(pool: &LedgerPool) -> BTreeSet<String> {
    let columns: Vec<String> = sqlx::query_scalar(
        "select a.attname::text from pg_attribute a
          where a.attrelid = 'ledger.effect_versions'::regclass
            and a.attnum > 0 and not a.attisdropped",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    columns
        .into_iter()
        .filter(|column| !BOOKKEEPING.contains(&column.as_str()))
        .collect()
}

async fn function_body(pool: &LedgerPool, name: &str) -> String {
    sqlx::query_scalar(
        "select p.prosrc from pg_proc p join pg_namespace n on n.oid = p.pronamespace
          where n.nspname = 'ledger' and p.proname = $1",
    )
    .bind(name)
    .fetch_one(pool)
    .await
    .unwrap_or_else(|error| panic!("ledger.{name}: {error}"))
}

fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| !word.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

#[tokio::test]
async fn every_place_that_copies_a_version_carries_every_versioned_column() {
    let db = common::test_db().await;
    let pool = &db.pool;
    let versioned = versioned_columns(pool).await;
    assert!(
        versioned.contains("held_by") && versioned.contains("duplicates_acknowledged_at"),
        "{versioned:?}"
    );

    let view: String =
        sqlx::query_scalar("select pg_get_viewdef('ledger.effect_history'::regclass, true)")
            .fetch_one(pool)
            .await
            .unwrap();
    let places = [
        (
            "ledger.effects_guard",
            function_body(pool, "effects_guard").await,
        ),
        (
            "ledger.keep_version",
            function_body(pool, "keep_version").await,
        ),
        ("ledger.effects_at", function_body(pool, "effects_at").await),
        ("ledger.effect_history", view),
    ];
    for (place, text) in &places {
        let said = words(text);
        let missing: Vec<&String> = versioned
            .iter()
            .filter(|column| !said.contains(column.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "{place} does not carry the versioned column(s) {missing:?}"
        );
    }

    // The guard spares a creation its version row when the row says it all:
    // every versioned column but the state's and the deadline is still empty
    // — and, for a key claimed as it is created, but the dispatch's too.
    // Each count it compares with is the number of columns it names.
    let guard = &places[0].1;
    let set_on_creation: BTreeSet<&str> = ["state", "state_since", "deadline_at"].into();
    let plain: BTreeSet<String> = versioned
        .iter()
        .filter(|column| !set_on_creation.contains(column.as_str()))
        .cloned()
        .collect();
    let mut claimed = plain.clone();
    claimed.remove("dispatched_at");
    let mut tests_seen = Vec::new();
    for (start, _) in guard.match_indices("num_nulls(") {
        let rest = &guard[start + "num_nulls(".len()..];
        let (listed, after) = rest.split_once(')').unwrap();
        let named: BTreeSet<String> = listed
            .split(',')
            .map(|column| column.trim().trim_start_matches("new.").to_string())
            .collect();
        let counted: usize = after
            .trim_start()
            .trim_start_matches('=')
            .trim()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            counted,
            named.len(),
            "the guard compares num_nulls of {} columns with {counted}",
            named.len()
        );
        assert!(
            named == plain || named == claimed,
            "a creation the row can say has every other versioned column empty: {named:?}"
        );
        tests_seen.push(named == plain);
    }
    tests_seen.sort();
    assert_eq!(
        tests_seen,
        [false, true],
        "one test for a plain creation, one for a key claimed as it is created"
    );
}
