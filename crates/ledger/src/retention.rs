//! Retention: removing old settled effects with `ledger.prune_settled`
//! (sql/migrations/0013_retention.sql says what it never removes and why). Owner only.
//! With an export, every record is written and made durable before anything
//! is deleted, and exactly the exported effects are deleted, in one
//! transaction that holds them locked throughout.

use std::collections::BTreeMap;
use std::time::Duration;

use super::LedgerPool;
use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

use super::LedgerError;
use super::audit::CheckpointSigner;

/// Which settled effects are old enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cutoff {
    /// Settled more than this long ago (when the prune runs, by the database clock).
    OlderThan(Duration),
    /// Settled before this instant.
    Before(DateTime<Utc>),
}

impl Cutoff {
    /// The `older_than` argument, as an SQL expression over binds $1 and $2.
    const OLDER_THAN: &'static str = "coalesce($1::interval, now() - $2::timestamptz)";

    fn binds(self) -> (Option<Duration>, Option<DateTime<Utc>>) {
        match self {
            Cutoff::OlderThan(age) => (Some(age), None),
            Cutoff::Before(at) => (None, Some(at)),
        }
    }
}

/// Receives the records of what is about to be pruned.
pub trait ExportSink {
    /// One effect with its attempts, events, reconciliations and holds.
    fn record(&mut self, data: &Value) -> std::io::Result<()>;
    /// Makes the records durable; nothing is deleted unless this succeeds.
    fn finish(&mut self) -> std::io::Result<()>;
}

#[derive(Debug, Error)]
pub enum PruneError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("writing the export failed, nothing was pruned: {0}")]
    Export(std::io::Error),
    #[error(
        "the ledger changed during the prune ({exported} exported, {deleted} deletable): nothing was pruned; run it again"
    )]
    Changed { exported: usize, deleted: i64 },
}

/// What a prune would do: how many old settled effects may go, and how many
/// stay, by reason; the months of history dropped whole; the tombstones that go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrunePlan {
    pub prunable: i64,
    pub kept: BTreeMap<String, i64>,
    /// The months of history that would be dropped whole (YYYY-MM).
    pub months: Vec<String>,
    /// The months that ended before this would stay (their history going
    /// row by row): their audit entries need a signed checkpoint, and the
    /// plan was made for a prune without a signing key.
    pub unsigned_through: Option<DateTime<Utc>>,
    /// The tombstones that would go, when a tombstone age was given.
    pub tombstones: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct PruneOutcome {
    pub effects: i64,
    pub attempts: i64,
    pub events: i64,
    pub reconciliations: i64,
    pub holds: i64,
    /// Keys left as tombstones, which begin_effect answers from.
    pub tombstones: i64,
    /// Old settled effects kept, by reason.
    pub kept: Value,
    pub cutoff: DateTime<Utc>,
    /// The months of history dropped whole, with the rows dropped and the
    /// rows carried into the kept partitions per table, and the audit
    /// checkpoint made (sql/migrations/0018_history_partitions.sql).
    pub history: Value,
    /// Months that ended before this were not dropped (their history went
    /// row by row): their audit entries need a signed checkpoint and no
    /// signing key was given.
    #[sqlx(skip)]
    pub unsigned_through: Option<DateTime<Utc>>,
    pub audit_seq: i64,
}

/// What [`prune`] with the same arguments would do now, refusing what it
/// would refuse (ledger.prune_plan): `signed` says whether it would have a
/// key to sign the audit checkpoint that dropping old months may need.
pub async fn plan(
    pool: &LedgerPool,
    cutoff: Cutoff,
    signed: bool,
    tombstones_older_than: Option<Duration>,
) -> Result<PrunePlan, LedgerError> {
    let (older_than, before) = cutoff.binds();
    let sql = format!(
        "select prunable, kept, months, unsigned_through, tombstones
           from ledger.prune_plan({}, $3, $4::interval)",
        Cutoff::OLDER_THAN
    );
    let (prunable, kept, months, unsigned_through, tombstones): PlanRow =
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(older_than)
            .bind(before)
            .bind(signed)
            .bind(tombstones_older_than)
            .fetch_one(pool)
            .await?;
    Ok(PrunePlan {
        prunable,
        kept: serde_json::from_value(kept).unwrap_or_default(),
        months,
        unsigned_through,
        tombstones,
    })
}

type PlanRow = (i64, Value, Vec<String>, Option<DateTime<Utc>>, Option<i64>);

pub async fn prune(
    pool: &LedgerPool,
    cutoff: Cutoff,
    operator: &str,
    reason: &str,
    export: Option<&mut dyn ExportSink>,
    signer: Option<&CheckpointSigner>,
) -> Result<PruneOutcome, PruneError> {
    let (older_than, before) = cutoff.binds();
    ensure_months(pool).await?;
    let mut tx = pool.begin().await.map_err(LedgerError::from)?;
    // A batch job over the whole ledger, not an interactive poll.
    sqlx::query("set local statement_timeout = '1h'")
        .execute(&mut tx)
        .await
        .map_err(LedgerError::from)?;
    let mut only_ids: Option<Vec<i64>> = None;
    if let Some(sink) = export {
        let mut ids = Vec::new();
        let sql = format!(
            "select effect_id, data from ledger.prune_export({})",
            Cutoff::OLDER_THAN
        );
        // Read as every reader reads the ledger's JSON: what nests deeper
        // than a reader walks is cut, not a prune stopped.
        let mut rows =
            sqlx::query_as::<_, (i64, super::json::BoundedJson)>(sqlx::AssertSqlSafe(sql))
                .bind(older_than)
                .bind(before)
                .fetch(&mut tx);
        while let Some((id, data)) = rows.try_next().await.map_err(LedgerError::from)? {
            sink.record(&Value::from(data))
                .map_err(PruneError::Export)?;
            ids.push(id);
        }
        drop(rows);
        sink.finish().map_err(PruneError::Export)?;
        only_ids = Some(ids);
    }
    // The audit entries of the months that go are vouched for by a
    // checkpoint signed here, with a key the database never sees.
    let sql = format!(
        "select through, message from ledger.audit_checkpoint_due(now() - {})",
        Cutoff::OLDER_THAN
    );
    let due: Option<(DateTime<Utc>, String)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(older_than)
        .bind(before)
        .fetch_optional(&mut tx)
        .await
        .map_err(LedgerError::from)?;
    // Without a key the months stay and their history goes row by row:
    // retention still works, only slower.
    let (drop_months, unsigned_through, message, signature, public_key) = match (due, signer) {
        (None, _) => (true, None, None, None, None),
        (Some((through, _)), None) => (false, Some(through), None, None, None),
        (Some((_, message)), Some(signer)) => {
            let signature = signer.sign(&message);
            (
                true,
                None,
                Some(message),
                Some(signature),
                Some(signer.public_key()),
            )
        }
    };
    let sql = format!(
        "select effects, attempts, events, reconciliations, holds, tombstones, kept, cutoff, history, audit_seq
           from ledger.prune_settled(older_than => {}, operator => $3, reason => $4, only_ids => $5,
                                     drop_months => $6, checkpoint_message => $7,
                                     checkpoint_signature => $8, checkpoint_key => $9)",
        Cutoff::OLDER_THAN
    );
    let mut outcome = sqlx::query_as::<_, PruneOutcome>(sqlx::AssertSqlSafe(sql))
        .bind(older_than)
        .bind(before)
        .bind(operator)
        .bind(reason)
        .bind(&only_ids)
        .bind(drop_months)
        .bind(message)
        .bind(signature)
        .bind(public_key)
        .fetch_one(&mut tx)
        .await
        .map_err(LedgerError::from)?;
    if let Some(ids) = &only_ids
        && outcome.effects != ids.len() as i64
    {
        // Dropping the transaction rolls it back.
        return Err(PruneError::Changed {
            exported: ids.len(),
            deleted: outcome.effects,
        });
    }
    tx.commit().await.map_err(LedgerError::from)?;
    outcome.unsigned_through = unsigned_through;
    Ok(outcome)
}

/// Refuses a tombstone age the ledger refuses (under 30 days), so a prune
/// asked to drop tombstones too stops before it removes anything.
pub async fn check_tombstone_age(
    pool: &LedgerPool,
    older_than: Duration,
) -> Result<(), LedgerError> {
    sqlx::query("select ledger.tombstone_cutoff($1::interval)")
        .bind(older_than)
        .execute(pool)
        .await?;
    Ok(())
}

/// Drops the tombstones of keys pruned more than `older_than` ago (the
/// ledger refuses under 30 days): such a key could then proceed as new.
/// Returns how many went and the audit entry.
pub async fn prune_tombstones(
    pool: &LedgerPool,
    older_than: Duration,
    operator: &str,
    reason: &str,
) -> Result<(i64, i64), LedgerError> {
    Ok(sqlx::query_as(
        "select tombstones, audit_seq from ledger.prune_tombstones($1::interval, $2, $3)",
    )
    .bind(older_than)
    .bind(operator)
    .bind(reason)
    .fetch_one(pool)
    .await?)
}

/// Makes the history's months from this one through two ahead, where
/// missing (sql/migrations/0018_history_partitions.sql); returns how many were made.
/// Cheap when they exist: migrate and every reconciler pass call it.
pub async fn ensure_months(pool: &LedgerPool) -> Result<i32, LedgerError> {
    Ok(
        sqlx::query_scalar("select ledger.ensure_next_history_months()")
            .fetch_one(pool)
            .await?,
    )
}
