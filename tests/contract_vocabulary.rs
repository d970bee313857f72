//! One vocabulary from the ledger to the keyboard: every verb of the
//! settling table ends in a SQL function that exists and is a subcommand;
//! every action whose applicability the ledger rules on (`ledger.refusals`)
//! is a verb whose function asks that very rule, and a console key — so a
//! renamed function or a misspelt rule fails here instead of quietly
//! letting an operator try what the ledger will refuse, or hiding what it
//! would allow.

mod common;

use std::collections::BTreeSet;

use effectwatch::console::action::{Action, TABLE};
use effectwatch::ledger::writer;
use effectwatch::settle::verbs::{On, VERBS};

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

    let in_console: BTreeSet<&str> = TABLE
        .iter()
        .filter_map(|row| row.action.ledger_action())
        .collect();
    let verb_rules: BTreeSet<&str> = VERBS.iter().filter_map(|verb| verb.rule()).collect();
    for rule in &ruled {
        assert!(
            verb_rules.contains(rule.as_str()),
            "the ledger rules on {rule}, which no verb ends in"
        );
        assert!(
            in_console.contains(rule.as_str()),
            "the ledger rules on {rule}, which no console key runs"
        );
    }

    for verb in VERBS {
        let (schema, name) = verb.function.split_once('.').unwrap();
        let body: Option<String> = sqlx::query_scalar(
            "select p.prosrc from pg_proc p join pg_namespace n on n.oid = p.pronamespace
              where n.nspname = $1 and p.proname = $2",
        )
        .bind(schema)
        .bind(name)
        .fetch_optional(&db.pool)
        .await
        .unwrap();
        let body = body.unwrap_or_else(|| panic!("{verb:?}: no function {}", verb.function));
        if let Some(rule) = verb.rule().filter(|rule| ruled.contains(*rule)) {
            let asks_the_rule = body.contains(&format!("require_applicable(effect, '{rule}')"))
                || body.contains(&format!("operator_begin('{rule}'"));
            assert!(
                asks_the_rule,
                "{} does not ask the rule it is shown by",
                verb.function
            );
        } else {
            // No rule: it applies to every effect, in the console as in the ledger.
            assert!(
                !body.contains("require_applicable("),
                "{} refuses by a rule ledger.refusals does not show",
                verb.function
            );
        }
        let command: Vec<&str> = match verb.on {
            On::Effect => vec![verb.name, "--help"],
            On::Escalation => vec!["escalation", verb.name, "--help"],
        };
        let help = common::effectwatch_cli(&command);
        assert!(
            help.status.success(),
            "no subcommand `effectwatch {}`: {}",
            command.join(" "),
            String::from_utf8_lossy(&help.stderr)
        );
        assert!(
            TABLE
                .iter()
                .any(|row| matches!(row.action, Action::Verb(used, _) if used == *verb)),
            "the console has no key for {verb:?}"
        );
    }
}
