//! A ledger upgrades in place: a released migration is never edited, a
//! ledger of an earlier release holding data upgrades to this one with the
//! real binary, whole or not at all, and ends with the same schema as a
//! fresh install.

mod common;

use effectwatch::ledger::migrate::{self, MIGRATOR, RELEASED, SchemaVersion};
use effectwatch::ledger::writer::{self, Completion, ErrorClass, Outcome};
use effectwatch::ledger::{Decision, LedgerPool};
use serde_json::json;

/// The text of every released migration, pinned: the first 16 hex digits
/// of its SHA-384, as the ledger's bookkeeping records it. A released
/// migration edited in place would leave every installed ledger refusing
/// this binary; a change is a new migration.
const RELEASED_CHECKSUMS: &[(i64, &str)] = &[
    (1, "cd66f5cf5e4ee975"),
    (2, "ef0a7470fed1387a"),
    (3, "645a01f8c45e40f2"),
    (4, "5944fd9fa7149be1"),
    (5, "362417da705eb851"),
    (6, "adb7f51b1b0d9c51"),
    (7, "a82df1be372817ca"),
    (8, "b5d282de0beb3107"),
    (9, "bc722d134b23833d"),
    (10, "0d0bd5b2e792eda5"),
    (11, "1c27061ff776c800"),
    (12, "270f083d3669d582"),
    (13, "a04a39ead5005ba5"),
    (14, "3524b97f8775638d"),
    (15, "67b888aa486d9925"),
    (16, "d113cf7ba300eaa3"),
    (17, "ebfaa39e3283f767"),
    (18, "64985d9b5c270065"),
];

fn hex_prefix(bytes: &[u8]) -> String {
    bytes
        .iter()
        .take(8)
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[test]
fn released_migrations_are_never_edited() {
    let last_released = RELEASED.last().map(|(_, through)| *through).unwrap();
    let pinned: Vec<i64> = RELEASED_CHECKSUMS
        .iter()
        .map(|(version, _)| *version)
        .collect();
    assert_eq!(
        pinned,
        (1..=last_released).collect::<Vec<_>>(),
        "every released migration is pinned here"
    );
    for (version, expected) in RELEASED_CHECKSUMS {
        let migration = MIGRATOR
            .iter()
            .find(|migration| migration.version == *version)
            .unwrap_or_else(|| panic!("released migration {version:04} is gone"));
        assert_eq!(
            hex_prefix(&migration.checksum),
            *expected,
            "migration {version:04} ({}) was released and has been edited: put the change in a new migration",
            migration.description
        );
    }
}

/// The functions and views of each release, pinned as one digest
/// (`migrate::definitions_digest`). Release 1 predates the definition
/// files: its functions are those its migrations made.
const RELEASED_DEFINITIONS: &[(u32, &str)] = &[];

/// A ledger's version is its migrations: a build that changed a function
/// without a migration of its own would look like the release before it,
/// and that release's `migrate` would put its old text back. So a build of
/// released migrations only must have the last release's definitions, and
/// a release that changes a function carries a migration (if only to say so).
#[test]
fn a_release_pins_its_functions_and_views() {
    let binary = SchemaVersion::of_binary();
    if !binary.unreleased.is_empty() {
        return;
    }
    let (release, _) = *RELEASED.last().unwrap();
    let pinned = RELEASED_DEFINITIONS
        .iter()
        .find(|(version, _)| *version == release)
        .map(|(_, digest)| *digest);
    assert_eq!(
        pinned,
        Some(migrate::definitions_digest().as_str()),
        "release {release}'s functions and views are pinned, and this build's are the same"
    );
}

#[test]
fn the_schema_version_counts_released_and_unreleased_migrations() {
    assert_eq!(
        SchemaVersion::of(&(1..=18).collect::<Vec<_>>()).to_string(),
        "1"
    );
    assert_eq!(
        SchemaVersion::of(&(1..=20).collect::<Vec<_>>()).to_string(),
        "1 + 2 unreleased migrations (0019, 0020)"
    );
    assert_eq!(SchemaVersion::of(&[]).to_string(), "none");
}

/// Each function and view of the ledger is defined in one file, named
/// after it, and nowhere else among the definitions: its current text is
/// read in one place, and `migrate` finds what changed by file.
#[tokio::test]
async fn every_function_and_view_lives_in_one_file_of_its_own() {
    let db = common::test_db().await;
    let installed: Vec<String> = sqlx::query_scalar(
        "select 'functions/' || p.proname || '.sql' from pg_proc p where p.pronamespace = 'ledger'::regnamespace
         union all
         select 'views/' || c.relname || '.sql' from pg_class c
          where c.relnamespace = 'ledger'::regnamespace and c.relkind = 'v'
         order by 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut files: Vec<String> = migrate::DEFINITIONS
        .iter()
        .map(|d| d.file.to_string())
        .collect();
    files.sort();
    assert_eq!(
        files, installed,
        "one file per function and view, named after it"
    );
    let defines = regex_lite_defines();
    for definition in migrate::DEFINITIONS {
        let named: Vec<&str> = defines(definition.sql);
        let stem = definition
            .file
            .rsplit('/')
            .next()
            .unwrap()
            .trim_end_matches(".sql");
        assert_eq!(
            named,
            vec![stem],
            "{} defines {named:?}: one function or view per file, the one it is named after",
            definition.file
        );
    }
}

/// The names a definition file creates (`create or replace function
/// ledger.NAME` / `view`), read without a parser: statements start a line.
fn regex_lite_defines() -> impl Fn(&str) -> Vec<&str> {
    |sql: &str| {
        sql.lines()
            .filter_map(|line| {
                let line = line.trim_start();
                [
                    "create or replace function ledger.",
                    "create or replace view ledger.",
                ]
                .iter()
                .find_map(|start| line.strip_prefix(start))
            })
            .map(|rest| {
                rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or("")
            })
            .collect()
    }
}

/// A function whose file changed is the ledger's to update: until
/// `migrate` runs, the ledger is said to be behind by that file, and
/// `migrate` puts the file's text back and says it did.
#[tokio::test]
async fn a_changed_definition_is_said_and_applied_by_migrate() {
    let db = common::test_db().await;
    assert!(matches!(
        migrate::standing(&db.pool).await.unwrap(),
        migrate::Standing::Same(_)
    ));
    // As a ledger stands whose build checked no lease.
    sqlx::raw_sql(
        "create or replace function ledger.check_lease(lease interval) returns void
         language plpgsql immutable as $$ begin end $$;
         update public.effectwatch_definitions set checksum = '\\x00'
          where file = 'functions/check_lease.sql'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let standing = migrate::standing(&db.pool).await.unwrap();
    assert!(
        matches!(&standing, migrate::Standing::Redefined { files, .. } if files == &["functions/check_lease.sql"]),
        "{standing:?}"
    );
    let said = standing.error().unwrap().to_string();
    assert!(
        said.contains("1 function or view not this effectwatch's (functions/check_lease.sql)")
            && said.ends_with("run `effectwatch migrate`"),
        "{said}"
    );
    let report = migrate::run(&db.pool).await.unwrap();
    assert_eq!(
        report.definitions,
        vec!["functions/check_lease.sql".to_string()]
    );
    assert!(report.applied.is_empty());
    let refused: Result<(), sqlx::Error> =
        sqlx::query("select ledger.check_lease(interval '0 seconds')")
            .execute(&db.pool)
            .await
            .map(|_| ());
    assert!(
        refused.is_err(),
        "the file's check is back: a lease of 0 s is refused"
    );
    assert!(matches!(
        migrate::standing(&db.pool).await.unwrap(),
        migrate::Standing::Same(_)
    ));
    let again = migrate::run(&db.pool).await.unwrap();
    assert!(again.applied.is_empty() && again.definitions.is_empty());
}

/// Functions, views, tables and columns of the `ledger` schema, with a
/// digest of each body: two ledgers with the same catalog behave alike.
async fn catalog(pool: &LedgerPool) -> Vec<String> {
    sqlx::query_scalar(
        "select 'function ' || p.oid::regprocedure::text || ' ' || md5(p.prosrc) || ' ' || p.provolatile::text || p.prosecdef::text
                || ' ' || coalesce(p.proacl::text, '')
           from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'ledger'
         union all
         select 'relation ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(md5(pg_get_viewdef(c.oid)), '')
                || ' ' || coalesce(c.relacl::text, '')
           from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'ledger' and c.relkind in ('r', 'v', 'p', 'm')
            and c.relname !~ '_[0-9]{4}_[0-9]{2}$'
         union all
         select 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                || ' ' || a.attnotnull::text
           from pg_attribute a join pg_class c on c.oid = a.attrelid
           join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'ledger' and a.attnum > 0 and not a.attisdropped and c.relkind in ('r', 'v', 'p')
            and c.relname !~ '_[0-9]{4}_[0-9]{2}$'
         union all
         select 'trigger ' || c.relname || '.' || t.tgname || ' ' || t.tgenabled::text
           from pg_trigger t join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'ledger' and not t.tgisinternal and c.relname !~ '_[0-9]{4}_[0-9]{2}$'
         order by 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn record(pool: &LedgerPool, key: &str, target: &str, outcome: Option<Outcome>) {
    let mut intent = common::intent(key, target);
    intent.amount_minor = Some(1500);
    intent.currency = Some("EUR".into());
    intent.params = json!({"order": target, "amount": "15.00"});
    let begun = writer::begin_effect(pool, &intent).await.unwrap();
    if !begun.decision.may_dispatch() {
        return;
    }
    writer::mark_dispatched(pool, key, None, "agent-v1")
        .await
        .unwrap();
    let Some(outcome) = outcome else { return };
    let completion = Completion {
        external_ref: (outcome == Outcome::Succeeded).then(|| format!("re_{key}")),
        result: Some(json!({"refund": key, "at": "2026-12-05T10:00:00Z", "amount": "15.00"})),
        error_class: (outcome == Outcome::Unknown).then_some(ErrorClass::Timeout),
        ..Completion::default()
    };
    writer::complete_effect(pool, key, outcome, &completion)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_released_ledger_holding_data_upgrades_in_place_to_this_schema() {
    let (release, through) = *RELEASED.last().unwrap();
    let db = common::empty_db().await;
    migrate::run_through(&db.pool, through).await.unwrap();
    let installed = migrate::ledger_schema(&db.pool).await.unwrap().unwrap();
    assert_eq!(installed.released, release);
    assert!(installed.unreleased.is_empty());

    // Agents written against the release fill it.
    record(
        &db.pool,
        "refund:V1:done",
        "invoice:V1-A",
        Some(Outcome::Succeeded),
    )
    .await;
    record(
        &db.pool,
        "refund:V1:lost",
        "invoice:V1-B",
        Some(Outcome::Unknown),
    )
    .await;
    record(
        &db.pool,
        "refund:V1:failed",
        "invoice:V1-C",
        Some(Outcome::Failed { retryable: true }),
    )
    .await;
    record(&db.pool, "refund:V1:open", "invoice:V1-D", None).await;
    record(&db.pool, "refund:V1:second", "invoice:V1-D", None).await;
    let before: Vec<(String, String, i64)> =
        sqlx::query_as("select op_key, state, version from ledger.effects order by op_key")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(before.len(), 5);

    let upgraded = common::effectwatch_cli(&["--database-url", &db.url, "migrate"]);
    assert!(upgraded.status.success(), "{upgraded:?}");
    let after: Vec<(String, String, i64)> =
        sqlx::query_as("select op_key, state, version from ledger.effects order by op_key")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(after, before, "the upgrade keeps every effect as it was");
    assert_eq!(
        migrate::ledger_schema(&db.pool).await.unwrap().unwrap(),
        SchemaVersion::of_binary()
    );

    // The same schema as a ledger installed fresh by this binary.
    let fresh = common::empty_db().await;
    migrate::run(&fresh.pool).await.unwrap();
    assert_eq!(catalog(&db.pool).await, catalog(&fresh.pool).await);

    // An agent of the release keeps its answers on the upgraded ledger.
    let replay = writer::begin_effect(&db.pool, &{
        let mut intent = common::intent("refund:V1:done", "invoice:V1-A");
        intent.amount_minor = Some(1500);
        intent.currency = Some("EUR".into());
        intent.params = json!({"order": "invoice:V1-A", "amount": "15.00"});
        intent
    })
    .await
    .unwrap();
    assert_eq!(replay.decision, Decision::Replay);
    assert_eq!(replay.result.unwrap()["amount"], "15.00");
    let held = sqlx::query_scalar::<_, String>(
        "select state from ledger.effects where op_key = 'refund:V1:second'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(held, "held");

    let again = common::effectwatch_cli(&["--database-url", &db.url, "migrate"]);
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("nothing changed"),
        "{again:?}"
    );
    let version = common::effectwatch_cli(&["--database-url", &db.url, "--version"]);
    let said = String::from_utf8_lossy(&version.stdout);
    assert!(
        said.contains(&format!("ledger schema {}", SchemaVersion::of_binary())),
        "{said}"
    );
    assert!(said.contains("the same"), "{said}");
}

/// Params are stored by value from 0022 on; a key recorded before, with a
/// number spelt with trailing zeros, is still answered by the spelling it
/// was recorded with: its retry is not turned into a mismatch.
#[tokio::test]
async fn a_key_recorded_before_params_were_stored_by_value_keeps_its_answers() {
    let db = common::empty_db().await;
    migrate::run_through(&db.pool, 21).await.unwrap();
    let spelt = || {
        let mut intent = common::intent("refund:V21:spelt", "invoice:V21");
        intent.params = json!({"amount_minor": 1500.0});
        intent
    };
    let first = writer::begin_effect(&db.pool, &spelt()).await.unwrap();
    assert_eq!(first.decision, Decision::Proceed);
    migrate::run(&db.pool).await.unwrap();
    let again = writer::begin_effect(&db.pool, &spelt()).await.unwrap();
    assert_eq!(
        again.decision,
        Decision::InFlight,
        "the same call, the same intent"
    );
    let fresh = writer::begin_effect(&db.pool, &{
        let mut intent = common::intent("refund:V22:spelt", "invoice:V22");
        intent.params = json!({"amount_minor": 1500.0});
        intent
    })
    .await
    .unwrap();
    assert_eq!(fresh.decision, Decision::Proceed);
    let stored: serde_json::Value =
        sqlx::query_scalar("select params from ledger.effects where op_key = 'refund:V22:spelt'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(stored, json!({"amount_minor": 1500}));
}

#[tokio::test]
async fn a_migrate_that_fails_leaves_nothing_half_installed() {
    let db = common::empty_db().await;
    // Something in the way of a late migration: the whole install must stop.
    sqlx::raw_sql("create schema ledger; create table ledger.history_months (nothing int)")
        .execute(&db.pool)
        .await
        .unwrap();
    let failed = common::effectwatch_cli(&["--database-url", &db.url, "migrate"]);
    assert!(!failed.status.success(), "{failed:?}");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    let tables: i64 = sqlx::query_scalar(
        "select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'ledger' and c.relkind in ('r', 'p')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(tables, 1, "only what was there before");
    let bookkept: bool =
        sqlx::query_scalar("select to_regclass('public._sqlx_migrations') is not null")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(!bookkept, "no migration recorded as applied");
}

#[tokio::test]
async fn check_warns_when_the_ledger_and_this_binary_differ() {
    let db = common::test_db().await;
    let same = common::effectwatch_cli(&["--database-url", &db.url, "check"]);
    assert!(
        !String::from_utf8_lossy(&same.stdout).contains("schema"),
        "{same:?}"
    );
    // A ledger a newer effectwatch upgraded.
    sqlx::query(
        "insert into public._sqlx_migrations (version, description, success, checksum, execution_time)
         values (9999, 'from a newer release', true, '\\x00', 0)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let check = common::effectwatch_cli(&["--database-url", &db.url, "check"]);
    let said = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{said}");
    assert!(said.contains("is newer than this effectwatch's"), "{said}");
    assert!(said.contains("upgrade effectwatch"), "{said}");

    // A ledger of the last release, behind a binary with migrations since.
    let (_, through) = *RELEASED.last().unwrap();
    if SchemaVersion::of_binary().unreleased.is_empty() {
        return;
    }
    let behind = common::empty_db().await;
    migrate::run_through(&behind.pool, through).await.unwrap();
    let check = common::effectwatch_cli(&["--database-url", &behind.url, "check"]);
    let said = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{said}");
    assert!(said.contains("run `effectwatch migrate`"), "{said}");
}

/// A ledger a newer effectwatch upgraded: `migrate` has nothing to apply
/// and says to upgrade effectwatch, with an exit code of its own (10) —
/// not "schema missing" (5), not a demo's `--fresh`.
#[tokio::test]
async fn migrate_on_a_newer_ledger_says_upgrade_effectwatch() {
    let db = common::test_db().await;
    sqlx::query(
        "insert into public._sqlx_migrations (version, description, success, checksum, execution_time)
         values (9999, 'from a newer release', true, '\\x00', 0)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let migrated = common::effectwatch_cli(&["--database-url", &db.url, "migrate"]);
    let said = String::from_utf8_lossy(&migrated.stderr);
    assert_eq!(migrated.status.code(), Some(10), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert!(said.contains("is newer than this effectwatch's"), "{said}");
    assert!(said.contains("9999"), "{said}");
    assert!(said.contains("upgrade effectwatch"), "{said}");
    assert!(said.contains("nothing changed"), "{said}");
    assert!(
        !said.contains("--fresh") && !said.contains("missing"),
        "{said}"
    );
    // Nothing else changes: the ledger still serves this binary.
    let listed = common::effectwatch_cli(&["--database-url", &db.url, "list", "held"]);
    assert!(listed.status.success(), "{listed:?}");
}

/// A released migration edited after a ledger was made: `--version` and
/// `check` name it instead of telling the operator to run a migrate that
/// would refuse, and `migrate` refuses with an exit code of its own (11).
#[tokio::test]
async fn an_edited_released_migration_is_named_not_sent_to_migrate() {
    let (_, through) = *RELEASED.last().unwrap();
    let db = common::empty_db().await;
    migrate::run_through(&db.pool, through).await.unwrap();
    sqlx::query("update public._sqlx_migrations set checksum = '\\x00' where version = 7")
        .execute(&db.pool)
        .await
        .unwrap();
    let edited = MIGRATOR.iter().find(|m| m.version == 7).unwrap();

    let version = common::effectwatch_cli(&["--database-url", &db.url, "--version"]);
    let said = String::from_utf8_lossy(&version.stdout);
    assert!(version.status.success(), "{version:?}");
    assert!(said.contains("migration 0007"), "{said}");
    assert!(said.contains(edited.description.as_ref()), "{said}");
    assert!(said.contains("edited"), "{said}");
    assert!(!said.contains("run `effectwatch migrate`"), "{said}");

    let check = common::effectwatch_cli(&["--database-url", &db.url, "check"]);
    let said = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{said}");
    assert!(said.contains("migration 0007"), "{said}");
    assert!(!said.contains("run `effectwatch migrate`"), "{said}");

    let migrated = common::effectwatch_cli(&["--database-url", &db.url, "migrate"]);
    let said = String::from_utf8_lossy(&migrated.stderr);
    assert_eq!(migrated.status.code(), Some(11), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert!(said.contains("migration 0007"), "{said}");
    assert!(said.contains("cannot bring this ledger in line"), "{said}");
    let applied: i64 = sqlx::query_scalar("select count(*) from public._sqlx_migrations")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(applied, through, "nothing applied");
}

/// This binary on a ledger of the last release, not migrated yet: a
/// command that reads what the release lacks, and the console, say to run
/// `effectwatch migrate` (exit 5), never the database's own words.
#[tokio::test]
async fn a_ledger_not_yet_migrated_is_told_to_migrate_not_given_a_database_error() {
    let (release, through) = *RELEASED.last().unwrap();
    if SchemaVersion::of_binary().unreleased.is_empty() {
        return;
    }
    let db = common::empty_db().await;
    migrate::run_through(&db.pool, through).await.unwrap();
    // `list duplicates` reads a column 0020 added; the console polls it.
    for args in [&["list", "duplicates"][..], &[]] {
        let run = common::effectwatch_cli(&[&["--database-url", &db.url][..], args].concat());
        let said = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(5), "{args:?}: {said}");
        assert_eq!(said.trim().lines().count(), 1, "{args:?}: {said}");
        assert!(
            said.contains(&format!(
                "ledger schema {release} is older than this effectwatch's"
            )),
            "{args:?}: {said}"
        );
        assert!(
            said.contains("run `effectwatch migrate`"),
            "{args:?}: {said}"
        );
        assert!(!said.contains("database error"), "{args:?}: {said}");
    }
    let migrated = common::effectwatch_cli(&["--database-url", &db.url, "migrate"]);
    assert!(migrated.status.success(), "{migrated:?}");
    let listed = common::effectwatch_cli(&["--database-url", &db.url, "list", "duplicates"]);
    assert!(listed.status.success(), "{listed:?}");
}

/// A build with migrations no release holds says it is not a release.
#[test]
fn a_development_build_says_it_is_not_a_release() {
    let version = common::effectwatch_cli(&["--version"]);
    let said = String::from_utf8_lossy(&version.stdout);
    let first = said.lines().next().unwrap_or_default();
    let package = env!("CARGO_PKG_VERSION");
    if SchemaVersion::of_binary().unreleased.is_empty() {
        assert!(
            first.starts_with(&format!("effectwatch {package} (")),
            "{said}"
        );
    } else {
        assert!(
            first.starts_with(&format!("effectwatch {package}+dev (")),
            "{said}"
        );
        assert!(first.contains("not a release"), "{said}");
    }
}
