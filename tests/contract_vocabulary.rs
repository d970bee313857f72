//! One vocabulary from the ledger to the keyboard: every action whose
//! applicability the ledger rules on (`ledger.refusals`) is a SQL function
//! that asks that very rule, a CLI subcommand, and a console action — so a
//! renamed function or a misspelt rule fails here instead of quietly
//! letting an operator try what the ledger will refuse, or hiding what it
//! would allow.

mod common;

use std::collections::BTreeSet;

use effectwatch::console::action::TABLE;
use effectwatch::ledger::writer;

/// The actions `ledger.refusals` rules on, read from the ledger itself: an
/// effect to which none applies is refused all of them, by name.
async fn ruled_actions(db: &common::TestDb) -> BTreeSet<String> {
    let intent = common::intent("vocabulary:cancelled", "vocabulary:1");
    writer::begin_effect(&db.pool, &intent).await.unwrap();
    let version: i64 = sqlx::query_scalar(
        "select version from ledger.effects where op_key = 'vocabulary:cancelled'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "select * from ledger.op_cancel(op_key => 'vocabulary:cancelled', expected_version => $1,
            operator => 'ops', reason => 'to read every refusal')",
    )
    .bind(version)
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query_scalar(
        "select jsonb_object_keys(refused) from ledger.refusals(array['vocabulary:cancelled'])",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

#[tokio::test]
async fn every_rule_of_applicability_is_a_function_a_command_and_a_console_action() {
    let db = common::test_db().await;
    let ruled = ruled_actions(&db).await;
    assert!(
        ruled.len() >= 5 && ruled.contains("resolve") && ruled.contains("compensate"),
        "{ruled:?}"
    );

    let in_console: BTreeSet<String> = TABLE
        .iter()
        .filter_map(|row| row.action.ledger_action())
        .map(|name| name.replace('-', "_"))
        .collect();
    assert!(
        ruled.is_subset(&in_console),
        "every action the ledger rules on is one the console offers: {:?} missing",
        ruled.difference(&in_console).collect::<Vec<_>>()
    );

    for action in &in_console {
        let body: Option<String> = sqlx::query_scalar(
            "select p.prosrc from pg_proc p join pg_namespace n on n.oid = p.pronamespace
              where n.nspname = 'ledger' and p.proname = 'op_' || $1",
        )
        .bind(action)
        .fetch_optional(&db.pool)
        .await
        .unwrap();
        let body = body.unwrap_or_else(|| panic!("no function ledger.op_{action}"));
        let asks_the_rule = body.contains(&format!("require_applicable(effect, '{action}')"));
        if ruled.contains(action) {
            assert!(
                asks_the_rule,
                "ledger.op_{action} does not ask the rule it is shown by"
            );
        } else {
            // No rule: it applies to every effect, in the console as in the ledger.
            assert!(
                !body.contains("require_applicable("),
                "ledger.op_{action} refuses by a rule ledger.refusals does not show"
            );
        }
        let command = action.replace('_', "-");
        let help = common::effectwatch_cli(&[&command, "--help"]);
        assert!(
            help.status.success(),
            "no subcommand `effectwatch {command}`: {}",
            String::from_utf8_lossy(&help.stderr)
        );
    }
}
