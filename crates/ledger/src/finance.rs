//! What finance reviews: suspected double effects and the money at risk per
//! currency, read from `ledger.suspected_double_effects_since` and
//! `ledger.exposure_since` (sql/migrations/0011_finance.sql). Amounts stay integer
//! minor units with their currency; nothing is summed across currencies.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

use super::LedgerPool;

use super::LedgerError;

/// One succeeded effect of a suspected double, with its group's figures in
/// its currency (the same on every row of the group and currency).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct SuspectedEffect {
    pub target: String,
    pub action: String,
    pub op_key: String,
    pub effect_id: i64,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub provider: Option<String>,
    pub external_ref: Option<String>,
    pub approval_ref: Option<String>,
    pub approval_version: Option<i32>,
    pub requested_by: String,
    pub succeeded_at: Option<DateTime<Utc>>,
    /// `repeated`, `over_approved`, `provider_duplicate`.
    pub reasons: Vec<String>,
    /// Succeeded effects of this action on the target, all currencies.
    pub succeeded_effects: i64,
    /// The group's succeeded total in this currency.
    pub total_minor: Option<i64>,
    /// What the approvals on record allow in this currency, if any says.
    pub approved_minor: Option<i64>,
    /// Money moved beyond what one effect or the approvals explain.
    pub excess_minor: Option<i64>,
    /// `none`, `awaiting_approval`, `rejected`, or the state of the latest
    /// compensation effect (`pending`, `dispatched`, `unknown`, `failed`…).
    pub compensation: String,
    pub compensation_key: Option<String>,
    pub compensation_under_way: bool,
    pub version: i64,
}

/// The money at risk in one currency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Exposure {
    pub currency: String,
    pub unknown_effects: i64,
    pub unknown_minor: i64,
    pub suspected_effects: i64,
    pub suspected_excess_minor: i64,
    pub compensated_effects: i64,
    pub compensated_minor: i64,
    pub awaiting_approval: i64,
    pub awaiting_approval_minor: i64,
}

/// Both parts, read from one snapshot so they agree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinanceReview {
    /// The instant it is as of; None: now.
    pub at: Option<DateTime<Utc>>,
    /// When it was read: a live console reads it less often than the panes.
    pub read_at: DateTime<Utc>,
    pub since: Option<DateTime<Utc>>,
    pub suspected: Vec<SuspectedEffect>,
    pub exposure: Vec<Exposure>,
}

/// Suspected double effects as they stood at `at` (None: now) on targets with a
/// success since `since` (all when None), grouped by target, action and currency.
pub async fn suspected<'c>(
    executor: impl PgExecutor<'c>,
    at: Option<DateTime<Utc>>,
    since: Option<DateTime<Utc>>,
) -> Result<Vec<SuspectedEffect>, LedgerError> {
    Ok(sqlx::query_as::<_, SuspectedEffect>(
        "select target, action, op_key, effect_id, amount_minor, currency, provider, external_ref,
                approval_ref, approval_version, requested_by, succeeded_at, reasons, succeeded_effects,
                total_minor, approved_minor, excess_minor, compensation, compensation_key,
                compensation_under_way, version
           from ledger.suspected_double_effects_at($1, $2)",
    )
    .bind(at)
    .bind(since)
    .fetch_all(executor)
    .await?)
}

/// Exposure per currency at `at` (None: now), in currency order.
pub async fn exposure<'c>(
    executor: impl PgExecutor<'c>,
    at: Option<DateTime<Utc>>,
    since: Option<DateTime<Utc>>,
) -> Result<Vec<Exposure>, LedgerError> {
    Ok(sqlx::query_as::<_, Exposure>(
        "select currency, unknown_effects, unknown_minor, suspected_effects, suspected_excess_minor,
                compensated_effects, compensated_minor, awaiting_approval, awaiting_approval_minor
           from ledger.exposure_at($1, $2)",
    )
    .bind(at)
    .bind(since)
    .fetch_all(executor)
    .await?)
}

pub async fn review(
    pool: &LedgerPool,
    at: Option<DateTime<Utc>>,
    since: Option<DateTime<Utc>>,
) -> Result<FinanceReview, LedgerError> {
    let mut tx = super::snapshot::begin(pool).await?;
    // Reads every succeeded effect of the touched targets: a review, not a poll.
    sqlx::query("set local statement_timeout = '5min'")
        .execute(&mut tx)
        .await?;
    let suspected = suspected(&mut tx, at, since).await?;
    let exposure = exposure(&mut tx, at, since).await?;
    tx.commit().await?;
    Ok(FinanceReview {
        at,
        read_at: Utc::now(),
        since,
        suspected,
        exposure,
    })
}

/// The rows of one suspected double: same target and action.
pub fn groups(rows: &[SuspectedEffect]) -> Vec<&[SuspectedEffect]> {
    rows.chunk_by(|a, b| a.target == b.target && a.action == b.action)
        .collect()
}
