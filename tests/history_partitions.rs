//! History ages out by the month: retention drops whole month partitions of
//! attempts, versions, reconciliations and the audit trail, carries over
//! every row of an effect that stays, and leaves the audit chain verifiable
//! from a checkpoint signed with a key the database never sees.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use effectwatch::ledger::LedgerPool;
use effectwatch::ledger::actions::{self, SeenVersion};
use effectwatch::ledger::history::find_effect;
use effectwatch::ledger::writer::{Outcome, begin_effect};
use effectwatch::ledger::{Decision, State};
use serde_json::Value;
use sqlx::AssertSqlSafe;

async fn settle(pool: &LedgerPool, key: &str, outcome: Outcome) {
    common::settle(pool, &common::intent(key, &format!("t:{key}")), outcome).await;
}

/// Rows of each history table per effect key, and where they live.
async fn history_rows(pool: &LedgerPool) -> BTreeMap<String, Vec<(String, i64)>> {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "select e.op_key, h.tbl, h.n from ledger.effects e
          cross join lateral (
              select 'attempts' as tbl, count(*) as n from ledger.attempts a where a.effect_id = e.id
              union all select 'versions', count(*) from ledger.effect_versions v where v.effect_id = e.id
              union all select 'reconciliations', count(*) from ledger.reconciliations r where r.effect_id = e.id
              union all select 'audit', count(*) from ledger.audit_log a where a.effect_id = e.id) h
          order by 1, 2",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut by_key: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
    for (key, table, n) in rows {
        by_key.entry(key).or_default().push((table, n));
    }
    by_key
}

/// The Audit tab's count, which the chain's head keeps rather than counts.
async fn audit_tab_count(pool: &LedgerPool) -> i64 {
    sqlx::query_scalar("select items from ledger.pane_counts where pane = 'audit'")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn months(pool: &LedgerPool) -> Vec<String> {
    sqlx::query_scalar("select to_char(month, 'YYYY-MM') from ledger.history_months order by 1")
        .fetch_all(pool)
        .await
        .unwrap()
}

async fn partitions_of(pool: &LedgerPool, table: &str) -> Vec<String> {
    sqlx::query_scalar(
        "select c.relname::text from pg_inherits i join pg_class c on c.oid = i.inhrelid
          where i.inhparent = ('ledger.' || $1)::regclass order by 1",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .unwrap()
}

fn cli(db_url: &str, config: &Path, args: &[&str]) -> std::process::Output {
    let config = config.to_str().unwrap();
    let mut all = vec!["--database-url", db_url, "--config", config];
    all.extend_from_slice(args);
    common::effectwatch_cli(&all)
}

fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A config naming the signing key, trusting `trusted` keys.
fn write_config(dir: &Path, signing_key: Option<&Path>, trusted: &[&str]) -> std::path::PathBuf {
    let path = dir.join(format!("config-{}.toml", trusted.len()));
    let mut toml = String::from("operator = \"retention-bot\"\n[audit]\n");
    if let Some(key) = signing_key {
        toml += &format!("signing_key = \"{}\"\n", key.display());
    }
    toml += &format!(
        "trusted_keys = [{}]\n",
        trusted
            .iter()
            .map(|k| format!("\"{k}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    std::fs::write(&path, toml).unwrap();
    path
}

/// The public key keygen printed.
fn keygen(dir: &Path, name: &str) -> (std::path::PathBuf, String) {
    let path = dir.join(name);
    let output = common::effectwatch_cli(&["audit", "keygen", "--out", path.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output));
    let printed = text(&output);
    let public = printed
        .lines()
        .find_map(|line| line.split("trusted_keys: ").nth(1))
        .unwrap_or_else(|| panic!("no public key in: {printed}"))
        .trim()
        .to_string();
    (path, public)
}

#[tokio::test]
async fn a_month_of_history_is_dropped_whole_and_every_effect_that_stays_keeps_all_of_its_own() {
    let db = common::test_db().await;
    let pool = &db.pool;

    settle(pool, "k:plain:1", Outcome::Succeeded).await;
    settle(pool, "k:plain:2", Outcome::Failed { retryable: false }).await;
    settle(pool, "k:unknown", Outcome::Unknown).await;
    settle(pool, "k:annotated", Outcome::Succeeded).await;
    let annotated = find_effect(pool, "k:annotated").await.unwrap().unwrap();
    actions::ANNOTATE
        .call(
            pool,
            "k:annotated",
            SeenVersion(annotated.version),
            "bob",
            "checked with the bank",
        )
        .await
        .unwrap();
    // An audit entry that names no effect: it goes with its month.
    sqlx::query("select * from ledger.prune_tombstones('400 days', 'ops', 'nothing to drop yet')")
        .execute(pool)
        .await
        .unwrap();
    let entries_before: i64 = sqlx::query_scalar("select count(*) from ledger.audit_log")
        .fetch_one(pool)
        .await
        .unwrap();

    common::age_ledger(pool, 3, true).await;
    settle(pool, "k:recent", Outcome::Succeeded).await;
    let months_before = months(pool).await;
    assert!(months_before.len() >= 4, "{months_before:?}");
    let history_before = history_rows(pool).await;
    let dir = tempfile::tempdir().unwrap();

    let (key_file, public) = keygen(dir.path(), "audit.key");
    let config = write_config(dir.path(), Some(&key_file), &[&public]);
    let dry = cli(
        &db.url,
        &config,
        &["prune", "--older-than", "30d", "--dry-run"],
    );
    assert!(dry.status.success(), "{}", text(&dry));
    let oldest = &months_before[0];
    assert!(
        text(&dry).contains(&format!("would drop the history of {oldest}")),
        "{}",
        text(&dry)
    );

    let pruned = cli(&db.url, &config, &["prune", "--older-than", "30d"]);
    assert!(pruned.status.success(), "{}", text(&pruned));
    assert!(
        text(&pruned).contains("pruned 2 effects"),
        "{}",
        text(&pruned)
    );
    assert!(
        text(&pruned).contains("audit checkpoint signed"),
        "{}",
        text(&pruned)
    );

    // The old months are gone from every history table, the kept
    // partitions and the newer months are not.
    let months_after = months(pool).await;
    assert!(!months_after.contains(oldest), "{months_after:?}");
    assert!(months_after.len() < months_before.len());
    for table in [
        "attempts",
        "effect_versions",
        "reconciliations",
        "audit_log",
    ] {
        let partitions = partitions_of(pool, table).await;
        assert!(
            !partitions.contains(&format!("{table}_{}", oldest.replace('-', "_"))),
            "{table}: {partitions:?}"
        );
        assert!(
            partitions.contains(&format!("{table}_kept")),
            "{table}: {partitions:?}"
        );
    }

    // The pruned effects went, and their keys can never proceed again.
    assert!(find_effect(pool, "k:plain:1").await.unwrap().is_none());
    let replay = begin_effect(pool, &common::intent("k:plain:1", "t:k:plain:1"))
        .await
        .unwrap();
    assert_ne!(replay.decision, Decision::Proceed);

    // Every effect that stays has every row it had, now in the kept
    // partitions or its own month.
    let history_after = history_rows(pool).await;
    for key in ["k:unknown", "k:annotated", "k:recent"] {
        assert_eq!(history_after.get(key), history_before.get(key), "{key}");
    }
    let unknown = find_effect(pool, "k:unknown").await.unwrap().unwrap();
    assert_eq!(unknown.state, State::Unknown);
    let kept_versions: i64 = sqlx::query_scalar(
        "select count(*) from ledger.effect_versions_kept v
           join ledger.effects e on e.id = v.effect_id where e.op_key = 'k:unknown'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    // Its dispatch and its outcome; the version it was created with is its row's own.
    assert!(kept_versions >= 2, "{kept_versions}");

    // The entry naming no effect went; those naming an effect stayed.
    let (entries_after, named_no_effect_old): (i64, i64) = sqlx::query_as(
        "select count(*), count(*) filter (where effect_id is null and action = 'prune_tombstones')
           from ledger.audit_log",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(named_no_effect_old, 0);
    assert_eq!(
        entries_after,
        entries_before - 1 + 1,
        "one dropped, the prune's own added"
    );
    assert_eq!(
        audit_tab_count(pool).await,
        entries_after,
        "the Audit tab counts what the log holds after a month went"
    );

    // The chain verifies from the checkpoint, signed by the trusted key.
    let verified = cli(&db.url, &config, &["audit", "verify", "--format", "json"]);
    assert!(verified.status.success(), "{}", text(&verified));
    let report: Value = serde_json::from_slice(&verified.stdout).unwrap();
    assert_eq!(report["checkpoint"]["signature"], "trusted", "{report}");
    assert!(report["first_broken_seq"].is_null(), "{report}");
    assert!(
        report["checked"].as_i64().unwrap() >= entries_after,
        "{report}"
    );

    // A key the config does not trust is refused, and so is one no key is
    // trusted to check.
    let trusting_none = write_config(dir.path(), Some(&key_file), &[]);
    let unchecked = cli(&db.url, &trusting_none, &["audit", "verify"]);
    assert!(!unchecked.status.success(), "{}", text(&unchecked));
    assert!(
        text(&unchecked).contains("no key is trusted to vouch for it"),
        "{}",
        text(&unchecked)
    );
    let (_, stranger) = keygen(dir.path(), "other.key");
    let distrustful = write_config(dir.path(), Some(&key_file), &[&stranger, &stranger]);
    let untrusted = cli(&db.url, &distrustful, &["audit", "verify"]);
    assert!(!untrusted.status.success(), "{}", text(&untrusted));
    assert!(
        text(&untrusted).contains("NOT in [audit] trusted_keys"),
        "{}",
        text(&untrusted)
    );

    // Removing a kept entry from before the checkpoint is noticed.
    sqlx::query(
        "do $$ begin
             alter table ledger.audit_log_kept disable trigger audit_append_only;
             delete from ledger.audit_log_kept where effect_id is not null;
             alter table ledger.audit_log_kept enable always trigger audit_append_only;
         end $$",
    )
    .execute(pool)
    .await
    .unwrap();
    let broken = cli(&db.url, &config, &["audit", "verify"]);
    assert!(!broken.status.success(), "{}", text(&broken));
    assert!(
        text(&broken).contains("entries are missing"),
        "{}",
        text(&broken)
    );
}

#[tokio::test]
async fn a_checkpoint_altered_after_it_was_signed_does_not_verify() {
    let db = common::test_db().await;
    let pool = &db.pool;
    sqlx::query("select * from ledger.prune_tombstones('400 days', 'ops', 'an entry to drop')")
        .execute(pool)
        .await
        .unwrap();
    common::age_ledger(pool, 2, true).await;
    let dir = tempfile::tempdir().unwrap();
    let (key_file, public) = keygen(dir.path(), "audit.key");
    let config = write_config(dir.path(), Some(&key_file), &[&public]);
    let pruned = cli(&db.url, &config, &["prune", "--older-than", "20d"]);
    assert!(pruned.status.success(), "{}", text(&pruned));
    let good = cli(&db.url, &config, &["audit", "verify"]);
    assert!(good.status.success(), "{}", text(&good));
    assert!(
        text(&good).contains("signed by a trusted key"),
        "{}",
        text(&good)
    );

    // The checkpoint's own row is append-only, like the trail.
    let refused =
        sqlx::query("update ledger.audit_checkpoints set kept_entries = kept_entries + 1")
            .execute(pool)
            .await;
    assert!(refused.is_err());

    // Forged past the trigger: a message no longer matching its fields,
    // then a message rewritten to match, whose signature no longer holds.
    for forgery in [
        "update ledger.audit_checkpoints set kept_entries = kept_entries + 1",
        "update ledger.audit_checkpoints
            set message = ledger.audit_checkpoint_message(seq, hash, through, kept_entries, kept_digest)",
    ] {
        sqlx::query(AssertSqlSafe(format!(
            "do $$ begin
                 alter table ledger.audit_checkpoints disable trigger audit_checkpoints_append_only;
                 {forgery};
                 alter table ledger.audit_checkpoints enable always trigger audit_checkpoints_append_only;
             end $$"
        )))
        .execute(pool)
        .await
        .unwrap();
        let verdict = cli(&db.url, &config, &["audit", "verify"]);
        assert!(!verdict.status.success(), "{forgery}: {}", text(&verdict));
    }
    let last = cli(&db.url, &config, &["audit", "verify"]);
    assert!(
        text(&last).contains("whose signature does NOT verify"),
        "{}",
        text(&last)
    );
}

#[tokio::test]
async fn rows_written_where_no_month_exists_wait_in_the_kept_partition_and_move_into_it_when_made()
{
    let db = common::test_db().await;
    let pool = &db.pool;
    settle(pool, "k:one", Outcome::Succeeded).await;
    settle(pool, "k:two", Outcome::Unknown).await;
    let before = history_rows(pool).await;
    // Six months back no month was made: the rows land in the kept partition.
    common::age_ledger(pool, 6, false).await;
    let in_kept: i64 = sqlx::query_scalar("select count(*) from ledger.effect_versions_kept")
        .fetch_one(pool)
        .await
        .unwrap();
    // Each effect's dispatch and the unknown outcome (a creation, and a plain success, are
    // their row's own).
    assert!(in_kept >= 3, "{in_kept}");

    let made: i32 = sqlx::query_scalar(
        "select ledger.ensure_history_partitions(now() - interval '6 months', now() - interval '6 months')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(made, 1);
    let still_kept: i64 = sqlx::query_scalar(
        "select (select count(*) from ledger.effect_versions_kept)
              + (select count(*) from ledger.attempts_kept)
              + (select count(*) from ledger.audit_log_kept)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(still_kept, 0);
    assert_eq!(history_rows(pool).await, before);
    let entries: i64 = sqlx::query_scalar("select count(*) from ledger.audit_log")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(
        audit_tab_count(pool).await,
        entries,
        "entries moved between partitions are counted once"
    );
    // The new month's triggers fire whoever writes, as every ledger trigger.
    let lax: i64 = sqlx::query_scalar(
        "select count(*) from pg_trigger t join pg_class c on c.oid = t.tgrelid
          where c.relname like '%\\_20__\\_%' and not t.tgisinternal and t.tgenabled <> 'A'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(lax, 0);
    let append_only = sqlx::query("delete from ledger.attempts")
        .execute(pool)
        .await;
    assert!(append_only.is_err());
    // Nor can a month or the kept partition be truncated by name.
    let month: String = sqlx::query_scalar(
        "select 'ledger.audit_log_' || to_char(now() - interval '6 months', 'YYYY_MM')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    for table in [
        month.as_str(),
        "ledger.audit_log_kept",
        "ledger.attempts_kept",
        "ledger.effect_versions_kept",
    ] {
        let truncated = sqlx::query(AssertSqlSafe(format!("truncate {table}")))
            .execute(pool)
            .await;
        assert!(truncated.is_err(), "{table} was truncated");
    }
}

#[tokio::test]
async fn without_a_signing_key_history_goes_row_by_row_and_the_months_stay() {
    let db = common::test_db().await;
    let pool = &db.pool;
    settle(pool, "k:plain", Outcome::Succeeded).await;
    settle(pool, "k:unknown", Outcome::Unknown).await;
    sqlx::query(
        "select * from ledger.prune_tombstones('400 days', 'ops', 'an entry that would go')",
    )
    .execute(pool)
    .await
    .unwrap();
    common::age_ledger(pool, 3, true).await;
    let months_before = months(pool).await;
    let kept_before = history_rows(pool).await.remove("k:unknown");
    let dir = tempfile::tempdir().unwrap();
    let unsigned = write_config(dir.path(), None, &[]);
    let pruned = cli(&db.url, &unsigned, &["prune", "--older-than", "30d"]);
    assert!(pruned.status.success(), "{}", text(&pruned));
    assert!(
        text(&pruned).contains("pruned 1 effects"),
        "{}",
        text(&pruned)
    );
    assert!(
        text(&pruned).contains("were not dropped"),
        "{}",
        text(&pruned)
    );
    assert!(months(pool).await.starts_with(&months_before));
    assert!(find_effect(pool, "k:plain").await.unwrap().is_none());
    let orphans: i64 = sqlx::query_scalar(
        "select count(*) from ledger.effect_versions v
          where not exists (select 1 from ledger.effects e where e.id = v.effect_id)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(orphans, 0);
    assert_eq!(history_rows(pool).await.remove("k:unknown"), kept_before);
    let verified = cli(&db.url, &unsigned, &["audit", "verify"]);
    assert!(verified.status.success(), "{}", text(&verified));
}
