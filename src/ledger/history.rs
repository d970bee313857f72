//! Everything the ledger knows about one effect, for `show` and the detail view.

use serde::Serialize;
use sqlx::PgPool;

use super::LedgerError;
use super::model::{Attempt, AuditEntry, Effect, EffectEvent, Escalation, Reconciliation};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EffectHistory {
    pub effect: Effect,
    pub attempts: Vec<Attempt>,
    pub events: Vec<EffectEvent>,
    pub reconciliations: Vec<Reconciliation>,
    pub escalations: Vec<Escalation>,
    pub audit: Vec<AuditEntry>,
    /// Other effects on the same target, newest first.
    pub related: Vec<Effect>,
}

pub async fn find_effect(pool: &PgPool, op_key: &str) -> Result<Option<Effect>, LedgerError> {
    let sql = format!(
        "select {} from ledger.effects e where e.op_key = $1",
        Effect::COLUMNS
    );
    Ok(sqlx::query_as::<_, Effect>(sqlx::AssertSqlSafe(sql))
        .bind(op_key)
        .fetch_optional(pool)
        .await?)
}

/// Reads the effect and its records in one repeatable-read snapshot, so the
/// parts agree with each other even while workers write.
pub async fn load(pool: &PgPool, op_key: &str) -> Result<EffectHistory, LedgerError> {
    let mut tx = pool.begin().await?;
    sqlx::query("set transaction isolation level repeatable read read only")
        .execute(&mut *tx)
        .await?;
    let sql = format!(
        "select {} from ledger.effects e where e.op_key = $1",
        Effect::COLUMNS
    );
    let effect = sqlx::query_as::<_, Effect>(sqlx::AssertSqlSafe(sql))
        .bind(op_key)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| LedgerError::NotFound(op_key.to_string()))?;
    let attempts = sqlx::query_as::<_, Attempt>(
        "select id, kind, requested_by, request_id, params_hash, params, detail, flagged, at
           from ledger.attempts where effect_id = $1 order by at, id",
    )
    .bind(effect.id)
    .fetch_all(&mut *tx)
    .await?;
    let events = sqlx::query_as::<_, EffectEvent>(
        "select id, from_state, to_state, actor, db_role, reason, at
           from ledger.effect_events where effect_id = $1 order by at, id",
    )
    .bind(effect.id)
    .fetch_all(&mut *tx)
    .await?;
    let reconciliations = sqlx::query_as::<_, Reconciliation>(
        "select id, provider, finding, external_refs, evidence, duration_ms, state_before,
                state_after, requested_by, at
           from ledger.reconciliations where effect_id = $1 order by at, id",
    )
    .bind(effect.id)
    .fetch_all(&mut *tx)
    .await?;
    let escalations = sqlx::query_as::<_, Escalation>(
        "select id, escalation_key, op_key, sink, decision_needed, payload, state, delivery_attempts,
                last_error, created_by, created_at, delivered_at, acknowledged_by, resolved_by
           from ledger.escalations where effect_id = $1 order by created_at, id",
    )
    .bind(effect.id)
    .fetch_all(&mut *tx)
    .await?;
    let audit = sqlx::query_as::<_, AuditEntry>(
        "select seq, at, operator, db_role, action, effect_id, op_key, reason, before, after, hash
           from ledger.audit_log where effect_id = $1 order by seq",
    )
    .bind(effect.id)
    .fetch_all(&mut *tx)
    .await?;
    let related_sql = format!(
        "select {} from ledger.effects e where e.target = $1 and e.id <> $2
          order by e.created_at desc limit 50",
        Effect::COLUMNS
    );
    let related = sqlx::query_as::<_, Effect>(sqlx::AssertSqlSafe(related_sql))
        .bind(&effect.target)
        .bind(effect.id)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(EffectHistory {
        effect,
        attempts,
        events,
        reconciliations,
        escalations,
        audit,
        related,
    })
}
