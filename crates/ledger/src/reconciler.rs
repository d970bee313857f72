//! The reconciler service's ledger calls (`sql/migrations/0014_reconciler.sql`):
//! leasing what may be reconciled now, ending a lease with its backoff,
//! marking that a person was asked, and the figures its `/metrics` serves.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use super::LedgerError;

/// An effect leased to this reconciler for one pass.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Leased {
    pub op_key: String,
    /// The version the lease was taken on: the reconciliation is refused if
    /// the effect changed since (an agent's late completion, an operator).
    pub version: i64,
    pub state: String,
    /// Earlier passes that left it open.
    pub tries: i32,
    /// Its action's policy: what may settle it, and where a person is asked.
    pub retry_semantics: String,
    pub escalation_sink: Option<String>,
}

/// Where an effect stands after a pass ended its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct LeaseEnd {
    pub tries: i32,
    /// A person was already asked about it.
    pub escalated: bool,
    /// The effect is settled: it left the reconcilers' books.
    pub settled: bool,
}

/// How a reconciler leases work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    /// How long a lease holds: longer than a pass over one effect can take,
    /// so a live reconciler never loses one; a killed one's expire.
    pub lease: Duration,
    /// How long an unknown effect, or a dispatched pending one past its
    /// window, waits for its agent's late answer before a reconciler asks
    /// the provider.
    pub grace: Duration,
    pub batch: i64,
}

/// The ledger's clock: a pass is measured against it, not the reconciler's
/// host, so reconcilers on hosts whose clocks differ agree on what is due.
/// Writes unknown (worker_lost) every dispatched effect whose worker's
/// heartbeat lease ran out; their keys.
pub async fn declare_lost_workers<'c>(
    executor: impl PgExecutor<'c>,
) -> Result<Vec<String>, LedgerError> {
    Ok(
        sqlx::query_scalar("select op_key from ledger.declare_lost_workers()")
            .fetch_all(executor)
            .await?,
    )
}

pub async fn ledger_now<'c>(executor: impl PgExecutor<'c>) -> Result<DateTime<Utc>, LedgerError> {
    Ok(sqlx::query_scalar("select now()")
        .fetch_one(executor)
        .await?)
}

/// Leases up to `terms.batch` effects no other reconciler holds and whose
/// backoff was over by `due_before` (a pass's start; `None`: now);
/// concurrent callers never get the same effect.
pub async fn lease<'c>(
    executor: impl PgExecutor<'c>,
    reconciler: &str,
    terms: LeaseTerms,
    due_before: Option<DateTime<Utc>>,
) -> Result<Vec<Leased>, LedgerError> {
    Ok(sqlx::query_as(
        "select op_key, version, state, tries, retry_semantics, escalation_sink \
           from ledger.lease_for_reconcile(\
            $1, $2 * interval '1 second', $3 * interval '1 second', $4::integer, $5)",
    )
    .bind(reconciler)
    .bind(terms.lease.as_secs_f64())
    .bind(terms.grace.as_secs_f64())
    .bind(terms.batch)
    .bind(due_before)
    .fetch_all(executor)
    .await?)
}

/// Ends this reconciler's lease on `op_key` after a pass that found
/// `finding`; an effect still open waits `backoff` doubled per try (at most
/// `backoff_max`) before it is leased again.
pub async fn end_lease<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    reconciler: &str,
    finding: &str,
    backoff: Duration,
    backoff_max: Duration,
) -> Result<LeaseEnd, LedgerError> {
    Ok(sqlx::query_as(
        "select tries, escalated, settled from ledger.end_reconcile_lease(\
            $1, $2, $3, $4 * interval '1 second', $5 * interval '1 second')",
    )
    .bind(op_key)
    .bind(reconciler)
    .bind(finding)
    .bind(backoff.as_secs_f64())
    .bind(backoff_max.as_secs_f64())
    .fetch_one(executor)
    .await?)
}

/// Records that a person was asked about `op_key`: no reconciler asks again.
pub async fn mark_escalated<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    reconciler: &str,
) -> Result<(), LedgerError> {
    sqlx::query("select ledger.mark_reconcile_escalated($1, $2)")
        .bind(op_key)
        .bind(reconciler)
        .execute(executor)
        .await?;
    Ok(())
}

/// A step a flow of several still owes (`ledger.next_steps`), claimed by
/// this reconciler for one lease.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct NextStep {
    pub step_id: i64,
    /// The effect it is owed on: the flagged effect, or the compensation to send.
    pub op_key: String,
    /// `reverse_duplicates`, `escalate` or `send_compensation`.
    pub step: String,
    /// Why it is owed, as recorded with the step before it.
    pub why: String,
    /// Earlier claims that left it open.
    pub tries: i32,
    pub escalation_sink: Option<String>,
    /// For a compensation, the effect it reverses.
    pub original_key: Option<String>,
}

/// Where a step stands after its claim ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct StepEnd {
    pub tries: i32,
    pub open: bool,
}

/// Claims up to `batch` due steps no live claim holds, for `lease`, but
/// those in `taken`; concurrent callers never get the same step.
pub async fn claim_next_steps<'c>(
    executor: impl PgExecutor<'c>,
    reconciler: &str,
    lease: Duration,
    batch: i64,
    taken: &[i64],
) -> Result<Vec<NextStep>, LedgerError> {
    Ok(sqlx::query_as(
        "select step_id, op_key, step, why, tries, escalation_sink, original_key \
           from ledger.claim_next_steps($1, $2 * interval '1 second', $3::integer, $4)",
    )
    .bind(reconciler)
    .bind(lease.as_secs_f64())
    .bind(batch)
    .bind(taken)
    .fetch_all(executor)
    .await?)
}

/// Ends this reconciler's claim on a step: `done` when it was taken or is
/// no longer owed (`outcome` says which), else it is due again after a
/// backoff, with `outcome` as its last error.
pub async fn end_next_step<'c>(
    executor: impl PgExecutor<'c>,
    step: &NextStep,
    reconciler: &str,
    done: bool,
    outcome: &str,
    backoff: Duration,
    backoff_max: Duration,
) -> Result<StepEnd, LedgerError> {
    Ok(sqlx::query_as(
        "select tries, open from ledger.end_next_step(\
            $1, $2, $3, $4, $5 * interval '1 second', $6 * interval '1 second')",
    )
    .bind(step.step_id)
    .bind(reconciler)
    .bind(done)
    .bind(outcome)
    .bind(backoff.as_secs_f64())
    .bind(backoff_max.as_secs_f64())
    .fetch_one(executor)
    .await?)
}

/// The extra provider records the latest duplicate reconciliation of
/// `op_key` listed: every one but the effect's own reference.
pub async fn duplicate_records<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
) -> Result<Vec<String>, LedgerError> {
    Ok(sqlx::query_scalar(
        "select listed.ref from ledger.effects e \
           cross join lateral (select r.external_refs from ledger.reconciliations r \
                                where r.effect_id = e.id and r.finding = 'duplicate' \
                                order by r.at desc, r.id desc limit 1) latest \
           cross join lateral unnest(latest.external_refs) with ordinality listed(ref, n) \
          where e.op_key = $1 and listed.ref is distinct from e.external_ref \
          order by listed.n",
    )
    .bind(op_key)
    .fetch_all(executor)
    .await?)
}

/// The figures a reconciler's `/metrics` reads from the ledger at each
/// scrape (the counters of its own work it keeps itself).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LedgerFigures {
    pub effects_by_state: Vec<(String, i64)>,
    pub escalations_by_state: Vec<(String, i64)>,
    /// Seconds the oldest unknown effect has been unknown; 0 when none is.
    pub oldest_unknown_seconds: f64,
    pub leased: i64,
    pub backing_off: i64,
}

pub async fn figures(pool: &super::LedgerPool) -> Result<LedgerFigures, LedgerError> {
    let mut tx = super::snapshot::begin(pool).await?;
    let effects_by_state =
        sqlx::query_as("select state, count(*) from ledger.effects group by state order by state")
            .fetch_all(&mut tx)
            .await?;
    let escalations_by_state = sqlx::query_as(
        "select state, count(*) from ledger.escalations group by state order by state",
    )
    .fetch_all(&mut tx)
    .await?;
    let oldest_unknown_seconds: f64 = sqlx::query_scalar(
        "select coalesce(extract(epoch from now() - min(state_since)), 0)::float8 \
           from ledger.effects where state = 'unknown'",
    )
    .fetch_one(&mut tx)
    .await?;
    let (leased, backing_off): (i64, i64) =
        sqlx::query_as("select leased, backing_off from ledger.reconcile_backlog")
            .fetch_one(&mut tx)
            .await?;
    tx.commit().await?;
    Ok(LedgerFigures {
        effects_by_state,
        escalations_by_state,
        oldest_unknown_seconds,
        leased,
        backing_off,
    })
}
