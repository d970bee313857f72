//! Approvals that bind and expire (`sql/migrations/0016_approvals.sql`): what an
//! approving system authorises (one action on one target, an amount ceiling,
//! the params if they matter, an expiry), granted and revoked through audited
//! functions; `begin_effect` and `mark_dispatched` check them.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgExecutor;

use super::LedgerError;

/// What an approval authorises.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub approval_ref: String,
    pub version: i32,
    pub action: String,
    pub target: String,
    pub expires_at: DateTime<Utc>,
    /// With its currency: at most this amount, in minor units.
    pub amount_ceiling: Option<(i64, String)>,
    /// Exactly these params, if they matter.
    pub params: Option<Value>,
}

/// One approval as `effectwatch approval list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Approval {
    pub approval_ref: String,
    pub version: i32,
    pub action: String,
    pub target: String,
    pub amount_ceiling_minor: Option<i64>,
    pub currency: Option<String>,
    pub expires_at: DateTime<Utc>,
    pub granted_by: String,
    pub revoked_at: Option<DateTime<Utc>>,
    /// The key of the effect it authorised, once one began under it.
    pub consumed_by: Option<String>,
}

pub async fn grant<'c>(
    executor: impl PgExecutor<'c>,
    grant: &Grant,
    granted_by: &str,
    reason: &str,
) -> Result<(Value, i64), LedgerError> {
    Ok(sqlx::query_as(
        "select approval, audit_seq from ledger.grant_approval(
            approval_ref => $1, version => $2, action => $3, target => $4, expires_at => $5,
            granted_by => $6, reason => $7, amount_ceiling_minor => $8, currency => $9, params => $10)",
    )
    .bind(&grant.approval_ref)
    .bind(grant.version)
    .bind(&grant.action)
    .bind(&grant.target)
    .bind(grant.expires_at)
    .bind(granted_by)
    .bind(reason)
    .bind(grant.amount_ceiling.as_ref().map(|(amount, _)| *amount))
    .bind(grant.amount_ceiling.as_ref().map(|(_, currency)| currency.as_str()))
    .bind(&grant.params)
    .fetch_one(executor)
    .await?)
}

/// Revokes one version; revoking it again changes nothing (no audit entry).
pub async fn revoke<'c>(
    executor: impl PgExecutor<'c>,
    approval_ref: &str,
    version: Option<i32>,
    revoked_by: &str,
    reason: &str,
) -> Result<(Value, Option<i64>), LedgerError> {
    Ok(
        sqlx::query_as("select approval, audit_seq from ledger.revoke_approval($1, $2, $3, $4)")
            .bind(approval_ref)
            .bind(version)
            .bind(revoked_by)
            .bind(reason)
            .fetch_one(executor)
            .await?,
    )
}

/// The newest approvals first, up to `limit`.
pub async fn list<'c>(
    executor: impl PgExecutor<'c>,
    limit: i64,
) -> Result<Vec<Approval>, LedgerError> {
    // Through the function: an approver login may not read the effects.
    Ok(sqlx::query_as(
        "select approval_ref, version, action, target, amount_ceiling_minor, currency,
                expires_at, granted_by, revoked_at, consumed_by
           from ledger.approval_list($1)",
    )
    .bind(limit)
    .fetch_all(executor)
    .await?)
}
