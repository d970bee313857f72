//! The real binary, run as a script would: each kind of failure has its own exit code and one
//! line on stderr, never a panic; output is safe for a terminal whatever the ledger holds.

mod common;

use common::{intent, url_with_database};

use std::process::Output;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use effectwatch::ledger::Decision;
use effectwatch::ledger::actions::{self, SeenVersion};
use effectwatch::ledger::writer::begin_effect;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_effectwatch");

struct Run {
    code: Option<i32>,
    stdout: String,
    stdout_bytes: Vec<u8>,
    stderr: String,
}

/// Runs the binary with `--database-url url` and `args`, with no DATABASE_URL around it.
async fn effectwatch(url: &str, args: &[&str]) -> Run {
    let mut command = Command::new(BIN);
    command
        .arg("--database-url")
        .arg(url)
        .args(args)
        .env_remove("DATABASE_URL")
        .env("RUST_BACKTRACE", "1")
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    let output: Output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .unwrap_or_else(|_| panic!("effectwatch {args:?} did not finish within 60 s"))
        .expect("run effectwatch");
    let run = Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stdout_bytes: output.stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    let lower = run.stderr.to_lowercase();
    assert!(
        !lower.contains("panicked") && !lower.contains("backtrace"),
        "effectwatch {args:?} panicked:\n{}",
        run.stderr
    );
    run
}

/// The one line a failure prints on stderr.
fn one_line(run: &Run) -> &str {
    let text = run.stderr.trim_end();
    assert_eq!(
        text.lines().count(),
        1,
        "expected one line on stderr, got:\n{}",
        run.stderr
    );
    text
}

/// An empty database (no ledger schema) on the test server; dropped when this is dropped.
struct EmptyDb {
    url: String,
    admin_url: String,
    name: String,
}

impl EmptyDb {
    async fn create(db: &common::TestDb) -> EmptyDb {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!(
            "ew_cli_{:x}_{}_{:x}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            nanos & 0xffff_ffff_ffff
        );
        sqlx::query(AssertSqlSafe(format!("create database \"{name}\"")))
            .execute(&db.pool)
            .await
            .unwrap();
        EmptyDb {
            url: url_with_database(&db.url, &name),
            admin_url: db.url.clone(),
            name,
        }
    }
}

impl Drop for EmptyDb {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let mut admin = PgConnection::connect(&url).await.ok()?;
                sqlx::query(AssertSqlSafe(format!(
                    "drop database if exists \"{name}\" with (force)"
                )))
                .execute(&mut admin)
                .await
                .ok()?;
                admin.close().await.ok()
            })
        })
        .join();
    }
}

#[tokio::test]
async fn migrate_installs_the_schema_once_then_changes_nothing() {
    let db = common::test_db().await;
    let empty = EmptyDb::create(&db).await;

    let first = effectwatch(&empty.url, &["migrate"]).await;
    assert_eq!(first.code, Some(0), "{}{}", first.stdout, first.stderr);
    assert!(first.stdout.contains("applied"), "{}", first.stdout);
    assert!(
        first.stdout.contains("migrations applied"),
        "{}",
        first.stdout
    );
    assert!(
        !first.stdout.contains("nothing changed"),
        "{}",
        first.stdout
    );

    let second = effectwatch(&empty.url, &["migrate"]).await;
    assert_eq!(second.code, Some(0), "{}{}", second.stdout, second.stderr);
    assert!(
        second.stdout.contains("nothing changed"),
        "{}",
        second.stdout
    );

    let list = effectwatch(&empty.url, &["list", "overdue"]).await;
    assert_eq!(list.code, Some(0), "{}", list.stderr);
    assert!(list.stdout.contains("nothing open"), "{}", list.stdout);
}

#[tokio::test]
async fn a_database_without_the_schema_exits_5_and_says_to_migrate() {
    let db = common::test_db().await;
    let empty = EmptyDb::create(&db).await;
    for args in [
        &["list", "overdue"][..],
        &["list", "held", "--format", "json"],
        &["show", "some-key"],
        &["audit", "verify"],
    ] {
        let run = effectwatch(&empty.url, args).await;
        assert_eq!(run.code, Some(5), "{args:?}: {}", run.stderr);
        let line = one_line(&run);
        assert!(line.contains("effectwatch migrate"), "{args:?}: {line}");
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    }
}

#[tokio::test]
async fn an_unreachable_server_exits_4_with_one_line() {
    let run = effectwatch(
        "postgres://postgres@127.0.0.1:1/postgres",
        &["list", "overdue"],
    )
    .await;
    assert_eq!(run.code, Some(4), "{}", run.stderr);
    let line = one_line(&run);
    assert!(line.starts_with("effectwatch: "), "{line}");
}

#[tokio::test]
async fn a_malformed_url_exits_3_with_one_line() {
    for url in [
        "postgres://postgres@127.0.0.1:notaport/postgres",
        "postgres://postgres@127.0.0.1:99999999/postgres",
        "mysql://root@127.0.0.1/db",
        "http://127.0.0.1:5432/postgres",
        "not a url at all",
    ] {
        let run = effectwatch(url, &["list", "overdue"]).await;
        assert_eq!(run.code, Some(3), "{url}: {}", run.stderr);
        one_line(&run);
    }
}

#[tokio::test]
async fn an_unknown_key_exits_6() {
    let db = common::test_db().await;
    let run = effectwatch(&db.url, &["show", "no-such-key"]).await;
    assert_eq!(run.code, Some(6), "{}", run.stderr);
    let line = one_line(&run);
    assert!(line.contains("no-such-key"), "{line}");
    assert!(run.stdout.is_empty());

    let run = effectwatch(&db.url, &["show", "no-such-key", "--format", "json"]).await;
    assert_eq!(run.code, Some(6), "{}", run.stderr);
}

#[tokio::test]
async fn list_held_as_json_is_json_with_the_held_key() {
    let db = common::test_db().await;
    begin_effect(&db.pool, &intent("refund:J:1", "invoice:J"))
        .await
        .unwrap();
    assert_eq!(
        begin_effect(&db.pool, &intent("refund:J:2", "invoice:J"))
            .await
            .unwrap()
            .decision,
        Decision::Held
    );
    let run = effectwatch(&db.url, &["list", "held", "--format", "json"]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let parsed: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", run.stdout));
    let rows = parsed["rows"].as_array().expect("an array of rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["op_key"], "refund:J:2");
    assert_eq!(rows[0]["holder_op_key"], "refund:J:1");
    assert_eq!(parsed["total"], 1);
    assert_eq!(parsed["left_out"], 0);

    let empty = effectwatch(&db.url, &["list", "unknown", "--format", "json"]).await;
    assert_eq!(empty.code, Some(0));
    let empty: Value = serde_json::from_str(&empty.stdout).unwrap();
    assert_eq!(empty["rows"], json!([]));
    assert_eq!(empty["total"], 0);
}

#[tokio::test]
async fn hostile_keys_never_put_an_escape_on_the_terminal() {
    let db = common::test_db().await;
    let hostile_key = "evil\u{1b}]52;c;ZWNobyBwd25lZA==\u{7}\u{1b}[2J\u{1b}[31mkey";
    let hostile_target = "invoice:\u{1b}[2J\u{9b}31m\u{202e}X";
    // The writer API refuses such keys; rows a ledger holds anyway must still be shown safely.
    assert!(
        begin_effect(&db.pool, &intent(hostile_key, "invoice:H"))
            .await
            .is_err()
    );
    common::force_effect(&db.pool, &intent("refund:H:holder", hostile_target)).await;
    assert_eq!(
        common::force_effect(&db.pool, &intent(hostile_key, hostile_target)).await,
        Decision::Held
    );
    // Also in the duplicates pane and the audit trail.
    common::force_effect(&db.pool, &intent(hostile_key, hostile_target)).await;
    actions::ANNOTATE
        .call(
            &db.pool,
            hostile_key,
            SeenVersion(1),
            "op\u{1b}[8m",
            "note \u{1b}]0;title\u{7}",
        )
        .await
        .unwrap();

    for args in [
        &["list", "held"][..],
        &["list", "duplicates"],
        &["list", "held", "--format", "json"],
        &["show", hostile_key],
        &["show", hostile_key, "--format", "json"],
        &["audit", "verify"],
    ] {
        let run = effectwatch(&db.url, args).await;
        assert_eq!(run.code, Some(0), "{args:?}: {}", run.stderr);
        assert!(!run.stdout.is_empty());
        for byte in [0x1b_u8, 0x07] {
            assert!(
                !run.stdout_bytes.contains(&byte),
                "{args:?}: byte {byte:#04x} reached stdout:\n{:?}",
                run.stdout
            );
        }
        assert!(!run.stdout.contains('\u{9b}') && !run.stdout.contains('\u{202e}'));
        assert!(!run.stderr.as_bytes().contains(&0x1b));
    }
    let table = effectwatch(&db.url, &["list", "held"]).await;
    assert!(table.stdout.contains("evil"), "{}", table.stdout);
    // JSON keeps the key exact for a program, escaped.
    let json_run = effectwatch(&db.url, &["list", "held", "--format", "json"]).await;
    let parsed: Value = serde_json::from_str(&json_run.stdout).unwrap();
    assert_eq!(parsed["rows"][0]["op_key"], hostile_key);
}

#[tokio::test]
async fn audit_verify_exits_0_when_intact_and_names_the_broken_entry() {
    let db = common::test_db().await;
    begin_effect(&db.pool, &intent("refund:AV:1", "invoice:AV"))
        .await
        .unwrap();
    for i in 1..=3 {
        actions::ANNOTATE
            .call(
                &db.pool,
                "refund:AV:1",
                SeenVersion(1),
                "alice",
                &format!("note {i}"),
            )
            .await
            .unwrap();
    }
    let intact = effectwatch(&db.url, &["audit", "verify"]).await;
    assert_eq!(intact.code, Some(0), "{}", intact.stderr);
    assert!(intact.stdout.contains("intact"), "{}", intact.stdout);
    assert!(intact.stdout.contains('3'), "{}", intact.stdout);

    let mut conn = db.connect().await;
    for statement in [
        "alter table ledger.audit_log disable trigger all",
        "update ledger.audit_log set reason = 'x' where seq = 2",
        "alter table ledger.audit_log enable trigger all",
    ] {
        sqlx::query(statement).execute(&mut conn).await.unwrap();
    }
    conn.close().await.unwrap();

    let broken = effectwatch(&db.url, &["audit", "verify"]).await;
    assert_ne!(broken.code, Some(0));
    assert!(broken.code.is_some());
    let line = one_line(&broken);
    assert!(line.contains("entry 2"), "{line}");
    assert!(!broken.stdout.contains("intact"), "{}", broken.stdout);

    let json_run = effectwatch(&db.url, &["audit", "verify", "--format", "json"]).await;
    assert_ne!(json_run.code, Some(0));
    let report: Value = serde_json::from_str(&json_run.stdout).unwrap();
    assert_eq!(report["first_broken_seq"], 2);
}

/// Errors quote what they are about (a key, a database message that names a key): stderr is a
/// terminal too.
#[tokio::test]
async fn a_hostile_key_in_an_error_never_puts_an_escape_on_stderr() {
    let db = common::test_db().await;
    let run = effectwatch(
        &db.url,
        &["show", "missing\u{1b}]52;c;cHduZWQ=\u{7}\u{1b}[2J"],
    )
    .await;
    assert_eq!(run.code, Some(6), "{}", run.stderr);
    one_line(&run);
    assert!(
        !run.stderr.as_bytes().contains(&0x1b) && !run.stderr.as_bytes().contains(&0x07),
        "an escape sequence reached stderr: {:?}",
        run.stderr
    );
}

/// An error that quotes a 131,000-character key is still one readable line: the key is cut in
/// the middle, so its start and its end both show.
#[tokio::test]
async fn an_error_about_a_huge_key_is_one_short_line() {
    let db = common::test_db().await;
    let key = format!("huge-start:{}:huge-end", "k".repeat(131_000 - 20));
    let run = effectwatch(&db.url, &["show", &key]).await;
    assert_eq!(run.code, Some(6), "{:.300}", run.stderr);
    let line = one_line(&run);
    assert!(
        line.chars().count() < 1_100,
        "{} characters: {line:.300}",
        line.chars().count()
    );
    assert!(line.contains("huge-start:kkkk"), "{line}");
    assert!(line.contains("kkkk:huge-end"), "{line}");
    assert!(line.contains('…'), "{line}");
}

#[tokio::test]
async fn a_ledger_made_by_other_migrations_is_one_line_not_a_checksum_error() {
    let db = common::test_db().await;
    // Each its own exit code and advice: an edited migration cannot be
    // mended by a migrate (11); a newer ledger wants a newer binary (10).
    let tampers = [
        (
            "an edited migration",
            "update public._sqlx_migrations set checksum = '\\x00'::bytea where version = 1",
            11,
            "effectwatch demo --fresh",
        ),
        (
            "a migration this version lacks",
            "insert into public._sqlx_migrations (version, description, success, checksum, execution_time)
             values (9999, 'from elsewhere', true, '\\x00'::bytea, 0)",
            10,
            "upgrade effectwatch",
        ),
    ];
    for (what, tamper, code, advice) in tampers {
        let original: Vec<u8> =
            sqlx::query_scalar("select checksum from public._sqlx_migrations where version = 1")
                .fetch_one(&db.pool)
                .await
                .unwrap();
        sqlx::query(AssertSqlSafe(tamper))
            .execute(&db.pool)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let run = effectwatch(&db.url, &["migrate"]).await;
        assert_eq!(run.code, Some(code), "{what}: {}", run.stderr);
        let line = one_line(&run);
        assert!(line.contains(advice), "{what}: {line}");
        assert!(!line.to_lowercase().contains("checksum"), "{what}: {line}");
        sqlx::query("delete from public._sqlx_migrations where version = 9999")
            .execute(&db.pool)
            .await
            .unwrap();
        sqlx::query("update public._sqlx_migrations set checksum = $1 where version = 1")
            .bind(original)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    let again = effectwatch(&db.url, &["migrate"]).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
}

#[tokio::test]
async fn list_and_finance_read_the_past_and_refuse_the_future() {
    let db = common::test_db().await;
    let future = effectwatch(
        &db.url,
        &["list", "unknown", "--at", "2099-01-01T00:00:00Z"],
    )
    .await;
    assert_eq!(future.code, Some(2), "{}", future.stderr);
    assert!(
        one_line(&future).contains("in the future"),
        "{}",
        future.stderr
    );

    let mut intent = intent("at-1", "invoice:AT");
    intent.pending_window_secs = Some(60);
    begin_effect(&db.pool, &intent).await.unwrap();
    let past = effectwatch(&db.url, &["list", "held", "--at", "1m"]).await;
    assert_eq!(past.code, Some(0), "{}", past.stderr);
    assert!(past.stdout.contains("nothing open at"), "{}", past.stdout);
    let finance = effectwatch(&db.url, &["finance", "--at", "1m"]).await;
    assert_eq!(finance.code, Some(0), "{}", finance.stderr);
    assert!(finance.stdout.contains(" as of "), "{}", finance.stdout);
    let report = effectwatch(&db.url, &["report", "--at", "1m"]).await;
    assert_eq!(report.code, Some(2), "{}", report.stderr);
}

#[tokio::test]
async fn the_console_refuses_to_start_on_what_waiting_cannot_fix() {
    let db = common::test_db().await;
    let empty = EmptyDb::create(&db).await;
    let no_schema = effectwatch(&empty.url, &["watch"]).await;
    assert_eq!(no_schema.code, Some(5), "{}", no_schema.stderr);
    assert!(
        one_line(&no_schema).contains("effectwatch migrate"),
        "{}",
        no_schema.stderr
    );
    assert!(
        no_schema.stdout.is_empty(),
        "the console took the screen: {:?}",
        no_schema.stdout
    );

    let missing = url_with_database(&db.url, "ew_no_such_database");
    let refused = effectwatch(&missing, &["watch"]).await;
    assert_eq!(refused.code, Some(4), "{}", refused.stderr);
    let line = one_line(&refused);
    assert!(
        line.contains("refused the connection") && line.contains("does not exist"),
        "{line}"
    );
    assert!(refused.stdout.is_empty());
}

/// A login that may not read the panes (an approver, an agent) gets the
/// CLI's answer, exit 8 with one line, not a console that says "permission
/// denied" at every poll for as long as it is open.
#[tokio::test]
async fn a_console_for_a_login_that_may_not_read_the_panes_exits_8_with_one_line() {
    let db = common::test_db().await;
    for member_of in ["effect_approver", "effect_agent"] {
        let login = common::roles::LoginRole::create(&db, member_of).await;
        if login.connect(&db).await.is_none() {
            return;
        }
        let mut url = reqwest::Url::parse(&db.url).unwrap();
        url.set_username(&login.name).unwrap();
        url.set_password(None).unwrap();
        let console = effectwatch(url.as_str(), &["watch"]).await;
        assert_eq!(console.code, Some(8), "{member_of}: {}", console.stderr);
        let line = one_line(&console);
        assert!(line.contains("permission denied"), "{member_of}: {line}");
        assert!(
            line.contains("may not read the panes"),
            "{member_of}: {line}"
        );
        assert!(
            console.stdout.is_empty(),
            "{member_of}: the console took the screen: {:?}",
            console.stdout
        );
    }
}

#[tokio::test]
async fn a_reader_that_stops_early_ends_the_command_quietly() {
    let db = common::test_db().await;
    // Enough held rows that the table outgrows any pipe buffer.
    let made: i64 = sqlx::query_scalar(
        "select count(*) from generate_series(1, 3000) g,
                lateral ledger.begin_effect(op_key => 'pipe:' || g, action => 'refund',
                    target => 'invoice:pipe-' || (g % 2), params => '{}', requested_by => 'agent') b",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(made, 3000);

    let mut child = Command::new(BIN)
        .args(["--database-url", &db.url, "list", "held", "--limit", "5000"])
        .env_remove("DATABASE_URL")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Read the first line, as `head -1` would, then close the pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 256];
    let read = tokio::io::AsyncReadExt::read(&mut stdout, &mut first)
        .await
        .unwrap();
    assert!(read > 0);
    drop(stdout);
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the command ends once its reader is gone")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("Broken pipe") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

/// `list` at its limit says how many items it left out and how to see
/// them, in the table and in JSON; under the limit it says nothing more.
#[tokio::test]
async fn list_says_how_many_it_left_out_and_how_to_see_them() {
    let db = common::test_db().await;
    begin_effect(&db.pool, &intent("refund:LIM:0", "invoice:LIM"))
        .await
        .unwrap();
    for n in 1..=3 {
        let held = begin_effect(&db.pool, &intent(&format!("refund:LIM:{n}"), "invoice:LIM"))
            .await
            .unwrap();
        assert_eq!(held.decision, Decision::Held);
    }
    let table = effectwatch(&db.url, &["list", "held", "--limit", "2"]).await;
    assert_eq!(table.code, Some(0), "{}", table.stderr);
    assert!(
        table
            .stdout
            .contains("Held conflicts: 2 of 3 shown, 1 left out (--limit 3 lists them all)"),
        "{}",
        table.stdout
    );
    let json_run = effectwatch(
        &db.url,
        &["list", "held", "--limit", "2", "--format", "json"],
    )
    .await;
    assert_eq!(json_run.code, Some(0), "{}", json_run.stderr);
    let parsed: Value = serde_json::from_str(&json_run.stdout).unwrap();
    assert_eq!(parsed["rows"].as_array().map(Vec::len), Some(2));
    assert_eq!(parsed["total"], 3);
    assert_eq!(parsed["left_out"], 1);
    assert_eq!(parsed["see_all"], "--limit 3");

    let all = effectwatch(&db.url, &["list", "held", "--limit", "3"]).await;
    assert!(!all.stdout.contains("left out"), "{}", all.stdout);
    let all = effectwatch(&db.url, &["list", "held", "--format", "json"]).await;
    let parsed: Value = serde_json::from_str(&all.stdout).unwrap();
    assert_eq!(parsed["left_out"], 0);
    assert_eq!(parsed["see_all"], Value::Null);
}

/// A worker that records an unknown outcome by its error class alone
/// (`timeout`, no reason) has it shown: by `show`, and in the unknown
/// pane's last error, in the table and in JSON.
#[tokio::test]
async fn an_unknown_effect_shows_the_error_class_its_worker_gave() {
    use effectwatch::ledger::writer::{Completion, ErrorClass, Outcome, complete_effect};
    let db = common::test_db().await;
    let key = "refund:TIMEOUT:v1";
    begin_effect(&db.pool, &intent(key, "invoice:TIMEOUT"))
        .await
        .unwrap();
    effectwatch::ledger::writer::mark_dispatched(&db.pool, key, None, "w")
        .await
        .unwrap();
    let completion = Completion {
        error_class: Some(ErrorClass::Timeout),
        ..Completion::default()
    };
    complete_effect(&db.pool, key, Outcome::Unknown, &completion)
        .await
        .unwrap();

    let show = effectwatch(&db.url, &["show", key]).await;
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    let failure = show
        .stdout
        .lines()
        .find(|line| line.trim_start().starts_with("failure"))
        .unwrap_or_else(|| panic!("no failure line:\n{}", show.stdout));
    assert!(failure.contains("timeout"), "{failure}");

    let table = effectwatch(&db.url, &["list", "unknown"]).await;
    let row = table
        .stdout
        .lines()
        .find(|line| line.contains(key))
        .unwrap_or_else(|| panic!("{}", table.stdout));
    assert!(row.contains("timeout"), "{row}");
    let json_run = effectwatch(&db.url, &["list", "unknown", "--format", "json"]).await;
    let parsed: Value = serde_json::from_str(&json_run.stdout).unwrap();
    assert_eq!(parsed["rows"][0]["last_error"], "timeout");
}
