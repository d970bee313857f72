//! Everything the ledger knows about one effect, for `show` and the detail view.

use super::{LedgerPool, LedgerTransaction};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::LedgerError;
use super::model::{
    Attempt, AuditEntry, Effect, EffectEvent, Escalation, Reconciliation, name_and_login,
};

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
    /// Its action's policy: what may happen to it next.
    pub policy: Option<super::policies::Policy>,
    /// What an operator may do with it now.
    pub applicability: super::actions::Applicability,
    /// The effects it is tied to: the one it compensates, its compensations,
    /// its holder and the effects it holds; each one can be opened in turn.
    pub links: Vec<Link>,
    /// Requests to compensate it: who asked, within or above which limit,
    /// who decided, and the compensation made.
    pub compensation_requests: Vec<CompensationRequest>,
    /// Each try to deliver its escalations to their sinks.
    pub escalation_deliveries: Vec<EscalationDelivery>,
    /// The steps its settling owed (`ledger.next_steps`): open ones first.
    pub next_steps: Vec<OwedStep>,
}

/// A step of a settling flow recorded as owed on the effect, and what
/// became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct OwedStep {
    pub step: String,
    pub why: String,
    pub recorded_by: String,
    pub recorded_at: DateTime<Utc>,
    pub tries: i32,
    pub last_error: Option<String>,
    pub done_at: Option<DateTime<Utc>>,
    pub done_by: Option<String>,
    pub outcome: Option<String>,
}

impl OwedStep {
    /// One line: what is owed and why, or what became of it.
    pub fn describe(&self) -> String {
        let step = self.step.replace('_', " ");
        match (&self.done_at, &self.done_by) {
            (Some(_), by) => format!(
                "{step}: {} (by {})",
                self.outcome.as_deref().unwrap_or("done"),
                by.as_deref().unwrap_or("?")
            ),
            (None, _) => {
                let tried = match (&self.last_error, self.tries) {
                    (Some(error), tries) if tries > 0 => {
                        format!("; tried {tries}×, last: {error}")
                    }
                    _ => String::new(),
                };
                format!(
                    "{step}, owed since {} — {}; any reconciler takes it up{tried}",
                    self.recorded_by, self.why
                )
            }
        }
    }
}

/// Another effect this one is tied to, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Link {
    /// `compensates`, `compensated by`, `held by` or `holds`.
    pub relation: String,
    pub op_key: String,
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct CompensationRequest {
    pub id: i64,
    /// awaiting_approval, created or rejected.
    pub state: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    /// The limit in force when asked; None: no approval was needed.
    pub approval_limit_minor: Option<i64>,
    pub requested_by: String,
    pub reason: String,
    pub decided_by: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decision_reason: Option<String>,
    pub compensation_key: Option<String>,
    /// The provider record reversed, when the request reverses a duplicate
    /// of the effect rather than the effect itself.
    pub duplicate_ref: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl CompensationRequest {
    /// `asked by alice (150.00 EUR, above the limit of 100.00 EUR): approved by bob`;
    /// a duplicate's reversal begins `reverse the duplicate fx_2, `.
    pub fn describe(&self) -> String {
        let money = |minor| crate::format::optional_money(minor, self.currency.as_deref());
        let decided = match &self.decided_by {
            Some(by) => format!("{} by {by}", self.state),
            None => self.state.replace('_', " "),
        };
        let limit = match self.approval_limit_minor {
            Some(limit) => format!(", above the limit of {}", money(Some(limit))),
            None => String::new(),
        };
        let what = match &self.duplicate_ref {
            Some(duplicate_ref) => format!("reverse the duplicate {duplicate_ref}, "),
            None => String::new(),
        };
        format!(
            "{what}asked by {} ({}{limit}): {decided}",
            self.requested_by,
            money(self.amount_minor)
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct EscalationDelivery {
    pub escalation_key: String,
    pub attempt: i32,
    pub worker: String,
    pub ok: bool,
    pub error: Option<String>,
    pub duration_ms: Option<i32>,
    pub at: DateTime<Utc>,
}

pub async fn find_effect(pool: &LedgerPool, op_key: &str) -> Result<Option<Effect>, LedgerError> {
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
pub async fn load(pool: &LedgerPool, op_key: &str) -> Result<EffectHistory, LedgerError> {
    let mut tx = super::snapshot::begin(pool).await?;
    let effect = effect_in(&mut tx, op_key).await?;
    let records = records_of(&mut tx, &effect).await?;
    let related = related_to(&mut tx, &effect).await?;
    let policy = Some(super::policies::for_action(&mut tx, &effect.action).await?);
    let links = links_of(&mut tx, &effect).await?;
    let settling = settling_of(&mut tx, &effect).await?;
    let applicability =
        super::actions::applicability(&mut tx, std::slice::from_ref(&effect.op_key))
            .await?
            .remove(&effect.op_key)
            .unwrap_or_default();
    tx.commit().await?;
    Ok(EffectHistory {
        effect,
        attempts: records.attempts,
        events: records.events,
        reconciliations: records.reconciliations,
        escalations: records.escalations,
        audit: records.audit,
        related,
        policy,
        applicability,
        links,
        compensation_requests: settling.compensation_requests,
        escalation_deliveries: settling.escalation_deliveries,
        next_steps: settling.next_steps,
    })
}

async fn effect_in(tx: &mut LedgerTransaction<'_>, op_key: &str) -> Result<Effect, LedgerError> {
    let sql = format!(
        "select {} from ledger.effects e where e.op_key = $1",
        Effect::COLUMNS
    );
    sqlx::query_as::<_, Effect>(sqlx::AssertSqlSafe(sql))
        .bind(op_key)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| LedgerError::NotFound(op_key.to_string()))
}

/// What was recorded of the effect itself, each in the order it happened.
struct Records {
    attempts: Vec<Attempt>,
    events: Vec<EffectEvent>,
    reconciliations: Vec<Reconciliation>,
    escalations: Vec<Escalation>,
    audit: Vec<AuditEntry>,
}

async fn records_of(
    tx: &mut LedgerTransaction<'_>,
    effect: &Effect,
) -> Result<Records, LedgerError> {
    let attempts = sqlx::query_as::<_, Attempt>(
        "select id, kind, requested_by, db_role, request_id, params_hash, params, detail, flagged, at
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
    Ok(Records {
        attempts,
        events,
        reconciliations,
        escalations,
        audit,
    })
}

/// Other effects on the same target, newest first.
async fn related_to(
    tx: &mut LedgerTransaction<'_>,
    effect: &Effect,
) -> Result<Vec<Effect>, LedgerError> {
    let related_sql = format!(
        "select {} from ledger.effects e where e.target = $1 and e.id <> $2
          order by e.created_at desc limit 50",
        Effect::COLUMNS
    );
    Ok(
        sqlx::query_as::<_, Effect>(sqlx::AssertSqlSafe(related_sql))
            .bind(&effect.target)
            .bind(effect.id)
            .fetch_all(&mut *tx)
            .await?,
    )
}

async fn links_of(
    tx: &mut LedgerTransaction<'_>,
    effect: &Effect,
) -> Result<Vec<Link>, LedgerError> {
    Ok(sqlx::query_as::<_, Link>(
        "select l.relation, x.op_key, x.state::text as state
           from (select 1 as ord, 'compensates'::text as relation, $2::bigint as id
                 union all
                 select 2, 'compensated by', c.id from ledger.effects c where c.compensates = $1
                 union all
                 select 3, 'held by', $3::bigint
                 union all
                 select 4, 'holds', h.id from ledger.effects h
                  where h.target = $4 and h.state = 'held' and h.held_by = $1) l
           join ledger.effects x on x.id = l.id
          order by l.ord, x.created_at, x.id
          limit 100",
    )
    .bind(effect.id)
    .bind(effect.compensates)
    .bind(effect.held_by)
    .bind(&effect.target)
    .fetch_all(&mut *tx)
    .await?)
}

/// What settling the effect has asked for and owed: compensation
/// requests, escalation deliveries and next steps.
struct Settling {
    compensation_requests: Vec<CompensationRequest>,
    escalation_deliveries: Vec<EscalationDelivery>,
    next_steps: Vec<OwedStep>,
}

async fn settling_of(
    tx: &mut LedgerTransaction<'_>,
    effect: &Effect,
) -> Result<Settling, LedgerError> {
    let compensation_requests = sqlx::query_as::<_, CompensationRequest>(
        "select id, state, amount_minor, currency, approval_limit_minor, requested_by, reason,
                decided_by, decided_at, decision_reason, compensation_key, duplicate_ref, created_at
           from ledger.compensation_requests where effect_id = $1 order by created_at, id",
    )
    .bind(effect.id)
    .fetch_all(&mut *tx)
    .await?;
    let escalation_deliveries = sqlx::query_as::<_, EscalationDelivery>(
        "select s.escalation_key, d.attempt, d.worker, d.ok, d.error, d.duration_ms, d.at
           from ledger.escalation_deliveries d
           join ledger.escalations s on s.id = d.escalation_id
          where s.effect_id = $1
          order by d.at, d.id",
    )
    .bind(effect.id)
    .fetch_all(&mut *tx)
    .await?;
    let next_steps = sqlx::query_as::<_, OwedStep>(
        "select step, why, recorded_by, recorded_at, tries, last_error, done_at, done_by, outcome
           from ledger.next_steps where effect_id = $1
          order by done_at is not null, recorded_at, id",
    )
    .bind(effect.id)
    .fetch_all(&mut *tx)
    .await?;
    Ok(Settling {
        compensation_requests,
        escalation_deliveries,
        next_steps,
    })
}

/// One line of the merged timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineEntry {
    pub at: DateTime<Utc>,
    pub kind: &'static str,
    pub text: String,
}

/// Attempts, state changes, reconciliations, escalations and audit entries
/// in one time order: what an incident responder reads first.
pub fn timeline(history: &EffectHistory) -> Vec<TimelineEntry> {
    let mut entries = Vec::new();
    for attempt in &history.attempts {
        entries.push(attempt_line(&history.effect, attempt));
    }
    entries.extend(history.events.iter().map(state_line));
    entries.extend(history.reconciliations.iter().map(reconcile_line));
    entries.extend(history.escalations.iter().map(escalate_line));
    entries.extend(history.audit.iter().map(audit_line));
    entries.extend(history.escalation_deliveries.iter().map(deliver_line));
    for owed in &history.next_steps {
        entries.push(owed_line(owed));
        if let Some(done_at) = owed.done_at {
            entries.push(TimelineEntry {
                at: done_at,
                kind: "step",
                text: owed.describe(),
            });
        }
    }
    entries.sort_by_key(|entry| entry.at);
    entries
}

/// An attempt, with what refused it, or how a mismatch's params differed
/// from the effect's.
fn attempt_line(effect: &Effect, attempt: &Attempt) -> TimelineEntry {
    let who = name_and_login(
        attempt.requested_by.as_deref().unwrap_or("?"),
        &attempt.db_role,
    );
    let flag = if attempt.flagged { " ⚑" } else { "" };
    let mut text = format!("{}{flag} by {who}", attempt.kind);
    if let Some(refusal) = attempt
        .detail
        .as_ref()
        .and_then(|detail| detail.get("refused"))
        .and_then(Value::as_str)
    {
        text.push_str(&format!(": {refusal}"));
    }
    if let Some(offered) = attempt
        .params
        .as_ref()
        .filter(|_| attempt.kind == "mismatch")
    {
        let diff = params_diff(&effect.params, offered);
        text.push_str(&format!(": params differ {}", diff.join("; ")));
    }
    TimelineEntry {
        at: attempt.at,
        kind: "attempt",
        text,
    }
}

fn state_line(event: &EffectEvent) -> TimelineEntry {
    let from = event.from_state.as_deref().unwrap_or("∅");
    let reason = event
        .reason
        .as_deref()
        .map(|r| format!(" — {r}"))
        .unwrap_or_default();
    TimelineEntry {
        at: event.at,
        kind: "state",
        text: format!(
            "{from} → {} by {}{reason}",
            event.to_state,
            name_and_login(&event.actor, &event.db_role)
        ),
    }
}

fn reconcile_line(recon: &Reconciliation) -> TimelineEntry {
    TimelineEntry {
        at: recon.at,
        kind: "reconcile",
        text: format!(
            "{} at {} ({} ms) refs [{}]: {} → {} by {}",
            recon.finding,
            recon.provider.as_deref().unwrap_or("?"),
            recon.duration_ms.unwrap_or(0),
            recon.external_refs.join(", "),
            recon.state_before,
            recon.state_after,
            recon.requested_by
        ),
    }
}

fn escalate_line(escalation: &Escalation) -> TimelineEntry {
    TimelineEntry {
        at: escalation.created_at,
        kind: "escalate",
        text: format!(
            "to {} ({}): {} by {}",
            escalation.sink, escalation.state, escalation.decision_needed, escalation.created_by
        ),
    }
}

fn audit_line(entry: &AuditEntry) -> TimelineEntry {
    let reason = entry.reason.as_deref().unwrap_or("");
    TimelineEntry {
        at: entry.at,
        kind: "audit",
        text: format!(
            "#{} {} by {}: {reason}",
            entry.seq,
            entry.action,
            name_and_login(&entry.operator, &entry.db_role)
        ),
    }
}

fn deliver_line(delivery: &EscalationDelivery) -> TimelineEntry {
    let outcome = match (&delivery.ok, &delivery.error) {
        (true, _) => "delivered".to_string(),
        (false, Some(error)) => format!("failed: {error}"),
        (false, None) => "failed".to_string(),
    };
    TimelineEntry {
        at: delivery.at,
        kind: "deliver",
        text: format!(
            "{} try {} by {}: {outcome}",
            delivery.escalation_key, delivery.attempt, delivery.worker
        ),
    }
}

fn owed_line(owed: &OwedStep) -> TimelineEntry {
    TimelineEntry {
        at: owed.recorded_at,
        kind: "owed",
        text: format!(
            "{} (by {}): {}",
            owed.step.replace('_', " "),
            owed.recorded_by,
            owed.why
        ),
    }
}

/// Field-level differences between two params objects, as JSON pointers:
/// `/amount_minor: 1500 → 1600`. What a finance reviewer needs to see of a
/// key reused with other parameters.
pub fn params_diff(original: &Value, offered: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_into(&mut out, String::new(), original, offered);
    out
}

fn diff_into(out: &mut Vec<String>, path: String, original: &Value, offered: &Value) {
    match (original, offered) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let child = format!("{path}/{}", key.replace('~', "~0").replace('/', "~1"));
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff_into(out, child, x, y),
                    (Some(x), None) => out.push(format!("{child}: {x} → (absent)")),
                    (None, Some(y)) => out.push(format!("{child}: (absent) → {y}")),
                    (None, None) => {}
                }
            }
        }
        (a, b) if a != b => {
            let path = if path.is_empty() {
                "/".to_string()
            } else {
                path
            };
            out.push(format!("{path}: {a} → {b}"));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_names_each_changed_field() {
        let diff = params_diff(
            &json!({"amount_minor": 1500, "currency": "EUR", "meta": {"reason": "dup"}}),
            &json!({"amount_minor": 1600, "currency": "EUR", "meta": {"reason": "late"}, "note": 1}),
        );
        assert_eq!(
            diff,
            vec![
                "/amount_minor: 1500 → 1600".to_string(),
                "/meta/reason: \"dup\" → \"late\"".to_string(),
                "/note: (absent) → 1".to_string(),
            ]
        );
        assert!(params_diff(&json!({"a": 1}), &json!({"a": 1})).is_empty());
    }
}
