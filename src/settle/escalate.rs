//! Escalate: a review item (the decision, the key, the ledger entry, the
//! evidence — built by `ledger.op_escalate`), delivered to a sink once per
//! escalation key, retried with backoff in the background; acknowledge and
//! resolve close the loop.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use super::{Request, Running, SettleError, Settled, Settler, Tally, require_reason};
use crate::adapters::RetryConfig;
use crate::adapters::sink::Closing;
use crate::crash_point::crash_point;
use crate::ledger::escalations::{self, Claimed};
use crate::text::sanitize_line;

/// How many escalations one delivery pass takes on.
const PASS_SIZE: i32 = 20;

/// What one delivery attempt did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeliveryOutcome {
    pub escalation_key: String,
    pub sink: String,
    pub attempt: i32,
    pub delivered: bool,
    pub error: Option<String>,
    /// The escalation's state once recorded (delivered, failed…).
    pub state: String,
    pub retry_in_ms: Option<u64>,
}

impl Settler {
    /// The sink asked for, else the only one configured.
    fn choose_sink(&self, asked: Option<&str>) -> Result<String, SettleError> {
        let name = match asked {
            Some(name) => name.to_string(),
            None => {
                let names: Vec<&String> = self.config.sinks.keys().collect();
                match names.as_slice() {
                    [only] => (*only).clone(),
                    [] => {
                        return Err(SettleError::Sink(
                            "no sink is configured: add [sinks.NAME] to the config file".into(),
                        ));
                    }
                    many => {
                        return Err(SettleError::Sink(format!(
                            "choose a sink with --to: {}",
                            many.iter()
                                .map(|n| sanitize_line(n))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )));
                    }
                }
            }
        };
        self.sink(&name).map_err(SettleError::Sink)?;
        Ok(name)
    }

    /// One pass of the background delivery loop: delivers every escalation
    /// that is due, and returns how many were delivered.
    pub async fn deliver_due_escalations(&self) -> Result<usize, SettleError> {
        if self.read_only {
            return Err(SettleError::ReadOnly("delivering escalations".into()));
        }
        let outcomes = self.deliver_pass(None).await?;
        Ok(outcomes.iter().filter(|o| o.delivered).count())
    }

    /// The worker name delivery claims are made under.
    fn worker(&self) -> String {
        format!("{}#{}", self.operator, std::process::id())
    }

    /// Long enough that a live worker always finishes before another may
    /// take the escalation over.
    fn lease(&self) -> Duration {
        let slowest = self
            .config
            .sinks
            .values()
            .map(|sink| sink.timeout())
            .max()
            .unwrap_or_default();
        slowest * 2 + Duration::from_secs(30)
    }

    async fn deliver_pass(
        &self,
        only_key: Option<&str>,
    ) -> Result<Vec<DeliveryOutcome>, SettleError> {
        let due = escalations::claim_due_escalations(
            &self.pool,
            &self.worker(),
            self.lease(),
            PASS_SIZE,
            only_key,
        )
        .await?;
        let mut tasks = tokio::task::JoinSet::new();
        for (index, claimed) in due.into_iter().enumerate() {
            let settler = self.clone();
            tasks.spawn(async move { (index, settler.deliver_claimed(claimed).await) });
        }
        let mut outcomes = Vec::new();
        let mut first_error = None;
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((index, Ok(outcome))) => outcomes.push((index, outcome)),
                Ok((_, Err(error))) => first_error = first_error.or(Some(error)),
                Err(error) => {
                    first_error = first_error.or_else(|| {
                        Some(SettleError::Invalid(format!(
                            "a delivery task failed: {error}"
                        )))
                    })
                }
            }
        }
        if outcomes.is_empty()
            && let Some(error) = first_error
        {
            return Err(error);
        }
        outcomes.sort_by_key(|(index, _)| *index);
        Ok(outcomes.into_iter().map(|(_, outcome)| outcome).collect())
    }

    async fn deliver_claimed(&self, claimed: Claimed) -> Result<DeliveryOutcome, SettleError> {
        crash_point("after_delivery_claim");
        let started = Instant::now();
        let (error, retry_after) = match self.sink(&claimed.sink) {
            Ok(sink) => match sink
                .deliver(&claimed.escalation_key, &claimed.payload)
                .await
            {
                Ok(()) => (None, Duration::ZERO),
                Err(error) => (Some(error.to_string()), sink.backoff(claimed.attempt)),
            },
            // Not configured (yet): keep it, retry later.
            Err(problem) => (
                Some(problem),
                RetryConfig::default().backoff(claimed.attempt),
            ),
        };
        crash_point("after_delivery_sent");
        let duration_ms = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
        // Stored with the delivery: never with a secret the sink echoed.
        let error = error.map(|e| sanitize_line(&self.config.secret_redactor().text(&e)));
        let recorded = escalations::record_delivery(
            &self.pool,
            &claimed.escalation_key,
            claimed.attempt,
            &self.worker(),
            error.is_none(),
            error.as_deref(),
            retry_after,
            duration_ms,
        )
        .await?;
        Ok(DeliveryOutcome {
            escalation_key: claimed.escalation_key,
            sink: claimed.sink,
            attempt: claimed.attempt,
            delivered: error.is_none(),
            retry_in_ms: error
                .as_ref()
                .map(|_| u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX)),
            error,
            state: recorded.state,
        })
    }
}

/// Hand an effect, or every item of a pane, to a person: the row of
/// [`super::verbs::ESCALATE`].
pub(super) fn run<'a>(settler: &'a Settler, request: &'a Request) -> Running<'a> {
    Box::pin(async move {
        let sink = request.answers.sink.as_deref();
        if let Some((op_key, seen)) = request.effect() {
            escalate_one(settler, op_key, seen, sink, request.reason()).await
        } else if let Some(targets) = request.pane() {
            escalate_each(settler, targets, sink, request.reason()).await
        } else {
            Err(request.unfit())
        }
    })
}

/// The row of [`super::verbs::ACKNOWLEDGE_ESCALATION`].
pub(super) fn acknowledge<'a>(settler: &'a Settler, request: &'a Request) -> Running<'a> {
    close(settler, request, false)
}

/// The row of [`super::verbs::RESOLVE_ESCALATION`].
pub(super) fn resolve<'a>(settler: &'a Settler, request: &'a Request) -> Running<'a> {
    close(settler, request, true)
}

fn close<'a>(settler: &'a Settler, request: &'a Request, resolve: bool) -> Running<'a> {
    Box::pin(async move {
        if let Some(escalation_key) = request.escalation() {
            close_one(settler, escalation_key, request.reason(), resolve).await
        } else if let Some(escalation_keys) = request.escalations() {
            close_each(settler, escalation_keys, request.reason(), resolve).await
        } else {
            Err(request.unfit())
        }
    })
}

async fn escalate_one(
    settler: &Settler,
    op_key: &str,
    seen: Option<i64>,
    sink: Option<&str>,
    reason: &str,
) -> Result<Settled, SettleError> {
    require_reason(reason, "escalate")?;
    let sink = settler.choose_sink(sink)?;
    let (_, seen) = settler.look(op_key, seen).await?;
    let started = escalations::escalate(
        &settler.pool,
        op_key,
        seen,
        &settler.operator,
        reason,
        &sink,
    )
    .await?;
    crash_point("after_escalation_recorded");
    // A first attempt right away; failures are retried by the background loop.
    let delivery = if matches!(started.state.as_str(), "open" | "failed") {
        settler
            .deliver_pass(Some(&started.escalation_key))
            .await?
            .into_iter()
            .next()
    } else {
        None
    };
    let delivered = match &delivery {
        Some(outcome) if outcome.delivered => format!("delivered to {}", outcome.sink),
        Some(outcome) => format!(
            "delivery to {} failed ({}), retried in the background",
            outcome.sink,
            outcome.error.as_deref().unwrap_or("?")
        ),
        None => format!("{} at {}", started.state, started.sink_name),
    };
    let opening = if started.status == "existing" {
        "already escalated"
    } else {
        "escalated"
    };
    Ok(Settled::new(
        format!(
            "{opening} {op_key} as {} ({}): {delivered}",
            started.escalation_key, started.decision
        ),
        json!({ "action": "escalate", "op_key": op_key, "status": started.status,
                "escalation_key": started.escalation_key, "sink": started.sink_name,
                "decision": started.decision, "decision_needed": started.decision_needed,
                "audit_seq": started.audit_seq, "delivery": delivery }),
    ))
}

/// Escalates every `(op_key, version seen)`, each in its own
/// transaction with its audit entry, then delivers what was opened in
/// passes; what a pass cannot deliver the background loop retries.
async fn escalate_each(
    settler: &Settler,
    targets: &[(String, i64)],
    sink: Option<&str>,
    reason: &str,
) -> Result<Settled, SettleError> {
    require_reason(reason, "escalate")?;
    let sink = settler.choose_sink(sink)?;
    let (mut tally, mut already) = (Tally::default(), 0usize);
    let mut opened = Vec::new();
    for (op_key, seen) in targets {
        let started = escalations::escalate(
            &settler.pool,
            op_key,
            *seen,
            &settler.operator,
            reason,
            &sink,
        )
        .await;
        match tally.counted(op_key, started) {
            Some(started) if started.status == "existing" => already += 1,
            Some(started) => {
                tally.done += 1;
                opened.push(started.escalation_key);
            }
            None => {}
        }
    }
    let mut delivered = 0usize;
    for escalation_key in &opened {
        let outcome = settler.deliver_pass(Some(escalation_key)).await?;
        delivered += outcome.iter().filter(|o| o.delivered).count();
    }
    let Tally {
        done,
        skipped,
        failed,
        ..
    } = tally;
    Ok(Settled::new(
        format!(
            "escalate to {}: {done} of {} escalated ({delivered} delivered, the rest retried in \
             the background), {already} already escalated, {skipped} skipped (changed since or \
             no longer applicable), {failed} failed{}",
            sanitize_line(&sink),
            targets.len(),
            tally.first_failure()
        ),
        json!({
            "action": "escalate", "sink": sink, "done": done, "delivered": delivered,
            "already": already, "skipped": skipped, "failed": failed,
        }),
    ))
}

/// Acknowledges (`resolve = false`) or resolves every escalation
/// named, one after the other, each in its own transaction with its
/// audit entry and its sink told: a failure stops nothing else. One
/// already in the state asked for, resolved since or gone is skipped.
async fn close_each(
    settler: &Settler,
    escalation_keys: &[String],
    reason: &str,
    resolve: bool,
) -> Result<Settled, SettleError> {
    let verb = if resolve { "resolve" } else { "acknowledge" };
    require_reason(reason, verb)?;
    let mut tally = Tally::default();
    // Each one acted on and the state it is in now, for a console to
    // show before its next read.
    let mut states = Vec::new();
    for escalation_key in escalation_keys {
        let closed = match close_one(settler, escalation_key, reason, resolve).await {
            Ok(settled) => Ok(settled),
            Err(SettleError::Ledger(error)) => Err(error),
            Err(other) => Err(crate::ledger::LedgerError::Database(other.to_string())),
        };
        let Some(settled) = tally.counted(escalation_key, closed) else {
            continue;
        };
        let state = settled.detail["state"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if settled.detail["status"] == "changed" {
            tally.done += 1;
        } else {
            tally.skipped += 1;
        }
        states.push(json!([escalation_key, state]));
    }
    let Tally {
        done,
        skipped,
        failed,
        ..
    } = tally;
    let already = if resolve {
        "resolved"
    } else {
        "acknowledged or resolved"
    };
    Ok(Settled::new(
        format!(
            "{verb}: {done} of {} escalations done, {skipped} skipped (already {already}, or \
             gone), {failed} failed{}",
            escalation_keys.len(),
            tally.first_failure()
        ),
        json!({ "action": verb, "done": done, "skipped": skipped, "failed": failed,
                "states": states }),
    ))
}

async fn close_one(
    settler: &Settler,
    escalation_key: &str,
    reason: &str,
    resolve: bool,
) -> Result<Settled, SettleError> {
    let (verb, done) = if resolve {
        ("resolve", "resolved")
    } else {
        ("acknowledge", "acknowledged")
    };
    require_reason(reason, verb)?;
    let closed = escalations::close_escalation(
        &settler.pool,
        escalation_key,
        &settler.operator,
        reason,
        resolve,
    )
    .await?;
    // Committed; telling the sink is best effort and reported, not fatal.
    let sink_told = if closed.status == "changed" {
        match settler.sink(&closed.sink) {
            Ok(sink) => {
                let closing = if resolve {
                    Closing::Resolved
                } else {
                    Closing::Acknowledged
                };
                match sink.close(escalation_key, closing, &settler.operator).await {
                    Ok(told) => json!(told),
                    Err(error) => json!({ "error": error.to_string() }),
                }
            }
            Err(problem) => json!({ "error": problem }),
        }
    } else {
        json!(false)
    };
    let summary = if closed.status == "changed" {
        format!("{done} escalation {escalation_key} of {}", closed.op_key)
    } else {
        format!("escalation {escalation_key} is already {}", closed.state)
    };
    Ok(Settled::new(
        summary,
        json!({ "action": verb, "escalation_key": escalation_key, "op_key": closed.op_key,
                "status": closed.status, "state": closed.state, "sink": closed.sink,
                "sink_told": sink_told, "audit_seq": closed.audit_seq }),
    ))
}
