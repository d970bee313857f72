//! One vocabulary from the ledger to the keyboard: every verb of the
//! settling table ends in a SQL function that exists and is a subcommand;
//! every action whose applicability the ledger rules on (`ledger.refusals`)
//! is a verb whose function asks that very rule, and a console key — so a
//! renamed function or a misspelt rule fails here instead of quietly
//! letting an operator try what the ledger will refuse, or hiding what it
//! would allow. And every function that writes an audit entry for a
//! person is a row of that table or of the ledger's own writes beside it,
//! so no audited write lives outside them.

mod common;

use std::collections::BTreeSet;

use effectwatch::console::action::{Action, TABLE};
use effectwatch::ledger::writer;
use effectwatch::settle::verbs::{LEDGER_WRITES, On, VERBS};

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

/// The functions a person's write ends in, read from the database: every
/// one that writes an audit entry, but the audit's own and the triggers.
async fn audited_writes(db: &common::TestDb) -> BTreeSet<String> {
    sqlx::query_scalar(
        "select 'ledger.' || p.proname from pg_proc p join pg_namespace n on n.oid = p.pronamespace
          where n.nspname = 'ledger' and p.prorettype <> 'trigger'::regtype
            and (p.prosrc like '%ledger.audit(%' or p.prosrc like '%ledger.operator_begin(%')
            and p.proname not in ('audit', 'operator_begin', 'operator_finish')",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

#[tokio::test]
async fn every_audited_write_a_person_makes_is_a_row_of_the_verb_table_or_the_ledgers_writes() {
    let db = common::test_db().await;
    let writes = audited_writes(&db).await;
    assert!(writes.len() >= 15, "{writes:?}");
    // Written only as a step of a row's own flow, never asked for alone.
    let steps = [
        (
            "ledger.op_complete_compensation",
            "a compensation's answer, recorded by the verb that sent it",
        ),
        (
            "ledger.close_escalation",
            "escalation acknowledge and resolve",
        ),
        ("ledger.prune_tombstones", "prune"),
        (
            "ledger.write_worker_lost",
            "the ledger's own, when a heartbeat lease runs out",
        ),
        (
            "ledger.release_held_by_rule",
            "the ledger's own, when a holder ends",
        ),
    ];
    let rows: BTreeSet<&str> = VERBS
        .iter()
        .map(|verb| verb.function)
        .chain(LEDGER_WRITES.iter().map(|write| write.function))
        .collect();
    for write in &writes {
        assert!(
            rows.contains(write.as_str()) || steps.iter().any(|(step, _)| step == write),
            "{write} writes an audit entry, and no row of the verb table or the ledger's writes ends in it"
        );
    }
    for (step, part_of) in steps {
        assert!(
            writes.contains(step),
            "{step} ({part_of}) writes no audit entry any more"
        );
    }
    for write in LEDGER_WRITES {
        assert!(
            writes.contains(write.function),
            "{} writes no audit entry",
            write.function
        );
        if write.role.starts_with("effect_") {
            let may: bool =
                sqlx::query_scalar("select has_function_privilege($1, to_regproc($2), 'execute')")
                    .bind(write.role)
                    .bind(write.function)
                    .fetch_one(&db.pool)
                    .await
                    .unwrap();
            assert!(may, "{} may not call {}", write.role, write.function);
        }
        let mut words: Vec<&str> = write
            .command
            .split(' ')
            .take_while(|word| !word.starts_with("--"))
            .collect();
        words.push("--help");
        let help = common::effectwatch_cli(&words);
        let help = String::from_utf8_lossy(&help.stdout);
        let opening: String = write.about.chars().take(30).collect();
        assert!(help.contains(&opening), "{}: {help}", write.command);
    }
}
