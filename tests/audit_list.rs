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

async fn annotated(db: &common::TestDb, notes: usize) {
    begin_effect(&db.pool, &common::intent("k:anchor", "invoice:anchor"))
        .await
        .unwrap();
    for n in 0..notes {
        actions::ANNOTATE
            .call(
                &db.pool,
                "k:anchor",
                SeenVersion(1),
                "alice",
                &format!("note {n}"),
            )
            .await
            .unwrap();
    }
}

/// Runs statements as the owner with the audit log's triggers off: what an owner can do.
async fn as_owner_without_triggers(db: &common::TestDb, statements: &str) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "do $$ begin
             alter table ledger.audit_log disable trigger all;
             {statements}
             alter table ledger.audit_log enable always trigger audit_chain;
             alter table ledger.audit_log enable always trigger audit_append_only;
             alter table ledger.audit_log enable always trigger audit_no_truncate;
         end $$"
    )))
    .execute(&db.pool)
    .await
    .unwrap();
}

/// The owner rewrites an entry, recomputes every hash after it and moves the head to match:
/// the chain verifies on its own, but not against the anchor taken before. Cutting the newest
/// entries and moving the head back is caught the same way.
#[tokio::test]
async fn an_anchor_kept_outside_catches_an_owners_rewrite() {
    let db = common::test_db().await;
    annotated(&db, 4).await;
    let (code, anchor, stderr) = effectwatch(&db.url, &["audit", "anchor"]);
    assert_eq!(code, Some(0), "{stderr}");
    let anchor = anchor.trim().to_string();
    let head: String = sqlx::query_scalar("select seq || ':' || hash from ledger.audit_head")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(anchor, head);

    let (code, out, stderr) = effectwatch(&db.url, &["audit", "verify", "--expect", &anchor]);
    assert_eq!(code, Some(0), "{out}{stderr}");
    assert!(out.contains("entry 4 still has the anchored hash"), "{out}");

    // A consistent rewrite of entry 2 and everything after it, head included.
    as_owner_without_triggers(
        &db,
        "update ledger.audit_log set reason = 'nothing to see' where seq = 2;
         for n in 2..4 loop
             update ledger.audit_log a set prev_hash = p.hash
               from ledger.audit_log p where p.seq = n - 1 and a.seq = n;
             update ledger.audit_log a
                set hash = ledger.audit_entry_hash(a.prev_hash, a.seq, a.at, a.operator, a.db_role,
                                                   a.action, a.effect_id, a.op_key, a.reason,
                                                   a.before, a.after)
              where a.seq = n;
         end loop;
         update ledger.audit_head h set hash = a.hash from ledger.audit_log a where a.seq = h.seq;",
    )
    .await;
    let (code, out, stderr) = effectwatch(&db.url, &["audit", "verify"]);
    assert_eq!(code, Some(0), "the rewrite is consistent: {out}{stderr}");
    let (code, out, stderr) = effectwatch(&db.url, &["audit", "verify", "--expect", &anchor]);
    assert_eq!(code, Some(1), "{out}{stderr}");
    assert!(!out.contains("intact"), "{out}");
    assert!(
        stderr.contains(&format!(
            "audit anchor {anchor} NOT held: entry 4 now has hash"
        )),
        "{stderr}"
    );

    // Cutting the newest entries and moving the head back.
    let db = common::test_db().await;
    annotated(&db, 4).await;
    let (_, anchor, _) = effectwatch(&db.url, &["audit", "anchor"]);
    let anchor = anchor.trim().to_string();
    as_owner_without_triggers(
        &db,
        "delete from ledger.audit_log where seq >= 3;
         update ledger.audit_head h set seq = a.seq, hash = a.hash, entries = 2
           from ledger.audit_log a where a.seq = 2;",
    )
    .await;
    let (code, out, stderr) = effectwatch(&db.url, &["audit", "verify", "--expect", &anchor]);
    assert_eq!(code, Some(1), "{out}{stderr}");
    assert!(!out.contains("intact"), "{out}");
    assert!(stderr.contains("whose head is entry 2"), "{stderr}");

    // A mistyped anchor is a usage error, not a verdict.
    let (code, _, stderr) = effectwatch(&db.url, &["audit", "verify", "--expect", "4:nothex"]);
    assert_eq!(code, Some(2), "{stderr}");
}

/// A checkpoint no trusted key vouches for fails verification, and nothing on stdout says
/// the chain is intact.
#[tokio::test]
async fn verify_prints_no_success_line_when_the_checkpoint_is_not_trusted() {
    let db = common::test_db().await;
    annotated(&db, 3).await;
    let dir = tempfile::tempdir().unwrap();
    let signer =
        effectwatch::ledger::audit::CheckpointSigner::generate(&dir.path().join("audit.key"))
            .unwrap();
    let (seq, message): (i64, String) = sqlx::query_as(
        "select h.seq, ledger.audit_checkpoint_message(h.seq, h.hash, now(), d.entries, d.digest)
           from ledger.audit_head h, ledger.audit_kept_digest(h.seq) d",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "insert into ledger.audit_checkpoints (seq, hash, through, kept_entries, kept_digest,
                                               message, signature, public_key, made_by)
         select h.seq, h.hash, to_timestamp(split_part(split_part($1, 'through=', 2), ' ', 1)::numeric / 1000000),
                d.entries, d.digest, $1, $2, $3, 'retention'
           from ledger.audit_head h, ledger.audit_kept_digest(h.seq) d where h.seq = $4",
    )
    .bind(&message)
    .bind(signer.sign(&message))
    .bind(signer.public_key())
    .bind(seq)
    .execute(&db.pool)
    .await
    .unwrap();

    let (code, out, stderr) = effectwatch(&db.url, &["audit", "verify"]);
    assert_eq!(code, Some(1), "{out}{stderr}");
    assert!(
        stderr.contains("no key is trusted to vouch for it"),
        "{stderr}"
    );
    assert!(!out.contains("intact"), "{out}");
}

/// `audit list --help` says what `--operator` does there: it filters.
#[test]
fn audit_list_help_says_the_operator_flag_filters() {
    let help = common::effectwatch_cli(&["audit", "list", "--help"]);
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("--operator NAME lists only the entries NAME made"),
        "{text}"
    );
}
